"""Files the supervisor owns whole inside a worktree an agent writes: removed when the project does not track them,
rewritten from scratch, left read-only.

Why: the host guard's configuration lives in the worker's own worktree, where the agent can write between two
generations. Merging into what is there let an agent's ``"disableAllHooks": true`` survive every reinstall; so
each generation the supervisor removes whatever the agent left where a host reads its settings (unless the
project tracks it -- ``tracked`` is asked, never ``git status``, which the agent controls) and writes its own
files whole.

The walk never follows a symlink: every directory is opened with ``O_NOFOLLOW`` relative to its parent, and what
is in the way -- a symlink, a file where a directory belongs, a directory where our file belongs -- is removed
when untracked and refused (``PATH_SYMLINK`` / ``PATH_NOT_REGULAR``) when the project tracks it. Files are written
0444 and directories that hold only ours are sealed 0555. The agent runs as the same user, so it may chmod them
back and write: the modes are advisory, a sign for an agent that edits them by mistake. What holds is that the
next generation starts from our files again. Our own rewrite restores the owner's write and search bits of any
directory it enters first, so a 0555 directory (ours, or one the agent made) does not stop it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from .private import PathError

FILE_MODE: Final = 0o444
SEALED_DIR_MODE: Final = 0o555
MAX_DEPTH: Final = 32
"""How deep :meth:`OwnedTree.prune` descends; what lies deeper is left (no host reads settings down there)."""
_OWNER_RWX: Final = stat.S_IRWXU


def _open_dir(parent: int, name: str) -> int:
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)


def _lstat(parent: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _usable(parent: int, name: str, info: os.stat_result) -> None:
    """Give the owner back read, write and search on the directory ``name`` (checked a directory, not a symlink:
    ``chmod`` by ``dir_fd`` follows links, and Linux has no ``lchmod``)."""
    if info.st_mode & _OWNER_RWX != _OWNER_RWX:
        os.chmod(name, stat.S_IMODE(info.st_mode) | _OWNER_RWX, dir_fd=parent)


class OwnedTree:
    """The files of one worktree the supervisor owns, and a record of what of the agent's it removed."""

    def __init__(self, root: Path, tracked: Callable[[str], bool]) -> None:
        self.root = root
        self.tracked = tracked
        self.removed: list[str] = []
        """Paths (relative to ``root``) removed because the project does not track them, in removal order."""

    def _refuse_tracked(self, rel: str, info: os.stat_result) -> None:
        if stat.S_ISLNK(info.st_mode):
            raise PathError("PATH_SYMLINK", f"{self.root / rel} is a symlink the project tracks; refusing")
        raise PathError("PATH_NOT_REGULAR", f"{self.root / rel} is not what it should be, and the project tracks it")

    def _clear(self, parent: int, name: str, rel: str, info: os.stat_result) -> None:
        """``name`` is in the way of our directory or file: remove it, unless the project tracks it."""
        if self.tracked(rel):
            self._refuse_tracked(rel, info)
        if not self.prune_entry(parent, name, rel):
            raise PathError("PATH_NOT_REGULAR", f"{self.root / rel} is in the way and could not be removed")

    def prune_entry(
        self, parent: int, name: str, rel: str, *, keep: frozenset[str] = frozenset(), depth: int = 0
    ) -> bool:
        """Remove ``name`` (``rel`` from the root) under the directory ``parent`` unless the project tracks it or
        it is in ``keep``; a directory is pruned entry by entry, and removed once empty and untracked. True when
        nothing is left at ``rel``."""
        info = _lstat(parent, name)
        if info is None:
            return True
        if rel in keep:
            return False
        if not stat.S_ISDIR(info.st_mode):
            if self.tracked(rel):
                return False
            os.unlink(name, dir_fd=parent)
            self.removed.append(rel)
            return True
        if depth >= MAX_DEPTH:
            return False
        _usable(parent, name, info)
        fd = _open_dir(parent, name)
        try:
            children = sorted(os.listdir(fd))
            left = [c for c in children if not self.prune_entry(fd, c, f"{rel}/{c}", keep=keep, depth=depth + 1)]
        finally:
            os.close(fd)
        if left or self.tracked(rel):
            return False
        os.rmdir(name, dir_fd=parent)
        return True

    def enter(self, rel: str, *, create: bool) -> int | None:
        """An open descriptor of the directory ``root/rel`` (``""``: the root), each directory on the way made
        usable for the owner; an untracked non-directory in the way is removed. None when it is missing and
        ``create`` is false."""
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        done: list[str] = []
        try:
            for part in [p for p in rel.split("/") if p]:
                done.append(part)
                here = "/".join(done)
                info = _lstat(fd, part)
                if info is not None and not stat.S_ISDIR(info.st_mode):
                    self._clear(fd, part, here, info)
                    info = None
                if info is None:
                    if not create:
                        os.close(fd)
                        return None
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                else:
                    _usable(fd, part, info)
                next_fd = _open_dir(fd, part)
                os.close(fd)
                fd = next_fd
            return fd
        except BaseException:
            os.close(fd)
            raise

    def prune(self, rel: str, *, keep: frozenset[str] = frozenset()) -> None:
        """Remove whatever untracked is at ``rel`` (file, symlink or directory tree), but not the paths in ``keep``."""
        head, _, name = rel.rpartition("/")
        fd = self.enter(head, create=False)
        if fd is None:
            return
        try:
            self.prune_entry(fd, name, rel, keep=keep)
        finally:
            os.close(fd)

    def write(self, rel: str, data: bytes, *, mode: int = FILE_MODE) -> Path:
        """Write ``rel`` whole and read-only (0444, or ``mode``), atomically: a temporary file renamed over whatever
        was there. An untracked symlink, directory or other non-file at ``rel`` is removed first."""
        head, _, name = rel.rpartition("/")
        fd = self.enter(head, create=True)
        assert fd is not None
        try:
            info = _lstat(fd, name)
            if info is not None and not stat.S_ISREG(info.st_mode):
                self._clear(fd, name, rel, info)
            tmp = f".{name}.tmp-{os.getpid()}-{time.monotonic_ns()}"
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=fd)
            try:
                with os.fdopen(out, "wb", closefd=True) as handle:
                    handle.write(data)
                    os.fchmod(handle.fileno(), mode)
                os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=fd)
                raise
        finally:
            os.close(fd)
        return self.root / rel

    def seal(self, rel: str) -> None:
        """Make the directory ``rel`` read-only (0555): it holds our files only."""
        head, _, name = rel.rpartition("/")
        fd = self.enter(head, create=False)
        if fd is None:
            return
        try:
            info = _lstat(fd, name)
            if info is not None and stat.S_ISDIR(info.st_mode):
                os.chmod(name, SEALED_DIR_MODE, dir_fd=fd)
        finally:
            os.close(fd)
