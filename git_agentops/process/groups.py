"""Process groups and process identities: stopping a whole group -- and knowing it is gone -- and knowing a
process again later.

* **Stopping a group.** Every command and agent the toolkit starts leads its own session and process group;
  stopping it means :class:`GroupStop`: SIGTERM to the group, a grace period, then SIGKILL for whatever ignored it,
  **sent again every** :data:`TICK` **until nothing of the group is left**, for at most :data:`KILL_SETTLE`
  seconds. The guarantee every caller builds on: *when a stop has finished without survivors, no process of the
  group is alive* -- what was forked while it was being stopped included -- *nor any process that descended from
  one of its members and left the group* (``setsid``, ``setpgid``: ``timeout(1)`` does that) *while its parent
  was still there to be found*. Members and such strays are found by scanning ``/proc``; zombies count as gone.
* **Why wait.** ``killpg`` only *sends* SIGKILL: each member dies when the kernel next runs it, and on a loaded
  machine that is a while later. Returning when the leader has exited (``Popen.communicate()``) left the rest
  dying -- or still running: a hung ``git fetch`` over SSH returned while git's ssh-variant probe, whose output
  goes to ``/dev/null`` so no pipe closing tells when it is gone, was still alive (issue 25).
* **Why again.** The kernel delivers a group signal atomically with ``fork`` (a child forked meanwhile gets it
  too, or the fork is restarted), so one SIGKILL reaches every member there is. Sending it again each tick also
  reaches a process that joined the group after it, or a stray found later, and costs nothing. Before the
  SIGKILL the group is frozen (SIGSTOP) and scanned once what was found is seen stopped: a member cannot move a
  child out of the group between the scan and the kill, and its parent's death cannot orphan a stray before it
  was found.
* **Never a hang.** A process SIGKILL does not end within :data:`KILL_SETTLE` (asleep in the kernel, ``D``
  state) is reported -- :attr:`GroupStop.survivors`, :class:`GroupSurvived` (``PROCESS_SURVIVED_KILL``) -- never
  waited for without bound.
* **Limit.** A process that left the group and whose parent exited *before* the stop began is re-parented to
  init: nothing links it to the group any more. Agents run under the sandbox launcher, a child subreaper that
  keeps every orphan of its tree (:mod:`git_agentops.sandbox.reaper`); commands are expected to stay in their
  group.
* **Identity.** A pid alone does not identify a process across time: pids wrap and are reused. A
  :class:`ProcessIdentity` adds the start time (``/proc/<pid>/stat`` field 22, clock ticks since boot), so a
  recorded agent is never mistaken for a newer process that got the same pid (a stray is signalled only through a
  pidfd opened on it and checked against its start time). Start times count from boot; compare :func:`boot_id`
  before trusting an identity recorded by an earlier boot.

Linux only: both read ``/proc``.
"""

from __future__ import annotations

import contextlib
import os
import signal as signals
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from ..errors import AgentOpsError

KILL_SETTLE: Final = 5.0
"""Seconds SIGKILL is repeated while waiting for a group to be empty before what is left is reported as
survivors. Only a process that is still there costs this wait: a loaded machine takes a moment to run a killed
process to its end, and one asleep in the kernel (a hung NFS or FUSE call) cannot die sooner."""

TICK: Final = 0.02  # how often a group is looked at (and SIGKILLed again) while it is being stopped
_DEAD_STATES: Final = frozenset("ZXx")  # zombie, dead: exited, only waiting to be reaped
FREEZE_WAIT: Final = 0.25
"""Seconds a SIGKILL round waits for the processes it found to be stopped (SIGSTOP takes effect when a process
next runs: on a loaded machine, a moment later) before it kills them all the same."""
_STOPPED: Final = frozenset("Tt")


