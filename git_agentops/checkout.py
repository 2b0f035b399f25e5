"""Questions about a checkout that git answers best: is it clean, what is HEAD.

Cleanliness is asked of ``git status`` itself rather than re-implemented, so that every ignore source
(``.gitignore``, ``info/exclude``, ``core.excludesFile``), submodules, the untracked cache and fsmonitor all
count exactly as they do for the user.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import AgentOpsError


@dataclass(frozen=True, slots=True)
class Head:
    commit: str
    tree: str
    branch: str | None  # refs/heads/... or None when detached


def _git(worktree: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", *args], cwd=worktree, capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise AgentOpsError("GIT_FAILED", f"git {args[0]} could not run in {worktree}: {exc}") from exc


def dirty_paths(worktree: Path, *, untracked: bool = True, limit: int = 50) -> list[str]:
    """Modified, staged (and, unless ``untracked=False``, untracked-not-ignored) paths; empty when clean."""
    done = _git(
        worktree,
        "status",
        "--porcelain=v1",
        "-z",
        f"--untracked-files={'all' if untracked else 'no'}",
        "--ignore-submodules=none",
    )
    if done.returncode != 0:
        raise AgentOpsError("GIT_FAILED", f"git status failed in {worktree}: {done.stderr.decode(errors='replace')}")
    entries = [e for e in done.stdout.split(b"\0") if e]
    paths: list[str] = []
    skip_next = False
    for entry in entries:
        if skip_next:  # the source path of a rename/copy
            skip_next = False
            continue
        status, path = entry[:2], entry[3:]
        skip_next = status[0:1] in (b"R", b"C")
        paths.append(f"{status.decode()} {path.decode(errors='replace')}")
        if len(paths) >= limit:
            break
    return paths


def head(worktree: Path) -> Head:
    """HEAD's commit, tree and branch; ``VERIFY_NO_COMMIT`` on an unborn branch."""
    done = _git(worktree, "rev-parse", "-q", "HEAD^{commit}", "HEAD^{tree}")
    lines = done.stdout.decode().split()
    if done.returncode != 0 or len(lines) != 2:
        raise AgentOpsError("VERIFY_NO_COMMIT", f"HEAD of {worktree} has no commit yet")
    branch = _git(worktree, "rev-parse", "--symbolic-full-name", "HEAD").stdout.decode().strip()
    return Head(lines[0], lines[1], branch if branch.startswith("refs/heads/") else None)


def toplevel(path: Path) -> Path:
    done = _git(path, "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        raise AgentOpsError(
            "REPO_BARE" if b"work tree" in done.stderr else "REPO_NOT_FOUND", f"{path} is not inside a working tree"
        )
    return Path(done.stdout.decode().strip())
