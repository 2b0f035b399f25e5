"""Golden state of each run shape, compared inline, and the invariants that :func:`tests.golden.check_invariants`
holds every end-to-end test to (shown here to catch what they say they catch).

Each golden test runs one shape to its end -- the demo, a task repaired after verification refused it, a policy
transition, a publish to a bare remote -- and compares :func:`tests.golden.render_run` of the repository with the
text written below it: refs, state tree, policy journals, notes and events, normalised. A change of what a run
stores shows here as a diff of that text; ``AGENTOPS_ACCEPT_GOLDEN=1`` rewrites the expectations (read the diff,
then commit it).
"""

# ruff: noqa: E501 -- a golden text is what was rendered: a long JSON string stays on its line

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pygit2
import pytest

from git_agentops.canonical import canonical_bytes, sha256_hex
from git_agentops.gitstore.journal import Change, Event, Journal
from git_agentops.gitstore.repo import Store

from .conftest import git, make_repo
from .golden import InvariantError, check_invariants, expect, render_run
from .helpers import HANDOFF, child, commit_step, simple_child, toml, write_step
from .runkit import (
    CHECK_PY,
    POLICY,
    cli,
    project,
    recipe,
    start,
    task_by_title,
    wait_for,
    wait_supervisor_gone,
    worker_of,
)


def finished(repo: Path, run_id: str) -> dict[str, Any]:
    """The run's status once it is complete (or blocked) and its supervisor has exited: nothing moves after."""
    doc = wait_for(repo, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=240)
    wait_supervisor_gone(repo, run_id)
    return doc


