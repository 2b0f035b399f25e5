"""The worker mailbox: how an agent and its supervisor talk, through three files in the worker's worktree.

    <worktree>/.agentops/mailbox/instructions.json   written by the supervisor: who you are, your generation,
                                                     contract hash, task, diagnostic, answers
    <worktree>/.agentops/mailbox/request.json        written by the worker, atomically (temp file + rename)
    <worktree>/.agentops/mailbox/response.json       written by the supervisor, carrying the request's id

The directory is excluded from commits through ``info/exclude``. The worker controls its worktree, so the
supervisor treats everything in it as hostile input: a request is *claimed* by renaming it away (so a newer
request is never lost), read without following symlinks, size-limited to 128 KiB and required to be a regular
file; a symlinked mailbox directory is refused rather than written through.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..canonical import canonical_bytes, sha256_hex
from ..errors import AgentOpsError
from ..gitstore.private import read_private, remove_private, write_private
from ..schema import documents

MAILBOX: Final = ".agentops/mailbox"
INSTRUCTIONS: Final = f"{MAILBOX}/instructions.json"
REQUEST: Final = f"{MAILBOX}/request.json"
CLAIMED: Final = f"{MAILBOX}/request.claimed"
RESPONSE: Final = f"{MAILBOX}/response.json"
PROMPT: Final = f"{MAILBOX}/prompt.md"
MAX_REQUEST_BYTES: Final = 128 * 1024


# -- supervisor side ------------------------------------------------------------------------------------------------


def write_instructions(worktree: Path, doc: Mapping[str, Any]) -> None:
    """Validate ``doc`` against the ``instructions`` schema (``SCHEMA_INVALID``) and replace the worker's copy.

    Atomic but not fsynced: the instructions are regenerated from Git state.
    """
    write_private(
        worktree, INSTRUCTIONS, documents.dump(dict(doc), schema="instructions", what="instructions"), durable=False
    )


def write_prompt(worktree: Path, text: str) -> Path:
    """Replace the worker's ``prompt.md`` with ``text`` (atomically, not fsynced); returns its path."""
    return write_private(worktree, PROMPT, text.encode("utf-8"), durable=False)


@dataclass(frozen=True, slots=True)
class Claimed:
    """A request taken from a mailbox: its bytes, or the code of why it could not be read."""

    data: bytes | None
    digest: str
    error: AgentOpsError | None = None


def claim_request(worktree: Path) -> Claimed | None:
    """Take the pending request, if any. Never raises for what the worker put there."""
    source = worktree / REQUEST
    try:
        os.rename(source, worktree / CLAIMED)  # atomic: a request written after this is a new file
    except FileNotFoundError:
        return None
    except OSError as exc:  # the mailbox itself is not a directory we can use
        return Claimed(None, sha256_hex(str(exc)), AgentOpsError("RUN_REQUEST_INVALID", f"unusable mailbox: {exc}"))
    try:
        data = read_private(worktree, CLAIMED, max_bytes=MAX_REQUEST_BYTES)
    except AgentOpsError as exc:
        if exc.code == "DOC_TOO_LARGE":  # still answer by the digest of what was written, so the writer sees it
            error = AgentOpsError("RUN_REQUEST_TOO_LARGE", f"request refused: over {MAX_REQUEST_BYTES // 1024} KiB")
            return Claimed(None, _digest_regular_file(worktree / CLAIMED) or sha256_hex(exc.message), error)
        return Claimed(
            None, sha256_hex(exc.message), AgentOpsError("RUN_REQUEST_INVALID", f"request refused: {exc.message}")
        )
    finally:
        try:
            remove_private(worktree, CLAIMED)
        except (OSError, AgentOpsError):
            pass
    if data is None:
        return None
    return Claimed(data, sha256_hex(data))


def _digest_regular_file(path: Path, limit: int = 64 * 1024 * 1024) -> str | None:
    """SHA-256 of a regular file (not following symlinks), read in chunks; None past ``limit`` bytes."""
    import hashlib
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        hasher = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            hasher.update(chunk)
        return hasher.hexdigest()
    finally:
        os.close(fd)


