"""Service instances a workspace's tests need -- a database server, Redis -- started before it and stopped with it.

A ``[[worktree.services]]`` entry (:class:`~git_agentops.model.workspace.ServiceSpec`) is an argv to start a
server in the foreground, an argv that exits 0 once it answers, and optionally ``init`` (run once per data
directory), ``stop`` (a clean shutdown before the signals) and ``attach``/``detach`` (a run-scoped server's
per-workspace database). What this module guarantees, and why:

* **Its own process group.** The server starts in a new session (``start_new_session=True``), so it leads a group
  of its own and stopping it is :func:`~git_agentops.process.groups.terminate_group`: SIGTERM to the whole group,
  a grace period, SIGKILL until nothing of it is left -- descendants that moved to a session of their own while
  their parent lived included (PostgreSQL's postmaster puts each child in its own session). A server that
  daemonizes itself (``pg_ctl start``, ``redis-server --daemonize yes``) leaves the group and
  cannot be stopped this way -- ``start`` must stay in the foreground.
* **Recorded before it is waited for.** The instance (pid, group, start time, the expanded ``stop`` argv, its
  environment and data directory) is written to a 0600 JSON file in ``state_dir`` right after the spawn, before
  readiness is polled: a supervisor killed with ``kill -9`` at any later point leaves a record, and
  :func:`stop_recorded` -- after a crash, on resume, at cleanup -- stops what it names. The record is removed only
  once nothing of the group is alive.
* **Never a recycled pid.** A pid alone does not name a process across time. The record keeps the leader's start
  time (``/proc/<pid>/stat`` field 22) and this boot's id; a record whose pid now belongs to a process started at
  another time, or that was written before a reboot, is dropped without signalling anything. Once the leader has
  exited, members of its group still count as ours only if they started after it (a group id is not given out
  again while any member of the group lives).
* **Failures name the log.** The server's stdout and stderr go to ``<log_dir>/<name>.log`` (appended to); a server
  that exits before it is ready (``SERVICE_EXITED``), or is not ready within ``ready_timeout``
  (``SERVICE_NOT_READY``), is stopped and the error carries the tail of what it wrote this time.

Readiness is polled with a backoff from :data:`READY_FIRST_DELAY` to :data:`READY_MAX_DELAY` seconds, waking at
once when the server exits (a pidfd). Commands run in the data directory, with the caller's environment scrubbed
(:func:`~git_agentops.process.command.scrub_environment`) plus the spec's ``env`` and ``AGENTOPS_SERVICE_PORT``,
``AGENTOPS_SERVICE_DATA`` and the service's own variable (:attr:`ServiceSpec.variable`). Linux only: ``/proc``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..canonical import canonical_bytes
from ..clock import Clock, SystemClock, iso8601
from ..errors import AgentOpsError
from ..gitstore.private import read_private, remove_private, write_private
from ..model.workspace import Argv, ServiceSpec, expand
from ..process.command import CommandResult, run_command, scrub_environment
from ..process.groups import GroupSurvived, boot_id, group_members, process_identity, terminate_group

READY_FIRST_DELAY: Final = 0.05
READY_MAX_DELAY: Final = 0.5
"""Readiness is polled after :data:`READY_FIRST_DELAY` seconds, then twice as long each time, up to this."""

INIT_TIMEOUT: Final = 600.0
"""Seconds ``init`` may take (the spec has no timeout of its own for it: ``initdb`` takes seconds, a seed minutes)."""

TAIL_BYTES: Final = 4096
"""How much of the end of a log or a command's output an error carries."""

INIT_MARKER: Final = ".agentops-init-done"
"""The file in a data directory that says ``init`` completed there. Written only after ``init`` exited 0, so a
data directory is still empty when ``init`` first sees it (``initdb`` refuses one that is not)."""

