"""A run made active again while its supervisor lets go of it is never left without one.

``resume`` (and ``answer``) writes the run's status, then starts a supervisor unless one holds the run's lock. A
holder that is stopping -- its run paused or blocked, its jobs finishing, its lease being released -- used to be
taken for a serving one: the resume said "its supervisor is already running", the holder exited, and the active
run had nobody. Invariants: the holder says it is stopping (``runs/<run>/supervisor.stopping``) before it reads the
run's status one last time, and serves the run again if it was resumed; a starter that finds the lock held waits
for a stopping holder (to start its own once the lock is free, or to find the run served again), and takes a holder
that is not stopping as serving.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from git_agentops.clock import FixedClock
from git_agentops.errors import RunNotActive, SupervisorActive
from git_agentops.gitstore.private import file_lock
from git_agentops.gitstore.repo import Store
from git_agentops.model.run import RunStatus
from git_agentops.runs import controls
from git_agentops.runs.state import STOPPING, run_dir
from git_agentops.supervisor import spawn
from git_agentops.supervisor.loop import Supervisor

from ..fakes import RUN, new_run


def _supervisor(repo_path: Path, store: Store, clock: FixedClock) -> Supervisor:
    loop = new_run(repo_path, store, clock)
    return Supervisor(store, RUN, policy=loop.policy, trust=loop.ctx.trust, environ={}, clock=clock)


@pytest.mark.parametrize("leaving", ["refusing", "stopping"])
def test_a_run_resumed_while_its_supervisor_stops_is_served_again(
    repo_path: Path, store: Store, clock: FixedClock, monkeypatch: pytest.MonkeyPatch, leaving: str
) -> None:
    """``refusing``: a supervisor started for a paused run refuses it (``RUN_NOT_ACTIVE``) while the run is resumed;
    ``stopping``: the loop stopped its workers for a paused run, and its last read already sees the resumed run."""
    supervisor = _supervisor(repo_path, store, clock)
    controls.pause(store, RUN)
    seen: list[RunStatus] = []
    real = Supervisor._serve_locked

    def serve_locked(self: Supervisor) -> RunStatus:
        seen.append(self.current_run().status)
        if len(seen) > 1:
            return RunStatus.COMPLETE  # served this time (the loop itself has its own tests)
        if leaving == "stopping":
            controls.resume(store, RUN, clock)  # a person's resume finds the lock held and counts on this one
            return self.current_run().status  # what the loop returns: the status it read last
        try:
            return real(self)  # the run is paused: the supervisor refuses it
        finally:  # ... and a person's resume lands now, finds the lock held and counts on this supervisor
            assert not (self.dir / STOPPING).exists()
            controls.resume(store, RUN, clock)

    monkeypatch.setattr(Supervisor, "_serve_locked", serve_locked)
    assert supervisor.serve() is RunStatus.COMPLETE
    assert seen == [RunStatus.PAUSED, RunStatus.ACTIVE]
    assert not (supervisor.dir / STOPPING).exists()


def test_a_supervisor_leaving_a_run_nobody_resumed_says_it_is_stopping_and_goes(
    repo_path: Path, store: Store, clock: FixedClock
) -> None:
    supervisor = _supervisor(repo_path, store, clock)
    controls.pause(store, RUN)
    with pytest.raises(RunNotActive):
        supervisor.serve()
    assert (supervisor.dir / STOPPING).is_file()  # left behind: it means nothing without the lock held
    assert spawn._lock_free(supervisor.dir, RUN)


def _hold(directory: Path, *, stopping: bool, then: str, after: float) -> threading.Thread:
    """Another supervisor holding ``directory``'s lock; after ``after`` s it ``release``s the lock, or ``serves``
    again (removes its stopping marker and keeps the lock for a while)."""
    held, done = threading.Event(), threading.Event()

    def holder() -> None:
        with file_lock(directory, "supervisor.lock", blocking=False):
            if stopping:
                (directory / STOPPING).write_text("1\n")
            held.set()
            time.sleep(after)
            if then == "serves":
                (directory / STOPPING).unlink()
                done.wait(5)

    thread = threading.Thread(target=holder, daemon=True)
    thread.start()
    held.wait(5)
    thread.done = done  # type: ignore[attr-defined]
    return thread


def test_a_starter_waits_for_a_stopping_holder_and_trusts_a_serving_one(store: Store) -> None:
    directory = run_dir(store, RUN)
    directory.mkdir(parents=True)
    serving = _hold(directory, stopping=False, then="release", after=0.3)
    assert not spawn._lock_free(directory, RUN)  # at once: a holder that is not stopping serves the run
    serving.join()

    leaving = _hold(directory, stopping=True, then="release", after=0.3)
    started = time.monotonic()
    assert spawn._lock_free(directory, RUN)  # it waited for the lock to be let go
    assert time.monotonic() - started >= 0.25
    leaving.join()

    staying = _hold(directory, stopping=True, then="serves", after=0.3)
    assert not spawn._lock_free(directory, RUN)  # the holder read the resumed run and serves it
    staying.done.set()  # type: ignore[attr-defined]
    staying.join()

    stuck = _hold(directory, stopping=True, then="release", after=0.8)
    with pytest.raises(SupervisorActive, match="said it was stopping"):
        spawn._lock_free(directory, RUN, timeout=0.3)
    stuck.join()