class GroupSurvived(AgentOpsError):
    """``PROCESS_SURVIVED_KILL``: processes of a stopped group were still alive :data:`KILL_SETTLE` seconds after
    SIGKILL (a process asleep in the kernel cannot die). ``pids`` names them; nothing waits for them."""

    def __init__(self, what: str, pgid: int, pids: Iterable[int], *, settle: float | None = None) -> None:
        settle = KILL_SETTLE if settle is None else settle
        self.pgid = pgid
        self.pids = tuple(sorted(pids))
        shown = ", ".join(f"{pid} ({_describe(pid)})" for pid in self.pids)
        super().__init__(
            "PROCESS_SURVIVED_KILL",
            f"{what}: process group {pgid} still had processes alive {settle:g}s after SIGKILL: {shown}; "
            "a process asleep in the kernel (state D: a hung network filesystem or device) dies only when that "
            "call returns -- find it with 'ps -o pid,stat,wchan,args -p PID'",
            details={"pgid": pgid, "pids": list(self.pids)},
        )


def _describe(pid: int) -> str:
    fields = _read_stat(pid)
    return "gone" if fields is None else f"state {fields[0]}"


def signal_group(pgid: int, sig: int) -> bool:
    """``killpg``, tolerating a group that is already gone (ESRCH) or that we may not signal (EPERM)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _read_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name: [state, ppid, pgrp, session, ...]."""
    if pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except OSError:  # no such process (ENOENT), or it vanished while we read (ESRCH)
        return None
    # the command name is in parentheses and may itself contain spaces and parentheses: split at the last ')'
    _, _, rest = raw.rpartition(b")")
    fields = rest.decode("ascii", "replace").split()
    return fields if len(fields) >= 20 else None


@dataclass(frozen=True, slots=True)
class _Proc:
    """One live process as a ``/proc`` scan saw it."""

    pid: int
    state: str
    ppid: int
    pgrp: int
    start_time: int


def _scan() -> dict[int, _Proc]:
    """Every live (not zombie) process ``/proc`` shows, by pid."""
    found: dict[int, _Proc] = {}
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            fields = _read_stat(int(entry.name))
            if fields is None or fields[0] in _DEAD_STATES:
                continue
            with contextlib.suppress(ValueError):
                pid = int(entry.name)
                found[pid] = _Proc(pid, fields[0], int(fields[1]), int(fields[2]), int(fields[19]))
    return found


