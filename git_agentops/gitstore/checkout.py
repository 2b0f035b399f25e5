"""Questions about a checkout that git answers best: is it clean, what is HEAD.

Cleanliness is asked of ``git status`` itself rather than re-implemented, so that every ignore source
(``.gitignore``, ``info/exclude``, the person's global ``core.excludesFile``) and submodules count exactly as they
do for the user. Every call is neutralised (:mod:`.safegit`): no fsmonitor, hook or driver an agent configured
runs inside the toolkit's git.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ..errors import AgentOpsError
from .safegit import run_git


@dataclass(frozen=True, slots=True)
class Head:
    """HEAD of a checkout: its commit and tree ids, and ``branch`` (``refs/heads/...``; None when HEAD is detached)."""

    commit: str
    tree: str
    branch: str | None  # refs/heads/... or None when detached


def admin_dir(path: Path) -> Path | None:
    """The admin (git) dir of the linked worktree at ``path``, from its ``.git`` file; None if it is not one."""
    dot_git = path / ".git"
    try:
        if dot_git.is_symlink() or not dot_git.is_file():
            return None
        text = dot_git.read_text("utf-8", errors="replace").strip()
    except OSError:
        return None
    if not text.startswith("gitdir: "):
        return None
    target = Path(text[len("gitdir: ") :])
    return (path / target).resolve() if not target.is_absolute() else target.resolve()


def _git(worktree: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Neutralised git in ``worktree`` (an agent's fsmonitor or filter driver never runs here), reading a worker's
    object quarantine too: its HEAD and index may name objects only that holds (:mod:`.quarantine`)."""
    from .quarantine import reader_alternates

    return run_git(worktree, *args, env=reader_alternates(admin_dir(worktree)) or None)


def dirty_paths(worktree: Path, *, untracked: bool = True, limit: int = 50) -> list[str]:
    """Modified, staged (and, unless ``untracked=False``, untracked-not-ignored) paths; empty when clean."""
    return _entries(_status_v1(worktree, untracked=untracked), limit)


def dirty_and_untracked(worktree: Path, *, limit: int | None = 50) -> tuple[list[str], list[str]]:
    """(:func:`dirty_paths`, every untracked file that is not ignored) from one ``git status``; ``limit=None``: every
    dirty path (a caller that filters them must see all of them, or the first 50 it drops hide the 51st).

    The second list is what ``git ls-files --others --exclude-standard`` prints (``??`` entries are exactly those
    files, in the same order), decoded with ``surrogateescape`` like :func:`git_agentops.verify.made.untracked_files`:
    a person's verification asks both questions of the same checkout, before its commands run.
    """
    entries = _status_v1(worktree, untracked=True)
    untracked = [path.decode("utf-8", "surrogateescape") for status, path in entries if status == b"??"]
    return _entries(entries, limit), untracked


def _status_v1(worktree: Path, *, untracked: bool) -> list[tuple[bytes, bytes]]:
    """(status, path) of every entry of ``git status --porcelain=v1`` (a rename's source path left out)."""
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
    entries: list[tuple[bytes, bytes]] = []
    skip_next = False
    for entry in (e for e in done.stdout.split(b"\0") if e):
        if skip_next:  # the source path of a rename/copy
            skip_next = False
            continue
        status, path = entry[:2], entry[3:]
        skip_next = status[0:1] in (b"R", b"C")
        entries.append((status, path))
    return entries


def _entries(entries: list[tuple[bytes, bytes]], limit: int | None) -> list[str]:
    return [f"{status.decode()} {path.decode(errors='replace')}" for status, path in entries[:limit]]


ARTIFACT_DIRS: Final = frozenset(
    {
        "__pycache__",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".hypothesis",
        ".tox",
        ".nox",
        "htmlcov",
        "node_modules",
        ".venv",
        ".eggs",
        "build",
        "dist",
        "target",
    }
)
ARTIFACT_SUFFIXES: Final = (".pyc", ".pyo", ".egg-info", ".coverage")


def is_artifact(path: str) -> bool:
    """Whether an *untracked* path is what running a project's tools leaves behind (caches, bytecode, installs).

    Such a file is not part of any commit, and verification happens in a checkout of the commit, so it cannot
    change a result; refusing a handoff for it would ask the agent to clean up after its own test run.
    """
    parts = path.rstrip("/").split("/")
    return any(p in ARTIFACT_DIRS or p.endswith(ARTIFACT_SUFFIXES) for p in parts)


