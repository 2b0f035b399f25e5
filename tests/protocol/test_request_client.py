"""``git agentops-request`` and the client under it, against a fake supervisor watching a real worktree's mailbox.

The fake supervisor is a thread doing what the real one does with the mailbox: claim ``request.json`` by
renaming it, answer in ``response.json`` with the digest of the exact request bytes, and rewrite
``instructions.json`` when the contract changes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from git_agentops.cli import request as request_cli
from git_agentops.errors import AgentOpsError
from git_agentops.protocol import client, mailbox
from git_agentops.schema import documents

from ..conftest import make_repo

HASH_A = "a" * 64
HASH_B = "b" * 64
ROOT = "task-00000000-0000-4000-8000-000000000001"

Answer = Callable[[dict[str, Any] | None, mailbox.Claimed], dict[str, Any] | None]


def instructions_doc(worktree: Path, **overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "version": 1,
        "runId": "run-1",
        "workerId": "coordinator",
        "role": "coordinator",
        "generation": 3,
        "contractHash": HASH_A,
        "goal": "make it work",
        "task": None,
        "tasks": [],
        "rootTaskId": None,
        "diagnostic": None,
        "answers": [],
        "mailbox": str(worktree / mailbox.MAILBOX),
        "worktree": str(worktree),
        "base": None,
        "host": "scripted",
        "recipe": None,
        "runStatus": "active",
    }
    doc.update(overrides)
    return doc


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo", files={"README.md": "hi\n", "src/app.py": "x = 1\n"})
    mailbox.write_instructions(repo, instructions_doc(repo))
    return repo


class FakeSupervisor:
    """Claims every request of one worktree and answers it with ``answer(request, claimed)`` (None: silence)."""

    def __init__(self, worktree: Path, answer: Answer) -> None:
        self.worktree = worktree
        self.answer = answer
        self.requests: list[dict[str, Any] | None] = []
        self.digests: list[str] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> FakeSupervisor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        assert self.errors == []

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                claimed = mailbox.claim_request(self.worktree)
                if claimed is None:
                    time.sleep(0.005)
                    continue
                try:
                    request = json.loads(claimed.data or b"")
                except ValueError:
                    request = None
                self.requests.append(request)
                self.digests.append(claimed.digest)
                doc = self.answer(request, claimed)
                if doc is not None:
                    mailbox.write_response(self.worktree, doc)
            except BaseException as exc:  # surfaced by __exit__
                self.errors.append(exc)
                return


def reply(code: str, message: str = "done", **data: Any) -> Answer:
    def answer(request: dict[str, Any] | None, claimed: mailbox.Claimed) -> dict[str, Any]:
        request_id = request.get("requestId") if isinstance(request, dict) else None
        return mailbox.response(request_id, claimed.digest, code, message, data)

    return answer


@pytest.fixture
def supervise(worktree: Path) -> Iterator[Callable[[Answer], FakeSupervisor]]:
    started: list[FakeSupervisor] = []

    def start(answer: Answer) -> FakeSupervisor:
        sup = FakeSupervisor(worktree, answer).__enter__()
        started.append(sup)
        return sup

    yield start
    for sup in started:
        sup.__exit__(None, None, None)


def request_cmd(run_cli: Any, cwd: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return run_cli("git", "agentops-request", *args, cwd=cwd, env=env, timeout=60)


PLAN = ("plan", "--title", "Parser", "--intent", "Parse the input", "--criterion", "parses x", "--criterion", "fails y")


# -- the command ----------------------------------------------------------------------------------------------------


def test_plan_writes_a_schema_valid_request_and_prints_the_accepted_response(
    run_cli: Any, worktree: Path, supervise: Callable[[Answer], FakeSupervisor]
) -> None:
    sup = supervise(reply("RUN_PLAN_CREATED", "root task created", taskId=ROOT, contractHash=HASH_B))
    done = request_cmd(run_cli, worktree / "src", *PLAN)  # any directory inside the worktree
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "RUN_PLAN_CREATED: root task created",
        f"  contractHash: {HASH_B}",
        f"  taskId: {ROOT}",
    ]
    [request] = sup.requests
    assert request is not None
    documents.validate(request, "request")
    assert {k: v for k, v in request.items() if k != "requestId"} == {
        "workerId": "coordinator",
        "generation": 3,
        "contractHash": HASH_A,
        "action": "plan",
        "title": "Parser",
        "intent": "Parse the input",
        "criteria": ["parses x", "fails y"],
    }
    assert request["requestId"].startswith("req-")


def test_a_refusal_exits_1_and_json_prints_the_response_document(
    run_cli: Any, worktree: Path, supervise: Callable[[Answer], FakeSupervisor]
) -> None:
    sup = supervise(reply("RUN_COORDINATOR_REQUIRED", "only the coordinator plans", hint="ask the coordinator"))
    done = request_cmd(
        run_cli, worktree, "worker", "--title", "T", "--intent", "I", "--criterion", "c", "--depends-on", ROOT, "--json"
    )
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    documents.validate(doc, "response")
    assert doc["ok"] is False and doc["code"] == "RUN_COORDINATOR_REQUIRED"
    assert doc["data"] == {"hint": "ask the coordinator"} and doc["requestDigest"] == sup.digests[0]
    [request] = sup.requests
    assert request is not None and request["dependencies"] == [ROOT] and request["criteria"] == ["c"]


def test_contract_change_resends_the_same_action_once_with_the_new_hash(
    run_cli: Any, worktree: Path, supervise: Callable[[Answer], FakeSupervisor]
) -> None:
    def answer(request: dict[str, Any] | None, claimed: mailbox.Claimed) -> dict[str, Any]:
        assert request is not None
        if request["contractHash"] == HASH_A:
            mailbox.write_instructions(worktree, instructions_doc(worktree, contractHash=HASH_B))
            return mailbox.response(request["requestId"], claimed.digest, "RUN_CONTRACT_CHANGED", "stale contract")
        return mailbox.response(
            request["requestId"], claimed.digest, "RUN_AWAITING_INPUT", "asked", {"questionId": "q1"}
        )

    sup = supervise(answer)
    done = request_cmd(run_cli, worktree, "question", "--prompt", "Which format?")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("RUN_AWAITING_INPUT: asked\n  questionId: q1")
    first, second = sup.requests
    assert first is not None and second is not None
    assert first["contractHash"] == HASH_A and second["contractHash"] == HASH_B
    assert first["requestId"] != second["requestId"]
    same = ("workerId", "generation", "action", "prompt")
    assert {k: first[k] for k in same} == {k: second[k] for k in same}


def test_contract_change_is_not_resent_twice(worktree: Path, supervise: Callable[[Answer], FakeSupervisor]) -> None:
    hashes = iter(["c" * 64, "d" * 64, "e" * 64])

    def answer(request: dict[str, Any] | None, claimed: mailbox.Claimed) -> dict[str, Any]:
        assert request is not None
        mailbox.write_instructions(worktree, instructions_doc(worktree, contractHash=next(hashes)))
        return mailbox.response(request["requestId"], claimed.digest, "RUN_CONTRACT_CHANGED", "stale contract")

    sup = supervise(answer)
    response = client.call(worktree, "finalize", {}, timeout=10, settle=0.2)
    assert response["code"] == "RUN_CONTRACT_CHANGED" and len(sup.requests) == 2


def test_contract_change_without_a_new_hash_is_returned_as_is(
    worktree: Path, supervise: Callable[[Answer], FakeSupervisor]
) -> None:
    sup = supervise(reply("RUN_CONTRACT_CHANGED", "the run is not active"))
    response = client.call(worktree, "handoff", {}, timeout=10, settle=0.2)
    assert response["ok"] is False and response["code"] == "RUN_CONTRACT_CHANGED" and len(sup.requests) == 1


def test_contract_change_is_not_resent_for_another_generation(
    worktree: Path, supervise: Callable[[Answer], FakeSupervisor]
) -> None:
    """A restarted worker's instructions must not make an old process speak for the new generation."""

    def answer(request: dict[str, Any] | None, claimed: mailbox.Claimed) -> dict[str, Any]:
        assert request is not None
        mailbox.write_instructions(worktree, instructions_doc(worktree, contractHash=HASH_B, generation=4))
        return mailbox.response(request["requestId"], claimed.digest, "RUN_CONTRACT_CHANGED", "stale contract")

    sup = supervise(answer)
    response = client.call(worktree, "handoff", {}, timeout=10, settle=0.2)
    assert response["code"] == "RUN_CONTRACT_CHANGED" and len(sup.requests) == 1


