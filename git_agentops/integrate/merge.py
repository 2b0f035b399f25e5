"""In-memory merges that produce exactly the tree ``git merge-tree --write-tree`` produces, faster.

Deliveries are merged into the target without a worktree or an index file: a merge reads objects, writes the
merged blobs and trees (through :mod:`git_agentops.gitstore.objects`) and returns the merged tree id or the
conflicted paths. Nothing in any working tree, index or ref changes; :func:`merge_chain` also writes the merge
commits, and moving a ref stays with the caller (by compare-and-swap).

Why a merge of our own? libgit2's ``merge_commits`` loads both sides into a full index and ``write_tree``
rebuilds every tree, so a merge costs ~18 ms on a 20,000-file repository whatever it changes; git's merge-ort
skips unchanged subtrees, but one ``git merge-tree`` is a process (~4-7 ms with ``commit-tree``). The fast path
here is a three-way merge over tree objects doing what merge-ort does in the cases that dominate integration,
deliveries touching different files:

* where both sides hold the same entry, or only one side changed an entry (a blob or a whole subtree), that
  side's object id is taken as is: unchanged subtrees are never opened, let alone rewritten;
* only a directory changed on *both* sides is opened, recursively, and written back;
* a file changed on both sides (same path, same regular mode, text, no ``merge`` attribute) is handed, as exactly
  those three blobs, to libgit2's file merge (git's xdiff) -- but only when its line diffs cannot differ from
  merge-ort's (:func:`_unambiguous`); a file merge that conflicts is a conflict, and so is binary content (a
  NUL in the first 8000 bytes), as in git.

Everything else merge-ort resolves by rules of its own, so the fast path gives up (:class:`_Fallback`) and the
*whole* merge is done by ``git merge-tree --write-tree`` itself (``strategy="git"``) when, on one path, both
sides changed:

* a file deleted on one side and changed on the other (rename detection may pair it with an added file);
* anything deleted on *both* sides -- a file, or a directory holding files -- because merge-ort then treats it as
  a rename source and may report rename/delete or rename/rename conflicts against files added elsewhere;
* a file against a directory, the mode (on one or both sides), a symlink or a submodule;
* an add/add of different content (git merges it against an empty base);
* file content whose line diff is ambiguous (repeated lines: merge-ort diffs with the histogram algorithm,
  libgit2 with Myers, and the two then align edits differently), a ``merge`` attribute, a NUL after the first
  8000 bytes, text that is not UTF-8;
and whenever the commits have more than one merge base (criss-cross: merge-ort first merges the bases), or a
merge-base search too long to settle here (:mod:`.bases`). Two things git rewrites are handed to it as well: a
directory the merge would write, or the root, holding a non-standard mode (``100664``, ``100775``: git writes
``100644``/``100755`` wherever it writes a directory, and always the root); and any merge in a repository with
``merge.renormalize`` set (git normalises merged blobs by the ``text``/``eol`` attributes).

Configuration, one by one: ``merge.renormalize`` -- handed to git; ``merge.renames``, ``diff.renames``,
``merge.directoryRenames``, ``merge.renameLimit`` -- no effect, the fast path only works where rename detection
cannot change the result; ``merge.conflictStyle`` -- only the conflicted content, not the conflict set, which is
all a conflict reports; ``merge.<driver>`` and ``merge`` attributes (``.gitattributes``, ``info/attributes``,
``core.attributesFile``) -- handed to git; ``core.autocrlf``/``core.eol`` -- merge-tree applies no checkout
conversion, nor does this.

Where only one side touched a region, rename detection cannot change the result: merge-ort pairs renames only
for files deleted on one side and modified (or deleted) on the other, or for directories deleted on one side
that gain files on the other, and each of those is a path changed on both sides, caught above.

The fallback is git, not libgit2's ``merge_trees``: run against ``git merge-tree`` on generated histories,
libgit2 disagreed with git in about one complex merge in five (it has no directory rename detection, pairs
renames merge-ort deliberately ignores, and resolves file/directory and rename/type-change conflicts
differently), and on a large repository one ``git merge-tree`` process is also faster than libgit2's full-index
merge. Conflicted paths are those ``git merge-tree --name-only`` lists, except that a file git moved aside as
``<path>~<branch>`` for a directory is reported as ``<path>``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, cast

import pygit2
from pygit2.index import MergeFileResult

from ..errors import AgentOpsError
from ..gitstore import objects
from ..gitstore.repo import Store
from ..model.delivery import CommitId, MergeStep, TreeId
from .bases import Graph

_TREE: Final = int(pygit2.enums.FileMode.TREE)
_LINK: Final = int(pygit2.enums.FileMode.LINK)
_REGULAR: Final = frozenset({int(pygit2.enums.FileMode.BLOB), int(pygit2.enums.FileMode.BLOB_EXECUTABLE)})
_STANDARD_MODES: Final = frozenset({*_REGULAR, _TREE, _LINK, int(pygit2.enums.FileMode.COMMIT)})
_BINARY_PROBE: Final = 8000  # git's buffer_is_binary(): a NUL in the first 8000 bytes
_MAX_EDIT: Final = 200  # changed lines per side for a file merge in process (Myers is exact below 256)

_RECORD: Final = re.compile(rb"[0-7]+ [^\0]*\0.{20}", re.DOTALL)  # one entry of a raw tree object
_STANDARD: Final = (b"100644 ", b"100755 ", b"120000 ", b"160000 ", b"40000 ")
"""The modes git writes; a tree may hold others (``100664``, ``100775``...) that git rewrites wherever it writes
the directory -- every directory its merge rebuilds, and always the root."""

MergeStrategy = Literal["trivial", "tree", "git"]
"""Which path produced a result: one side taken whole, the in-process tree merge, or ``git merge-tree``."""

_Entry = tuple[pygit2.Oid, int]
"""A tree entry: object id and file mode."""


@dataclass(frozen=True, slots=True)
class MergeResult:
    """The merged tree, or the conflicted paths (sorted, as ``git merge-tree --name-only`` lists them)."""

    tree: str | None
    conflicts: tuple[str, ...]
    strategy: MergeStrategy

    @property
    def clean(self) -> bool:
        return self.tree is not None


@dataclass(frozen=True, slots=True)
class ChainResult:
    """Where a chain ended.

    ``head`` is the last merge commit (``base_commit`` when there were no deliveries), or None when a merge
    conflicted; ``conflict`` then names that delivery's label and conflicted paths, and ``steps`` holds the
    merges written before it.
    """

    head: str | None
    steps: tuple[MergeStep, ...]  # the delivery's label, the merge commit written, its two parents and its tree
    conflict: tuple[str, tuple[str, ...]] | None


class _Fallback(Exception):
    """The fast path cannot promise git's result here; ``reason`` says why (for debugging and tests)."""

    def __init__(self, reason: str, path: str) -> None:
        super().__init__(f"{reason}: {path or '/'}")
        self.reason = reason
        self.path = path


