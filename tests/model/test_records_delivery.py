"""Typed delivery and integration records: each JSON form generated from one field map, byte for byte as before.

``fixtures/records/stored-forms.json`` holds the documents the code wrote before these records existed (tasks and
workers with an untyped ``extra`` dict, the integration record with dict steps, reviews and request, an unsigned
receipt's digest), for the scenario :func:`_scenario` builds again here with the records. Reading each stored form
and writing it back gives the same bytes; so does building it from the records.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from git_agentops.canonical import canonical_bytes
from git_agentops.errors import AgentOpsError
from git_agentops.model.delivery import (
    DELIVERY,
    DELIVERY_NOTE,
    DELIVERY_RECEIPT,
    MERGE_STEP,
    PENDING_FINALIZE,
    REVIEW_RESULT,
    CommitId,
    Delivery,
    DeliveryEntry,
    Digest,
    MergeStep,
    PendingFinalize,
    ReviewResult,
    TreeId,
)
from git_agentops.model.integration import INTEGRATION, Integration, IntegrationStatus
from git_agentops.model.jsonform import Field, FieldMap
from git_agentops.model.lifecycle import interrupted, restart_wake
from git_agentops.model.run import INTERRUPTION, Interruption, Role, Worker, WorkerStatus
from git_agentops.model.task import Criterion, Task, TaskStatus, delivered
from git_agentops.receipts.build import deliveries_of, integration_receipt
from git_agentops.schema import documents

STORED: dict[str, str] = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "records" / "stored-forms.json").read_text()
)
ROOT = "task-00000000-0000-4000-8000-000000000000"
T1 = "task-11111111-1111-4111-8111-111111111111"
T2 = "task-22222222-2222-4222-8222-222222222222"


def _c(ch: str) -> CommitId:
    return CommitId(ch * 40)


def _d(ch: str) -> Digest:
    return Digest(ch * 64)


D1 = Delivery(_c("1"), _d("a"), "worker-1", 2, (_d("e"), _d("f")), no_change=False)
D2 = Delivery(_c("2"), _d("b"), "worker-2", 1, (), no_change=True, squashed_from=_c("3"))
EVIDENCE: dict[str, Any] = {
    "commandId": "test",
    "kind": "command",
    "argvDigest": "1" * 64,
    "exitCode": 0,
    "passed": True,
    "required": True,
    "tests": None,
    "outputDigest": "2" * 64,
    "tree": "7" * 40,
    "commit": "6" * 40,
    "producer": "supervisor",
    "checkout": "clean",
    "policyConfigHash": "3" * 64,
}
STEPS = (
    MergeStep(T1, _c("4"), (_c("9"), _c("1")), TreeId("5" * 40)),
    MergeStep(T2, _c("6"), (_c("4"), _c("2")), TreeId("7" * 40)),
)
REQUEST = PendingFinalize("req-1", _d("6"), _d("7"), 2)


def _scenario() -> dict[str, Any]:
    """The records of the scenario the stored forms were written from."""
    crit = (Criterion("c1", "it works"),)
    planned = Task(T1, "Part A", "do a", "goal", crit, parent=ROOT)
    running = replace(planned, status=TaskStatus.RUNNING, worker_id="worker-1")
    branch = "refs/heads/agentops/r/worker-1"
    worker = Worker("worker-1", Role.CHILD, "scripted", "/w", branch, task_id=T1, generation=3)
    full = Integration(
        IntegrationStatus.RECEIPTED,
        request=REQUEST,
        attempts=1,
        base=_c("9"),
        candidate=_c("6"),
        order=(T1, T2),
        steps=STEPS,
        verification=(EVIDENCE,),
        reviews=(
            ReviewResult("claude", "approve", _d("4"), sandbox="landlock"),
            ReviewResult("codex", "missing", _d("5")),
        ),
        published_at=1767225600.5,
        receipt_digest=_d("9"),
        unreviewed=("8" * 40,),
        target_rewritten=True,
    )
    auto = PendingFinalize("auto-finalize-abc", _d("8"), _d("8"), 1, automatic=True)
    return {
        "task:planned": planned,
        "task:running": running,
        "task:delivered1": replace(running, status=TaskStatus.DELIVERED, delivery=D1),
        "task:delivered2": Task(
            T2, "Part B", "do b", "goal", crit, parent=ROOT, dependencies=(T1,), status=TaskStatus.DELIVERED,
            revision=2, worker_id="worker-2", delivery=D2,
        ),
        "task:root": Task(
            ROOT, "Root", "all", "goal", (Criterion("c1", "x"), Criterion("c2", "y", review_only="taste")),
            status=TaskStatus.RUNNING, worker_id="coordinator",
        ),
        "worker:plain": worker,
        "worker:provisioning": replace(worker, provisioning=True, generation=0),
        "worker:woken": replace(worker, wake="- a line\n- another", resumed="sess-1", session="sess-1"),
        "worker:interrupted": interrupted(
            replace(worker, status=WorkerStatus.HANDING_OFF, wake="- earlier"), "the supervisor died"
        ),
        "integration:full": full,
        "integration:requested": Integration(IntegrationStatus.REQUESTED, request=auto, attempts=0),
        "integration:failed": Integration(
            IntegrationStatus.FAILED, request=REQUEST, attempts=2, failure="RUN_REVIEW_BLOCKED"
        ),
    }  # fmt: skip


KINDS = {"task": (Task, "task"), "worker": (Worker, "worker"), "integration": (Integration, None)}


@pytest.mark.parametrize("name", sorted(_scenario()))
def test_records_write_the_bytes_the_dict_code_wrote(name: str) -> None:
    record = _scenario()[name]
    assert canonical_bytes(record.to_json()).decode() == STORED[name]


@pytest.mark.parametrize("name", sorted(_scenario()))
def test_a_stored_form_reads_into_the_record_and_writes_back_byte_identical(name: str) -> None:
    cls, schema = KINDS[name.split(":")[0]]
    doc = json.loads(STORED[name])
    if schema is not None:
        documents.validate(doc, schema, what=name)  # the edge: the stored form is schema-valid, tightened or not
    record = cls.from_json(doc)
    assert record == _scenario()[name]
    assert canonical_bytes(record.to_json()).decode() == STORED[name]


def test_the_receipt_built_from_records_is_the_receipt_built_from_dicts() -> None:
    records = _scenario()
    tasks = {ROOT: records["task:root"], T1: records["task:delivered1"], T2: records["task:delivered2"]}
    coordinator = Worker("coordinator", Role.COORDINATOR, "scripted", "/c", "bc", sandbox="namespace")
    workers = [
        replace(records["worker:plain"], sandbox="namespace"),
        Worker("worker-2", Role.CHILD, "scripted", "/w2", "b2", sandbox="landlock"),
        coordinator,
    ]
    run: Any = SimpleNamespace(
        run_id="run-1",
        goal="goal",
        target="main",
        contract_hash="c" * 64,
        integration=records["integration:full"],
        coordinator_id="coordinator",
    )
    data = integration_receipt(
        run,
        tasks,
        policy_config_hash="3" * 64,
        created_at=1767225600.0,
        keys=[],
        delivery_evidence={T1: [EVIDENCE]},
        workers=workers,
    )
    assert hashlib.sha256(data).hexdigest() == STORED["receipt:sha256"]
    entries = deliveries_of(records["integration:full"], tasks, {T1: [EVIDENCE]}, {"worker-1": "none"})
    assert canonical_bytes(entries).decode() == STORED["deliveries"]


def test_the_interruption_is_told_as_before() -> None:
    worker = Worker.from_json(json.loads(STORED["worker:interrupted"]))
    assert worker.interrupted == Interruption(3, "handing-off", "the supervisor died")
    assert restart_wake(worker) == STORED["wake:interrupted"]


def test_one_declaration_spells_the_delivery_in_the_state_the_note_and_the_receipt() -> None:
    assert DELIVERY.keys() == ("commit", "digest", "workerId", "generation", "evidence", "noChange", "squashedFrom")
    assert DELIVERY_NOTE.keys() == (
        "sourceCommit",
        "deliveryDigest",
        "workerId",
        "generation",
        "evidence",
        "noChange",
        "squashedFrom",
    )
    assert DELIVERY_RECEIPT.keys() == ("sourceCommit", "deliveryDigest", "workerId", "generation")
    note = {"runId": "run-1", "taskId": T2, "contractHash": "c" * 64, "sourceFiles": [], **DELIVERY_NOTE.dump(D2)}
    assert note["sourceCommit"] == D2.commit and note["squashedFrom"] == D2.squashed_from
    assert Delivery.from_note(note) == D2  # the note's other keys are the note's, not the delivery's
    assert Delivery.from_json(D2.to_json()) == D2
    assert "squashedFrom" not in DELIVERY_NOTE.dump(D1) and "squashedFrom" not in D1.to_json()


def test_a_receipt_entry_carries_evidence_and_sandbox_only_when_recorded() -> None:
    bare = DeliveryEntry(T1, D1).to_json()
    assert bare == {"taskId": T1, "sourceCommit": D1.commit, "deliveryDigest": D1.digest, "workerId": "worker-1",
                    "generation": 2}  # fmt: skip
    full = DeliveryEntry(T1, D1, ({"commandId": "test"},), "namespace").to_json()
    assert full == {**bare, "evidence": [{"commandId": "test"}], "sandbox": "namespace"}


def test_a_flag_or_an_optional_field_is_absent_from_the_json_until_set() -> None:
    assert "automatic" not in REQUEST.to_json()
    automatic = replace(REQUEST, automatic=True)
    assert automatic.to_json()["automatic"] is True and PendingFinalize.from_json(automatic.to_json()) == automatic
    assert "sandbox" not in ReviewResult("r", "approve", _d("1")).to_json()
    assert Integration(IntegrationStatus.REQUESTED).to_json() == {"status": "requested"}


def test_an_event_names_integration_fields_by_their_json_keys_with_none_kept() -> None:
    """The integration's events carry the fields a step wrote under the record's JSON keys; a ``None`` (say
    ``targetRewritten`` unset) is kept, as the events always carried it."""
    assert INTEGRATION.encode("target_rewritten", None) == ("targetRewritten", None)
    assert INTEGRATION.encode("status", IntegrationStatus.PREPARED) == ("status", "prepared")
    assert INTEGRATION.encode("steps", list(STEPS))[1] == [s.to_json() for s in STEPS]
    with pytest.raises(ValueError, match="no field"):
        INTEGRATION.encode("nonsense", 1)


def test_a_merge_step_reads_its_parents_into_a_tuple_and_writes_a_list() -> None:
    step = MergeStep.from_json({"label": T1, "commit": "4" * 40, "parents": ["9" * 40, "1" * 40], "tree": "5" * 40})
    assert step == STEPS[0] and step.to_json()["parents"] == ["9" * 40, "1" * 40]


def test_delivered_is_a_lookup_that_fails_on_a_task_without_a_delivery() -> None:
    records = _scenario()
    assert delivered(records["task:delivered2"]) is D2
    with pytest.raises(KeyError):
        delivered(records["task:running"])


def test_a_field_map_refuses_to_rename_or_select_a_field_it_does_not_declare() -> None:
    with pytest.raises(ValueError, match="no fields"):
        DELIVERY.renamed(nonsense="x")
    with pytest.raises(ValueError, match="no fields"):
        DELIVERY.only("commit", "nonsense")


def test_a_field_map_fills_what_its_form_does_not_carry_from_the_caller() -> None:
    pair = FieldMap(Interruption, (Field("generation", "g"), Field("reason", "r", absent="")))
    assert pair.dump(Interruption(1, "running", "")) == {"g": 1}
    assert pair.load({"g": 1, "r": "why"}, status="running") == Interruption(1, "running", "why")


def test_the_schemas_refuse_extra_keys_nobody_writes() -> None:
    """The task's and the worker's ``extra`` hold exactly their declared fields: a stray key is a schema error at
    the edge, where a stored document is read."""
    task = json.loads(STORED["task:delivered1"])
    worker = json.loads(STORED["worker:woken"])
    for doc, schema, path in ((task, "task", "extra"), (worker, "worker", "extra")):
        with pytest.raises(AgentOpsError) as refused:
            documents.validate({**doc, path: {**doc[path], "stray": 1}}, schema, what=schema)
        assert refused.value.code == "SCHEMA_INVALID"
    broken = {**task, "extra": {**task["extra"], "delivery": {**task["extra"]["delivery"], "commit": "nope"}}}
    with pytest.raises(AgentOpsError) as refused:
        documents.validate(broken, "task", what="task")
    assert refused.value.code == "SCHEMA_INVALID"


@pytest.mark.parametrize(
    ("declared", "record"),
    [
        (DELIVERY, Delivery),
        (PENDING_FINALIZE, PendingFinalize),
        (MERGE_STEP, MergeStep),
        (REVIEW_RESULT, ReviewResult),
        (INTEGRATION, Integration),
        (INTERRUPTION, Interruption),
    ],
)
def test_a_record_s_field_map_declares_every_field_it_has(declared: FieldMap[Any], record: type) -> None:
    """A field the map forgot would silently vanish from the stored form."""
    assert {f.name for f in declared.fields} == {f.name for f in dataclasses.fields(record)}


def test_a_field_map_refuses_a_field_its_record_lacks_or_a_key_twice() -> None:
    with pytest.raises(ValueError, match="no fields"):
        FieldMap(Interruption, (Field("generation", "generation"), Field("nonsense", "n")))
    with pytest.raises(ValueError, match="twice"):
        FieldMap(Interruption, (Field("generation", "g"), Field("reason", "g")))
