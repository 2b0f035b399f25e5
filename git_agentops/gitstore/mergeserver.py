"""One long-lived ``git merge-tree --stdin`` per repository: git's merges without a process per merge.

The merge engine hands git the merges only merge-ort can promise (:mod:`git_agentops.integrate.merge`). One
``git merge-tree`` process per merge pays git's start and, far more on a long history, its commit parsing and
merge-base walk from nothing each time (on git/git's own merges, ~165 ms a merge as a process, ~37 ms through one
``--stdin`` process). So the merges of a repository go through one ``git merge-tree --stdin --write-tree`` kept
running (:func:`merge`), its answers read as they come.

git 2.39 writes ``--stdin``'s answers through stdio's buffer, flushed only when full or at exit, so the process
runs under ``stdbuf -o0`` (coreutils), which makes its standard output unbuffered; without ``stdbuf`` there is no
server and every merge is its own process, as before. Each answer is ``<status>NUL<tree>NUL`` then, with
``--name-only``, the conflicted paths each ending in NUL, then one more NUL.

The process is run neutralised like every git near agents (:mod:`.safegit`): the command of every merge driver
the repository's config defines at its start is blanked, and a config that defines other drivers since gets a new
process (the server is kept per repository *and* per set of overrides). A process that dies (an object missing,
input git refuses) or does not answer in time is killed and forgotten; the merge it was asked for is made by a
process of its own, so nothing is lost but the speed.
"""

from __future__ import annotations

import atexit
import os
import select
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from .safegit import git_argv, neutral_environment

TIMEOUT: Final = 600.0
"""Seconds one merge may take before its process is killed (as for a merge-tree process of its own)."""
_SERVERS: dict[tuple[str, ...], _Server] = {}
_LOCK: Final = threading.Lock()


class _Server:
    """One ``git merge-tree --stdin`` and what it has written that was not read yet."""

    def __init__(self, argv: Sequence[str], cwd: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            list(argv), cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self.pending = b""
        self.lock = threading.Lock()

    def merge(self, ours: str, theirs: str, timeout: float) -> tuple[str, list[str]] | None:
        """(the merge status field and its fields up to the terminator), or None when the process is gone."""
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        with self.lock:
            try:
                stdin.write(f"{ours} {theirs}\n".encode())
                stdin.flush()
            except OSError:
                return None
            deadline = time.monotonic() + timeout
            while True:
                answer = self._answer()
                if answer is not None:
                    return answer
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([stdout], [], [], left)[0]:
                    return None
                chunk = os.read(stdout.fileno(), 1 << 16)
                if not chunk:
                    return None
                self.pending += chunk

    def _answer(self) -> tuple[str, list[str]] | None:
        """One whole answer taken off :attr:`pending`: (status, [tree, paths...]); None until it is all there."""
        fields = self.pending.split(b"\0")
        if len(fields) < 3:
            return None
        for end in range(2, len(fields) - 1):  # the status, the tree, the paths, then an empty field
            if fields[end] == b"":
                self.pending = b"\0".join(fields[end + 1 :])
                return fields[0].decode(), [f.decode("utf-8", "surrogateescape") for f in fields[1:end]]
        return None

    def close(self) -> None:
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
            self.process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()


def merge(cwd: Path, where: Sequence[str], ours: str, theirs: str) -> tuple[str | None, tuple[str, ...]] | None:
    """Merge commit ``theirs`` into ``ours`` through the repository's server: (the tree, or None on conflicts; the
    conflicted paths as git names them). None when there is no server to ask (no ``stdbuf``) or it failed: the
    caller runs the merge as a process of its own."""
    if not (_is_hex(ours) and _is_hex(theirs)):
        return None
    env = neutral_environment()
    stdbuf = shutil.which("stdbuf", path=env.get("PATH"))
    if stdbuf is None:
        return None
    args = [*where, "merge-tree", "--stdin", "--write-tree", "--name-only", "--no-messages", "-z"]
    argv = [stdbuf, "-o0", *git_argv(cwd, args, env)]
    key = (str(cwd), *argv)
    with _LOCK:
        server = _SERVERS.get(key)
        if server is None or server.process.poll() is not None:
            try:
                server = _SERVERS[key] = _Server(argv, cwd, env)
            except OSError:
                return None
    answer = server.merge(ours, theirs, TIMEOUT)
    if answer is None or answer[0] not in ("0", "1") or not answer[1]:
        with _LOCK:
            if _SERVERS.get(key) is server:
                del _SERVERS[key]
        server.process.kill()
        return None
    status, (tree, *paths) = answer
    return (tree if status == "1" else None), tuple(paths)


def _is_hex(text: str) -> bool:
    """An object id as the toolkit passes it (never a name a line of ``--stdin`` could misread)."""
    return 4 <= len(text) <= 64 and all(c in "0123456789abcdef" for c in text)


@atexit.register
def _close_all() -> None:
    with _LOCK:
        servers = list(_SERVERS.values())
        _SERVERS.clear()
    for server in servers:
        server.close()
