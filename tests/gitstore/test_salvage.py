"""Salvage: what a worker's worktree holds beyond its handed-off work survives the worktree's removal, byte for byte."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from git_agentops.errors import AgentOpsError
from git_agentops.gitstore import salvage
from git_agentops.gitstore.refs import read_ref, update_ref
from git_agentops.gitstore.repo import Store
from git_agentops.gitstore.worktree import remove_worktree
from git_agentops.verify.workspaces import ensure_worktree, placement
from tests.conftest import git

RUN = "r1"


def _worktree(store: Store, worker: str = "w1") -> Path:
    where = placement(store.workdir, ".agentops/worktrees", RUN, worker, f"refs/heads/agentops/{RUN}/{worker}")
    head = str(store.repo.head.target)
    ensure_worktree(store, where, start_commit=head, run_id=RUN, worker_id=worker, clock=store.clock)
    return where.path


def _name(worker: str = "w1") -> str:
    return f"agentops-{RUN}-{worker}"


def _save(store: Store, worktree: Path, generation: int, handed: tuple[str, ...] = ()) -> salvage.Salvaged | None:
    return salvage.save(
        store, worktree, admin_name=_name(), run_id=RUN, worker_id="w1", generation=generation, handed=handed, now=1
    )


def _files(root: Path) -> dict[str, bytes | str]:
    """Every file under ``root`` but .git, with its bytes (a symlink: its target) and its executable bit."""
    out: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel == ".git" or rel.startswith(".git/"):
            continue
        if path.is_symlink():
            out[rel] = "-> " + os.readlink(path)
        elif path.is_file():
            out[rel] = path.read_bytes() + (b" +x" if os.access(path, os.X_OK) else b"")
    return out


def _dirty(worktree: Path) -> None:
    """Every kind of unhanded-off work: a commit, a staged file then edited again, a modification, a deletion, an
    untracked file, an executable, a symlink, binary bytes; and an ignored file that is not work."""
    (worktree / "committed.txt").write_text("made and committed, never handed off\n")
    git(worktree, "add", "committed.txt")
    git(worktree, "commit", "-q", "-m", "agent commit")
    (worktree / "staged.txt").write_text("staged version\n")
    git(worktree, "add", "staged.txt")
    (worktree / "staged.txt").write_text("edited after staging\n")
    (worktree / "README.md").write_text("modified\n")
    (worktree / "new" / "deep").mkdir(parents=True)
    (worktree / "new" / "deep" / "data.bin").write_bytes(bytes(range(256)) * 3)
    (worktree / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (worktree / "run.sh").chmod(0o755)
    (worktree / "link").symlink_to("committed.txt")
    (worktree / ".gitignore").write_text("*.log\n")
    (worktree / "noise.log").write_text("ignored\n")


def test_invariant_removed_worktree_work_restores_byte_for_byte(store: Store, tmp_path: Path) -> None:
    worktree = _worktree(store)
    _dirty(worktree)
    before = {k: v for k, v in _files(worktree).items() if k != "noise.log"}
    saved = _save(store, worktree, 2)
    assert saved is not None and saved.ref == f"refs/agentops/runs/{RUN}/salvage/w1/2"
    assert {"README.md", "staged.txt", "new/deep/data.bin", "run.sh", "link"} <= set(saved.paths)
    remove_worktree(store, worktree, _name())
    assert not worktree.exists()

    listed = salvage.listing(store, RUN)
    assert [(s.worker_id, s.generation, s.commit) for s in listed] == [("w1", 2, saved.commit)]
    restored = salvage.restore(store, salvage.find(store, RUN, "w1"), tmp_path / "restored")
    assert _files(restored) == before
    assert git(restored, "log", "-1", "--format=%s") == "agent commit"  # its commit is HEAD again
    staged = read_ref(store, saved.ref)
    commit = store.repo.get(staged)
    assert len(commit.parents) == 2  # the staged version, kept besides the edited one
    assert commit.parents[1].tree["staged.txt"].data == b"staged version\n"


def test_a_clean_handed_off_worktree_needs_no_salvage(store: Store) -> None:
    worktree = _worktree(store)
    head = str(store.repo.head.target)
    assert _save(store, worktree, 1, (head,)) is None
    (worktree / "x.txt").write_text("x\n")
    git(worktree, "add", "x.txt")
    git(worktree, "commit", "-q", "-m", "x")
    delivered = git(worktree, "rev-parse", "HEAD")
    assert _save(store, worktree, 1, (head,)) is not None
    assert _save(store, worktree, 3, (delivered,)) is None


def test_saving_twice_is_one_salvage_and_a_taken_name_refuses_keeping_the_worktree(store: Store) -> None:
    worktree = _worktree(store)
    (worktree / "work.txt").write_text("work\n")
    first = _save(store, worktree, 1)
    again = _save(store, worktree, 1)
    assert first is not None and again is not None and again.commit == first.commit
    (worktree / "work.txt").write_text("other work\n")
    with pytest.raises(AgentOpsError) as caught:
        _save(store, worktree, 1)
    assert caught.value.code == "SALVAGE_EXISTS"
    assert read_ref(store, first.ref) == first.commit and (worktree / "work.txt").read_text() == "other work\n"


def test_restore_refuses_an_existing_directory_and_an_unknown_salvage(store: Store, tmp_path: Path) -> None:
    worktree = _worktree(store)
    (worktree / "a.txt").write_text("a\n")
    saved = _save(store, worktree, 1)
    assert saved is not None
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("the person's\n")
    with pytest.raises(AgentOpsError) as caught:
        salvage.restore(store, saved, tmp_path / "taken")
    assert caught.value.code == "SALVAGE_RESTORE_REFUSED"
    assert (tmp_path / "taken" / "mine.txt").read_text() == "the person's\n"
    with pytest.raises(AgentOpsError) as missing:
        salvage.find(store, RUN, "w9")
    assert missing.value.code == "SALVAGE_NOT_FOUND"


def test_work_only_in_the_agents_object_quarantine_is_kept(store: Store, tmp_path: Path) -> None:
    """An agent's commits live in its quarantine until ingested; removing the worktree deletes the quarantine."""
    from git_agentops.gitstore.quarantine import agent_environment, prepare

    worktree = _worktree(store)
    admin = store.common_dir / "worktrees" / _name()
    prepare(admin)
    env = {**os.environ, **agent_environment(admin, store.common_dir)}
    (worktree / "q.txt").write_text("quarantined\n")
    import subprocess

    subprocess.run(["git", "add", "q.txt"], cwd=worktree, env=env, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "in quarantine"], cwd=worktree, env=env, check=True)
    saved = _save(store, worktree, 1)
    assert saved is not None
    remove_worktree(store, worktree, _name())
    restored = salvage.restore(store, saved, tmp_path / "back")
    assert (restored / "q.txt").read_text() == "quarantined\n"
    assert git(restored, "log", "-1", "--format=%s") == "in quarantine"


def test_a_salvage_ref_made_elsewhere_is_listed(store: Store) -> None:
    head = str(store.repo.head.target)
    update_ref(store, salvage.salvage_ref(RUN, "w2", 4), head, None, "test")
    assert [(s.worker_id, s.generation) for s in salvage.listing(store, RUN)] == [("w2", 4)]
