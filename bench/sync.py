#!/usr/bin/env python3
"""Benchmark of publishing to a remote and of merging the agentops notes of two machines.

**Publish.** One clone and two bare servers with the same history. For each of ``--rounds`` integrations, the
clone gets a delivery commit, its merge into ``main``, a receipt note, a delivery record and an evidence record --
what a run writes -- and then, in alternating order:

* ours: :func:`git_agentops.integrate.remote.publish` to the first server: one ``git push --atomic`` of ``main`` and
  every agentops notes ref, each with ``--force-with-lease`` (after the untimed fetch of the tip that building the
  candidate does anyway);
* baseline: a plain ``git push`` of the same refs (``main`` and ``refs/notes/agentops/*``) to the second server.

**Notes merge.** Two machines' receipts refs with ``--notes`` (10,000) notes each, on different objects, from a
common parent: :func:`git_agentops.gitstore.sync.merge_notes` against ``git notes merge -s union`` of the same two
commits, side by side.

Last line: ``sync publish_vs_push=<ratio> notes_merge_s=<s> notes_vs_git_merge=<ratio> notes=<n>``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import cast

from benchenv import git

from git_agentops.clock import SystemClock
from git_agentops.gitstore.identity import Identity
from git_agentops.gitstore.notes import DELIVERIES_REF, EVIDENCE_REF, RECEIPTS_REF, Notes
from git_agentops.gitstore.repo import Store, open_store
from git_agentops.gitstore.sync import merge_notes
from git_agentops.integrate.remote import publish, remote_tip
from git_agentops.model.policy import Policy, effective
from git_agentops.policy.trust import Verdict
from git_agentops.runs.jobs import JobContext


def _context(root: Path) -> JobContext:
    policy = Policy.from_effective(effective({"version": 1, "run": {"remote": "origin"}}))
    return JobContext(
        run_id="run-bench",
        policy=policy,
        trust=cast(Verdict, None),
        environ={},
        clock=SystemClock(),
        run_dir=root / "run",
        log=lambda message: None,
        fault=lambda point: None,
    )


def _integration(repo: Path, store: Store, i: int) -> str:
    """A delivery merged into main with its receipt, delivery and evidence notes; the new tip."""
    tip = git(repo, "rev-parse", "main")
    blob = git(repo, "hash-object", "-w", "--stdin", input=f"delivery {i}\n")
    tree = git(repo, "mktree", input=f"100644 blob {blob}\tf{i}.txt\n")
    delivery = git(repo, "commit-tree", tree, "-p", tip, "-m", f"delivery {i}")
    merge = git(repo, "commit-tree", tree, "-p", tip, "-p", delivery, "-m", f"Integrate {i}")
    Notes(store, DELIVERIES_REF).append({delivery: b'{"delivery": %d}\n' % i})
    Notes(store, EVIDENCE_REF).append({tree: b'{"evidence": %d}\n' % i})
    Notes(store, RECEIPTS_REF).add(merge, b'{"receipt": %d}\n' % i)
    return merge


def publish_ratio(root: Path, rounds: int) -> tuple[float, float, float]:
    """(median ours, median plain push, ratio) in seconds."""
    git(root, "init", "-q", "-b", "main", "seed")
    (root / "seed" / "f").write_text("base\n")
    git(root / "seed", "add", "-A")
    git(root / "seed", "commit", "-qm", "base")
    for name in ("ours.git", "plain.git"):
        git(root, "clone", "-q", "--bare", "seed", name)
    repo = root / "clone"
    git(root, "clone", "-q", str(root / "ours.git"), str(repo))
    git(repo, "remote", "add", "plain", str(root / "plain.git"))
    store = open_store(repo, clock=SystemClock(), identity=Identity("bench", "b@x"))
    ctx = _context(root)
    ours: list[float] = []
    plain: list[float] = []
    for i in range(rounds):
        base = git(repo, "rev-parse", "main")
        remote_tip(ctx, store, "origin", "main")  # what building the candidate does first (untimed)
        candidate = _integration(repo, store, i)

        def mine(base: str = base, candidate: str = candidate) -> None:
            start = time.perf_counter()
            assert publish(ctx, store, "origin", "main", base, candidate)
            ours.append(time.perf_counter() - start)

        def baseline(candidate: str = candidate) -> None:
            start = time.perf_counter()
            git(
                repo,
                "push",
                "-q",
                "plain",
                f"{candidate}:refs/heads/main",
                "refs/notes/agentops/*:refs/notes/agentops/*",
            )
            plain.append(time.perf_counter() - start)

        for step in (mine, baseline) if i % 2 == 0 else (baseline, mine):
            step()
    same = git(root / "ours.git", "rev-parse", "main") == git(root / "plain.git", "rev-parse", "main")
    assert same, "both servers should hold the same tip"
    a, b = statistics.median(ours), statistics.median(plain)
    return a, b, a / b


def notes_merge(root: Path, count: int) -> tuple[float, float, float]:
    """(ours s, git notes merge s, ratio) for ``count`` notes per side on different objects."""
    import pygit2

    repo_dir = root / "notes"
    git(root, "init", "-q", "-b", "main", "notes")
    (repo_dir / "f").write_text("x\n")
    git(repo_dir, "add", "-A")
    git(repo_dir, "commit", "-qm", "base")
    store = open_store(repo_dir, clock=SystemClock(), identity=Identity("bench", "b@x"))
    repo = store.repo
    signature = pygit2.Signature("bench", "b@x")
    empty = repo.TreeBuilder().write()
    parent = repo.create_commit(None, signature, signature, "notes base", empty, [])

    def side(tag: str) -> str:
        groups: dict[str, pygit2.TreeBuilder] = {}
        for i in range(count):
            target = pygit2.hash(f"{tag} object {i}\n".encode())
            hexid = str(target)
            note = repo.create_blob(f"{tag} note {i}\n".encode())
            groups.setdefault(hexid[:2], repo.TreeBuilder()).insert(hexid[2:], note, pygit2.enums.FileMode.BLOB)
        root_tree = repo.TreeBuilder()
        for prefix, builder in sorted(groups.items()):
            root_tree.insert(prefix, builder.write(), pygit2.enums.FileMode.TREE)
        return str(repo.create_commit(None, signature, signature, f"{tag} notes", root_tree.write(), [parent]))

    mine, theirs = side("a"), side("b")
    git(repo_dir, "update-ref", RECEIPTS_REF, mine)
    start = time.perf_counter()
    merged, clashes = merge_notes(store, RECEIPTS_REF, mine, theirs, "origin")
    ours = time.perf_counter() - start
    assert merged and not clashes
    assert len(git(repo_dir, "notes", "--ref=agentops/receipts", "list").splitlines()) == 2 * count
    git(repo_dir, "update-ref", "refs/notes/gitside", mine)
    git(repo_dir, "update-ref", "refs/notes/theirs", theirs)
    start = time.perf_counter()
    git(repo_dir, "notes", "--ref=gitside", "merge", "-q", "-s", "union", "refs/notes/theirs")
    baseline = time.perf_counter() - start
    assert len(git(repo_dir, "notes", "--ref=gitside", "list").splitlines()) == 2 * count
    return ours, baseline, ours / baseline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--notes", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentops-bench-sync-") as tmp:
        root = Path(tmp)
        ours, plain, ratio = publish_ratio(root, args.rounds)
        print(
            f"publish: ours p50 {ours * 1000:.1f} ms, plain git push p50 {plain * 1000:.1f} ms ({args.rounds} rounds)"
        )
        merge_s, git_s, merge_ratio = notes_merge(root, args.notes)
        print(
            f"notes merge: {args.notes} + {args.notes} notes in {merge_s:.3f} s; git notes merge -s union {git_s:.3f} s"
        )
        print(
            f"sync publish_vs_push={ratio:.2f} notes_merge_s={merge_s:.3f} notes_vs_git_merge={merge_ratio:.2f} "
            f"notes={args.notes}"
        )


if __name__ == "__main__":
    main()