# -- the run shapes ----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_golden_state_of_the_demo_run(tmp_path: Path) -> None:
    from git_agentops.demo.scenario import run_demo

    summary = run_demo(tmp_path, environ=os.environ, say=lambda _line: None)
    repo = Path(summary["repository"])
    assert summary["status"] == "complete", summary
    check_invariants(repo)
    expect(
        render_run(repo, summary["runId"]),
        r"""
refs:
  refs/agentops/runs/<run>/candidate <oid:1>
  refs/agentops/runs/<run>/deliveries/<task:2> <oid:2>
  refs/agentops/runs/<run>/deliveries/<task:3> <oid:3>
  refs/agentops/runs/<run>/deliveries/<task:4> <oid:4>
  refs/agentops/runs/<run>/policy <oid:5>
  refs/agentops/runs/<run>/state <oid:6>
  refs/heads/agentops/<run>/<worker:1> <oid:2>
  refs/heads/agentops/<run>/<worker:2> <oid:3>
  refs/heads/agentops/<run>/<worker:3> <oid:4>
  refs/heads/agentops/<run>/coordinator <oid:7>
  refs/heads/main <oid:1>
  refs/notes/agentops/deliveries <oid:8>
  refs/notes/agentops/evidence <oid:9>
  refs/notes/agentops/receipts <oid:10>
state:
  artifacts/<sha256:1> (3944 bytes)
  artifacts/<sha256:2> (779 bytes)
  artifacts/<sha256:3> (866 bytes)
  requests/<request:1>.json
    action: "plan"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:4>"
    requestId: "<request:1>"
    response:
      code: "RUN_PLAN_CREATED"
      data: {"contractHash":"<sha256:5>","taskId":"<task:1>"}
      message: "root task created"
      ok: true
      requestDigest: "<sha256:6>"
      requestId: "<request:1>"
    workerId: "coordinator"
  requests/<request:2>.json
    action: "worker"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:7>"
    requestId: "<request:2>"
    response:
      code: "RUN_WORKER_PLANNED"
      data: {"taskId":"<task:2>"}
      message: "child task planned"
      ok: true
      requestDigest: "<sha256:8>"
      requestId: "<request:2>"
    workerId: "coordinator"
  requests/<request:3>.json
    action: "worker"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:9>"
    requestId: "<request:3>"
    response:
      code: "RUN_WORKER_PLANNED"
      data: {"taskId":"<task:3>"}
      message: "child task planned"
      ok: true
      requestDigest: "<sha256:10>"
      requestId: "<request:3>"
    workerId: "coordinator"
  requests/<request:4>.json
    action: "worker"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:11>"
    requestId: "<request:4>"
    response:
      code: "RUN_WORKER_PLANNED"
      data: {"taskId":"<task:4>"}
      message: "child task planned"
      ok: true
      requestDigest: "<sha256:12>"
      requestId: "<request:4>"
    workerId: "coordinator"
  requests/<request:5>.json
    action: "finalize"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:13>"
    requestId: "<request:5>"
    response:
      code: "RUN_COMPLETE"
      data: {"commit":"<oid:1>","receiptDigest":"<sha256:14>"}
      message: "main is at <oid:1>, receipted"
      ok: true
      requestDigest: "<sha256:15>"
      requestId: "<request:5>"
    workerId: "coordinator"
  requests/<request:6>.json
    action: "handoff"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:16>"
    requestId: "<request:6>"
    response:
      code: "RUN_WORKER_DELIVERED"
      data: {"deliveryDigest":"<sha256:17>","sourceCommit":"<oid:2>","taskId":"<task:2>"}
      message: "<task:2> delivered as <oid:2>"
      ok: true
      requestDigest: "<sha256:18>"
      requestId: "<request:6>"
    workerId: "<worker:1>"
  requests/<request:7>.json
    action: "handoff"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:19>"
    requestId: "<request:7>"
    response:
      code: "RUN_VERIFICATION_FAILED"
      data: {}
      message: "verification failed on <oid:17>:\n- tests: exit 1, \n  last output:\n    1..3\n    not ok 1 - test_evaluator.EvaluateTest.test_precedence\n    # AssertionError: 10 != 7\n    ok 2 - test_package.PackageTest.test_imports\n    ok 3 - test_parser.TokenizeTest.test_numbers_and_operators"
      ok: false
      requestDigest: "<sha256:20>"
      requestId: "<request:7>"
    workerId: "<worker:2>"
  requests/<request:8>.json
    action: "handoff"
    at: "<time>"
    generation: 2
    requestDigest: "<sha256:21>"
    requestId: "<request:8>"
    response:
      code: "RUN_WORKER_DELIVERED"
      data: {"deliveryDigest":"<sha256:22>","sourceCommit":"<oid:3>","taskId":"<task:3>"}
      message: "<task:3> delivered as <oid:3>"
      ok: true
      requestDigest: "<sha256:23>"
      requestId: "<request:8>"
    workerId: "<worker:2>"
  requests/<request:9>.json
    action: "handoff"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:24>"
    requestId: "<request:9>"
    response:
      code: "RUN_WORKER_DELIVERED"
      data: {"deliveryDigest":"<sha256:25>","sourceCommit":"<oid:4>","taskId":"<task:4>"}
      message: "<task:4> delivered as <oid:4>"
      ok: true
      requestDigest: "<sha256:26>"
      requestId: "<request:9>"
    workerId: "<worker:3>"
  run.json
    baseCommit: "<oid:7>"
    budget:
      costLimitUsd: null
      intervals: [{"end":"<time>","start":"<time>"}]
      limitSeconds: 600
      reviewUsage: []
      tokenLimit: null
    contractHash: "<sha256:27>"
    contractRevision: 4
    coordinatorId: "coordinator"
    createdAt: "<time>"
    disableRestart: false
    goal: "A calculator that evaluates 1 + 2*3"
    goalHash: "<sha256:28>"
    host: "scripted"
    integration:
      attempts: 1
      base: "<oid:7>"
      candidate: "<oid:1>"
      order: ["<task:2>","<task:3>","<task:4>"]
      publishedAt: "<time>"
      receiptDigest: "<sha256:14>"
      request: {"generation":1,"rawDigest":"<sha256:15>","requestDigest":"<sha256:13>","requestId":"<request:5>"}
      reviews:
        - {"reportDigest":"<sha256:2>","reviewer":"reviewer-a","sandbox":"namespace","verdict":"approve"}
        - {"reportDigest":"<sha256:3>","reviewer":"reviewer-b","sandbox":"namespace","verdict":"approve"}
      status: "complete"
      steps:
        - {"commit":"<oid:11>","label":"<task:2>","parents":["<oid:7>","<oid:2>"],"tree":"<oid:12>"}
        - {"commit":"<oid:13>","label":"<task:3>","parents":["<oid:11>","<oid:3>"],"tree":"<oid:14>"}
        - {"commit":"<oid:1>","label":"<task:4>","parents":["<oid:13>","<oid:4>"],"tree":"<oid:15>"}
      verification:
        -
          argvDigest: "<sha256:29>"
          cached: false
          cachedFrom: null
          checkout: "clean"
          commandId: "tests"
          commit: "<oid:1>"
          exitCode: 0
          kind: "command"
          outputDigest: "<sha256:30>"
          passed: true
          policyConfigHash: "<sha256:31>"
          producer: "supervisor"
          required: true
          taskId: "<task:1>"
          tests: {"errors":0,"failed":0,"passed":3,"skipped":0,"total":3}
          tree: "<oid:15>"
    lastUserResume: null
    planOrder: ["<task:2>","<task:3>","<task:4>"]
    policyConfigHash: "<sha256:31>"
    recipeDigest: "<sha256:1>"
    repository: "<tmp>/calc"
    rootTaskId: "<task:1>"
    runId: "<run>"
    status: "complete"
    statusReason: null
    supervisorStarts: ["<time>"]
    target: "main"
  tasks/<task:1>/r0001.json
    blockedReason: null
    criteria: [{"description":"evaluate(\"1 + 2*3\") is 7","id":"c1"},{"description":"every test passes","id":"c2"}]
    dependencies: []
    extra: {"workerId":"coordinator"}
    goal: "A calculator that evaluates 1 + 2*3"
    id: "<task:1>"
    intent: "Tokenize and evaluate arithmetic, with docs"
    parent: null
    policyConfigHash: "<sha256:31>"
    revision: 1
    status: "delivered"
    supersededBy: null
    title: "A calculator"
  tasks/<task:2>/r0001.json
    blockedReason: null
    criteria: [{"description":"Tokenizer works","id":"c1"},{"description":"the tests pass","id":"c2"}]
    dependencies: []
    extra:
      delivery:
        commit: "<oid:2>"
        digest: "<sha256:17>"
        evidence: ["<sha256:32>"]
        generation: 1
        noChange: false
        workerId: "<worker:1>"
      workerId: "<worker:1>"
    goal: "A calculator that evaluates 1 + 2*3"
    id: "<task:2>"
    intent: "Split arithmetic text into tokens"
    parent: "<task:1>"
    policyConfigHash: "<sha256:31>"
    revision: 1
    status: "delivered"
    supersededBy: null
    title: "Tokenizer"
  tasks/<task:3>/r0001.json
    blockedReason: null
    criteria: [{"description":"Evaluator works","id":"c1"},{"description":"the tests pass","id":"c2"}]
    dependencies: ["<task:2>"]
    extra:
      delivery:
        commit: "<oid:3>"
        digest: "<sha256:22>"
        evidence: ["<sha256:33>"]
        generation: 2
        noChange: false
        workerId: "<worker:2>"
      workerId: "<worker:2>"
    goal: "A calculator that evaluates 1 + 2*3"
    id: "<task:3>"
    intent: "Evaluate tokens with precedence"
    parent: "<task:1>"
    policyConfigHash: "<sha256:31>"
    revision: 1
    status: "delivered"
    supersededBy: null
    title: "Evaluator"
  tasks/<task:4>/r0001.json
    blockedReason: null
    criteria: [{"description":"Docs works","id":"c1"},{"description":"the tests pass","id":"c2"}]
    dependencies: []
    extra:
      delivery:
        commit: "<oid:4>"
        digest: "<sha256:25>"
        evidence: ["<sha256:34>"]
        generation: 1
        noChange: false
        workerId: "<worker:3>"
      workerId: "<worker:3>"
    goal: "A calculator that evaluates 1 + 2*3"
    id: "<task:4>"
    intent: "Document the calculator"
    parent: "<task:1>"
    policyConfigHash: "<sha256:31>"
    revision: 1
    status: "delivered"
    supersededBy: null
    title: "Docs"
  workers/<worker:1>.json
    base: "<oid:7>"
    blockedReason: null
    branch: "refs/heads/agentops/<run>/<worker:1>"
    diagnostic: null
    extra: {"workspace":{"diskBytes":"<diskBytes>","seconds":"<duration>"}}
    failures: []
    generation: 1
    host: "scripted"
    process: null
    role: "child"
    sandbox: "namespace"
    session: null
    startedAt: "<time>"
    status: "delivered"
    taskId: "<task:2>"
    usage: []
    wokenFor: []
    workerId: "<worker:1>"
    worktree: "<tmp>/calc/.agentops/worktrees/<run>/<worker:1>"
  workers/<worker:2>.json
    base: "<oid:16>"
    blockedReason: null
    branch: "refs/heads/agentops/<run>/<worker:2>"
    diagnostic: null
    extra: {"workspace":{"diskBytes":"<diskBytes>","seconds":"<duration>"}}
    failures:
      -
        at: "<time>"
        code: "RUN_VERIFICATION_FAILED"
        fingerprint: "<sha256:35>"
        generation: 1
        head: "<oid:17>"
        message: "verification failed on <oid:17>:\n- tests: exit 1, \n  last output:\n    1..3\n    not ok 1 - test_evaluator.EvaluateTest.test_precedence\n    # AssertionError: 10 != 7\n    ok 2 - test_package.PackageTest.test_imports\n    ok 3 - test_parser.TokenizeTest.test_numbers_and_operators"
        output: "<sha256:36>"
    generation: 2
    host: "scripted"
    process: null
    role: "child"
    sandbox: "namespace"
    session: null
    startedAt: "<time>"
    status: "delivered"
    taskId: "<task:3>"
    usage: []
    wokenFor: []
    workerId: "<worker:2>"
    worktree: "<tmp>/calc/.agentops/worktrees/<run>/<worker:2>"
  workers/<worker:3>.json
    base: "<oid:7>"
    blockedReason: null
    branch: "refs/heads/agentops/<run>/<worker:3>"
    diagnostic: null
    extra: {"workspace":{"diskBytes":"<diskBytes>","seconds":"<duration>"}}
    failures: []
    generation: 1
    host: "scripted"
    process: null
    role: "child"
    sandbox: "namespace"
    session: null
    startedAt: "<time>"
    status: "delivered"
    taskId: "<task:4>"
    usage: []
    wokenFor: []
    workerId: "<worker:3>"
    worktree: "<tmp>/calc/.agentops/worktrees/<run>/<worker:3>"
  workers/coordinator.json
    base: "<oid:7>"
    blockedReason: null
    branch: "refs/heads/agentops/<run>/coordinator"
    diagnostic: null
    extra: {}
    failures: []
    generation: 1
    host: "scripted"
    process: null
    role: "coordinator"
    sandbox: "namespace"
    session: null
    startedAt: "<time>"
    status: "delivered"
    taskId: "<task:1>"
    usage: []
    wokenFor: []
    workerId: "coordinator"
    worktree: "<tmp>/calc/.agentops/worktrees/<run>/coordinator"
policy:
  approvals.json
    []
  binding.json
    boundAt: "<time>"
    configHash: "<sha256:31>"
    runId: "<run>"
    toolkitVersion: "<version>"
    trust: {"grantedAt":"<time>","remote":"local:<tmp>/calc","repository":"<tmp>/calc"}
  config.json
    guardrails: {"deny_patterns":[],"secret_scanning":true}
    hosts:
      reviewer-a:
        argv: []
        env: {}
        home_files: []
        kind: "scripted"
        network: true
        pass_env: []
        resume: false
        resume_argv: []
        shell: false
        writable: []
      reviewer-b:
        argv: []
        env: {}
        home_files: []
        kind: "scripted"
        network: true
        pass_env: []
        resume: false
        resume_argv: []
        shell: false
        writable: []
    receipts: {"allowed_signers":".agentops/allowed_signers","require_signature":true}
    review: {"required":2,"reviewers":["reviewer-a","reviewer-b"]}
    run:
      budget: "10m"
      default_host: "scripted"
      finalize: "coordinator"
      max_workers: 3
      target: "main"
      worktree_root: ".agentops/worktrees"
    verify:
      commands:
        -
          argv: ["<python>","run_tests.py"]
          description: ""
          env: {}
          id: "tests"
          parser: "tap"
          required: true
          shell: false
          timeout: 120
      runners: []
    version: 1
    worktree: {"setup":[]}
  events:
    POLICY_BOUND: policy <sha256:31> bound to <run>
      {"configHash":"<sha256:31>"}
notes:
  agentops/deliveries:
    <oid:2>
      -
        contractHash: "<sha256:37>"
        deliveryDigest: "<sha256:17>"
        evidence: ["<sha256:32>"]
        generation: 1
        mac: "<mac>"
        noChange: false
        runId: "<run>"
        sourceCommit: "<oid:2>"
        sourceFiles: []
        taskId: "<task:2>"
        workerId: "<worker:1>"
    <oid:3>
      -
        contractHash: "<sha256:38>"
        deliveryDigest: "<sha256:22>"
        evidence: ["<sha256:33>"]
        generation: 2
        mac: "<mac>"
        noChange: false
        runId: "<run>"
        sourceCommit: "<oid:3>"
        sourceFiles: []
        taskId: "<task:3>"
        workerId: "<worker:2>"
    <oid:4>
      -
        contractHash: "<sha256:39>"
        deliveryDigest: "<sha256:25>"
        evidence: ["<sha256:34>"]
        generation: 1
        mac: "<mac>"
        noChange: false
        runId: "<run>"
        sourceCommit: "<oid:4>"
        sourceFiles: []
        taskId: "<task:4>"
        workerId: "<worker:3>"
  agentops/evidence:
    <oid:1>
      -
        argvDigest: "<sha256:29>"
        cached: false
        cachedFrom: null
        checkout: "clean"
        commandId: "tests"
        commit: "<oid:1>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:40>"
        environment: {"installedDigest":"<sha256:41>","lockDigest":"<sha256:42>","python":"3.11.7"}
        exitCode: 0
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:30>"
        outputSize: 160
        parseError: null
        passed: true
        policyConfigHash: "<sha256:31>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "1..3\nok 1 - test_evaluator.EvaluateTest.test_precedence\nok 2 - test_package.PackageTest.test_imports\nok 3 - test_parser.TokenizeTest.test_numbers_and_operators\n"
        taskId: "<task:1>"
        tests: {"errors":0,"failed":0,"passed":3,"skipped":0,"total":3}
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:15>"
        truncated: false
    <oid:2>
      -
        argvDigest: "<sha256:29>"
        cached: false
        cachedFrom: null
        checkout: "clean"
        commandId: "tests"
        commit: "<oid:2>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:40>"
        environment: {"installedDigest":"<sha256:41>","lockDigest":"<sha256:42>","python":"3.11.7"}
        exitCode: 0
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:43>"
        outputSize: 109
        parseError: null
        passed: true
        policyConfigHash: "<sha256:31>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "1..2\nok 1 - test_package.PackageTest.test_imports\nok 2 - test_parser.TokenizeTest.test_numbers_and_operators\n"
        taskId: "<task:2>"
        tests: {"errors":0,"failed":0,"passed":2,"skipped":0,"total":2}
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:12>"
        truncated: false
    <oid:3>
      -
        argvDigest: "<sha256:29>"
        cached: false
        cachedFrom: null
        checkout: "clean"
        commandId: "tests"
        commit: "<oid:3>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:40>"
        environment: {"installedDigest":"<sha256:41>","lockDigest":"<sha256:42>","python":"3.11.7"}
        exitCode: 0
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:30>"
        outputSize: 160
        parseError: null
        passed: true
        policyConfigHash: "<sha256:31>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "1..3\nok 1 - test_evaluator.EvaluateTest.test_precedence\nok 2 - test_package.PackageTest.test_imports\nok 3 - test_parser.TokenizeTest.test_numbers_and_operators\n"
        taskId: "<task:3>"
        tests: {"errors":0,"failed":0,"passed":3,"skipped":0,"total":3}
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:14>"
        truncated: false
    <oid:4>
      -
        argvDigest: "<sha256:29>"
        cached: false
        cachedFrom: null
        checkout: "clean"
        commandId: "tests"
        commit: "<oid:4>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:40>"
        environment: {"installedDigest":"<sha256:41>","lockDigest":"<sha256:42>","python":"3.11.7"}
        exitCode: 0
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:44>"
        outputSize: 50
        parseError: null
        passed: true
        policyConfigHash: "<sha256:31>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "1..1\nok 1 - test_package.PackageTest.test_imports\n"
        taskId: "<task:4>"
        tests: {"errors":0,"failed":0,"passed":1,"skipped":0,"total":1}
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:18>"
        truncated: false
    <oid:12>
      -
        argvDigest: "<sha256:29>"
        cached: false
        cachedFrom: null
        checkout: "clean"
        commandId: "tests"
        commit: "<oid:2>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:40>"
        environment: {"installedDigest":"<sha256:41>","lockDigest":"<sha256:42>","python":"3.11.7"}
        exitCode: 0
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:43>"
        outputSize: 109
        parseError: null
        passed: true
        policyConfigHash: "<sha256:31>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "1..2\nok 1 - test_package.PackageTest.test_imports\nok 2 - test_parser.TokenizeTest.test_numbers_and_operators\n"
        taskId: "<task:2>"
        tests: {"errors":0,"failed":0,"passed":2,"skipped":0,"total":2}
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:12>"
        truncated: false
    <oid:14>
      -
        argvDigest: "<sha256:29>"
        cached: false
        cachedFrom: null
        checkout: "clean"
        commandId: "tests"
        commit: "<oid:3>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:40>"
        environment: {"installedDigest":"<sha256:41>","lockDigest":"<sha256:42>","python":"3.11.7"}
        exitCode: 0
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:30>"
        outputSize: 160
        parseError: null
        passed: true
        policyConfigHash: "<sha256:31>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "1..3\nok 1 - test_evaluator.EvaluateTest.test_precedence\nok 2 - test_package.PackageTest.test_imports\nok 3 - test_parser.TokenizeTest.test_numbers_and_operators\n"
        taskId: "<task:3>"
        tests: {"errors":0,"failed":0,"passed":3,"skipped":0,"total":3}
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:14>"
        truncated: false
    <oid:15>
      -
        argvDigest: "<sha256:29>"
        cached: false
        cachedFrom: null
        checkout: "clean"
        commandId: "tests"
        commit: "<oid:1>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:40>"
        environment: {"installedDigest":"<sha256:41>","lockDigest":"<sha256:42>","python":"3.11.7"}
        exitCode: 0
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:30>"
        outputSize: 160
        parseError: null
        passed: true
        policyConfigHash: "<sha256:31>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "1..3\nok 1 - test_evaluator.EvaluateTest.test_precedence\nok 2 - test_package.PackageTest.test_imports\nok 3 - test_parser.TokenizeTest.test_numbers_and_operators\n"
        taskId: "<task:1>"
        tests: {"errors":0,"failed":0,"passed":3,"skipped":0,"total":3}
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:15>"
        truncated: false
    <oid:17>
      -
        argvDigest: "<sha256:29>"
        cached: false
        cachedFrom: null
        checkout: "clean"
        commandId: "tests"
        commit: "<oid:17>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:40>"
        environment: {"installedDigest":"<sha256:41>","lockDigest":"<sha256:42>","python":"3.11.7"}
        exitCode: 1
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:45>"
        outputSize: 190
        parseError: null
        passed: false
        policyConfigHash: "<sha256:31>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "1..3\nnot ok 1 - test_evaluator.EvaluateTest.test_precedence\n# AssertionError: 10 != 7\nok 2 - test_package.PackageTest.test_imports\nok 3 - test_parser.TokenizeTest.test_numbers_and_operators\n"
        taskId: "<task:3>"
        tests: {"errors":0,"failed":1,"passed":2,"skipped":0,"total":3}
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:19>"
        truncated: false
    <oid:18>
      -
        argvDigest: "<sha256:29>"
        cached: false
        cachedFrom: null
        checkout: "clean"
        commandId: "tests"
        commit: "<oid:4>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:40>"
        environment: {"installedDigest":"<sha256:41>","lockDigest":"<sha256:42>","python":"3.11.7"}
        exitCode: 0
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:44>"
        outputSize: 50
        parseError: null
        passed: true
        policyConfigHash: "<sha256:31>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "1..1\nok 1 - test_package.PackageTest.test_imports\n"
        taskId: "<task:4>"
        tests: {"errors":0,"failed":0,"passed":1,"skipped":0,"total":1}
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:18>"
        truncated: false
  agentops/receipts:
    <oid:1>
      -
        payload:
          _type: "https://in-toto.io/Statement/v1"
          predicate:
            contractHash: "<sha256:27>"
            createdAt: "<time>"
            deliveries:
              digest: "<sha256:46>"
              value:
                -
                  deliveryDigest: "<sha256:17>"
                  evidence:
                    -
                      argvDigest: "<sha256:29>"
                      cached: false
                      cachedFrom: null
                      checkout: "clean"
                      commandId: "tests"
                      commit: "<oid:2>"
                      exitCode: 0
                      kind: "command"
                      outputDigest: "<sha256:43>"
                      passed: true
                      policyConfigHash: "<sha256:31>"
                      producer: "supervisor"
                      required: true
                      taskId: "<task:2>"
                      tests: {"errors":0,"failed":0,"passed":2,"skipped":0,"total":2}
                      tree: "<oid:12>"
                  generation: 1
                  sandbox: "namespace"
                  sourceCommit: "<oid:2>"
                  taskId: "<task:2>"
                  workerId: "<worker:1>"
                -
                  deliveryDigest: "<sha256:22>"
                  evidence:
                    -
                      argvDigest: "<sha256:29>"
                      cached: false
                      cachedFrom: null
                      checkout: "clean"
                      commandId: "tests"
                      commit: "<oid:3>"
                      exitCode: 0
                      kind: "command"
                      outputDigest: "<sha256:30>"
                      passed: true
                      policyConfigHash: "<sha256:31>"
                      producer: "supervisor"
                      required: true
                      taskId: "<task:3>"
                      tests: {"errors":0,"failed":0,"passed":3,"skipped":0,"total":3}
                      tree: "<oid:14>"
                  generation: 2
                  sandbox: "namespace"
                  sourceCommit: "<oid:3>"
                  taskId: "<task:3>"
                  workerId: "<worker:2>"
                -
                  deliveryDigest: "<sha256:25>"
                  evidence:
                    -
                      argvDigest: "<sha256:29>"
                      cached: false
                      cachedFrom: null
                      checkout: "clean"
                      commandId: "tests"
                      commit: "<oid:4>"
                      exitCode: 0
                      kind: "command"
                      outputDigest: "<sha256:44>"
                      passed: true
                      policyConfigHash: "<sha256:31>"
                      producer: "supervisor"
                      required: true
                      taskId: "<task:4>"
                      tests: {"errors":0,"failed":0,"passed":1,"skipped":0,"total":1}
                      tree: "<oid:18>"
                  generation: 1
                  sandbox: "namespace"
                  sourceCommit: "<oid:4>"
                  taskId: "<task:4>"
                  workerId: "<worker:3>"
            goal: {"digest":"<sha256:47>","value":"A calculator that evaluates 1 + 2*3"}
            goalHash: "<sha256:28>"
            integration:
              digest: "<sha256:48>"
              value:
                base: "<oid:7>"
                order: ["<task:2>","<task:3>","<task:4>"]
                steps:
                  - {"commit":"<oid:11>","label":"<task:2>","parents":["<oid:7>","<oid:2>"],"tree":"<oid:12>"}
                  - {"commit":"<oid:13>","label":"<task:3>","parents":["<oid:11>","<oid:3>"],"tree":"<oid:14>"}
                  - {"commit":"<oid:1>","label":"<task:4>","parents":["<oid:13>","<oid:4>"],"tree":"<oid:15>"}
                target: "main"
            policy: {"digest":"<sha256:49>","value":{"configHash":"<sha256:31>","toolkitVersion":"<version>"}}
            reviews:
              digest: "<sha256:50>"
              value:
                - {"reportDigest":"<sha256:2>","reviewer":"reviewer-a","sandbox":"namespace","verdict":"approve"}
                - {"reportDigest":"<sha256:3>","reviewer":"reviewer-b","sandbox":"namespace","verdict":"approve"}
            runId: "<run>"
            sandbox: "namespace"
            tasks:
              digest: "<sha256:51>"
              value:
                -
                  dependencies: []
                  id: "<task:1>"
                  parent: null
                  revision: 1
                  status: "running"
                  title: "A calculator"
                -
                  dependencies: []
                  id: "<task:2>"
                  parent: "<task:1>"
                  revision: 1
                  status: "delivered"
                  title: "Tokenizer"
                -
                  dependencies: ["<task:2>"]
                  id: "<task:3>"
                  parent: "<task:1>"
                  revision: 1
                  status: "delivered"
                  title: "Evaluator"
                -
                  dependencies: []
                  id: "<task:4>"
                  parent: "<task:1>"
                  revision: 1
                  status: "delivered"
                  title: "Docs"
            toolkitVersion: "<version>"
            usage: {"digest":"<sha256:52>","value":{"costUsd":null,"generations":[],"tokens":0}}
            verification:
              digest: "<sha256:53>"
              value:
                -
                  argvDigest: "<sha256:29>"
                  cached: false
                  cachedFrom: null
                  checkout: "clean"
                  commandId: "tests"
                  commit: "<oid:1>"
                  exitCode: 0
                  kind: "command"
                  outputDigest: "<sha256:30>"
                  passed: true
                  policyConfigHash: "<sha256:31>"
                  producer: "supervisor"
                  required: true
                  taskId: "<task:1>"
                  tests: {"errors":0,"failed":0,"passed":3,"skipped":0,"total":3}
                  tree: "<oid:15>"
          predicateType: "urn:git-agentops:receipt:v2"
          subject: [{"digest":{"gitCommit":"<oid:1>","gitTree":"<oid:15>"},"name":"git:main"}]
        payloadType: "application/vnd.in-toto+json"
        signatures: [{"keyid":"<key-fingerprint>","sig":"<sig>"}]
events:
  run:
    RUN_CREATED: run <run> created: A calculator that evaluates 1 + 2*3
      base: "<oid:7>"
      budgetSeconds: 600
      goal: "A calculator that evaluates 1 + 2*3"
      host: "scripted"
      target: "main"
    RUN_SUPERVISOR_START: supervisor <pid> started
      {"pid":"<pid>"}
    INTEGRATION_REQUESTED: coordinator asks to finalize
      {"requestId":"<request:5>"}
    INTEGRATION_PREPARED: candidate <oid:1> on <oid:7>
      attempts: 1
      base: "<oid:7>"
      candidate: "<oid:1>"
      order: ["<task:2>","<task:3>","<task:4>"]
      status: "prepared"
      steps:
        - {"commit":"<oid:11>","label":"<task:2>","parents":["<oid:7>","<oid:2>"],"tree":"<oid:12>"}
        - {"commit":"<oid:13>","label":"<task:3>","parents":["<oid:11>","<oid:3>"],"tree":"<oid:14>"}
        - {"commit":"<oid:1>","label":"<task:4>","parents":["<oid:13>","<oid:4>"],"tree":"<oid:15>"}
    INTEGRATION_VERIFIED: candidate <oid:1> verified
      {"status":"verified"}
    REVIEWS_RECORDED: 2 review(s)
      reviews:
        - {"reportDigest":"<sha256:2>","reviewer":"reviewer-a","sandbox":"namespace","verdict":"approve"}
        - {"reportDigest":"<sha256:3>","reviewer":"reviewer-b","sandbox":"namespace","verdict":"approve"}
    INTEGRATION_REVIEWED: candidate <oid:1> reviewed
      {"status":"reviewed"}
    INTEGRATION_PUBLISHED: main moved to <oid:1>; 1 checkout(s) updated
      {"publishedAt":"<time>","status":"published"}
    INTEGRATION_RECEIPTED: receipt added
      {"receiptDigest":"<sha256:14>","status":"receipted"}
    RUN_COMPLETE: run complete: main at <oid:1>
      {"candidate":"<oid:1>","receiptDigest":"<sha256:14>"}
    RUN_SUPERVISOR_STOP: supervisor <pid> stopped
      {"pid":"<pid>"}
  coordinator:
    WORKER_STARTING: coordinator starting a new generation
      {"policyConfigHash":"<sha256:31>","workerId":"coordinator"}
    WORKER_STARTED: coordinator generation 1 started (pid <pid>)
      {"workerId":"coordinator"}
    RUN_PLAN_CREATED: coordinator: root task created
      {"action":"plan","generation":1,"requestId":"<request:1>","workerId":"coordinator"}
    RUN_WORKER_PLANNED: coordinator: child task planned
      {"action":"worker","generation":1,"requestId":"<request:2>","workerId":"coordinator"}
    RUN_WORKER_PLANNED: coordinator: child task planned
      {"action":"worker","generation":1,"requestId":"<request:3>","workerId":"coordinator"}
    RUN_WORKER_PLANNED: coordinator: child task planned
      {"action":"worker","generation":1,"requestId":"<request:4>","workerId":"coordinator"}
  <worker:1>:
    TASK_PROVISIONING: provisioning <task:2> for <worker:1>
      {"taskId":"<task:2>","workerId":"<worker:1>"}
    WORKER_PROVISIONED: <worker:1> provisioned at <oid:7>
      {"base":"<oid:7>","dependencies":[],"taskId":"<task:2>","workerId":"<worker:1>"}
    WORKER_STARTING: <worker:1> starting a new generation
      {"policyConfigHash":"<sha256:31>","workerId":"<worker:1>"}
    WORKER_STARTED: <worker:1> generation 1 started (pid <pid>)
      {"workerId":"<worker:1>"}
    WORKER_HANDING_OFF: <worker:1> hands off <oid:2>
      {"workerId":"<worker:1>"}
    WORKER_STOPPED_FOR_HANDOFF: <worker:1> generation 1 ended its turn after its handoff
      {"workerId":"<worker:1>"}
    TASK_DELIVERED: <task:2> delivered by <worker:1> as <oid:2>
      {"commit":"<oid:2>","deliveryDigest":"<sha256:17>","generation":1,"taskId":"<task:2>","workerId":"<worker:1>"}
  <worker:2>:
    TASK_PROVISIONING: provisioning <task:3> for <worker:2>
      {"taskId":"<task:3>","workerId":"<worker:2>"}
    WORKER_PROVISIONED: <worker:2> provisioned at <oid:16>
      {"base":"<oid:16>","dependencies":["<task:2>"],"taskId":"<task:3>","workerId":"<worker:2>"}
    WORKER_STARTING: <worker:2> starting a new generation
      {"policyConfigHash":"<sha256:31>","workerId":"<worker:2>"}
    WORKER_STARTED: <worker:2> generation 1 started (pid <pid>)
      {"workerId":"<worker:2>"}
    WORKER_HANDING_OFF: <worker:2> hands off <oid:17>
      {"workerId":"<worker:2>"}
    WORKER_STOPPED_FOR_HANDOFF: <worker:2> generation 1 ended its turn after its handoff
      {"workerId":"<worker:2>"}
    REQUEST_REFUSED: <worker:2>: RUN_VERIFICATION_FAILED
      code: "RUN_VERIFICATION_FAILED"
      generation: 1
      message: "verification failed on <oid:17>:\n- tests: exit 1, \n  last output:\n    1..3\n    not ok 1 - test_evaluator.EvaluateTest.test_precedence\n    # AssertionError: 10 != 7\n    ok 2 - test_package.PackageTest.test_imports\n    ok 3 - test_parser.TokenizeTest.test_numbers_and_operators"
      requestDigest: "<sha256:20>"
      requestId: "<request:7>"
      workerId: "<worker:2>"
    WORKER_FAILED: <worker:2>: RUN_VERIFICATION_FAILED
      {"code":"RUN_VERIFICATION_FAILED","generation":1,"head":"<oid:17>","output":"<sha256:36>","workerId":"<worker:2>"}
    WORKER_STARTING: <worker:2> starting a new generation
      {"policyConfigHash":"<sha256:31>","workerId":"<worker:2>"}
    WORKER_STARTED: <worker:2> generation 2 started (pid <pid>)
      {"workerId":"<worker:2>"}
    WORKER_HANDING_OFF: <worker:2> hands off <oid:3>
      {"workerId":"<worker:2>"}
    WORKER_STOPPED_FOR_HANDOFF: <worker:2> generation 2 ended its turn after its handoff
      {"workerId":"<worker:2>"}
    TASK_DELIVERED: <task:3> delivered by <worker:2> as <oid:3>
      {"commit":"<oid:3>","deliveryDigest":"<sha256:22>","generation":2,"taskId":"<task:3>","workerId":"<worker:2>"}
  <worker:3>:
    TASK_PROVISIONING: provisioning <task:4> for <worker:3>
      {"taskId":"<task:4>","workerId":"<worker:3>"}
    WORKER_PROVISIONED: <worker:3> provisioned at <oid:7>
      {"base":"<oid:7>","dependencies":[],"taskId":"<task:4>","workerId":"<worker:3>"}
    WORKER_STARTING: <worker:3> starting a new generation
      {"policyConfigHash":"<sha256:31>","workerId":"<worker:3>"}
    WORKER_STARTED: <worker:3> generation 1 started (pid <pid>)
      {"workerId":"<worker:3>"}
    WORKER_HANDING_OFF: <worker:3> hands off <oid:4>
      {"workerId":"<worker:3>"}
    WORKER_STOPPED_FOR_HANDOFF: <worker:3> generation 1 ended its turn after its handoff
      {"workerId":"<worker:3>"}
    TASK_DELIVERED: <task:4> delivered by <worker:3> as <oid:4>
      {"commit":"<oid:4>","deliveryDigest":"<sha256:25>","generation":1,"taskId":"<task:4>","workerId":"<worker:3>"}
""",
    )