def test_no_response_times_out_with_request_timeout(run_cli: Any, worktree: Path) -> None:
    started = time.monotonic()
    done = request_cmd(run_cli, worktree, "handoff", "--timeout", "0.3")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("error[REQUEST_TIMEOUT]: ")
    assert time.monotonic() - started < 30
    assert (worktree / mailbox.REQUEST).is_file()  # sent, never claimed


def test_outside_a_worker_worktree_is_refused(run_cli: Any, tmp_path: Path) -> None:
    plain = make_repo(tmp_path / "plain")
    done = request_cmd(run_cli, plain, "handoff", "--json")
    assert done.returncode == 3 and done.stdout == ""
    assert json.loads(done.stderr)["error"]["code"] == "REQUEST_NO_MAILBOX"
    assert not (plain / ".agentops").exists()


def test_missing_title_is_a_usage_error_and_nothing_is_written(run_cli: Any, worktree: Path) -> None:
    done = request_cmd(run_cli, worktree, "plan", "--intent", "I", "--criterion", "a", "--criterion", "b")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error[USAGE]: plan needs --title")
    assert sorted(p.name for p in (worktree / mailbox.MAILBOX).iterdir()) == ["instructions.json"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["handoff", "--prompt", "x"], "handoff does not take --prompt"),
        (["question"], "question needs --prompt"),
        (["policy", "--config-file", "p.toml"], "policy needs --expected-policy-hash"),
        (["plan", "--title", "", "--intent", "I", "--criterion", "a"], "plan request is invalid at $.title"),
        (["handoff", "--source-file", "../x"], "handoff request is invalid at $.sourceFiles[0]"),
        (["policy", "--config-file", "p", "--expected-policy-hash", HASH_A, "--approval", "x"], "CAPABILITY=REASON"),
        (["nap"], "invalid choice: 'nap'"),
        (["handoff", "--timeout", "0"], "--timeout"),
    ],
)
def test_bad_fields_are_usage_errors_before_anything_is_written(
    run_cli: Any, worktree: Path, args: list[str], expected: str
) -> None:
    done = request_cmd(run_cli, worktree, *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error[USAGE]: ") and expected in done.stderr
    assert not (worktree / mailbox.REQUEST).exists()


def test_mailbox_from_the_environment_and_generation_as_fencing_token(
    run_cli: Any, tmp_path: Path, worktree: Path, supervise: Callable[[Answer], FakeSupervisor]
) -> None:
    sup = supervise(reply("RUN_WORKER_DELIVERED", "delivered", sourceCommit="0" * 40))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"AGENTOPS_MAILBOX": str(worktree / mailbox.MAILBOX), "AGENTOPS_GENERATION": "2"}
    done = request_cmd(run_cli, elsewhere, "handoff", "--source-file", "src/app.py", env=env)
    assert done.returncode == 0, done.stderr
    [request] = sup.requests
    assert request is not None
    assert request["generation"] == 2  # the process's own generation, not the instructions' 3
    assert request["sourceFiles"] == ["src/app.py"]


