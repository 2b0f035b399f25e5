"""Controls as values: the document a person signs, the checks a supervisor makes of it, and its ref's rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from git_agentops.controls.record import Control, is_id, new_id
from git_agentops.controls.signing import check_allowed, sign, signer
from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.refnames import ZERO_OID, namespace_rule

from ..helpers import public_key, ssh_key


def _control(**changes: object) -> Control:
    doc = {
        "type": "git-agentops/control/v1",
        "controlId": new_id(1_700_000_000.5),
        "runId": "run-1",
        "kind": "answer",
        "at": 1_700_000_000.5,
        "by": "Alice <alice@example.com>",
        "questionId": "q-1",
        "text": "yes",
        **changes,
    }
    return Control.from_json(doc)


def test_ids_sort_in_time_order_and_differ() -> None:
    first, second, again = new_id(1_700_000_000.0), new_id(1_700_000_001.0), new_id(1_700_000_001.0)
    assert is_id(first) and first < second and second[:23] == again[:23] and second != again
    assert not is_id("../../x") and not is_id(first + "\n")


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"type": "other"}, "not a git-agentops/control/v1"),
        ({"kind": "merge"}, "kind 'merge'"),
        ({"controlId": "x"}, "not a control id"),
        ({"runId": "../r"}, "not a run id"),
        ({"text": None}, "needs text"),
        ({"extra": 1}, "unknown field"),
        ({"text": "x" * 70000}, "at most 65536"),
        ({"at": True}, "at is not a time"),
        ({"kind": "review", "candidate": "a" * 40, "decision": "maybe"}, "decision 'maybe'"),
    ],
)
def test_a_malformed_document_is_control_invalid(changes: dict[str, object], why: str) -> None:
    with pytest.raises(AgentOpsError) as caught:
        _control(**changes)
    assert caught.value.code == "CONTROL_INVALID" and why in caught.value.message


def test_the_signed_bytes_are_the_canonical_document_and_a_round_trip_keeps_them() -> None:
    import json

    control = _control()
    assert Control.from_json(control.to_json()) == control
    payload = control.payload()
    assert json.loads(payload) == control.to_json() and payload.startswith(b'{"at":')  # keys sorted, no spaces
    assert b" " not in payload.replace(b"Alice <alice", b"")


def test_a_signature_counts_for_the_listed_key_in_the_control_namespace_only(tmp_path: Path) -> None:
    """Invariant: a good signature by a key listed for controls names its principal; the same key listed for
    receipts only, an unlisted key, a tampered document and no signature are each refused with their code."""
    alice, mallory = ssh_key(tmp_path / "alice"), ssh_key(tmp_path / "mallory")
    control = _control()
    armored = sign(control, [alice])
    listed = f'alice@example.com namespaces="git-agentops-control" {public_key(alice)}\n'.encode()
    assert signer(control, armored, listed, "signers") == "alice@example.com"
    receipts_only = f'alice@example.com namespaces="git-agentops" {public_key(alice)}\n'.encode()
    cases = [
        (control, armored, receipts_only, "CONTROL_NOT_ALLOWED"),
        (control, sign(control, [mallory]), listed, "CONTROL_NOT_ALLOWED"),
        (_control(text="no"), armored, listed, "CONTROL_SIGNATURE_INVALID"),
        (control, None, listed, "CONTROL_UNSIGNED"),
        (control, b"garbage", listed, "CONTROL_SIGNATURE_INVALID"),
        (control, armored, None, "CONTROL_NOT_ALLOWED"),
    ]
    for which, sig, signers, code in cases:
        with pytest.raises(AgentOpsError) as caught:
            signer(which, sig, signers, "signers")
        assert caught.value.code == code, (code, caught.value.message)
    with pytest.raises(AgentOpsError) as caught:
        sign(control, [])
    assert caught.value.code == "CONTROL_NO_KEY"


def test_who_may_send_a_kind_is_an_openssh_pattern_list() -> None:
    control = _control()
    check_allowed(control, "alice@example.com", ["*@example.com"])
    for patterns in ([], ["bob@example.com"], ["*@example.com", "!alice@example.com"]):
        with pytest.raises(AgentOpsError) as caught:
            check_allowed(control, "alice@example.com", patterns)
        assert caught.value.code == "CONTROL_NOT_ALLOWED"


def test_a_control_ref_is_create_only_for_the_hooks_and_the_store() -> None:
    ref = "refs/agentops/runs/run-1/controls/" + new_id(1.0)
    assert namespace_rule(ref, None, "1" * 40, lambda a, b: True) is None
    for old, new in (("1" * 40, "2" * 40), ("1" * 40, ZERO_OID)):
        rule = namespace_rule(ref, old, new, lambda a, b: True)
        assert rule is not None and rule[0] == "HOOK_REF_CREATE_ONLY"
