#!/usr/bin/env python3
"""Benchmark of the installed hook shims on git's hot paths, hyperfine-style: N timed runs each, p50 and p95.

Hooks run on every commit and every ref update, so what they cost is paid all day; DESIGN §9 asks that on the fast
path they cost little more than starting Python. Everything runs in a scratch directory with its own HOME, git
config and XDG dirs. The shims are installed by ``git agentops-init --hooks --yes`` and each one is invoked the way
git invokes it (measured, not assumed: cwd = top of the worktree, ``$0`` = ``.git/hooks/<name>`` in the main
worktree and absolute in a linked one, ``GIT_INDEX_FILE`` for pre-commit, ``GIT_DIR`` = the admin dir of a linked
worktree), so only the hook is timed, not the rest of ``git commit``:

* ``python3 -c pass`` -- the floor (the interpreter the shims fall back to, i.e. the toolkit's own);
* ``pre-commit`` outside a run worktree, with nothing staged and with one small staged file;
* ``pre-commit`` inside a real run worktree: a run is started with the scripted agent (``--detach``), its child
  worker sleeps, and the hook runs in that worker's checkout with the worker's environment (``AGENTOPS_RUN_ID``,
  ``AGENTOPS_WORKER_ID``, ``AGENTOPS_GENERATION``, ``AGENTOPS_MAILBOX``), its ``$GIT_DIR/agentops/worktree.json``
  present, one small file staged;
* ``reference-transaction prepared`` for an unrelated ref (the shim must not start Python at all) and, for
  reference, for a ``refs/agentops/`` ref (it must);
* the pre-commit framework's installed ``pre-commit`` hook with a single no-op ``repo: local`` hook
  (``language: system``, ``entry: true``), installed into a scratch venv with pip. If that fails the ratio is nan;
* the agent guard, ``git agentops-hook agent-command --host claude``, as Claude Code runs it before every Bash
  call: in a worktree, with a typical ``PreToolUse`` JSON on stdin (``git add -A && git commit -m ...``), once
  through ``git`` and once as ``python -I -m git_agentops.cli.hook`` (what ``hook_entry`` writes). The host's own
  ``sh -c`` around it is not counted.

Targets: outside a run worktree within 25 ms of ``python3 -c pass`` at p50; inside one under 200 ms; both faster
than the pre-commit framework's no-op; the agent guard at most 60 ms at p50. "Outside" is the slower of the two
outside cases.
Last line: ``hooks outside_minus_python_ms=<n> inside_ms=<n> speedup_vs_precommit=<x> agent_command_ms=<n>``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ZERO = "0" * 40
HOOK_MODULE = "git_agentops.cli.hook"
SCRIPTS = os.path.dirname(sys.executable)  # git-agentops-* next to this interpreter
RECIPE = """[plan]
title = "Bench hooks"
intent = "hold a worker in its worktree"
criteria = ["a worker runs", "the hook is timed"]
[coordinator]
finalize = false
[[tasks]]
name = "hold"
title = "Hold"
intent = "sleep in the worktree while the hook is timed"
criteria = ["sleeps"]
[[tasks.attempts]]
steps = [{ sleep = 900 }]
"""
PRE_COMMIT_CONFIG = """repos:
  - repo: local
    hooks:
      - id: noop
        name: no-op
        language: system
        entry: "true"
        always_run: true
        pass_filenames: false
