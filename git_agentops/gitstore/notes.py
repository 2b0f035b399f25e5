"""Notes that are never lost and never overwritten.

``repo.create_note`` rewrites the notes ref with force (4 writers x 200 notes lost 466 of them) and writes a
flat tree whose cost grows with every note. Here a note is added by writing the notes commit ourselves: the
annotated object's hex id split 2/38 (``ab/cdef...``, git's own fan-out, which ``git notes show`` reads), a
commit whose parent is the old tip, and a compare-and-swap of the notes ref -- retried as a whole when another
writer won. Adding a note to an object that already has one on this ref is ``NOTE_EXISTS``: receipts and
delivery records are append-only.

Reading accepts every layout git itself writes (flat, 2/38, 2/2/36...), since ``git notes add`` may have
written some of the notes on the same ref.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Final

import pygit2

from ..errors import AgentOpsError
from .refnames import check_ref_name
from .refs import RefConflict, RefUpdate, _LockBusy, read_commit_ref, try_update_refs
from .repo import Store
from .retry import DEFAULT_POLICY, Retry, RetryPolicy, run_with_retry

RECEIPTS_REF: Final = "refs/notes/agentops/receipts"
DELIVERIES_REF: Final = "refs/notes/agentops/deliveries"
EVIDENCE_REF: Final = "refs/notes/agentops/evidence"

_BLOB: Final = pygit2.enums.FileMode.BLOB
_TREE: Final = pygit2.enums.FileMode.TREE


def _find(repo: pygit2.Repository, tree: pygit2.Tree, hexid: str) -> pygit2.Oid | None:
    """Look ``hexid`` up in a notes tree of any fan-out depth."""
    node = tree
    rest = hexid
    while rest:
        if rest in node:
            entry = node[rest]
            return entry.id if entry.filemode != _TREE else None
        head = rest[:2]
        if head not in node:
            return None
        sub = repo[node[head].id]
        if not isinstance(sub, pygit2.Tree):
            return None
        node, rest = sub, rest[2:]
    return None


class Notes:
    """One notes ref (e.g. ``refs/notes/agentops/receipts``)."""

    def __init__(self, store: Store, ref: str, *, retry: RetryPolicy = DEFAULT_POLICY) -> None:
        if not ref.startswith("refs/notes/"):
            raise AgentOpsError("REF_NAME_INVALID", f"{ref!r} is not under refs/notes/")
        self.store = store
        self.ref = check_ref_name(ref)
        self.retry = retry

    def _tip(self) -> pygit2.Commit | None:
        return read_commit_ref(self.store, self.ref)

    @staticmethod
    def _hex(target: pygit2.Oid | str) -> str:
        hexid = str(target)
        if len(hexid) != 40 or any(c not in "0123456789abcdef" for c in hexid):
            raise AgentOpsError("OBJECT_MISSING", f"{hexid!r} is not a full lowercase object id")
        return hexid

    def read(self, target: pygit2.Oid | str) -> bytes | None:
        """The note on ``target``, or None."""
        tip = self._tip()
        if tip is None:
            return None
        blob_id = _find(self.store.repo, tip.tree, self._hex(target))
        if blob_id is None:
            return None
        blob = self.store.repo[blob_id]
        return blob.data if isinstance(blob, pygit2.Blob) else None

    def _commit(self, compute: Callable[[pygit2.Tree | None], dict[str, bytes]], message: str, code: str) -> str:
        """Write the notes ``compute(root)`` returns ({hex id: content}) in one CAS commit, retrying as a whole."""
        repo = self.store.repo

        def attempt() -> str:
            tip = self._tip()
            root = tip.tree if tip is not None else None
            contents = compute(root)
            root_builder = repo.TreeBuilder(root) if root is not None else repo.TreeBuilder()
            by_fan: dict[str, dict[str, bytes]] = {}
            for hexid, data in contents.items():
                if root is not None and hexid in root:  # git wrote this note flat: move it to the fan-out
                    root_builder.remove(hexid)
                by_fan.setdefault(hexid[:2], {})[hexid[2:]] = data
            for fan, entries in by_fan.items():
                sub: pygit2.Tree | None = None
                if root is not None and fan in root:
                    candidate = repo[root[fan].id]
                    sub = candidate if isinstance(candidate, pygit2.Tree) else None
                sub_builder = repo.TreeBuilder(sub) if sub is not None else repo.TreeBuilder()
                for rest, data in entries.items():
                    sub_builder.insert(rest, repo.create_blob(data), _BLOB)
                root_builder.insert(fan, sub_builder.write(), _TREE)
            signature = self.store.signature()
            parents = [tip.id] if tip is not None else []
            commit = repo.create_commit(None, signature, signature, message + "\n", root_builder.write(), parents)
            try:
                try_update_refs(self.store, [RefUpdate(self.ref, commit, str(tip.id) if tip else None)], message[:80])
            except RefConflict as lost:
                raise Retry(f"{self.ref} moved") from lost
            except _LockBusy as busy:
                raise Retry(f"{self.ref} locked") from busy
            return str(commit)

        return run_with_retry(attempt, policy=self.retry, code=code, what=f"writing notes on {self.ref}")

    def _checked(self, target: pygit2.Oid | str) -> str:
        hexid = self._hex(target)
        if not self.store.has_object(hexid):
            raise AgentOpsError("OBJECT_MISSING", f"cannot annotate {hexid}: no such object")
        return hexid

    def _existing(self, root: pygit2.Tree | None, hexid: str) -> bytes | None:
        if root is None:
            return None
        blob_id = _find(self.store.repo, root, hexid)
        if blob_id is None:
            return None
        blob = self.store.repo[blob_id]
        return blob.data if isinstance(blob, pygit2.Blob) else None

    def add(self, target: pygit2.Oid | str, data: bytes, *, message: str = "Notes added by git-agentops") -> str:
        """Attach ``data`` to ``target`` unless it already has a note here. Returns the notes commit id.

        Raises ``NOTE_EXISTS``, ``OBJECT_MISSING`` (no such object), ``NOTES_CONTENDED``.
        """
        hexid = self._checked(target)

        def compute(root: pygit2.Tree | None) -> dict[str, bytes]:
            if self._existing(root, hexid) is not None:
                raise AgentOpsError("NOTE_EXISTS", f"{hexid} already has a note on {self.ref}")
            return {hexid: data}

        return self._commit(compute, message, "NOTES_CONTENDED")

    def append(self, lines: Mapping[str, bytes], *, message: str = "Notes appended by git-agentops") -> str:
        """Append ``lines`` (newline-terminated records) to the notes of several objects in one commit.

        Append-only: each object's new note is its old note followed by the new lines, so a record once written
        is never changed or dropped. Raises ``OBJECT_MISSING``, ``NOTES_CONTENDED``.
        """
        targets = {self._checked(t): data for t, data in lines.items()}
        for data in targets.values():
            if not data.endswith(b"\n"):
                raise ValueError("appended note records end with a newline")

        def compute(root: pygit2.Tree | None) -> dict[str, bytes]:
            out = {}
            for hexid, data in targets.items():
                old = self._existing(root, hexid) or b""
                if old and not old.endswith(b"\n"):
                    old += b"\n"
                out[hexid] = old + data
            return out

        return self._commit(compute, message, "NOTES_CONTENDED")

    def items(self) -> Iterator[tuple[str, bytes]]:
        """Every (annotated object hex id, note bytes), in tree order, by walking the notes tree."""
        tip = self._tip()
        if tip is None:
            return
        yield from self._walk(tip.tree, "")

    def _walk(self, tree: pygit2.Tree, prefix: str) -> Iterator[tuple[str, bytes]]:
        repo = self.store.repo
        for entry in tree:
            name = prefix + str(entry.name)
            obj = repo[entry.id]
            if isinstance(obj, pygit2.Tree) and len(str(entry.name)) == 2:
                yield from self._walk(obj, name)
            elif isinstance(obj, pygit2.Blob) and len(name) == 40:
                yield name, obj.data
