"""The registry of journal event kinds (``git_agentops.eventkinds``) and how ``Event`` holds call sites to it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from git_agentops import eventkinds as kinds
from git_agentops.cli import docgen
from git_agentops.gitstore.events import QUARANTINED, Event
from git_agentops.transition.record import Stage

README = Path(__file__).resolve().parents[1] / "README.md"


def test_an_unregistered_event_code_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="not a registered event kind"):
        Event(kinds.EventCode("RUN_SOMETHING_NEW"), "s")


def test_a_registered_kind_writes_the_bytes_a_literal_code_wrote() -> None:
    """The constants are the strings: the commit message of an event is what it was before the registry."""
    event = Event(kinds.RUN_COMPLETE, "run complete: main at 0123456789ab", {"candidate": "c", "receiptDigest": "d"})
    assert event.message(1.5) == (
        "RUN_COMPLETE: run complete: main at 0123456789ab\n\n"
        'Agentops-Event: {"code":"RUN_COMPLETE","data":{"candidate":"c","receiptDigest":"d"},'
        '"summary":"run complete: main at 0123456789ab","time":1.5}\n'
    )
    assert type(kinds.RUN_COMPLETE) is str and QUARANTINED == "RUN_STATE_QUARANTINED"


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"workerId": "w1", "policyHash": "0" * 64}, "missing key 'policyConfigHash'"),  # a renamed key
        ({"workerId": "w1", "policyConfigHash": "0" * 64, "extra": 1}, "unknown key 'extra'"),
        ({"workerId": 7, "policyConfigHash": "0" * 64}, "'workerId' is int, not string"),
    ],
)
def test_data_that_does_not_fit_its_kind_is_refused_under_the_tests(data: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        Event(kinds.WORKER_STARTING, "s", data).message(0.0)


def test_json_types_are_told_apart_as_json_tells_them() -> None:
    """A bool is not an integer (JSON has both); an integer is a number; null is only None."""
    pid = kinds.EVENTS[kinds.RUN_SUPERVISOR_START]
    assert pid.problems({"pid": 12}) == []
    assert pid.problems({"pid": True}) == ["'pid' is bool, not integer"]
    created = {"goal": "g", "target": "main", "base": "0" * 40, "host": None, "budgetSeconds": 600}
    assert kinds.EVENTS[kinds.RUN_CREATED].problems(created) == []
    assert kinds.EVENTS[kinds.RUN_CREATED].problems({**created, "budgetSeconds": 1.5}) == []
    assert kinds.EVENTS[kinds.RUN_CREATED].problems({**created, "host": 0}) == ["'host' is int, not string|null"]


def test_optional_keys_may_be_absent_and_required_ones_may_not() -> None:
    delivered = {"taskId": "t", "workerId": "w", "generation": 1, "commit": "c", "deliveryDigest": "d"}
    kind = kinds.EVENTS[kinds.TASK_DELIVERED]
    assert kind.problems(delivered) == []
    assert kind.problems({**delivered, "squashedFrom": "h"}) == []
    assert kind.problems({k: v for k, v in delivered.items() if k != "commit"}) == ["missing key 'commit'"]


@pytest.mark.event_data_free
def test_outside_the_tests_data_is_not_checked_but_the_kind_still_is() -> None:
    """Production pays one dictionary lookup per event: the data's shape is the tests' business."""
    assert Event(kinds.WORKER_STARTING, "s", {"anything": 1}).message(0.0).startswith("WORKER_STARTING: s\n")
    with pytest.raises(ValueError, match="not a registered event kind"):
        Event(kinds.EventCode("NOT_A_KIND"), "s")


def test_every_policy_stage_is_recorded_with_the_event_it_always_had() -> None:
    """``POLICY_STAGE`` replaced ``f"POLICY_{stage.upper()}"``: the same codes, now registered."""
    for stage in Stage:
        assert kinds.POLICY_STAGE[stage] == f"POLICY_{str(stage).upper()}"
        assert kinds.POLICY_STAGE[stage] in kinds.EVENTS
    assert kinds.POLICY_STAGE[None] == "POLICY_UPDATED"


def test_every_kind_is_upper_snake_case_with_a_meaning_and_typed_fields() -> None:
    for code, kind in kinds.EVENTS.items():
        assert re.fullmatch(r"[A-Z][A-Z0-9_]{1,63}", code) and kind.name == code
        assert kind.meaning and not kind.meaning.endswith(".")
        for key, field in kind.fields.items():
            assert re.fullmatch(r"[a-z][A-Za-z]*", key), (code, key)
            assert kinds.DataField.parse(field.describe()) == field


def test_a_kind_is_registered_once() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        kinds._k("RUN_COMPLETE", "again")


def test_readme_lists_every_event_kind_as_docgen_renders_it() -> None:
    readme = README.read_text("utf-8")
    assert f"{docgen.EVENTS_BEGIN}\n{docgen.event_table()}\n{docgen.EVENTS_END}" in readme
    assert all(f"| `{code}` |" in readme for code in kinds.EVENTS)
