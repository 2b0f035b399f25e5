"""No uncommitted edit is ever lost: at every way a run's worktree goes away -- the run ending, a stop, a kill -9 of
the supervisor, a worker blocked, a generation fenced -- the agent's work that was never handed off is in a salvage
ref, and ``git agentops-run salvage --restore`` brings it back byte for byte."""

from __future__ import annotations

import json
import os
import signal
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ..conftest import git
from ..helpers import HANDOFF, child, commit_step, recipe_text, toml, write_step
from ..runkit import (
    command,
    project,
    recipe,
    start,
    stop,
    supervisor_pid,
    wait_for,
    wait_supervisor_gone,
)

WIP = "work in progress: never committed \u2014 \u00e9\u00e8\n" * 40
"""What an agent writes and never commits (non-ASCII, longer than a line)."""
SLEEP = "{ sleep = 600 }"


def _run(repo: Path, *args: str) -> dict[str, Any]:
    done = command(repo, "agentops-run", *args, "--json")
    assert done.returncode in (0, 1), done.stderr
    return dict(json.loads(done.stdout))


def _worktree(repo: Path, run_id: str, *, has: str) -> Path:
    """The child's worktree, once its agent wrote ``has`` there."""
    doc = wait_for(repo, run_id, lambda d: any(w["role"] == "child" for w in d["workers"]), timeout=120)
    worktree = Path(next(w["worktree"] for w in doc["workers"] if w["role"] == "child"))
    deadline = time.monotonic() + 120
    while not (worktree / has).exists():
        assert time.monotonic() < deadline, f"the agent never wrote {has}"
        time.sleep(0.1)
    time.sleep(0.3)  # the write step is one write_text: done once the file is whole
    return worktree


