"""Running external commands -- verification commands, setup steps, agents -- so that they cannot hang us.

``subprocess.run(..., capture_output=True, timeout=...)`` is not enough for commands we do not control:

* **Process groups.** A timeout that kills only the direct child leaves its children running: ``npm test`` or
  ``sh -c 'make check'`` is a tree of processes. Every command therefore starts in a new session
  (``start_new_session=True``), so it leads its own process group, and every signal goes to the whole group
  (``killpg``): SIGTERM first, SIGKILL after a grace period for whatever ignored or trapped SIGTERM -- and the
  command is over only when **nothing of its group is alive any more** (:class:`.groups.GroupStop`: SIGKILL
  repeated until the group is empty, what was forked meanwhile and what left the group while its parent was
  there included). A process SIGKILL cannot end within :data:`.groups.KILL_SETTLE` is
  ``PROCESS_SURVIVED_KILL``, never a hang.
* **Grandchildren holding the pipe.** A background grandchild (``sh -c 'sleep 60 & echo done'``) inherits the
  output pipe, so "read until EOF" never ends even though the command itself has exited, and
  ``communicate()`` blocks forever. We watch the main process separately (a pidfd, or a short tick) and, once it
  has exited, terminate what is left of its group instead of waiting for EOF. A process that escaped the group
  (``setsid``) cannot be found that way; its pipe is drained for :data:`ORPHAN_DRAIN` seconds and then closed.
* **Bounded memory, complete evidence.** Output is read as it arrives into fixed buffers: the first
  ``output_cap`` bytes and the last ``tail_bytes`` are kept, every byte goes through SHA-256 and is counted, so a
  command that writes gigabytes neither blocks on a full pipe nor fills memory, and the evidence still names
  exactly what it wrote. stdout and stderr share one pipe so their interleaving is kept (or, for a caller that
  parses stdout -- ``git push --porcelain`` -- two pipes and two captures).
* **The group id stays ours.** The main process is reaped only at the very end: until then its zombie keeps its
  pid -- which is the group id -- from being reused, so a late ``killpg`` cannot hit an unrelated group.
The environment is an argument: core code never reads ``os.environ`` (``env=None`` lets the child inherit this
process's, for the person's own tools -- their SSH agent, credential helpers). :func:`scrub_environment` keeps the few
variables a build needs and drops the rest (tokens, cloud keys, ``PYTHONPATH``...), then overlays what the policy
asks for. Groups are stopped and found by :mod:`.groups` (Linux: ``/proc``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import IO, Final

from ..clock import Clock
from .groups import TICK, GroupStop, GroupSurvived, terminate_group

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
    error_output: bytes = b""  # with merge_stderr=False: stderr's first ``output_cap`` bytes (else it is in output)

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
    env: Mapping[str, str] | None,
    timeout: float,
    shell: bool = False,
    grace: float = 3.0,
    output_cap: int = 4 * 1024 * 1024,
    tail_bytes: int = 65536,
    clock: Clock,
    on_output: Callable[[bytes], None] | None = None,
    stdin: bytes | None = None,
    merge_stderr: bool = True,
) -> CommandResult:
    """Run one command in its own session and return what it did; never raises for the command's own failures.

    ``env`` is the child's whole environment (see :func:`scrub_environment`; None: this process's, inherited);
    stdin is /dev/null unless ``stdin`` bytes are given (then they are written and the pipe closed). stdout and
    stderr are merged, unless ``merge_stderr`` is False: then stderr is captured apart (``error_output``). At
    ``timeout`` seconds the whole process group gets SIGTERM, and SIGKILL ``grace`` seconds later; when the main
    process exits on its own, the rest of its group gets the same treatment. ``on_output`` is called with each
    chunk of either stream as it arrives, in the calling thread; an exception from it kills the group and
    propagates.

    **On return nothing of the group is alive** (see :mod:`.groups`); ``PROCESS_SURVIVED_KILL``
    (:class:`~.groups.GroupSurvived`) when something SIGKILL could not end within the settle time.

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
    errors = None if merge_stderr else _Capture(output_cap, 0)
    started_at = clock.now()
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            args,
            cwd=cwd,
            env=None if env is None else dict(env),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
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
        watch = _Watch(proc, capture, errors, on_output, stdin)
    except BaseException:
        if proc.pid not in terminate_group(proc.pid, grace=0):
            proc.wait()
        raise
    try:
        watch.run(deadline=start + timeout, grace=grace)
    finally:
        returncode = watch.close()
    if watch.stop is not None and watch.stop.survivors:
        survivors, settle = watch.stop.survivors, watch.stop.settle
        raise GroupSurvived(f"command {' '.join(args)[:200]!r}", proc.pid, survivors, settle=settle)
    return _result(
        args,
        capture=capture,
        returncode=returncode,
        timed_out=watch.timed_out,
        spawn_error=None,
        started_at=started_at,
        start=start,
        errors=errors,
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
    errors: _Capture | None = None,
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
        error_output=bytes(errors.head) if errors is not None else b"",
    )