@pytest.mark.slow
def test_golden_state_of_a_task_repaired_after_verification_refused_it(tmp_path: Path) -> None:
    repo = project(tmp_path)
    flaky = child(
        "b",
        "Part B",
        [
            [write_step("src/b.txt", "BAD\n"), commit_step("Add b (bad)"), HANDOFF],
            [write_step("src/b.txt", "b\n"), commit_step("Fix b"), HANDOFF],
        ],
    )
    run_id = start(repo, recipe(tmp_path, flaky, finalize=True))
    assert finished(repo, run_id)["status"] == "complete"
    expect(
        render_run(repo, run_id),
        r"""
refs:
  refs/agentops/runs/<run>/candidate <oid:1>
  refs/agentops/runs/<run>/deliveries/<task:2> <oid:2>
  refs/agentops/runs/<run>/policy <oid:3>
  refs/agentops/runs/<run>/state <oid:4>
  refs/heads/agentops/<run>/<worker:1> <oid:2>
  refs/heads/agentops/<run>/coordinator <oid:5>
  refs/heads/main <oid:1>
  refs/notes/agentops/deliveries <oid:6>
  refs/notes/agentops/evidence <oid:7>
  refs/notes/agentops/receipts <oid:8>
state:
  artifacts/<sha256:1> (529 bytes)
  requests/<request:1>.json
    action: "plan"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:2>"
    requestId: "<request:1>"
    response:
      code: "RUN_PLAN_CREATED"
      data: {"contractHash":"<sha256:3>","taskId":"<task:1>"}
      message: "root task created"
      ok: true
      requestDigest: "<sha256:4>"
      requestId: "<request:1>"
    workerId: "coordinator"
  requests/<request:2>.json
    action: "worker"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:5>"
    requestId: "<request:2>"
    response:
      code: "RUN_WORKER_PLANNED"
      data: {"taskId":"<task:2>"}
      message: "child task planned"
      ok: true
      requestDigest: "<sha256:6>"
      requestId: "<request:2>"
    workerId: "coordinator"
  requests/<request:3>.json
    action: "finalize"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:7>"
    requestId: "<request:3>"
    response:
      code: "RUN_COMPLETE"
      data: {"commit":"<oid:1>","receiptDigest":"<sha256:8>"}
      message: "main is at <oid:1>, receipted"
      ok: true
      requestDigest: "<sha256:9>"
      requestId: "<request:3>"
    workerId: "coordinator"
  requests/<request:4>.json
    action: "handoff"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:10>"
    requestId: "<request:4>"
    response:
      code: "RUN_VERIFICATION_FAILED"
      data: {}
      message: "verification failed on <oid:10>:\n- check: exit 1, \n  last output:\n    checked 2 files; bad: ['src/b.txt']"
      ok: false
      requestDigest: "<sha256:11>"
      requestId: "<request:4>"
    workerId: "<worker:1>"
  requests/<request:5>.json
    action: "handoff"
    at: "<time>"
    generation: 2
    requestDigest: "<sha256:12>"
    requestId: "<request:5>"
    response:
      code: "RUN_WORKER_DELIVERED"
      data: {"deliveryDigest":"<sha256:13>","sourceCommit":"<oid:2>","taskId":"<task:2>"}
      message: "<task:2> delivered as <oid:2>"
      ok: true
      requestDigest: "<sha256:14>"
      requestId: "<request:5>"
    workerId: "<worker:1>"
  run.json
    baseCommit: "<oid:5>"
    budget:
      costLimitUsd: null
      intervals: [{"end":"<time>","start":"<time>"}]
      limitSeconds: 5400
      reviewUsage: []
      tokenLimit: null
    contractHash: "<sha256:15>"
    contractRevision: 2
    coordinatorId: "coordinator"
    createdAt: "<time>"
    disableRestart: false
    goal: "Build the parts"
    goalHash: "<sha256:16>"
    host: "scripted"
    integration:
      attempts: 1
      base: "<oid:5>"
      candidate: "<oid:1>"
      order: ["<task:2>"]
      publishedAt: "<time>"
      receiptDigest: "<sha256:8>"
      request: {"generation":1,"rawDigest":"<sha256:9>","requestDigest":"<sha256:7>","requestId":"<request:3>"}
      reviews: []
      status: "complete"
      steps: [{"commit":"<oid:1>","label":"<task:2>","parents":["<oid:5>","<oid:2>"],"tree":"<oid:9>"}]
      verification:
        -
          argvDigest: "<sha256:17>"
          cached: true
          cachedFrom: "<oid:2>"
          checkout: "clean"
          commandId: "check"
          commit: "<oid:1>"
          exitCode: 0
          kind: "command"
          outputDigest: "<sha256:18>"
          passed: true
          policyConfigHash: "<sha256:19>"
          producer: "supervisor"
          required: true
          taskId: "<task:1>"
          tests: null
          tree: "<oid:9>"
    lastUserResume: null
    planOrder: ["<task:2>"]
    policyConfigHash: "<sha256:19>"
    recipeDigest: "<sha256:1>"
    repository: "<tmp>/repo"
    rootTaskId: "<task:1>"
    runId: "<run>"
    status: "complete"
    statusReason: null
    supervisorStarts: ["<time>"]
    target: "main"
  tasks/<task:1>/r0001.json
    blockedReason: null
    criteria: [{"description":"parts exist","id":"c1"},{"description":"check passes","id":"c2"}]
    dependencies: []
    extra: {"workerId":"coordinator"}
    goal: "Build the parts"
    id: "<task:1>"
    intent: "Build the parts"
    parent: null
    policyConfigHash: "<sha256:19>"
    revision: 1
    status: "delivered"
    supersededBy: null
    title: "Build it"
  tasks/<task:2>/r0001.json
    blockedReason: null
    criteria: [{"description":"done","id":"c1"}]
    dependencies: []
    extra:
      delivery:
        commit: "<oid:2>"
        digest: "<sha256:13>"
        evidence: ["<sha256:20>"]
        generation: 2
        noChange: false
        workerId: "<worker:1>"
      workerId: "<worker:1>"
    goal: "Build the parts"
    id: "<task:2>"
    intent: "Part B"
    parent: "<task:1>"
    policyConfigHash: "<sha256:19>"
    revision: 1
    status: "delivered"
    supersededBy: null
    title: "Part B"
  workers/<worker:1>.json
    base: "<oid:5>"
    blockedReason: null
    branch: "refs/heads/agentops/<run>/<worker:1>"
    diagnostic: null
    extra: {"workspace":{"diskBytes":"<diskBytes>","seconds":"<duration>"}}
    failures:
      -
        at: "<time>"
        code: "RUN_VERIFICATION_FAILED"
        fingerprint: "<sha256:21>"
        generation: 1
        head: "<oid:10>"
        message: "verification failed on <oid:10>:\n- check: exit 1, \n  last output:\n    checked 2 files; bad: ['src/b.txt']"
        output: "<sha256:22>"
    generation: 2
    host: "scripted"
    process: null
    role: "child"
    sandbox: "namespace"
    session: null
    startedAt: "<time>"
    status: "delivered"
    taskId: "<task:2>"
    usage: []
    wokenFor: []
    workerId: "<worker:1>"
    worktree: "<tmp>/repo/.agentops/worktrees/<run>/<worker:1>"
  workers/coordinator.json
    base: "<oid:5>"
    blockedReason: null
    branch: "refs/heads/agentops/<run>/coordinator"
    diagnostic: null
    extra: {}
    failures: []
    generation: 1
    host: "scripted"
    process: null
    role: "coordinator"
    sandbox: "namespace"
    session: null
    startedAt: "<time>"
    status: "delivered"
    taskId: "<task:1>"
    usage: []
    wokenFor: []
    workerId: "coordinator"
    worktree: "<tmp>/repo/.agentops/worktrees/<run>/coordinator"
policy:
  approvals.json
    []
  binding.json
    boundAt: "<time>"
    configHash: "<sha256:19>"
    runId: "<run>"
    toolkitVersion: "<version>"
    trust: {"grantedAt":"<time>","remote":"local:<tmp>/repo","repository":"<tmp>/repo"}
  config.json
    guardrails: {"deny_patterns":[],"secret_scanning":true}
    hosts: {}
    receipts: {"require_signature":false}
    review: {"required":0,"reviewers":[]}
    run:
      budget: "90m"
      default_host: "scripted"
      finalize: "coordinator"
      max_workers: 3
      target: "main"
      worktree_root: ".agentops/worktrees"
    verify:
      commands:
        -
          argv: ["python3","check.py"]
          description: ""
          env: {}
          id: "check"
          parser: "none"
          required: true
          shell: false
          timeout: 60
      runners: []
    version: 1
    worktree: {"setup":[]}
  events:
    POLICY_BOUND: policy <sha256:19> bound to <run>
      {"configHash":"<sha256:19>"}
notes:
  agentops/deliveries:
    <oid:2>
      -
        contractHash: "<sha256:23>"
        deliveryDigest: "<sha256:13>"
        evidence: ["<sha256:20>"]
        generation: 2
        mac: "<mac>"
        noChange: false
        runId: "<run>"
        sourceCommit: "<oid:2>"
        sourceFiles: []
        taskId: "<task:2>"
        workerId: "<worker:1>"
  agentops/evidence:
    <oid:1>
      -
        argvDigest: "<sha256:17>"
        cached: true
        cachedFrom: "<oid:2>"
        checkout: "clean"
        commandId: "check"
        commit: "<oid:1>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:24>"
        environment: {"installedDigest":null,"lockDigest":"<sha256:25>","python":null}
        exitCode: 0
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:18>"
        outputSize: 25
        parseError: null
        passed: true
        policyConfigHash: "<sha256:19>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "checked 2 files; bad: []\n"
        taskId: "<task:1>"
        tests: null
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:9>"
        truncated: false
    <oid:2>
      -
        argvDigest: "<sha256:17>"
        cached: false
        cachedFrom: null
        checkout: "clean"
        commandId: "check"
        commit: "<oid:2>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:24>"
        environment: {"installedDigest":null,"lockDigest":"<sha256:25>","python":null}
        exitCode: 0
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:18>"
        outputSize: 25
        parseError: null
        passed: true
        policyConfigHash: "<sha256:19>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "checked 2 files; bad: []\n"
        taskId: "<task:2>"
        tests: null
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:9>"
        truncated: false
    <oid:9>
      -
        argvDigest: "<sha256:17>"
        cached: false
        cachedFrom: null
        checkout: "clean"
        commandId: "check"
        commit: "<oid:2>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:24>"
        environment: {"installedDigest":null,"lockDigest":"<sha256:25>","python":null}
        exitCode: 0
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:18>"
        outputSize: 25
        parseError: null
        passed: true
        policyConfigHash: "<sha256:19>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "checked 2 files; bad: []\n"
        taskId: "<task:2>"
        tests: null
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:9>"
        truncated: false
    <oid:10>
      -
        argvDigest: "<sha256:17>"
        cached: false
        cachedFrom: null
        checkout: "clean"
        commandId: "check"
        commit: "<oid:10>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:24>"
        environment: {"installedDigest":null,"lockDigest":"<sha256:25>","python":null}
        exitCode: 1
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:26>"
        outputSize: 36
        parseError: null
        passed: false
        policyConfigHash: "<sha256:19>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "checked 2 files; bad: ['src/b.txt']\n"
        taskId: "<task:2>"
        tests: null
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:11>"
        truncated: false
  agentops/receipts:
    <oid:1>
      -
        payload:
          _type: "https://in-toto.io/Statement/v1"
          predicate:
            contractHash: "<sha256:15>"
            createdAt: "<time>"
            deliveries:
              digest: "<sha256:27>"
              value:
                -
                  deliveryDigest: "<sha256:13>"
                  evidence:
                    -
                      argvDigest: "<sha256:17>"
                      cached: false
                      cachedFrom: null
                      checkout: "clean"
                      commandId: "check"
                      commit: "<oid:2>"
                      exitCode: 0
                      kind: "command"
                      outputDigest: "<sha256:18>"
                      passed: true
                      policyConfigHash: "<sha256:19>"
                      producer: "supervisor"
                      required: true
                      taskId: "<task:2>"
                      tests: null
                      tree: "<oid:9>"
                  generation: 2
                  sandbox: "namespace"
                  sourceCommit: "<oid:2>"
                  taskId: "<task:2>"
                  workerId: "<worker:1>"
            goal: {"digest":"<sha256:28>","value":"Build the parts"}
            goalHash: "<sha256:16>"
            integration:
              digest: "<sha256:29>"
              value:
                base: "<oid:5>"
                order: ["<task:2>"]
                steps: [{"commit":"<oid:1>","label":"<task:2>","parents":["<oid:5>","<oid:2>"],"tree":"<oid:9>"}]
                target: "main"
            policy: {"digest":"<sha256:30>","value":{"configHash":"<sha256:19>","toolkitVersion":"<version>"}}
            reviews: {"digest":"<sha256:31>","value":[]}
            runId: "<run>"
            sandbox: "namespace"
            tasks:
              digest: "<sha256:32>"
              value:
                - {"dependencies":[],"id":"<task:1>","parent":null,"revision":1,"status":"running","title":"Build it"}
                -
                  dependencies: []
                  id: "<task:2>"
                  parent: "<task:1>"
                  revision: 1
                  status: "delivered"
                  title: "Part B"
            toolkitVersion: "<version>"
            usage: {"digest":"<sha256:33>","value":{"costUsd":null,"generations":[],"tokens":0}}
            verification:
              digest: "<sha256:34>"
              value:
                -
                  argvDigest: "<sha256:17>"
                  cached: true
                  cachedFrom: "<oid:2>"
                  checkout: "clean"
                  commandId: "check"
                  commit: "<oid:1>"
                  exitCode: 0
                  kind: "command"
                  outputDigest: "<sha256:18>"
                  passed: true
                  policyConfigHash: "<sha256:19>"
                  producer: "supervisor"
                  required: true
                  taskId: "<task:1>"
                  tests: null
                  tree: "<oid:9>"
          predicateType: "urn:git-agentops:receipt:v2"
          subject: [{"digest":{"gitCommit":"<oid:1>","gitTree":"<oid:9>"},"name":"git:main"}]
        payloadType: "application/vnd.in-toto+json"
        signatures: []
events:
  run:
    RUN_CREATED: run <run> created: Build the parts
      {"base":"<oid:5>","budgetSeconds":5400,"goal":"Build the parts","host":"scripted","target":"main"}
    RUN_SUPERVISOR_START: supervisor <pid> started
      {"pid":"<pid>"}
    INTEGRATION_REQUESTED: coordinator asks to finalize
      {"requestId":"<request:3>"}
    INTEGRATION_PREPARED: candidate <oid:1> on <oid:5>
      attempts: 1
      base: "<oid:5>"
      candidate: "<oid:1>"
      order: ["<task:2>"]
      status: "prepared"
      steps: [{"commit":"<oid:1>","label":"<task:2>","parents":["<oid:5>","<oid:2>"],"tree":"<oid:9>"}]
    INTEGRATION_VERIFIED: candidate <oid:1> verified
      {"status":"verified"}
    INTEGRATION_REVIEWED: candidate <oid:1> reviewed
      {"status":"reviewed"}
    INTEGRATION_PUBLISHED: main moved to <oid:1>; 1 checkout(s) updated
      {"publishedAt":"<time>","status":"published"}
    INTEGRATION_RECEIPTED: receipt added
      {"receiptDigest":"<sha256:8>","status":"receipted"}
    RUN_COMPLETE: run complete: main at <oid:1>
      {"candidate":"<oid:1>","receiptDigest":"<sha256:8>"}
    RUN_SUPERVISOR_STOP: supervisor <pid> stopped
      {"pid":"<pid>"}
  coordinator:
    WORKER_STARTING: coordinator starting a new generation
      {"policyConfigHash":"<sha256:19>","workerId":"coordinator"}
    WORKER_STARTED: coordinator generation 1 started (pid <pid>)
      {"workerId":"coordinator"}
    RUN_PLAN_CREATED: coordinator: root task created
      {"action":"plan","generation":1,"requestId":"<request:1>","workerId":"coordinator"}
    RUN_WORKER_PLANNED: coordinator: child task planned
      {"action":"worker","generation":1,"requestId":"<request:2>","workerId":"coordinator"}
  <worker:1>:
    TASK_PROVISIONING: provisioning <task:2> for <worker:1>
      {"taskId":"<task:2>","workerId":"<worker:1>"}
    WORKER_PROVISIONED: <worker:1> provisioned at <oid:5>
      {"base":"<oid:5>","dependencies":[],"taskId":"<task:2>","workerId":"<worker:1>"}
    WORKER_STARTING: <worker:1> starting a new generation
      {"policyConfigHash":"<sha256:19>","workerId":"<worker:1>"}
    WORKER_STARTED: <worker:1> generation 1 started (pid <pid>)
      {"workerId":"<worker:1>"}
    WORKER_HANDING_OFF: <worker:1> hands off <oid:10>
      {"workerId":"<worker:1>"}
    WORKER_STOPPED_FOR_HANDOFF: <worker:1> generation 1 ended its turn after its handoff
      {"workerId":"<worker:1>"}
    REQUEST_REFUSED: <worker:1>: RUN_VERIFICATION_FAILED
      code: "RUN_VERIFICATION_FAILED"
      generation: 1
      message: "verification failed on <oid:10>:\n- check: exit 1, \n  last output:\n    checked 2 files; bad: ['src/b.txt']"
      requestDigest: "<sha256:11>"
      requestId: "<request:4>"
      workerId: "<worker:1>"
    WORKER_FAILED: <worker:1>: RUN_VERIFICATION_FAILED
      {"code":"RUN_VERIFICATION_FAILED","generation":1,"head":"<oid:10>","output":"<sha256:22>","workerId":"<worker:1>"}
    WORKER_STARTING: <worker:1> starting a new generation
      {"policyConfigHash":"<sha256:19>","workerId":"<worker:1>"}
    WORKER_STARTED: <worker:1> generation 2 started (pid <pid>)
      {"workerId":"<worker:1>"}
    WORKER_HANDING_OFF: <worker:1> hands off <oid:2>
      {"workerId":"<worker:1>"}
    WORKER_STOPPED_FOR_HANDOFF: <worker:1> generation 2 ended its turn after its handoff
      {"workerId":"<worker:1>"}
    TASK_DELIVERED: <task:2> delivered by <worker:1> as <oid:2>
      {"commit":"<oid:2>","deliveryDigest":"<sha256:13>","generation":2,"taskId":"<task:2>","workerId":"<worker:1>"}
""",
    )


