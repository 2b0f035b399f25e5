#!/usr/bin/env python3
"""Benchmark of ``git agentops-verify``'s own cost, side by side with running the command directly, and of setup.

In a scratch repository whose trusted policy has one trivial command (``true``):

* **direct**: ``true`` started as a subprocess -- the cost of the command itself;
* **verify --fresh**: ``git agentops-verify --fresh`` -- start-up, policy and trust checks, the clean-checkout
  check, running ``true`` in its own process group, and appending the evidence notes;
* **cache hit**: ``git agentops-verify`` on an already verified tree -- the whole command, nothing run.

The overhead is p50(verify --fresh) - p50(direct). Targets: overhead under 150 ms, cache hit under 200 ms.

Setup (``git agentops-env python --extra test``) on a real-shaped project -- a src-layout hatchling package whose
test extra pulls pytest and three small pure-Python packages, from the index or pip's cache as the machine is
configured. One throwaway setup first fills pip's cache, so the figures measure the toolkit, not the network:

* **setup_cold_s**: the first checkout of a repository -- the shared base is built (venv, dependencies);
* **setup_warm_s**: a second checkout (a linked worktree) of the same repository -- the base is reused;
* **setup_8_vs_1_cold**: eight checkouts of a fresh repository on the same lockfile, one after the other (the
  first cold), divided by one cold setup. Target: at most 2.0 (the base is paid for once, not eight times).

Usage: ``python bench/verify.py [--runs N] [--dir DIR] [--quick]`` (``--quick``: the verify figures alone).
Last line: ``verify overhead_p50_ms=<n> cache_hit_p50_ms=<n> [setup_cold_s=<s> setup_warm_s=<s>
setup_8_vs_1_cold=<r>]``.
"""

from __future__ import annotations

import argparse
import json
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


SETUP_PYPROJECT = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "benchpkg"
version = "0.1"
dependencies = []

[project.optional-dependencies]
test = ["pytest", "six", "idna", "tomli-w"]
"""


def _setup_project(path: Path, env: dict[str, str]) -> Path:
    """A fresh repository holding the real-shaped project, committed."""
    (path / "src" / "benchpkg").mkdir(parents=True)
    (path / "tests").mkdir()
    (path / "pyproject.toml").write_text(SETUP_PYPROJECT, encoding="utf-8")
    (path / "src" / "benchpkg" / "__init__.py").write_text("VALUE = 1\n", encoding="utf-8")
    (path / "tests" / "test_value.py").write_text("import benchpkg\n\n\ndef test_value():\n    assert benchpkg.VALUE\n")
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    subprocess.run(["git", "add", "-A"], cwd=path, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "project"], cwd=path, check=True, env=env)
    return path


def _setup_once(checkout: Path, env: dict[str, str]) -> tuple[float, bool]:
    """One ``git agentops-env python --extra test``: wall seconds, and whether the base was reused."""
    start = time.perf_counter()
    done = subprocess.run(
        ["git", "agentops-env", "python", "--extra", "test", "--json"],
        cwd=checkout,
        env=env,
        capture_output=True,
        check=False,
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"setup failed in {checkout}: {done.stderr.decode(errors='replace')}")
    return seconds, bool(json.loads(done.stdout)["base"]["reused"])


def _worktree(repo: Path, name: str, env: dict[str, str]) -> Path:
    path = repo.parent / name
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(path)], cwd=repo, check=True, env=env)
    return path


def setup_figures(root: Path, env: dict[str, str]) -> dict[str, float]:
    """Cold, warm, and eight-checkout setup times (see the module docstring), measured in this one run."""
    _setup_once(_setup_project(root / "warmup" / "repo", env), env)  # fills pip's cache; not measured
    repo = _setup_project(root / "a" / "repo", env)
    cold, reused = _setup_once(repo, env)
    assert not reused, "the first checkout of a fresh repository must build its base"
    warm, reused = _setup_once(_worktree(repo, "second", env), env)
    assert reused, "a second checkout on the same lockfile must reuse the base"
    eight = _setup_project(root / "b" / "repo", env)
    checkouts = [eight] + [_worktree(eight, f"wt{i}", env) for i in range(1, 8)]
    start = time.perf_counter()
    built = [not _setup_once(checkout, env)[1] for checkout in checkouts]
    total = time.perf_counter() - start
    assert built == [True] + [False] * 7, built
    return {"cold": cold, "warm": warm, "eight": total, "ratio": total / cold}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--dir", default=None, help="where to create the scratch repository")
    parser.add_argument("--quick", action="store_true", help="only the verify figures (no setup, no index access)")
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
        setup = None if args.quick else setup_figures(root / "setup", env)
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
    last = f"verify overhead_p50_ms={overhead:.0f} cache_hit_p50_ms={p50['cached']:.0f}"
    if setup is not None:
        print(
            f"setup: cold {setup['cold']:.2f} s (base built), warm {setup['warm']:.2f} s (base reused), "
            f"8 checkouts {setup['eight']:.2f} s = {setup['ratio']:.2f}x one cold setup (target <= 2.0)"
        )
        last += (
            f" setup_cold_s={setup['cold']:.2f} setup_warm_s={setup['warm']:.2f} setup_8_vs_1_cold={setup['ratio']:.2f}"
        )
    print(last)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
