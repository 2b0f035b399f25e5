"""The receipt's statement: an in-toto Statement v1 whose predicate records what one integration did.

Why in-toto: it is the attestation format CI systems and supply-chain tools already read, and its subject binds a
claim to exact content digests -- here the integrated commit (``gitCommit``) and its tree (``gitTree``), so a
receipt copied onto another commit is refused.

Why seals: the predicate is large (every delivery, every verification result...). Each part that can be judged on
its own is a seal, ``{"value": v, "digest": sha256(canonical JSON of v)}`` (:func:`..canonical.seal`), so a
verifier or a human with ``git agentops-receipt show`` can check, quote and compare one part -- "the deliveries
of this receipt are ``3f2a...``" -- without re-reading the rest. Seals detect edits of an unsigned receipt that
forgot to update a digest; only the signature protects against a deliberate forger (and it covers everything).

The predicate (``schemas/receipt-predicate.schema.json``)::

    runId           the run's id
    goal            seal(goal text)
    goalHash        digest({"goal": goal}) -- the run record's goalHash, checked against ``goal``
    policy          seal({configHash, toolkitVersion, baseConfigHash?, transitions?}) -- the policy binding the run
                    ended under (``configHash``); when its policy changed mid-run, also the one it was started and
                    trusted under (``baseConfigHash``) and every journaled change between them, in order:
                    transitions: [{transitionId, from, to, approvedBy: user|coordinator, approver,
                                   approvals: [{capabilityId, reason}],
                                   capabilities: [{capabilityId, change: added|changed, definitionDigest}],
                                   completedAt}]
    tasks           seal([{id, parent, status, title?, revision?, dependencies?}]) -- the task tree
    contractHash    the task tree's contract hash (model.task.contract_hash)
    deliveries      seal([{taskId, workerId, generation, sourceCommit, deliveryDigest, evidence?, sandbox?}]) -- in
                    merge order; ``evidence``: the summaries of the evidence the delivery was accepted with;
                    ``sandbox``: the weakest sandbox level any generation of the delivering worker ran at
    integration     seal({target, base, order: [task ids], steps: [{label, commit, parents: [2 oids], tree}],
                          unreviewed?: [oids of target commits without a receipt], targetRewritten?: true,
                          queue?: {position, below: [positions published before it by the same CAS]}})
    verification    seal([{commandId, argvDigest, exitCode, tests, outputDigest, tree, ...}]) -- evidence summaries
    reviews         seal([{reviewer, verdict, reportDigest, taskId?, sandbox?}]) -- ``sandbox``: the level the
                    reviewer ran at
    sandbox?        the weakest sandbox level (``namespace`` > ``landlock`` > ``none``, :mod:`..model.sandbox`) over
                    every delivery, every review and the coordinator, whose plan shaped the work; absent when one of
                    them has no level recorded. Not a seal: the signature covers it with the rest of the statement
    toolkitVersion  the toolkit that wrote the receipt
    createdAt       RFC 3339 UTC time the receipt was built

**Complete** (checked by :func:`completeness_problem`, ``RECEIPT_INCOMPLETE`` otherwise): task ids are unique;
exactly one task is the root (``parent`` null); every other task's parent is a listed task and its parent chain
reaches the root; every non-root task has status ``delivered`` (the root's own status is not judged: the
integration this receipt records is what completes it); every delivery names a distinct non-root task; every
non-root task without children of its own (a leaf) has a delivery, or a repair task (``repairs`` names it) whose
delivery -- which contains the conflicting one, resolved -- stands in for it.

**Merge chain** (checked by :func:`chain_problem`): ``order`` is the deliveries' task ids in their recorded
order; there is one step per delivery; step *i* has exactly two parents, the first being step *i-1*'s commit
(the ``base`` for the first step) and the second the source commit of delivery *i*. The last step is the
receipt's subject. A delivery is always merged as a two-parent merge commit, never fast-forwarded, so the
first-parent history of the target shows one commit per delivered task.

**Policy** (checked by :func:`policy_problem`, ``RECEIPT_POLICY_MISMATCH`` otherwise): ``baseConfigHash`` and
``transitions`` come together; the transitions form a chain from ``baseConfigHash`` to ``configHash`` (each starts
where the previous one ended, none is a no-op, no ``transitionId`` twice). The final verification ran under the
policy the receipt names: a verification entry's ``policyConfigHash`` is ``configHash``, and after a transition
every entry must say it. A delivery's evidence was proven under one of the run's policies (its base, a transition's
end, or the final one): a delivery proven before a transition is fine, one proven under a policy the run never had
is not. Receipts of runs whose policy never changed carry neither key, byte for byte as before.

**Sandbox** (checked by :func:`sandbox_problem` only when a verifier requires a level, ``RECEIPT_SANDBOX_WEAKER``
otherwise): the top-level ``sandbox`` and the ``sandbox`` of every delivery and review are recorded and none is
weaker than the required level. A receipt made before levels were recorded has none and meets no requirement.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final, NotRequired, TypedDict, cast

from ..canonical import JsonObject, JsonValue, digest
from ..canonical import seal as make_seal
from ..clock import iso8601
from ..model.delivery import DeliveryEntry, MergeStep, ReviewResult
from ..model.sandbox import weaker
from ..model.task import Task
from ..schema import documents
from .shape import (
    DeliveryDoc,
    EvidenceDoc,
    IntegrationDoc,
    PolicyDoc,
    PredicateDoc,
    ReviewDoc,
    SealDoc,
    StatementDoc,
    StepDoc,
    TaskDoc,
)

PREDICATE_TYPE: Final = "urn:git-agentops:receipt:v2"
"""What receipts are written as: version 2, serialised and sealed with RFC 8785 (JCS)."""
PREDICATE_TYPE_V1: Final = "urn:git-agentops:receipt:v1"
"""Version 1 (this toolkit's own canonical JSON): still verified, no longer written."""
PREDICATE_TYPES: Final = {PREDICATE_TYPE_V1: False, PREDICATE_TYPE: True}
"""The predicate types a verifier accepts, and whether each is JCS."""
STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE: Final = "application/vnd.in-toto+json"
SUBJECT_PREFIX: Final = "git:"

SEALED: Final = ("goal", "policy", "tasks", "deliveries", "integration", "verification", "reviews")
"""The predicate keys whose values are seals, in the order a verifier checks them."""
OPTIONAL_SEALED: Final = ("usage",)
"""Sealed keys a receipt may carry (receipts made before they existed do not): checked when present."""

_EVIDENCE_FIELDS: Final = (
    "commandId",
    "kind",
    "argvDigest",
    "exitCode",
    "passed",
    "required",
    "tests",
    "outputDigest",
    "tree",
    "commit",
    "taskId",
    "cached",
    "cachedFrom",
    "producer",
    "checkout",
    "policyConfigHash",
)
_TRANSITION_FIELDS: Final = ("transitionId", "from", "to", "approvedBy", "approver", "completedAt")


class IntegrationArg(TypedDict):
    """What :func:`build_predicate` is given as the integration: its steps as records or as their forms already."""

    target: str
    base: str
    order: Sequence[str]
    steps: Sequence[MergeStep | StepDoc]
    unreviewed: NotRequired[list[str]]
    targetRewritten: NotRequired[bool]
    queue: NotRequired[dict[str, object]]


def goal_hash(goal: str) -> str:
    """The goal hash a run records (``model.run.Run.goal_hash``): the digest of ``{"goal": goal}``."""
    return digest({"goal": goal})


def task_record(task: Task) -> TaskDoc:
    """The predicate's record of one task: identity, place in the tree and status (not its full contract); for a
    repair task, the task whose delivery its own stands in for (``repairs``)."""
    record: TaskDoc = {
        "id": task.id,
        "parent": task.parent,
        "status": str(task.status),
        "title": task.title,
        "revision": task.revision,
        "dependencies": sorted(task.dependencies),
    }
    if task.repair is not None:
        record["repairs"] = task.repair.task_id
    return record


def evidence_summary(record: Mapping[str, object]) -> dict[str, object]:
    """The predicate's summary of one evidence record (``schemas/evidence-record.schema.json``).

    Keeps what a verifier judges -- command, argv digest, exit code, test counts, output digest, tree, and whether
    the result was fresh or reused (``cached``, ``cachedFrom``) and who produced it where -- and drops the
    redacted output tail, timings and environment digest.
    """
    return {key: record[key] for key in _EVIDENCE_FIELDS if key in record}


def transition_record(transition: Mapping[str, JsonValue]) -> JsonObject:
    """The predicate's record of one policy transition: its fields, approvals and capability changes.

    Keeps the fields the schema names (an approval's ``classification`` from the request, say, is dropped) and
    writes ``completedAt`` as RFC 3339 when given as seconds since the epoch. A missing field is left missing, for
    the schema to refuse.
    """
    record: JsonObject = {key: transition[key] for key in _TRANSITION_FIELDS if key in transition}
    completed = record.get("completedAt")
    if isinstance(completed, int | float):
        record["completedAt"] = iso8601(completed)
    if "approvals" in transition:
        record["approvals"] = _cut(transition["approvals"], ("capabilityId", "reason"))
    if "capabilities" in transition:
        record["capabilities"] = _cut(transition["capabilities"], ("capabilityId", "change", "definitionDigest"))
    return record


def _cut(items: JsonValue, keys: tuple[str, ...]) -> JsonValue:
    """Each object of the array ``items`` cut to ``keys`` (anything else left as it is, for the schema to refuse)."""
    if not isinstance(items, Sequence) or isinstance(items, str):
        return items
    return [{k: item[k] for k in keys if k in item} if isinstance(item, Mapping) else item for item in items]


def policy_record(
    config_hash: str, toolkit_version: str, base_config_hash: str | None, transitions: Sequence[Mapping[str, JsonValue]]
) -> JsonObject:
    """The sealed ``policy`` value: ``configHash`` and ``toolkitVersion``, plus the base and transitions if any."""
    record: JsonObject = {"configHash": config_hash, "toolkitVersion": toolkit_version}
    if base_config_hash is not None and (transitions or base_config_hash != config_hash):
        record["baseConfigHash"] = base_config_hash
    if transitions:
        record["transitions"] = [transition_record(t) for t in transitions]
    return record


def build_predicate(
    *,
    run_id: str,
    goal: str,
    policy_config_hash: str,
    toolkit_version: str,
    tasks: Iterable[Mapping[str, object] | Task],
    contract_hash: str,
    deliveries: Sequence[DeliveryEntry | Mapping[str, object]],
    integration: IntegrationArg,
    verification: Sequence[Mapping[str, object]],
    reviews: Sequence[ReviewResult | Mapping[str, object]],
    created_at: float | str,
    usage: Mapping[str, object] | None = None,
    version: int = 2,
    base_config_hash: str | None = None,
    policy_transitions: Sequence[Mapping[str, JsonValue]] = (),
    sandbox: str | None = None,
) -> PredicateDoc:
    """The receipt predicate (layout in the module docstring), validated against its schema.

    ``tasks``, ``deliveries``, ``reviews`` and ``integration["steps"]`` may be the records (:class:`Task`,
    :class:`DeliveryEntry`, :class:`ReviewResult`, :class:`MergeStep`) or their forms in the predicate already;
    ``deliveries`` in merge order (``integration["order"]`` lists their task ids in the same order);
    ``created_at`` seconds since the epoch or an RFC 3339 UTC string; ``usage`` the tokens and dollars the agent
    hosts reported (``{"tokens", "costUsd", "generations": [...]}``), sealed when given.
    ``base_config_hash`` is the policy the run was started and trusted under and ``policy_transitions`` its
    journaled changes in order (see :func:`transition_record`); without transitions a base equal to
    ``policy_config_hash`` (or None) adds nothing, so the receipt is byte for byte what it was before transitions
    existed. ``sandbox`` is the top-level sandbox level (None: not recorded; the deliveries and reviews carry their
    own). The builder records; it does not judge completeness or the policy chain -- :mod:`.verify` does. Raises
    ``SCHEMA_INVALID`` for a value the schema refuses (a programming error in the caller) and
    ``CANONICAL_UNSUPPORTED`` for one with no canonical form.
    """
    task_records = [task_record(t) if isinstance(t, Task) else dict(t) for t in tasks]
    jcs = version >= 2

    def seal(value: object) -> SealDoc:  # any JSON value: its digest refuses anything else (CANONICAL_UNSUPPORTED)
        return cast(SealDoc, make_seal(value, jcs=jcs))

    predicate: PredicateDoc = {
        "runId": run_id,
        "goal": seal(goal),
        "goalHash": goal_hash(goal),
        "policy": seal(policy_record(policy_config_hash, toolkit_version, base_config_hash, policy_transitions)),
        "tasks": seal(task_records),
        "contractHash": contract_hash,
        "deliveries": seal([_form(d) for d in deliveries]),
        "integration": seal(
            {
                "target": integration["target"],
                "base": integration["base"],
                "order": list(integration["order"]),
                "steps": [_step(s) for s in integration["steps"]],
                **_marks(integration),
            }
        ),
        "verification": seal([dict(v) for v in verification]),
        "reviews": seal([_form(r) for r in reviews]),
        "toolkitVersion": toolkit_version,
        "createdAt": iso8601(created_at) if isinstance(created_at, int | float) else created_at,
    }
    if usage is not None:
        predicate["usage"] = seal(dict(usage))
    if sandbox is not None:
        predicate["sandbox"] = sandbox
    documents.validate(predicate, "receipt-predicate", what="receipt predicate")
    return predicate


def _marks(integration: IntegrationArg) -> JsonObject:
    """The integration's optional keys, each only when set (``unreviewed`` non-empty, ``targetRewritten`` true,
    ``queue`` for a run the merge queue published)."""
    marks: JsonObject = {}
    if integration.get("unreviewed"):
        marks["unreviewed"] = integration["unreviewed"]
    if integration.get("targetRewritten"):
        marks["targetRewritten"] = integration["targetRewritten"]
    if "queue" in integration:
        marks["queue"] = cast(JsonObject, integration["queue"])
    return marks


def _form(item: DeliveryEntry | ReviewResult | Mapping[str, object]) -> Mapping[str, object]:
    """A record's predicate form, or a form given already."""
    return item.to_json() if isinstance(item, DeliveryEntry | ReviewResult) else dict(item)


def _step(step: MergeStep | Mapping[str, object]) -> Mapping[str, object]:
    """A merge step's predicate form (a given form is cut to the step's keys)."""
    record = step if isinstance(step, MergeStep) else MergeStep.from_json(step)
    return record.to_json()


def build_statement(
    *, commit: str, tree: str, subject_name: str, predicate: PredicateDoc, version: int = 2
) -> StatementDoc:
    """The in-toto Statement binding ``predicate`` to ``commit`` and its ``tree``.

    ``subject_name`` is the target branch (``main``) or ``integration``; the subject is named ``git:<that>``.
    Raises ``SCHEMA_INVALID`` when the result is not a valid receipt statement.
    """
    statement: StatementDoc = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": SUBJECT_PREFIX + subject_name, "digest": {"gitCommit": commit, "gitTree": tree}}],
        "predicateType": PREDICATE_TYPE if version >= 2 else PREDICATE_TYPE_V1,
        "predicate": predicate.copy(),
    }
    documents.validate(statement, "in-toto-statement", what="receipt statement")
    return statement


