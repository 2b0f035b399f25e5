"""What a run did, as values: the facts ``git agentops-run report`` shows (gathered by :mod:`.collect`).

Frozen values with their ``--json`` form; the renderers (Markdown, HTML) read them. Everything agents wrote --
titles, findings, messages, output tails -- is carried as it is: escaping it is the renderer's job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypedDict

from ..canonical import JsonObject, JsonValue
from ..clock import iso8601
from ..model.integration import Integration
from ..model.jsonform import JsonRecord, on_disk
from ..model.run import Run, Worker
from ..model.task import Task
from ..model.usage import Usage, total_usage, usage_partial
from ..transition.record import Transition

TAIL_KEPT: Final = 2000
"""How much of a failed command's (already redacted) output tail the report carries."""


class EvidenceDoc(TypedDict):
    """An evidence record as the report shows it: where it belongs, whether its MAC checks, the record's judged
    fields (as the record holds them: JSON values, its schema's types), and the tail of its output when it failed."""

    id: str
    digest: str
    group: str
    taskId: str | None
    generationId: str | None
    missing: bool
    authentic: bool
    commandId: JsonValue
    kind: JsonValue
    passed: JsonValue
    required: JsonValue
    exitCode: JsonValue
    timedOut: JsonValue
    durationMs: int | float | None
    tests: JsonValue
    cached: JsonValue
    cachedFrom: JsonValue
    producer: JsonValue
    checkout: JsonValue
    commit: JsonValue
    tree: JsonValue
    startedAt: JsonValue
    tail: str | None


class ReviewDoc(TypedDict):
    """A reviewer's verdict, with its report's summary, findings and per-criterion results (as the review report
    holds them; empty without a report)."""

    reviewer: str
    verdict: str
    reportDigest: str
    summary: JsonValue
    findings: list[JsonObject]
    criteria: list[JsonObject]


class ReceiptDoc(TypedDict):
    """The receipt of the published commit and CI's verdict on it."""

    commit: str | None
    verdict: str
    ok: bool | None
    code: str | None
    message: str
    principals: list[str]
    signatures: list[str]
    verification: list[JsonObject]
    usage: JsonObject | None


class RootDoc(TypedDict):
    """The root task and its acceptance criteria (``None`` and empty when the run has none)."""

    taskId: str | None
    title: str | None
    criteria: list[dict[str, object]]


class TaskDoc(TypedDict):
    """A task as the report shows it: its contract, status, and delivery."""

    taskId: str
    title: str
    intent: str
    status: str
    parent: str | None
    dependencies: list[str]
    criteria: list[dict[str, object]]
    revision: int
    blockedReason: str | None
    workerId: str | None
    delivery: JsonObject | None


@dataclass(frozen=True, slots=True)
class EventFact:
    """One journal event as the report shows it."""

    time: float
    code: str
    summary: str
    foreign: bool = False

    def to_json(self) -> dict[str, object]:
        """The event with its time also in RFC 3339 (``at``)."""
        return {
            "time": self.time,
            "at": iso8601(self.time),
            "code": self.code,
            "summary": self.summary,
            "foreign": self.foreign,
        }


@dataclass(frozen=True, slots=True)
class EvidenceFact:
    """One evidence record and the handoff (or gate) it belongs to; ``record`` is None when a delivery names a
    record that is not on its commit (``missing``)."""

    digest: str
    group: str  # "handoff" or "gate"
    task_id: str | None
    generation_id: str | None
    record: Mapping[str, JsonValue] | None
    authentic: bool

    @property
    def id(self) -> str:
        """``ev-<digest>``: the record's id in the report (its digest is what a delivery note names)."""
        return f"ev-{self.digest}"

    def to_json(self) -> EvidenceDoc:
        """The record's judged fields, and the tail of its output when it failed."""
        r = self.record or {}
        duration = r.get("durationMs")  # an integer in every record and summary (their schemas say so)
        return {
            "id": self.id,
            "digest": self.digest,
            "group": self.group,
            "taskId": self.task_id,
            "generationId": self.generation_id,
            "missing": self.record is None,
            "authentic": self.authentic,
            "commandId": r.get("commandId"),
            "kind": r.get("kind"),
            "passed": r.get("passed"),
            "required": r.get("required"),
            "exitCode": r.get("exitCode"),
            "timedOut": r.get("timedOut"),
            "durationMs": duration if isinstance(duration, int | float) else None,
            "tests": r.get("tests"),
            "cached": r.get("cached"),
            "cachedFrom": r.get("cachedFrom"),
            "producer": r.get("producer"),
            "checkout": r.get("checkout"),
            "commit": r.get("commit"),
            "tree": r.get("tree"),
            "startedAt": r.get("startedAt"),
            "tail": str(r.get("tail") or "")[-TAIL_KEPT:] if r and not r.get("passed") else None,
        }


