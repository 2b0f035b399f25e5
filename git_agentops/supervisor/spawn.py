"""Start a detached supervisor for a run and wait until it serves it (``run start --detach``, ``resume``).

The supervisor is handed to the user's service manager where one is available -- a transient systemd user unit,
a launchd agent -- which starts it again after a crash; elsewhere (or with ``AGENTOPS_SUPERVISOR_MANAGER=process``)
it is a process in a session of its own, as before. :mod:`git_agentops.service.manager` says which, and why those
restart rules.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .. import eventkinds as kinds
from ..errors import AgentOpsError, LockHeld, ServiceFailed
from ..service.manager import (
    RECORD,
    Liveness,
    Manager,
    Seen,
    detect,
    release,
    start_launchd,
    start_systemd,
    supervisor_spec,
)

if TYPE_CHECKING:
    from ..gitstore.repo import Store


def _coded(output: str) -> AgentOpsError | None:
    """The supervisor's own last ``error[CODE]: message`` line in ``output``, if it printed one."""
    from ..errors import CODES

    at = output.rfind("error[")
    head, _, message = output[at:].partition("]: ")
    code = head.removeprefix("error[")
    if at >= 0 and (at == 0 or output[at - 1] == "\n") and code in CODES:
        return AgentOpsError(code, message.strip())
    return None


def child_error(output: str, returncode: int | None) -> AgentOpsError:
    """Why a supervisor that was just spawned exited at once: its own ``error[CODE]: message`` where it printed one."""
    return _coded(output) or AgentOpsError(
        "RUN_NOT_ACTIVE", f"the supervisor exited at once ({returncode}):\n{output[-2000:]}"
    )


@dataclass(frozen=True, slots=True)
class Spawned:
    """A detached supervisor that serves the run: its pid (None when it ended at once, the run being over), the
    manager it runs under and the name of its unit or job."""

    pid: int | None
    manager: Manager
    name: str | None = None

    def describe(self) -> str:
        pid = f"pid {self.pid}" if self.pid else "it has ended already"
        if self.manager is Manager.SYSTEMD:
            return f"{pid}; systemd user unit {self.name}, restarted after a crash"
        if self.manager is Manager.LAUNCHD:
            return f"{pid}; launchd agent {self.name}, restarted after a crash"
        return f"{pid}; a detached process, not restarted after a crash"

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"supervisorPid": self.pid, "supervisorManager": str(self.manager)}
        if self.name is not None:
            doc["supervisorUnit"] = self.name
        return doc


class _Handle(Protocol):
    @property
    def manager(self) -> Manager: ...

    def poll(self) -> Seen: ...

    def remove(self) -> None: ...


@dataclass(frozen=True, slots=True)
class _Process:
    child: subprocess.Popen[bytes]
    manager: Manager = Manager.PROCESS

    def poll(self) -> Seen:
        returncode = self.child.poll()
        if returncode is None:
            return Seen(Liveness.RUNNING, self.child.pid)
        return Seen(Liveness.ENDED, self.child.pid, returncode)

    def remove(self) -> None:
        """It exited already (a supervisor left running is never killed here)."""


