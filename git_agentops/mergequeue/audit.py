"""The queue held against the runs' own records: what a rewound, replayed or deleted queue ref cannot make happen.

The queue's journal is authenticated (:mod:`.book`), but an authentic *old* tip is authentic too: a queue ref
rewound to it (or deleted, and the next enqueue starting a new one) would bring back entries that were published
long ago and lose entries that wait now. So before each round the processor holds every entry against the run it
names, whose state journal is authenticated on its own:

* a waiting entry stands only while its run's integration is on its way to the queue or ``queued`` at that position,
  with exactly these deliveries -- the commits its state records as delivered, in merge order. Anything else (a
  run already published, failed or complete; another position; other commits: an entry replayed from an old tip or
  pointing at what the run never froze) is settled ``evicted`` with ``QUEUE_ENTRY_STALE`` and never integrated;
* a run whose record says ``queued`` at a position the queue does not hold as waiting gets its entry back, rebuilt
  from the record, at that position (so the order is the runs' order, whatever the ref says);
* a run whose record says its entry was published at a position the queue does not hold gets it back as
  ``published``, with what its record says it was built on, so the queue's history is whole again;
* no position a run ever recorded is given again (:func:`highest_position`): an enqueue on a copy of a shared queue
  older than what the server lost starts past every position the runs know.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from .. import eventkinds as kinds
from ..errors import AgentOpsError
from ..gitstore.journal import Change, Event
from ..gitstore.repo import Store
from ..model.integration import Integration, IntegrationStatus
from ..model.run import Run, RunStatus
from ..runs import state as runstate
from ..runs.state import RunView
from . import book
from .record import Entry, EntryState, QueuedDelivery, QueueDoc

_ON_THE_WAY: frozenset[IntegrationStatus] = frozenset(
    {
        IntegrationStatus.REQUESTED,
        IntegrationStatus.PREPARED,
        IntegrationStatus.VERIFIED,
        IntegrationStatus.REVIEWED,
    }
)
"""Integration steps before ``queued``: a run there may have enqueued already (the record follows the queue)."""


@dataclass(frozen=True, slots=True)
class Recorded:
    """What a run's own state says about its place in the queue."""

    run_id: str
    status: IntegrationStatus
    position: int | None
    deliveries: tuple[QueuedDelivery, ...]
    policy_hash: str
    active: bool  # the run is served: a paused or stopped run's entry keeps its place but is not integrated
    integration: Integration | None = None  # the whole record, for an entry it says was published

    @property
    def published(self) -> bool:
        return self.status in _PUBLISHED and self.position is not None


_PUBLISHED: frozenset[IntegrationStatus] = frozenset(
    {IntegrationStatus.PUBLISHED, IntegrationStatus.RECEIPTED, IntegrationStatus.COMPLETE}
)


def _runs(store: Store, target: str) -> Iterator[tuple[RunView, Run, Integration]]:
    """Every run of ``target`` with an integration record whose state authenticates."""
    for run_id in runstate.list_runs(store):
        try:
            view = runstate.read(store, run_id)
            run = view.run()
        except AgentOpsError:  # a run whose state cannot be authenticated has no say here
            continue
        if run.target == target and run.integration is not None:
            yield view, run, run.integration


def highest_position(store: Store, target: str) -> int:
    """The highest queue position any run of ``target`` recorded (0: none)."""
    return max((i.queue_position or 0 for _, _, i in _runs(store, target)), default=0)


def recorded(store: Store, target: str) -> dict[str, Recorded]:
    """Every run of ``target`` whose integration is on its way to the queue, waits in it or was published through
    it, by run id."""
    out: dict[str, Recorded] = {}
    for view, run, integration in _runs(store, target):
        run_id = run.run_id
        through_queue = integration.status in _PUBLISHED and integration.queue_position is not None
        waits = integration.status is IntegrationStatus.QUEUED or integration.status in _ON_THE_WAY
        if not waits and not through_queue:
            continue
        tasks = view.tasks()
        order = integration.order or ()
        deliveries = tuple(
            QueuedDelivery(t, tasks[t].title, d.commit)
            for t in order
            if t in tasks and (d := tasks[t].delivery) is not None
        )
        out[run_id] = Recorded(
            run_id,
            integration.status,
            integration.queue_position,
            deliveries,
            run.policy_config_hash,
            run.status is RunStatus.ACTIVE,
            integration,
        )
    return out


