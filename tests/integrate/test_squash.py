"""``[run] squash = true``: a repaired task lands as one commit on its base, so its broken attempt is never reachable
from the target (``git bisect`` cannot walk into it); ``squash = false`` keeps the task's commits as they were.

Why: a task refused once and repaired delivered its worker's branch as it was -- the commit that failed verification
included -- and the integration merged it into the target. With squash the supervisor delivers instead one commit
with the repaired tree, and verifies *that* commit (the one that lands), not the worker's.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pygit2
import pytest

from git_agentops.canonical import digest
from git_agentops.gitstore.repo import Store
from git_agentops.integrate.squash import TRAILER, squash

from ..conftest import commit_files, git
from ..helpers import HANDOFF, child, commit_step, simple_child, write_step
from ..runkit import cli, events, project, recipe, status

# -- the squash itself, on a plain repository ---------------------------------------------------------------------


def test_a_task_of_several_commits_becomes_one_commit_on_its_base_with_the_last_tree_author_and_message(
    store: Store, repo_path: Path
) -> None:
    base = git(repo_path, "rev-parse", "HEAD")
    broken = commit_files(repo_path, {"a.txt": "BAD\n", "b.txt": "b\n"}, "Add a (broken)")
    head = commit_files(repo_path, {"a.txt": "a\n"}, "Fix a\n\nThe body says why.")
    done = squash(store, base=base, head=head, task_id="task-x")
    assert done is not None and done.replaced == (head, broken)
    commit = store.repo[done.commit]
    assert isinstance(commit, pygit2.Commit)
    assert [str(p) for p in commit.parent_ids] == [base]
    assert str(commit.tree_id) == git(repo_path, "rev-parse", f"{head}^{{tree}}")
    last = store.repo[head]
    assert isinstance(last, pygit2.Commit)
    assert (commit.author.name, commit.author.email, commit.author.time) == (
        last.author.name,
        last.author.email,
        last.author.time,
    )
    message = commit.message
    assert message.startswith("Fix a\n\nThe body says why.\n\n")
    assert f"{broken[:12]} Add a (broken)" in message and f"{head[:12]} Fix a" in message
    assert git(repo_path, "interpret-trailers", "--parse", input=message) == f"{TRAILER}: {head}"
    out = subprocess.run(["git", "merge-base", "--is-ancestor", broken, done.commit], cwd=repo_path, check=False)
    assert out.returncode == 1  # the broken commit is not in the squash's history
    git(repo_path, "fsck", "--strict")


def test_one_commit_on_the_base_and_a_no_change_delivery_are_delivered_as_they_are(
    store: Store, repo_path: Path
) -> None:
    base = git(repo_path, "rev-parse", "HEAD")
    assert squash(store, base=base, head=base, task_id="task-x") is None
    one = commit_files(repo_path, {"a.txt": "a\n"}, "Add a")
    assert squash(store, base=base, head=one, task_id="task-x") is None


# -- a whole run ----------------------------------------------------------------------------------------------------

REPAIRED = child(
    "b",
    "Part B",
    [
        [write_step("src/b.txt", "BAD\n"), commit_step("Add b (bad)"), HANDOFF],
        [write_step("src/b.txt", "b\n"), write_step("src/b2.txt", "b2\n"), commit_step("Fix b"), HANDOFF],
    ],
)


def _run(tmp_path: Path, *, squash_option: bool) -> tuple[Path, str, dict[str, Any]]:
    """A run of a repaired task and a task depending on it, to completion, in the foreground."""
    repo = project(tmp_path, run_options=f"squash = {'true' if squash_option else 'false'}")
    base = git(repo, "rev-parse", "main")
    path = recipe(tmp_path, REPAIRED + simple_child("c", "src/c.txt", ["b"]), finalize=True)
    done = cli(repo, "agentops-run", "start", "--goal", "Build the parts", "--recipe", str(path), "--json", timeout=300)
    run_id = json.loads(done.stdout)["runId"]
    doc = status(repo, run_id)
    assert doc["status"] == "complete", (doc, done.stderr)
    return repo, base, doc


def _broken_and_handed_off(repo: Path, doc: dict[str, Any]) -> tuple[str, str]:
    """The commit B's first generation handed off (refused), and the one its second generation handed off."""
    log = events(repo, doc["runId"])
    task = next(t for t in doc["tasks"] if t["title"] == "Part B")
    worker = next(w for w in doc["workers"] if w["taskId"] == task["taskId"])
    handed = [
        git(repo, "rev-parse", e["summary"].rpartition(" ")[2])
        for e in log
        if e["code"] == "WORKER_HANDING_OFF" and e["summary"].startswith(worker["workerId"] + " ")
    ]
    assert len(handed) == 2, handed
    return handed[0], handed[1]


