"""The merge queue end to end: many runs finalizing at once on one target, with real supervisors."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from git_agentops import eventkinds

from ..conftest import git, make_repo
from ..helpers import HANDOFF, child, commit_step, write_step
from ..runkit import (
    command,
    events,
    recipe,
    start,
    status,
    stop,
    supervisor_log,
    supervisor_pid,
    trust,
    verify_receipts,
    wait_for,
    wait_supervisor_gone,
)

# fails a commit that holds src/poison.txt once it is a merge (a queue candidate): the delivery passes its own
# verification at handoff and fails on any candidate, wherever it stands in the queue
CHECK_PY = """import pathlib, subprocess, sys
merged = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD^2"], capture_output=True).returncode == 0
poisoned = pathlib.Path("src/poison.txt").exists()
print("files:", sorted(p.name for p in pathlib.Path("src").iterdir()), "merge:", merged)
sys.exit(1 if poisoned and merged else 0)
"""

QUEUE_POLICY = """version = 1
[run]
target = "main"
max_workers = 2
[[verify.commands]]
id = "check"
argv = ["python3", "check.py"]
timeout = 60
[queue]
enabled = true
parallel = 2
"""


def queue_project(root: Path, policy: str = QUEUE_POLICY) -> Path:
    repo = make_repo(
        root / "repo",
        files={
            "check.py": CHECK_PY,
            "src/base.txt": "hello\n",
            ".agentops/policy.toml": policy,
            ".gitignore": "__pycache__/\n",
        },
    )
    trust(repo)
    return repo


def one_file(tmp: Path, name: str, path: str) -> Path:
    part = child(name, f"Part {name}", [[write_step(path, f"{name}\n"), commit_step(f"Add {name}"), HANDOFF]])
    return recipe(tmp, part, finalize=True, name=f"{name}.toml")


@contextlib.contextmanager
def held_queue(repo: Path) -> Iterator[None]:
    """The queue's lease held meanwhile by a live process of this machine (a ``sleep`` this test started, as a busy
    processor): supervisors enqueue and wait, none processes. Its holder is gone once the block ends, so a queue
    commit written meanwhile names a dead holder, as one a crashed processor left."""
    from git_agentops.clock import SystemClock
    from git_agentops.gitstore.repo import open_store
    from git_agentops.mergequeue import book
    from git_agentops.mergequeue.serve import holder
    from git_agentops.process.groups import process_identity

    store = open_store(repo, clock=SystemClock())
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        found = process_identity(sleeper.pid)
        assert found is not None
        me = book.Holder(holder(store).machine, sleeper.pid, found.start_time)
        assert book.claim(store, "main", me, time.time(), ttl=600) is not None
        yield
        book.release(store, "main", me)
    finally:
        sleeper.kill()
        sleeper.wait()


def first_entry(repo: Path, run_id: str) -> dict[str, Any]:
    """The run's first entry, as the queue's history holds it (a run whose finalize failed enqueues again)."""
    for line in git(repo, "log", "--reverse", "--format=%H", "refs/agentops/queue/main").split():
        text = git(repo, "show", f"{line}:queue.json", check=False)  # the first commit may hold the lease only
        for entry in json.loads(text or '{"entries": []}')["entries"]:
            if entry["runId"] == run_id and entry["state"] != "waiting":
                return dict(entry)
    raise AssertionError(f"no settled entry of {run_id}")


def queue_doc(repo: Path) -> dict[str, object]:
    return dict(json.loads(git(repo, "show", "refs/agentops/queue/main:queue.json")))


def assert_published_in_order(repo: Path, base: str, entries: list[dict[str, Any]]) -> None:
    """The end state after a crash: the target's first-parent chain is the entries' candidates in queue order,
    each once; main moved forward only (every value it held an ancestor of the next); its checkout followed every
    move; every commit is receipted; fsck is clean."""
    chain = git(repo, "rev-list", "--first-parent", "--reverse", f"{base}..main").split()
    assert chain == [s["commit"] for e in entries for s in e["steps"]]
    held = git(repo, "reflog", "show", "--format=%H", "refs/heads/main").split()[::-1]
    for old, new in itertools.pairwise(held):
        git(repo, "merge-base", "--is-ancestor", old, new)
    assert git(repo, "status", "--porcelain") == ""
    verified = verify_receipts(repo, f"{base}..main")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    git(repo, "fsck", "--strict", "--no-dangling")


@pytest.mark.slow
def test_eight_runs_finalizing_together_publish_in_queue_order_and_only_the_culprit_is_evicted(tmp_path: Path) -> None:
    """Invariant: of 8 runs finalizing within seconds on one target, the 7 whose deliveries pass publish -- each
    candidate verified once, the target moving only by CAS through candidates built on each other in queue order
    -- and the one whose delivery fails on a candidate is evicted with its evidence after one retry; nobody else is."""
    repo = queue_project(tmp_path)
    base = git(repo, "rev-parse", "main")
    names = [f"r{i}" for i in range(7)]
    with held_queue(repo):  # the runs line up while a processor is busy: all 8 wait when it lets go
        runs = {name: start(repo, one_file(tmp_path, name, f"src/{name}.txt")) for name in names[:4]}
        runs["poison"] = start(repo, one_file(tmp_path, "poison", "src/poison.txt"))
        runs.update({name: start(repo, one_file(tmp_path, name, f"src/{name}.txt")) for name in names[4:]})
        for run_id in runs.values():
            wait_for(repo, run_id, lambda d: (d["integration"] or {}).get("status") == "queued", timeout=240)
    done = {
        name: wait_for(
            repo,
            run_id,
            lambda d: d["status"] != "active" or (d["integration"] or {}).get("status") in ("complete", "failed"),
            timeout=240,
        )
        for name, run_id in runs.items()
    }
    for name in names:
        assert done[name]["status"] == "complete", (name, done[name])
    stop(repo, runs["poison"])  # its coordinator finalizes again and again: stopped before anything is looked at
    entries = {e["runId"]: e for e in queue_doc(repo)["entries"]}  # type: ignore[attr-defined]  # newest per run
    poison = first_entry(repo, runs["poison"])
    assert poison["state"] == "evicted" and poison["code"] == "RUN_VERIFICATION_FAILED", poison
    assert poison["retried"] is True and poison["verifications"] == 2 and poison["verification"], poison
    assert "failed verification twice" in poison["reason"] and "exit 1" in poison["reason"]
    published = sorted((e for e in entries.values() if e["state"] == "published"), key=lambda e: e["position"])
    assert {e["runId"] for e in published} == {runs[n] for n in names}  # no bystander evicted
    assert all(e.get("verifications", 0) <= 1 for e in published), [e.get("verifications") for e in published]
    assert any(e["below"] for e in published)  # a prefix of candidates published by one CAS
    # the target's first-parent chain is the candidates in queue order, each merging one run's delivery
    chain = git(repo, "rev-list", "--first-parent", "--reverse", f"{base}..main").split()
    assert chain == [s["commit"] for e in published for s in e["steps"]]
    assert git(repo, "rev-parse", "main") == published[-1]["candidate"]
    for run_id in runs.values():  # what the supervisors wrote fits the registered kinds (checked here, not there)
        for event in events(repo, run_id):
            eventkinds.check(event["code"], event["data"])
    trailers = git(repo, "log", "--format=%(trailers:key=Agentops-Event,valueonly)", "refs/agentops/queue/main")
    for line in trailers.split("\n"):
        if line.strip():
            event = json.loads(line)
            eventkinds.check(event["code"], event["data"])
    for entry in published:
        doc = status(repo, entry["runId"])
        assert doc["integration"]["candidate"] == entry["candidate"]
        assert doc["integration"]["queuePosition"] == entry["position"]
        note = json.loads(git(repo, "notes", "--ref=agentops/receipts", "show", entry["candidate"]))  # receipted
        statement = json.loads(base64.b64decode(note["payload"]))
        sealed = statement["predicate"]["integration"]["value"]
        assert sealed["queue"] == {"position": entry["position"], "below": entry["below"]}
        assert sealed["base"] == entry["base"]  # the candidate it was verified on top of
    failures = [e for e in events(repo, runs["poison"]) if e["code"] == "INTEGRATION_FAILED"]
    assert failures and failures[0]["data"]["failure"] == "RUN_VERIFICATION_FAILED", failures
    assert "src/poison.txt" not in git(repo, "ls-tree", "-r", "--name-only", "main")
    shown = command(repo, "agentops-run", "queue", "--json")
    assert shown.returncode == 0, shown.stderr
    listed = json.loads(shown.stdout)
    assert listed["ref"] == "refs/agentops/queue/main" and listed["lease"] is None
    assert {e["runId"] for e in listed["entries"] if e["state"] == "published"} == {runs[n] for n in names}
    human = command(repo, "agentops-run", "queue", "main").stdout
    assert "evicted" in human and "error[RUN_VERIFICATION_FAILED]" in human and "below" in human, human
    bad = command(repo, "agentops-run", "queue", "no..such")
    assert bad.returncode != 0 and "error[REF_NAME_INVALID]" in bad.stderr
    verified = verify_receipts(repo, f"{base}..main")  # every commit the queue published is covered
    assert verified.returncode == 0, verified.stdout + verified.stderr
    git(repo, "fsck", "--strict")


@pytest.mark.slow
@pytest.mark.parametrize(
    "point", ["queue:enqueued", "integration:queued", "queue:publishing", "queue:moved", "integration:published"]
)
def test_kill_9_of_the_queue_s_processor_then_another_supervisor_finishes_its_work_once(
    tmp_path: Path, point: str
) -> None:
    """Invariant: a queued run's supervisor killed with SIGKILL at any step -- enqueued but not recorded, recorded,
    processing the queue after recording the prefix it publishes (before or after the CAS), published but not
    receipted -- costs nothing: the next supervisor to take the lease publishes that work exactly once, the target
    moving only by CAS and never back, and the dead one's run, supervised again, receipts it."""
    repo = queue_project(tmp_path)
    base = git(repo, "rev-parse", "main")
    first = start(repo, one_file(tmp_path, "a", "src/a.txt"), env={"AGENTOPS_FAULT": point})
    wait_supervisor_gone(repo, first)
    assert f"fault injection: SIGKILL at {point}" in supervisor_log(repo, first)
    moved = git(repo, "rev-parse", "main")
    assert (moved != base) is (point in ("queue:moved", "integration:published"))
    second = start(repo, one_file(tmp_path, "b", "src/b.txt"))
    wait_for(repo, second, lambda d: d["status"] == "complete", timeout=120)
    supervised = subprocess.Popen(
        ["git", "agentops-run", "supervise", first], cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for(repo, first, lambda d: d["status"] == "complete", timeout=120)
    finally:
        supervised.wait(timeout=60)
    entries = {e["runId"]: e for e in queue_doc(repo)["entries"]}  # type: ignore[attr-defined]
    assert [entries[r]["state"] for r in (first, second)] == ["published", "published"]
    assert entries[first]["position"] < entries[second]["position"]
    assert_published_in_order(repo, base, [entries[r] for r in (first, second)])


@pytest.mark.slow
def test_a_run_paused_while_queued_keeps_its_place_and_resume_publishes_it(tmp_path: Path) -> None:
    """Invariant: pausing a run whose integration waits in the queue leaves it paused (not blocked) with its entry
    in place; the queue passes over it -- the run behind it publishes, nobody publishes work its paused run would
    not receipt -- and resumed, its supervisor rolls the integration forward from ``queued`` and publishes it."""
    repo = queue_project(tmp_path)
    base = git(repo, "rev-parse", "main")
    with held_queue(repo):
        run_id = start(repo, one_file(tmp_path, "a", "src/a.txt"))
        wait_for(repo, run_id, lambda d: (d["integration"] or {}).get("status") == "queued", timeout=120)
        paused = command(repo, "agentops-run", "pause", run_id)
        assert paused.returncode == 0, paused.stderr
        wait_supervisor_gone(repo, run_id)
        behind = start(repo, one_file(tmp_path, "b", "src/b.txt"))
        wait_for(repo, behind, lambda d: (d["integration"] or {}).get("status") == "queued", timeout=120)
    wait_for(repo, behind, lambda d: d["status"] == "complete", timeout=120)
    doc = status(repo, run_id)
    assert doc["status"] == "paused" and doc["integration"]["status"] == "queued", doc
    states = {e["runId"]: e["state"] for e in queue_doc(repo)["entries"]}  # type: ignore[attr-defined]
    assert states == {run_id: "waiting", behind: "published"}
    assert "src/a.txt" not in git(repo, "ls-tree", "-r", "--name-only", "main")
    verified = verify_receipts(repo, f"{base}..main")  # nothing on the target lacks its receipt
    assert verified.returncode == 0, verified.stdout + verified.stderr
    resumed = command(repo, "agentops-run", "resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    doc = wait_for(repo, run_id, lambda d: d["status"] == "complete", timeout=120)
    assert doc["integration"]["queuePosition"] == 1
    assert git(repo, "rev-parse", "main") == doc["integration"]["candidate"]
    verified = verify_receipts(repo, f"{base}..main")
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.slow
def test_a_queue_ref_rewound_to_an_old_authentic_tip_never_publishes_an_entry_twice(tmp_path: Path) -> None:
    """Invariant: a queue ref rewound to an older commit the supervisors did write (a replay: it shows an entry that
    was published since as waiting again) is held against the runs' records: the replayed entry is settled as its
    run's record says it went -- published, with that candidate -- never merged again, and the next run publishes
    on top of what is already there."""
    repo = queue_project(tmp_path)
    base = git(repo, "rev-parse", "main")
    with held_queue(repo):
        first = start(repo, one_file(tmp_path, "a", "src/a.txt"))
        wait_for(repo, first, lambda d: (d["integration"] or {}).get("status") == "queued", timeout=120)
        waiting = git(repo, "rev-parse", "refs/agentops/queue/main")  # authentic: entry #1 waits here
    wait_for(repo, first, lambda d: d["status"] == "complete", timeout=120)
    git(repo, "update-ref", "refs/agentops/queue/main", waiting)  # replayed, as anyone with the repository can
    second = start(repo, one_file(tmp_path, "b", "src/b.txt"))
    wait_for(repo, second, lambda d: d["status"] == "complete", timeout=120)
    entries = {e["position"]: e for e in queue_doc(repo)["entries"]}  # type: ignore[attr-defined]
    assert entries[1]["state"] == "published" and entries[1]["runId"] == first, entries[1]
    assert entries[1]["candidate"] == status(repo, first)["integration"]["candidate"]
    assert entries[2]["state"] == "published" and entries[2]["runId"] == second
    chain = git(repo, "rev-list", "--first-parent", f"{base}..main").split()
    assert len(chain) == 2  # a's merge once, b's once
    assert git(repo, "show", "main:src/a.txt") == "a" and git(repo, "show", "main:src/b.txt") == "b"


@pytest.mark.slow
def test_a_deleted_queue_ref_is_rebuilt_from_the_runs_records_in_their_order(tmp_path: Path) -> None:
    """Invariant: with the queue ref deleted while runs wait in it, the next supervisor to process it restores
    every waiting run's entry from that run's own record, at its position, and publishes them in that order."""
    repo = queue_project(tmp_path)
    base = git(repo, "rev-parse", "main")
    with held_queue(repo):
        runs = [start(repo, one_file(tmp_path, name, f"src/{name}.txt")) for name in ("a", "b")]
        for run_id in runs:
            wait_for(repo, run_id, lambda d: (d["integration"] or {}).get("status") == "queued", timeout=120)
        positions = [status(repo, r)["integration"]["queuePosition"] for r in runs]
        git(repo, "update-ref", "-d", "refs/agentops/queue/main")  # the lease goes with it
    for run_id in runs:
        wait_for(repo, run_id, lambda d: d["status"] == "complete", timeout=120)
    entries = {e["runId"]: e for e in queue_doc(repo)["entries"]}  # type: ignore[attr-defined]
    assert [entries[r]["position"] for r in runs] == positions
    assert all(entries[r]["state"] == "published" for r in runs)
    in_order = sorted(runs, key=lambda r: entries[r]["position"])
    chain = git(repo, "rev-list", "--first-parent", "--reverse", f"{base}..main").split()
    assert chain == [s["commit"] for r in in_order for s in entries[r]["steps"]]
    log = git(repo, "log", "--format=%s", "refs/agentops/queue/main")
    assert "QUEUE_RECONCILED" in log


FLAKY_CHECK = """import pathlib, subprocess, sys
merged = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD^2"], capture_output=True).returncode == 0
seen = pathlib.Path({seen!r})
if merged and not seen.exists():  # the first verification of a candidate fails, once
    seen.write_text("failed once")
    sys.exit(1)
"""


@pytest.mark.slow
def test_a_candidate_that_fails_once_and_passes_on_the_same_tree_is_published_and_its_receipt_says_retried(
    tmp_path: Path,
) -> None:
    """Invariant: a flaky verification is not an eviction: the candidate that failed is verified once more on the
    same tree; passing then, it is published, and the queue entry, the run's record and the sealed receipt say it
    was retried."""
    seen = tmp_path / "seen"
    policy = QUEUE_POLICY.replace('argv = ["python3", "check.py"]', 'argv = ["python3", "flaky.py"]')
    repo = queue_project(tmp_path, policy + '[sandbox]\nmode = "none"\n')
    (repo / "flaky.py").write_text(FLAKY_CHECK.format(seen=str(seen)))
    git(repo, "add", "flaky.py")
    git(repo, "commit", "-q", "-m", "a check that fails a candidate once")
    runs = []
    with held_queue(repo):
        for name in ("a", "b"):
            runs.append(start(repo, one_file(tmp_path, name, f"src/{name}.txt")))
            wait_for(repo, runs[-1], lambda d: (d["integration"] or {}).get("status") == "queued", timeout=120)
    docs = [wait_for(repo, r, lambda d: d["status"] in ("complete", "blocked"), timeout=120) for r in runs]
    assert [d["status"] for d in docs] == ["complete", "complete"], docs
    assert seen.read_text() == "failed once"
    retried = [d for d in docs if d["integration"].get("queueRetried")]
    assert len(retried) == 1, [d["integration"] for d in docs]
    candidate = retried[0]["integration"]["candidate"]
    note = json.loads(git(repo, "notes", "--ref=agentops/receipts", "show", candidate))
    sealed = json.loads(base64.b64decode(note["payload"]))["predicate"]["integration"]["value"]
    assert sealed["queue"]["retried"] is True
    entry = next(e for e in queue_doc(repo)["entries"] if e["candidate"] == candidate)  # type: ignore[attr-defined]
    assert entry["retried"] is True and entry["verifications"] == 2


@pytest.mark.slow
def test_a_conflict_in_the_queue_becomes_a_repair_task_and_the_second_run_publishes_after_it(tmp_path: Path) -> None:
    """Invariant: two runs' deliveries that conflict never have one side dropped: the entry behind waits for the one
    ahead to publish, is then settled ``conflicted`` against the target's tip (paths and task named), its run plans
    a repair task whose worktree starts at that tip with the delivery being merged, the scripted coordinator has it
    resolved and finalizes again, and the run publishes through the queue after the first -- both sides on the
    target, every published commit covered by a receipt, the first run untouched."""
    repo = queue_project(tmp_path)
    base = git(repo, "rev-parse", "main")
    first = recipe(
        tmp_path,
        child("a", "Part a", [[write_step("src/base.txt", "from a\n"), commit_step("a"), HANDOFF]]),
        finalize=True,
        name="a.toml",
    )
    both = "from a\nfrom b\n"
    second = recipe(
        tmp_path,
        child(
            "b",
            "Part b",
            [[write_step("src/base.txt", "from b\n"), commit_step("b"), HANDOFF]],
            repair=[[write_step("src/base.txt", both), commit_step("keep both sides"), HANDOFF]],
        ),
        finalize=True,
        name="b.toml",
    )
    with held_queue(repo):  # both wait in the queue, a ahead of b
        runs = []
        for path in (first, second):
            runs.append(start(repo, path))
            wait_for(repo, runs[-1], lambda d: (d["integration"] or {}).get("status") == "queued", timeout=240)
    docs = [wait_for(repo, r, lambda d: d["status"] in ("complete", "blocked"), timeout=240) for r in runs]
    assert [d["status"] for d in docs] == ["complete", "complete"], docs
    a_run, b_run = runs
    conflicted = first_entry(repo, b_run)
    assert conflicted["state"] == "conflicted" and conflicted["code"] == "RUN_INTEGRATION_CONFLICT", conflicted
    assert conflicted["paths"] == ["src/base.txt"] and conflicted["base"] == docs[0]["integration"]["candidate"]
    [b_task] = [t for t in docs[1]["tasks"] if t["title"] == "Part b"]
    assert conflicted["conflicting"] == b_task["taskId"]
    [fixer] = [t for t in docs[1]["tasks"] if t["title"] == "Resolve the merge conflict of: Part b"]
    assert git(repo, "rev-parse", f"{fixer['delivery']}^1") == conflicted["base"]  # started at the target's tip
    assert git(repo, "rev-parse", f"{fixer['delivery']}^2") == b_task["delivery"]  # merging b's own delivery
    entries = [e for e in queue_doc(repo)["entries"]]  # type: ignore[attr-defined]
    assert [(e["runId"], e["state"]) for e in entries] == [
        (a_run, "published"),
        (b_run, "conflicted"),
        (b_run, "published"),
    ]
    assert git(repo, "show", "main:src/base.txt") == both.strip()
    assert git(repo, "rev-parse", "main") == entries[-1]["candidate"]
    assert docs[0]["integration"]["queuePosition"] == 1 and docs[1]["integration"]["queuePosition"] == 3
    refused = [e for e in events(repo, b_run) if e["code"] == "INTEGRATION_FAILED"]
    assert [e["data"]["failure"] for e in refused] == ["RUN_INTEGRATION_CONFLICT"]
    assert not [e for e in events(repo, a_run) if e["code"] == "INTEGRATION_FAILED"]
    verified = verify_receipts(repo, f"{base}..main")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    git(repo, "fsck", "--strict")


@pytest.mark.slow
@pytest.mark.parametrize("point", ["queue:publishing", "queue:moved"])
def test_kill_9_while_publishing_a_prefix_of_several_runs_loses_nothing_and_publishes_nothing_twice(
    tmp_path: Path, point: str
) -> None:
    """Invariant: with four runs in the queue, the processor killed with SIGKILL after recording a prefix of two
    runs' candidates as being published -- before its CAS, or after it with the checkouts not yet followed --
    loses nothing and publishes nothing twice: the runs' supervisors, started again, settle that prefix by what the
    target holds and publish the rest, and the end state is the one without the crash: all four published in queue
    order, each candidate verified once, the target moved forward only, every commit receipted, fsck clean."""
    repo = queue_project(tmp_path)
    base = git(repo, "rev-parse", "main")
    runs: list[str] = []
    with held_queue(repo):  # three runs queue up, then their supervisors die: the fourth's processes the queue
        for name in ("a", "b", "c"):
            runs.append(start(repo, one_file(tmp_path, name, f"src/{name}.txt")))
            wait_for(repo, runs[-1], lambda d: (d["integration"] or {}).get("status") == "queued", timeout=240)
        for run_id in runs:
            os.kill(supervisor_pid(repo, run_id), signal.SIGKILL)
            wait_supervisor_gone(repo, run_id)
        runs.append(start(repo, one_file(tmp_path, "d", "src/d.txt"), env={"AGENTOPS_FAULT": point}))
        wait_for(repo, runs[-1], lambda d: (d["integration"] or {}).get("status") == "queued", timeout=240)
    wait_supervisor_gone(repo, runs[-1])
    assert f"fault injection: SIGKILL at {point}" in supervisor_log(repo, runs[-1])
    prefix = [e for e in queue_doc(repo)["entries"] if e.get("publishing")]  # type: ignore[attr-defined]
    assert [e["runId"] for e in prefix] == runs[:2], prefix  # parallel = 2: a prefix of two, one CAS
    assert git(repo, "rev-parse", "main") == (prefix[-1]["candidate"] if point == "queue:moved" else base)
    supervisors = [
        subprocess.Popen(
            ["git", "agentops-run", "supervise", r], cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for r in runs
    ]
    try:
        for run_id in runs:
            wait_for(repo, run_id, lambda d: d["status"] == "complete", timeout=240)
    finally:
        for process in supervisors:
            process.wait(timeout=60)
    entries = queue_doc(repo)["entries"]  # type: ignore[index]
    assert [(e["runId"], e["state"]) for e in entries] == [(r, "published") for r in runs]  # type: ignore[union-attr]
    # verified once each, never again after the crash (the first one's tree is its delivery's: evidence reused)
    assert [e.get("verifications", 0) for e in entries] == [0, 1, 1, 1], entries  # type: ignore[union-attr]
    assert_published_in_order(repo, base, entries)  # type: ignore[arg-type]
