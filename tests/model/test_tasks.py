"""Tasks and contracts: hash stable under key order, sensitive to criteria; revise is CAS on the contract."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.journal import Event, Journal
from git_agentops.gitstore.repo import Store
from git_agentops.model.delivery import CommitId, Delivery, Digest
from git_agentops.model.task import (
    Criterion,
    Task,
    check_runners,
    contract_hash,
    criteria_from_texts,
    new_task,
    revise,
    task_contract_hash,
)
from git_agentops.runs import tasks as taskbook

ROOT = "task-00000000-0000-4000-8000-000000000001"
CHILD = "task-00000000-0000-4000-8000-000000000002"
OTHER = "task-00000000-0000-4000-8000-000000000003"


def _root() -> Task:
    return new_task(
        ROOT,
        title="Root",
        intent="Do it",
        goal="Ship the parser",
        criteria=criteria_from_texts(["parses", "has tests"]),
    )


def _child(**kw: object) -> Task:
    defaults: dict[str, object] = {
        "title": "Child",
        "intent": "Write parser",
        "goal": "Ship the parser",
        "criteria": [Criterion("c1", "parses input", runner="acceptance")],
        "parent": ROOT,
        "dependencies": [OTHER],
    }
    defaults.update(kw)
    return new_task(CHILD, **defaults)  # type: ignore[arg-type]


def test_contract_hash_is_stable_under_key_order_and_record_order() -> None:
    root, child = _root(), _child()
    assert contract_hash([root, child]) == contract_hash([child, root])
    shuffled = Task.from_json(json.loads(json.dumps(dict(reversed(list(child.to_json().items()))))))
    assert contract_hash([root, shuffled]) == contract_hash([root, child])


@given(st.one_of(st.none(), st.text(min_size=1, max_size=5)), st.integers(min_value=0))
def test_contract_hash_ignores_bookkeeping(worker_id: str | None, generation: int) -> None:
    root = _root()
    delivery = Delivery(CommitId("c" * 40), Digest("d" * 64), worker_id or "worker-1", generation)
    changed = replace(root, worker_id=worker_id, delivery=delivery, status="delivered", title="Renamed")  # type: ignore[arg-type]
    assert contract_hash([changed]) == contract_hash([root])


@pytest.mark.parametrize(
    "change",
    [
        {"criteria": [Criterion("c1", "parses input strictly", runner="acceptance")]},
        {"criteria": [Criterion("c1", "parses input", runner="other")]},
        {"criteria": [Criterion("c1", "parses input", review_only="needs a human eye")]},
        {"criteria": [Criterion("c1", "parses input", runner="acceptance"), Criterion("c2", "fast")]},
        {"dependencies": []},
        {"intent": "Write a different parser"},
        {"goal": "Another goal"},
    ],
)
def test_contract_hash_changes_with_the_contract(change: dict[str, object]) -> None:
    assert contract_hash([_root(), _child(**change)]) != contract_hash([_root(), _child()])


def test_superseded_records_leave_the_contract() -> None:
    root = _root()
    old, new = revise(root, task_contract_hash(root), criteria=criteria_from_texts(["parses", "has tests", "fast"]))
    assert old.superseded_by == 2 and new.revision == 2 and new.current and not old.current
    assert contract_hash([old, new]) == contract_hash([new]) != contract_hash([root])


def test_revise_with_stale_expected_hash_is_refused() -> None:
    root = _root()
    with pytest.raises(AgentOpsError) as caught:
        revise(root, "0" * 64, intent="x")
    assert caught.value.code == "TASK_CONTRACT_CHANGED"
    old, _ = revise(root, task_contract_hash(root), intent="y")
    with pytest.raises(AgentOpsError) as twice:
        revise(old, task_contract_hash(root), intent="z")
    assert twice.value.code == "TASK_INVALID"


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"criteria": criteria_from_texts(["only one"])}, "2-5 acceptance criteria"),
        ({"criteria": criteria_from_texts(list("abcdef"))}, "2-5 acceptance criteria"),
        ({"criteria": [Criterion("c1", "x"), Criterion("c1", "y")]}, "appears twice"),
        ({"criteria": [Criterion("C1", "x"), Criterion("c2", "y")]}, "must match"),
        ({"criteria": [Criterion("c1", "x", runner="r", review_only="why"), Criterion("c2", "y")]}, "not both"),
        ({"criteria": [Criterion("c1", "x", review_only=" "), Criterion("c2", "y")]}, "recorded reason"),
        ({"title": ""}, "title"),
        ({"dependencies": ["not-a-task"]}, "not a task id"),
        ({"dependencies": [ROOT]}, "must not include the task itself"),
    ],
)
def test_malformed_tasks_are_refused(kwargs: dict[str, object], fragment: str) -> None:
    args: dict[str, object] = {"title": "T", "intent": "I", "goal": "G", "criteria": criteria_from_texts(["a", "b"])}
    args.update(kwargs)
    with pytest.raises(AgentOpsError) as caught:
        new_task(ROOT, **args)  # type: ignore[arg-type]
    assert caught.value.code == "TASK_INVALID" and fragment in caught.value.message
    with pytest.raises(AgentOpsError):
        new_task("task-1", title="T", intent="I", goal="G", criteria=criteria_from_texts(["a", "b"]))


def test_a_criterion_naming_an_unknown_runner_is_refused() -> None:
    check_runners(_child(), ["acceptance"])
    with pytest.raises(AgentOpsError) as caught:
        check_runners(_child(), ["smoke"])
    assert caught.value.code == "TASK_RUNNER_UNKNOWN" and "'acceptance'" in caught.value.message


def test_taskbook_stores_revisions_in_the_journal_and_revise_is_cas(store: Store, repo_path: Path) -> None:
    journal = Journal(store, "refs/agentops/runs/r1/state")
    root = _root()
    journal.mutate(lambda change: taskbook.create(change, root), Event("TASK_PLANNED", "root planned"))
    expected = task_contract_hash(root)
    revised = taskbook.revise_task(journal, ROOT, expected, criteria=criteria_from_texts(["a", "b", "c"]))
    assert revised.revision == 2
    with pytest.raises(AgentOpsError) as stale:  # the same expectation again: someone revised it first
        taskbook.revise_task(journal, ROOT, expected, intent="late")
    assert stale.value.code == "TASK_CONTRACT_CHANGED"
    snapshot = journal.read()
    assert [t.revision for t in taskbook.revisions(snapshot, ROOT)] == [1, 2]
    assert taskbook.current(snapshot, ROOT).criteria == revised.criteria
    assert taskbook.find(store, ROOT) == ("r1", revised)
    with pytest.raises(AgentOpsError) as missing:
        taskbook.find(store, CHILD)
    assert missing.value.code == "TASK_NOT_FOUND"
    with pytest.raises(AgentOpsError) as created:
        journal.mutate(lambda change: taskbook.create(change, root), Event("TASK_PLANNED", "again"))
    assert created.value.code == "TASK_INVALID"
