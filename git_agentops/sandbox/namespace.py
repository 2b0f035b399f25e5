"""A user and mount namespace per agent, entered by the launcher's child before Landlock: the walls Landlock lacks.

Landlock (ABI 7) mediates file access, TCP and signals, but not ``connect()`` on a *pathname* unix socket: an agent
could drive the person's tmux server (``tmux -S /tmp/tmux-0/default run-shell ...``), their ssh-agent (and have
receipts signed with the pinned key), D-Bus, gpg-agent or the docker socket. And as root, ``/proc/PID/environ`` of
the supervisor was readable. So each agent starts in namespaces of its own (the kernel's, through ctypes: no
helper program to install, and it costs a few hundred microseconds, not a ``bwrap`` exec):

* a **user namespace** mapping only the agent's own uid and gid (to themselves: files keep their owners, git's
  ownership checks hold). The agent holds no capability outside it -- with the supervisor and launcher not
  dumpable (:func:`set_dumpable`), their ``/proc`` files are closed to it even when it runs as root -- and the
  capability bounding set is emptied before ``exec``, so root inside has none in the namespace either;
* a **mount namespace** where ``/tmp``, ``/var/tmp``, ``/dev/shm``, ``/run/user/<uid>`` and the person's
  credential directories (``~/.ssh``, ``~/.gnupg``, ``~/.aws``...) are fresh, empty tmpfs and their credential files
  (``~/.netrc``...) ``/dev/null`` (``hide``), with the paths the agent needs from beneath them bound back at the
  same place (``keep``: its worktree, the repository, the interpreter...), and **every other
  pathname socket** still visible (from ``/proc/net/unix``, read before the namespaces are entered) covered by a
  bind mount of ``/dev/null``, so ``connect()`` is refused; the agent's own directories (``own``) keep theirs;
* **read-only binds** (``readonly``) of paths beneath what the agent may write -- a clean checkout's own ``.git``,
  the shared environments a setup step must not change -- so a write there is ``EROFS`` whatever Landlock grants;
* an **IPC namespace** (System V IPC and POSIX message queues of the person's session out of reach), and, for hosts
  that need no network, a **network namespace** with nothing in it.

Landlock is applied after this, inside: a Landlock domain may not mount or unmount, so the agent cannot lift a
tmpfs to reach what it hides. The mounts are made by the child after ``unshare``, so a failure is the child's
(reported like a Landlock failure, exit 126).

Like :mod:`.landlock`, this module is loaded by path by the standalone launcher: standard library only.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Final

CLONE_NEWNS: Final = 0x00020000
CLONE_NEWIPC: Final = 0x08000000
CLONE_NEWUSER: Final = 0x10000000
CLONE_NEWNET: Final = 0x40000000
MS_NOSUID: Final = 0x2
MS_NODEV: Final = 0x4
MS_RDONLY: Final = 0x1
MS_NOEXEC: Final = 0x8
MS_REMOUNT: Final = 0x20
MS_NOATIME: Final = 0x400
MS_NODIRATIME: Final = 0x800
MS_BIND: Final = 0x1000
MS_REC: Final = 0x4000
MS_RELATIME: Final = 1 << 21
MS_PRIVATE: Final = 1 << 18
PR_SET_DUMPABLE: Final = 4
PR_CAPBSET_DROP: Final = 24
PR_CAP_AMBIENT: Final = 47
PR_CAP_AMBIENT_CLEAR_ALL: Final = 4

_libc = None


def _lib() -> ctypes.CDLL:
    global _libc  # noqa: PLW0603 -- loaded once, on first use (the launcher's start pays only when it is needed)
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


class NamespaceError(OSError):
    """A namespace or mount step failed; ``strerror`` says which."""


def _check(result: int, what: str, path: str | None = None) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise NamespaceError(code, f"{what}: {os.strerror(code)}", path)


def set_dumpable(on: bool) -> None:
    """``prctl(PR_SET_DUMPABLE)``: off, this process's ``/proc/PID/{environ,maps,mem...}`` are closed to every
    process without ``CAP_SYS_PTRACE`` in the initial user namespace (an agent in its own has none), and no core
    dump is written. An ``exec`` turns it on again, so a child the process starts is not affected."""
    _lib().prctl(PR_SET_DUMPABLE, 1 if on else 0, 0, 0, 0)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(
        _lib().mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
        target,
    )


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def pathname_sockets(table: str = "/proc/net/unix") -> list[str]:
    """The pathname unix sockets bound in this network namespace (abstract ones, ``@...``, left out)."""
    try:
        with open(table, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()[1:]
    except OSError:
        return []
    found = set()
    for line in lines:
        fields = line.split(None, 7)
        if len(fields) == 8 and fields[7].startswith("/"):
            found.add(fields[7])
    return sorted(found)


def _outermost(paths: Iterable[str]) -> list[str]:
    """``paths`` without the ones another of them contains (binding the outer one brings the inner along)."""
    kept: list[str] = []
    for path in sorted(set(paths)):
        if not any(_within(path, outer) for outer in kept):
            kept.append(path)
    return kept


def _make_mountpoint(path: str, directory: bool) -> None:
    parent = os.path.dirname(path)
    os.makedirs(parent, mode=0o755, exist_ok=True)
    if directory:
        os.makedirs(path, mode=0o755, exist_ok=True)
    elif not os.path.lexists(path):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))


def _drop_capabilities() -> None:
    """Empty the bounding and ambient sets: what the agent ``exec``s gets no capability, even as root."""
    lib = _lib()
    lib.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(64):
        if lib.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break  # past the last capability this kernel knows


def enter(
    *,
    hide: Sequence[str],
    keep: Sequence[str],
    own: Sequence[str],
    network: bool,
    readonly: Sequence[str] = (),
) -> list[str]:
    """Enter new user, mount and IPC (and, without ``network``, network) namespaces and lay out the agent's view
    (see the module docstring). Call in the single-threaded child, before Landlock. Returns the sockets masked."""
    uid, gid = os.getuid(), os.getgid()
    sockets = pathname_sockets()  # before a new network namespace hides the table
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | (0 if network else CLONE_NEWNET)
    _check(_lib().unshare(flags), "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w", encoding="ascii") as handle:
            handle.write(text)
    if not network:
        _loopback_up()  # its own 127.0.0.1: a server on $AGENTOPS_PORT works, and is reachable only from inside
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount propagates back to the person's namespace
    hidden = [h for h in _outermost(os.path.realpath(h) for h in hide) if os.path.isdir(h)]
    covered = [h for h in hide if os.path.isfile(h) and not os.path.islink(h)]  # a credential file: /dev/null
    beneath = (os.path.realpath(k) for k in keep if os.path.lexists(k))
    wanted = _outermost(p for p in beneath if any(_within(p, h) and p != h for h in hidden))
    held = []  # opened now, in this namespace (a bind source must be a mount of it), before the tmpfs covers it
    for path in wanted:
        held.append((path, os.open(path, os.O_PATH | os.O_CLOEXEC), os.path.isdir(path)))
    for path in hidden:
        mode = "1777" if os.stat(path).st_mode & stat.S_ISVTX else "0700"
        _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode},size=64m")
    for path, fd, directory in held:
        _make_mountpoint(path, directory)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        os.close(fd)
    for path in covered:
        if os.path.isfile(path):  # not under a tmpfs laid just now
            _mount("/dev/null", path, None, MS_BIND)
    masked = []
    mine = [os.path.realpath(p) for p in own]
    for path in sockets:
        if any(_within(path, root) for root in mine):
            continue
        try:
            if not stat.S_ISSOCK(os.lstat(path).st_mode):
                continue
        except OSError:
            continue  # hidden by a tmpfs already, or gone
        _mount("/dev/null", path, None, MS_BIND)
        masked.append(path)
    for path in _outermost(os.path.realpath(p) for p in readonly if os.path.lexists(p)):
        _bind_readonly(path)
    _drop_capabilities()
    return masked


SIOCGIFFLAGS: Final = 0x8913
SIOCSIFFLAGS: Final = 0x8914
IFF_UP: Final = 0x1


def _loopback_up() -> None:
    """Bring ``lo`` up in the new network namespace (a new one has it down: even 127.0.0.1 is unreachable). The
    user namespace just made owns the network namespace, so its root may; what fails is said, never fatal."""
    import fcntl
    import socket
    import struct

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            request = struct.pack("16sH14x", b"lo", 0)
            flags = struct.unpack("16sH14x", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
            fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))
    except OSError as exc:
        sys.stderr.write(f"agentops sandbox: the loopback of the agent's network namespace stays down: {exc}\n")


_LOCKED: Final = (
    (os.ST_NOSUID, MS_NOSUID),
    (os.ST_NODEV, MS_NODEV),
    (os.ST_NOEXEC, MS_NOEXEC),
    (os.ST_NOATIME, MS_NOATIME),
    (os.ST_NODIRATIME, MS_NODIRATIME),
    (os.ST_RELATIME, MS_RELATIME),
)
"""statvfs flags -> mount flags: a remount in a user namespace must repeat the flags the mount it copies has (the
kernel locks them), or it is refused with EPERM."""


def _bind_readonly(path: str) -> None:
    """Bind ``path`` onto itself and remount that bind read-only (what lies beneath is read-only too)."""
    _mount(path, path, None, MS_BIND | MS_REC)
    kept = os.statvfs(path).f_flag
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY
    for seen, flag in _LOCKED:
        if kept & seen:
            flags |= flag
    _mount(None, path, None, flags)


def probe() -> str | None:
    """Why this machine cannot give an agent its namespaces (None: it can). Run in a process of its own
    (``python3 -I -S namespace.py probe``: it unshares itself); exits 1 with the reason on stderr."""
    try:
        uid = os.getuid()
        _check(_lib().unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC), "unshare")
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1")):
            with open(f"/proc/self/{name}", "w", encoding="ascii") as handle:
                handle.write(text)
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m")  # noqa: S108 -- in its own namespace
    except OSError as exc:
        return str(exc.strerror or exc)
    return None


def probe_forked() -> str | None:
    """:func:`probe` in a forked child of this process (a millisecond, where a new interpreter costs tens): only
    for a single-threaded caller, since the child runs Python after ``fork``."""
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # pragma: no cover -- the child reports through the pipe and never returns
        code = 1
        try:
            os.close(read_end)
            why = probe()
            os.write(write_end, (why or "").encode(errors="replace"))
            code = 0 if why is None else 1
        finally:
            os._exit(code)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 4096):
        chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) == 0:
        return None
    return b"".join(chunks).decode(errors="replace") or "the namespace probe failed"


if __name__ == "__main__":
    import sys

    why = probe() if sys.argv[1:] == ["probe"] else "usage: namespace.py probe"
    if why:
        os.write(2, why.encode(errors="replace") + b"\n")
    os._exit(1 if why else 0)
