"""The worker side of the request protocol: build a request, send it through the mailbox, wait for its answer.

Both ``git agentops-request`` (what a model-driven agent calls) and the built-in scripted agent go through here,
so every agent speaks the protocol the same way:

* a request copies ``workerId``, ``generation`` and ``contractHash`` from ``instructions.json`` and gets a fresh
  ``requestId``; it is checked against ``schemas/request.schema.json`` *before* it is written, so a caller's
  mistake is reported to the caller instead of costing a supervisor round trip;
* the response is matched by the digest of the exact request bytes, never by position: a stale
  ``response.json`` from an earlier request is not mistaken for this one;
* ``RUN_CONTRACT_CHANGED`` means the contract hash the request bound is stale (the coordinator planned a task,
  say). The client re-reads the instructions and, when the hash really changed, sends the *same* action once
  more with a new ``requestId`` and the new hash. Only once: a second refusal is the caller's to judge.

The generation is a fencing token: a process of an older generation must never speak for the newer one. A caller
that knows its own generation (an agent gets it in ``$AGENTOPS_GENERATION``) passes it, and it wins over what the
instructions file says now; and a re-send never happens when the instructions name another worker or generation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from ..canonical import JsonObject, JsonValue
from ..errors import AgentOpsError
from ..model.instructionsdoc import InstructionsDoc
from ..model.request import ACTIONS, Approval, ResponseDoc, check_fields
from . import mailbox

__all__ = ["ACTIONS", "approvals", "build_request", "call", "check_fields", "describe", "send"]

CONTRACT_SETTLE: Final = 2.0


def build_request(
    instructions: InstructionsDoc, action: str, fields: Mapping[str, JsonValue], *, generation: int | None = None
) -> JsonObject:
    """A schema-valid request for ``action`` with a fresh ``requestId``.

    ``workerId``, ``generation`` and ``contractHash`` come from ``instructions``; ``generation`` overrides the
    instructions' one (the caller's own fencing token). Raises ``USAGE`` for an unknown action, missing or
    unexpected fields, or a value the request schema refuses (the JSON path is named); nothing is sent.
    """
    check_fields(action, fields)
    doc: JsonObject = {
        "requestId": mailbox.new_request_id(),
        "workerId": instructions["workerId"],
        "generation": instructions["generation"] if generation is None else generation,
        "contractHash": instructions["contractHash"],
        "action": action,
    }
    for name, value in fields.items():  # check_fields admits no common field: identity is never overwritten
        doc[name] = list(value) if isinstance(value, tuple) else value
    try:
        request = mailbox.parse_request(doc)
    except AgentOpsError as exc:  # SCHEMA_INVALID: the caller's mistake, said in the caller's terms
        raise AgentOpsError(
            "USAGE",
            f"{action} request is invalid at {exc.details['path']}: {exc.details['problem']}",
            details={"path": exc.details["path"], "errors": exc.details["errors"]},
        ) from None
    return request.to_json()  # what the supervisor will parse back into the same typed request


def send(worktree: Path, request: Mapping[str, JsonValue], *, timeout: float, poll: float = 0.02) -> ResponseDoc:
    """Write ``request`` to the mailbox and wait for the response carrying its digest (``REQUEST_TIMEOUT``)."""
    digest = mailbox.send(worktree, request)
    return mailbox.wait_response(worktree, digest, timeout=timeout, poll=poll)


def call(
    worktree: Path,
    action: str,
    fields: Mapping[str, JsonValue],
    *,
    timeout: float,
    poll: float = 0.02,
    generation: int | None = None,
    settle: float = CONTRACT_SETTLE,
) -> ResponseDoc:
    """Send ``action`` from the worker of ``worktree`` and return the supervisor's response document.

    ``timeout`` bounds the wait for *each* response (a re-send after ``RUN_CONTRACT_CHANGED`` waits again);
    ``settle`` is how long the instructions get to show the new contract hash after that answer.
    A refusal is a response with ``ok`` false, not an exception. Raises ``REQUEST_NO_MAILBOX`` (no readable
    instructions), ``USAGE`` (see :func:`build_request`), ``REQUEST_TIMEOUT`` (no response in time).
    """
    instructions = mailbox.read_instructions(worktree)
    request = build_request(instructions, action, fields, generation=generation)
    response = send(worktree, request, timeout=timeout, poll=poll)
    if response["code"] != "RUN_CONTRACT_CHANGED":
        return response
    fresh = _changed_instructions(worktree, instructions["contractHash"], settle=min(settle, timeout), poll=poll)
    same_worker = fresh["workerId"] == request["workerId"] and (
        generation is not None or fresh["generation"] == request["generation"]
    )
    if not same_worker or fresh["contractHash"] == request["contractHash"]:
        return response  # nothing newer to bind, or the instructions now speak for someone else
    retry = build_request(fresh, action, fields, generation=generation)
    return send(worktree, retry, timeout=timeout, poll=poll)


def _changed_instructions(worktree: Path, old_hash: str, *, settle: float, poll: float) -> InstructionsDoc:
    """The instructions, given up to ``settle`` seconds to show a contract hash other than ``old_hash``.

    The supervisor answers a request before it rewrites the instructions of every worker, so right after a
    ``RUN_CONTRACT_CHANGED`` the file may still carry the old hash for a moment.
    """
    deadline = time.monotonic() + settle
    while True:
        fresh = mailbox.read_instructions(worktree)
        if fresh["contractHash"] != old_hash or time.monotonic() >= deadline:
            return fresh
        time.sleep(poll)


def describe(response: ResponseDoc) -> list[str]:
    """Human lines for a response: ``CODE: message`` then one ``  key: value`` line per data key."""
    lines = [f"{response['code']}: {response['message']}"]
    for key, value in sorted(dict(response.get("data") or {}).items()):
        shown = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
        lines.append(f"  {key}: {shown}")
    return lines


def approvals(pairs: Sequence[tuple[str, str]]) -> list[JsonObject]:
    """``(capability, reason)`` pairs as request approvals, each classified ``non-dangerous`` by its proposer."""
    return [Approval(cap, reason, "non-dangerous").to_json() for cap, reason in pairs]
