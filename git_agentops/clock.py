"""Time as an argument.

Core code never calls ``time.time()`` for anything it records; it asks the clock it was given. The CLI passes
:class:`SystemClock`; tests pass :class:`FixedClock` so commit dates, events and budgets are reproducible.
Monotonic time for timeouts and backoff is not recorded anywhere and comes from :mod:`time` directly.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()


class FixedClock:
    """A clock that only moves when told to (``advance``), or by ``step`` on every read."""

    def __init__(self, start: float = 1_767_225_600.0, step: float = 0.0) -> None:  # 2026-01-01T00:00:00Z
        self._now = start
        self._step = step

    def now(self) -> float:
        value = self._now
        self._now += self._step
        return value

    def advance(self, seconds: float) -> None:
        self._now += seconds


def iso8601(seconds: float) -> str:
    """``YYYY-MM-DDTHH:MM:SS.mmmZ`` in UTC."""
    stamp = datetime.fromtimestamp(seconds, tz=UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"
