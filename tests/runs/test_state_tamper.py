"""Run state only the supervisor writes: a commit appended with plain git is foreign, never read or built on, and
contained -- the last authentic state restored on top, the foreign commits kept as evidence, the run blocked."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
from pathlib import Path
from typing import Any

import pygit2
import pytest

from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.events import seal
from git_agentops.gitstore.journal import Change, Event, Journal
from git_agentops.gitstore.repo import Store
from git_agentops.model.run import Role, Run, RunStatus, Worker
from git_agentops.model.task import Criterion, TaskStatus, new_task
from git_agentops.runs import controls, tamper
from git_agentops.runs import state as runstate
from git_agentops.runs import tasks as taskbook
from git_agentops.supervisor import actions
from git_agentops.supervisor.cache import StateCache

from ..conftest import git
from ..helpers import HANDOFF, child, commit_step, simple_child, write_step
from ..runkit import UNCONFINED, cli, command, events, project, recipe, start, stop, supervisor_log, supervisor_running

pytestmark = pytest.mark.event_data_free  # _seed writes RUN_CREATED and POLICY_BOUND with made-up data
RUN = "r1"
STATE = runstate.state_ref(RUN)
POLICY = runstate.policy_ref(RUN)
HONEST = "1" * 40
RECORD = "records/t1.json"  # a record naming a delivered commit (real task records are in the end-to-end test)


def _seed(store: Store, run_id: str = RUN) -> Journal:
    """A run's state (run.json, a task record naming its delivery) and its policy binding, written by the toolkit."""
    journal = runstate.journal(store, run_id)
    run = Run(run_id, "goal", "main", "0" * 40, "scripted", "/repo", "0" * 64, 600, 0.0)

    def create(change: Change) -> None:
        runstate.put_run(change, run)
        change.put(RECORD, json.dumps({"delivery": HONEST}).encode())

    journal.mutate(create, Event("RUN_CREATED", "created"))
    journal.mutate(lambda change: change.put("notes/n", b"x"), Event("NOTE", "a second event"))
    Journal(store, runstate.policy_ref(run_id)).mutate(
        lambda change: change.put("config.json", b'{"version":1}\n'), Event("POLICY_BOUND", "bound")
    )
    return journal


