"""Runs on two machines publishing to one shared bare repository (our pre-receive installed): atomic pushes with
expected old values are the compare-and-swap, the server's hook the gate."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ..conftest import commit_files, git, make_repo
from ..helpers import simple_child
from ..runkit import (
    CHECK_PY,
    POLICY,
    command,
    events,
    recipe,
    start,
    status,
    supervisor_log,
    trust,
    verify_receipts,
    wait_for,
)

SETUP = (  # setup runs confined: it writes the log only where the policy's [sandbox] writable lets it
    "import contextlib, os\nwith contextlib.suppress(OSError): open({log!r}, 'a').write(os.getcwd() + '\\n')"
)


def remote_policy(setup_log: Path, patience: str = "3s") -> str:
    """The team's policy: publish to origin, retrying an unreachable one for ``patience``; a setup step that records
    where it ran."""
    argv = json.dumps(["python3", "-c", SETUP.format(log=str(setup_log))])
    logs = json.dumps(str(setup_log.parent))
    options = f'remote = "origin"\nremote_patience = "{patience}"'
    return (
        POLICY.format(max_workers=3, run_options=options)
        + f"[[worktree.setup]]\nargv = {argv}\n[sandbox]\nwritable = [{logs}]\n"
    )


def team(tmp: Path, *, patience: str = "3s") -> tuple[Path, Path, Path]:
    """A bare server with the toolkit's pre-receive, and two machines that cloned it and trust its policy (which
    retries an unreachable server for ``patience``)."""
    server = guarded_server(tmp, patience=patience)
    machines = []
    for name in ("a", "b"):
        where = tmp / name
        git(tmp, "clone", "-q", str(server), str(where))
        git(where, "config", "user.name", f"Machine {name.upper()}")
        trust(where)
        machines.append(where)
    return server, machines[0], machines[1]


def guarded_server(tmp: Path, *, patience: str = "3s", extra_policy: str = "") -> Path:
    """``tmp/server.git``: a bare repository holding the team's project (its policy with ``extra_policy`` appended),
    with the toolkit's pre-receive."""
    (tmp / "setup-logs").mkdir()
    seed = make_repo(
        tmp / "seed",
        files={
            "check.py": CHECK_PY,
            "src/base.txt": "hello\n",
            ".agentops/policy.toml": remote_policy(tmp / "setup-logs" / "setup.log", patience) + extra_policy,
            ".gitignore": "__pycache__/\n",
        },
    )
    server = tmp / "server.git"
    git(tmp, "clone", "-q", "--bare", str(seed), str(server))
    installed = command(server, "agentops-init", "--server", "--yes")
    assert installed.returncode == 0, installed.stderr
    return server


def server_chain(server: Path, base: str) -> list[str]:
    return git(server, "rev-list", "--first-parent", f"{base}..main").split()


@pytest.mark.slow
def test_two_machines_integrate_into_one_remote_target_concurrently(tmp_path: Path) -> None:
    """Invariant: two runs on two machines publishing to one server both land, in some order, each with a valid
    receipt; the target never loses a commit (each publish is a push from the tip it was built on), and the
    server's history verifies."""
    server, a, b = team(tmp_path)
    base = git(server, "rev-parse", "main")
    runs = {
        a: start(a, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True, name="a.toml")),
        b: start(b, recipe(tmp_path, simple_child("b", "src/b.txt"), finalize=True, name="b.toml")),
    }
    docs = {m: wait_for(m, r, lambda d: d["status"] in ("complete", "blocked"), timeout=240) for m, r in runs.items()}
    for machine, doc in docs.items():
        assert doc["status"] == "complete", json.dumps(doc, indent=1) + supervisor_log(machine, runs[machine])
    chain = server_chain(server, base)
    assert len(chain) == 2  # one merge per delivery, each run's on top of what was there
    candidates = {doc["integration"]["candidate"] for doc in docs.values()}
    assert candidates == set(chain)  # both landed; neither was lost
    for path in ("src/a.txt", "src/b.txt"):
        assert git(server, "show", f"main:{path}")  # the tip has both runs' work
    verified = verify_receipts(server, f"{base}..main", "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    second = next(doc for doc in docs.values() if doc["integration"]["candidate"] == chain[0])
    assert second["integration"]["base"] == chain[1]  # the later run was rebuilt on the earlier one's tip
    for machine in (a, b):  # each machine's local main followed its own publish (or was left where it was)
        local = git(machine, "rev-parse", "main")
        assert git(machine, "merge-base", "--is-ancestor", local, chain[0], check=False) == ""
        # ...and its checkout with it: a sync of the run's refs never moves the target behind the checkout's back
        assert git(machine, "status", "--porcelain") == "", machine
    git(server, "fsck", "--strict")


def test_an_unreachable_remote_leaves_the_run_waiting_with_nothing_published(tmp_path: Path) -> None:
    """The server goes away after the run started: integration retries with backoff for the policy's patience,
    then the run waits (blocked, SYNC_REMOTE_UNREACHABLE); when the server is back, resume publishes once.
    Its patience is 2 s (three attempts, 1 s apart), all the idle time the test waits out (the default: 10 minutes)."""
    server, a, _ = team(tmp_path, patience="2s")
    base = git(server, "rev-parse", "main")
    run_id = start(a, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True))
    away = server.with_name("away.git")
    server.rename(away)  # the run started on the server's tip; the next time it asks is to publish
    doc = wait_for(a, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=120)
    assert doc["status"] == "blocked" and "SYNC_REMOTE_UNREACHABLE" in doc["statusReason"], doc["statusReason"]
    codes = [e["code"] for e in events(a, run_id)]
    assert "INTEGRATION_REMOTE" in codes  # the retries are on the run's log
    away.rename(server)
    assert git(server, "rev-parse", "main") == base  # nothing was half-published
    # resumed at once, while the blocked run's supervisor may still be leaving it (tests/supervisor/
    # test_supervisor_handover.py): that supervisor serves it again, or the resume starts one once it is gone
    assert command(a, "agentops-run", "resume", run_id).returncode == 0
    doc = wait_for(a, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=180)
    assert doc["status"] == "complete", doc
    assert server_chain(server, base) == [doc["integration"]["candidate"]]


