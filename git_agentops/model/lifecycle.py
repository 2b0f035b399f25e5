"""The coordinator's lifecycle with one-shot hosts: when ending a turn is fine, and what wakes it again.

Agent CLIs run one-shot: ``claude -p``, ``codex exec`` and ``opencode run`` end their turn and exit. A coordinator
that has planned its children has nothing to do until they are done, so when it exits with status 0 it is
**idle**, not failed -- provided something can still happen without it (a child runs, or a planned task can
still become ready). The supervisor then **wakes** it -- a new generation (or its resumed session) whose prompt
says why -- once for each event that needs it:

* every child task is delivered (``delivered``): finalize, or plan more; under ``[run] finalize = "auto"`` the
  supervisor integrates by itself instead;
* a child task is blocked (``blocked``): re-plan it, plan around it, or ask the user;
* the answer to one of its own questions arrived (``answer``).

An integration that fails restarts the coordinator with the failure as its diagnostic (the failure path, so a
repeated failure still blocks). Exiting before planning the root task, exiting after planning no child, exiting
with a status other than 0, and exiting when nothing can run any more stay failures, as does a child that exits
without handing off. Each event is identified by a key recorded on the coordinator when it is woken for it
(``woken_for``), so it wakes the coordinator exactly once. Pure functions over run state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .run import Run, Worker
from .task import Task, TaskStatus


@dataclass(frozen=True, slots=True)
class Wake:
    """One event that needs the coordinator: its key (recorded once handled) and what to tell it."""

    key: str
    kind: str  # "delivered" | "blocked" | "answer"
    reason: str


def _children(tasks: Mapping[str, Task]) -> list[Task]:
    return [t for t in tasks.values() if t.parent is not None]


def can_still_progress(tasks: Mapping[str, Task]) -> bool:
    """Whether some child task is running, or planned with no blocked dependency (so it will become ready)."""
    blocked = {t.id for t in _children(tasks) if t.status is TaskStatus.BLOCKED}
    for task in _children(tasks):
        if task.status is TaskStatus.RUNNING:
            return True
        if task.status is TaskStatus.PLANNED and not (set(task.dependencies) & blocked):
            return True
    return False


def idle_problem(run: Run, tasks: Mapping[str, Task], exit_code: int | None) -> str | None:
    """Why a coordinator that just exited is *not* idle but failed (None: it ended its turn and may idle)."""
    if exit_code != 0:
        return f"it exited with status {exit_code}" if exit_code is not None else "its process ended (status unknown)"
    if run.root_task_id is None:
        return "it ended its turn before planning the root task ('git agentops-request plan ...')"
    children = _children(tasks)
    if not children:
        return "it ended its turn without planning any child task ('git agentops-request worker ...')"
    if all(t.status is TaskStatus.DELIVERED for t in children):
        return None  # woken at once to finalize
    if not can_still_progress(tasks):
        blocked = ", ".join(f"{t.title} ({t.id})" for t in children if t.status is TaskStatus.BLOCKED)
        return (
            f"it ended its turn but nothing can run any more (blocked: {blocked or 'none'}); re-plan a blocked task "
            "('git agentops-request worker --task-id ...'), plan another, or ask a question"
        )
    return None


def wake_events(
    run: Run,
    coordinator: Worker,
    tasks: Mapping[str, Task],
    questions: Iterable[Mapping[str, Any]],
) -> list[Wake]:
    """The events that need an idle coordinator and that it was not woken for yet, oldest kind first."""
    seen = set(coordinator.woken_for)
    found: list[Wake] = []
    children = _children(tasks)
    for task in children:
        if task.status is TaskStatus.BLOCKED:
            key = f"blocked:{task.id}:r{task.revision}"
            if key not in seen:
                found.append(
                    Wake(key, "blocked", f"Child task {task.title!r} ({task.id}) is blocked: {task.blocked_reason}")
                )
    for question in questions:
        if question.get("workerId") == coordinator.worker_id and question.get("answer") is not None:
            key = f"answer:{question['questionId']}"
            if key not in seen:
                found.append(Wake(key, "answer", f"Your question {question['questionId']} was answered."))
    integrating = run.integration is not None and run.integration.pending
    if children and not integrating and all(t.status is TaskStatus.DELIVERED for t in children):
        key = f"delivered:{run.contract_hash}"
        if key not in seen:
            found.append(
                Wake(
                    key,
                    "delivered",
                    f"Every child task ({len(children)}) is delivered: check them below, then finalize with "
                    "`git agentops-request finalize`, or plan more work.",
                )
            )
    return found
