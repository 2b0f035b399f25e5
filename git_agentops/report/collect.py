"""What a run did, gathered from its refs and notes for ``git agentops-run report`` (which only reads).

A run leaves its story in several places; :func:`gather` puts them side by side as one :class:`Report`:

* the **state** (``refs/agentops/runs/<run>/state``): the goal, every task with its status and dependencies, the
  workers with their recorded failures and usage, the integration record (merge chain, gate summaries, reviews);
* the **journal** -- the same ref's commit chain, one event per commit -- read oldest first into a timeline of every
  *generation* of every worker: when it started (and why), its handoffs, how it ended (delivered, failed with a
  code, idle, interrupted, blocked), the refusals it got. A generation's number is read from the worker record of the
  commit that started it, not guessed from counting;
* the **evidence notes** (``refs/notes/agentops/evidence``) of every handoff: for a delivery exactly the records its
  delivery names (by digest), for a refused handoff the supervisor's records of that task on that commit made while
  it was being verified; and the gate's records on the candidate. Each says whether its MAC checks;
* the **review reports** the integration kept as artifacts in the state;
* the **receipt** of the published commit, judged as CI judges one commit
  (:func:`git_agentops.receipts.check.check`: the rules of the policy at its first parent).

Nothing is written: no ref, no note, no state commit. Everything agents wrote -- titles, findings, messages, output
tails -- is carried as data; escaping it is the renderer's job.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Final

from .. import eventkinds as kinds
from ..canonical import JsonValue, digest
from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.journal import Entry, Journal
from ..gitstore.notes import RECEIPTS_REF, Notes
from ..gitstore.repo import Store
from ..model.integration import Integration
from ..model.run import Role, Run, Worker, used_seconds
from ..model.task import Task
from ..receipts.statement import evidence_summary
from ..runs import state as runstate
from ..schema import documents
from ..transition import journal as transitions
from ..verify.evidence import SUPERVISOR, EvidenceStore, authentic
from .record import (
    EventFact,
    EvidenceFact,
    Generation,
    Handoff,
    ReceiptFact,
    RefusalFact,
    Report,
    ReviewFact,
)

ENDINGS: Final[Mapping[str, str]] = {
    kinds.WORKER_FAILED: "failed",
    kinds.WORKER_IDLE: "idle",
    kinds.WORKER_BLOCKED: "blocked",
}
SOFT_ENDINGS: Final[Mapping[str, str]] = {
    kinds.WORKER_STOPPED: "stopped",
    kinds.WORKER_STOPPED_FOR_HANDOFF: "handing-off",
    kinds.WORKER_RECONCILED: "interrupted",
    kinds.WORKER_LEFTOVER_STOPPED: "interrupted",
    kinds.HOST_RESUME_FAILED: "stopped",
}
"""Events that end a generation only when nothing more telling (delivered, failed...) ends it."""
RUN_EVENT_PREFIXES: Final = ("RUN_", "INTEGRATION_", "REVIEWS_")
SHORT_ID: Final = re.compile(r"[0-9a-f]{7,64}")
WINDOW: Final = 3600.0
"""How long after a refused handoff its verification's records may start when no answer closes it."""
SLACK: Final = 0.01
"""Records carry milliseconds; events the full clock: the verification of a handoff starts after its event."""


# -- gathering ---------------------------------------------------------------------------------------------------------


def gather(store: Store, run_id: str, *, clock: Clock, environ: Mapping[str, str]) -> Report:
    """The report of ``run_id``. ``RUN_NOT_FOUND``; ``RUN_STATE_TAMPERED`` when the state's tip is foreign."""
    view = runstate.read(store, run_id)
    run = view.run()
    order = {t: i for i, t in enumerate(run.plan_order)}
    tasks = tuple(sorted(view.tasks().values(), key=lambda t: (t.parent is not None, order.get(t.id, len(order)))))
    workers = tuple(sorted(view.workers(), key=lambda w: (w.role is not Role.COORDINATOR, w.worker_id)))
    journal = runstate.journal(store, run_id)
    entries = list(journal.log())[::-1]
    generations, run_events = _timeline(store, journal, entries, {w.worker_id: w for w in workers})
    evidence = EvidenceStore(store, store.private_dir())
    generations, facts = _evidence(evidence, generations, {t.id: t for t in tasks})
    facts += _gate_evidence(evidence, run.integration)
    return Report(
        run=run,
        tasks=tasks,
        workers=workers,
        generations=tuple(generations),
        evidence=tuple(facts),
        reviews=tuple(_reviews(journal, run.integration, entries)),
        receipt=_receipt(store, run, clock=clock, environ=environ),
        run_events=tuple(run_events),
        used_seconds=used_seconds(run.intervals, clock.now()),
        foreign_commits=sum(1 for e in entries if e.foreign),
        transitions=tuple(transitions.all_of(store, run.run_id)),
    )


