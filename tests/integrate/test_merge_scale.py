"""Merges at the scale of real histories, and the tree cases git normalises: each result equal to
``git merge-tree --write-tree`` (tree id, or conflict set) and each merge-base set to ``git merge-base --all``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from git_agentops.integrate.bases import Graph
from git_agentops.integrate.merge import merge_commits, merge_trees

from ..conftest import git
from .test_merge import agrees, git_merge_tree, new_store


def _blob(repo: Path, data: bytes) -> str:
    return (
        subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input=data, capture_output=True, check=True)
        .stdout.decode()
        .strip()
    )


def _tree(repo: Path, entries: list[tuple[str, str, str]]) -> str:
    """A tree written literally -- any mode, as converters and git's first days wrote them (mktree refuses some)."""
    raw = b""
    for mode, name, oid in sorted(entries, key=lambda e: e[1] + ("/" if e[0] == "40000" else "")):
        raw += f"{mode} {name}".encode() + b"\0" + bytes.fromhex(oid)
    return (
        subprocess.run(
            ["git", "hash-object", "-w", "-t", "tree", "--literally", "--stdin"],
            cwd=repo,
            input=raw,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .strip()
    )


def _commit(repo: Path, tree: str, *parents: str, message: str = "c") -> str:
    args = [arg for p in parents for arg in ("-p", p)]
    return git(repo, "commit-tree", tree, *args, "-m", message)


def _repo(tmp: Path) -> Path:
    repo = tmp / "r"
    repo.mkdir()
    git(repo, "init", "-q")
    return repo


def criss_cross(repo: Path, bases: int) -> tuple[str, str, list[str]]:
    """Two merges of the same ``bases`` independent commits, in opposite orders: exactly those are their bases."""
    root = _commit(repo, _tree(repo, [("100644", "root.txt", _blob(repo, b"root\n"))]), message="root")
    tips = [
        _commit(repo, _tree(repo, [("100644", f"f{i}.txt", _blob(repo, f"{i}\n".encode()))]), root, message=f"b{i}")
        for i in range(bases)
    ]
    both = _tree(repo, [("100644", "merged.txt", _blob(repo, b"m\n"))])
    x = _commit(repo, both, *tips, message="x")
    y = _commit(repo, both, *reversed(tips), message="y")
    return _commit(repo, both, x, message="x2"), _commit(repo, both, y, message="y2"), tips


def test_twelve_merge_bases_are_git_s_and_the_merge_goes_to_git(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    x, y, tips = criss_cross(repo, 12)
    store = new_store(repo)
    got = {str(b) for b in Graph(store.repo, store).merge_bases(store.resolve(x), store.resolve(y))}
    assert got == set(git(repo, "merge-base", "--all", x, y).split()) == set(tips)
    result = merge_commits(store, x, y)
    assert result.strategy == "git" and agrees(result, git_merge_tree(repo, x, y))


def test_a_long_history_beyond_the_walk_limit_asks_git(tmp_path: Path) -> None:
    """A delivery whose base is thousands of commits back: the in-process walk gives up at its limit and git's
    answer (with generation numbers from a commit-graph) is the one used."""
    repo = _repo(tmp_path)
    lines = []
    count = Graph.WALK_LIMIT + 500
    for mark in range(1, count + 1):
        lines.append(
            f"commit refs/heads/main\nmark :{mark}\ncommitter T <t@x> {1_700_000_000 + mark} +0000\ndata 1\nc\n"
        )
        if mark > 1:
            lines.append(f"from :{mark - 1}\n")
        lines.append(f"M 100644 inline f{mark % 50}\ndata {len(str(mark)) + 1}\n{mark}\n\n")
    lines.append(f"commit refs/heads/side\nmark :{count + 1}\ncommitter T <t@x> 1700000000 +0000\ndata 1\ns\nfrom :1\n")
    lines.append("M 100644 inline side.txt\ndata 2\ns\n\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input="".join(lines).encode(), check=True)
    git(repo, "commit-graph", "write", "--reachable")
    store = new_store(repo)
    graph = Graph(store.repo, store)
    a, b = store.resolve("main"), store.resolve("side")
    assert graph.nearby(a, b) is None  # too far to settle in process
    assert [str(o) for o in graph.merge_bases(a, b)] == git(repo, "merge-base", "--all", "main", "side").split()
    assert agrees(merge_commits(store, "main", "side"), git_merge_tree(repo, "main", "side"))


ODD = ["100664", "100775"]


@pytest.mark.parametrize("odd", ODD)
def test_a_non_standard_mode_at_the_root_is_normalised_as_git_does(tmp_path: Path, odd: str) -> None:
    """Root changed on both sides, with a file of mode ``odd`` there: git rewrites the root's modes."""
    repo = _repo(tmp_path)
    legacy = ("100664" if odd == "100664" else "100775", "legacy.txt", _blob(repo, b"old\n"))
    a0, b0 = _blob(repo, b"a\n"), _blob(repo, b"b\n")
    base = _commit(repo, _tree(repo, [legacy, ("100644", "a.txt", a0), ("100644", "b.txt", b0)]))
    ours = _commit(
        repo, _tree(repo, [legacy, ("100644", "a.txt", _blob(repo, b"a2\n")), ("100644", "b.txt", b0)]), base
    )
    theirs = _commit(
        repo, _tree(repo, [legacy, ("100644", "a.txt", a0), ("100644", "b.txt", _blob(repo, b"b2\n"))]), base
    )
    store = new_store(repo)
    result = merge_commits(store, ours, theirs)
    expected = git_merge_tree(repo, ours, theirs)
    assert expected.tree is not None and agrees(result, expected), (result, expected)


@pytest.mark.parametrize("odd", ODD)
def test_a_trivial_merge_of_a_non_standard_mode_rewrites_the_root_too(tmp_path: Path, odd: str) -> None:
    """One side is an empty commit on the base: the merge takes the other side -- whose root git still rewrites."""
    repo = _repo(tmp_path)
    tree = _tree(repo, [(odd, "legacy.sh", _blob(repo, b"#!/bin/sh\n")), ("100644", "a.txt", _blob(repo, b"a\n"))])
    base = _commit(repo, tree)
    ours = _commit(repo, tree, base, message="empty")
    theirs = _commit(
        repo,
        _tree(repo, [(odd, "legacy.sh", _blob(repo, b"#!/bin/sh\n")), ("100644", "a.txt", _blob(repo, b"a2\n"))]),
        base,
    )
    store = new_store(repo)
    for one, two in ((ours, theirs), (theirs, ours)):
        assert agrees(merge_commits(store, one, two), git_merge_tree(repo, one, two))
    normalised = merge_trees(store, None, tree, tree)  # trees alone: git's answer, the root rewritten
    assert normalised.strategy == "git" and normalised.tree != tree


@pytest.mark.parametrize("odd", ODD)
def test_a_clean_merge_taking_a_changed_non_standard_mode_file_never_fails(tmp_path: Path, odd: str) -> None:
    """A directory changed on both sides, where the side taken changed a file of mode ``odd``: git completes it,
    and so does the merge (this raised OBJECT_MISSING: invalid filemode)."""
    repo = _repo(tmp_path)

    def sub(legacy: bytes, other: bytes) -> str:
        return _tree(repo, [(odd, "legacy.txt", _blob(repo, legacy)), ("100644", "other.txt", _blob(repo, other))])

    def top(subtree: str, extra: bytes) -> str:
        return _tree(repo, [("40000", "dir", subtree), ("100644", "top.txt", _blob(repo, extra))])

    base = _commit(repo, top(sub(b"1\n", b"x\n"), b"t\n"))
    ours = _commit(repo, top(sub(b"1\n", b"x2\n"), b"t\n"), base)
    theirs = _commit(repo, top(sub(b"2\n", b"x\n"), b"t2\n"), base)
    store = new_store(repo)
    result = merge_commits(store, ours, theirs)
    expected = git_merge_tree(repo, ours, theirs)
    assert expected.tree is not None and agrees(result, expected), (result, expected)


def test_merge_renormalize_with_text_auto_gives_git_s_bytes(tmp_path: Path) -> None:
    """``merge.renormalize=true`` and ``* text=auto`` committed: git normalises a CRLF file it merges; the merge
    hands such repositories to git, so the bytes are git's."""
    repo = _repo(tmp_path)
    git(repo, "config", "merge.renormalize", "true")
    attributes = ("100644", ".gitattributes", _blob(repo, b"* text=auto\n"))
    crlf = b"".join(f"line {i}\r\n".encode() for i in range(20))

    def snapshot(a: bytes, b: bytes, *parents: str) -> str:
        files = [attributes, ("100644", "a.txt", _blob(repo, a)), ("100644", "b.txt", _blob(repo, b))]
        return _commit(repo, _tree(repo, files), *parents)

    base = snapshot(crlf, b"b\n")
    ours = snapshot(crlf.replace(b"line 3", b"LINE 3"), b"b\n", base)
    theirs = snapshot(crlf.replace(b"line 15", b"LINE 15"), b"b2\n", base)
    store = new_store(repo)
    result = merge_commits(store, ours, theirs)
    expected = git_merge_tree(repo, ours, theirs)
    assert agrees(result, expected), (result, expected)
    assert result.strategy == "git"
