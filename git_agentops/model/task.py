"""Tasks, acceptance criteria and contract hashes.

A task is what one worker must deliver: a title, an intent, the run goal it serves, and acceptance criteria --
each either checked by an acceptance *runner* the policy defines, or explicitly *review-only* with a recorded
reason. Tasks form a tree (``parent``) with dependencies between siblings.

The **contract hash** is the canonical hash of a task tree: for every current task, sorted by id, its id, goal,
intent, parent, sorted dependencies and criteria (in their declared order). Every request a worker sends binds
the contract hash it was started under; when the contract changes, stale generations are stopped. Titles and
statuses are not part of the contract: renaming a task or delivering it does not invalidate anyone's work.

A task is never edited in place. :func:`revise` supersedes a record with a new revision, by compare-and-swap on
the task's own contract hash (``TASK_CONTRACT_CHANGED`` when someone revised it first).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from ..canonical import digest
from ..errors import AgentOpsError
from .delivery import CommitId, Delivery
from .jsonform import FieldMap, JsonRecord, field_map, on_disk

TASK_ID: Final = re.compile(r"task-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
CRITERION_ID: Final = re.compile(r"[a-z][a-z0-9-]{0,63}")
ROOT_CRITERIA: Final = (2, 5)
CHILD_CRITERIA: Final = (1, 10)


class TaskStatus(enum.StrEnum):
    """A task's status. It is no part of the contract: delivering or blocking a task changes no contract hash."""

    PLANNED = "planned"
    READY = "ready"
    RUNNING = "running"
    DELIVERED = "delivered"
    BLOCKED = "blocked"


@dataclass(frozen=True, slots=True)
class Criterion:
    """One acceptance criterion of a task.

    ``runner`` names the policy's acceptance runner that checks it; ``review_only`` instead records why no runner can.
    :func:`new_task` refuses a criterion with both.
    """

    id: str
    description: str
    runner: str | None = None
    review_only: str | None = None  # the recorded reason why no runner can check it

    def to_json(self) -> dict[str, object]:
        """The stored form, which the contract hash also covers: ``runner`` and ``reviewOnly`` only when set."""
        doc: dict[str, object] = {"id": self.id, "description": self.description}
        if self.runner is not None:
            doc["runner"] = self.runner
        if self.review_only is not None:
            doc["reviewOnly"] = self.review_only
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Criterion:
        """Read the form :meth:`to_json` writes."""
        return cls(doc["id"], doc["description"], doc.get("runner"), doc.get("reviewOnly"))


REPAIR_TITLE: Final = "Resolve the merge conflict of: "
"""How a repair task's title begins; the conflicting task's title follows."""


@dataclass(frozen=True, slots=True)
class Repair(JsonRecord):
    """What a repair task resolves: the frozen delivery of ``task_id`` could not be merged onto ``onto`` (the
    target's tip, or the candidate its integration had built so far) because both changed ``paths``.

    The supervisor plans it when an integration conflicts (:mod:`git_agentops.integrate.repair`); nothing is
    resolved by favouring a side. Its worktree starts at ``onto`` with ``delivery`` being merged, the conflicts
    left for its worker; its delivery takes the repaired delivery's place in the merge order."""

    task_id: str = on_disk("taskId")
    delivery: CommitId = on_disk("delivery")
    onto: CommitId = on_disk("onto")
    paths: tuple[str, ...] = on_disk("paths")
    with_what: str = on_disk("with")  # what is on the other side: "the target main", "queue entry #3", a task
    queue_position: int | None = on_disk("queuePosition", absent=None)