"""


@dataclass(frozen=True)
class Timing:
    label: str
    p50: float
    p95: float
    status: int
    stderr: str


def scratch_env(root: Path) -> dict[str, str]:
    home = root / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "AGENTOPS_", "PRE_COMMIT"))}
    dirs = {
        "HOME": home,
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_STATE_HOME": home / ".local" / "state",
        "XDG_CACHE_HOME": home / ".cache",
        "XDG_DATA_HOME": home / ".local" / "share",
        "PRE_COMMIT_HOME": home / ".cache" / "pre-commit",
    }
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    env.update({k: str(v) for k, v in dirs.items()})
    (home / ".gitconfig").write_text(
        "[user]\n\tname = bench\n\temail = bench@example.invalid\n[init]\n\tdefaultBranch = main\n"
        "[commit]\n\tgpgsign = false\n[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n"
    )
    env.update(
        {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"),
            "GIT_TERMINAL_PROMPT": "0",
            "PATH": os.pathsep.join([SCRIPTS, env.get("PATH", "")]),
        }
    )
    return env


def run(argv: Sequence[str], cwd: Path, env: Mapping[str, str], *, timeout: float = 120) -> str:
    done = subprocess.run(
        list(argv), cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout.strip()


def time_runs(
    label: str,
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stdin: bytes = b"",
    runs: int,
    warmup: int,
) -> Timing:
    times = []
    status, stderr = 0, b""
    for i in range(warmup + runs):
        started = time.perf_counter()
        done = subprocess.run(
            list(argv),
            cwd=cwd,
            env=dict(env),
            input=stdin,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            check=False,
        )
        elapsed = (time.perf_counter() - started) * 1000
        if i >= warmup:
            times.append(elapsed)
        status, stderr = done.returncode, done.stderr
    times.sort()
    p95 = times[max(0, math.ceil(0.95 * len(times)) - 1)]
    return Timing(label, statistics.median(times), p95, status, stderr.decode(errors="replace").strip())


def repo(root: Path, env: Mapping[str, str], name: str) -> Path:
    path = root / name
    run(["git", "init", "-q", "-b", "main", str(path)], root, env)
    (path / "README.md").write_text("bench\n")
    run(["git", "add", "-A"], path, env)
    run(["git", "commit", "-q", "-m", "init"], path, env)
    return path


def hook_env(env: Mapping[str, str], *, index: str, git_dir: str | None = None) -> dict[str, str]:
    """What git adds to a pre-commit hook's environment (GIT_DIR only in a linked worktree)."""
    extra = {"GIT_INDEX_FILE": index, "GIT_PREFIX": "", "GIT_EDITOR": ":"}
    if git_dir:
        extra["GIT_DIR"] = git_dir
    return {**env, **extra}


def outside(root: Path, env: Mapping[str, str], runs: int, warmup: int) -> list[Timing]:
    path = repo(root, env, "plain")
    run(["git", "agentops-init", "--hooks", "--yes"], path, env)
    hook = [".git/hooks/pre-commit"]
    hook_environment = hook_env(env, index=".git/index")
    out = [
        time_runs(
            "pre-commit, outside a run worktree, nothing staged",
            hook,
            cwd=path,
            env=hook_environment,
            runs=runs,
            warmup=warmup,
        )
    ]
    (path / "small.txt").write_text("a small change\n")
    run(["git", "add", "small.txt"], path, env)
    out.append(
        time_runs(
            "pre-commit, outside a run worktree, one staged file",
            hook,
            cwd=path,
            env=hook_environment,
            runs=runs,
            warmup=warmup,
        )
    )
    head = run(["git", "rev-parse", "HEAD"], path, env)
    refs = [".git/hooks/reference-transaction", "prepared"]
    out.append(
        time_runs(
            "reference-transaction prepared, unrelated ref",
            refs,
            cwd=path,
            env=env,
            stdin=f"{ZERO} {head} refs/heads/x\n".encode(),
            runs=runs,
            warmup=warmup,
        )
    )
    out.append(
        time_runs(
            "reference-transaction prepared, refs/agentops/ ref",
            refs,
            cwd=path,
            env=env,
            stdin=f"{ZERO} {head} refs/agentops/runs/r/state\n".encode(),
            runs=runs,
            warmup=warmup,
        )
    )
    return out


def _wait_for_worker(path: Path, env: Mapping[str, str], run_id: str) -> dict[str, object]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        doc = json.loads(run(["git", "agentops-run", "status", run_id, "--json"], path, env))
        for worker in doc["workers"]:
            if worker["role"] == "child" and worker["status"] == "running" and worker.get("worktree"):
                return dict(worker)
        if doc["status"] not in ("active",):
            raise SystemExit(f"the run stopped before its worker ran: {json.dumps(doc, indent=1)}")
        time.sleep(0.25)
    raise SystemExit("timed out waiting for the run's worker")


def _stop(path: Path, env: Mapping[str, str], run_id: str) -> None:
    pid_file = path / ".git" / "agentops" / "runs" / run_id / "supervisor.pid"
    subprocess.run(["git", "agentops-run", "stop", run_id], cwd=path, env=dict(env), capture_output=True, check=False)
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return
    for _ in range(300):  # the supervisor stops its workers, then exits
        try:
            os.kill(pid, 0)
        except OSError:
            return
        time.sleep(0.1)


