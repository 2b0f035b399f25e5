"""Refs and notes around a run are plain git objects a worker can write: a delivery ref created for a neighbour,
a forged ref and note adopted after a crash, a delivery ref moved after the fact, the target moved to an
unreviewed commit. Each is played by a scripted worker with plain git, in a real run."""

from __future__ import annotations

import base64
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from ..conftest import git
from ..helpers import HANDOFF, Part, child, commit_step, write_step
from ..runkit import (
    UNCONFINED,
    cli,
    events,
    project,
    recipe,
    start,
    status,
    stop,
    supervisor_pid,
    supervisor_running,
    task_by_title,
    verify_receipts,
    wait_for,
)

ATTACK = """import json, os, subprocess, sys, time
run_id = os.environ["AGENTOPS_RUN_ID"]
def git(*args):
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
def task_id(title):  # from the run state itself: a child's instructions list only its own task
    state = f"refs/agentops/runs/{run_id}/state"
    for _ in range(300):
        for task in git("ls-tree", "--name-only", f"{state}:tasks").split():
            latest = sorted(git("ls-tree", "--name-only", f"{state}:tasks/{task}").split())[-1]
            if json.loads(git("show", f"{state}:tasks/{task}/{latest}"))["title"] == title:
                return task
        time.sleep(0.1)
    sys.exit("no task " + title)
def delivery_ref(title):
    return f"refs/agentops/runs/{run_id}/deliveries/{task_id(title)}"
def evil_commit(path, text, parent="HEAD", message="evil"):
    env = {**os.environ, "GIT_INDEX_FILE": ".attack/index"}
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], input=text, capture_output=True, text=True,
                          check=True).stdout.strip()
    subprocess.run(["git", "read-tree", parent], check=True, env=env)
    subprocess.run(["git", "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}"], check=True, env=env)
    tree = subprocess.run(["git", "write-tree"], capture_output=True, text=True, check=True, env=env).stdout.strip()
    return git("commit-tree", tree, "-p", parent, "-m", message)
"""


def _attack(name: str, body: str, *, title: str = "Attacker") -> Part:
    """A worker that commits its own honest file, plays ``body`` (Python, after :data:`ATTACK`), hands off."""
    return child(
        name,
        title,
        [
            [
                write_step(f"src/{name}.txt", f"{name}\n"),
                commit_step(f"add {name}"),
                write_step(".attack/attack.py", ATTACK + body),
                {"run": ["sh", "-c", "python3 .attack/attack.py; status=$?; rm -rf .attack; exit $status"]},
                HANDOFF,
            ]
        ],
    )


def _victim(*, delay: float = 0.0) -> Part:
    steps: list[Any] = [write_step("src/victim.txt", "honest\n"), commit_step("add victim")]
    if delay:
        steps.append({"sleep": delay})
    return child("v", "Victim", [[*steps, HANDOFF]])


def _codes(log: list[dict[str, Any]]) -> list[str]:
    return [e["code"] for e in log]


def _complete(repo: Path, run_id: str, timeout: float = 180) -> dict[str, Any]:
    return wait_for(repo, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=timeout)


@pytest.mark.slow
def test_a_delivery_ref_created_for_a_neighbour_is_quarantined_and_never_blocks_it(tmp_path: Path) -> None:
    """Before: the victim's passing handoff was refused RUN_DELIVERY_CHANGED twice and the run blocked.
    Unconfined, like every ref-writing attack here: in the sandbox the kernel refuses the ref write itself."""
    repo = project(tmp_path, extra_policy=UNCONFINED)
    body = 'git("update-ref", delivery_ref("Victim"), git("rev-parse", "HEAD"), "")\n'
    run_id = start(repo, recipe(tmp_path, _attack("a", body) + _victim(delay=3.0), finalize=True))
    try:
        doc = _complete(repo, run_id)
    finally:
        stop(repo, run_id)
    assert doc["status"] == "complete", doc
    log = events(repo, run_id)
    quarantined = [e["data"] for e in log if e["code"] == "RUN_REF_QUARANTINED"]
    victim = task_by_title(doc, "Victim")["taskId"]
    assert [q["ref"] for q in quarantined] == [f"refs/agentops/runs/{run_id}/deliveries/{victim}"], quarantined
    attacker_head = git(
        repo, "rev-parse", f"refs/agentops/runs/{run_id}/deliveries/{task_by_title(doc, 'Attacker')['taskId']}"
    )
    assert git(repo, "rev-parse", quarantined[0]["quarantinedAs"]) == attacker_head  # kept for whoever looks
    assert git(repo, "show", "main:src/victim.txt") == "honest"
    assert "RUN_DELIVERY_CHANGED" not in {e["data"].get("code") for e in log if e["code"] == "REQUEST_REFUSED"}


