"""The receipt's documents' shapes, as typed dictionaries (``schemas/dsse-envelope.schema.json``,
``schemas/in-toto-statement.schema.json``, ``schemas/receipt-predicate.schema.json``).

A receipt stays a JSON document from end to end: it is signed over its exact bytes, sealed part by part over the
canonical JSON of each part, and read back by verifiers outside this toolkit. So it is not turned into records when
it is read; its shape is declared here, once, so that the checks of :mod:`.statement` and :mod:`.verify` are
type-checked against the schema instead of reading ``Any``. Every reader trusts the shape only after the schema
validated the document (:meth:`.dsse.Envelope.statement`), and each sealed value only after its seal recomputed
(:func:`.verify.verify_receipt`). A key marked ``NotRequired`` is one the schema lets a receipt leave out.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from ..canonical import JsonObject, JsonValue

# -- the envelope and the statement ----------------------------------------------------------------------------------


class SignatureDoc(TypedDict):
    """One DSSE signature: the key's fingerprint (a hint) and the signature, both as the envelope spells them."""

    keyid: str
    sig: str


class EnvelopeDoc(TypedDict):
    """The DSSE envelope, the receipt note's JSON (payload and signatures in standard base64)."""

    payload: str
    payloadType: str
    signatures: list[SignatureDoc]


class SubjectDigestDoc(TypedDict):
    """The content a receipt is bound to: the integrated commit and its tree."""

    gitCommit: str
    gitTree: str


class SubjectDoc(TypedDict):
    """The statement's one subject: ``git:<target>`` and the commit and tree it binds the claim to."""

    name: str
    digest: SubjectDigestDoc


class SealDoc(TypedDict):
    """A seal as the predicate holds it: a value and the digest of its canonical JSON (checked before use)."""

    value: JsonValue
    digest: str


class PredicateDoc(TypedDict):
    """The receipt predicate (the layout in :mod:`.statement`'s docstring): seals, and the few plain keys."""

    runId: str
    goal: SealDoc
    goalHash: str
    policy: SealDoc
    tasks: SealDoc
    contractHash: str
    deliveries: SealDoc
    integration: SealDoc
    verification: SealDoc
    reviews: SealDoc
    usage: NotRequired[SealDoc]
    sandbox: NotRequired[str]
    toolkitVersion: str
    createdAt: str


class StatementDoc(TypedDict):
    """The in-toto Statement a receipt signs."""

    _type: str
    subject: list[SubjectDoc]
    predicateType: str
    predicate: PredicateDoc


# -- the sealed values ---------------------------------------------------------------------------------------------


class TaskDoc(TypedDict):
    """A task of the sealed task tree (:func:`.statement.task_record`)."""

    id: str
    parent: str | None
    status: str
    title: NotRequired[str | None]
    revision: NotRequired[int]
    dependencies: NotRequired[list[str]]
    repairs: NotRequired[str]


class EvidenceDoc(TypedDict):
    """An evidence summary (:func:`.statement.evidence_summary`): of a delivery, or of the final verification."""

    commandId: str
    kind: NotRequired[str]
    argvDigest: str
    exitCode: int | None
    passed: NotRequired[bool]
    required: NotRequired[bool]
    tests: JsonValue
    outputDigest: str
    tree: str
    commit: NotRequired[str]
    taskId: NotRequired[str]
    cached: NotRequired[bool]
    cachedFrom: NotRequired[str]
    producer: NotRequired[JsonValue]
    checkout: NotRequired[JsonValue]
    policyConfigHash: NotRequired[str]


class DeliveryDoc(TypedDict):
    """A delivery, in merge order (:class:`~git_agentops.model.delivery.DeliveryEntry`'s JSON form)."""

    taskId: str
    workerId: str
    generation: int
    sourceCommit: str
    deliveryDigest: str
    evidence: NotRequired[list[EvidenceDoc]]
    sandbox: NotRequired[str]


class StepDoc(TypedDict):
    """A merge step (:class:`~git_agentops.model.delivery.MergeStep`'s JSON form)."""

    label: str
    commit: str
    parents: list[str]
    tree: str


class QueueMarkDoc(TypedDict):
    """A merge-queue publication: the run's entry and those published before it by the same CAS."""

    position: int
    below: list[int]
    retried: NotRequired[bool]


class IntegrationDoc(TypedDict):
    """The sealed integration: target, base, the merge order and its steps."""

    target: str
    base: str
    order: list[str]
    steps: list[StepDoc]
    unreviewed: NotRequired[list[str]]
    targetRewritten: NotRequired[bool]
    queue: NotRequired[QueueMarkDoc]


TransitionDoc = TypedDict(
    "TransitionDoc",
    {
        "transitionId": str,
        "from": str,
        "to": str,
        "approvedBy": str,
        "approver": str,
        "approvals": list[JsonObject],
        "capabilities": list[JsonObject],
        "completedAt": str,
    },
)
"""A journaled policy transition as the sealed policy records it (:func:`.statement.transition_record`)."""


class PolicyDoc(TypedDict):
    """The sealed policy: the one the run ended under, and its base and transitions when it changed."""

    configHash: str
    toolkitVersion: str
    baseConfigHash: NotRequired[str]
    transitions: NotRequired[list[TransitionDoc]]


class ReviewDoc(TypedDict):
    """A review's result (:class:`~git_agentops.model.delivery.ReviewResult`'s JSON form)."""

    reviewer: str
    verdict: str
    reportDigest: str
    taskId: NotRequired[str]
    sandbox: NotRequired[str]


class SealedValues(TypedDict):
    """The predicate's sealed values, each read out of its seal once the seal recomputed."""

    goal: str
    policy: PolicyDoc
    tasks: list[TaskDoc]
    deliveries: list[DeliveryDoc]
    integration: IntegrationDoc
    verification: list[EvidenceDoc]
    reviews: list[ReviewDoc]
    usage: NotRequired[JsonObject]
