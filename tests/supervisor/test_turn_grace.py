"""After its handoff is taken an agent gets a short grace to end its turn (so its host prints its usage), then it is
stopped; the budget counts every generation, stopped ones included, before any new one starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..helpers import HANDOFF, child, commit_step, simple_child, write_step
from ..runkit import children_settled, events, project, recipe, start, stop, wait_for


def _stopped_for_handoff(repo: Path, run_id: str) -> dict[str, str]:
    return {
        e["data"]["workerId"]: e["summary"] for e in events(repo, run_id) if e["code"] == "WORKER_STOPPED_FOR_HANDOFF"
    }


@pytest.mark.slow
def test_an_agent_ends_its_turn_after_its_handoff_is_taken_and_one_that_does_not_is_stopped_at_the_grace(
    tmp_path: Path,
) -> None:
    """Invariant: a handoff is answered ``RUN_HANDOFF_ACCEPTED`` at once; an agent that then ends its turn is
    recorded as having ended it, one that keeps running is stopped once ``[run] turn_grace`` runs out, and both
    deliveries go on."""
    repo = project(tmp_path, run_options="turn_grace = 2")
    lingering = child(
        "slow", "Lingers", [[write_step("src/slow.txt", "slow\n"), commit_step("slow"), HANDOFF, {"sleep": 300}]]
    )
    run_id = start(repo, recipe(tmp_path, simple_child("quick", "src/quick.txt") + lingering))
    try:
        doc = wait_for(repo, run_id, children_settled, timeout=120)
        assert all(t["status"] == "delivered" for t in doc["tasks"] if t["parent"]), doc["tasks"]
        summaries = _stopped_for_handoff(repo, run_id)
        by_title = {t["title"]: t["taskId"] for t in doc["tasks"]}
        workers = {w["taskId"]: w["workerId"] for w in doc["workers"]}
        assert "ended its turn after its handoff" in summaries[workers[by_title["Part QUICK"]]]
        assert "stopped after its handoff" in summaries[workers[by_title["Lingers"]]]
        accepted = [e for e in events(repo, run_id) if e["code"] == "RUN_HANDOFF_ACCEPTED"]
        assert accepted == []  # the interim answer goes to the agent only: the run's record is the delivery
    finally:
        stop(repo, run_id)
