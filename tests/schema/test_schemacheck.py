"""Differential test: our subset validator agrees with the reference ``jsonschema`` on every shipped schema."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from git_agentops.schema import documents
from git_agentops.schema.validator import UnsupportedSchema, Validator

from ..helpers import mutations

RAW, OURS = documents.SCHEMAS.get()
REGISTRY: Registry[Any] = Registry().with_resources((d["$id"], Resource.from_contents(d)) for d in RAW.values())
REFERENCE = {name: Draft202012Validator(doc, registry=REGISTRY) for name, doc in RAW.items()}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-5, 5, allow_nan=False) | st.text(max_size=6),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=8,
)


def _agree(name: str, doc: Any) -> None:
    ours = OURS.errors(doc, documents.SCHEMA_ID_PREFIX + name)
    theirs = list(REFERENCE[name].iter_errors(doc))
    assert (not ours) == (not theirs), (name, doc, [e.json_path for e in ours], [e.message for e in theirs])


@pytest.mark.parametrize("name", sorted(RAW))
@settings(max_examples=150, deadline=None)
@given(doc=json_values)
def test_random_documents(name: str, doc: Any) -> None:
    _agree(name, doc)


def test_mutations_of_valid_examples() -> None:
    examples = {
        "event": {"code": "A_B", "summary": "s", "data": {"k": [1]}, "time": 3},
        "error": {"error": {"code": "XY", "message": "m", "exitStatus": 3, "details": {}}},
        "doctor-report": {
            "healthy": True,
            "toolkitVersion": "1",
            "checks": [{"id": "python", "status": "ok", "detail": "d", "value": 1}],
        },
    }
    for name, example in examples.items():
        _agree(name, example)
        assert not OURS.errors(example, documents.SCHEMA_ID_PREFIX + name)
        for mutated in mutations(copy.deepcopy(example)):
            _agree(name, mutated)


def test_unsupported_keywords_are_refused_at_load() -> None:
    with pytest.raises(UnsupportedSchema):
        Validator({"x": {"$id": "x", "unevaluatedProperties": False}})
    with pytest.raises(UnsupportedSchema):
        Validator({"x": {"$id": "x", "properties": {"a": {"format": "date-time"}}}})
