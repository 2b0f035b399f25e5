"""The launcher's half of a sandboxed agent: reap every child, and stop the whole tree, daemons included.

A process group is not enough to find what an agent started: ``setsid`` and double-forked daemons leave it, and
once their parent exits they are reparented to init, out of anyone's reach. The launcher therefore makes itself a
*child subreaper* (``PR_SET_CHILD_SUBREAPER``): every orphan of its subtree is reparented to it instead, so every
process the agent ever started stays a descendant of the launcher, found by walking ``/proc`` ppid links down from
it, until the launcher has reaped it.

Signals are delivered through pidfds: a pid read from ``/proc`` may die and be reused (``pid_max`` is often 32768)
before it is signalled; a pidfd opened on it and then checked to still descend from the launcher can only reach
that very process. Where pidfds are refused (old kernel, seccomp) the check-then-``kill`` fallback leaves that
window open.

Signals of the launcher's own (SIGCHLD and the stop signals) are blocked and taken synchronously with
``sigtimedwait``: no handler runs at an arbitrary point of a stop. Like :mod:`.landlock` this module is loaded by
path by the standalone launcher, so it imports only the standard library.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

PR_SET_CHILD_SUBREAPER: Final = 36
STOP_SIGNALS: Final = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
"""Signals that make the launcher stop the tree and exit 128 + signal."""
WAITED: Final = frozenset({signal.SIGCHLD, *STOP_SIGNALS})
"""Signals the launcher blocks and waits for; its child must unblock them before ``exec``."""
KILL_SETTLE: Final = 1.0
"""Seconds the tree may take to vanish after SIGKILL (a process stuck in the kernel) before the launcher leaves."""
TICK: Final = 0.02
_DEAD: Final = frozenset("ZXx")  # zombie or dead: exited, only waiting to be reaped
_MAX_DEPTH: Final = 4096


def set_child_subreaper() -> None:
    """Make this process the reaper of every orphan of its subtree; OSError if the kernel refuses."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.restype = ctypes.c_int
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    if prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(code)}")


def _stat(pid: int) -> tuple[int, str] | None:
    """``(ppid, state)`` of a process, from ``/proc/<pid>/stat``; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    fields = raw.rpartition(b")")[2].split()  # the command name may hold spaces and ')': split after the last one
    if len(fields) < 2:
        return None
    return int(fields[1]), fields[0].decode("ascii", "replace")


def descendants(root: int) -> list[int]:
    """The live (not zombie) descendants of ``root``, parents before children, from one scan of ``/proc``."""
    children: dict[int, list[tuple[int, str]]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = _stat(int(name))
            if info is not None:
                children.setdefault(info[0], []).append((int(name), info[1]))
    live: list[int] = []
    queue = [root]
    while queue:
        for pid, state in children.get(queue.pop(0), ()):
            queue.append(pid)
            if state not in _DEAD:
                live.append(pid)
    return live


def descends_from(pid: int, root: int) -> bool:
    """Whether ``pid`` is now a live descendant of ``root``, following ppid links up through ``/proc``."""
    info = _stat(pid)
    if info is None or info[1] in _DEAD:
        return False
    for _ in range(_MAX_DEPTH):
        if info is None or info[0] <= 1:
            return False
        if info[0] == root:
            return True
        info = _stat(info[0])
    return False


def signal_descendant(pid: int, sig: int, root: int) -> bool:
    """Send ``sig`` to ``pid`` if, once pinned by a pidfd, it still descends from ``root``; whether it was sent."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except OSError:  # no pidfds here: check, then kill
        if not descends_from(pid, root):
            return False
        try:
            os.kill(pid, sig)
        except OSError:  # gone (ESRCH), or it became another user's (EPERM)
            return False
        return True
    try:
        if not descends_from(pid, root):
            return False
        signal.pidfd_send_signal(pidfd, sig)
    except OSError:
        return False
    finally:
        os.close(pidfd)
    return True


def signal_tree(root: int, sig: int) -> int:
    """Send ``sig`` to every live descendant of ``root``; returns how many were signalled."""
    return sum(signal_descendant(pid, sig, root) for pid in descendants(root))


class Reaper:
    """Wait for the agent, reap every child, and on the agent's exit or a stop signal stop the whole tree.

    The caller has blocked :data:`WAITED` before forking the agent (so no SIGCHLD or stop signal is lost) and
    made itself a subreaper. :meth:`run` returns the launcher's exit status.
    """

    def __init__(self, agent: int, *, grace: float) -> None:
        self.root = os.getpid()
        self.agent = agent
        self.grace = grace
        self.agent_status: int | None = None  # the raw wait status, once the agent's main process was reaped
        self.stop_signal: int | None = None
        self.kill_due: float | None = None  # set when the tree has had its SIGTERM
        self.give_up: float | None = None  # set when SIGKILL has begun

    def reap(self) -> bool:
        """Reap every child that has exited; whether any child (exited or not) is left."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.agent:
                self.agent_status = status

    def run(self) -> int:
        """Supervise until the tree is gone; the agent's exit status (128 + signal), or 128 + a stop signal."""
        while True:
            children_left = self.reap()
            if not children_left and self.agent_status is not None:
                break  # no child at all: as the subreaper of the tree, then no descendant either
            now = time.monotonic()
            if self.kill_due is None and (self.agent_status is not None or self.stop_signal is not None):
                signal_tree(self.root, signal.SIGTERM)
                self.kill_due = now + self.grace
            if self.kill_due is not None and self.give_up is None and now >= self.kill_due:
                self.give_up = now + KILL_SETTLE
            if self.give_up is not None:
                signal_tree(self.root, signal.SIGKILL)  # every tick: whatever was forked since the last one
            if self.kill_due is not None:
                if not children_left and not descendants(self.root):
                    break
                if self.give_up is not None and now >= self.give_up:
                    break
            self._wait(now)
        self.reap()
        return self.exit_status()

    def _wait(self, now: float) -> None:
        info: signal.struct_siginfo | None
        if self.kill_due is None:
            info = signal.sigwaitinfo(WAITED)
        else:
            due = self.kill_due if self.give_up is None else now + TICK
            info = signal.sigtimedwait(WAITED, max(0.0, min(TICK, due - now)))
        if info is None or info.si_signo not in STOP_SIGNALS:
            return
        if self.stop_signal is None:
            self.stop_signal = info.si_signo
        elif self.kill_due is not None and self.give_up is None:
            self.kill_due = now  # a second stop signal: no more grace

    def exit_status(self) -> int:
        """128 + the stop signal if one came; else the agent's exit code, or 128 + the signal that killed it."""
        if self.stop_signal is not None:
            return 128 + self.stop_signal
        if self.agent_status is None:
            return 128 + signal.SIGKILL  # not reaped within KILL_SETTLE: stuck in the kernel
        code = os.waitstatus_to_exitcode(self.agent_status)
        return code if code >= 0 else 128 - code
