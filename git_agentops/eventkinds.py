"""The registry of journal event kinds: every code a journal commit may carry, what it means, and its data's shape.

A journal commit's event (:class:`~git_agentops.gitstore.events.Event`) is a format: ``git agentops-run log``,
``watch``, the report and the receipt's readers match its code and read its data, on this machine and on any other
that fetches the run. So its vocabulary is registered here once, like the error codes in :mod:`git_agentops.errors`:
each kind with a one-line meaning and a declared field map (required and optional keys, their JSON types). README's
event table is generated from :data:`EVENTS` and a test checks they agree.

It is a foundation, next to :mod:`git_agentops.errors` and not in ``model/``: ``Event`` lives in ``gitstore/``, which
ranks with ``model/`` and imports no package of its rank, and it must refuse an unregistered kind itself. Like
``errors``, it holds values only (no I/O).

Call sites name a kind by its constant (``kinds.RUN_COMPLETE``), typed :data:`EventCode`: mypy then refuses a
bare string where a kind is expected, and a code computed from a variable can only be one of these constants (or
come out of a table of them, such as :data:`POLICY_STAGE`). ``Event`` refuses an unregistered code at construction,
and -- when :func:`check_data` is on (the test suite turns it on) -- data that does not fit its kind: a renamed,
missing or unknown key, or a value of the wrong JSON type.

Why a field map and not a JSON schema per kind: the data of an event is flat and small; what goes wrong is a key
renamed at one call site and not at its readers, which a map of names to JSON types catches as well, at a fraction
of the cost, and reads as a table.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, NewType

EventCode = NewType("EventCode", str)
"""A registered event kind's name; made only here (the constants below, :data:`POLICY_STAGE`)."""


class JsonType(enum.StrEnum):
    """A JSON type an event's data value may have (JSON Schema's names)."""

    STRING = "string"
    INTEGER = "integer"
    NUMBER = "number"
    BOOLEAN = "boolean"
    ARRAY = "array"
    OBJECT = "object"
    NULL = "null"

    def holds(self, value: object) -> bool:
        """Whether ``value`` (as the journal would write it) is of this JSON type."""
        match self:
            case JsonType.STRING:
                return isinstance(value, str)
            case JsonType.INTEGER:
                return isinstance(value, int) and not isinstance(value, bool)
            case JsonType.NUMBER:
                return isinstance(value, int | float) and not isinstance(value, bool)
            case JsonType.BOOLEAN:
                return isinstance(value, bool)
            case JsonType.ARRAY:
                return isinstance(value, list | tuple)
            case JsonType.OBJECT:
                return isinstance(value, Mapping)
            case JsonType.NULL:
                return value is None


@dataclass(frozen=True, slots=True)
class DataField:
    """One key of an event's data: the JSON types its value may have, and whether the key must be there."""

    types: tuple[JsonType, ...]
    required: bool = True

    @classmethod
    def parse(cls, spec: str) -> DataField:
        """``"string"``, ``"string|null"``, ``"integer?"`` (``?``: the key may be absent)."""
        required = not spec.endswith("?")
        return cls(tuple(JsonType(t) for t in spec.removesuffix("?").split("|")), required)

    def describe(self) -> str:
        """The spec again: ``string|null``, ``integer?``."""
        return "|".join(self.types) + ("" if self.required else "?")


@dataclass(frozen=True, slots=True)
class EventKind:
    """A registered event kind: its code, what it means, and the keys its data holds."""

    name: EventCode
    meaning: str
    fields: Mapping[str, DataField]

    def problems(self, data: Mapping[str, Any]) -> list[str]:
        """What is wrong with ``data`` for this kind (empty: it fits): missing, unknown or mistyped keys."""
        found = [f"missing key {key!r}" for key, f in self.fields.items() if f.required and key not in data]
        found += [f"unknown key {key!r}" for key in data if key not in self.fields]
        for key, value in data.items():
            declared = self.fields.get(key)
            if declared is not None and not any(t.holds(value) for t in declared.types):
                found.append(f"{key!r} is {type(value).__name__}, not {declared.describe().removesuffix('?')}")
        return found


_REGISTRY: dict[str, EventKind] = {}
_CHECK_DATA = [False]
_SCRATCH: set[str] = set()


def _k(name: str, meaning: str, **fields: str) -> EventCode:
    code = EventCode(name)
    if name in _REGISTRY:
        raise ValueError(f"event kind {name} registered twice")
    _REGISTRY[name] = EventKind(code, meaning, {key: DataField.parse(spec) for key, spec in fields.items()})
    return code


