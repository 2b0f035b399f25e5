"""Service instances against real servers -- Redis and PostgreSQL 15 -- and against commands that fail on purpose.

Every server listens on 127.0.0.1 on a port the test found free (bound to port 0), keeps its data under the test's
own directories, and is stopped by the test (or, should it fail, by the ``state_dir`` fixture's
:func:`~git_agentops.workspace.services.stop_recorded`): nothing outlives a test. Synchronisation is by what the
processes say (a line on a pipe, a FIFO), never by sleeping.

PostgreSQL refuses to run as root, and CI runs the tests as root: there its commands run as ``nobody`` through
``setpriv``, its data directory is under a directory of ``/tmp`` that ``nobody`` may traverse (pytest's own
``tmp_path`` is 0700), and ``init`` hands the data directory over to ``nobody`` before ``initdb``.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from git_agentops.errors import AgentOpsError
from git_agentops.model.workspace import Scope, ServiceSpec
from git_agentops.process.groups import boot_id, group_members, process_identity
from git_agentops.workspace import services
from git_agentops.workspace.services import INIT_MARKER, Instance
from tests.conftest import ROOT
from tests.helpers import require_tool

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PG_INSTALL = "apt-get install postgresql-15"
REDIS_INSTALL = "apt-get install redis-server"


# -- fixtures and helpers ---------------------------------------------------------------------------------------------


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    """Where instances are recorded; whatever a failing test left running is stopped from its records."""
    path = tmp_path / "state"
    yield path
    services.stop_recorded(path)


@pytest.fixture
def pg_base() -> Iterator[Path]:
    """A directory for PostgreSQL data that ``nobody`` may traverse (0711), with a short path (its socket lives
    there: at most 107 bytes), removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="agentops-pg-", dir="/tmp"))
    base.chmod(0o711)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def environ() -> dict[str, str]:
    return dict(os.environ)


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports free right now: bound to port 0 together, then released."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_is_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:``port`` (SO_REUSEADDR: a TIME_WAIT left behind does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def values(port: int, workspace: str) -> dict[str, str]:
    """The placeholder values a caller gives for one workspace."""
    return {
        "service_port": str(port),
        "port": str(port),
        "port:0": str(port),
        "worker": "w1",
        "workspace": workspace,
        "run": "run-1",
    }


def start(spec: ServiceSpec, base: Path, name: str, state: Path, port: int = 0) -> Instance:
    """One instance for workspace ``name``: data in ``base/name``, log in ``base/name-log``."""
    return services.start(
        spec,
        values=values(port, name),
        data_dir=base / name,
        state_dir=state,
        environ=environ(),
        log_dir=base / f"{name}-log",
    )


def assert_gone(instance: Instance, port: int | None = None) -> None:
    """Nothing of the instance runs, its record is removed and (when given) its port is free again."""
    assert process_identity(instance.pid) is None
    assert group_members(instance.pgid) == []
    assert not instance.record.exists()
    if port is not None:
        assert port_is_free(port)


