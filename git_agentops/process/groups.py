"""Process groups and process identities: stopping a whole group, and knowing a process again later.

* **Groups.** Every command and agent the toolkit starts leads its own session and process group; stopping it
  means signalling the group (``killpg``): SIGTERM, a grace period, then SIGKILL for whatever ignored it. Members
  are found by scanning ``/proc``; zombies count as gone.
* **Identity.** A pid alone does not identify a process across time: pids wrap and are reused. A
  :class:`ProcessIdentity` adds the start time (``/proc/<pid>/stat`` field 22, clock ticks since boot), so a
  recorded agent is never mistaken for a newer process that got the same pid. Start times count from boot;
  compare :func:`boot_id` before trusting an identity recorded by an earlier boot.

Linux only: both read ``/proc``.
"""

from __future__ import annotations

import os
import signal as signals
import time
from dataclasses import dataclass
from typing import Final

KILL_SETTLE: Final = 1.0
"""Seconds to wait for the group to vanish after SIGKILL before giving up on it (a process stuck in the kernel)."""

TICK: Final = 0.02  # how often a group is looked at while it is being stopped
_DEAD_STATES: Final = frozenset("ZXx")  # zombie, dead: exited, only waiting to be reaped


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


def group_members(pgid: int) -> list[int]:
    """Pids of the live (not zombie) processes of a process group, found by scanning ``/proc``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass
    members = []
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            fields = _read_stat(int(entry.name))
            if fields is not None and fields[2] == str(pgid) and fields[0] not in _DEAD_STATES:
                members.append(int(entry.name))
    return members


def terminate_group(pgid: int, *, grace: float) -> None:
    """SIGTERM a process group, wait up to ``grace`` seconds for its live members to exit, then SIGKILL it.

    Tolerates a group that does not exist (ESRCH) or cannot be signalled (EPERM). Zombie members count as gone:
    a caller whose own child leads the group must still reap it. After SIGKILL it waits up to
    :data:`KILL_SETTLE` seconds for the group to vanish, so on return the group is normally gone.
    """
    if not signal_group(pgid, signals.SIGTERM):
        return
    due = time.monotonic() + grace
    while group_members(pgid):
        if time.monotonic() >= due:
            break
        time.sleep(TICK)
    else:
        return
    signal_group(pgid, signals.SIGKILL)
    settle = time.monotonic() + KILL_SETTLE
    while group_members(pgid) and time.monotonic() < settle:
        time.sleep(TICK)


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
