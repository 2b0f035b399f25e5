#!/usr/bin/env python3
"""Benchmark of integration: merging N deliveries into a target, in order, three ways on the same inputs.

The repository has 20,000 files (200 directories x 100 files), written with ``git fast-import`` and packed
(``git repack -adq``: libgit2 checks that every tree entry exists when it writes a tree, which is slow on loose
objects). The target moved one commit past the base; each of the N delivery branches changes one file in a
directory of its own and adds ``deliveries/NNN.txt``. For N = 1, 10 and 50 the deliveries are integrated one after
another as two-parent merge commits (first parent = the previous step):

1. ours: :func:`git_agentops.integrate.merge.merge_chain` (in-memory tree merge, pygit2 writes);
2. git plumbing: ``git merge-tree --write-tree <prev> <delivery>`` + ``git commit-tree -p <prev> -p <delivery>``
   per delivery (two processes per merge);
3. ``git merge --no-ff`` in a worktree (created once, outside the timed region; only the merges are timed).

The three final trees are compared. Ours and the merge-tree chain are run several times and the median is
reported; the worktree merges once per N (they take seconds). Times are wall-clock, in one process run.

**Long history.** A second repository with ``--history`` (12,000) commits written by fast-import: a mainline
with a topic branch merged every few commits, and at its end a criss-cross whose two tips have 12 merge bases
(with a commit-graph, as ``git gc`` writes one). The merge-base search for one delivery -- a fresh
:class:`~git_agentops.integrate.merge.Graph`, as each integration has -- against ``git merge-base --all``, side
by side: for a delivery branched a few commits back, and for the criss-cross.

Usage: ``python bench/integrate.py [--dir DIR]``. The last line is
``integrate n50 vs_merge_tree=<x> vs_worktree_merge=<x> trees_equal=<true|false> long_history_vs_merge_base=<x>
long_history_near_vs_merge_base=<x>`` (ratios: their time / ours; above 0.5 is within 2x of git).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pygit2
from benchenv import EMAIL, NAME, git

from git_agentops.clock import SystemClock
from git_agentops.gitstore.identity import Identity
from git_agentops.gitstore.repo import Store, open_store
from git_agentops.integrate.merge import merge_chain, merge_commits

IDENTITY = Identity(NAME, EMAIL)
DIRS, FILES = 200, 100
SIZES = (1, 10, 50)
Deliveries = list[tuple[str, str]]


def content(directory: int, name: int, tag: str = "") -> bytes:
    return "".join(f"d{directory:03d}/f{name:03d}.txt line {i}{tag}\n" for i in range(8)).encode()


def _file(path: str, data: bytes) -> bytes:
    return f"M 100644 inline {path}\ndata {len(data)}\n".encode() + data + b"\n"


def _commit(ref: str, mark: int, message: str, parent: int | None, files: list[bytes], when: int) -> bytes:
    header = f"commit {ref}\nmark :{mark}\ncommitter bench <bench@example.invalid> {when} +0000\n"
    body = f"data {len(message)}\n{message}\n" + (f"from :{parent}\n" if parent else "")
    return (header + body).encode() + b"".join(files) + b"\n"


def build(root: Path, deliveries: int) -> tuple[Path, str, Deliveries]:
    """The packed 20,000-file repository: base, target (one commit past it) and the delivery branches."""
    repo = root / "repo.git"
    git(root, "init", "-q", "--bare", str(repo))
    git(repo, "config", "gc.auto", "0")
    git(repo, "config", "maintenance.auto", "false")
    stream = [
        _commit(
            "refs/heads/main",
            1,
            "base",
            None,
            [_file(f"d{d:03d}/f{f:03d}.txt", content(d, f)) for d in range(DIRS) for f in range(FILES)],
            1_767_225_600,
        ),
        _commit("refs/heads/main", 2, "target", 1, [_file("d000/f000.txt", content(0, 0, " target"))], 1_767_225_660),
    ]
    for k in range(deliveries):
        d = 1 + k % (DIRS - 1)
        files = [_file(f"d{d:03d}/f{k % FILES:03d}.txt", content(d, k % FILES, f" delivery {k}"))]
        files.append(_file(f"deliveries/{k:03d}.txt", f"delivery {k}\n".encode()))
        stream.append(_commit(f"refs/heads/delivery/{k:03d}", 3 + k, f"delivery {k}", 1, files, 1_767_225_700 + k))
    git(repo, "fast-import", "--quiet", input=b"".join(stream))
    git(repo, "repack", "-adq")
    git(repo, "pack-refs", "--all")
    target = git(repo, "rev-parse", "main")
    commits = [(f"d{k:03d}", git(repo, "rev-parse", f"delivery/{k:03d}")) for k in range(deliveries)]
    return repo, target, commits


def message(label: str, commit: str) -> str:
    return f"Merge delivery {label}\n\nDelivered-Commit: {commit}\n"


def ours(store: Store, target: str, deliveries: Deliveries) -> tuple[float, str]:
    start = time.perf_counter()
    chain = merge_chain(store, target, deliveries, message=message)
    elapsed = time.perf_counter() - start
    if chain.head is None:
        raise SystemExit(f"merge_chain reported a conflict: {chain.conflict}")
    return elapsed, chain.steps[-1].tree


def merge_tree_chain(repo: Path, target: str, deliveries: Deliveries) -> tuple[float, str]:
    head, tree = target, ""
    start = time.perf_counter()
    for label, commit in deliveries:
        tree = git(repo, "merge-tree", "--write-tree", head, commit)
        head = git(repo, "commit-tree", tree, "-p", head, "-p", commit, "-m", message(label, commit))
    return time.perf_counter() - start, tree


def worktree_merges(worktree: Path, target: str, deliveries: Deliveries) -> tuple[float, str]:
    git(worktree, "switch", "-q", "-C", "scratch", target)  # untimed: reset the scratch branch to the target
    start = time.perf_counter()
    for label, commit in deliveries:
        git(worktree, "merge", "-q", "--no-ff", "-m", message(label, commit), commit)
    elapsed = time.perf_counter() - start
    return elapsed, git(worktree, "rev-parse", "HEAD^{tree}")


def median_of(runs: int, measure: Callable[..., tuple[float, str]]) -> tuple[float, str]:
    results = [measure() for _ in range(runs)]
    trees = {tree for _, tree in results}
    if len(trees) != 1:
        raise SystemExit(f"repeated runs produced different trees: {trees}")
    return statistics.median(t for t, _ in results), results[0][1]


def long_history(root: Path, commits: int) -> tuple[Path, tuple[str, str], tuple[str, str]]:
    """The long history (see the module docstring); (repo, a near pair, the criss-cross pair)."""
    repo = root / "history.git"
    git(root, "init", "-q", "--bare", str(repo))
    out: list[bytes] = []
    when = 1_700_000_000
    mark = 0

    def commit(ref: str, parents: list[int], name: str) -> int:
        nonlocal mark, when
        mark += 1
        when += 60
        out.append(f"commit {ref}\nmark :{mark}\ncommitter {NAME} <{EMAIL}> {when} +0000\ndata 1\nc\n".encode())
        for i, parent in enumerate(parents):
            out.append(f"{'from' if i == 0 else 'merge'} :{parent}\n".encode())
        out.append(f"M 100644 inline {name}\ndata {len(str(mark)) + 1}\n{mark}\n\n".encode())
        return mark

    tip = commit("refs/heads/main", [], "f0")
    while mark < commits - 40:
        topic = commit("refs/heads/topic", [tip], f"t{mark % 97}")
        topic = commit("refs/heads/topic", [topic], f"t{mark % 89}")
        tip = commit("refs/heads/main", [tip], f"m{mark % 101}")
        tip = commit("refs/heads/main", [tip, topic], f"m{mark % 103}")
    near = commit("refs/heads/delivery", [tip], "delivery.txt")
    tip = commit("refs/heads/main", [tip], "after.txt")
    tips = [commit(f"refs/heads/b{i}", [tip], f"b{i}.txt") for i in range(12)]
    x = commit("refs/heads/x", tips, "x.txt")
    y = commit("refs/heads/y", list(reversed(tips)), "y.txt")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input=b"".join(out), check=True)
    git(repo, "commit-graph", "write", "--reachable")
    del near, x, y
    return repo, ("main", "delivery"), ("x", "y")


def merge_base_ratio(repo: Path, pair: tuple[str, str], runs: int = 9) -> tuple[float, float, int]:
    """(ours median s, git merge-base --all median s, bases) for one pair, a fresh graph per search."""
    from git_agentops.integrate.bases import Graph

    store = open_store(repo, clock=SystemClock(), identity=IDENTITY)
    one, two = store.resolve(pair[0]), store.resolve(pair[1])
    expected = sorted(git(repo, "merge-base", "--all", *pair).split())
    ours_t, git_t = [], []
    for _ in range(runs):
        start = time.perf_counter()
        got = sorted(str(o) for o in Graph(store.repo, store).merge_bases(one, two))
        ours_t.append(time.perf_counter() - start)
        start = time.perf_counter()
        subprocess.run(["git", "merge-base", "--all", *pair], cwd=repo, capture_output=True, check=True)
        git_t.append(time.perf_counter() - start)
        assert got == expected, (got, expected)
    return statistics.median(ours_t), statistics.median(git_t), len(expected)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:10.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dir", default=None, help="where to create the scratch repository")
    parser.add_argument("--history", type=int, default=12_000, help="commits of the long history")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentops-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        print(
            f"git-agentops integration benchmark  (pygit2 {getattr(pygit2, '__version__', '?')}, "
            f"libgit2 {pygit2.LIBGIT2_VERSION}, {git(root, '--version')}, {os.cpu_count()} cpus)"
        )
        start = time.perf_counter()
        repo, target, deliveries = build(root, max(SIZES))
        packs = len(list((repo / "objects" / "pack").glob("*.pack")))
        loose = sum(1 for p in (repo / "objects").glob("??/*"))
        print(
            f"repository: {DIRS * FILES:,} files in {DIRS} directories, {packs} pack, {loose} loose objects; "
            f"target one commit past the base; {len(deliveries)} delivery branches "
            f"(built in {time.perf_counter() - start:.1f} s)"
        )
        worktree = root / "worktree"
        start = time.perf_counter()
        git(repo, "worktree", "add", "-q", "-b", "scratch", str(worktree), target)
        print(f"worktree for 'git merge' added in {time.perf_counter() - start:.1f} s (not timed below)")
        store = open_store(repo, clock=SystemClock(), identity=IDENTITY)
        ours(store, target, deliveries[:3])  # warm-up: imports, caches, page cache
        merge_tree_chain(repo, target, deliveries[:3])

        header = f"{'N':>4}  {'method':<40}{'total ms':>10}{'per merge ms':>14}{'ours faster':>13}"
        print()
        print(header)
        print("-" * len(header))
        ratios: dict[int, tuple[float, float]] = {}
        all_equal = True
        for n in SIZES:
            chosen = deliveries[:n]
            runs = 7 if n < 50 else 5
            t_ours, tree_ours = median_of(runs, lambda chosen=chosen: ours(store, target, chosen))
            t_plumbing, tree_plumbing = median_of(runs, lambda chosen=chosen: merge_tree_chain(repo, target, chosen))
            t_worktree, tree_worktree = worktree_merges(worktree, target, chosen)
            equal = tree_ours == tree_plumbing == tree_worktree
            all_equal = all_equal and equal
            ratios[n] = (t_plumbing / t_ours, t_worktree / t_ours)
            rows = (
                ("ours: merge_chain (in-memory, pygit2)", t_ours, ""),
                ("git merge-tree --write-tree + commit-tree", t_plumbing, f"{ratios[n][0]:.2f}x"),
                ("git merge --no-ff in a worktree", t_worktree, f"{ratios[n][1]:.2f}x"),
            )
            for name, seconds, ratio in rows:
                print(f"{n:>4}  {name:<40}{ms(seconds)}{seconds / n * 1000:14.2f}{ratio:>13}")
            print(f"{'':>4}  final trees {'identical' if equal else 'DIFFER'}: {tree_ours}")
        steps = merge_chain(store, target, deliveries, message=message).steps
        used = Counter(merge_commits(store, step.parents[0], step.parents[1]).strategy for step in steps)
        print(f"\nstrategy per merge of the N=50 chain: {dict(used)}")
        history, near, criss = long_history(root, args.history)
        print(f"\nlong history: {args.history:,} commits, a topic merged every 4 commits, a 12-base criss-cross")
        long_ratios = {}
        for name, pair in (("near delivery", near), ("criss-cross", criss)):
            t_ours, t_git, bases = merge_base_ratio(history, pair)
            long_ratios[name] = t_git / t_ours
            print(
                f"  {name:<14} {bases:>2} base(s): ours {t_ours * 1000:.2f} ms, git merge-base --all "
                f"{t_git * 1000:.2f} ms ({t_git / t_ours:.2f}x)"
            )
    vs_plumbing, vs_worktree = ratios[50]
    print(
        f"integrate n50 vs_merge_tree={vs_plumbing:.2f} vs_worktree_merge={vs_worktree:.2f} "
        f"trees_equal={'true' if all_equal else 'false'} "
        f"long_history_vs_merge_base={long_ratios['criss-cross']:.2f} "
        f"long_history_near_vs_merge_base={long_ratios['near delivery']:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
