"""The request path, in process: one typed request per action parsed by one validator, one request record writer,
and one writer of ``response.json`` (issue 26 item 3).

No supervisor process runs here: requests are parsed, records written into a real journal, and a request is served
to a fake loop that records what it is asked to answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from git_agentops import eventkinds as kinds
from git_agentops.canonical import canonical_bytes
from git_agentops.clock import FixedClock
from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.journal import Event, Journal
from git_agentops.gitstore.repo import Store
from git_agentops.model.policy import Policy, effective
from git_agentops.model.request import (
    ACTIONS,
    REQUEST_TYPES,
    Action,
    Approval,
    CriterionSpec,
    HandoffRequest,
    PolicyRequest,
    RequestRecord,
    WorkerRequest,
    action_fields,
    field_problems,
)
from git_agentops.model.run import Role, Worker
from git_agentops.protocol import client, mailbox
from git_agentops.runs import state as runstate
from git_agentops.runs.jobs import Answered, Refused, Request
from git_agentops.schema import documents
from git_agentops.supervisor import requests
from git_agentops.supervisor.refusals import Refusals

HASH = "a" * 64
TASK = "task-01234567-89ab-cdef-0123-456789abcdef"
COMMON: dict[str, Any] = {"requestId": "req-1", "workerId": "worker-1", "generation": 2, "contractHash": HASH}

VALID: dict[str, list[dict[str, Any]]] = {
    "plan": [{"title": "T", "intent": "I", "criteria": ["c"]}],
    "worker": [
        {"title": "T", "intent": "I", "criteria": ["plain", {"description": "d", "runner": "acceptance"}],
         "dependencies": []},
        {"title": "T", "intent": "I", "criteria": [{"description": "d", "id": "c9", "reviewOnly": "by eye"}],
         "dependencies": [TASK], "taskId": TASK},
    ],
    "handoff": [{}, {"sourceFiles": ["src/a.py", "src/b.py"]}],
    "question": [{"prompt": "which one?"}],
    "finalize": [{}, {"sourceFiles": ["README.md"]}],
    "policy": [
        {"configFile": ".agentops/policy.next.toml", "expectedPolicyHash": HASH, "approvals": []},
        {"configFile": "p.toml", "expectedPolicyHash": HASH,
         "approvals": [{"capabilityId": "command:lint", "classification": "non-dangerous", "reason": "read-only"},
                       {"capabilityId": "host:codex", "reason": "the team's CLI"}]},
    ],
}  # fmt: skip

INVALID: dict[str, list[tuple[dict[str, Any], str]]] = {
    "plan": [({"title": "T", "intent": "I"}, "$"),
             ({"title": "T", "intent": "I", "criteria": ["c"], "prompt": "p"}, "$.prompt")],
    "worker": [({"title": "T", "intent": "I", "criteria": ["c"]}, "$"),
               ({"title": "T", "intent": "I", "criteria": ["c"], "dependencies": [], "taskId": "nope"}, "$.taskId")],
    "handoff": [({"prompt": "p"}, "$.prompt"), ({"sourceFiles": ["/etc/passwd"]}, "$.sourceFiles[0]")],
    "question": [({}, "$"), ({"prompt": ""}, "$.prompt")],
    "finalize": [({"title": "T"}, "$.title"), ({"sourceFiles": []}, "$.sourceFiles")],
    "policy": [({"configFile": "p.toml", "expectedPolicyHash": HASH}, "$"),
               ({"configFile": "p.toml", "expectedPolicyHash": "x", "approvals": []}, "$.expectedPolicyHash")],
}  # fmt: skip


def _doc(action: str, body: dict[str, Any]) -> dict[str, Any]:
    return {**COMMON, "action": action, **body}


def test_the_cases_cover_every_action() -> None:
    assert set(VALID) == set(INVALID) == set(ACTIONS) == {str(a) for a in REQUEST_TYPES}


@pytest.mark.parametrize(("action", "body"), [(a, b) for a, bodies in VALID.items() for b in bodies])
def test_a_valid_request_parses_once_into_its_actions_type_and_back_to_the_same_bytes(
    action: str, body: dict[str, Any]
) -> None:
    doc = _doc(action, body)
    parsed = mailbox.parse_request(json.loads(json.dumps(doc)))
    assert type(parsed) is REQUEST_TYPES[Action(action)] and parsed.action == action
    identity = (parsed.request_id, parsed.worker_id, parsed.generation, parsed.contract_hash)
    assert identity == ("req-1", "worker-1", 2, HASH)
    assert parsed.to_json() == doc
    assert canonical_bytes(parsed.to_json()) == canonical_bytes(doc)  # so the request's digest is unchanged too
    assert mailbox.parse_request(parsed.to_json()) == parsed


@pytest.mark.parametrize(("action", "body", "path"), [(a, b, p) for a, cases in INVALID.items() for b, p in cases])
def test_an_invalid_request_is_refused_naming_its_path_as_the_schema_check_always_did(
    action: str, body: dict[str, Any], path: str
) -> None:
    doc = _doc(action, body)
    with pytest.raises(AgentOpsError) as caught:
        mailbox.parse_request(doc)
    with pytest.raises(AgentOpsError) as before:  # what the supervisor's schema check said before the typed parse
        documents.validate(doc, "request", what="request")
    assert caught.value.code == "SCHEMA_INVALID" and caught.value.details["path"] == path
    assert caught.value.message == before.value.message
    assert {k: caught.value.details[k] for k in before.value.details} == before.value.details


def test_the_typed_field_tables_are_the_request_schemas() -> None:
    """Invariant: each action's declared fields -- required and optional -- are exactly what the request schema
    requires and admits for it, so the client's usage check and the schema cannot disagree."""
    schema = json.loads((Path(documents.__file__).parents[2] / "schemas" / "request.schema.json").read_text())
    common = {"requestId", "workerId", "generation", "contractHash", "action"}
    body_names = set(schema["properties"]) - common
    for rule in schema["allOf"]:
        action = rule["if"]["properties"]["action"]["const"]
        required, optional = action_fields(action)
        forbidden = {name for name, value in rule["then"]["properties"].items() if value is False}
        assert list(required) == rule["then"]["required"], action
        assert set(optional) == body_names - forbidden - set(required), action