@dataclass(frozen=True, slots=True)
class Task:
    """One revision of a task, ``tasks/<id>/r<revision>.json`` in the run's state journal.

    Never edited in place: :func:`revise` supersedes it with a new revision.
    """

    id: str
    title: str
    intent: str
    goal: str
    criteria: tuple[Criterion, ...]
    parent: str | None = None
    dependencies: tuple[str, ...] = ()
    status: TaskStatus = TaskStatus.PLANNED
    revision: int = 1
    superseded_by: int | None = None
    policy_config_hash: str | None = None
    blocked_reason: str | None = None
    # the worker that took the task on (run-level bookkeeping, no part of the contract)
    worker_id: str | None = on_disk("workerId", absent=None)
    delivery: Delivery | None = on_disk("delivery", absent=None, decode=Delivery.from_json)  # once delivered
    repair: Repair | None = on_disk("repair", absent=None, decode=Repair.from_json)  # a repair task's conflict

    @property
    def current(self) -> bool:
        """Whether no later revision supersedes this one; only current revisions count in :func:`contract_hash`."""
        return self.superseded_by is None

    def to_json(self) -> dict[str, object]:
        """The stored ``task`` document of this revision, status included; the worker and the delivery are the
        document's ``extra`` (``workerId``, ``delivery``), each only when set."""
        return {
            "id": self.id,
            "revision": self.revision,
            "title": self.title,
            "intent": self.intent,
            "goal": self.goal,
            "criteria": [c.to_json() for c in self.criteria],
            "parent": self.parent,
            "dependencies": list(self.dependencies),
            "status": str(self.status),
            "supersededBy": self.superseded_by,
            "policyConfigHash": self.policy_config_hash,
            "blockedReason": self.blocked_reason,
            "extra": TASK_EXTRA.dump(self),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Task:
        """Read a ``task`` document back (already validated against its schema); absent optional keys get defaults."""
        return TASK_EXTRA.load(
            doc.get("extra", {}),
            id=doc["id"],
            title=doc["title"],
            intent=doc["intent"],
            goal=doc["goal"],
            criteria=tuple(Criterion.from_json(c) for c in doc["criteria"]),
            parent=doc.get("parent"),
            dependencies=tuple(doc.get("dependencies", ())),
            status=TaskStatus(doc.get("status", "planned")),
            revision=int(doc.get("revision", 1)),
            superseded_by=doc.get("supersededBy"),
            policy_config_hash=doc.get("policyConfigHash"),
            blocked_reason=doc.get("blockedReason"),
        )


TASK_EXTRA: Final[FieldMap[Task]] = field_map(Task, partial=True)
"""The task document's ``extra`` (the fields declared :func:`~.jsonform.on_disk`): run-level bookkeeping, no part of
the contract, each key only when set."""


def delivered(task: Task) -> Delivery:
    """The delivery of a task its caller knows to be delivered (a dependency that let its dependant start, a task
    in the merge order). A task without one breaks that invariant: ``KeyError``, as a lookup that finds nothing."""
    if task.delivery is None:
        raise KeyError(f"{task.id} has no recorded delivery")
    return task.delivery


def _contract_entry(task: Task) -> dict[str, object]:
    return {
        "id": task.id,
        "goal": task.goal,
        "intent": task.intent,
        "parent": task.parent,
        "dependencies": sorted(task.dependencies),
        "criteria": [c.to_json() for c in task.criteria],
    }


def contract_hash(tasks: Iterable[Task]) -> str:
    """Canonical hash of a task tree: current tasks sorted by id (see the module docstring)."""
    current = sorted((t for t in tasks if t.current), key=lambda t: t.id)
    return digest({"contract": 1, "tasks": [_contract_entry(t) for t in current]})


def task_contract_hash(task: Task) -> str:
    """The contract hash of ``task`` alone, even when it is superseded.

    It is what a child worker's requests bind (:func:`~git_agentops.model.run.worker_contract`) and what
    :func:`revise` compares.
    """
    return contract_hash([replace(task, superseded_by=None)])


def _criteria(raw: Sequence[Criterion], *, root: bool) -> tuple[Criterion, ...]:
    low, high = ROOT_CRITERIA if root else CHILD_CRITERIA
    if not low <= len(raw) <= high:
        kind = "a root task" if root else "a task"
        raise AgentOpsError("TASK_INVALID", f"{kind} has {low}-{high} acceptance criteria, not {len(raw)}")
    seen: set[str] = set()
    for criterion in raw:
        if not CRITERION_ID.fullmatch(criterion.id):
            raise AgentOpsError("TASK_INVALID", f"criterion id {criterion.id!r} must match {CRITERION_ID.pattern}")
        if criterion.id in seen:
            raise AgentOpsError("TASK_INVALID", f"criterion id {criterion.id!r} appears twice")
        seen.add(criterion.id)
        if not criterion.description.strip() or len(criterion.description) > 2000:
            raise AgentOpsError("TASK_INVALID", f"criterion {criterion.id}: description must be 1-2000 characters")
        if criterion.runner is not None and criterion.review_only is not None:
            raise AgentOpsError("TASK_INVALID", f"criterion {criterion.id}: a runner or review-only, not both")
        if criterion.review_only is not None and not criterion.review_only.strip():
            raise AgentOpsError("TASK_INVALID", f"criterion {criterion.id}: review-only needs a recorded reason")
    return tuple(raw)


def criteria_from_texts(texts: Sequence[str]) -> tuple[Criterion, ...]:
    """Plain strings -> criteria ``c1``, ``c2``... (as agents and recipes usually write them)."""
    return tuple(Criterion(f"c{i}", text) for i, text in enumerate(texts, start=1))


def new_task(
    task_id: str,
    *,
    title: str,
    intent: str,
    goal: str,
    criteria: Sequence[Criterion],
    parent: str | None = None,
    dependencies: Sequence[str] = (),
    policy_config_hash: str | None = None,
) -> Task:
    """A validated first revision. ``TASK_INVALID`` names what is wrong."""
    if not TASK_ID.fullmatch(task_id):
        raise AgentOpsError("TASK_INVALID", f"task id {task_id!r} must be task-<uuid>")
    for name, value, limit in (("title", title, 200), ("intent", intent, 8000), ("goal", goal, 8000)):
        if not isinstance(value, str) or not value.strip() or len(value) > limit:
            raise AgentOpsError("TASK_INVALID", f"{name} must be 1-{limit} characters")
    if len(set(dependencies)) != len(dependencies) or task_id in dependencies:
        raise AgentOpsError("TASK_INVALID", "dependencies must be distinct and must not include the task itself")
    for dep in dependencies:
        if not TASK_ID.fullmatch(dep):
            raise AgentOpsError("TASK_INVALID", f"dependency {dep!r} is not a task id")
    return Task(
        id=task_id,
        title=title,
        intent=intent,
        goal=goal,
        criteria=_criteria(criteria, root=parent is None),
        parent=parent,
        dependencies=tuple(dependencies),
        policy_config_hash=policy_config_hash,
    )


def revise(
    task: Task,
    expected_contract_hash: str,
    *,
    criteria: Sequence[Criterion] | None = None,
    intent: str | None = None,
    title: str | None = None,
    dependencies: Sequence[str] | None = None,
    policy_config_hash: str | None = None,
) -> tuple[Task, Task]:
    """Supersede ``task``: returns (the old record marked superseded, the new revision).

    Raises ``TASK_CONTRACT_CHANGED`` when ``task``'s contract hash is not ``expected_contract_hash``, and
    ``TASK_INVALID`` when ``task`` is already superseded or the new values are malformed.
    """
    if not task.current:
        raise AgentOpsError("TASK_INVALID", f"{task.id} revision {task.revision} is already superseded")
    actual = task_contract_hash(task)
    if actual != expected_contract_hash:
        raise AgentOpsError(
            "TASK_CONTRACT_CHANGED",
            f"{task.id} has contract {actual[:12]}, not the expected {expected_contract_hash[:12]}: re-read it",
            details={"expected": expected_contract_hash, "actual": actual},
        )
    fresh = new_task(
        task.id,
        title=title if title is not None else task.title,
        intent=intent if intent is not None else task.intent,
        goal=task.goal,
        criteria=criteria if criteria is not None else task.criteria,
        parent=task.parent,
        dependencies=dependencies if dependencies is not None else task.dependencies,
        policy_config_hash=policy_config_hash if policy_config_hash is not None else task.policy_config_hash,
    )
    new = replace(
        fresh, revision=task.revision + 1, status=task.status, worker_id=task.worker_id, delivery=task.delivery
    )
    return replace(task, superseded_by=new.revision), new


def check_runners(task: Task, runner_ids: Iterable[str]) -> None:
    """``TASK_RUNNER_UNKNOWN`` when a criterion names an acceptance runner the policy does not define."""
    known = set(runner_ids)
    for criterion in task.criteria:
        if criterion.runner is not None and criterion.runner not in known:
            raise AgentOpsError(
                "TASK_RUNNER_UNKNOWN",
                f"{task.id} criterion {criterion.id} names runner {criterion.runner!r}, which the policy does not "
                f"define (known: {', '.join(sorted(known)) or 'none'}); add it under [[verify.runners]]",
            )