def test_a_server_refusal_is_reported_with_its_message_and_stays_retryable(tmp_path: Path) -> None:
    server, a, _ = team(tmp_path)
    base = git(server, "rev-parse", "main")
    hook = server / "hooks" / "pre-receive"
    original = hook.read_bytes()
    hook.write_text(  # the run's own refs (its lease) go through; main does not
        '#!/bin/sh\nwhile read old new ref; do\n  if [ "$ref" = refs/heads/main ]; then\n'
        "    echo 'release freeze: no pushes to main until Monday' >&2; exit 1\n  fi\ndone\nexit 0\n"
    )
    run_id = start(a, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True))
    doc = wait_for(a, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=180)
    assert doc["status"] == "blocked" and "SYNC_PUSH_REFUSED" in doc["statusReason"], doc
    assert "release freeze" in doc["statusReason"]
    assert git(server, "rev-parse", "main") == base
    hook.write_bytes(original)
    time.sleep(0.2)
    # resumed at once, while the blocked run's supervisor may still be leaving it (tests/supervisor/
    # test_supervisor_handover.py): that supervisor serves it again, or the resume starts one once it is gone
    assert command(a, "agentops-run", "resume", run_id).returncode == 0
    doc = wait_for(a, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=180)
    assert doc["status"] == "complete", doc
    assert server_chain(server, base) == [doc["integration"]["candidate"]]
    assert status(a, run_id)["integration"]["status"] == "complete"


def _share_key(tmp: Path, a: Path, b: Path) -> None:
    key = tmp / "team.key"
    if not key.exists():
        done = command(a, "agentops-sync", "--export-key", str(key))
        assert done.returncode == 0, done.stderr
    done = command(b, "agentops-sync", "--import-key", str(key))
    assert done.returncode == 0, done.stderr
    git(a, "config", "agentops.machineId", "machine-a")
    git(b, "config", "agentops.machineId", "machine-b")


