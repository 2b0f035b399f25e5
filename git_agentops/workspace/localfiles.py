"""The person's untracked local files a workspace needs (``[worktree] include``): ``.env.local``, a dev config.

A new worktree has only what is committed, so the ``.env`` and local config a project's tests read are missing in
every agent's checkout. ``include`` names them, relative to the repository; each is copied from the person's
checkout into each new worker worktree (and into verification checkouts when ``include_in_verify`` is true), with
its mode. They are never part of a delivery: the handoff's scan refuses a delivery that adds one
(:mod:`git_agentops.integrate.secrets` takes them as secret paths), as it refuses a private key.

Every path is checked before any worker starts (:func:`sources`): one that leaves the checkout, passes through a
symlink pointing out of it, is not a regular file, or is tracked (it is in every worktree already, and would be
published) is ``WORKSPACE_INCLUDE_ESCAPE``; one that does not exist is ``WORKSPACE_INCLUDE_MISSING``. The copy is
made only into a worktree just created, before any agent ran there, and never through a symlink.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from ..errors import AgentOpsError
from ..gitstore.private import PathError, resolve_contained
from ..gitstore.repo import Store


def sources(store: Store, root: Path, include: Iterable[str]) -> list[tuple[str, Path]]:
    """Each include path with the file it is copied from in ``root`` (the person's checkout), checked."""
    out: list[tuple[str, Path]] = []
    index = store.repo.index if store.workdir is not None and store.workdir == root.resolve() else None
    for rel in include:
        try:
            source = resolve_contained(root, rel)
        except PathError as exc:
            raise AgentOpsError(
                "WORKSPACE_INCLUDE_ESCAPE", f"[worktree] include {rel!r} leaves the checkout {root}: {exc.message}"
            ) from exc
        try:
            info = os.lstat(source)
        except FileNotFoundError:
            raise AgentOpsError(
                "WORKSPACE_INCLUDE_MISSING",
                f"[worktree] include {rel!r}: there is no {root / rel} to copy into the workspaces; create it or take "
                "it out of the policy",
            ) from None
        if not stat.S_ISREG(info.st_mode):
            raise AgentOpsError(
                "WORKSPACE_INCLUDE_ESCAPE", f"[worktree] include {rel!r} is not a regular file in {root}"
            )
        if index is not None and rel in index:
            raise AgentOpsError(
                "WORKSPACE_INCLUDE_ESCAPE",
                f"[worktree] include {rel!r} is tracked: every worktree has it already, and a delivery would publish "
                "it; include names untracked local files only",
            )
        out.append((rel, source))
    return out


def copy_into(files: Iterable[tuple[str, Path]], destination: Path) -> list[str]:
    """Copy each checked file to the same relative path under ``destination`` (created, never followed through a
    symlink, never overwriting a file there); returns the paths copied."""
    copied: list[str] = []
    for rel, source in files:
        target = resolve_contained(destination, rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = stat.S_IMODE(os.stat(source).st_mode)
        data = source.read_bytes()
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        except FileExistsError:
            continue  # adopted worktree: what is there is the agent's (or an earlier copy), never overwritten
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(target, mode)
        copied.append(rel)
    return copied


def refusal_patterns(include: Iterable[str]) -> tuple[str, ...]:
    """The include paths as secret-path patterns (:func:`git_agentops.integrate.secrets.path_rule`): matched as
    written, so ``config/dev.json`` is that path and ``.env.local`` that name in any directory."""
    escapes = {"*": "[*]", "?": "[?]", "[": "[[]", "]": "[]]", "!": "[]!]"}  # "[]!]": "!" (or "]"), never a negation
    return tuple("".join(escapes.get(c, c) for c in rel) for rel in include)
