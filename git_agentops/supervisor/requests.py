"""Answering worker requests: validation, fencing, idempotency, then the action (:mod:`.actions`).

Order of checks, each answered in the worker's ``response.json`` with its code (never an exception that stops
the supervisor or touches another worker):

1. the file itself, claimed without following anything the worker placed: a regular file, no symlink (nor a
   symlinked mailbox), no hard link, at most 128 KiB (``RUN_REQUEST_INVALID``/``..._TOO_LARGE``;
   :func:`~git_agentops.protocol.mailbox.claim_request`);
2. strict JSON and the request schema -- unknown fields refused (``RUN_REQUEST_INVALID``);
3. idempotency: a ``requestId`` seen before replays its stored response when the canonical content is the same,
   and is ``RUN_REQUEST_ID_CONFLICT`` otherwise;
4. fencing: the worker id and generation must be this mailbox's current ones (``RUN_REQUEST_STALE``);
5. no policy transition may be pending (``RUN_POLICY_TRANSITION_PENDING``: nothing else is done meanwhile), and
   the contract hash must be the run's current one and the run active (``RUN_CONTRACT_CHANGED``);
6. the action's own rules.

The effect of a request and its idempotency record are written in the **same** state commit (:func:`answer`), so
a crash can never apply a request twice or lose its answer.

Nothing a worker writes is believed, and nothing it writes is recorded raw: every agent-derived string that reaches
a response, a state event or ``supervisor.log`` goes through :func:`~git_agentops.integrate.secrets.clean_text`
(secrets redacted with the policy's patterns too, control characters escaped, cut to :data:`ID_LIMIT` /
:data:`MESSAGE_LIMIT`), and a ``requestId`` that is not a valid id -- or is secret-shaped -- is never stored as
one: it shows, cleaned, in the message only.

Refusals are coalesced (:class:`~.refusals.Refusals`, held by the loop as ``loop.refusals``): a worker that writes
garbage in a loop would otherwise add a state commit per request. Per worker and code, at most one
``REQUEST_REFUSED`` event is committed per :data:`~.refusals.REFUSAL_WINDOW` seconds of the supervisor's clock; the
refusals held back meanwhile are counted in memory and written with the next event of that worker and code, or by
:func:`flush_refusals` once the window ends, as ``{"count": N, "since": t}`` -- ``count`` is how many refusals the
event stands for, ``since`` when the first of them came. Every refusal is still answered in the mailbox with its
code. A refusal by an action's own rules is the request's idempotency record and is always committed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from .. import eventkinds as kinds
from ..canonical import JsonObject, JsonValue, digest
from ..clock import iso8601
from ..errors import AgentOpsError, DocTooLarge
from ..gitstore.journal import Change, Event
from ..integrate.secrets import clean_text
from ..model.request import RequestRecord, ResponseDoc
from ..model.run import RunStatus, Worker, worker_contract
from ..protocol import mailbox
from ..runs import state as runstate
from ..runs.jobs import Answered, Request
from ..schema import documents
from ..verify.held import find_held
from .ports import Loop

Action = Callable[[Loop, Worker, Request], ResponseDoc | None]
"""An action handler: the response, or None when a job will answer (handoff, finalize)."""

ID_LIMIT: Final = 200
"""Characters of an agent-supplied id or summary kept in an event or a log line."""
MESSAGE_LIMIT: Final = 2000
"""Characters of an agent-derived message kept in an event."""
RESPONSE_LIMIT: Final = 8000
"""Characters of a refusal message kept in a response (and so in an idempotency record)."""
_REQUEST_ID: Final = re.compile(r"[A-Za-z0-9-]{1,64}")  # the request schema's requestId


def serve(loop: Loop, worker: Worker, actions: Mapping[str, Action]) -> bool:
    """Take and answer at most one request from this worker's mailbox; True if there was one.

    Refusals of this worker held back longer than the window are flushed first, so a storm's count is written
    even while the loop does not call :func:`flush_refusals`.
    """
    flush_refusals(loop, worker_id=worker.worker_id)
    claimed = mailbox.claim_request(Path(worker.worktree))
    if claimed is None:
        return False
    response = _respond(loop, worker, claimed, actions)
    if response is None:  # handed to a job, which answers when done
        return True
    if not claimed.answerable:  # the mailbox itself is unusable: nowhere to answer, nothing was taken
        return False
    unwritten = loop.respond(worker, Answered(response))
    if unwritten is not None:
        loop.log(
            f"{worker.worker_id}: cannot write the response ({unwritten.code}): "
            + clean_text(unwritten.message, ID_LIMIT, loop.policy.deny_patterns)
        )
    return True


def valid_request_id(value: object, patterns: tuple[str, ...] = ()) -> str | None:
    """``value`` when it is a request id that may be stored as one -- the schema's shape and not secret-shaped
    (``sk-ant-...`` fits the shape) -- else None."""
    if not isinstance(value, str) or not _REQUEST_ID.fullmatch(value):
        return None
    return value if clean_text(value, ID_LIMIT, patterns) == value else None


def _respond(loop: Loop, worker: Worker, claimed: mailbox.Claimed, actions: Mapping[str, Action]) -> ResponseDoc | None:
    if claimed.error is not None or claimed.data is None:
        error = claimed.error or AgentOpsError("RUN_REQUEST_INVALID", "empty request")
        return refuse(loop, worker, None, claimed.digest, error)
    try:
        doc = documents.parse_json(claimed.data, what="request", max_bytes=mailbox.MAX_REQUEST_BYTES)
        body = mailbox.parse_request(doc)  # the one check of the request's shape, shared with the client
    except AgentOpsError as exc:
        code = "RUN_REQUEST_TOO_LARGE" if isinstance(exc, DocTooLarge) else "RUN_REQUEST_INVALID"
        peeked = _peek_id(claimed.data, loop.policy.deny_patterns)
        return refuse(loop, worker, peeked, claimed.digest, AgentOpsError(code, exc.message))
    if valid_request_id(body.request_id, loop.policy.deny_patterns) is None:
        return refuse(
            loop,
            worker,
            None,
            claimed.digest,
            AgentOpsError(
                "RUN_REQUEST_INVALID",
                f"requestId {body.request_id!r} is secret-shaped; use a random id (git agentops-request does)",
            ),
        )
    carried = find_held(claimed.data, loop.ctx.held).found
    if carried:  # a request goes into the run's state, which travels to every clone of a shared remote
        named = ", ".join(sorted({finding.rule for finding in carried}))
        error = AgentOpsError("RUN_REQUEST_INVALID", f"the request carries a secret the supervisor holds ({named})")
        return refuse(loop, worker, body.request_id, claimed.digest, error)
    request = Request(doc, digest(doc), claimed.digest, body)
    previous = loop.state.view.request_record(request.request_id)
    if previous is not None:
        if previous.request_digest == request.digest:
            replayed: ResponseDoc = {**previous.response, "requestDigest": claimed.digest}
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
    if body.worker_id != worker.worker_id or body.generation != worker.generation:
        return refuse(
            loop,
            worker,
            request.request_id,
            claimed.digest,
            AgentOpsError(
                "RUN_REQUEST_STALE",
                f"this mailbox belongs to {worker.worker_id} generation {worker.generation}, not "
                f"{body.worker_id} generation {body.generation}",
            ),
        )
    if loop.transition is not None:
        return refuse(
            loop,
            worker,
            request.request_id,
            claimed.digest,
            AgentOpsError(
                "RUN_POLICY_TRANSITION_PENDING",
                f"the policy transition {loop.transition} is pending; nothing else is done until it has ended",
            ),
        )
    run = loop.state.run()
    contract = worker_contract(run, worker, loop.state.tasks())
    if run.status is not RunStatus.ACTIVE or body.contract_hash != contract:
        why = f"the run is {run.status}" if run.status is not RunStatus.ACTIVE else "the contract changed"
        return refuse(
            loop,
            worker,
            request.request_id,
            claimed.digest,
            AgentOpsError("RUN_CONTRACT_CHANGED", f"{why}: re-read instructions.json (contract {contract[:12]})"),
            data={"contractHash": contract},
        )
    handler = actions.get(body.action)
    if handler is None:
        return refuse(
            loop,
            worker,
            request.request_id,
            claimed.digest,
            AgentOpsError("RUN_ACTION_UNAVAILABLE", f"action {str(body.action)!r} is not available in this version"),
        )
    try:
        return handler(loop, worker, request)
    except AgentOpsError as exc:
        return refuse(loop, worker, request.request_id, claimed.digest, exc, recorded=request)


def _peek_id(data: bytes, patterns: tuple[str, ...]) -> str | None:
    """The ``requestId`` of a request refused by the schema, when it is a valid id (so the writer can match its
    answer); an invalid one stays in the message only."""
    try:
        doc = documents.parse_json(data, max_bytes=mailbox.MAX_REQUEST_BYTES)
    except AgentOpsError:
        return None
    return valid_request_id(doc.get("requestId") if isinstance(doc, dict) else None, patterns)


def put_record(change: Change, request: Request, response: ResponseDoc, at: float) -> None:
    """The idempotency record of ``request``: its digest and the response it got (in the effect's commit)."""
    doc = request.doc
    record = RequestRecord(
        request.request_id, request.digest, doc["workerId"], doc["generation"], doc["action"], response, at
    )
    runstate.put_request_record(change, record)


def refuse(
    loop: Loop,
    worker: Worker,
    request_id: str | None,
    raw_digest: str,
    error: AgentOpsError,
    *,
    data: Mapping[str, JsonValue] | None = None,
    recorded: Request | None = None,
) -> ResponseDoc:
    """Answer with ``error``'s code; a refusal by an action's own rules also becomes the request's record.

    The message is cleaned before it goes anywhere (the response, the event, the log); the event is coalesced
    (see the module docstring) unless ``recorded`` makes it the request's idempotency record.
    """
    patterns = loop.policy.deny_patterns
    request_id = valid_request_id(request_id, patterns)
    message = clean_text(error.message, RESPONSE_LIMIT, patterns, multiline=True)
    response = mailbox.response(request_id, raw_digest, error.code, message, data)
    now = loop.ctx.clock.now()
    refusal = {
        "workerId": worker.worker_id,
        "generation": worker.generation,
        "code": error.code,
        "requestId": request_id,
        "requestDigest": raw_digest,
        "message": clean_text(message, MESSAGE_LIMIT, patterns, multiline=True),
    }
    held = loop.refusals.admit(worker.worker_id, error.code, now, refusal, record=recorded is not None)
    if held is None:
        return response

    def note(change: Change, view: runstate.RunView) -> None:
        if recorded is not None:  # a refusal by the action's own rules is part of the request's idempotent story
            put_record(change, recorded, response, now)

    _commit_refusal(loop, {**refusal, **held}, note)
    return response


def _commit_refusal(
    loop: Loop, data: Mapping[str, Any], note: Callable[[Change, runstate.RunView], None] | None = None
) -> None:
    """The ``REQUEST_REFUSED`` state commit of ``data`` (with ``note``'s changes), and its log line."""
    count = data.get("count")
    also = f" ({count} refusals since {iso8601(data['since'])})" if count else ""
    runstate.mutate(
        loop.journal,
        note or (lambda change, view: None),
        Event(kinds.REQUEST_REFUSED, f"{data['workerId']}: {data['code']}{also}", dict(data)),
    )
    first_line = str(data["message"]).split("\n", 1)[0]
    shown = clean_text(first_line, ID_LIMIT, loop.policy.deny_patterns)
    loop.log(f"{data['workerId']}: refused request ({data['code']}){also}: {shown}")


def flush_refusals(loop: Loop, *, worker_id: str | None = None, force: bool = False) -> None:
    """Commit the count of every worker's refusals held back for a whole window (of ``worker_id``'s only, when
    given); the loop calls it each tick (and with ``force=True`` before it stops, so that no count is lost)."""
    for data in loop.refusals.due(loop.ctx.clock.now(), worker_id=worker_id, force=force):
        _commit_refusal(loop, data)


def refuse_accepted(loop: Loop, worker_id: str, request: Request, error: AgentOpsError) -> ResponseDoc:
    """A refusal decided after the request was accepted (a failed handoff or integration): recorded like any answer.

    This is where a job's :class:`~git_agentops.runs.jobs.Refused` becomes a response, its error's message cut to
    :data:`RESPONSE_LIMIT` characters before it is cleaned."""
    worker = loop.state.workers()[worker_id]
    if len(error.message) > RESPONSE_LIMIT:
        error = AgentOpsError(error.code, error.message[:RESPONSE_LIMIT], details=error.details)
    return refuse(loop, worker, request.request_id, request.raw_digest, error, recorded=request)


def answer(
    loop: Loop,
    worker: Worker,
    request: Request,
    code: kinds.EventCode,
    message: str,
    effect: Callable[[Change, runstate.RunView], JsonObject | None],
    data: JsonObject | None = None,
) -> ResponseDoc:
    """Apply ``effect(change, view) -> data`` and record the request and its response in one commit."""

    def apply(change: Change, view: runstate.RunView) -> ResponseDoc:
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
