"""Why a run or a task is blocked, said once: the task that was blocked first, and its worker's last failure.

A blocked task's reason is written when it is blocked, and it nests: the coordinator blocked after its child was
blocked carries its own host log, which carries the child's reason, which carries the verification output -- a dump
with doubled timestamps that ``run status`` used to cut at 200 characters. What a person needs is the *cause*:

* the blocked tasks whose reason is their own (not "dependency X blocked"), children first, in plan order; the root
  task last, and only as what followed when a child is the cause;
* for each, the headline of its reason (its first line) and its worker's last failure -- for a failed verification,
  each failed command, how it ended and its first failing lines, read from the evidence the supervisor recorded on
  the verified commit (:mod:`git_agentops.verify.evidence`, :mod:`git_agentops.verify.failing`); for any other
  failure, the first lines of its message.

Everything here reads; ``run status``, the end of a foreground ``run start`` and ``run log`` show it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from .. import eventkinds as kinds
from ..errors import AgentOpsError
from ..gitstore.events import Entry
from ..gitstore.journal import Journal
from ..gitstore.repo import Store
from ..model.jsonform import JsonRecord, on_disk, records_of
from ..model.run import Failure, Role, Worker
from ..model.task import Task, TaskStatus
from ..verify.evidence import EvidenceStore
from ..verify.failing import ended, failed_required, shown
from .state import RunView

MESSAGE_LINES: Final = 6
"""How many lines of a failure message stand in for failing commands when the failure names none."""
DEPENDENCY: Final = "dependency "
"""How a dependent task's block reason begins, after its code (``Workers.block`` in the supervisor)."""


@dataclass(frozen=True, slots=True)
class FailedCommand(JsonRecord):
    """A required command that failed: its id, how it ended (``exit:1``, ``timeout``...) and its first failing
    lines."""

    command_id: str = on_disk("commandId")
    ended: str = on_disk("ended")
    lines: tuple[str, ...] = on_disk("lines")


@dataclass(frozen=True, slots=True)
class LastFailure(JsonRecord):
    """A worker's failed generation, as shown: the failed commands when the evidence names them, else the first
    lines of the failure's message."""

    generation: int = on_disk("generation")
    code: str = on_disk("code")
    commands: tuple[FailedCommand, ...] = on_disk("commands", decode=records_of(FailedCommand.from_json))
    message: tuple[str, ...] = on_disk("message")


@dataclass(frozen=True, slots=True)
class Cause(JsonRecord):
    """A task blocked for a reason of its own (or, with no task, the coordinator or the run itself); its JSON form
    is ``run status --json``'s ``blocked`` entry (every key always written, ``lastFailure`` null when none)."""

    task_id: str | None = on_disk("taskId")
    title: str | None = on_disk("title")
    worker_id: str | None = on_disk("workerId")
    headline: str = on_disk("headline")  # the first line of the block reason: its code and what happened
    reason: str = on_disk("reason")  # the whole reason
    failed_generations: int = on_disk("failedGenerations")
    last: LastFailure | None = on_disk("lastFailure", decode=LastFailure.from_json)
    root: bool = on_disk("root", default=False)  # the root task: the coordinator's own failure


def failed_commands_at(store: Store, commit: str | None) -> tuple[FailedCommand, ...]:
    """The failed required commands the supervisor's evidence records on ``commit`` (forged lines left out)."""
    if not commit:
        return ()
    try:
        records = EvidenceStore(store, store.private_dir()).authentic_for_commit(commit)
    except AgentOpsError:
        return ()
    mine = [r for r in records if (r.producer or "supervisor") == "supervisor"]
    return tuple(FailedCommand(r.command_id, ended(r), tuple(shown(r.tail or ""))) for r in failed_required(mine))


def message_lines(message: str, limit: int = MESSAGE_LINES) -> tuple[str, ...]:
    """At most ``limit`` non-blank lines of a failure message, stripped: its first line, which says what happened,
    then its last ones -- where an agent's output or a command's tail ends, which is where it says why."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if len(lines) <= limit:
        return tuple(lines)
    return (lines[0], "…", *lines[len(lines) - (limit - 2) :]) if limit > 2 else tuple(lines[:limit])


def last_failure(store: Store, failure: Failure) -> LastFailure:
    """``failure`` as shown: the commands its evidence names (a verification failure), else its message's lines."""
    commands = failed_commands_at(store, failure.head) if failure.code == "RUN_VERIFICATION_FAILED" else ()
    return LastFailure(failure.generation, failure.code, commands, () if commands else message_lines(failure.message))


def _failed(worker: Worker) -> int:
    return len({f.generation for f in worker.failures})


def _cause(store: Store, task: Task | None, worker: Worker | None, reason: str, *, root: bool) -> Cause:
    last = worker.failures[-1] if worker is not None and worker.failures else None
    return Cause(
        task.id if task else None,
        task.title if task else None,
        worker.worker_id if worker else None,
        headline(reason),
        reason,
        _failed(worker) if worker else 0,
        last_failure(store, last) if last is not None else None,
        root,
    )


