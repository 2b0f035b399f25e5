"""The tree of a journal commit, as the state it is: read lazily (:class:`Snapshot`), changed copy-on-write
(:class:`Change`).

A journal commit's tree *is* the run's state (:mod:`.journal`). A :class:`Snapshot` reads one path at a time, each
a single lookup, so reading a worker costs the same in a run of ten workers as in one of ten thousand; a
:class:`Change` -- what a mutation function is handed -- overlays its writes and deletions on that view (reads see
them) and, when the journal commits, writes only the subtrees they touched (:meth:`Change.write_tree`).
"""

from __future__ import annotations

import re
from typing import Any, Final

import pygit2

from ..canonical import sha256_hex
from ..errors import AgentOpsError
from ..schema import documents
from .events import Event
from .repo import Store

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
