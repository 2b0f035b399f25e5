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
from git_agentops.runs.state import RESTART, STOPPING, run_dir
from git_agentops.supervisor import spawn
from git_agentops.supervisor.loop import Supervisor

from ..fakes import RUN, new_run


def _supervisor(repo_path: Path, store: Store, clock: FixedClock, log: list[str] | None = None) -> Supervisor:
    loop = new_run(repo_path, store, clock)
    lines = [] if log is None else log
    return Supervisor(store, RUN, policy=loop.policy, trust=loop.ctx.trust, environ={}, clock=clock, log=lines.append)


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
    with pytest.raises(SupervisorActive, match="said it was stopping") as refused:
        spawn._lock_free(directory, RUN, timeout=0.3)
    assert refused.value.details == {"stopping": True}  # what `resume` fails with instead of "already running"
    stuck.join()


def test_a_serving_supervisor_asked_to_restart_stops_its_loop_and_serves_the_run_from_the_start(
    repo_path: Path, store: Store, clock: FixedClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume of a stopped run that finds a supervisor serving it (its loop has not seen the stop: the resume
    landed between the status write and its next look) asks it to restart, as a new supervisor would have: its loop
    ends with its workers stopped and its jobs done, and it serves the run again from the start -- where an
    interrupted integration is rolled forward."""
    log: list[str] = []
    supervisor = _supervisor(repo_path, store, clock, log)
    supervisor.dir.mkdir(parents=True, exist_ok=True)
    starts: list[RunStatus] = []

    def serve_locked(self: Supervisor) -> RunStatus:
        starts.append(self.current_run().status)
        if len(starts) > 1:
            return RunStatus.COMPLETE
        assert not (self.dir / RESTART).exists()  # a start is the restart asked for: an older request is gone
        (self.dir / RESTART).write_text("resumed\n")  # what `resume` writes meanwhile
        return self._loop()

    monkeypatch.setattr(Supervisor, "_serve_locked", serve_locked)
    (supervisor.dir / RESTART).write_text("an old request\n")
    assert supervisor.serve() is RunStatus.COMPLETE
    assert starts == [RunStatus.ACTIVE, RunStatus.ACTIVE]
    assert not (supervisor.dir / RESTART).exists()
    assert any("was resumed: its workers start again" in line for line in log)


@pytest.mark.parametrize("restart", [True, False])
def test_a_resume_from_a_stop_asks_a_serving_supervisor_to_restart(store: Store, restart: bool) -> None:
    directory = run_dir(store, RUN)
    directory.mkdir(parents=True)
    serving = _hold(directory, stopping=False, then="release", after=0.3)
    with pytest.raises(SupervisorActive):
        spawn.spawn_supervisor(store, RUN, cwd=store.workdir, env={}, restart=restart)
    assert (directory / RESTART).exists() is restart
    serving.join()


def test_resume_fails_when_a_stopping_supervisor_never_lets_the_run_go(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a holder that serves the run is "already running"; one that said it was stopping and kept the lock past
    the wait fails the resume with its own message (the run would otherwise be active with nobody serving it)."""
    from types import SimpleNamespace

    from git_agentops.cli import spawn as cli_spawn
    from git_agentops.errors import AgentOpsError

    def refused(details: dict[str, bool]) -> object:
        def spawn_supervisor(*args: object, **kwargs: object) -> None:
            raise AgentOpsError("RUN_SUPERVISOR_ACTIVE", "held", details=details)

        return spawn_supervisor

    ctx = SimpleNamespace(store=lambda: None, cwd=Path("."), env={})
    lines: list[str] = []
    monkeypatch.setattr(cli_spawn, "spawn_supervisor", refused({}))
    cli_spawn.supervise_in_background(ctx, RUN, {}, lines)  # type: ignore[arg-type]
    assert lines == ["its supervisor is already running"]
    monkeypatch.setattr(cli_spawn, "spawn_supervisor", refused({"stopping": True}))
    with pytest.raises(SupervisorActive, match="held"):
        cli_spawn.supervise_in_background(ctx, RUN, {}, lines)  # type: ignore[arg-type]