@dataclass(frozen=True, slots=True)
class RefusalFact(JsonRecord):
    """A request of the generation the supervisor refused: the error's code and message, and when (the
    ``REQUEST_REFUSED`` event's)."""

    code: str | None = on_disk("code")
    message: str | None = on_disk("message")
    at: float = on_disk("at")


@dataclass(frozen=True, slots=True)
class Handoff:
    """One handoff of a generation: the commit it named, when, when its verification was answered, its evidence."""

    commit: str
    at: float
    answered_at: float | None = None
    evidence: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        """As the report's JSON shows it."""
        return {"commit": self.commit, "at": self.at, "answeredAt": self.answered_at, "evidence": list(self.evidence)}


@dataclass(frozen=True, slots=True)
class Generation:
    """One generation of one worker, from the event that started it to the one that ended it."""

    worker_id: str
    role: str
    task_id: str | None
    number: int
    started_at: float
    reason: str | None = None
    ended_at: float | None = None
    outcome: str = "running"
    code: str | None = None
    message: str | None = None
    handoffs: tuple[Handoff, ...] = ()
    delivered: str | None = None
    refusals: tuple[RefusalFact, ...] = ()
    usage: Usage | None = None  # what its host reported it used (its worker record's entry)
    events: tuple[EventFact, ...] = ()

    @property
    def id(self) -> str:
        """``gen-<worker>-<n>``: the generation's id in the report."""
        return f"gen-{self.worker_id}-{self.number}"

    @property
    def evidence(self) -> tuple[str, ...]:
        """The ids of the evidence records of all its handoffs."""
        return tuple(name for handoff in self.handoffs for name in handoff.evidence)

    def to_json(self) -> dict[str, object]:
        """As the report's JSON shows it."""
        return {
            "id": self.id,
            "workerId": self.worker_id,
            "role": self.role,
            "taskId": self.task_id,
            "generation": self.number,
            "startedAt": self.started_at,
            "endedAt": self.ended_at,
            "reason": self.reason,
            "outcome": self.outcome,
            "code": self.code,
            "message": self.message,
            "handoffs": [h.to_json() for h in self.handoffs],
            "delivered": self.delivered,
            "refusals": [r.to_json() for r in self.refusals],
            "evidence": list(self.evidence),
            "usage": self.usage.to_json() if self.usage is not None else None,
            "events": [e.to_json() for e in self.events],
        }


@dataclass(frozen=True, slots=True)
class ReviewFact:
    """One reviewer's verdict, with its report when the integration kept it."""

    reviewer: str
    verdict: str
    report_digest: str
    report: Mapping[str, JsonValue] | None

    def to_json(self) -> ReviewDoc:
        """The verdict, and the report's summary, findings and per-criterion results (empty without a report)."""
        report = self.report or {}
        return {
            "reviewer": self.reviewer,
            "verdict": self.verdict,
            "reportDigest": self.report_digest,
            "summary": report.get("summary"),
            "findings": _copies(report.get("findings", ())),
            "criteria": _copies(report.get("criteria", ())),
        }


@dataclass(frozen=True, slots=True)
class ReceiptFact:
    """The receipt of the published commit and CI's verdict on it (``commit`` None: nothing was published)."""

    commit: str | None
    ok: bool | None = None
    code: str | None = None
    message: str = "no receipt: the run has not published a commit"
    principals: tuple[str, ...] = ()
    signatures: tuple[str, ...] = ()
    verification: tuple[Mapping[str, JsonValue], ...] = ()
    usage: Mapping[str, JsonValue] | None = None

    @property
    def verdict(self) -> str:
        """``valid``, ``invalid`` or ``none``."""
        return "none" if self.ok is None else "valid" if self.ok else "invalid"

    def to_json(self) -> ReceiptDoc:
        """As the report's JSON shows it."""
        return {
            "commit": self.commit,
            "verdict": self.verdict,
            "ok": self.ok,
            "code": self.code,
            "message": self.message,
            "principals": list(self.principals),
            "signatures": list(self.signatures),
            "verification": [dict(v) for v in self.verification],
            "usage": dict(self.usage) if self.usage is not None else None,
        }


