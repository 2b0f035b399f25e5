"""The integration record of a run: how far the journaled transaction from deliveries to the target has come.

It lives in ``run.json`` (``integration``) and is rewritten, step by step, by the integration job; each step is
recorded before the next one has effects, so a new supervisor rolls forward from what the record says. The status
moves ``requested -> prepared -> verified -> reviewed -> published -> receipted -> complete``, or ends ``failed``
(the coordinator is then restarted with the failure). A field is absent from the JSON until its step sets it.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from .delivery import CommitId, Digest, MergeStep, PendingFinalize, ReviewResult
from .fieldmap import Field, FieldMap, field_map


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


@dataclass(frozen=True, slots=True)
class Integration:
    """One run's integration record. ``None`` marks a field its step has not written yet."""

    status: IntegrationStatus
    request: PendingFinalize | None = None  # the finalize request it answers
    attempts: int | None = None  # candidates built so far (the target moved under the earlier ones)
    base: CommitId | None = None  # the target tip the candidate was built on
    candidate: CommitId | None = None
    order: tuple[str, ...] | None = None  # task ids in merge order
    steps: tuple[MergeStep, ...] | None = None  # one per merge
    verification: tuple[Mapping[str, Any], ...] | None = None  # evidence summaries of the final gate
    reviews: tuple[ReviewResult, ...] | None = None
    published_at: float | None = None
    receipt_digest: Digest | None = None
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

    def to_json(self) -> dict[str, object]:
        """The ``run.json`` form: camelCase keys, only the fields that were written."""
        return INTEGRATION.dump(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> Integration:
        """Read a ``run.json`` integration object (the schema has checked its shape)."""
        return INTEGRATION.load(doc)


_written: Final = functools.partial(Field, absent=None)
"""A field its step writes: absent from the JSON until then."""


INTEGRATION: Final[FieldMap[Integration]] = field_map(
    Integration,
    Field("status", "status", decode=IntegrationStatus, encode=str),
    _written("request", "request", decode=PendingFinalize.from_json, encode=PendingFinalize.to_json),
    _written("attempts", "attempts"),
    _written("base", "base"),
    _written("candidate", "candidate"),
    _written("order", "order", sequence=True),
    _written("steps", "steps", sequence=True, decode=MergeStep.from_json, encode=MergeStep.to_json),
    _written("verification", "verification", sequence=True, decode=dict, encode=dict),
    _written("reviews", "reviews", sequence=True, decode=ReviewResult.from_json, encode=ReviewResult.to_json),
    _written("published_at", "publishedAt"),
    _written("receipt_digest", "receiptDigest"),
    _written("failure", "failure"),
    _written("unreviewed", "unreviewed", sequence=True),
    _written("target_rewritten", "targetRewritten"),
)
"""The declaration of the ``run.json`` form."""
