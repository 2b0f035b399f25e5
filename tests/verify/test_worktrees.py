"""Worker worktrees and setup; budget, storm and controls of a run."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from git_agentops.clock import FixedClock
from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.repo import Store
from git_agentops.model.policy import Policy
from git_agentops.model.run import Interval, Run, close_intervals, is_restart_storm, open_interval, used_seconds
from git_agentops.policy.load import policy_from_bytes
from git_agentops.verify.workspaces import ensure_setup, ensure_worktree, placement, read_record

from ..conftest import git
from ..helpers import child, write_step
from ..runkit import cli, project, recipe, start, status, stop, supervisor_running, wait_for


def test_worktree_is_created_listed_and_owned(store: Store, repo_path: Path, clock: FixedClock) -> None:
    head = git(repo_path, "rev-parse", "HEAD")
    where = placement(repo_path, ".agentops/worktrees", "run-x", "worker-1", "refs/heads/agentops/run-x/worker-1")
    assert ensure_worktree(store, where, start_commit=head, run_id="run-x", worker_id="worker-1", clock=clock)
    assert f"worktree {where.path}" in git(repo_path, "worktree", "list", "--porcelain")
    assert git(where.path, "status", "--porcelain") == ""
    record = read_record(where.path)
    assert record is not None and record["runId"] == "run-x" and record["workerId"] == "worker-1"
    assert not (where.path / "agentops").exists()  # the record lives in the worktree's git dir, not its files
    # adopted when it is ours, refused when it is someone else's
    assert not ensure_worktree(store, where, start_commit=head, run_id="run-x", worker_id="worker-1", clock=clock)
    with pytest.raises(AgentOpsError) as caught:
        ensure_worktree(store, where, start_commit=head, run_id="run-x", worker_id="worker-2", clock=clock)
    assert caught.value.code == "RUN_WORKTREE_OWNERSHIP"
    stranger = placement(repo_path, ".agentops/worktrees", "run-x", "worker-3", "refs/heads/agentops/run-x/worker-3")
    stranger.path.mkdir(parents=True)
    (stranger.path / "mine.txt").write_text("not a worktree")
    with pytest.raises(AgentOpsError) as foreign:
        ensure_worktree(store, stranger, start_commit=head, run_id="run-x", worker_id="worker-3", clock=clock)
    assert foreign.value.code == "RUN_WORKTREE_OWNERSHIP"
    with pytest.raises(AgentOpsError) as escape:
        placement(repo_path, "../outside", "run-x", "w", "refs/heads/x")
    assert escape.value.code == "PATH_ESCAPE"


def test_setup_runs_once_and_an_interrupted_setup_needs_a_user_resume(
    store: Store, repo_path: Path, clock: FixedClock, tmp_path: Path
) -> None:
    head = git(repo_path, "rev-parse", "HEAD")
    where = placement(repo_path, ".agentops/worktrees", "run-s", "w", "refs/heads/agentops/run-s/w")
    ensure_worktree(store, where, start_commit=head, run_id="run-s", worker_id="w", clock=clock)
    counter = where.path / "count"  # setup writes its worktree (and nothing of the repository's state)
    env = dict(os.environ)
    ran = _setup_policy(f"echo x >> {counter}")
    assert ensure_setup(store, where.path, ran, environ=env, clock=clock, last_user_resume=None) == "ran"
    assert ensure_setup(store, where.path, ran, environ=env, clock=clock, last_user_resume=None) == "done"
    assert counter.read_text().count("x") == 1
    failing = _setup_policy("exit 7")
    with pytest.raises(AgentOpsError) as failed:
        ensure_setup(store, where.path, failing, environ=env, clock=clock, last_user_resume=None)
    assert failed.value.code == "RUN_SETUP_FAILED" and "exited 7" in failed.value.message
    with pytest.raises(AgentOpsError) as interrupted:  # the attempt marker stays: no replay without a resume
        ensure_setup(store, where.path, failing, environ=env, clock=clock, last_user_resume=None)
    assert interrupted.value.code == "RUN_SETUP_RECOVERY_REQUIRED"
    clock.advance(10)
    with pytest.raises(AgentOpsError) as replayed:  # a user resume after the attempt allows a replay
        ensure_setup(store, where.path, failing, environ=env, clock=clock, last_user_resume=clock.now())
    assert replayed.value.code == "RUN_SETUP_FAILED"


def _setup_policy(script: str) -> Policy:
    """A policy whose one setup step runs ``script`` in the shell."""
    text = f'version = 1\n[run]\ntarget = "main"\n[[worktree.setup]]\nargv = ["sh", "-c", {json.dumps(script)}]\n'
    return policy_from_bytes(text.encode())


def _run(**kw: object) -> Run:
    base: dict[str, object] = {
        "run_id": "r",
        "goal": "g",
        "target": "main",
        "base_commit": "0" * 40,
        "host": "scripted",
        "repository": "/x",
        "policy_config_hash": "0" * 64,
        "budget_seconds": 60,
        "created_at": 0.0,
    }
    base.update(kw)
    return Run(**base)  # type: ignore[arg-type]


def test_budget_intervals_close_on_crash_and_count_only_supervised_time() -> None:
    run = open_interval(_run(), 100.0)
    assert open_interval(run, 150.0) == run  # only one open interval
    run = close_intervals(run, 130.0)
    assert used_seconds(run.intervals, 1000.0) == 30.0
    run = open_interval(run, 500.0)
    assert used_seconds(run.intervals, 510.0) == 40.0
    assert close_intervals(_run(intervals=(Interval(50.0),)), 10.0).intervals == (Interval(50.0, 50.0),)


def test_restart_storm_counts_starts_since_the_last_user_resume() -> None:
    assert not is_restart_storm(_run(supervisor_starts=(1.0, 2.0)), 10.0)
    assert is_restart_storm(_run(supervisor_starts=(1.0, 2.0, 3.0)), 10.0)
    assert not is_restart_storm(_run(supervisor_starts=(1.0, 2.0, 3.0), last_user_resume=2.5), 10.0)
    assert not is_restart_storm(_run(supervisor_starts=(1.0, 2.0, 3.0)), 1000.0)  # outside the 5-minute window


@pytest.mark.slow
def test_budget_exhaustion_makes_the_run_budget_limited(tmp_path: Path) -> None:
    repo = project(tmp_path)
    slow = child("s", "Slow", [[write_step("src/s.txt", "s\n"), "{ sleep = 30 }"]])
    path = recipe(tmp_path, slow)
    started = time.monotonic()
    done = subprocess.run(
        ["git", "agentops-run", "start", "--goal", "g", "--recipe", str(path), "--budget", "3s", "--json"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr  # budget-limited is not "failed", but the run did not complete
    result = json.loads(done.stdout)
    assert result["status"] == "budget-limited" and time.monotonic() - started < 20
    doc = status(repo, result["runId"])
    assert doc["budget"]["usedSeconds"] >= 3 and all(w["status"] != "running" for w in doc["workers"])


@pytest.mark.slow
def test_pause_stops_writers_and_resume_continues(tmp_path: Path) -> None:
    repo = project(tmp_path)
    run_id = start(
        repo,
        recipe(
            tmp_path,
            child(
                "a",
                "Part A",
                [["{ sleep = 2 }", write_step("src/a.txt", "a\n"), '{ commit = "a" }', '{ request = "handoff" }']],
            ),
        ),
    )
    try:
        wait_for(repo, run_id, lambda d: any(t["parent"] for t in d["tasks"]))
        paused = cli(repo, "agentops-run", "pause", run_id)
        assert paused.returncode == 0, paused.stderr
        deadline = time.monotonic() + 20
        while supervisor_running(repo, run_id):  # the supervisor stops the writers and exits
            assert time.monotonic() < deadline
            time.sleep(0.1)
        doc = status(repo, run_id)
        assert doc["status"] == "paused" and all(w["status"] != "running" for w in doc["workers"])
        refused = cli(repo, "agentops-run", "supervise", run_id)
        assert refused.returncode == 3 and "RUN_NOT_ACTIVE" in refused.stderr
        resumed = cli(repo, "agentops-run", "resume", run_id)
        assert resumed.returncode == 0, resumed.stderr
        doc = wait_for(repo, run_id, lambda d: all(t["status"] == "delivered" for t in d["tasks"] if t["parent"]))
        assert doc["status"] == "active"
    finally:
        stop(repo, run_id)


def test_detaching_a_head_never_writes_through_a_link_in_the_admin_directory(tmp_path: Path) -> None:
    """Invariant: the temporary file detach_head writes is created afresh (O_EXCL, O_NOFOLLOW): a symlink left at
    its name -- an agent can write in its admin directory -- is removed, and the file it points to is untouched."""
    from git_agentops.gitstore.worktree import detach_head

    admin = tmp_path / "admin"
    admin.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (admin / f"HEAD.agentops-tmp-{os.getpid()}").symlink_to(victim)
    commit = "1" * 40
    detach_head(admin, commit)
    assert victim.read_text() == "precious\n"
    assert (admin / "HEAD").read_text() == f"{commit}\n" and not (admin / "HEAD").is_symlink()
    assert sorted(p.name for p in admin.iterdir()) == ["HEAD"]
