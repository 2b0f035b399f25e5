"""Writing the objects an in-memory merge produces: merged blobs, rebuilt trees, merge commits.

The merge engine (:mod:`git_agentops.integrate.merge`) computes *what* to write; this module is where it is written, so
that object creation stays in the store layer like every other write (``tests/test_architecture.py``). Each
helper writes one object and returns its id as hex.

:func:`write_tree` starts from an existing tree and applies only the entries that changed. libgit2 copies the
untouched entries without looking at them and checks only the inserted ones exist (strict object creation), so
rebuilding one directory of a 200-entry tree costs a handful of lookups instead of 200. A merge therefore pays
for what changed, never for the size of the repository.

:func:`git_merge_tree` is the engine's fallback: ``git merge-tree --write-tree`` itself, which writes the objects
of its merge into the object database (and nothing else), for the merges whose result only git can promise --
through the repository's long-lived ``--stdin`` process (:mod:`.mergeserver`) when it can be had.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pygit2

from ..errors import AgentOpsError
from . import mergeserver
from .repo import Store
from .safegit import run_git

TreeChange = tuple[str, int] | None
"""A tree entry to set, ``(object id, file mode)``, or None to remove the name."""


def write_blob(store: Store, data: bytes) -> str:
    """Write ``data`` as a blob; returns its id as hex (content already stored keeps its existing id)."""
    return str(store.repo.create_blob(data))


def write_tree(store: Store, changes: Mapping[str, TreeChange], *, base: str | None = None) -> str | None:
    """The tree ``base`` (or an empty one) with ``changes`` applied; None when the result has no entries.

    Removing a name that is not there is a no-op. ``OBJECT_MISSING`` if ``base`` or an inserted object is
    missing.
    """
    repo = store.repo
    try:
        if base is None:
            builder = repo.TreeBuilder()
        else:
            base_tree = repo[base]
            if not isinstance(base_tree, pygit2.Tree):
                raise AgentOpsError("OBJECT_MISSING", f"{base} is not a tree")
            builder = repo.TreeBuilder(base_tree)
        for name, change in changes.items():
            if change is None:
                if builder.get(name) is not None:
                    builder.remove(name)
            else:
                builder.insert(name, pygit2.Oid(hex=change[0]), change[1])
    except (KeyError, ValueError, pygit2.GitError) as exc:
        raise AgentOpsError("OBJECT_MISSING", f"cannot build a tree: {exc}") from exc
    if len(builder) == 0:
        return None
    return str(builder.write())


def empty_tree(store: Store) -> str:
    """The id of the empty tree (written, so that libgit2 can read it back)."""
    return str(store.repo.TreeBuilder().write())


def write_index_tree(store: Store, index: pygit2.Index) -> str:
    """The tree of a fully merged in-memory index (libgit2 writes every subtree it does not already have)."""
    return str(index.write_tree(store.repo))


def write_commit(
    store: Store, tree: str, parents: Sequence[str], message: str, *, author: pygit2.Signature | None = None
) -> str:
    """A commit of ``tree`` with ``parents``, committed by the store's identity at its clock and authored by it too
    unless ``author`` says who wrote the change (a squashed delivery keeps its agent's authorship)."""
    signature = store.signature()
    oid = store.repo.create_commit(
        None, author or signature, signature, message, pygit2.Oid(hex=tree), [pygit2.Oid(hex=p) for p in parents]
    )
    return str(oid)


@dataclass(frozen=True, slots=True)
class GitMergeTree:
    """What ``git merge-tree --write-tree`` answered: the merged tree, or (tree None) the conflicted paths."""

    tree: str | None
    conflicts: tuple[str, ...]


def _strip_label(path: str, labels: Sequence[str]) -> str:
    """The path git moved aside as ``<path>~<label>[_<n>]`` (a file in the way of a directory), as it was."""
    for label in labels:
        match = re.fullmatch(rf"(.+)~{re.escape(label.replace('/', '_'))}(?:_\d+)?", path)
        if match:
            return match.group(1)
    return path


def git_merge_bases(store: Store, one: str, two: str) -> list[str]:
    """``git merge-base --all``: every best common ancestor (git uses the commit-graph's generation numbers when
    the repository has one). ``GIT_FAILED``."""
    where = ["--git-dir", str(store.git_dir)]  # no driver runs in a merge-base: no need to ask for them
    done = run_git(store.git_dir, *where, "merge-base", "--all", one, two, timeout=600, scan_drivers=False)
    if done.returncode not in (0, 1):  # 1: no common ancestor
        message = done.stderr.decode("utf-8", "replace").strip()
        raise AgentOpsError("GIT_FAILED", f"git merge-base failed ({done.returncode}): {message}")
    return done.stdout.decode().split()


def git_merge_tree(store: Store, ours: str, theirs: str, *, unrelated: bool = False) -> GitMergeTree:
    """Merge commit ``theirs`` into ``ours`` with ``git merge-tree --write-tree`` (merge-ort, in memory).

    git writes the merged blobs and trees into the object database and touches no working tree, index or ref.
    A file that git renamed to ``<path>~<commit>`` because a directory took its place is reported as ``<path>``.
    ``unrelated`` allows commits without a common ancestor (merged against the empty tree). ``GIT_FAILED``.
    """
    # the repository named explicitly, and its working tree too (git reads .gitattributes there, as git merge-tree
    # run in that checkout would): with --git-dir alone git would take the current directory for the work tree
    where = ["--git-dir", str(store.git_dir)]
    if store.workdir is not None:
        where += ["--work-tree", str(store.workdir)]
    argv = ["git", *where, "merge-tree", "--write-tree", "--name-only", "--no-messages", "-z"]
    if unrelated:
        argv.append("--allow-unrelated-histories")
    cwd = store.workdir or store.git_dir
    served = None if unrelated else mergeserver.merge(cwd, where, ours, theirs)  # one process for all merges
    if served is not None:
        tree, named = served
        return GitMergeTree(tree, ()) if tree is not None else GitMergeTree(None, _conflicts(named, (ours, theirs)))
    done = run_git(cwd, *argv[1:], ours, theirs, timeout=600)  # neutralised: no agent-configured merge driver runs
    if done.returncode not in (0, 1):
        message = done.stderr.decode("utf-8", "replace").strip()
        raise AgentOpsError("GIT_FAILED", f"git merge-tree failed ({done.returncode}): {message}")
    fields = done.stdout.decode("utf-8", "surrogateescape").split("\0")
    if done.returncode == 0:
        return GitMergeTree(fields[0], ())
    return GitMergeTree(None, _conflicts(fields[1:], (ours, theirs)))


def _conflicts(named: Sequence[str], labels: Sequence[str]) -> tuple[str, ...]:
    """The conflicted paths git named, each as it was (:func:`_strip_label`), sorted."""
    return tuple(sorted({_strip_label(field, labels) for field in named if field}))