def descendants(pid: int) -> list[int]:
    """The live processes descended from ``pid``, by parent links in ``/proc``."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_bytes().rpartition(b")")[2].split()
            except OSError:  # exited meanwhile
                continue
            if fields[0] not in (b"Z", b"X"):
                parents[int(entry.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return sorted(found)


def records(state: Path) -> list[str]:
    return sorted(p.name for p in state.glob("service-*.json")) if state.is_dir() else []


def raises(code: str, call: object, *args: object, **kwargs: object) -> AgentOpsError:
    """The AgentOpsError ``call(*args, **kwargs)`` raises, checked to carry ``code``."""
    assert callable(call)
    with pytest.raises(AgentOpsError) as caught:
        call(*args, **kwargs)
    assert caught.value.code == code, caught.value
    return caught.value


# -- Redis: one per workspace -----------------------------------------------------------------------------------------


def redis_spec() -> ServiceSpec:
    server = require_tool("redis-server", REDIS_INSTALL)
    cli = require_tool("redis-cli", REDIS_INSTALL)
    return ServiceSpec(
        name="cache",
        start=(server, "--port", "{service_port}", "--bind", "127.0.0.1", "--dir", "{data}", "--save", ""),
        ready=(cli, "-h", "127.0.0.1", "-p", "{service_port}", "ping"),
        ready_timeout=20,
        stop_timeout=5,
    )


def redis(port: int, *args: str) -> str:
    cli = require_tool("redis-cli", REDIS_INSTALL)
    done = subprocess.run(
        [cli, "-h", "127.0.0.1", "-p", str(port), *args], capture_output=True, text=True, check=True, timeout=20
    )
    return done.stdout.strip()


def test_redis_per_workspace_instances_are_separate_and_stop_completely(tmp_path: Path, state_dir: Path) -> None:
    spec = redis_spec()
    ports = free_ports(2)
    a, b = (start(spec, tmp_path, name, state_dir, port) for name, port in zip(("ws-a", "ws-b"), ports, strict=True))
    try:
        assert len(records(state_dir)) == 2
        assert (a.port, b.port) == (str(ports[0]), str(ports[1]))
        assert a.pid != b.pid and a.pgid == a.pid
        assert redis(ports[0], "SET", "key", "value-a") == "OK"
        assert redis(ports[1], "GET", "key") == ""  # not there: another server
        assert redis(ports[1], "SET", "key", "value-b") == "OK"
        assert (redis(ports[0], "GET", "key"), redis(ports[1], "GET", "key")) == ("value-a", "value-b")
        assert not port_is_free(ports[0])
    finally:
        stopped = [services.stop(a), services.stop(b)]
    assert stopped == [True, True]
    assert_gone(a, ports[0])
    assert_gone(b, ports[1])
    assert records(state_dir) == []
    assert services.stop(a) is False  # idempotent


def test_environment_names_the_port_for_the_workspace() -> None:
    spec = ServiceSpec(name="my-db", start=("true",), ready=("true",))
    assert services.environment(spec, 5433) == {"AGENTOPS_SERVICE_MY_DB_PORT": "5433"}


# -- PostgreSQL 15 ----------------------------------------------------------------------------------------------------


def pg_tool(name: str) -> str:
    path = PG_BIN / name
    if not path.is_file():
        require_tool(str(path), PG_INSTALL)  # not on PATH: fails in CI, skips elsewhere
    return str(path)


def as_postgres(*argv: str) -> tuple[str, ...]:
    """``argv`` as a user PostgreSQL agrees to run as: ``nobody`` when we are root."""
    if os.geteuid() != 0:
        return argv
    setpriv = require_tool("setpriv", "apt-get install util-linux")
    return (setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--", *argv)


def postgres_spec(**more: object) -> ServiceSpec:
    initdb = as_postgres(pg_tool("initdb"), "-D", "{data}", "-A", "trust", "-U", "postgres", "-N", "--no-locale")
    if os.geteuid() == 0:  # the data directory (created 0700 by start) becomes nobody's first
        initdb = ("sh", "-c", 'chown nobody "$1" && shift && exec "$@"', "sh", "{data}", *initdb)
    server = (pg_tool("postgres"), "-D", "{data}", "-k", "{data}", "-h", "127.0.0.1", "-p", "{service_port}")
    return ServiceSpec(
        name="db",
        init=initdb,
        start=as_postgres(*server, "-c", "fsync=off", "-c", "shared_buffers=16MB"),
        ready=(pg_tool("pg_isready"), "-q", "-h", "127.0.0.1", "-p", "{service_port}", "-U", "postgres"),
        stop=as_postgres(pg_tool("pg_ctl"), "stop", "-D", "{data}", "-m", "fast", "-w", "-t", "20"),
        ready_timeout=30,
        stop_timeout=20,
        **more,  # type: ignore[arg-type]
    )


def psql(port: str | None, database: str, *args: str) -> str:
    assert port is not None
    connect = ("-h", "127.0.0.1", "-p", port, "-U", "postgres", "-d", database)
    done = subprocess.run(
        [pg_tool("psql"), "-X", "-At", "-v", "ON_ERROR_STOP=1", *connect, *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def sql(port: str | None, database: str, statement: str) -> str:
    return psql(port, database, "-c", statement)


def databases(port: str | None) -> set[str]:
    return {line.split("|")[0] for line in psql(port, "postgres", "-l").splitlines()}


def test_postgres_per_workspace_keeps_each_workspace_s_tables_apart(pg_base: Path, state_dir: Path) -> None:
    spec = postgres_spec()
    ports = free_ports(2)
    with ThreadPoolExecutor(2) as pool:  # two workspaces made at once, as a supervisor makes them: half the wait
        a, b = pool.map(lambda name, port: start(spec, pg_base, name, state_dir, port), ("ws-a", "ws-b"), ports)
    try:
        assert (pg_base / "ws-a" / INIT_MARKER).is_file()
        sql(a.port, "postgres", "CREATE TABLE notes (body text)")
        sql(a.port, "postgres", "INSERT INTO notes VALUES ('from a')")
        assert sql(a.port, "postgres", "SELECT body FROM notes") == "from a"
        assert sql(b.port, "postgres", "SELECT to_regclass('notes')") == ""  # NULL: no such table there
        sql(b.port, "postgres", "CREATE TABLE notes (body text)")
        sql(b.port, "postgres", "INSERT INTO notes VALUES ('from b')")
        assert sql(b.port, "postgres", "SELECT body FROM notes") == "from b"
        assert sql(a.port, "postgres", "SELECT count(*) FROM notes") == "1"
        children = descendants(a.pid)
        assert children  # the postmaster's background processes, each in a session of its own: stopped with it
    finally:
        services.stop(a)
        services.stop(b)
    assert_gone(a, ports[0])
    assert_gone(b, ports[1])
    assert all(process_identity(pid) is None for pid in children)
    assert records(state_dir) == []


def test_postgres_run_scoped_gives_each_workspace_its_own_database(pg_base: Path, state_dir: Path) -> None:
    createdb, dropdb = pg_tool("createdb"), pg_tool("dropdb")
    target = ("-h", "127.0.0.1", "-p", "{service_port}", "-U", "postgres", "{workspace}")
    spec = postgres_spec(scope=Scope.RUN, attach=(createdb, *target), detach=(dropdb, *target))
    [port] = free_ports(1)
    run = services.start(
        spec,
        values={"service_port": str(port), "run": "run-1"},
        data_dir=pg_base / "run",
        state_dir=state_dir,
        environ=environ(),
        log_dir=pg_base / "run-log",
    )
    try:
        for workspace in ("ws_a", "ws_b"):
            services.attach(spec, run, {"workspace": workspace, "worker": "w1", "run": "run-1"}, environ())
        assert {"ws_a", "ws_b"} <= databases(run.port)
        sql(run.port, "ws_a", "CREATE TABLE notes (body text); INSERT INTO notes VALUES ('a')")
        assert sql(run.port, "ws_a", "SELECT body FROM notes") == "a"
        assert sql(run.port, "ws_b", "SELECT to_regclass('notes')") == ""
        failed = raises("SERVICE_FAILED", services.attach, spec, run, {"workspace": "ws_a"}, environ())
        assert "already exists" in failed.details["tail"]
        services.detach(spec, run, {"workspace": "ws_a"}, environ())
        assert "ws_a" not in databases(run.port)
        assert "ws_b" in databases(run.port)
        services.detach(spec, run, {"workspace": "ws_b"}, environ())
        assert not {"ws_a", "ws_b"} & databases(run.port)
        failed = raises("SERVICE_FAILED", services.detach, spec, run, {"workspace": "ws_b"}, environ())
        assert failed.details["step"] == "detach"
    finally:
        services.stop(run)
    assert_gone(run, port)


# -- commands that fail -----------------------------------------------------------------------------------------------


def sleeper(**more: object) -> ServiceSpec:
    """A stand-in server: ``sleep``, ready at once unless told otherwise."""
    fields: dict[str, object] = {"name": "sleeper", "start": ("sleep", "300"), "ready": ("true",), "stop_timeout": 5}
    fields.update(more)
    return ServiceSpec(**fields)  # type: ignore[arg-type]


def test_a_server_that_exits_at_once_is_service_exited_with_its_log_tail(tmp_path: Path, state_dir: Path) -> None:
    spec = sleeper(start=("sh", "-c", "echo 'FATAL: no config' >&2; exit 3"), ready=("false",), ready_timeout=60)
    began = time.monotonic()
    error = raises("SERVICE_EXITED", start, spec, tmp_path, "ws", state_dir)
    assert time.monotonic() - began < 5
    assert error.details["exitCode"] == 3
    assert "FATAL: no config" in error.details["tail"] and "FATAL: no config" in error.message
    assert records(state_dir) == []


def test_a_server_that_cannot_start_is_service_exited(tmp_path: Path, state_dir: Path) -> None:
    error = raises("SERVICE_EXITED", start, sleeper(start=(str(tmp_path / "missing"),)), tmp_path, "ws", state_dir)
    assert "missing" in error.message
    assert records(state_dir) == []


def test_a_server_never_ready_is_stopped_and_service_not_ready(tmp_path: Path, state_dir: Path) -> None:
    spec = sleeper(start=("sh", "-c", "echo starting; exec sleep 60"), ready=("false",), ready_timeout=1)
    began = time.monotonic()
    error = raises("SERVICE_NOT_READY", start, spec, tmp_path, "ws", state_dir)
    assert time.monotonic() - began < 8
    assert "starting" in error.details["tail"]
    pid = error.details["pid"]
    assert process_identity(pid) is None and group_members(pid) == []
    assert records(state_dir) == []


def test_an_init_that_fails_is_service_failed_and_nothing_starts(tmp_path: Path, state_dir: Path) -> None:
    spec = sleeper(init=("sh", "-c", "echo 'cannot initialise'; exit 2"))
    error = raises("SERVICE_FAILED", start, spec, tmp_path, "ws", state_dir)
    assert error.details["step"] == "init" and error.details["exitCode"] == 2
    assert "cannot initialise" in error.details["tail"]
    assert not (tmp_path / "ws" / INIT_MARKER).exists()
    assert not (tmp_path / "ws-log").exists()  # the server was never spawned
    assert records(state_dir) == []


def test_init_runs_once_per_data_directory_and_the_record_names_the_instance(tmp_path: Path, state_dir: Path) -> None:
    spec = sleeper(init=("sh", "-c", 'echo "$AGENTOPS_SERVICE_PORT" >> inits'), stop=("sh", "-c", "echo bye > stopped"))
    for _ in range(2):
        instance = start(spec, tmp_path, "ws", state_dir, port=4321)
        [name] = records(state_dir)
        doc = json.loads((state_dir / name).read_text())
        assert (doc["pid"], doc["pgid"], doc["startTime"]) == (instance.pid, instance.pid, instance.start_time)
        assert doc["stop"] == ["sh", "-c", "echo bye > stopped"] and doc["dataDir"] == str(tmp_path / "ws")
        assert (state_dir / name).stat().st_mode & 0o777 == 0o600
        assert services.stop(instance)
        assert_gone(instance)
        assert (tmp_path / "ws" / "stopped").read_text() == "bye\n"
    assert (tmp_path / "ws" / "inits").read_text() == "4321\n"


ORPHANING_STARTER = """
import sys
from pathlib import Path
from git_agentops.model.workspace import ServiceSpec
from git_agentops.workspace import services

