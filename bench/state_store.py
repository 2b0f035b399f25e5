#!/usr/bin/env python3
"""Benchmark of the Git state store, measured side by side with git CLI plumbing in one process run.

1. Latency of one state mutation -- replace ``run.json`` (a small JSON document holding a counter) at the root of
   the state tree and move the ref by compare-and-swap:
   * ours: ``Journal.mutate`` through pygit2 (it also reads the current value and writes the event trailer);
   * git CLI plumbing: ``hash-object -w``, ``mktree``, ``commit-tree -p <old>``, ``update-ref <ref> <new> <old>``
     (the current value is kept in memory, so the CLI does strictly less work);
   both with fsync off (git's default) and on (``agentops.fsync``/``enable_fsync_gitdir`` vs ``core.fsync=all``).
2. Aggregate mutations/s with 1, 2 and 4 processes each on its own journal ref, and 4 processes on one ref
   (contended); the final counters are checked, so a lost update would show.
3. p50 latency of a mutation that updates ``run.json`` and adds one record under ``items/<aa>/<key>``, with a
   state of 10, 1,000 and 10,000 records.

Both sides write the same loose objects and the same ref lock file, so the file system's cost of creating and
renaming small files is common to both; the git CLI additionally pays for four process starts. On a file system
where metadata operations are slow the ratio therefore shrinks: the benchmark prints that cost first, and
``--dir`` chooses where the scratch repositories live (default: the system temp dir).

Usage: ``python bench/state_store.py [--quick] [--dir DIR]``. The last line is
``state_store speedup_vs_cli_p50=<x> scaling_10k_vs_10=<x> throughput_4w_vs_1w=<x> contended_4w_vs_1w=<x>``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pygit2
from benchenv import EMAIL, ENV, NAME, git

from git_agentops import eventkinds as kinds
from git_agentops.clock import SystemClock
from git_agentops.gitstore.identity import Identity
from git_agentops.gitstore.journal import Change, Event, Journal
from git_agentops.gitstore.repo import Store, open_store

IDENTITY = Identity(NAME, EMAIL)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def new_repo(root: Path, name: str) -> Path:
    path = root / name
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True, env=ENV)
    return path


def bump(change: Change) -> None:
    doc = json.loads(change.get("run.json") or b'{"counter": 0}')
    doc["counter"] += 1
    change.put("run.json", json.dumps(doc).encode())


def ours_latency(repo: Path, n: int, fsync: bool) -> list[float]:
    store = open_store(repo, clock=SystemClock(), identity=IDENTITY, fsync=fsync)
    pygit2.settings.enable_fsync_gitdir(fsync)
    journal = Journal(store, "refs/agentops/runs/lat/state")
    event = Event(kinds.STATE_CHANGED, "one mutation")
    for _ in range(10):
        journal.mutate(bump, event)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        journal.mutate(bump, event)
        times.append(time.perf_counter() - start)
    pygit2.settings.enable_fsync_gitdir(False)
    assert json.loads(journal.read().get("run.json") or b"")["counter"] == n + 10
    return times


def cli_latency(repo: Path, n: int, fsync: bool) -> list[float]:
    ref = "refs/agentops/runs/cli/state"
    config = ("core.fsync=all", "core.fsyncMethod=fsync") if fsync else ()
    old = None
    times = []
    for counter in range(1, n + 6):
        start = time.perf_counter()
        blob = git(repo, "hash-object", "-w", "--stdin", input=json.dumps({"counter": counter}), config=config)
        tree = git(repo, "mktree", input=f"100644 blob {blob}\trun.json\n", config=config)
        parent: list[str] = ["-p", old] if old else []
        new = git(repo, "commit-tree", tree, *parent, "-m", "BENCH_MUTATION: one mutation", config=config)
        git(repo, "update-ref", ref, new, old or "0" * 40, config=config)
        old = new
        if counter > 5:
            times.append(time.perf_counter() - start)
    return times


def worker(repo: str, ref: str, count: int) -> None:
    """Child process: wait for the go file, then do ``count`` mutations on ``ref``."""
    store = open_store(repo, clock=SystemClock(), identity=IDENTITY)
    journal = Journal(store, ref)
    event = Event(kinds.STATE_CHANGED, "one mutation")
    go = Path(repo) / "go"
    while not go.exists():
        time.sleep(0.001)
    for _ in range(count):
        journal.mutate(bump, event)


def throughput(root: Path, name: str, processes: int, per_process: int, shared: bool) -> float:
    repo = new_repo(root, name)
    refs = ["refs/agentops/runs/shared/state" if shared else f"refs/agentops/runs/p{i}/state" for i in range(processes)]
    children = [
        subprocess.Popen([sys.executable, __file__, "--worker", str(repo), ref, str(per_process)]) for ref in refs
    ]
    time.sleep(0.8)  # let every child import pygit2 and open the repository
    start = time.perf_counter()
    (repo / "go").touch()
    for child in children:
        if child.wait() != 0:
            raise SystemExit(f"worker failed in {name}")
    elapsed = time.perf_counter() - start
    store = open_store(repo, clock=SystemClock(), identity=IDENTITY)
    expected = processes * per_process if shared else per_process
    for ref in set(refs):
        counter = json.loads(Journal(store, ref).read().get("run.json") or b"")["counter"]
        if counter != expected:
            raise SystemExit(f"LOST UPDATES on {ref}: {counter} != {expected}")
    return processes * per_process / elapsed


def scaling_latency(root: Path, entries: int, n: int) -> float:
    repo = new_repo(root, f"scale{entries}")
    store: Store = open_store(repo, clock=SystemClock(), identity=IDENTITY)
    journal = Journal(store, "refs/agentops/runs/scale/state")

    def seed(change: Change) -> None:
        for i in range(entries):
            key = f"{i:08x}{'0' * 56}"
            change.put(f"items/{key[:2]}/{key}", b'{"seed": true}')

    journal.mutate(seed, Event(kinds.STATE_CHANGED, f"{entries} records"))
    counter = [entries]

    def record(change: Change) -> None:
        bump(change)
        counter[0] += 1
        key = f"{counter[0] * 2654435761 % 2**32:08x}{'f' * 56}"
        change.put(f"items/{key[:2]}/{key}", b'{"request": true}')

    for _ in range(10):
        journal.mutate(record, Event(kinds.STATE_CHANGED, "record"))
    times = []
    for _ in range(n):
        start = time.perf_counter()
        journal.mutate(record, Event(kinds.STATE_CHANGED, "record"))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def file_op_cost(root: Path, n: int = 200) -> float:
    """Seconds to create, write and rename one small file here (what each object and ref write costs)."""
    scratch = root / "calibrate"
    scratch.mkdir()
    start = time.perf_counter()
    for i in range(n):
        tmp = scratch / f"t{i}.tmp"
        tmp.write_bytes(b"x" * 64)
        tmp.rename(scratch / f"t{i}")
    return (time.perf_counter() - start) / n


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke test)")
    parser.add_argument("--dir", default=None, help="where to create the scratch repositories")
    parser.add_argument("--worker", nargs=3, metavar=("REPO", "REF", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], args.worker[1], int(args.worker[2]))
        return 0
    n_ours, n_cli, per_proc, n_scale = (60, 20, 100, 40) if args.quick else (400, 120, 600, 200)
    with tempfile.TemporaryDirectory(prefix="agentops-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        print(
            f"git-agentops state store benchmark  (pygit2 {getattr(pygit2, '__version__', '?')}, "
            f"libgit2 {pygit2.LIBGIT2_VERSION}, {git(root, '--version')}, {os.cpu_count()} cpus)"
        )
        print(
            f"scratch repositories in {root}: create+write+rename of a small file costs "
            f"{file_op_cost(root) * 1e6:.0f} us here"
        )
        print("\n1. one mutation (replace run.json + CAS ref update), latency in ms")
        print(f"{'path':<44}{'p50':>9}{'p95':>9}{'n':>6}")
        lat = {}
        for fsync in (False, True):
            label = "fsync on " if fsync else "fsync off"
            ours = ours_latency(new_repo(root, f"ours{fsync}"), n_ours // (3 if fsync else 1), fsync)
            cli = cli_latency(new_repo(root, f"cli{fsync}"), n_cli // (2 if fsync else 1), fsync)
            lat[fsync] = (statistics.median(ours), statistics.median(cli))
            print(
                f"{'Journal.mutate (pygit2), ' + label:<44}{ms(statistics.median(ours))}{ms(percentile(ours, 95))}"
                f"{len(ours):>6}"
            )
            print(
                f"{'git CLI plumbing (4 processes), ' + label:<44}{ms(statistics.median(cli))}"
                f"{ms(percentile(cli, 95))}{len(cli):>6}"
            )
        speedup = lat[False][1] / lat[False][0]
        speedup_fsync = lat[True][1] / lat[True][0]
        print(f"speed-up at p50: {speedup:.1f}x (fsync off), {speedup_fsync:.1f}x (fsync on)")

        print(f"\n2. aggregate throughput, {per_proc} mutations per process (counters checked: nothing lost)")
        rates = {}
        for name, procs, shared in (("1w", 1, False), ("2w", 2, False), ("4w", 4, False), ("4w-shared", 4, True)):
            rates[name] = throughput(root, f"tp{name}", procs, per_proc, shared)
            what = "one ref (contended)" if shared else ("own ref each" if procs > 1 else "one writer")
            print(f"{procs} process(es), {what:<22}{rates[name]:10.0f} mutations/s  ({rates[name] / rates['1w']:.2f}x)")

        print("\n3. p50 latency vs state size (mutation: run.json + one new record in items/<aa>/<key>)")
        scale = {}
        for entries in (10, 1_000, 10_000):
            scale[entries] = scaling_latency(root, entries, n_scale)
            print(f"{entries:>6} records: p50 {ms(scale[entries])} ms  ({scale[entries] / scale[10]:.2f}x of 10)")
    print(
        f"state_store speedup_vs_cli_p50={speedup:.2f} scaling_10k_vs_10={scale[10_000] / scale[10]:.2f} "
        f"throughput_4w_vs_1w={rates['4w'] / rates['1w']:.2f} contended_4w_vs_1w={rates['4w-shared'] / rates['1w']:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
