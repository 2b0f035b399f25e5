"""Tasks stored in a journal: ``tasks/<task-id>/r<revision>.json``, every revision kept.

The run's state journal (``refs/agentops/runs/<run>/state``) holds its tasks. A revision is never rewritten
except to mark it superseded, in the same commit that adds its successor, so ``git log`` shows every contract a
worker was ever given. These helpers work on a journal :class:`~git_agentops.gitstore.journal.Change` (inside a
mutation, so the read and the write are one compare-and-swap) or a snapshot (for reads).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Final

from .. import eventkinds as kinds
from ..errors import AgentOpsError
from ..gitstore.journal import Change, Event, Journal, JournalTampered, Snapshot
from ..gitstore.refs import list_refs
from ..gitstore.repo import Store
from ..model.task import Criterion, Task, revise

PREFIX: Final = "tasks"


def new_task_id() -> str:
    return f"task-{uuid.uuid4()}"


def _path(task_id: str, revision: int) -> str:
    return f"{PREFIX}/{task_id}/r{revision:04d}.json"


def revisions(view: Snapshot, task_id: str) -> list[Task]:
    """Every stored revision of a task, oldest first."""
    names = sorted(n for n in view.list(f"{PREFIX}/{task_id}") if n.startswith("r") and n.endswith(".json"))
    return [Task.from_json(view.json(f"{PREFIX}/{task_id}/{n}", schema="task")) for n in names]


def current(view: Snapshot, task_id: str) -> Task:
    """The current revision; ``TASK_NOT_FOUND``."""
    if not task_id.startswith("task-") or "/" in task_id:
        raise AgentOpsError("TASK_NOT_FOUND", f"{task_id!r} is not a task id")
    found = revisions(view, task_id)
    live = [t for t in found if t.current]
    if not live:
        raise AgentOpsError("TASK_NOT_FOUND", f"no task {task_id}")
    return live[-1]


def all_current(view: Snapshot) -> Iterator[Task]:
    for task_id in view.list(PREFIX):
        yield current(view, task_id)


def find(store: Store, task_id: str) -> tuple[str, Task]:
    """Find a task in any run's state journal: (run id, current revision). ``TASK_NOT_FOUND``, or
    ``RUN_STATE_TAMPERED`` when it is in no readable run and some run's state has a foreign tip."""
    tampered: JournalTampered | None = None
    for ref in sorted(list_refs(store, "refs/agentops/runs/")):
        if ref.endswith("/state"):
            try:
                snapshot = Journal(store, ref).read()
            except JournalTampered as exc:  # unreadable; say so if the task is not found elsewhere
                tampered = tampered or exc
                continue
            if snapshot.list(f"{PREFIX}/{task_id}") if task_id.startswith("task-") and "/" not in task_id else []:
                return ref.split("/")[3], current(snapshot, task_id)
    if tampered is not None:
        raise tampered
    raise AgentOpsError("TASK_NOT_FOUND", f"no run has a task {task_id!r} ('git agentops-run status' lists tasks)")


def put(change: Change, task: Task) -> None:
    """Write one revision (create a task, or update the bookkeeping of its current revision)."""
    change.put_json(_path(task.id, task.revision), task.to_json(), schema="task")


def create(change: Change, task: Task) -> Task:
    if change.list(f"{PREFIX}/{task.id}"):
        raise AgentOpsError("TASK_INVALID", f"{task.id} already exists")
    put(change, task)
    return task


def revise_in(
    change: Change,
    task_id: str,
    expected_contract_hash: str,
    *,
    criteria: Sequence[Criterion] | None = None,
    intent: str | None = None,
    title: str | None = None,
    dependencies: Sequence[str] | None = None,
    policy_config_hash: str | None = None,
) -> Task:
    """Supersede the current revision of ``task_id`` inside a mutation; returns the new revision."""
    old, new = revise(
        current(change, task_id),
        expected_contract_hash,
        criteria=criteria,
        intent=intent,
        title=title,
        dependencies=dependencies,
        policy_config_hash=policy_config_hash,
    )
    put(change, old)
    put(change, new)
    return new


def revise_task(
    journal: Journal,
    task_id: str,
    expected_contract_hash: str,
    *,
    criteria: Sequence[Criterion] | None = None,
    intent: str | None = None,
    title: str | None = None,
    dependencies: Sequence[str] | None = None,
) -> Task:
    """Revise a task in its journal by compare-and-swap on its contract hash (``TASK_CONTRACT_CHANGED``)."""

    def fn(change: Change) -> Task:
        return revise_in(
            change,
            task_id,
            expected_contract_hash,
            criteria=criteria,
            intent=intent,
            title=title,
            dependencies=dependencies,
        )

    result = journal.mutate(fn, Event(kinds.TASK_REVISED, f"task {task_id} revised", {"taskId": task_id}))
    return result.value
