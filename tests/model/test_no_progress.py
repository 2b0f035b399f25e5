"""No-progress detection compares failures: the failing commands and a digest of their normalised failing lines.

Issue 25 item 8: when each generation made a new commit that failed the same way, "the same failure twice without
new commits" never fired and a deterministic failure cost eight full verifications. Now two identical failures in a
row block the task, commits or not; a generation that fails differently is given another try.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from git_agentops.model.evidence import EvidenceRecord
from git_agentops.model.run import Failure, fingerprint, no_progress
from git_agentops.verify.failing import failed_commands, failing_lines, normalise, output_of, shown, symptom

from ..helpers import HANDOFF, child, commit_step, write_step
from ..runkit import events, project, recipe, start, stop, task_by_title, wait_for, worker_of

PYTEST_TAIL = """============ FAILURES ============
__________ test_x __________
    def test_x():
>       assert f() == 2
E       assert 1 == 2

tests/test_a.py:12: AssertionError
=========== short test summary info ===========
FAILED tests/test_a.py::test_x - assert 1 == 2
1 failed, 3 passed in 0.12s
"""


def _record(command: str, tail: str, *, exit_code: int = 1, passed: bool = False) -> EvidenceRecord:
    return EvidenceRecord(
        command_id=command,
        kind="command",
        argv_digest="a" * 64,
        required=True,
        exit_code=exit_code,
        signal=None,
        timed_out=False,
        spawn_error=None,
        passed=passed,
        duration_ms=1,
        output_digest="0" * 64,
        output_size=len(tail),
        truncated=False,
        tail=tail,
        tests=None,
        parse_error=None,
        tree="1" * 40,
        commit="2" * 40,
        policy_config_hash="b" * 64,
        env_digest="c" * 64,
        started_at="2026-12-01T00:00:00Z",
        cached=False,
        cached_from=None,
        task_id=None,
        criteria=(),
        toolkit_version="0.1.0",
    )


def test_the_same_failure_digests_the_same_whatever_its_timing_addresses_and_temporary_paths() -> None:
    again = (
        PYTEST_TAIL.replace("3 passed in 0.12s", "4 passed in 1.87s")
        .replace("tests/test_a.py:12", "tests/test_a.py:12")
        .replace("__________ test_x", "_________ test_x")
    )
    assert symptom(PYTEST_TAIL) == symptom(again)
    stamped = "2026-01-02T03:04:05.123Z error: object at 0x7f3a9c0 in /tmp/tmpab12cd/x.py took 35ms (12:01:02)"
    restamped = "2026-03-04T05:06:07Z error: object at 0x55d1e08 in /tmp/tmpzz99yy/x.py took 2.5s (23:59:59)"
    assert normalise(stamped) == normalise(restamped)
    assert normalise(stamped) == "<time> error: object at 0x<addr> in <tmp>/x.py took <duration> (<time>)"
    pytest_tmp = "/tmp/pytest-of-ann/pytest-12/test_a0/src/m.py:3: error"
    assert normalise(pytest_tmp) == normalise(pytest_tmp.replace("pytest-12", "pytest-13"))
    assert normalise(pytest_tmp) != normalise(pytest_tmp.replace("src/m.py", "src/n.py"))  # the file stays


def test_a_different_failing_test_or_message_digests_differently() -> None:
    assert symptom(PYTEST_TAIL) != symptom(PYTEST_TAIL.replace("assert 1 == 2", "assert 3 == 2"))
    assert symptom(PYTEST_TAIL) != symptom(PYTEST_TAIL.replace("test_x", "test_y"))
    assert symptom("src/a.py:10:89: E501 Line too long (95 > 88)") != symptom("src/a.py:10:1: F401 unused")


def test_failing_lines_are_the_diagnostics_and_shown_first_ones_come_first() -> None:
    ruff = (
        "src/a.py:10:89: E501 Line too long (95 > 88)\nsrc/b.py:3:1: F401 `os` imported but unused\nFound 2 errors.\n"
    )
    assert shown(ruff, 2) == [
        "src/a.py:10:89: E501 Line too long (95 > 88)",
        "src/b.py:3:1: F401 `os` imported but unused",
    ]
    assert "============ FAILURES ============" not in failing_lines(PYTEST_TAIL)  # a heading, not a diagnostic
    assert "FAILED tests/test_a.py::test_x - assert 1 == 2" in failing_lines(PYTEST_TAIL)
    plain = "checked 2 files; bad: ['src/a.txt']\n"
    assert failing_lines(plain) == ["checked 2 files; bad: ['src/a.txt']"]  # nothing looks like one: all lines


def test_a_refusal_names_each_failed_command_how_it_ended_and_its_symptom() -> None:
    records = [
        _record("lint", "src/a.py:1:1: E501 long\n"),
        _record("tests", "", passed=True, exit_code=0),
        _record("tests", PYTEST_TAIL),
    ]
    failed = failed_commands(records)
    assert failed == [["lint", "exit:1", symptom("src/a.py:1:1: E501 long")], ["tests", "exit:1", symptom(PYTEST_TAIL)]]
    assert output_of({"failed": failed}) is not None
    assert output_of({"exitCode": 1}) is None and output_of({"failed": ["lint"]}) is None  # names no output


def _failure(generation: int, head: str, output: str | None, detail: dict[str, object]) -> Failure:
    return Failure(
        fingerprint("RUN_VERIFICATION_FAILED", detail), "RUN_VERIFICATION_FAILED", "m", generation, head, 0.0, output
    )


def test_two_identical_failures_on_new_commits_are_no_progress_and_a_different_one_is() -> None:
    same = {"failed": failed_commands([_record("tests", PYTEST_TAIL)])}
    other = {"failed": failed_commands([_record("tests", PYTEST_TAIL.replace("1 == 2", "5 == 2"))])}
    first = _failure(1, "a" * 40, output_of(same), same)
    assert no_progress([first, _failure(2, "b" * 40, output_of(same), same)])  # a new commit, the same failure
    assert not no_progress([first, _failure(2, "b" * 40, output_of(other), other)])  # it fails differently
    assert not no_progress([first])
    exited = {"exitCode": 1}  # a failure that names no output: only "nothing committed" says it is the same
    no_output = Failure(fingerprint("RUN_WORKER_EXITED", exited), "RUN_WORKER_EXITED", "m", 1, "a" * 40, 0.0)
    assert no_progress([no_output, Failure(**{**_as_kwargs(no_output), "generation": 2})])
    assert not no_progress([no_output, Failure(**{**_as_kwargs(no_output), "generation": 2, "head": "b" * 40})])


def _as_kwargs(failure: Failure) -> dict[str, object]:
    return {name: getattr(failure, name) for name in Failure.__slots__}


def _verification_refusals(repo: Path, run_id: str) -> list[dict[str, object]]:
    return [
        e
        for e in events(repo, run_id)
        if e["code"] == "REQUEST_REFUSED" and e["data"]["code"] == "RUN_VERIFICATION_FAILED"
    ]


@pytest.mark.slow
def test_new_commits_that_fail_the_same_way_block_after_two_verifications(tmp_path: Path) -> None:
    repo = project(tmp_path)
    attempts = [
        [write_step("src/a.txt", "BAD\n"), commit_step("Add a"), HANDOFF],
        *[
            [write_step(f"notes/try-{n}.md", f"try {n}\n"), commit_step(f"Try {n}"), HANDOFF]  # a new commit each time
            for n in range(2, 9)
        ],
    ]
    run_id = start(repo, recipe(tmp_path, child("a", "Part A", attempts)))
    try:
        doc = wait_for(repo, run_id, lambda d: task_by_title(d, "Part A")["status"] == "blocked")
        task = task_by_title(doc, "Part A")
        assert "RUN_NO_PROGRESS" in task["blockedReason"] and "failing the same way" in task["blockedReason"]
        assert worker_of(doc, task["taskId"])["generation"] == 2
        refusals = _verification_refusals(repo, run_id)
        assert len(refusals) == 2  # two verifications, not eight
        worker = worker_of(doc, task["taskId"])["workerId"]
        failed = [e for e in events(repo, run_id) if e["code"] == "WORKER_FAILED" and e["data"]["workerId"] == worker]
        heads = {e["data"]["head"] for e in failed}
        assert len(heads) == 2 and len({e["data"]["output"] for e in failed}) == 1  # two commits, one failure
    finally:
        stop(repo, run_id)


@pytest.mark.slow
def test_a_generation_that_fails_differently_is_given_another_try(tmp_path: Path) -> None:
    repo = project(tmp_path)
    attempts = [
        [write_step("src/a.txt", "BAD\n"), commit_step("Add a"), HANDOFF],
        [write_step("src/a.txt", "a\n"), write_step("src/a2.txt", "BAD\n"), commit_step("Fix a, break a2"), HANDOFF],
        [write_step("src/a2.txt", "a2\n"), commit_step("Fix a2"), HANDOFF],
    ]
    run_id = start(repo, recipe(tmp_path, child("a", "Part A", attempts)))
    try:
        doc = wait_for(repo, run_id, lambda d: task_by_title(d, "Part A")["status"] in ("delivered", "blocked"))
        task = task_by_title(doc, "Part A")
        assert task["status"] == "delivered", task
        assert worker_of(doc, task["taskId"])["generation"] == 3
        assert len(_verification_refusals(repo, run_id)) == 2
    finally:
        stop(repo, run_id)
