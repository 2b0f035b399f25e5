"""The in-memory merge engine against real git: same trees as ``git merge-tree --write-tree``, same conflicts.

* The differential test generates hundreds of base/ours/theirs histories from random operations on a small
  nested tree (edits in different or the same hunks, adds on one or both sides, deletes, renames with and
  without edits, chmod, binary files, symlinks, file<->directory swaps, directory renames), writes them all with
  one ``git fast-import`` and compares every merge with ``git merge-tree --write-tree --name-only``.
* File merges among repeated lines (where git's histogram diff and libgit2's Myers diff disagree) and merge
  bases of random histories with criss-crosses are compared with git the same way.
* Scenario tests on repositories built with the git CLI: the fast path is taken for disjoint changes and touches
  no working tree, index or ref; merge chains equal a ``merge-tree`` + ``commit-tree`` chain; a conflict stops
  a chain; criss-cross histories and renames go to git.
"""

from __future__ import annotations

import random
import re
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pygit2
import pytest

from git_agentops.clock import FixedClock
from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.repo import Store, open_store
from git_agentops.integrate.bases import Graph
from git_agentops.integrate.merge import ChainResult, MergeResult, merge_chain, merge_commits, merge_trees

from ..conftest import IDENTITY, git, make_repo

Tree = dict[str, tuple[str, bytes]]  # path -> (mode, content)

REGULAR, EXECUTABLE, SYMLINK = "100644", "100755", "120000"
BASE_PATHS = ("a.txt", "b.txt", "d1/x.txt", "d1/y.txt", "d1/sub/z.txt", "d2/w.txt", "d2/v.txt", "d3/deep/u.txt")
NEW_PATHS = ("new.txt", "d1/new.txt", "d1/sub/new.txt", "d2/n.txt", "d4/n.txt", "d3/deep/n.txt", "d5/s/t.txt")
DIRS = ("d1", "d1/sub", "d2", "d3", "d3/deep")
DIR_TARGETS = ("d6", "d1/moved", "d2/sub", "e")


# -- generating histories ------------------------------------------------------------------------------------------
def lines_for(tag: str, rng: random.Random) -> list[str]:
    """Twelve to twenty lines; some files look like code (repeated blank and brace lines)."""
    n = rng.randint(12, 20)
    if rng.random() < 0.3:
        return [(f"{tag} stmt {i}\n" if i % 3 else ("}\n" if i % 2 else "\n")) for i in range(n)]
    return [f"{tag} line {i}\n" for i in range(n)]


def text(tag: str, rng: random.Random) -> bytes:
    return "".join(lines_for(tag, rng)).encode()


def binary(rng: random.Random) -> bytes:
    return bytes(rng.randrange(256) for _ in range(40)) + b"\0" + bytes(rng.randrange(256) for _ in range(40))


