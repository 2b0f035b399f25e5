#!/usr/bin/env python3
"""Benchmark of the merge queue: N runs finalizing together on one target, without the queue and with it.

Two scratch projects, one after the other in this process run, identical but for ``[queue]``:

* **off** -- today's integration: each run builds its candidate on the target's tip, verifies it, moves the target
  by compare-and-swap, and rebuilds and verifies again when another run published first (at most three times; then
  its finalize is refused with ``RUN_TARGET_CONTENDED`` and the scripted coordinator, restarted, finalizes again);
* **on** -- ``[queue] enabled = true, parallel = P`` (default 2): the runs enqueue, one supervisor holding the
  queue's lease verifies P speculative candidates at once and publishes the verified prefix by one CAS.

In each, N runs are started back to back (``git agentops-run start --recipe R --detach --json``, one process after
the other; ``--start concurrent``: all at once); each run has a child task writing ``src/rN.txt`` (no two runs
conflict) and its coordinator finalizes once its children are delivered.

**The barrier.** A start costs 1.5-2.5 s of a loaded core, so runs started back to back would finalize spread over
as many seconds -- not the issue's "N runs finalizing within seconds of each other". So the runs wait for each
other at a barrier: a ``run`` step of a child's recipe (``python3 -c BARRIER_PY``, in its worktree, unconfined
under ``[sandbox] mode = "none"``) first creates ``barrier/ready-rN`` in the mode's scratch directory, then polls
every 50 ms for ``barrier/go``, and writes ``barrier/released-rN`` (the time it saw it) when it does. The bench
creates ``go`` once all N ``ready-*`` exist (or a run left ``active``, or the timeout), identically in both modes.
Where the runs wait (``--barrier``):

* ``finalize`` (default) -- after the handoff: the child writes, commits and hands off (its verification in the
  start phase); a second child, ``Gate rN``, depending on it, waits at the barrier and hands off its base, the
  first one's delivery (a no-change delivery naming ``src/rN.txt``: its tree's evidence is reused, nothing runs).
  The coordinator finalizes as soon as the gate is delivered: the N finalizes come within a second of the barrier;
* ``handoff`` -- before the handoff: the one child writes, commits, waits, then hands off. The N handoff
  verifications then run after the barrier in the same ``[run] max_verifications`` slots (default: the number of
  cores) as the candidates, and spread the finalizes over about N / slots verification times (8-13 s for 8 runs
  of 2 s on 2 cores).

The **start phase** (first start -> barrier) is reported apart; it is not in the wall time. The bench waits until
every run is complete (its state read in this process every 0.5 s: what ``git agentops-run status --json``
prints), or left ``active`` otherwise (blocked, paused...), or the timeout. How close together the runs asked to
finalize (their first ``INTEGRATION_REQUESTED``) is printed per mode.

**Counting verifications.** The project's only verification command is ``python3 check.py``: it sleeps
``--verify-seconds``, then appends one line to a counter file outside the repository (written with one ``O_APPEND``
write): ``candidate`` when the checked-out commit is a merge (``git rev-parse --verify -q HEAD^2``: a candidate is
one merge commit per delivery on the target's tip), else ``handoff`` (a child's delivery, verified at its
handoff). Only executions count -- evidence the supervisor reuses for an identical tree runs nothing. Candidate
executions per published run are the figure compared; handoffs (one per run in both modes) are reported beside
them. The verification command writes outside its clean checkout, which the default sandbox forbids, so both
projects run with ``[sandbox] mode = "none"`` (agents and commands unconfined: a throughput benchmark, equal in
both modes).

**Wall time** is from the barrier's creation to the last run's ``integration.publishedAt`` (when the target moved
to its candidate; the receipt and completion follow). With ``--barrier handoff`` it includes the N handoff
verifications, in both modes.

Everything runs under a private HOME, XDG dirs and git config with a fixed identity (never the real ones); the
supervisors are plain detached processes (``AGENTOPS_SUPERVISOR_MANAGER=process``). A run left active at the end
is stopped (``git agentops-run stop``). The scratch repository's HEAD is detached, so no publish brings a checkout
of ``main`` along: with one, concurrent publishes without the queue race (a run checking the checkout between
another's compare-and-swap and its update of the checkout sees it dirty and blocks,
``RUN_TARGET_CHECKED_OUT_DIRTY``). Targets (the issue): verifications per published run at least 3x fewer
with the queue, wall time at least 2x less, with ``parallel = 2`` on 2 cores.

Usage: ``python bench/mergequeue.py [--runs N] [--verify-seconds S] [--parallel P] [--start process|concurrent]
[--barrier finalize|handoff] [--timeout S] [--dir DIR] [--keep]``. Exits 1 when a mode did not publish all N runs
within the timeout of its first start (saying which). Last line: ``queue runs=<n> parallel=<p>
verifications_off=<x> verifications_on=<x> verifications_ratio=<x> wall_off_s=<s> wall_on_s=<s> wall_ratio=<x>
published_off=<n> published_on=<n> start_off_s=<s> start_on_s=<s> spread_off_s=<s> spread_on_s=<s>
handoffs_off=<n> handoffs_on=<n>`` (verifications: candidate executions per published run; ratios off/on; start:
first start -> barrier; spread: first to last run's first finalize request; handoffs: handoff verifications
executed).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _clean_checkout import hermetic_env, seal
from benchenv import git

POLL = 0.5
"""Seconds between two reads of the runs' states."""

