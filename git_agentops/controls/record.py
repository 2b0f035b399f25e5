"""A control as a value: its document, its id and ref, its signed bytes, and the outcome the supervisor records.

The document is what is signed (its RFC 8785 canonical bytes, so any reader can rebuild them) and it names
everything the signature must cover: the run, the control's own id (equal to its ref's last component, so a
control cannot be renamed or replayed under another id), its kind and the decision's target (the question, the
policy transition, the integration candidate). Codes: ``CONTROL_INVALID`` for a document that is not one.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from ..canonical import jcs_bytes
from ..errors import AgentOpsError

TYPE: Final = "git-agentops/control/v1"
NAMESPACE: Final = "git-agentops-control"
"""The SSH signature namespace of controls: a key listed for receipts only (``namespaces="git-agentops"``) cannot
make one, and a receipt's signature is never a control's."""
KINDS: Final = ("answer", "approve", "refuse", "review")
DECISIONS: Final = ("approve", "refuse")
DOCUMENT_FILE: Final = "control.json"
SIGNATURE_FILE: Final = "control.sig"
MAX_DOCUMENT: Final = 96 * 1024
MAX_SIGNATURE: Final = 16 * 1024
_ID: Final = re.compile(r"[0-9]{8}T[0-9]{6}\.[0-9]{6}Z-[0-9a-f]{12}")
_RUN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_TEXT_LIMITS: Final = {
    "text": 65536,
    "reason": 8000,
    "questionId": 256,
    "transition": 128,
    "candidate": 64,
    "by": 256,
    "decision": 16,
    "accept": 20000,
}


def controls_prefix(run_id: str) -> str:
    """``refs/agentops/runs/<run>/controls/``."""
    return f"refs/agentops/runs/{run_id}/controls/"


def control_ref(run_id: str, control_id: str) -> str:
    """The create-only ref of one control."""
    return controls_prefix(run_id) + control_id


def new_id(now: float) -> str:
    """``YYYYMMDDTHHMMSS.ffffffZ-<12 hex>``: ids sort in the order they were made (on one clock), and two people
    never make the same one."""
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    return f"{stamp}-{secrets.token_hex(6)}"


def is_id(value: str) -> bool:
    """Whether ``value`` is a control id :func:`new_id` could have made."""
    return bool(_ID.fullmatch(value))


@dataclass(frozen=True, slots=True)
class Control:
    """One signed decision of a person about a run."""

    control_id: str
    run_id: str
    kind: str  # one of KINDS
    at: float  # when it was made, on the sender's clock
    by: str  # who the sender says they are (git's user.email or name): shown, never believed
    question_id: str | None = None  # answer
    text: str | None = None  # answer
    transition: str | None = None  # approve, refuse: the transition id (in full)
    reason: str | None = None  # refuse, review
    candidate: str | None = None  # review: the integration candidate the decision is about
    decision: str | None = None  # review: approve or refuse
    accept: str | None = None  # review: the model reviewers' findings the person agrees with, comma-separated ids

    def to_json(self) -> dict[str, Any]:
        """The document, without the fields its kind does not use."""
        doc: dict[str, Any] = {
            "type": TYPE,
            "controlId": self.control_id,
            "runId": self.run_id,
            "kind": self.kind,
            "at": self.at,
            "by": self.by,
        }
        for key, value in (
            ("questionId", self.question_id),
            ("text", self.text),
            ("transition", self.transition),
            ("reason", self.reason),
            ("candidate", self.candidate),
            ("decision", self.decision),
            ("accept", self.accept),
        ):
            if value is not None:
                doc[key] = value
        return doc

    def payload(self) -> bytes:
        """The bytes the signature covers: the document's RFC 8785 canonical form."""
        return jcs_bytes(self.to_json())

    def describe(self) -> str:
        """One line: what it decides."""
        match self.kind:
            case "answer":
                return f"answer to {self.question_id}"
            case "approve" | "refuse":
                return f"{self.kind} of {self.transition}"
            case _:
                return f"review {self.decision} of {(self.candidate or '')[:12]}"

    @classmethod
    def from_json(cls, doc: Any) -> Control:
        """The control a document holds; ``CONTROL_INVALID`` naming what is wrong."""
        if not isinstance(doc, dict) or doc.get("type") != TYPE:
            raise _invalid(f"not a {TYPE} document")
        allowed = {"type", "controlId", "runId", "kind", "at", "by", *_TEXT_LIMITS}
        if unknown := sorted(set(doc) - allowed):
            raise _invalid(f"unknown field(s) {', '.join(unknown)}")
        control_id, run_id, kind, at = doc.get("controlId"), doc.get("runId"), doc.get("kind"), doc.get("at")
        if not isinstance(control_id, str) or not is_id(control_id):
            raise _invalid(f"controlId {control_id!r} is not a control id")
        if not isinstance(run_id, str) or not _RUN.fullmatch(run_id):
            raise _invalid(f"runId {run_id!r} is not a run id")
        if kind not in KINDS:
            raise _invalid(f"kind {kind!r} is not one of {', '.join(KINDS)}")
        if not isinstance(at, int | float) or isinstance(at, bool) or at < 0:
            raise _invalid("at is not a time")
        for key, limit in _TEXT_LIMITS.items():
            value = doc.get(key)
            if value is not None and (not isinstance(value, str) or len(value) > limit):
                raise _invalid(f"{key} is not a string of at most {limit} characters")
        needs = {
            "answer": ("questionId", "text"),
            "approve": ("transition",),
            "refuse": ("transition",),
            "review": ("candidate", "decision"),
        }[kind]
        if missing := [key for key in needs if not doc.get(key)]:
            raise _invalid(f"a {kind} control needs {', '.join(missing)}")
        if kind == "review" and doc["decision"] not in DECISIONS:
            raise _invalid(f"decision {doc['decision']!r} is not approve or refuse")
        return cls(
            control_id,
            run_id,
            kind,
            float(at),
            str(doc.get("by", "")),
            doc.get("questionId"),
            doc.get("text"),
            doc.get("transition"),
            doc.get("reason"),
            doc.get("candidate"),
            doc.get("decision"),
            doc.get("accept"),
        )


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the supervisor did with one control, recorded once in the run's state (``controls/<id>.json``)."""

    control_id: str
    kind: str
    commit: str  # the control's commit
    applied: bool
    code: str | None  # why it was refused (CONTROL_*), None when applied
    message: str
    signer: str | None  # the principal its signature was checked as, when it was
    at: float

    def to_json(self) -> dict[str, Any]:
        """As the run's state holds it."""
        return {
            "controlId": self.control_id,
            "kind": self.kind,
            "commit": self.commit,
            "outcome": "applied" if self.applied else "refused",
            "code": self.code,
            "message": self.message[:8000],
            "signer": self.signer,
            "at": self.at,
        }

    @classmethod
    def from_json(cls, doc: Any) -> Outcome:
        """From the run's state (the schema checked it)."""
        return cls(
            doc["controlId"],
            doc["kind"],
            doc["commit"],
            doc["outcome"] == "applied",
            doc.get("code"),
            doc.get("message", ""),
            doc.get("signer"),
            float(doc["at"]),
        )


def _invalid(why: str) -> AgentOpsError:
    return AgentOpsError("CONTROL_INVALID", f"not a control: {why}")
