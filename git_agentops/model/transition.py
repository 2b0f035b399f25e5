"""Policy transitions as values: what a proposed policy changes, its approvals, and the journal's record.

A run's coordinator may ask to change what the run executes -- a new verification command, an acceptance runner, a
setup step, a host -- without stopping the run (``git agentops-request policy``). The proposal is a complete policy;
:mod:`.judge` says what no approval makes acceptable (a weakening, a raised budget) and what only a person's does;
this module, purely, what is left to approve:

* :func:`capability_changes` -- every capability (``command:<id>``, ``runner:<id>``, ``setup:<index>``,
  ``host:<name>``) the proposal adds or changes, with its full definition, each of which needs one approval with a
  reason (``RUN_POLICY_UNAPPROVED`` otherwise; an approval of anything else is ``RUN_POLICY_INVALID``). Who may
  approve is ``[run] policy_changes``: a person (``user``, the default) or the coordinator itself.

The journal of one transition (``refs/agentops/runs/<run>/journal/<transition>``, :mod:`git_agentops.runs.
transitions`) moves strictly through :class:`Stage`: ``prepared -> fenced -> bound -> synchronized -> complete``, or
ends ``refused`` -- only before ``bound``: once the new policy is bound the transition can only roll forward.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from ..canonical import digest

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


def policy_changes(doc: Mapping[str, Any]) -> ChangeMode:
    """``[run] policy_changes`` of an effective policy (absent: :data:`DEFAULT_POLICY_CHANGES`, no hash change); the
    schema allows only the :class:`ChangeMode` values."""
    return ChangeMode(str(doc["run"].get("policy_changes", DEFAULT_POLICY_CHANGES)))


def transition_id(config_hash: str, approvals: Sequence[Mapping[str, Any]], old_hash: str, request_id: str) -> str:
    """``policy-`` and 16 hex of the digest of what is proposed -- the new config, its approvals, the policy it
    replaces -- and of the request that proposed it: proposing the same change again after a refusal is a new
    transition (a re-sent request is answered from its idempotency record, never proposed twice)."""
    doc = {"config": config_hash, "approvals": list(approvals), "old": old_hash, "request": request_id}
    return TRANSITION_PREFIX + digest(doc)[:16]


# -- capabilities ------------------------------------------------------------------------------------------------


def capabilities(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every capability of an effective policy -- what it may run -- by id, with its full definition."""
    out: dict[str, dict[str, Any]] = {}
    for command in doc["verify"]["commands"]:
        out[f"command:{command['id']}"] = dict(command)
    for runner in doc["verify"]["runners"]:
        out[f"runner:{runner['id']}"] = dict(runner)
    for index, step in enumerate(doc["worktree"]["setup"]):
        out[f"setup:{index}"] = dict(step)
    for name, host in doc["hosts"].items():
        out[f"host:{name}"] = dict(host)
    return out


def _without_description(definition: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in definition.items() if k != "description"}


@dataclass(frozen=True, slots=True)
class CapabilityChange:
    """One capability the proposal adds or changes (``change``), and its new definition."""

    capability_id: str
    change: str  # "added" | "changed"
    definition: Mapping[str, Any]

    @property
    def definition_digest(self) -> str:
        """The digest of the definition: what an approval vouches for."""
        return digest(dict(self.definition))

    def to_json(self) -> dict[str, Any]:
        """The ``changes[]`` entry of the journal record."""
        return {
            "capabilityId": self.capability_id,
            "change": self.change,
            "definition": dict(self.definition),
            "definitionDigest": self.definition_digest,
        }


def capability_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[CapabilityChange]:
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
    changes: Sequence[CapabilityChange], approvals: Sequence[Mapping[str, Any]]
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


@dataclass(frozen=True, slots=True)
class Transition:
    """``transition.json`` of one transition's journal (``schemas/transition.schema.json``)."""

    transition_id: str
    run_id: str
    stage: Stage
    old_hash: str
    new_hash: str
    proposal_digest: str  # sha256 of the proposal file's bytes (``proposal.toml`` beside this record)
    config_file: str  # where the coordinator wrote it, relative to its worktree
    approvals: tuple[Mapping[str, Any], ...]
    changes: tuple[Mapping[str, Any], ...]  # CapabilityChange.to_json() of each
    mode: str  # who approves: "user" | "coordinator"
    requested_by: Mapping[str, Any]  # {workerId, generation, requestId, requestDigest}
    requested_at: float
    approved_by: Mapping[str, Any] | None = None  # {by: "user"|"coordinator", name, at}
    refused: Mapping[str, Any] | None = None  # {code, message, by, at}
    delivered: tuple[Mapping[str, Any], ...] = ()  # [{taskId, commit, configHash}] frozen before the fence
    resume: tuple[str, ...] = ()  # the writers the fence stopped, restarted at the end
    contract_hash: str | None = None
    stages: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)  # [{stage, at}]

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
        return replace(self, stage=stage, stages=(*self.stages, {"stage": str(stage), "at": at}), **changes)

    def to_json(self) -> dict[str, Any]:
        """The ``transition.json`` document."""
        return {
            "transitionId": self.transition_id,
            "runId": self.run_id,
            "stage": str(self.stage),
            "oldConfigHash": self.old_hash,
            "newConfigHash": self.new_hash,
            "proposalDigest": self.proposal_digest,
            "configFile": self.config_file,
            "approvals": [dict(a) for a in self.approvals],
            "changes": [dict(c) for c in self.changes],
            "mode": self.mode,
            "requestedBy": dict(self.requested_by),
            "requestedAt": self.requested_at,
            "approvedBy": dict(self.approved_by) if self.approved_by is not None else None,
            "refused": dict(self.refused) if self.refused is not None else None,
            "delivered": [dict(d) for d in self.delivered],
            "resume": list(self.resume),
            "contractHash": self.contract_hash,
            "stages": [dict(s) for s in self.stages],
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Transition:
        """Read ``transition.json`` back (already validated against its schema)."""
        return cls(
            transition_id=doc["transitionId"],
            run_id=doc["runId"],
            stage=Stage(doc["stage"]),
            old_hash=doc["oldConfigHash"],
            new_hash=doc["newConfigHash"],
            proposal_digest=doc["proposalDigest"],
            config_file=doc["configFile"],
            approvals=tuple(doc["approvals"]),
            changes=tuple(doc["changes"]),
            mode=doc["mode"],
            requested_by=doc["requestedBy"],
            requested_at=float(doc["requestedAt"]),
            approved_by=doc.get("approvedBy"),
            refused=doc.get("refused"),
            delivered=tuple(doc.get("delivered", ())),
            resume=tuple(doc.get("resume", ())),
            contract_hash=doc.get("contractHash"),
            stages=tuple(doc.get("stages", ())),
        )


def describe_changes(changes: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per changed capability with its full argv, for a person deciding (``run approve``) and for the
    diagnostic the restarted writers get."""
    lines = []
    for change in changes:
        definition = change["definition"]
        argv = definition.get("argv")
        shown = argv if isinstance(argv, str) else " ".join(_quote(a) for a in argv or ())
        extra = " (through a shell)" if definition.get("shell") else ""
        env = definition.get("env") or {}
        if env:
            extra += " with " + " ".join(f"{k}={_quote(str(v))}" for k, v in sorted(env.items()))
        lines.append(f"{change['capabilityId']} ({change['change']}): {shown}{extra}")
    return lines


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)
