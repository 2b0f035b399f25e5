"""Runs and workers as values, and the pure rules that move them.

A **run** pursues one immutable goal with one coordinator and any number of child workers. Its status:

* ``active`` -- supervised, writers may run;
* ``paused`` / ``stopping`` -- the user asked; writers are stopped and the supervisor exits;
* ``awaiting-input`` -- a worker asked a question; writers are stopped until ``git agentops-run answer``;
* ``blocked`` -- a rule stopped it (coordinator without progress, restart storm...); the reason is recorded;
* ``budget-limited`` -- its active time is spent (never "failed": the work so far is kept);
* ``complete`` -- integrated, with a receipt. Sticky.

``disable_restart`` is the fence: once set, no writer generation may start until a user resume clears it.

A **worker** is one agent process lineage on one worktree. Every start issues a new **generation**; requests,
commits and handoffs carry it, so a stale or crashed process can never publish (fencing token).

**Budget** is active wall time, kept as intervals that are open only while a supervisor runs: a pause or a crash
stops the clock. **Restart storm**: more than :data:`STORM_STARTS` supervisor starts within
:data:`STORM_WINDOW` seconds since the last user resume blocks the run instead of looping.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, NotRequired, TypedDict

from ..canonical import JsonObject, JsonValue, digest
from .integration import Integration
from .jsonform import FieldMap, JsonRecord, field_map, on_disk
from .sandbox import weakest
from .status import RunStatus as RunStatus  # noqa: PLC0414 -- re-exported: the hooks import it from .status
from .status import WorkerStatus as WorkerStatus  # noqa: PLC0414
from .task import Task, TaskStatus, task_contract_hash
from .usage import Accounted, ReviewerUsage, Reviews, Usage, total_usage
from .workspace import WorkspaceCost

STORM_STARTS: Final = 3
STORM_WINDOW: Final = 300.0
NO_PROGRESS_REPEATS: Final = 2  # the same failure this many times in a row blocks (see no_progress)
MAX_GENERATIONS: Final = 8  # a hard stop even when every failure looks different


ENDED: Final = frozenset(
    {RunStatus.BLOCKED, RunStatus.BUDGET_LIMITED, RunStatus.STOPPING, RunStatus.COMPLETE, RunStatus.PAUSED}
)


class Role(enum.StrEnum):
    """A worker is the run's coordinator (plans, asks, finalizes) or a child (implements one task, hands off)."""

    COORDINATOR = "coordinator"
    CHILD = "child"


ACTIVE_WORKER: Final = frozenset(
    {WorkerStatus.ASSIGNED, WorkerStatus.STARTING, WorkerStatus.RUNNING, WorkerStatus.IDLE, WorkerStatus.HANDING_OFF}
)


# -- the documents' shapes (``schemas/run.schema.json``, ``schemas/worker.schema.json``), read once the schema
# checked them; a key an older record may lack is still read with ``.get`` and its default


class IntervalDoc(TypedDict):
    """A ``budget.intervals[]`` entry (``end`` null while open)."""

    start: float
    end: float | None


class BudgetDoc(TypedDict):
    """``run.json``'s ``budget``: the limits, the active intervals and what reviewers used."""

    limitSeconds: int
    intervals: list[IntervalDoc]
    costLimitUsd: NotRequired[float | None]
    tokenLimit: NotRequired[int | None]
    reviewUsage: NotRequired[list[JsonObject]]


class RunDoc(TypedDict):
    """``run.json``."""

    runId: str
    goal: str
    goalHash: str
    target: str
    baseCommit: str
    host: str
    repository: str
    policyConfigHash: str
    status: str
    statusReason: str | None
    disableRestart: bool
    coordinatorId: str
    rootTaskId: str | None
    contractHash: str
    contractRevision: int
    recipeDigest: str | None
    budget: BudgetDoc
    createdAt: float
    supervisorStarts: list[float]
    lastUserResume: float | None
    planOrder: list[str]
    integration: JsonObject | None


class ProcessDoc(TypedDict):
    """A worker record's ``process``."""

    pid: int
    startTime: int


class FailureDoc(TypedDict):
    """A worker record's ``failures[]`` entry."""

    fingerprint: str
    code: str
    message: str
    generation: int
    head: str | None
    at: float
    output: NotRequired[str]