def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


class _TreeMerger:
    """The fast path. One instance serves the merges of a chain: tree listings and commits are cached.

    A directory is read as the set of its raw entry records (``<mode> <name>\\0<20-byte id>``): the records
    the three versions share are skipped without being decoded, so a directory of hundreds of entries costs a
    few set operations, and only the entries that differ are parsed.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.repo = store.repo
        self.odb = store.repo.odb
        self._records: dict[pygit2.Oid, frozenset[bytes]] = {}
        self._odd: dict[pygit2.Oid, bool] = {}  # odd_modes by tree: a chain reads each tree it wrote once more
        self._maps: dict[pygit2.Oid, dict[str, _Entry]] = {}  # entries by name, of the trees ours were
        self._conflicts: list[str] = []
        self.graph = Graph(store.repo, store)
        self.renormalize = _boolean(store.config_value("merge.renormalize"))

    def merge(self, base: pygit2.Oid | None, ours: pygit2.Oid, theirs: pygit2.Oid) -> MergeResult:
        """Raises :class:`_Fallback` where git's answer could differ from what this walk would give."""
        self._conflicts = []
        merged = self._merge_dir("", base, ours, theirs)
        if merged is not None and self.odd_modes(merged, ""):
            raise _Fallback("a non-standard file mode at the root", "")
        if self._conflicts:
            return MergeResult(None, tuple(sorted(self._conflicts)), "tree")
        return MergeResult(objects.empty_tree(self.store) if merged is None else str(merged), (), "tree")

    def _tree_records(self, oid: pygit2.Oid | None, path: str) -> frozenset[bytes]:
        if oid is None:
            return frozenset()
        cached = self._records.get(oid)
        if cached is None:
            kind, raw = self.odb.read(oid)
            records = _RECORD.findall(raw)
            if kind != pygit2.enums.ObjectType.TREE or sum(map(len, records)) != len(raw):
                raise _Fallback("unreadable tree", path)
            cached = frozenset(records)
            if len(self._records) > 4096:
                self._records.clear()
            self._records[oid] = cached
        return cached

    def odd_modes(self, tree: pygit2.Oid, path: str) -> bool:
        """Whether the directory ``tree`` holds an entry whose mode git would rewrite (:data:`_STANDARD`)."""
        known = self._odd.get(tree)
        if known is None:
            known = any(not record.startswith(_STANDARD) for record in self._tree_records(tree, path))
            if len(self._odd) > 65536:
                self._odd.clear()
            self._odd[tree] = known
        return known

    def _differing(self, path: str, *trees: pygit2.Oid | None) -> tuple[dict[str, _Entry], ...]:
        """Per tree, the entries of the names whose entries are not the same in all ``trees``."""
        sets = [self._tree_records(oid, path) for oid in trees]
        differing = frozenset().union(*sets) - frozenset.intersection(*sets)
        maps: tuple[dict[str, _Entry], ...] = tuple({} for _ in sets)
        for record in differing:
            name, entry = _parse_record(record, path)
            for records, entries in zip(sets, maps, strict=True):
                if record in records:
                    entries[name] = entry
        return maps

    def _entries(self, tree: pygit2.Oid, path: str) -> dict[str, _Entry]:
        """Every entry of the directory ``tree`` by name (cached: in a chain, ours is the tree the last merge wrote,
        whose entries are known without reading it)."""
        known = self._maps.get(tree)
        if known is None:
            known = dict(_parse_record(record, path) for record in self._tree_records(tree, path))
            if len(self._maps) > 4096:
                self._maps.clear()
            self._maps[tree] = known
        return known

    def _merge_dir(self, path: str, base: pygit2.Oid | None, ours: pygit2.Oid, theirs: pygit2.Oid) -> pygit2.Oid | None:
        """The merged tree of a directory changed on both sides; None when it ends up empty.

        Only the names whose entry theirs changed against the base can change ours (where theirs kept the base's
        entry, ours stands), so only those records are decoded -- a chain's ours accumulates every earlier
        delivery's changes, which are never looked at again."""
        b_records, t_records = self._tree_records(base, path), self._tree_records(theirs, path)
        b_entries = dict(_parse_record(record, path) for record in b_records - t_records)
        t_entries = dict(_parse_record(record, path) for record in t_records - b_records)
        o_all = self._entries(ours, path)
        gone = {name for name in b_entries if name not in t_entries and name not in o_all}
        if gone:
            raise _Fallback("deleted on both sides", _join(path, min(gone)))
        changes: dict[str, objects.TreeChange] = {}
        for name in b_entries.keys() | t_entries.keys():
            o = o_all.get(name)
            t = t_entries.get(name)
            b = b_entries.get(name)
            if o == t:
                if b is not None and self._drops_files(_join(path, name), b, o):
                    raise _Fallback("deleted on both sides", _join(path, name))
                continue
            if b == o:
                changes[name] = None if t is None else (str(t[0]), t[1])
                continue
            merged = self._merge_both_changed(_join(path, name), b, o, t)
            if merged != o:
                changes[name] = None if merged is None else (str(merged[0]), merged[1])
        if not changes:
            return ours
        if self.odd_modes(ours, path) or any(c is not None and c[1] not in _STANDARD_MODES for c in changes.values()):
            raise _Fallback("a non-standard file mode in a directory the merge rewrites", path)
        tree = objects.write_tree(self.store, changes, base=str(ours))
        if tree is None:
            return None
        written = pygit2.Oid(hex=tree)
        self._odd[written] = False  # ours had no odd mode (checked above), and no change brings one
        entries = dict(o_all)
        for name, change in changes.items():
            if change is None:
                entries.pop(name, None)
            else:
                entries[name] = (pygit2.Oid(hex=change[0]), change[1])
        self._maps[written] = entries
        return written

    def _merge_both_changed(self, path: str, b: _Entry | None, o: _Entry | None, t: _Entry | None) -> _Entry | None:
        if o is None or t is None:
            raise _Fallback("deleted on one side, changed on the other", path)
        o_tree, t_tree = o[1] == _TREE, t[1] == _TREE
        if o_tree and t_tree:
            if b is not None and b[1] != _TREE:
                raise _Fallback("deleted on both sides", path)  # a file replaced by a directory on both sides
            merged = self._merge_dir(path, None if b is None else b[0], o[0], t[0])
            return None if merged is None else (merged, _TREE)
        if o_tree or t_tree or (b is not None and b[1] == _TREE):
            raise _Fallback("file on one side, directory on the other", path)
        if b is None:
            raise _Fallback("added on both sides with different content", path)
        if not b[1] == o[1] == t[1]:
            raise _Fallback("mode changed", path)
        if o[1] == _LINK:
            raise _Fallback("symlink changed on both sides", path)
        if o[1] not in _REGULAR:
            raise _Fallback("submodule changed on both sides", path)
        return self._merge_file(path, b[0], o[0], t[0], o[1])

    def _merge_file(self, path: str, base: pygit2.Oid, ours: pygit2.Oid, theirs: pygit2.Oid, mode: int) -> _Entry:
        if self.repo.get_attr(path, "merge") is not None:
            raise _Fallback("a merge attribute applies", path)  # a merge driver, or -merge/binary
        blobs: list[bytes] = [self.repo[oid].data for oid in (base, ours, theirs)]  # type: ignore[attr-defined]
        if any(b"\0" in data[:_BINARY_PROBE] for data in blobs):
            self._conflicts.append(path)  # git: "Cannot merge binary files"
            return ours, mode
        for data in blobs:
            if b"\0" in data:
                raise _Fallback("NUL byte in text", path)  # pygit2 would cut the merged text at it
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                raise _Fallback("content is not UTF-8", path) from None
        if not (_unambiguous(blobs[0], blobs[1]) and _unambiguous(blobs[0], blobs[2])):
            raise _Fallback("the line diff is ambiguous", path)
        file_mode = pygit2.enums.FileMode(mode)
        result = self.repo.merge_file_from_index(
            pygit2.IndexEntry(path, base, file_mode),
            pygit2.IndexEntry(path, ours, file_mode),
            pygit2.IndexEntry(path, theirs, file_mode),
        )
        if not isinstance(result, MergeFileResult):
            raise _Fallback("unexpected file merge result", path)
        if not result.automergeable:
            self._conflicts.append(path)
            return ours, mode
        return pygit2.Oid(hex=objects.write_blob(self.store, result.contents.encode("utf-8"))), mode

    def _drops_files(self, path: str, base: _Entry, side: _Entry | None) -> bool:
        """Whether a file of ``base`` is missing from ``side`` (called where both sides hold ``side``)."""
        if base == side:
            return False
        if base[1] != _TREE:
            return side is None or side[1] == _TREE
        if side is None or side[1] != _TREE:
            return True
        b_entries, s_entries = self._differing(path, base[0], side[0])
        return any(
            self._drops_files(_join(path, name), entry, s_entries.get(name)) for name, entry in b_entries.items()
        )


