"""Running external commands -- verification commands, setup steps, agents -- so that they cannot hang us.

``subprocess.run(..., capture_output=True, timeout=...)`` is not enough for commands we do not control:

* **Process groups.** A timeout that kills only the direct child leaves its children running: ``npm test`` or
  ``sh -c 'make check'`` is a tree of processes. Every command therefore starts in a new session
  (``start_new_session=True``), so it leads its own process group, and every signal goes to the whole group
  (``killpg``): SIGTERM first, SIGKILL after a grace period for whatever ignored or trapped SIGTERM.
* **Grandchildren holding the pipe.** A background grandchild (``sh -c 'sleep 60 & echo done'``) inherits the
  output pipe, so "read until EOF" never ends even though the command itself has exited, and
  ``communicate()`` blocks forever. We watch the main process separately (a pidfd, or a short tick) and, once it
  has exited, terminate what is left of its group instead of waiting for EOF. A process that escaped the group
  (``setsid``) cannot be found that way; its pipe is drained for :data:`ORPHAN_DRAIN` seconds and then closed.
* **Bounded memory, complete evidence.** Output is read as it arrives into fixed buffers: the first
  ``output_cap`` bytes and the last ``tail_bytes`` are kept, every byte goes through SHA-256 and is counted, so a
  command that writes gigabytes neither blocks on a full pipe nor fills memory, and the evidence still names
  exactly what it wrote. stdout and stderr share one pipe so their interleaving is kept.
* **The group id stays ours.** The main process is reaped only at the very end: until then its zombie keeps its
  pid -- which is the group id -- from being reused, so a late ``killpg`` cannot hit an unrelated group.
The environment is an argument: core code never reads ``os.environ``. :func:`scrub_environment` keeps the few
variables a build needs and drops the rest (tokens, cloud keys, ``PYTHONPATH``...), then overlays what the policy
asks for. Groups are stopped and found by :mod:`.groups` (Linux: ``/proc``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import signal as signals
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import IO, Final

from ..clock import Clock
from .groups import KILL_SETTLE, TICK, group_members, signal_group

ENV_ALLOWLIST: Final[tuple[str, ...]] = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "TERM",
    "CI",
)
"""Variables :func:`scrub_environment` keeps from the caller's environment (plus :data:`ENV_ALLOWED_PREFIXES`)."""

ENV_ALLOWED_PREFIXES: Final[tuple[str, ...]] = ("LC_",)
"""Every variable starting with one of these is kept too (``LC_ALL``, ``LC_CTYPE``...)."""

ORPHAN_DRAIN: Final = 0.5
"""Seconds the pipe is still drained after the whole group is gone, for output a group-escaped process holds."""

_READ_SIZE: Final = 65536
_TICK_NO_PIDFD: Final = 0.05  # how often the main process is polled when pidfds are unavailable
_EMPTY_ENV: Final[Mapping[str, str]] = MappingProxyType({})


def _allowed(name: str) -> bool:
    return name in ENV_ALLOWLIST or name.startswith(ENV_ALLOWED_PREFIXES)


