"""The queue in Git: ``refs/agentops/queue/<target>``, an authenticated journal appended by compare-and-swap.

Its tree holds ``queue.json`` (:class:`~.record.QueueDoc`) and ``lease.json`` (who processes it, until when). Every
commit carries the repository's MAC (:mod:`git_agentops.gitstore.journal`): a queue tip a supervisor did not write
-- an entry forged, replayed or reordered by anyone holding only the repository -- is ``RUN_STATE_TAMPERED`` and
never acted on. Writes that settle entries are fenced by the lease: a processor that lost it
(``QUEUE_LEASE_LOST``) writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

from .. import eventkinds as kinds
from ..errors import AgentOpsError, QueueLeaseLost
from ..gitstore.events import JournalTampered
from ..gitstore.journal import Change, Event, Journal
from ..gitstore.refnames import check_ref_name
from ..gitstore.repo import Store
from ..gitstore.treeview import Snapshot
from ..lease.record import Lease
from ..process.groups import ProcessIdentity, is_alive
from .record import Entry, EntryState, QueuedDelivery, QueueDoc

QUEUE_PREFIX: Final = "refs/agentops/queue/"
QUEUE_FILE: Final = "queue.json"
LEASE_FILE: Final = "lease.json"
LEASE_TTL: Final = 60.0
"""Seconds a processor's lease lasts unless renewed (each round renews it); a holder whose process is gone on this
machine loses it at once."""


def queue_ref(target: str) -> str:
    """``refs/agentops/queue/<target>`` (``USAGE`` for a target that is no valid branch name)."""
    return check_ref_name(QUEUE_PREFIX + target)


def journal(store: Store, target: str, remote: str | None = None) -> Journal:
    """The queue's journal: the local ref, or with ``remote`` the remote's, shared by every machine
    (:class:`~.shared.SharedJournal`)."""
    if remote is None:
        return Journal(store, queue_ref(target))
    from .shared import SharedJournal  # lazily: a local queue never touches the network code

    return SharedJournal(store, queue_ref(target), remote)


@dataclass(frozen=True, slots=True)
class Holder:
    """A would-be processor: its machine and its process."""

    machine: str
    pid: int
    start_time: int

    def holds(self, lease: Lease | None) -> bool:
        return (
            lease is not None
            and lease.holder == self.machine
            and (lease.pid, lease.start_time) == (self.pid, self.start_time)
        )


@dataclass(frozen=True, slots=True)
class QueueView:
    """The queue as one journal commit holds it."""

    doc: QueueDoc
    lease: Lease | None
    commit: str | None


def view_of(snapshot: Snapshot, target: str) -> QueueView:
    raw = snapshot.get(QUEUE_FILE)
    doc = QueueDoc.from_json(json.loads(raw)) if raw is not None else QueueDoc(target)
    lease_raw = snapshot.get(LEASE_FILE)
    lease = Lease.from_json(json.loads(lease_raw)) if lease_raw is not None else None
    return QueueView(doc, lease, snapshot.commit)


def read(store: Store, target: str, remote: str | None = None) -> QueueView:
    """The queue now (empty when there is none); ``RUN_STATE_TAMPERED`` when its tip is not the toolkit's."""
    try:
        return view_of(journal(store, target, remote).read(), target)
    except JournalTampered as exc:
        raise AgentOpsError(
            "RUN_STATE_TAMPERED",
            f"the merge queue of {target} ({queue_ref(target)}) ends in a commit no supervisor wrote: {exc.message}; "
            "nothing in it is acted on",
            details={"ref": queue_ref(target)},
        ) from exc


def put(change: Change, doc: QueueDoc) -> None:
    change.put_json(QUEUE_FILE, doc.to_json(), schema="queue")


