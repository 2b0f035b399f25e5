"""Answering worker requests: validation, fencing, idempotency, then the action (:mod:`.actions`).

Order of checks, each answered in the worker's ``response.json`` with its code (never an exception that stops
the supervisor or touches another worker):

1. the file itself: a regular file, no symlink, at most 128 KiB (``RUN_REQUEST_INVALID``/``..._TOO_LARGE``);
2. strict JSON and the request schema -- unknown fields refused (``RUN_REQUEST_INVALID``);
3. idempotency: a ``requestId`` seen before replays its stored response when the canonical content is the same,
   and is ``RUN_REQUEST_ID_CONFLICT`` otherwise;
4. fencing: the worker id and generation must be this mailbox's current ones (``RUN_REQUEST_STALE``);
5. the contract hash must be the run's current one and the run active (``RUN_CONTRACT_CHANGED``);
6. the action's own rules.

The effect of a request and its idempotency record are written in the **same** state commit (:func:`answer`), so
a crash can never apply a request twice or lose its answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..canonical import digest
from ..errors import AgentOpsError
from ..gitstore.journal import Change, Event
from ..model.run import RunStatus, Worker, worker_contract
from ..protocol import mailbox
from ..runs import state as runstate
from ..runs.jobs import Request
from ..schema import documents
from .ports import Loop

Action = Callable[[Loop, Worker, Request], dict[str, Any] | None]
"""An action handler: the response, or None when a job will answer (handoff, finalize)."""


def serve(loop: Loop, worker: Worker, actions: Mapping[str, Action]) -> bool:
    """Take and answer at most one request from this worker's mailbox; True if there was one."""
    worktree = Path(worker.worktree)
    claimed = mailbox.claim_request(worktree)
    if claimed is None:
        return False
    response = _respond(loop, worker, claimed, actions)
    if response is None:  # handed to a job, which answers when done
        return True
    try:
        mailbox.write_response(worktree, response)
    except AgentOpsError as exc:
        loop.log(f"{worker.worker_id}: cannot write the response ({exc.code}): {exc.message}")
    return True


def _respond(
    loop: Loop, worker: Worker, claimed: mailbox.Claimed, actions: Mapping[str, Action]
) -> dict[str, Any] | None:
    if claimed.error is not None or claimed.data is None:
        error = claimed.error or AgentOpsError("RUN_REQUEST_INVALID", "empty request")
        return refuse(loop, worker, None, claimed.digest, error)
    try:
        doc = dict(documents.load(claimed.data, schema="request", what="request", max_bytes=mailbox.MAX_REQUEST_BYTES))
    except AgentOpsError as exc:
        code = "RUN_REQUEST_TOO_LARGE" if exc.code == "DOC_TOO_LARGE" else "RUN_REQUEST_INVALID"
        return refuse(loop, worker, _peek_id(claimed.data), claimed.digest, AgentOpsError(code, exc.message))
    request = Request(doc, digest(doc), claimed.digest)
    previous = loop.state.view.request_record(request.request_id)
    if previous is not None:
        if previous["requestDigest"] == request.digest:
            replayed: dict[str, Any] = {**previous["response"], "requestDigest": claimed.digest}
            return replayed
        return refuse(
            loop,
            worker,
            request.request_id,
            claimed.digest,
            AgentOpsError(
                "RUN_REQUEST_ID_CONFLICT", f"requestId {request.request_id} was used before with different content"
            ),
        )
    if doc["workerId"] != worker.worker_id or doc["generation"] != worker.generation:
        return refuse(
            loop,
            worker,
            request.request_id,
            claimed.digest,
            AgentOpsError(
                "RUN_REQUEST_STALE",
                f"this mailbox belongs to {worker.worker_id} generation {worker.generation}, not "
                f"{doc['workerId']} generation {doc['generation']}",
            ),
        )
    run = loop.state.run()
    contract = worker_contract(run, worker, loop.state.tasks())
    if run.status is not RunStatus.ACTIVE or doc["contractHash"] != contract:
        why = f"the run is {run.status}" if run.status is not RunStatus.ACTIVE else "the contract changed"
        return refuse(
            loop,
            worker,
            request.request_id,
            claimed.digest,
            AgentOpsError("RUN_CONTRACT_CHANGED", f"{why}: re-read instructions.json (contract {contract[:12]})"),
            data={"contractHash": contract},
        )
    handler = actions.get(doc["action"])
    if handler is None:
        return refuse(
            loop,
            worker,
            request.request_id,
            claimed.digest,
            AgentOpsError("RUN_ACTION_UNAVAILABLE", f"action {doc['action']!r} is not available in this version"),
        )
    try:
        return handler(loop, worker, request)
    except AgentOpsError as exc:
        return refuse(loop, worker, request.request_id, claimed.digest, exc, recorded=request)


