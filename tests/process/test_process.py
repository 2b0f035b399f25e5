"""run_command and process identity, against real subprocesses: groups, grandchildren, timeouts, output, pids."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from git_agentops.clock import FixedClock
from git_agentops.errors import AgentOpsError
from git_agentops.process import command as process
from git_agentops.process import groups
from git_agentops.process.command import ENV_ALLOWLIST, CommandResult, run_command, scrub_environment
from git_agentops.process.groups import (
    GroupStop,
    GroupSurvived,
    ProcessIdentity,
    boot_id,
    is_alive,
    process_identity,
    terminate_group,
    terminate_process,
)

MARGIN = 1.5  # seconds a timed-out command may take beyond timeout + grace


def env() -> dict[str, str]:
    return scrub_environment(os.environ)


def run(argv: list[str] | str, tmp_path: Path, **kwargs: object) -> CommandResult:
    kwargs.setdefault("timeout", 20.0)
    kwargs.setdefault("clock", FixedClock())
    return run_command(argv, cwd=tmp_path, env=env(), **kwargs)  # type: ignore[arg-type]


def sh(script: str, tmp_path: Path, **kwargs: object) -> CommandResult:
    return run(script, tmp_path, shell=True, **kwargs)


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return raw.rpartition(b")")[2].decode().split()


def zombie_children() -> list[int]:
    """Our own children that exited and were not reaped."""
    found = []
    for entry in os.listdir("/proc"):
        fields = _stat_fields(int(entry)) if entry.isdigit() else None
        if fields is not None and fields[1] == str(os.getpid()) and fields[0] == "Z":
            found.append(int(entry))
    return found


def pids_in(output: bytes) -> list[int]:
    return [int(word) for word in re.findall(rb"pid=(\d+)", output)]


@pytest.fixture
def escapee() -> Iterator[list[int]]:
    """Pids of processes a test let escape its group; killed at the end whatever happens."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# -- basics -------------------------------------------------------------------------------------------------------


def test_success_records_argv_exit_code_output_and_clock(tmp_path: Path) -> None:
    clock = FixedClock(start=1_000.0, step=5.0)
    result = run(["sh", "-c", "echo out; echo err >&2; exit 3"], tmp_path, clock=clock)
    assert result.argv == ("sh", "-c", "echo out; echo err >&2; exit 3")
    assert (result.exit_code, result.signal, result.timed_out, result.spawn_error) == (3, None, False, None)
    assert not result.ok
    assert result.output == b"out\nerr\n"  # stdout and stderr merged in one pipe, in order
    assert result.tail == result.output
    assert result.output_size == 8
    assert result.output_digest == hashlib.sha256(b"out\nerr\n").hexdigest()
    assert not result.truncated
    assert result.started_at == 1_000.0  # the clock is read once, for started_at only
    assert clock.now() == 1_005.0
    assert 0 < result.duration < 5


def test_runs_in_cwd_with_ok(tmp_path: Path) -> None:
    result = run(["pwd"], tmp_path)
    assert result.ok
    assert result.output == f"{tmp_path}\n".encode()


def test_shell_string_runs_bin_sh_c(tmp_path: Path) -> None:
    result = sh("echo $((1 + 2))", tmp_path)
    assert result.argv == ("/bin/sh", "-c", "echo $((1 + 2))")
    assert result.output == b"3\n"


@pytest.mark.parametrize(
    ("argv", "shell", "kwargs"),
    [
        ("echo hi", False, {}),
        (["echo", "hi"], True, {}),
        ([], False, {}),
        (["true"], False, {"timeout": 0}),
        (["true"], False, {"grace": -1}),
        (["true"], False, {"output_cap": -1}),
    ],
)
def test_programming_errors_raise_value_error(
    tmp_path: Path, argv: list[str] | str, shell: bool, kwargs: dict[str, object]
) -> None:
    with pytest.raises(ValueError):
        run(argv, tmp_path, shell=shell, **kwargs)


def test_runs_in_its_own_session_and_process_group(tmp_path: Path) -> None:
    result = run([sys.executable, "-c", "import os; print(os.getpid(), os.getpgid(0), os.getsid(0))"], tmp_path)
    pid, pgid, sid = map(int, result.output.split())
    assert pid == pgid == sid
    assert pgid != os.getpgid(0)


# -- spawn errors and signals ------------------------------------------------------------------------------------


