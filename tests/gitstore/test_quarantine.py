"""A worker's object quarantine: its git writes there, the supervisor copies what it takes, re-hashed.

Why: a write grant on the shared object store includes delete, and one ``rm -rf objects/`` in a worker lost every
ref's history. Agents now write objects only into their own ``GIT_OBJECT_DIRECTORY``; these tests drive the real
git CLI with those variables (as an agent's git runs) and check what the supervisor's side takes and refuses.
"""

from __future__ import annotations

import os
import subprocess
import zlib
from pathlib import Path

import pytest

from git_agentops.clock import SystemClock
from git_agentops.errors import AgentOpsError
from git_agentops.gitstore import quarantine
from git_agentops.gitstore.repo import open_store
from git_agentops.gitstore.worktree import head_of

from ..conftest import git, make_repo


def _worker(tmp_path: Path) -> tuple[Path, Path, Path, dict[str, str]]:
    """A repository, a detached linked worktree, its admin dir, and the environment of its agent's git."""
    repo = make_repo(tmp_path / "repo", files={"a.txt": "a\n"})
    worktree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "--detach", str(worktree))
    admin = Path(git(worktree, "rev-parse", "--path-format=absolute", "--git-dir"))
    quarantine.prepare(admin)
    env = {**os.environ, **quarantine.agent_environment(admin, repo / ".git")}
    return repo, worktree, admin, env


def _agent_commit(worktree: Path, env: dict[str, str], files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (worktree / name).parent.mkdir(parents=True, exist_ok=True)
        (worktree / name).write_text(text)
    subprocess.run(["git", "add", "-A"], cwd=worktree, env=env, check=True)
    subprocess.run(["git", "commit", "-qm", message], cwd=worktree, env=env, check=True)
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=worktree, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def _in_shared(repo: Path, oid: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", oid], cwd=repo, check=False).returncode == 0


def test_an_agents_commits_land_in_its_quarantine_and_head_of_takes_them_whole(tmp_path: Path) -> None:
    repo, worktree, admin, env = _worker(tmp_path)
    first = _agent_commit(worktree, env, {"src/b.txt": "b\n"}, "b")
    head = _agent_commit(worktree, env, {"src/deep/c.txt": "c\n", "a.txt": "A\n"}, "c")
    assert not _in_shared(repo, first) and not _in_shared(repo, head)  # the agent wrote nothing shared
    store = open_store(repo, clock=SystemClock())
    assert head_of(store, worktree) == head
    assert _in_shared(repo, first) and _in_shared(repo, head)
    git(repo, "update-ref", "refs/heads/taken", head)
    git(repo, "fsck", "--strict", "--no-dangling")  # every object the commit reaches, in the shared store
    assert quarantine.ingest(store, admin, head) is True  # again: nothing to do


def test_a_forged_object_in_the_quarantine_is_refused_and_nothing_of_it_is_stored(tmp_path: Path) -> None:
    repo, worktree, admin, env = _worker(tmp_path)
    head = _agent_commit(worktree, env, {"b.txt": "honest\n"}, "b")
    blob = subprocess.run(
        ["git", "rev-parse", "HEAD:b.txt"], cwd=worktree, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()
    loose = quarantine.quarantine_dir(admin) / blob[:2] / blob[2:]
    loose.chmod(0o644)
    loose.write_bytes(zlib.compress(b"blob 5\0evil\n"))  # the content no longer hashes to the name
    store = open_store(repo, clock=SystemClock())
    with pytest.raises(AgentOpsError) as refused:
        quarantine.ingest(store, admin, head)
    assert refused.value.code == "OBJECT_MISSING"
    assert not _in_shared(repo, head) and not _in_shared(repo, blob)
    assert head_of(store, worktree) is None  # no commit of this repository


def test_without_the_object_or_a_quarantine_nothing_is_taken(tmp_path: Path) -> None:
    repo, _worktree, admin, _env = _worker(tmp_path)
    store = open_store(repo, clock=SystemClock())
    assert quarantine.ingest(store, admin, "1" * 40) is False
    assert quarantine.ingest(store, admin, "not hex") is False
    assert quarantine.ingest(store, tmp_path / "nowhere", "1" * 40) is False


def test_a_symlink_planted_at_the_quarantine_is_replaced_never_followed(tmp_path: Path) -> None:
    _repo, _worktree, admin, _env = _worker(tmp_path)
    target = tmp_path / "elsewhere"
    target.mkdir()
    path = quarantine.quarantine_dir(admin)
    subprocess.run(["rm", "-rf", str(path)], check=True)
    path.symlink_to(target)
    quarantine.prepare(admin)
    assert path.is_dir() and not path.is_symlink() and list(target.iterdir()) == []


def test_gc_and_repack_in_the_worktree_touch_only_the_quarantine(tmp_path: Path) -> None:
    repo, worktree, _admin, env = _worker(tmp_path)
    _agent_commit(worktree, env, {"b.txt": "b\n"}, "b")
    before = sorted(p.name for p in (repo / ".git" / "objects").rglob("*") if p.is_file())
    subprocess.run(["git", "repack", "-adq"], cwd=worktree, env=env, check=False)
    subprocess.run(["git", "prune", "--expire=now"], cwd=worktree, env=env, check=False)
    after = sorted(p.name for p in (repo / ".git" / "objects").rglob("*") if p.is_file())
    assert after == before
    head_of(open_store(repo, clock=SystemClock()), worktree)  # until taken, fsck calls the worktree's HEAD invalid
    git(repo, "fsck", "--strict")


def test_the_supervisor_commits_the_bound_policy_on_top_of_a_head_only_the_quarantine_held(tmp_path: Path) -> None:
    """A policy transition commits the bound policy in each fenced writer's checkout; the writer's last commit was
    still in its quarantine (``fatal: could not parse HEAD``, once, under a kill -9 test): it is taken first."""
    from types import SimpleNamespace

    from git_agentops.transition.drive import _sync_worktree

    repo = make_repo(tmp_path / "repo", files={"a.txt": "a\n", ".agentops/policy.toml": "version = 1\n"})
    worktree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "--detach", str(worktree))
    admin = Path(git(worktree, "rev-parse", "--path-format=absolute", "--git-dir"))
    quarantine.prepare(admin)
    env = {**os.environ, **quarantine.agent_environment(admin, repo / ".git")}
    mine = _agent_commit(worktree, env, {"b.txt": "b\n"}, "the writer's own work")
    store = open_store(repo, clock=SystemClock())
    loop = SimpleNamespace(state=SimpleNamespace(store=store), run_id="run-test")
    transition = SimpleNamespace(transition_id="policy-1", old_hash="0" * 64, new_hash="1" * 64, config_file="p.toml")
    worker = SimpleNamespace(worker_id="w", worktree=str(worktree))
    assert _sync_worktree(loop, worker, transition, b"version = 1\n# bound\n") is True  # type: ignore[arg-type]
    assert git(worktree, "rev-parse", "HEAD^") == mine
    assert git(repo, "show", f"{git(worktree, 'rev-parse', 'HEAD')}:.agentops/policy.toml") == "version = 1\n# bound"
    git(repo, "fsck", "--strict")
