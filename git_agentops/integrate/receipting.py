"""Receipts of integrations: the sealed, signed note on a published candidate (:mod:`git_agentops.receipts.build`).

Step 5 of an integration (:mod:`.pipeline`) adds it after the target moved; on a remote target it is added before
the push, which carries it, so the server's ``pre-receive`` finds it among the incoming refs -- and the merge queue's
processor adds it for every run whose candidate it publishes to a remote in one push. It is added once: whoever
finds the note there already (a crash after the note, before the record; the queue's processor before the run)
takes it as it is.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..canonical import JsonObject, sha256_hex
from ..errors import NoteExists
from ..gitstore.notes import RECEIPTS_REF, Notes
from ..gitstore.repo import Store
from ..model.integration import Integration
from ..model.task import Task, delivered
from ..runs import state as runstate
from ..transition import journal as transitions
from ..verify.evidence import EvidenceStore


def add_receipt(store: Store, run_id: str, policy_hash: str, now: float, integration: Integration | None = None) -> str:
    """The receipt note on the run's candidate, added once (a crash after the note, before the record, finds it
    there); returns its digest. ``integration``: the published integration to receipt when the run's record does
    not hold it yet -- the merge queue's processor receipts the runs it publishes to a remote before the push, with
    the fields each run then records (:meth:`git_agentops.mergequeue.record.Entry.published`)."""
    from ..receipts.build import integration_receipt, signing_keys, usage_record  # lazily: a supervisor starts lighter

    view = runstate.read(store, run_id)
    run = view.run()
    if integration is not None:
        run = replace(run, integration=integration)
    assert run.integration is not None and run.integration.candidate is not None
    candidate = run.integration.candidate
    notes = Notes(store, RECEIPTS_REF)
    existing = notes.read(candidate)
    if existing is not None:
        return sha256_hex(existing)
    tasks = view.tasks()
    binding = transitions.binding(store, run_id)
    workers = view.workers()
    data = integration_receipt(
        run,
        tasks,
        policy_config_hash=policy_hash,
        created_at=now,
        keys=signing_keys(store),
        usage=usage_record(workers, run.review_usage),
        base_config_hash=binding.get("baseConfigHash"),
        policy_transitions=[receipt_transition(t) for t in binding.get("transitions", ())],
        delivery_evidence={task_id: evidence_of(store, tasks[task_id]) for task_id in run.integration.order or ()},
        workers=workers,
    )
    try:
        notes.add(candidate, data, message=f"Receipt of run {run.run_id}")
    except NoteExists:
        pass
    return sha256_hex(data)


def receipt_transition(bound: dict[str, Any]) -> dict[str, Any]:
    """A transition as the binding records it -> as the receipt does (:func:`~git_agentops.receipts.statement.
    transition_record`)."""
    approved = bound["approvedBy"]
    return {
        "transitionId": bound["transitionId"],
        "from": bound["from"],
        "to": bound["to"],
        "approvedBy": approved["by"],
        "approver": approved["name"],
        "approvals": [{"capabilityId": a["capabilityId"], "reason": a["reason"]} for a in bound["approvals"]],
        "capabilities": [
            {"capabilityId": c["capabilityId"], "change": c["change"], "definitionDigest": c["definitionDigest"]}
            for c in bound["changes"]
        ],
        "completedAt": bound["boundAt"],
    }


def evidence_of(store: Store, task: Task) -> list[JsonObject]:
    """The evidence records a task's delivery names, as the evidence store holds them (authentic only), in their
    JSON form (what the receipt summarises)."""
    delivery = delivered(task)
    wanted = list(delivery.evidence)
    records = {r.digest: r for r in EvidenceStore(store, store.private_dir()).authentic_for_commit(delivery.commit)}
    return [records[d].to_json() for d in wanted if d in records]