class WorkerDoc(TypedDict):
    """``workers/<id>.json``."""

    workerId: str
    role: str
    host: str
    worktree: str
    branch: str
    taskId: str | None
    status: str
    generation: int
    base: str | None
    process: ProcessDoc | None
    diagnostic: str | None
    failures: list[FailureDoc]
    startedAt: float | None
    blockedReason: str | None
    extra: JsonObject
    session: NotRequired[str | None]
    usage: NotRequired[list[JsonObject]]
    wokenFor: NotRequired[list[str]]
    sandbox: NotRequired[str | None]


@dataclass(frozen=True, slots=True)
class Interval:
    """One stretch of active time; ``end`` is None while it is open (a supervisor runs, or crashed before closing)."""

    start: float
    end: float | None = None

    def to_json(self) -> JsonObject:
        """The ``budget.intervals[]`` entry of ``run.json``."""
        return {"start": self.start, "end": self.end}


@dataclass(frozen=True, slots=True)
class Run:
    """The run record, ``run.json`` in the run's state journal. Frozen: the rules below return a changed copy."""

    run_id: str
    goal: str
    target: str
    base_commit: str
    host: str
    repository: str
    policy_config_hash: str
    budget_seconds: int
    created_at: float
    cost_limit_usd: float | None = None
    token_limit: int | None = None
    status: RunStatus = RunStatus.ACTIVE
    status_reason: str | None = None
    disable_restart: bool = False
    coordinator_id: str = "coordinator"
    root_task_id: str | None = None
    contract_hash: str = ""
    contract_revision: int = 0
    recipe_digest: str | None = None
    intervals: tuple[Interval, ...] = ()
    supervisor_starts: tuple[float, ...] = ()
    last_user_resume: float | None = None
    plan_order: tuple[str, ...] = ()
    integration: Integration | None = None
    review_usage: tuple[ReviewerUsage, ...] = ()  # what reviewers used: part of the spend the budget counts

    def accounts(self, workers: Iterable[Worker]) -> list[Accounted]:
        """Everything that spent this run's budget: its workers' generations and its reviewers' attempts."""
        return [*workers, Reviews(self.review_usage)]

    @property
    def goal_hash(self) -> str:
        """``digest({"goal": goal})``, stored as ``goalHash``.

        A receipt records it too (:func:`~git_agentops.receipts.statement.goal_hash`), checked against its sealed goal.
        """
        return digest({"goal": self.goal})

    def to_json(self) -> JsonObject:
        """The ``run.json`` document (the ``run`` schema), ``goalHash`` included."""
        return {
            "runId": self.run_id,
            "goal": self.goal,
            "goalHash": self.goal_hash,
            "target": self.target,
            "baseCommit": self.base_commit,
            "host": self.host,
            "repository": self.repository,
            "policyConfigHash": self.policy_config_hash,
            "status": str(self.status),
            "statusReason": self.status_reason,
            "disableRestart": self.disable_restart,
            "coordinatorId": self.coordinator_id,
            "rootTaskId": self.root_task_id,
            "contractHash": self.contract_hash,
            "contractRevision": self.contract_revision,
            "recipeDigest": self.recipe_digest,
            "budget": {
                "limitSeconds": self.budget_seconds,
                "intervals": [i.to_json() for i in self.intervals],
                "costLimitUsd": self.cost_limit_usd,
                "tokenLimit": self.token_limit,
                "reviewUsage": [entry.to_json() for entry in self.review_usage],
            },
            "createdAt": self.created_at,
            "supervisorStarts": list(self.supervisor_starts),
            "lastUserResume": self.last_user_resume,
            "planOrder": list(self.plan_order),
            "integration": self.integration.to_json() if self.integration is not None else None,
        }

    @classmethod
    def from_json(cls, doc: RunDoc) -> Run:
        """Read ``run.json`` back (already validated against the ``run`` schema); absent optional keys get defaults."""
        return cls(
            run_id=doc["runId"],
            goal=doc["goal"],
            target=doc["target"],
            base_commit=doc["baseCommit"],
            host=doc["host"],
            repository=doc["repository"],
            policy_config_hash=doc["policyConfigHash"],
            budget_seconds=int(doc["budget"]["limitSeconds"]),
            cost_limit_usd=doc["budget"].get("costLimitUsd"),
            token_limit=doc["budget"].get("tokenLimit"),
            created_at=float(doc["createdAt"]),
            status=RunStatus(doc["status"]),
            status_reason=doc.get("statusReason"),
            disable_restart=bool(doc.get("disableRestart", False)),
            coordinator_id=doc.get("coordinatorId", "coordinator"),
            root_task_id=doc.get("rootTaskId"),
            contract_hash=doc.get("contractHash", ""),
            contract_revision=int(doc.get("contractRevision", 0)),
            recipe_digest=doc.get("recipeDigest"),
            intervals=tuple(Interval(i["start"], i.get("end")) for i in doc["budget"]["intervals"]),
            supervisor_starts=tuple(doc.get("supervisorStarts", ())),
            last_user_resume=doc.get("lastUserResume"),
            plan_order=tuple(doc.get("planOrder", ())),
            integration=Integration.from_json(record) if (record := doc.get("integration")) else None,
            review_usage=tuple(ReviewerUsage.from_json(u) for u in doc["budget"].get("reviewUsage", ())),
        )