_STRING: Final = "string"
_INT: Final = "integer"
_ARRAY: Final = "array"
_REQUEST: Final = {"workerId": _STRING, "generation": _INT, "requestId": _STRING, "action": _STRING}
"""The data of a request's answer: the request it answers (:func:`~git_agentops.supervisor.requests.answer`)."""
_STAGE: Final = {"transitionId": _STRING}
_STOPPED: Final = {"workerId": _STRING, "generation": "integer?", "reason": "string?", "process": "object?"}
"""A generation a (dead or refusing) supervisor's successor stopped; only ``workerId`` for a process it found
outside the run state."""

# The registry. Grouped by what the event is about; README's table is generated from it.
# -- the journal itself
STATE_CHANGED: Final = _k("STATE_CHANGED", "a state change whose writer named no event")
RUN_STATE_TAMPERED: Final = _k(
    "RUN_STATE_TAMPERED",
    "a journal tip the toolkit did not write was contained: the last authentic state restored on top of it",
    ref=_STRING,
    foreign=_ARRAY,
    foreignCount=_INT,
    restoredFrom="string|null",
)
RUN_STATE_QUARANTINED: Final = _k(
    "RUN_STATE_QUARANTINED",
    "a remote's journal tip no supervisor of the run wrote: kept as evidence (second parent), not adopted",
    remote=_STRING,
    ref=_STRING,
    commit=_STRING,
    quarantine=_STRING,
    authentic="string|null",
)
# -- the run
RUN_CREATED: Final = _k(
    "RUN_CREATED",
    "the run was created (goal, target, base commit, host, budget)",
    goal=_STRING,
    target=_STRING,
    base=_STRING,
    host="string|null",
    budgetSeconds="number",
)
RUN_STATUS: Final = _k("RUN_STATUS", "the supervisor set the run's status", status=_STRING)
RUN_PAUSED: Final = _k("RUN_PAUSED", "a person paused the run", runId=_STRING)
RUN_STOPPED: Final = _k("RUN_STOPPED", "a person stopped the run", runId=_STRING)
RUN_RESUMED: Final = _k("RUN_RESUMED", "a person resumed the run", runId=_STRING)
RUN_ANSWERED: Final = _k(
    "RUN_ANSWERED", "a person answered a worker's question", runId=_STRING, controlId="string?", signer="string?"
)
RUN_CONTROL_REFUSED: Final = _k(
    "RUN_CONTROL_REFUSED",
    "a signed control from another machine was refused (the code): unsigned, a signer not allowed, or stale",
    runId=_STRING,
    controlId=_STRING,
    kind=_STRING,
    code=_STRING,
)
RUN_COMPLETE: Final = _k(
    "RUN_COMPLETE",
    "the run is complete: its candidate published and receipted",
    candidate="string|null",
    receiptDigest="string|null",
)
RUN_RELOCATED: Final = _k("RUN_RELOCATED", "the run was moved to another clone", repository=_STRING)
# -- the supervisor and its lease
RUN_SUPERVISOR_START: Final = _k("RUN_SUPERVISOR_START", "a supervisor process started serving the run", pid=_INT)
RUN_SUPERVISOR_STOP: Final = _k("RUN_SUPERVISOR_STOP", "the supervisor stopped serving the run", pid=_INT)
RUN_SUPERVISOR_REFUSED: Final = _k(
    "RUN_SUPERVISOR_REFUSED",
    "a supervisor refused to serve the run (the error) after stopping what was left running",
    code=_STRING,
    message=_STRING,
    stopped=_ARRAY,
)
RUN_LEASE_CLAIMED: Final = _k("RUN_LEASE_CLAIMED", "a machine claimed the run's lease", holder=_STRING, pid=_INT)
RUN_LEASE_RENEWED: Final = _k("RUN_LEASE_RENEWED", "the lease holder renewed the lease", holder=_STRING, pid=_INT)
RUN_LEASE_RELEASED: Final = _k("RUN_LEASE_RELEASED", "the lease holder released the lease")
# -- requests
REQUEST_REFUSED: Final = _k(
    "REQUEST_REFUSED",
    "a worker's request was refused (coalesced: `count` refusals of one code since `since`)",
    workerId=_STRING,
    generation=_INT,
    code=_STRING,
    requestId="string|null",
    requestDigest=_STRING,
    message=_STRING,
    count="integer?",
    since="number?",
)
RUN_PLAN_CREATED: Final = _k("RUN_PLAN_CREATED", "the coordinator's plan request created the root task", **_REQUEST)
RUN_WORKER_PLANNED: Final = _k("RUN_WORKER_PLANNED", "the coordinator planned a child task", **_REQUEST)
RUN_AWAITING_INPUT: Final = _k("RUN_AWAITING_INPUT", "a worker asked a question; the run awaits an answer", **_REQUEST)
RUN_POLICY_PENDING: Final = _k(
    "RUN_POLICY_PENDING", "a worker proposed a policy change; it awaits a person's approval", **_REQUEST
)
# -- tasks
TASK_REVISED: Final = _k("TASK_REVISED", "a task's contract was revised", taskId=_STRING)
TASK_REPAIR_PLANNED: Final = _k(
    "TASK_REPAIR_PLANNED",
    "an integration conflicted: the supervisor planned a task to repair the conflicting delivery",
    taskId=_STRING,
    onto=_STRING,
    paths=_ARRAY,
)
TASK_PROVISIONING: Final = _k(
    "TASK_PROVISIONING", "a worker is being provisioned for a task", taskId=_STRING, workerId=_STRING
)
TASK_DELIVERED: Final = _k(
    "TASK_DELIVERED",
    "a task's commit was verified and frozen as its delivery",
    taskId=_STRING,
    workerId=_STRING,
    generation=_INT,
    commit=_STRING,
    deliveryDigest=_STRING,
    squashedFrom="string?",
)
TASK_DELIVERY_ADOPTED: Final = _k(
    "TASK_DELIVERY_ADOPTED",
    "a delivery a crash left unrecorded was verified again and adopted",
    taskId=_STRING,
    commit=_STRING,
)
# -- workers
WORKER_PROVISIONED: Final = _k(
    "WORKER_PROVISIONED",
    "a worker's checkout is ready at its base, with its dependencies' deliveries",
    workerId=_STRING,
    taskId=_STRING,
    base=_STRING,
    dependencies=_ARRAY,
)
WORKER_STARTING: Final = _k(
    "WORKER_STARTING", "a worker's next generation is starting", workerId=_STRING, policyConfigHash=_STRING
)
WORKER_STARTED: Final = _k("WORKER_STARTED", "a worker's generation started (its process recorded)", workerId=_STRING)
WORKER_IDLE: Final = _k("WORKER_IDLE", "the coordinator ended its turn; idle until an event needs it", workerId=_STRING)
WORKER_STOPPED: Final = _k("WORKER_STOPPED", "the supervisor stopped a worker", workerId=_STRING)
WORKER_FAILED: Final = _k(
    "WORKER_FAILED",
    "a worker's generation failed (the code, the commit it left, the failing output's digest)",
    workerId=_STRING,
    code=_STRING,
    generation=_INT,
    head="string|null",
    output="string|null",
)
WORKER_BLOCKED: Final = _k(
    "WORKER_BLOCKED", "a worker's task is blocked (the code and why)", workerId=_STRING, code=_STRING, reason=_STRING
)
WORKER_HANDING_OFF: Final = _k("WORKER_HANDING_OFF", "a worker handed off a commit", workerId=_STRING)
WORKER_STOPPED_FOR_HANDOFF: Final = _k(
    "WORKER_STOPPED_FOR_HANDOFF", "a worker that handed off ended or was stopped", workerId=_STRING
)
WORKER_FOREIGN_MERGE: Final = _k(
    "WORKER_FOREIGN_MERGE",
    "a handed-off commit merges commits that are not a dependency's frozen delivery",
    workerId=_STRING,
    head=_STRING,
    commits=_ARRAY,
)
WORKER_RECONCILED: Final = _k(
    "WORKER_RECONCILED", "a generation a dead supervisor left running was stopped", **_STOPPED
)
WORKER_LEFTOVER_STOPPED: Final = _k(
    "WORKER_LEFTOVER_STOPPED",
    "a generation still running where none should (run complete, refused) was stopped",
    **_STOPPED,
)
HOST_RESUME_FAILED: Final = _k(
    "HOST_RESUME_FAILED", "resuming a worker's host session failed; a fresh session starts", workerId=_STRING
)
HOST_OUTPUT_UNPARSED: Final = _k(
    "HOST_OUTPUT_UNPARSED", "a host's output could not be read for its session and usage", workerId=_STRING
)
# -- the integration
INTEGRATION_REQUESTED: Final = _k(
    "INTEGRATION_REQUESTED", "the coordinator's finalize request began the integration", requestId=_STRING
)
INTEGRATION_RESUMED: Final = _k(
    "INTEGRATION_RESUMED", "a restarted supervisor rolls an interrupted integration forward", workerId=_STRING
)
INTEGRATION_PREPARED: Final = _k(
    "INTEGRATION_PREPARED",
    "the candidate was built on the target (its merge steps)",
    status=_STRING,
    base=_STRING,
    candidate=_STRING,
    order=_ARRAY,
    steps=_ARRAY,
    attempts=_INT,
)
INTEGRATION_VERIFIED: Final = _k("INTEGRATION_VERIFIED", "the candidate passed verification", status=_STRING)
INTEGRATION_REVIEWED: Final = _k("INTEGRATION_REVIEWED", "the candidate passed review", status=_STRING)
INTEGRATION_PUBLISHED: Final = _k(
    "INTEGRATION_PUBLISHED",
    "the target moved to the candidate (published by the merge queue: its candidate, chain and place in it)",
    status=_STRING,
    publishedAt="number?",
    base="string?",
    candidate="string?",
    steps="array?",
    attempts="integer?",
    queueBelow="array?",
    queueRetried="boolean?",
    queuePosition="integer?",
    order="array?",
)
INTEGRATION_RECEIPTED: Final = _k(
    "INTEGRATION_RECEIPTED", "the receipt was added to the candidate", status=_STRING, receiptDigest=_STRING
)
INTEGRATION_FAILED: Final = _k(
    "INTEGRATION_FAILED", "the integration failed (the refusal's code)", status=_STRING, failure=_STRING
)
INTEGRATION_QUEUED: Final = _k(
    "INTEGRATION_QUEUED",
    "the run's deliveries were enqueued on the target's merge queue (its position, the merge order)",
    status=_STRING,
    queuePosition=_INT,
    order=_ARRAY,
)
QUEUE_ENQUEUED: Final = _k("QUEUE_ENQUEUED", "a run's integration joined the target's merge queue", runId=_STRING)
QUEUE_LEASED: Final = _k("QUEUE_LEASED", "a supervisor took (or renewed) the lease to process the merge queue")
QUEUE_RELEASED: Final = _k("QUEUE_RELEASED", "the supervisor processing the merge queue gave its lease up")
QUEUE_CONFLICTED: Final = _k(
    "QUEUE_CONFLICTED", "queue entries whose deliveries conflict with the target's tip", positions=_ARRAY
)
QUEUE_EVICTED: Final = _k(
    "QUEUE_EVICTED", "a queue entry whose own candidate failed verification twice was evicted", positions=_ARRAY
)
QUEUE_PUBLISHING: Final = _k(
    "QUEUE_PUBLISHING", "the verified prefix of the queue is recorded before the target moves", positions=_ARRAY
)
QUEUE_PUBLISHED: Final = _k("QUEUE_PUBLISHED", "the target moved to the queue's verified prefix", positions=_ARRAY)
QUEUE_RECONCILED: Final = _k(
    "QUEUE_RECONCILED", "the queue was held against the runs' own records: stale entries evicted, missing ones restored"
)
QUEUE_REBUILT: Final = _k(
    "QUEUE_REBUILT", "queue entries go back to waiting: the target moved before they were published", positions=_ARRAY
)
INTEGRATION_REMOTE: Final = _k("INTEGRATION_REMOTE", "a step of publishing to the remote (said in the summary)")
REVIEWS_RECORDED: Final = _k("REVIEWS_RECORDED", "the candidate's reviews were stored", reviews=_ARRAY)
REVIEW_USAGE: Final = _k("REVIEW_USAGE", "what the review attempts used, added to the run's spend", tokens=_INT)
RUN_TARGET_UNREVIEWED: Final = _k(
    "RUN_TARGET_UNREVIEWED",
    "the target moved since the run started by commits with no receipt (or its history was rewritten)",
    unreviewed=_ARRAY,
    targetRewritten="boolean|null",
)
RUN_TARGET_NOT_FOLLOWED: Final = _k(
    "RUN_TARGET_NOT_FOLLOWED",
    "the remote's target was published but the local branch was left where it is (and why)",
    published=_STRING,
    local="string|null",
    base="string?",
    dirty="object?",
)
RUN_REF_QUARANTINED: Final = _k(
    "RUN_REF_QUARANTINED",
    "a run ref held a commit the supervisor did not write: moved aside, the recorded value restored",
    ref=_STRING,
    foreignCommit=_STRING,
    quarantinedAs=_STRING,
    restored="string|null",
    why=_STRING,
)
# -- policy
POLICY_BOUND: Final = _k(
    "POLICY_BOUND",
    "a policy was bound: at the run's creation (its hash), or by a transition (its id)",
    configHash="string?",
    transitionId="string?",
)
POLICY_PREPARED: Final = _k(
    "POLICY_PREPARED",
    "a policy transition was prepared (from and to config hashes)",
    transitionId=_STRING,
    **{"from": "string?", "to": "string?"},
)
POLICY_FENCED: Final = _k("POLICY_FENCED", "a policy transition fenced the writers", **_STAGE)
POLICY_SYNCHRONIZED: Final = _k("POLICY_SYNCHRONIZED", "a transition synchronised the worktrees", **_STAGE)
POLICY_COMPLETE: Final = _k("POLICY_COMPLETE", "a policy transition is complete", **_STAGE)
POLICY_REFUSED: Final = _k("POLICY_REFUSED", "a policy transition was refused", **_STAGE)
POLICY_UPDATED: Final = _k("POLICY_UPDATED", "a policy transition's record changed, not its stage", **_STAGE)
POLICY_REBOUND: Final = _k(
    "POLICY_REBOUND", "a transition bound the new policy to the run", transitionId=_STRING, configHash=_STRING
)
POLICY_TASKS_REVISED: Final = _k(
    "POLICY_TASKS_REVISED",
    "the run is bound to the new policy; tasks not delivered need fresh proof",
    transitionId=_STRING,
    configHash=_STRING,
)
POLICY_WRITERS_TOLD: Final = _k(
    "POLICY_WRITERS_TOLD", "the writers were told to restart under the new policy", resume=_ARRAY
)
POLICY_TRANSITION_REFUSED: Final = _k(
    "POLICY_TRANSITION_REFUSED", "the proposer was told its transition was refused (the code)", code=_STRING
)
RUN_POLICY_APPROVED: Final = _k(
    "RUN_POLICY_APPROVED",
    "a person approved a policy transition",
    runId=_STRING,
    controlId="string?",
    signer="string?",
)
RUN_REVIEW_DECIDED: Final = _k(
    "RUN_REVIEW_DECIDED",
    "a person approved or refused the integration candidate ([review] people)",
    runId=_STRING,
    decision=_STRING,
    principal=_STRING,
    decisionId=_STRING,
    controlId="string?",
    signer="string?",
)
INTEGRATION_APPROVED: Final = _k(
    "INTEGRATION_APPROVED", "enough people approved the candidate ([review] people): it may publish"
)
RUN_CONTROL_APPLIED: Final = _k(
    "RUN_CONTROL_APPLIED",
    "a signed control from another machine was applied (a refusal of a policy change, a review decision)",
    runId=_STRING,
    controlId=_STRING,
    kind=_STRING,
    signer=_STRING,
)

