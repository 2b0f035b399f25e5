"""The refusal coalescer: per worker and code, at most one ``REQUEST_REFUSED`` commit a window (:mod:`.requests`).

It is in-memory state of one supervisor loop -- a new supervisor starts with nothing held back -- so the loop owns
one (``loop.refusals``) and :mod:`.requests` uses it through the loop; it holds no module-level state, and tests
drive it without a loop. It decides only what to commit and when; :func:`.requests.flush_refusals` commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

REFUSAL_WINDOW: Final = 60.0
"""Seconds of the supervisor's clock per worker and code with at most one ``REQUEST_REFUSED`` commit."""


@dataclass(slots=True)
class _Window:
    """One worker and code: when its last event was committed, and the refusals held back since."""

    opened: float
    count: int = 0
    since: float = 0.0
    last: dict[str, Any] | None = None


class Refusals:
    """The refusal coalescer of one supervisor loop (in memory: a new supervisor starts with none held back)."""

    def __init__(self) -> None:
        self.windows: dict[tuple[str, str], _Window] = {}

    def admit(
        self, worker_id: str, code: str, now: float, refusal: dict[str, Any], *, record: bool
    ) -> dict[str, Any] | None:
        """None when this refusal is held back; otherwise the data to add to its event (the count it carries)."""
        key = (worker_id, code)
        window = self.windows.get(key)
        if window is not None and not record and now - window.opened < REFUSAL_WINDOW:
            if not window.count:
                window.since = now
            window.count += 1
            window.last = refusal
            return None
        self.windows[key] = _Window(now)
        if window is not None and window.count:
            return {"count": window.count + 1, "since": window.since}
        return {}

    def due(self, now: float, *, worker_id: str | None = None, force: bool = False) -> list[dict[str, Any]]:
        """The data of the events to commit for windows that ended holding refusals back (all, with ``force``); each
        such window starts anew, and ended empty windows are forgotten."""
        out = []
        for key, window in list(self.windows.items()):
            if worker_id is not None and key[0] != worker_id:
                continue
            ended = now - window.opened >= REFUSAL_WINDOW
            if window.count and window.last is not None and (ended or force):
                out.append({**window.last, "count": window.count, "since": window.since})
                self.windows[key] = _Window(now)
            elif ended and not window.count:
                del self.windows[key]
        return out