def completeness_problem(tasks: Sequence[TaskDoc], deliveries: Sequence[DeliveryDoc]) -> str | None:
    """Why the task tree and deliveries are not complete (the rule in the module docstring), or None."""
    by_id: dict[str, TaskDoc] = {}
    for task in tasks:
        if task["id"] in by_id:
            return f"task {task['id']} is listed twice"
        by_id[task["id"]] = task
    roots = [t["id"] for t in tasks if t["parent"] is None]
    if len(roots) != 1:
        return f"the task tree has {len(roots)} root tasks, not exactly one"
    root = roots[0]
    for task in tasks:
        seen = {task["id"]}
        parent = task["parent"]
        while parent is not None:
            if parent not in by_id:
                return f"task {task['id']} has parent {parent}, which is not in the receipt"
            if parent in seen:
                return f"task {task['id']} is on a parent cycle"
            seen.add(parent)
            parent = by_id[parent]["parent"]
    for task in tasks:
        if task["id"] != root and task["status"] != "delivered":
            return f"task {task['id']} is {task['status']}, not delivered"
    delivered: set[str] = set()
    for delivery in deliveries:
        task_id = delivery["taskId"]
        if task_id not in by_id:
            return f"delivery of {task_id} names a task that is not in the receipt"
        if task_id == root:
            return f"delivery of {task_id} names the root task; only child tasks are delivered"
        if task_id in delivered:
            return f"task {task_id} is delivered twice"
        delivered.add(task_id)
    parents = {t["parent"] for t in tasks}
    repaired = {t["repairs"]: t["id"] for t in tasks if "repairs" in t}
    for task in tasks:
        if task["id"] != root and task["id"] not in parents and not _delivered(task["id"], delivered, repaired):
            return f"task {task['id']} is marked delivered but has no delivery in the receipt"
    return None