def headline(reason: str) -> str:
    """The first line of a reason: its code and what happened (a reason cut shorter elsewhere keeps it)."""
    return reason.split("\n", 1)[0].strip()


def own_reason(reason: str | None) -> bool:
    """Whether a block reason is the task's own, not its dependency's."""
    return bool(reason) and not (reason or "").partition(": ")[2].startswith(DEPENDENCY)


def causes(store: Store, view: RunView) -> list[Cause]:
    """Why the run's tasks are blocked (see the module docstring); empty when none is. A blocked run's own reason
    when no task carries it (``RUN_RESTART_STORM``, a dirty target, a tampered state) comes last."""
    run = view.run()
    tasks = view.tasks()
    workers = view.workers()
    by_task = {w.task_id: w for w in workers if w.task_id}
    order = {task_id: n for n, task_id in enumerate(run.plan_order)}
    blocked = [t for t in tasks.values() if t.status is TaskStatus.BLOCKED and own_reason(t.blocked_reason)]
    blocked.sort(key=lambda t: (t.parent is None, order.get(t.id, len(order))))
    found = [_cause(store, t, by_task.get(t.id), t.blocked_reason or "", root=t.parent is None) for t in blocked]
    reason = run.status_reason
    if str(run.status) == "blocked" and reason and all(c.headline != headline(reason) for c in found):  # its own
        coordinator = next((w for w in workers if w.role is Role.COORDINATOR and w.blocked_reason == reason), None)
        found.append(_cause(store, None, coordinator, reason, root=True))
    return found


def waits_on(task: Task, tasks: Mapping[str, Task]) -> str | None:
    """For a task blocked by a dependency: the title of the dependency that is blocked."""
    if task.status is not TaskStatus.BLOCKED or own_reason(task.blocked_reason):
        return None
    for dependency in task.dependencies:
        if dependency in tasks and tasks[dependency].status is TaskStatus.BLOCKED:
            return tasks[dependency].title
    return None


def failure_lines(last: LastFailure, indent: str = "  ", *, heading: bool = True) -> list[str]:
    """``last`` as text lines: each failed command and its first failing lines, else the message's first lines;
    ``heading`` first says which generation failed, and how."""
    lines = [f"{indent}last failure (generation {last.generation}): {last.code}"] if heading else []
    inner = indent + "  " if heading else indent
    for command in last.commands:
        lines.append(f"{inner}{command.command_id} failed ({command.ended.replace(':', ' ')})")
        lines += [f"{inner}  {line}" for line in command.lines]
    lines += [f"{inner}{line}" for line in last.message]
    return lines


def cause_lines(found: Sequence[Cause] | Iterable[Cause]) -> list[str]:
    """The causes as text, the first one whole and what followed from it on one line each."""
    found = list(found)
    lines: list[str] = []
    children = [c for c in found if not c.root]
    for cause in found:
        who = f"task {cause.title!r} ({cause.task_id})" if cause.title else (cause.worker_id or "the run")
        if cause.root and children:  # the coordinator gave up once its child was blocked: a consequence
            lines.append(f"then {who} was blocked: {cause.headline}")
            continue
        generations = f", after {cause.failed_generations} failed generations" if cause.failed_generations > 1 else ""
        lines.append(f"{who} is blocked{generations}: {cause.headline}")
        if cause.last is not None:
            last = cause.last
            if last.message and cause.headline.endswith(last.message[0]):  # said already
                last = replace(last, message=last.message[1:])
            lines += failure_lines(last)
        else:
            lines += [f"  {line}" for line in cause.reason.splitlines()[1:] if line.strip()]
    return lines


def event_cause(store: Store, journal: Journal, entry: Entry) -> list[str]:
    """What a person needs under one journal event to see why (``run log``, a foreground run's progress): a failed
    generation's failing commands and lines, a refused request's message, a block's headline; else nothing.

    A request refused by a job it was accepted for (a handoff that failed verification) says nothing here: the
    ``WORKER_FAILED`` event that follows it says it, with the evidence.
    """
    data = entry.data
    worker_id = data.get("workerId")
    if entry.foreign or not isinstance(worker_id, str):
        return []
    if entry.code == kinds.WORKER_FAILED:
        worker = _worker_at(journal, entry.commit, worker_id)
        failures = worker.failures if worker is not None else ()
        failure = next((f for f in reversed(failures) if f.generation == data.get("generation")), None)
        return failure_lines(last_failure(store, failure), heading=False) if failure is not None else []
    if entry.code == kinds.REQUEST_REFUSED:
        worker = _worker_at(journal, entry.commit, worker_id)
        if worker is not None and str(worker.status) == "handing-off":
            return []
        return [f"  {line}" for line in message_lines(str(data.get("message") or ""), 3)]
    if entry.code == kinds.WORKER_BLOCKED:
        return [f"  {line}" for line in message_lines(str(data.get("reason") or ""), 1)]
    return []


def _worker_at(journal: Journal, commit: str, worker_id: str) -> Worker | None:
    try:
        return RunView(journal.read_at(commit)).worker(worker_id)
    except AgentOpsError:
        return None
