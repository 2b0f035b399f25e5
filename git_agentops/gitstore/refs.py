"""Compare-and-swap on refs.

pygit2 has no "expected old value" argument, and ``references.create(force=False)`` is not race-safe (libgit2
checks existence before taking the lock: 4 processes creating the same 500 refs claimed 13-65 of them twice).
So every ref write here goes through a libgit2 transaction: lock the ref (``<ref>.lock``, the same lock file git
uses, so the git CLI and we exclude each other), re-read it *while locked*, compare with what the caller
expected, then set or delete it. ``expected=None`` means "must not exist" (create-only); ``new=None`` means
delete.

A batch locks every ref first (in sorted order), checks every expected value, and only then writes: if any lock
or any check fails, nothing is written. The final step renames one lock file per ref, exactly as
``git update-ref --stdin`` does in git's files backend, so a batch is as atomic as git's own transactions.

libgit2 fails at once on a locked ref instead of waiting; :func:`update_ref` waits up to ``lock_timeout`` (git's
``core.filesRefLockTimeout`` idea) and then raises ``REF_LOCKED``. A value mismatch is never retried here: it
raises :class:`RefConflict` and the caller re-reads and re-applies its whole operation.

Never call ``tx.commit()`` inside ``with repo.transaction()``: ``__exit__`` commits again and libgit2 aborts the
process (double free). We only ever leave the block normally (commit) or by raising (no commit).
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pygit2

from ..errors import AgentOpsError
from .refnames import RefConflict, check_ref_name, namespace_rule
from .repo import Store

OidLike = pygit2.Oid | str


class RefLocked(AgentOpsError):
    """``REF_LOCKED``: ``name`` stayed locked past the lock timeout.

    The message names the lock file: when no git process is running, it is left over from a crash and can be removed.
    """

    def __init__(self, name: str, lock_path: str, waited: float) -> None:
        super().__init__(
            "REF_LOCKED",
            f"{name} is locked by another writer ({lock_path}); waited {waited:.1f}s. If no git process is "
            "running, the lock is left over from a crash: remove that file.",
            details={"ref": name, "lock": lock_path},
        )
        self.name = name


@dataclass(frozen=True, slots=True)
class RefUpdate:
    """One ref change in a batch. ``expected=None``: must not exist; ``new=None``: delete."""

    name: str
    new: OidLike | None
    expected: OidLike | None


def _hex(value: OidLike | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, pygit2.Oid):
        return str(value)
    if len(value) != 40 or any(c not in "0123456789abcdef" for c in value):
        raise AgentOpsError("OBJECT_MISSING", f"{value!r} is not a full lowercase object id")
    return value


def read_ref(store: Store, name: str) -> str | None:
    """The object id a direct ref points at, or None when it does not exist. ``REF_SYMBOLIC`` for a symref."""
    ref = store.repo.references.get(name)
    if ref is None:
        return None
    if ref.type != pygit2.enums.ReferenceType.DIRECT:
        raise AgentOpsError("REF_SYMBOLIC", f"{name} is a symbolic ref; the toolkit only moves direct refs")
    return str(ref.target)


def read_commit_ref(store: Store, name: str) -> pygit2.Commit | None:
    """The commit a ref points at, or None when it does not exist; ``JOURNAL_CORRUPT`` for a non-commit."""
    target = read_ref(store, name)
    if target is None:
        return None
    obj: object = store.repo[target]
    if not isinstance(obj, pygit2.Commit):
        raise AgentOpsError("JOURNAL_CORRUPT", f"{name} points at a {type(obj).__name__}, not a commit")
    return obj


class _LockBusy(Exception):
    def __init__(self, name: str, detail: str) -> None:
        super().__init__(detail)
        self.name = name


def _descends(store: Store, new: str, old: str) -> bool:
    try:
        if old in (str(p) for p in store.resolve_commit(new).parent_ids):
            return True  # a journal append: one object read instead of a merge-base walk
        return bool(store.repo.descendant_of(pygit2.Oid(hex=new), pygit2.Oid(hex=old)))
    except (pygit2.GitError, ValueError, KeyError, AgentOpsError):
        return False


def _quarantined(name: str, actual: str | None, prepared: Sequence[tuple[str, str | None, str | None]]) -> bool:
    """Whether this batch keeps ``actual`` (a frozen delivery ref's current value) under the run's quarantine:
    the one way a delivery ref is ever moved -- when someone else put a value there (``integrate.custody``)."""
    if actual is None:
        return False
    head, _, rest = name.partition("/runs/")
    run_id, _, ref = rest.partition("/")
    kept = f"{head}/runs/{run_id}/quarantine/{ref}/{actual}"
    return any(n == kept and new == actual for n, new, _ in prepared)


def try_update_refs(store: Store, updates: Sequence[RefUpdate], message: str, *, quarantine: bool = False) -> None:
    """One all-or-nothing attempt. Raises :class:`RefConflict`, or ``_LockBusy`` when a ref is locked.

    ``quarantine`` lets a frozen delivery ref move, but only when the same batch creates its quarantine copy.
    """
    prepared: list[tuple[str, str | None, str | None]] = []
    seen: set[str] = set()
    for update in updates:
        name = check_ref_name(update.name)
        if name in seen:
            raise AgentOpsError("REF_NAME_INVALID", f"{name} appears twice in one batch")
        seen.add(name)
        new, expected = _hex(update.new), _hex(update.expected)
        if new is not None and not store.has_object(new):
            raise AgentOpsError("OBJECT_MISSING", f"cannot point {name} at {new}: no such object")
        prepared.append((name, new, expected))
    prepared.sort()
    repo = store.repo
    with repo.transaction() as tx:
        for name, _, _ in prepared:
            try:
                tx.lock_ref(name)
            except pygit2.GitError as exc:
                raise _LockBusy(name, str(exc)) from exc
        for name, new, expected in prepared:
            actual = read_ref(store, name)
            if actual != expected:
                raise RefConflict(name, expected, actual)
            broken = namespace_rule(name, actual, new, lambda a, b: _descends(store, b, a))
            if broken is not None and quarantine and _quarantined(name, actual, prepared):
                broken = None
            if broken is not None:  # the rules hooks enforce hold for the library's own writes too
                raise AgentOpsError(*broken)
        for name, new, expected in prepared:
            if new is None:
                if expected is not None:
                    tx.remove(name)
            elif new != expected:
                # the reflog signature stays libgit2's default: pygit2 1.21 cannot pass one to a transaction
                tx.set_target(name, new, None, message)
        # leaving the block normally commits (renames the lock files); raising above releases every lock


def update_refs(
    store: Store, updates: Sequence[RefUpdate], message: str, *, lock_timeout: float = 2.0, quarantine: bool = False
) -> None:
    """Apply every update or none. Raises ``REF_CONFLICT``, ``REF_LOCKED``, ``REF_NAME_INVALID``."""
    start = time.monotonic()
    delay = 0.0005
    while True:
        try:
            try_update_refs(store, updates, message, quarantine=quarantine)
            return
        except _LockBusy as busy:
            waited = time.monotonic() - start
            if waited >= lock_timeout:
                lock_path = store.common_dir / (busy.name + ".lock")
                raise RefLocked(busy.name, str(lock_path), waited) from busy
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.05)


def update_ref(
    store: Store,
    name: str,
    new: OidLike | None,
    expected: OidLike | None,
    message: str,
    *,
    lock_timeout: float = 2.0,
) -> None:
    """Compare-and-swap one ref: set it to ``new`` (None: delete) iff it holds ``expected`` (None: absent)."""
    update_refs(store, [RefUpdate(name, new, expected)], message, lock_timeout=lock_timeout)


def create_ref(store: Store, name: str, new: OidLike, message: str) -> bool:
    """Create-only: True if this call created ``name``; False if it already existed (whatever its value)."""
    try:
        update_ref(store, name, new, None, message)
    except RefConflict:
        return False
    return True


def list_refs(store: Store, prefix: str) -> dict[str, str]:
    """Direct refs under ``prefix`` (e.g. ``refs/agentops/runs/``) and their targets."""
    out: dict[str, str] = {}
    for name in store.repo.references:
        if name.startswith(prefix):
            ref = store.repo.references.get(name)
            if ref is not None and ref.type == pygit2.enums.ReferenceType.DIRECT:
                out[name] = str(ref.target)
    return out
