"""Files a verification made in a person's checkout: not dirt for the next verification of it.

``git agentops-verify`` runs in the caller's worktree and refuses one with untracked files (``VERIFY_DIRTY``).
But the commands themselves leave files behind -- ``tests/__pycache__/``, ``.pytest_cache/``, a JUnit report --
and in a project whose ``.gitignore`` does not name them, the second verification of the same commit refused the
checkout its first one had dirtied. So after the commands ran, the untracked files that were not there before are
remembered, with a digest of their content, in the worktree's git dir (``$GIT_DIR/agentops/verify-made.json``,
never in the work tree). An untracked file that is in that record *and unchanged since* is not dirt; one the
person (or anyone) edited afterwards is.

This is a convenience of the in-place verification only. The supervisor verifies in a clean checkout
(:mod:`git_agentops.gitstore.clean`), where nothing but the commit is present.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ..canonical import canonical_bytes
from ..errors import AgentOpsError
from ..gitstore.private import read_private, write_private
from ..gitstore.safegit import run_git
from ..schema import documents

RECORD: Final = "agentops/verify-made.json"
MAX_PATHS: Final = 20000
MAX_HASHED: Final = 64 * 1024 * 1024  # a made file larger than this is remembered by size and mtime only


def untracked_files(worktree: Path) -> list[str]:
    """Untracked, not ignored files of ``worktree`` (what ``git status`` would show as ``??``)."""
    done = run_git(worktree, "ls-files", "-z", "--others", "--exclude-standard", "--full-name", ":/")
    if done.returncode != 0:
        raise AgentOpsError("GIT_FAILED", f"git ls-files failed in {worktree}: {done.stderr.decode(errors='replace')}")
    return [p for p in done.stdout.decode("utf-8", "surrogateescape").split("\0") if p]


def _fingerprint(path: Path) -> str | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if os.path.islink(path):
        return "link:" + os.readlink(path)
    if not os.path.isfile(path):
        return None
    if info.st_size > MAX_HASHED:
        return f"size:{info.st_size}:{info.st_mtime_ns}"
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()


@dataclass
class MadeFiles:
    """The remembered files of one checkout: top-relative path -> content fingerprint."""

    git_dir: Path | None
    top: Path
    files: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, worktree: Path, *, git_dir: Path | None = None) -> MadeFiles:
        """The record of ``worktree``; ``git_dir``: its git dir when the caller already asked git (``worktree``
        is then the top of the checkout), which saves asking again."""
        if git_dir is not None:
            top = worktree
        else:
            done = run_git(worktree, "rev-parse", "--path-format=absolute", "--git-dir", "--show-toplevel")
            lines = done.stdout.decode().splitlines()
            if done.returncode != 0 or len(lines) != 2:
                return cls(None, worktree)
            git_dir, top = Path(lines[0]), Path(lines[1])
        try:
            data = read_private(git_dir, RECORD, max_bytes=8 * 1024 * 1024)
            doc = documents.parse_json(data, what=str(git_dir / RECORD)) if data else {}
        except AgentOpsError:  # a damaged record only costs the convenience
            doc = {}
        files = doc.get("files") if isinstance(doc, dict) else None
        if not isinstance(files, dict):
            return cls(git_dir, top)
        return cls(git_dir, top, {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str)})

    def not_dirt(self, dirty: Sequence[str]) -> list[str]:
        """``dirty`` (``git status --porcelain`` entries) without the untracked files this record vouches for."""
        top = self.top
        kept = []
        for entry in dirty:
            status, path = entry[:2], entry[3:]
            if status == "??" and path in self.files and _fingerprint(top / path) == self.files[path]:
                continue
            kept.append(entry)
        return kept

    def remember(self, paths: Iterable[str]) -> None:
        """Add the files a verification just made (their current content) and write the record."""
        if self.git_dir is None:
            return
        top = self.top
        for path in paths:
            if len(self.files) >= MAX_PATHS:
                break
            fingerprint = _fingerprint(top / path)
            if fingerprint is not None:
                self.files[path] = fingerprint
        present = {p: f for p, f in self.files.items() if os.path.lexists(top / p)}
        write_private(self.git_dir, RECORD, canonical_bytes({"version": 1, "files": present}) + b"\n", durable=False)