CHECK_PY = """import os, subprocess, sys, time
started = time.time()
time.sleep({seconds!r})
merged = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD^2"], capture_output=True).returncode == 0
head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
line = f"{{'candidate' if merged else 'handoff'}} {{head}} {{started:.3f}} {{time.time():.3f}}\\n"
fd = os.open({counter!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
try:
    os.write(fd, line.encode())
finally:
    os.close(fd)
print("verified", head, "as a", "candidate" if merged else "delivery")
"""

POLICY = """version = 1
[run]
target = "main"
max_workers = 2
[[verify.commands]]
id = "check"
argv = ["python3", "check.py"]
timeout = {timeout}
[sandbox]
mode = "none"
"""

QUEUE = """[queue]
enabled = true
parallel = {parallel}
"""

BARRIER_PY = """import os, sys, time
ready, go, released, limit = sys.argv[1:5]
open(ready, "a").close()  # "a": a restarted generation replays the step
deadline = time.monotonic() + float(limit)
while not os.path.exists(go):
    if time.monotonic() > deadline:
        sys.exit(f"no {go} after {limit} s")
    time.sleep(0.05)
seen = time.time()
with open(released, "a") as out:
    out.write(f"{seen:.3f}\\n")
print("released at", seen)
"""
"""The child's barrier step: ``python3 -c BARRIER_PY READY GO RELEASED LIMIT`` (see the module docstring)."""

RECIPE = """[plan]
title = "Bench {name}"
intent = "Write src/{name}.txt"
criteria = ["src/{name}.txt exists", "check passes"]

[coordinator]
finalize = true

[[tasks]]
name = "{name}"
title = "Part {name}"
intent = "Write src/{name}.txt"
criteria = ["done"]
"""

WAIT_THEN_HANDOFF = """
[[tasks.attempts]]
steps = [
  {{ write = "src/{name}.txt", content = "{name}\\n" }},
  {{ commit = "Add {name}" }},
  {{ run = {barrier}, timeout = {barrier_timeout} }},
  {{ request = "handoff" }},
]
"""
"""``--barrier handoff``: the child commits, waits at the barrier, hands off."""

HANDOFF_THEN_GATE = """
[[tasks.attempts]]
steps = [{{ write = "src/{name}.txt", content = "{name}\\n" }}, {{ commit = "Add {name}" }}, {{ request = "handoff" }}]

[[tasks]]
name = "gate"
title = "Gate {name}"
intent = "Wait at the bench's barrier"
criteria = ["src/{name}.txt is there"]
depends_on = ["{name}"]

[[tasks.attempts]]
steps = [
  {{ run = {barrier}, timeout = {barrier_timeout} }},
  {{ request = "handoff", source_files = ["src/{name}.txt"] }},
]
"""
"""``--barrier finalize``: the child commits and hands off; a second child, started from its delivery, waits at the
barrier and hands off that same commit (no change: nothing to merge, its tree's evidence reused)."""


