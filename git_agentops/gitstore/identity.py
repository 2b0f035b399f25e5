"""Who the toolkit's own commits (journal, notes) are attributed to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Identity:
    name: str
    email: str


DEFAULT_IDENTITY: Final = Identity("git-agentops", "git-agentops@localhost")
