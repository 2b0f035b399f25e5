"""Policy transitions as values: what a proposed policy changes, its approvals, and the journal's record.

A run's coordinator may ask to change what the run executes -- a new verification command, an acceptance runner, a
setup step, a host -- without stopping the run (``git agentops-request policy``). The proposal is a complete policy;
:mod:`git_agentops.model.judge` says what no approval makes acceptable (a weakening, a raised budget) and what only
a person's does; this module, purely, what is left to approve:

* :func:`capability_changes` -- every capability (``command:<id>``, ``runner:<id>``, ``setup:<index>``,
  ``host:<name>``) the proposal adds or changes, with its full definition, each of which needs one approval with a
  reason (``RUN_POLICY_UNAPPROVED`` otherwise; an approval of anything else is ``RUN_POLICY_INVALID``). Who may
  approve is ``[run] policy_changes``: a person (``user``, the default) or the coordinator itself.

The journal of one transition (``refs/agentops/runs/<run>/journal/<transition>``, :mod:`.journal`) moves strictly
through :class:`Stage`: ``prepared -> fenced -> bound -> synchronized -> complete``, or ends ``refused`` -- only
before ``bound``: once the new policy is bound the transition can only roll forward.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from ..canonical import JsonObject, JsonValue, digest
from ..model.jsonform import JsonRecord, json_value, on_disk, records_of
from ..model.policydoc import PolicyDoc

TRANSITION_PREFIX: Final = "policy-"


class ChangeMode(enum.StrEnum):
    """Who approves a policy transition (``[run] policy_changes``): a person, the coordinator, or nobody."""

    USER = "user"
    COORDINATOR = "coordinator"
    NEVER = "never"


POLICY_CHANGES: Final = tuple(ChangeMode)
DEFAULT_POLICY_CHANGES: Final = ChangeMode.USER
"""Who approves a transition when ``[run] policy_changes`` is absent: a person. Trust was given by a person for an
exact policy hash, and a changed capability is code that will run on their machine; a coordinator's approval is an
agent vouching for itself, so it stands only where the policy says so."""
MAX_PROPOSAL_BYTES: Final = 128 * 1024


class Stage(enum.StrEnum):
    """A transition's stage; ``complete`` and ``refused`` end it."""

    PREPARED = "prepared"
    FENCED = "fenced"
    BOUND = "bound"
    SYNCHRONIZED = "synchronized"
    COMPLETE = "complete"
    REFUSED = "refused"


ORDER: Final = (Stage.PREPARED, Stage.FENCED, Stage.BOUND, Stage.SYNCHRONIZED, Stage.COMPLETE)
ENDED: Final = frozenset({Stage.COMPLETE, Stage.REFUSED})


def policy_changes(doc: PolicyDoc) -> ChangeMode:
    """``[run] policy_changes`` of an effective policy (absent: :data:`DEFAULT_POLICY_CHANGES`, no hash change); the
    schema allows only the :class:`ChangeMode` values."""
    return ChangeMode(str(doc["run"].get("policy_changes", DEFAULT_POLICY_CHANGES)))


def transition_id(
    config_hash: str, approvals: Sequence[Mapping[str, JsonValue]], old_hash: str, request_id: str
) -> str:
    """``policy-`` and 16 hex of the digest of what is proposed -- the new config, its approvals, the policy it
    replaces -- and of the request that proposed it: proposing the same change again after a refusal is a new
    transition (a re-sent request is answered from its idempotency record, never proposed twice)."""
    doc = {"config": config_hash, "approvals": list(approvals), "old": old_hash, "request": request_id}
    return TRANSITION_PREFIX + digest(doc)[:16]


# -- capabilities ------------------------------------------------------------------------------------------------


def capabilities(doc: PolicyDoc) -> dict[str, Mapping[str, object]]:
    """Every capability of an effective policy -- what it may run -- by id, with its full definition."""
    out: dict[str, Mapping[str, object]] = {}
    for command in doc["verify"]["commands"]:
        out[f"command:{command['id']}"] = dict(command)
    for runner in doc["verify"]["runners"]:
        out[f"runner:{runner['id']}"] = dict(runner)
    for index, step in enumerate(doc["worktree"]["setup"]):
        out[f"setup:{index}"] = dict(step)
    for name, host in doc["hosts"].items():
        out[f"host:{name}"] = dict(host)
    return out


def _without_description(definition: Mapping[str, object]) -> dict[str, object]:
    return {k: v for k, v in definition.items() if k != "description"}


