"""Every validator refuses a value with a trailing newline (``$`` in Python matches before a final newline)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.journal import Event
from git_agentops.gitstore.refnames import ZERO_OID, check_component, namespace_rule, ref_name_problem
from git_agentops.model.task import Criterion, new_task
from git_agentops.runs.state import check_run_id
from git_agentops.schema import documents
from git_agentops.schema.validator import ecma_anchors

TASK = "task-0123abcd-0123-4567-89ab-0123456789ab"


def _task(task_id: str = TASK, criterion: str = "c1", dependencies: tuple[str, ...] = ()) -> object:
    return new_task(
        task_id,
        title="t",
        intent="i",
        goal="g",
        criteria=[Criterion(criterion, "works")],
        parent=TASK,
        dependencies=list(dependencies),
        policy_config_hash="0" * 64,
    )


VALIDATORS: dict[str, tuple[Callable[[str], object], str]] = {
    "run id": (check_run_id, "run-20260101-abcdef"),
    "ref component": (lambda v: check_component(v, "worker id"), "worker-1"),
    "task id": (lambda v: _task(task_id=v), "task-aaaaaaaa-0123-4567-89ab-0123456789ab"),
    "task dependency": (lambda v: _task(dependencies=(v,)), "task-bbbbbbbb-0123-4567-89ab-0123456789ab"),
    "criterion id": (lambda v: _task(criterion=v), "c1"),
    "event code": (lambda v: Event(v, "summary", {}).message(0.0), "RUN_CREATED"),
}


@pytest.mark.event_data_free  # the event code validator is given a registered kind with no data
@pytest.mark.parametrize("name", sorted(VALIDATORS))
def test_validator_accepts_the_value_and_refuses_it_with_a_trailing_newline(name: str) -> None:
    check, good = VALIDATORS[name]
    check(good)
    with pytest.raises((AgentOpsError, ValueError)):
        check(good + "\n")


def test_ref_names_with_a_trailing_newline_are_refused() -> None:
    assert ref_name_problem("refs/heads/main") is None
    assert ref_name_problem("refs/heads/main\n") is not None


@pytest.mark.parametrize(
    "ref", ["refs/agentops/runs/r1/deliveries/t1\n", "refs/agentops/runs/r1/state\n", "refs/notes/agentops/x\n"]
)
def test_namespace_rules_fail_closed_on_a_newline_in_the_last_component(ref: str) -> None:
    """The namespace rules keep judging such a name as ours (deleting it is refused); git refuses the name anyway."""
    assert namespace_rule(ref.rstrip("\n"), "1" * 40, ZERO_OID, lambda a, b: True) is not None
    assert namespace_rule(ref, "1" * 40, ZERO_OID, lambda a, b: True) is not None


def test_schema_patterns_end_at_the_end_of_the_input() -> None:
    """JSON Schema ``pattern`` is ECMA-262: ``$`` is the end of the input, not "before a final newline"."""
    assert ecma_anchors(r"^[a-z]+$") == r"^[a-z]+\Z"
    assert ecma_anchors(r"^a[$]b\$c$") == r"^a[$]b\$c\Z"
    request = {
        "requestId": "req-1",
        "workerId": "worker-1",
        "generation": 1,
        "contractHash": "0" * 64,
        "action": "finalize",
    }
    assert documents.schema_errors(request, "request") == []
    assert documents.schema_errors({**request, "requestId": "req-1\n"}, "request") != []