def _delivered(task_id: str, delivered: set[str], repaired: Mapping[str, str]) -> bool:
    """Whether ``task_id``'s delivery is in the receipt, itself or through the repair tasks standing in for it."""
    seen = {task_id}
    while task_id not in delivered:
        task_id = repaired.get(task_id, task_id)
        if task_id in seen:
            return False
        seen.add(task_id)
    return True


def chain_problem(integration: IntegrationDoc, deliveries: Sequence[DeliveryDoc]) -> str | None:
    """Why the recorded merge chain is not consistent with the deliveries (module docstring), or None."""
    order = list(integration["order"])
    delivered = [d["taskId"] for d in deliveries]
    if order != delivered:
        return "the merge order is not the deliveries' task ids in their recorded order"
    steps = integration["steps"]
    if len(steps) != len(deliveries):
        return f"{len(steps)} merge steps for {len(deliveries)} deliveries"
    previous = integration["base"]
    for index, (step, delivery) in enumerate(zip(steps, deliveries, strict=True)):
        first, second = step["parents"]
        if first != previous:
            what = "the base" if index == 0 else f"step {index - 1}'s commit"
            return f"merge step {index} ({step['label']}) has first parent {first[:12]}, not {what} {previous[:12]}"
        if second != delivery["sourceCommit"]:
            return (
                f"merge step {index} ({step['label']}) merges {second[:12]}, not the source commit "
                f"{delivery['sourceCommit'][:12]} of {delivery['taskId']}"
            )
        previous = step["commit"]
    return None


