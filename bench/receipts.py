#!/usr/bin/env python3
"""Benchmark of ``git agentops-receipt verify`` over a range of signed receipts, against git's own SSH check.

A scratch repository gets ``--count`` (default 1,000) integrations: each a delivery commit merged into the target
by a merge commit that carries a real receipt (an in-toto statement in a DSSE envelope, signed with
``ssh-keygen -Y sign``) and a delivery record, exactly as a run writes them. Then the whole range is verified the
way CI does -- envelope, signature against the allowed signers, subject, seals, completeness and merge chain of
every receipt, and that every commit of the range is covered -- by the real command, process start included.

Baseline, side by side in the same run: git's own check of as many SSH-signed commits (``gpg.format=ssh``,
``gpg.ssh.allowedSignersFile``, ``git log --format=%G?``), which runs ``ssh-keygen -Y find-principals`` and
``-Y verify`` per signature -- what our receipts did too before they were checked in process.

``--profile`` also runs the same check in this process under cProfile and prints where the time goes.

Last line: ``receipts verify_per_s=<n> vs_git_verify=<ratio>``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import tempfile
import time
from pathlib import Path

from benchenv import ENV, git

from git_agentops.canonical import canonical_bytes
from git_agentops.clock import SystemClock
from git_agentops.gitstore.identity import Identity
from git_agentops.gitstore.notes import DELIVERIES_REF, RECEIPTS_REF, Notes
from git_agentops.gitstore.repo import open_store
from git_agentops.receipts import build_predicate, build_statement, make_receipt

ROOT_ID = "task-00000000-0000-4000-8000-000000000000"


def build(repo: Path, key: Path, count: int) -> tuple[str, str]:
    """``count`` integrations with receipts on ``main``; (base, tip)."""
    git(repo.parent, "init", "-q", "-b", "main", str(repo))
    (repo / "f").write_text("base\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    store = open_store(repo, clock=SystemClock(), identity=Identity("bench", "b@x"))
    receipts, deliveries = Notes(store, RECEIPTS_REF), Notes(store, DELIVERIES_REF)
    tip = base
    for i in range(count):
        task = f"task-00000000-0000-4000-8000-{i + 1:012d}"
        blob = git(repo, "hash-object", "-w", "--stdin", input=f"delivery {i}\n")
        tree = git(repo, "mktree", input=f"100644 blob {blob}\tf{i}.txt\n")
        delivery = git(repo, "commit-tree", tree, "-p", tip, "-m", f"delivery {i}")
        merge = git(repo, "commit-tree", tree, "-p", tip, "-p", delivery, "-m", f"Integrate {task}")
        deliveries.append({delivery: canonical_bytes({"runId": "run-bench", "taskId": task}) + b"\n"})
        predicate = build_predicate(
            run_id="run-bench",
            goal="bench",
            policy_config_hash="0" * 64,
            toolkit_version="bench",
            tasks=[
                {"id": ROOT_ID, "parent": None, "status": "running"},
                {"id": task, "parent": ROOT_ID, "status": "delivered"},
            ],
            contract_hash="1" * 64,
            deliveries=[
                {
                    "taskId": task,
                    "workerId": "worker-1",
                    "generation": 1,
                    "sourceCommit": delivery,
                    "deliveryDigest": "2" * 64,
                }
            ],
            integration={
                "target": "main",
                "base": tip,
                "order": [task],
                "steps": [{"label": task, "commit": merge, "parents": [tip, delivery], "tree": tree}],
            },
            verification=[],
            reviews=[],
            created_at=time.time(),
        )
        statement = build_statement(commit=merge, tree=tree, subject_name="main", predicate=predicate)
        receipts.add(merge, make_receipt(statement, keys=[key]))
        tip = merge
    git(repo, "update-ref", "refs/heads/main", tip)
    return base, tip


def signed_commits(repo: Path, key: Path, base: str, count: int) -> str:
    """``count`` SSH-signed commits on a branch from ``base``, signed by git itself; the tip."""
    git(repo, "checkout", "-q", "-b", "signed", base)
    for i in range(count):
        git(repo, "commit", "-q", "-S", "--allow-empty", "-m", f"signed {i}", config=_ssh(key))
    return git(repo, "rev-parse", "HEAD")


def _ssh(key: Path, signers: Path | None = None) -> tuple[str, ...]:
    config = ("gpg.format=ssh", f"user.signingKey={key}")
    return (*config, f"gpg.ssh.allowedSignersFile={signers}") if signers else config


def _timed(argv: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=ENV, check=False)
    return time.perf_counter() - start, done


def _profile(repo: Path, spec: str, signers: Path) -> str:
    """The in-process check of ``spec`` under cProfile: its wall time and the functions it spends it in."""
    from git_agentops.receipts.check import check

    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    check(repo, spec, environ=ENV, clock=SystemClock(), allowed_signers=signers, require_signature=True)
    profiler.disable()
    wall = time.perf_counter() - start
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(15)
    stats.sort_stats("cumulative").print_stats(25)
    return f"in-process check(): {wall:.3f}s\n{out.getvalue()}"


def main() -> int:
    """Build, verify both ways, print the table and the last line (module docstring)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--profile", action="store_true", help="also profile the check in process")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentops-receipts-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        key = root / "key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bench", "-f", str(key)], check=True)
        signers = root / "allowed_signers"
        public = " ".join(key.with_suffix(".pub").read_text().split()[:2])
        signers.write_text(f'bench@example namespaces="git-agentops,git" {public}\n')
        repo = root / "repo"
        started = time.perf_counter()
        base, _ = build(repo, key, args.count)
        built = time.perf_counter() - started
        signed = signed_commits(repo, key, base, args.count)
        verify = ["git", "agentops-receipt", "verify", f"{base}..main", "--allowed-signers", str(signers)]
        ours, done = _timed([*verify, "--require-signature", "--json"], repo)
        result = json.loads(done.stdout)
        valid = sum(1 for v in result["verdicts"] if v["ok"] and v.get("principals"))
        config = [arg for pair in _ssh(key, signers) for arg in ("-c", pair)]
        theirs, log = _timed(["git", *config, "log", "--format=%G?", f"{base}..{signed}"], repo)
        statuses = log.stdout.split()
        profile = _profile(repo, f"{base}..main", signers) if args.profile else ""
    ours_rate, git_rate = args.count / ours, len(statuses) / theirs
    good = statuses.count("G")
    print(f"built {args.count} signed receipts in {built:.1f}s (cpus: {os.cpu_count()})")
    print(f"{'what':<62}{'seconds':>9}{'per second':>12}")
    what = f"git agentops-receipt verify (range, {valid} valid signed receipts)"
    print(f"{what:<62}{ours:>9.2f}{ours_rate:>12.1f}")
    what = f"git log --format=%G? ({good} good SSH commit signatures)"
    print(f"{what:<62}{theirs:>9.2f}{git_rate:>12.1f}")
    if valid != args.count or done.returncode != 0 or good != args.count:
        print(f"NOT ALL VALID: ours exit {done.returncode} {done.stderr.strip()[-300:]}; git {log.stderr[-300:]}")
    if profile:
        print(profile)
    print(f"receipts verify_per_s={ours_rate:.1f} vs_git_verify={ours_rate / git_rate:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