def scrub_environment(source: Mapping[str, str], extra: Mapping[str, str] = _EMPTY_ENV) -> dict[str, str]:
    """Keep only the allowlisted variables of ``source``, overlay ``extra``; the result is sorted by name.

    Raises ValueError for a name ``execve`` cannot carry (empty, ``=`` or NUL) or a value with NUL in ``extra``:
    the policy loader is expected to have refused those already.
    """
    for name, value in extra.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise ValueError(f"invalid environment variable {name!r}")
    scrubbed = {name: value for name, value in source.items() if _allowed(name)}
    scrubbed.update(extra)
    return dict(sorted(scrubbed.items()))


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What a command did. ``exit_code`` is None when it could not start (``spawn_error``) or a signal ended it."""

    argv: tuple[str, ...]
    exit_code: int | None
    signal: int | None
    timed_out: bool
    spawn_error: str | None
    started_at: float  # epoch seconds, from the clock passed in
    duration: float  # monotonic seconds
    output_size: int  # every byte written (stdout and stderr merged), beyond the cap too
    output_digest: str  # sha256 hex of every byte written
    output: bytes  # the first ``output_cap`` bytes
    tail: bytes  # the last ``tail_bytes`` bytes
    truncated: bool  # output_size > output_cap

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class _Capture:
    """Bounded accounting of a byte stream: head, tail, size and digest of all of it."""

    __slots__ = ("cap", "digest", "head", "size", "tail", "tail_bytes")

    def __init__(self, cap: int, tail_bytes: int) -> None:
        self.cap = cap
        self.tail_bytes = tail_bytes
        self.head = bytearray()
        self.tail = bytearray()
        self.size = 0
        self.digest = hashlib.sha256()

    def feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        self.digest.update(chunk)
        room = self.cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
        if self.tail_bytes:
            if len(chunk) >= self.tail_bytes:
                self.tail[:] = chunk[-self.tail_bytes :]
            else:
                self.tail += chunk
                excess = len(self.tail) - self.tail_bytes
                if excess > 0:
                    del self.tail[:excess]


def _normalise_argv(argv: Sequence[str] | str, shell: bool) -> tuple[str, ...]:
    if isinstance(argv, str):
        if not shell:
            raise ValueError("a command given as one string needs shell=True")
        return ("/bin/sh", "-c", argv)
    if shell:
        raise ValueError("shell=True needs the command as one string")
    if not argv:
        raise ValueError("empty argv")
    return tuple(argv)


def _describe_spawn_error(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        filename = exc.filename
        if isinstance(filename, (str, bytes, os.PathLike)):  # a Path for a missing cwd
            return f"{exc.strerror}: {os.fsdecode(filename)!r}"
        return exc.strerror
    return str(exc) or type(exc).__name__


def run_command(
    argv: Sequence[str] | str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
    shell: bool = False,
    grace: float = 3.0,
    output_cap: int = 4 * 1024 * 1024,
    tail_bytes: int = 65536,
    clock: Clock,
    on_output: Callable[[bytes], None] | None = None,
    stdin: bytes | None = None,
) -> CommandResult:
    """Run one command in its own session and return what it did; never raises for the command's own failures.

    ``env`` is the child's whole environment (see :func:`scrub_environment`); stdin is /dev/null unless ``stdin``
    bytes are given (then they are written and the pipe closed). stdout and stderr are merged. At ``timeout``
    seconds the whole process group gets SIGTERM, and SIGKILL ``grace`` seconds later; when the main process exits
    on its own, the rest of its group gets the same treatment. ``on_output`` is called with each chunk as it
    arrives, in the calling thread; an exception from it kills the group and propagates.

    A command that cannot start (missing binary, not executable, missing ``cwd``...) is reported in
    ``spawn_error``. Raises ValueError for a programming error: a string ``argv`` without ``shell=True`` (or a
    list with it), an empty ``argv``, a non-positive ``timeout`` or a negative ``grace``/``output_cap``/
    ``tail_bytes``. On return the process is reaped and no thread is left behind (none is started).
    """
    args = _normalise_argv(argv, shell)
    if not timeout > 0:
        raise ValueError(f"timeout must be positive, not {timeout!r}")
    if grace < 0 or output_cap < 0 or tail_bytes < 0:
        raise ValueError("grace, output_cap and tail_bytes must not be negative")
    capture = _Capture(output_cap, tail_bytes)
    started_at = clock.now()
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            args,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        # ValueError: a NUL byte in argv or env, which only the command's author can fix
        return _result(
            args,
            capture=capture,
            returncode=None,
            timed_out=False,
            spawn_error=_describe_spawn_error(exc),
            started_at=started_at,
            start=start,
        )
    try:
        watch = _Watch(proc, capture, on_output, stdin)
    except BaseException:
        signal_group(proc.pid, signals.SIGKILL)
        proc.wait()
        raise
    try:
        watch.run(deadline=start + timeout, grace=grace)
    finally:
        returncode = watch.close()
    return _result(
        args,
        capture=capture,
        returncode=returncode,
        timed_out=watch.timed_out,
        spawn_error=None,
        started_at=started_at,
        start=start,
    )


def _result(
    args: tuple[str, ...],
    *,
    capture: _Capture,
    returncode: int | None,
    timed_out: bool,
    spawn_error: str | None,
    started_at: float,
    start: float,
) -> CommandResult:
    return CommandResult(
        argv=args,
        exit_code=returncode if returncode is not None and returncode >= 0 else None,
        signal=-returncode if returncode is not None and returncode < 0 else None,
        timed_out=timed_out,
        spawn_error=spawn_error,
        started_at=started_at,
        duration=time.monotonic() - start,
        output_size=capture.size,
        output_digest=capture.digest.hexdigest(),
        output=bytes(capture.head),
        tail=bytes(capture.tail),
        truncated=capture.size > capture.cap,
    )


def _open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # an old kernel, or a seccomp filter that refuses the call
        return None


class _Watch:
    """The event loop of one command: output pipe, stdin pipe, main-process exit, deadlines, group signals."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        capture: _Capture,
        on_output: Callable[[bytes], None] | None,
        stdin: bytes | None,
    ) -> None:
        self.proc = proc
        self.pgid = proc.pid  # start_new_session: the child leads its own session and group
        self.capture = capture
        self.on_output = on_output
        self.poller = select.poll()
        self.out: IO[bytes] | None = proc.stdout
        self.out_fd = -1
        if self.out is not None:
            self.out_fd = self.out.fileno()
            os.set_blocking(self.out_fd, False)
            self.poller.register(self.out_fd, select.POLLIN)
        self.pending = memoryview(stdin or b"")
        self.inp: IO[bytes] | None = proc.stdin
        self.in_fd = -1
        if self.inp is not None:
            self.in_fd = self.inp.fileno()
            os.set_blocking(self.in_fd, False)
            if self.pending:
                self.poller.register(self.in_fd, select.POLLOUT)
            else:
                self._close_stdin()
        self.pidfd = _open_pidfd(proc.pid)
        if self.pidfd is not None:
            self.poller.register(self.pidfd, select.POLLIN)
        self.exited = False  # the main process has exited (it is reaped only in close())
        self.timed_out = False
        self.stopping = False  # the group has been dealt with: signalled, or found empty, after exit or timeout
        self.kill_due: float | None = None  # when SIGKILL follows the SIGTERM already sent
        self.killed_at: float | None = None
        self.empty_since: float | None = None  # when the group was first seen gone with the pipe still open
        self.finished = False

    def run(self, *, deadline: float, grace: float) -> None:
        while True:
            now = time.monotonic()
            self.exited = self.exited or self._main_exited()
            if not self.exited and not self.stopping and now >= deadline:
                self.timed_out = True
                self.stopping = True
                signal_group(self.pgid, signals.SIGTERM)
                self.kill_due = now + grace
            if self.exited and not self.stopping:
                self.stopping = True
                if group_members(self.pgid):
                    signal_group(self.pgid, signals.SIGTERM)
                    self.kill_due = now + grace
            if self.kill_due is not None and self.killed_at is None and now >= self.kill_due:
                signal_group(self.pgid, signals.SIGKILL)
                self.killed_at = now
            if self.exited and self._done(now):
                break
            self._poll(self._wait_time(now, deadline))
        self.finished = True

    def _done(self, now: float) -> bool:
        """Called once the main process has exited: whether the group is gone and the pipe drained."""
        settled = self.killed_at is not None and now >= self.killed_at + KILL_SETTLE
        if not settled and group_members(self.pgid):
            return False
        if self.out_fd < 0:
            return True
        # the group is gone but someone still holds the pipe: a process that left the group (setsid)
        self.empty_since = now if self.empty_since is None else self.empty_since
        return now >= self.empty_since + ORPHAN_DRAIN

    def _wait_time(self, now: float, deadline: float) -> float | None:
        wakes: list[float] = []
        if not self.stopping:
            wakes.append(deadline - now)
        if self.kill_due is not None and self.killed_at is None:
            wakes.append(self.kill_due - now)
        if self.stopping or self.exited:
            wakes.append(TICK)
        if self.pidfd is None and not self.exited:
            wakes.append(_TICK_NO_PIDFD)
        if self.empty_since is not None:
            wakes.append(self.empty_since + ORPHAN_DRAIN - now)
        return max(0.0, min(wakes)) if wakes else None

    def _poll(self, wait: float | None) -> None:
        # capped: poll() takes a C int of milliseconds, and timeout may be huge or infinite
        timeout_ms = None if wait is None else max(0, int(min(wait, 3600.0) * 1000 + 0.999))
        for fd, events in self.poller.poll(timeout_ms):
            if fd == self.out_fd:
                self._read()
            elif fd == self.in_fd:
                self._write(events)
            elif fd == self.pidfd:
                self.poller.unregister(fd)  # stays readable once the child exited; _main_exited() takes over

    def _read(self) -> None:
        try:
            chunk = os.read(self.out_fd, _READ_SIZE)
        except BlockingIOError:
            return
        if not chunk:
            self._close_output()
            return
        self.capture.feed(chunk)
        if self.on_output is not None:
            self.on_output(chunk)

    def _write(self, events: int) -> None:
        if events & (select.POLLERR | select.POLLHUP):
            self._close_stdin()  # the reader is gone: what it did not read, it did not want
            return
        try:
            written = os.write(self.in_fd, self.pending[:_READ_SIZE])
        except BlockingIOError:
            return
        except BrokenPipeError:
            self._close_stdin()
            return
        self.pending = self.pending[written:]
        if not self.pending:
            self._close_stdin()

    def _close_stdin(self) -> None:
        if self.in_fd >= 0:
            with contextlib.suppress(KeyError):
                self.poller.unregister(self.in_fd)
            self.in_fd = -1
        if self.inp is not None:
            with contextlib.suppress(OSError):
                self.inp.close()
            self.inp = None
        self.pending = memoryview(b"")

    def _close_output(self) -> None:
        if self.out_fd >= 0:
            with contextlib.suppress(KeyError):
                self.poller.unregister(self.out_fd)
            self.out_fd = -1
        if self.out is not None:
            self.out.close()
            self.out = None

    def _main_exited(self) -> bool:
        """Whether the main process has exited, without reaping it (its zombie keeps the group id ours)."""
        try:
            return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:  # reaped behind our back (SIGCHLD ignored): it has exited all the same
            return True

    def close(self) -> int:
        """Release the pipes and the pidfd and reap the main process; kill the group first if run() did not end."""
        if not self.finished:  # run() raised (on_output, KeyboardInterrupt): nothing of the command may survive
            signal_group(self.pgid, signals.SIGKILL)
            settle = time.monotonic() + KILL_SETTLE
            while group_members(self.pgid) and time.monotonic() < settle:
                time.sleep(TICK / 4)
        self._close_stdin()
        self._close_output()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        return self.proc.wait()
