"""Where a hook runs and how it asks git: the git dir, common dir and checkout, and git through ``posix_spawn``.

Both the fast path (:mod:`.fast`) and the full rules (:mod:`.rules`) need these; they live here so that the fast
path can hand over to the rules without the rules importing the fast path back. Nothing here imports more than
:mod:`os`: hooks run on every commit.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

NAMESPACES = (b"refs/agentops/", b"refs/notes/agentops/")


class Where:
    """The git dir, common dir and (for a worktree) top of the checkout a hook runs in."""

    __slots__ = ("common_dir", "env", "git_dir", "toplevel")

    def __init__(self, git_dir: str, common_dir: str, toplevel: str | None, env: Mapping[str, str]) -> None:
        self.git_dir = git_dir
        self.common_dir = common_dir
        self.toplevel = toplevel
        self.env = env  # git's environment for the hook (GIT_INDEX_FILE during a partial commit, ...)


def locate(cwd: str, env: Mapping[str, str]) -> Where:
    """Git sets ``GIT_DIR`` for hooks in linked worktrees (and bare repositories) and runs them at the top of
    the worktree; in a main worktree ``.git`` is right there."""
    toplevel: str | None = cwd
    git_dir = env.get("GIT_DIR")
    if git_dir:
        git_dir = os.path.normpath(os.path.join(cwd, git_dir))
        if git_dir == os.path.normpath(cwd):
            toplevel = None  # a bare repository
    else:
        dot_git = os.path.join(cwd, ".git")
        if os.path.isdir(dot_git):
            git_dir = dot_git
        elif os.path.isfile(dot_git):
            with open(dot_git, encoding="utf-8", errors="replace") as handle:
                text = handle.read().strip()
            git_dir = os.path.join(cwd, text[len("gitdir: ") :]) if text.startswith("gitdir: ") else cwd
        else:
            git_dir, toplevel = cwd, None
    common = git_dir
    commondir = os.path.join(git_dir, "commondir")
    if os.path.isfile(commondir):
        with open(commondir, encoding="utf-8") as handle:
            common = os.path.normpath(os.path.join(git_dir, handle.read().strip()))
    return Where(os.path.normpath(git_dir), common, toplevel, env)


def git(where: Where, args: Sequence[str], *, cwd: str | None = None, stdin: bytes = b"") -> tuple[int, bytes]:
    """Run git in ``cwd`` (the git dir by default) with the hook's environment and return (status, stdout);
    stderr is discarded. No :mod:`subprocess` import."""
    out_r, out_w = os.pipe()
    in_r, in_w = os.pipe()
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        pid = os.posix_spawnp(
            "git",
            ["git", "-C", cwd or where.git_dir, *args],
            dict(where.env),
            file_actions=[
                (os.POSIX_SPAWN_DUP2, in_r, 0),
                (os.POSIX_SPAWN_DUP2, out_w, 1),
                (os.POSIX_SPAWN_DUP2, null, 2),
                (os.POSIX_SPAWN_CLOSE, out_r),
                (os.POSIX_SPAWN_CLOSE, in_w),
            ],
        )
    finally:
        os.close(out_w)
        os.close(in_r)
        os.close(null)
    try:
        if stdin:
            os.write(in_w, stdin)
    finally:
        os.close(in_w)
    chunks = []
    while chunk := os.read(out_r, 65536):
        chunks.append(chunk)
    os.close(out_r)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks)


def blobs(where: Where, revs: Sequence[str]) -> list[bytes | None]:
    """The contents of several objects (``<rev>:<path>`` or object ids) in one ``git cat-file --batch``; None for
    one that is missing."""
    status, out = git(where, ["cat-file", "--batch"], stdin="".join(f"{r}\n" for r in revs).encode())
    results: list[bytes | None] = []
    position = 0
    for _ in revs:
        end = out.find(b"\n", position)
        if status != 0 or end < 0:
            return results + [None] * (len(revs) - len(results))
        header = out[position:end].split()
        position = end + 1
        if len(header) != 3 or not header[2].isdigit():
            results.append(None)  # "<rev> missing" or "ambiguous"
            continue
        size = int(header[2])
        results.append(out[position : position + size])
        position += size + 1
    return results