def group_members(pgid: int) -> list[int]:
    """Pids of the live (not zombie) processes of a process group, found by scanning ``/proc``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass
    return sorted(pid for pid, proc in _scan().items() if proc.pgrp == pgid)


def _signal_stray(pid: int, start_time: int, sig: int) -> None:
    """Signal one process that left the group, only if it is still the very process that was found: pinned by a
    pidfd and checked against its start time (where pidfds are refused, checked and then signalled)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except OSError:  # no pidfds here (old kernel, seccomp): check, then kill -- a window the pidfd closes
        if is_alive(ProcessIdentity(pid, start_time)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        return
    try:
        if is_alive(ProcessIdentity(pid, start_time)):
            signals.pidfd_send_signal(pidfd, sig)
    except (ProcessLookupError, PermissionError):
        pass
    finally:
        os.close(pidfd)


class GroupStop:
    """Stopping one process group (see the module docstring), one :meth:`step` at a time, so that an event loop
    that must keep draining the group's output (:mod:`.command`) and a caller that simply waits
    (:func:`terminate_group`) share one implementation.

    The first step is taken on construction: SIGTERM to the group and to what left it -- SIGKILL at once when
    ``grace`` is 0 -- unless there is nothing to stop. Call :meth:`step` again every :meth:`wait` seconds until it
    returns True; :attr:`survivors` then holds what SIGKILL did not end within ``settle`` seconds (normally
    nothing). ``pgid`` None stops only ``also``: single processes (and their descendants) outside any group of
    ours.
    """

    __slots__ = (
        "due",
        "finished",
        "give_up_at",
        "group_termed",
        "kill_at",
        "killed",
        "pgid",
        "settle",
        "strays",
        "survivors",
        "termed",
    )

    def __init__(
        self,
        pgid: int | None,
        *,
        grace: float,
        settle: float | None = None,
        also: Iterable[ProcessIdentity] = (),
        now: float | None = None,
    ) -> None:
        """``also``: processes to stop with the group, and their descendants, although they are not in it;
        ``settle``: :data:`KILL_SETTLE` unless given."""
        if pgid is not None and (pgid <= 1 or pgid == os.getpgrp()):
            raise ValueError(f"refusing to stop process group {pgid}: it is not a group of our children")
        settle = KILL_SETTLE if settle is None else settle
        if grace < 0 or settle < 0:
            raise ValueError("grace and settle must not be negative")
        now = time.monotonic() if now is None else now
        self.pgid = pgid
        self.settle = settle
        self.kill_at = now + grace
        self.give_up_at: float | None = None  # set by the first SIGKILL
        self.strays: dict[int, int] = {identity.pid: identity.start_time for identity in also}  # pid -> start
        self.group_termed = False
        self.termed: set[int] = set()  # strays that had their SIGTERM
        self.killed: set[tuple[int, int]] = set()  # (pid, start time) of what had SIGKILL: it can run no more
        self.survivors: tuple[int, ...] = ()
        self.finished = False
        self.due = now  # when the next step is due: a step taken sooner only costs a scan of /proc
        self.step(now)

    def step(self, now: float | None = None) -> bool:
        """Signal what is due and look again; whether the stop has finished (see :attr:`survivors`)."""
        if self.finished:
            return True
        now = time.monotonic() if now is None else now
        if now < self.kill_at:
            live = set(self._find(_scan()))
            if live:
                self._terminate()
        else:
            if self.give_up_at is None:
                self.give_up_at = now + self.settle
            live = self._kill()
            if live and now >= self.give_up_at:
                self.survivors = tuple(sorted(live))
        self.finished = not live or bool(self.survivors)
        self.due = now + (min(TICK, self.kill_at - now) if now < self.kill_at else TICK)
        return self.finished

    def hurry(self, now: float | None = None) -> None:
        """No more grace: the next :meth:`step`, due at once, sends SIGKILL."""
        now = time.monotonic() if now is None else now
        self.kill_at = self.due = min(self.kill_at, now)

    def wait(self, now: float | None = None) -> float:
        """Seconds until the next :meth:`step` is due (0 once finished)."""
        if self.finished:
            return 0.0
        return max(0.0, self.due - (time.monotonic() if now is None else now))

    def _find(self, procs: dict[int, _Proc]) -> dict[int, _Proc]:
        """Record the strays a scan of ``/proc`` links to the group; return the live processes of the group and of
        every stray."""
        children: dict[int, list[_Proc]] = {}
        for proc in procs.values():
            children.setdefault(proc.ppid, []).append(proc)
        roots = [proc for proc in procs.values() if self.pgid is not None and proc.pgrp == self.pgid]
        roots += [procs[pid] for pid, start in self.strays.items() if pid in procs and procs[pid].start_time == start]
        live = {proc.pid: proc for proc in roots}
        while roots:
            for child in children.get(roots.pop().pid, ()):
                if child.pid not in live:
                    live[child.pid] = child
                    roots.append(child)
                    if child.pgrp != self.pgid:
                        self.strays.setdefault(child.pid, child.start_time)
        return live

    def _live_strays(self, live: Iterable[int]) -> list[tuple[int, int]]:
        return [(pid, self.strays[pid]) for pid in live if pid in self.strays]

    def _signal_group(self, sig: int) -> None:
        if self.pgid is not None:
            signal_group(self.pgid, sig)

    def _terminate(self) -> None:
        """SIGTERM, once: to the group on its first step, to each stray when it is first found."""
        if not self.group_termed:
            self._signal_group(signals.SIGTERM)
            self.group_termed = True
        for pid, start in self.strays.items():
            if pid not in self.termed:
                _signal_stray(pid, start, signals.SIGTERM)
                self.termed.add(pid)

    def _kill(self) -> set[int]:
        """Freeze the group, then every stray as it is found, and wait (up to :data:`FREEZE_WAIT`) until what was
        found is stopped -- a stopped parent can neither fork nor move a child out, and is still there to link its
        strays to the group -- then SIGKILL it all. What had SIGKILL already needs no freezing: it runs no more.
        Returns what was alive before this round's SIGKILL."""
        self._signal_group(signals.SIGSTOP)
        frozen: set[int] = set()
        give_up = time.monotonic() + FREEZE_WAIT
        while True:
            live = self._find(_scan())
            fresh = [(pid, start) for pid, start in self._live_strays(live) if pid not in frozen]
            for pid, start in fresh:
                _signal_stray(pid, start, signals.SIGSTOP)
                frozen.add(pid)
            running = [p for p in live.values() if p.state not in _STOPPED and (p.pid, p.start_time) not in self.killed]
            if (not fresh and not running) or time.monotonic() >= give_up:
                break
            if not fresh:
                time.sleep(TICK / 20)  # a stop signal takes effect when its process next runs
        for pid, start in self._live_strays(live):
            _signal_stray(pid, start, signals.SIGKILL)
        self._signal_group(signals.SIGKILL)
        self.killed.update((proc.pid, proc.start_time) for proc in live.values())
        return set(live)


def terminate_group(pgid: int, *, grace: float, settle: float | None = None) -> tuple[int, ...]:
    """Stop a process group (:class:`GroupStop`) and wait until it is gone: SIGTERM, up to ``grace`` seconds for
    it to exit, then SIGKILL repeated until nothing of it is left, for at most ``settle`` seconds.

    Returns the pids still alive then -- normally none; raise :class:`GroupSurvived` with them where going on
    would be wrong. A group that does not exist is nothing to do. Zombie members count as gone: a caller whose own
    child leads the group must still reap it. ValueError for our own group or a pgid <= 1.
    """
    return _wait_out(GroupStop(pgid, grace=grace, settle=settle))


def terminate_process(identity: ProcessIdentity, *, grace: float, settle: float | None = None) -> tuple[int, ...]:
    """Stop one process outside any group of ours (and its descendants) as :func:`terminate_group` stops a group;
    a pid that now belongs to another process (another start time) is left alone. Returns the survivors."""
    return _wait_out(GroupStop(None, grace=grace, settle=settle, also=(identity,)))


def _wait_out(stop: GroupStop) -> tuple[int, ...]:
    while not stop.step():
        time.sleep(stop.wait())
    return stop.survivors


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """A process over time: its pid plus its start time (``/proc/<pid>/stat`` field 22, clock ticks since boot)."""

    pid: int
    start_time: int


def process_identity(pid: int) -> ProcessIdentity | None:
    """The identity of a running process; None when there is no such process or it has already exited.

    A zombie (exited, not yet reaped by its parent) has no identity: it will never run again, and once reaped its
    pid can be given to another process. For any pid ``/proc`` shows, including a thread id.
    """
    fields = _read_stat(pid)
    if fields is None or fields[0] in _DEAD_STATES:
        return None
    try:
        return ProcessIdentity(pid, int(fields[19]))  # field 22 overall; fields[0] is field 3
    except ValueError:
        return None


def is_alive(identity: ProcessIdentity) -> bool:
    """Whether the process is still running: same pid *and* same start time, so a reused pid never counts."""
    current = process_identity(identity.pid)
    return current is not None and current.start_time == identity.start_time


def boot_id() -> str | None:
    """This boot's random id (``/proc/sys/kernel/random/boot_id``); start times are only comparable within one."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            value = handle.read().strip()
    except OSError:
        return None
    return value or None