A_SLEEP = 4.0
"""Seconds Part A's agent works before it commits: the coordinator's proposal, made right after it planned A and
B, stops A first, so A is restarted and delivers under the new policy -- the path this golden text is of (the
test says so when a machine was too slow for it)."""
RUNNER = ["python3", "-c", "import pathlib, sys; sys.exit(0 if pathlib.Path('src/b.txt').exists() else 1)"]


@pytest.mark.slow
def test_golden_state_of_a_policy_transition(tmp_path: Path) -> None:
    """The coordinator proposes an acceptance runner and approves it itself (``policy_changes = "coordinator"``);
    B is re-planned to need it."""
    options = 'policy_changes = "coordinator"'
    repo = project(tmp_path, run_options=options)
    proposed = (
        POLICY.format(max_workers=3, run_options=options)
        + f'[[verify.runners]]\nid = "acceptance"\nargv = {json.dumps(RUNNER)}\ntimeout = 60\n'
    )
    first = [{"sleep": A_SLEEP}, write_step("src/a.txt", "a\n"), commit_step("Add a"), HANDOFF]
    parts = child("a", "Part A", [first]) + child(
        "b", "Part B", [[write_step("src/b.txt", "b\n"), commit_step("Add b"), HANDOFF]], ["a"]
    )
    doc = {
        "plan": {"title": "Build it", "intent": "Build the parts", "criteria": ["parts exist", "check passes"]},
        "coordinator": {
            "finalize": True,
            "one_shot": True,
            "policy": {
                "file": ".agentops/proposals/runner.toml",
                "content": proposed,
                "approvals": [{"capability": "runner:acceptance", "reason": "reads one file; runs nothing else"}],
                "replan": [{"task": "b", "criteria": [{"description": "b exists", "runner": "acceptance"}]}],
            },
        },
        "tasks": list(parts.tasks),
    }
    (tmp_path / "recipe.toml").write_text(toml(doc))
    run_id = start(repo, tmp_path / "recipe.toml")
    done = finished(repo, run_id)
    assert done["status"] == "complete"
    a = worker_of(done, task_by_title(done, "Part A")["taskId"])
    assert a["generation"] == 2, f"Part A handed off before the transition stopped it (not within {A_SLEEP}s)"
    expect(
        render_run(repo, run_id),
        r"""
refs:
  refs/agentops/runs/<run>/candidate <oid:1>
  refs/agentops/runs/<run>/deliveries/<task:2> <oid:2>
  refs/agentops/runs/<run>/deliveries/<task:3> <oid:3>
  refs/agentops/runs/<run>/journal/<transition:1> <oid:4>
  refs/agentops/runs/<run>/policy <oid:5>
  refs/agentops/runs/<run>/state <oid:6>
  refs/heads/agentops/<run>/<worker:1> <oid:2>
  refs/heads/agentops/<run>/<worker:2> <oid:3>
  refs/heads/agentops/<run>/coordinator <oid:7>
  refs/heads/main <oid:1>
  refs/notes/agentops/deliveries <oid:8>
  refs/notes/agentops/evidence <oid:9>
  refs/notes/agentops/receipts <oid:10>
state:
  artifacts/<sha256:1> (1290 bytes)
  requests/<request:1>.json
    action: "plan"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:2>"
    requestId: "<request:1>"
    response:
      code: "RUN_PLAN_CREATED"
      data: {"contractHash":"<sha256:3>","taskId":"<task:1>"}
      message: "root task created"
      ok: true
      requestDigest: "<sha256:4>"
      requestId: "<request:1>"
    workerId: "coordinator"
  requests/<request:2>.json
    action: "worker"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:5>"
    requestId: "<request:2>"
    response:
      code: "RUN_WORKER_PLANNED"
      data: {"taskId":"<task:2>"}
      message: "child task planned"
      ok: true
      requestDigest: "<sha256:6>"
      requestId: "<request:2>"
    workerId: "coordinator"
  requests/<request:3>.json
    action: "worker"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:7>"
    requestId: "<request:3>"
    response:
      code: "RUN_WORKER_PLANNED"
      data: {"taskId":"<task:3>"}
      message: "child task planned"
      ok: true
      requestDigest: "<sha256:8>"
      requestId: "<request:3>"
    workerId: "coordinator"
  requests/<request:4>.json
    action: "policy"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:9>"
    requestId: "<request:4>"
    response:
      code: "RUN_POLICY_PENDING"
      data:
        approval: "coordinator"
        changes:
          - "runner:acceptance (added): python3 -c 'import pathlib, sys; sys.exit(0 if pathlib.Path('\"'\"'src/b.txt'\"'\"').exists() else 1)'"
        stage: "prepared"
        transitionId: "<transition:1>"
      message: "policy transition <transition:1> recorded with your approvals; the writers stop while it is applied"
      ok: true
      requestDigest: "<sha256:10>"
      requestId: "<request:4>"
    workerId: "coordinator"
  requests/<request:5>.json
    action: "worker"
    at: "<time>"
    generation: 2
    requestDigest: "<sha256:11>"
    requestId: "<request:5>"
    response:
      code: "RUN_WORKER_PLANNED"
      data: {"taskId":"<task:3>"}
      message: "child task planned"
      ok: true
      requestDigest: "<sha256:12>"
      requestId: "<request:5>"
    workerId: "coordinator"
  requests/<request:6>.json
    action: "finalize"
    at: "<time>"
    generation: 3
    requestDigest: "<sha256:13>"
    requestId: "<request:6>"
    response:
      code: "RUN_COMPLETE"
      data: {"commit":"<oid:1>","receiptDigest":"<sha256:14>"}
      message: "main is at <oid:1>, receipted"
      ok: true
      requestDigest: "<sha256:15>"
      requestId: "<request:6>"
    workerId: "coordinator"
  requests/<request:7>.json
    action: "handoff"
    at: "<time>"
    generation: 2
    requestDigest: "<sha256:16>"
    requestId: "<request:7>"
    response:
      code: "RUN_WORKER_DELIVERED"
      data: {"deliveryDigest":"<sha256:17>","sourceCommit":"<oid:2>","taskId":"<task:2>"}
      message: "<task:2> delivered as <oid:2>"
      ok: true
      requestDigest: "<sha256:18>"
      requestId: "<request:7>"
    workerId: "<worker:1>"
  requests/<request:8>.json
    action: "handoff"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:19>"
    requestId: "<request:8>"
    response:
      code: "RUN_WORKER_DELIVERED"
      data: {"deliveryDigest":"<sha256:20>","sourceCommit":"<oid:3>","taskId":"<task:3>"}
      message: "<task:3> delivered as <oid:3>"
      ok: true
      requestDigest: "<sha256:21>"
      requestId: "<request:8>"
    workerId: "<worker:2>"
  run.json
    baseCommit: "<oid:11>"
    budget:
      costLimitUsd: null
      intervals: [{"end":"<time>","start":"<time>"}]
      limitSeconds: 5400
      reviewUsage: []
      tokenLimit: null
    contractHash: "<sha256:22>"
    contractRevision: 4
    coordinatorId: "coordinator"
    createdAt: "<time>"
    disableRestart: false
    goal: "Build the parts"
    goalHash: "<sha256:23>"
    host: "scripted"
    integration:
      attempts: 1
      base: "<oid:11>"
      candidate: "<oid:1>"
      order: ["<task:2>","<task:3>"]
      publishedAt: "<time>"
      receiptDigest: "<sha256:14>"
      request: {"generation":3,"rawDigest":"<sha256:15>","requestDigest":"<sha256:13>","requestId":"<request:6>"}
      reviews: []
      status: "complete"
      steps:
        - {"commit":"<oid:12>","label":"<task:2>","parents":["<oid:11>","<oid:2>"],"tree":"<oid:13>"}
        - {"commit":"<oid:1>","label":"<task:3>","parents":["<oid:12>","<oid:3>"],"tree":"<oid:14>"}
      verification:
        -
          argvDigest: "<sha256:24>"
          cached: true
          cachedFrom: "<oid:3>"
          checkout: "clean"
          commandId: "check"
          commit: "<oid:1>"
          exitCode: 0
          kind: "command"
          outputDigest: "<sha256:25>"
          passed: true
          policyConfigHash: "<sha256:26>"
          producer: "supervisor"
          required: true
          taskId: "<task:1>"
          tests: null
          tree: "<oid:14>"
    lastUserResume: null
    planOrder: ["<task:2>","<task:3>"]
    policyConfigHash: "<sha256:26>"
    recipeDigest: "<sha256:1>"
    repository: "<tmp>/repo"
    rootTaskId: "<task:1>"
    runId: "<run>"
    status: "complete"
    statusReason: null
    supervisorStarts: ["<time>"]
    target: "main"
  tasks/<task:1>/r0001.json
    blockedReason: null
    criteria: [{"description":"parts exist","id":"c1"},{"description":"check passes","id":"c2"}]
    dependencies: []
    extra: {"workerId":"coordinator"}
    goal: "Build the parts"
    id: "<task:1>"
    intent: "Build the parts"
    parent: null
    policyConfigHash: "<sha256:27>"
    revision: 1
    status: "running"
    supersededBy: 2
    title: "Build it"
  tasks/<task:1>/r0002.json
    blockedReason: null
    criteria: [{"description":"parts exist","id":"c1"},{"description":"check passes","id":"c2"}]
    dependencies: []
    extra: {"workerId":"coordinator"}
    goal: "Build the parts"
    id: "<task:1>"
    intent: "Build the parts"
    parent: null
    policyConfigHash: "<sha256:26>"
    revision: 2
    status: "delivered"
    supersededBy: null
    title: "Build it"
  tasks/<task:2>/r0001.json
    blockedReason: null
    criteria: [{"description":"done","id":"c1"}]
    dependencies: []
    extra: {"workerId":"<worker:1>"}
    goal: "Build the parts"
    id: "<task:2>"
    intent: "Part A"
    parent: "<task:1>"
    policyConfigHash: "<sha256:27>"
    revision: 1
    status: "running"
    supersededBy: 2
    title: "Part A"
  tasks/<task:2>/r0002.json
    blockedReason: null
    criteria: [{"description":"done","id":"c1"}]
    dependencies: []
    extra:
      delivery:
        commit: "<oid:2>"
        digest: "<sha256:17>"
        evidence: ["<sha256:28>"]
        generation: 2
        noChange: false
        workerId: "<worker:1>"
      workerId: "<worker:1>"
    goal: "Build the parts"
    id: "<task:2>"
    intent: "Part A"
    parent: "<task:1>"
    policyConfigHash: "<sha256:26>"
    revision: 2
    status: "delivered"
    supersededBy: null
    title: "Part A"
  tasks/<task:3>/r0001.json
    blockedReason: null
    criteria: [{"description":"done","id":"c1"}]
    dependencies: ["<task:2>"]
    extra: {}
    goal: "Build the parts"
    id: "<task:3>"
    intent: "Part B"
    parent: "<task:1>"
    policyConfigHash: "<sha256:27>"
    revision: 1
    status: "planned"
    supersededBy: 2
    title: "Part B"
  tasks/<task:3>/r0002.json
    blockedReason: null
    criteria: [{"description":"done","id":"c1"}]
    dependencies: ["<task:2>"]
    extra: {}
    goal: "Build the parts"
    id: "<task:3>"
    intent: "Part B"
    parent: "<task:1>"
    policyConfigHash: "<sha256:26>"
    revision: 2
    status: "planned"
    supersededBy: 3
    title: "Part B"
  tasks/<task:3>/r0003.json
    blockedReason: null
    criteria: [{"description":"b exists","id":"c1","runner":"acceptance"}]
    dependencies: ["<task:2>"]
    extra:
      delivery:
        commit: "<oid:3>"
        digest: "<sha256:20>"
        evidence: ["<sha256:29>","<sha256:30>"]
        generation: 1
        noChange: false
        workerId: "<worker:2>"
      workerId: "<worker:2>"
    goal: "Build the parts"
    id: "<task:3>"
    intent: "Part B"
    parent: "<task:1>"
    policyConfigHash: "<sha256:26>"
    revision: 3
    status: "delivered"
    supersededBy: null
    title: "Part B"
  workers/<worker:1>.json
    base: "<oid:11>"
    blockedReason: null
    branch: "refs/heads/agentops/<run>/<worker:1>"
    diagnostic: null
    extra: {"workspace":{"diskBytes":"<diskBytes>","seconds":"<duration>"}}
    failures: []
    generation: 2
    host: "scripted"
    process: null
    role: "child"
    sandbox: "namespace"
    session: null
    startedAt: "<time>"
    status: "delivered"
    taskId: "<task:2>"
    usage: []
    wokenFor: []
    workerId: "<worker:1>"
    worktree: "<tmp>/repo/.agentops/worktrees/<run>/<worker:1>"
  workers/<worker:2>.json
    base: "<oid:15>"
    blockedReason: null
    branch: "refs/heads/agentops/<run>/<worker:2>"
    diagnostic: null
    extra: {"workspace":{"diskBytes":"<diskBytes>","seconds":"<duration>"}}
    failures: []
    generation: 1
    host: "scripted"
    process: null
    role: "child"
    sandbox: "namespace"
    session: null
    startedAt: "<time>"
    status: "delivered"
    taskId: "<task:3>"
    usage: []
    wokenFor: []
    workerId: "<worker:2>"
    worktree: "<tmp>/repo/.agentops/worktrees/<run>/<worker:2>"
  workers/coordinator.json
    base: "<oid:11>"
    blockedReason: null
    branch: "refs/heads/agentops/<run>/coordinator"
    diagnostic: "Execution policy changed: transition <transition:1> (<sha256:27> -> <sha256:26>), approved by coordinator (coordinator generation 1), was assessed and synchronized.\n- runner:acceptance (added): python3 -c 'import pathlib, sys; sys.exit(0 if pathlib.Path('\"'\"'src/b.txt'\"'\"').exists() else 1)'\nTasks not yet delivered were revised: their proof must be made under the new policy. Authorization expires with this run."
    extra:
      wake: "- Every child task (2) is delivered: check them below, then finalize with `git agentops-request finalize`, or plan more work."
    failures: []
    generation: 3
    host: "scripted"
    process: null
    role: "coordinator"
    sandbox: "namespace"
    session: null
    startedAt: "<time>"
    status: "delivered"
    taskId: "<task:1>"
    usage: []
    wokenFor: ["delivered:<sha256:22>"]
    workerId: "coordinator"
    worktree: "<tmp>/repo/.agentops/worktrees/<run>/coordinator"
journal/<transition:1>:
  proposal.toml
    | version = 1
    | [run]
    | target = "main"
    | max_workers = 3
    | policy_changes = "coordinator"
    | [[verify.commands]]
    | id = "check"
    | argv = ["python3", "check.py"]
    | timeout = 60
    | [[verify.runners]]
    | id = "acceptance"
    | argv = ["python3", "-c", "import pathlib, sys; sys.exit(0 if pathlib.Path('src/b.txt').exists() else 1)"]
    | timeout = 60
  transition.json
    approvals:
      -
        capabilityId: "runner:acceptance"
        classification: "non-dangerous"
        reason: "reads one file; runs nothing else"
    approvedBy: {"at":"<time>","by":"coordinator","name":"coordinator generation 1"}
    changes:
      -
        capabilityId: "runner:acceptance"
        change: "added"
        definition:
          argv: ["python3","-c","import pathlib, sys; sys.exit(0 if pathlib.Path('src/b.txt').exists() else 1)"]
          description: ""
          env: {}
          id: "acceptance"
          parser: "none"
          required: true
          shell: false
          timeout: 60
        definitionDigest: "<sha256:31>"
    configFile: ".agentops/proposals/runner.toml"
    contractHash: "<sha256:32>"
    delivered: []
    mode: "coordinator"
    newConfigHash: "<sha256:26>"
    oldConfigHash: "<sha256:27>"
    proposalDigest: "<sha256:33>"
    refused: null
    requestedAt: "<time>"
    requestedBy: {"generation":1,"requestDigest":"<sha256:9>","requestId":"<request:4>","workerId":"coordinator"}
    resume: ["coordinator","<worker:1>"]
    runId: "<run>"
    stage: "complete"
    stages:
      - {"at":"<time>","stage":"prepared"}
      - {"at":"<time>","stage":"fenced"}
      - {"at":"<time>","stage":"bound"}
      - {"at":"<time>","stage":"synchronized"}
      - {"at":"<time>","stage":"complete"}
    transitionId: "<transition:1>"
  events:
    POLICY_PREPARED: policy transition <transition:1>: <sha256:27> -> <sha256:26>
      {"from":"<sha256:27>","to":"<sha256:26>","transitionId":"<transition:1>"}
    POLICY_FENCED: <transition:1>: writers fenced; 0 delivered under the old policy
      {"transitionId":"<transition:1>"}
    POLICY_BOUND: <transition:1>: <sha256:26> bound
      {"transitionId":"<transition:1>"}
    POLICY_SYNCHRONIZED: <transition:1>: worktrees synchronised
      {"transitionId":"<transition:1>"}
    POLICY_COMPLETE: <transition:1>: complete
      {"transitionId":"<transition:1>"}
policy:
  approvals.json
    -
      approvedBy: {"at":"<time>","by":"coordinator","name":"coordinator generation 1"}
      authorizationId: "<transition:1>:runner:acceptance"
      capabilityId: "runner:acceptance"
      definitionDigest: "<sha256:31>"
      expires: "with run <run>"
      policyConfigHash: "<sha256:26>"
      reason: "reads one file; runs nothing else"
  base-config.json
    guardrails: {"deny_patterns":[],"secret_scanning":true}
    hosts: {}
    receipts: {"require_signature":false}
    review: {"required":0,"reviewers":[]}
    run:
      budget: "90m"
      default_host: "scripted"
      finalize: "coordinator"
      max_workers: 3
      policy_changes: "coordinator"
      target: "main"
      worktree_root: ".agentops/worktrees"
    verify:
      commands:
        -
          argv: ["python3","check.py"]
          description: ""
          env: {}
          id: "check"
          parser: "none"
          required: true
          shell: false
          timeout: 60
      runners: []
    version: 1
    worktree: {"setup":[]}
  binding.json
    baseConfigHash: "<sha256:27>"
    boundAt: "<time>"
    configHash: "<sha256:26>"
    proposalBlob: "<oid:16>"
    runId: "<run>"
    toolkitVersion: "<version>"
    transitions:
      -
        approvals:
          -
            capabilityId: "runner:acceptance"
            classification: "non-dangerous"
            reason: "reads one file; runs nothing else"
        approvedBy: {"at":"<time>","by":"coordinator","name":"coordinator generation 1"}
        boundAt: "<time>"
        changes: [{"capabilityId":"runner:acceptance","change":"added","definitionDigest":"<sha256:31>"}]
        delivered: []
        from: "<sha256:27>"
        to: "<sha256:26>"
        transitionId: "<transition:1>"
    trust: {"grantedAt":"<time>","remote":"local:<tmp>/repo","repository":"<tmp>/repo"}
  config.json
    guardrails: {"deny_patterns":[],"secret_scanning":true}
    hosts: {}
    receipts: {"require_signature":false}
    review: {"required":0,"reviewers":[]}
    run:
      budget: "90m"
      default_host: "scripted"
      finalize: "coordinator"
      max_workers: 3
      policy_changes: "coordinator"
      target: "main"
      worktree_root: ".agentops/worktrees"
    verify:
      commands:
        -
          argv: ["python3","check.py"]
          description: ""
          env: {}
          id: "check"
          parser: "none"
          required: true
          shell: false
          timeout: 60
      runners:
        -
          argv: ["python3","-c","import pathlib, sys; sys.exit(0 if pathlib.Path('src/b.txt').exists() else 1)"]
          description: ""
          env: {}
          id: "acceptance"
          parser: "none"
          required: true
          shell: false
          timeout: 60
    version: 1
    worktree: {"setup":[]}
  policy.toml
    | version = 1
    | [run]
    | target = "main"
    | max_workers = 3
    | policy_changes = "coordinator"
    | [[verify.commands]]
    | id = "check"
    | argv = ["python3", "check.py"]
    | timeout = 60
    | [[verify.runners]]
    | id = "acceptance"
    | argv = ["python3", "-c", "import pathlib, sys; sys.exit(0 if pathlib.Path('src/b.txt').exists() else 1)"]
    | timeout = 60
  events:
    POLICY_BOUND: policy <sha256:27> bound to <run>
      {"configHash":"<sha256:27>"}
    POLICY_REBOUND: policy <sha256:26> bound by <transition:1>
      {"configHash":"<sha256:26>","transitionId":"<transition:1>"}
notes:
  agentops/deliveries:
    <oid:2>
      -
        contractHash: "<sha256:34>"
        deliveryDigest: "<sha256:17>"
        evidence: ["<sha256:28>"]
        generation: 2
        mac: "<mac>"
        noChange: false
        runId: "<run>"
        sourceCommit: "<oid:2>"
        sourceFiles: []
        taskId: "<task:2>"
        workerId: "<worker:1>"
    <oid:3>
      -
        contractHash: "<sha256:35>"
        deliveryDigest: "<sha256:20>"
        evidence: ["<sha256:29>","<sha256:30>"]
        generation: 1
        mac: "<mac>"
        noChange: false
        runId: "<run>"
        sourceCommit: "<oid:3>"
        sourceFiles: []
        taskId: "<task:3>"
        workerId: "<worker:2>"
  agentops/evidence:
    <oid:1>
      -
        argvDigest: "<sha256:24>"
        cached: true
        cachedFrom: "<oid:3>"
        checkout: "clean"
        commandId: "check"
        commit: "<oid:1>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:36>"
        environment: {"installedDigest":null,"lockDigest":"<sha256:37>","python":null}
        exitCode: 0
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:25>"
        outputSize: 25
        parseError: null
        passed: true
        policyConfigHash: "<sha256:26>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "checked 3 files; bad: []\n"
        taskId: "<task:1>"
        tests: null
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:14>"
        truncated: false
    <oid:2>
      -
        argvDigest: "<sha256:24>"
        cached: false
        cachedFrom: null
        checkout: "clean"
        commandId: "check"
        commit: "<oid:2>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:36>"
        environment: {"installedDigest":null,"lockDigest":"<sha256:37>","python":null}
        exitCode: 0
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:38>"
        outputSize: 25
        parseError: null
        passed: true
        policyConfigHash: "<sha256:26>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "checked 2 files; bad: []\n"
        taskId: "<task:2>"
        tests: null
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:13>"
        truncated: false
    <oid:3>
      -
        argvDigest: "<sha256:24>"
        cached: false
        cachedFrom: null
        checkout: "clean"
        commandId: "check"
        commit: "<oid:3>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:36>"
        environment: {"installedDigest":null,"lockDigest":"<sha256:37>","python":null}
        exitCode: 0
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:25>"
        outputSize: 25
        parseError: null
        passed: true
        policyConfigHash: "<sha256:26>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "checked 3 files; bad: []\n"
        taskId: "<task:3>"
        tests: null
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:14>"
        truncated: false
      -
        argvDigest: "<sha256:39>"
        cached: false
        cachedFrom: null
        checkout: "clean"
        commandId: "acceptance"
        commit: "<oid:3>"
        criteria: ["c1"]
        durationMs: "<duration>"
        envDigest: "<sha256:36>"
        environment: {"installedDigest":null,"lockDigest":"<sha256:37>","python":null}
        exitCode: 0
        kind: "runner"
        mac: "<mac>"
        outputDigest: "<sha256:40>"
        outputSize: 0
        parseError: null
        passed: true
        policyConfigHash: "<sha256:26>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: ""
        taskId: "<task:3>"
        tests: null
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:14>"
        truncated: false
    <oid:13>
      -
        argvDigest: "<sha256:24>"
        cached: false
        cachedFrom: null
        checkout: "clean"
        commandId: "check"
        commit: "<oid:2>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:36>"
        environment: {"installedDigest":null,"lockDigest":"<sha256:37>","python":null}
        exitCode: 0
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:38>"
        outputSize: 25
        parseError: null
        passed: true
        policyConfigHash: "<sha256:26>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "checked 2 files; bad: []\n"
        taskId: "<task:2>"
        tests: null
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:13>"
        truncated: false
    <oid:14>
      -
        argvDigest: "<sha256:24>"
        cached: false
        cachedFrom: null
        checkout: "clean"
        commandId: "check"
        commit: "<oid:3>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:36>"
        environment: {"installedDigest":null,"lockDigest":"<sha256:37>","python":null}
        exitCode: 0
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:25>"
        outputSize: 25
        parseError: null
        passed: true
        policyConfigHash: "<sha256:26>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "checked 3 files; bad: []\n"
        taskId: "<task:3>"
        tests: null
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:14>"
        truncated: false
      -
        argvDigest: "<sha256:39>"
        cached: false
        cachedFrom: null
        checkout: "clean"
        commandId: "acceptance"
        commit: "<oid:3>"
        criteria: ["c1"]
        durationMs: "<duration>"
        envDigest: "<sha256:36>"
        environment: {"installedDigest":null,"lockDigest":"<sha256:37>","python":null}
        exitCode: 0
        kind: "runner"
        mac: "<mac>"
        outputDigest: "<sha256:40>"
        outputSize: 0
        parseError: null
        passed: true
        policyConfigHash: "<sha256:26>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: ""
        taskId: "<task:3>"
        tests: null
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:14>"
        truncated: false
  agentops/receipts:
    <oid:1>
      -
        payload:
          _type: "https://in-toto.io/Statement/v1"
          predicate:
            contractHash: "<sha256:22>"
            createdAt: "<time>"
            deliveries:
              digest: "<sha256:41>"
              value:
                -
                  deliveryDigest: "<sha256:17>"
                  evidence:
                    -
                      argvDigest: "<sha256:24>"
                      cached: false
                      cachedFrom: null
                      checkout: "clean"
                      commandId: "check"
                      commit: "<oid:2>"
                      exitCode: 0
                      kind: "command"
                      outputDigest: "<sha256:38>"
                      passed: true
                      policyConfigHash: "<sha256:26>"
                      producer: "supervisor"
                      required: true
                      taskId: "<task:2>"
                      tests: null
                      tree: "<oid:13>"
                  generation: 2
                  sandbox: "namespace"
                  sourceCommit: "<oid:2>"
                  taskId: "<task:2>"
                  workerId: "<worker:1>"
                -
                  deliveryDigest: "<sha256:20>"
                  evidence:
                    -
                      argvDigest: "<sha256:24>"
                      cached: false
                      cachedFrom: null
                      checkout: "clean"
                      commandId: "check"
                      commit: "<oid:3>"
                      exitCode: 0
                      kind: "command"
                      outputDigest: "<sha256:25>"
                      passed: true
                      policyConfigHash: "<sha256:26>"
                      producer: "supervisor"
                      required: true
                      taskId: "<task:3>"
                      tests: null
                      tree: "<oid:14>"
                    -
                      argvDigest: "<sha256:39>"
                      cached: false
                      cachedFrom: null
                      checkout: "clean"
                      commandId: "acceptance"
                      commit: "<oid:3>"
                      exitCode: 0
                      kind: "runner"
                      outputDigest: "<sha256:40>"
                      passed: true
                      policyConfigHash: "<sha256:26>"
                      producer: "supervisor"
                      required: true
                      taskId: "<task:3>"
                      tests: null
                      tree: "<oid:14>"
                  generation: 1
                  sandbox: "namespace"
                  sourceCommit: "<oid:3>"
                  taskId: "<task:3>"
                  workerId: "<worker:2>"
            goal: {"digest":"<sha256:42>","value":"Build the parts"}
            goalHash: "<sha256:23>"
            integration:
              digest: "<sha256:43>"
              value:
                base: "<oid:11>"
                order: ["<task:2>","<task:3>"]
                steps:
                  - {"commit":"<oid:12>","label":"<task:2>","parents":["<oid:11>","<oid:2>"],"tree":"<oid:13>"}
                  - {"commit":"<oid:1>","label":"<task:3>","parents":["<oid:12>","<oid:3>"],"tree":"<oid:14>"}
                target: "main"
            policy:
              digest: "<sha256:44>"
              value:
                baseConfigHash: "<sha256:27>"
                configHash: "<sha256:26>"
                toolkitVersion: "<version>"
                transitions:
                  -
                    approvals: [{"capabilityId":"runner:acceptance","reason":"reads one file; runs nothing else"}]
                    approvedBy: "coordinator"
                    approver: "coordinator generation 1"
                    capabilities:
                      - {"capabilityId":"runner:acceptance","change":"added","definitionDigest":"<sha256:31>"}
                    completedAt: "<time>"
                    from: "<sha256:27>"
                    to: "<sha256:26>"
                    transitionId: "<transition:1>"
            reviews: {"digest":"<sha256:45>","value":[]}
            runId: "<run>"
            sandbox: "namespace"
            tasks:
              digest: "<sha256:46>"
              value:
                - {"dependencies":[],"id":"<task:1>","parent":null,"revision":2,"status":"running","title":"Build it"}
                -
                  dependencies: []
                  id: "<task:2>"
                  parent: "<task:1>"
                  revision: 2
                  status: "delivered"
                  title: "Part A"
                -
                  dependencies: ["<task:2>"]
                  id: "<task:3>"
                  parent: "<task:1>"
                  revision: 3
                  status: "delivered"
                  title: "Part B"
            toolkitVersion: "<version>"
            usage: {"digest":"<sha256:47>","value":{"costUsd":null,"generations":[],"tokens":0}}
            verification:
              digest: "<sha256:48>"
              value:
                -
                  argvDigest: "<sha256:24>"
                  cached: true
                  cachedFrom: "<oid:3>"
                  checkout: "clean"
                  commandId: "check"
                  commit: "<oid:1>"
                  exitCode: 0
                  kind: "command"
                  outputDigest: "<sha256:25>"
                  passed: true
                  policyConfigHash: "<sha256:26>"
                  producer: "supervisor"
                  required: true
                  taskId: "<task:1>"
                  tests: null
                  tree: "<oid:14>"
          predicateType: "urn:git-agentops:receipt:v2"
          subject: [{"digest":{"gitCommit":"<oid:1>","gitTree":"<oid:14>"},"name":"git:main"}]
        payloadType: "application/vnd.in-toto+json"
        signatures: []
events:
  run:
    RUN_CREATED: run <run> created: Build the parts
      {"base":"<oid:11>","budgetSeconds":5400,"goal":"Build the parts","host":"scripted","target":"main"}
    RUN_SUPERVISOR_START: supervisor <pid> started
      {"pid":"<pid>"}
    POLICY_TASKS_REVISED: <transition:1>: the run is bound to <sha256:26>; tasks not delivered need fresh proof
      {"configHash":"<sha256:26>","transitionId":"<transition:1>"}
    POLICY_WRITERS_TOLD: <transition:1>: writers restart
      {"resume":["coordinator","<worker:1>"]}
    INTEGRATION_REQUESTED: coordinator asks to finalize
      {"requestId":"<request:6>"}
    INTEGRATION_PREPARED: candidate <oid:1> on <oid:11>
      attempts: 1
      base: "<oid:11>"
      candidate: "<oid:1>"
      order: ["<task:2>","<task:3>"]
      status: "prepared"
      steps:
        - {"commit":"<oid:12>","label":"<task:2>","parents":["<oid:11>","<oid:2>"],"tree":"<oid:13>"}
        - {"commit":"<oid:1>","label":"<task:3>","parents":["<oid:12>","<oid:3>"],"tree":"<oid:14>"}
    INTEGRATION_VERIFIED: candidate <oid:1> verified
      {"status":"verified"}
    INTEGRATION_REVIEWED: candidate <oid:1> reviewed
      {"status":"reviewed"}
    INTEGRATION_PUBLISHED: main moved to <oid:1>; 1 checkout(s) updated
      {"publishedAt":"<time>","status":"published"}
    INTEGRATION_RECEIPTED: receipt added
      {"receiptDigest":"<sha256:14>","status":"receipted"}
    RUN_COMPLETE: run complete: main at <oid:1>
      {"candidate":"<oid:1>","receiptDigest":"<sha256:14>"}
    RUN_SUPERVISOR_STOP: supervisor <pid> stopped
      {"pid":"<pid>"}
  coordinator:
    WORKER_STARTING: coordinator starting a new generation
      {"policyConfigHash":"<sha256:27>","workerId":"coordinator"}
    WORKER_STARTED: coordinator generation 1 started (pid <pid>)
      {"workerId":"coordinator"}
    RUN_PLAN_CREATED: coordinator: root task created
      {"action":"plan","generation":1,"requestId":"<request:1>","workerId":"coordinator"}
    RUN_WORKER_PLANNED: coordinator: child task planned
      {"action":"worker","generation":1,"requestId":"<request:2>","workerId":"coordinator"}
    RUN_WORKER_PLANNED: coordinator: child task planned
      {"action":"worker","generation":1,"requestId":"<request:3>","workerId":"coordinator"}
    RUN_POLICY_PENDING: coordinator: policy transition <transition:1> recorded with your approvals; the writers stop while it is applied
      {"action":"policy","generation":1,"requestId":"<request:4>","workerId":"coordinator"}
    WORKER_STOPPED: coordinator stopped: policy transition <transition:1>
      {"workerId":"coordinator"}
    WORKER_STARTING: coordinator starting a new generation
      {"policyConfigHash":"<sha256:26>","workerId":"coordinator"}
    WORKER_STARTED: coordinator generation 2 started (pid <pid>)
      {"workerId":"coordinator"}
    RUN_WORKER_PLANNED: coordinator: child task planned
      {"action":"worker","generation":2,"requestId":"<request:5>","workerId":"coordinator"}
    WORKER_IDLE: coordinator ended its turn; idle until an event needs it
      {"workerId":"coordinator"}
    WORKER_STARTING: coordinator starting a new generation (woken: delivered)
      {"policyConfigHash":"<sha256:26>","workerId":"coordinator"}
    WORKER_STARTED: coordinator generation 3 started (pid <pid>)
      {"workerId":"coordinator"}
  <worker:1>:
    TASK_PROVISIONING: provisioning <task:2> for <worker:1>
      {"taskId":"<task:2>","workerId":"<worker:1>"}
    WORKER_PROVISIONED: <worker:1> provisioned at <oid:11>
      {"base":"<oid:11>","dependencies":[],"taskId":"<task:2>","workerId":"<worker:1>"}
    WORKER_STARTING: <worker:1> starting a new generation
      {"policyConfigHash":"<sha256:27>","workerId":"<worker:1>"}
    WORKER_STARTED: <worker:1> generation 1 started (pid <pid>)
      {"workerId":"<worker:1>"}
    WORKER_STOPPED: <worker:1> stopped: policy transition <transition:1>
      {"workerId":"<worker:1>"}
    WORKER_STARTING: <worker:1> starting a new generation
      {"policyConfigHash":"<sha256:26>","workerId":"<worker:1>"}
    WORKER_STARTED: <worker:1> generation 2 started (pid <pid>)
      {"workerId":"<worker:1>"}
    WORKER_HANDING_OFF: <worker:1> hands off <oid:2>
      {"workerId":"<worker:1>"}
    WORKER_STOPPED_FOR_HANDOFF: <worker:1> generation 2 ended its turn after its handoff
      {"workerId":"<worker:1>"}
    TASK_DELIVERED: <task:2> delivered by <worker:1> as <oid:2>
      {"commit":"<oid:2>","deliveryDigest":"<sha256:17>","generation":2,"taskId":"<task:2>","workerId":"<worker:1>"}
  <worker:2>:
    TASK_PROVISIONING: provisioning <task:3> for <worker:2>
      {"taskId":"<task:3>","workerId":"<worker:2>"}
    WORKER_PROVISIONED: <worker:2> provisioned at <oid:15>
      {"base":"<oid:15>","dependencies":["<task:2>"],"taskId":"<task:3>","workerId":"<worker:2>"}
    WORKER_STARTING: <worker:2> starting a new generation
      {"policyConfigHash":"<sha256:26>","workerId":"<worker:2>"}
    WORKER_STARTED: <worker:2> generation 1 started (pid <pid>)
      {"workerId":"<worker:2>"}
    WORKER_HANDING_OFF: <worker:2> hands off <oid:3>
      {"workerId":"<worker:2>"}
    WORKER_STOPPED_FOR_HANDOFF: <worker:2> generation 1 ended its turn after its handoff
      {"workerId":"<worker:2>"}
    TASK_DELIVERED: <task:3> delivered by <worker:2> as <oid:3>
      {"commit":"<oid:3>","deliveryDigest":"<sha256:20>","generation":1,"taskId":"<task:3>","workerId":"<worker:2>"}
""",
    )