def spawn_supervisor(store: Store, run_id: str, *, cwd: Path, env: Mapping[str, str], restart: bool = False) -> Spawned:
    """Start a detached supervisor of ``store``'s run ``run_id`` in ``cwd`` with ``env`` and wait until it serves
    the run (its ``RUN_SUPERVISOR_START`` is recorded).

    Holding the lock is not enough: a supervisor refusing the run holds it too, while it stops what a dead one left
    running. ``restart``: the run was just resumed from a stop; a supervisor found serving it is asked to restart
    (:data:`~git_agentops.runs.state.RESTART`), as a new one would. A refusal is raised as the supervisor's own
    error. ``RUN_SUPERVISOR_ACTIVE``, ``RUN_NOT_ACTIVE``, ``RUN_SERVICE_UNAVAILABLE`` (a forced manager missing),
    ``RUN_SERVICE_FAILED`` (the manager refused it).
    """
    from ..gitstore.private import remove_private
    from ..runs.state import journal, run_dir

    choice = detect(env)
    directory = run_dir(store, run_id)
    directory.mkdir(parents=True, exist_ok=True)
    if not _lock_free(directory, run_id):
        if restart:
            from ..gitstore.private import write_private
            from ..runs.state import RESTART

            write_private(directory, RESTART, b"resumed\n")
        raise AgentOpsError("RUN_SUPERVISOR_ACTIVE", f"a supervisor already serves {run_id}")
    events = journal(store, run_id)
    before = next((entry.commit for entry in events.log(limit=1)), None)
    log = directory / "supervisor.out"
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    offset = os.fstat(out).st_size
    spec = supervisor_spec(run_id, common_dir=store.common_dir, cwd=cwd, env=env, log=log)
    handle: _Handle
    try:
        if choice.manager is Manager.SYSTEMD:
            try:
                handle = start_systemd(spec, directory, env)
            except ServiceFailed as exc:
                # a start job fails when the supervisor ended before the manager saw its exec (a loaded machine):
                # what it did -- served and ended, or refused -- says more than the job
                served = _served(events, before, None)
                if served is not None:
                    return Spawned(served, Manager.SYSTEMD)
                raise _coded(_output(log, offset)) or exc from None
        elif choice.manager is Manager.LAUNCHD:
            handle = start_launchd(spec, directory, env)
        else:
            remove_private(directory, RECORD)
            child = subprocess.Popen(
                list(spec.argv),
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
            handle = _Process(child)
    finally:
        os.close(out)
    return _wait(handle, events, before, log, offset, run_id)


def _lock_free(directory: Path, run_id: str, *, timeout: float = 30.0) -> bool:
    """Whether no supervisor holds the run's lock -- waiting, while the holder says it is stopping
    (:data:`~git_agentops.runs.state.STOPPING`), until it lets the lock go or serves the run again. The caller
    wrote the run's status first: a holder that read it serves on, and one that read it before is let go of."""
    from ..gitstore.private import file_lock
    from ..runs.state import STOPPING

    deadline = time.monotonic() + timeout
    while True:
        try:
            with file_lock(directory, "supervisor.lock", blocking=False):
                return True
        except LockHeld:
            if not (directory / STOPPING).exists():
                return False
        if time.monotonic() > deadline:
            raise AgentOpsError(
                "RUN_SUPERVISOR_ACTIVE",
                f"the supervisor of {run_id} said it was stopping and still holds the run after {timeout:.0f} s: "
                f"'git agentops-run resume {run_id}' again once it has exited",
                details={"stopping": True},
            )
        time.sleep(0.05)


def _served(events: Any, before: str | None, pids: set[int] | None) -> int | None:
    """The pid of a supervisor that recorded ``RUN_SUPERVISOR_START`` since ``before`` (one of ``pids``, or any)."""
    for entry in events.log(limit=256):
        if entry.commit == before:
            break
        pid = entry.data.get("pid")
        if entry.code == kinds.RUN_SUPERVISOR_START and isinstance(pid, int) and (pids is None or pid in pids):
            return pid
    return None


def _output(log: Path, offset: int) -> str:
    """What the supervisor printed to its log since ``offset``."""
    with log.open("rb") as handle_out:
        handle_out.seek(offset)
        return handle_out.read().decode("utf-8", "replace")


def _wait(handle: _Handle, events: Any, before: str | None, log: Path, offset: int, run_id: str) -> Spawned:
    name = getattr(handle, "unit", None) or getattr(handle, "label", None)
    pids: set[int] = set()
    pause = 0.05 if handle.manager is Manager.PROCESS else 0.2  # asking a service manager is a process each time
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seen = handle.poll()
        if seen.pid:
            pids.add(seen.pid)
        served = _served(events, before, pids)
        if served is not None:
            return Spawned(served, handle.manager, name)
        if seen.state is not Liveness.RUNNING:
            output = _output(log, offset)
            coded = _coded(output)
            if seen.state is Liveness.ENDED:
                # it served the run and the run ended (complete, or blocked...) already; a service manager keeps
                # no exit status of a collected unit, so there the absence of an error line says so
                if seen.returncode in (0, 1) or (seen.returncode is None and coded is None):
                    return Spawned(seen.pid or max(pids, default=None), handle.manager, name)
                handle.remove()
                raise child_error(output, seen.returncode)
            if coded is not None:  # it failed before serving and waits to be restarted: it would fail again
                handle.remove()
                raise coded
        time.sleep(pause)
    raise AgentOpsError("RUN_NOT_ACTIVE", f"the supervisor of {run_id} did not start within 30 s")


def release_supervisor(store: Store, run_id: str, env: Mapping[str, str]) -> str | None:
    """``run stop``/``pause``: remove the systemd unit or launchd job of the run's supervisor, so it is not started
    again. The unit or job removed, or None (a plain process, or nothing recorded)."""
    from ..runs.state import run_dir

    return release(run_dir(store, run_id), env)
