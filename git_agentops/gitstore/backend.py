"""Two ways to read and write objects and refs: pygit2 in-process, or git plumbing subprocesses.

pygit2 is the fast path for a long-lived process (a supervisor writes thousands of journal commits), but merely
importing it costs ~100 ms -- more than a whole ``git agentops-verify`` may add. A short-lived command that makes
a handful of writes is faster through git's plumbing (~1.5 ms a call): ``cat-file``, ``ls-tree``,
``hash-object``, ``mktree``, ``commit-tree`` and ``update-ref <ref> <new> <old>``, which is git's own
compare-and-swap (and fires the ``reference-transaction`` hook, as any git ref update does).

Code that only needs these primitives (the notes writer) takes an :class:`ObjectBackend` and works with either.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from ..clock import Clock
from ..errors import AgentOpsError
from .identity import Identity
from .refnames import RefConflict

if TYPE_CHECKING:
    from .repo import Store

ZERO: Final = "0" * 40
TREE_MODE: Final = "040000"
BLOB_MODE: Final = "100644"


@dataclass(frozen=True, slots=True)
class TreeEntry:
    """One entry of a tree as the backends exchange it: ``mode`` as six octal digits (``040000``), ``oid`` as hex."""

    name: str
    mode: str  # "100644", "040000"...
    oid: str

    @property
    def is_tree(self) -> bool:
        """True for a subtree, in the six-digit form and in git's own unpadded ``40000``."""
        return self.mode in ("040000", "40000")


class LockBusy(Exception):
    """The ref is locked by another writer right now."""


class ObjectBackend(Protocol):
    """The object and ref primitives the notes writer needs, over pygit2 or over git plumbing.

    Object ids are 40-digit lowercase hex. The backends differ in what a read accepts and how it fails: each
    implementation's docstring says how. No method moves a ref except :meth:`cas_ref`.
    """

    def read_ref(self, name: str) -> str | None:
        """The object id ref ``name`` points at, or None when there is no such ref."""
        ...

    def commit_tree_id(self, commit: str) -> str:
        """The id of the tree of commit ``commit``; ``OBJECT_MISSING`` when it names no commit."""
        ...

    def read_tree(self, oid: str) -> list[TreeEntry]:
        """The entries of tree ``oid`` in their stored (git's) order, modes as six octal digits."""
        ...

    def read_blob(self, oid: str) -> bytes:
        """The bytes of blob ``oid``."""
        ...

    def has_object(self, oid: str) -> bool:
        """Whether the object database holds ``oid``."""
        ...

    def write_blob(self, data: bytes) -> str:
        """Write ``data`` as a blob and return its id."""
        ...

    def write_tree(self, entries: Sequence[TreeEntry]) -> str:
        """Write a tree of ``entries`` and return its id.

        Pass the entries in git's order (by name, a subtree compared as ``name/``): not every writer sorts them.
        """
        ...

    def write_commit(self, tree: str, parents: Sequence[str], message: str) -> str:
        """Write a commit of ``tree`` with ``parents``, authored and committed by the backend's identity and clock."""
        ...

    def cas_ref(self, name: str, new: str, expected: str | None, message: str) -> None:
        """Set ``name`` to ``new`` iff it holds ``expected`` (None: iff it does not exist).

        Raise :class:`~git_agentops.gitstore.refs.RefConflict` on a mismatch, :class:`LockBusy` if locked. Neither
        is retried here: the caller re-reads and retries its whole operation.
        """
        ...


