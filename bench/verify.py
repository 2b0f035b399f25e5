#!/usr/bin/env python3
"""Benchmark of ``git agentops-verify``'s own cost, side by side with running the command directly.

In a scratch repository whose trusted policy has one trivial command (``true``):

* **direct**: ``true`` started as a subprocess -- the cost of the command itself;
* **verify --fresh**: ``git agentops-verify --fresh`` -- start-up, policy and trust checks, the clean-checkout
  check, running ``true`` in its own process group, and appending the evidence notes;
* **cache hit**: ``git agentops-verify`` on an already verified tree -- the whole command, nothing run.

The overhead is p50(verify --fresh) - p50(direct). Targets: overhead under 150 ms, cache hit under 200 ms.
Usage: ``python bench/verify.py [--runs N] [--dir DIR]``.
Last line: ``verify overhead_p50_ms=<n> cache_hit_p50_ms=<n>``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path


def timed(argv: list[str], cwd: Path, env: dict[str, str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False)
        out.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode(errors='replace')}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--dir", default=None, help="where to create the scratch repository")
    args = parser.parse_args()
    if shutil.which("git-agentops-verify") is None:
        raise SystemExit("git-agentops-verify is not on PATH: install the project (pip install -e .) first")
    with tempfile.TemporaryDirectory(prefix="agentops-verify-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        repo, state = root / "repo", root / "state"
        env = {
            **os.environ,
            "XDG_STATE_HOME": str(state),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "bench",
            "GIT_AUTHOR_EMAIL": "b@x",
            "GIT_COMMITTER_NAME": "bench",
            "GIT_COMMITTER_EMAIL": "b@x",
        }
        subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
        (repo / ".agentops").mkdir()
        (repo / ".agentops" / "policy.toml").write_text(
            'version = 1\n[[verify.commands]]\nid = "noop"\nargv = ["true"]\n', encoding="utf-8"
        )
        subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
        subprocess.run(["git", "commit", "-qm", "policy"], cwd=repo, check=True, env=env)
        subprocess.run(["git", "agentops-policy", "trust", "--yes"], cwd=repo, check=True, env=env, capture_output=True)
        timed(["git", "agentops-verify"], repo, env, 3)  # warm caches (policy cache, page cache, .pyc)
        direct = timed(["true"], repo, env, args.runs)
        fresh = timed(["git", "agentops-verify", "--fresh"], repo, env, args.runs)
        cached = timed(["git", "agentops-verify"], repo, env, args.runs)
        python = timed(["python3", "-c", "pass"], repo, env, args.runs)
    p50 = {
        name: statistics.median(values) * 1000
        for name, values in (("direct", direct), ("fresh", fresh), ("cached", cached), ("python", python))
    }
    print(f"{'what':<40}{'p50 ms':>10}{'p95 ms':>10}")
    for name, values, label in (
        ("direct", direct, "true (the command alone)"),
        ("python", python, "python3 -c pass (interpreter floor)"),
        ("fresh", fresh, "git agentops-verify --fresh"),
        ("cached", cached, "git agentops-verify (cache hit)"),
    ):
        p95 = sorted(values)[min(len(values) - 1, round(0.95 * (len(values) - 1)))] * 1000
        print(f"{label:<40}{p50[name]:>10.1f}{p95:>10.1f}")
    overhead = p50["fresh"] - p50["direct"]
    print(
        f"overhead of verify over the command: {overhead:.1f} ms (target < 150); "
        f"cache hit: {p50['cached']:.1f} ms (target < 200)"
    )
    print(f"verify overhead_p50_ms={overhead:.0f} cache_hit_p50_ms={p50['cached']:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
