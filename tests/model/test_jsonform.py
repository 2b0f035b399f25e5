"""One mechanism for a record's JSON forms: fields declared once, on the dataclass, with ``on_disk``; every other
spelling (the delivery note's, the receipt's subset, a task's ``extra``) derived from that declaration."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
from dataclasses import dataclass
from pathlib import Path

import pytest

import git_agentops
import git_agentops.model
import git_agentops.policy
from git_agentops.model.delivery import DELIVERY, DELIVERY_NOTE
from git_agentops.model.integration import Integration, IntegrationStatus
from git_agentops.model.jsonform import FieldMap, JsonRecord, field_map, on_disk

PACKAGE = Path(git_agentops.__file__).parent


@dataclass(frozen=True, slots=True)
class _Flagged(JsonRecord):
    count: int = on_disk("n")
    flag: bool | int = on_disk("flag", absent=False)
    note: str | None = on_disk("note", absent=None)


@dataclass(frozen=True, slots=True)
class _Half:
    kept: str = on_disk("kept")
    own: str = "written by the record itself"


def _records() -> list[type]:
    for package in (git_agentops.model, git_agentops.policy):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(info.name)
    found, todo = [], list(JsonRecord.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__.startswith("git_agentops."):
            found.append(cls)
    return found


def test_every_json_record_of_the_package_declares_each_of_its_fields_on_disk() -> None:
    records = _records()
    assert len(records) >= 15  # evidence, transition, trust, delivery, integration, interruption...
    for cls in records:
        assert field_map(cls).keys(), cls
        assert [f.name for f in field_map(cls).fields] == [f.name for f in dataclasses.fields(cls)], cls


def test_no_module_declares_a_field_map_of_its_own_beside_the_dataclass() -> None:
    """A form is ``field_map(cls)`` or derived from one (``renamed``, ``only``): nobody builds a ``FieldMap`` from
    a list of keys of its own, which would be a second declaration of the same fields."""
    offences = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "jsonform.py" and path.parent.name == "model":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "FieldMap":
                offences.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert offences == []


def test_a_field_not_declared_on_disk_refuses_a_whole_field_map_but_not_a_partial_one() -> None:
    with pytest.raises(ValueError, match=r"_Half\.own is not declared on_disk"):
        field_map(_Half)
    half = field_map(_Half, partial=True)
    assert half.keys() == ("kept",)
    assert half.load({"kept": "k"}, own="given") == _Half("k", "given")


def test_a_value_equal_to_its_absent_is_left_out_and_read_back_as_the_default() -> None:
    assert _Flagged(1).to_json() == {"n": 1}
    assert _Flagged.from_json({"n": 1}) == _Flagged(1, False, None)
    assert _Flagged(1, True, "why").to_json() == {"n": 1, "flag": True, "note": "why"}
    assert _Flagged(1, 0).to_json() == {"n": 1, "flag": 0}  # equal to False, but not a flag's False: written


def test_a_null_is_read_back_as_none_without_running_the_field_s_decoder() -> None:
    record = Integration.from_json({"status": "requested", "request": None, "steps": None})
    assert record == Integration(IntegrationStatus.REQUESTED)


def test_a_derived_form_keeps_the_declaration_and_changes_only_its_keys() -> None:
    assert [(f.name, f.absent, f.decode) for f in DELIVERY_NOTE.fields] == [
        (f.name, f.absent, f.decode) for f in DELIVERY.fields
    ]
    assert isinstance(DELIVERY_NOTE, FieldMap) and DELIVERY_NOTE.make is DELIVERY.make
