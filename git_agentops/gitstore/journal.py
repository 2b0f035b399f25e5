"""A journal: state as a commit chain on one ref, appended by compare-and-swap.

Each commit's tree *is* the state -- a mapping of paths (``run.json``, ``workers/w1.json``, ``artifacts/ab/<sha>``)
to bytes -- and each commit's message *is* the event that produced it: a one-line summary, a blank line and an
``Agentops-Event:`` trailer holding the event as canonical JSON. ``git log <ref>`` is therefore the audit trail,
and ``git show <ref>:run.json`` the current state.

:meth:`Journal.mutate` reads the tip, lets a function change a copy-on-write view of the tree, writes only the
subtrees that function touched (so its cost does not grow with the number of entries), commits with the old tip
as the only parent, and moves the ref from the old tip to the new commit by compare-and-swap. When another writer
got there first, the *whole* operation -- read, function, write -- runs again with backoff and jitter until a
deadline (``JOURNAL_CONTENDED``). The function must therefore be a pure function of the view it is given.
An :class:`~git_agentops.errors.AgentOpsError` raised by the function aborts the mutation and writes nothing.

**Authenticity.** Every commit written here carries an ``Agentops-Mac`` trailer (:mod:`.events`). The tip's tree
*is* the state, so an authentic tip authenticates all of it: :meth:`Journal.read` and :meth:`Journal.mutate` refuse a
foreign tip (``RUN_STATE_TAMPERED``); :meth:`Journal.log` shows foreign commits, marked; :meth:`Journal.restore`
contains one by appending the newest authentic state again on top of it, the foreign commits kept as evidence.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

import pygit2

from ..canonical import sha256_hex
from ..errors import AgentOpsError
from ..schema import documents
from .events import (
    EVENT_TRAILER,
    Entry,
    Event,
    Foreign,
    JournalTampered,
    find_foreign,
    first_parent,
    foreign_entry,
    is_authentic,
    parse_event,
    remember,
    seal,
)
from .refnames import RefConflict, check_ref_name
from .refs import RefUpdate, _LockBusy, read_commit_ref, read_ref, try_update_refs
from .repo import Store
from .retry import DEFAULT_POLICY, Retry, RetryPolicy, RetryStats, run_with_retry

__all__ = [
    "EVENT_TRAILER",
    "Change",
    "Entry",
    "Event",
    "Foreign",
    "Journal",
    "JournalTampered",
    "Mutation",
    "Snapshot",
    "artifact_path",
    "check_path",
    "parse_event",
]

T = TypeVar("T")

_BAD_PATH_CHARS: Final = re.compile(r"[\x00-\x1f\x7f\\]")
_BLOB: Final = pygit2.enums.FileMode.BLOB
_TREE: Final = pygit2.enums.FileMode.TREE


def check_path(path: str) -> tuple[str, ...]:
    """Split a journal tree path into components; ``JOURNAL_PATH_INVALID`` for anything git would not store."""
    parts = tuple(path.split("/"))
    if not path or _BAD_PATH_CHARS.search(path) or any(p in ("", ".", "..", ".git") for p in parts):
        raise AgentOpsError("JOURNAL_PATH_INVALID", f"invalid journal path {path!r}")
    if len(path) > 1024:
        raise AgentOpsError("JOURNAL_PATH_INVALID", f"journal path is over 1024 characters: {path[:40]!r}...")
    return parts


class Snapshot:
    """A read-only view of the journal tree at one commit. Paths are read lazily, one lookup each."""

    def __init__(self, store: Store, commit: pygit2.Commit | None) -> None:
        self._store = store
        self._commit = commit
        self._tree: pygit2.Tree | None = commit.tree if commit is not None else None

    @property
    def commit(self) -> str | None:
        """The commit this view reads (for a :class:`Change`, the tip it started from); None before the first commit."""
        return str(self._commit.id) if self._commit is not None else None

    @property
    def tree_id(self) -> str | None:
        """The id of that commit's tree, or None; a :class:`Change`'s pending writes are not in it."""
        return str(self._tree.id) if self._tree is not None else None

    def _lookup(self, path: str) -> pygit2.Object | None:
        check_path(path)
        if self._tree is None:
            return None
        try:
            entry = self._tree[path]
        except KeyError:
            return None
        return self._store.repo[entry.id]

    def get(self, path: str) -> bytes | None:
        """The bytes at ``path``, or None (also None when ``path`` is a directory)."""
        obj = self._lookup(path)
        return obj.data if isinstance(obj, pygit2.Blob) else None

    def exists(self, path: str) -> bool:
        """Whether a file or a directory is at ``path``; ``JOURNAL_PATH_INVALID`` for a path git would not store."""
        return self._lookup(path) is not None

    def list(self, directory: str = "") -> list[str]:
        """Names directly under ``directory`` (files and subdirectories), sorted."""
        obj = self._lookup(directory) if directory else self._tree
        return sorted(str(entry.name) for entry in obj) if isinstance(obj, pygit2.Tree) else []

    def _blob_id(self, path: str) -> str | None:
        """The id of the committed blob at ``path`` (None if absent, a directory, or not committed yet)."""
        if self._tree is None:
            return None
        try:
            entry = self._tree[path]
        except KeyError:
            return None
        return str(entry.id) if entry.type_str == "blob" else None

    def json(self, path: str, *, schema: str, max_bytes: int = documents.DEFAULT_MAX_BYTES) -> Any:
        """The JSON document at ``path`` validated against ``schema``, or None when absent.

        A committed blob never changes, so a blob that validated once against a schema is only re-parsed the
        next time (the supervisor reads the same unchanged task and worker records on every state change).
        """
        data = self.get(path)
        if data is None:
            return None
        blob = self._blob_id(path)
        key = (blob, schema, max_bytes)
        if blob is not None and key in _VALIDATED:
            return documents.parse_json(data, what=path, max_bytes=max_bytes)
        doc = documents.load(data, schema=schema, what=path, max_bytes=max_bytes)
        if blob is not None:
            if len(_VALIDATED) >= _VALIDATED_MAX:
                _VALIDATED.clear()
            _VALIDATED.add(key)
        return doc

    def artifact(self, digest: str) -> bytes:
        """A content-addressed artifact; ``ARTIFACT_MISSING`` / ``ARTIFACT_CORRUPT``."""
        data = self.get(artifact_path(digest))
        if data is None:
            raise AgentOpsError("ARTIFACT_MISSING", f"artifact {digest} is not in the journal")
        actual = sha256_hex(data)
        if actual != digest:
            raise AgentOpsError("ARTIFACT_CORRUPT", f"artifact {digest} hashes to {actual}")
        return data


_VALIDATED: set[tuple[str | None, str, int]] = set()
_VALIDATED_MAX: Final = 65536


def artifact_path(digest: str) -> str:
    """The tree path of the artifact with SHA-256 ``digest``: ``artifacts/<aa>/<digest>``.

    ``JOURNAL_PATH_INVALID`` unless ``digest`` is 64 lowercase hex digits.
    """
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise AgentOpsError("JOURNAL_PATH_INVALID", f"{digest!r} is not a sha256 hex digest")
    return f"artifacts/{digest[:2]}/{digest}"


_DELETED: Final = object()  # nothing here, and nothing of the base tree below
_RESET: Final = object()  # a directory whose base-tree contents are hidden (deleted, then written into)


class _ResetDir(dict[str, Any]):
    """A directory node of the pending tree that starts empty instead of from the base tree."""


class Change(Snapshot):
    """A copy-on-write view handed to a mutation function: reads see its own writes."""

    def __init__(self, store: Store, commit: pygit2.Commit | None) -> None:
        super().__init__(store, commit)
        self._overlay: dict[tuple[str, ...], bytes | object] = {}
        self.event: Event | None = None

    # -- reads see the overlay -------------------------------------------------------------------------------
    def _overlaid(self, parts: tuple[str, ...]) -> bytes | object | None:
        """The overlay's verdict on ``parts``: bytes, _DELETED, _RESET, or None (= ask the base tree)."""
        hidden = False
        for i in range(1, len(parts)):
            above = self._overlay.get(parts[:i])
            if above is _DELETED or isinstance(above, bytes):
                return _DELETED
            if above is _RESET:
                hidden = True
        verdict = self._overlay.get(parts)
        if verdict is None and hidden:
            return _DELETED
        return verdict

    def _has_pending_children(self, parts: tuple[str, ...]) -> bool:
        depth = len(parts)
        return any(len(k) > depth and k[:depth] == parts and v is not _DELETED for k, v in self._overlay.items())

    def _blob_id(self, path: str) -> str | None:
        return None if self._overlaid(check_path(path)) is not None else super()._blob_id(path)

    def get(self, path: str) -> bytes | None:
        """As :meth:`Snapshot.get`, but this change's pending writes and deletes win over the base tree."""
        verdict = self._overlaid(check_path(path))
        if verdict is None:
            return super().get(path)
        return verdict if isinstance(verdict, bytes) else None

    def exists(self, path: str) -> bool:
        """As :meth:`Snapshot.exists`, seeing this change: a directory exists as soon as a file is put below it."""
        parts = check_path(path)
        verdict = self._overlaid(parts)
        if isinstance(verdict, bytes):
            return True
        if verdict is _DELETED:
            return False
        if self._has_pending_children(parts):
            return True
        return verdict is None and super().exists(path)

    def list(self, directory: str = "") -> list[str]:
        """As :meth:`Snapshot.list`, with the names this change put added and those it deleted removed."""
        prefix = check_path(directory) if directory else ()
        verdict = self._overlaid(prefix) if prefix else None
        names = set(super().list(directory)) if verdict is None else set()
        depth = len(prefix)
        for key, value in self._overlay.items():
            if len(key) > depth and key[:depth] == prefix:
                name = key[depth]
                if len(key) == depth + 1 and value is _DELETED:
                    names.discard(name)
                elif value is not _DELETED:
                    names.add(name)
        return sorted(names)

    # -- writes ----------------------------------------------------------------------------------------------
    def _forget_below(self, parts: tuple[str, ...]) -> None:
        depth = len(parts)
        for key in [k for k in self._overlay if len(k) > depth and k[:depth] == parts]:
            del self._overlay[key]

    def put(self, path: str, data: bytes) -> None:
        """Write a file, replacing whatever was at ``path`` (a file, or a directory and all it held)."""
        parts = check_path(path)
        if not isinstance(data, bytes):
            raise TypeError("journal values are bytes")
        for i in range(1, len(parts)):
            above = self._overlay.get(parts[:i])
            if above is _DELETED:
                self._overlay[parts[:i]] = _RESET
            elif isinstance(above, bytes) or (
                self._overlaid(parts[:i]) is None and super().get("/".join(parts[:i])) is not None
            ):
                raise AgentOpsError("JOURNAL_PATH_INVALID", f"cannot write {path}: {'/'.join(parts[:i])} is a file")
        self._forget_below(parts)
        self._overlay[parts] = data

    def put_json(self, path: str, doc: Any, *, schema: str) -> None:
        """:meth:`put` ``doc`` as canonical JSON, validated against ``schema`` first (``SCHEMA_INVALID``)."""
        self.put(path, documents.dump(doc, schema=schema, what=path))

    def delete(self, path: str) -> None:
        """Remove a file or a whole directory. Deleting what is not there is a no-op."""
        parts = check_path(path)
        self._forget_below(parts)
        self._overlay[parts] = _DELETED

    def put_artifact(self, data: bytes) -> str:
        """Store ``data`` content-addressed under ``artifacts/<aa>/<sha256>``; returns the digest."""
        digest = sha256_hex(data)
        self.put(artifact_path(digest), data)
        return digest

    @property
    def changed(self) -> bool:
        """Whether anything was put or deleted (deleting what is not there counts too).

        Without an event, :meth:`Journal.mutate` commits nothing for an unchanged view.
        """
        return bool(self._overlay)

    # -- building the new tree -------------------------------------------------------------------------------
    def write_tree(self) -> pygit2.Oid:
        """Write the pending tree and return its id; only subtrees with changes are rebuilt.

        An empty result is the empty tree. No commit is made and no ref moves: :meth:`Journal.mutate` does that.
        """
        nested: dict[str, Any] = {}
        for parts, value in sorted(self._overlay.items(), key=lambda item: len(item[0])):
            node = nested
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            if value is _RESET:
                node[parts[-1]] = _ResetDir()
            else:
                node[parts[-1]] = value
        root = _write(self._store.repo, self._tree, nested)
        if root is None:
            root = self._store.repo.TreeBuilder().write()
        return root