def inside(root: Path, env: Mapping[str, str], runs: int, warmup: int) -> Timing:
    path = root / "project"
    run(["git", "init", "-q", "-b", "main", str(path)], root, env)
    (path / ".agentops").mkdir()
    (path / ".agentops" / "policy.toml").write_text(
        'version = 1\n[run]\nmax_workers = 2\n[[verify.commands]]\nid = "noop"\nargv = ["true"]\n'
    )
    (path / "README.md").write_text("bench\n")
    run(["git", "add", "-A"], path, env)
    run(["git", "commit", "-q", "-m", "init"], path, env)
    run(["git", "agentops-policy", "trust", "--yes"], path, env)
    (root / "recipe.toml").write_text(RECIPE)
    started = run(
        [
            "git",
            "agentops-run",
            "start",
            "--goal",
            "bench hooks",
            "--recipe",
            str(root / "recipe.toml"),
            "--detach",
            "--json",
        ],
        path,
        env,
    )
    run_id = str(json.loads(started)["runId"])
    try:
        worker = _wait_for_worker(path, env, run_id)
        run(["git", "agentops-init", "--hooks", "--yes"], path, env)
        worktree = Path(str(worker["worktree"]))
        admin = Path(run(["git", "rev-parse", "--absolute-git-dir"], worktree, env))
        if not (admin / "agentops" / "worktree.json").is_file():
            raise SystemExit(f"{admin}/agentops/worktree.json is missing: not a run worktree")
        (worktree / "small.txt").write_text("a small change\n")
        run(["git", "add", "small.txt"], worktree, env)
        worker_env = hook_env(env, index=str(admin / "index"), git_dir=str(admin))
        worker_env.update(
            {
                "AGENTOPS_RUN_ID": run_id,
                "AGENTOPS_WORKER_ID": str(worker["workerId"]),
                "AGENTOPS_GENERATION": str(worker["generation"]),
                "AGENTOPS_MAILBOX": str(worktree / ".agentops" / "mailbox"),
            }
        )
        common_hook = str(path / ".git" / "hooks" / "pre-commit")  # git runs it by absolute path from a worktree
        return time_runs(
            "pre-commit, inside a run worktree, one staged file",
            [common_hook],
            cwd=worktree,
            env=worker_env,
            runs=runs,
            warmup=warmup,
        )
    finally:
        _stop(path, env, run_id)


def agent_command(root: Path, env: Mapping[str, str], runs: int, warmup: int) -> list[Timing]:
    """The agent guard on a typical Claude Code ``PreToolUse`` call, the whole process each time."""
    path = repo(root, env, "agent")
    event = {
        "session_id": "0b1c2d3e-0000-4000-8000-000000000000",
        "transcript_path": str(root / "transcript.jsonl"),
        "cwd": str(path),
        "permission_mode": "acceptEdits",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": 'git add -A && git commit -m "Add the parser"', "description": "Commit the work"},
        "tool_use_id": "toolu_01ABC",
    }
    stdin = json.dumps(event).encode()
    out = []
    for label, argv in (
        ("agent-command (git agentops-hook), Claude PreToolUse JSON", ["git", "agentops-hook"]),
        ("agent-command (python -I -m git_agentops.cli.hook), same JSON", [sys.executable, "-I", "-m", HOOK_MODULE]),
    ):
        timing = time_runs(
            label,
            [*argv, "agent-command", "--host", "claude"],
            cwd=path,
            env=env,
            stdin=stdin,
            runs=runs,
            warmup=warmup,
        )
        out.append(timing)
    return out