def dirs_of(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def can_place(tree: Tree, path: str) -> bool:
    """No file where ``path`` needs a directory, and nothing below ``path``."""
    if any(d in tree for d in dirs_of(path)):
        return False
    return not any(p.startswith(path + "/") for p in tree)


def edit(content: bytes, region: str, tag: str, rng: random.Random) -> bytes:
    lines = content.decode().splitlines(keepends=True)
    if not lines:
        return f"{tag} only\n".encode()
    if region == "top":
        index = 1
    elif region == "bottom":
        index = len(lines) - 2
    elif region == "same":
        index = len(lines) // 2
    else:
        index = rng.randrange(len(lines))
    index = max(0, min(index, len(lines) - 1))
    lines[index] = f"{tag} edited {region}\n"
    if rng.random() < 0.2:
        lines.insert(index, f"{tag} inserted\n")
    return "".join(lines).encode()


def is_text(content: bytes) -> bool:
    return b"\0" not in content


def mutate(tree: Tree, side: str, rng: random.Random) -> str:
    """Apply one random operation to ``tree``; returns its name (for failure messages)."""
    files = sorted(p for p, (mode, _) in tree.items() if mode != SYMLINK)
    texts = [p for p in files if is_text(tree[p][1])]
    op = rng.choice(
        ["edit"] * 6
        + ["add", "add", "delete", "rename", "rename", "chmod", "binary", "symlink", "to_dir", "to_file", "move_dir"]
    )
    if op == "edit" and texts:
        path = rng.choice(texts)
        region = rng.choice(["top", "bottom", "same", "any"])
        tree[path] = (tree[path][0], edit(tree[path][1], region, side, rng))
        return f"edit {path} {region}"
    if op == "add":
        path = rng.choice(NEW_PATHS)
        if path not in tree and can_place(tree, path):
            same = rng.random() < 0.3
            tree[path] = (REGULAR, text("new" if same else f"{side} new", random.Random(path) if same else rng))
            return f"add {path}{' (same content)' if same else ''}"
    if op == "delete" and files:
        path = rng.choice(files)
        del tree[path]
        return f"delete {path}"
    if op == "rename" and files:
        path = rng.choice(files)
        target = rng.choice([*NEW_PATHS, "renamed.txt", "d1/renamed.txt", "d6/renamed.txt"])
        if target not in tree and can_place({p: v for p, v in tree.items() if p != path}, target):
            mode, content = tree.pop(path)
            if is_text(content) and rng.random() < 0.4:
                content = edit(content, "top", side, rng)
            tree[target] = (mode, content)
            return f"rename {path} -> {target}"
    if op == "chmod" and files:
        path = rng.choice(files)
        mode, content = tree[path]
        tree[path] = (EXECUTABLE if mode == REGULAR else REGULAR, content)
        return f"chmod {path}"
    if op == "binary":
        path = rng.choice([*files, "bin.dat"]) if files else "bin.dat"
        if path in tree or can_place(tree, path):
            old = tree.get(path, (REGULAR, b""))
            content = old[1]
            if not is_text(content) and rng.random() < 0.7:
                content = content[:5] + bytes([rng.randrange(256)]) + content[6:]
            else:
                content = binary(rng)
            tree[path] = (old[0] if old[0] != SYMLINK else REGULAR, content)
            return f"binary {path}"
    if op == "symlink":
        links = [p for p, (mode, _) in tree.items() if mode == SYMLINK]
        path = rng.choice([*links, *files, "link"]) if rng.random() < 0.7 else "link"
        if path in tree or can_place(tree, path):
            tree[path] = (SYMLINK, rng.choice(["a.txt", "d1/x.txt", "nowhere", f"{side}-target"]).encode())
            return f"symlink {path}"
    if op == "to_dir" and files:
        path = rng.choice(files)
        mode, content = tree.pop(path)
        tree[f"{path}/inner.txt"] = (REGULAR, content if is_text(content) else text(side, rng))
        return f"to_dir {path}"
    if op == "to_file":
        directory = rng.choice(DIRS)
        below = [p for p in tree if p.startswith(directory + "/")]
        if below and directory not in tree and can_place({p: v for p, v in tree.items() if p not in below}, directory):
            for p in below:
                del tree[p]
            tree[directory] = (REGULAR, text(f"{side} was a dir", rng))
            return f"to_file {directory}"
    if op == "move_dir":
        directory = rng.choice(DIRS)
        target = rng.choice(DIR_TARGETS)
        below = [p for p in tree if p.startswith(directory + "/")]
        rest = {p: v for p, v in tree.items() if p not in below}
        moved = {target + p[len(directory) :]: tree[p] for p in below}
        if below and not target.startswith(directory + "/") and all(can_place(rest, p) for p in moved):
            for p in below:
                del tree[p]
            tree.update(moved)
            return f"move_dir {directory} -> {target}"
    return "noop"


@dataclass
class Case:
    base: Tree
    ours: Tree
    theirs: Tree
    ops: tuple[list[str], list[str]]


def generate(rng: random.Random) -> Case:
    base: Tree = {}
    for path in rng.sample(BASE_PATHS, rng.randint(4, len(BASE_PATHS))):
        base[path] = (REGULAR, text(path, rng))
    extra = rng.random()
    if extra < 0.15:
        base["bin.dat"] = (REGULAR, binary(rng))
    elif extra < 0.3:
        base["link"] = (SYMLINK, b"a.txt")
    elif extra < 0.4:
        base["tool.sh"] = (EXECUTABLE, text("tool", rng))
    sides: list[Tree] = []
    ops: list[list[str]] = []
    for side in ("ours", "theirs"):
        tree = dict(base)
        done = [mutate(tree, side, rng) for _ in range(rng.randint(1, 3))]
        sides.append(tree)
        ops.append(done)
    return Case(base, sides[0], sides[1], (ops[0], ops[1]))


# -- writing them with git fast-import -----------------------------------------------------------------------------
def _commit(out: list[bytes], ref: str, mark: int, tree: Tree, parent: int | None) -> None:
    out.append(f"commit {ref}\nmark :{mark}\ncommitter T <t@example.invalid> 1767225600 +0000\ndata 1\nc\n".encode())
    if parent is not None:
        out.append(f"from :{parent}\n".encode())
    out.append(b"deleteall\n")
    for path, (mode, content) in sorted(tree.items()):
        out.append(f"M {mode} inline {path}\ndata {len(content)}\n".encode() + content + b"\n")
    out.append(b"\n")


def fast_import(repo: Path, cases: list[Case]) -> None:
    out: list[bytes] = []
    for i, case in enumerate(cases):
        mark = 3 * i + 1
        _commit(out, f"refs/heads/c{i}/base", mark, case.base, None)
        _commit(out, f"refs/heads/c{i}/ours", mark + 1, case.ours, mark)
        _commit(out, f"refs/heads/c{i}/theirs", mark + 2, case.theirs, mark)
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input=b"".join(out), check=True)


