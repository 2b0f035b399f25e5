"""A checked-out target stays consistent: publishing follows git's ``updateInstead`` rule for the checkouts of the
target -- a clean one moves to the new tip (index and files), a dirty one makes the run wait, with nothing lost."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ..conftest import git
from ..helpers import simple_child
from ..runkit import cli, events, project, recipe, start, stop, supervisor_running, wait_for


def _run_to_the_end(repo: Path, run_id: str) -> dict[str, object]:
    try:
        return wait_for(repo, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=120)
    finally:
        if supervisor_running(repo, run_id):
            stop(repo, run_id)


def test_a_clean_checkout_of_the_target_is_moved_to_the_new_tip(tmp_path: Path) -> None:
    """Invariant: after publishing to main, checked out clean in the main worktree, 'git status' there is clean and
    the files are the new tip's (before, the index stayed at the old tip and showed the integration reversed)."""
    repo = project(tmp_path)
    assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/main"
    run_id = start(repo, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True))
    doc = _run_to_the_end(repo, run_id)
    assert doc["status"] == "complete"
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert (repo / "src" / "a.txt").read_text() == "a\n"
    assert git(repo, "rev-parse", "HEAD") == git(repo, "rev-parse", "main")


def test_a_dirty_checkout_makes_the_run_wait_and_a_resume_after_commit_completes_it(tmp_path: Path) -> None:
    repo = project(tmp_path)
    (repo / "src" / "base.txt").write_text("a local edit the user has not committed\n")
    warned = cli(
        repo,
        "agentops-run",
        "start",
        "--goal",
        "x",
        "--recipe",
        str(recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True)),
        "--detach",
    )
    assert warned.returncode == 0, warned.stderr
    assert "warning[RUN_TARGET_CHECKED_OUT_DIRTY]" in warned.stderr and "src/base.txt" in warned.stderr
    run_id = warned.stdout.split()[0]
    doc = _run_to_the_end(repo, run_id)
    assert doc["status"] == "blocked" and "RUN_TARGET_CHECKED_OUT_DIRTY" in str(doc["statusReason"])
    assert str(repo) in str(doc["statusReason"]) and "src/base.txt" in str(doc["statusReason"])
    base = git(repo, "rev-parse", "main")
    assert git(repo, "log", "-1", "--format=%s", "main") == "initial"  # nothing was published
    assert (repo / "src" / "base.txt").read_text().startswith("a local edit")  # nothing was lost
    assert doc["integration"]["status"] == "reviewed"  # the candidate is kept
    git(repo, "commit", "-qam", "the user's own change")
    resumed = cli(repo, "agentops-run", "resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    doc = _run_to_the_end(repo, run_id)
    assert doc["status"] == "complete"
    ancestor = subprocess.run(["git", "merge-base", "--is-ancestor", base, "main"], cwd=repo, check=False)
    assert ancestor.returncode == 0
    log = git(repo, "log", "--format=%s", "main")
    assert "the user's own change" in log  # rebuilt on the user's commit: it is kept
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert any(
        e["code"] == "RUN_STATUS" and "RUN_TARGET_CHECKED_OUT_DIRTY" in e["summary"] for e in events(repo, run_id)
    )


def test_a_stash_then_resume_publishes_the_kept_candidate(tmp_path: Path) -> None:
    repo = project(tmp_path)
    (repo / "src" / "base.txt").write_text("work in progress\n")
    run_id = start(repo, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True))
    doc = _run_to_the_end(repo, run_id)
    assert doc["status"] == "blocked"
    candidate = doc["integration"]["candidate"]
    git(repo, "stash", "-q")
    assert cli(repo, "agentops-run", "resume", run_id).returncode == 0
    doc = _run_to_the_end(repo, run_id)
    assert doc["status"] == "complete" and git(repo, "rev-parse", "main") == candidate  # published as gated
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    git(repo, "stash", "pop", "-q")
    assert (repo / "src" / "base.txt").read_text() == "work in progress\n"  # the user's work comes back


def test_a_linked_worktree_on_the_target_is_moved_too(tmp_path: Path) -> None:
    repo = project(tmp_path)
    git(repo, "switch", "-q", "-c", "elsewhere")
    other = tmp_path / "main-checkout"
    git(repo, "worktree", "add", "-q", str(other), "main")
    run_id = start(repo, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True))
    doc = _run_to_the_end(repo, run_id)
    assert doc["status"] == "complete"
    assert (other / "src" / "a.txt").read_text() == "a\n"
    assert subprocess.run(["git", "status", "--porcelain"], cwd=other, capture_output=True, text=True).stdout == ""


def test_checkouts_follow_all_or_none_and_a_refusal_overwrites_nothing(tmp_path: Path) -> None:
    """Invariant (the code both publish paths use): bringing the checkouts of a branch to a new tip moves every one
    or none -- when one would overwrite an untracked file, the ones already moved go back, each checkout is left at
    a tree matching a commit, and the person's file is intact."""
    import pytest

    from git_agentops.errors import AgentOpsError
    from git_agentops.gitstore.checkout import dirty_checkouts, follow_checkouts

    from ..conftest import commit_files, make_repo

    repo = make_repo(tmp_path / "repo", files={"src/base.txt": "hello\n"})
    old = git(repo, "rev-parse", "HEAD")
    other = tmp_path / "second"
    git(repo, "worktree", "add", "-q", "-f", str(other), "main")  # a second checkout of the same branch
    new = commit_files(other, {"src/new.txt": "new\n"}, "adds src/new.txt")
    git(other, "reset", "-q", "--hard", old)
    git(repo, "update-ref", "refs/heads/main", old)
    (other / "src" / "new.txt").write_text("the person's own, untracked\n")
    checked_out, dirty = dirty_checkouts(repo / ".git", "refs/heads/main")
    assert sorted(map(str, checked_out)) == sorted([str(repo), str(other)]) and dirty == {}  # untracked: not dirty
    with pytest.raises(AgentOpsError) as refused:
        follow_checkouts([repo, other], old, new)
    assert refused.value.code == "GIT_FAILED"
    for checkout in (repo, other):
        assert git(checkout, "status", "--porcelain", "--untracked-files=no") == ""
        assert git(checkout, "write-tree") == git(checkout, "rev-parse", f"{old}^{{tree}}")
    assert not (repo / "src" / "new.txt").exists()  # moved, then moved back
    assert (other / "src" / "new.txt").read_text() == "the person's own, untracked\n"
    (other / "src" / "new.txt").unlink()
    follow_checkouts([repo, other], old, new)
    for checkout in (repo, other):
        assert git(checkout, "write-tree") == git(checkout, "rev-parse", f"{new}^{{tree}}")
        assert (checkout / "src" / "new.txt").read_text() == "new\n"