class Pygit2Backend:
    """The :class:`ObjectBackend` of a :class:`~git_agentops.gitstore.repo.Store`: pygit2, in process.

    For a long-lived process that has already paid pygit2's import.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def read_ref(self, name: str) -> str | None:
        """Direct refs only (:func:`~git_agentops.gitstore.refs.read_ref`): ``REF_SYMBOLIC`` for a symbolic ref."""
        from .refs import read_ref

        return read_ref(self.store, name)

    def commit_tree_id(self, commit: str) -> str:
        """``commit`` may be any revision; a tag is peeled to its commit, anything else is ``OBJECT_MISSING``."""
        return str(self.store.resolve_commit(commit).tree_id)

    def read_tree(self, oid: str) -> list[TreeEntry]:
        """pygit2's errors are not translated: ``KeyError`` for a missing object, ``TypeError`` for a non-tree."""
        return [TreeEntry(str(e.name), f"{e.filemode:06o}", str(e.id)) for e in self.store.repo[oid]]  # type: ignore[attr-defined]

    def read_blob(self, oid: str) -> bytes:
        """pygit2's errors are not translated: ``KeyError`` for a missing object, ``AttributeError`` for a non-blob."""
        data: bytes = self.store.repo[oid].data  # type: ignore[attr-defined]
        return data

    def has_object(self, oid: str) -> bool:
        """In process; False (not an error) for a malformed id."""
        return self.store.has_object(oid)

    def write_blob(self, data: bytes) -> str:
        """In process, straight into the object database."""
        return str(self.store.repo.create_blob(data))

    def write_tree(self, entries: Sequence[TreeEntry]) -> str:
        """Through a libgit2 tree builder, which sorts the entries itself."""
        import pygit2

        builder = self.store.repo.TreeBuilder()
        for entry in entries:
            builder.insert(entry.name, pygit2.Oid(hex=entry.oid), int(entry.mode, 8))
        return str(builder.write())

    def write_commit(self, tree: str, parents: Sequence[str], message: str) -> str:
        """Author and committer from :meth:`~git_agentops.gitstore.repo.Store.signature`: the store's identity."""
        import pygit2

        signature = self.store.signature()
        return str(
            self.store.repo.create_commit(
                None, signature, signature, message, pygit2.Oid(hex=tree), [pygit2.Oid(hex=p) for p in parents]
            )
        )

    def cas_ref(self, name: str, new: str, expected: str | None, message: str) -> None:
        """One attempt of :func:`~git_agentops.gitstore.refs.try_update_refs`, never waiting for a lock.

        So it also raises ``OBJECT_MISSING`` (``new`` is not in the object database), ``REF_NAME_INVALID``, and
        the codes of the namespace rules the hooks enforce.
        """
        from .refs import RefUpdate, _LockBusy, try_update_refs

        try:
            try_update_refs(self.store, [RefUpdate(name, new, expected)], message)
        except _LockBusy as busy:
            raise LockBusy(name) from busy


