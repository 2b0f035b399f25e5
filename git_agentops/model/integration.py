"""The integration record of a run: how far the journaled transaction from deliveries to the target has come.

It lives in ``run.json`` (``integration``) and is rewritten, step by step, by the integration job; each step is
recorded before the next one has effects, so a new supervisor rolls forward from what the record says. The status
moves ``requested -> prepared -> verified -> reviewed -> published -> receipted -> complete`` (with the merge queue:
``requested -> queued -> published -> ...``), or ends ``failed``
(the coordinator is then restarted with the failure). A field is absent from the JSON until its step sets it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from .delivery import CommitId, Digest, MergeStep, PendingFinalize, ReviewResult
from .jsonform import FieldMap, JsonRecord, field_map, on_disk, records_of


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
    QUEUED = "queued"  # enqueued on the target's merge queue; published (or failed) by whoever processes it


BUILT: Final = frozenset({IntegrationStatus.PREPARED, IntegrationStatus.VERIFIED, IntegrationStatus.REVIEWED})
"""A candidate exists but the target has not moved to it (as far as the record knows)."""
SETTLED: Final = frozenset({IntegrationStatus.COMPLETE, IntegrationStatus.FAILED})
"""Nothing is left to roll forward."""


@dataclass(frozen=True, slots=True)
class Integration(JsonRecord):
    """One run's integration record. ``None`` marks a field its step has not written yet. Its JSON form (``to_json``,
    ``from_json``) is ``run.json``'s ``integration``: camelCase keys, only the fields that were written (a field its
    step writes is absent from the JSON until then)."""

    status: IntegrationStatus = on_disk("status", decode=IntegrationStatus)
    # the finalize request it answers
    request: PendingFinalize | None = on_disk("request", absent=None, decode=PendingFinalize.from_json)
    attempts: int | None = on_disk(
        "attempts", absent=None
    )  # candidates built so far (the target moved under the earlier ones)
    base: CommitId | None = on_disk("base", absent=None)  # the target tip the candidate was built on
    candidate: CommitId | None = on_disk("candidate", absent=None)
    order: tuple[str, ...] | None = on_disk("order", absent=None)  # task ids in merge order
    # one per merge
    steps: tuple[MergeStep, ...] | None = on_disk("steps", absent=None, decode=records_of(MergeStep.from_json))
    # evidence summaries of the final gate
    verification: tuple[Mapping[str, Any], ...] | None = on_disk("verification", absent=None, decode=records_of(dict))
    reviews: tuple[ReviewResult, ...] | None = on_disk(
        "reviews", absent=None, decode=records_of(ReviewResult.from_json)
    )
    published_at: float | None = on_disk("publishedAt", absent=None)
    receipt_digest: Digest | None = on_disk("receiptDigest", absent=None)
    failure: str | None = on_disk("failure", absent=None)  # the code that failed it
    # target commits since the run's base that carry no receipt
    unreviewed: tuple[str, ...] | None = on_disk("unreviewed", absent=None)
    # the run's base is not an ancestor of the candidate's base
    target_rewritten: bool | None = on_disk("targetRewritten", absent=None)
    # the candidate an earlier attempt of the run left in its candidate ref (the supervisor's own, not a forgery)
    prior_candidate: CommitId | None = on_disk("priorCandidate", absent=None)
    queue_position: int | None = on_disk("queuePosition", absent=None)  # its entry in the target's merge queue
    # the queue entries published in the same CAS before it: the candidates it was verified on top of
    queue_below: tuple[int, ...] | None = on_disk("queueBelow", absent=None)
    queue_retried: bool = on_disk("queueRetried", absent=False)  # its candidate failed once, passed on the retry

    @property
    def pending(self) -> bool:
        """Whether a supervisor has something to roll forward."""
        return self.status not in SETTLED

    def advanced(self, **changes: Any) -> Integration:
        """This record with ``changes`` applied (sequences are stored as tuples)."""
        for key in ("order", "steps", "verification", "reviews", "unreviewed", "queue_below"):
            if key in changes and changes[key] is not None:
                changes[key] = tuple(changes[key])
        return replace(self, **changes)


INTEGRATION: Final[FieldMap[Integration]] = field_map(Integration)
"""The declared field map: the ``run.json`` form, and the keys the integration's events name its fields by."""
