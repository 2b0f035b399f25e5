"""What a checkout's ``info/exclude`` gets, from init and from run creation: the toolkit's own files never belong
in a commit.

Kept apart from :mod:`.starter` because run creation and a lease's worktree provisioning need only this: the
starter's project readers (CI workflows, tox, nox, Makefiles, pyproject...) are a large import that those hot
paths never use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from ..envs.tools import VENV
from ..files import read_text
from ..model.hosts import registry

EXCLUDES: Final = (
    ".agentops/worktrees/",
    ".agentops/mailbox/",
    ".agentops/review/",
    ".agentops/proposals/",
    f"{VENV}/",
    "*.egg-info/",
    "/.codex/hooks.json",  # where Codex's guard was before it moved to the agent's CODEX_HOME
    *sorted({f"/{rel}" for kind in registry().values() for rel in kind.guard_files("guard")}),
    *sorted({f"/{rel}" for kind in registry().values() for rel in kind.leaves}),
)
"""What ``info/exclude`` gets (from init and from run creation): the toolkit's own directories (a coordinator writes
a proposed policy under ``.agentops/proposals/``), the checkout's venv, the ``.egg-info`` a setuptools editable
install writes into the checkout, and the agent hosts' guard hook files each worker worktree gets
(each kind's ``guard_files``, :mod:`git_agentops.model.hosts`) and what a host leaves there of its own accord (its
``leaves``: aider's repository map cache and histories) -- none of it belongs in a commit, and any of it untracked
would make verification refuse the checkout as dirty."""


def missing_excludes(exclude_file: Path) -> list[str]:
    present = set((read_text(exclude_file) or "").splitlines())
    return [line for line in EXCLUDES if line not in present]


def add_excludes(exclude_file: Path, lines: list[str]) -> None:
    if not lines:
        return
    exclude_file.parent.mkdir(parents=True, exist_ok=True)
    current = read_text(exclude_file) or ""
    prefix = "" if not current or current.endswith("\n") else "\n"
    with exclude_file.open("a", encoding="utf-8") as handle:
        handle.write(
            prefix + "# git-agentops: worktrees, mailboxes and checkout environments never belong in commits\n"
        )
        handle.write("".join(f"{line}\n" for line in lines))