@pytest.mark.slow
def test_a_forged_delivery_ref_and_note_are_not_adopted_after_a_kill_9(tmp_path: Path) -> None:
    """Before: the next supervisor logged TASK_DELIVERY_ADOPTED for a delivery nobody verified."""
    repo = project(tmp_path, extra_policy=UNCONFINED)
    body = (
        'ref = delivery_ref("Victim")\n'
        'evil = evil_commit("src/victim.txt", "EVIL\\n")\n'
        'note = {"runId": run_id, "taskId": ref.rsplit("/", 1)[1], "workerId": "worker-x", "generation": 1,\n'
        '        "sourceCommit": evil, "deliveryDigest": "0" * 64, "contractHash": "0" * 64, "evidence": [],\n'
        '        "noChange": False, "sourceFiles": []}\n'
        'git("notes", "--ref=agentops/deliveries", "add", "-f", "-m", json.dumps(note), evil)\n'
        'git("update-ref", ref, evil, "")\n'
    )
    run_id = start(repo, recipe(tmp_path, _attack("a", body) + _victim(delay=6.0), finalize=True))
    try:
        wait_for(repo, run_id, lambda d: task_by_title(d, "Attacker")["status"] == "delivered", timeout=120)
        os.kill(supervisor_pid(repo, run_id), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while supervisor_running(repo, run_id) and time.monotonic() < deadline:
            time.sleep(0.05)
        done = cli(repo, "agentops-run", "resume", run_id)  # spawns a new supervisor
        assert done.returncode == 0, done.stderr
        doc = _complete(repo, run_id)
    finally:
        stop(repo, run_id)
    log = events(repo, run_id)
    assert "TASK_DELIVERY_ADOPTED" not in _codes(log)
    assert any(e["code"] == "RUN_REF_QUARANTINED" and "not adopted" in e["data"]["why"] for e in log), log
    assert doc["status"] == "complete", doc
    assert git(repo, "show", "main:src/victim.txt") == "honest"


@pytest.mark.slow
def test_a_moved_delivery_ref_is_reported_and_a_target_moved_to_an_unreviewed_commit_is_receipted_as_such(
    tmp_path: Path,
) -> None:
    """The recorded delivery is merged, the moved ref is quarantined and restored; the candidate is built on the
    target's new tip, and the run log and the receipt both name the commit nobody reviewed."""
    repo = project(tmp_path, extra_policy=UNCONFINED)
    body = (
        'ref = delivery_ref("Victim")\n'
        "for _ in range(300):\n"
        '    if subprocess.run(["git", "rev-parse", "-q", "--verify", ref], capture_output=True).returncode == 0:\n'
        "        break\n"
        "    time.sleep(0.1)\n"
        'git("update-ref", ref, evil_commit("src/victim.txt", "EVIL\\n"))\n'
        'main = git("rev-parse", "refs/heads/main")\n'
        'backdoor = evil_commit("backdoor.py", "pwned\\n", parent=main, message="totally fine")\n'
        'git("update-ref", "refs/heads/main", backdoor, main)\n'
        'open(os.environ["BACKDOOR_OUT"], "w").write(backdoor)\n'
    )
    git(repo, "checkout", "-q", "--detach")  # main checked out would make the run wait: that is issue 11's test
    out = tmp_path / "backdoor-commit"
    os.environ["BACKDOOR_OUT"] = str(out)  # the hermetic fixture restores the environment after the test
    try:
        run_id = start(repo, recipe(tmp_path, _victim() + _attack("a", body), finalize=True))
        try:
            doc = _complete(repo, run_id)
        finally:
            stop(repo, run_id)
    finally:
        os.environ.pop("BACKDOOR_OUT", None)
    assert doc["status"] == "complete", doc
    log = events(repo, run_id)
    victim = task_by_title(doc, "Victim")["taskId"]
    moved = [e["data"] for e in log if e["code"] == "RUN_REF_QUARANTINED"]
    assert [m["ref"] for m in moved] == [f"refs/agentops/runs/{run_id}/deliveries/{victim}"], moved
    assert git(repo, "show", "main:src/victim.txt") == "honest"  # the recorded delivery, not the moved ref
    backdoor = out.read_text()
    assert git(repo, "merge-base", "--is-ancestor", backdoor, "main", check=False) == ""  # built on it, as said
    unreviewed = [e["data"] for e in log if e["code"] == "RUN_TARGET_UNREVIEWED"]
    assert unreviewed and unreviewed[-1]["unreviewed"] == [backdoor], unreviewed
    receipt = json.loads(git(repo, "notes", "--ref=agentops/receipts", "show", "main"))
    predicate = json.loads(base64.b64decode(receipt["payload"]))["predicate"]
    assert predicate["integration"]["value"]["unreviewed"] == [backdoor]
    verified = verify_receipts(repo, "main")
    assert verified.returncode == 0, verified.stdout + verified.stderr  # what CI makes of it: the receipts issue
    assert status(repo, run_id)["status"] == "complete"


def test_at_integration_a_delivery_whose_evidence_is_gone_or_forged_does_not_hold(tmp_path: Path) -> None:
    """Invariant: the state record, the frozen ref, an authentic delivery note and authentic supervisor evidence
    must agree; a forged note line appended after the real one is skipped, a removed evidence note is a mismatch."""
    from git_agentops.clock import SystemClock
    from git_agentops.gitstore.repo import open_store
    from git_agentops.integrate import custody
    from git_agentops.model.task import delivered
    from git_agentops.runs import state as runstate

    from ..helpers import simple_child

    repo = project(tmp_path)
    run_id = start(repo, recipe(tmp_path, simple_child("a", "src/a.txt")))
    try:
        doc = wait_for(
            repo, run_id, lambda d: any(t["title"] == "Part A" and t["status"] == "delivered" for t in d["tasks"])
        )
    finally:
        stop(repo, run_id)
    store = open_store(repo, clock=SystemClock())
    view = runstate.read(store, run_id)
    task = view.task(task_by_title(doc, "Part A")["taskId"])
    policy_hash = view.run().policy_config_hash
    assert custody.check_delivered(store, run_id, task, policy_hash) is None
    commit = delivered(task).commit
    forged = {"runId": run_id, "taskId": task.id, "sourceCommit": commit, "deliveryDigest": "0" * 64, "evidence": []}
    git(repo, "notes", "--ref=agentops/deliveries", "append", "-m", json.dumps(forged), commit)
    assert custody.check_delivered(store, run_id, task, policy_hash) is None  # the authentic line still speaks
    git(repo, "notes", "--ref=agentops/evidence", "remove", commit)
    mismatch = custody.check_delivered(store, run_id, task, policy_hash)
    assert mismatch is not None and "evidence" in mismatch.why
    assert custody.check_delivered(store, run_id, task, "f" * 64) is not None  # and never under another policy


@pytest.mark.slow
def test_a_finalize_again_after_a_failed_integration_finds_its_own_candidate_ref_and_quarantines_nothing(
    tmp_path: Path,
) -> None:
    """Invariant: the candidate ref an earlier integration attempt of the run left is the supervisor's own: the
    coordinator's next finalize moves it on without a ``RUN_REF_QUARANTINED`` alarm (which stays for a ref someone
    else moved: test_a_forged_delivery_ref_and_note_are_not_adopted_after_a_kill_9)."""
    from ..mergequeue.test_queue_runs import CHECK_PY as FAILS_ON_MERGES

    repo = project(tmp_path)
    (repo / "check.py").write_text(FAILS_ON_MERGES)
    git(repo, "commit", "-q", "-am", "a check that fails poison.txt on a merge")
    part = child(
        "poison",
        "Part poison",
        [[write_step("src/poison.txt", "p\n"), commit_step("Add poison"), {"sleep": 2}, HANDOFF]],
    )
    run_id = start(repo, recipe(tmp_path, part, finalize=True))
    (repo / "notes.txt").write_text("the target moves on while the run works\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-q", "-m", "a person's commit: the candidate is a real merge, verified afresh")
    wait_for(repo, run_id, lambda d: d["status"] != "active", timeout=180)
    codes = [e["code"] for e in events(repo, run_id)]
    assert codes.count("INTEGRATION_FAILED") >= 2, codes  # it finalized again after the first failure
    assert "RUN_REF_QUARANTINED" not in codes


@pytest.mark.slow
def test_another_run_s_whole_integration_is_not_reported_unreviewed_but_a_plain_commit_is(tmp_path: Path) -> None:
    """Invariant: the target commits a run reports as unreviewed are exactly the ones no integration accounts for:
    every merge step of another run's receipted integration -- not only the receipted last one -- counts as
    reviewed (held against that run's own record), a person's plain commit does not."""
    from ..helpers import simple_child

    repo = project(tmp_path)
    first = start(
        repo, recipe(tmp_path, simple_child("a", "src/a.txt") + simple_child("b", "src/b.txt"), finalize=True)
    )
    slow = child("c", "Part C", [[write_step("src/c.txt", "c\n"), commit_step("Add c"), {"sleep": 3}, HANDOFF]])
    second = start(repo, recipe(tmp_path, slow, finalize=True, name="second.toml"))
    wait_for(repo, first, lambda d: d["status"] == "complete", timeout=120)
    (repo / "plain.txt").write_text("a person's commit\n")
    git(repo, "add", "plain.txt")
    git(repo, "commit", "-q", "-m", "a plain commit")
    plain = git(repo, "rev-parse", "HEAD")
    wait_for(repo, second, lambda d: d["status"] == "complete", timeout=120)
    reported = [e["data"]["unreviewed"] for e in events(repo, second) if e["code"] == "RUN_TARGET_UNREVIEWED"]
    assert reported and reported[-1] == [plain], reported  # a's two merges are a's, receipted