def _parse_record(record: bytes, path: str) -> tuple[str, _Entry]:
    space = record.index(b" ")
    try:
        name = record[space + 1 : -21].decode("utf-8")
    except UnicodeDecodeError:
        raise _Fallback("a file name is not UTF-8", path) from None
    return name, (pygit2.Oid(raw=record[-20:]), int(record[:space], 8))


def _lines(data: bytes) -> list[bytes]:
    """Lines as xdiff sees them: split after each LF only, the last one possibly without."""
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _unambiguous(base: bytes, side: bytes) -> bool:
    """Whether every line diff -- git's histogram, libgit2's Myers -- must match ``base`` to ``side`` the same way.

    True when each line the two texts share occurs exactly once in each, in the same order, and the edit is
    small: then the longest common subsequence is unique, both algorithms find it (Myers runs without its cost
    cut-off below 256 edits), and no change can slide along a repeated neighbour line. Two such diffs give
    libgit2's three-way file merge exactly the input merge-ort's has, and the same output.
    """
    base_lines, side_lines = _lines(base), _lines(side)
    base_count, side_count = Counter(base_lines), Counter(side_lines)
    position = {line: i for i, line in enumerate(side_lines)}
    last, common = -1, 0
    for line in base_lines:
        if line in side_count:
            if base_count[line] != 1 or side_count[line] != 1 or position[line] <= last:
                return False
            last = position[line]
            common += 1
    return len(base_lines) + len(side_lines) - 2 * common <= _MAX_EDIT


