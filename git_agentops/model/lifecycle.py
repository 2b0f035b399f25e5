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
(``woken_for``), so it wakes the coordinator exactly once.

**Supervisor restarts are not the agent's failures.** When a supervisor dies (``kill -9``, a crash, a reboot), the
next one stops the generations it left behind and starts new ones, so their old processes are fenced off; but
:func:`interrupted` records that as an interruption, not a failure: the worker's failures, diagnostic, session and
usage stay as they were, and the allowance of :data:`~.run.MAX_GENERATIONS` counts only the agent's own failed
generations (:func:`failed_generations`: an exit without delivering, a refused handoff, a failed job), as the
no-progress fingerprints do. The next generation is told why it starts (:func:`restart_wake`), including what an
interrupted wake was for: those events were marked handled when it was woken, so they would not wake it again.
Pure functions over run state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from .run import MAX_GENERATIONS, Interruption, Role, Run, Worker, WorkerStatus
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


# -- supervisor restarts ------------------------------------------------------------------------------------------

INTERRUPTED: Final = "interrupted"
"""The worker ``extra`` key naming the generation a supervisor restart stopped (until the next one starts):
:attr:`~.run.Worker.interrupted`."""


def failed_generations(worker: Worker) -> int:
    """How many of the worker's generations failed by the agent's own doing (one per generation, however many
    failures it recorded). Supervisor restarts and wakes record none, so they never count."""
    return len({failure.generation for failure in worker.failures})


def allowance_spent(worker: Worker) -> bool:
    """Whether the worker used up its :data:`~.run.MAX_GENERATIONS` failed generations (it is then blocked)."""
    return failed_generations(worker) >= MAX_GENERATIONS


def interrupted(worker: Worker, reason: str) -> Worker:
    """The worker after a supervisor (restarting, or refusing the run) stopped the generation a dead one left behind.

    ``stopped`` with no process, so the next supervisor that serves the run starts a new generation; nothing is
    counted against it. ``reason`` and what the generation was doing are kept for :func:`restart_wake`.
    """
    mark = Interruption(worker.generation, str(worker.status), reason)
    return replace(worker, status=WorkerStatus.STOPPED, process=None, interrupted=mark)


def restart_wake(worker: Worker) -> str | None:
    """What the generation after an interrupted one is told (None when the last one was not interrupted).

    The lines of an interrupted wake come first: its events are in ``woken_for`` already and wake nobody again. The
    line about an earlier interruption is not repeated: only the last one is told.
    """
    mark = worker.interrupted
    if mark is None:
        return None
    earlier = (worker.wake or "").splitlines()
    lines = [line for line in earlier if not line.startswith(_RESTARTED)]
    handing_off = mark.status == WorkerStatus.HANDING_OFF and worker.role is Role.CHILD
    doing = "Its handoff was not judged yet: hand off again. " if handing_off else ""
    lines.append(
        f"{_RESTARTED} ({mark.generation}) before it finished ({mark.reason}); this is not counted "
        f"as your failure. {doing}Your commits are kept: carry on from your worktree's HEAD."
    )
    return "\n".join(lines)


_RESTARTED: Final = "- The supervisor stopped your previous generation"
