"""The long-lived ``git merge-tree --stdin``: the same answers as a process per merge, and never a lost merge."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from git_agentops.clock import FixedClock
from git_agentops.gitstore import mergeserver, objects
from git_agentops.gitstore.repo import Store, open_store
from git_agentops.gitstore.safegit import set_base_environment

from ..conftest import git, make_repo


def branches(repo: Path) -> dict[str, str]:
    """main, and three commits off it: two that conflict on ``f``, one that adds ``g``."""
    out = {}
    for name, path, text in (("left", "f", "left\n"), ("right", "f", "right\n"), ("clean", "g", "g\n")):
        git(repo, "checkout", "-q", "-b", name, "main")
        (repo / path).write_text(text)
        git(repo, "add", path)
        git(repo, "commit", "-q", "-m", name)
        out[name] = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    return out


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = make_repo(tmp_path / "repo", files={"f": "base\n"})
    git(path, "branch", "-M", "main")
    return path


def by_process(store: Store, ours: str, theirs: str) -> objects.GitMergeTree:
    """What one ``git merge-tree`` process of its own answers (the server bypassed: an unknown name)."""
    saved = mergeserver.merge
    try:
        mergeserver.merge = lambda *args: None  # type: ignore[assignment]
        return objects.git_merge_tree(store, ours, theirs)
    finally:
        mergeserver.merge = saved


def test_the_server_answers_as_a_process_per_merge_would_and_stays_up(repo: Path) -> None:
    """Invariant: clean and conflicted merges through one server give exactly the trees and paths a process per
    merge gives, one after the other through the same process."""
    store = open_store(repo, clock=FixedClock())
    found = branches(repo)
    pairs = [(found["left"], found["clean"]), (found["left"], found["right"]), (found["clean"], found["right"])] * 2
    for ours, theirs in pairs:
        assert objects.git_merge_tree(store, ours, theirs) == by_process(store, ours, theirs)
    assert len({id(s.process) for s in mergeserver._SERVERS.values()}) >= 1
    assert all(s.process.poll() is None for s in mergeserver._SERVERS.values())


def test_a_server_that_dies_costs_no_merge_and_is_started_again(repo: Path) -> None:
    """Invariant: the server killed between two merges (or gone for any reason): the next merge is made by a
    process of its own, answers the same, and the one after goes through a new server."""
    store = open_store(repo, clock=FixedClock())
    found = branches(repo)
    expected = by_process(store, found["left"], found["right"])
    assert objects.git_merge_tree(store, found["left"], found["right"]) == expected
    [server] = [s for s in mergeserver._SERVERS.values() if s.process.poll() is None][-1:]
    os.kill(server.process.pid, signal.SIGKILL)
    server.process.wait()
    assert objects.git_merge_tree(store, found["left"], found["right"]) == expected
    assert objects.git_merge_tree(store, found["left"], found["clean"]).tree is not None
    assert any(s.process.poll() is None and s is not server for s in mergeserver._SERVERS.values())


def test_without_stdbuf_every_merge_is_a_process_of_its_own(repo: Path, tmp_path: Path) -> None:
    """Invariant: where coreutils' ``stdbuf`` cannot be found, there is no server (git would hold its answers in
    its buffer until it exits) and merges are made as before."""
    store = open_store(repo, clock=FixedClock())
    found = branches(repo)
    bare = tmp_path / "bin"
    bare.mkdir()
    os.symlink(git(repo, "--exec-path") + "/git", bare / "git")
    set_base_environment({**os.environ, "PATH": str(bare)})
    try:
        assert mergeserver.merge(repo, ["--git-dir", str(store.git_dir)], found["left"], found["right"]) is None
        assert objects.git_merge_tree(store, found["left"], found["right"]).conflicts == ("f",)
    finally:
        set_base_environment(os.environ)