@dataclass(frozen=True, slots=True)
class CapabilityChange:
    """One capability the proposal adds or changes (``change``), and its new definition."""

    capability_id: str
    change: str  # "added" | "changed"
    definition: Mapping[str, object]  # a command's, runner's, setup step's or host's table of the policy

    @property
    def definition_digest(self) -> str:
        """The digest of the definition: what an approval vouches for."""
        return digest(dict(self.definition))

    def to_json(self) -> JsonObject:
        """The ``changes[]`` entry of the journal record."""
        return {
            "capabilityId": self.capability_id,
            "change": self.change,
            "definition": json_value(self.definition),
            "definitionDigest": self.definition_digest,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, JsonValue]) -> CapabilityChange:
        """A ``changes[]`` entry read back (schema-valid; its digest is the definition's, so it is not kept)."""
        definition = doc["definition"]
        assert isinstance(definition, Mapping)  # the schema's "type": "object"
        return cls(str(doc["capabilityId"]), str(doc["change"]), dict(definition))


def capability_changes(old: PolicyDoc, new: PolicyDoc) -> list[CapabilityChange]:
    """What ``new`` adds or changes against ``old`` (a description is not a capability), in id order."""
    before, after = capabilities(old), capabilities(new)
    out = []
    for capability_id in sorted(after):
        definition = after[capability_id]
        if capability_id not in before:
            out.append(CapabilityChange(capability_id, "added", definition))
        elif _without_description(before[capability_id]) != _without_description(definition):
            out.append(CapabilityChange(capability_id, "changed", definition))
    return out


# -- approvals ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApprovalProblem:
    """Why the approvals do not match the changes: ``code`` is ``RUN_POLICY_UNAPPROVED`` or ``RUN_POLICY_INVALID``."""

    code: str
    path: str
    message: str


def approval_problems(
    changes: Sequence[CapabilityChange], approvals: Sequence[Mapping[str, JsonValue]]
) -> list[ApprovalProblem]:
    """Every changed capability needs exactly one approval with a reason; an approval of anything else is refused."""
    problems = []
    changed = {c.capability_id for c in changes}
    seen: set[str] = set()
    for index, approval in enumerate(approvals):
        capability_id = str(approval.get("capabilityId", ""))
        where = f"$.approvals[{index}]"
        if capability_id in seen:
            problems.append(ApprovalProblem("RUN_POLICY_INVALID", where, f"{capability_id} is approved twice"))
        seen.add(capability_id)
        if capability_id not in changed:
            problems.append(
                ApprovalProblem(
                    "RUN_POLICY_INVALID", where, f"{capability_id} is approved, but the proposal does not change it"
                )
            )
        if not str(approval.get("reason", "")).strip():
            problems.append(ApprovalProblem("RUN_POLICY_UNAPPROVED", f"{where}.reason", "the reason is blank"))
    for change in changes:
        if change.capability_id not in seen:
            problems.append(
                ApprovalProblem(
                    "RUN_POLICY_UNAPPROVED",
                    f"$.approvals[capabilityId={change.capability_id}]",
                    f"{change.capability_id} is {change.change} and needs an approval with a reason",
                )
            )
    return problems


# -- the journal's record ---------------------------------------------------------------------------------------------
# Each part of ``transition.json`` is a record whose JSON form its field map generates
# (:mod:`git_agentops.model.jsonform`); the schema (``schemas/transition.schema.json``) validates the document once,
# where the journal is read.


@dataclass(frozen=True, slots=True)
class Approval(JsonRecord):
    """One changed capability vouched for, with the reason given (``classification`` as the request gave it)."""

    capability_id: str = on_disk("capabilityId")
    reason: str = on_disk("reason")
    classification: str | None = on_disk("classification", absent=None)


@dataclass(frozen=True, slots=True)
class RequestedBy(JsonRecord):
    """The coordinator's request that proposed the transition."""

    worker_id: str = on_disk("workerId")
    generation: int = on_disk("generation")
    request_id: str = on_disk("requestId")
    request_digest: str = on_disk("requestDigest")


@dataclass(frozen=True, slots=True)
class ApprovedBy(JsonRecord):
    """Who approved: ``by`` a person (``user``) or the ``coordinator``, its ``name``, and when."""

    by: str = on_disk("by")
    name: str = on_disk("name")
    at: float = on_disk("at")


@dataclass(frozen=True, slots=True)
class TransitionRefused(JsonRecord):
    """Why the transition ended before ``bound``: the code and message, who refused it, and when."""

    code: str = on_disk("code")
    message: str = on_disk("message")
    by: str = on_disk("by")
    at: float = on_disk("at")