@dataclass(frozen=True)
class GitMerge:
    tree: str | None  # None when git reports conflicts
    conflicts: frozenset[str]


def git_merge_tree(repo: Path, ours: str, theirs: str) -> GitMerge:
    done = subprocess.run(
        ["git", "merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", ours, theirs],
        cwd=repo,
        capture_output=True,
        check=False,
    )
    if done.returncode not in (0, 1):
        raise AssertionError(f"git merge-tree failed: {done.stderr.decode()}")
    fields = done.stdout.decode().split("\0")
    if done.returncode == 0:
        return GitMerge(fields[0], frozenset())
    # a file moved aside for a directory is listed as <path>~<branch>; the engine reports <path>
    labels = "|".join(re.escape(name.replace("/", "_")) for name in (ours, theirs))
    return GitMerge(None, frozenset(re.sub(rf"~(?:{labels})(?:_\d+)?$", "", f) for f in fields[1:] if f))


def agrees(ours: MergeResult, theirs: GitMerge) -> bool:
    if theirs.tree is not None:
        return ours.tree == theirs.tree and ours.conflicts == ()
    return ours.tree is None and frozenset(ours.conflicts) == theirs.conflicts


def new_store(path: Path) -> Store:
    return open_store(path, clock=FixedClock(step=1.0), identity=IDENTITY)


def run_differential(tmp_path: Path, seed: int, count: int) -> tuple[list[str], Counter[str]]:
    repo = tmp_path / "diff"
    repo.mkdir()
    git(repo, "init", "-q")
    rng = random.Random(seed)
    cases = [generate(rng) for _ in range(count)]
    fast_import(repo, cases)
    store = new_store(repo)
    mismatches: list[str] = []
    strategies: Counter[str] = Counter()
    for i, case in enumerate(cases):
        expected = git_merge_tree(repo, f"c{i}/ours", f"c{i}/theirs")
        got = merge_commits(store, f"c{i}/ours", f"c{i}/theirs")
        strategies[got.strategy + ("" if got.clean else " conflict")] += 1
        if not agrees(got, expected):
            mismatches.append(f"case {i} ops={case.ops}: ours={got} git={expected}")
    return mismatches, strategies


