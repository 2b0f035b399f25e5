"""Salvage refs: an agent's work that was never handed off, saved to a ref before its worktree is removed.

Cleanup that "deletes DIRTY and UNPUSHED agent worktrees" -- the lost commit found again only with ``git fsck
--unreachable`` -- is how parallel-agent tools lose work. Here nothing removes a worker's worktree without first
calling :func:`save`, which writes what only the worktree holds to
``refs/agentops/runs/<run>/salvage/<worker>/<generation>``:

* a commit whose **tree is the work tree as the agent left it** -- tracked files as they are on disk, deletions,
  and every untracked file that is not ignored (``git add --all`` into a scratch index built from HEAD: the agent's
  own index is never touched) -- and whose first parent is the worktree's **HEAD**, so commits the agent made but
  did not hand off are kept by the same ref;
* a second parent holding the **staged** tree, when the agent's index differs from both HEAD and the work tree (a
  file staged, then edited again: both versions are kept);
* nothing at all when there is nothing to keep: a clean work tree whose HEAD is already in a delivery (or is the
  worker's base).

Git is run neutralised (:mod:`git_agentops.gitstore.safegit`) with the worktree's admin dir found by *name*, never
through its ``.git`` file, which the agent could point anywhere; objects the agent wrote into its quarantine are
moved into the shared store first (:func:`~git_agentops.gitstore.quarantine.ingest`). The ref is created by
compare-and-swap: the same tree saved twice is one salvage, other work under a taken name is ``SALVAGE_EXISTS`` --
and then the worktree is kept, so nothing is lost either way. The tool never deletes a salvage ref.

:func:`restore` makes a new linked worktree at the salvage's HEAD with the salvaged files written over it: the
work appears exactly as the agent left it, uncommitted, byte for byte.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pygit2

from ..errors import AgentOpsError
from .quarantine import ingest, reader_alternates
from .refnames import RefConflict
from .refs import list_refs, read_ref, update_ref
from .repo import Store
from .safegit import run_git
from .worktree import head_in

SHOWN: Final = 40
"""Paths listed in a salvage commit's message (the tree holds them all)."""


def salvage_prefix(run_id: str) -> str:
    """Where a run's salvage refs live."""
    return f"refs/agentops/runs/{run_id}/salvage/"


def salvage_ref(run_id: str, worker_id: str, generation: int) -> str:
    """The salvage ref of one worker's generation."""
    return f"{salvage_prefix(run_id)}{worker_id}/{generation}"


@dataclass(frozen=True, slots=True)
class Salvaged:
    """One salvage ref: whose work, which generation, the commit, what it holds."""

    ref: str
    worker_id: str
    generation: int
    commit: str
    head: str | None
    paths: tuple[str, ...]
    saved_at: int

    def to_json(self) -> dict[str, object]:
        """As ``run salvage --json`` shows it."""
        return {
            "ref": self.ref,
            "workerId": self.worker_id,
            "generation": self.generation,
            "commit": self.commit,
            "head": self.head,
            "paths": list(self.paths),
            "savedAt": self.saved_at,
        }


def _git(store: Store, admin: Path, worktree: Path, index: Path, *args: str) -> bytes:
    env = {
        "GIT_DIR": str(admin),
        "GIT_WORK_TREE": str(worktree),
        "GIT_INDEX_FILE": str(index),
        **reader_alternates(admin),
    }
    done = run_git(worktree, *args, env=env, timeout=1800)
    if done.returncode != 0:
        raise AgentOpsError(
            "GIT_FAILED", f"git {args[0]} in {worktree} failed: {done.stderr.decode(errors='replace').strip()[-500:]}"
        )
    return done.stdout


def _tree_of(store: Store, commit: str) -> str | None:
    try:
        return str(store.repo[commit].peel(pygit2.Tree).id)
    except (KeyError, ValueError, pygit2.GitError):
        return None


def _handed(store: Store, head: str, handed: Iterable[str]) -> bool:
    for commit in handed:
        if not commit or not store.has_object(commit):
            continue
        if commit == head or store.repo.descendant_of(commit, head):
            return True
    return False


def _changed(store: Store, old_tree: str | None, new_tree: str) -> list[str]:
    new = store.repo.get(new_tree)
    assert isinstance(new, pygit2.Tree)
    if old_tree is None:
        return sorted(p for p in _walk(new))
    old = store.repo.get(old_tree)
    assert isinstance(old, pygit2.Tree)
    diff = old.diff_to_tree(new)
    return sorted({d.new_file.path or d.old_file.path for d in diff.deltas})


def _walk(tree: pygit2.Tree, prefix: str = "") -> Iterable[str]:
    for entry in tree:
        path = f"{prefix}{entry.name}"
        if isinstance(entry, pygit2.Tree):
            yield from _walk(entry, path + "/")
        else:
            yield path