def recipe(path: Path, name: str, barrier: Path, *, wait: float, where: str) -> Path:
    """Write the recipe of run ``name`` to ``path``: a child waits at most ``wait`` seconds at ``barrier``, before
    the handoff of ``src/<name>.txt`` (``where`` = ``handoff``) or after it (``finalize``)."""
    argv = [
        "python3",
        "-c",
        BARRIER_PY,
        str(barrier / f"ready-{name}"),
        str(barrier / "go"),
        str(barrier / f"released-{name}"),
        f"{wait:g}",
    ]
    # a JSON array of strings is a TOML array of basic strings (the same escapes)
    tail = WAIT_THEN_HANDOFF if where == "handoff" else HANDOFF_THEN_GATE
    path.write_text((RECIPE + tail).format(name=name, barrier=json.dumps(argv), barrier_timeout=int(wait + 60)))
    return path


@dataclass
class Run:
    """One run of a mode, as the bench saw it."""

    name: str
    run_id: str
    doc: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    left: dict[str, Any] | None = None  # its status document when the bench saw it leave ``active``

    @property
    def status(self) -> str:
        return str(self.doc.get("status", "?"))

    @property
    def integration(self) -> dict[str, Any]:
        return dict(self.doc.get("integration") or {})

    @property
    def published_at(self) -> float | None:
        value = self.integration.get("publishedAt")
        return float(value) if value is not None and self.status == "complete" else None

    def first(self, code: str) -> float | None:
        """When the run's journal first recorded ``code`` (epoch seconds, the supervisor's clock)."""
        return next((float(e["time"]) for e in self.events if e["code"] == code), None)

    def count(self, code: str, **data: str) -> int:
        return sum(1 for e in self.events if e["code"] == code and all(e["data"].get(k) == v for k, v in data.items()))


@dataclass
class Mode:
    """What one mode measured."""

    name: str
    runs: list[Run]
    started: float  # epoch seconds, just before the first run start
    barrier: float  # epoch seconds, just before the barrier was created
    ready: dict[str, float]  # run name -> when its child was at the barrier (its ready file's mtime)
    released: dict[str, float]  # run name -> when its child saw the barrier
    timeout: float  # seconds from ``started``
    timed_out: bool
    verifications: list[tuple[str, str, float, float]]  # (kind, commit, started, ended) per execution
    queue: dict[str, Any] | None

    @property
    def published(self) -> list[Run]:
        """The runs complete whose target moved within the timeout."""
        return [r for r in self.runs if r.published_at is not None and r.published_at <= self.started + self.timeout]

    @property
    def candidate_verifications(self) -> int:
        return sum(1 for kind, *_ in self.verifications if kind == "candidate")

    @property
    def handoff_verifications(self) -> int:
        return sum(1 for kind, *_ in self.verifications if kind == "handoff")

    @property
    def per_published(self) -> float:
        return self.candidate_verifications / len(self.published) if self.published else math.nan

    @property
    def start_phase(self) -> float:
        """Seconds from the first start to the barrier."""
        return self.barrier - self.started

    @property
    def wall(self) -> float:
        """Seconds from the barrier to the last publish."""
        times = [r.published_at for r in self.published if r.published_at is not None]
        return max(times) - self.barrier if times else math.nan

    @property
    def finalizes(self) -> list[float]:
        """When each run first asked to finalize (its first ``INTEGRATION_REQUESTED``), epoch seconds."""
        return [at for r in self.runs if (at := r.first("INTEGRATION_REQUESTED")) is not None]

    @property
    def spread(self) -> float:
        """Seconds between the first and the last run's first finalize request."""
        return max(self.finalizes) - min(self.finalizes) if self.finalizes else math.nan

    @property
    def all_published(self) -> bool:
        return len(self.published) == len(self.runs)


def environment(root: Path) -> dict[str, str]:
    """The private environment every process of the bench gets (and this one, for its in-process reads)."""
    home = root / "home"
    home.mkdir(parents=True)
    env = hermetic_env(home, {k: v for k, v in os.environ.items() if not k.startswith("AGENTOPS_")})
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["AGENTOPS_SUPERVISOR_MANAGER"] = "process"  # never a unit of a user systemd manager
    env["LC_ALL"] = "C.UTF-8"
    env.pop("PYTHONPATH", None)
    return env


