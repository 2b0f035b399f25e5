"""A worker's request to its supervisor, typed: one frozen record per action, parsed once from its JSON document.

The request shape (``schemas/request.schema.json``) used to be checked in four places -- twice by hand with two
literal copies of the same field tables (``git agentops-request`` and the protocol client), and twice against the
schema (before the client writes it, after the supervisor claims it) -- and then read as a dict by key everywhere.
Here it is declared once: each action's class lists its fields, with the JSON name, whether the action requires
the field, and how the value travels (a JSON list is a tuple here). From that one declaration come

* :func:`field_problems` -- which fields an action lacks or does not take, for a caller's usage message before
  anything is built (``git agentops-request`` names options, the client names fields);
* :func:`from_valid` -- the typed record of a schema-valid document, behind the one validator
  :func:`git_agentops.protocol.mailbox.parse_request` (the request schema, then this): the client runs it before it
  writes a request, the supervisor after it claims one (the model layer does not load schemas);
* ``to_json()`` -- the document back, equal to the one parsed (so its canonical bytes and digest are unchanged).

:class:`RequestRecord` is the supervisor's idempotency record of an answered request (``requests/<aa>/<sha256>.json``
in the run's state), with its one field map; :mod:`git_agentops.runs.state` writes and reads it. The answer it keeps
is a :class:`ResponseDoc`, the shape of ``response.json`` that the supervisor writes and the client reads; the
criterion and approval objects a request carries are :class:`CriterionDoc` and :class:`ApprovalDoc` as parsed.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Final, NotRequired, TypedDict

from ..canonical import JsonObject, JsonValue
from ..errors import AgentOpsError


class Action(enum.StrEnum):
    """What a request asks for (the schema's ``action`` enum)."""

    PLAN = "plan"
    WORKER = "worker"
    HANDOFF = "handoff"
    QUESTION = "question"
    FINALIZE = "finalize"
    POLICY = "policy"


ACTIONS: Final = tuple(str(a) for a in Action)


class CriterionDoc(TypedDict):
    """A schema-valid criterion object, as the request schema shapes it."""

    description: str
    id: NotRequired[str]
    runner: NotRequired[str]
    reviewOnly: NotRequired[str]


class ApprovalDoc(TypedDict):
    """A schema-valid approval object, as the request schema shapes it."""

    capabilityId: str
    reason: str
    classification: NotRequired[str]


@dataclass(frozen=True, slots=True)
class CriterionSpec:
    """An acceptance criterion given as an object (a plain string is a criterion's description alone)."""

    description: str
    id: str | None = None
    runner: str | None = None
    review_only: str | None = None

    def to_json(self) -> JsonObject:
        """The criterion object, without the keys it does not have."""
        doc: JsonObject = {"description": self.description}
        for name, value in (("id", self.id), ("runner", self.runner), ("reviewOnly", self.review_only)):
            if value is not None:
                doc[name] = value
        return doc

    @classmethod
    def from_json(cls, doc: CriterionDoc) -> CriterionSpec:
        """The criterion of a schema-valid criterion object."""
        return cls(doc["description"], doc.get("id"), doc.get("runner"), doc.get("reviewOnly"))


@dataclass(frozen=True, slots=True)
class Approval:
    """The proposer's approval of one capability a policy proposal adds or changes."""

    capability_id: str
    reason: str
    classification: str | None = None  # "non-dangerous" when given (the only value the schema admits)

    def to_json(self) -> JsonObject:
        """The approval object (``classification`` only when it was given)."""
        doc: JsonObject = {"capabilityId": self.capability_id, "reason": self.reason}
        if self.classification is not None:
            doc["classification"] = self.classification
        return doc

    @classmethod
    def from_json(cls, doc: ApprovalDoc) -> Approval:
        """The approval of a schema-valid approval object."""
        return cls(doc["capabilityId"], doc["reason"], doc.get("classification"))


# -- how one field travels: JSON value <-> typed value ------------------------------------------------------------


def _same(value: Any) -> Any:
    return value


def _strings_in(value: Any) -> tuple[str, ...]:
    return tuple(value)


def _list_out(value: Any) -> list[Any]:
    return [item.to_json() if hasattr(item, "to_json") else item for item in value]


def _criteria_in(value: Any) -> tuple[str | CriterionSpec, ...]:
    return tuple(item if isinstance(item, str) else CriterionSpec.from_json(item) for item in value)


def _approvals_in(value: Any) -> tuple[Approval, ...]:
    return tuple(Approval.from_json(item) for item in value)


def _f(
    name: str,
    *,
    required: bool = True,
    load: Callable[[Any], Any] = _same,
    dump: Callable[[Any], Any] = _same,
) -> Any:
    """A request field: its JSON ``name``, whether its action requires it (an optional one is None when absent),
    and how its value is read from and written to JSON."""
    meta = {"json": name, "required": required, "load": load, "dump": dump}
    return field(metadata=meta) if required else field(default=None, metadata=meta)


def _strings(name: str, *, required: bool = True) -> Any:
    return _f(name, required=required, load=_strings_in, dump=list)


@dataclass(frozen=True, slots=True)
class _Request:
    """What every request carries: who sends it (worker, generation: the fencing token), under which contract."""

    ACTION: ClassVar[Action]

    request_id: str = _f("requestId")
    worker_id: str = _f("workerId")
    generation: int = _f("generation")
    contract_hash: str = _f("contractHash")

    @property
    def action(self) -> Action:
        return self.ACTION

    def to_json(self) -> JsonObject:
        """The request document (the one :func:`from_valid` read, value for value)."""
        doc: JsonObject = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                doc[f.metadata["json"]] = f.metadata["dump"](value)
            if f.name == "contract_hash":
                doc["action"] = str(self.ACTION)
        return doc

    @classmethod
    def body_fields(cls) -> tuple[tuple[str, bool], ...]:
        """``(json name, required)`` of the action's own fields, in declaration order."""
        return tuple((f.metadata["json"], f.metadata["required"]) for f in fields(cls)[len(_COMMON) :])


_COMMON: Final = ("requestId", "workerId", "generation", "contractHash")


@dataclass(frozen=True, slots=True)
class PlanRequest(_Request):
    """``plan``: the coordinator creates the root task (once)."""

    ACTION: ClassVar[Action] = Action.PLAN

    title: str = _f("title")
    intent: str = _f("intent")
    criteria: tuple[str | CriterionSpec, ...] = _f("criteria", load=_criteria_in, dump=_list_out)


@dataclass(frozen=True, slots=True)
class WorkerRequest(_Request):
    """``worker``: the coordinator plans a child task, or re-plans one not yet started (``task_id``)."""

    ACTION: ClassVar[Action] = Action.WORKER

    title: str = _f("title")
    intent: str = _f("intent")
    criteria: tuple[str | CriterionSpec, ...] = _f("criteria", load=_criteria_in, dump=_list_out)
    dependencies: tuple[str, ...] = _strings("dependencies")
    task_id: str | None = _f("taskId", required=False)


@dataclass(frozen=True, slots=True)
class HandoffRequest(_Request):
    """``handoff``: a child delivers its task (``source_files`` only for a delivery without changes)."""

    ACTION: ClassVar[Action] = Action.HANDOFF

    source_files: tuple[str, ...] | None = _strings("sourceFiles", required=False)


@dataclass(frozen=True, slots=True)
class QuestionRequest(_Request):
    """``question``: ask the user; every writer stops until it is answered."""

    ACTION: ClassVar[Action] = Action.QUESTION

    prompt: str = _f("prompt")


@dataclass(frozen=True, slots=True)
class FinalizeRequest(_Request):
    """``finalize``: the coordinator asks to integrate every delivery."""

    ACTION: ClassVar[Action] = Action.FINALIZE

    source_files: tuple[str, ...] | None = _strings("sourceFiles", required=False)


@dataclass(frozen=True, slots=True)
class PolicyRequest(_Request):
    """``policy``: the coordinator proposes a complete new policy, approving each capability it adds or changes."""

    ACTION: ClassVar[Action] = Action.POLICY

    config_file: str = _f("configFile")
    expected_policy_hash: str = _f("expectedPolicyHash")
    approvals: tuple[Approval, ...] = _f("approvals", load=_approvals_in, dump=_list_out)


Request = PlanRequest | WorkerRequest | HandoffRequest | QuestionRequest | FinalizeRequest | PolicyRequest
"""A parsed request, discriminated by its class (and its ``action``)."""

REQUEST_TYPES: Final[Mapping[Action, type[Request]]] = {
    t.ACTION: t for t in (PlanRequest, WorkerRequest, HandoffRequest, QuestionRequest, FinalizeRequest, PolicyRequest)
}


def field_problems(action: str, names: Iterable[str]) -> tuple[list[str], list[str]]:
    """``(missing, unexpected)``: the fields ``action`` requires that ``names`` lacks (in declaration order), and
    the names it does not take (in the order given). The common fields are never the caller's to give."""
    own = REQUEST_TYPES[Action(action)].body_fields()
    given = list(names)
    missing = [name for name, required in own if required and name not in given]
    allowed = {name for name, _ in own}
    return missing, [name for name in given if name not in allowed]


def action_fields(action: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(required, optional)`` JSON names of ``action``'s own fields."""
    own = REQUEST_TYPES[Action(action)].body_fields()
    return tuple(n for n, r in own if r), tuple(n for n, r in own if not r)


def from_valid(doc: Mapping[str, JsonValue]) -> Request:
    """The typed request of a document that matches the request schema: only
    :func:`git_agentops.protocol.mailbox.parse_request`, which checks that first, calls it."""
    kind = REQUEST_TYPES[Action(str(doc["action"]))]
    values = {f.name: f.metadata["load"](doc[f.metadata["json"]]) for f in fields(kind) if f.metadata["json"] in doc}
    return kind(**values)


def check_fields(action: str, names: Iterable[str]) -> None:
    """``USAGE`` for an unknown action, a missing field or a field ``action`` does not take (named as JSON
    fields; ``git agentops-request`` names its options instead, from :func:`field_problems`)."""
    if action not in ACTIONS:
        raise AgentOpsError("USAGE", f"unknown action {action!r}; expected one of {', '.join(ACTIONS)}")
    missing, unexpected = field_problems(action, names)
    if missing:
        raise AgentOpsError("USAGE", f"{action} needs {', '.join(missing)}", details={"missing": missing})
    if unexpected:
        extra = sorted(set(unexpected))
        required, optional = action_fields(action)
        takes = ", ".join(sorted({*required, *optional})) or "no fields"
        raise AgentOpsError(
            "USAGE", f"{action} does not take {', '.join(extra)} (it takes {takes})", details={"unexpected": extra}
        )


# -- the idempotency record -----------------------------------------------------------------------------------------

_RECORD_JSON: Final = {
    "request_id": "requestId",
    "request_digest": "requestDigest",
    "worker_id": "workerId",
    "generation": "generation",
    "action": "action",
    "response": "response",
    "at": "at",
}


class ResponseDoc(TypedDict):
    """The supervisor's answer to a request (``response.json``, ``schemas/response.schema.json``): matched to its
    request by ``requestDigest``; ``ok`` is whether ``code`` exits 0."""

    requestId: str | None
    requestDigest: str
    ok: bool
    code: str
    message: str
    data: JsonObject


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """A request the supervisor answered, kept in the run's state: a ``request_id`` seen again replays
    ``response`` when the request's canonical ``request_digest`` is the same (and is a conflict otherwise).

    Written in the same state commit as the request's effect, so a crash never applies a request twice nor
    loses its answer (``schemas/request-record.schema.json``)."""

    request_id: str
    request_digest: str
    worker_id: str
    generation: int
    action: str
    response: ResponseDoc
    at: float

    def to_json(self) -> JsonObject:
        """The record document, from the one field map (its canonical bytes are what the state holds)."""
        doc = {json: getattr(self, name) for name, json in _RECORD_JSON.items()}
        doc["response"] = dict(self.response)
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> RequestRecord:
        """The record of a schema-valid record document."""
        return cls(**{name: doc[json] for name, json in _RECORD_JSON.items()})
