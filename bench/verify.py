#!/usr/bin/env python3
"""Benchmark of verification's own cost -- in place and in the supervisor's clean checkout -- and of setup.

In a small scratch repository whose trusted policy has one trivial command (``true``):

* **direct**: ``true`` started as a subprocess -- the cost of the command itself;
* **verify --fresh**: ``git agentops-verify --fresh`` -- start-up, policy and trust checks, the clean-checkout
  check, running ``true`` in its own process group, and appending the evidence notes;
* **cache hit**: ``git agentops-verify`` on an already verified tree -- the whole command, nothing run.

The overhead is p50(verify --fresh) - p50(direct). Targets: overhead under 150 ms, cache hit under 200 ms.

The supervisor never verifies in an agent's worktree: each handoff and the final gate run in a clean checkout it
owns (``git_agentops.verify.proof``). Its figures call the library in this process, as the running supervisor does
(no interpreter start-up), each one ``populate`` + ``inspect`` + the guard above + ``verify_clean`` (the commands,
then the tracked files re-hashed) of a commit whose tree nobody verified (one file changed: evidence is never
reused); see ``bench/_clean_checkout.py``. On a repository of ``--files`` small files (default 20,000: directories
of 100 files of ~300 bytes, packed by ``git gc`` unless ``--no-gc``; each new commit is loose, as a worker's is),
round by round so a neighbour's load falls on all alike:

* **inplace**: ``verify_checkout(fresh=True)`` in the repository's own checkout -- the person's verification, the
  baseline (the bare ``true`` is printed beside it);
* **clean_cold**: a fresh slot each time -- ``git init``, every file written, then inspected;
* **clean_warm**: one slot re-populated with the next commit (a worker's next handoff, the common case), split
  into populate / inspect before / guard above / commands (``verify_clean`` without its inspection) / inspect after;
* **clean_warm_vs_inplace**, **clean_cold_vs_inplace**: p50 ratios -- what the clean checkout costs.

And on the small scratch repository, **gate_overhead_p50_ms**: the final gate -- the candidate's warm slot verifying
a new commit -- minus the bare command; **gate_vs_verify_overhead** = gate_overhead / overhead. Target: <= 2.0.
Everything but setup runs under a private HOME and XDG dirs with a fixed git identity.

Setup (``git agentops-env python --extra test``) on a real-shaped project -- a src-layout hatchling package whose
test extra pulls pytest and three small pure-Python packages, from the index or pip's cache as the machine is
configured (so these run with the real HOME, for pip's cache and config). One throwaway setup first fills pip's
cache, so the figures measure the toolkit, not the network:

* **setup_cold_s**: the first checkout of a repository -- the shared base is built (venv, dependencies);
* **setup_warm_s**: a second checkout (a linked worktree) of the same repository -- the base is reused;
* **clean_setup_warm_s**: the setup step in a fresh clean verification checkout (a handoff's first proof) of the
  first repository, whose base exists -- p50 of three, each in a new checkout. Target: at most 2.0 s. Before, each
  clean checkout (a repository of its own) built a base of its own: what ``setup_cold_s`` measures. Beside it,
  **clean_setup_cpu_s**: the CPU seconds (user + system) of every process of that setup -- what the wall time is on
  an idle machine, since setup runs its steps one after the other; on a loaded one the wall time is a multiple;
* **setup_8_vs_1_cold**: eight checkouts of a fresh repository on the same lockfile, one after the other (the
  first cold), divided by one cold setup. Target: at most 2.0 (the base is paid for once, not eight times).

Usage: ``python bench/verify.py [--runs N] [--clean-runs N] [--files N] [--no-gc] [--dir DIR] [--no-setup]
[--quick]`` (``--quick``: the two verify figures alone; ``--no-setup``: everything but setup, which needs pip).
Last line: ``verify overhead_p50_ms=<n> cache_hit_p50_ms=<n> [setup_cold_s=<s> setup_warm_s=<s>
setup_8_vs_1_cold=<r> clean_setup_warm_s=<s> clean_setup_cpu_s=<s>] [clean_warm_vs_inplace=<r> clean_cold_vs_inplace=<r>
gate_overhead_p50_ms=<n> gate_vs_verify_overhead=<r>]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _clean_checkout import IDENTITY_VARS, big_figures, gate_figures, hermetic_env, make_repo, seal


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


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


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


def _clean_setup(repo: Path, slot: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (every process it started, user + system) of the setup step in a fresh clean checkout
    of ``repo``'s HEAD, as the supervisor runs it there (its git env on top); the base must be reused, and be the
    repository's (not one of the checkout's own)."""
    from git_agentops.gitstore.clean import CleanCheckout

    checkout = CleanCheckout(slot, repo / ".git" / "objects")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, env=env, capture_output=True, text=True, check=True)
    checkout.populate(head.stdout.strip())
    cpu = _children_cpu()
    seconds, reused = _setup_once(checkout.root, {**env, **checkout.command_git_env()})
    cpu = _children_cpu() - cpu
    assert reused, "a clean checkout must reuse the repository's base"
    assert not (checkout.git_dir / "agentops" / "envs").exists(), "the clean checkout built a base of its own"
    return seconds, cpu


