"""A run that ends takes its clean verification checkouts with it; what a crash leaves is swept later.

Before, a stopped run left its checkouts in ``$XDG_CACHE_HOME/git-agentops/verify/`` (382 MB for three workers).
End to end with the scripted agent: ``run stop`` with a live supervisor and with a killed one, and a complete run;
then the sweep of leftovers -- a removal cut short, a run that no longer exists -- that keeps a live run's."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from git_agentops.clock import FixedClock
from git_agentops.gitstore.repo import open_store
from git_agentops.verify.proof import slots_dir, sweep_slots

from ..helpers import simple_child
from ..runkit import (
    children_settled,
    command,
    project,
    recipe,
    start,
    supervisor_pid,
    supervisor_running,
    wait_for,
    wait_supervisor_gone,
)


def _checkouts(repo: Path, run_id: str) -> Path:
    return slots_dir(dict(os.environ), open_store(repo, clock=FixedClock()), run_id)


def _delivered_run(tmp_path: Path) -> tuple[Path, str]:
    """A run whose two children handed off (so each has a clean checkout) and that goes on (no finalize)."""
    repo = project(tmp_path)
    parts = simple_child("a", "src/a.txt") + simple_child("b", "src/b.txt")
    run_id = start(repo, recipe(tmp_path, parts))
    wait_for(repo, run_id, children_settled)
    assert sorted(p.name for p in _checkouts(repo, run_id).iterdir() if p.is_dir()), "no clean checkout was made"
    return repo, run_id


def test_run_stop_removes_the_runs_clean_checkouts_and_dead_runs_leftovers(tmp_path: Path) -> None:
    repo, run_id = _delivered_run(tmp_path)
    mine = _checkouts(repo, run_id)
    cut_short = mine.parent / ".removing-run-old-123-abcd"  # what a removal killed halfway leaves
    (cut_short / "w1" / "pkg").mkdir(parents=True)
    (cut_short / "w1" / "pkg" / "mod.py").write_text("x = 1\n")
    (cut_short / "w1" / "pkg").chmod(0o500)  # remove_tree copes with what the commands made read-only
    gone = mine.parent / "run-20200101-000000-gone00"  # a run whose refs were deleted
    (gone / "w1").mkdir(parents=True)
    done = command(repo, "agentops-run", "stop", run_id)
    assert done.returncode == 0, done.stderr
    wait_supervisor_gone(repo, run_id)
    assert not mine.exists(), sorted(mine.rglob("*"))[:10]
    assert not cut_short.exists() and not gone.exists()
    assert [p.name for p in mine.parent.iterdir()] == []


def test_run_stop_after_the_supervisor_was_killed_removes_the_checkouts(tmp_path: Path) -> None:
    repo, run_id = _delivered_run(tmp_path)
    os.kill(supervisor_pid(repo, run_id), signal.SIGKILL)
    wait_supervisor_gone(repo, run_id)
    assert _checkouts(repo, run_id).is_dir()  # a crash leaves them: the run may resume
    done = command(repo, "agentops-run", "stop", run_id)
    assert done.returncode == 0, done.stderr
    assert not _checkouts(repo, run_id).exists()


def test_a_complete_run_leaves_no_checkout_and_a_live_runs_are_never_swept(tmp_path: Path) -> None:
    repo = project(tmp_path)
    live = start(repo, recipe(tmp_path, simple_child("a", "src/a.txt"), name="live.toml"))
    wait_for(repo, live, children_settled)
    done = start(repo, recipe(tmp_path, simple_child("b", "src/b.txt"), finalize=True, name="done.toml"))
    wait_for(repo, done, lambda doc: doc["status"] == "complete", timeout=180)
    wait_supervisor_gone(repo, done)
    assert not _checkouts(repo, done).exists()
    assert supervisor_running(repo, live) and _checkouts(repo, live).is_dir()  # its supervisor's exit swept around it
    assert sweep_slots(dict(os.environ), open_store(repo, clock=FixedClock())) == []
    assert _checkouts(repo, live).is_dir()
    command(repo, "agentops-run", "stop", live)
    wait_supervisor_gone(repo, live)
    assert not _checkouts(repo, live).exists()