# -- tests ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [1, 2])
def test_matches_git_merge_tree_on_generated_histories(tmp_path: Path, seed: int) -> None:
    mismatches, strategies = run_differential(tmp_path, seed, 250)
    assert mismatches == [], "\n".join(mismatches[:20])
    # every path of the engine was exercised, and git's verdicts were mixed
    assert strategies["tree"] > 10, strategies
    assert strategies["trivial"] > 0, strategies
    assert strategies["tree conflict"] > 0, strategies
    assert strategies["git"] > 10, strategies
    assert strategies["git conflict"] > 10, strategies


def commit_on(repo: Path, branch: str, files: dict[str, str | None], *, start: str | None = None) -> str:
    """Commit ``files`` (None deletes) on ``branch`` (created at ``start`` if given) with the git CLI."""
    if start is not None:
        git(repo, "switch", "-q", "-c", branch, start)
    else:
        git(repo, "switch", "-q", branch)
    for name, content in files.items():
        target = repo / name
        if content is None:
            git(repo, "rm", "-q", name)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
            git(repo, "add", name)
    git(repo, "commit", "-q", "-m", f"{branch}: {', '.join(files)}")
    return git(repo, "rev-parse", "HEAD")


def listing(n: int, tag: str = "") -> str:
    return "".join(f"entry {i}{tag}\n" for i in range(n))