def _ancestor(repo: Path, commit: str, of: str) -> bool:
    done = subprocess.run(["git", "merge-base", "--is-ancestor", commit, of], cwd=repo, check=False)
    assert done.returncode in (0, 1)
    return done.returncode == 0


@pytest.mark.slow
def test_with_squash_a_repaired_task_lands_as_one_commit_and_its_broken_commit_never_reaches_the_target(
    tmp_path: Path,
) -> None:
    repo, base, doc = _run(tmp_path, squash_option=True)
    broken, handed_off = _broken_and_handed_off(repo, doc)
    tasks = {t["title"]: t for t in doc["tasks"]}
    delivery = tasks["Part B"]["delivery"]
    assert git(repo, "show", f"{broken}:src/b.txt") == "BAD"  # the refused attempt did commit the breaking change
    assert not _ancestor(repo, broken, "main") and not _ancestor(repo, handed_off, "main")
    # one commit for the task, on the base, holding what the worker handed off, and what every record names
    assert delivery not in (broken, handed_off)
    assert git(repo, "rev-list", "--parents", "-n", "1", delivery).split()[1:] == [base]
    assert git(repo, "rev-parse", f"{delivery}^{{tree}}") == git(repo, "rev-parse", f"{handed_off}^{{tree}}")
    assert git(repo, "log", "-1", "--format=%s", delivery) == "Fix b"
    run_id = doc["runId"]
    assert git(repo, "rev-parse", f"refs/agentops/runs/{run_id}/deliveries/{tasks['Part B']['taskId']}") == delivery
    log = events(repo, run_id)
    delivered = next(e for e in log if e["code"] == "TASK_DELIVERED" and e["data"]["commit"] == delivery)
    assert delivered["data"]["squashedFrom"] == handed_off
    # verified is what lands: the evidence of the delivery is on the squash, and names it
    evidence = [json.loads(x) for x in git(repo, "notes", "--ref=agentops/evidence", "show", delivery).splitlines()]
    note = json.loads(git(repo, "notes", "--ref=agentops/deliveries", "show", delivery).splitlines()[-1])
    assert {r["commit"] for r in evidence} == {delivery} and note["squashedFrom"] == handed_off
    assert set(note["evidence"]) <= {digest(r) for r in evidence}
    mirrored = git(repo, "notes", "--ref=agentops/evidence", "show", handed_off)  # findable from what was handed off
    assert {json.loads(line)["commit"] for line in mirrored.splitlines()} == {delivery}
    # the target: per task one commit and its merge; Part C was one commit on its base already: delivered as it is
    tasks_commits = git(repo, "rev-list", "--no-merges", f"{base}..main").split()
    assert sorted(tasks_commits) == sorted([tasks["Part C"]["delivery"], delivery]), tasks_commits
    assert git(repo, "log", "-1", "--format=%s", tasks["Part C"]["delivery"]) == "Add c"
    assert git(repo, "show", "main:src/b.txt") == "b" and git(repo, "show", "main:src/b2.txt") == "b2"
    assert cli(repo, "agentops-receipt", "verify", f"{base}..main").returncode == 0
    report = json.loads(cli(repo, "agentops-run", "report", run_id, "--json").stdout)
    handoffs = [h for g in report["generations"] if g["taskId"] == tasks["Part B"]["taskId"] for h in g["handoffs"]]
    assert [h["commit"] for h in handoffs] == [broken, handed_off] and all(h["evidence"] for h in handoffs)
    git(repo, "fsck", "--strict")


@pytest.mark.slow
def test_without_squash_a_repaired_task_lands_with_its_commits_as_they_were(tmp_path: Path) -> None:
    repo, base, doc = _run(tmp_path, squash_option=False)
    broken, handed_off = _broken_and_handed_off(repo, doc)
    delivery = next(t for t in doc["tasks"] if t["title"] == "Part B")["delivery"]
    assert delivery == handed_off and _ancestor(repo, broken, "main")
    assert git(repo, "rev-list", "--no-merges", "--count", f"{base}..main") == "3"  # b's two commits and c's
    assert cli(repo, "agentops-receipt", "verify", f"{base}..main").returncode == 0
