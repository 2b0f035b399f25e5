"""Whole-operation retry with exponential backoff, jitter and a deadline.

libgit2 does not wait for a locked ref, it fails at once; and a compare-and-swap that loses a race must re-read
and re-apply the *whole* operation, not just the final write (Gerrit's RetryHelper is the model). This helper
runs ``attempt`` until it returns without raising :class:`Retry`, sleeping ``min(cap, base * 2**n)`` scaled by
a random factor in [0.5, 1.5) between tries, and gives up with the caller's error code at the deadline.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ..errors import AgentOpsError

T = TypeVar("T")


class Retry(Exception):
    """Raised by an attempt that lost a race and should be run again from scratch."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long :func:`run_with_retry` keeps trying and how it backs off.

    ``deadline`` is in seconds of wall time. The sleep after the n-th lost attempt is ``base * 2**n``, at most ``cap``,
    scaled by a random factor in [0.5, 1.5) and never past the deadline.
    """

    deadline: float = 20.0  # seconds of wall time before giving up
    base: float = 0.0005  # first backoff
    cap: float = 0.05  # longest single backoff


DEFAULT_POLICY = RetryPolicy()


@dataclass(slots=True)
class RetryStats:
    """Filled in by :func:`run_with_retry` as it goes: the attempts made, and the reason the last one lost."""

    attempts: int = 0
    last_reason: str = ""


def run_with_retry(
    attempt: Callable[[], T],
    *,
    policy: RetryPolicy,
    code: str,
    what: str,
    sleep: Callable[[float], None] = time.sleep,
    stats: RetryStats | None = None,
) -> T:
    """Run ``attempt`` until it does not raise :class:`Retry`; raise ``code`` when the deadline passes."""
    stats = stats if stats is not None else RetryStats()
    start = time.monotonic()
    tries = 0
    while True:
        stats.attempts += 1
        try:
            return attempt()
        except Retry as lost:
            stats.last_reason = lost.reason
        tries += 1
        elapsed = time.monotonic() - start
        if elapsed >= policy.deadline:
            raise AgentOpsError(
                code,
                f"{what}: gave up after {tries} attempts in {elapsed:.1f}s ({stats.last_reason})",
                details={"attempts": tries, "elapsedSeconds": round(elapsed, 3)},
            )
        delay = min(policy.cap, policy.base * (2 ** min(tries, 20))) * (0.5 + random.random())
        sleep(min(delay, max(0.0, policy.deadline - elapsed)))