def project(root: Path, env: dict[str, str], *, verify_seconds: float, parallel: int | None) -> Path:
    """A trusted project whose verification command counts its executions in ``root/verifications.log``; its HEAD
    is detached (at the initial commit), so no publish has a checkout of the target to bring along."""
    repo = root / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main", env=env)
    counter = root / "verifications.log"
    (repo / "check.py").write_text(CHECK_PY.format(seconds=verify_seconds, counter=str(counter)))
    (repo / "src").mkdir()
    (repo / "src" / "base.txt").write_text("hello\n")
    (repo / ".gitignore").write_text("__pycache__/\n")
    policy = POLICY.format(timeout=int(60 + 4 * verify_seconds))
    if parallel is not None:
        policy += QUEUE.format(parallel=parallel)
    (repo / ".agentops").mkdir()
    (repo / ".agentops" / "policy.toml").write_text(policy)
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-qm", "Initial commit", env=env)
    agentops(repo, env, "agentops-policy", "trust", "--yes")
    # no checkout of the target: with one, concurrent publishes without the queue race (a run may see the checkout
    # that another run's publish has not brought along yet as dirty, and block: RUN_TARGET_CHECKED_OUT_DIRTY)
    git(repo, "checkout", "-q", "--detach", env=env)
    return repo


def agentops(repo: Path, env: dict[str, str], *args: str, timeout: float = 120) -> str:
    """``git ARGS`` (a toolkit command, as a process); its stdout. Exits with its output when it fails."""
    done = subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def read_state(repo: Path, run_id: str) -> dict[str, Any]:
    """The run's status document, read in this process (what ``git agentops-run status --json`` prints)."""
    from git_agentops.clock import SystemClock
    from git_agentops.gitstore.repo import open_store
    from git_agentops.runs.controls import summary

    clock = SystemClock()
    return dict(summary(open_store(repo, clock=clock), run_id, clock))