def precommit_framework(
    root: Path, env: Mapping[str, str], runs: int, warmup: int, venv: Path | None
) -> tuple[Timing | None, str]:
    """The pre-commit framework's own installed hook with one no-op hook; (None, why) when it cannot be had."""
    if venv is None:
        venv = root / "pre-commit-venv"
        try:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
            pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
            # pip runs in the caller's own environment: its pip.conf and index settings apply
            done = subprocess.run([*pip, "pre-commit"], capture_output=True, text=True, timeout=600, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"pre-commit could not be installed: {exc}"
        if done.returncode != 0:
            return None, f"pre-commit could not be installed: {done.stderr.strip().splitlines()[-1:]}"
    exe = venv / "bin" / "pre-commit"
    if not exe.exists():
        return None, f"no pre-commit in {venv}"
    version = run([str(exe), "--version"], root, env)
    manifest = subprocess.run(
        [str(exe), "validate-manifest", str(Path(__file__).resolve().parents[1] / ".pre-commit-hooks.yaml")],
        cwd=root,
        env=dict(env),
        capture_output=True,
        text=True,
        check=False,
    )
    note = f"{version}; our .pre-commit-hooks.yaml: {'valid' if manifest.returncode == 0 else manifest.stdout}"
    path = repo(root, env, "framework")
    (path / ".pre-commit-config.yaml").write_text(PRE_COMMIT_CONFIG)
    run(["git", "add", ".pre-commit-config.yaml"], path, env)
    run(["git", "commit", "-q", "-m", "pre-commit config"], path, env)
    run([str(exe), "install", "--hook-type", "pre-commit"], path, env)
    (path / "small.txt").write_text("a small change\n")
    run(["git", "add", "small.txt"], path, env)
    timing = time_runs(
        "pre-commit framework, no-op hook, one staged file",
        [".git/hooks/pre-commit"],
        cwd=path,
        env=hook_env(env, index=".git/index"),
        runs=runs,
        warmup=warmup,
    )
    return timing, note


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=40, help="timed runs per case (default 40)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    parser.add_argument("--pre-commit-venv", type=Path, help="a venv with pre-commit installed (default: make one)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="agentops-bench-hooks-"))
    try:
        env = scratch_env(root)
        python = shutil.which("python3", path=env["PATH"]) or sys.executable
        rows = [
            time_runs(
                f"python3 -c pass ({python})",
                [python, "-c", "pass"],
                cwd=root,
                env=env,
                runs=args.runs,
                warmup=args.warmup,
            )
        ]
        rows += outside(root, env, args.runs, args.warmup)
        rows.append(inside(root, env, args.runs, args.warmup))
        rows += agent_command(root, env, args.runs, args.warmup)
        framework, note = precommit_framework(root, env, args.runs, args.warmup, args.pre_commit_venv)
        if framework is not None:
            rows.append(framework)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"hooks benchmark: {args.runs} runs per case after {args.warmup} warm-up runs; times in ms")
    print(f"  {'case':<62} {'p50':>8} {'p95':>8}  exit")
    for row in rows:
        print(f"  {row.label[:62]:<62} {row.p50:8.1f} {row.p95:8.1f}  {row.status}")
        if row.status != 0 and row.stderr:
            print(f"  {'':<62} stderr: {row.stderr.splitlines()[-1][:200]}")
    print(f"pre-commit framework: {note}")
    if args.keep:
        print(f"scratch directory kept: {root}")
    by = {row.label: row for row in rows}
    python_p50 = rows[0].p50
    ours = max(
        by["pre-commit, outside a run worktree, nothing staged"].p50,
        by["pre-commit, outside a run worktree, one staged file"].p50,
    )
    inside_p50 = by["pre-commit, inside a run worktree, one staged file"].p50
    speedup = framework.p50 / ours if framework is not None else math.nan
    verdict = {True: "ok", False: "MISSED"}
    print(
        f"target: outside within 25 ms of python3 -c pass: {ours - python_p50:+.1f} ms -> "
        f"{verdict[ours - python_p50 <= 25]}"
    )
    print(f"target: inside a run worktree under 200 ms: {inside_p50:.1f} ms -> {verdict[inside_p50 < 200]}")
    if framework is None:
        print("target: faster than the pre-commit framework's no-op: not measured (see above)")
    else:
        both = max(ours, inside_p50) < framework.p50
        print(f"target: both faster than the pre-commit framework's no-op ({framework.p50:.1f} ms): {verdict[both]}")
    guard_p50 = by["agent-command (git agentops-hook), Claude PreToolUse JSON"].p50
    print(
        f"target: agent-command at most 60 ms at p50: {guard_p50:.1f} ms ({guard_p50 - python_p50:+.1f} ms over "
        f"python3 -c pass) -> {verdict[guard_p50 <= 60]}"
    )
    last = f"outside_minus_python_ms={ours - python_p50:.1f} inside_ms={inside_p50:.1f}"
    print(f"hooks {last} speedup_vs_precommit={speedup:.2f} agent_command_ms={guard_p50:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