RECORD_VERSION: Final = 1
_RECORD_PREFIX: Final = "service-"
_UNKNOWN_STATUS: Final = -1000  # a server reaped by someone else (SIGCHLD ignored): it exited, nobody knows how
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True, slots=True)
class Instance:
    """One running service instance: what its record in ``state_dir`` holds (plus, in the process that started it,
    the handle that reaps it)."""

    name: str
    pid: int
    pgid: int  # == pid: the server leads its own group
    start_time: int  # /proc/<pid>/stat field 22: with pid, names this process and no later one
    boot: str | None  # the boot the start time counts from
    port: str | None  # the service_port it was started with (attach fills {service_port} with it)
    argv: Argv
    stop: Argv  # expanded; () when the spec has no stop command
    stop_timeout: float
    env: Mapping[str, str]  # the whole environment its commands run with
    data_dir: Path
    log: Path
    record: Path
    process: subprocess.Popen[bytes] | None = field(default=None, compare=False, repr=False)
    """The child handle, in the process that started it (None when read back from a record)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "version": RECORD_VERSION,
            "service": self.name,
            "pid": self.pid,
            "pgid": self.pgid,
            "startTime": self.start_time,
            "bootId": self.boot,
            "port": self.port,
            "argv": list(self.argv),
            "stop": list(self.stop),
            "stopTimeout": self.stop_timeout,
            "env": dict(self.env),
            "dataDir": str(self.data_dir),
            "log": str(self.log),
        }

    @classmethod
    def from_json(cls, doc: Any, record: Path) -> Instance:
        """The instance a record names; ``SERVICE_FAILED`` when it is not a record :meth:`to_json` wrote."""

        def need(key: str, kind: type | tuple[type, ...]) -> Any:
            value = doc.get(key) if isinstance(doc, dict) else None
            if not isinstance(value, kind) or isinstance(value, bool):
                raise AgentOpsError("SERVICE_FAILED", f"{record} is not a service record: bad or missing {key!r}")
            return value

        if need("version", int) != RECORD_VERSION:
            raise AgentOpsError("SERVICE_FAILED", f"{record} is a service record of another version")
        argv, stop, env = need("argv", list), need("stop", list), need("env", dict)
        if not all(isinstance(a, str) for a in [*argv, *stop, *env, *env.values()]):
            raise AgentOpsError("SERVICE_FAILED", f"{record} is not a service record: argv, stop and env hold strings")
        pid = need("pid", int)
        if pid <= 1 or need("pgid", int) != pid:
            raise AgentOpsError("SERVICE_FAILED", f"{record} is not a service record: pid {pid} is not a group leader")
        return cls(
            name=need("service", str),
            pid=pid,
            pgid=pid,
            start_time=need("startTime", int),
            boot=need("bootId", (str, type(None))),
            port=need("port", (str, type(None))),
            argv=tuple(argv),
            stop=tuple(stop),
            stop_timeout=float(need("stopTimeout", (int, float))),
            env=dict(env),
            data_dir=Path(need("dataDir", str)),
            log=Path(need("log", str)),
            record=record,
        )


# -- starting ---------------------------------------------------------------------------------------------------------


def start(
    spec: ServiceSpec,
    *,
    values: Mapping[str, str],
    data_dir: Path,
    state_dir: Path,
    environ: Mapping[str, str],
    log_dir: Path,
    clock: Clock | None = None,
) -> Instance:
    """Start one instance of ``spec`` and return it once ``spec.ready`` exits 0.

    ``values`` fills the placeholders (``service_port``: the port this instance listens on; ``port``, ``port:K``,
    ``worker``, ``workspace``, ``run``); ``{data}`` is ``data_dir``, created 0700 when missing. ``init`` runs first
    unless it already completed in ``data_dir`` (:data:`INIT_MARKER`). The instance is recorded in ``state_dir``
    before readiness is awaited (see the module docstring); on any failure what was started is stopped and the
    record removed before the error propagates.

    Raises ``SERVICE_FAILED`` (init failed), ``SERVICE_EXITED`` (the server could not start, or exited before it was
    ready: its exit status and log tail), ``SERVICE_NOT_READY`` (not ready within ``ready_timeout``, or the ready
    command cannot start), ``PROCESS_SURVIVED_KILL`` (something of the group outlived SIGKILL while stopping it).
    """
    clock = clock or SystemClock()
    data_dir = Path(os.path.abspath(data_dir))
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    filled = {**values, "data": str(data_dir)}
    env = scrub_environment(environ, _service_env(spec, filled))
    _initialise(spec, filled, data_dir, env, clock)
    argv = _fill(spec.start, filled)
    log, offset, process = _spawn(spec, argv, data_dir, env, log_dir)
    record: Path | None = None
    try:
        identity = process_identity(process.pid)
        if identity is None:  # already exited: nothing to record, its status says why
            status = _exit_status(process.pid)
            raise _exited(spec, process.pid, _UNKNOWN_STATUS if status is None else status, log, offset)
        instance = Instance(
            name=spec.name,
            pid=process.pid,
            pgid=process.pid,
            start_time=identity.start_time,
            boot=boot_id(),
            port=values.get("service_port"),
            argv=argv,
            stop=_fill(spec.stop, filled),
            stop_timeout=spec.stop_timeout,
            env=env,
            data_dir=data_dir,
            log=log,
            record=Path(state_dir) / f"{_RECORD_PREFIX}{_safe(spec.name)}-{process.pid}-{identity.start_time}.json",
            process=process,
        )
        doc = {**instance.to_json(), "startedAt": iso8601(clock.now())}
        record = write_private(state_dir, instance.record.name, canonical_bytes(doc))
        _await_ready(spec, instance, _fill(spec.ready, filled), offset, clock)
    except BaseException as exc:
        _abandon(spec, process, record, exc)
        raise
    return instance


def _initialise(
    spec: ServiceSpec, filled: Mapping[str, str], data_dir: Path, env: Mapping[str, str], clock: Clock
) -> None:
    """Run ``init`` unless it completed in this data directory before; mark it completed. ``SERVICE_FAILED``."""
    marker = data_dir / INIT_MARKER
    if not spec.init or marker.is_file():
        return
    result = run_command(
        _fill(spec.init, filled), cwd=data_dir, env=env, timeout=INIT_TIMEOUT, tail_bytes=TAIL_BYTES, clock=clock
    )
    if not result.ok:
        raise _failed(spec.name, "init", result)
    write_private(data_dir, INIT_MARKER, f"{iso8601(clock.now())}\n".encode())


def _spawn(
    spec: ServiceSpec, argv: Argv, data_dir: Path, env: Mapping[str, str], log_dir: Path
) -> tuple[Path, int, subprocess.Popen[bytes]]:
    """Start the server in its own session, output appended to its log: (log, log size before, process)."""
    log_dir = Path(log_dir)
    log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    log = log_dir / f"{_safe(spec.name)}.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        offset = os.fstat(fd).st_size
        try:
            process = subprocess.Popen(
                argv,
                cwd=data_dir,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=fd,
                start_new_session=True,
                close_fds=True,
            )
        except (OSError, ValueError, subprocess.SubprocessError) as exc:  # ValueError: NUL in argv or env
            raise AgentOpsError(
                "SERVICE_EXITED",
                f"service {spec.name!r} could not start {argv[0]!r}: {exc}",
                details={"service": spec.name, "argv": list(argv)},
            ) from exc
    finally:
        os.close(fd)
    return log, offset, process


def _await_ready(spec: ServiceSpec, instance: Instance, ready: Argv, offset: int, clock: Clock) -> None:
    """Poll ``ready`` with backoff until it exits 0 while the server still runs; ``SERVICE_EXITED`` /
    ``SERVICE_NOT_READY``."""
    deadline = time.monotonic() + spec.ready_timeout
    delay = READY_FIRST_DELAY
    pidfd = _open_pidfd(instance.pid)
    try:
        while True:
            status = _exit_status(instance.pid)
            if status is not None:
                raise _exited(spec, instance.pid, status, instance.log, offset)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _not_ready(spec, instance, offset, f"not ready within {spec.ready_timeout:g}s")
            result = run_command(
                ready, cwd=instance.data_dir, env=instance.env, timeout=remaining, grace=1.0, clock=clock
            )
            if result.spawn_error is not None:
                raise _not_ready(spec, instance, offset, f"its ready command cannot start: {result.spawn_error}")
            if result.ok and _exit_status(instance.pid) is None:  # answered, and not some other server on its port
                return
            _wait_exit(pidfd, min(delay, deadline - time.monotonic()))
            delay = min(delay * 2, READY_MAX_DELAY)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _abandon(spec: ServiceSpec, process: subprocess.Popen[bytes], record: Path | None, cause: BaseException) -> None:
    """A start that failed: stop the whole group, reap the server, forget its record (if it was written). When
    something survives SIGKILL the record stays (a later :func:`stop_recorded` tries again) and
    ``PROCESS_SURVIVED_KILL`` is raised instead of ``cause``."""
    survivors = terminate_group(process.pid, grace=spec.stop_timeout)
    if survivors:
        raise GroupSurvived(f"service {spec.name!r}", process.pid, survivors) from cause
    process.wait()
    if record is not None:
        remove_private(record.parent, record.name)


# -- stopping ---------------------------------------------------------------------------------------------------------


def stop(instance: Instance, *, clock: Clock | None = None) -> bool:
    """Stop one instance: its ``stop`` command (when it still runs), then its whole process group (SIGTERM,
    ``stop_timeout``, SIGKILL); then reap it and remove its record. Whether it was still running.

    Idempotent, and safe on a record read back after a crash: a pid now held by another process (another start
    time), or recorded before a reboot, is never signalled. The group is stopped even when the stop command fails;
    ``SERVICE_FAILED`` is raised afterwards. ``PROCESS_SURVIVED_KILL`` when something outlived SIGKILL (the record
    is kept for a later try).
    """
    clock = clock or SystemClock()
    running = _owns_group(instance)
    failure: AgentOpsError | None = None
    if running and instance.stop and is_running(instance):
        result = run_command(
            instance.stop,
            cwd=instance.data_dir,
            env=instance.env,
            timeout=instance.stop_timeout,
            tail_bytes=TAIL_BYTES,
            clock=clock,
        )
        if not result.ok:
            failure = _failed(instance.name, "stop", result)
    if running:
        survivors = terminate_group(instance.pgid, grace=instance.stop_timeout)
        if survivors:
            raise GroupSurvived(f"service {instance.name!r}", instance.pgid, survivors)
    if instance.process is not None:
        instance.process.wait()
    remove_private(instance.record.parent, instance.record.name)
    if failure is not None:
        raise failure
    return running


def stop_recorded(state_dir: Path, *, clock: Clock | None = None) -> tuple[Instance, ...]:
    """Stop every instance recorded in ``state_dir`` (:func:`stop`) and return those that were still running.

    For after a crash, on resume and at cleanup; idempotent. Every record is dealt with before an error is raised:
    the first one (``SERVICE_FAILED`` for a stop command that failed or a file that is not a record,
    ``PROCESS_SURVIVED_KILL``).
    """
    stopped: list[Instance] = []
    errors: list[AgentOpsError] = []
    for entry in _records(Path(state_dir)):
        try:
            instance = _read_record(Path(state_dir), entry.name)
            if instance is not None and stop(instance, clock=clock):
                stopped.append(instance)
        except AgentOpsError as exc:
            errors.append(exc)
    if errors:
        raise errors[0]
    return tuple(stopped)


def is_running(instance: Instance) -> bool:
    """Whether the instance's server process itself still runs: same pid, same start time, this boot."""
    if instance.boot != boot_id():
        return False
    leader = process_identity(instance.pid)
    return leader is not None and leader.start_time == instance.start_time


