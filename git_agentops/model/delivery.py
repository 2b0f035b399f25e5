"""The delivery and integration records: what a worker delivered, what finalize asked for, how the candidate was
merged and what the reviewers said -- each one typed record with one declared field map (:mod:`.jsonform`).

A delivery travels: the supervisor writes it in the sealed delivery note on the commit (``sourceCommit``,
``deliveryDigest``), records it on the task in the run state (``commit``, ``digest``), and the receipt names it
again (``sourceCommit``, ``deliveryDigest``). Those spellings are formats on disk and stay; what changes is that
the fields are declared once, on :class:`Delivery`, the note's and the receipt's spellings are derived from that
field map (:data:`DELIVERY_NOTE`, :data:`DELIVERY_RECEIPT`), and everything between the edges speaks
:class:`Delivery`.

Ids get their own types (``NewType``: no cost at run time) so a signature says which kind of hex string it wants:
a commit, a tree, or a SHA-256 digest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, NewType

from .jsonform import FieldMap, JsonRecord, field_map, on_disk

CommitId = NewType("CommitId", str)
"""A commit's object id (40 or 64 hex digits)."""
TreeId = NewType("TreeId", str)
"""A tree's object id."""
Digest = NewType("Digest", str)
"""A SHA-256 digest in hex: of a canonical JSON document, a request, a report."""


@dataclass(frozen=True, slots=True)
class Delivery(JsonRecord):
    """One task's frozen delivery: the commit (the squash of the handed-off head when ``squashed_from`` is set),
    its delivery digest, who delivered it, and the digests of the evidence it was accepted with.

    The declaration is the run state's spelling (a task's ``extra.delivery``): ``to_json`` and ``from_json``."""

    commit: CommitId = on_disk("commit")
    digest: Digest = on_disk("digest")
    worker_id: str = on_disk("workerId")
    generation: int = on_disk("generation")
    evidence: tuple[Digest, ...] = on_disk("evidence", default=())
    no_change: bool = on_disk("noChange", default=False)  # the worker handed off its base: nothing to merge
    squashed_from: CommitId | None = on_disk("squashedFrom", absent=None)

    @classmethod
    def from_note(cls, note: Mapping[str, Any]) -> Delivery:
        """The delivery a (sealed, authenticated) delivery note describes."""
        return DELIVERY_NOTE.load(note)


DELIVERY: Final[FieldMap[Delivery]] = field_map(Delivery)
"""The declared form: the run state's spelling (a task's ``extra.delivery``)."""
DELIVERY_NOTE: Final = DELIVERY.renamed(commit="sourceCommit", digest="deliveryDigest")
"""The delivery note's spelling (the note carries more: run, task, contract, source files, the MAC)."""
DELIVERY_RECEIPT: Final = DELIVERY_NOTE.only("worker_id", "generation", "commit", "digest")
"""The receipt's delivery entry (plus ``taskId``, ``evidence`` summaries and ``sandbox``)."""


@dataclass(frozen=True, slots=True)
class DeliveryEntry:
    """The receipt's entry for one delivered task: the delivery in the receipt's spelling, the summaries of the
    evidence it was accepted with (None: not recorded) and the weakest sandbox level its worker ran at (None: not
    known)."""

    task_id: str
    delivery: Delivery
    evidence: tuple[Mapping[str, object], ...] | None = None
    sandbox: str | None = None

    def to_json(self) -> dict[str, object]:
        """The predicate's ``deliveries`` entry: ``evidence`` and ``sandbox`` only when recorded."""
        doc: dict[str, object] = {"taskId": self.task_id, **DELIVERY_RECEIPT.dump(self.delivery)}
        if self.evidence is not None:
            doc["evidence"] = [dict(summary) for summary in self.evidence]
        if self.sandbox is not None:
            doc["sandbox"] = self.sandbox
        return doc


@dataclass(frozen=True, slots=True)
class PendingFinalize(JsonRecord):
    """The finalize request an integration answers (``run.json`` ``integration.request``): the coordinator's, or the
    supervisor's own when ``[run] finalize = "auto"`` (``automatic``, written only when set)."""

    request_id: str = on_disk("requestId")
    request_digest: Digest = on_disk("requestDigest")
    raw_digest: Digest = on_disk("rawDigest")
    generation: int = on_disk("generation")
    automatic: bool = on_disk("automatic", absent=False)


PENDING_FINALIZE: Final[FieldMap[PendingFinalize]] = field_map(PendingFinalize)

UNRECORDED_DIGEST: Final = Digest("0" * 64)
UNRECORDED_FINALIZE: Final = PendingFinalize("finalize", UNRECORDED_DIGEST, UNRECORDED_DIGEST, 1)
"""What an integration record without its request answers (the schema allows one): a refusal and a request
record still need an id, digests and a generation."""


@dataclass(frozen=True, slots=True)
class MergeStep(JsonRecord):
    """One merge of the integration's chain: the commit it made, its parents (the chain so far, then the
    delivery), its tree, and its label (``merge <task title>``). Its JSON form is ``run.json``'s and the
    receipt's."""

    label: str = on_disk("label")
    commit: CommitId = on_disk("commit")
    parents: tuple[CommitId, ...] = on_disk("parents")
    tree: TreeId = on_disk("tree")


MERGE_STEP: Final[FieldMap[MergeStep]] = field_map(MergeStep)


@dataclass(frozen=True, slots=True)
class ReviewResult(JsonRecord):
    """A reviewer's verdict as the integration record and the receipt keep it: the verdict (``missing`` when it
    wrote no valid report), the report's digest, and the sandbox level it ran at when known (written only then)."""

    reviewer: str = on_disk("reviewer")
    verdict: str = on_disk("verdict")
    report_digest: Digest = on_disk("reportDigest")
    sandbox: str | None = on_disk("sandbox", absent=None)


REVIEW_RESULT: Final[FieldMap[ReviewResult]] = field_map(ReviewResult)