def save(
    store: Store,
    worktree: Path,
    *,
    admin_name: str,
    run_id: str,
    worker_id: str,
    generation: int,
    handed: Iterable[str] = (),
    now: int,
) -> Salvaged | None:
    """Save the worktree's unhanded-off work to its salvage ref (see the module docstring); None when there is none.

    ``handed``: commits whose history is kept elsewhere (the worker's deliveries, its base). Raises ``GIT_FAILED``
    (the work tree could not be read: the caller keeps the worktree) and ``SALVAGE_EXISTS``.
    """
    admin = store.common_dir / "worktrees" / admin_name
    if not worktree.is_dir() or worktree.is_symlink() or not admin.is_dir() or admin.is_symlink():
        return None
    head = head_in(store, admin)
    store.private_dir().mkdir(mode=0o700, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="salvage-", dir=store.private_dir()))
    try:
        index = scratch / "index"
        if head is not None:
            _git(store, admin, worktree, index, "read-tree", head)
        _git(store, admin, worktree, index, "add", "--all", "--", ".")
        tree = _git(store, admin, worktree, index, "write-tree").decode().strip()
        staged = _staged_tree(store, admin, worktree, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    head_tree = _tree_of(store, head) if head is not None else None
    extra = staged if staged not in (None, tree, head_tree) else None
    if tree == head_tree and extra is None and (head is None or _handed(store, head, handed)):
        return None
    paths = _changed(store, head_tree, tree)
    signature = store.signature()
    parents = [head] if head is not None else []
    if extra is not None:
        staged_commit = store.repo.create_commit(
            None, signature, signature, "agentops salvage: the staged files\n", extra, list(parents)
        )
        parents.append(str(staged_commit))
    shown = "\n".join(f"  {p}" for p in paths[:SHOWN]) + (
        f"\n  ... {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
    )
    message = (
        f"agentops salvage: {run_id}/{worker_id} generation {generation}\n\n"
        f"What the worktree held beyond its HEAD when it was removed ({len(paths)} paths):\n{shown}\n"
    )
    commit = str(store.repo.create_commit(None, signature, signature, message, tree, parents))
    name = salvage_ref(run_id, worker_id, generation)
    existing = read_ref(store, name)
    if existing is None:
        try:
            update_ref(store, name, commit, None, "agentops: salvage before removing a worktree")
            existing = commit
        except RefConflict:
            existing = read_ref(store, name)
    if existing != commit:
        if existing is None or _tree_of(store, existing) != tree:
            raise AgentOpsError(
                "SALVAGE_EXISTS",
                f"{name} already holds other work ({(existing or '')[:12]}); {worktree} is kept as it is -- look at "
                "both, then remove the worktree yourself",
                details={"ref": name, "existing": existing, "worktree": str(worktree)},
            )
        commit = existing
    return Salvaged(name, worker_id, generation, commit, head, tuple(paths), now)


def _staged_tree(store: Store, admin: Path, worktree: Path, scratch: Path) -> str | None:
    """The tree of the agent's own index (a copy of it: the original is never written), or None if unreadable."""
    source = admin / "index"
    if not source.is_file() or source.is_symlink():
        return None
    copy = scratch / "staged-index"
    shutil.copyfile(source, copy)
    try:
        tree = _git(store, admin, worktree, copy, "write-tree").decode().strip()
        ingest(store, admin, tree)
    except AgentOpsError:
        return None  # a corrupt index, or one naming objects nobody has: the work tree itself is saved anyway
    return tree if store.has_object(tree) else None


def listing(store: Store, run_id: str) -> list[Salvaged]:
    """Every salvage ref of the run, oldest first."""
    out: list[Salvaged] = []
    prefix = salvage_prefix(run_id)
    for name, target in list_refs(store, prefix).items():
        worker_id, _, generation = name[len(prefix) :].rpartition("/")
        try:
            commit = store.repo[target].peel(pygit2.Commit)
        except (KeyError, ValueError, pygit2.GitError):
            continue
        if not generation.isdigit():
            continue
        head = str(commit.parent_ids[0]) if commit.parent_ids else None
        paths = _changed(store, _tree_of(store, head) if head else None, str(commit.tree_id))
        out.append(Salvaged(name, worker_id, int(generation), target, head, tuple(paths), commit.commit_time))
    return sorted(out, key=lambda s: (s.saved_at, s.worker_id, s.generation))


def find(store: Store, run_id: str, which: str) -> Salvaged:
    """The salvage ``WORKER`` (its newest generation) or ``WORKER/GENERATION``; ``SALVAGE_NOT_FOUND``."""
    worker_id, _, generation = which.partition("/")
    matches = [s for s in listing(store, run_id) if s.worker_id == worker_id]
    if generation:
        matches = [s for s in matches if str(s.generation) == generation]
    if not matches:
        raise AgentOpsError("SALVAGE_NOT_FOUND", f"run {run_id} has no salvage of {which}")
    return max(matches, key=lambda s: s.generation)


def restore(store: Store, salvaged: Salvaged, into: Path) -> Path:
    """A new linked worktree at ``into``, detached at the salvage's HEAD, with the salvaged work tree written over
    it (untracked files stay untracked); ``SALVAGE_RESTORE_REFUSED`` when ``into`` exists."""
    if into.exists() or into.is_symlink():
        raise AgentOpsError(
            "SALVAGE_RESTORE_REFUSED", f"{into} exists; name a new directory with --into (nothing was written)"
        )
    start = salvaged.head or salvaged.commit
    into.parent.mkdir(parents=True, exist_ok=True)
    done = run_git(store.common_dir, "worktree", "add", "--detach", "--quiet", str(into), start, timeout=1800)
    if done.returncode != 0:
        raise AgentOpsError("GIT_FAILED", f"cannot check {start[:12]} out at {into}: {done.stderr.decode().strip()}")
    done = run_git(into, "restore", f"--source={salvaged.commit}", "--worktree", "--", ":/", timeout=1800)
    if done.returncode != 0:
        raise AgentOpsError(
            "GIT_FAILED", f"cannot write the salvage into {into}: {done.stderr.decode(errors='replace').strip()}"
        )
    return into
