"""Opening a repository, and the handle every store operation takes.

A :class:`Store` is a pygit2 repository plus what the toolkit needs to write to it responsibly: the worktree's
own git dir and the *common* dir shared by all linked worktrees (refs, objects and our private state live there),
the clock that dates commits, and the identity that signs them. It opens from any directory of the main worktree
or of a linked worktree, or from a bare repository.

``git config agentops.fsync true`` makes libgit2 fsync objects and refs (``enable_fsync_gitdir``): durable
against power loss at about 3x the cost per write. libgit2 ignores git's own ``core.fsync``, so the toolkit has
its own switch. The setting is process-wide in libgit2.
"""

from __future__ import annotations

import os
from pathlib import Path

import pygit2

from ..clock import Clock
from ..errors import AgentOpsError
from .identity import DEFAULT_IDENTITY, Identity


def _config_bool(config: pygit2.Config, key: str) -> bool | None:
    try:
        return config.get_bool(key)
    except (KeyError, pygit2.GitError):
        return None
    except ValueError as exc:
        raise AgentOpsError("GIT_FAILED", f"git config {key} is not a boolean") from exc


def _config_str(config: pygit2.Config, key: str) -> str | None:
    try:
        value = config[key]
    except (KeyError, pygit2.GitError):
        return None
    return value if isinstance(value, str) and value else None


class Store:
    """A repository opened for the toolkit. Cheap to create; not shared across threads."""

    def __init__(
        self,
        repo: pygit2.Repository,
        *,
        clock: Clock,
        identity: Identity | None = None,
        fsync: bool | None = None,
    ) -> None:
        self.repo = repo
        self.clock = clock
        self.git_dir = Path(repo.path).resolve()
        commondir_file = self.git_dir / "commondir"
        if commondir_file.is_file():
            self.common_dir = (self.git_dir / commondir_file.read_text("utf-8").strip()).resolve()
        else:
            self.common_dir = self.git_dir
        self.workdir = Path(repo.workdir).resolve() if repo.workdir else None
        config = repo.config
        if identity is None:
            name, email = _config_str(config, "user.name"), _config_str(config, "user.email")
            identity = Identity(name, email) if name and email else DEFAULT_IDENTITY
        self.identity = identity
        if fsync is None:
            fsync = bool(_config_bool(config, "agentops.fsync"))
        self.fsync = fsync
        if fsync:
            pygit2.settings.enable_fsync_gitdir(True)

    def reopen(self) -> Store:
        """Another handle on the same repository, with the same clock, identity and fsync: for another thread
        (pygit2 objects are not shared across threads)."""
        return Store(pygit2.Repository(str(self.git_dir)), clock=self.clock, identity=self.identity, fsync=self.fsync)

    def config_value(self, key: str) -> str | None:
        """A git config value as text (repository, global and system levels), or None when unset."""
        return _config_str(self.repo.config, key)

    @property
    def is_bare(self) -> bool:
        """True for a bare repository (``workdir`` is then None)."""
        return bool(self.repo.is_bare)

    def signature(self) -> pygit2.Signature:
        """Author and committer of the toolkit's commits: the store's identity, dated ``clock.now()`` (UTC)."""
        return pygit2.Signature(self.identity.name, self.identity.email, int(self.clock.now()), 0)

    def private_dir(self) -> Path:
        """``$GIT_COMMON_DIR/agentops``: toolkit state that is not in the object database (locks, logs)."""
        return self.common_dir / "agentops"

    def resolve(self, rev: str) -> pygit2.Oid:
        """The object id ``rev`` names (a hex id, a ref, ``HEAD~2``...); ``OBJECT_MISSING`` if none."""
        try:
            obj = self.repo.revparse_single(rev)
        except (KeyError, ValueError, pygit2.GitError) as exc:
            raise AgentOpsError("OBJECT_MISSING", f"{rev!r} does not name an object in this repository") from exc
        return obj.id

    def resolve_commit(self, rev: str) -> pygit2.Commit:
        """The commit ``rev`` names, peeling a tag; ``OBJECT_MISSING`` unless ``rev`` names one or a tag of one."""
        oid = self.resolve(rev)
        obj = self.repo[oid]
        try:
            commit = obj.peel(pygit2.Commit)
        except (pygit2.GitError, ValueError, TypeError) as exc:
            raise AgentOpsError("OBJECT_MISSING", f"{rev!r} does not name a commit") from exc
        assert isinstance(commit, pygit2.Commit)
        return commit

    def has_object(self, oid: pygit2.Oid | str) -> bool:
        """Whether the object database holds ``oid``; False (not an error) for text that is not a hex id."""
        try:
            return (oid if isinstance(oid, pygit2.Oid) else pygit2.Oid(hex=oid)) in self.repo
        except ValueError:
            return False


def open_store(
    start: str | os.PathLike[str],
    *,
    clock: Clock,
    identity: Identity | None = None,
    fsync: bool | None = None,
) -> Store:
    """Open the repository containing ``start`` (any directory of any of its worktrees). ``REPO_NOT_FOUND``."""
    try:
        found = pygit2.discover_repository(str(start))
    except pygit2.GitError as exc:  # e.g. dubious ownership
        raise AgentOpsError("REPO_NOT_FOUND", f"cannot open a Git repository at {start}: {exc}") from exc
    if found is None:
        raise AgentOpsError("REPO_NOT_FOUND", f"{start} is not inside a Git repository")
    try:
        repo = pygit2.Repository(found)
    except pygit2.GitError as exc:
        raise AgentOpsError("REPO_NOT_FOUND", f"cannot open the Git repository at {found}: {exc}") from exc
    return Store(repo, clock=clock, identity=identity, fsync=fsync)