def _owns_group(instance: Instance) -> bool:
    """Whether the instance's process group still has live members that are the instance's (see the module
    docstring): never for another boot's record, nor for a pid now held by a process started at another time."""
    if instance.boot != boot_id() or instance.pgid <= 1 or instance.pgid == os.getpgrp():
        return False
    leader = process_identity(instance.pid)
    if leader is not None:
        return leader.start_time == instance.start_time
    # the leader has exited: what is left of its group started after it (a member started before it would be of
    # another group that reused the id -- impossible while ours has a member, but a record may be stale)
    return any(_started_since(pid, instance.start_time) for pid in group_members(instance.pgid))


def _started_since(pid: int, start_time: int) -> bool:
    identity = process_identity(pid)
    return identity is not None and identity.start_time >= start_time


# -- run-scoped services: one per run, a database per workspace -------------------------------------------------------


def attach(
    spec: ServiceSpec,
    instance: Instance,
    values: Mapping[str, str],
    environ: Mapping[str, str],
    *,
    clock: Clock | None = None,
) -> None:
    """Give one workspace its part of a run-scoped instance: run ``spec.attach`` (``createdb ... {workspace}``), with
    ``values`` for that workspace and ``{service_port}``/``{data}`` of the instance; within ``ready_timeout``.
    Nothing to do without an ``attach`` command. ``SERVICE_FAILED`` with the command's output tail."""
    _workspace_step(spec, "attach", spec.attach, instance, values, environ, spec.ready_timeout, clock)