def _git(repo: Path, *args: str, stdin: str | None = None, index: Path | None = None) -> str:
    env = {**os.environ, "GIT_INDEX_FILE": str(index)} if index else None
    done = subprocess.run(["git", *args], cwd=repo, input=stdin, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _append_foreign(repo: Path, ref: str, path: str, content: str, *, mac: str = "copied") -> str:
    """The attacker's way: plain ``git commit-tree`` + ``git update-ref`` on top of ``ref``, with the tip's own event
    trailer and its MAC copied (``mac="copied"``) or a random MAC (``"random"``); returns the new commit."""
    tip = _git(repo, "rev-parse", ref)
    index = repo / ".git" / "attacker-index"
    blob = _git(repo, "hash-object", "-w", "--stdin", stdin=content)
    _git(repo, "read-tree", tip, index=index)
    _git(repo, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", index=index)
    tree = _git(repo, "write-tree", index=index)
    message = _git(repo, "log", "-1", "--format=%B", tip)
    if mac == "random":
        message = re.sub(r"Agentops-Mac: [0-9a-f]{64}", f"Agentops-Mac: {secrets.token_hex(32)}", message)
    assert "Agentops-Event: " in message and "Agentops-Mac: " in message
    forged = _git(repo, "commit-tree", tree, "-p", tip, "-F", "-", stdin=message + "\n")
    _git(repo, "update-ref", ref, forged, tip)
    return forged


def _is_ancestor(repo: Path, ancestor: str, descendant: str) -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", ancestor, descendant], cwd=repo).returncode == 0


# -- detection -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mac", ["copied", "random"])
def test_a_commit_appended_with_plain_git_is_foreign_and_no_read_accepts_it(
    store: Store, repo_path: Path, mac: str
) -> None:
    journal = _seed(store)
    forged = _append_foreign(repo_path, STATE, RECORD, '{"delivery": "' + "e" * 40 + '"}', mac=mac)
    for read in (journal.read, lambda: runstate.read(store, RUN), lambda: StateCache(store, RUN).journal.read()):
        with pytest.raises(AgentOpsError) as caught:
            read()
        assert caught.value.code == "RUN_STATE_TAMPERED"
        assert caught.value.details == {"ref": STATE, "commit": forged}
    found = journal.foreign()
    assert found is not None and found.commits == (forged,) and found.count == 1
    assert found.authentic == git(repo_path, "rev-parse", f"{forged}^")
    assert journal.read(verify=False).get(RECORD) == b'{"delivery": "' + b"e" * 40 + b'"}'  # forensics only


def test_mutate_refuses_to_build_on_a_foreign_tip(store: Store, repo_path: Path) -> None:
    journal = _seed(store)
    forged = _append_foreign(repo_path, STATE, "notes/n", "forged")
    for write in (
        lambda: journal.mutate(lambda change: change.put("notes/m", b"y"), Event("NOTE", "honest")),
        lambda: runstate.mutate(journal, lambda change, view: view.run(), Event("NOTE", "honest")),
    ):
        with pytest.raises(AgentOpsError) as caught:
            write()
        assert caught.value.code == "RUN_STATE_TAMPERED" and caught.value.details["commit"] == forged
    assert git(repo_path, "rev-parse", STATE) == forged  # nothing was built on it


def test_a_mac_replayed_from_another_runs_journal_is_foreign(store: Store, repo_path: Path) -> None:
    """The MAC binds the ref: the toolkit's own commit of run r2, or a MAC it made for r2 over exactly this tree,
    parent and message, authenticates nothing on r1."""
    journal = _seed(store)
    other = _seed(store, "r2")
    tip = git(repo_path, "rev-parse", STATE)
    git(repo_path, "update-ref", STATE, git(repo_path, "rev-parse", runstate.state_ref("r2")), tip)
    with pytest.raises(AgentOpsError) as whole_commit:
        journal.read()
    assert whole_commit.value.code == "RUN_STATE_TAMPERED"
    git(repo_path, "update-ref", STATE, tip)

    text = Event("NOTE", "replayed").message(1.0)
    tree = git(repo_path, "rev-parse", f"{tip}^{{tree}}")
    message = seal(store, runstate.state_ref("r2"), tree, [tip], text)  # made by the toolkit, for the other ref
    replayed = _git(repo_path, "commit-tree", tree, "-p", tip, "-F", "-", stdin=message)
    git(repo_path, "update-ref", STATE, replayed, tip)
    commit = store.repo.get(replayed)
    assert isinstance(commit, pygit2.Commit)
    assert other.is_authentic(commit) and not journal.is_authentic(commit)  # a valid MAC -- for r2, not for r1
    message_r1 = seal(store, STATE, tree, [tip], text)
    assert message_r1.split("Agentops-Mac: ")[1] != message.split("Agentops-Mac: ")[1]
    with pytest.raises(AgentOpsError) as caught:
        journal.read()
    assert caught.value.code == "RUN_STATE_TAMPERED"


def test_a_damaged_key_file_is_key_invalid_not_a_verdict(store: Store, repo_path: Path) -> None:
    _seed(store)
    key = repo_path / ".git" / "agentops" / "keys" / "mac.key"
    assert key.stat().st_size == 32 and key.stat().st_mode & 0o777 == 0o600
    key.write_bytes(b"short")
    for args in (("log", RUN), ("status", RUN)):  # a fresh process reads the key file again
        done = cli(repo_path, "agentops-run", *args)
        assert done.returncode == 3 and "error[KEY_INVALID]" in done.stderr, done.stderr


# -- containment ---------------------------------------------------------------------------------------------------


def test_containment_restores_the_last_authentic_tree_on_top_and_keeps_the_foreign_commits(
    store: Store, repo_path: Path
) -> None:
    journal = _seed(store)
    authentic = git(repo_path, "rev-parse", STATE)
    first = _append_foreign(repo_path, STATE, RECORD, '{"delivery": "' + "e" * 40 + '"}')
    second = _append_foreign(repo_path, STATE, "notes/n", "more")
    [done] = tamper.contain(store, RUN)
    assert (done.ref, done.foreign, done.count, done.restored_from) == (STATE, (second, first), 2, authentic)
    tip = git(repo_path, "rev-parse", STATE)
    assert done.commit == tip and git(repo_path, "rev-parse", f"{tip}^") == second  # on top of the foreign tip
    assert _is_ancestor(repo_path, first, STATE) and _is_ancestor(repo_path, second, STATE)  # kept as evidence
    view = runstate.read(store, RUN)  # authentic again
    assert view.view.get(RECORD) == json.dumps({"delivery": HONEST}).encode()
    assert view.view.get("notes/n") == b"x"
    run = view.run()
    assert run.status is RunStatus.BLOCKED and run.disable_restart
    assert run.status_reason is not None and run.status_reason.startswith("RUN_STATE_TAMPERED: ")
    changed = git(repo_path, "diff", "--name-only", authentic, STATE).splitlines()
    assert changed == ["run.json"]  # the authentic tree, with only the run blocked
    [latest, *older] = list(journal.log())
    assert latest.code == "RUN_STATE_TAMPERED" and not latest.foreign
    assert latest.data == {"ref": STATE, "foreign": [second, first], "foreignCount": 2, "restoredFrom": authentic}
    assert [(e.commit, e.foreign) for e in older[:3]] == [(second, True), (first, True), (authentic, False)]
    assert tamper.contain(store, RUN) == []  # nothing left to contain
    git(repo_path, "fsck", "--strict", "--no-dangling")


def test_a_tampered_policy_binding_is_restored_and_the_run_blocked(store: Store, repo_path: Path) -> None:
    _seed(store)
    authentic = git(repo_path, "rev-parse", POLICY)
    forged = _append_foreign(repo_path, POLICY, "config.json", '{"version":1,"verify":"nothing"}')
    with pytest.raises(AgentOpsError) as caught:
        Journal(store, POLICY).read()
    assert caught.value.code == "RUN_STATE_TAMPERED"
    [done] = tamper.contain(store, RUN)
    assert (done.ref, done.foreign, done.restored_from) == (POLICY, (forged,), authentic)
    assert Journal(store, POLICY).read().get("config.json") == b'{"version":1}\n'
    assert git(repo_path, "rev-parse", f"{POLICY}^") == forged
    run = runstate.read(store, RUN).run()
    assert run.status is RunStatus.BLOCKED and POLICY in (run.status_reason or "")
    [event, *_] = list(runstate.journal(store, RUN).log())
    assert event.code == "RUN_STATE_TAMPERED" and event.data["ref"] == POLICY and event.data["foreign"] == [forged]


def test_a_ref_with_no_authentic_commit_is_reported_and_left_alone(store: Store, repo_path: Path) -> None:
    _seed(store)
    tree = git(repo_path, "rev-parse", f"{STATE}^{{tree}}")
    made = _git(repo_path, "commit-tree", tree, "-m", "RUN_CREATED: by someone\n\nAgentops-Event: {}")
    git(repo_path, "update-ref", STATE, made)  # a whole new chain, none of it the toolkit's
    [done] = tamper.contain(store, RUN)
    assert not done.restored and done.commit is None and done.foreign == (made,)
    assert git(repo_path, "rev-parse", STATE) == made  # no invented state
    with pytest.raises(AgentOpsError) as caught:
        controls.resume(store, RUN, store.clock)
    assert caught.value.code == "RUN_STATE_TAMPERED" and "nothing was restored" in caught.value.message
    with pytest.raises(AgentOpsError) as refresh:
        StateCache(store, RUN).refresh()
    assert refresh.value.code == "RUN_STATE_TAMPERED"


def test_resume_contains_first_and_accepting_the_restored_state_takes_a_second_resume(
    store: Store, repo_path: Path
) -> None:
    _seed(store)
    forged = _append_foreign(repo_path, STATE, RECORD, '{"delivery": "' + "e" * 40 + '"}')
    with pytest.raises(AgentOpsError) as caught:
        controls.resume(store, RUN, store.clock)
    assert caught.value.code == "RUN_STATE_TAMPERED" and "Resume again" in caught.value.message
    assert caught.value.details["contained"][0]["foreign"] == [forged]
    assert runstate.read(store, RUN).run().status is RunStatus.BLOCKED
    assert controls.resume(store, RUN, store.clock).status is RunStatus.ACTIVE
    assert runstate.read(store, RUN).view.get(RECORD) == json.dumps({"delivery": HONEST}).encode()


def test_the_supervisors_state_cache_contains_a_foreign_tip_and_serves_the_blocked_run(
    store: Store, repo_path: Path
) -> None:
    _seed(store)
    cache = StateCache(store, RUN)
    assert cache.run().status is RunStatus.ACTIVE
    assert cache.refresh() is False  # the tip did not move: nothing re-read
    forged = _append_foreign(repo_path, STATE, RECORD, '{"delivery": "' + "e" * 40 + '"}')
    assert cache.refresh() is True
    assert cache.run().status is RunStatus.BLOCKED
    assert cache.view.view.get(RECORD) == json.dumps({"delivery": HONEST}).encode()
    assert [c.foreign for c in cache.contained] == [(forged,)]
    policy = _append_foreign(repo_path, POLICY, "config.json", "{}")
    cache.journal.mutate(lambda change: change.put("notes/n", b"z"), Event("NOTE", "the state moves"))
    cache.refresh()  # the policy binding is checked whenever the state moved
    assert [c.foreign for c in cache.contained] == [(forged,), (policy,)]


def test_run_log_shows_foreign_commits_marked_instead_of_failing(store: Store, repo_path: Path) -> None:
    _seed(store)
    forged = _append_foreign(repo_path, STATE, "notes/n", "forged", mac="random")
    bare = _git(repo_path, "commit-tree", f"{forged}^{{tree}}", "-p", forged, "-m", "not an event at all")
    git(repo_path, "update-ref", STATE, bare, forged)
    text = command(repo_path, "agentops-run", "log", RUN)
    assert text.returncode == 0, text.stderr
    assert f"[foreign] {forged[:12]} NOTE: a second event" in text.stdout
    assert f"[foreign] {bare[:12]} UNKNOWN: not an event at all" in text.stdout
    done = command(repo_path, "agentops-run", "log", RUN, "--json")
    docs = json.loads(done.stdout)["events"]
    assert [(d["code"], d["foreign"]) for d in docs] == [
        ("RUN_CREATED", False),
        ("NOTE", False),
        ("NOTE", True),
        ("UNKNOWN", True),
    ]


# -- the supervisor records what the post-merge hook can only warn about ------------------------------------------


def test_a_handoff_that_merges_a_non_delivery_is_recorded_by_the_supervisor(store: Store, repo_path: Path) -> None:
    journal = _seed(store)
    base = git(repo_path, "rev-parse", "HEAD")
    tree = git(repo_path, "rev-parse", "HEAD^{tree}")
    delivery = _git(repo_path, "commit-tree", tree, "-p", base, "-m", "a dependency's delivery")
    side = _git(repo_path, "commit-tree", tree, "-p", base, "-m", "something else")
    merged = _git(repo_path, "commit-tree", tree, "-p", base, "-p", delivery, "-m", "merge the delivery")
    head = _git(repo_path, "commit-tree", tree, "-p", merged, "-p", side, "-m", "merge something else")
    crit, root = [Criterion("c1", "done")], taskbook.new_task_id()
    dep = new_task(taskbook.new_task_id(), title="Dep", intent="i", goal="goal", criteria=crit, parent=root)
    mine = new_task(
        taskbook.new_task_id(), title="Mine", intent="i", goal="goal", criteria=crit, parent=root, dependencies=[dep.id]
    )

    def plan(change: Change) -> None:
        taskbook.create(change, _delivered(dep, delivery))
        taskbook.create(change, mine)

    journal.mutate(plan, Event("PLANNED", "planned"))
    worker = Worker("worker-x", Role.CHILD, "scripted", "/w", "refs/heads/agentops/r1/worker-x", task_id=mine.id)
    loop = _Loop(StateCache(store, RUN))
    actions._note_foreign_merges(loop, _based(worker, base), head)  # type: ignore[arg-type]
    event = next(journal.log())
    assert event.code == "WORKER_FOREIGN_MERGE" and event.data["commits"] == [side] and side[:12] in event.summary
    actions._note_foreign_merges(loop, _based(worker, base), merged)  # type: ignore[arg-type]
    assert next(journal.log()) == event  # merging only the dependency's delivery is nothing to note


class _Loop:
    def __init__(self, state: StateCache) -> None:
        self.state = state
        self.journal = state.journal


def _delivered(task: Any, commit: str) -> Any:
    from dataclasses import replace

    from git_agentops.model.delivery import CommitId, Delivery, Digest

    return replace(task, status=TaskStatus.DELIVERED, delivery=Delivery(CommitId(commit), Digest("0" * 64), "w", 1))


def _based(worker: Worker, base: str) -> Worker:
    from dataclasses import replace

    return replace(worker, base=base)


# -- end to end: a worker swaps its neighbour's delivered commit -------------------------------------------------

ATTACK = r"""
import json, os, subprocess, sys, tempfile, time

def git(*args, stdin=None, index=None):
    env = dict(os.environ, GIT_INDEX_FILE=index) if index else None
    done = subprocess.run(["git", *args], input=stdin, capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"git {args}: {done.stderr}")
    return done.stdout.strip()

def with_file(base, path, content, index):
    blob = git("hash-object", "-w", "--stdin", stdin=content)
    git("read-tree", base, index=index)
    git("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", index=index)
    return git("write-tree", index=index)

ref = "refs/agentops/runs/" + os.environ["AGENTOPS_RUN_ID"] + "/state"
index = os.path.join(tempfile.mkdtemp(), "index")
for _ in range(900):
    tip = git("rev-parse", ref)
    delivered = []
    for task in git("ls-tree", "--name-only", f"{tip}:tasks").split():
        revision = sorted(git("ls-tree", "--name-only", f"{tip}:tasks/{task}").split())[-1]
        doc = json.loads(git("show", f"{tip}:tasks/{task}/{revision}"))
        if (doc.get("extra") or {}).get("delivery"):
            delivered.append((task, revision, doc))
    if not delivered:
        time.sleep(0.1)
        continue
    task, revision, doc = delivered[0]
    honest = doc["extra"]["delivery"]["commit"]
    evil = git("commit-tree", with_file(honest, "src/a.txt", "EVIL\n", index), "-p", honest, "-m", "Add a (better)")
    doc["extra"]["delivery"]["commit"] = evil
    tree = with_file(tip, f"tasks/{task}/{revision}", json.dumps(doc) + "\n", index)
    message = git("log", "-1", "--format=%B", tip)  # the tip's own event trailer and MAC, copied
    forged = git("commit-tree", tree, "-p", tip, "-F", "-", stdin=message + "\n")
    if subprocess.run(["git", "update-ref", ref, forged, tip]).returncode == 0:
        print("swapped the delivery of", task, honest, "for", evil, "in", forged)
        raise SystemExit(0)
raise SystemExit("no delivery to swap")
"""


def _status(repo: Path, run_id: str) -> dict[str, Any] | None:
    """``run status --json`` (run in this process, ``runkit.command``), or None while the state is foreign (the
    supervisor contains it on its next tick)."""
    done = command(repo, "agentops-run", "status", run_id, "--json")
    if done.returncode == 3 and "RUN_STATE_TAMPERED" in done.stderr:
        return None
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def _wait(repo: Path, run_id: str, status: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        doc = _status(repo, run_id)
        if doc is not None and doc["status"] == status:
            return doc
        if time.monotonic() > deadline:
            raise AssertionError(f"not {status}: {json.dumps(doc, indent=1)}\n{supervisor_log(repo, run_id)}")
        time.sleep(0.5)


@pytest.mark.slow
def test_a_worker_swapping_a_neighbours_delivery_is_contained_and_the_target_gets_only_honest_work(
    tmp_path: Path,
) -> None:
    """Unconfined: in the sandbox the worker cannot write the state ref at all (test_sandbox_runs)."""
    repo = project(tmp_path, extra_policy=UNCONFINED)
    attacker = child(
        "b",
        "Part B",
        [
            [{"run": ["python3", "-c", ATTACK]}, "{ sleep = 300 }"],  # generation 1 tampers, then waits to be stopped
            [write_step("src/b.txt", "b\n"), commit_step("Add b"), HANDOFF],  # after the resume: honest work
        ],
    )
    run_id = start(repo, recipe(tmp_path, simple_child("a", "src/a.txt") + attacker, finalize=True))
    state = runstate.state_ref(run_id)
    try:
        blocked = _wait(repo, run_id, "blocked")
        assert (blocked["statusReason"] or "").startswith("RUN_STATE_TAMPERED: "), blocked
        log = events(repo, run_id)
        [foreign] = [e for e in log if e["foreign"]]
        [contained] = [e for e in log if e["code"] == "RUN_STATE_TAMPERED"]
        assert contained["data"]["ref"] == state and contained["data"]["foreign"] == [foreign["commit"]]
        assert not contained["foreign"]
        assert contained["data"]["restoredFrom"] == git(repo, "rev-parse", f"{foreign['commit']}^")
        a = next(t for t in blocked["tasks"] if t["title"] == "Part A")
        revision = git(repo, "ls-tree", "--name-only", f"{foreign['commit']}:tasks/{a['taskId']}").split()[-1]
        swapped = git(repo, "show", f"{foreign['commit']}:tasks/{a['taskId']}/{revision}")
        evil = json.loads(swapped)["extra"]["delivery"]["commit"]
        honest = a["delivery"]
        assert evil != honest and git(repo, "show", f"{evil}:src/a.txt") == "EVIL"
        assert git(repo, "rev-parse", f"refs/agentops/runs/{run_id}/deliveries/{a['taskId']}") == honest
        deadline = time.monotonic() + 60
        while supervisor_running(repo, run_id):  # a blocked run ends its supervisor, every worker stopped
            assert time.monotonic() < deadline, supervisor_log(repo, run_id)
            time.sleep(0.1)
        assert f"RUN_STATE_TAMPERED: {state} held 1 commit(s)" in supervisor_log(repo, run_id)
        stopped = _status(repo, run_id)
        assert stopped is not None and {w["status"] for w in stopped["workers"]} <= {"stopped", "delivered", "idle"}

        resumed = command(repo, "agentops-run", "resume", run_id)  # a person accepts the restored state
        assert resumed.returncode == 0, resumed.stderr
        done = _wait(repo, run_id, "complete", timeout=180)
    finally:
        stop(repo, run_id)
    b = next(t for t in done["tasks"] if t["title"] == "Part B")
    assert b["status"] == "delivered" and next(t for t in done["tasks"] if t["title"] == "Part A")["delivery"] == honest
    assert _is_ancestor(repo, honest, "main") and not _is_ancestor(repo, evil, "main")
    assert git(repo, "show", "main:src/a.txt") == "a" and git(repo, "show", "main:src/b.txt") == "b"
    assert all(not e["foreign"] for e in events(repo, run_id) if e["commit"] != foreign["commit"])
    assert _is_ancestor(repo, foreign["commit"], state)  # the evidence stays in the run's history
    git(repo, "fsck", "--strict")