@pytest.mark.slow
def test_golden_state_of_a_publish_to_a_bare_remote(tmp_path: Path) -> None:
    seed = make_repo(
        tmp_path / "seed",
        files={
            "check.py": CHECK_PY,
            "src/base.txt": "hello\n",
            ".agentops/policy.toml": POLICY.format(max_workers=3, run_options='remote = "origin"'),
            ".gitignore": "__pycache__/\n",
        },
    )
    server = tmp_path / "server.git"
    git(tmp_path, "clone", "-q", "--bare", str(seed), str(server))
    assert cli(server, "agentops-init", "--server", "--yes").returncode == 0
    machine = tmp_path / "machine"
    git(tmp_path, "clone", "-q", str(server), str(machine))
    assert cli(machine, "agentops-policy", "trust", "--yes").returncode == 0
    run_id = start(machine, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True))
    doc = finished(machine, run_id)
    assert doc["status"] == "complete"
    assert git(server, "rev-parse", "main") == doc["integration"]["candidate"]
    expect(
        render_run(machine, run_id),
        r"""
refs:
  refs/agentops-sync/origin/agentops/runs/<run>/policy <oid:1>
  refs/agentops-sync/origin/agentops/runs/<run>/state <oid:2>
  refs/agentops-sync/origin/heads/agentops/<run>/coordinator <oid:3>
  refs/agentops-sync/origin/heads/main <oid:3>
  refs/agentops-sync/origin/notes/agentops/deliveries <oid:4>
  refs/agentops-sync/origin/notes/agentops/evidence <oid:5>
  refs/agentops-sync/origin/notes/agentops/receipts <oid:6>
  refs/agentops/runs/<run>/candidate <oid:7>
  refs/agentops/runs/<run>/deliveries/<task:2> <oid:8>
  refs/agentops/runs/<run>/policy <oid:1>
  refs/agentops/runs/<run>/state <oid:9>
  refs/heads/agentops/<run>/<worker:1> <oid:8>
  refs/heads/agentops/<run>/coordinator <oid:3>
  refs/heads/main <oid:7>
  refs/notes/agentops/deliveries <oid:4>
  refs/notes/agentops/evidence <oid:5>
  refs/notes/agentops/receipts <oid:6>
  refs/remotes/origin/HEAD <oid:7>
  refs/remotes/origin/agentops/<run>/<worker:1> <oid:8>
  refs/remotes/origin/agentops/<run>/coordinator <oid:3>
  refs/remotes/origin/main <oid:7>
state:
  artifacts/<sha256:1> (388 bytes)
  lease.json
    expiresAt: "<time>"
    holder: "<machine:1>"
    pid: "<pid>"
    renewedAt: "<time>"
    startTime: "<startTime>"
    term: 1
  requests/<request:1>.json
    action: "plan"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:2>"
    requestId: "<request:1>"
    response:
      code: "RUN_PLAN_CREATED"
      data: {"contractHash":"<sha256:3>","taskId":"<task:1>"}
      message: "root task created"
      ok: true
      requestDigest: "<sha256:4>"
      requestId: "<request:1>"
    workerId: "coordinator"
  requests/<request:2>.json
    action: "worker"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:5>"
    requestId: "<request:2>"
    response:
      code: "RUN_WORKER_PLANNED"
      data: {"taskId":"<task:2>"}
      message: "child task planned"
      ok: true
      requestDigest: "<sha256:6>"
      requestId: "<request:2>"
    workerId: "coordinator"
  requests/<request:3>.json
    action: "finalize"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:7>"
    requestId: "<request:3>"
    response:
      code: "RUN_COMPLETE"
      data: {"commit":"<oid:7>","receiptDigest":"<sha256:8>"}
      message: "main is at <oid:7>, receipted"
      ok: true
      requestDigest: "<sha256:9>"
      requestId: "<request:3>"
    workerId: "coordinator"
  requests/<request:4>.json
    action: "handoff"
    at: "<time>"
    generation: 1
    requestDigest: "<sha256:10>"
    requestId: "<request:4>"
    response:
      code: "RUN_WORKER_DELIVERED"
      data: {"deliveryDigest":"<sha256:11>","sourceCommit":"<oid:8>","taskId":"<task:2>"}
      message: "<task:2> delivered as <oid:8>"
      ok: true
      requestDigest: "<sha256:12>"
      requestId: "<request:4>"
    workerId: "<worker:1>"
  run.json
    baseCommit: "<oid:3>"
    budget:
      costLimitUsd: null
      intervals: [{"end":"<time>","start":"<time>"}]
      limitSeconds: 5400
      reviewUsage: []
      tokenLimit: null
    contractHash: "<sha256:13>"
    contractRevision: 2
    coordinatorId: "coordinator"
    createdAt: "<time>"
    disableRestart: false
    goal: "Build the parts"
    goalHash: "<sha256:14>"
    host: "scripted"
    integration:
      attempts: 1
      base: "<oid:3>"
      candidate: "<oid:7>"
      order: ["<task:2>"]
      publishedAt: "<time>"
      receiptDigest: "<sha256:8>"
      request: {"generation":1,"rawDigest":"<sha256:9>","requestDigest":"<sha256:7>","requestId":"<request:3>"}
      reviews: []
      status: "complete"
      steps: [{"commit":"<oid:7>","label":"<task:2>","parents":["<oid:3>","<oid:8>"],"tree":"<oid:10>"}]
      verification:
        -
          argvDigest: "<sha256:15>"
          cached: true
          cachedFrom: "<oid:8>"
          checkout: "clean"
          commandId: "check"
          commit: "<oid:7>"
          exitCode: 0
          kind: "command"
          outputDigest: "<sha256:16>"
          passed: true
          policyConfigHash: "<sha256:17>"
          producer: "supervisor"
          required: true
          taskId: "<task:1>"
          tests: null
          tree: "<oid:10>"
    lastUserResume: null
    planOrder: ["<task:2>"]
    policyConfigHash: "<sha256:17>"
    recipeDigest: "<sha256:1>"
    repository: "<tmp>/machine"
    rootTaskId: "<task:1>"
    runId: "<run>"
    status: "complete"
    statusReason: null
    supervisorStarts: ["<time>"]
    target: "main"
  tasks/<task:1>/r0001.json
    blockedReason: null
    criteria: [{"description":"parts exist","id":"c1"},{"description":"check passes","id":"c2"}]
    dependencies: []
    extra: {"workerId":"coordinator"}
    goal: "Build the parts"
    id: "<task:1>"
    intent: "Build the parts"
    parent: null
    policyConfigHash: "<sha256:17>"
    revision: 1
    status: "delivered"
    supersededBy: null
    title: "Build it"
  tasks/<task:2>/r0001.json
    blockedReason: null
    criteria: [{"description":"done","id":"c1"}]
    dependencies: []
    extra:
      delivery:
        commit: "<oid:8>"
        digest: "<sha256:11>"
        evidence: ["<sha256:18>"]
        generation: 1
        noChange: false
        workerId: "<worker:1>"
      workerId: "<worker:1>"
    goal: "Build the parts"
    id: "<task:2>"
    intent: "Part A"
    parent: "<task:1>"
    policyConfigHash: "<sha256:17>"
    revision: 1
    status: "delivered"
    supersededBy: null
    title: "Part A"
  workers/<worker:1>.json
    base: "<oid:3>"
    blockedReason: null
    branch: "refs/heads/agentops/<run>/<worker:1>"
    diagnostic: null
    extra: {"workspace":{"diskBytes":"<diskBytes>","seconds":"<duration>"}}
    failures: []
    generation: 1
    host: "scripted"
    process: null
    role: "child"
    sandbox: "namespace"
    session: null
    startedAt: "<time>"
    status: "delivered"
    taskId: "<task:2>"
    usage: []
    wokenFor: []
    workerId: "<worker:1>"
    worktree: "<tmp>/machine/.agentops/worktrees/<run>/<worker:1>"
  workers/coordinator.json
    base: "<oid:3>"
    blockedReason: null
    branch: "refs/heads/agentops/<run>/coordinator"
    diagnostic: null
    extra: {}
    failures: []
    generation: 1
    host: "scripted"
    process: null
    role: "coordinator"
    sandbox: "namespace"
    session: null
    startedAt: "<time>"
    status: "delivered"
    taskId: "<task:1>"
    usage: []
    wokenFor: []
    workerId: "coordinator"
    worktree: "<tmp>/machine/.agentops/worktrees/<run>/coordinator"
policy:
  approvals.json
    []
  binding.json
    boundAt: "<time>"
    configHash: "<sha256:17>"
    runId: "<run>"
    toolkitVersion: "<version>"
    trust: {"grantedAt":"<time>","remote":"local:<tmp>/server","repository":"<tmp>/machine"}
  config.json
    guardrails: {"deny_patterns":[],"secret_scanning":true}
    hosts: {}
    receipts: {"require_signature":false}
    review: {"required":0,"reviewers":[]}
    run:
      budget: "90m"
      default_host: "scripted"
      finalize: "coordinator"
      max_workers: 3
      remote: "origin"
      target: "main"
      worktree_root: ".agentops/worktrees"
    verify:
      commands:
        -
          argv: ["python3","check.py"]
          description: ""
          env: {}
          id: "check"
          parser: "none"
          required: true
          shell: false
          timeout: 60
      runners: []
    version: 1
    worktree: {"setup":[]}
  events:
    POLICY_BOUND: policy <sha256:17> bound to <run>
      {"configHash":"<sha256:17>"}
notes:
  agentops/deliveries:
    <oid:8>
      -
        contractHash: "<sha256:19>"
        deliveryDigest: "<sha256:11>"
        evidence: ["<sha256:18>"]
        generation: 1
        mac: "<mac>"
        noChange: false
        runId: "<run>"
        sourceCommit: "<oid:8>"
        sourceFiles: []
        taskId: "<task:2>"
        workerId: "<worker:1>"
  agentops/evidence:
    <oid:7>
      -
        argvDigest: "<sha256:15>"
        cached: true
        cachedFrom: "<oid:8>"
        checkout: "clean"
        commandId: "check"
        commit: "<oid:7>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:20>"
        environment: {"installedDigest":null,"lockDigest":"<sha256:21>","python":null}
        exitCode: 0
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:16>"
        outputSize: 25
        parseError: null
        passed: true
        policyConfigHash: "<sha256:17>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "checked 2 files; bad: []\n"
        taskId: "<task:1>"
        tests: null
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:10>"
        truncated: false
    <oid:8>
      -
        argvDigest: "<sha256:15>"
        cached: false
        cachedFrom: null
        checkout: "clean"
        commandId: "check"
        commit: "<oid:8>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:20>"
        environment: {"installedDigest":null,"lockDigest":"<sha256:21>","python":null}
        exitCode: 0
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:16>"
        outputSize: 25
        parseError: null
        passed: true
        policyConfigHash: "<sha256:17>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "checked 2 files; bad: []\n"
        taskId: "<task:2>"
        tests: null
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:10>"
        truncated: false
    <oid:10>
      -
        argvDigest: "<sha256:15>"
        cached: false
        cachedFrom: null
        checkout: "clean"
        commandId: "check"
        commit: "<oid:8>"
        criteria: []
        durationMs: "<duration>"
        envDigest: "<sha256:20>"
        environment: {"installedDigest":null,"lockDigest":"<sha256:21>","python":null}
        exitCode: 0
        kind: "command"
        mac: "<mac>"
        outputDigest: "<sha256:16>"
        outputSize: 25
        parseError: null
        passed: true
        policyConfigHash: "<sha256:17>"
        producer: "supervisor"
        required: true
        signal: null
        spawnError: null
        startedAt: "<time>"
        tail: "checked 2 files; bad: []\n"
        taskId: "<task:2>"
        tests: null
        timedOut: false
        toolkitVersion: "<version>"
        tree: "<oid:10>"
        truncated: false
  agentops/receipts:
    <oid:7>
      -
        payload:
          _type: "https://in-toto.io/Statement/v1"
          predicate:
            contractHash: "<sha256:13>"
            createdAt: "<time>"
            deliveries:
              digest: "<sha256:22>"
              value:
                -
                  deliveryDigest: "<sha256:11>"
                  evidence:
                    -
                      argvDigest: "<sha256:15>"
                      cached: false
                      cachedFrom: null
                      checkout: "clean"
                      commandId: "check"
                      commit: "<oid:8>"
                      exitCode: 0
                      kind: "command"
                      outputDigest: "<sha256:16>"
                      passed: true
                      policyConfigHash: "<sha256:17>"
                      producer: "supervisor"
                      required: true
                      taskId: "<task:2>"
                      tests: null
                      tree: "<oid:10>"
                  generation: 1
                  sandbox: "namespace"
                  sourceCommit: "<oid:8>"
                  taskId: "<task:2>"
                  workerId: "<worker:1>"
            goal: {"digest":"<sha256:23>","value":"Build the parts"}
            goalHash: "<sha256:14>"
            integration:
              digest: "<sha256:24>"
              value:
                base: "<oid:3>"
                order: ["<task:2>"]
                steps: [{"commit":"<oid:7>","label":"<task:2>","parents":["<oid:3>","<oid:8>"],"tree":"<oid:10>"}]
                target: "main"
            policy: {"digest":"<sha256:25>","value":{"configHash":"<sha256:17>","toolkitVersion":"<version>"}}
            reviews: {"digest":"<sha256:26>","value":[]}
            runId: "<run>"
            sandbox: "namespace"
            tasks:
              digest: "<sha256:27>"
              value:
                - {"dependencies":[],"id":"<task:1>","parent":null,"revision":1,"status":"running","title":"Build it"}
                -
                  dependencies: []
                  id: "<task:2>"
                  parent: "<task:1>"
                  revision: 1
                  status: "delivered"
                  title: "Part A"
            toolkitVersion: "<version>"
            usage: {"digest":"<sha256:28>","value":{"costUsd":null,"generations":[],"tokens":0}}
            verification:
              digest: "<sha256:29>"
              value:
                -
                  argvDigest: "<sha256:15>"
                  cached: true
                  cachedFrom: "<oid:8>"
                  checkout: "clean"
                  commandId: "check"
                  commit: "<oid:7>"
                  exitCode: 0
                  kind: "command"
                  outputDigest: "<sha256:16>"
                  passed: true
                  policyConfigHash: "<sha256:17>"
                  producer: "supervisor"
                  required: true
                  taskId: "<task:1>"
                  tests: null
                  tree: "<oid:10>"
          predicateType: "urn:git-agentops:receipt:v2"
          subject: [{"digest":{"gitCommit":"<oid:7>","gitTree":"<oid:10>"},"name":"git:main"}]
        payloadType: "application/vnd.in-toto+json"
        signatures: []
events:
  run:
    RUN_CREATED: run <run> created: Build the parts
      {"base":"<oid:3>","budgetSeconds":5400,"goal":"Build the parts","host":"scripted","target":"main"}
    RUN_LEASE_CLAIMED: lease claimed by <machine:1> (pid <pid>)
      {"holder":"<machine:1>","pid":"<pid>"}
    RUN_SUPERVISOR_START: supervisor <pid> started
      {"pid":"<pid>"}
    INTEGRATION_REQUESTED: coordinator asks to finalize
      {"requestId":"<request:3>"}
    INTEGRATION_PREPARED: candidate <oid:7> on <oid:3>
      attempts: 1
      base: "<oid:3>"
      candidate: "<oid:7>"
      order: ["<task:2>"]
      status: "prepared"
      steps: [{"commit":"<oid:7>","label":"<task:2>","parents":["<oid:3>","<oid:8>"],"tree":"<oid:10>"}]
    INTEGRATION_VERIFIED: candidate <oid:7> verified
      {"status":"verified"}
    INTEGRATION_REVIEWED: candidate <oid:7> reviewed
      {"status":"reviewed"}
    INTEGRATION_PUBLISHED: origin's main moved to <oid:7> (one atomic push with the receipt and the notes)
      {"publishedAt":"<time>","status":"published"}
    INTEGRATION_RECEIPTED: receipt added
      {"receiptDigest":"<sha256:8>","status":"receipted"}
    RUN_COMPLETE: run complete: main at <oid:7>
      {"candidate":"<oid:7>","receiptDigest":"<sha256:8>"}
    RUN_SUPERVISOR_STOP: supervisor <pid> stopped
      {"pid":"<pid>"}
    RUN_LEASE_RELEASED: lease released by <machine:1>
  coordinator:
    WORKER_STARTING: coordinator starting a new generation
      {"policyConfigHash":"<sha256:17>","workerId":"coordinator"}
    WORKER_STARTED: coordinator generation 1 started (pid <pid>)
      {"workerId":"coordinator"}
    RUN_PLAN_CREATED: coordinator: root task created
      {"action":"plan","generation":1,"requestId":"<request:1>","workerId":"coordinator"}
    RUN_WORKER_PLANNED: coordinator: child task planned
      {"action":"worker","generation":1,"requestId":"<request:2>","workerId":"coordinator"}
  <worker:1>:
    TASK_PROVISIONING: provisioning <task:2> for <worker:1>
      {"taskId":"<task:2>","workerId":"<worker:1>"}
    WORKER_PROVISIONED: <worker:1> provisioned at <oid:3>
      {"base":"<oid:3>","dependencies":[],"taskId":"<task:2>","workerId":"<worker:1>"}
    WORKER_STARTING: <worker:1> starting a new generation
      {"policyConfigHash":"<sha256:17>","workerId":"<worker:1>"}
    WORKER_STARTED: <worker:1> generation 1 started (pid <pid>)
      {"workerId":"<worker:1>"}
    WORKER_HANDING_OFF: <worker:1> hands off <oid:8>
      {"workerId":"<worker:1>"}
    WORKER_STOPPED_FOR_HANDOFF: <worker:1> generation 1 ended its turn after its handoff
      {"workerId":"<worker:1>"}
    TASK_DELIVERED: <task:2> delivered by <worker:1> as <oid:8>
      {"commit":"<oid:8>","deliveryDigest":"<sha256:11>","generation":1,"taskId":"<task:2>","workerId":"<worker:1>"}
""",
    )