def response(
    request_id: str | None, request_digest: str, code: str, message: str, data: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A response document; the caller writes it with :func:`write_response`.

    ``requestDigest`` is the digest of the bytes claimed, which :func:`wait_response` matches; ``ok`` is whether
    ``code`` exits 0 (``KeyError`` for a code that is not in ``errors.CODES``).
    """
    from ..errors import CODES

    return {
        "requestId": request_id,
        "requestDigest": request_digest,
        "ok": CODES[code].exit_status == 0,
        "code": code,
        "message": message,
        "data": dict(data or {}),
    }


def write_response(worktree: Path, doc: Mapping[str, Any]) -> None:
    """Validate ``doc`` against the ``response`` schema (``SCHEMA_INVALID``) and replace ``response.json``.

    Atomic but not fsynced, like the instructions.
    """
    write_private(worktree, RESPONSE, documents.dump(dict(doc), schema="response", what="response"), durable=False)


# -- worker side (git agentops-request, the scripted agent) ----------------------------------------------------------


def find_worktree(start: Path, mailbox: str | None = None) -> Path:
    """The worker worktree around ``start`` (or the one whose mailbox ``$AGENTOPS_MAILBOX`` names)."""
    if mailbox:
        path = Path(mailbox)
        candidate = path.parent.parent if path.name == "mailbox" else path
        if (candidate / INSTRUCTIONS).is_file():
            return candidate
    for directory in (start, *start.parents):
        if (directory / INSTRUCTIONS).is_file():
            return directory
    raise AgentOpsError("REQUEST_NO_MAILBOX", f"no {INSTRUCTIONS} in {start} or above: not a worker worktree")


def read_instructions(worktree: Path) -> dict[str, Any]:
    """The worker's ``instructions.json``, parsed strictly and schema-checked; ``REQUEST_NO_MAILBOX`` if missing."""
    data = read_private(worktree, INSTRUCTIONS, max_bytes=4 * 1024 * 1024)
    if data is None:
        raise AgentOpsError("REQUEST_NO_MAILBOX", f"{worktree / INSTRUCTIONS} is missing")
    return dict(documents.load(data, schema="instructions", what="instructions", max_bytes=4 * 1024 * 1024))


def new_request_id() -> str:
    """A fresh ``req-<uuid4>``; the supervisor replays its stored response if the id comes again unchanged."""
    return f"req-{uuid.uuid4()}"


def send_raw(worktree: Path, data: bytes) -> str:
    """Write ``data`` as the pending request (atomically); returns its digest, which the response will carry."""
    write_private(worktree, REQUEST, data)
    return sha256_hex(data)


def send(worktree: Path, request: Mapping[str, Any]) -> str:
    """Write ``request`` as canonical JSON plus a newline (:func:`send_raw`); returns the digest its response carries.

    Nothing is schema-checked here: :func:`~git_agentops.protocol.client.build_request` does that.
    """
    return send_raw(worktree, canonical_bytes(dict(request)) + b"\n")


def read_response(worktree: Path) -> dict[str, Any] | None:
    """The current ``response.json``, or None when there is none or it cannot be read or validated (callers poll)."""
    try:
        data = read_private(worktree, RESPONSE, max_bytes=4 * 1024 * 1024)
    except AgentOpsError:
        return None
    if data is None:
        return None
    try:
        return dict(documents.load(data, schema="response", what="response"))
    except AgentOpsError:
        return None


def wait_response(worktree: Path, request_digest: str, *, timeout: float, poll: float = 0.02) -> dict[str, Any]:
    """The response to the request with this digest; ``REQUEST_TIMEOUT`` when none arrives in time."""
    deadline = time.monotonic() + timeout
    while True:
        found = read_response(worktree)
        if found is not None and found["requestDigest"] == request_digest:
            return found
        if time.monotonic() >= deadline:
            raise AgentOpsError("REQUEST_TIMEOUT", f"no response within {timeout:.0f}s (is the supervisor running?)")
        time.sleep(poll)
