"""Files a person names on the command line -- a recipe, a policy to check, a key, an allowed-signers file -- read
with a bound.

Such a path may name anything: a FIFO, whose read blocks until some writer comes; ``/dev/zero``, which never
ends; a file of gigabytes. :func:`read_bounded` opens without blocking, accepts only a regular file, and reads at
most one byte past the caller's limit, so an oversized file is told apart without being read whole. Failures are
:class:`OSError` with a ``strerror``, as for any unreadable file: each caller already turns those into its own
coded error.

A project's own files (its ``info/exclude``, its Makefile, tox.ini...) are read with :func:`read_text`: text, at
most :data:`MAX_BYTES`, None for anything that is not a regular file.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Final

MAX_BYTES: Final = 1024 * 1024
_CHUNK = 1 << 16
_KINDS = {stat.S_IFIFO: "a fifo", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device", stat.S_IFDIR: "a directory"}


def read_bounded(path: Path | str, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of the regular file at ``path``: more than ``limit`` means over the limit.

    :class:`OSError` (``EINVAL``, "not a regular file: a fifo") for a FIFO, device, socket or directory."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = _KINDS.get(stat.S_IFMT(mode), "not a file")
            raise OSError(errno.EINVAL, f"not a regular file: {kind}", str(path))
        return read_at_most(fd, limit + 1)
    finally:
        os.close(fd)


def read_at_most(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes from ``fd``, in chunks, stopping at its end."""
    chunks: list[bytes] = []
    size = 0
    while size < limit and (chunk := os.read(fd, min(_CHUNK, limit - size))):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_text(path: Path, limit: int = MAX_BYTES) -> str | None:
    """A regular file's text (None for a missing file, a symlink or a directory), at most ``limit`` bytes."""
    try:
        if path.is_file() and not path.is_symlink():
            return path.read_bytes()[:limit].decode("utf-8", errors="replace")
    except OSError:
        return None
    return None
