"""Keeping every worker's instructions current.

A worker's ``instructions.json`` (and prompt) describe run state it acts on; when that state changes -- its
generation, the contract hash, the task list and statuses, an answer -- the file is rewritten. To keep the loop
cheap, :class:`Briefing` remembers what each worker's file was written from and rewrites only when that changed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import AgentOpsError
from ..model.run import Role, Worker, WorkerStatus
from ..protocol import instructions, mailbox
from .cache import StateCache


class Briefing:
    """Writes instructions from the loop thread's state cache; ``recipe`` is the scripted run's recipe, if any."""

    def __init__(self, state: StateCache, recipe: Path, log: Callable[[str], None]) -> None:
        self.state = state
        self.recipe = recipe
        self.log = log
        self._written_from: dict[str, tuple[Any, ...]] = {}
        self.policy: dict[str, Any] = {}
        """The instructions' ``policy`` section but its config hash: who approves changes, the run's transitions."""

    def _relevant(self, worker: Worker) -> tuple[Any, ...]:
        """What a worker's instructions depend on: rewrite them only when this changes."""
        run = self.state.run()
        answers = sum(1 for q in self.state.answers() if q.get("answer") is not None)
        tasks = self.state.tasks()
        if worker.role is Role.COORDINATOR:
            seen: tuple[Any, ...] = (
                run.contract_hash,
                *sorted((t.id, str(t.status), t.revision) for t in tasks.values()),
            )
        else:
            own = tasks.get(worker.task_id or "")
            seen = (str(own.status), own.revision) if own else ()
        policy = (run.policy_config_hash, repr(self.policy))
        return (run.root_task_id, str(run.status), worker.generation, worker.diagnostic, answers, seen, policy)

    def write(self, worker: Worker) -> dict[str, Any]:
        """Write the worker's instructions now; returns the document."""
        recipe = self.recipe if self.recipe.exists() else None
        doc = instructions.instructions(
            self.state.run(), worker, self.state.tasks(), self.state.answers(), recipe, self.policy
        )
        mailbox.write_instructions(Path(worker.worktree), doc)
        self._written_from[worker.worker_id] = self._relevant(worker)
        return doc

    def refresh(self, busy: Callable[[str], bool]) -> None:
        """Rewrite a running worker's instructions when the state they describe changed (not while a job holds it)."""
        for worker in self.state.workers().values():
            if worker.status not in (WorkerStatus.RUNNING, WorkerStatus.IDLE) or busy(worker.worker_id):
                continue
            if self._written_from.get(worker.worker_id) != self._relevant(worker):
                try:
                    self.write(worker)
                except AgentOpsError as exc:
                    self.log(f"{worker.worker_id}: cannot write instructions: {exc}")
