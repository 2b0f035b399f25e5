"""Notes that are never lost and never overwritten.

``repo.create_note`` rewrites the notes ref with force (4 writers x 200 notes lost 466 of them) and writes a
flat tree whose cost grows with every note. Here a note is added by writing the notes commit ourselves: the
annotated object's hex id split 2/38 (``ab/cdef...``, git's own fan-out, which ``git notes show`` reads), a
commit whose parent is the old tip, and a compare-and-swap of the notes ref -- retried as a whole when another
writer won.

* :meth:`Notes.add` is create-only: a second note for the same object is ``NOTE_EXISTS`` (receipts).
* :meth:`Notes.append` is append-only: the new note is the old one followed by new records, for several objects
  in one commit (evidence, delivery records).

Reading accepts every layout git itself writes (flat, 2/38, 2/2/36...), since ``git notes add`` may have
written some notes on the same ref; a flat note we append to is moved into the fan-out.

The writer works over an :class:`~git_agentops.gitstore.backend.ObjectBackend`: pygit2 in a long-lived process,
git plumbing in a short command that should not pay pygit2's import.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Final, cast

from ..errors import AgentOpsError
from .backend import BLOB_MODE, TREE_MODE, LockBusy, ObjectBackend, Pygit2Backend, TreeEntry
from .refnames import RefConflict, check_ref_name
from .retry import DEFAULT_POLICY, Retry, RetryPolicy, run_with_retry

if TYPE_CHECKING:
    from .repo import Store

RECEIPTS_REF: Final = "refs/notes/agentops/receipts"
DELIVERIES_REF: Final = "refs/notes/agentops/deliveries"
EVIDENCE_REF: Final = "refs/notes/agentops/evidence"
_HEX: Final = frozenset("0123456789abcdef")


def _check_hex(target: object) -> str:
    hexid = str(target)
    if len(hexid) != 40 or not set(hexid) <= _HEX:
        raise AgentOpsError("OBJECT_MISSING", f"{hexid!r} is not a full lowercase object id")
    return hexid


class Notes:
    """One notes ref (e.g. ``refs/notes/agentops/receipts``)."""

    def __init__(self, store: Store | ObjectBackend, ref: str, *, retry: RetryPolicy = DEFAULT_POLICY) -> None:
        if not ref.startswith("refs/notes/"):
            raise AgentOpsError("REF_NAME_INVALID", f"{ref!r} is not under refs/notes/")
        self.backend: ObjectBackend = (
            cast("ObjectBackend", store) if hasattr(store, "cas_ref") else Pygit2Backend(store)
        )
        self.ref = check_ref_name(ref)
        self.retry = retry

    # -- reading -----------------------------------------------------------------------------------------------------
    def _root(self) -> tuple[str | None, list[TreeEntry]]:
        tip = self.backend.read_ref(self.ref)
        if tip is None:
            return None, []
        return tip, self.backend.read_tree(self.backend.commit_tree_id(tip))

    def _find(self, root: list[TreeEntry], hexid: str) -> tuple[str, str] | None:
        """(path in the notes tree, blob id) of the note on ``hexid``, at any fan-out depth."""
        entries, rest, prefix = root, hexid, ""
        while rest:
            by_name = {e.name: e for e in entries}
            if rest in by_name and not by_name[rest].is_tree:
                return prefix + rest, by_name[rest].oid
            head = by_name.get(rest[:2])
            if head is None or not head.is_tree:
                return None
            entries, rest, prefix = self.backend.read_tree(head.oid), rest[2:], prefix + rest[:2] + "/"
        return None

    def read(self, target: object) -> bytes | None:
        """The note on ``target``, or None."""
        _, root = self._root()
        found = self._find(root, _check_hex(target))
        return self.backend.read_blob(found[1]) if found else None

    def snapshot(self) -> Callable[[object], bytes | None]:
        """A reader of the notes as they are now: the root and each fan-out tree read once (a range of a thousand
        receipts would otherwise re-read the whole root a thousand times), each note when asked for."""
        _, root = self._root()
        trees: dict[str, dict[str, TreeEntry]] = {"": {e.name: e for e in root}}

        def read(target: object) -> bytes | None:
            rest, key = _check_hex(target), ""
            while rest:
                by_name = trees[key]
                entry = by_name.get(rest)
                if entry is not None and not entry.is_tree:
                    return self.backend.read_blob(entry.oid)
                head = by_name.get(rest[:2])
                if head is None or not head.is_tree:
                    return None
                key = head.oid
                if key not in trees:
                    trees[key] = {e.name: e for e in self.backend.read_tree(head.oid)}
                rest = rest[2:]
            return None

        return read

    def items(self) -> Iterator[tuple[str, bytes]]:
        """Every (annotated object hex id, note bytes), by walking the notes tree."""
        _, root = self._root()
        yield from self._walk(root, "")

    def _walk(self, entries: list[TreeEntry], prefix: str) -> Iterator[tuple[str, bytes]]:
        for entry in entries:
            name = prefix + entry.name
            if entry.is_tree and len(entry.name) == 2:
                yield from self._walk(self.backend.read_tree(entry.oid), name)
            elif not entry.is_tree and len(name) == 40:
                yield name, self.backend.read_blob(entry.oid)

    # -- writing -----------------------------------------------------------------------------------------------------
    def _commit(self, compute: Callable[[list[TreeEntry]], dict[str, bytes]], message: str) -> str:
        """Write the notes ``compute(root)`` returns ({hex id: content}) in one CAS commit, retrying as a whole."""
        backend = self.backend

        def attempt() -> str:
            tip, root = self._root()
            contents = compute(root)
            by_fan: dict[str, dict[str, bytes]] = {}
            for hexid, data in contents.items():
                by_fan.setdefault(hexid[:2], {})[hexid[2:]] = data
            top = {e.name: e for e in root if e.name not in contents}  # a flat note moves into the fan-out
            for fan, notes in by_fan.items():
                old = top.get(fan)
                sub = {e.name: e for e in backend.read_tree(old.oid)} if old is not None and old.is_tree else {}
                for rest, data in notes.items():
                    sub[rest] = TreeEntry(rest, BLOB_MODE, backend.write_blob(data))
                top[fan] = TreeEntry(fan, TREE_MODE, backend.write_tree(sorted(sub.values(), key=_git_order)))
            tree = backend.write_tree(sorted(top.values(), key=_git_order))
            commit = backend.write_commit(tree, [tip] if tip else [], message + "\n")
            try:
                backend.cas_ref(self.ref, commit, tip, message[:80])
            except RefConflict as lost:
                raise Retry(f"{self.ref} moved") from lost
            except LockBusy as busy:
                raise Retry(f"{self.ref} locked") from busy
            return commit

        return run_with_retry(attempt, policy=self.retry, code="NOTES_CONTENDED", what=f"writing notes on {self.ref}")

    def _checked(self, target: object) -> str:
        hexid = _check_hex(target)
        if not self.backend.has_object(hexid):
            raise AgentOpsError("OBJECT_MISSING", f"cannot annotate {hexid}: no such object")
        return hexid

    def add(self, target: object, data: bytes, *, message: str = "Notes added by git-agentops") -> str:
        """Attach ``data`` to ``target`` unless it already has a note here. Returns the notes commit id.

        Raises ``NOTE_EXISTS``, ``OBJECT_MISSING`` (no such object), ``NOTES_CONTENDED``.
        """
        hexid = self._checked(target)

        def compute(root: list[TreeEntry]) -> dict[str, bytes]:
            if self._find(root, hexid) is not None:
                raise AgentOpsError("NOTE_EXISTS", f"{hexid} already has a note on {self.ref}")
            return {hexid: data}

        return self._commit(compute, message)

    def append(self, lines: Mapping[str, bytes], *, message: str = "Notes appended by git-agentops") -> str:
        """Append ``lines`` (newline-terminated records) to the notes of several objects in one commit.

        Each object's new note is its old note followed by the new lines, so a record once written is never
        changed or dropped. Raises ``OBJECT_MISSING``, ``NOTES_CONTENDED``.
        """
        targets = {self._checked(t): data for t, data in lines.items()}
        for data in targets.values():
            if not data.endswith(b"\n"):
                raise ValueError("appended note records end with a newline")

        def compute(root: list[TreeEntry]) -> dict[str, bytes]:
            out = {}
            for hexid, data in targets.items():
                found = self._find(root, hexid)
                old = self.backend.read_blob(found[1]) if found else b""
                if old and not old.endswith(b"\n"):
                    old += b"\n"
                out[hexid] = old + data
            return out

        return self._commit(compute, message)


def _git_order(entry: TreeEntry) -> bytes:
    """Git sorts tree entries by name, with a directory compared as if its name ended in '/'."""
    return entry.name.encode() + (b"/" if entry.is_tree else b"")
