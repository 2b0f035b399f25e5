"""The transition record and the trust grant against documents the dict-based code wrote
(``tests/fixtures/transition``, made by the code of commit c572f44).

``transition.json`` is a journal's document and ``trust.json`` the person's trust store: both are formats on disk,
read back and written again at every step. Typed records must read them and write them back byte for byte, and the
builders must make from the same parts exactly what the old code made (the ``--json`` output included).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from git_agentops.canonical import canonical_bytes
from git_agentops.clock import FixedClock
from git_agentops.model.policy import Policy, effective
from git_agentops.policy.trust import Grantor, TrustGrant, TrustStore, repo_identity
from git_agentops.schema import documents
from git_agentops.transition.record import (
    Approval,
    ApprovedBy,
    CapabilityChange,
    FrozenDelivery,
    RequestedBy,
    Stage,
    StageMark,
    Transition,
    TransitionRefused,
)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "transition"
SHAPES = ("prepared", "complete", "refused")


def _prepared() -> Transition:
    """The parts the fixture's transition was made of, as records."""
    lint = {"id": "lint", "argv": ["ruff", "check", "."], "shell": False, "timeout": 60.0, "required": True}
    return Transition(
        transition_id="policy-0123456789abcdef",
        run_id="run-20261202-abc123",
        stage=Stage.PREPARED,
        old_hash="b" * 64,
        new_hash="a" * 64,
        proposal_digest="c" * 64,
        config_file=".agentops/proposals/p.toml",
        approvals=(Approval("command:lint", "lint the code", "non-dangerous"), Approval("setup:0", "deps")),
        changes=(
            CapabilityChange("command:lint", "added", {**lint, "parser": "none", "env": {"A": "1"}}),
            CapabilityChange("setup:0", "changed", {"argv": "make deps", "shell": True, "timeout": 300.5}),
        ),
        mode="user",
        requested_by=RequestedBy("coordinator", 2, "req-7", "d" * 64),
        requested_at=1764633600.5,
        stages=(StageMark(Stage.PREPARED, 1764633600.5),),
    )


def _built() -> dict[str, Transition]:
    base = _prepared()
    fenced = base.advanced(
        Stage.FENCED, 1764633601.0, delivered=(FrozenDelivery("t1", "1" * 40, "b" * 64),), resume=("w1", "coordinator")
    )
    bound = fenced.advanced(Stage.BOUND, 1764633602, approved_by=ApprovedBy("user", "alice", 1764633601.75))
    synchronized = bound.advanced(Stage.SYNCHRONIZED, 1764633603.25, contract_hash="e" * 64)
    refused = TransitionRefused("RUN_POLICY_REFUSED", "no", "alice", 1764633605.0)
    return {
        "prepared": base,
        "complete": synchronized.advanced(Stage.COMPLETE, 1764633604.0),
        "refused": base.advanced(Stage.REFUSED, 1764633605.0, refused=refused),
    }


@pytest.mark.parametrize("shape", SHAPES)
def test_a_transition_record_the_old_code_wrote_is_read_and_written_back_byte_for_byte(shape: str) -> None:
    data = (FIXTURE / f"{shape}.json").read_bytes()
    doc = documents.load(data, schema="transition", what=shape)
    transition = Transition.from_json(doc)
    assert canonical_bytes(transition.to_json()) + b"\n" == data
    # `run approve --json` prints the record read back: the dict code printed the document as loaded (its from_json
    # kept every value but requestedAt, made a float -- one already in these fixtures), 60 for a timeout of 60.0
    shown = json.dumps(transition.to_json(), indent=2, sort_keys=True, ensure_ascii=False)
    assert isinstance(doc["requestedAt"], float)
    assert shown == json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_typed_builders_make_what_the_old_dict_builders_made(shape: str) -> None:
    built = _built()[shape]
    documents.validate(built.to_json(), "transition", what=shape)
    assert canonical_bytes(built.to_json()) + b"\n" == (FIXTURE / f"{shape}.json").read_bytes()
    shown = json.dumps(built.to_json(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert shown == (FIXTURE / f"{shape}.cli.json").read_text()


def test_the_parts_of_a_read_transition_are_records_not_dicts() -> None:
    data = (FIXTURE / "complete.json").read_bytes()
    transition = Transition.from_json(documents.load(data, schema="transition", what="complete"))
    assert transition == _built()["complete"]
    assert transition.requested_by.worker_id == "coordinator"
    assert transition.approved_by == ApprovedBy("user", "alice", 1764633601.75)
    assert [m.stage for m in transition.stages] == list(Stage)[:5]
    assert transition.change_of("setup:0") is transition.changes[1]
    assert transition.approval_of("command:lint") == Approval("command:lint", "lint the code", "non-dangerous")
    assert transition.change_of("host:x") is None and transition.approval_of("host:x") is None


def test_a_trust_store_the_old_code_wrote_is_read_and_rewritten_byte_for_byte(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    shutil.copy(FIXTURE / "trust.json", state / "trust.json")
    old = json.loads((FIXTURE / "trust.json").read_text())["records"]
    store = TrustStore(state, FixedClock())
    policy = Policy.from_effective(effective({"version": 1}))
    one, two = repo_identity(Path("/srv/one/.git"), None), repo_identity(Path("/srv/two/.git"), "git@github.com:o/t")
    verdict = store.status(two, policy)
    assert verdict.record is not None and verdict.record.granted_by == Grantor("alice", "Alice", None, "/dev/pts/3")
    assert verdict.to_json()["trustedBy"] == old[1]["grantedBy"]
    unattributed = store.status(one, policy).record
    assert unattributed is not None and unattributed.granted_by is None
    assert "grantedBy" not in unattributed.to_json()
    assert [TrustGrant.from_json(r).to_json() for r in old] == old
    store.revoke(one)  # the kept record is written again
    assert (state / "trust.json").read_bytes() == documents.dump(
        {"version": 1, "records": old[1:]}, schema="trust-store"
    )