def snapshot(repo: Path) -> tuple[str, str, str, bytes]:
    """Everything a merge must not touch: working tree status, refs, HEAD and the index file."""
    return (
        git(repo, "status", "--porcelain", "--untracked-files=all"),
        git(repo, "for-each-ref"),
        git(repo, "symbolic-ref", "HEAD"),
        (repo / ".git" / "index").read_bytes(),
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A repository with nested directories, a target branch ``main`` and a dirty working tree."""
    files = {f"src/pkg{d}/mod{f}.py": listing(30, f" of pkg{d}/mod{f}") for d in range(4) for f in range(5)}
    files["README.md"] = "readme\n"
    repo = make_repo(tmp_path / "project", files=files)
    return repo


def test_disjoint_changes_take_the_fast_path_and_touch_nothing(project: Path) -> None:
    base = git(project, "rev-parse", "HEAD")
    commit_on(project, "main", {"src/pkg0/mod0.py": listing(30, " changed on main")})
    commit_on(project, "feature", {"src/pkg1/mod1.py": listing(31), "src/pkg1/new.py": "new\n"}, start=base)
    commit_on(project, "feature", {"src/pkg0/mod3.py": None, "docs/guide.md": "guide\n"})
    git(project, "switch", "-q", "main")
    (project / "README.md").write_text("dirty\n")
    (project / "untracked.txt").write_text("untracked\n")
    git(project, "add", "src/pkg0/mod1.py")  # a non-empty index
    before = snapshot(project)
    store = new_store(project)

    result = merge_commits(store, "main", "feature")

    expected = git_merge_tree(project, "main", "feature")
    assert result == MergeResult(expected.tree, (), "tree")
    assert result.clean
    same_trees = merge_trees(
        store, git(project, "merge-base", "main", "feature") + "^{tree}", "main^{tree}", "feature^{tree}"
    )
    assert same_trees == result
    assert merge_commits(store, "main", base).strategy == "trivial"  # theirs is an ancestor of ours
    assert merge_commits(store, base, "feature") == MergeResult(
        git(project, "rev-parse", "feature^{tree}"), (), "trivial"
    )
    assert snapshot(project) == before
    assert not (project / ".git" / "MERGE_HEAD").exists()
    git(project, "fsck", "--no-dangling")


def test_both_sides_editing_one_file_in_different_hunks_merge_in_process(project: Path) -> None:
    base = git(project, "rev-parse", "HEAD")
    lines = listing(30, " of pkg2/mod2").splitlines(keepends=True)
    top, bottom = list(lines), list(lines)
    top[2] = "edited at the top\n"
    bottom[27] = "edited at the bottom\n"
    commit_on(project, "main", {"src/pkg2/mod2.py": "".join(top)})
    commit_on(project, "feature", {"src/pkg2/mod2.py": "".join(bottom)}, start=base)
    clash = list(lines)
    clash[2] = "edited differently\n"
    commit_on(project, "clash", {"src/pkg2/mod2.py": "".join(clash)}, start=base)
    store = new_store(project)

    merged = merge_commits(store, "main", "feature")
    assert merged == MergeResult(git_merge_tree(project, "main", "feature").tree, (), "tree")
    conflict = merge_commits(store, "main", "clash")
    assert conflict == MergeResult(None, ("src/pkg2/mod2.py",), "tree")
    assert git_merge_tree(project, "main", "clash").conflicts == {"src/pkg2/mod2.py"}


def test_what_the_fast_path_cannot_promise_goes_to_git(project: Path) -> None:
    base = git(project, "rev-parse", "HEAD")
    commit_on(project, "main", {"src/pkg3/mod0.py": None, "src/pkg3/renamed.py": listing(30, " of pkg3/mod0")})
    commit_on(project, "feature", {"src/pkg3/mod0.py": listing(30, " of pkg3/mod0") + "one more\n"}, start=base)
    store = new_store(project)
    result = merge_commits(store, "main", "feature")  # a rename on one side, an edit on the other
    assert result.strategy == "git"
    assert result.tree == git_merge_tree(project, "main", "feature").tree
    assert git(project, "show", f"{result.tree}:src/pkg3/renamed.py").endswith("one more")
    by_trees = merge_trees(store, f"{base}^{{tree}}", "main^{tree}", "feature^{tree}")
    assert by_trees == result


def test_unrelated_histories_merge_against_the_empty_tree(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", files={"a.txt": "a\n", "shared.txt": "ours\n"})
    git(repo, "switch", "-q", "--orphan", "other")
    assert not (repo / "a.txt").exists()  # switch --orphan empties the index and the working tree
    (repo / "b.txt").write_text("b\n")
    git(repo, "add", "b.txt")
    git(repo, "commit", "-q", "-m", "other root")
    store = new_store(repo)
    result = merge_commits(store, "main", "other")
    expected = git(repo, "merge-tree", "--write-tree", "--allow-unrelated-histories", "main", "other")
    assert result == MergeResult(expected, (), "tree")
    assert merge_trees(store, None, "main^{tree}", "other^{tree}") == result


def test_missing_objects_are_refused(store: Store) -> None:
    with pytest.raises(AgentOpsError) as caught:
        merge_commits(store, "HEAD", "0" * 40)
    assert caught.value.code == "OBJECT_MISSING"
    with pytest.raises(AgentOpsError) as caught:
        merge_trees(store, None, "HEAD^{tree}", "HEAD")  # a commit is not a tree
    assert caught.value.code == "OBJECT_MISSING"


def test_criss_cross_history_falls_back_and_matches_git(project: Path) -> None:
    base = git(project, "rev-parse", "HEAD")
    a1 = commit_on(project, "a", {"src/pkg0/mod0.py": listing(30, " a1")}, start=base)
    b1 = commit_on(project, "b", {"src/pkg1/mod0.py": listing(30, " b1")}, start=base)
    git(project, "switch", "-q", "a")
    git(project, "merge", "-q", "--no-edit", b1)
    git(project, "switch", "-q", "b")
    git(project, "merge", "-q", "--no-edit", a1)
    commit_on(project, "a", {"src/pkg2/mod0.py": listing(30, " a3"), "README.md": "readme from a\n"})
    commit_on(project, "b", {"src/pkg3/mod0.py": listing(30, " b3"), "README.md": "readme from b\n"})
    commit_on(project, "c", {"src/pkg3/mod0.py": listing(30, " c3")}, start="b~1")
    assert len(git(project, "merge-base", "--all", "a", "b").split()) == 2
    store = new_store(project)

    conflicted = merge_commits(store, "a", "b")
    assert conflicted == MergeResult(None, ("README.md",), "git")
    assert git_merge_tree(project, "a", "b").conflicts == {"README.md"}
    clean = merge_commits(store, "a~1", "c")
    assert clean == MergeResult(git_merge_tree(project, "a~1", "c").tree, (), "git")


# -- merge chains ----------------------------------------------------------------------------------------------
def message(label: str, commit: str) -> str:
    return f"Merge delivery {label}\n\nDelivered-Commit: {commit}\n"


def make_deliveries(repo: Path, count: int, *, clash_at: int | None = None) -> tuple[str, list[tuple[str, str]]]:
    """A target ``main`` one commit past the base and ``count`` delivery branches from the base."""
    base = git(repo, "rev-parse", "main")
    target = commit_on(repo, "main", {"src/pkg0/mod0.py": listing(30, " target")})
    deliveries = []
    for i in range(count):
        files: dict[str, str | None] = {f"src/pkg{(i + 1) % 4}/mod{i % 5}.py": listing(30, f" delivery {i}")}
        files[f"deliveries/{i:03d}.txt"] = f"delivery {i}\n"
        if i == clash_at:
            files["src/pkg0/mod0.py"] = listing(30, " clash")
        deliveries.append((f"d{i}", commit_on(repo, f"delivery/{i}", files, start=base)))
    git(repo, "switch", "-q", "main")
    return target, deliveries


def git_chain(repo: Path, start: str, deliveries: list[tuple[str, str]]) -> list[str]:
    """The reference: ``git merge-tree --write-tree`` + ``git commit-tree`` for each delivery; the trees."""
    head, trees = start, []
    for label, commit in deliveries:
        tree = git(repo, "merge-tree", "--write-tree", head, commit)
        head = git(repo, "commit-tree", tree, "-p", head, "-p", commit, "-m", message(label, commit))
        trees.append(tree)
    return trees


def test_merge_chain_writes_first_parent_linked_merges_equal_to_git(project: Path) -> None:
    target, deliveries = make_deliveries(project, 5)
    store = new_store(project)
    refs = git(project, "for-each-ref")

    chain = merge_chain(store, "main", deliveries, message=message)

    assert isinstance(chain, ChainResult)
    assert chain.conflict is None
    assert [step.label for step in chain.steps] == [label for label, _ in deliveries]
    assert [step.tree for step in chain.steps] == git_chain(project, target, deliveries)
    previous = target
    for step, (label, delivery) in zip(chain.steps, deliveries, strict=True):
        assert step.parents == (previous, delivery)
        commit = store.repo[step.commit]
        assert isinstance(commit, pygit2.Commit)
        assert [str(p) for p in commit.parent_ids] == [previous, delivery]
        assert str(commit.tree_id) == step.tree
        assert commit.message == message(label, delivery)
        assert (commit.author.name, commit.committer.email) == (IDENTITY.name, IDENTITY.email)
        previous = step.commit
    assert chain.head == chain.steps[-1].commit
    assert git(project, "rev-list", "--first-parent", "--count", f"{target}..{chain.head}") == "5"
    assert git(project, "for-each-ref") == refs  # no ref moved
    assert merge_chain(store, "main", [], message=message) == ChainResult(target, (), None)


def test_merge_chain_stops_at_the_first_conflict_and_writes_no_ref(project: Path) -> None:
    _, deliveries = make_deliveries(project, 5, clash_at=2)
    store = new_store(project)
    refs = git(project, "for-each-ref")

    chain = merge_chain(store, "main", deliveries, message=message)

    assert chain.head is None
    assert chain.conflict == ("d2", ("src/pkg0/mod0.py",))
    assert [step.label for step in chain.steps] == ["d0", "d1"]
    assert git(project, "for-each-ref") == refs
    assert git_merge_tree(project, chain.steps[-1].commit, deliveries[2][1]).conflicts == {"src/pkg0/mod0.py"}


# -- content merges and merge bases, against git -------------------------------------------------------------------
def generate_content(rng: random.Random, vocabulary: int) -> Case:
    """One file edited on both sides, its lines drawn from ``vocabulary`` distinct lines (few: many repeats)."""
    words = [f"l{i}\n" for i in range(vocabulary)] + ["}\n", "\n"]

    def edited(lines: list[str]) -> list[str]:
        lines = list(lines)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(lines) + 1)
            roll = rng.random()
            if roll < 0.4 and lines:
                lines[min(at, len(lines) - 1)] = rng.choice(words)
            elif roll < 0.7:
                lines.insert(at, rng.choice(words))
            elif lines:
                del lines[min(at, len(lines) - 1)]
        return lines

    base = [rng.choice(words) for _ in range(rng.randint(5, 25))]
    trees = [{"f.txt": (REGULAR, "".join(lines).encode())} for lines in (base, edited(base), edited(base))]
    return Case(trees[0], trees[1], trees[2], ([], []))


@pytest.mark.parametrize("vocabulary", [4, 30, 300])
def test_file_merges_match_git_even_among_repeated_lines(tmp_path: Path, vocabulary: int) -> None:
    """merge-ort merges with the histogram diff, libgit2 with Myers: the engine must only use libgit2 where the
    two cannot differ, and leave the rest to git."""
    repo = tmp_path / "content"
    repo.mkdir()
    git(repo, "init", "-q")
    rng = random.Random(vocabulary)
    cases = [generate_content(rng, vocabulary) for _ in range(150)]
    fast_import(repo, cases)
    store = new_store(repo)
    strategies: Counter[str] = Counter()
    for i in range(len(cases)):
        got = merge_commits(store, f"c{i}/ours", f"c{i}/theirs")
        strategies[got.strategy] += 1
        assert agrees(got, git_merge_tree(repo, f"c{i}/ours", f"c{i}/theirs")), (i, got)
    if vocabulary >= 300:
        assert strategies["tree"] > 50, strategies


@pytest.mark.parametrize("skew", [True, False])
def test_merge_bases_match_git_on_random_histories(tmp_path: Path, skew: bool) -> None:
    """Invariant: the merge bases found (in process, or by git where the walk cannot settle them) are git's, with
    and without clock skew -- without it, criss-crosses' several bases are found in process."""
    repo = tmp_path / "dag"
    repo.mkdir()
    git(repo, "init", "-q")
    rng = random.Random(7)
    out: list[bytes] = []
    count = 60
    for mark in range(1, count + 1):
        parents = sorted(rng.sample(range(1, mark), min(mark - 1, rng.choice([1, 1, 2]))))
        when = 1_767_225_600 + mark * 60 + (rng.choice([0, 0, 0, -600]) if skew else 0)  # a little clock skew
        out.append(f"commit refs/heads/n{mark}\nmark :{mark}\ncommitter T <t@x> {when} +0000\ndata 1\nc\n".encode())
        for i, parent in enumerate(parents):
            out.append(f"{'from' if i == 0 else 'merge'} :{parent}\n".encode())
        out.append(f"M 100644 inline f{mark}\ndata 1\nx\n\n".encode())
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input=b"".join(out), check=True)
    store = new_store(repo)
    graph = Graph(store.repo, store)
    several = 0
    for _ in range(400):
        a, b = (f"n{rng.randint(1, count)}" for _ in range(2))
        expected = set(git(repo, "merge-base", "--all", a, b, check=False).split())
        got = {str(oid) for oid in graph.merge_bases(store.resolve(a), store.resolve(b))}
        assert got == expected, (a, b)
        several += len(expected) > 1
    assert several >= 5  # criss-crosses were generated


def test_a_merge_attribute_leaves_the_file_merge_to_git(project: Path) -> None:
    (project / ".gitattributes").write_text("*.py merge=union\n")
    git(project, "add", ".gitattributes")
    git(project, "commit", "-q", "-m", "union merges")
    base = git(project, "rev-parse", "HEAD")
    lines = listing(30, " of pkg1/mod1").splitlines(keepends=True)
    ours, theirs = list(lines), list(lines)
    ours[5], theirs[5] = "ours\n", "theirs\n"
    commit_on(project, "main", {"src/pkg1/mod1.py": "".join(ours)})
    commit_on(project, "feature", {"src/pkg1/mod1.py": "".join(theirs)}, start=base)
    git(project, "switch", "-q", "main")
    store = new_store(project)
    result = merge_commits(store, "main", "feature")
    expected = git_merge_tree(project, "main", "feature")
    assert expected.tree is not None  # the union driver resolves what would be a conflict
    assert result == MergeResult(expected.tree, (), "git")