def head_and_changes(
    worktree: Path, *, untracked: bool = True, limit: int = 50, skip_artifacts: bool = False
) -> tuple[str | None, list[str]]:
    """(HEAD commit or None, changed paths) from one ``git status --porcelain=v2 --branch`` call.

    ``skip_artifacts`` leaves out untracked paths that :func:`is_artifact` recognises (never a tracked change).
    """
    commit, entries = _status_v2(worktree, untracked=untracked)
    paths: list[str] = []
    for is_untracked, raw in entries:
        path = raw.decode(errors="replace")
        if not (is_untracked and skip_artifacts and is_artifact(path)):
            paths.append(path)
    return commit, paths[:limit]


def head_changes_and_untracked(worktree: Path, *, limit: int = 50) -> tuple[str | None, list[str], list[str]]:
    """(HEAD commit or None, changed tracked paths, every untracked file that is not ignored) from one ``git status``:
    what ``head_and_changes(untracked=False)`` and ``git ls-files --others --exclude-standard`` answer (the second
    decoded with ``surrogateescape``), asked of a checkout once after a person's verification ran its commands."""
    commit, entries = _status_v2(worktree, untracked=True)
    tracked = [raw.decode(errors="replace") for is_untracked, raw in entries if not is_untracked]
    untracked = [raw.decode("utf-8", "surrogateescape") for is_untracked, raw in entries if is_untracked]
    return commit, tracked[:limit], untracked


def _status_v2(worktree: Path, *, untracked: bool) -> tuple[str | None, list[tuple[bool, bytes]]]:
    """HEAD's commit (None when unborn) and every entry of ``git status --porcelain=v2`` as (untracked?, path)."""
    done = _git(
        worktree,
        "status",
        "--porcelain=v2",
        "--branch",
        "-z",
        f"--untracked-files={'all' if untracked else 'no'}",
        "--ignore-submodules=none",
    )
    if done.returncode != 0:
        raise AgentOpsError("GIT_FAILED", f"git status failed in {worktree}: {done.stderr.decode(errors='replace')}")
    commit: str | None = None
    entries: list[tuple[bool, bytes]] = []
    fields = iter(done.stdout.split(b"\0"))
    for entry in fields:
        if entry.startswith(b"# branch.oid "):
            value = entry[len(b"# branch.oid ") :].decode()
            commit = None if value == "(initial)" else value
        elif entry[:2] in (b"1 ", b"u "):
            entries.append((False, entry.split(b" ", 8 if entry[:1] == b"1" else 10)[-1]))
        elif entry[:2] == b"2 ":
            entries.append((False, entry.split(b" ", 9)[-1]))
            next(fields, None)  # the rename's source path
        elif entry[:2] == b"? ":
            entries.append((True, entry[2:]))
    return commit, entries


def head(worktree: Path) -> Head:
    """HEAD's commit, tree and branch; ``VERIFY_NO_COMMIT`` on an unborn branch."""
    done = _git(worktree, "rev-parse", "-q", "HEAD^{commit}", "HEAD^{tree}")
    lines = done.stdout.decode().split()
    if done.returncode != 0 or len(lines) != 2:
        raise AgentOpsError("VERIFY_NO_COMMIT", f"HEAD of {worktree} has no commit yet")
    branch = _git(worktree, "rev-parse", "--symbolic-full-name", "HEAD").stdout.decode().strip()
    return Head(lines[0], lines[1], branch if branch.startswith("refs/heads/") else None)


@dataclass(frozen=True, slots=True)
class Probe:
    """Where a checkout is and what HEAD is, from one ``git rev-parse`` call."""

    toplevel: Path
    common_dir: Path
    git_dir: Path
    objects_dir: Path
    object_format: str  # "sha1" or "sha256"
    head: Head | None  # None on an unborn branch


def probe(path: Path) -> Probe:
    """``REPO_NOT_FOUND``/``REPO_BARE`` outside a working tree."""
    where = (
        "--path-format=absolute",
        "--show-toplevel",
        "--git-common-dir",
        "--git-dir",
        "--git-path",
        "objects",
        "--show-object-format",
    )
    done = _git(path, "rev-parse", *where, "HEAD^{commit}", "HEAD^{tree}", "--symbolic-full-name", "HEAD")
    lines = done.stdout.decode().splitlines()
    head: Head | None = None
    if done.returncode == 0 and len(lines) == 8:
        head = Head(lines[5], lines[6], lines[7] if lines[7].startswith("refs/heads/") else None)
    else:
        done = _git(path, "rev-parse", *where)  # no commit yet, or not a working tree
        lines = done.stdout.decode().splitlines()
        if done.returncode != 0 or len(lines) != 5:
            raise AgentOpsError(
                "REPO_BARE" if b"work tree" in done.stderr else "REPO_NOT_FOUND",
                f"{path} is not inside a working tree of a Git repository",
            )
    return Probe(
        Path(lines[0]), Path(lines[1]).resolve(), Path(lines[2]).resolve(), Path(lines[3]).resolve(), lines[4], head
    )