def _write(repo: pygit2.Repository, base: pygit2.Tree | None, changes: dict[str, Any]) -> pygit2.Oid | None:
    """Write ``base`` with ``changes`` applied; only touched subtrees are rebuilt. None if the result is empty."""
    builder = repo.TreeBuilder(base) if base is not None else repo.TreeBuilder()
    for name, change in changes.items():
        if isinstance(change, dict):
            sub_base: pygit2.Tree | None = None
            if base is not None and not isinstance(change, _ResetDir) and name in base:
                existing = repo[base[name].id]
                if isinstance(existing, pygit2.Tree):
                    sub_base = existing
            oid = _write(repo, sub_base, change)
            if oid is None:
                if builder.get(name) is not None:
                    builder.remove(name)
            else:
                builder.insert(name, oid, _TREE)
        elif change is _DELETED:
            if builder.get(name) is not None:
                builder.remove(name)
        else:
            builder.insert(name, repo.create_blob(change), _BLOB)
    if len(builder) == 0:
        return None
    return builder.write()


@dataclass(frozen=True, slots=True)
class Mutation(Generic[T]):
    """The outcome of :meth:`Journal.mutate`: the function's value and the commit it appended (if any)."""

    value: T
    commit: str | None
    attempts: int


class Journal:
    """A commit-chain journal on ``ref`` whose commits carry the repository's MAC (see the module docstring)."""

    def __init__(self, store: Store, ref: str, *, retry: RetryPolicy = DEFAULT_POLICY) -> None:
        self.store = store
        self.ref = check_ref_name(ref)
        self.retry = retry

    def _tip(self) -> pygit2.Commit | None:
        return read_commit_ref(self.store, self.ref)

    def exists(self) -> bool:
        """Whether the journal's ref exists (its first committed mutation creates it); ``REF_SYMBOLIC`` for a symref."""
        return read_ref(self.store, self.ref) is not None

    def is_authentic(self, commit: pygit2.Commit) -> bool:
        """Whether the toolkit wrote ``commit`` on this journal (:func:`.events.is_authentic`; ``KEY_INVALID``)."""
        return is_authentic(self.store, self.ref, commit)

    def foreign(self) -> Foreign | None:
        """None when the tip is authentic or absent; else what is foreign on the chain, and what is authentic below."""
        return find_foreign(self.store, self.ref, self._tip())

    def _checked(self, tip: pygit2.Commit | None) -> pygit2.Commit | None:
        if tip is not None and not self.is_authentic(tip):
            raise JournalTampered(self.ref, str(tip.id))
        return tip

    def read(self, *, verify: bool = True) -> Snapshot:
        """The current state (an empty snapshot when the journal does not exist yet).

        ``RUN_STATE_TAMPERED`` (:class:`JournalTampered`) when the tip is foreign; ``verify=False`` reads it
        anyway, for forensics only -- nothing read that way may be acted on.
        """
        tip = self._tip()
        return Snapshot(self.store, self._checked(tip) if verify else tip)

    def read_at(self, commit: str) -> Snapshot:
        """The state as of ``commit`` (which must be on this journal's chain), unverified: history, for forensics."""
        obj: object = self.store.repo.get(commit)
        if not isinstance(obj, pygit2.Commit):
            raise AgentOpsError("OBJECT_MISSING", f"{commit} is not a commit in this repository")
        return Snapshot(self.store, obj)

    def _append(self, tree: pygit2.Oid, parent: pygit2.Commit | None, event: Event) -> pygit2.Oid:
        """Commit ``event`` (sealed with its MAC) on ``parent`` and move the ref there by CAS; :class:`Retry` when
        the race is lost or the ref is locked."""
        parents = [parent.id] if parent is not None else []
        message = seal(
            self.store, self.ref, str(tree), [str(p) for p in parents], event.message(self.store.clock.now())
        )
        signature = self.store.signature()
        new = self.store.repo.create_commit(None, signature, signature, message, tree, parents)
        remember(self.store, self.ref, str(new))
        expected = str(parent.id) if parent is not None else None
        try:
            try_update_refs(self.store, [RefUpdate(self.ref, new, expected)], event.summary[:100])
        except RefConflict as lost:
            raise Retry(f"{self.ref} moved") from lost
        except _LockBusy as busy:
            raise Retry(f"{self.ref} locked") from busy
        return new

    def mutate(self, fn: Callable[[Change], T], event: Event | None = None) -> Mutation[T]:
        """Apply ``fn`` to the current state and append the result by CAS, retrying the whole operation.

        ``fn`` may set ``change.event`` to replace ``event``. Nothing is committed when ``fn`` changed nothing
        and there is no event. Raises ``RUN_STATE_TAMPERED`` (:class:`JournalTampered`; nothing is written) when
        the tip is foreign, ``JOURNAL_CONTENDED`` after the retry deadline, or whatever ``fn`` raises.
        """
        stats = RetryStats()

        def attempt() -> tuple[T, str | None]:
            tip = self._checked(self._tip())
            change = Change(self.store, tip)
            change.event = event
            value = fn(change)
            if not change.changed and change.event is None:
                return value, None
            tree = change.write_tree() if change.changed else (tip.tree_id if tip else change.write_tree())
            return value, str(self._append(tree, tip, change.event or Event("STATE_CHANGED", "state changed")))

        value, commit = run_with_retry(
            attempt, policy=self.retry, code="JOURNAL_CONTENDED", what=f"mutating {self.ref}", stats=stats
        )
        return Mutation(value, commit, stats.attempts)

    def restore(self, fn: Callable[[Change, Foreign], T], event: Event) -> Mutation[T] | None:
        """Contain a foreign tip: ``fn`` edits a view of the newest authentic commit below it, and the result is
        appended *on top of the foreign tip* by CAS -- the foreign commits stay in the history as evidence and the
        tip is authentic again. ``fn`` may set ``change.event`` to replace ``event``.

        None when the tip is authentic (nothing to contain -- also when another writer contained it first).
        ``RUN_STATE_TAMPERED`` (:class:`JournalTampered`) when no authentic commit is on the chain: nothing is
        invented. ``JOURNAL_CONTENDED`` after the retry deadline.
        """
        stats = RetryStats()

        def attempt() -> tuple[T, str] | None:
            found = self.foreign()
            if found is None:
                return None
            if found.authentic is None:
                raise JournalTampered(
                    self.ref,
                    found.tip,
                    f"{self.ref} is at {found.tip[:12]} and none of the {found.count} commits on its first-parent "
                    "chain was written by this repository's toolkit: there is no state to restore",
                )
            tip: object = self.store.repo.get(found.tip)
            base: object = self.store.repo.get(found.authentic)
            assert isinstance(tip, pygit2.Commit) and isinstance(base, pygit2.Commit)
            change = Change(self.store, base)
            change.event = event
            value = fn(change, found)
            tree = change.write_tree() if change.changed else base.tree_id
            return value, str(self._append(tree, tip, change.event or event))

        done = run_with_retry(
            attempt, policy=self.retry, code="JOURNAL_CONTENDED", what=f"restoring {self.ref}", stats=stats
        )
        return Mutation(done[0], done[1], stats.attempts) if done is not None else None

    def log(self, *, limit: int | None = None) -> Iterator[Entry]:
        """Events newest first, following first parents from the tip; foreign commits too, marked ``foreign``
        (:func:`.events.foreign_entry`). ``KEY_INVALID`` for a damaged key file."""
        commit = self._tip()
        count = 0
        while commit is not None and (limit is None or count < limit):
            yield parse_event(commit) if self.is_authentic(commit) else foreign_entry(commit)
            count += 1
            commit = first_parent(self.store, commit)