@pytest.mark.slow
def test_a_dead_machine_s_run_is_taken_over_after_its_lease_expires(tmp_path: Path) -> None:
    """Invariant: machine A's supervisor killed with SIGKILL mid-run; B refuses to take over while A's lease is
    unexpired (RUN_LEASE_HELD naming A), then takes it over once it expired and completes it; A restarted finds it
    lost the lease and stops without writing anything."""
    import os
    import signal
    import subprocess

    from ..helpers import HANDOFF, child, write_step
    from ..runkit import supervisor_pid, wait_supervisor_gone

    server, a, b = team(tmp_path)
    _share_key(tmp_path, a, b)
    base = git(server, "rev-parse", "main")
    work = [write_step("src/a.txt", "a\n"), {"commit": "Add a"}, HANDOFF]
    # generation 1 (on A) is still asleep when A dies; generation 2 (on whichever machine took over) just works
    slow = child("a", "Part A", [[{"sleep": 6}, *work], work])
    env = {"AGENTOPS_LEASE_TTL": "6"}
    run_id = start(a, recipe(tmp_path, slow, finalize=True), env=env)
    state = f"refs/agentops/runs/{run_id}/state"
    wait_for(a, run_id, lambda d: any(w["role"] == "child" and w["status"] == "running" for w in d["workers"]))
    lease = json.loads(git(server, "show", f"{state}:lease.json"))  # the lease is on the server
    assert lease["holder"] == "machine-a"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until the server's copy has the child at work (renewals push it)
        names = git(server, "ls-tree", "--name-only", f"{state}:workers").split()
        docs = [json.loads(git(server, "show", f"{state}:workers/{name}")) for name in names]
        if any(d["role"] == "child" and d["status"] == "running" for d in docs):
            break
        time.sleep(0.2)
    os.kill(supervisor_pid(a, run_id), signal.SIGKILL)
    wait_supervisor_gone(a, run_id)

    def supervise(machine: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        argv = ["git", "agentops-run", "supervise", run_id, *extra]
        env_all = {**os.environ, **env}
        return subprocess.run(argv, cwd=machine, capture_output=True, text=True, env=env_all, timeout=300, check=False)

    held = supervise(b, "--take-over")
    assert held.returncode == 3 and "RUN_LEASE_HELD" in held.stderr and "machine-a" in held.stderr, held.stderr
    c = tmp_path / "c"  # a third machine races b for the run: the lease claim is a CAS on the server
    git(tmp_path, "clone", "-q", str(server), str(c))
    trust(c)
    _share_key(tmp_path, a, c)
    git(c, "config", "agentops.machineId", "machine-c")
    racers = {
        m: subprocess.Popen(
            ["git", "agentops-run", "supervise", run_id, "--take-over", "--wait", "60"],
            cwd=m,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )
        for m in (b, c)
    }
    results = {m: (p.wait(timeout=300), p.communicate()[1]) for m, p in racers.items()}
    winners = [m for m, (code, _) in results.items() if code == 0]
    assert len(winners) == 1, results  # exactly one machine serves it
    loser = c if winners == [b] else b
    assert results[loser][0] == 3 and ("RUN_LEASE_HELD" in results[loser][1] or "RUN_LEASE_LOST" in results[loser][1])
    b = winners[0]
    doc = status(b, run_id)
    assert doc["status"] == "complete", supervisor_log(b, run_id)
    assert git(server, "rev-list", "--first-parent", f"{base}..main").split() == [doc["integration"]["candidate"]]
    assert json.loads(git(server, "show", f"{state}:lease.json"))["holder"] == f"machine-{b.name}"
    assert verify_receipts(server, "main").returncode == 0
    assert all(w["worktree"].startswith(str(b)) for w in doc["workers"])  # every worker moved to b
    ran = (tmp_path / "setup-logs" / "setup.log").read_text().splitlines()
    coordinator = str(b / ".agentops" / "worktrees" / run_id / "coordinator")
    assert coordinator in ran, ran  # the worktrees re-created there were set up there
    server_state = git(server, "rev-parse", state)
    again = supervise(a)
    assert again.returncode == 3 and "RUN_LEASE_LOST" in again.stderr, again.stderr
    assert git(server, "rev-parse", state) == server_state  # A wrote nothing there
    mine = git(a, "rev-parse", state)
    assert mine == server_state or git(a, "merge-base", "--is-ancestor", mine, server_state, check=False) == ""


@pytest.mark.parametrize("cut", ["moved away", "refusing pushes"])
def test_a_lease_that_cannot_be_renewed_for_its_life_stops_the_supervisor(tmp_path: Path, cut: str) -> None:
    """Cut off from the server for longer than its lease -- the server gone, or refusing every push (a renewal
    refused half-way once crashed the supervisor and left its agents running) -- a supervisor stops its agents and
    itself (RUN_LEASE_LOST): another machine may serve the run by now."""
    from ..helpers import HANDOFF, child, write_step
    from ..runkit import wait_supervisor_gone

    server, a, _ = team(tmp_path)
    git(a, "config", "agentops.machineId", "machine-a")
    slow = child("a", "Part A", [[{"sleep": 60}, write_step("src/a.txt", "a\n"), {"commit": "Add a"}, HANDOFF]])
    run_id = start(a, recipe(tmp_path, slow, finalize=True), env={"AGENTOPS_LEASE_TTL": "3"})
    wait_for(a, run_id, lambda d: any(w["role"] == "child" and w["status"] == "running" for w in d["workers"]))
    if cut == "moved away":
        server.rename(server.with_name("away.git"))
    else:
        hook = server / "hooks" / "pre-receive"
        hook.write_text("#!/bin/sh\necho 'this server takes nothing today' >&2\nexit 1\n")
        hook.chmod(0o755)
    wait_supervisor_gone(a, run_id, timeout=60)
    log = supervisor_log(a, run_id)
    assert "RUN_LEASE_LOST" in log and "unrenewed" in log, log
    assert "could not renew the lease" in log
    from git_agentops.runs.controls import run_processes

    assert run_processes(run_id) == []  # its agents were stopped with it


@pytest.mark.slow
@pytest.mark.parametrize(
    "point", ["integration:prepared", "integration:reviewed", "integration:pushed", "integration:published"]
)
def test_kill_9_while_publishing_to_a_remote_then_resume_publishes_once(tmp_path: Path, point: str) -> None:
    """Invariant: killed at any step of a remote publish (before the push, after it but before it is recorded),
    the resumed run moves the server's target exactly once, with its receipt."""
    from ..runkit import wait_supervisor_gone

    server, a, _ = team(tmp_path)
    base = git(server, "rev-parse", "main")
    run_id = start(a, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True), env={"AGENTOPS_FAULT": point})
    wait_supervisor_gone(a, run_id)
    assert f"fault injection: SIGKILL at {point}" in supervisor_log(a, run_id)
    moved = git(server, "rev-parse", "main") != base
    assert moved == (point in ("integration:pushed", "integration:published"))
    assert command(a, "agentops-run", "resume", run_id).returncode == 0
    doc = wait_for(a, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=180)
    assert doc["status"] == "complete", doc
    assert server_chain(server, base) == [doc["integration"]["candidate"]]
    assert verify_receipts(server, f"{base}..main").returncode == 0