def _open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # an old kernel, or a seccomp filter that refuses the call
        return None


class _Watch:
    """The event loop of one command: output pipes, stdin pipe, main-process exit, deadlines, stopping the group."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        capture: _Capture,
        errors: _Capture | None,
        on_output: Callable[[bytes], None] | None,
        stdin: bytes | None,
    ) -> None:
        self.proc = proc
        self.pgid = proc.pid  # start_new_session: the child leads its own session and group
        self.on_output = on_output
        self.poller = select.poll()
        self.outs: dict[int, tuple[IO[bytes], _Capture]] = {}  # fd -> (pipe, where its bytes go)
        for pipe, into in ((proc.stdout, capture), (proc.stderr, errors)):
            if pipe is not None and into is not None:
                fd = pipe.fileno()
                os.set_blocking(fd, False)
                self.poller.register(fd, select.POLLIN)
                self.outs[fd] = (pipe, into)
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
        self.stop: GroupStop | None = None  # stopping the group: after the timeout, or once the main process exited
        self.empty_since: float | None = None  # when the group was first seen gone with a pipe still open
        self.finished = False

    def run(self, *, deadline: float, grace: float) -> None:
        while True:
            now = time.monotonic()
            self.exited = self.exited or self._main_exited()
            if self.stop is None and (self.exited or now >= deadline):
                self.timed_out = not self.exited
                self.stop = GroupStop(self.pgid, grace=grace, now=now)  # nothing to do when the group is gone
            elif self.stop is not None and not self.stop.finished and now >= self.stop.due:
                self.stop.step(now)
            if self._done(now):
                break
            self._poll(self._wait_time(now, deadline))
        self.finished = True

    def _done(self, now: float) -> bool:
        """Whether the group is gone (or given up on: survivors) and the pipes drained."""
        if self.stop is None or not self.stop.finished:
            return False
        if self.stop.survivors:
            return True  # close() does not wait for them; run_command says so
        self.exited = self.exited or self._main_exited()  # it was in the group: it has exited
        if not self.outs:
            return True
        # the group is gone but someone still holds a pipe: a process that left the group out of our sight
        self.empty_since = now if self.empty_since is None else self.empty_since
        return now >= self.empty_since + ORPHAN_DRAIN

    def _wait_time(self, now: float, deadline: float) -> float | None:
        wakes: list[float] = []
        if self.stop is None:
            wakes.append(deadline - now)
            if self.pidfd is None:
                wakes.append(_TICK_NO_PIDFD)
        elif not self.stop.finished:
            wakes.append(self.stop.wait(now))
        if self.empty_since is not None:
            wakes.append(self.empty_since + ORPHAN_DRAIN - now)
        elif self.stop is not None and self.stop.finished:
            wakes.append(TICK)
        return max(0.0, min(wakes)) if wakes else None

    def _poll(self, wait: float | None) -> None:
        # capped: poll() takes a C int of milliseconds, and timeout may be huge or infinite
        timeout_ms = None if wait is None else max(0, int(min(wait, 3600.0) * 1000 + 0.999))
        for fd, events in self.poller.poll(timeout_ms):
            if fd in self.outs:
                self._read(fd)
            elif fd == self.in_fd:
                self._write(events)
            elif fd == self.pidfd:
                self.poller.unregister(fd)  # stays readable once the child exited; _main_exited() takes over

    def _read(self, fd: int) -> None:
        try:
            chunk = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            return
        if not chunk:
            self._close_output(fd)
            return
        self.outs[fd][1].feed(chunk)
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

    def _close_output(self, fd: int) -> None:
        pipe, _ = self.outs.pop(fd)
        with contextlib.suppress(KeyError):
            self.poller.unregister(fd)
        pipe.close()

    def _main_exited(self) -> bool:
        """Whether the main process has exited, without reaping it (its zombie keeps the group id ours)."""
        try:
            return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:  # reaped behind our back (SIGCHLD ignored): it has exited all the same
            return True

    def close(self) -> int | None:
        """Release the pipes and the pidfd and reap the main process -- after the group is gone: when run() did not
        end (on_output raised, KeyboardInterrupt), it is killed first, nothing of the command may survive. None
        when the main process itself survived SIGKILL (it is not waited for)."""
        if not self.finished:
            if self.stop is None:
                self.stop = GroupStop(self.pgid, grace=0)
            self.stop.hurry()
            while not self.stop.step():
                time.sleep(self.stop.wait())
        self._close_stdin()
        for fd in list(self.outs):
            self._close_output(fd)
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        if self.stop is not None and self.proc.pid in self.stop.survivors:
            return None
        return self.proc.wait()
