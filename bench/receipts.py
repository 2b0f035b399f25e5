#!/usr/bin/env python3
"""Benchmark of ``git agentops-receipt verify`` over a range of 200 signed receipts.

A scratch repository gets 200 integrations: each a delivery commit merged into the target by a merge commit that
carries a real receipt (an in-toto statement in a DSSE envelope, signed with ``ssh-keygen -Y sign``) and a
delivery record, exactly as a run writes them. Then the whole range is verified the way CI does -- envelope,
signature against the allowed signers, subject, seals, completeness and merge chain of every receipt, and that
every integration merge is covered.

Baseline, side by side: git's own check of 200 SSH-signed commits (``git log --format=%G?``), which also runs
``ssh-keygen -Y find-principals`` and ``-Y verify`` per signature.

Last line: ``receipts verify_per_s=<n>``.
"""

from __future__ import annotations

import argparse
import json
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


def signed_commits(repo: Path, key: Path, count: int) -> str:
    git(repo, "checkout", "-q", "-b", "signed", "main~" + str(count))
    for i in range(count):
        git(
            repo,
            "-c",
            "gpg.format=ssh",
            "-c",
            f"user.signingKey={key}",
            "commit",
            "-q",
            "-S",
            "--allow-empty",
            "-m",
            f"signed {i}",
        )
    return git(repo, "rev-parse", "HEAD")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentops-receipts-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        key = root / "key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bench", "-f", str(key)], check=True)
        signers = root / "allowed_signers"
        signers.write_text(
            f'bench@example namespaces="git-agentops,git" {" ".join(key.with_suffix(".pub").read_text().split()[:2])}\n'
        )
        repo = root / "repo"
        started = time.perf_counter()
        base, _ = build(repo, key, args.count)
        built = time.perf_counter() - started
        signed = signed_commits(repo, key, args.count)
        start = time.perf_counter()
        done = subprocess.run(
            [
                "git",
                "agentops-receipt",
                "verify",
                f"{base}..main",
                "--allowed-signers",
                str(signers),
                "--require-signature",
                "--json",
            ],
            cwd=repo,
            capture_output=True,
            text=True,
            env=ENV,
            check=False,
        )
        ours = time.perf_counter() - start
        result = json.loads(done.stdout)
        valid = sum(1 for v in result["verdicts"] if v["ok"])
        start = time.perf_counter()
        statuses = subprocess.run(
            ["git", "-c", f"gpg.ssh.allowedSignersFile={signers}", "log", "--format=%G?", f"main~0..{signed}"],
            cwd=repo,
            capture_output=True,
            text=True,
            env=ENV,
            check=True,
        ).stdout.split()
        theirs = time.perf_counter() - start
    print(f"built {args.count} signed receipts in {built:.1f}s")
    print(f"{'what':<58}{'seconds':>9}{'per second':>12}")
    print(
        f"{'git agentops-receipt verify (range, ' + str(valid) + ' valid receipts)':<58}{ours:>9.2f}"
        f"{args.count / ours:>12.1f}"
    )
    print(
        f"{'git log --format=%G? (' + str(statuses.count('G')) + ' good SSH commit signatures)':<58}{theirs:>9.2f}"
        f"{len(statuses) / theirs:>12.1f}"
    )
    print(f"ours vs git's own SSH signature check: {(args.count / ours) / (len(statuses) / theirs):.2f}x the rate")
    if valid != args.count or done.returncode != 0:
        print(f"NOT ALL VALID: {done.stderr.strip()}")
    print(f"receipts verify_per_s={args.count / ours:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
