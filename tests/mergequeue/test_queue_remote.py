"""The merge queue of a target on a shared remote: machines share one queue on the server, as teams run them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ..conftest import git
from ..helpers import simple_child
from ..integrate.test_remote import guarded_server, server_chain
from ..runkit import (
    command,
    recipe,
    start,
    supervisor_log,
    trust,
    verify_receipts,
    wait_for,
    wait_supervisor_gone,
)
from ..sshd import ssh_server

QUEUE = "[queue]\nenabled = true\nparallel = 2\n"
QUEUE_REF = "refs/agentops/queue/main"


def queued_server(tmp: Path) -> Path:
    """``tmp/server.git``: the team's project with ``[run] remote`` and ``[queue] enabled``, behind the toolkit's
    pre-receive."""
    return guarded_server(tmp, patience="30s", extra_policy=QUEUE)


def machines(tmp: Path, url: str, ssh: str | None = None) -> list[Path]:
    """Two clones of the server, each its own machine id, sharing the repository's key (as machines that share a
    queue must: every queue commit carries its MAC)."""
    out = []
    for name in ("a", "b"):
        where = tmp / name
        extra = ["-c", f"core.sshCommand={ssh}"] if ssh else []
        git(tmp, *extra, "clone", "-q", url, str(where))
        if ssh:
            git(where, "config", "core.sshCommand", ssh)
        git(where, "config", "user.name", f"Machine {name.upper()}")
        git(where, "config", "agentops.machineId", f"machine-{name}")
        out.append(where)
    key = tmp / "team.key"
    exported = command(out[0], "agentops-sync", "--export-key", str(key))
    assert exported.returncode == 0, exported.stderr
    imported = command(out[1], "agentops-sync", "--import-key", str(key))
    assert imported.returncode == 0, imported.stderr
    return out


def is_ancestor(repo: Path, old: str, new: str) -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", old, new], cwd=repo, check=False).returncode == 0


def server_queue(server: Path) -> dict[str, Any]:
    return dict(json.loads(git(server, "show", f"{QUEUE_REF}:queue.json")))


def run_both(tmp: Path, where: list[Path], names: tuple[str, ...] = ("a", "b")) -> dict[Path, dict[str, Any]]:
    """A run on each machine, started one after the other; all complete."""
    runs = {}
    for machine, name in zip(where, names, strict=True):
        trust(machine)  # one trust store serves both "machines" here, and a trust names the clone
        runs[machine] = start(
            machine, recipe(tmp, simple_child(name, f"src/{name}.txt"), finalize=True, name=f"{name}.toml")
        )
    docs = {m: wait_for(m, r, lambda d: d["status"] in ("complete", "blocked"), timeout=300) for m, r in runs.items()}
    for machine, doc in docs.items():
        assert doc["status"] == "complete", json.dumps(doc, indent=1) + supervisor_log(machine, runs[machine])
    for machine, run_id in runs.items():  # its last pushes (the queue's lease given up) land before anyone looks
        wait_supervisor_gone(machine, run_id)
    return docs


@pytest.mark.slow
def test_two_machines_share_the_queue_on_the_server_over_ssh_and_its_history_verifies(tmp_path: Path) -> None:
    """Invariant: over ``ssh://`` -- git's own transport, the server's pre-receive behind sshd -- two machines'
    runs enqueue on the server's one queue; whichever supervisor holds its lease publishes each candidate by one
    atomic push of the target, the queue and the receipts (so the pre-receive finds every receipt among the incoming
    refs); the queue on the server says published exactly for what its target holds, in queue order; the server's
    history verifies, fsck is clean and both checkouts stay clean."""
    server = queued_server(tmp_path)
    base = git(server, "rev-parse", "main")
    with ssh_server(tmp_path) as sshd:
        where = machines(tmp_path, sshd.url(server), sshd.command)
        docs = run_both(tmp_path, where)
    chain = server_chain(server, base)[::-1]
    entries = server_queue(server)["entries"]
    assert [e["state"] for e in entries] == ["published", "published"], entries
    assert [s["commit"] for e in entries for s in e["steps"]] == chain  # the target: the queue's candidates, in order
    assert {d["runId"] for d in docs.values()} == {e["runId"] for e in entries}
    for doc in docs.values():
        entry = next(e for e in entries if e["runId"] == doc["runId"])
        assert doc["integration"]["candidate"] == entry["candidate"]
        assert doc["integration"]["queuePosition"] == entry["position"]
    verified = verify_receipts(server, f"{base}..main", "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    for path in ("src/a.txt", "src/b.txt"):
        assert git(server, "show", f"main:{path}")
    for machine in where:
        assert git(machine, "status", "--porcelain") == ""
    git(server, "fsck", "--strict", "--no-dangling")


@pytest.mark.slow
def test_an_entry_pushed_to_the_server_by_someone_who_is_no_supervisor_is_never_integrated(tmp_path: Path) -> None:
    """Invariant: someone with push access but without the repository's key appends a forged entry to the server's
    queue (a fast-forward its pre-receive takes): no supervisor reads it -- the queue goes on past it from its last
    authentic value, the forged commit kept as a second parent and said ``RUN_STATE_TAMPERED`` -- its commit never
    reaches the target, and the machines' own runs publish as if it were not there."""
    server = queued_server(tmp_path)
    base = git(server, "rev-parse", "main")
    where = machines(tmp_path, str(server))
    run_both(tmp_path, where)  # the queue exists on the server now
    mallory = tmp_path / "mallory"
    git(tmp_path, "clone", "-q", str(server), str(mallory))
    git(mallory, "fetch", "-q", "origin", f"+{QUEUE_REF}:{QUEUE_REF}")
    (mallory / "src" / "evil.txt").write_text("evil\n")
    git(mallory, "add", "src/evil.txt")
    git(mallory, "commit", "-q", "-m", "evil")
    evil = git(mallory, "rev-parse", "HEAD")
    doc = json.loads(git(mallory, "show", f"{QUEUE_REF}:queue.json"))
    forged_entry = {**doc["entries"][0], "position": doc["next"], "state": "waiting", "runId": "run-evil"}
    forged_entry["deliveries"] = [{"taskId": "task-evil", "title": "evil", "commit": evil}]
    for key in ("base", "candidate", "steps", "below", "verification", "verifications", "settledAt"):
        forged_entry.pop(key, None)
    doc["entries"].append(forged_entry)
    doc["next"] += 1
    blob = git(mallory, "hash-object", "-w", "--stdin", input=json.dumps(doc))
    tree = git(mallory, "mktree", input=f"100644 blob {blob}\tqueue.json\n")
    forged = git(mallory, "commit-tree", tree, "-p", QUEUE_REF, "-m", "queue: one more")
    git(mallory, "push", "-q", "origin", evil + ":refs/heads/mallory", f"{forged}:{QUEUE_REF}")
    assert git(server, "rev-parse", QUEUE_REF) == forged  # the server took it: a fast-forward
    for machine in where:  # the next runs: both publish, the forged entry never does
        git(machine, "pull", "-q", "--ff-only", "origin", "main")
    run_both(tmp_path, where, ("c", "d"))
    assert not is_ancestor(server, evil, "main")  # never integrated
    assert "src/evil.txt" not in git(server, "ls-tree", "-r", "--name-only", "main")
    assert is_ancestor(server, forged, QUEUE_REF)  # kept as evidence
    quarantined = git(server, "log", "--format=%s", QUEUE_REF)
    assert "RUN_STATE_TAMPERED" in quarantined
    entries = server_queue(server)["entries"]
    assert "run-evil" not in {e["runId"] for e in entries}  # the state goes on from the authentic value
    assert [e["state"] for e in entries] == ["published"] * 4
    verified = verify_receipts(server, f"{base}..main", "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    git(server, "fsck", "--strict")


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["rewound", "deleted"])
def test_a_queue_rewound_or_deleted_on_the_server_is_put_back_and_nothing_published_is_lost(
    tmp_path: Path, damage: str
) -> None:
    """Invariant: the server's queue ref rewound to an older authentic value, or deleted, by someone on the server
    (its pre-receive refuses both over a push): the next write puts a machine's copy back -- the history of what was
    published kept, nothing published again -- and the next runs publish on top."""
    server = queued_server(tmp_path)
    base = git(server, "rev-parse", "main")
    where = machines(tmp_path, str(server))
    run_both(tmp_path, where)
    before = git(server, "rev-parse", QUEUE_REF)
    published = [e["runId"] for e in server_queue(server)["entries"]]
    if damage == "rewound":
        git(server, "update-ref", QUEUE_REF, git(server, "rev-list", "--max-count=1", "--skip=3", QUEUE_REF))
    else:
        git(server, "update-ref", "-d", QUEUE_REF)
    for machine in where:
        git(machine, "pull", "-q", "--ff-only", "origin", "main")
    run_both(tmp_path, where, ("c", "d"))
    assert is_ancestor(server, before, QUEUE_REF)  # the history of the queue is whole again
    entries = server_queue(server)["entries"]
    assert [e["runId"] for e in entries][:2] == published
    assert [e["state"] for e in entries] == ["published"] * 4
    assert len(server_chain(server, base)) == 4  # each run's candidate once
    verified = verify_receipts(server, f"{base}..main", "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.slow
@pytest.mark.parametrize("point", ["queue:publishing", "queue:moved"])
def test_kill_9_of_a_remote_queue_s_processor_then_the_other_machine_finishes_its_work_once(
    tmp_path: Path, point: str
) -> None:
    """Invariant: machine A's supervisor killed with SIGKILL while publishing its run through the server's queue --
    receipted but nothing pushed, or pushed with its checkout not yet followed -- loses nothing and publishes
    nothing twice: machine B's supervisor, whose run queues next, publishes A's entry (or finds it published) and its
    own, and A's run, supervised again, completes with the receipt B's push carried."""
    server = queued_server(tmp_path)
    base = git(server, "rev-parse", "main")
    a, b = machines(tmp_path, str(server))
    trust(a)
    first = start(a, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True), env={"AGENTOPS_FAULT": point})
    wait_supervisor_gone(a, first)
    assert f"fault injection: SIGKILL at {point}" in supervisor_log(a, first)
    assert (len(server_chain(server, base)) == 1) is (point == "queue:moved")
    run_both(tmp_path, [b], ("b",))
    supervised = subprocess.Popen(
        ["git", "agentops-run", "supervise", first], cwd=a, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        done = wait_for(a, first, lambda d: d["status"] in ("complete", "blocked"), timeout=300)
    finally:
        supervised.wait(timeout=60)
    assert done["status"] == "complete", json.dumps(done, indent=1) + supervisor_log(a, first)
    entries = server_queue(server)["entries"]
    assert (entries[0]["runId"], entries[0]["state"]) == (first, "published")
    assert [e["state"] for e in entries] == ["published", "published"]
    chain = server_chain(server, base)[::-1]
    assert chain == [s["commit"] for e in entries for s in e["steps"]]  # each once, in queue order
    verified = verify_receipts(server, f"{base}..main", "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    git(server, "fsck", "--strict")