def test_a_remote_publish_leaves_the_clean_checkout_of_the_target_clean_at_the_new_tip(tmp_path: Path) -> None:
    """Invariant: publishing to a bare remote with the server hook installed moves the person's checked-out target
    with its index and files, as a local publish does: 'git status --porcelain' is empty afterwards (it once showed
    the integration reversed, staged, for the next 'git commit -a' to undo)."""
    server, a, _ = team(tmp_path)
    assert git(a, "symbolic-ref", "HEAD") == "refs/heads/main"
    run_id = start(a, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True))
    doc = wait_for(a, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=180)
    assert doc["status"] == "complete", doc
    candidate = doc["integration"]["candidate"]
    assert git(server, "rev-parse", "main") == candidate
    assert git(a, "rev-parse", "HEAD") == candidate
    assert git(a, "status", "--porcelain") == ""
    assert (a / "src" / "a.txt").read_text() == "a\n"


def test_a_remote_publish_leaves_a_dirty_checkout_of_the_target_alone_and_says_so(tmp_path: Path) -> None:
    """Invariant: with uncommitted changes in the checked-out target, a remote publish still lands on the server,
    but the local branch, index and files stay exactly as they were -- the person's edit is kept, nothing is staged
    -- and the run's log says so (RUN_TARGET_NOT_FOLLOWED) with the command that brings it up."""
    server, a, _ = team(tmp_path)
    base = git(a, "rev-parse", "main")
    (a / "src" / "base.txt").write_text("an edit the person has not committed\n")
    run_id = start(a, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True))
    doc = wait_for(a, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=180)
    assert doc["status"] == "complete", doc
    candidate = doc["integration"]["candidate"]
    assert git(server, "rev-parse", "main") == candidate  # published all the same: the remote is the target
    assert git(a, "rev-parse", "main") == base  # the local branch was left alone...
    assert git(a, "diff", "--cached", "--name-only") == ""  # ...with its checkout: nothing staged
    assert git(a, "status", "--porcelain") == "M src/base.txt"  # (git() strips the line's leading blank)
    assert (a / "src" / "base.txt").read_text().startswith("an edit")
    assert not (a / "src" / "a.txt").exists()
    said = [e["summary"] for e in events(a, run_id) if e["code"] == "RUN_TARGET_NOT_FOLLOWED"]
    assert len(said) == 1 and "src/base.txt" in said[0] and f"git merge --ff-only {candidate[:12]}" in said[0], said
    git(a, "stash", "-q")  # the fix it names
    git(a, "merge", "-q", "--ff-only", candidate)
    git(a, "stash", "pop", "-q")
    assert git(a, "status", "--porcelain") == "M src/base.txt" and git(a, "diff", "--cached", "--name-only") == ""
    assert (a / "src" / "a.txt").read_text() == "a\n"


def test_a_remote_publish_moves_no_checkout_of_a_local_target_that_is_elsewhere(tmp_path: Path) -> None:
    """Invariant: when the local target is not where the run built (the person committed on it), publishing to the
    remote moves neither the branch nor its checkout, and the run's log names 'git pull'."""
    server, a, _ = team(tmp_path)
    mine = commit_files(a, {"notes.md": "a local commit\n"}, "a local commit, not pushed")
    run_id = start(a, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True))  # built on origin's main
    doc = wait_for(a, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=180)
    assert doc["status"] == "complete", doc
    assert git(server, "rev-parse", "main") == doc["integration"]["candidate"]
    assert git(a, "rev-parse", "main") == mine and git(a, "status", "--porcelain") == ""
    said = [e["summary"] for e in events(a, run_id) if e["code"] == "RUN_TARGET_NOT_FOLLOWED"]
    assert len(said) == 1 and "git pull origin main" in said[0], said
