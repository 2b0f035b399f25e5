"""The supervisor's view of run state: read once per journal commit, written only by CAS mutations.

Reading and validating ``run.json``, every worker and every task on each loop tick would cost the supervisor CPU
in proportion to the size of the run; so a :class:`StateCache` parses a snapshot once and serves it until the
journal's tip moves. It belongs to the loop thread (it is not thread-safe); job threads read state through their
own repository handle. Mutations go through :func:`git_agentops.runs.state.mutate` (compare-and-swap with
whole-operation retry).

Only state the supervisor wrote is served: a new tip is authenticated (one HMAC), and so is the policy binding's
tip whenever the state moved. A foreign tip on either is contained there and then (:mod:`~git_agentops.runs.tamper`):
the last authentic state is restored with the run blocked, so the loop stops the run exactly as for any other
block; :attr:`StateCache.contained` keeps what was done and ``log`` says it. A tip that cannot be
contained (no authentic commit at all) raises ``RUN_STATE_TAMPERED``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..gitstore.journal import Journal, JournalTampered, Snapshot
from ..gitstore.refs import read_ref
from ..gitstore.repo import Store
from ..model.run import Run, Worker
from ..model.task import Task
from ..runs import state as runstate
from ..runs import tamper


class StateCache:
    """One run's parsed state, refreshed when its journal's tip moves."""

    def __init__(self, store: Store, run_id: str, *, log: Callable[[str], None] | None = None) -> None:
        self.store = store
        self.run_id = run_id
        self.log = log or (lambda message: None)
        self.journal = runstate.journal(store, run_id)
        self.policy = Journal(store, runstate.policy_ref(run_id))
        self.contained: list[tamper.Containment] = []
        self._tip: str | None = None
        self._policy_tip: str | None = None
        self._view: runstate.RunView | None = None
        self._run: Run | None = None
        self._workers: dict[str, Worker] | None = None
        self._tasks: dict[str, Task] | None = None
        self._answers: list[dict[str, Any]] | None = None

    def refresh(self) -> bool:
        """Re-read when the journal moved; True if it did. A foreign tip is contained first (see the module
        docstring); ``RUN_STATE_TAMPERED`` when it cannot be."""
        tip = read_ref(self.store, self.journal.ref)
        if tip == self._tip and self._view is not None:
            return False
        try:
            snapshot = self._read()
        except JournalTampered as exc:
            done = tamper.contain(self.store, self.run_id)
            self.contained += done
            for containment in done:
                self.log(f"{tamper.CODE}: {containment.describe()}")
            if not all(c.restored for c in done):
                raise runstate.tampered(exc, self.run_id) from exc
            snapshot = self._read()
        self._tip = snapshot.commit
        self._view = runstate.RunView(snapshot)
        self._run = self._workers = self._tasks = None
        self._answers = None
        return True

    def _read(self) -> Snapshot:
        """The state at an authentic tip, after checking the policy binding's tip if it moved."""
        policy = read_ref(self.store, self.policy.ref)
        if policy != self._policy_tip:
            self.policy.read()
            self._policy_tip = policy
        return self.journal.read()

    @property
    def view(self) -> runstate.RunView:
        if self._view is None:
            self.refresh()
        assert self._view is not None
        return self._view

    def run(self) -> Run:
        if self._run is None:
            self._run = self.view.run()
        return self._run

    def workers(self) -> dict[str, Worker]:
        if self._workers is None:
            self._workers = {w.worker_id: w for w in self.view.workers()}
        return self._workers

    def tasks(self) -> dict[str, Task]:
        if self._tasks is None:
            self._tasks = self.view.tasks()
        return self._tasks

    def answers(self) -> list[dict[str, Any]]:
        if self._answers is None:
            self._answers = list(self.view.questions())
        return self._answers