def test_field_problems_name_missing_fields_in_order_and_misplaced_ones_as_given() -> None:
    assert field_problems("worker", ["intent", "prompt", "title", "configFile"]) == (
        ["criteria", "dependencies"],
        ["prompt", "configFile"],
    )
    assert field_problems("handoff", []) == ([], [])
    with pytest.raises(AgentOpsError) as caught:
        client.check_fields("finalize", {"prompt": "x", "title": "y"})
    assert caught.value.message == "finalize does not take prompt, title (it takes sourceFiles)"
    assert caught.value.details == {"unexpected": ["prompt", "title"]}


def test_the_cli_names_the_same_missing_fields_as_options() -> None:
    from git_agentops.cli.request import build_parser, fields_from_args

    with pytest.raises(AgentOpsError) as caught:
        fields_from_args(build_parser().parse_args(["worker", "--title", "T", "--prompt", "p"]))
    assert caught.value.message == "worker needs --intent, --criterion (see 'git-agentops-request --help')"
    with pytest.raises(AgentOpsError) as misplaced:
        fields_from_args(build_parser().parse_args(["handoff", "--prompt", "p", "--title", "T"]))
    assert misplaced.value.message == "handoff does not take --title, --prompt"  # in the options' table order


def test_typed_values_are_records_not_dicts() -> None:
    worker = mailbox.parse_request(_doc("worker", VALID["worker"][1]))
    assert isinstance(worker, WorkerRequest) and worker.task_id == TASK and worker.dependencies == (TASK,)
    assert worker.criteria == (CriterionSpec("d", id="c9", review_only="by eye"),)
    policy = mailbox.parse_request(_doc("policy", VALID["policy"][1]))
    assert isinstance(policy, PolicyRequest)
    assert policy.approvals == (
        Approval("command:lint", "read-only", "non-dangerous"),
        Approval("host:codex", "the team's CLI"),
    )
    handoff = mailbox.parse_request(_doc("handoff", {}))
    assert isinstance(handoff, HandoffRequest) and handoff.source_files is None


# -- the request record ---------------------------------------------------------------------------------------------

RESPONSE = mailbox.response(
    "req-1",
    "b" * 64,
    "RUN_WORKER_DELIVERED",
    "task-x delivered as 0123456789ab",
    {"taskId": "task-x", "sourceCommit": "c" * 40, "deliveryDigest": "d" * 64},
)
OLD_RECORD_BYTES = (
    b'{"action":"handoff","at":1700000000.25,"generation":2,"requestDigest":"' + b"a" * 64 + b'","requestId":"req-1",'
    b'"response":{"code":"RUN_WORKER_DELIVERED","data":{"deliveryDigest":"'
    + b"d" * 64
    + b'","sourceCommit":"'
    + b"c" * 40
    + b'","taskId":"task-x"},"message":"task-x delivered as 0123456789ab","ok":true,"requestDigest":"'
    + b"b" * 64
    + b'","requestId":"req-1"},"workerId":"worker-1"}\n'
)
"""The record the three old writers (requests.put_record, the delivery's and the integration's copies) wrote for
these values, captured before they became one."""