@pytest.mark.slow
def test_two_identical_runs_render_the_same_text(tmp_path: Path) -> None:
    """What :func:`render_run` leaves in is the same on every run: ids, times, paths and the order in which
    concurrent workers happened to write are all normalised away."""
    parts = simple_child("a", "src/a.txt") + simple_child("b", "src/b.txt") + simple_child("c", "src/c.txt", ["a"])
    runs = []
    for name in ("one", "two"):
        repo = project(tmp_path / name)
        runs.append((repo, start(repo, recipe(tmp_path / name, parts, finalize=True))))
    rendered = []
    for repo, run_id in runs:
        assert finished(repo, run_id)["status"] == "complete"
        rendered.append(render_run(repo, run_id))
    assert rendered[0] == rendered[1]


# -- the invariants, each shown to catch a broken store ----------------------------------------------------------------

STATE = "refs/agentops/runs/run-golden/state"
TASK = "task-00000000-0000-4000-8000-000000000001"


def _task(delivery: dict[str, object] | None) -> bytes:
    """A task document; ``delivery``'s commit and digest completed to a whole delivery as the toolkit writes it."""
    if delivery is not None:
        delivery = {"workerId": "w-a", "generation": 1, "evidence": [], "noChange": False, **delivery}
    doc: dict[str, Any] = {
        "id": TASK,
        "revision": 1,
        "title": "Part A",
        "intent": "Part A",
        "goal": "Build the parts",
        "criteria": [{"id": "c1", "description": "done"}],
        "parent": None,
        "dependencies": [],
        "status": "delivered" if delivery else "running",
        "supersededBy": None,
        "policyConfigHash": None,
        "extra": {"delivery": delivery, "workerId": "w-a"} if delivery else {},
    }
    return canonical_bytes(doc) + b"\n"


