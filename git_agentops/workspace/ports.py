"""Blocks of loopback ports, one per workspace, allocated race-free across every process on the machine.

Every worktree's dev server binding the same port -- tests then "test the wrong code without realizing it" -- and
two worktrees set up at once picking the same "free" port are the two ways parallel agents collide on the network.
So a workspace with ``[worktree] ports = N`` gets a **block** of N consecutive ports that no other workspace of any
run, supervisor or person's verification on this machine holds:

* **a lock per port** -- ``<dir>/<port>.lock``, held with ``flock`` for as long as the block is held. The kernel
  arbitrates concurrent allocators (no lock file is ever deleted, so two processes can never hold "the same" lock
  on two inodes), and drops a dead holder's locks: a supervisor killed with ``kill -9`` frees its blocks at once,
  with nothing to clean up. Blocks of different sizes never overlap, since every port is locked on its own.
* **free on the machine** -- after its locks are taken, every port of the block is bound once on 127.0.0.1 and
  ``::1`` (``SO_REUSEADDR``, as servers bind): a port some other program listens on is skipped.
* **outside the kernel's ephemeral range** by default -- ``20000-29999``; ``AGENTOPS_PORT_RANGE=LOW-HIGH`` moves it --
  so an outgoing connection's source port never takes a block's port away.

The directory is the user's: ``$AGENTOPS_PORTS_DIR``, else ``$XDG_RUNTIME_DIR/git-agentops/ports``, else
``/tmp/git-agentops-<uid>/ports``; made 0700, refused (``WORKSPACE_NO_PORTS``) when it is a symlink or another
user's. Each lock file says who holds it, so a person can tell what a port is for.

Inside an agent's sandbox the numbers mean the same ports: agents keep the machine's network (``[hosts.X] network``
true, the default), so a server an agent starts on ``$AGENTOPS_PORT`` is the one its tests and the supervisor's
services reach. A host with ``network = false`` runs in a network namespace of its own, where the block's numbers
are its own loopback's and the supervisor's services cannot be reached: a policy with services refuses that host.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import random
import socket
import stat
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ..errors import AgentOpsError

DEFAULT_RANGE: Final = (20000, 29999)


@dataclass(slots=True)
class PortBlock:
    """N consecutive ports held until :meth:`release` (or the holder's death); a context manager."""

    first: int
    count: int
    _fds: list[int] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def ports(self) -> tuple[int, ...]:
        return tuple(range(self.first, self.first + self.count))

    @property
    def held(self) -> bool:
        return bool(self._fds)

    def values(self) -> dict[str, str]:
        """The placeholders the block fills: ``port`` (its first), ``port:K`` for each."""
        out = {"port": str(self.first)}
        out.update({f"port:{k}": str(p) for k, p in enumerate(self.ports)})
        return out

    def environment(self) -> dict[str, str]:
        """``AGENTOPS_PORT`` (the first) and ``AGENTOPS_PORTS`` (all, comma-separated)."""
        return {"AGENTOPS_PORT": str(self.first), "AGENTOPS_PORTS": ",".join(map(str, self.ports))}

    def release(self) -> None:
        """Free the block (idempotent)."""
        with self._lock:
            fds, self._fds = self._fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> PortBlock:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()


def port_range(environ: Mapping[str, str]) -> tuple[int, int]:
    """The ports blocks are taken from: ``AGENTOPS_PORT_RANGE`` (``LOW-HIGH``) or :data:`DEFAULT_RANGE`."""
    text = environ.get("AGENTOPS_PORT_RANGE", "").strip()
    if not text:
        return DEFAULT_RANGE
    low, _, high = text.partition("-")
    try:
        first, last = int(low), int(high)
    except ValueError:
        first, last = 0, -1
    if not 1024 <= first <= last <= 65535:
        raise AgentOpsError(
            "WORKSPACE_NO_PORTS", f"AGENTOPS_PORT_RANGE={text!r} is not a range like 20000-29999 within 1024-65535"
        )
    return first, last


def lock_dir(environ: Mapping[str, str]) -> Path:
    """The user's port-lock directory (see the module docstring), made 0700 and checked to be the user's own."""
    explicit = environ.get("AGENTOPS_PORTS_DIR")
    if explicit:
        path = Path(explicit)
    elif environ.get("XDG_RUNTIME_DIR") and Path(environ["XDG_RUNTIME_DIR"]).is_dir():
        path = Path(environ["XDG_RUNTIME_DIR"]) / "git-agentops" / "ports"
    else:
        path = Path("/tmp") / f"git-agentops-{os.getuid()}" / "ports"  # noqa: S108 -- made 0700, checked below
    for directory in (path.parent, path):
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            raise AgentOpsError(
                "WORKSPACE_NO_PORTS",
                f"{directory} is not a directory of this user's (a symlink, or someone else's): port locks are not "
                "kept there; remove it or set AGENTOPS_PORTS_DIR",
            )
    return path


def _bindable(port: int) -> bool:
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 on this machine: nothing can listen there either
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                continue  # ::1 not configured
            return False
        finally:
            sock.close()
    return True


def _lock(directory: Path, port: int, holder: str) -> int | None:
    """The fd holding ``port``'s lock, or None when another process holds it."""
    path = directory / f"{port}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{holder} (pid {os.getpid()})\n".encode(errors="replace")[:400])
    return fd


def _starts(low: int, high: int, count: int) -> Iterator[int]:
    """Every block start in the range, beginning at a random one: concurrent allocators rarely meet."""
    starts = list(range(low, high - count + 2, count))
    if not starts:
        return
    offset = random.randrange(len(starts))
    yield from starts[offset:]
    yield from starts[:offset]


def allocate(count: int, *, holder: str, environ: Mapping[str, str]) -> PortBlock:
    """Hold a block of ``count`` ports (see the module docstring); ``WORKSPACE_NO_PORTS`` when none is left."""
    if count < 1:
        raise ValueError("a block holds at least one port")
    low, high = port_range(environ)
    directory = lock_dir(environ)
    for first in _starts(low, high, count):
        fds: list[int] = []
        for port in range(first, first + count):
            fd = _lock(directory, port, holder)
            if fd is None:
                break
            fds.append(fd)
        if len(fds) == count and all(_bindable(p) for p in range(first, first + count)):
            return PortBlock(first, count, fds)
        for fd in fds:
            os.close(fd)
    raise AgentOpsError(
        "WORKSPACE_NO_PORTS",
        f"no block of {count} free loopback ports is left in {low}-{high} (held by other workspaces or in use): "
        "end a run, lower [worktree] ports, or widen AGENTOPS_PORT_RANGE",
        details={"range": [low, high], "count": count},
    )


def holders(environ: Mapping[str, str]) -> dict[int, str]:
    """The ports whose locks are held now, and by whom (for ``doctor`` and tests)."""
    directory = lock_dir(environ)
    out: dict[int, str] = {}
    for path in directory.glob("*.lock"):
        try:
            port = int(path.stem)
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except (ValueError, OSError):
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            out[port] = os.read(fd, 400).decode(errors="replace").strip()
        finally:
            os.close(fd)
    return out
