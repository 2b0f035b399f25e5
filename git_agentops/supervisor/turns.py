"""Letting an agent end its turn before it is stopped, so its host prints what the generation used.

A handoff or a finalize is answered at once (``RUN_HANDOFF_ACCEPTED`` / ``RUN_FINALIZE_ACCEPTED``: the supervisor
took the commit, verifies it itself, and the agent should end its turn). Agent CLIs print their usage only when a
turn ends -- Codex in ``turn.completed``, opencode in the ``step_finish`` after the step's tools ran, Claude Code
its cost in the final ``result`` -- so an agent stopped inside the call would leave its last generation's spend
uncounted, and ``max_tokens`` / ``max_cost_usd`` would under-count. Each such worker therefore gets ``[run]
turn_grace`` seconds (default :data:`DEFAULT_TURN_GRACE`, at most :data:`MAX_TURN_GRACE`; 0 stops it at once) to exit
by itself; then it is stopped like any other (its process group SIGTERMed, SIGKILLed after the kill grace),
accounted, and what was waiting for it -- the delivery job, the integration -- goes on.

The wait never blocks the loop: each tick :meth:`TurnEnds.finish` takes the workers whose process ended or whose
grace ran out. What the commit being delivered is was fixed when the request was taken, so an agent that goes on
working during its grace changes nothing that is verified. A supervisor that dies meanwhile leaves a worker
``handing-off`` with a process: its successor stops it and restarts the generation (:meth:`Workers.reconcile`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..model.policy import Policy
from ..model.run import Worker

DEFAULT_TURN_GRACE: Final = 15.0
MAX_TURN_GRACE: Final = 120.0


def turn_grace(policy: Policy) -> float:
    """``[run] turn_grace`` in seconds, bounded to ``[0, MAX_TURN_GRACE]`` (the schema refuses more)."""
    value = policy.doc["run"].get("turn_grace", DEFAULT_TURN_GRACE)
    return max(0.0, min(float(value), MAX_TURN_GRACE))


@dataclass(frozen=True, slots=True)
class Ending:
    """A worker given until ``deadline`` (monotonic) to end its turn; ``then`` gets its accounting once stopped."""

    worker: Worker
    deadline: float
    then: Callable[[Mapping[str, Any], bool], None]


class TurnEnds:
    """The workers ending their turn, and how to stop one (``kill``) and tell whether its process ended."""

    def __init__(
        self, kill: Callable[[Worker], dict[str, Any]], ended: Callable[[Worker], bool], log: Callable[[str], None]
    ) -> None:
        self.kill = kill
        self.ended = ended
        self.log = log
        self.pending: dict[str, Ending] = {}

    def __contains__(self, worker_id: object) -> bool:
        return worker_id in self.pending

    def end(self, worker: Worker, grace: float, then: Callable[[Mapping[str, Any], bool], None]) -> None:
        """Give ``worker`` ``grace`` seconds to end its turn, then stop it and call ``then(accounted, by_itself)``;
        at once when the grace is 0."""
        self.pending[worker.worker_id] = Ending(worker, time.monotonic() + grace, then)
        if grace <= 0:
            self.finish(worker_id=worker.worker_id, now=True)

    def finish(self, *, now: bool = False, worker_id: str | None = None) -> None:
        """Stop and account every worker whose turn ended or whose grace ran out (all of them when ``now``)."""
        for wid, ending in list(self.pending.items()):
            if worker_id is not None and wid != worker_id:
                continue
            by_itself = self.ended(ending.worker)
            if not (by_itself or now or time.monotonic() >= ending.deadline):
                continue
            del self.pending[wid]
            if not by_itself:
                self.log(f"{wid}: still running after its turn grace; stopping it")
            ending.then(self.kill(ending.worker), by_itself)