def _tree_id(store: Store, tree: str) -> pygit2.Oid:
    oid = store.resolve(tree)
    if not isinstance(store.repo[oid], pygit2.Tree):
        raise AgentOpsError("OBJECT_MISSING", f"{tree!r} does not name a tree")
    return oid


def _trivial(base: pygit2.Oid | None, ours: pygit2.Oid, theirs: pygit2.Oid) -> pygit2.Oid | None:
    if theirs in (ours, base):
        return ours
    if base == ours:
        return theirs
    return None


def _with_git(store: Store, ours: str, theirs: str, *, unrelated: bool) -> MergeResult:
    answer = objects.git_merge_tree(store, ours, theirs, unrelated=unrelated)
    return MergeResult(answer.tree, answer.conflicts, "git")


def _merge_tree_ids(
    store: Store,
    merger: _TreeMerger,
    base: pygit2.Oid | None,
    ours: pygit2.Oid,
    theirs: pygit2.Oid,
    commits: tuple[str, str] | None,
) -> MergeResult:
    """The fast path, or git on ``commits`` (or on commits written to wrap the trees) when it gives up -- and always
    with ``merge.renormalize`` set (git then normalises every blob it merges by the attributes' text and eol
    rules), and when the result's root holds a mode git rewrites."""
    trivial = None if merger.renormalize else _trivial(base, ours, theirs)
    if trivial is not None and not merger.odd_modes(trivial, ""):
        return MergeResult(str(trivial), (), "trivial")
    try:
        if trivial is None and not merger.renormalize:
            return merger.merge(base, ours, theirs)
    except _Fallback:
        pass
    if commits is None:  # git 2.39's merge-tree takes commits only: wrap the trees in unreferenced ones
        base_commit = [] if base is None else [objects.write_commit(store, str(base), [], "merge base")]
        commits = (
            objects.write_commit(store, str(ours), base_commit, "ours"),
            objects.write_commit(store, str(theirs), base_commit, "theirs"),
        )
    return _with_git(store, *commits, unrelated=base is None)