@dataclass
class _Open:
    """A generation being read from the journal; :func:`_freeze` makes it a :class:`Generation`."""

    start: Generation
    outcome: str = "running"
    ended_at: float | None = None
    code: str | None = None
    message: str | None = None
    delivered: str | None = None
    refusals: list[RefusalFact] = field(default_factory=list)
    events: list[EventFact] = field(default_factory=list)
    handoffs: list[Handoff] = field(default_factory=list)

    @property
    def soft(self) -> bool:
        """Nothing more telling than a stop has ended it (yet)."""
        return self.outcome in ("running", *SOFT_ENDINGS.values())

    def answered(self, at: float) -> None:
        """The latest handoff's verification was answered (refused, or delivered) at ``at``."""
        if self.handoffs and self.handoffs[-1].answered_at is None:
            self.handoffs[-1] = replace(self.handoffs[-1], answered_at=at)


def _timeline(
    store: Store, journal: Journal, entries: Sequence[Entry], workers: Mapping[str, Worker]
) -> tuple[list[Generation], list[EventFact]]:
    """Every generation of every worker, oldest first, and the run's own events (see the module docstring)."""
    opened: list[_Open] = []
    current: dict[str, _Open] = {}
    counted: dict[str, int] = {}
    run_events: list[EventFact] = []
    for entry in entries:
        fact = EventFact(entry.time, entry.code, entry.summary, entry.foreign)
        if entry.code.startswith(RUN_EVENT_PREFIXES) or entry.foreign:
            run_events.append(fact)
        if entry.foreign:  # never acted on: a claim, not a fact about a generation
            continue
        if entry.code == kinds.RUN_COMPLETE:
            for item in current.values():
                if item.start.role == Role.COORDINATOR and item.soft:
                    item.outcome, item.ended_at = "finalized", entry.time
        worker_id = entry.data.get("workerId")
        if not isinstance(worker_id, str):
            continue
        if entry.code == kinds.WORKER_STARTING:
            counted[worker_id] = counted.get(worker_id, 0) + 1
            current[worker_id] = _Open(_started(journal, entry, workers.get(worker_id), counted[worker_id]))
            opened.append(current[worker_id])
        now = current.get(worker_id)
        if now is not None:
            now.events.append(fact)
            _apply(store, now, entry)
    return [_freeze(item, workers.get(item.start.worker_id)) for item in opened], run_events


def _started(journal: Journal, entry: Entry, final: Worker | None, count: int) -> Generation:
    """The generation ``WORKER_STARTING`` began: its number and why, from the worker record of that commit."""
    worker_id = str(entry.data["workerId"])
    record = _worker_at(journal, entry.commit, worker_id)
    known = record or final
    reason = (record.wake or record.diagnostic) if record is not None else None
    return Generation(
        worker_id=worker_id,
        role=str(known.role) if known else str(Role.CHILD),
        task_id=(known.task_id if known else None) or (final.task_id if final else None),
        number=record.generation if record is not None else count,
        started_at=entry.time,
        reason=str(reason) if reason else None,
    )