def test_missing_binary_is_a_spawn_error(tmp_path: Path) -> None:
    result = run(["nonexistent-cmd"], tmp_path)
    assert result.exit_code is None and result.signal is None and not result.timed_out
    assert result.spawn_error == "No such file or directory: 'nonexistent-cmd'"
    assert not result.ok
    assert result.output == b"" and result.output_size == 0
    assert result.output_digest == hashlib.sha256(b"").hexdigest()


def test_not_executable_is_a_spawn_error(tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    result = run([str(script)], tmp_path)
    assert result.exit_code is None
    assert result.spawn_error == f"Permission denied: '{script}'"


def test_missing_cwd_is_a_spawn_error(tmp_path: Path) -> None:
    result = run_command(["true"], cwd=tmp_path / "gone", env=env(), timeout=5, clock=FixedClock())
    assert result.exit_code is None
    assert result.spawn_error == f"No such file or directory: '{tmp_path / 'gone'}'"


def test_nul_byte_in_argv_is_a_spawn_error(tmp_path: Path) -> None:
    result = run(["echo", "a\0b"], tmp_path)
    assert result.exit_code is None and result.spawn_error == "embedded null byte"


def test_infinite_timeout_is_accepted(tmp_path: Path) -> None:
    assert run(["true"], tmp_path, timeout=float("inf")).ok


def test_killed_by_a_signal(tmp_path: Path) -> None:
    result = sh("kill -9 $$", tmp_path)
    assert (result.exit_code, result.signal, result.timed_out, result.spawn_error) == (None, 9, False, None)
    assert not result.ok


# -- timeouts, groups and grandchildren -------------------------------------------------------------------------


def test_timeout_terminates_grandchild_holding_the_pipe(tmp_path: Path) -> None:
    begin = time.monotonic()
    result = sh("sleep 60 & echo pid=$!; sleep 60", tmp_path, timeout=1.0, grace=1.0)
    elapsed = time.monotonic() - begin
    assert result.timed_out and not result.ok
    assert (result.exit_code, result.signal) == (None, signal.SIGTERM)
    assert 1.0 <= result.duration < 1.0 + 1.0 + MARGIN
    assert elapsed < 1.0 + 1.0 + MARGIN
    assert result.output.startswith(b"pid=")
    (grandchild,) = pids_in(result.output)
    assert process_identity(grandchild) is None


def test_timeout_kills_a_group_that_ignores_sigterm(tmp_path: Path) -> None:
    # an ignored signal stays ignored across fork and exec: both sleeps ignore SIGTERM too
    result = sh("trap '' TERM; sleep 60 & echo pid=$!; sleep 60", tmp_path, timeout=1.0, grace=1.0)
    assert result.timed_out
    assert (result.exit_code, result.signal) == (None, signal.SIGKILL)
    assert 2.0 <= result.duration < 1.0 + 1.0 + MARGIN
    (grandchild,) = pids_in(result.output)
    assert process_identity(grandchild) is None


def test_leftover_grandchild_is_terminated_when_main_exits(tmp_path: Path) -> None:
    result = sh("sleep 60 & echo pid=$!; echo done; exit 7", tmp_path, timeout=20.0, grace=3.0)
    assert (result.exit_code, result.signal, result.timed_out) == (7, None, False)
    assert result.duration < 1.0  # SIGTERM is obeyed: the grace period is not waited out
    assert result.output.endswith(b"done\n")
    (grandchild,) = pids_in(result.output)
    assert process_identity(grandchild) is None


def test_leftover_grandchild_ignoring_sigterm_is_killed_after_grace(tmp_path: Path) -> None:
    result = sh("trap '' TERM; sleep 60 & echo pid=$!", tmp_path, timeout=20.0, grace=0.5)
    assert (result.exit_code, result.timed_out) == (0, False)
    assert 0.5 <= result.duration < 0.5 + 1.0
    (grandchild,) = pids_in(result.output)
    assert process_identity(grandchild) is None


def test_leftover_not_holding_the_pipe_is_terminated_too(tmp_path: Path) -> None:
    result = sh("sleep 60 >/dev/null 2>&1 & echo pid=$!", tmp_path)
    assert result.ok and result.duration < 1.0
    (grandchild,) = pids_in(result.output)
    assert process_identity(grandchild) is None


def test_process_escaping_the_group_does_not_hold_us(tmp_path: Path, escapee: list[int]) -> None:
    # a setsid'ed grandchild is out of reach of killpg; its pipe is drained briefly, then abandoned
    code = "import os, time; os.setsid(); print('pid=%d' % os.getpid(), flush=True); time.sleep(60)"
    result = sh(f"'{sys.executable}' -c \"{code}\" & sleep 0.3; echo main done", tmp_path, timeout=20.0)
    escapee.extend(pids_in(result.output))
    assert result.ok
    assert result.duration < 0.3 + 1.5
    assert b"main done" in result.output
    assert len(escapee) == 1 and process_identity(escapee[0]) is not None  # documented limitation


# -- output --------------------------------------------------------------------------------------------------------

BIG = 20 * 1024 * 1024
PATTERN_CODE = (
    "import sys\n"
    "block = bytes((i * 7 + i // 251) % 256 for i in range(1 << 20))\n"
    "for n in range(20):\n"
    "    sys.stdout.buffer.write(bytes([n]) + block[1:])\n"
)


def pattern() -> bytes:
    block = bytes((i * 7 + i // 251) % 256 for i in range(1 << 20))
    return b"".join(bytes([n]) + block[1:] for n in range(20))


def test_twenty_mebibytes_bounded_memory_full_digest(tmp_path: Path) -> None:
    cap, tail = 1024 * 1024, 65536
    tracemalloc.start()
    try:
        result = run([sys.executable, "-c", PATTERN_CODE], tmp_path, output_cap=cap, tail_bytes=tail, timeout=30.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.ok  # not blocked on a full pipe: it finished
    expected = pattern()
    assert len(expected) == BIG
    assert result.output_size == BIG
    assert result.output_digest == hashlib.sha256(expected).hexdigest()
    assert result.output == expected[:cap]
    assert result.tail == expected[-tail:]
    assert result.truncated
    # head + tail, their final copies and one read buffer; nowhere near the 20 MiB written
    assert peak < 2 * cap + 4 * tail + 1024 * 1024, peak


def test_small_cap_and_tail(tmp_path: Path) -> None:
    result = run(["printf", "0123456789abcdef"], tmp_path, output_cap=10, tail_bytes=4)
    assert (result.output, result.tail, result.output_size, result.truncated) == (b"0123456789", b"cdef", 16, True)
    exact = run(["printf", "0123456789"], tmp_path, output_cap=10, tail_bytes=0)
    assert (exact.output, exact.tail, exact.truncated) == (b"0123456789", b"", False)


def test_on_output_receives_chunks_as_they_arrive(tmp_path: Path) -> None:
    arrivals: list[tuple[float, bytes]] = []
    script = "printf first; sleep 0.6; printf second"
    result = sh(script, tmp_path, on_output=lambda chunk: arrivals.append((time.monotonic(), chunk)))
    assert b"".join(chunk for _, chunk in arrivals) == b"firstsecond" == result.output
    assert arrivals[0][1] == b"first"
    assert arrivals[-1][0] - arrivals[0][0] >= 0.5  # the first chunk was delivered before the second was written


def test_on_output_exception_kills_the_group_and_propagates(tmp_path: Path) -> None:
    seen: list[bytes] = []

    def explode(chunk: bytes) -> None:
        seen.append(chunk)
        raise RuntimeError("callback failed")

    begin = time.monotonic()
    with pytest.raises(RuntimeError, match="callback failed"):
        sh("sleep 60 & echo pid=$$ pid=$!; sleep 60", tmp_path, on_output=explode)
    assert time.monotonic() - begin < 2
    main, grandchild = pids_in(b"".join(seen))
    assert process_identity(main) is None and process_identity(grandchild) is None
    assert zombie_children() == []


# -- stdin ---------------------------------------------------------------------------------------------------------


def test_stdin_is_dev_null_by_default(tmp_path: Path) -> None:
    result = run(["cat"], tmp_path, timeout=5.0)
    assert result.ok and result.output == b""


def test_stdin_bytes_are_written_and_closed(tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024)  # far more than a pipe holds: writing and reading must interleave
    result = run(["cat"], tmp_path, stdin=data, timeout=10.0)
    assert result.ok
    assert result.output_digest == hashlib.sha256(data).hexdigest()
    assert result.output == data


def test_stdin_not_read_by_the_command_is_dropped(tmp_path: Path) -> None:
    result = run(["sh", "-c", "echo ignored"], tmp_path, stdin=b"x" * (1024 * 1024), timeout=5.0)
    assert result.ok and result.output == b"ignored\n"


# -- environment ---------------------------------------------------------------------------------------------------


def test_scrub_environment_keeps_only_the_allowlist_and_overlays_extra() -> None:
    source = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/home/me",
        "LC_ALL": "C.UTF-8",
        "LC_MESSAGES": "C",
        "CI": "true",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "GITHUB_TOKEN": "ghp_x",
        "PYTHONPATH": "/evil",
        "GIT_DIR": "/elsewhere",
        "LCX": "no",
        "path": "lowercase is another variable",
    }
    scrubbed = scrub_environment(source, {"CI": "1", "AGENTOPS_LEVEL": "2"})
    assert scrubbed == {
        "AGENTOPS_LEVEL": "2",
        "CI": "1",
        "HOME": "/home/me",
        "LC_ALL": "C.UTF-8",
        "LC_MESSAGES": "C",
        "PATH": "/usr/bin:/bin",
    }
    assert list(scrubbed) == sorted(scrubbed)
    assert scrub_environment(source) == {
        "CI": "true",
        "HOME": "/home/me",
        "LC_ALL": "C.UTF-8",
        "LC_MESSAGES": "C",
        "PATH": "/usr/bin:/bin",
    }
    assert set(ENV_ALLOWLIST) >= {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR"}
    with pytest.raises(ValueError):
        scrub_environment({}, {"A=B": "x"})


def test_child_sees_only_the_scrubbed_environment(tmp_path: Path) -> None:
    source = dict(os.environ)
    source.update({"AWS_SECRET_ACCESS_KEY": "secret", "GITHUB_TOKEN": "ghp_x", "PYTHONPATH": "/evil", "TZ": "UTC"})
    child_env = scrub_environment(source, {"AGENTOPS_EXTRA": "yes"})
    result = run_command(["env", "-0"], cwd=tmp_path, env=child_env, timeout=5, clock=FixedClock())
    seen = dict(item.split("=", 1) for item in result.output.decode().split("\0") if item)
    assert seen == child_env
    assert "AGENTOPS_EXTRA" in seen and "TZ" in seen
    assert not {"AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "PYTHONPATH", "GIT_CONFIG_GLOBAL"} & set(seen)


# -- nothing left behind -------------------------------------------------------------------------------------------


def test_no_zombie_or_thread_left_behind(tmp_path: Path) -> None:
    threads = threading.active_count()
    for script in ("echo pid=$$", "echo pid=$$; exit 4", "echo pid=$$; kill -9 $$", "echo pid=$$; sleep 5"):
        result = sh(script, tmp_path, timeout=0.3, grace=0.2)
        (pid,) = pids_in(result.output)
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # already reaped: no longer our child
        assert process_identity(pid) is None
    assert threading.active_count() == threads
    assert zombie_children() == []


# -- process identity ----------------------------------------------------------------------------------------------


def test_process_identity_and_is_alive() -> None:
    child = subprocess.Popen(["sleep", "60"])
    try:
        identity = process_identity(child.pid)
        assert identity is not None and identity.pid == child.pid
        ticks_since_boot = float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK")
        mine = process_identity(os.getpid())
        assert mine is not None and 0 < mine.start_time <= identity.start_time <= ticks_since_boot + 1
        assert process_identity(child.pid) == identity  # stable
        assert is_alive(identity)
        assert not is_alive(ProcessIdentity(child.pid, identity.start_time + 1))  # a reused pid is not ours
    finally:
        child.kill()
        child.wait()
    assert not is_alive(identity)
    assert process_identity(child.pid) is None


def test_a_zombie_has_no_identity() -> None:
    child = subprocess.Popen(["sh", "-c", "exit 0"])
    deadline = time.monotonic() + 5
    while (fields := _stat_fields(child.pid)) is not None and fields[0] != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        assert fields is not None and fields[0] == "Z"
        assert process_identity(child.pid) is None
    finally:
        child.wait()


def test_no_such_process_has_no_identity() -> None:
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    assert process_identity(pid_max + 1) is None
    assert process_identity(0) is None
    assert process_identity(-1) is None


def test_boot_id() -> None:
    value = boot_id()
    assert value is not None
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", value)
    assert boot_id() == value


# -- terminate_group -----------------------------------------------------------------------------------------------


def _ready(script: str) -> subprocess.Popen[bytes]:
    """Start ``script`` in its own session and wait until it prints ``ready`` (its traps and children are set up)."""
    leader = subprocess.Popen(["sh", "-c", script], start_new_session=True, stdout=subprocess.PIPE)
    assert leader.stdout is not None
    assert leader.stdout.readline() == b"ready\n"
    return leader


def test_terminate_group_escalates_to_sigkill() -> None:
    leader = _ready("trap '' TERM; sleep 60 & echo ready; sleep 60")
    begin = time.monotonic()
    terminate_group(leader.pid, grace=0.3)
    assert leader.wait(timeout=5) == -signal.SIGKILL
    assert 0.3 <= time.monotonic() - begin < 2.0


def test_terminate_group_returns_early_when_the_group_obeys() -> None:
    leader = _ready("sleep 60 & echo ready; sleep 60")
    begin = time.monotonic()
    terminate_group(leader.pid, grace=5.0)
    assert time.monotonic() - begin < 1.0
    assert leader.wait(timeout=5) == -signal.SIGTERM


def test_terminate_group_tolerates_a_missing_group() -> None:
    leader = subprocess.Popen(["true"], start_new_session=True)
    leader.wait()
    terminate_group(leader.pid, grace=1.0)  # ESRCH: nothing to do, no exception


def _live(predicate: Callable[[list[str]], bool]) -> list[int]:
    """Pids of live (not zombie) processes whose ``/proc/<pid>/stat`` fields (after the name) match: the test's
    own look, not the library's."""
    found = []
    for entry in os.listdir("/proc"):
        fields = _stat_fields(int(entry)) if entry.isdigit() else None
        if fields is not None and fields[0] not in ("Z", "X") and predicate(fields):
            found.append(int(entry))
    return sorted(found)


def _running(marker: bytes) -> list[int]:
    """Pids of live processes whose command line holds ``marker`` (a zombie's is empty)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and marker in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
        except OSError:
            continue
    return sorted(found)


@pytest.fixture
def group_cleanup() -> Iterator[list[int]]:
    """Process groups a test starts: SIGKILLed at the end whatever happens (a failed stop leaves nothing running)."""
    pgids: list[int] = []
    yield pgids
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


# shell forkers that ignore SIGTERM (an ignored signal stays ignored across fork and exec) and start a child every
# few milliseconds until they are killed: the group grows while it is being stopped
FORKERS = (
    "trap '' TERM\n"
    "forker() {{ while :; do {child} 60.{token} & sleep 0.003; done; }}\n"
    "forker & forker & (forker &) ; echo ready; forker\n"
)


@pytest.mark.parametrize("child", ["sleep", "setsid sleep"])
def test_a_group_forking_all_the_while_is_empty_when_terminate_group_returns(
    child: str, group_cleanup: list[int]
) -> None:
    """Invariant: when terminate_group returns without survivors, nothing of the group is alive -- checked at once,
    by an independent scan -- although its members ignored SIGTERM and forked until the end; with ``setsid``
    every child leaves the group as it starts, and is stopped all the same (its parent was still there)."""
    token = str(time.monotonic_ns())
    leader = subprocess.Popen(
        ["sh", "-c", FORKERS.format(child=child, token=token)], start_new_session=True, stdout=subprocess.PIPE
    )
    group_cleanup.append(leader.pid)
    assert leader.stdout is not None and leader.stdout.readline() == b"ready\n"
    deadline = time.monotonic() + 10
    while len(_running(f"60.{token}".encode())) < 20 and time.monotonic() < deadline:
        time.sleep(0.01)  # not synchronisation: the forkers only need a head start before the stop
    before = _running(f"60.{token}".encode())
    assert len(before) >= 20
    survivors = terminate_group(leader.pid, grace=0.3)
    in_group = _live(lambda fields: fields[2] == str(leader.pid))
    children = _running(f"60.{token}".encode())
    assert (survivors, in_group, children) == ((), [], [])
    assert leader.wait(timeout=5) == -signal.SIGKILL


def test_a_command_forking_all_the_while_is_gone_when_it_times_out(tmp_path: Path) -> None:
    """Invariant: run_command returns from a timeout only once nothing of the command's group is alive, forks made
    during the stop included (no sleep or poll after it)."""
    token = str(time.monotonic_ns())
    result = sh(FORKERS.format(child="sleep", token=token), tmp_path, timeout=1.0, grace=0.3)
    assert result.timed_out and result.output.startswith(b"ready")
    assert _running(f"60.{token}".encode()) == []


@pytest.mark.parametrize("pidfds", [True, False])
def test_a_child_moved_to_its_own_group_is_stopped_with_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pidfds: bool
) -> None:
    """``timeout(1)`` and ``setsid`` move a child out of the group; while its parent is there it is found from the
    group and stopped with it: on a timeout, and after the main process exited (its parent is another member).
    Without pidfds (old kernels, seccomp) the stray is checked by start time, then signalled."""
    if not pidfds:

        def refused(pid: int, flags: int = 0) -> int:
            raise OSError(38, "Function not implemented")

        monkeypatch.setattr(os, "pidfd_open", refused)
    token = str(time.monotonic_ns())
    timed = sh(f"setsid sleep 60.{token}1 & echo pid=$!; sleep 60", tmp_path, timeout=0.5, grace=0.3)
    assert timed.timed_out and pids_in(timed.output)
    script = f"(setsid sleep 60.{token}2 & echo pid=$!; sleep 60) & sleep 0.3; exit 3"
    exited = sh(script, tmp_path, grace=0.3)
    assert exited.exit_code == 3 and not exited.timed_out and pids_in(exited.output)
    assert _running(f"60.{token}".encode()) == []


def test_what_survives_sigkill_is_a_coded_error_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, group_cleanup: list[int]
) -> None:
    """Invariant: a process SIGKILL does not end (here: SIGKILL and SIGSTOP are not delivered; in life, a process
    asleep in the kernel) is reported after the settle time -- PROCESS_SURVIVED_KILL naming it -- and neither
    terminate_group nor run_command waits for it any longer."""
    real = groups.signal_group

    def no_kill(pgid: int, sig: int) -> bool:
        group_cleanup.append(pgid)
        return real(pgid, sig) if sig not in (signal.SIGKILL, signal.SIGSTOP) else True

    monkeypatch.setattr(groups, "signal_group", no_kill)
    monkeypatch.setattr(groups, "KILL_SETTLE", 0.5)
    leader = _ready("trap '' TERM; echo ready; sleep 60")
    group_cleanup.append(leader.pid)
    begin = time.monotonic()
    assert terminate_group(leader.pid, grace=0.2) == tuple(sorted(_live(lambda f: f[2] == str(leader.pid))))
    assert 0.7 <= time.monotonic() - begin < 0.7 + MARGIN
    os.killpg(leader.pid, signal.SIGKILL)  # for real now, and reaped: no zombie of ours for a later test to see
    assert leader.wait(timeout=5) == -signal.SIGKILL
    begin = time.monotonic()
    with pytest.raises(GroupSurvived) as caught:
        sh("trap '' TERM; sleep 60", tmp_path, timeout=0.3, grace=0.2)
    assert 1.0 <= time.monotonic() - begin < 1.0 + MARGIN
    error: AgentOpsError = caught.value
    assert error.code == "PROCESS_SURVIVED_KILL" and "still had processes alive 0.5s after SIGKILL" in error.message
    assert caught.value.pids and all(process_identity(pid) is not None for pid in caught.value.pids)
    os.killpg(caught.value.pgid, signal.SIGKILL)  # for real now; its main process is ours to reap
    os.waitpid(caught.value.pgid, 0)


def test_terminate_process_stops_one_process_and_what_it_started_not_a_reused_pid(
    group_cleanup: list[int],
) -> None:
    leader = _ready("echo ready; sleep 60 & exec sleep 61")  # the leader becomes `sleep 61`; `sleep 60` its child
    group_cleanup.append(leader.pid)
    identity = process_identity(leader.pid)
    assert identity is not None
    assert terminate_process(ProcessIdentity(leader.pid, identity.start_time + 1), grace=0.2) == ()  # not it
    assert is_alive(identity)
    assert terminate_process(identity, grace=0.2) == ()
    assert leader.wait(timeout=5) == -signal.SIGTERM
    assert _live(lambda fields: fields[2] == str(leader.pid)) == []


def test_a_group_stop_refuses_our_own_group() -> None:
    with pytest.raises(ValueError):
        GroupStop(os.getpgrp(), grace=0)
    with pytest.raises(ValueError):
        terminate_group(1, grace=0)


# -- without pidfds (old kernels, seccomp): the main process is polled on a tick -------------------------------


def test_without_pidfd_exit_and_timeout_still_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process, "_open_pidfd", lambda pid: None)
    quick = sh("sleep 60 & echo pid=$!; exit 5", tmp_path)
    assert (quick.exit_code, quick.timed_out) == (5, False) and quick.duration < 1.0
    assert process_identity(pids_in(quick.output)[0]) is None
    slow = sh("sleep 60 & sleep 60", tmp_path, timeout=0.5, grace=0.5)
    assert slow.timed_out and slow.signal == signal.SIGTERM
    assert 0.5 <= slow.duration < 0.5 + 0.5 + MARGIN
    assert zombie_children() == []