def _restored(repo: Path, run_id: str, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    listed = _run(repo, "salvage", run_id)["salvage"]
    children = [s for s in listed if s["workerId"] != "coordinator"]
    assert children, f"no salvage of the child: {listed}"
    which = f"{children[-1]['workerId']}/{children[-1]['generation']}"
    into = tmp_path / "restored"
    restored = _run(repo, "salvage", run_id, "--restore", which, "--into", str(into))
    assert Path(restored["path"]) == into.resolve()
    return into, children[-1]


def _clean(repo: Path, run_id: str, worktree: Path) -> None:
    cleaned = _run(repo, "clean", run_id)
    assert cleaned["kept"] == {}, cleaned
    assert not worktree.exists()


def test_invariant_the_run_ending_keeps_what_was_never_handed_off(tmp_path: Path) -> None:
    """The coordinator's notes, written and never committed, when the run completes and removes its worktrees."""
    repo = project(tmp_path)
    doc = tomllib.loads(
        recipe_text(child("a", "Part A", [[write_step("src/a.txt", "a\n"), commit_step("a"), HANDOFF]]), finalize=True)
    )
    doc["coordinator"]["steps"] = [write_step("notes/plan.md", WIP)]
    (tmp_path / "recipe.toml").write_text(toml(doc))
    run_id = start(repo, tmp_path / "recipe.toml")
    status = wait_for(repo, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=180)
    assert status["status"] == "complete"
    worktrees = [Path(w["worktree"]) for w in status["workers"]]
    wait_for(repo, run_id, lambda d: not any(w.exists() for w in worktrees), timeout=60)  # the clean-up removed them
    listed = _run(repo, "salvage", run_id)["salvage"]
    assert [s["workerId"] for s in listed] == ["coordinator"], listed  # the child handed everything off
    into = tmp_path / "restored"
    _run(repo, "salvage", run_id, "--restore", "coordinator", "--into", str(into))
    assert (into / "notes" / "plan.md").read_text() == WIP


@pytest.mark.parametrize("how", ["stop", "kill-9", "fence"])
def test_invariant_stopped_killed_or_fenced_work_is_salvaged_by_clean(tmp_path: Path, how: str) -> None:
    repo = project(tmp_path)
    first = [write_step("src/a.txt", "committed, not handed off\n"), commit_step("Add a"), write_step("wip.txt", WIP)]
    second = [write_step("wip2.txt", WIP + "second generation\n"), SLEEP]
    run_id = start(repo, recipe(tmp_path, child("a", "Part A", [[*first, SLEEP], second]), finalize=True))
    worktree = _worktree(repo, run_id, has="wip.txt")
    if how in ("kill-9", "fence"):
        os.kill(supervisor_pid(repo, run_id), signal.SIGKILL)
        wait_supervisor_gone(repo, run_id)
    expected = {"wip.txt": WIP, "src/a.txt": "committed, not handed off\n"}
    if how == "fence":  # a new supervisor fences the first generation and starts the second in the same worktree
        resumed = command(repo, "agentops-run", "resume", run_id, "--json")
        assert resumed.returncode == 0, resumed.stderr
        _worktree(repo, run_id, has="wip2.txt")
        expected["wip2.txt"] = WIP + "second generation\n"
    stop(repo, run_id)
    _clean(repo, run_id, worktree)
    into, salvaged = _restored(repo, run_id, tmp_path)
    for rel, content in expected.items():
        assert (into / rel).read_text() == content
    assert git(into, "log", "-1", "--format=%s") == "Add a"  # the commit never handed off is HEAD again
    untracked = sorted(f"?? {rel}" for rel in expected if rel.startswith("wip"))
    assert git(into, "status", "--porcelain").splitlines() == untracked  # uncommitted again, as the agent left it
    assert "wip.txt" in salvaged["paths"]


def test_invariant_a_blocked_worker_s_edits_are_salvaged_by_clean(tmp_path: Path) -> None:
    repo = project(tmp_path)
    failing = [write_step("wip.txt", WIP), {"exit": 3}]
    run_id = start(repo, recipe(tmp_path, child("a", "Part A", [failing, failing, failing]), finalize=True))
    doc = wait_for(repo, run_id, lambda d: any(w["status"] == "blocked" for w in d["workers"]), timeout=180)
    worktree = Path(next(w["worktree"] for w in doc["workers"] if w["role"] == "child"))
    stop(repo, run_id)
    _clean(repo, run_id, worktree)
    into, _ = _restored(repo, run_id, tmp_path)
    assert (into / "wip.txt").read_text() == WIP


def test_clean_refuses_an_active_run_and_keeps_everything(tmp_path: Path) -> None:
    repo = project(tmp_path)
    run_id = start(repo, recipe(tmp_path, child("a", "Part A", [[write_step("wip.txt", WIP), SLEEP]]), finalize=True))
    worktree = _worktree(repo, run_id, has="wip.txt")
    done = command(repo, "agentops-run", "clean", run_id)
    assert done.returncode == 3 and "error[RUN_SUPERVISOR_ACTIVE]" in done.stderr
    os.kill(supervisor_pid(repo, run_id), signal.SIGKILL)
    wait_supervisor_gone(repo, run_id)
    done = command(repo, "agentops-run", "clean", run_id)  # no supervisor, but the run is still active
    assert done.returncode == 3 and "error[RUN_NOT_ACTIVE]" in done.stderr
    assert (worktree / "wip.txt").read_text() == WIP
    stop(repo, run_id)
    _clean(repo, run_id, worktree)


def test_a_salvage_name_collision_keeps_the_worktree(tmp_path: Path) -> None:
    repo = project(tmp_path)
    run_id = start(repo, recipe(tmp_path, child("a", "Part A", [[write_step("wip.txt", WIP), SLEEP]]), finalize=True))
    worktree = _worktree(repo, run_id, has="wip.txt")
    stop(repo, run_id)
    doc = _run(repo, "status", run_id)
    worker = next(w for w in doc["workers"] if w["role"] == "child")
    taken = f"refs/agentops/runs/{run_id}/salvage/{worker['workerId']}/{worker['generation']}"
    git(repo, "update-ref", taken, "main")  # someone else's work under the name this salvage would take
    cleaned = _run(repo, "clean", run_id)
    assert "SALVAGE_EXISTS" in cleaned["kept"][worker["workerId"]]
    assert (worktree / "wip.txt").read_text() == WIP  # kept, whole
    assert git(repo, "rev-parse", taken) == git(repo, "rev-parse", "main")