def merge_trees(store: Store, base: str | None, ours: str, theirs: str) -> MergeResult:
    """Merge tree ``theirs`` into tree ``ours`` against ``base`` (None: the empty tree).

    Raises ``OBJECT_MISSING``, or ``GIT_FAILED`` when the git fallback fails.
    """
    base_id = None if base is None else _tree_id(store, base)
    return _merge_tree_ids(store, _TreeMerger(store), base_id, _tree_id(store, ours), _tree_id(store, theirs), None)


def _merge_commit_ids(store: Store, merger: _TreeMerger, ours: pygit2.Commit, theirs: pygit2.Commit) -> MergeResult:
    bases = merger.graph.nearby(ours.id, theirs.id)
    commits = (str(ours.id), str(theirs.id))
    if bases is None or len(bases) > 1:  # too far to tell here, or several (merge-ort merges them first): git's
        return _with_git(store, *commits, unrelated=False)
    base_tree = cast(pygit2.Commit, store.repo[bases[0]]).tree_id if bases else None
    return _merge_tree_ids(store, merger, base_tree, ours.tree_id, theirs.tree_id, commits)


def merge_commits(store: Store, ours: str, theirs: str) -> MergeResult:
    """Merge commit ``theirs`` into commit ``ours`` over their merge base(s).

    Unrelated histories merge against the empty tree (as ``--allow-unrelated-histories``). Raises
    ``OBJECT_MISSING``, or ``GIT_FAILED`` when the git fallback fails.
    """
    return _merge_commit_ids(store, _TreeMerger(store), store.resolve_commit(ours), store.resolve_commit(theirs))


