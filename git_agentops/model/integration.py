"""The integration record of a run: how far the journaled transaction from deliveries to the target has come.

It lives in ``run.json`` (``integration``) and is rewritten, step by step, by the integration job; each step is
recorded before the next one has effects, so a new supervisor rolls forward from what the record says. The status
moves ``requested -> prepared -> verified -> reviewed -> published -> receipted -> complete``, or ends ``failed``
(the coordinator is then restarted with the failure). A field is absent from the JSON until its step sets it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Final


class IntegrationStatus(enum.StrEnum):
    """The step an integration reached; see the module docstring for the order."""

    REQUESTED = "requested"
    PREPARED = "prepared"
    VERIFIED = "verified"
    REVIEWED = "reviewed"
    PUBLISHED = "published"
    RECEIPTED = "receipted"
    COMPLETE = "complete"
    FAILED = "failed"


BUILT: Final = frozenset({IntegrationStatus.PREPARED, IntegrationStatus.VERIFIED, IntegrationStatus.REVIEWED})
"""A candidate exists but the target has not moved to it (as far as the record knows)."""
SETTLED: Final = frozenset({IntegrationStatus.COMPLETE, IntegrationStatus.FAILED})
"""Nothing is left to roll forward."""

_JSON_NAMES: Final = {
    "status": "status",
    "request": "request",
    "attempts": "attempts",
    "base": "base",
    "candidate": "candidate",
    "order": "order",
    "steps": "steps",
    "verification": "verification",
    "reviews": "reviews",
    "published_at": "publishedAt",
    "receipt_digest": "receiptDigest",
    "failure": "failure",
    "unreviewed": "unreviewed",
    "target_rewritten": "targetRewritten",
}


@dataclass(frozen=True, slots=True)
class Integration:
    """One run's integration record. ``None`` marks a field its step has not written yet."""

    status: IntegrationStatus
    request: Mapping[str, Any] | None = None  # the finalize request: requestId, requestDigest, rawDigest, generation
    attempts: int | None = None  # candidates built so far (the target moved under the earlier ones)
    base: str | None = None  # the target tip the candidate was built on
    candidate: str | None = None
    order: tuple[str, ...] | None = None  # task ids in merge order
    steps: tuple[Mapping[str, Any], ...] | None = None  # {label, commit, parents, tree} per merge
    verification: tuple[Mapping[str, Any], ...] | None = None  # evidence summaries of the final gate
    reviews: tuple[Mapping[str, Any], ...] | None = None
    published_at: float | None = None
    receipt_digest: str | None = None
    failure: str | None = None  # the code that failed it
    unreviewed: tuple[str, ...] | None = None  # target commits since the run's base that carry no receipt
    target_rewritten: bool | None = None  # the run's base is not an ancestor of the candidate's base

    @property
    def pending(self) -> bool:
        """Whether a supervisor has something to roll forward."""
        return self.status not in SETTLED

    def advanced(self, **changes: Any) -> Integration:
        """This record with ``changes`` applied (sequences are stored as tuples)."""
        for key in ("order", "steps", "verification", "reviews", "unreviewed"):
            if key in changes and changes[key] is not None:
                changes[key] = tuple(changes[key])
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """The ``run.json`` form: camelCase keys, only the fields that were written."""
        doc: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if value is None:
                continue
            if isinstance(value, tuple):
                value = [dict(v) if isinstance(v, Mapping) else v for v in value]
            elif isinstance(value, Mapping):
                value = dict(value)
            elif isinstance(value, IntegrationStatus):
                value = str(value)
            doc[_JSON_NAMES[item.name]] = value
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Integration:
        """Read a ``run.json`` integration object (the schema has checked its shape)."""
        values: dict[str, Any] = {}
        for name, key in _JSON_NAMES.items():
            if key in doc and doc[key] is not None:
                value = doc[key]
                values[name] = tuple(value) if isinstance(value, Sequence) and not isinstance(value, str) else value
        values["status"] = IntegrationStatus(doc["status"])
        return cls(**values)
