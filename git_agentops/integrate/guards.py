"""Guards a delivery cannot change: the policy, the signer list, CI configuration and hooks.

A worker agent runs as the same OS user as the person, in a checkout of the repository, so everything that judges
its work is within its reach: ``.agentops/policy.toml`` (a test command replaced by a ``print``,
``require_signature = false``), the ``allowed_signers`` file receipts are checked against, the CI workflow that
would run the tests, the hooks that run on the person's next commit. Verification uses the run's *bound* policy,
not the branch's, but integration publishes the branch -- and the next run, CI and every clone would then obey
the weakened copy. So a delivery may not change those paths at all; such a change goes through a person, who
commits it to the target (and trusts the policy that results: :mod:`git_agentops.policy.trust`).

What counts (:func:`protected_changes`):

* the paths that differ between the worker's **base** and its **head**, by comparing the two trees entry by entry
  (an unchanged subtree is never opened; no content is read, so a binary file is judged as any other). A rename is
  a deletion and an addition, and both sides count: moving the policy out of ``.agentops/`` changes it, moving a
  workflow into ``.github/workflows/`` adds one. A file that became a directory (or a symlink) counts on both
  sides too;
* matched against the bound policy's :attr:`~git_agentops.model.policy.Policy.protected_paths`
  (``[guardrails] protected_paths`` or the defaults, then ``.agentops/**`` and the ``allowed_signers`` file,
  always), plus the ``allowed_signers`` file named by the policy *committed* at the base, the head and the target
  tip -- what ``git agentops-receipt verify`` reads when CI does not pin its own -- and the in-repository
  directory ``core.hooksPath`` names (:func:`in_repo_hooks`);
* leaving out a path whose entry (blob and mode, or absence) at the head is the one at the **current target tip**:
  that change came from the target -- a person changed the policy and the worker merged the target in -- and
  publishing it again changes nothing.

:func:`protected_refusal` turns the changes into the handoff's ``RUN_DELIVERY_PROTECTED_PATH`` refusal;
:func:`candidate_breach` checks the integration candidate against the target tip it was built on, the same rule
once more after the merges (nothing is left out there: everything the candidate changes came from deliveries).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, NamedTuple

import pygit2

from ..errors import AgentOpsError
from ..gitstore.repo import Store
from ..model.globs import PathRules, literal, normalise
from ..model.policy import POLICY_PATH, Policy
from ..policy.load import MAX_POLICY_BYTES
from ..runs.jobs import Refused, Request
from .secrets import clean_text

CODE: Final = "RUN_DELIVERY_PROTECTED_PATH"
SHOWN: Final = 20  # paths named in a message; the rest are counted

_TREE_MODE: Final = pygit2.enums.FileMode.TREE
_Entry = tuple[pygit2.Oid, int]  # (id, file mode) of a tree entry that is not a tree


class ProtectedChange(NamedTuple):
    """A protected ``path`` the change touches and the ``pattern`` that protects it."""

    path: str
    pattern: str


@dataclass(frozen=True, slots=True)
class Breach:
    """What the final gate fails with when the candidate changes protected paths (see :func:`candidate_breach`)."""

    message: str
    detail: Mapping[str, object] = field(default_factory=dict)
    code: str = CODE


def in_repo_hooks(store: Store, hooks_path: str | None = None) -> str | None:
    """The directory ``core.hooksPath`` (or ``hooks_path``) names, relative to the top of the tree, when it is inside
    the repository's tree; None when it is unset or outside (``~/hooks``, an absolute path elsewhere).

    Git resolves a relative ``core.hooksPath`` against the top of the working tree where the hook runs, so a
    relative value names a directory the repository's own commits can fill.
    """
    value = hooks_path if hooks_path is not None else store.config_value("core.hooksPath")
    if not value or value.startswith("~"):
        return None
    if os.path.isabs(value):
        if store.workdir is None:
            return None
        relative = os.path.relpath(os.path.normpath(value), store.workdir)
    else:
        relative = os.path.normpath(value)
    relative = normalise(relative.replace(os.sep, "/"))
    if not relative or relative == ".." or relative.startswith("../") or relative.split("/")[0] == ".git":
        return None
    return relative


def committed_signers(store: Store, commit: pygit2.Commit) -> str | None:
    """The ``[receipts] allowed_signers`` of the policy committed at ``commit``, read leniently (only TOML): a
    signer list that an invalid policy names is still worth guarding."""
    try:
        entry = commit.tree[POLICY_PATH]
    except KeyError:
        return None
    if entry.type_str != "blob":
        return None
    _kind, size = store.repo.odb.read_header(entry.id)
    if size > MAX_POLICY_BYTES:
        return None
    try:
        doc = tomllib.loads(store.repo[entry.id].read_raw().decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    receipts = doc.get("receipts")
    where = receipts.get("allowed_signers") if isinstance(receipts, dict) else None
    if not isinstance(where, str) or not normalise(where) or ".." in where.split("/"):
        return None
    return normalise(where)


def protected_patterns(
    store: Store, policy: Policy, commits: Sequence[pygit2.Commit] = (), *, hooks_path: str | None = None
) -> tuple[str, ...]:
    """Every pattern that protects a path, in the order they are judged (see the module docstring)."""
    extra = [literal(where) for commit in commits if (where := committed_signers(store, commit)) is not None]
    if hooks_path:
        extra.append(literal(hooks_path) + "/**")
    return (*policy.protected_paths, *extra)  # no de-duplication: the later copy of a pattern is the one that counts


def protected_changes(
    store: Store,
    policy: Policy,
    base_commit: str,
    head_commit: str,
    *,
    also_unchanged_from: str | None = None,
    hooks_path: str | None = None,
    bound_policy: str | None = None,
) -> list[ProtectedChange]:
    """The protected paths that differ between ``base_commit`` and ``head_commit``, sorted by path, each once.

    With ``also_unchanged_from`` (the current target tip), a path whose entry at the head is the one there is left
    out. ``hooks_path`` is the in-repository hooks directory (:func:`in_repo_hooks`). ``bound_policy`` is the blob
    id of the policy file a transition bound to the run (:mod:`git_agentops.transition.journal`): the supervisor
    committed it in the workers' checkouts, so ``.agentops/policy.toml`` holding exactly it (as a regular file) is
    left out. ``OBJECT_MISSING`` when a revision names no commit.
    """
    base = store.resolve_commit(base_commit)
    head = store.resolve_commit(head_commit)
    tip = store.resolve_commit(also_unchanged_from) if also_unchanged_from is not None else None
    commits = [base, head] + ([tip] if tip is not None else [])
    rules = PathRules(protected_patterns(store, policy, commits, hooks_path=hooks_path))
    found: dict[str, ProtectedChange] = {}
    lookup = _Lookup(store.repo, tip.tree) if tip is not None else None
    bound = (pygit2.Oid(hex=bound_policy), int(pygit2.enums.FileMode.BLOB)) if bound_policy else None
    for parts, _old, new in _changes(base.tree, head.tree, ()):
        path = b"/".join(parts).decode("utf-8", errors="replace")
        pattern = rules.decide(path)
        if pattern is None or path in found:
            continue
        if lookup is not None and lookup.entry(parts) == new:
            continue  # the target has exactly this: the change came from there
        if bound is not None and path == POLICY_PATH and new == bound:
            continue  # the policy this run's transition bound, committed by the supervisor
        found[path] = ProtectedChange(path, pattern)
    return [found[path] for path in sorted(found)]


def _changes(
    old: pygit2.Tree | None, new: pygit2.Tree | None, prefix: tuple[bytes, ...]
) -> Iterator[tuple[tuple[bytes, ...], _Entry | None, _Entry | None]]:
    """``(path parts, old entry, new entry)`` of every non-tree path that differs (an absent side is None)."""
    before = {entry.raw_name or b"": entry for entry in old} if old is not None else {}
    after = {entry.raw_name or b"": entry for entry in new} if new is not None else {}
    for name in sorted(before.keys() | after.keys()):
        was, now = before.get(name), after.get(name)
        if was is not None and now is not None and was.id == now.id and was.filemode == now.filemode:
            continue  # unchanged: a whole subtree is never opened
        parts = (*prefix, name)
        was_tree = was if isinstance(was, pygit2.Tree) else None
        now_tree = now if isinstance(now, pygit2.Tree) else None
        if was_tree is not None or now_tree is not None:
            yield from _changes(was_tree, now_tree, parts)
        was_leaf = (was.id, was.filemode) if was is not None and was.filemode != _TREE_MODE else None
        now_leaf = (now.id, now.filemode) if now is not None and now.filemode != _TREE_MODE else None
        if was_leaf != now_leaf:
            yield parts, was_leaf, now_leaf


class _Lookup:
    """Entries of one tree by raw path, each directory listed once however many paths are looked up in it."""

    def __init__(self, repo: pygit2.Repository, tree: pygit2.Tree) -> None:
        self.repo = repo
        self.root = tree
        self.listed: dict[pygit2.Oid, dict[bytes, pygit2.Object]] = {}

    def _listing(self, tree: pygit2.Tree) -> dict[bytes, pygit2.Object]:
        if tree.id not in self.listed:
            self.listed[tree.id] = {entry.raw_name or b"": entry for entry in tree}
        return self.listed[tree.id]

    def entry(self, parts: tuple[bytes, ...]) -> _Entry | None:
        """``(id, mode)`` of the non-tree entry at ``parts``, or None when there is none."""
        tree: pygit2.Tree = self.root
        for depth, name in enumerate(parts):
            found = self._listing(tree).get(name)
            if found is None:
                return None
            if depth == len(parts) - 1:
                return None if found.filemode == _TREE_MODE else (found.id, found.filemode)
            if not isinstance(found, pygit2.Tree):
                return None
            tree = found
        return None


def _shown(changes: Sequence[ProtectedChange], patterns: Sequence[str]) -> str:
    listed = "; ".join(f"{clean_text(c.path, 300, patterns)} (matches {c.pattern!r})" for c in changes[:SHOWN])
    return listed + (f"; and {len(changes) - SHOWN} more" if len(changes) > SHOWN else "")


def _detail(changes: Sequence[ProtectedChange], patterns: Sequence[str]) -> dict[str, object]:
    return {"paths": [[clean_text(c.path, 300, patterns), c.pattern] for c in changes]}


def protected_refusal(
    store: Store,
    policy: Policy,
    request: Request,
    *,
    base: str,
    head: str,
    target_tip: str | None,
    bound_policy: str | None = None,
) -> Refused | None:
    """``RUN_DELIVERY_PROTECTED_PATH`` naming each protected path ``base..head`` changes (and the pattern it
    matched), leaving out what the head has exactly as ``target_tip`` has it; None when there is nothing."""
    changes = protected_changes(
        store,
        policy,
        base,
        head,
        also_unchanged_from=target_tip,
        hooks_path=in_repo_hooks(store),
        bound_policy=bound_policy,
    )
    if not changes:
        return None
    message = (
        f"{head[:12]} changes protected paths: {_shown(changes, policy.deny_patterns)}. A delivery may not change "
        "the policy, the signer list, CI configuration or hooks -- the guards that judge it. Take those changes "
        f"out of the branch (restore each path as the task's base {base[:12]} has it, or merge the target if the "
        "change is already there) and hand off again; if the task needs such a change, say so in the handoff: it "
        "goes through a person, who commits it to the target as a policy change and trusts the result"
    )
    return Refused(AgentOpsError(CODE, message), request, _detail(changes, policy.deny_patterns), head)


def candidate_breach(
    store: Store, policy: Policy, *, base: str, candidate: str, bound_policy: str | None = None
) -> Breach | None:
    """The final gate's check: the integration ``candidate`` may not change a protected path against the target tip
    ``base`` it was built on (a :class:`Breach` to fail the integration with), None when it does not."""
    changes = protected_changes(
        store, policy, base, candidate, hooks_path=in_repo_hooks(store), bound_policy=bound_policy
    )
    if not changes:
        return None
    message = (
        f"the integration candidate {candidate[:12]} changes protected paths against the target {base[:12]}: "
        f"{_shown(changes, policy.deny_patterns)}; nothing was published. Deliveries may not change the policy, "
        "the signer list, CI configuration or hooks: such changes go through a person's policy change"
    )
    return Breach(message, _detail(changes, policy.deny_patterns))