def detach(
    spec: ServiceSpec,
    instance: Instance,
    values: Mapping[str, str],
    environ: Mapping[str, str],
    *,
    clock: Clock | None = None,
) -> None:
    """Take one workspace's part of a run-scoped instance away: run ``spec.detach`` (``dropdb ... {workspace}``)
    as :func:`attach` runs ``attach``, within ``stop_timeout``. ``SERVICE_FAILED`` with the output tail."""
    _workspace_step(spec, "detach", spec.detach, instance, values, environ, spec.stop_timeout, clock)


def _workspace_step(
    spec: ServiceSpec,
    step: str,
    argv: Argv,
    instance: Instance,
    values: Mapping[str, str],
    environ: Mapping[str, str],
    timeout: float,
    clock: Clock | None,
) -> None:
    if not argv:
        return
    filled = {**values, "data": str(instance.data_dir)}
    if instance.port is not None:
        filled["service_port"] = instance.port
    env = scrub_environment(environ, _service_env(spec, filled))
    result = run_command(
        _fill(argv, filled),
        cwd=instance.data_dir,
        env=env,
        timeout=timeout,
        tail_bytes=TAIL_BYTES,
        clock=clock or SystemClock(),
    )
    if not result.ok:
        raise _failed(spec.name, step, result)