def _put(store: Store, path: str, data: bytes, code: str = "STATE_CHANGED") -> None:
    def change(c: Change) -> None:
        c.put(path, data)

    Journal(store, STATE).mutate(change, Event(code, f"{path} written"))


def test_invariants_hold_of_a_journal_the_toolkit_wrote_and_ignore_foreign_commits(store: Store) -> None:
    repo = Path(store.repo.workdir)
    delivery = {"commit": "a" * 40, "digest": "b" * 64}
    _put(store, f"tasks/{TASK}/r0001.json", _task(None))
    _put(store, f"tasks/{TASK}/r0001.json", _task(delivery))
    check_invariants(repo)
    foreign = git(repo, "commit-tree", "-m", "not the toolkit's", git(repo, "rev-parse", "HEAD^{tree}"))
    git(repo, "update-ref", STATE, foreign)  # a foreign tip: the toolkit's tamper checks judge it, not these
    check_invariants(repo)


def test_a_delivery_that_changes_along_the_state_chain_breaks_the_invariants(store: Store) -> None:
    _put(store, f"tasks/{TASK}/r0001.json", _task({"commit": "a" * 40, "digest": "b" * 64}))
    _put(store, f"tasks/{TASK}/r0001.json", _task({"commit": "c" * 40, "digest": "b" * 64}))
    with pytest.raises(InvariantError, match="deliveries are frozen"):
        check_invariants(Path(store.repo.workdir))


