"""The mailbox against a hostile worker: nothing it placed is followed, nothing it wrote is recorded raw, and a
storm of garbage requests costs a handful of state commits, not one each.

Unit tests claim from a real worktree's mailbox; the runs use the scripted agent, whose ``run`` steps play the
attacker (a hard link to an outside file, a symlinked mailbox, a symlinked request, a FIFO).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from git_agentops.clock import FixedClock
from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.journal import Journal
from git_agentops.gitstore.repo import Store
from git_agentops.integrate.secrets import clean_text
from git_agentops.model.policy import Policy, effective
from git_agentops.model.run import Role, Worker
from git_agentops.protocol import mailbox
from git_agentops.runs import state as runstate
from git_agentops.supervisor.refusals import REFUSAL_WINDOW, Refusals
from git_agentops.supervisor.requests import flush_refusals, refuse, valid_request_id

from ..conftest import git, make_repo
from ..helpers import HANDOFF, Step, child, commit_step, simple_child, write_step
from ..runkit import (
    UNCONFINED,
    children_settled,
    events,
    project,
    recipe,
    start,
    stop,
    supervisor_log,
    task_by_title,
    wait_for,
)

TOKEN = "ghp_" + "Z" * 36


def _request(request_id: str) -> bytes:
    doc = {"requestId": request_id, "workerId": "w", "generation": 1, "contractHash": "0" * 64, "action": "handoff"}
    return json.dumps(doc).encode()


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo")
    mailbox.write_instructions(
        repo,
        {
            "version": 1,
            "runId": "run-1",
            "workerId": "w",
            "role": "child",
            "generation": 1,
            "contractHash": "0" * 64,
            "goal": "g",
            "task": None,
            "tasks": [],
            "rootTaskId": None,
            "diagnostic": None,
            "answers": [],
            "mailbox": str(repo / mailbox.MAILBOX),
            "worktree": str(repo),
            "base": None,
            "host": "scripted",
            "recipe": None,
            "runStatus": "active",
        },
    )
    return repo


def _refused(claimed: mailbox.Claimed | None, code: str = "RUN_REQUEST_INVALID") -> str:
    assert claimed is not None and claimed.data is None and claimed.error is not None
    assert claimed.error.code == code
    return claimed.error.message


# -- claiming ----------------------------------------------------------------------------------------------------------


def test_a_regular_request_is_claimed_once(worktree: Path) -> None:
    digest = mailbox.send_raw(worktree, _request("r-1"))
    claimed = mailbox.claim_request(worktree)
    assert claimed is not None and claimed.error is None and claimed.digest == digest
    assert mailbox.claim_request(worktree) is None
    assert sorted(p.name for p in (worktree / mailbox.MAILBOX).iterdir()) == ["instructions.json"]


def test_a_symlinked_mailbox_is_refused_unlinked_and_its_target_untouched(tmp_path: Path, worktree: Path) -> None:
    other = tmp_path / "other-mailbox"
    other.mkdir()
    (other / "request.json").write_bytes(_request("r-other"))
    box = worktree / mailbox.MAILBOX
    box.rename(worktree / ".agentops" / "real")
    box.symlink_to(other)
    message = _refused(mailbox.claim_request(worktree))
    assert "symlink" in message and "never follows" in message
    assert (other / "request.json").read_bytes() == _request("r-other")  # never claimed through the link
    assert not box.exists() and not box.is_symlink()  # the link is gone: the next answer lands in a real mailbox
    mailbox.write_response(worktree, mailbox.response(None, "0" * 64, "RUN_REQUEST_INVALID", message))
    assert box.is_dir() and not box.is_symlink()


def test_a_symlinked_agentops_directory_is_refused_and_left_alone(tmp_path: Path, worktree: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    (worktree / ".agentops").rename(elsewhere)
    (worktree / ".agentops").symlink_to(elsewhere)
    (elsewhere / "mailbox" / "request.json").write_bytes(_request("r-elsewhere"))
    claimed = mailbox.claim_request(worktree)
    assert "symlink" in _refused(claimed) and claimed is not None and not claimed.answerable
    assert (elsewhere / "mailbox" / "request.json").exists() and (worktree / ".agentops").is_symlink()


def test_a_symlinked_request_is_refused_and_its_target_untouched(tmp_path: Path, worktree: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_bytes(_request("r-outside"))
    (worktree / mailbox.REQUEST).symlink_to(outside)
    message = _refused(mailbox.claim_request(worktree))
    assert "is a symlink" in message and "never follows" in message
    assert outside.read_bytes() == _request("r-outside")
    assert not (worktree / mailbox.CLAIMED).is_symlink() and not (worktree / mailbox.REQUEST).is_symlink()


def test_a_hard_linked_request_is_refused_unread_and_its_other_name_kept(tmp_path: Path, worktree: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_bytes(_request("r-hard"))
    os.link(outside, worktree / mailbox.REQUEST)
    claimed = mailbox.claim_request(worktree)
    message = _refused(claimed)
    assert "hard link" in message and "r-hard" not in message
    assert claimed is not None and claimed.digest != hashlib.sha256(_request("r-hard")).hexdigest()
    assert outside.read_bytes() == _request("r-hard") and outside.stat().st_nlink == 1


def test_an_oversized_request_is_answered_by_the_digest_of_its_bytes(worktree: Path) -> None:
    data = b"x" * (mailbox.MAX_REQUEST_BYTES + 1)
    digest = mailbox.send_raw(worktree, data)
    claimed = mailbox.claim_request(worktree)
    assert "128 KiB" in _refused(claimed, "RUN_REQUEST_TOO_LARGE")
    assert claimed is not None and claimed.digest == digest


def test_a_fifo_is_refused_without_blocking(worktree: Path) -> None:
    os.mkfifo(worktree / mailbox.REQUEST)
    assert "not a regular file" in _refused(mailbox.claim_request(worktree))
    assert mailbox.claim_request(worktree) is None


def test_a_directory_request_is_moved_aside_and_the_next_request_still_claims(worktree: Path) -> None:
    (worktree / mailbox.REQUEST).mkdir()
    (worktree / mailbox.REQUEST / "keep.txt").write_text("the worker's")
    assert "not a regular file" in _refused(mailbox.claim_request(worktree))
    [aside] = (worktree / mailbox.MAILBOX).glob("request.refused-*")
    assert (aside / "keep.txt").read_text() == "the worker's"  # nothing the worker wrote is lost
    digest = mailbox.send_raw(worktree, _request("r-2"))
    claimed = mailbox.claim_request(worktree)
    assert claimed is not None and claimed.error is None and claimed.digest == digest


# -- what may be recorded ----------------------------------------------------------------------------------------------


def test_clean_text_redacts_escapes_and_cuts() -> None:
    text = f"key {TOKEN} \x1b[31mred\x07 \u202eevil\nsecond line " + "y" * 5000
    line = clean_text(text, 200)
    assert TOKEN not in line and "[REDACTED:github-token]" in line
    assert "\x1b" not in line and "\\x1b[31m" in line and "\\x07" in line and "\\u202e" in line
    assert "\n" not in line and len(line) == 200 and line.endswith("…")
    assert "\nsecond" in clean_text(text, 2000, multiline=True)
    assert clean_text("internal-123456", 100, ["internal-[0-9]{6}"]) == "[REDACTED:policy-0]"
    assert clean_text("AKIA" + "B" * 18, 21).startswith("[REDACTED:aws-access")  # a cut that completes a key


def test_request_ids_are_stored_only_when_valid_and_not_secret_shaped() -> None:
    assert valid_request_id("req-1234") == "req-1234"
    assert valid_request_id("bad id!") is None and valid_request_id(7) is None and valid_request_id("x" * 65) is None
    assert valid_request_id("sk-ant-" + "a" * 30) is None  # fits the schema's shape, but it is a credential
    assert valid_request_id("internal-123456", ("internal-[0-9]{6}",)) is None


def test_refusals_coalesce_per_worker_and_code_and_records_always_commit() -> None:
    coalescer = Refusals()
    refusal: dict[str, Any] = {"workerId": "w", "code": "RUN_REQUEST_INVALID", "message": "m"}
    assert coalescer.admit("w", "RUN_REQUEST_INVALID", 100.0, refusal, record=False) == {}
    held = [coalescer.admit("w", "RUN_REQUEST_INVALID", 100.0 + i, refusal, record=False) for i in range(1, 6)]
    assert held == [None] * 5
    assert coalescer.admit("v", "RUN_REQUEST_INVALID", 101.0, refusal, record=False) == {}  # another worker
    assert coalescer.admit("w", "RUN_REQUEST_STALE", 101.0, refusal, record=False) == {}  # another code
    assert coalescer.due(150.0) == []  # the window has not ended
    [flushed] = coalescer.due(100.0 + REFUSAL_WINDOW)
    assert flushed["count"] == 5 and flushed["since"] == 101.0
    assert coalescer.admit("w", "RUN_REQUEST_INVALID", 170.0, refusal, record=False) is None
    # a refusal that is a request's record is never held back, and carries the count held back before it
    assert coalescer.admit("w", "RUN_REQUEST_INVALID", 171.0, refusal, record=True) == {"count": 2, "since": 170.0}
    assert coalescer.admit("w", "RUN_REQUEST_INVALID", 172.0, refusal, record=True) == {}
    assert coalescer.admit("w", "RUN_REQUEST_INVALID", 173.0, refusal, record=False) is None
    assert [d["count"] for d in coalescer.due(174.0, force=True)] == [1]


class _Loop:
    """What :func:`refuse` uses of the supervisor loop: a real journal, the policy, a clock that moves when told."""

    def __init__(self, store: Store, clock: FixedClock) -> None:
        self.run_id = "run-1"
        self.policy = Policy.from_effective(effective({"version": 1, "guardrails": {"deny_patterns": ["sesame-\\d+"]}}))
        self.ctx = SimpleNamespace(clock=clock)
        self.lines: list[str] = []
        self._journal = runstate.journal(store, self.run_id)
        self.refusals = Refusals()

    @property
    def journal(self) -> Journal:
        return self._journal

    def log(self, message: str) -> None:
        self.lines.append(message)


def test_refusals_in_a_storm_are_one_commit_a_minute_with_their_count(store: Store) -> None:
    clock = FixedClock()
    loop = _Loop(store, clock)
    worker = Worker("worker-1", Role.CHILD, "scripted", "/nowhere", "b", generation=2)
    error = AgentOpsError("RUN_REQUEST_INVALID", f"bad \x1b[1m {TOKEN} sesame-42 " + "x" * 3000)
    for _ in range(30):
        response = refuse(loop, worker, "bad id!", "0" * 64, error)  # type: ignore[arg-type]
        assert response["code"] == "RUN_REQUEST_INVALID" and response["requestId"] is None
        clock.advance(1.0)
    assert TOKEN not in response["message"] and "[REDACTED:policy-0]" in response["message"]
    flush_refusals(loop)  # type: ignore[arg-type]
    assert len(list(loop.journal.log())) == 1  # the minute has not ended
    clock.advance(REFUSAL_WINDOW)
    flush_refusals(loop)  # type: ignore[arg-type]
    first, flushed = reversed([e.data for e in loop.journal.log()])
    assert "count" not in first and flushed["count"] == 29 and flushed["since"] == FixedClock().now() + 1
    assert len(first["message"]) == 2000 and "\\x1b[1m" in first["message"] and "\x1b" not in first["message"]
    assert all(TOKEN not in line and "sesame-42" not in line and len(line) < 300 for line in loop.lines)
    assert len(loop.lines) == 2 and "29 refusals since" in loop.lines[1]


# -- real runs: the scripted agent attacks -------------------------------------------------------------------------


def _attacker(name: str, title: str, steps: list[Step]) -> Any:
    return child(
        name, title, [[*steps, write_step(f"src/{name}.txt", f"{name}\n"), commit_step(f"Add {name}"), HANDOFF]]
    )


def _state_text(repo: Path, run_id: str, recipe_path: Path) -> str:
    """Everything the run's state holds -- every file of its tree but the recipe the test wrote, and every commit
    message of its journal."""
    ref = f"refs/agentops/runs/{run_id}/state"
    files = git(repo, "ls-tree", "-r", "--name-only", ref).splitlines()
    contents = [git(repo, "show", f"{ref}:{name}") for name in files]
    given = recipe_path.read_text().strip()
    return "\n".join([*(c for c in contents if c != given), git(repo, "log", "--format=%B", ref)])


def _refusals_of(repo: Path, run_id: str, doc: dict[str, Any], title: str) -> list[dict[str, Any]]:
    task = task_by_title(doc, title)
    worker = next(w["workerId"] for w in doc["workers"] if w["taskId"] == task["taskId"])
    return [
        e["data"] for e in events(repo, run_id) if e["code"] == "REQUEST_REFUSED" and e["data"]["workerId"] == worker
    ]


@pytest.mark.slow
def test_a_run_survives_links_fifos_and_symlinked_mailboxes_and_records_no_foreign_id(tmp_path: Path) -> None:
    """Unconfined: the sandbox refuses a hard link to a file outside (no REFER); the mailbox must hold without it."""
    repo = project(tmp_path, max_workers=4, extra_policy=UNCONFINED)
    hard = tmp_path / "hard.json"
    hard.write_bytes(_request("r-hardlinked-0123456789"))
    outside = tmp_path / "outside.json"
    outside.write_bytes(_request("r-symlinked-0123456789"))
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (decoy / "request.json").write_bytes(_request("r-decoy-0123456789"))
    parts = (
        _attacker("h", "Hard", [{"run": ["ln", str(hard), mailbox.REQUEST]}, "{ sleep = 1.0 }"])
        + _attacker(
            "s",
            "Symlinked mailbox",
            [
                {"run": ["sh", "-c", f"mv {mailbox.MAILBOX} .agentops/real && ln -s '{decoy}' {mailbox.MAILBOX}"]},
                "{ sleep = 1.5 }",
                {"run": ["sh", "-c", f"rm -rf {mailbox.MAILBOX} && mv .agentops/real {mailbox.MAILBOX}"]},
            ],
        )
        + _attacker("r", "Symlinked request", [{"run": ["ln", "-s", str(outside), mailbox.REQUEST]}, "{ sleep = 1.0 }"])
        + _attacker(
            "f",
            "Fifo",
            [
                {"run": ["mkfifo", mailbox.REQUEST]},
                "{ sleep = 1.0 }",
                {"raw_request": "x" * (200 * 1024)},
            ],
        )
    )
    recipe_path = recipe(tmp_path, parts)
    run_id = start(repo, recipe_path)
    try:
        doc = wait_for(repo, run_id, children_settled, timeout=120)
        assert {t["status"] for t in doc["tasks"] if t["parent"]} == {"delivered"}, doc
        [hard_refusal] = _refusals_of(repo, run_id, doc, "Hard")
        assert hard_refusal["code"] == "RUN_REQUEST_INVALID" and "hard link" in hard_refusal["message"]
        assert hard_refusal["requestId"] is None
        [symlinked] = _refusals_of(repo, run_id, doc, "Symlinked mailbox")
        assert symlinked["code"] == "RUN_REQUEST_INVALID" and f"{mailbox.MAILBOX} was a symlink" in symlinked["message"]
        [request_link] = _refusals_of(repo, run_id, doc, "Symlinked request")
        assert "is a symlink" in request_link["message"]
        fifo = _refusals_of(repo, run_id, doc, "Fifo")
        assert [r["code"] for r in fifo] == ["RUN_REQUEST_INVALID", "RUN_REQUEST_TOO_LARGE"]
        assert "not a regular file" in fifo[0]["message"]
    finally:
        stop(repo, run_id)
    # nothing the supervisor followed or read: the outside files are as they were, with their single names
    assert hard.read_bytes() == _request("r-hardlinked-0123456789") and hard.stat().st_nlink == 1
    assert outside.read_bytes() == _request("r-symlinked-0123456789")
    assert (decoy / "request.json").read_bytes() == _request("r-decoy-0123456789")
    recorded = _state_text(repo, run_id, recipe_path) + supervisor_log(repo, run_id)
    for request_id in ("r-hardlinked-0123456789", "r-symlinked-0123456789", "r-decoy-0123456789"):
        assert request_id not in recorded


GARBAGE = (
    "{not json",
    "[1, 2]",
    json.dumps({"requestId": "bad id!"}),
    json.dumps({"requestId": "sk-ant-" + "q" * 30, "workerId": "x", "generation": 1}),
    "\x1b[2J\x07 not json at all",
    "",
)


@pytest.mark.slow
def test_a_storm_of_garbage_requests_is_answered_each_time_and_costs_a_handful_of_commits(tmp_path: Path) -> None:
    repo = project(tmp_path)
    first = json.dumps(
        {
            "requestId": "r-first",
            "workerId": "{worker_id}",
            "generation": 1,
            "contractHash": "{contract_hash}",
            "action": "handoff",
            f"{TOKEN}\x1b[31m": 1,  # an unknown field whose name is a token and a terminal escape
        }
    )
    storm: list[Step] = [{"raw_request": first}]
    storm += [{"raw_request": GARBAGE[i % len(GARBAGE)] + f" {i}"} for i in range(149)]
    noisy = child("n", "Noisy", [[*storm, write_step("src/n.txt", "n\n"), commit_step("Add n"), HANDOFF]])
    recipe_path = recipe(tmp_path, noisy + simple_child("o", "src/o.txt", title="Other"))
    run_id = start(repo, recipe_path)
    try:
        doc = wait_for(repo, run_id, children_settled, timeout=120)
        assert {t["status"] for t in doc["tasks"] if t["parent"]} == {"delivered"}, doc
        refused = _refusals_of(repo, run_id, doc, "Noisy")
        assert [r["code"] for r in refused] == ["RUN_REQUEST_INVALID"]  # held back within the minute
        assert "[REDACTED:github-token]" in refused[0]["message"] and "\\x1b[31m" in refused[0]["message"]
        commits = int(git(repo, "rev-list", "--count", f"refs/agentops/runs/{run_id}/state"))
        assert commits < 30, commits  # about 20 for the run itself; one commit per refusal would be over 170
        log_dir = repo / ".git" / "worktrees"
        host_logs = "".join(p.read_text(errors="replace") for p in log_dir.glob("*/agentops/host-*.log"))
        assert host_logs.count("response RUN_REQUEST_INVALID:") == 150  # every request still got its coded answer
    finally:
        stop(repo, run_id)
    recorded = _state_text(repo, run_id, recipe_path) + supervisor_log(repo, run_id)
    assert TOKEN not in recorded and "\x1b" not in recorded
    assert "sk-ant-" + "q" * 30 not in recorded