def enqueue(
    store: Store,
    target: str,
    run_id: str,
    deliveries: list[QueuedDelivery],
    policy_hash: str,
    now: float,
    remote: str | None = None,
    floor: int = 1,
) -> Entry:
    """The run's entry: appended at the end of the queue, or the one it already has for exactly these deliveries,
    waiting or published (enqueueing is safe to repeat after a crash: a run whose supervisor died between enqueueing
    and recording it finds its entry, even once another supervisor published it). ``floor``: the lowest position
    it may take (past every position the runs' records know: :func:`.audit.highest_position`)."""

    def add(change: Change) -> Entry:
        doc = view_of(change, target).doc
        mine = doc.of_run(run_id)
        if (
            mine is not None
            and mine.deliveries == tuple(deliveries)
            and mine.state
            in (
                EntryState.WAITING,
                EntryState.PUBLISHED,  # enqueued before a crash, published since: the run adopts it, never twice
            )
        ):
            return mine
        if mine is not None and mine.waiting:  # the run enqueues other deliveries: its old entry gives way
            put(
                change,
                doc := doc.with_entry(
                    replace(
                        mine,
                        state=EntryState.EVICTED,
                        code="RUN_QUEUE_REPLACED",
                        reason="the run enqueued other deliveries",
                        settled_at=now,
                    )
                ),
            )
        position = max(doc.next_position, floor)  # never a position a run recorded (a stale copy of a shared queue)
        entry = Entry(position, run_id, tuple(deliveries), policy_hash, now, EntryState.WAITING)
        put(change, doc.with_entry(entry))
        return entry

    entry = (
        journal(store, target, remote)
        .mutate(add, Event(kinds.QUEUE_ENQUEUED, f"{run_id} enqueued on {target}", {"runId": run_id}))
        .value
    )
    return entry


def _free(lease: Lease | None, machine: str, now: float) -> bool:
    """Whether a lease may be taken: none, expired, or held on this machine by a process that is gone."""
    if lease is None or lease.expired(now):
        return True
    return lease.holder == machine and not is_alive(ProcessIdentity(lease.pid, lease.start_time))


def claim(
    store: Store, target: str, me: Holder, now: float, ttl: float = LEASE_TTL, remote: str | None = None
) -> Lease | None:
    """The queue's lease, now held by ``me`` (claimed or renewed by CAS), or None while another holds it."""

    def take(change: Change) -> Lease | None:
        lease = view_of(change, target).lease
        if not me.holds(lease) and not _free(lease, me.machine, now):
            return None
        term = (lease.term if lease is not None else 0) + (0 if me.holds(lease) else 1)
        taken = Lease(me.machine, me.pid, me.start_time, term, now + ttl, now)
        change.put_json(LEASE_FILE, taken.to_json(), schema="lease")
        return taken

    current = read(store, target, remote).lease
    if not me.holds(current) and not _free(current, me.machine, now):
        return None  # read-only: waiting supervisors poll without writing
    event = Event(kinds.QUEUE_LEASED, f"{me.machine} pid {me.pid} processes the queue of {target}", {})
    return journal(store, target, remote).mutate(take, event).value


def release(store: Store, target: str, me: Holder, remote: str | None = None) -> None:
    """Give the lease up (the next waiting supervisor takes it at once); nothing when another holds it."""
    if not me.holds(read(store, target, remote).lease):
        return

    def drop(change: Change) -> None:
        if me.holds(view_of(change, target).lease):
            change.delete(LEASE_FILE)

    journal(store, target, remote).mutate(drop, Event(kinds.QUEUE_RELEASED, f"pid {me.pid} released the queue", {}))


def fenced(change: Change, target: str, me: Holder) -> QueueView:
    """The queue as ``change`` holds it, for a write by ``me``: ``QUEUE_LEASE_LOST`` (nothing is written) when
    ``me`` no longer holds the lease."""
    view = view_of(change, target)
    if not me.holds(view.lease):
        raise QueueLeaseLost(f"the queue of {target} is processed by another supervisor now")
    return view


def settle(
    store: Store, target: str, me: Holder, entries: list[Entry], event: Event, remote: str | None = None
) -> None:
    """Write ``entries`` (settled or rebuilt) into the queue, fenced by the lease (``QUEUE_LEASE_LOST`` when ``me``
    no longer holds it, and nothing is written). An entry settled before stays as it was."""
    journal(store, target, remote).mutate(settler(target, me, entries), event)


def settler(target: str, me: Holder, entries: list[Entry]) -> Callable[[Change], None]:
    """The write of :func:`settle`, for a caller that makes it itself (a remote queue's publish, pushed with the
    target it moves)."""

    def write(change: Change) -> None:
        doc = fenced(change, target, me).doc
        for entry in entries:
            current = doc.entry(entry.position)
            if current is None or not current.waiting:
                continue
            doc = doc.with_entry(entry)
        put(change, doc)

    return write