def _apply(store: Store, item: _Open, entry: Entry) -> None:
    """What one event says about the generation it belongs to."""
    code, data = entry.code, entry.data
    if code == kinds.WORKER_HANDING_OFF:
        short = entry.summary.rpartition(" ")[2]
        commit = _commit(store, short) if SHORT_ID.fullmatch(short) else None
        if commit is not None:
            item.handoffs.append(Handoff(commit, entry.time))
    elif code == kinds.REQUEST_REFUSED and data.get("generation") == item.start.number:
        item.refusals.append(RefusalFact(data.get("code"), data.get("message"), entry.time))
        item.answered(entry.time)
    elif code == kinds.TASK_DELIVERED and data.get("generation") == item.start.number:
        item.outcome, item.ended_at, item.delivered = "delivered", entry.time, data.get("commit")
        item.answered(entry.time)
    elif code in ENDINGS and item.outcome != "delivered":
        item.outcome, item.ended_at = ENDINGS[code], entry.time
        named = data.get("code") or entry.summary.rpartition(": ")[2]
        if code != kinds.WORKER_IDLE and (code == kinds.WORKER_BLOCKED or not item.code):
            item.code = str(named) if named else None
            if data.get("reason"):
                item.message = str(data["reason"])
    elif code in SOFT_ENDINGS and item.soft:
        item.outcome, item.ended_at = SOFT_ENDINGS[code], entry.time
    elif code == kinds.WORKER_STARTED and item.soft:
        item.outcome = "running"


def _freeze(item: _Open, worker: Worker | None) -> Generation:
    """The finished generation, with the failure and usage its worker record keeps for it."""
    number = item.start.number
    failure = next((x for x in (worker.failures if worker else ()) if x.generation == number), None)
    code = item.code or (failure.code if failure and item.outcome in ("failed", "blocked") else None)
    message = item.message
    if failure is not None and failure.code == code and message is None:
        message = failure.message
    usage = next((u for u in (worker.usage if worker else ()) if u.generation == number), None)
    return replace(
        item.start,
        outcome=item.outcome,
        ended_at=item.ended_at,
        code=code,
        message=message,
        handoffs=tuple(item.handoffs),
        delivered=item.delivered,
        refusals=tuple(item.refusals),
        usage=usage,
        events=tuple(item.events),
    )


def _worker_at(journal: Journal, commit: str, worker_id: str) -> Worker | None:
    try:
        return runstate.RunView(journal.read_at(commit)).worker(worker_id)
    except AgentOpsError:
        return None


def _commit(store: Store, short: str) -> str | None:
    """The commit a handoff event names by its abbreviated id (None when it names none, or several)."""
    try:
        return str(store.resolve_commit(short).id)
    except AgentOpsError:
        return None


def _evidence(
    evidence: EvidenceStore, generations: list[Generation], tasks: Mapping[str, Task]
) -> tuple[list[Generation], list[EvidenceFact]]:
    """Each handoff -> the evidence records of its verification (see the module docstring)."""
    facts: list[EvidenceFact] = []
    seen: set[str] = set()
    out = []
    for gen in generations:
        task = tasks.get(gen.task_id or "")
        delivery = task.delivery if task is not None else None
        handoffs = []
        for handoff in gen.handoffs:
            records = evidence.for_commit(handoff.commit)
            if delivery is not None and handoff.commit == gen.delivered == delivery.commit:
                named = {r.digest: r for r in records}
                chosen = [(str(d), named.get(str(d))) for d in delivery.evidence]
            else:
                until = (handoff.answered_at or gen.ended_at or handoff.at + WINDOW) + SLACK
                chosen = [
                    (r.digest, r)
                    for r in records
                    if r.task_id == gen.task_id
                    and r.producer == SUPERVISOR.producer
                    and _within(r.started_at, handoff.at - SLACK, until)
                ]
            ids = []
            for name, record in chosen:
                if name in seen:
                    continue
                seen.add(name)
                ok = record is not None and authentic(record, evidence.keys)
                shown = record.to_json() if record is not None else None
                facts.append(EvidenceFact(name, "handoff", gen.task_id, gen.id, shown, ok))
                ids.append(facts[-1].id)
            handoffs.append(replace(handoff, evidence=tuple(ids)))
        out.append(replace(gen, handoffs=tuple(handoffs)))
    return out, facts


def _within(stamp: object, low: float, high: float) -> bool:
    if not isinstance(stamp, str):
        return False
    try:
        at = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return False
    return low <= at <= high