def policy_problem(
    policy: PolicyDoc, verification: Sequence[EvidenceDoc], deliveries: Sequence[DeliveryDoc]
) -> str | None:
    """Why the policy record, its transitions and the evidence's policy hashes disagree (module docstring), or None."""
    final = policy["configHash"]
    base = policy.get("baseConfigHash")
    transitions = list(policy.get("transitions") or ())
    if base is not None and not transitions:
        return f"policy.baseConfigHash {base[:12]} is recorded without any transition to configHash {final[:12]}"
    if transitions and base is None:
        return f"policy records {len(transitions)} transition(s) but no baseConfigHash they start from"
    hashes = {final}
    if base is not None:
        hashes.add(base)
        previous, where = base, "policy.baseConfigHash"
        seen: set[str] = set()
        for index, transition in enumerate(transitions):
            label = f"policy transition {index} ({transition['transitionId']})"
            if transition["transitionId"] in seen:
                return f"{label} is listed twice"
            seen.add(transition["transitionId"])
            start, end = transition["from"], transition["to"]
            if start == end:
                return f"{label} goes from {start[:12]} to itself"
            if start != previous:
                return f"{label} starts from {start[:12]}, not {where} {previous[:12]}"
            hashes |= {start, end}
            previous, where = end, f"the end of transition {index}"
        if previous != final:
            return f"the last policy transition ends at {previous[:12]}, not policy.configHash {final[:12]}"
    for index, record in enumerate(verification):
        label = f"verification entry {index} ({record['commandId']})"
        used = record.get("policyConfigHash")
        if used is None:
            if transitions:
                return f"{label} does not say which policy it ran under, and the run's policy changed"
        elif used != final:
            return f"{label} ran under policy {used[:12]}, not the receipt's policy.configHash {final[:12]}"
    known = ", ".join(sorted(h[:12] for h in hashes))
    for delivery in deliveries:
        for index, record in enumerate(delivery.get("evidence") or ()):
            used = record.get("policyConfigHash")
            if used is not None and used not in hashes:
                return (
                    f"the delivery of {delivery['taskId']} has evidence {index} ({record['commandId']}) proven under "
                    f"policy {used[:12]}, which the run never had ({known})"
                )
    return None


def sandbox_problem(
    sandbox: str | None, deliveries: Sequence[DeliveryDoc], reviews: Sequence[ReviewDoc], required: str
) -> str | None:
    """Why the receipt does not show every agent ran at ``required`` or stronger (module docstring), or None."""
    agents = [("its agents taken together (the coordinator included)", sandbox)]
    agents += [(f"worker {d['workerId']} (delivery of {d['taskId']})", d.get("sandbox")) for d in deliveries]
    agents += [(f"reviewer {r['reviewer']}", r.get("sandbox")) for r in reviews if ":" not in r["reviewer"]]
    if all(level is None for _, level in agents):
        return f"sandbox level {required} is required, but the receipt records no level (made before levels were)"
    found = [f"{who} ran at {level}" for who, level in agents if level is not None and weaker(level, required)]
    found += [f"{who} has no level recorded" for who, level in agents if level is None]
    if not found:
        return None
    shown = "; ".join(found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else "")
    return f"sandbox level {required} is required, but {shown}"
