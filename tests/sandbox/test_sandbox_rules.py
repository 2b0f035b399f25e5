"""The rules of a worker's sandbox, computed from where things are: what is carved out of ``/`` stays out."""

from __future__ import annotations

import os
from pathlib import Path

from git_agentops.sandbox.rules import Places, agent_rules, cover, expand


def _tree(root: Path, *paths: str) -> None:
    for path in paths:
        target = root / path
        if path.endswith("/"):
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("x")


def test_a_denied_path_is_carved_out_and_everything_else_stays_covered(tmp_path: Path) -> None:
    _tree(tmp_path, "home/.ssh/id", "home/.config/app", "home/src/repo/file", "other/x")
    granted, split = cover([tmp_path], [tmp_path / "home" / ".ssh"])
    assert set(split) == {tmp_path, tmp_path / "home"}
    assert set(granted) == {tmp_path / "other", tmp_path / "home" / ".config", tmp_path / "home" / "src"}
    assert not any(p == tmp_path / "home" / ".ssh" or tmp_path / "home" / ".ssh" in p.parents for p in granted)


def test_a_symlink_in_a_split_directory_never_reaches_into_a_denied_one(tmp_path: Path) -> None:
    _tree(tmp_path, "secret/key", "open/file")
    (tmp_path / "alias").symlink_to(tmp_path / "secret")
    granted, _ = cover([tmp_path], [tmp_path / "secret"])
    assert granted == [tmp_path / "open"]  # the symlink itself is not granted; what it points at is judged there


def test_roots_without_a_denied_path_are_granted_whole(tmp_path: Path) -> None:
    _tree(tmp_path, "a/b", "c/")
    granted, split = cover([tmp_path / "a", tmp_path / "c"], [tmp_path / "z"])
    assert granted == [tmp_path / "a", tmp_path / "c"] and split == []


def test_paths_expand_home_and_variables_from_the_given_environment_only() -> None:
    env = {"HOME": "/home/u", "XDG_CACHE_HOME": "/var/cache/u"}
    assert expand("~/.claude", env) == Path("/home/u/.claude")
    assert expand("$XDG_CACHE_HOME/pip", env) == Path("/var/cache/u/pip")
    assert expand("${XDG_CACHE_HOME}/npm", env) == Path("/var/cache/u/npm")


def test_a_workers_rules_write_only_its_own_places_and_read_nothing_private(tmp_path: Path) -> None:
    """Invariant: no write rule covers a ref, the config, another worktree, the private dir or the clean checkouts;
    no read rule covers the private dir, the trust store or the signing key's directory."""
    home = tmp_path / "home"
    common = tmp_path / "repo" / ".git"
    _tree(
        tmp_path,
        "repo/.git/objects/ab/cd",
        "repo/.git/refs/heads/main",
        "repo/.git/config",
        "repo/.git/worktrees/mine/HEAD",
        "repo/.git/worktrees/theirs/HEAD",
        "repo/.git/agentops/keys/mac.key",
        "repo/.git/agentops/envs/python-1/bin/python",
        "repo/.agentops/worktrees/run/mine/file",
        "home/.ssh/signing",
        "home/.local/state/git-agentops/trust.json",
        "home/.cache/pip/x",
        "home/.cache/git-agentops/verify/r/run/candidate/file",
        "home/.claude/settings.json",
    )
    places = Places(
        worktree=tmp_path / "repo/.agentops/worktrees/run/mine",
        admin_dir=common / "worktrees" / "mine",
        common_dir=common,
        tmpdir=common / "worktrees" / "mine" / "agentops-tmp",
        private_dir=common / "agentops",
        verify_root=home / ".cache" / "git-agentops",
        trust_dir=home / ".local" / "state" / "git-agentops",
        signing_key=home / ".ssh" / "signing",
        readable_private=(common / "agentops" / "envs",),
    )
    own = [places.worktree, places.admin_dir, places.common_dir / "objects", places.tmpdir]
    rules = agent_rules(places, own=own, writable=[home / ".claude", home / ".cache"])

    def allows(path: Path, access: str) -> bool:
        real = Path(os.path.realpath(path))
        return any(access in r.access and (Path(r.path) == real or Path(r.path) in real.parents) for r in rules)

    for written in (
        places.worktree / "file",
        common / "objects" / "ab" / "cd",
        common / "worktrees" / "mine" / "HEAD",
        home / ".cache" / "pip" / "x",
        home / ".claude" / "settings.json",
    ):
        assert allows(written, "write"), written
    for refused in (
        common / "refs" / "heads" / "main",
        common / "config",
        common / "worktrees" / "theirs" / "HEAD",
        common / "agentops" / "keys" / "mac.key",
        home / ".cache" / "git-agentops" / "verify" / "r" / "run" / "candidate" / "file",
        home / ".local" / "state" / "git-agentops" / "trust.json",
    ):
        assert not allows(refused, "write"), refused
    for secret in (
        common / "agentops" / "keys" / "mac.key",
        home / ".local" / "state" / "git-agentops" / "trust.json",
        home / ".ssh" / "signing",
    ):
        assert not allows(secret, "read"), secret
    assert allows(common / "agentops" / "envs" / "python-1" / "bin" / "python", "read")  # the shared venvs
    assert allows(common / "refs" / "heads" / "main", "read") and allows(common / "config", "read")
    assert allows(Path("/usr/bin/env"), "execute")
