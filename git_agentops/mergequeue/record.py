"""The queue's records: an entry per enqueued integration, the queue document that orders them.

``queue.json`` of ``refs/agentops/queue/<target>`` holds the queue (:class:`QueueDoc`); ``lease.json`` beside it the
lease of the supervisor processing it (:class:`git_agentops.lease.record.Lease`, with the holder's pid identity).
An entry moves ``waiting -> published``, or ends ``evicted`` (its own candidate failed verification) or
``conflicted`` (its deliveries conflict with the target's tip); a settled entry never changes again.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from ..model.delivery import CommitId, MergeStep
from ..model.integration import Integration, IntegrationStatus
from ..model.jsonform import JsonRecord, on_disk, records_of

KEPT_SETTLED: Final = 200
"""Settled entries the queue document keeps (the oldest go first); each run keeps its own outcome besides."""


class EntryState(enum.StrEnum):
    """Where an entry is: ``waiting`` for its turn, or settled."""

    WAITING = "waiting"
    PUBLISHED = "published"
    EVICTED = "evicted"
    CONFLICTED = "conflicted"


SETTLED: Final = frozenset({EntryState.PUBLISHED, EntryState.EVICTED, EntryState.CONFLICTED})


@dataclass(frozen=True, slots=True)
class QueuedDelivery(JsonRecord):
    """One frozen delivery of an entry, in merge order: its task, the task's title (the merge message) and commit."""

    task_id: str = on_disk("taskId")
    title: str = on_disk("title")
    commit: CommitId = on_disk("commit")


@dataclass(frozen=True, slots=True)
class Entry(JsonRecord):
    """One run's integration in the queue. ``position`` orders the queue (given at enqueue, never reused)."""

    position: int = on_disk("position")
    run_id: str = on_disk("runId")
    deliveries: tuple[QueuedDelivery, ...] = on_disk("deliveries", decode=records_of(QueuedDelivery.from_json))
    policy_hash: str = on_disk("policyHash")
    enqueued_at: float = on_disk("enqueuedAt")
    state: EntryState = on_disk("state", decode=EntryState)
    # set when settled
    base: CommitId | None = on_disk("base", absent=None)  # what its candidate was built on
    candidate: CommitId | None = on_disk("candidate", absent=None)
    steps: tuple[MergeStep, ...] | None = on_disk("steps", absent=None, decode=records_of(MergeStep.from_json))
    below: tuple[int, ...] | None = on_disk("below", absent=None)  # the positions published in the same step before it
    verification: tuple[Mapping[str, Any], ...] | None = on_disk("verification", absent=None, decode=records_of(dict))
    verifications: int = on_disk("verifications", absent=0)  # times its candidate was verified (reuse not counted)
    retried: bool = on_disk("retried", absent=False)  # failed once, verified again on the same tree
    code: str | None = on_disk("code", absent=None)
    reason: str | None = on_disk("reason", absent=None)
    paths: tuple[str, ...] | None = on_disk("paths", absent=None)  # the conflicting paths
    conflicting: str | None = on_disk("conflicting", absent=None)  # the task whose delivery conflicted
    settled_at: float | None = on_disk("settledAt", absent=None)
    publishing: bool = on_disk("publishing", absent=False)  # its candidate is being published (before the CAS)

    @property
    def waiting(self) -> bool:
        return self.state is EntryState.WAITING

    @property
    def label(self) -> str:
        """``#3 (run-...)``: how logs and errors name it."""
        return f"#{self.position} ({self.run_id})"

    def published_fields(self) -> dict[str, Any]:
        """What its run records of this entry once published (its integration's fields): what its candidate was
        built on, the candidate and its steps, its verification and where it stood in the queue. The one place they
        are copied: the run's record and, for a remote target, the receipt the processor writes before its push
        (:meth:`published`) say the same."""
        return {
            "status": IntegrationStatus.PUBLISHED,
            "order": tuple(d.task_id for d in self.deliveries),  # as it enqueued them (a record fetched may lag)
            "queue_position": self.position,
            "base": self.base,
            "candidate": self.candidate,
            "steps": self.steps,
            "verification": self.verification,
            "attempts": self.verifications,
            "queue_below": self.below,
            "queue_retried": self.retried,
            "published_at": self.settled_at,
        }

    def published(self, integration: Integration) -> Integration:
        """``integration`` (its run's, queued) as the run records it once this entry is published."""
        return integration.advanced(**self.published_fields())


@dataclass(frozen=True, slots=True)
class QueueDoc(JsonRecord):
    """``queue.json``: the target it serves, the next position to give and the entries in position order."""

    target: str = on_disk("target")
    next_position: int = on_disk("next", default=1)
    entries: tuple[Entry, ...] = on_disk("entries", default=(), decode=records_of(Entry.from_json))
    version: int = on_disk("version", default=1)

    def waiting(self) -> list[Entry]:
        """The entries still waiting, in queue order."""
        return [e for e in self.entries if e.waiting]

    def entry(self, position: int) -> Entry | None:
        return next((e for e in self.entries if e.position == position), None)

    def of_run(self, run_id: str) -> Entry | None:
        """The run's newest entry (a run enqueues again after a repair)."""
        return next((e for e in reversed(self.entries) if e.run_id == run_id), None)

    def with_entry(self, entry: Entry) -> QueueDoc:
        """This queue with ``entry`` replacing the one at its position, or appended (the oldest settled entries
        beyond :data:`KEPT_SETTLED` dropped)."""
        entries = [e for e in self.entries if e.position != entry.position] + [entry]
        entries.sort(key=lambda e: e.position)
        settled = [e for e in entries if not e.waiting]
        drop = {e.position for e in settled[: max(0, len(settled) - KEPT_SETTLED)]}
        return replace(
            self,
            entries=tuple(e for e in entries if e.position not in drop),
            next_position=max(self.next_position, entry.position + 1),
        )
