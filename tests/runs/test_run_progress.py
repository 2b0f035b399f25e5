"""A foreground run says what it does and why it ended blocked; ``run status`` and ``run log`` say why too.

Issue 25 item 7: ``run start`` printed the run id, minutes of nothing, then ``run-...: blocked``; the cause was in
neither ``run status`` (a nested dump with doubled timestamps, cut mid-word) nor ``run log``. Item 10: ``run log``
without a run id is the newest run, as ``status`` and ``watch``.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import threading
from pathlib import Path

import pytest

from git_agentops.runs.why import Cause, FailedCommand, LastFailure, cause_lines, headline, message_lines

from ..helpers import HANDOFF, child, commit_step, simple_child, write_step
from ..runkit import cli, project, recipe

FAILING_LINE = "checked 2 files; bad: ['src/a.txt']"
DOUBLED_STAMP = re.compile(r"\d\d:\d\d:\d\d \[[^]]*\] \d\d:\d\d:\d\d")


def _blocking_recipe(tmp: Path) -> Path:
    """Part A fails the check the same way twice (a new commit each time); Part B waits on it; Part C delivers."""
    bad = child(
        "a",
        "Part A",
        [[write_step("src/a.txt", f"BAD {n}\n"), commit_step(f"Add a {n}"), HANDOFF] for n in range(1, 9)],
    )
    return recipe(tmp, bad + simple_child("b", "src/b.txt", ["a"]) + simple_child("c", "src/c.txt"), finalize=True)


def _start(repo: Path, recipe_path: Path, *extra: str, stderr: int | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "agentops-run", "start", "--goal", "Build the parts", "--recipe", str(recipe_path), *extra],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=stderr if stderr is not None else subprocess.PIPE,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_a_foreground_run_says_each_step_and_why_it_ended_blocked(tmp_path: Path) -> None:
    repo = project(tmp_path)
    done = _start(repo, _blocking_recipe(tmp_path), "--progress")
    assert done.returncode == 1, done.stderr
    run_id, result, *why = done.stdout.splitlines()
    assert result == f"{run_id}: blocked"
    # why: the task blocked first, and its last failure's command and failing line (from the evidence)
    assert why[0] == "why:" and why[1].startswith("  task 'Part A' (task-") and "RUN_NO_PROGRESS" in why[1]
    assert "  check failed (exit 1)" in "\n".join(why) and FAILING_LINE in "\n".join(why)
    assert any(line.startswith("  then task 'Build it'") for line in why)  # the coordinator's end: one line
    progress = done.stderr.splitlines()
    said = "\n".join(progress)
    for expected in (
        "planned task 'Part A'",
        "planned task 'Part B' (after 'Part A')",
        "'Part A': generation 1 started",
        "'Part A': generation 1 failed: RUN_VERIFICATION_FAILED",
        "'Part A': generation 2 failed: RUN_VERIFICATION_FAILED",
        "'Part C': delivered as ",
        "'Part A': blocked: RUN_NO_PROGRESS",
    ):
        assert expected in said, said
    failed = next(n for n, line in enumerate(progress) if "'Part A': generation 1 failed" in line)
    assert progress[failed + 1].strip() == "check failed (exit 1)" and progress[failed + 2].strip() == FAILING_LINE
    assert "generation 3" not in said.split("'Part A': blocked")[0]  # blocked after two verifications

    status = cli(repo, "agentops-run", "status", run_id)
    assert status.returncode == 0, status.stderr
    text = status.stdout
    assert text.count(FAILING_LINE) == 1, text  # the reason once
    assert "failing the same way): verification failed on " in text  # whole: no cut at 200 characters
    assert not DOUBLED_STAMP.search(text), text
    assert "blocked: waits on 'Part A'" in text and "blocked: RUN_NO_PROGRESS (why: above)" in text
    doc = json.loads(cli(repo, "agentops-run", "status", run_id, "--json").stdout)
    first = doc["blocked"][0]
    assert first["title"] == "Part A" and first["lastFailure"]["commands"][0]["lines"] == [FAILING_LINE]

    log = cli(repo, "agentops-run", "log")  # no run id: the newest run
    assert log.returncode == 0, log.stderr
    lines = log.stdout.splitlines()
    at = next(n for n, line in enumerate(lines) if "WORKER_FAILED" in line and "RUN_VERIFICATION_FAILED" in line)
    assert lines[at + 1].strip() == "check failed (exit 1)" and lines[at + 2].strip() == FAILING_LINE
    events = json.loads(cli(repo, "agentops-run", "log", "--json").stdout)
    assert events["runId"] == run_id


@pytest.mark.slow
def test_machine_output_stays_the_same_and_a_pipe_gets_no_progress_unless_asked(tmp_path: Path) -> None:
    repo = project(tmp_path)
    done = _start(repo, _blocking_recipe(tmp_path), "--json")
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert set(doc) == {"runId", "status"} and doc["status"] == "blocked"
    assert not [line for line in done.stderr.splitlines() if not line.startswith("warning[")], done.stderr


@pytest.mark.slow
def test_on_a_terminal_a_foreground_run_shows_progress_by_itself(tmp_path: Path) -> None:
    repo = project(tmp_path)
    good = recipe(tmp_path, simple_child("c", "src/c.txt"), finalize=True)
    leader, follower = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:  # read while the run writes: a full terminal buffer would block it
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal's other end is closed and drained
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        done = _start(repo, good, stderr=follower)
    finally:
        os.close(follower)
        reader.join(timeout=30)
        os.close(leader)
    said = b"".join(chunks).decode("utf-8", "replace")
    assert done.returncode == 0, said
    assert done.stdout.splitlines()[-1].endswith(": complete")
    assert "planned task 'Part C'" in said and "'Part C': delivered as " in said, said


def _cause(title: str | None, reason: str, *, root: bool = False, last: LastFailure | None = None) -> Cause:
    return Cause("task-1" if title else None, title, "worker-1", headline(reason), reason, 2, last, root)


def test_why_says_the_first_cause_whole_and_what_followed_on_one_line_each() -> None:
    failed = LastFailure(2, "RUN_VERIFICATION_FAILED", (FailedCommand("lint", "exit:1", ("a.py:1:1: E501 long",)),), ())
    child_cause = _cause("Part A", "RUN_NO_PROGRESS: the same failure twice\nverification failed on x:", last=failed)
    coordinator = _cause(
        "Build it", "RUN_NO_PROGRESS: the coordinator exited\nThe end of its output:\n12:00 a", root=True
    )
    lines = cause_lines([child_cause, coordinator])
    assert lines == [
        "task 'Part A' (task-1) is blocked, after 2 failed generations: RUN_NO_PROGRESS: the same failure twice",
        "  last failure (generation 2): RUN_VERIFICATION_FAILED",
        "    lint failed (exit 1)",
        "      a.py:1:1: E501 long",
        "then task 'Build it' (task-1) was blocked: RUN_NO_PROGRESS: the coordinator exited",
    ]
    # a run blocked for a reason of its own, no task: the reason whole, line by line
    alone = cause_lines([_cause(None, "RUN_TARGET_DIRTY: main is checked out with changes\n  src/x.py", root=True)])
    assert alone == [
        "worker-1 is blocked, after 2 failed generations: RUN_TARGET_DIRTY: main is checked out with changes",
        "    src/x.py",  # the reason's own lines, under it
    ]
    assert Cause.from_json(child_cause.to_json()) == child_cause


def test_a_long_failure_message_keeps_its_first_line_and_its_end() -> None:
    message = "The agent exited (status 1) without delivering. The end of its output:\n" + "\n".join(
        f"line {n}" for n in range(40)
    )
    assert message_lines(message, 4) == (
        "The agent exited (status 1) without delivering. The end of its output:",
        "…",
        "line 38",
        "line 39",
    )
    assert message_lines("one\n\ntwo") == ("one", "two")