# -- the client, in process ---------------------------------------------------------------------------------------


def test_build_request_copies_identity_and_fresh_ids(worktree: Path) -> None:
    instructions = mailbox.read_instructions(worktree)
    one = client.build_request(instructions, "finalize", {})
    two = client.build_request(instructions, "finalize", {}, generation=7)
    assert one["requestId"] != two["requestId"]
    assert (one["workerId"], one["generation"], one["contractHash"]) == ("coordinator", 3, HASH_A)
    assert two["generation"] == 7


def test_build_request_policy_approvals_and_criteria_objects(worktree: Path) -> None:
    instructions = mailbox.read_instructions(worktree)
    policy = client.build_request(
        instructions,
        "policy",
        {
            "configFile": ".agentops/policy.next.toml",
            "expectedPolicyHash": HASH_A,
            "approvals": client.approvals([("command:lint", "read-only linter")]),
        },
    )
    documents.validate(policy, "request")
    assert policy["approvals"] == [
        {"capabilityId": "command:lint", "classification": "non-dangerous", "reason": "read-only linter"}
    ]
    criteria: list[Any] = ["plain", {"description": "runs", "runner": "acceptance"}]
    worker = client.build_request(
        instructions,
        "worker",
        {"title": "T", "intent": "I", "criteria": criteria, "dependencies": (ROOT,), "taskId": ROOT},
    )
    assert worker["criteria"] == criteria and worker["dependencies"] == [ROOT]


@pytest.mark.parametrize(
    ("action", "fields", "message"),
    [
        ("dance", {}, "unknown action 'dance'"),
        ("plan", {"title": "T"}, "plan needs intent, criteria"),
        ("finalize", {"prompt": "x"}, "finalize does not take prompt"),
        ("question", {"prompt": "x" * 5000}, "question request is invalid at $.prompt"),
    ],
)
def test_build_request_refuses_bad_fields(worktree: Path, action: str, fields: Mapping[str, Any], message: str) -> None:
    with pytest.raises(AgentOpsError) as caught:
        client.build_request(mailbox.read_instructions(worktree), action, fields)
    assert caught.value.code == "USAGE" and message in caught.value.message


def test_describe_renders_code_message_and_data() -> None:
    doc = mailbox.response("r", "0" * 64, "RUN_WORKER_PLANNED", "planned", {"taskId": ROOT, "n": [1]})
    assert client.describe(doc) == ["RUN_WORKER_PLANNED: planned", "  n: [1]", f"  taskId: {ROOT}"]


def test_the_parser_lists_every_action() -> None:
    help_text = request_cli.build_parser().format_help()
    assert all(action in help_text for action in client.ACTIONS)


def test_instructions_are_written_one_key_per_line_so_agents_file_tools_read_them_whole(tmp_path: Path) -> None:
    """Invariant: ``instructions.json`` is indented: agents read it with their file tools, and opencode's and Gemini
    CLI's cut lines at 2000 characters (a resumed coordinator's one-line instructions came back unparseable)."""
    goal = "Write files: " + "; ".join(f"f{i}.txt says {i}" for i in range(120))[:1800]  # one long value
    mailbox.write_instructions(tmp_path, instructions_doc(tmp_path, goal=goal))
    text = (tmp_path / mailbox.INSTRUCTIONS).read_text()
    assert len(text) > 2000 and max(len(line) for line in text.splitlines()) < 2000
    assert mailbox.read_instructions(tmp_path)["goal"] == goal
