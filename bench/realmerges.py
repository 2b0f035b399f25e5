#!/usr/bin/env python3
"""Benchmark of the merge engine on a real project's own merges, against ``git merge-tree``, side by side.

The differential tests (``tests/integrate/test_merge.py``) compare :func:`git_agentops.integrate.merge.merge_commits`
with ``git merge-tree --write-tree --name-only --no-messages -z OURS THEIRS`` on generated histories. This replays
the same comparison on the two-parent merges a real repository recorded (git/git's, for the issue's figure): a
seeded sample of ``git rev-list --merges``, each merge's first parent as ours and its second as theirs.

For each merge, in turn and on the same warm caches: ours (one :class:`~git_agentops.gitstore.repo.Store` opened
once, as a supervisor keeps it), then git (one ``merge-tree`` process per merge, as the differential test runs it).
Then the whole sample once more through one ``git merge-tree --stdin`` process (git's batch mode: no process per
merge). Results are compared as the differential test compares them: the same tree when git merges cleanly, the
same conflicted paths when it does not.

The repository is used through a scratch bare clone sharing its objects (``git clone --bare --shared``): the merges
write their trees there, never into the given repository.

Usage: ``python bench/realmerges.py --repo PATH_TO_GIT_GIT [--sample 200] [--seed 1] [--commit-graph]`` (a clone of
https://github.com/git/git, bare or not). The last line is ``realmerges n=<N> vs_merge_tree=<x>
vs_merge_tree_stdin=<x> agree=<k>/<N> fast=<k> fallback=<k>`` (ratios: git's time / ours).
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from benchenv import ENV, git

from git_agentops.clock import FixedClock
from git_agentops.gitstore.identity import Identity
from git_agentops.gitstore.repo import open_store
from git_agentops.integrate.merge import MergeResult, merge_commits


def git_merge_tree(repo: Path, ours: str, theirs: str) -> tuple[str | None, frozenset[str]]:
    """(the tree, or None on conflicts; the conflicted paths) -- exactly as the differential test reads git."""
    done = subprocess.run(
        ["git", "merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", ours, theirs],
        cwd=repo,
        capture_output=True,
        env=ENV,
        check=False,
    )
    if done.returncode not in (0, 1):
        raise SystemExit(f"git merge-tree {ours} {theirs} failed: {done.stderr.decode()}")
    fields = done.stdout.decode("utf-8", "replace").split("\0")
    if done.returncode == 0:
        return fields[0], frozenset()
    labels = "|".join(re.escape(name.replace("/", "_")) for name in (ours, theirs))
    return None, frozenset(re.sub(rf"~(?:{labels})(?:_\d+)?$", "", f) for f in fields[1:] if f)


def agrees(ours: MergeResult, tree: str | None, conflicts: frozenset[str]) -> bool:
    if tree is not None:
        return ours.tree == tree and ours.conflicts == ()
    return ours.tree is None and frozenset(ours.conflicts) == conflicts


def sample_merges(repo: Path, n: int, seed: int) -> list[tuple[str, str]]:
    lines = git(repo, "rev-list", "--merges", "--parents", "HEAD").splitlines()
    pairs = [(p[1], p[2]) for p in (line.split() for line in lines) if len(p) == 3]
    return random.Random(seed).sample(pairs, min(n, len(pairs)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repo", required=True, type=Path, help="a clone of the project whose merges to replay")
    parser.add_argument("--sample", type=int, default=200, help="how many of its two-parent merges")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--commit-graph",
        action="store_true",
        help="write a commit-graph into the scratch clone first (as 'git gc' leaves one in a repository in use)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="realmerges-") as scratch:
        repo = Path(scratch) / "repo.git"
        git(Path(scratch), "clone", "-q", "--bare", "--shared", str(args.repo.resolve()), str(repo))
        if args.commit_graph:
            git(repo, "commit-graph", "write", "--reachable")
        pairs = sample_merges(repo, args.sample, args.seed)
        print(f"replaying {len(pairs)} of the two-parent merges of {args.repo} (seed {args.seed})", flush=True)
        store = open_store(repo, clock=FixedClock(step=1.0), identity=Identity("bench", "bench@example.invalid"))
        t_ours = t_git = 0.0
        ratios: list[float] = []
        agree = 0
        strategies: Counter[str] = Counter()
        mismatches: list[str] = []
        for ours_commit, theirs_commit in pairs:
            start = time.perf_counter()
            got = merge_commits(store, ours_commit, theirs_commit)
            mid = time.perf_counter()
            tree, conflicts = git_merge_tree(repo, ours_commit, theirs_commit)
            end = time.perf_counter()
            t_ours, t_git = t_ours + (mid - start), t_git + (end - mid)
            ratios.append((end - mid) / max(mid - start, 1e-9))
            strategies[got.strategy] += 1
            if agrees(got, tree, conflicts):
                agree += 1
            else:
                mismatches.append(f"{ours_commit[:12]} {theirs_commit[:12]}: ours={got} git={tree} {sorted(conflicts)}")
        start = time.perf_counter()
        batch = subprocess.run(
            ["git", "merge-tree", "--stdin", "--write-tree", "--name-only", "--no-messages", "-z"],
            cwd=repo,
            input="".join(f"{a} {b}\n" for a, b in pairs).encode(),
            capture_output=True,
            env=ENV,
            check=False,
        )
        t_batch = time.perf_counter() - start
        if batch.returncode != 0:
            print(f"git merge-tree --stdin failed: {batch.stderr.decode()}", file=sys.stderr)
            return 1
    for line in mismatches[:10]:
        print(f"  differs: {line}")
    n = len(pairs)
    print(f"  ours:                        {t_ours:8.3f} s ({t_ours / n * 1000:.2f} ms/merge)")
    print(f"  git merge-tree, per merge:   {t_git:8.3f} s ({t_git / n * 1000:.2f} ms/merge)")
    print(f"  git merge-tree --stdin:      {t_batch:8.3f} s ({t_batch / n * 1000:.2f} ms/merge)")
    print(f"  per-merge ratio: median {statistics.median(ratios):.2f}x, worst {min(ratios):.2f}x")
    print(f"  strategies: {dict(strategies)}")
    fast = sum(v for k, v in strategies.items() if k != "git")
    print(
        f"realmerges n={n} vs_merge_tree={t_git / t_ours:.2f} vs_merge_tree_stdin={t_batch / t_ours:.2f} "
        f"agree={agree}/{n} fast={fast} fallback={strategies.get('git', 0)}"
    )
    return 0 if agree == n else 1


if __name__ == "__main__":
    sys.exit(main())