def setup_figures(root: Path, env: dict[str, str], *, runs: int = 3) -> dict[str, float]:
    """Cold, warm, clean-checkout and eight-checkout setup times (see the module docstring), in this one run."""
    _setup_once(_setup_project(root / "warmup" / "repo", env), env)  # fills pip's cache; not measured
    repo = _setup_project(root / "a" / "repo", env)
    cold, reused = _setup_once(repo, env)
    assert not reused, "the first checkout of a fresh repository must build its base"
    warm, reused = _setup_once(_worktree(repo, "second", env), env)
    assert reused, "a second checkout on the same lockfile must reuse the base"
    clean = [_clean_setup(repo, root / "verify" / f"slot{i}", env) for i in range(runs)]
    eight = _setup_project(root / "b" / "repo", env)
    checkouts = [eight] + [_worktree(eight, f"wt{i}", env) for i in range(1, 8)]
    start = time.perf_counter()
    built = [not _setup_once(checkout, env)[1] for checkout in checkouts]
    total = time.perf_counter() - start
    assert built == [True] + [False] * 7, built
    return {
        "cold": cold,
        "warm": warm,
        "clean": statistics.median(wall for wall, _cpu in clean),
        "clean_cpu": statistics.median(cpu for _wall, cpu in clean),
        "eight": total,
        "ratio": total / cold,
    }


def _p95(values: list[float]) -> float:
    return sorted(values)[min(len(values) - 1, round(0.95 * (len(values) - 1)))] * 1000