@dataclass(frozen=True, slots=True)
class FrozenDelivery(JsonRecord):
    """A task delivered under the old policy when the writers were fenced: its proof stands as it was made."""

    task_id: str = on_disk("taskId")
    commit: str = on_disk("commit")
    config_hash: str = on_disk("configHash")


@dataclass(frozen=True, slots=True)
class StageMark(JsonRecord):
    """When the transition reached a stage."""

    stage: Stage = on_disk("stage", decode=Stage)
    at: float = on_disk("at")


@dataclass(frozen=True, slots=True)
class Transition(JsonRecord):
    """``transition.json`` of one transition's journal (``schemas/transition.schema.json``)."""

    transition_id: str = on_disk("transitionId")
    run_id: str = on_disk("runId")
    stage: Stage = on_disk("stage", decode=Stage)
    old_hash: str = on_disk("oldConfigHash")
    new_hash: str = on_disk("newConfigHash")
    proposal_digest: str = on_disk("proposalDigest")  # sha256 of the proposal file's bytes (``proposal.toml``)
    config_file: str = on_disk("configFile")  # where the coordinator wrote it, relative to its worktree
    approvals: tuple[Approval, ...] = on_disk("approvals", decode=records_of(Approval.from_json))
    changes: tuple[CapabilityChange, ...] = on_disk("changes", decode=records_of(CapabilityChange.from_json))
    mode: str = on_disk("mode")  # who approves: "user" | "coordinator"
    requested_by: RequestedBy = on_disk("requestedBy", decode=RequestedBy.from_json)
    requested_at: float = on_disk("requestedAt", decode=float)
    approved_by: ApprovedBy | None = on_disk("approvedBy", decode=ApprovedBy.from_json, default=None)
    refused: TransitionRefused | None = on_disk("refused", decode=TransitionRefused.from_json, default=None)
    delivered: tuple[FrozenDelivery, ...] = on_disk(
        "delivered", decode=records_of(FrozenDelivery.from_json), default=()
    )  # frozen before the fence
    resume: tuple[str, ...] = on_disk("resume", default=())  # the writers the fence stopped, restarted at the end
    contract_hash: str | None = on_disk("contractHash", default=None)
    stages: tuple[StageMark, ...] = on_disk("stages", decode=records_of(StageMark.from_json), default=())

    @property
    def ended(self) -> bool:
        """Whether the transition is over (complete or refused)."""
        return self.stage in ENDED

    @property
    def approved(self) -> bool:
        """Whether a person (or, where the policy says so, the coordinator) approved it."""
        return self.approved_by is not None

    def advanced(self, stage: Stage, at: float, **changes: Any) -> Transition:
        """This record at ``stage`` (the next one, or ``refused`` before ``bound``); ``RUN_POLICY_TRANSITION_STALE``
        style misuse is a programming error and raises ValueError."""
        if stage is Stage.REFUSED:
            if self.stage not in (Stage.PREPARED, Stage.FENCED):
                raise ValueError(f"a transition at {self.stage} can only roll forward")
        elif ORDER.index(stage) != ORDER.index(self.stage) + 1:
            raise ValueError(f"{self.transition_id}: {self.stage} -> {stage} skips or repeats a stage")
        return replace(self, stage=stage, stages=(*self.stages, StageMark(stage, at)), **changes)

    def approval_of(self, capability_id: str) -> Approval | None:
        """The approval of one changed capability."""
        return next((a for a in self.approvals if a.capability_id == capability_id), None)

    def change_of(self, capability_id: str) -> CapabilityChange | None:
        """The change of one capability."""
        return next((c for c in self.changes if c.capability_id == capability_id), None)


def describe_changes(changes: Iterable[CapabilityChange]) -> list[str]:
    """One line per changed capability with its full argv, for a person deciding (``run approve``) and for the
    diagnostic the restarted writers get."""
    lines = []
    for change in changes:
        definition = change.definition
        argv = definition.get("argv")
        if isinstance(argv, str):
            shown = argv
        else:
            shown = " ".join(_quote(str(a)) for a in argv or ()) if isinstance(argv, Sequence) else ""
        extra = " (through a shell)" if definition.get("shell") else ""
        env = definition.get("env") or {}
        if isinstance(env, Mapping) and env:
            extra += " with " + " ".join(f"{k}={_quote(str(v))}" for k, v in sorted(env.items()))
        lines.append(f"{change.capability_id} ({change.change}): {shown}{extra}")
    return lines


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)