class UsageSummary(TypedDict):
    """The run's spend as the report shows it: tokens and dollars the hosts reported, active time, the limits."""

    tokens: int
    partial: bool
    costUsd: float | None
    tokenLimit: int | None
    costLimitUsd: float | None
    usedSeconds: float
    limitSeconds: int


class ReportDoc(TypedDict):
    """The facts document ``git agentops-run report --json`` prints; the records' own JSON forms (a generation, an
    event, the integration, a transition) inside it as those records write them."""

    runId: str
    status: str
    statusReason: str | None
    goal: str
    target: str
    base: str
    host: str
    createdAt: float
    root: RootDoc
    tasks: list[TaskDoc]
    generations: list[dict[str, object]]
    evidence: list[EvidenceDoc]
    integration: JsonObject | None
    reviews: list[ReviewDoc]
    receipt: ReceiptDoc
    usage: UsageSummary
    runEvents: list[dict[str, object]]
    foreignCommits: int
    policyTransitions: list[JsonObject]


@dataclass(frozen=True, slots=True)
class Report:
    """Everything :func:`git_agentops.report.collect.gather` found; :meth:`to_json` is ``report --json``."""

    run: Run
    tasks: tuple[Task, ...]
    workers: tuple[Worker, ...]
    generations: tuple[Generation, ...]
    evidence: tuple[EvidenceFact, ...]
    reviews: tuple[ReviewFact, ...]
    receipt: ReceiptFact
    run_events: tuple[EventFact, ...]
    used_seconds: float
    foreign_commits: int = 0
    transitions: tuple[Transition, ...] = ()
    """The run's policy transitions (``transition.json`` of each journal, oldest first)."""

    @property
    def integration(self) -> Integration | None:
        """The run's integration record (None before ``finalize``)."""
        return self.run.integration

    def task_title(self, task_id: str) -> str:
        """The title of a task of the run (its id when it has none here)."""
        return next((t.title for t in self.tasks if t.id == task_id), task_id)

    def usage(self) -> UsageSummary:
        """Tokens and dollars the hosts reported, and active time, with their limits."""
        accounts = self.run.accounts(self.workers)
        tokens, cost = total_usage(accounts)
        return {
            "tokens": tokens,
            "partial": usage_partial(accounts),
            "costUsd": round(cost, 6) if cost is not None else None,
            "tokenLimit": self.run.token_limit,
            "costLimitUsd": self.run.cost_limit_usd,
            "usedSeconds": round(self.used_seconds, 1),
            "limitSeconds": self.run.budget_seconds,
        }

    def to_json(self) -> ReportDoc:
        """The facts document ``git agentops-run report --json`` prints."""
        run = self.run
        root = next((t for t in self.tasks if t.id == run.root_task_id), None)
        integration = run.integration.to_json() if run.integration else None
        if integration is not None:
            integration.pop("request", None)
        return {
            "runId": run.run_id,
            "status": str(run.status),
            "statusReason": run.status_reason,
            "goal": run.goal,
            "target": run.target,
            "base": run.base_commit,
            "host": run.host,
            "createdAt": run.created_at,
            "root": {
                "taskId": root.id if root else None,
                "title": root.title if root else None,
                "criteria": [c.to_json() for c in root.criteria] if root else [],
            },
            "tasks": [task_json(t) for t in self.tasks],
            "generations": [g.to_json() for g in self.generations],
            "evidence": [e.to_json() for e in self.evidence],
            "integration": integration,
            "reviews": [r.to_json() for r in self.reviews],
            "receipt": self.receipt.to_json(),
            "usage": self.usage(),
            "runEvents": [e.to_json() for e in self.run_events],
            "foreignCommits": self.foreign_commits,
            "policyTransitions": [t.to_json() for t in self.transitions],
        }


def _copies(items: JsonValue) -> list[JsonObject]:
    """A (schema-valid) array of objects, each copied: what the report shows of a document it read (the review
    report's schema makes ``findings`` and ``criteria`` arrays of objects)."""
    if not isinstance(items, Sequence) or isinstance(items, str):
        return []
    return [dict(item) for item in items if isinstance(item, Mapping)]


def task_json(task: Task) -> TaskDoc:
    """A task as the report shows it: its contract, status, and delivery."""
    return {
        "taskId": task.id,
        "title": task.title,
        "intent": task.intent,
        "status": str(task.status),
        "parent": task.parent,
        "dependencies": list(task.dependencies),
        "criteria": [c.to_json() for c in task.criteria],
        "revision": task.revision,
        "blockedReason": task.blocked_reason,
        "workerId": task.worker_id,
        "delivery": task.delivery.to_json() if task.delivery is not None else None,
    }