def environment(spec: ServiceSpec, port: int) -> dict[str, str]:
    """The variable a workspace's commands find the service on: ``{"AGENTOPS_SERVICE_DB_PORT": "5433"}``."""
    return {spec.variable: str(port)}


# -- helpers ----------------------------------------------------------------------------------------------------------


def _fill(argv: Argv, values: Mapping[str, str]) -> Argv:
    filled = expand(argv, values)
    assert isinstance(filled, tuple)  # an argv list stays one
    return filled


def _safe(name: str) -> str:
    return _UNSAFE.sub("_", name) or "_"


def _service_env(spec: ServiceSpec, filled: Mapping[str, str]) -> dict[str, str]:
    """What a service's commands get on top of the scrubbed environment: the spec's ``env`` (placeholders filled),
    then the port and data directory under fixed names -- ours last, so a policy cannot misname them."""
    extra = {name: _fill((value,), filled)[0] for name, value in spec.env.items()}
    port = filled.get("service_port")
    if port is not None:
        extra["AGENTOPS_SERVICE_PORT"] = port
        extra[spec.variable] = port
    extra["AGENTOPS_SERVICE_DATA"] = filled["data"]
    return extra


def _records(state_dir: Path) -> list[os.DirEntry[str]]:
    if not state_dir.is_dir():
        return []
    with os.scandir(state_dir) as entries:
        return sorted(
            (e for e in entries if e.name.startswith(_RECORD_PREFIX) and e.name.endswith(".json")),
            key=lambda e: e.name,
        )