class GitCliBackend:
    """Objects and refs through git plumbing, run in ``cwd`` with ``environ`` (plus identity and date)."""

    def __init__(
        self,
        cwd: Path,
        *,
        environ: Mapping[str, str],
        identity: Identity,
        clock: Clock,
        loose_objects: Path | None = None,
    ) -> None:
        """``loose_objects``: the objects directory of a SHA-1 repository, to write new objects as loose files
        directly (git's own format: zlib of ``<type> <size>\\0<content>``, written to a temporary file and
        renamed) instead of one ``hash-object``/``mktree``/``commit-tree`` process each."""
        self.cwd = cwd
        self.environ = dict(environ)
        self.identity = identity
        self.clock = clock
        self.loose_objects = loose_objects
        self._reader: subprocess.Popen[bytes] | None = None

    def _write_loose(self, kind: str, content: bytes) -> str:
        import hashlib
        import os
        import zlib

        assert self.loose_objects is not None
        raw = f"{kind} {len(content)}\0".encode() + content
        oid = hashlib.sha1(raw, usedforsecurity=False).hexdigest()
        directory = self.loose_objects / oid[:2]
        target = directory / oid[2:]
        if target.exists():
            return oid
        directory.mkdir(exist_ok=True)
        tmp = directory / f"tmp_obj_agentops_{os.getpid()}_{oid[2:10]}"
        with tmp.open("wb") as handle:
            handle.write(zlib.compress(raw, 1))
        tmp.chmod(0o444)
        os.replace(tmp, target)
        return oid

    @staticmethod
    def _tree_bytes(entries: Sequence[TreeEntry]) -> bytes:
        return b"".join(
            e.mode.lstrip("0").encode()
            + b" "
            + e.name.encode("utf-8", errors="surrogateescape")
            + b"\0"
            + bytes.fromhex(e.oid)
            for e in entries
        )

    def _git(
        self, *args: str, input: bytes | None = None, env: Mapping[str, str] | None = None, ok: tuple[int, ...] = (0,)
    ) -> subprocess.CompletedProcess[bytes]:
        try:
            done = subprocess.run(
                ["git", *args],
                cwd=self.cwd,
                input=input,
                capture_output=True,
                timeout=120,
                env=dict(env) if env is not None else self.environ,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise AgentOpsError("GIT_FAILED", f"git {args[0]} could not run: {exc}") from exc
        if done.returncode not in ok:
            raise AgentOpsError(
                "GIT_FAILED", f"git {' '.join(args[:2])} failed: {done.stderr.decode(errors='replace').strip()}"
            )
        return done

    def _batch(self) -> subprocess.Popen[bytes]:
        """One ``git cat-file --batch`` process answers every read of this backend."""
        if self._reader is None or self._reader.poll() is not None:
            try:
                self._reader = subprocess.Popen(
                    ["git", "cat-file", "--batch"],
                    cwd=self.cwd,
                    env=self.environ,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
            except OSError as exc:
                raise AgentOpsError("GIT_FAILED", f"git cat-file could not run: {exc}") from exc
        return self._reader

    def _object(self, rev: str) -> tuple[str, str, bytes] | None:
        """(oid, type, content) of ``rev``, or None when it names nothing."""
        if "\n" in rev or not rev:
            raise AgentOpsError("OBJECT_MISSING", f"{rev!r} cannot name an object")
        reader = self._batch()
        assert reader.stdin is not None and reader.stdout is not None
        reader.stdin.write(rev.encode() + b"\n")
        reader.stdin.flush()
        header = reader.stdout.readline().decode().split()
        if len(header) != 3:  # "<rev> missing" / "ambiguous"
            return None
        oid, kind, size = header
        content = reader.stdout.read(int(size) + 1)[:-1]
        return oid, kind, content

    def close(self) -> None:
        """Stop the ``git cat-file --batch`` reader if one is running; the next read starts a new one."""
        if self._reader is not None:
            if self._reader.stdin is not None:
                self._reader.stdin.close()
            self._reader.wait(timeout=10)
            if self._reader.stdout is not None:
                self._reader.stdout.close()
            self._reader = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110 -- best effort at interpreter shutdown
            pass

    def read_ref(self, name: str) -> str | None:
        """Resolved by ``git cat-file --batch``: ``name`` may be any revision, and a symbolic ref is followed.

        ``OBJECT_MISSING`` for an empty name or one holding a newline.
        """
        found = self._object(name)
        return found[0] if found else None

    def commit_tree_id(self, commit: str) -> str:
        """``OBJECT_MISSING`` unless ``commit`` names a commit object itself: a tag is not peeled."""
        found = self._object(commit)
        if found is None or found[1] != "commit" or not found[2].startswith(b"tree "):
            raise AgentOpsError("OBJECT_MISSING", f"{commit} is not a commit")
        return found[2][5:45].decode()

    def read_tree(self, oid: str) -> list[TreeEntry]:
        """``OBJECT_MISSING`` when ``oid`` names no tree."""
        found = self._object(oid)
        if found is None or found[1] != "tree":
            raise AgentOpsError("OBJECT_MISSING", f"{oid} is not a tree")
        data, out, pos = found[2], [], 0
        while pos < len(data):
            space = data.index(b" ", pos)
            nul = data.index(b"\0", space)
            mode = data[pos:space].decode().rjust(6, "0")
            name = data[space + 1 : nul].decode("utf-8", errors="surrogateescape")
            out.append(TreeEntry(name, mode, data[nul + 1 : nul + 21].hex()))
            pos = nul + 21
        return out

    def read_blob(self, oid: str) -> bytes:
        """``OBJECT_MISSING`` when ``oid`` names no blob."""
        found = self._object(oid)
        if found is None or found[1] != "blob":
            raise AgentOpsError("OBJECT_MISSING", f"{oid} is not a blob")
        return found[2]

    def has_object(self, oid: str) -> bool:
        """Whether ``oid`` names an object; it is resolved as a revision, like every read here."""
        return self._object(oid) is not None

    def write_blob(self, data: bytes) -> str:
        """``git hash-object -w --no-filters`` (no clean filter applies), or with ``loose_objects`` a loose object."""
        if self.loose_objects is not None:
            return self._write_loose("blob", data)
        return self._git("hash-object", "-w", "--no-filters", "--stdin", input=data).stdout.decode().strip()

    def write_tree(self, entries: Sequence[TreeEntry]) -> str:
        """``git mktree``, which sorts the entries; with ``loose_objects`` they are written as given, unsorted."""
        if self.loose_objects is not None:
            return self._write_loose("tree", self._tree_bytes(entries))
        lines = b"".join(
            f"{e.mode} {'tree' if e.is_tree else 'blob'} {e.oid}\t".encode() + e.name.encode() + b"\0" for e in entries
        )
        return self._git("mktree", "-z", input=lines).stdout.decode().strip()

    def write_commit(self, tree: str, parents: Sequence[str], message: str) -> str:
        """``git commit-tree --no-gpg-sign`` (or a loose object), dated ``clock.now()`` in whole seconds, ``+0000``."""
        when = f"{int(self.clock.now())} +0000"
        if self.loose_objects is not None:
            who = f"{self.identity.name} <{self.identity.email}> {when}"
            head = f"tree {tree}\n" + "".join(f"parent {p}\n" for p in parents) + f"author {who}\ncommitter {who}\n\n"
            return self._write_loose("commit", head.encode() + message.encode())
        env = {
            **self.environ,
            "GIT_AUTHOR_NAME": self.identity.name,
            "GIT_AUTHOR_EMAIL": self.identity.email,
            "GIT_COMMITTER_NAME": self.identity.name,
            "GIT_COMMITTER_EMAIL": self.identity.email,
            "GIT_AUTHOR_DATE": when,
            "GIT_COMMITTER_DATE": when,
        }
        args = ["commit-tree", "--no-gpg-sign", tree]
        for parent in parents:
            args += ["-p", parent]
        return self._git(*args, input=message.encode(), env=env).stdout.decode().strip()

    def cas_ref(self, name: str, new: str, expected: str | None, message: str) -> None:
        """``git update-ref <name> <new> <expected>``: git's own compare-and-swap, running ``reference-transaction``.

        A failure that is neither a mismatch nor a held lock is ``GIT_FAILED``.
        """
        done = self._git("update-ref", "-m", message, name, new, expected or ZERO, ok=(0, 1, 128))
        if done.returncode == 0:
            return
        error = done.stderr.decode(errors="replace")
        if "File exists" in error or "Unable to create" in error:
            raise LockBusy(name)
        if "but expected" in error or "already exists" in error or "unable to resolve" in error:
            raise RefConflict(name, expected, self.read_ref(name))
        raise AgentOpsError("GIT_FAILED", f"git update-ref {name} failed: {error.strip()}")


def git_location(cwd: Path) -> tuple[Path, Path]:
    """(common dir, git dir) of the repository around ``cwd``, asked of git (no pygit2). ``REPO_NOT_FOUND``."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--path-format=absolute", "--git-common-dir", "--git-dir"],
            cwd=cwd,
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise AgentOpsError("GIT_FAILED", f"git rev-parse could not run: {exc}") from exc
    lines = done.stdout.decode().splitlines()
    if done.returncode != 0 or len(lines) != 2:
        raise AgentOpsError("REPO_NOT_FOUND", f"{cwd} is not inside a Git repository")
    return Path(lines[0]).resolve(), Path(lines[1]).resolve()


def git_config(cwd: Path, *keys: str) -> dict[str, str]:
    """The values of several config keys in one git call (last value wins); absent keys are left out."""
    pattern = "^(" + "|".join(k.replace(".", r"\.").lower() for k in keys) + ")$"
    try:
        done = subprocess.run(
            ["git", "config", "-z", "--get-regexp", pattern], cwd=cwd, capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise AgentOpsError("GIT_FAILED", f"git config could not run: {exc}") from exc
    values: dict[str, str] = {}
    for item in done.stdout.split(b"\0"):
        if item:
            key, _, value = item.decode("utf-8", errors="replace").partition("\n")
            values[key] = value
    return values