def supervisor_running(repo: Path, run_id: str) -> bool:
    """Whether the run's supervisor still holds its lock (as ``tests/runkit.py`` asks)."""
    lock = repo / ".git" / "agentops" / "runs" / run_id / "supervisor.lock"
    if not lock.exists():
        return False
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def wait_supervisors_gone(repo: Path, runs: list[Run], timeout: float = 90) -> list[str]:
    """Until every run's supervisor exited; the names of those still running at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        left = [r.name for r in runs if supervisor_running(repo, r.run_id)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def stop_left(repo: Path, env: dict[str, str], runs: list[Run]) -> list[str]:
    """``git agentops-run stop`` each run not complete, then wait for every supervisor (a complete run's exits by
    itself); the names stopped."""
    stopped = []
    for run in runs:
        with contextlib.suppress(Exception):  # a state that cannot be read: stop it anyway
            run.doc = read_state(repo, run.run_id)
        if run.status != "complete":
            done = subprocess.run(
                ["git", "agentops-run", "stop", run.run_id],
                cwd=repo,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            stopped.append(run.name)
            if done.returncode != 0:
                print(f"  'git agentops-run stop' of {run.name} failed ({done.returncode}): {done.stderr.strip()}")
    left = wait_supervisors_gone(repo, runs)
    if left:
        print(f"  warning: the supervisors of {', '.join(left)} are still running", file=sys.stderr)
    return stopped


def start(repo: Path, env: dict[str, str], recipes: list[Path], runs: list[Run], *, how: str) -> None:
    """``git agentops-run start --goal G --recipe R --detach --json`` per recipe, each run appended to ``runs`` as
    soon as it started (so that a failure leaves the others to stop): ``process`` one process after the other,
    ``concurrent`` all the processes at once."""
    argvs = [["start", "--goal", f"Bench {r.stem}", "--recipe", str(r), "--detach", "--json"] for r in recipes]
    if how == "process":
        for recipe, argv in zip(recipes, argvs, strict=True):
            runs.append(Run(recipe.stem, str(json.loads(agentops(repo, env, "agentops-run", *argv))["runId"])))
        return
    procs = [
        subprocess.Popen(
            ["git", "agentops-run", *argv], cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for argv in argvs
    ]
    errors = []
    for recipe, proc in zip(recipes, procs, strict=True):
        out, err = proc.communicate(timeout=300)
        if proc.returncode == 0:
            runs.append(Run(recipe.stem, str(json.loads(out)["runId"])))
        else:
            errors.append(f"{recipe.stem} ({proc.returncode}): {out}{err}")
    if errors:
        raise SystemExit("git agentops-run start failed:\n" + "\n".join(errors))


def poll_states(runs: list[Run], waiting: list[Run], repo: Path, since: float) -> None:
    """Read the state of each run in ``waiting``; drop from it (saying so) those no longer ``active``."""
    for run in list(waiting):
        run.doc = read_state(repo, run.run_id)
        if run.status != "active":
            waiting.remove(run)
            run.left = run.doc
            if run.status != "complete":
                print(f"  {time.time() - since:6.1f} s: {run.name} is {run.status}: {run.doc['statusReason']}")


def wait_ready(repo: Path, runs: list[Run], barrier: Path, deadline: float, started: float) -> list[str]:
    """Until every run's child is at the barrier, a run left ``active`` or the deadline (monotonic); the names of
    the runs whose child is not at it."""
    waiting = list(runs)
    polled = 0.0
    while True:
        missing = [r.name for r in runs if not (barrier / f"ready-{r.name}").exists()]
        if not missing:
            return []
        if time.monotonic() - polled >= 2 * POLL:
            polled = time.monotonic()
            poll_states(runs, waiting, repo, started)
            if len(waiting) < len(runs):
                print("  a run left 'active' before the barrier: releasing the others now", flush=True)
                return missing
        if time.monotonic() > deadline:
            print(f"  timed out waiting at the barrier: {', '.join(missing)} not there", flush=True)
            return missing
        time.sleep(0.05)


def stamps(barrier: Path, prefix: str, runs: list[Run]) -> dict[str, float]:
    """Run name -> the time in ``barrier/<prefix><name>`` (released) or its mtime (ready), for those there."""
    found = {}
    for run in runs:
        path = barrier / f"{prefix}{run.name}"
        with contextlib.suppress(OSError, ValueError):
            text = path.read_text().split()
            found[run.name] = float(text[0]) if text else path.stat().st_mtime
    return found


def measure(
    name: str, root: Path, env: dict[str, str], args: argparse.Namespace, parallel: int | None
) -> tuple[Mode, Path]:
    """Start the runs back to back, release them together at the barrier, wait for them, read what they did; stop
    whatever is left."""
    repo = project(root, env, verify_seconds=args.verify_seconds, parallel=parallel)
    barrier = root / "barrier"
    barrier.mkdir()
    recipes = [
        recipe(root / f"r{i}.toml", f"r{i}", barrier, wait=args.timeout, where=args.barrier) for i in range(args.runs)
    ]
    runs: list[Run] = []
    timed_out = False
    started, deadline = time.time(), time.monotonic() + args.timeout
    released_at = math.nan
    try:
        start(repo, env, recipes, runs, how=args.start)
        print(f"  {len(runs)} runs started in {time.time() - started:.1f} s", flush=True)
        missing = wait_ready(repo, runs, barrier, deadline, started)
        released_at = time.time()
        (barrier / "go").touch()
        print(
            f"  {time.time() - started:6.1f} s: barrier created, {len(runs) - len(missing)}/{len(runs)} children "
            "waiting at it; times below are from it",
            flush=True,
        )
        waiting = [r for r in runs if r.status in ("active", "?")]
        shown = ""
        while waiting:
            poll_states(runs, waiting, repo, released_at)
            states = Counter(
                r.status if r.status != "active" else f"integration {r.integration.get('status', 'none')}" for r in runs
            )
            now = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
            if now != shown:
                print(f"  {time.time() - released_at:6.1f} s: {now}", flush=True)
                shown = now
            if not waiting:
                break
            if time.monotonic() > deadline:
                timed_out = True
                print(f"  timed out after {args.timeout:g} s: {', '.join(r.name for r in waiting)} still active")
                break
            time.sleep(POLL)
    finally:
        stopped = stop_left(repo, env, runs)
    if stopped:
        print(f"  stopped: {', '.join(stopped)}")
    for run in runs:
        run.doc = read_state(repo, run.run_id)  # as the run ended (one stopped may have completed meanwhile)
        log = subprocess.run(
            ["git", "agentops-run", "log", run.run_id, "--json"],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        run.events = list(json.loads(log.stdout)["events"]) if log.returncode == 0 else []
    counted = root / "verifications.log"
    lines = counted.read_text().split("\n") if counted.exists() else []
    verifications = [
        (kind, commit, float(begin), float(end)) for kind, commit, begin, end in (x.split() for x in lines if x)
    ]
    queue_doc = None
    if parallel is not None:  # the queue as its journal holds it now (none when no run got to enqueue)
        held = subprocess.run(
            ["git", "show", "refs/agentops/queue/main:queue.json"], cwd=repo, env=env, capture_output=True, check=False
        )
        queue_doc = dict(json.loads(held.stdout)) if held.returncode == 0 else {"entries": []}
    mode = Mode(
        name,
        runs,
        started,
        released_at,
        stamps(barrier, "ready-", runs),
        stamps(barrier, "released-", runs),
        args.timeout,
        timed_out,
        verifications,
        queue_doc,
    )
    return mode, repo


def run_of(repo: Path, env: dict[str, str], commit: str, ids: dict[str, str]) -> str:
    """The name of the run a candidate commit integrates (its message says ``of run <id>``)."""
    message = git(repo, "show", "-s", "--format=%B", commit, env=env)
    return next((name for run_id, name in ids.items() if run_id in message), "?")


def report(mode: Mode, repo: Path, env: dict[str, str]) -> None:
    """What one mode measured, per run and in total."""
    ids = {r.run_id: r.name for r in mode.runs}
    per_run = Counter(run_of(repo, env, commit, ids) for kind, commit, *_ in mode.verifications if kind == "candidate")
    entries: dict[str, list[dict[str, Any]]] = {}
    for entry in (mode.queue or {}).get("entries", []):
        entries.setdefault(ids.get(entry["runId"], "?"), []).append(entry)
    print(
        f"  {'run':<5}{'status':<10}{'ready s':>8}{'released s':>11}{'finalize s':>11}{'publish s':>10}"
        f"{'complete s':>11}{'finalizes':>10}{'contended':>10}{'built':>7}{'cand. verif.':>13}  queue"
    )
    for run in mode.runs:
        ready = f"{mode.ready[run.name] - mode.started:.1f}" if run.name in mode.ready else "-"
        released, finalized, published, complete = (
            f"{at - mode.barrier:.2f}" if at is not None else "-"
            for at in (
                mode.released.get(run.name),
                run.first("INTEGRATION_REQUESTED"),
                run.published_at,
                run.first("RUN_COMPLETE"),
            )
        )
        queued = ", ".join(
            f"#{e['position']} {e['state']} ({e.get('verifications', 0)} verif.)" for e in entries.get(run.name, [])
        )
        print(
            f"  {run.name:<5}{run.status:<10}{ready:>8}{released:>11}{finalized:>11}{published:>10}{complete:>11}"
            f"{run.count('INTEGRATION_REQUESTED'):>10}"
            f"{run.count('INTEGRATION_FAILED', failure='RUN_TARGET_CONTENDED'):>10}"
            f"{run.count('INTEGRATION_PREPARED'):>7}{per_run.get(run.name, 0):>13}  {queued or '-'}"
        )
    print("  (ready: seconds after the first start; the others: seconds after the barrier)")
    failures = Counter(
        e["data"].get("failure", "?") for r in mode.runs for e in r.events if e["code"] == "INTEGRATION_FAILED"
    )
    distinct = len({commit for kind, commit, *_ in mode.verifications if kind == "candidate"})
    print(
        f"  start phase (first start -> barrier) {mode.start_phase:.1f} s, {len(mode.ready)}/{len(mode.runs)} "
        f"children at it; published {len(mode.published)}/{len(mode.runs)}; wall (barrier -> last publish) "
        f"{mode.wall:.1f} s" + ("; timed out" if mode.timed_out else "")
    )
    if mode.released:
        late = [at - mode.barrier for at in mode.released.values()]
        print(f"  children saw the barrier {min(late):.2f}-{max(late):.2f} s after it was created")
    if mode.finalizes:
        print(
            f"  first finalize requests between {min(mode.finalizes) - mode.barrier:.1f} s and "
            f"{max(mode.finalizes) - mode.barrier:.1f} s after the barrier (spread {mode.spread:.1f} s)"
        )
    print(
        f"  candidate verifications executed: {mode.candidate_verifications} ({distinct} distinct commits), "
        f"{mode.per_published:.2f} per published run; handoff verifications: {mode.handoff_verifications}"
    )
    handoffs = [(begin, end) for kind, _, begin, end in mode.verifications if kind == "handoff"]
    if handoffs:
        print(
            f"  handoff verifications ran from {min(b for b, _ in handoffs) - mode.barrier:+.1f} s to "
            f"{max(e for _, e in handoffs) - mode.barrier:+.1f} s from the barrier"
        )
    busy = sum(end - begin for _, _, begin, end in mode.verifications)
    print(f"  verification command time, summed: {busy:.1f} s")
    if failures:
        print(f"  finalizes refused: {', '.join(f'{n} {code}' for code, n in sorted(failures.items()))}")
    for run in mode.runs:
        if run not in mode.published:
            left = run.left or {}
            seen = f"left active as {left.get('status')} ({left.get('statusReason')})" if left else "still active"
            print(f"  {run.name} ({run.run_id}) not published in time: {seen}; now {run.status}")
            for event in run.events:
                if event["code"] in (
                    "INTEGRATION_FAILED",
                    "WORKER_FAILED",
                    "WORKER_BLOCKED",
                    "RUN_STATUS",
                    "RUN_STOPPED",
                ):
                    print(f"    {event['time'] - mode.barrier:6.1f} s {event['code']}: {event['summary']}")
    if mode.queue is not None:
        recorded = sum(int(e.get("verifications", 0)) for e in mode.queue.get("entries", []))
        states = Counter(str(e["state"]) for e in mode.queue.get("entries", []))
        print(
            f"  queue: entries {dict(states)}; verifications its entries record: {recorded} "
            f"(executions counted: {mode.candidate_verifications})"
        )


def ratio(off: float, on: float) -> float:
    return off / on if on and not math.isnan(on) else math.nan


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=8, help="runs finalizing together on one target (default 8)")
    parser.add_argument(
        "--verify-seconds", type=float, default=2.0, help="what the verification command takes (default 2.0)"
    )
    parser.add_argument("--parallel", type=int, default=2, help="[queue] parallel of the queue mode (default 2)")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds each mode may take (default 1200)")
    parser.add_argument(
        "--start",
        choices=("process", "concurrent"),
        default="process",
        help="how the N runs are started, the same in both modes: one 'git agentops-run start' process after the "
        "other (default), or all of them at once",
    )
    parser.add_argument(
        "--barrier",
        choices=("handoff", "finalize"),
        default="finalize",
        help="where the runs wait for each other: before their child's handoff (its verification after the "
        "barrier), or after it, just before the coordinator finalizes (default)",
    )
    parser.add_argument("--dir", default=None, help="where to create the scratch directory")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (its path is printed)")
    args = parser.parse_args()
    if shutil.which("git-agentops-run") is None:
        raise SystemExit("git-agentops-run is not on PATH: install the project (pip install -e .) first")
    root = Path(tempfile.mkdtemp(prefix="agentops-queue-bench-", dir=args.dir))
    try:
        env = environment(root)
        os.environ.clear()  # this process's own reads (the runs' states) are as hermetic as its children
        os.environ.update(env)
        seal(root / "home", env)
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(
            f"git-agentops merge queue benchmark: {args.runs} runs, verification {args.verify_seconds:g} s, "
            f"queue parallel {args.parallel}, starts: {args.start}, barrier: {args.barrier}; {os.cpu_count()} "
            f"cpus, load average {load}; {git(root, '--version', env=env)}",
            flush=True,
        )
        modes: dict[str, Mode] = {}
        for name, parallel in (("off", None), ("on", args.parallel)):
            title = "without the queue" if parallel is None else f"with the queue (parallel = {parallel})"
            print(f"\nmode {name}: {title}", flush=True)
            mode, repo = measure(name, root / name, env, args, parallel)
            report(mode, repo, env)
            modes[name] = mode
    finally:
        if args.keep:
            print(f"\nkept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    off, on = modes["off"], modes["on"]
    print()
    print(
        f"queue runs={args.runs} parallel={args.parallel} verifications_off={off.per_published:.2f} "
        f"verifications_on={on.per_published:.2f} verifications_ratio={ratio(off.per_published, on.per_published):.2f} "
        f"wall_off_s={off.wall:.1f} wall_on_s={on.wall:.1f} wall_ratio={ratio(off.wall, on.wall):.2f} "
        f"published_off={len(off.published)} published_on={len(on.published)} "
        f"start_off_s={off.start_phase:.1f} start_on_s={on.start_phase:.1f} spread_off_s={off.spread:.1f} "
        f"spread_on_s={on.spread:.1f} handoffs_off={off.handoff_verifications} handoffs_on={on.handoff_verifications}"
    )
    failed = [m for m in (off, on) if not m.all_published]
    for mode in failed:
        why = "timed out" if mode.timed_out else "runs ended without publishing"
        print(
            f"error: mode {mode.name} published {len(mode.published)}/{len(mode.runs)} runs within "
            f"{args.timeout:g} s of the first start ({why})",
            file=sys.stderr,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
