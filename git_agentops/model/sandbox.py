"""Sandbox levels as values: their order, and the rule that an agent's work is only as walled as its weakest run.

An agent runs at one of :data:`LEVELS` (what each means: :mod:`git_agentops.sandbox.plan`). What a worker record
and a receipt claim is the **weakest** level that ever applied: a worker restarted by a supervisor on a machine
without namespaces ran part of its work at ``landlock``, and its commits cannot be vouched for as ``namespace``
work. An unknown level (a newer toolkit's, a forged one) counts as weaker than every known one: fail closed.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Final


class Level(enum.StrEnum):
    """A sandbox level (what each means: :mod:`git_agentops.sandbox.plan`); records and receipts hold its string."""

    NAMESPACE = "namespace"
    LANDLOCK = "landlock"
    NONE = "none"


LEVELS: Final = tuple(Level)
"""The sandbox levels, strongest first (:mod:`git_agentops.sandbox.plan` chooses one; ``receipt verify
--require-sandbox`` compares by this order)."""


def rank(level: str) -> int:
    """``level``'s place in :data:`LEVELS` (0: strongest); an unknown level ranks below ``none``."""
    return LEVELS.index(level) if level in LEVELS else len(LEVELS)


def weakest(levels: Iterable[str | None]) -> str | None:
    """The weakest of ``levels``; None entries (no generation recorded yet) are skipped; None when all are."""
    known = [level for level in levels if level is not None]
    return max(known, key=rank) if known else None


def weakest_of_all(levels: Iterable[str | None]) -> str | None:
    """The weakest of ``levels``, or None when any of them is None: a level not recorded could be the weakest."""
    recorded = list(levels)
    return None if None in recorded else weakest(recorded)


def weaker(level: str, than: str) -> bool:
    """Whether ``level`` is weaker than ``than`` (an unknown level is weaker than any known one)."""
    return rank(level) > rank(than)
