"""The delivery and integration records: what a worker delivered, what finalize asked for, how the candidate was
merged and what the reviewers said -- each one typed record with one declared field map (:mod:`.fieldmap`).

A delivery travels: the supervisor writes it in the sealed delivery note on the commit (``sourceCommit``,
``deliveryDigest``), records it on the task in the run state (``commit``, ``digest``), and the receipt names it
again (``sourceCommit``, ``deliveryDigest``). Those spellings are formats on disk and stay; what changes is that
they are declared once, here, as renamings of one field map, and everything between the edges speaks
:class:`Delivery`.

Ids get their own types (``NewType``: no cost at run time) so a signature says which kind of hex string it wants:
a commit, a tree, or a SHA-256 digest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, NewType

from .fieldmap import Field, FieldMap, field_map

CommitId = NewType("CommitId", str)
"""A commit's object id (40 or 64 hex digits)."""
TreeId = NewType("TreeId", str)
"""A tree's object id."""
Digest = NewType("Digest", str)
"""A SHA-256 digest in hex: of a canonical JSON document, a request, a report."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One task's frozen delivery: the commit (the squash of the handed-off head when ``squashed_from`` is set),
    its delivery digest, who delivered it, and the digests of the evidence it was accepted with."""

    commit: CommitId
    digest: Digest
    worker_id: str
    generation: int
    evidence: tuple[Digest, ...] = ()
    no_change: bool = False  # the worker handed off its base: nothing to merge
    squashed_from: CommitId | None = None

    def to_json(self) -> dict[str, object]:
        """The run state's form (``extra.delivery`` of the task document)."""
        return DELIVERY.dump(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> Delivery:
        """Read the run state's form (the task schema has checked it)."""
        return DELIVERY.load(doc)

    @classmethod
    def from_note(cls, note: Mapping[str, object]) -> Delivery:
        """The delivery a (sealed, authenticated) delivery note describes."""
        return DELIVERY_NOTE.load(note)


DELIVERY: Final[FieldMap[Delivery]] = field_map(
    Delivery,
    ("commit", "commit"),
    ("digest", "digest"),
    ("worker_id", "workerId"),
    ("generation", "generation"),
    Field("evidence", "evidence", sequence=True),
    ("no_change", "noChange"),
    Field("squashed_from", "squashedFrom", absent=None),
)
"""The declaration: the run state's spelling (a task's ``extra.delivery``)."""
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
class PendingFinalize:
    """The finalize request an integration answers (``run.json`` ``integration.request``): the coordinator's, or the
    supervisor's own when ``[run] finalize = "auto"`` (``automatic``)."""

    request_id: str
    request_digest: Digest
    raw_digest: Digest
    generation: int
    automatic: bool = False

    def to_json(self) -> dict[str, object]:
        """The ``run.json`` form; ``automatic`` only when set."""
        return PENDING_FINALIZE.dump(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> PendingFinalize:
        """Read the ``run.json`` form (the run schema has checked it)."""
        return PENDING_FINALIZE.load(doc)


PENDING_FINALIZE: Final[FieldMap[PendingFinalize]] = field_map(
    PendingFinalize,
    ("request_id", "requestId"),
    ("request_digest", "requestDigest"),
    ("raw_digest", "rawDigest"),
    ("generation", "generation"),
    Field("automatic", "automatic", absent=False),
)

UNRECORDED_DIGEST: Final = Digest("0" * 64)
UNRECORDED_FINALIZE: Final = PendingFinalize("finalize", UNRECORDED_DIGEST, UNRECORDED_DIGEST, 1)
"""What an integration record without its request answers (the schema allows one): a refusal and a request
record still need an id, digests and a generation."""


@dataclass(frozen=True, slots=True)
class MergeStep:
    """One merge of the integration's chain: the commit it made, its parents (the chain so far, then the
    delivery), its tree, and its label (``merge <task title>``)."""

    label: str
    commit: CommitId
    parents: tuple[CommitId, ...]
    tree: TreeId

    def to_json(self) -> dict[str, object]:
        """The ``run.json`` and receipt form."""
        return MERGE_STEP.dump(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> MergeStep:
        """Read the ``run.json`` form (the run schema has checked it)."""
        return MERGE_STEP.load(doc)


MERGE_STEP: Final[FieldMap[MergeStep]] = field_map(
    MergeStep,
    ("label", "label"),
    ("commit", "commit"),
    Field("parents", "parents", sequence=True),
    ("tree", "tree"),
)


@dataclass(frozen=True, slots=True)
class ReviewResult:
    """A reviewer's verdict as the integration record and the receipt keep it: the verdict (``missing`` when it
    wrote no valid report), the report's digest, and the sandbox level it ran at when known."""

    reviewer: str
    verdict: str
    report_digest: Digest
    sandbox: str | None = None

    def to_json(self) -> dict[str, object]:
        """The ``run.json`` and receipt form; ``sandbox`` only when known."""
        return REVIEW_RESULT.dump(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> ReviewResult:
        """Read the ``run.json`` form (the run schema has checked it)."""
        return REVIEW_RESULT.load(doc)


REVIEW_RESULT: Final[FieldMap[ReviewResult]] = field_map(
    ReviewResult,
    ("reviewer", "reviewer"),
    ("verdict", "verdict"),
    ("report_digest", "reportDigest"),
    Field("sandbox", "sandbox", absent=None),
)