def test_a_delivery_that_goes_away_breaks_the_invariants(store: Store) -> None:
    _put(store, f"tasks/{TASK}/r0001.json", _task({"commit": "a" * 40, "digest": "b" * 64}))
    _put(store, f"tasks/{TASK}/r0001.json", _task(None))
    with pytest.raises(InvariantError, match="deliveries are frozen"):
        check_invariants(Path(store.repo.workdir))


def test_a_record_that_is_not_schema_valid_breaks_the_invariants(store: Store) -> None:
    _put(store, "workers/coordinator.json", b'{"workerId": "coordinator"}\n')
    with pytest.raises(InvariantError, match="not a valid worker document"):
        check_invariants(Path(store.repo.workdir))


def test_a_journal_moved_back_breaks_the_invariants(store: Store) -> None:
    repo = Path(store.repo.workdir)
    _put(store, "artifacts/one", b"1")
    first = git(repo, "rev-parse", STATE)
    _put(store, "artifacts/two", b"2")
    check_invariants(repo)  # sees the second commit
    git(repo, "update-ref", STATE, first)  # authentic, but older: a rewind
    with pytest.raises(InvariantError, match="does not descend"):
        check_invariants(repo)


def test_a_mailbox_answer_without_its_record_breaks_the_invariants(store: Store, tmp_path: Path) -> None:
    repo = Path(store.repo.workdir)
    worktree = repo / ".agentops" / "worktrees" / "run-golden" / "w-a"  # this clone's worker: its mailbox is checked
    worker = {
        "workerId": "w-a",
        "role": "child",
        "taskId": TASK,
        "generation": 1,
        "status": "running",
        "worktree": str(worktree),
        "branch": "refs/heads/agentops/run-golden/w-a",
        "base": "a" * 40,
        "host": "scripted",
        "process": None,
        "diagnostic": None,
        "failures": [],
        "startedAt": 1.0,
        "blockedReason": None,
        "extra": {},
    }
    _put(store, "workers/w-a.json", canonical_bytes(worker) + b"\n")
    answer = {
        "requestId": "req-1",
        "requestDigest": "d" * 64,
        "ok": True,
        "code": "RUN_WORKER_PLANNED",
        "message": "planned",
        "data": {},
    }
    elsewhere = tmp_path / "other-clone" / "w-a"  # the same run fetched from another clone names its worktree
    (elsewhere / ".agentops" / "mailbox").mkdir(parents=True)
    (elsewhere / ".agentops" / "mailbox" / "response.json").write_text(json.dumps(answer))
    _put(store, "workers/w-a.json", canonical_bytes({**worker, "worktree": str(elsewhere)}) + b"\n")
    check_invariants(repo)  # that clone's mailbox is newer than this clone's copy of the state: not compared
    _put(store, "workers/w-a.json", canonical_bytes(worker) + b"\n")
    (worktree / ".agentops" / "mailbox").mkdir(parents=True)
    (worktree / ".agentops" / "mailbox" / "response.json").write_text(json.dumps(answer))
    with pytest.raises(InvariantError, match="no record of that request"):
        check_invariants(repo)
    key = sha256_hex("req-1")
    record = {
        "requestId": "req-1",
        "requestDigest": "e" * 64,
        "workerId": "w-a",
        "generation": 1,
        "action": "worker",
        "response": {**answer, "requestDigest": "e" * 64},
        "at": 1.0,
    }
    _put(store, f"requests/{key[:2]}/{key}.json", canonical_bytes(record) + b"\n")
    check_invariants(repo)  # the record answers it (a replay carries the digest of the bytes it was sent)
    _put(store, f"requests/{key[:2]}/{key}.json", canonical_bytes({**record, "generation": 2}) + b"\n")
    with pytest.raises(InvariantError, match="generation that never was"):
        check_invariants(repo)


@pytest.mark.slow
def test_render_run_names_every_volatile_value(tmp_path: Path) -> None:
    """Ids, times, paths and digests never reach the text as they are (checked on a real run's state)."""
    repo = project(tmp_path)
    run_id = start(repo, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True))
    assert finished(repo, run_id)["status"] == "complete"
    text = render_run(repo, run_id)
    for volatile in (run_id, str(tmp_path), git(repo, "rev-parse", "main"), os.environ["HOME"]):
        assert volatile not in text
    repository = pygit2.Repository(str(repo))
    for ref in repository.references:
        if ref.startswith(f"refs/agentops/runs/{run_id}/deliveries/"):
            assert ref.rsplit("/", 1)[1] not in text
    assert "<run>" in text and "<task:1>" in text and "<time>" in text
    assert subprocess.run(["git", "fsck", "--strict"], cwd=repo, capture_output=True, check=False).returncode == 0