def integration_message(titles: Mapping[str, str], run_id: str) -> Callable[[str, str], str]:
    """The message of a run's merge of one delivery (``titles``: task id -> title), as :func:`merge_chain` asks for
    it -- the same whether the run or the merge queue builds the chain."""

    def message(label: str, commit: str) -> str:
        return f"Integrate {titles.get(label, label)} ({label})\n\nFrozen delivery {commit} of run {run_id}.\n"

    return message


def merge_chain(
    store: Store, base_commit: str, deliveries: Sequence[tuple[str, str]], *, message: Callable[[str, str], str]
) -> ChainResult:
    """Merge ``deliveries`` (``(label, commit)``, in order) one after another onto ``base_commit``.

    Each step merges the next delivery into the previous step's commit and writes a merge commit whose first
    parent is that commit and whose second is the delivery, with the message ``message(label, delivery id)``,
    by the store's identity at its clock. Stops at the first conflict. No ref is moved. Raises
    ``OBJECT_MISSING``, or ``GIT_FAILED`` when the git fallback fails.
    """
    head = store.resolve_commit(base_commit)
    merger = _TreeMerger(store)
    steps: list[MergeStep] = []
    for label, delivery in deliveries:
        theirs = store.resolve_commit(delivery)
        result = _merge_commit_ids(store, merger, head, theirs)
        if result.tree is None:
            return ChainResult(None, tuple(steps), (label, result.conflicts))
        parents = (CommitId(str(head.id)), CommitId(str(theirs.id)))
        commit = objects.write_commit(store, result.tree, parents, message(label, parents[1]))
        steps.append(MergeStep(label, CommitId(commit), parents, TreeId(result.tree)))
        merger.graph.chained(pygit2.Oid(hex=commit), head.id, theirs.id)
        head = store.resolve_commit(commit)
    return ChainResult(str(head.id), tuple(steps), None)


def _boolean(value: str | None) -> bool:
    """A git config boolean (true, yes, on, 1; an empty value is true)."""
    return value is not None and value.strip().lower() in ("", "true", "yes", "on", "1")