def test_the_request_record_keeps_the_bytes_the_old_writers_wrote(store: Store) -> None:
    record = RequestRecord("req-1", "a" * 64, "worker-1", 2, "handoff", RESPONSE, 1700000000.25)
    assert documents.dump(record.to_json(), schema="request-record") == OLD_RECORD_BYTES
    journal = Journal(store, runstate.state_ref("run-1"))
    journal.mutate(lambda change: runstate.put_request_record(change, record), Event(kinds.STATE_CHANGED, "a record"))
    view = runstate.RunView(journal.read())
    assert view.view.get(runstate.request_path("req-1")) == OLD_RECORD_BYTES
    assert view.request_record("req-1") == record
    assert RequestRecord.from_json(json.loads(OLD_RECORD_BYTES)) == record


def test_the_supervisors_record_of_an_accepted_request_is_the_same_record(store: Store) -> None:
    doc = _doc("handoff", {})
    request = Request(doc, "a" * 64, "b" * 64, mailbox.parse_request(doc))
    journal = Journal(store, runstate.state_ref("run-1"))
    journal.mutate(
        lambda change: requests.put_record(change, request, RESPONSE, 1700000000.25),
        Event(kinds.STATE_CHANGED, "a record"),
    )
    assert runstate.RunView(journal.read()).view.get(runstate.request_path("req-1")) == OLD_RECORD_BYTES


# -- answers go through the loop ------------------------------------------------------------------------------------


class _Loop:
    """What :func:`requests.serve` uses of the loop for a request it refuses before any state is read."""

    def __init__(self, store: Store) -> None:
        self.run_id = "run-1"
        self.policy = Policy.from_effective(effective({"version": 1}))
        self.ctx = SimpleNamespace(clock=FixedClock())
        self.refusals = Refusals()
        self.journal = runstate.journal(store, self.run_id)
        self.answers: list[tuple[str, Answered]] = []
        self.lines: list[str] = []

    def respond(self, worker: Worker, answer: Answered) -> AgentOpsError | None:
        self.answers.append((worker.worker_id, answer))
        return None

    def log(self, message: str) -> None:
        self.lines.append(message)


def test_a_served_request_is_answered_through_the_loop_and_never_written_by_the_handler(
    store: Store, tmp_path: Path
) -> None:
    worktree = tmp_path / "wt"
    worker = Worker("worker-1", Role.CHILD, "scripted", str(worktree), "b", generation=2)
    loop = _Loop(store)
    digest = mailbox.send_raw(worktree, b'{"requestId": "req-1", "action": "dance"}')
    assert requests.serve(loop, worker, {}) is True  # type: ignore[arg-type]
    [(who, answer)] = loop.answers
    assert who == "worker-1" and answer.response["code"] == "RUN_REQUEST_INVALID"
    assert answer.response["requestDigest"] == digest and answer.response["requestId"] == "req-1"
    assert "does not match schema 'request'" in answer.response["message"]
    assert not (worktree / mailbox.RESPONSE).exists()  # only the loop's respond writes the mailbox
    assert requests.serve(loop, worker, {}) is False  # nothing more to take
    other = _Loop(store)  # refusals are held per loop: a new loop starts with none held back
    assert other.refusals.windows == {} and loop.refusals.windows != {}


def test_a_jobs_refusal_carries_its_error_unchanged() -> None:
    error = AgentOpsError("RUN_VERIFICATION_FAILED", "x" * 9000, details={"failed": ["test"]})
    refused = Refused(error, Request({"requestId": "r-1"}, "0" * 64, "1" * 64), {"failed": ["test"]}, "c" * 40)
    assert refused.error is error and (refused.code, refused.message) == (error.code, error.message)


def test_a_jobs_refusal_becomes_the_requests_answer_and_record_in_one_conversion(store: Store) -> None:
    """The loop's boundary: ``Refused(error)`` -> the response (message cut to the response limit, cleaned) and the
    request's idempotency record holding that same response, in one state commit."""
    loop = _Loop(store)
    worker = Worker("worker-1", Role.CHILD, "scripted", "/nowhere", "b", generation=2)
    loop.state = SimpleNamespace(workers=lambda: {"worker-1": worker})  # type: ignore[attr-defined]
    doc = _doc("handoff", {})
    refused = Refused(
        AgentOpsError("RUN_VERIFICATION_FAILED", "failed:\n" + "y" * 9000),
        Request(doc, "a" * 64, "b" * 64, mailbox.parse_request(doc)),
    )
    response = requests.refuse_accepted(loop, "worker-1", refused.request, refused.error)  # type: ignore[arg-type]
    assert response["code"] == "RUN_VERIFICATION_FAILED" and response["ok"] is False
    assert response["requestDigest"] == "b" * 64 and len(response["message"]) == requests.RESPONSE_LIMIT
    record = runstate.RunView(loop.journal.read()).request_record("req-1")
    assert record == RequestRecord("req-1", "a" * 64, "worker-1", 2, "handoff", response, loop.ctx.clock.now())
    [event] = [e for e in loop.journal.log() if e.code == "REQUEST_REFUSED"]
    assert event.data["requestId"] == "req-1" and event.data["code"] == "RUN_VERIFICATION_FAILED"
