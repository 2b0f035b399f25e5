"""Canonical JSON and seals: stable under key order, idempotent round trip, refusals coded."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from git_agentops.canonical import canonical_json, check_seal, digest, seal, sha256_hex
from git_agentops.errors import AgentOpsError
from git_agentops.schema import documents

finite_floats = st.floats(allow_nan=False, allow_infinity=False)
scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | finite_floats | st.text(max_size=20)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)


def _shuffled(value: Any, rng: st.DataObject) -> Any:
    if isinstance(value, dict):
        keys = rng.draw(st.permutations(list(value)))
        return {k: _shuffled(value[k], rng) for k in keys}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


@given(values, st.data())
def test_canonical_form_is_stable_under_key_order(value: Any, data: st.DataObject) -> None:
    assert canonical_json(_shuffled(value, data)) == canonical_json(value)


@given(values)
def test_canonical_form_round_trips(value: Any) -> None:
    text = canonical_json(value)
    assert canonical_json(json.loads(text)) == text
    assert documents.parse_json(text.encode()) == json.loads(text)  # our strict parser accepts our output


@given(values)
def test_seal_checks_and_detects_any_change(value: Any) -> None:
    sealed = seal(value)
    round_tripped = json.loads(json.dumps(sealed))  # a seal survives being stored as JSON and read back
    assert check_seal(round_tripped) == round_tripped["value"]
    assert check_seal(sealed) is value
    tampered = {"value": [value], "digest": sealed["digest"]}
    with pytest.raises(AgentOpsError) as caught:
        check_seal(tampered)
    assert caught.value.code == "SEAL_INVALID"


def test_documented_float_rule() -> None:
    assert (
        canonical_json([1.0, -0.0, 3e2, 0.5, 1e-7, 1.5e16, 2.0**53]) == "[1,0,300,0.5,1e-07,1.5e+16,9007199254740992.0]"
    )
    assert digest({"a": 1}) == digest({"a": 1.0})


def test_canonical_text_format() -> None:
    assert canonical_json({"b": [1, {"d": None, "c": True}], "a": "é"}) == '{"a":"é","b":[1,{"c":true,"d":null}]}'
    assert sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, {1: "x"}, {"k": b"bytes"}, {1, 2}, "\ud800", object()])
def test_unsupported_values_are_refused(bad: Any) -> None:
    with pytest.raises(AgentOpsError) as caught:
        canonical_json(bad)
    assert caught.value.code == "CANONICAL_UNSUPPORTED"


def test_deep_nesting_is_refused() -> None:
    value: Any = 1
    for _ in range(200):
        value = [value]
    with pytest.raises(AgentOpsError) as caught:
        canonical_json(value)
    assert caught.value.code == "CANONICAL_UNSUPPORTED"


@pytest.mark.parametrize("malformed", [{"value": 1}, {"value": 1, "digest": "x"}, [1], {"value": 1, "digest": 5}])
def test_malformed_seals_are_refused(malformed: Any) -> None:
    with pytest.raises(AgentOpsError) as caught:
        check_seal(malformed)
    assert caught.value.code == "SEAL_INVALID"
