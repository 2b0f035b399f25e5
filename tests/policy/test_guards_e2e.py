"""A real run: a child that weakens the policy and adds a CI workflow is refused and never delivered."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..conftest import git
from ..helpers import HANDOFF, child, commit_step, simple_child, write_step
from ..runkit import children_settled, events, project, recipe, refs, start, stop, wait_for

WEAKENED = 'version = 1\n[[verify.commands]]\nid = "check"\nargv = ["python3", "-c", "print(1)"]\n'


@pytest.mark.slow
def test_a_child_that_weakens_the_policy_is_refused_and_never_delivered(tmp_path: Path) -> None:
    repo = project(tmp_path)
    policy_before = git(repo, "show", "main:.agentops/policy.toml")
    attack = [
        write_step(".agentops/policy.toml", WEAKENED),
        write_step(".github/workflows/ci.yml", "on: push\n"),
        write_step("src/a.txt", "a\n"),
        commit_step("weaken the checks"),
        HANDOFF,
    ]
    weak = child("w", "Weakener", [attack, [HANDOFF]])
    run_id = start(repo, recipe(tmp_path, weak + simple_child("o", "src/o.txt", title="Other"), finalize=True))
    try:
        doc = wait_for(repo, run_id, children_settled, timeout=120)
        tasks = {t["title"]: t for t in doc["tasks"] if t["parent"]}
        assert tasks["Other"]["status"] == "delivered"
        assert tasks["Weakener"]["status"] == "blocked"
        assert "RUN_DELIVERY_PROTECTED_PATH" in tasks["Weakener"]["blockedReason"]
        refusals = [e["data"] for e in events(repo, run_id) if e["code"] == "REQUEST_REFUSED"]
        guarded = [r for r in refusals if r["code"] == "RUN_DELIVERY_PROTECTED_PATH"]
        assert guarded, refusals
        assert ".agentops/policy.toml (matches '.agentops/**')" in guarded[0]["message"]
        assert ".github/workflows/ci.yml (matches '.github/workflows/**')" in guarded[0]["message"]
    finally:
        stop(repo, run_id)
    delivered = refs(repo, f"refs/agentops/runs/{run_id}/deliveries/")
    assert list(delivered.values()) == [tasks["Other"]["delivery"]]
    assert git(repo, "show", "main:.agentops/policy.toml") == policy_before
