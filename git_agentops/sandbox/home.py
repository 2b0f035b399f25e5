"""An agent's private HOME: what hosts read settings from, cleared before each generation; the person's files a host
needs, copied in; the host's own settings, written whole.

Nothing below the agent's HOME is followed (:class:`git_agentops.gitstore.owned.OwnedTree`): the agent writes
there, and a ``.codex`` it made a symlink to the person's own directory is unlinked, never walked into or written
through.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..gitstore.owned import OwnedTree
from ..model.hosts import kind_of, registry
from ..model.hosts.base import HomeContext
from .rules import expand

__all__ = ["home_settings", "prepare_home", "reset_home", "seed_home", "write_home_config"]


def home_settings() -> tuple[str, ...]:
    """Where the hosts read user-scope settings, hooks and plugins in HOME (each kind's ``home_settings``). An agent's
    private HOME outlives its generation, so what one generation planted there (``"disableAllHooks": true``, a
    plugin) is removed before the next starts; the host's ``home_files`` are copied in afterwards, then its
    ``home_config`` written."""
    return tuple(rel for kind in registry().values() for rel in kind.home_settings)


def reset_home(home: Path) -> list[Path]:
    """Remove :func:`home_settings` from an agent's private ``home``. Nothing below ``home`` is followed: a
    ``.codex`` the agent made a symlink to the person's own is unlinked, never walked into."""
    tree = OwnedTree(home, _untracked)
    for rel in home_settings():
        tree.prune(rel)
    return [home / rel for rel in tree.removed]


def _untracked(rel: str) -> bool:
    del rel
    return False


def seed_home(home: Path, files: Sequence[str], environ: Mapping[str, str]) -> list[Path]:
    """Copy each of the person's ``files`` (``~/...``, as the policy names them) to the same place in the agent's
    private ``home`` (0600: the agent may rewrite its copy, never the original). Missing files are skipped, and so
    is a path outside the person's HOME (nothing to copy: it is read where it is). Returns the copies made. Nothing
    the agent left below ``home`` is followed: a symlink on the way is replaced, never written through."""
    real_home = Path(environ.get("HOME") or os.path.expanduser("~"))
    tree = OwnedTree(home, _untracked)
    made = []
    for text in files:
        source = expand(text, environ)
        try:
            rel = source.relative_to(real_home)
        except ValueError:
            continue
        if not source.is_file() or rel == Path():
            continue
        try:
            data = source.read_bytes()
        except OSError:
            continue
        made.append(tree.write(rel.as_posix(), data, mode=0o600))
    return made


def write_home_config(home: Path, kind: str, ctx: HomeContext) -> list[Path]:
    """Write host ``kind``'s settings into the agent's private ``home`` whole (0600, nothing followed): the
    person's own for that CLI less what could weaken the guard, and the guard where the CLI reads it."""
    tree = OwnedTree(home, _untracked)
    return [tree.write(rel, data, mode=0o600) for rel, data in kind_of(kind).home_config(ctx).items()]


def prepare_home(
    home: Path, *, kind: str, home_files: Sequence[str], environ: Mapping[str, str], worktree: Path, hook_command: str
) -> None:
    """An agent's private ``home`` before a generation: what the last one planted where hosts read settings
    removed, the host's ``home_files`` copied in, its ``home_config`` written."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    reset_home(home)
    seed_home(home, home_files, environ)
    person = environ.get("HOME") or os.path.expanduser("~")
    write_home_config(home, kind, HomeContext(person, environ, str(worktree), hook_command, _read_person_file))


def _read_person_file(path: str) -> bytes | None:
    """One of the person's settings files, for a host's ``home_config`` (None when absent or over 1 MiB)."""
    from ..files import read_bounded

    try:
        data = read_bounded(Path(path), 1024 * 1024)
    except OSError:
        return None
    return data if len(data) <= 1024 * 1024 else None