def toplevel(path: Path) -> Path:
    """The top directory of the working tree around ``path``, as git prints it.

    ``REPO_BARE`` in a bare repository or inside a git dir, ``REPO_NOT_FOUND`` outside any repository.
    """
    done = _git(path, "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        raise AgentOpsError(
            "REPO_BARE" if b"work tree" in done.stderr else "REPO_NOT_FOUND", f"{path} is not inside a working tree"
        )
    return Path(done.stdout.decode().strip())


PUBLISH_LOCK: Final = "publish.lock"
"""The private lock (``flock``: a crash drops it) a publisher of a local target holds from the check of the target's
checkouts to their follow after the compare-and-swap: another publisher's check in between would read a checkout the
CAS has moved past, not yet brought up, as a person's staged reversal."""
PUBLISH_LOCK_WAIT: Final = 120.0


def checkouts_of(common_dir: Path, branch: str) -> list[Path]:
    """Every worktree (the main one included) that has ``branch`` (``refs/heads/...``) checked out."""
    done = _git(common_dir, "worktree", "list", "--porcelain")
    if done.returncode != 0:
        raise AgentOpsError("GIT_FAILED", f"git worktree list failed: {done.stderr.decode(errors='replace')}")
    found: list[Path] = []
    path: Path | None = None
    for line in done.stdout.decode(errors="replace").splitlines():
        if line.startswith("worktree "):
            path = Path(line[len("worktree ") :])
        elif line == f"branch {branch}" and path is not None and (path / ".git").exists():
            found.append(path)
    return found


def shown_dirty(dirty: Mapping[Path, Sequence[str]]) -> str:
    """``/repo: src/a.txt, src/b.txt; /other: x`` -- the dirty checkouts :func:`dirty_checkouts` found, for a
    message (the first 8 paths of each)."""
    return "; ".join(f"{worktree}: {', '.join(paths[:8])}" for worktree, paths in dirty.items())


def dirty_checkouts(common_dir: Path, branch: str) -> tuple[list[Path], dict[Path, list[str]]]:
    """(every checkout of ``branch``, those of them with uncommitted changes to tracked files and their paths).

    Ask before ``branch`` moves: once the ref has moved, a checkout still at the old tree shows the move reversed,
    staged, and looks dirty for that reason alone.
    """
    checked_out = checkouts_of(common_dir, branch)
    dirty = {worktree: paths for worktree in checked_out if (paths := dirty_paths(worktree, untracked=False))}
    return checked_out, dirty


def follow_checkouts(worktrees: list[Path], old: str, new: str) -> None:
    """Bring every one of ``worktrees`` from ``old`` to ``new`` (:func:`move_checkout`), or none of them: when one
    refuses, the ones already moved are moved back and its ``GIT_FAILED`` is raised -- each checkout is left at a
    tree that matches a commit, never half-way, and no local change is overwritten."""
    moved: list[Path] = []
    for worktree in worktrees:
        try:
            move_checkout(worktree, old, new)
        except AgentOpsError:
            for done in reversed(moved):
                try:
                    move_checkout(done, new, old)
                except AgentOpsError:
                    pass  # read-tree refused to overwrite a change made meanwhile: that checkout keeps it
            raise
        moved.append(worktree)


def move_checkout(worktree: Path, old: str, new: str) -> None:
    """Bring a clean checkout of a branch that moved from ``old`` to ``new`` up to ``new``: index and files.

    git's ``receive.denyCurrentBranch=updateInstead`` does the same for a push: a two-way ``read-tree -m -u``,
    which refuses rather than overwrite a local change (``GIT_FAILED`` then, with nothing changed).
    """
    done = _git(worktree, "read-tree", "-m", "-u", old, new)
    if done.returncode != 0:
        raise AgentOpsError(
            "GIT_FAILED", f"cannot update the checkout {worktree} to {new[:12]}: {done.stderr.decode(errors='replace')}"
        )
    _git(worktree, "update-index", "-q", "--refresh")
