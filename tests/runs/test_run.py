"""Runs end to end with real processes and real worktrees: scheduling, dependency merges, repair, fencing."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from ..conftest import git
from ..helpers import HANDOFF, Part, child, commit_step, simple_child, write_step
from ..runkit import (
    children_settled,
    cli,
    events,
    project,
    recipe,
    refs,
    start,
    status,
    stop,
    supervisor_pid,
    supervisor_running,
    task_by_title,
    wait_for,
    worker_of,
)


def _simple(name: str, title: str, path: str, depends_on: list[str] | None = None) -> Part:
    return simple_child(name, path, depends_on, title=title)


@pytest.mark.slow
def test_three_children_with_a_dependency_deliver_frozen_commits(tmp_path: Path) -> None:
    repo = project(tmp_path)
    path = recipe(
        tmp_path,
        _simple("a", "Part A", "src/a.txt")
        + _simple("b", "Part B", "src/b.txt", ["a"])
        + _simple("c", "Part C", "src/c.txt"),
    )
    run_id = start(repo, path)
    try:
        doc = wait_for(repo, run_id, children_settled)
        kids = {t["title"]: t for t in doc["tasks"] if t["parent"]}
        assert {t["status"] for t in kids.values()} == {"delivered"}, doc
        deliveries = refs(repo, f"refs/agentops/runs/{run_id}/deliveries/")
        assert {ref.rsplit("/", 1)[1] for ref in deliveries} == {t["taskId"] for t in kids.values()}
        a, b = kids["Part A"], kids["Part B"]
        # B's worktree was provisioned with A's frozen delivery merged in: A's commit is a parent in B's history
        b_commit = deliveries[f"refs/agentops/runs/{run_id}/deliveries/{b['taskId']}"]
        assert git(repo, "merge-base", "--is-ancestor", a["delivery"], b_commit, check=False) == ""
        merge_parents = git(repo, "log", "--format=%P", "--merges", b_commit).split()
        assert a["delivery"] in merge_parents
        assert git(repo, "show", f"{b_commit}:src/a.txt") == "a"
        listed = git(repo, "worktree", "list", "--porcelain").split("\n\n")
        for worker in doc["workers"]:
            entry = next(e for e in listed if f"worktree {worker['worktree']}\n" in e + "\n")
            assert entry.endswith("detached"), entry  # agents commit on their own HEAD; no shared ref to write
            branch = f"refs/heads/agentops/{run_id}/{worker['workerId']}"
            if worker["taskId"] in (a["taskId"], b["taskId"]):  # the supervisor keeps the branch at the work
                assert (
                    git(repo, "rev-parse", branch)
                    == deliveries[f"refs/agentops/runs/{run_id}/deliveries/{worker['taskId']}"]
                )
        notes = git(repo, "notes", "--ref=agentops/deliveries", "show", a["delivery"])
        note = json.loads(notes.splitlines()[-1])
        assert note["taskId"] == a["taskId"] and note["runId"] == run_id and note["evidence"]
        assert git(repo, "notes", "--ref=agentops/evidence", "show", a["delivery"])  # verification evidence
    finally:
        stop(repo, run_id)
    assert refs(repo, f"refs/agentops/runs/{run_id}/deliveries/") == deliveries  # frozen: never moved
    git(repo, "fsck", "--strict")


@pytest.mark.slow
def test_failed_verification_restarts_and_second_attempt_delivers(tmp_path: Path) -> None:
    repo = project(tmp_path)
    flaky = child(
        "b",
        "Part B",
        [
            [write_step("src/b.txt", "BAD\n"), commit_step("Add b (bad)"), HANDOFF],
            [write_step("src/b.txt", "b\n"), commit_step("Fix b"), HANDOFF],
        ],
    )
    run_id = start(repo, recipe(tmp_path, flaky))
    try:
        doc = wait_for(repo, run_id, children_settled)
        task = task_by_title(doc, "Part B")
        assert task["status"] == "delivered"
        assert worker_of(doc, task["taskId"])["generation"] == 2
        log = events(repo, run_id)
        failures = [e for e in log if e["code"] == "REQUEST_REFUSED" and e["data"]["code"] == "RUN_VERIFICATION_FAILED"]
        assert len(failures) == 1 and "check" in failures[0]["data"]["message"]
        assert any(e["code"] == "TASK_DELIVERED" and e["data"]["generation"] == 2 for e in log)
        assert git(repo, "show", f"{task['delivery']}:src/b.txt") == "b"
    finally:
        stop(repo, run_id)


@pytest.mark.slow
def test_same_failure_twice_blocks_the_task_and_its_dependents(tmp_path: Path) -> None:
    repo = project(tmp_path)
    always_bad = child("a", "Part A", [[write_step("src/a.txt", "BAD\n"), commit_step("Add a"), HANDOFF]])
    run_id = start(
        repo,
        recipe(tmp_path, always_bad + _simple("b", "Part B", "src/b.txt", ["a"]) + _simple("c", "Part C", "src/c.txt")),
    )
    try:
        doc = wait_for(repo, run_id, children_settled)
        a, b, c = (task_by_title(doc, t) for t in ("Part A", "Part B", "Part C"))
        assert a["status"] == "blocked" and "RUN_NO_PROGRESS" in a["blockedReason"]
        assert b["status"] == "blocked" and a["taskId"] in b["blockedReason"]
        assert c["status"] == "delivered"  # an unrelated task is not affected
        assert worker_of(doc, a["taskId"])["generation"] == 2
    finally:
        stop(repo, run_id)


@pytest.mark.slow
def test_dependency_conflict_blocks_the_dependent_with_the_paths(tmp_path: Path) -> None:
    repo = project(tmp_path)
    left = child("a", "Part A", [[write_step("src/base.txt", "from A\n"), commit_step("A edits base"), HANDOFF]])
    right = child("b", "Part B", [[write_step("src/base.txt", "from B\n"), commit_step("B edits base"), HANDOFF]])
    joined = _simple("c", "Part C", "src/c.txt", ["a", "b"])
    run_id = start(repo, recipe(tmp_path, left + right + joined))
    try:
        doc = wait_for(repo, run_id, children_settled)
        c = task_by_title(doc, "Part C")
        assert c["status"] == "blocked" and "RUN_DEPENDENCY_CONFLICT" in c["blockedReason"]
        assert "src/base.txt" in c["blockedReason"]
        worker = worker_of(doc, c["taskId"])
        assert Path(worker["worktree"]).is_dir()  # the checkout is kept for inspection
    finally:
        stop(repo, run_id)


def _raw(doc: dict[str, object]) -> dict[str, str]:
    """A raw_request step writing ``doc`` as JSON ({worker_id}, {generation}, {contract_hash} are filled in)."""
    return {"raw_request": json.dumps(doc)}


def _request(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "requestId": "r-base",
        "workerId": "{worker_id}",
        "generation": 1,
        "contractHash": "{contract_hash}",
        "action": "handoff",
    }
    base.update(fields)
    return base


@pytest.mark.slow
def test_bad_requests_get_coded_answers_while_others_deliver(tmp_path: Path) -> None:
    repo = project(tmp_path)
    noisy = child(
        "n",
        "Noisy",
        [
            [
                '{ raw_request = "{not json" }',
                '{ raw_request = "[1, 2]" }',
                _raw({"requestId": "r1"}),  # missing fields
                _raw(_request(requestId="r-unknown", bogus=1)),  # unknown field
                _raw(_request(requestId="bad id!")),  # bad requestId
                _raw(_request(requestId="r-stale", generation=99)),  # stale generation
                _raw(_request(requestId="r-contract", contractHash="0" * 64)),  # stale contract
                _raw(_request(requestId="r-dup", action="plan", title="t", intent="i", criteria=["a", "b"])),
                _raw(_request(requestId="r-dup", action="plan", title="other", intent="i", criteria=["a", "b"])),
                '{ raw_request = "' + "x" * (200 * 1024) + '" }',  # 200 KiB
                '{ run = ["ln", "-sf", "/etc/passwd", ".agentops/mailbox/request.json"] }',  # a symlinked request file
                "{ sleep = 1.5 }",
                write_step("src/n.txt", "n\n"),
                HANDOFF,  # dirty checkout: src/n.txt is not committed
                commit_step("Add n"),
                HANDOFF,
            ]
        ],
    )
    run_id = start(repo, recipe(tmp_path, noisy + _simple("o", "Other", "src/o.txt")))
    try:
        doc = wait_for(repo, run_id, children_settled, timeout=120)
        assert {t["status"] for t in doc["tasks"] if t["parent"]} == {"delivered"}, doc
        refused = [e["data"] for e in events(repo, run_id) if e["code"] == "REQUEST_REFUSED"]
        # repeated refusals of one worker and code within a minute are one event with a count
        assert [r["code"] for r in refused] == [
            "RUN_REQUEST_INVALID",
            "RUN_REQUEST_STALE",
            "RUN_CONTRACT_CHANGED",
            "RUN_COORDINATOR_REQUIRED",
            "RUN_REQUEST_ID_CONFLICT",
            "RUN_REQUEST_TOO_LARGE",
            "RUN_DELIVERY_DIRTY",
        ], refused
        # ... and every request still got its own coded answer
        host_logs = "".join(
            p.read_text(errors="replace") for p in (repo / ".git" / "worktrees").glob("*/agentops/host-*.log")
        )
        answered = [
            line.split("response ", 1)[1].split(":", 1)[0] for line in host_logs.splitlines() if "response RUN_" in line
        ]
        assert answered.count("RUN_REQUEST_INVALID") == 5, answered  # the planted symlink is no request it waits on
        for code in (
            "RUN_REQUEST_STALE",
            "RUN_CONTRACT_CHANGED",
            "RUN_COORDINATOR_REQUIRED",
            "RUN_REQUEST_ID_CONFLICT",
            "RUN_REQUEST_TOO_LARGE",
            "RUN_DELIVERY_DIRTY",
        ):
            assert answered.count(code) == 1, (code, answered)
        assert doc["status"] == "active"  # nothing stopped the supervisor
    finally:
        stop(repo, run_id)


def _a_delivered_and_slow_running(doc: dict[str, Any]) -> bool:
    try:
        return bool(
            task_by_title(doc, "Part A")["status"] == "delivered"
            and task_by_title(doc, "Slow")["status"] == "running"
            and worker_of(doc, task_by_title(doc, "Slow")["taskId"])["status"] == "running"
        )
    except StopIteration:  # Slow is not planned, or has no worker, yet
        return False


@pytest.mark.slow
def test_kill_9_of_the_supervisor_then_supervise_continues_and_fences_old_generations(tmp_path: Path) -> None:
    repo = project(tmp_path, max_workers=1)
    slow = child("s", "Slow", [[write_step("src/s.txt", "s\n"), commit_step("Add s"), "{ sleep = 4 }", HANDOFF]])
    run_id = start(repo, recipe(tmp_path, _simple("a", "Part A", "src/a.txt") + slow))
    try:
        wait_for(repo, run_id, _a_delivered_and_slow_running)
        delivered_before = refs(repo, f"refs/agentops/runs/{run_id}/deliveries/")
        os.kill(supervisor_pid(repo, run_id), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while supervisor_running(repo, run_id):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        second = cli(repo, "agentops-run", "resume", run_id)  # spawns a new supervisor in the background
        assert second.returncode == 0, second.stderr
        doc = wait_for(repo, run_id, children_settled)
        slow_task = task_by_title(doc, "Slow")
        assert slow_task["status"] == "delivered"
        assert worker_of(doc, slow_task["taskId"])["generation"] >= 2  # the old generation was fenced off
        after = refs(repo, f"refs/agentops/runs/{run_id}/deliveries/")
        assert {k: v for k, v in after.items() if k in delivered_before} == delivered_before
        log = events(repo, run_id)
        assert [e["code"] for e in log].count("RUN_SUPERVISOR_START") == 2
        assert any(e["code"] == "WORKER_RECONCILED" for e in log)
    finally:
        stop(repo, run_id)
    git(repo, "fsck", "--strict")


@pytest.mark.slow
def test_a_second_supervisor_is_refused(tmp_path: Path) -> None:
    repo = project(tmp_path)
    run_id = start(repo, recipe(tmp_path, _simple("a", "Part A", "src/a.txt")))
    try:
        second = cli(repo, "agentops-run", "supervise", run_id, timeout=30)
        assert second.returncode == 3 and "RUN_SUPERVISOR_ACTIVE" in second.stderr
    finally:
        stop(repo, run_id)


def test_start_refuses_an_untrusted_policy_and_unknown_targets(tmp_path: Path) -> None:
    repo = project(tmp_path)
    path = recipe(tmp_path, _simple("a", "Part A", "src/a.txt"))
    missing = cli(repo, "agentops-run", "start", "--goal", "g", "--recipe", str(path), "--target", "nope")
    assert missing.returncode == 3 and "OBJECT_MISSING" in missing.stderr
    no_recipe = cli(repo, "agentops-run", "start", "--goal", "g")
    assert no_recipe.returncode == 3 and "RUN_RECIPE_INVALID" in no_recipe.stderr
    cli(repo, "agentops-policy", "untrust")
    untrusted = cli(repo, "agentops-run", "start", "--goal", "g", "--recipe", str(path))
    assert untrusted.returncode == 3 and "POLICY_UNTRUSTED" in untrusted.stderr
    assert refs(repo, "refs/agentops/") == {}
    assert cli(repo, "agentops-run", "status").returncode == 3


@pytest.mark.slow
def test_question_waits_for_an_answer_then_resumes(tmp_path: Path) -> None:
    repo = project(tmp_path)
    asking = child(
        "q", "Asker", [['{ question = "Which name?" }', write_step("src/q.txt", "q\n"), commit_step("q"), HANDOFF]]
    )
    run_id = start(repo, recipe(tmp_path, asking))
    try:
        # the question is recorded first, then every writer is stopped: wait for both, not for the first alone
        doc = wait_for(
            repo,
            run_id,
            lambda d: (
                d["status"] == "awaiting-input"
                and all(w["status"] in ("fenced", "stopped", "assigned") for w in d["workers"])
            ),
        )
        question = next(q for q in doc["questions"] if q["answer"] is None)
        assert question["prompt"] == "Which name?"
        bad = cli(repo, "agentops-run", "answer", run_id, "q-nope", "x")
        assert bad.returncode == 3 and "RUN_QUESTION_UNKNOWN" in bad.stderr
        answered = cli(repo, "agentops-run", "answer", run_id, question["questionId"], "Call it q")
        assert answered.returncode == 0, answered.stderr
        doc = wait_for(repo, run_id, children_settled)
        assert task_by_title(doc, "Asker")["status"] == "delivered"
    finally:
        stop(repo, run_id)


def test_status_json_lists_workers_and_tasks(tmp_path: Path) -> None:
    repo = project(tmp_path)
    listing = cli(repo, "agentops-run", "list", "--json")
    assert listing.returncode == 0 and json.loads(listing.stdout) == {"runs": []}
    run_id = start(repo, recipe(tmp_path, _simple("a", "Part A", "src/a.txt")))
    try:
        doc = status(repo, run_id)
        assert doc["runId"] == run_id and doc["goal"] == "Build the parts" and doc["target"] == "main"
        assert doc["workers"][0]["workerId"] == "coordinator" and doc["budget"]["limitSeconds"] == 5400
        human = cli(repo, "agentops-run", "status", run_id)
        assert human.returncode == 0 and f"run {run_id}:" in human.stdout and "coordinator" in human.stdout
        runs = json.loads(cli(repo, "agentops-run", "list", "--json").stdout)["runs"]
        assert [r["runId"] for r in runs] == [run_id]
    finally:
        stop(repo, run_id)
    log = cli(repo, "agentops-run", "log", run_id)
    assert log.returncode == 0 and "RUN_CREATED" in log.stdout and "RUN_STOPPED" in log.stdout
