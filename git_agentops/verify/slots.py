"""Verification slots: at most ``[run] max_verifications`` clean verifications at once, across every process.

A handoff's verification is a whole test suite. With three workers handing off together on a two-core machine,
three suites ran at once and each took seven times as long as alone; nothing but ``max_workers`` bounded them, and a
person's ``git agentops-verify`` or a second run's supervisor on the same repository added more. So a verification
first takes a *slot*: one of ``limit`` lock files, ``$GIT_COMMON_DIR/agentops/verify-slots/<n>.lock``, held with
``flock`` (:func:`~git_agentops.gitstore.private.file_lock`) while it sets up and runs its commands.

* **Across processes**: the slots are files in the common dir, so every supervisor of every run of the repository
  and every ``git agentops-verify`` share them; a lock is per open file, so job threads of one supervisor exclude
  each other just as processes do.
* **Crash-safe**: the kernel drops a dead process's ``flock``; there is nothing to clean up.
* **No deadlock**: a holder waits for nothing but its own bounded work (each command and setup step has its
  timeout), so a waiter is served once one of them ends. Waiting is by polling (no ``flock`` waits for one of *n*
  files), at most :data:`POLL_MAX` seconds between looks.

Each lock file says who holds it (pid and what it verifies), so a waiter can tell the person what it waits for.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from ..errors import AgentOpsError, LockHeld
from ..gitstore.private import file_lock

SLOTS: Final = "verify-slots"
"""The slots' directory inside the private dir (``$GIT_COMMON_DIR/agentops``)."""
POLL_MIN: Final = 0.01
POLL_MAX: Final = 0.2


def _holder(private_dir: Path, index: int) -> str:
    try:
        return (private_dir / SLOTS / f"{index}.lock").read_text("utf-8", errors="replace").strip()[:200]
    except OSError:
        return ""


@contextlib.contextmanager
def verification_slot(
    private_dir: Path,
    limit: int | None,
    *,
    what: str,
    timeout: float | None = None,
    waiting: Callable[[str], None] | None = None,
) -> Iterator[int]:
    """Hold one of ``limit`` verification slots of the repository whose private dir is ``private_dir``.

    Yields the slot's number; ``limit`` None is one slot per core of this machine. ``what`` (a run and worker,
    ``git agentops-verify``) is written into the slot for waiters to see; ``waiting`` is told once, when every slot
    is busy, who holds them. Waits as long as the holders take, or ``timeout`` seconds (``LOCK_TIMEOUT``).
    """
    if limit is None:
        limit = max(1, os.cpu_count() or 1)
    if limit < 1:
        raise ValueError(f"a verification needs at least one slot, not {limit}")
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = POLL_MIN
    told = False
    while True:
        for index in range(limit):
            with contextlib.ExitStack() as stack:
                try:
                    fd = stack.enter_context(file_lock(private_dir, f"{SLOTS}/{index}.lock", blocking=False))
                except LockHeld:
                    continue
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"pid {os.getpid()}: {what}\n".encode("utf-8", errors="replace"), 0)
                yield index
                return
        if waiting is not None and not told:
            holders = "; ".join(filter(None, (_holder(private_dir, i) for i in range(limit)))) or "unknown"
            waiting(f"waiting for a verification slot: all {limit} are busy ([run] max_verifications; {holders})")
            told = True
        if deadline is not None and time.monotonic() >= deadline:
            raise AgentOpsError(
                "LOCK_TIMEOUT",
                f"no verification slot came free in {timeout:.0f}s (all {limit} busy; [run] max_verifications)",
            )
        time.sleep(delay)
        delay = min(delay * 2, POLL_MAX)
