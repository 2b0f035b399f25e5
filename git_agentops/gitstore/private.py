"""Private files, path containment and file locks.

A few things cannot live in the object database: worktree ownership records and setup markers (they describe one
checkout), the trust store (it must never travel with the repository), locks and logs. They are *private files*:

* directories 0700, files 0600, created by the toolkit;
* written atomically: a temporary file in the same directory (``O_EXCL``), ``fsync``, ``rename``, ``fsync`` of
  the directory -- a crash leaves the old content or the new, never a torn file;
* no symlink anywhere on the path below the anchor, nor as the file itself (``PATH_SYMLINK``): an agent that can
  write in a worktree must not be able to redirect the toolkit's writes or reads;
* read with ``O_NOFOLLOW``, required to be a regular file, size-limited before reading.

:func:`resolve_contained` is the check for paths that come from outside (a policy, a request, a recipe): relative,
no ``..``, and, after resolving symlinks segment by segment, still inside the root (``PATH_ESCAPE``).

This module imports no pygit2: hooks and the CLI boundary use it on their fast paths.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from ..errors import AgentOpsError
from ..schema import documents

_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")
DEFAULT_MAX_BYTES: Final = 1024 * 1024


class PathError(AgentOpsError):
    """A path refused for safety (escape, symlink, invalid, not regular)."""


def _check_relative(rel: str | os.PathLike[str]) -> list[str]:
    text = os.fspath(rel)
    if not text or _CONTROL.search(text):
        raise PathError("PATH_INVALID", f"invalid path {text!r}: empty or contains control characters")
    if os.path.isabs(text):
        raise PathError("PATH_ESCAPE", f"{text!r} is absolute; expected a path relative to its root")
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if not parts:
        raise PathError("PATH_INVALID", f"invalid path {text!r}: names no file")
    if ".." in parts:
        raise PathError("PATH_ESCAPE", f"{text!r} climbs out of its root with '..'")
    return parts


def resolve_contained(root: str | os.PathLike[str], rel: str | os.PathLike[str]) -> Path:
    """Resolve ``rel`` under ``root``, following symlinks only while they stay inside ``root``.

    Returns the resolved absolute path (which need not exist). ``PATH_ESCAPE``, ``PATH_INVALID``.
    """
    base = Path(os.path.realpath(root))
    parts = _check_relative(rel)
    current = base
    for index, part in enumerate(parts):
        candidate = current / part
        if candidate.is_symlink():
            resolved = Path(os.path.realpath(candidate))
            if resolved != base and base not in resolved.parents:
                shown = "/".join(parts[: index + 1])
                raise PathError("PATH_ESCAPE", f"{shown!r} is a symlink to {resolved}, outside {base}")
            current = resolved
        else:
            current = candidate
    return current


def _open_dir_chain(anchor: Path, parts: list[str], *, create: bool) -> int | None:
    """Open the directory ``anchor/parts...`` without following symlinks; create missing ones 0700."""
    fd = os.open(anchor, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts:
            try:
                next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    return None
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
                next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    info = os.stat(part, dir_fd=fd, follow_symlinks=False)
                    if stat.S_ISLNK(info.st_mode):
                        raise PathError("PATH_SYMLINK", f"{part!r} under {anchor} is a symlink; refusing") from exc
                    raise PathError("PATH_NOT_REGULAR", f"{part!r} under {anchor} is not a directory") from exc
                raise
            os.close(fd)
            fd = next_fd
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_private(
    anchor: str | os.PathLike[str], rel: str | os.PathLike[str], data: bytes, *, durable: bool = True
) -> Path:
    """Atomically write ``anchor/rel`` as a 0600 file in 0700 directories. Returns the path.

    ``durable=False`` skips the two fsyncs for files that are regenerated from Git state anyway (mailbox
    instructions, responses): the rename still makes the write atomic, only power-loss durability is dropped.
    """
    anchor_path = Path(anchor)
    parts = _check_relative(rel)
    anchor_path.mkdir(mode=0o700, parents=True, exist_ok=True)
    dir_fd = _open_dir_chain(anchor_path, parts[:-1], create=True)
    assert dir_fd is not None
    name = parts[-1]
    try:
        try:
            existing = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            existing = None
        if existing is not None and stat.S_ISLNK(existing.st_mode):
            raise PathError("PATH_SYMLINK", f"{anchor_path / '/'.join(parts)} is a symlink; refusing to write")
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            raise PathError("PATH_NOT_REGULAR", f"{anchor_path / '/'.join(parts)} is not a regular file")
        tmp = f".{name}.tmp-{os.getpid()}-{time.monotonic_ns()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb", closefd=True) as handle:
                handle.write(data)
                handle.flush()
                if durable:
                    os.fsync(handle.fileno())
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        if durable:
            os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return anchor_path.joinpath(*parts)


def read_private(
    anchor: str | os.PathLike[str], rel: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES
) -> bytes | None:
    """Read ``anchor/rel`` (None if missing). ``PATH_SYMLINK``, ``PATH_NOT_REGULAR``, ``DOC_TOO_LARGE``."""
    anchor_path = Path(anchor)
    parts = _check_relative(rel)
    if not anchor_path.is_dir():
        return None
    dir_fd = _open_dir_chain(anchor_path, parts[:-1], create=False)
    if dir_fd is None:
        return None
    shown = anchor_path.joinpath(*parts)
    try:
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise PathError("PATH_SYMLINK", f"{shown} is a symlink; refusing to read it") from exc
            raise
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise PathError("PATH_NOT_REGULAR", f"{shown} is not a regular file")
        with os.fdopen(fd, "rb", closefd=True) as handle:
            if info.st_size > max_bytes:
                raise AgentOpsError("DOC_TOO_LARGE", f"{shown} is {info.st_size} bytes, over its limit of {max_bytes}")
            data = handle.read(max_bytes + 1)
            if len(data) > max_bytes:
                raise AgentOpsError("DOC_TOO_LARGE", f"{shown} grew past its limit of {max_bytes} bytes")
            return data
    finally:
        os.close(dir_fd)


def write_private_json(anchor: str | os.PathLike[str], rel: str, doc: Any, *, schema: str) -> Path:
    """:func:`write_private` of ``doc`` as canonical JSON, validated against ``schema`` first (``SCHEMA_INVALID``)."""
    return write_private(anchor, rel, documents.dump(doc, schema=schema, what=str(rel)))


def read_private_json(
    anchor: str | os.PathLike[str], rel: str, *, schema: str, max_bytes: int = DEFAULT_MAX_BYTES
) -> Any:
    """:func:`read_private`, then strict JSON validated against ``schema``; None when the file is missing.

    Adds ``JSON_INVALID`` and ``SCHEMA_INVALID`` to the codes of :func:`read_private`.
    """
    data = read_private(anchor, rel, max_bytes=max_bytes)
    if data is None:
        return None
    return documents.load(data, schema=schema, what=str(Path(anchor) / rel), max_bytes=max_bytes)


def remove_private(anchor: str | os.PathLike[str], rel: str) -> bool:
    """Remove a private file if present (never following a symlink). True if something was removed."""
    parts = _check_relative(rel)
    if not Path(anchor).is_dir():
        return False
    dir_fd = _open_dir_chain(Path(anchor), parts[:-1], create=False)
    if dir_fd is None:
        return False
    try:
        os.unlink(parts[-1], dir_fd=dir_fd)
        return True
    except FileNotFoundError:
        return False
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def file_lock(
    anchor: str | os.PathLike[str], rel: str, *, timeout: float = 10.0, blocking: bool = True
) -> Iterator[int]:
    """Hold an exclusive ``flock`` on the private file ``anchor/rel`` (created 0600).

    The OS drops the lock when the process dies, so a ``kill -9`` never leaves it stuck. ``blocking=False``
    raises ``LOCK_HELD`` at once; otherwise ``LOCK_TIMEOUT`` after ``timeout`` seconds.
    """
    anchor_path = Path(anchor)
    parts = _check_relative(rel)
    anchor_path.mkdir(mode=0o700, parents=True, exist_ok=True)
    dir_fd = _open_dir_chain(anchor_path, parts[:-1], create=True)
    assert dir_fd is not None
    try:
        try:
            fd = os.open(parts[-1], os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise PathError("PATH_SYMLINK", f"lock file {anchor_path / rel} is a symlink") from exc
            raise
    finally:
        os.close(dir_fd)
    try:
        deadline = time.monotonic() + timeout
        delay = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as exc:
                if not blocking:
                    raise AgentOpsError("LOCK_HELD", f"{anchor_path / rel} is locked by another process") from exc
                if time.monotonic() >= deadline:
                    raise AgentOpsError(
                        "LOCK_TIMEOUT", f"{anchor_path / rel} stayed locked for {timeout:.1f}s"
                    ) from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
        yield fd
    finally:
        os.close(fd)
