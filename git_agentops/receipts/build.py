"""The receipt of one integration: its statement built from the run's record, signed with the configured keys.

The integration pipeline calls :func:`integration_receipt` once the target has moved; storing the bytes as a
note on the integrated commit is the store's job. :func:`signing_keys` reads the key configuration the way git
reads its own commit-signing configuration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .. import __version__
from ..canonical import JsonValue
from ..errors import AgentOpsError
from ..model.delivery import DeliveryEntry
from ..model.sandbox import weakest_of_all
from ..model.task import delivered
from . import make_receipt
from .statement import IntegrationArg, build_predicate, build_statement, evidence_summary

if TYPE_CHECKING:  # pygit2 (through the store) stays out of the receipts package's imports
    from ..gitstore.repo import Store
    from ..model.integration import Integration
    from ..model.run import Run, Worker
    from ..model.task import Task
    from ..model.usage import ReviewerUsage


def signing_keys(store: Store) -> list[Path]:
    """``agentops.signingKey``, else ``user.signingKey`` when ``gpg.format`` is ssh (as git signs commits).

    A ``key::<public key>`` literal (git's form) is written to the private dir so ``ssh-keygen`` can name it.
    """
    key = store.config_value("agentops.signingKey")
    if key is None and (store.config_value("gpg.format") or "").lower() == "ssh":
        key = store.config_value("user.signingKey")
    if not key:
        return []
    if key.startswith("key::"):
        literal = store.private_dir() / "signing-key.pub"
        literal.parent.mkdir(parents=True, exist_ok=True)
        literal.write_text(key[len("key::") :] + "\n")
        return [literal]
    return [Path(key).expanduser()]


def deliveries_of(
    integration: Integration,
    tasks: Mapping[str, Task],
    evidence: Mapping[str, Sequence[Mapping[str, object]]] | None = None,
    sandboxes: Mapping[str, str | None] | None = None,
) -> list[dict[str, object]]:
    """The JSON form of :func:`delivery_entries`: the predicate's ``deliveries``."""
    return [entry.to_json() for entry in delivery_entries(integration, tasks, evidence, sandboxes)]


def delivery_entries(
    integration: Integration,
    tasks: Mapping[str, Task],
    evidence: Mapping[str, Sequence[Mapping[str, object]]] | None = None,
    sandboxes: Mapping[str, str | None] | None = None,
) -> list[DeliveryEntry]:
    """The receipt's delivery entries, in merge order, from each task's recorded delivery.

    ``evidence`` (task id -> the evidence of that task's delivery) adds ``evidence``, as summaries, to the entries
    of the tasks it names; ``sandboxes`` (worker id -> the weakest level it ran at, ``Worker.sandbox``) adds
    ``sandbox`` to the entries of the workers with a level recorded.
    """
    entries = []
    for task_id in integration.order or ():
        delivery = delivered(tasks[task_id])
        summaries = evidence.get(task_id) if evidence is not None else None
        entries.append(
            DeliveryEntry(
                task_id,
                delivery,
                tuple(evidence_summary(record) for record in summaries) if summaries is not None else None,
                (sandboxes or {}).get(delivery.worker_id),
            )
        )
    return entries


def integration_receipt(
    run: Run,
    tasks: Mapping[str, Task],
    *,
    policy_config_hash: str,
    created_at: float,
    keys: Sequence[Path],
    usage: Mapping[str, object] | None = None,
    base_config_hash: str | None = None,
    policy_transitions: Sequence[Mapping[str, JsonValue]] = (),
    delivery_evidence: Mapping[str, Sequence[Mapping[str, object]]] | None = None,
    workers: Sequence[Worker] = (),
) -> bytes:
    """The signed receipt of ``run``'s published integration (``RECEIPT_SIGNING_FAILED``).

    ``base_config_hash`` and ``policy_transitions``: the policy the run started under and its journaled changes
    (:func:`.statement.build_predicate`); ``delivery_evidence``: per task id, the evidence its delivery was
    accepted with (:func:`deliveries_of`); ``workers``: the run's worker records, whose sandbox levels the
    deliveries and the top-level ``sandbox`` record (the weakest over deliveries, reviews and the coordinator;
    none when one of them has no level).
    """
    integration = run.integration
    if integration is None or integration.candidate is None or not integration.steps or integration.base is None:
        raise AgentOpsError("RECEIPT_MALFORMED", f"run {run.run_id} has no built integration to receipt")
    sandboxes = {worker.worker_id: worker.sandbox for worker in workers}
    deliveries = delivery_entries(integration, tasks, delivery_evidence, sandboxes)
    reviews = integration.reviews or ()
    agents = [*(d.sandbox for d in deliveries), *(r.sandbox for r in reviews)]
    given = IntegrationArg(
        target=run.target, base=integration.base, order=list(integration.order or ()), steps=integration.steps
    )
    if integration.unreviewed:
        given["unreviewed"] = list(integration.unreviewed)
    if integration.target_rewritten:
        given["targetRewritten"] = True
    if integration.queue_position is not None:
        given["queue"] = {"position": integration.queue_position, "below": list(integration.queue_below or ())}
        if integration.queue_retried:
            given["queue"]["retried"] = True
    predicate = build_predicate(
        run_id=run.run_id,
        goal=run.goal,
        policy_config_hash=policy_config_hash,
        toolkit_version=__version__,
        tasks=list(tasks.values()),
        contract_hash=run.contract_hash,
        deliveries=deliveries,
        integration=given,
        verification=[dict(v) for v in integration.verification or ()],
        reviews=reviews,
        created_at=created_at,
        usage=usage,
        base_config_hash=base_config_hash,
        policy_transitions=policy_transitions,
        sandbox=weakest_of_all([*agents, sandboxes.get(run.coordinator_id)]) if workers else None,
    )
    tree = integration.steps[-1].tree
    statement = build_statement(commit=integration.candidate, tree=tree, subject_name=run.target, predicate=predicate)
    return make_receipt(statement, keys=keys)


def usage_record(workers: Sequence[Worker], reviews: Sequence[ReviewerUsage] = ()) -> dict[str, object]:
    """The receipt's ``usage`` section: what every generation of every worker and every reviewer attempt (as
    ``reviewer-<name>``) reported, and the totals."""
    from ..model.usage import Accounted, Reviews, total_usage, usage_partial

    accounts: list[Accounted] = [*workers, Reviews(tuple(reviews))]
    tokens, cost = total_usage(accounts)
    spent = [(worker.worker_id, usage) for worker in workers for usage in worker.usage]
    spent += [(f"reviewer-{entry.reviewer}"[:64], entry.usage) for entry in reviews]
    generations = [
        {"workerId": who, **{k: v for k, v in usage.to_json().items() if k != "session"}} for who, usage in spent
    ]
    record: dict[str, object] = {
        "tokens": tokens,
        "costUsd": round(cost, 6) if cost is not None else None,
        "generations": generations,
    }
    if usage_partial(accounts):  # some generation's figures are a floor: say so, sealed with the rest
        record["partial"] = True
    return record