def _read_record(state_dir: Path, name: str) -> Instance | None:
    data = read_private(state_dir, name)
    if data is None:  # removed meanwhile: stopped by someone else
        return None
    try:
        doc = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AgentOpsError("SERVICE_FAILED", f"{state_dir / name} is not a service record: {exc}") from exc
    return Instance.from_json(doc, state_dir / name)


def _exit_status(pid: int) -> int | None:
    """The server's wait status as ``returncode`` would give it (negative: a signal) once it has exited, without
    reaping it -- its zombie keeps the group id ours until the group is stopped; None while it runs."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped behind our back: exited all the same
        return _UNKNOWN_STATUS
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # an old kernel, or a seccomp filter that refuses it: plain sleeps
        return None


def _wait_exit(pidfd: int | None, seconds: float) -> None:
    """Sleep ``seconds``, waking early when the server exits (its pidfd turns readable)."""
    if seconds <= 0:
        return
    if pidfd is None:
        time.sleep(seconds)
        return
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    poller.poll(int(seconds * 1000) + 1)


def _tail(log: Path, offset: int) -> str:
    """The end of what the server wrote to its log since ``offset`` (this start's part)."""
    with contextlib.suppress(OSError), open(log, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        handle.seek(max(offset, size - TAIL_BYTES))
        return handle.read(TAIL_BYTES).decode("utf-8", "replace")
    return ""


def _describe_status(status: int) -> str:
    if status == _UNKNOWN_STATUS:
        return "exit status unknown"
    return f"exit status {status}" if status >= 0 else f"signal {-status}"


def _exited(spec: ServiceSpec, pid: int, status: int, log: Path, offset: int) -> AgentOpsError:
    tail = _tail(log, offset)
    return AgentOpsError(
        "SERVICE_EXITED",
        f"service {spec.name!r} exited before it was ready ({_describe_status(status)}); its log {log} ends:\n{tail}",
        details={
            "service": spec.name,
            "pid": pid,
            "exitCode": status if status >= 0 else None,
            "signal": -status if _UNKNOWN_STATUS < status < 0 else None,
            "log": str(log),
            "tail": tail,
        },
    )


def _not_ready(spec: ServiceSpec, instance: Instance, offset: int, why: str) -> AgentOpsError:
    tail = _tail(instance.log, offset)
    return AgentOpsError(
        "SERVICE_NOT_READY",
        f"service {spec.name!r} was stopped: {why} ({' '.join(spec.ready)}); its log {instance.log} ends:\n{tail}",
        details={"service": spec.name, "pid": instance.pid, "log": str(instance.log), "tail": tail},
    )


def _failed(name: str, step: str, result: CommandResult) -> AgentOpsError:
    if result.spawn_error is not None:
        why = f"could not start: {result.spawn_error}"
    elif result.timed_out:
        why = "timed out"
    else:
        why = _describe_status(result.exit_code if result.exit_code is not None else -(result.signal or 0))
    tail = result.tail.decode("utf-8", "replace")
    return AgentOpsError(
        "SERVICE_FAILED",
        f"service {name!r}: its {step} command {' '.join(result.argv)!r} failed ({why}); its output ends:\n{tail}",
        details={"service": name, "step": step, "argv": list(result.argv), "exitCode": result.exit_code, "tail": tail},
    )