data, state, log, fifo = map(Path, sys.argv[1:])
spec = ServiceSpec(
    name="orphan",
    start=("sleep", "300"),
    ready=("sh", "-c", 'echo polled > "$0"; exit 1', str(fifo)),
    ready_timeout=120,
)
services.start(spec, values={}, data_dir=data, state_dir=state, environ={"PATH": "/usr/bin:/bin"}, log_dir=log)
"""


def wait_for_line(fifo: Path, watched: subprocess.Popen[bytes], timeout: float) -> bytes:
    """A line from ``fifo`` -- or a failure when ``watched`` exits first or ``timeout`` passes."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        assert watched.stderr is not None
        poller.register(watched.stderr.fileno(), select.POLLIN | select.POLLHUP)
        for ready_fd, _ in poller.poll(timeout * 1000):
            if ready_fd == fd:
                return os.read(fd, 100)
        raise AssertionError(f"no line on the FIFO; the starter said {watched.stderr.read()!r}")
    finally:
        os.close(fd)


def test_stop_recorded_stops_the_server_of_a_starter_killed_with_sigkill(tmp_path: Path, state_dir: Path) -> None:
    fifo = tmp_path / "polled"
    os.mkfifo(fifo)
    argv: Sequence[str] = [sys.executable, "-c", ORPHANING_STARTER, *(str(tmp_path / d) for d in ("data", "state"))]
    starter = subprocess.Popen(
        [*argv, str(tmp_path / "log"), str(fifo)], cwd=ROOT, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        assert wait_for_line(fifo, starter, timeout=60) == b"polled\n"  # readiness is being polled: recorded already
    finally:
        starter.send_signal(signal.SIGKILL)
        starter.wait()
        assert starter.stderr is not None
        starter.stderr.close()
    [name] = records(state_dir)
    recorded = json.loads((state_dir / name).read_text())
    orphan = process_identity(recorded["pid"])
    assert orphan is not None and orphan.start_time == recorded["startTime"]  # the server outlived its starter
    [stopped] = services.stop_recorded(state_dir)
    assert (stopped.pid, stopped.name) == (orphan.pid, "orphan")
    assert_gone(stopped)
    assert services.stop_recorded(state_dir) == ()  # idempotent


@pytest.mark.parametrize("stale", ["start time", "boot"])
def test_stop_recorded_never_signals_a_reused_pid(tmp_path: Path, state_dir: Path, stale: str) -> None:
    """A record whose pid now names another process -- started at another time, or recorded before a reboot -- is
    dropped; the process is left alone."""
    unrelated = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        identity = process_identity(unrelated.pid)
        assert identity is not None
        fake = Instance(
            name="db",
            pid=unrelated.pid,
            pgid=unrelated.pid,
            start_time=identity.start_time - 1 if stale == "start time" else identity.start_time,
            boot=boot_id() if stale == "start time" else "a-boot-long-ago",
            port="5432",
            argv=("postgres",),
            stop=("sh", "-c", f"kill {unrelated.pid}"),
            stop_timeout=1,
            env={"PATH": "/usr/bin:/bin"},
            data_dir=tmp_path,
            log=tmp_path / "db.log",
            record=state_dir / f"service-db-{unrelated.pid}-1.json",
        )
        state_dir.mkdir()
        fake.record.write_text(json.dumps(fake.to_json()))
        assert services.stop_recorded(state_dir) == ()
        assert unrelated.poll() is None and process_identity(unrelated.pid) == identity
        assert records(state_dir) == []
    finally:
        unrelated.kill()
        unrelated.wait()


def test_stop_recorded_deals_with_every_record_before_refusing_a_damaged_one(tmp_path: Path, state_dir: Path) -> None:
    instance = start(sleeper(), tmp_path, "ws", state_dir)
    (state_dir / "service-broken-1-1.json").write_text('{"version": 1, "pid": "one"}')
    error = raises("SERVICE_FAILED", services.stop_recorded, state_dir)
    assert "service-broken-1-1.json" in error.message
    assert_gone(instance)
    (state_dir / "service-broken-1-1.json").unlink()


def test_a_failing_stop_command_is_service_failed_after_the_server_is_stopped(tmp_path: Path, state_dir: Path) -> None:
    instance = start(sleeper(stop=("sh", "-c", "echo 'stop refused'; exit 4")), tmp_path, "ws", state_dir)
    error = raises("SERVICE_FAILED", services.stop, instance)
    assert (error.details["step"], error.details["exitCode"]) == ("stop", 4)
    assert "stop refused" in error.details["tail"]
    assert_gone(instance)
    assert services.stop(instance) is False
