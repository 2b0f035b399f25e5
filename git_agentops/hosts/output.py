"""What an agent host printed about itself: its session id, the tokens and dollars it used, its final message.

Each kind's module reads its own output (:meth:`git_agentops.model.hosts.base.HostKind.parse`). Output that holds
no JSON event is reported as such (``parsed`` false), never an error: usage is evidence about cost, not a
condition of the run. The caller decides what to do with an unexpected format (a diagnostic event). Pure functions
over text.
"""

from __future__ import annotations

from ..model.hosts import registry
from ..model.hosts.base import HostReport

__all__ = ["HostReport", "parse"]


def parse(kind: str, text: str) -> HostReport | None:
    """What the output of one generation of a ``kind`` host says; None for kinds that report nothing."""
    host = registry().get(kind)
    return None if host is None else host.parse_text(text)
