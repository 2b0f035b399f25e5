"""Real agent hosts complete runs: stand-ins for ``claude``, ``codex`` and ``opencode`` (tests/standins/) that take
the real CLIs' argument shapes, refuse what they refuse, follow only their prompt and end their turn one-shot.

With the policy exactly as ``git agentops-init`` writes it -- no hand edits -- a run is planned, delivered, reviewed
by the same host, published and receipted with each of the three as coordinator, children and reviewer; and with a
``command`` host wrapping a shell script."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ..conftest import git, make_repo
from ..runkit import events, status, stop, supervisor_log, wait_for

STANDINS = Path(__file__).resolve().parents[1] / "standins" / "bin"
GOAL = 'Write files: alpha.txt says "alpha"; beta.txt says "beta" after alpha.txt'
CHECK = """import pathlib, sys
bad = [p.name for p in pathlib.Path(".").glob("*.txt") if "BAD" in p.read_text()]
print("checked; bad:", bad)
sys.exit(1 if bad else 0)
"""
MAKEFILE = "test:\n\tpython3 check.py\n"


def _env(tmp_path: Path, *clis: str) -> dict[str, str]:
    """The environment with exactly these stand-ins on PATH (so ``init`` finds those and no others)."""
    bin_dir = tmp_path / "agent-bin"
    bin_dir.mkdir(exist_ok=True)
    for cli in clis:
        (bin_dir / cli).symlink_to(STANDINS / cli)
    codex_home = Path(os.environ["HOME"]) / ".codex"  # the person's provider, as people configure Codex
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        'model_provider = "mock"\n[model_providers.mock]\nname = "mock"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'env_key = "CODEX_API_KEY"\nwire_api = "responses"\n'
    )
    environ = {**os.environ, "PATH": os.pathsep.join([str(bin_dir), os.environ["PATH"]])}
    return {**environ, "CODEX_API_KEY": "test-key-for-the-stand-in"}


def _git(repo: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=180, check=False)


def _project(tmp_path: Path, env: dict[str, str], *, init: bool = True) -> Path:
    repo = make_repo(tmp_path / "repo", files={"check.py": CHECK, "Makefile": MAKEFILE, "README.md": "files\n"})
    if init:
        done = _git(repo, "agentops-init", "--yes", env=env)
        assert done.returncode == 0, done.stderr
    return repo


def _trust(repo: Path, env: dict[str, str]) -> None:
    git(repo, "add", ".agentops/policy.toml")
    git(repo, "commit", "-q", "-m", "Add the git-agentops policy")
    done = _git(repo, "agentops-policy", "trust", "--yes", env=env)
    assert done.returncode == 0, done.stderr


def _run(repo: Path, env: dict[str, str], *extra: str) -> str:
    done = _git(repo, "agentops-run", "start", "--goal", GOAL, "--detach", "--json", *extra, env=env)
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["runId"])


def _complete(repo: Path, run_id: str) -> dict[str, Any]:
    try:
        return wait_for(repo, run_id, lambda d: d["status"] in ("complete", "blocked", "budget-limited"), timeout=180)
    finally:
        stop(repo, run_id)


def _assert_published(repo: Path, run_id: str, doc: dict[str, Any], env: dict[str, str]) -> None:
    assert doc["status"] == "complete", supervisor_log(repo, run_id)
    assert git(repo, "show", "main:alpha.txt") == "alpha" and git(repo, "show", "main:beta.txt") == "beta"
    verified = _git(repo, "agentops-receipt", "verify", "main", "--json", env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    reviews = doc["integration"]["reviews"]
    assert [r["verdict"] for r in reviews] == ["approve"]


@pytest.mark.parametrize("cli", ["claude", "codex", "opencode"])
def test_a_run_completes_with_the_policy_init_writes(tmp_path: Path, cli: str) -> None:
    """Invariant: every agent CLI completes a run as coordinator, children and reviewer, one-shot, with the
    coordinator woken exactly once (to finalize) and each generation's usage recorded from the host's output."""
    env = _env(tmp_path, cli)
    repo = _project(tmp_path, env)
    policy = (repo / ".agentops" / "policy.toml").read_text()
    assert f'default_host = "{cli}"' in policy and f'reviewers = [\n    "{cli}",\n]' in policy.replace("'", '"')
    _trust(repo, env)
    run_id = _run(repo, env)
    doc = _complete(repo, run_id)
    _assert_published(repo, run_id, doc, env)
    assert doc["workers"][0]["role"] == "coordinator" and doc["workers"][0]["generation"] == 2
    starts = [
        e for e in events(repo, run_id) if e["code"] == "WORKER_STARTING" and e["data"]["workerId"] == "coordinator"
    ]
    assert len(starts) == 2 and "woken: delivered" in starts[1]["summary"]
    assert doc["budget"]["usedTokens"] > 0
    if cli != "codex":  # codex reports tokens, not dollars
        assert doc["budget"]["usedCostUsd"] > 0
    assert all(w["session"] for w in doc["workers"])  # every host reported a session id
    # reviewers spend the budget too: the total is every worker generation plus every reviewer attempt
    reviewed = doc["budget"]["reviewUsage"]
    assert [r["reviewer"] for r in reviewed] == [cli] and reviewed[0]["inputTokens"] > 0
    spent = [u for w in doc["workers"] for u in w["usage"]] + reviewed
    assert doc["budget"]["usedTokens"] == sum(u["inputTokens"] + u["outputTokens"] for u in spent)
    assert not doc["budget"]["usagePartial"]  # each agent ended its turn after its handoff: nothing was lost


WRAPPER = """#!/bin/sh
# A command host: any script. This one hands its prompt file to the opencode stand-in.
exec opencode run --format json "$(cat "$1")"
"""


def test_a_run_completes_with_a_command_host_wrapping_a_shell_script(tmp_path: Path) -> None:
    env = _env(tmp_path, "opencode")
    repo = _project(tmp_path, env, init=False)
    (repo / "agent.sh").write_text(WRAPPER)
    (repo / "agent.sh").chmod(0o755)
    git(repo, "add", "agent.sh")
    git(repo, "commit", "-q", "-m", "the agent wrapper")
    from git_agentops.model.hosts import opencode_config

    policy = repo / ".agentops" / "policy.toml"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text(
        "version = 1\n"
        '[run]\ndefault_host = "wrapper"\n'
        '[[verify.commands]]\nid = "make-test"\nargv = ["make", "test"]\n'
        f'[hosts.wrapper]\nkind = "command"\nargv = ["{repo}/agent.sh", "{{prompt_file}}"]\n'
        'writable = ["~/.local/share/opencode"]\n'  # what the wrapped CLI writes: the sandbox allows no more
        f"env = {{ OPENCODE_CONFIG_CONTENT = {json.dumps(opencode_config([['make', 'test']]))} }}\n"
        '[review]\nrequired = 1\nreviewers = ["wrapper"]\n'
    )
    _trust(repo, env)
    run_id = _run(repo, env)
    doc = _complete(repo, run_id)
    _assert_published(repo, run_id, doc, env)


def test_start_refuses_a_host_whose_binary_is_missing(tmp_path: Path) -> None:
    env = _env(tmp_path, "claude")
    repo = _project(tmp_path, env)
    _trust(repo, env)
    bare_path = {**os.environ}  # no stand-ins on PATH: claude is not installed
    done = _git(repo, "agentops-run", "start", "--goal", GOAL, "--json", env=bare_path)
    assert done.returncode == 3
    error = json.loads(done.stdout or done.stderr)["error"]
    assert error["code"] == "RUN_HOST_FAILED" and "not on PATH" in error["message"]
    assert git(repo, "for-each-ref", "refs/agentops/") == ""  # nothing was created


def test_max_cost_usd_stops_the_run_and_resume_with_more_budget_finishes_it(tmp_path: Path) -> None:
    env = _env(tmp_path, "claude")
    repo = _project(tmp_path, env)
    policy = repo / ".agentops" / "policy.toml"
    policy.write_text(policy.read_text().replace("[run]\n", "[run]\nmax_cost_usd = 0.001\n", 1))
    _trust(repo, env)
    run_id = _run(repo, env)
    try:
        doc = wait_for(repo, run_id, lambda d: d["status"] == "budget-limited", timeout=120)
        assert "cost budget" in doc["statusReason"] and doc["budget"]["usedCostUsd"] >= 0.001
        resumed = _git(repo, "agentops-run", "resume", run_id, "--add-budget", "$5", env=env)
        assert resumed.returncode == 0, resumed.stderr
        doc = wait_for(repo, run_id, lambda d: d["status"] == "complete", timeout=180)
    finally:
        stop(repo, run_id)
    assert doc["budget"]["costLimitUsd"] == pytest.approx(5.001)
    assert status(repo, run_id)["status"] == "complete"


def test_a_prompt_with_quotes_substitutions_and_backticks_reaches_the_agent_verbatim(tmp_path: Path) -> None:
    """Invariant: the goal -- text a person or a coordinator chose -- reaches the agent as data; no shell runs it."""
    env = _env(tmp_path, "claude")
    repo = _project(tmp_path, env)
    _trust(repo, env)
    canary = tmp_path / "PWNED"
    content = f'it\'s $(touch {canary}) and `touch {canary}2` and \\"q\\"'
    goal = f'Write files: alpha.txt says "{content}"'
    done = _git(repo, "agentops-run", "start", "--goal", goal, "--detach", "--json", env=env)
    assert done.returncode == 0, done.stderr
    run_id = str(json.loads(done.stdout)["runId"])
    doc = _complete(repo, run_id)
    assert doc["status"] == "complete", supervisor_log(repo, run_id)
    assert not canary.exists() and not Path(f"{canary}2").exists()
    assert git(repo, "show", "main:alpha.txt") == content  # byte for byte, backslashes and all


def test_a_host_that_prints_no_json_where_json_was_asked_is_logged_and_the_run_goes_on(tmp_path: Path) -> None:
    env = _env(tmp_path, "claude")
    repo = _project(tmp_path, env)
    policy = repo / ".agentops" / "policy.toml"
    text = policy.read_text().replace('"stream-json",\n    "--verbose",', '"text",')
    assert '"text",' in text
    policy.write_text(text)
    _trust(repo, env)
    run_id = _run(repo, env)
    doc = _complete(repo, run_id)
    _assert_published(repo, run_id, doc, env)
    unparsed = [e for e in events(repo, run_id) if e["code"] == "HOST_OUTPUT_UNPARSED"]
    assert unparsed and doc["budget"]["usedTokens"] == 0  # usage unknown, nothing guessed


def test_a_session_that_no_longer_resumes_falls_back_to_a_fresh_one(tmp_path: Path) -> None:
    """A child fails verification and is restarted by resuming its session; the resume is refused (the CLI no longer
    knows that session), so the supervisor starts it fresh -- without counting the failed resume as the agent's
    failure -- and the same verification failure twice still blocks the task."""
    env = _env(tmp_path, "claude")
    repo = _project(tmp_path, env)
    policy = repo / ".agentops" / "policy.toml"
    text = policy.read_text()
    argv_start = text.index("argv = [", text.index("[hosts.claude]"))
    argv_end = text.index("]\n", argv_start) + 2
    argv = text[argv_start:argv_end]
    resume = argv.replace("argv = [", "resume_argv = [", 1).replace(
        '"{prompt}",', '"{prompt}",\n    "--resume",\n    "a-session-that-is-gone",', 1
    )
    policy.write_text(text[:argv_end] + resume + text[argv_end:])
    _trust(repo, env)
    goal = 'Write files: alpha.txt says "BAD"'
    done = _git(repo, "agentops-run", "start", "--goal", goal, "--detach", "--json", env=env)
    assert done.returncode == 0, done.stderr
    run_id = str(json.loads(done.stdout)["runId"])
    try:
        wait_for(repo, run_id, lambda d: any(t["status"] == "blocked" for t in d["tasks"] if t["parent"]), timeout=180)
    finally:
        stop(repo, run_id)
    log = events(repo, run_id)
    assert any(e["code"] == "HOST_RESUME_FAILED" for e in log)
    failed = [e for e in log if e["code"] == "WORKER_FAILED" and e["data"]["workerId"] != "coordinator"]
    assert len(failed) == 2  # two verification failures; the refused resume is not one of them


def test_eight_children_wake_a_one_shot_coordinator_once_to_finalize(tmp_path: Path) -> None:
    env = _env(tmp_path, "claude")
    repo = _project(tmp_path, env)
    policy = repo / ".agentops" / "policy.toml"
    policy.write_text(policy.read_text().replace("max_workers = 3", "max_workers = 4"))
    _trust(repo, env)
    items = "; ".join(f'f{i}.txt says "{i}"' for i in range(8))
    done = _git(repo, "agentops-run", "start", "--goal", f"Write files: {items}", "--detach", "--json", env=env)
    assert done.returncode == 0, done.stderr
    run_id = str(json.loads(done.stdout)["runId"])
    doc = _complete(repo, run_id)
    assert doc["status"] == "complete", supervisor_log(repo, run_id)
    assert len([t for t in doc["tasks"] if t["parent"]]) == 8
    starts = [
        e for e in events(repo, run_id) if e["code"] == "WORKER_STARTING" and e["data"]["workerId"] == "coordinator"
    ]
    assert len(starts) == 2  # planned once, woken once to finalize: never busy-waited


def test_init_writes_host_sections_doctor_lists_them_and_trust_shows_their_capabilities(tmp_path: Path) -> None:
    env = _env(tmp_path, "codex", "opencode")
    repo = _project(tmp_path, env)
    policy = (repo / ".agentops" / "policy.toml").read_text()
    assert "[hosts.codex]" in policy and "[hosts.opencode]" in policy and 'version = "codex-cli 0.171.0"' in policy
    assert 'default_host = "codex"' in policy and "OPENCODE_CONFIG_CONTENT" in policy
    doctor = json.loads(_git(repo, "agentops-doctor", "--json", env=env).stdout)
    agents = next(c for c in doctor["checks"] if c["id"] == "agents")
    assert [a["kind"] for a in agents["value"]] == ["codex", "opencode"]
    git(repo, "add", ".agentops/policy.toml")
    git(repo, "commit", "-q", "-m", "policy")
    trusted = _git(repo, "agentops-policy", "trust", "--yes", env=env)
    assert trusted.returncode == 0, trusted.stderr
    assert (
        "host codex (codex): codex exec --sandbox workspace-write --add-dir '{git_common_dir}' "
        "-c allow_login_shell=false --dangerously-bypass-hook-trust --json '{prompt}'" in trusted.stdout
    )
    assert "resumes a session with:" in trusted.stdout and "env OPENCODE_CONFIG_CONTENT=" in trusted.stdout
    assert "runs with your environment minus its other credentials" in trusted.stdout
    assert "is given these credentials of your environment: OPENAI_API_KEY, CODEX_API_KEY" in trusted.stdout
