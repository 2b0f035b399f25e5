"""Receipts record the run's policy transitions, and the verifier checks the chain they form.

Hermetic: predicates and statements are built in memory over made-up object ids (the merge chain is only checked
against the ids the test hands the verifier), so no repository is needed -- except for the one signed case, which
uses the real ``ssh-keygen``. Each test names the invariant it checks; every refusal is checked by its code.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from git_agentops.canonical import canonical_bytes, seal
from git_agentops.clock import iso8601
from git_agentops.errors import CODES, EXIT_NEGATIVE, AgentOpsError
from git_agentops.model.delivery import CommitId, Delivery, Digest, MergeStep
from git_agentops.model.integration import Integration, IntegrationStatus
from git_agentops.model.task import Task, TaskStatus
from git_agentops.receipts import Verdict, build_predicate, build_statement, make_receipt, verify_receipt
from git_agentops.receipts.build import deliveries_of, integration_receipt

from ..helpers import allowed_signer, ssh_key

ROOT = "task-00000000-0000-4000-8000-000000000000"
T1 = "task-11111111-1111-4111-8111-111111111111"
T2 = "task-22222222-2222-4222-8222-222222222222"
BASE, D1, D2, M1, M2 = ("1" * 40, "2" * 40, "3" * 40, "4" * 40, "5" * 40)
TREE1, TREE2 = "6" * 40, "7" * 40
SHA_A, SHA_B = "a" * 64, "b" * 64


def _hash(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


P0, P1, P2 = _hash("policy 0"), _hash("policy 1"), _hash("policy 2")  # the run's policies, in the order it had them
STRANGER = _hash("a policy the run never had")
CREATED = 1_767_225_600.0


def _transition(number: int, start: str, end: str, **changes: Any) -> dict[str, Any]:
    transition: dict[str, Any] = {
        "transitionId": f"policy-{number:016x}",
        "from": start,
        "to": end,
        "approvedBy": "user",
        "approver": "Ada <ada@example.com>",
        "approvals": [{"capabilityId": "command:lint", "reason": "read-only linter"}],
        "capabilities": [{"capabilityId": "command:lint", "change": "added", "definitionDigest": SHA_A}],
        "completedAt": CREATED - 600 + number,
    }
    transition.update(changes)
    return transition


TWO = [
    _transition(1, P0, P1),
    _transition(2, P1, P2, approvedBy="coordinator", approver="coordinator generation 2", approvals=[]),
]


def _evidence(policy: str | None, command: str = "tests") -> dict[str, Any]:
    record: dict[str, Any] = {
        "commandId": command,
        "kind": "command",
        "argvDigest": SHA_A,
        "exitCode": 0,
        "passed": True,
        "tests": None,
        "outputDigest": SHA_B,
        "tree": TREE2,
    }
    if policy is not None:
        record["policyConfigHash"] = policy
    return record


def _delivery(task: str, source: str, evidence: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    delivery: dict[str, Any] = {
        "taskId": task,
        "workerId": "worker-1",
        "generation": 1,
        "sourceCommit": source,
        "deliveryDigest": SHA_A,
    }
    if evidence is not None:
        delivery["evidence"] = [dict(e) for e in evidence]
    return delivery


def _predicate(
    *,
    config: str = P2,
    verification: Sequence[Mapping[str, Any]] | None = None,
    deliveries: Sequence[Mapping[str, Any]] | None = None,
    **policy: Any,
) -> dict[str, Any]:
    """A complete predicate of two deliveries merged onto BASE; ``policy``: the new keyword arguments, if any."""
    return build_predicate(
        run_id="run-1",
        goal="make it better",
        policy_config_hash=config,
        toolkit_version="0.1.0",
        tasks=[
            {"id": ROOT, "parent": None, "status": "running"},
            {"id": T1, "parent": ROOT, "status": "delivered"},
            {"id": T2, "parent": ROOT, "status": "delivered"},
        ],
        contract_hash=SHA_B,
        deliveries=deliveries if deliveries is not None else [_delivery(T1, D1), _delivery(T2, D2)],
        integration={
            "target": "main",
            "base": BASE,
            "order": [T1, T2],
            "steps": [
                {"label": "merge task 1", "commit": M1, "parents": [BASE, D1], "tree": TREE1},
                {"label": "merge task 2", "commit": M2, "parents": [M1, D2], "tree": TREE2},
            ],
        },
        verification=verification if verification is not None else [_evidence(config)],
        reviews=[],
        created_at=CREATED,
        **policy,
    )


def _verify(data: bytes, *, allowed: Path | None = None, require_sandbox: str | None = None) -> Verdict:
    return verify_receipt(
        data,
        commit=M2,
        tree=TREE2,
        parents=[M1, D2],
        first_parent_chain=lambda commit, base: [M2, M1],
        allowed_signers=allowed,
        require_signature=allowed is not None,
        when=None,
        require_sandbox=require_sandbox,
    )


def _receipt(predicate: Mapping[str, Any], *, keys: Sequence[Path] = ()) -> bytes:
    return make_receipt(build_statement(commit=M2, tree=TREE2, subject_name="main", predicate=predicate), keys=keys)


def _judge(predicate: Mapping[str, Any]) -> Verdict:
    return _verify(_receipt(predicate))


def _refused(verdict: Verdict, *shown: str) -> None:
    assert not verdict.ok, verdict.message
    assert verdict.code == "RECEIPT_POLICY_MISMATCH", verdict.message
    for text in shown:
        assert text in verdict.message, (text, verdict.message)


def _payload(data: bytes) -> dict[str, Any]:
    statement: dict[str, Any] = json.loads(base64.b64decode(json.loads(data)["payload"]))
    return statement


# -- recording ----------------------------------------------------------------------------------------------------


def test_receipts_without_transitions_keep_their_bytes_and_verify() -> None:
    before = _predicate(config=P0)
    assert set(before["policy"]["value"]) == {"configHash", "toolkitVersion"}
    assert before["policy"] == seal({"configHash": P0, "toolkitVersion": "0.1.0"}, jcs=True)
    for same in (
        _predicate(config=P0, base_config_hash=None, policy_transitions=()),
        _predicate(config=P0, base_config_hash=P0),  # started and ended under P0: nothing to record
    ):
        assert canonical_bytes(same) == canonical_bytes(before)
    verdict = _judge(before)
    assert verdict.ok, verdict.message


def test_a_chain_of_two_transitions_is_recorded_in_order_and_verifies() -> None:
    predicate = _predicate(base_config_hash=P0, policy_transitions=TWO)
    policy = predicate["policy"]["value"]
    assert policy["configHash"] == P2
    assert policy["baseConfigHash"] == P0
    assert [(t["transitionId"], t["from"], t["to"]) for t in policy["transitions"]] == [
        ("policy-0000000000000001", P0, P1),
        ("policy-0000000000000002", P1, P2),
    ]
    assert policy["transitions"][1]["approvedBy"] == "coordinator"
    verdict = _judge(predicate)
    assert verdict.ok, verdict.message


def test_completed_at_is_rfc3339_whether_given_as_seconds_or_text_and_only_schema_fields_are_kept() -> None:
    seconds = _transition(1, P0, P2, completedAt=CREATED)
    seconds["approvals"] = [{"capabilityId": "runner:acceptance", "classification": "non-dangerous", "reason": "ok"}]
    text = {**seconds, "completedAt": iso8601(CREATED)}
    from_seconds = _predicate(base_config_hash=P0, policy_transitions=[seconds])
    from_text = _predicate(base_config_hash=P0, policy_transitions=[text])
    assert canonical_bytes(from_seconds) == canonical_bytes(from_text)
    (recorded,) = from_seconds["policy"]["value"]["transitions"]
    assert recorded["completedAt"] == "2026-01-01T00:00:00.000Z"
    assert recorded["approvals"] == [{"capabilityId": "runner:acceptance", "reason": "ok"}]


@pytest.mark.parametrize(
    "changes",
    [
        {"approvals": [{"capabilityId": "network:anywhere", "reason": "x"}]},
        {"approvals": [{"capabilityId": "command:Lint", "reason": "x"}]},
        {"capabilities": [{"capabilityId": "shell:rm", "change": "added", "definitionDigest": SHA_A}]},
        {"approvals": [{"capabilityId": "command:lint", "reason": ""}]},
        {"approvedBy": "agent"},
        {"approver": ""},
        {"approver": "x" * 257},
        {"transitionId": "policy-xyz"},
        {"capabilities": [{"capabilityId": "host:claude", "change": "removed", "definitionDigest": SHA_A}]},
        {"completedAt": "yesterday"},
        {"from": "not a hash"},
    ],
    ids=[
        "unknown-capability-kind",
        "capability-id-case",
        "capability-change-kind",
        "empty-reason",
        "approved-by-agent",
        "empty-approver",
        "long-approver",
        "transition-id",
        "change-removed",
        "completed-at",
        "from-hash",
    ],
)
def test_the_schema_refuses_a_malformed_transition(changes: dict[str, Any]) -> None:
    with pytest.raises(AgentOpsError) as refused:
        _predicate(base_config_hash=P0, policy_transitions=[_transition(1, P0, P2, **changes)])
    assert refused.value.code == "SCHEMA_INVALID"


def test_the_schema_refuses_a_transition_missing_a_field() -> None:
    transition = _transition(1, P0, P2)
    del transition["capabilities"]
    with pytest.raises(AgentOpsError) as refused:
        _predicate(base_config_hash=P0, policy_transitions=[transition])
    assert refused.value.code == "SCHEMA_INVALID"


def test_the_schema_caps_transitions_at_64() -> None:
    hashes = [P0, *(_hash(f"step {n}") for n in range(64)), P2]
    chain = [_transition(n, hashes[n], hashes[n + 1]) for n in range(65)]
    with pytest.raises(AgentOpsError) as refused:
        _predicate(base_config_hash=P0, policy_transitions=chain)
    assert refused.value.code == "SCHEMA_INVALID"
    assert _judge(_predicate(config=hashes[64], base_config_hash=P0, policy_transitions=chain[:64])).ok


def test_the_policy_mismatch_code_is_registered_as_a_negative_answer() -> None:
    assert CODES["RECEIPT_POLICY_MISMATCH"].exit_status == EXIT_NEGATIVE == CODES["RECEIPT_INCOMPLETE"].exit_status


# -- the chain ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "transitions", "shown"),
    [
        (STRANGER, TWO, ("transition 0", P0[:12], STRANGER[:12])),
        (P0, [TWO[0], _transition(2, STRANGER, P2)], ("transition 1", STRANGER[:12], P1[:12])),
        (P0, [TWO[0]], ("last", P1[:12], P2[:12])),
        (P0, [TWO[0], _transition(1, P1, P2)], ("transition 1", "policy-0000000000000001", "twice")),
        (P0, [TWO[0], _transition(2, P1, P1), TWO[1]], ("transition 1", P1[:12], "itself")),
        (P0, [], ("baseConfigHash", P0[:12], "without any transition")),
        (None, TWO, ("2 transition(s)", "no baseConfigHash")),
    ],
    ids=[
        "first-not-from-base",
        "gap-between-transitions",
        "last-not-config-hash",
        "transition-id-twice",
        "no-op-transition",
        "base-without-transitions",
        "transitions-without-base",
    ],
)
def test_transitions_must_chain_from_the_base_to_the_config_hash(
    base: str | None, transitions: list[dict[str, Any]], shown: tuple[str, ...]
) -> None:
    _refused(_judge(_predicate(base_config_hash=base, policy_transitions=transitions)), *shown)


def test_the_transitions_are_sealed_with_the_policy() -> None:
    statement = build_statement(
        commit=M2, tree=TREE2, subject_name="main", predicate=_predicate(base_config_hash=P0, policy_transitions=TWO)
    )
    statement["predicate"]["policy"]["value"]["transitions"][0]["approver"] = "Mallory <m@example.com>"
    verdict = _verify(make_receipt(statement))
    assert verdict.code == "RECEIPT_SEAL_INVALID", verdict.message


# -- the final verification ran under the policy the receipt names ------------------------------------------------


def test_a_verification_entry_under_another_policy_is_refused() -> None:
    verification = [_evidence(P2, "lint"), _evidence(P1, "tests")]
    predicate = _predicate(base_config_hash=P0, policy_transitions=TWO, verification=verification)
    _refused(_judge(predicate), "verification entry 1 (tests)", P1[:12], P2[:12])
    # without transitions too: the one policy the receipt names is the one verification must have run under
    _refused(_judge(_predicate(config=P0, verification=[_evidence(STRANGER)])), "entry 0", STRANGER[:12], P0[:12])


def test_after_a_transition_every_verification_entry_must_name_its_policy() -> None:
    verification = [_evidence(P2, "lint"), _evidence(None, "tests")]
    predicate = _predicate(base_config_hash=P0, policy_transitions=TWO, verification=verification)
    _refused(_judge(predicate), "verification entry 1 (tests)", "does not say")


def test_without_transitions_a_verification_entry_may_omit_its_policy() -> None:
    verdict = _judge(_predicate(config=P0, verification=[_evidence(None)]))  # receipts from before the field
    assert verdict.ok, verdict.message


# -- deliveries were proven under one of the run's policies --------------------------------------------------------


@pytest.mark.parametrize("policy", [P0, P1, P2, None], ids=["base", "between", "final", "unnamed"])
def test_delivery_evidence_under_any_policy_of_the_run_is_accepted(policy: str | None) -> None:
    deliveries = [_delivery(T1, D1, [_evidence(policy)]), _delivery(T2, D2, [_evidence(P2)])]
    predicate = _predicate(base_config_hash=P0, policy_transitions=TWO, deliveries=deliveries)
    assert predicate["deliveries"]["value"][0]["evidence"] == [_evidence(policy)]
    verdict = _judge(predicate)
    assert verdict.ok, verdict.message


def test_delivery_evidence_under_a_policy_the_run_never_had_is_refused() -> None:
    deliveries = [_delivery(T1, D1, [_evidence(P0)]), _delivery(T2, D2, [_evidence(P2), _evidence(STRANGER, "lint")])]
    predicate = _predicate(base_config_hash=P0, policy_transitions=TWO, deliveries=deliveries)
    _refused(_judge(predicate), f"delivery of {T2}", "evidence 1 (lint)", STRANGER[:12], P0[:12], P1[:12], P2[:12])
    # a run that never changed policy had exactly one
    deliveries = [_delivery(T1, D1, [_evidence(P1)]), _delivery(T2, D2)]
    _refused(_judge(_predicate(config=P0, deliveries=deliveries)), f"delivery of {T1}", P1[:12])


def test_the_schema_caps_delivery_evidence_at_256() -> None:
    with pytest.raises(AgentOpsError) as refused:
        _predicate(deliveries=[_delivery(T1, D1, [_evidence(P2)] * 257), _delivery(T2, D2)])
    assert refused.value.code == "SCHEMA_INVALID"


# -- the integration pipeline's builder passes it all through -----------------------------------------------------


def _tasks() -> dict[str, Task]:
    def task(task_id: str, parent: str | None, status: TaskStatus, source: str | None) -> Task:
        delivery = Delivery(CommitId(source), Digest(SHA_A), "worker-1", 1) if source else None
        return Task(task_id, "t", "i", "g", (), parent=parent, status=status, delivery=delivery)

    return {
        ROOT: task(ROOT, None, TaskStatus.RUNNING, None),
        T1: task(T1, ROOT, TaskStatus.DELIVERED, D1),
        T2: task(T2, ROOT, TaskStatus.DELIVERED, D2),
    }


def _integration() -> Integration:
    return Integration(
        IntegrationStatus.PUBLISHED,
        base=BASE,
        candidate=M2,
        order=(T1, T2),
        steps=(
            MergeStep.from_json({"label": "merge task 1", "commit": M1, "parents": [BASE, D1], "tree": TREE1}),
            MergeStep.from_json({"label": "merge task 2", "commit": M2, "parents": [M1, D2], "tree": TREE2}),
        ),
        verification=(_evidence(P2),),
        reviews=(),
    )


def test_deliveries_of_adds_evidence_summaries_only_to_the_tasks_named() -> None:
    full = {**_evidence(P0), "tail": "3 passed", "envDigest": SHA_B}  # a whole evidence record
    entries = deliveries_of(_integration(), _tasks(), {T1: [full]})
    assert entries[0]["evidence"] == [_evidence(P0)]
    assert "evidence" not in entries[1]
    assert all("evidence" not in entry for entry in deliveries_of(_integration(), _tasks()))


def test_integration_receipt_records_transitions_and_delivery_evidence() -> None:
    run: Any = SimpleNamespace(
        run_id="run-1", goal="make it better", target="main", contract_hash=SHA_B, integration=_integration()
    )
    data = integration_receipt(
        run,
        _tasks(),
        policy_config_hash=P2,
        created_at=CREATED,
        keys=[],
        base_config_hash=P0,
        policy_transitions=TWO,
        delivery_evidence={T1: [_evidence(P0)], T2: [_evidence(P2)]},
    )
    predicate = _payload(data)["predicate"]
    assert predicate["policy"]["value"]["baseConfigHash"] == P0
    assert len(predicate["policy"]["value"]["transitions"]) == 2
    assert [d["evidence"][0]["policyConfigHash"] for d in predicate["deliveries"]["value"]] == [P0, P2]
    verdict = _verify(data)
    assert verdict.ok, verdict.message
    plain = integration_receipt(run, _tasks(), policy_config_hash=P2, created_at=CREATED, keys=[])
    assert set(_payload(plain)["predicate"]["policy"]["value"]) == {"configHash", "toolkitVersion"}


# -- signed -------------------------------------------------------------------------------------------------------


def test_a_signature_does_not_excuse_a_broken_policy_chain(tmp_path: Path) -> None:
    key = ssh_key(tmp_path / "key")
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(allowed_signer("alice", key))
    good = _verify(_receipt(_predicate(base_config_hash=P0, policy_transitions=TWO), keys=[key]), allowed=allowed)
    assert good.ok, good.message
    assert good.principals == ("alice",)
    broken = _predicate(base_config_hash=STRANGER, policy_transitions=TWO)
    verdict = _verify(_receipt(broken, keys=[key]), allowed=allowed)
    _refused(verdict, "transition 0", STRANGER[:12])
    assert verdict.principals == ("alice",)