@dataclass(frozen=True, slots=True)
class ProcessRef:
    """The process a worker generation runs as: pid and ``/proc`` start time, so a reused pid is never taken for it."""

    pid: int
    start_time: int

    def to_json(self) -> dict[str, int]:
        """The ``process`` object of a worker record."""
        return {"pid": self.pid, "startTime": self.start_time}


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed generation of a worker, as the supervisor records it.

    :func:`no_progress` compares ``fingerprint`` (see :func:`fingerprint`), ``output`` -- the digest of the failing
    commands' normalised failing lines, for a verification failure (:mod:`git_agentops.verify.failing`) -- and
    ``head``, the worktree's HEAD then.
    """

    fingerprint: str
    code: str
    message: str
    generation: int
    head: str | None
    at: float
    output: str | None = None

    def to_json(self) -> JsonObject:
        """The ``failures[]`` entry of a worker record (``output`` only when the failure names one)."""
        doc: JsonObject = {
            "fingerprint": self.fingerprint,
            "code": self.code,
            "message": self.message,
            "generation": self.generation,
            "head": self.head,
            "at": self.at,
        }
        if self.output is not None:
            doc["output"] = self.output
        return doc


@dataclass(frozen=True, slots=True)
class Interruption(JsonRecord):
    """The generation a supervisor restart stopped, what it was doing and why (the worker's ``extra.interrupted``,
    until the next generation starts): what :func:`~.lifecycle.restart_wake` tells the next one."""

    generation: int = on_disk("generation")
    status: str = on_disk("status")  # the worker's status when it was stopped
    reason: str = on_disk("reason")


INTERRUPTION: Final[FieldMap[Interruption]] = field_map(Interruption)


@dataclass(frozen=True, slots=True)
class Worker:
    """A worker record, ``workers/<id>.json`` in the run's state journal.

    ``generation`` is the fencing token its requests carry; ``base`` is the commit its worktree started from.
    """

    worker_id: str
    role: Role
    host: str
    worktree: str
    branch: str
    task_id: str | None = None
    status: WorkerStatus = WorkerStatus.ASSIGNED
    generation: int = 0
    base: str | None = None
    process: ProcessRef | None = None
    diagnostic: str | None = None
    failures: tuple[Failure, ...] = ()
    started_at: float | None = None
    blocked_reason: str | None = None
    provisioning: bool = on_disk("provisioning", absent=False)  # assigned, its worktree and setup not made yet
    # why its current generation was started (its events, an interruption before it)
    wake: str | None = on_disk("wake", absent=None)
    resumed: str | None = on_disk("resumed", absent=None)  # the host session its current generation resumed
    # the generation a supervisor restart stopped, until the next one starts
    interrupted: Interruption | None = on_disk("interrupted", absent=None, decode=Interruption.from_json)
    # what making its workspace cost (model.workspace): set when it is provisioned
    workspace: WorkspaceCost | None = on_disk("workspace", absent=None, decode=WorkspaceCost.from_json)
    session: str | None = None  # the host's session id of its latest generation, for resuming it
    usage: tuple[Usage, ...] = ()
    woken_for: tuple[str, ...] = ()  # the events an idle coordinator was already woken for
    sandbox: str | None = None  # the weakest sandbox level any generation ran at (model.sandbox); None: none yet

    @property
    def active(self) -> bool:
        """Whether the worker is on its task (:data:`ACTIVE_WORKER`); active children count against ``max_workers``."""
        return self.status in ACTIVE_WORKER

    def ran_at(self, level: str) -> str | None:
        """The ``sandbox`` to record once a generation ran at ``level``: the weaker of it and the one recorded."""
        return weakest((self.sandbox, level))

    def to_json(self) -> JsonObject:
        """The ``workers/<id>.json`` document (the ``worker`` schema)."""
        return {
            "workerId": self.worker_id,
            "role": str(self.role),
            "host": self.host,
            "worktree": self.worktree,
            "branch": self.branch,
            "taskId": self.task_id,
            "status": str(self.status),
            "generation": self.generation,
            "base": self.base,
            "process": self.process.to_json() if self.process else None,
            "diagnostic": self.diagnostic,
            "failures": [f.to_json() for f in self.failures],
            "startedAt": self.started_at,
            "blockedReason": self.blocked_reason,
            "extra": WORKER_EXTRA.dump(self),
            "session": self.session,
            "usage": [u.to_json() for u in self.usage],
            "wokenFor": list(self.woken_for),
            "sandbox": self.sandbox,
        }

    @classmethod
    def from_json(cls, doc: WorkerDoc) -> Worker:
        """Read a worker record back (already validated against the ``worker`` schema); absent optional keys get
        defaults (a failure without ``head``, a record written before levels were recorded: None)."""
        process = doc.get("process")
        return WORKER_EXTRA.load(
            doc.get("extra", {}),
            worker_id=doc["workerId"],
            role=Role(doc["role"]),
            host=doc["host"],
            worktree=doc["worktree"],
            branch=doc["branch"],
            task_id=doc.get("taskId"),
            status=WorkerStatus(doc["status"]),
            generation=int(doc["generation"]),
            base=doc.get("base"),
            process=ProcessRef(process["pid"], process["startTime"]) if process else None,
            diagnostic=doc.get("diagnostic"),
            failures=tuple(_failure(f) for f in doc.get("failures", ())),
            started_at=doc.get("startedAt"),
            blocked_reason=doc.get("blockedReason"),
            session=doc.get("session"),
            usage=tuple(Usage.from_json(u) for u in doc.get("usage", ())),
            woken_for=tuple(doc.get("wokenFor", ())),
            sandbox=doc.get("sandbox"),
        )


def _failure(doc: FailureDoc) -> Failure:
    """A ``failures[]`` entry back (one written before ``head`` was recorded has None)."""
    return Failure(
        doc["fingerprint"],
        doc["code"],
        doc["message"],
        doc["generation"],
        doc.get("head"),
        doc["at"],
        doc.get("output"),
    )


WORKER_EXTRA: Final[FieldMap[Worker]] = field_map(Worker, partial=True)
"""The worker document's ``extra`` (the fields declared :func:`~.jsonform.on_disk`): run-level bookkeeping of the
current generation, each key only when set."""


# -- budget --------------------------------------------------------------------------------------------------------


def used_seconds(intervals: Iterable[Interval], now: float) -> float:
    """Active time: the sum of closed intervals plus the open one up to ``now``."""
    return sum(max(0.0, (i.end if i.end is not None else now) - i.start) for i in intervals)


def open_interval(run: Run, now: float) -> Run:
    """Start the clock (once; an interval left open by a crash must be closed first)."""
    if any(i.end is None for i in run.intervals):
        return run
    return replace(run, intervals=(*run.intervals, Interval(now)))


def close_intervals(run: Run, at: float) -> Run:
    """Stop the clock at ``at`` (never before an interval's own start)."""
    return replace(
        run, intervals=tuple(i if i.end is not None else Interval(i.start, max(i.start, at)) for i in run.intervals)
    )


# -- supervisor starts -----------------------------------------------------------------------------------------------


def is_restart_storm(run: Run, now: float) -> bool:
    """More than STORM_STARTS starts within STORM_WINDOW seconds, counting only starts after the last user resume."""
    since = max(run.last_user_resume or 0.0, now - STORM_WINDOW)
    return sum(1 for t in run.supervisor_starts if t >= since) >= STORM_STARTS


# -- failures and progress -------------------------------------------------------------------------------------------


def fingerprint(code: str, detail: Mapping[str, JsonValue]) -> str:
    """A failure's identity: its code and normalised details (command id, failure class...), never its timing."""
    return digest({"code": code, "detail": dict(detail)})


def no_progress(failures: Sequence[Failure]) -> bool:
    """The last NO_PROGRESS_REPEATS failures are the same failure: they share a fingerprint, and either the same
    failing output (the same commands failing with the same normalised lines: new commits that fail the same way
    are no progress) or, for a failure that names no output, the same HEAD (nothing was committed between them)."""
    if len(failures) < NO_PROGRESS_REPEATS:
        return False
    last = failures[-NO_PROGRESS_REPEATS:]
    if len({f.fingerprint for f in last}) != 1:
        return False
    outputs = {f.output for f in last}
    if None not in outputs:
        return len(outputs) == 1
    return len({f.head for f in last}) == 1


def ready(tasks: Mapping[str, Task], task_id: str) -> bool:
    """A planned task is ready when every dependency is delivered."""
    task = tasks[task_id]
    return task.status == TaskStatus.PLANNED and all(
        tasks[d].status == TaskStatus.DELIVERED for d in task.dependencies if d in tasks
    )


def dependents(tasks: Mapping[str, Task], task_id: str) -> list[str]:
    """Every task that depends on ``task_id``, directly or not (for blocking a whole subtree)."""
    found: list[str] = []
    frontier = [task_id]
    while frontier:
        current = frontier.pop()
        for other in tasks.values():
            if current in other.dependencies and other.id not in found:
                found.append(other.id)
                frontier.append(other.id)
    return found


def has_cycle(edges: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A dependency cycle as a list of ids (first repeated at the end), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in edges.get(node, ()):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if state.get(nxt) is None and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in edges:
        if state.get(node) is None and (found := visit(node)):
            return found
    return None


def topological(order: Sequence[str], edges: Mapping[str, Sequence[str]]) -> list[str]:
    """Dependencies first; ties broken by ``order`` (the plan order)."""
    rank = {task: i for i, task in enumerate(order)}
    placed: list[str] = []
    remaining = list(order)
    while remaining:
        for task in sorted(remaining, key=lambda t: rank[t]):
            if all(d in placed or d not in rank for d in edges.get(task, ())):
                placed.append(task)
                remaining.remove(task)
                break
        else:
            raise ValueError("dependency cycle")
    return placed


def worker_contract(run: Run, worker: Worker, tasks: Mapping[str, Task]) -> str:
    """The contract a worker's requests bind: the whole task tree for the coordinator, its own task for a child.

    A child's work answers to its own task only; binding it to the whole tree would fence it off every time the
    coordinator plans another task (a contract change storm while planning). Revising a child's own task
    changes its contract and restarts it.
    """
    own = tasks.get(worker.task_id) if worker.task_id else None
    if worker.role is Role.COORDINATOR or own is None:
        return run.contract_hash
    return task_contract_hash(own)


def budget_spent(run: Run, workers: Iterable[Worker], now: float) -> str | None:
    """Why the run's budget is spent -- active time, dollars or tokens as the hosts reported them -- or None."""
    if used_seconds(run.intervals, now) >= run.budget_seconds:
        return f"active-time budget of {run.budget_seconds}s spent"
    tokens, cost = total_usage(run.accounts(workers))
    if run.cost_limit_usd is not None and cost is not None and cost >= run.cost_limit_usd:
        return f"cost budget of ${run.cost_limit_usd:.2f} spent (${cost:.2f} reported by the hosts)"
    if run.token_limit is not None and tokens >= run.token_limit:
        return f"token budget of {run.token_limit} spent ({tokens} reported by the hosts)"
    return None