def _peek_id(data: bytes) -> str | None:
    try:
        doc = documents.parse_json(data, max_bytes=mailbox.MAX_REQUEST_BYTES)
    except AgentOpsError:
        return None
    value = doc.get("requestId") if isinstance(doc, dict) else None
    return value if isinstance(value, str) and len(value) <= 64 else None


def put_record(change: Change, request: Request, response: Mapping[str, Any], at: float) -> None:
    """The idempotency record of ``request``: its digest and the response it got (in the effect's commit)."""
    change.put_json(
        runstate.request_path(request.request_id),
        {
            "requestId": request.request_id,
            "requestDigest": request.digest,
            "workerId": request.doc["workerId"],
            "generation": request.doc["generation"],
            "action": request.doc["action"],
            "response": dict(response),
            "at": at,
        },
        schema="request-record",
    )


def refuse(
    loop: Loop,
    worker: Worker,
    request_id: str | None,
    raw_digest: str,
    error: AgentOpsError,
    *,
    data: dict[str, Any] | None = None,
    recorded: Request | None = None,
) -> dict[str, Any]:
    """Answer with ``error``'s code; a refusal by an action's own rules also becomes the request's record."""
    response = mailbox.response(request_id, raw_digest, error.code, error.message, data)

    def note(change: Change, view: runstate.RunView) -> None:
        if recorded is not None:  # a refusal by the action's own rules is part of the request's idempotent story
            put_record(change, recorded, response, loop.ctx.clock.now())

    runstate.mutate(
        loop.journal,
        note,
        Event(
            "REQUEST_REFUSED",
            f"{worker.worker_id}: {error.code}",
            {
                "workerId": worker.worker_id,
                "generation": worker.generation,
                "code": error.code,
                "requestId": request_id,
                "requestDigest": raw_digest,
                "message": error.message[:2000],
            },
        ),
    )
    loop.log(f"{worker.worker_id}: refused request ({error.code}): {error.message.splitlines()[0][:200]}")
    return response


def refuse_accepted(loop: Loop, worker_id: str, request: Request, error: AgentOpsError) -> dict[str, Any]:
    """A refusal decided after the request was accepted (a failed handoff or integration): recorded like any answer."""
    worker = loop.state.workers()[worker_id]
    return refuse(loop, worker, request.request_id, request.raw_digest, error, recorded=request)


def answer(
    loop: Loop,
    worker: Worker,
    request: Request,
    code: str,
    message: str,
    effect: Callable[[Change, runstate.RunView], dict[str, Any] | None],
    data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Apply ``effect(change, view) -> data`` and record the request and its response in one commit."""

    def apply(change: Change, view: runstate.RunView) -> dict[str, Any]:
        extra = effect(change, view) or {}
        response = mailbox.response(request.request_id, request.raw_digest, code, message, {**(data or {}), **extra})
        put_record(change, request, response, loop.ctx.clock.now())
        return response

    return runstate.mutate(
        loop.journal,
        apply,
        Event(
            code,
            f"{worker.worker_id}: {message}"[:200],
            {
                "workerId": worker.worker_id,
                "generation": worker.generation,
                "requestId": request.request_id,
                "action": request.doc["action"],
            },
        ),
    )