def _print_clean(clean: dict[str, Any], overhead: float) -> str:
    """Print the clean-checkout figures; return their part of the last line."""
    big, gate = clean["big"], clean["gate"]
    packed = "packed by git gc" if big["gc"] else "loose objects"
    print(f"\nclean checkout, {big['files']} files ({packed}; built in {big['build_s']:.1f} s), p50 ms:")
    for key, label in (
        ("true", "true (the command alone)"),
        ("inplace", "inplace: verify_checkout --fresh"),
        ("warm", "clean_warm: next commit, same slot"),
        ("cold", "clean_cold: fresh slot"),
    ):
        print(f"  {label:<38}{big[key]:>10.1f}")
    split = ", ".join(f"{k} {v:.1f}" for k, v in big["phases"].items() if k != "total")
    print(f"  clean_warm split (p50 of each): {split}")
    ratios = {
        "warm": big["warm"] / big["inplace"],
        "cold": big["cold"] / big["inplace"],
        "gate": gate["gate"] - gate["true"],
    }
    ratios["gate_vs"] = ratios["gate"] / overhead if overhead > 0 else float("inf")
    print(
        f"clean_warm_vs_inplace {ratios['warm']:.2f}x, clean_cold_vs_inplace {ratios['cold']:.2f}x; "
        f"final gate (small repository, warm slot) {gate['gate']:.1f} ms - true {gate['true']:.1f} ms = "
        f"{ratios['gate']:.1f} ms = {ratios['gate_vs']:.2f}x the verify overhead (target <= 2.0)"
    )
    last = (
        f" clean_warm_vs_inplace={ratios['warm']:.2f} clean_cold_vs_inplace={ratios['cold']:.2f}"
        f" gate_overhead_p50_ms={ratios['gate']:.0f} gate_vs_verify_overhead={ratios['gate_vs']:.2f}"
    )
    return last


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="runs of each verify figure (default 30)")
    parser.add_argument("--clean-runs", type=int, default=None, help="runs of each clean figure (default min(runs, 7))")
    parser.add_argument("--files", type=int, default=20_000, help="files of the big repository (default 20000)")
    parser.add_argument("--no-gc", action="store_true", help="leave the big repository's objects loose")
    parser.add_argument("--dir", default=None, help="where to create the scratch repositories")
    parser.add_argument("--quick", action="store_true", help="the two verify figures alone")
    parser.add_argument("--no-setup", action="store_true", help="no setup figures (they need pip)")
    args = parser.parse_args()
    if shutil.which("git-agentops-verify") is None:
        raise SystemExit("git-agentops-verify is not on PATH: install the project (pip install -e .) first")
    clean_runs = args.clean_runs or min(args.runs, 7)
    with tempfile.TemporaryDirectory(prefix="agentops-verify-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        repo, home = root / "repo", root / "home"
        home.mkdir()
        env = hermetic_env(home, os.environ)
        make_repo(repo, env, 0, gc=False)
        subprocess.run(["git", "agentops-policy", "trust", "--yes"], cwd=repo, check=True, env=env, capture_output=True)
        timed(["git", "agentops-verify"], repo, env, 3)  # warm caches (policy cache, page cache, .pyc)
        direct = timed(["true"], repo, env, args.runs)
        fresh = timed(["git", "agentops-verify", "--fresh"], repo, env, args.runs)
        cached = timed(["git", "agentops-verify"], repo, env, args.runs)
        python = timed(["python3", "-c", "pass"], repo, env, args.runs)
        clean = None
        if not args.quick:
            seal(home, env)  # the toolkit's git calls and libgit2 see only the private home from here on
            clean = {
                "big": big_figures(root, env, files=args.files, runs=clean_runs, gc=not args.no_gc),
                "gate": gate_figures(repo, env, runs=clean_runs),
            }
        setup = None
        if not (args.quick or args.no_setup):
            person = {**os.environ, "XDG_STATE_HOME": str(root / "state"), **{k: env[k] for k in IDENTITY_VARS}}
            setup = setup_figures(root / "setup", {**person, "GIT_CONFIG_NOSYSTEM": "1"})
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
        print(f"{label:<40}{p50[name]:>10.1f}{_p95(values):>10.1f}")
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
        print(
            f"setup of a clean verification checkout, base exists: {setup['clean']:.2f} s (p50; target <= 2.0), "
            f"{setup['clean_cpu']:.2f} s of CPU; before, each clean checkout built a base of its own: the cold "
            f"figure, {setup['cold']:.2f} s"
        )
        last += (
            f" setup_cold_s={setup['cold']:.2f} setup_warm_s={setup['warm']:.2f} setup_8_vs_1_cold={setup['ratio']:.2f}"
            f" clean_setup_warm_s={setup['clean']:.2f} clean_setup_cpu_s={setup['clean_cpu']:.2f}"
        )
    if clean is not None:
        last += _print_clean(clean, overhead)
    print(last)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
