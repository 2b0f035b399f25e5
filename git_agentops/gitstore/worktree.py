"""Linked worktrees through pygit2: create one on a branch, find one's admin directory, remove one.

``repo.add_worktree`` writes the worktree's admin directory (``$GIT_COMMON_DIR/worktrees/<name>/``: HEAD,
commondir, gitdir, index) and checks the branch out, exactly as ``git worktree list`` and ``git status``
expect. It needs an existing ``refs/heads/*`` ref and an existing parent directory. Removing prunes the admin
directory and deletes the files; the branch stays.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pygit2

from ..errors import AgentOpsError
from .checkout import admin_dir
from .clean import remove_tree
from .quarantine import ingest
from .repo import Store
from .safegit import run_git


def add_worktree(store: Store, *, name: str, path: Path, branch: str) -> Path:
    """Check ``branch`` (a full ``refs/heads/...`` name that exists) out at ``path``; returns the admin dir."""
    reference = store.repo.references.get(branch)
    if reference is None:
        raise AgentOpsError("OBJECT_MISSING", f"cannot create a worktree on {branch}: no such branch")
    path.parent.mkdir(parents=True, exist_ok=True)
    # libgit2 makes $GIT_COMMON_DIR/worktrees without tolerating a racer: two runs started at once in a repository
    # that had no linked worktree yet failed with "failed to make directory ... directory exists"
    (store.common_dir / "worktrees").mkdir(exist_ok=True)
    try:
        worktree = store.repo.add_worktree(name, str(path), reference)
    except (pygit2.GitError, ValueError) as exc:
        raise AgentOpsError("GIT_FAILED", f"cannot create worktree {name} at {path}: {exc}") from exc
    return admin_dir(path) or store.common_dir / "worktrees" / worktree.name


def detach_head(admin: Path, commit: str) -> None:
    """Point a linked worktree's HEAD straight at ``commit`` (detached): its commits then move only its own HEAD,
    in its admin dir -- no shared ref -- which is what a sandboxed agent can write."""
    tmp = admin / f"HEAD.agentops-tmp-{os.getpid()}"
    tmp.unlink(missing_ok=True)  # a leftover, or a link someone put there: the name itself, never its target
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(f"{commit}\n")
    os.replace(tmp, admin / "HEAD")


def head_of(store: Store, path: Path) -> str | None:
    """The commit a linked worktree's HEAD names (detached, or through a branch), read from its admin dir; None
    when there is none or it names no commit this repository has. A commit its agent wrote into its object
    quarantine is first moved into the shared store, re-hashed (:func:`~git_agentops.gitstore.quarantine.ingest`):
    whatever reads a worker's HEAD through here may then read it from the store."""
    admin = admin_dir(path)
    return head_in(store, admin) if admin is not None else None


def head_in(store: Store, admin: Path) -> str | None:
    """:func:`head_of` the worktree whose admin dir is ``admin`` (found by its name: the worktree's ``.git`` file
    is the agent's to edit)."""
    try:
        text = (admin / "HEAD").read_text("ascii", errors="replace").strip()
    except OSError:
        return None
    if text.startswith("ref: "):
        reference = store.repo.references.get(text[5:].strip())
        text = str(reference.resolve().target) if reference is not None else ""
    if text and not store.has_object(text):
        try:
            ingest(store, admin, text)
        except AgentOpsError:  # incomplete or forged in its quarantine: no commit of this repository
            return None
    return text if store.has_object(text) and isinstance(store.repo.get(text), pygit2.Commit) else None


def remove_worktree(store: Store, path: Path, name: str) -> None:
    """Delete the worktree's files and prune its admin directory (the branch is kept). Directories made read-only
    -- the host guard's are sealed 0555 (:mod:`git_agentops.gitstore.owned`), and whatever an agent sealed in its
    private HOME or object quarantine in the admin dir -- are made writable to be emptied."""
    admin = store.common_dir / "worktrees" / name  # by its name: the worktree's .git file is the agent's to edit
    if path.exists() or path.is_symlink():
        with contextlib.suppress(OSError):
            remove_tree(path)
    if admin.is_dir() and not admin.is_symlink():
        for own in ("agentops-home", "agentops-tmp", "agentops-objects"):
            with contextlib.suppress(OSError):
                remove_tree(admin / own)
    try:
        worktree = store.repo.lookup_worktree(name)
    except (pygit2.GitError, KeyError):
        return
    if worktree is not None:
        try:
            worktree.prune(True)
        except pygit2.GitError:
            pass


def worktree_names(store: Store) -> list[str]:
    """The names of the linked worktrees libgit2 lists (their admin dirs under ``$GIT_COMMON_DIR/worktrees/``)."""
    return list(store.repo.list_worktrees())


def add_detached_worktree(store: Store, path: Path, commit: str) -> None:
    """A throwaway detached checkout of ``commit`` at ``path`` (for verifying a candidate nobody works on)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    done = run_git(store.common_dir, "worktree", "add", "--detach", "--quiet", str(path), commit, timeout=600)
    if done.returncode != 0:
        error = done.stderr.decode(errors="replace").strip()
        raise AgentOpsError("GIT_FAILED", f"cannot check {commit[:12]} out at {path}: {error}")


def remove_detached_worktree(store: Store, path: Path) -> None:
    """Undo :func:`add_detached_worktree`, best effort: git's failures are ignored.

    ``git worktree remove --force``, then whatever is left at ``path`` is deleted and ``git worktree prune`` runs.
    """
    run_git(store.common_dir, "worktree", "remove", "--force", str(path), timeout=600)
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)
    run_git(store.common_dir, "worktree", "prune", timeout=600)