def reconcile(
    store: Store, target: str, me: book.Holder, now: float, runs: dict[str, Recorded], remote: str | None = None
) -> int:
    """Hold the queue against the runs' records (``runs``: :func:`recorded`; see the module docstring), fenced by
    the lease; how many entries it evicted or gave back (most rounds: none, and nothing is written)."""
    if not _reconciled(book.read(store, target, remote).doc, runs, now)[1]:
        return 0

    def fix(change: Change) -> int:
        doc, changed = _reconciled(book.fenced(change, target, me).doc, runs, now)
        if changed:
            book.put(change, doc)
        return changed

    event = Event(kinds.QUEUE_RECONCILED, f"queue of {target} held against the runs' records", {})
    return book.journal(store, target, remote).mutate(fix, event).value


def _reconciled(doc: QueueDoc, runs: dict[str, Recorded], now: float) -> tuple[QueueDoc, int]:
    """``doc`` with its stale waiting entries evicted and the entries its runs record as queued restored; and how
    many entries that changed."""
    changed = 0
    for entry in doc.waiting():
        run = runs.get(entry.run_id)
        if run is not None and _stands(entry, run):
            continue
        if run is not None and run.published and run.position == entry.position and run.integration is not None:
            doc = doc.with_entry(_published_entry(run, run.integration, now))  # its run says it went: it did
            changed += 1
            continue
        why = "its run no longer waits in the queue" if run is None else "it is not what its run recorded"
        doc = doc.with_entry(
            replace(
                entry,
                state=EntryState.EVICTED,
                code="QUEUE_ENTRY_STALE",
                reason=f"entry #{entry.position} does not match its run's own record ({why}); never integrated",
                publishing=False,
                settled_at=now,
            )
        )
        changed += 1
    for run in runs.values():
        if run.published and run.integration is not None and run.position is not None:
            if doc.entry(run.position) is None:  # the queue lost it: back, as its run's record says it went
                doc = doc.with_entry(_published_entry(run, run.integration, now))
                changed += 1
            continue
        if run.status is not IntegrationStatus.QUEUED or run.position is None or not run.deliveries:
            continue
        held = doc.entry(run.position)
        if held is not None and (held.waiting or held.run_id == run.run_id):
            continue  # waiting already, or settled (the run follows the queue's outcome)
        doc = doc.with_entry(Entry(run.position, run.run_id, run.deliveries, run.policy_hash, now, EntryState.WAITING))
        changed += 1
    return doc, changed


def _stands(entry: Entry, run: Recorded) -> bool:
    """Whether a waiting entry is what its run recorded. A run still on its way to ``queued`` records no position
    yet (it enqueues, then records): its entry stands. One whose entry was published: none of its stands."""
    if run.status is IntegrationStatus.QUEUED:
        return run.position == entry.position and run.deliveries == entry.deliveries
    return run.status in _ON_THE_WAY


def _published_entry(run: Recorded, integration: Integration, now: float) -> Entry:
    """The entry of a run published through the queue, rebuilt from its record."""
    assert run.position is not None
    return Entry(
        run.position,
        run.run_id,
        run.deliveries,
        run.policy_hash,
        now,
        EntryState.PUBLISHED,
        base=integration.base,
        candidate=integration.candidate,
        steps=integration.steps,
        below=integration.queue_below,
        verification=integration.verification,
        verifications=integration.attempts or 0,
        retried=integration.queue_retried,
        settled_at=integration.published_at,
    )
