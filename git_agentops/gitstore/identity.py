"""Who the toolkit's own commits (journal, notes) are attributed to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Identity:
    """The name and email on the toolkit's own commits.

    A :class:`~git_agentops.gitstore.repo.Store` takes git's ``user.name`` and ``user.email`` when both are set, else
    :data:`DEFAULT_IDENTITY`.
    """

    name: str
    email: str


DEFAULT_IDENTITY: Final = Identity("git-agentops", "git-agentops@localhost")
