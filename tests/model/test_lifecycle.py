"""The coordinator's lifecycle with one-shot hosts: it ends its turn after planning, idles, and is woken once per
event that needs it (every child delivered, a child blocked); ``finalize = "auto"`` integrates without waking it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..helpers import HANDOFF, child, commit_step, simple_child, write_step
from ..runkit import children_settled, events, project, recipe, start, status, stop, wait_for


def _starts(log: list[dict[str, Any]], worker: str) -> list[dict[str, Any]]:
    return [e for e in log if e["code"] == "WORKER_STARTING" and e["data"].get("workerId") == worker]


def test_a_one_shot_coordinator_idles_after_planning_and_is_woken_once_to_finalize(tmp_path: Path) -> None:
    """Invariant: exiting 0 after planning is idle, not a failure; the coordinator is woken exactly once when every
    child is delivered, and its finalize completes the run."""
    repo = project(tmp_path)
    run_id = start(
        repo,
        recipe(
            tmp_path,
            simple_child("a", "src/a.txt") + simple_child("b", "src/b.txt", ["a"]),
            finalize=True,
            one_shot=True,
        ),
    )
    try:
        doc = wait_for(repo, run_id, lambda d: d["status"] == "complete", timeout=120)
    finally:
        stop(repo, run_id)
    log = events(repo, run_id)
    starts = _starts(log, "coordinator")
    assert len(starts) == 2, [e["summary"] for e in starts]  # the first start, and one wake to finalize
    assert "woken: delivered" in starts[1]["summary"]
    assert any(e["code"] == "WORKER_IDLE" for e in log)
    assert not any(e["code"] == "WORKER_FAILED" and e["data"].get("workerId") == "coordinator" for e in log)
    coordinator = next(w for w in doc["workers"] if w["role"] == "coordinator")
    assert coordinator["generation"] == 2


def test_finalize_auto_integrates_without_waking_the_coordinator(tmp_path: Path) -> None:
    repo = project(tmp_path, run_options='finalize = "auto"')
    run_id = start(repo, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True, one_shot=True))
    try:
        wait_for(repo, run_id, lambda d: d["status"] == "complete", timeout=120)
    finally:
        stop(repo, run_id)
    log = events(repo, run_id)
    assert len(_starts(log, "coordinator")) == 1  # never woken: the supervisor finalized by itself
    assert any(e["code"] == "INTEGRATION_REQUESTED" and "every child is delivered" in e["summary"] for e in log)


def test_a_blocked_child_wakes_the_idle_coordinator_once(tmp_path: Path) -> None:
    """A child blocked on no progress is one event: the coordinator is woken for it once (and, being a recipe, it
    exits 2 then -- a failure the supervisor records as such)."""
    repo = project(tmp_path)
    bad = child("bad", "Bad part", [[write_step("src/bad.txt", "BAD\n"), commit_step("bad"), HANDOFF]])
    run_id = start(repo, recipe(tmp_path, bad + simple_child("good", "src/good.txt"), one_shot=True))
    try:
        wait_for(repo, run_id, children_settled, timeout=120)
        doc = wait_for(
            repo, run_id, lambda d: any("woken: blocked" in e["summary"] for e in events(repo, run_id)), timeout=60
        )
    finally:
        stop(repo, run_id)
    starts = _starts(events(repo, run_id), "coordinator")
    assert sum("woken: blocked" in e["summary"] for e in starts) == 1
    assert status(repo, run_id)["status"] in ("stopping", "blocked", "active", "paused") and doc


# -- the rules, as pure functions ---------------------------------------------------------------------------------


def _model() -> tuple[Any, Any, dict[str, Any]]:
    from dataclasses import replace

    from git_agentops.model.run import Role, Run, Worker
    from git_agentops.model.task import Criterion, TaskStatus, new_task

    root = new_task(
        "task-00000000-0000-4000-8000-000000000000",
        title="root",
        intent="i",
        goal="g",
        criteria=[Criterion("c1", "a"), Criterion("c2", "b")],
        policy_config_hash="0" * 64,
    )

    def kid(n: int, status: TaskStatus, deps: tuple[str, ...] = ()) -> Any:
        task = new_task(
            f"task-0000000{n}-0000-4000-8000-000000000000",
            title=f"kid {n}",
            intent="i",
            goal="g",
            criteria=[Criterion("c1", "a")],
            parent=root.id,
            dependencies=list(deps),
            policy_config_hash="0" * 64,
        )
        return replace(
            task, status=status, blocked_reason="RUN_NO_PROGRESS: x" if status is TaskStatus.BLOCKED else None
        )

    run = Run(
        "r", "g", "main", "0" * 40, "scripted", "/repo", "0" * 64, 60, 0.0, root_task_id=root.id, contract_hash="c" * 64
    )
    coordinator = Worker("coordinator", Role.COORDINATOR, "scripted", "/w", "refs/heads/agentops/r/coordinator")
    tasks = {"root": root, "k1": kid(1, TaskStatus.DELIVERED), "k2": kid(2, TaskStatus.RUNNING)}
    return run, coordinator, {"kid": kid, "tasks": tasks, "TaskStatus": TaskStatus}


def test_when_ending_a_turn_is_idle_and_when_it_is_a_failure() -> None:
    from dataclasses import replace

    from git_agentops.model.lifecycle import idle_problem

    run, _, parts = _model()
    tasks, kid, status = parts["tasks"], parts["kid"], parts["TaskStatus"]
    assert idle_problem(run, tasks, 0) is None  # planned, a child runs: idle
    assert "status 1" in (idle_problem(run, tasks, 1) or "")
    assert "before planning" in (idle_problem(replace(run, root_task_id=None), {}, 0) or "")
    assert "without planning any child" in (idle_problem(run, {"root": tasks["root"]}, 0) or "")
    done = {"root": tasks["root"], "k1": tasks["k1"]}
    assert idle_problem(run, done, 0) is None  # every child delivered: it is woken at once to finalize
    stuck = {
        "root": tasks["root"],
        "k1": kid(1, status.BLOCKED),
        "k3": kid(3, status.PLANNED, (kid(1, status.BLOCKED).id,)),
    }
    assert "nothing can run" in (idle_problem(run, stuck, 0) or "")


def test_each_event_wakes_the_coordinator_once() -> None:
    from dataclasses import replace

    from git_agentops.model.integration import Integration, IntegrationStatus
    from git_agentops.model.lifecycle import wake_events

    run, coordinator, parts = _model()
    tasks, kid, status = parts["tasks"], parts["kid"], parts["TaskStatus"]
    assert wake_events(run, coordinator, tasks, []) == []  # a child still runs, nothing needs the coordinator
    blocked = {**tasks, "k2": kid(2, status.BLOCKED)}
    events = wake_events(run, coordinator, blocked, [])
    assert [e.kind for e in events] == ["blocked"]
    assert wake_events(run, replace(coordinator, woken_for=(events[0].key,)), blocked, []) == []
    done = {**tasks, "k2": kid(2, status.DELIVERED)}
    (delivered,) = wake_events(run, coordinator, done, [])
    assert delivered.kind == "delivered" and "finalize" in delivered.reason
    integrating = replace(run, integration=Integration(IntegrationStatus.PREPARED))
    assert wake_events(integrating, coordinator, done, []) == []  # an integration in flight needs nobody
    answered = [
        {"questionId": "q-1", "workerId": "coordinator", "answer": "yes"},
        {"questionId": "q-2", "workerId": "w", "answer": "no"},
    ]
    assert [e.key for e in wake_events(run, coordinator, tasks, answered)] == ["answer:q-1"]
