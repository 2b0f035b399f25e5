"""Receipts in published formats: RFC 8785 (JCS) for version 2, DSSE and in-toto Statement v1 read by their own
reference libraries.

Why: a verifier outside this toolkit must be able to recompute every digest and read the envelope and statement
with the tools of the field; each check here uses the field's library (``rfc8785``, ``securesystemslib``,
``in-toto-attestation``), never our own code, on a receipt our builder made.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from git_agentops.receipts import make_receipt
from git_agentops.receipts.statement import PREDICATE_TYPE, PREDICATE_TYPE_V1, SEALED

from . import test_receipts
from .test_receipts import World, _check, _statement

world = test_receipts.world  # the fixture: a repository with two deliveries merged, and keys


def _statement_of(receipt: bytes) -> tuple[bytes, dict[str, Any]]:
    payload = base64.b64decode(json.loads(receipt)["payload"])
    statement: dict[str, Any] = json.loads(payload)
    return payload, statement


def test_a_new_receipt_is_version_2_and_every_byte_is_rfc8785(world: World) -> None:
    receipt = make_receipt(_statement(world), keys=[world.key])
    payload, statement = _statement_of(receipt)
    assert statement["predicateType"] == PREDICATE_TYPE == "urn:git-agentops:receipt:v2"
    assert payload == rfc8785.dumps(statement)  # the signed bytes are the statement's JCS form
    for key in SEALED:
        sealed = statement["predicate"][key]
        assert sealed["digest"] == hashlib.sha256(rfc8785.dumps(sealed["value"])).hexdigest(), key
    assert _check(world, receipt).ok


def test_numbers_are_sealed_the_rfc8785_way(world: World) -> None:
    """Where the two schemes differ (``1e-7`` vs ``1e-07``), a version 2 seal follows RFC 8785, and a seal made the
    old way under a version 2 label is refused."""
    statement = _statement(world)
    usage = {"tokens": 10, "costUsd": 1e-7, "generations": []}
    assert rfc8785.dumps(usage) == b'{"costUsd":1e-7,"generations":[],"tokens":10}'
    statement["predicate"]["usage"] = {"value": usage, "digest": hashlib.sha256(rfc8785.dumps(usage)).hexdigest()}
    assert _check(world, make_receipt(statement, keys=[world.key])).ok
    old_way = json.dumps(usage, sort_keys=True, separators=(",", ":")).encode()  # Python's 1e-07
    assert b"1e-07" in old_way
    statement["predicate"]["usage"]["digest"] = hashlib.sha256(old_way).hexdigest()
    verdict = _check(world, make_receipt(statement, keys=[world.key]))
    assert (verdict.ok, verdict.code) == (False, "RECEIPT_SEAL_INVALID")


def test_a_version_1_receipt_still_verifies(world: World) -> None:
    from git_agentops.receipts import build_predicate, build_statement

    modern = _statement(world)
    predicate = build_predicate(
        **{  # the same content, sealed with the version 1 canonical JSON
            "run_id": "run-1",
            "goal": modern["predicate"]["goal"]["value"],
            "policy_config_hash": modern["predicate"]["policy"]["value"]["configHash"],
            "toolkit_version": modern["predicate"]["policy"]["value"]["toolkitVersion"],
            "tasks": modern["predicate"]["tasks"]["value"],
            "contract_hash": modern["predicate"]["contractHash"],
            "deliveries": modern["predicate"]["deliveries"]["value"],
            "integration": modern["predicate"]["integration"]["value"],
            "verification": modern["predicate"]["verification"]["value"],
            "reviews": modern["predicate"]["reviews"]["value"],
            "created_at": modern["predicate"]["createdAt"],
        },
        version=1,
    )
    subject = modern["subject"][0]
    statement = build_statement(
        commit=subject["digest"]["gitCommit"],
        tree=subject["digest"]["gitTree"],
        subject_name="main",
        predicate=predicate,
        version=1,
    )
    receipt = make_receipt(statement, keys=[world.key])
    assert _statement_of(receipt)[1]["predicateType"] == PREDICATE_TYPE_V1
    assert _check(world, receipt).ok


def test_the_envelope_and_statement_parse_with_the_reference_libraries(world: World) -> None:
    dsse = pytest.importorskip("securesystemslib.dsse", reason="securesystemslib is in the test extra")
    statement_pb2 = pytest.importorskip("in_toto_attestation.v1.statement_pb2")
    in_toto = pytest.importorskip("in_toto_attestation.v1.statement")
    from google.protobuf import json_format

    receipt = make_receipt(_statement(world), keys=[world.key])
    envelope = dsse.Envelope.from_dict(json.loads(receipt))
    assert envelope.payload_type == "application/vnd.in-toto+json" and len(envelope.signatures) == 1
    proto = json_format.ParseDict(json.loads(envelope.payload), statement_pb2.Statement())
    parsed = in_toto.Statement.copy_from_pb(proto)
    parsed.validate()  # raises on anything in-toto Statement v1 does not allow
    assert parsed.pb.predicate_type == PREDICATE_TYPE
    assert dict(parsed.pb.subject[0].digest) == _statement(world)["subject"][0]["digest"]


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@given(_JSON)
@settings(max_examples=400, deadline=None)
def test_our_jcs_bytes_are_the_reference_implementations(value: Any) -> None:
    """Invariant: whichever path jcs_bytes takes (json's C encoder when the forms agree), the bytes are
    ``rfc8785.dumps``'s -- floats, control characters, keys beyond the BMP and all."""
    from git_agentops.canonical import _normalise, jcs_bytes

    assert jcs_bytes(value) == rfc8785.dumps(_normalise(value, 0))