def _gate_evidence(evidence: EvidenceStore, integration: Integration | None) -> list[EvidenceFact]:
    """The final gate's records, found on the candidate by the summaries the integration record keeps."""
    if integration is None or not integration.verification or not integration.candidate:
        return []
    records = evidence.for_commit(integration.candidate)
    facts = []
    for summary in integration.verification:
        # on the keys the summary has: one kept before the summary carried policyConfigHash still finds its record
        record = next((r for r in records[::-1] if _agrees(evidence_summary(r.to_json()), summary)), None)
        name = record.digest if record is not None else digest(dict(summary))
        ok = record is not None and authentic(record, evidence.keys)
        shown = record.to_json() if record is not None else dict(summary)
        facts.append(EvidenceFact(name, "gate", summary.get("taskId"), None, shown, ok))
    return facts


def _agrees(found: Mapping[str, object], summary: Mapping[str, JsonValue]) -> bool:
    """Whether an evidence summary ``found`` has the values of a kept ``summary`` on the keys it has."""
    return {k: v for k, v in found.items() if k in summary} == dict(summary)


def _reviews(journal: Journal, integration: Integration | None, entries: Sequence[Entry]) -> list[ReviewFact]:
    """The integration's reviews, each with the report kept in the state at ``REVIEWS_RECORDED``."""
    if integration is None or not integration.reviews:
        return []
    recorded = [e for e in entries if e.code == kinds.REVIEWS_RECORDED and not e.foreign]
    reports = list(added_reports(journal, recorded[-1].commit, recorded[-1].parent)) if recorded else []
    facts = []
    for review in integration.reviews:
        name = review.reviewer
        report = next((r for r in reports if r.get("reviewer") == name), None)
        if report is None and len(reports) == len(integration.reviews) == 1:
            report = reports[0]
        facts.append(ReviewFact(name, review.verdict, review.report_digest, report))
    return facts


def added_reports(journal: Journal, commit: str, parent: str | None) -> Iterable[Mapping[str, JsonValue]]:
    """The review reports among the artifacts ``commit`` added to the state."""
    after = journal.read_at(commit)
    before = journal.read_at(parent) if parent else None
    for fan in after.list("artifacts"):
        old = set(before.list(f"artifacts/{fan}")) if before is not None else set()
        for name in after.list(f"artifacts/{fan}"):
            data = after.get(f"artifacts/{fan}/{name}")
            if name in old or data is None:
                continue
            try:
                yield documents.load(data, schema="review-report", what=f"review report {name[:12]}")
            except AgentOpsError:  # another artifact (a recipe, a diagnostic)
                continue


def _receipt(store: Store, run: Run, *, clock: Clock, environ: Mapping[str, str]) -> ReceiptFact:
    """The published commit's receipt, judged as CI judges one commit."""
    from ..receipts import check as receipt_check

    commit = run.integration.candidate if run.integration else None
    if commit is None or Notes(store, RECEIPTS_REF).read(commit) is None:
        return ReceiptFact(commit=commit, message=_no_receipt(run))
    where = store.workdir or store.git_dir
    try:
        verdict = receipt_check.check(where, commit, environ=environ, clock=clock)[0]
    except AgentOpsError as exc:  # the check could not run (git failed): that is no verdict of valid
        return ReceiptFact(commit=commit, ok=False, code=exc.code, message=exc.message)
    try:
        shown = receipt_check.show(where, commit, environ=environ, clock=clock)
    except AgentOpsError:  # a note that is no envelope: the verdict already says so
        shown = {"signatures": [], "statement": {}}
    predicate = shown["statement"].get("predicate", {}) if isinstance(shown["statement"], dict) else {}
    return ReceiptFact(
        commit=commit,
        ok=verdict.ok,
        code=verdict.code,
        message=verdict.message,
        principals=tuple(verdict.principals),
        signatures=tuple(str(s.get("keyid")) for s in shown["signatures"]),
        verification=tuple(predicate.get("verification", {}).get("value", ())),
        usage=predicate.get("usage", {}).get("value"),
    )


def _no_receipt(run: Run) -> str:
    integration = run.integration
    if integration is None:
        return "no receipt: the run has not integrated"
    if integration.failure:
        return f"no receipt: the integration failed ({integration.failure})"
    return f"no receipt yet: the integration is {integration.status}"
