#!/usr/bin/env python3
"""Benchmark of the supervisor's own overhead: request-to-response latency and CPU per delivered task.

For N = 1, 8 and 32 tasks, a real run (real worktrees, real processes) is started in a scratch repository with
the built-in scripted agent and a trivial verification command (``true``): the coordinator plans N child tasks,
each child commits one file and hands off, the supervisor verifies and freezes each delivery.

* **request -> response**: every request the agents send is timed by the agent itself, from writing the request
  file to reading the matching response (the coordinator's ``plan``/``worker`` requests, which the supervisor
  answers directly; handoffs are reported apart because they include verification);
* **supervisor CPU per delivered task**: user + system CPU time of the supervisor process itself (from
  ``/proc/<pid>/stat``, not its children: agents and verification commands are not the supervisor's overhead),
  divided by N.

* **sandbox cost per agent start**: the scripted agent's start (``python -m git_agentops.cli.agent``: the
  interpreter, the package's import, its first look for the mailbox) in a linked worktree, started directly --
  as before the sandbox -- and as the supervisor starts it now: its rules computed (:func:`for_worker`, which
  walks the directories on the way to what is denied), its spec written, the launcher started, the agent's own
  user, mount and IPC namespaces entered (private /tmp, sockets masked), Landlock applied. Interleaved rounds,
  medians. The sandbox's ratio is namespaces + Landlock / no wall, both under the launcher (``mode = "none"``: it
  only reaps); Landlock alone is shown beside it; the launcher's, launcher + whole sandbox / direct (it is one
  more Python start). The same for ``node -e 0``, the runtime Claude Code and opencode start on, when node is
  installed.

Targets: request-to-response p50 under 250 ms; supervisor CPU per task not growing with N; sandbox start ratio
at most 1.2.
Last line: ``run_overhead request_response_p50_ms=<n> cpu_per_task_ms_1=<n> cpu_per_task_ms_32=<n>
sandbox_start_ratio=<x> landlock_start_ratio=<x> launcher_start_ratio=<x>``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchenv import ENV

TIMING = re.compile(r"response (RUN_[A-Z_]+): .*?\(([0-9.]+) ms\)")


def git(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env, check=False)


def recipe(n: int) -> str:
    parts = [
        '[plan]\ntitle = "Bench"\nintent = "Plan and deliver"\ncriteria = ["all delivered", "fast"]\n',
        "[coordinator]\nfinalize = false\n",
    ]
    for i in range(n):
        parts.append(
            f'[[tasks]]\nname = "t{i}"\ntitle = "Task {i}"\nintent = "write file {i}"\ncriteria = ["exists"]\n'
            f'[[tasks.attempts]]\nsteps = [{{ write = "src/f{i}.txt", content = "{i}\\n" }}, '
            f'{{ commit = "Add f{i}" }}, {{ request = "handoff" }}]\n'
        )
    return "\n".join(parts)


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime (fields 14 and 15 of the whole line)


def _wait_delivered(
    repo: Path, run_id: str, n: int, pid: int, started: float, env: dict[str, str]
) -> tuple[int, float]:
    deadline = time.monotonic() + 60 + 10 * n
    while True:
        doc = json.loads(git(repo, "agentops-run", "status", run_id, "--json", env=env).stdout)
        kids = [t for t in doc["tasks"] if t["parent"]]
        if len(kids) == n and all(t["status"] == "delivered" for t in kids):
            break
        if any(t["status"] == "blocked" for t in kids) or doc["status"] != "active":
            raise SystemExit(f"run did not deliver: {json.dumps(doc, indent=1)}")
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.25)
    return cpu_ticks(pid), time.perf_counter() - started


def one_run(root: Path, n: int, env: dict[str, str]) -> tuple[float, list[float], list[float], float]:
    repo = root / f"repo{n}"
    git(root, "init", "-q", "-b", "main", str(repo), env=env)
    (repo / ".agentops").mkdir()
    (repo / ".agentops" / "policy.toml").write_text(
        'version = 1\n[run]\nmax_workers = 4\n[[verify.commands]]\nid = "noop"\nargv = ["true"]\n'
    )
    (repo / "src").mkdir()
    (repo / "src" / "base.txt").write_text("base\n")
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-qm", "init", env=env)
    assert git(repo, "agentops-policy", "trust", "--yes", env=env).returncode == 0
    (root / f"recipe{n}.toml").write_text(recipe(n))
    started = time.perf_counter()
    done = git(
        repo,
        "agentops-run",
        "start",
        "--goal",
        f"bench {n}",
        "--recipe",
        str(root / f"recipe{n}.toml"),
        "--detach",
        "--json",
        env=env,
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    run_id = json.loads(done.stdout)["runId"]
    pid = int((repo / ".git" / "agentops" / "runs" / run_id / "supervisor.pid").read_text())
    try:
        ticks, wall = _wait_delivered(repo, run_id, n, pid, started, env)
    except BaseException:
        git(repo, "agentops-run", "stop", run_id, env=env)  # never leave a supervisor and its agents behind
        raise
    git(repo, "agentops-run", "stop", run_id, env=env)
    for _ in range(200):  # let the supervisor stop its workers and exit before the next run starts
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    plan_latencies: list[float] = []
    handoff_latencies: list[float] = []
    for log in (repo / ".git" / "worktrees").glob("*/agentops/host-*.log"):
        for code, ms in TIMING.findall(log.read_text(errors="replace")):
            (handoff_latencies if code == "RUN_WORKER_DELIVERED" else plan_latencies).append(float(ms))
    cpu_ms = ticks * 1000 / os.sysconf("SC_CLK_TCK")
    return cpu_ms, plan_latencies, handoff_latencies, wall


def sandbox_start(root: Path, env: dict[str, str], rounds: int, argv: list[str]) -> dict[str, float]:
    """Median seconds of one agent start: direct; under the launcher with mode none (only the reaper); with
    Landlock alone; and with the whole sandbox (its own namespaces, Landlock inside, quarantine and private HOME)."""
    from git_agentops.sandbox.plan import for_worker, kernel_abi, namespace_problem

    repo = root / "sandbox-repo"
    worktree = root / "sandbox-worktree"
    if not repo.exists():
        git(root, "init", "-q", "-b", "main", str(repo), env=env)
        (repo / "f.txt").write_text("f\n")
        git(repo, "add", "f.txt", env=env)
        git(repo, "commit", "-q", "-m", "f", env=env)
        git(repo, "worktree", "add", "-q", "--detach", str(worktree), env=env)
    admin = next((repo / ".git" / "worktrees").iterdir())
    times: dict[str, list[float]] = {"direct": [], "namespace": [], "landlock": [], "none": []}

    def launch(mode: str) -> None:
        command = argv
        if mode != "direct":
            box = for_worker(
                mode=mode,
                reason=None,
                worktree=worktree,
                admin_dir=admin,
                common_dir=repo / ".git",
                environ=env,
                signing_key=None,
                host_writable=["~/.cache"],
                policy_writable=[],
                deny_read=[],
                recipe=None,
            )
            command = box.wrap(argv, worktree, root / f"spec-{mode}.json")
        subprocess.run(command, cwd=worktree, env=env, capture_output=True, check=False)

    modes = ["direct", "landlock", "none"] if kernel_abi() >= 1 else ["direct", "none"]
    if kernel_abi() >= 1 and namespace_problem() is None:
        modes.insert(1, "namespace")
    for _ in range(rounds):  # interleaved: every mode sees the same machine
        for mode in modes:
            began = time.perf_counter()
            launch(mode)
            times[mode].append(time.perf_counter() - began)
    return {mode: statistics.median(values) if values else float("nan") for mode, values in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="1,8,32")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--sandbox-rounds", type=int, default=21)
    args = parser.parse_args()
    if shutil.which("git-agentops-run") is None:
        raise SystemExit("git-agentops-run is not on PATH: install the project (pip install -e .) first")
    sizes = [int(x) for x in args.sizes.split(",")]
    results = {}
    with tempfile.TemporaryDirectory(prefix="agentops-run-bench-", dir=args.dir) as tmp:
        env = {**ENV, "XDG_STATE_HOME": str(Path(tmp) / "state"), "AGENTOPS_TIMING": "1"}
        for n in sizes:
            results[n] = one_run(Path(tmp), n, env)
        starts = {
            "scripted agent": sandbox_start(
                Path(tmp), env, args.sandbox_rounds, [sys.executable, "-m", "git_agentops.cli.agent"]
            ),
        }
        if shutil.which("node"):  # the runtime of Claude Code and opencode, before they load their own code
            starts["node -e 0"] = sandbox_start(Path(tmp), env, args.sandbox_rounds, ["node", "-e", "0"])
    print(f"{'tasks':>6}{'wall s':>9}{'sup CPU ms':>12}{'CPU/task ms':>13}{'req p50 ms':>12}{'req p95 ms':>12}")
    all_requests: list[float] = []
    for n, (cpu, plans, _handoffs, wall) in results.items():
        all_requests += plans
        p50_n = statistics.median(plans) if plans else float("nan")
        p95_n = sorted(plans)[min(len(plans) - 1, round(0.95 * (len(plans) - 1)))] if plans else float("nan")
        print(f"{n:>6}{wall:>9.1f}{cpu:>12.0f}{cpu / n:>13.1f}{p50_n:>12.1f}{p95_n:>12.1f}")
    if len(sizes) > 1:
        (a, ca), (b, cb) = (sizes[-2], results[sizes[-2]][0]), (sizes[-1], results[sizes[-1]][0])
        print(
            f"marginal supervisor CPU per extra task between {a} and {b} tasks: {(cb - ca) / (b - a):.1f} ms "
            "(the first run also pays start-up: imports, policy binding, the coordinator's worktree)"
        )
    first, last = sizes[0], sizes[-1]
    p50 = statistics.median(all_requests) if all_requests else float("nan")
    print(f"requests answered directly by the supervisor: {len(all_requests)}; p50 {p50:.1f} ms (target < 250)")
    for name, row in starts.items():
        print(
            f"agent start, {name} (median of {args.sandbox_rounds}): direct {row['direct'] * 1000:.1f} ms; "
            f"launcher, no wall {row['none'] * 1000:.1f} ms; Landlock alone {row['landlock'] * 1000:.1f} ms; "
            f"namespaces + Landlock {row['namespace'] * 1000:.1f} ms -> whole sandbox "
            f"{row['namespace'] / row['none']:.2f}x, Landlock alone {row['landlock'] / row['none']:.2f}x, "
            f"launcher + whole sandbox {row['namespace'] / row['direct']:.2f}x"
        )
    scripted = starts["scripted agent"]
    ratio = scripted["namespace"] / scripted["none"]
    landlock = scripted["landlock"] / scripted["none"]
    whole = scripted["namespace"] / scripted["direct"]
    print(
        f"sandbox (namespaces + Landlock) cost per agent start: {ratio:.2f}x (target <= 1.2) -> "
        f"{'ok' if ratio <= 1.2 else 'MISSED'}"
    )
    print(
        f"run_overhead request_response_p50_ms={p50:.0f} cpu_per_task_ms_1={results[first][0] / first:.0f} "
        f"cpu_per_task_ms_32={results[last][0] / last:.0f} sandbox_start_ratio={ratio:.2f} "
        f"landlock_start_ratio={landlock:.2f} launcher_start_ratio={whole:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