EVENTS: Final[Mapping[str, EventKind]] = _REGISTRY
"""Every registered kind by its code, in registration order (README's table follows it)."""

POLICY_STAGE: Final[Mapping[str | None, EventCode]] = {
    "prepared": POLICY_PREPARED,
    "fenced": POLICY_FENCED,
    "bound": POLICY_BOUND,
    "synchronized": POLICY_SYNCHRONIZED,
    "complete": POLICY_COMPLETE,
    "refused": POLICY_REFUSED,
    None: POLICY_UPDATED,
}
"""The event a transition's move to a stage (a :class:`~git_agentops.transition.record.Stage` value) is recorded
with; ``None``: a change of its fields only."""


def kind(code: str) -> EventKind:
    """The registered kind ``code`` names; ``ValueError`` for a code nobody registered."""
    found = _REGISTRY.get(code)
    if found is None and code not in _SCRATCH:
        raise ValueError(f"event code {code!r} is not a registered event kind (git_agentops.eventkinds)")
    return found or EventKind(EventCode(code), "scratch", {})


def check(code: str, data: Mapping[str, Any]) -> None:
    """``ValueError`` unless ``code`` is registered and -- when :func:`check_data` is on -- ``data`` fits it."""
    registered = kind(code)
    if _CHECK_DATA[0] and code not in _SCRATCH:
        problems = registered.problems(data)
        if problems:
            raise ValueError(f"event {code} data does not fit its kind: {'; '.join(problems)}")


def check_data(on: bool) -> None:
    """Check every event's data against its kind (the test suite turns this on; production trusts the call sites
    the tests exercised, and pays nothing per commit)."""
    _CHECK_DATA[0] = on


def allow_scratch(codes: frozenset[str]) -> None:
    """Let ``codes`` through unregistered, with any data: the made-up kinds tests of the journal machinery write
    (``SEED``, ``EDIT``...). Never called by the toolkit itself."""
    _SCRATCH.update(codes)
