"""The worker mailbox: how an agent and its supervisor talk, through three files in the worker's worktree.

    <worktree>/.agentops/mailbox/instructions.json   written by the supervisor: who you are, your generation,
                                                     contract hash, task, diagnostic, answers
    <worktree>/.agentops/mailbox/request.json        written by the worker, atomically (temp file + rename)
    <worktree>/.agentops/mailbox/response.json       written by the supervisor, carrying the request's id

The directory is excluded from commits through ``info/exclude``. The worker controls its worktree, so the
supervisor treats everything in it as hostile input and follows nothing the worker placed: a request is *claimed*
by renaming it away inside a directory descriptor opened without following symlinks (so a newer request is never
lost, and a symlinked mailbox can never make it claim another worker's request), then checked on its own
descriptor -- a regular file, not a hard link, at most 128 KiB (:func:`claim_request`). Instructions and
responses are private files (:mod:`git_agentops.gitstore.private`): a symlink in their way is refused, never
written through.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ..canonical import canonical_bytes, sha256_hex
from ..errors import AgentOpsError
from ..files import read_at_most
from ..gitstore.private import read_private, write_private
from ..schema import documents

if TYPE_CHECKING:  # a person's verify reads only where the mailbox is: the request model is the client's and loop's
    from ..canonical import JsonValue
    from ..model.instructionsdoc import InstructionsDoc
    from ..model.request import Request, ResponseDoc

MAILBOX: Final = ".agentops/mailbox"
INSTRUCTIONS: Final = f"{MAILBOX}/instructions.json"
REQUEST: Final = f"{MAILBOX}/request.json"
CLAIMED: Final = f"{MAILBOX}/request.claimed"
RESPONSE: Final = f"{MAILBOX}/response.json"
PROMPT: Final = f"{MAILBOX}/prompt.md"
MAX_REQUEST_BYTES: Final = 128 * 1024
_REQUEST_NAME: Final = REQUEST.rsplit("/", 1)[1]
_CLAIMED_NAME: Final = CLAIMED.rsplit("/", 1)[1]
_DIGEST_LIMIT: Final = 64 * 1024 * 1024  # an oversized request is still answered by its digest up to this size


# -- supervisor side ------------------------------------------------------------------------------------------------


def write_instructions(worktree: Path, doc: Mapping[str, JsonValue]) -> None:
    """Validate ``doc`` against the ``instructions`` schema (``SCHEMA_INVALID``) and replace the worker's copy.

    Indented, one key per line: agents read it with their file tools, and some cut long lines (Gemini CLI's
    ``read_file`` at 2000 characters, which left a coordinator's instructions unparseable as one line). Atomic but not
    fsynced: the instructions are regenerated from Git state.
    """
    import json

    documents.validate(dict(doc), "instructions", what="instructions")
    data = json.dumps(dict(doc), indent=2, sort_keys=True, ensure_ascii=False).encode() + b"\n"
    write_private(worktree, INSTRUCTIONS, data, durable=False)


def write_prompt(worktree: Path, text: str) -> Path:
    """Replace the worker's ``prompt.md`` with ``text`` (atomically, not fsynced); returns its path."""
    return write_private(worktree, PROMPT, text.encode("utf-8"), durable=False)


@dataclass(frozen=True, slots=True)
class Claimed:
    """A request taken from a mailbox: its bytes, or the code of why it could not be read.

    ``answerable`` is False when the mailbox directory itself is unusable (``.agentops`` replaced by a symlink or a
    file): there is nowhere to write a response, and the refusal repeats until the worker repairs it.
    """

    data: bytes | None
    digest: str
    error: AgentOpsError | None = None
    answerable: bool = True


class _Refused(Exception):
    """Why a claim is refused, as the :class:`Claimed` to return (internal to :func:`claim_request`)."""

    def __init__(
        self, message: str, *, code: str = "RUN_REQUEST_INVALID", digest: str | None = None, answerable: bool = True
    ) -> None:
        super().__init__(message)
        self.claimed = Claimed(None, digest or sha256_hex(message), AgentOpsError(code, message), answerable)


def claim_request(worktree: Path) -> Claimed | None:
    """Take the pending request, if any. Never raises for what the worker put there.

    Nothing the worker placed is followed: each directory from the worktree down is opened ``O_NOFOLLOW``
    relative to its parent, the request is renamed within that directory's descriptor (so a newer request written
    after the rename is a new file, never lost), and the claimed name is opened ``O_NOFOLLOW | O_NONBLOCK`` and
    checked on the descriptor: a regular file (not a FIFO, socket or directory), one link only (a hard link would
    be another file's content, such as another worker's request, whose ``requestId`` must never be recorded
    here), at most :data:`MAX_REQUEST_BYTES`. A symlink in place of the mailbox directory is unlinked (the
    directory is the supervisor's; what it pointed to is untouched) so that the refusal reaches the worker in a
    real mailbox and is not repeated on every tick.
    """
    try:
        fd = _open_mailbox(worktree)
    except _Refused as refused:
        return refused.claimed
    if fd is None:
        return None
    try:
        try:
            os.rename(_REQUEST_NAME, _CLAIMED_NAME, src_dir_fd=fd, dst_dir_fd=fd)
        except FileNotFoundError:
            return None
        except OSError as exc:  # e.g. request.json is a directory and a stale claimed one is in the way
            _discard_claimed(fd)
            return _Refused(
                f"request refused: {REQUEST} cannot be claimed ({exc.strerror}); write it as a regular file"
            ).claimed
        try:
            return _read_claimed(fd)
        except _Refused as refused:
            return refused.claimed
        finally:
            _discard_claimed(fd)
    finally:
        os.close(fd)


def _open_mailbox(worktree: Path) -> int | None:
    """A descriptor of ``<worktree>/.agentops/mailbox``, opened without following symlinks; None when missing."""
    try:
        fd = os.open(worktree, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None  # the worktree itself is gone: nothing to claim (the supervisor's own path, not the worker's)
    parts = MAILBOX.split("/")
    for index, part in enumerate(parts):
        try:
            next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except FileNotFoundError:
            os.close(fd)
            return None
        except OSError as exc:
            refused = _mailbox_refusal(fd, "/".join(parts[: index + 1]), exc, last=index == len(parts) - 1)
            os.close(fd)
            raise refused from None
        os.close(fd)
        fd = next_fd
    return fd


def _mailbox_refusal(parent_fd: int, shown: str, error: OSError, *, last: bool) -> _Refused:
    """Why ``shown`` cannot be entered, after unlinking it when it is a symlink in place of the mailbox itself."""
    name = shown.rsplit("/", 1)[-1]
    try:
        info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except OSError as exc:
        return _unanswerable(f"{shown} cannot be opened ({exc.strerror}); requests are not read")
    if stat.S_ISDIR(info.st_mode):  # e.g. its permissions were taken away
        return _unanswerable(f"{shown} cannot be opened ({error.strerror}); requests are not read until it can")
    if not stat.S_ISLNK(info.st_mode):
        return _unanswerable(f"{shown} is not a directory; restore it (requests are not read until then)")
    if not last:
        return _unanswerable(f"{shown} is a symlink; the supervisor never follows it: restore a real {shown} directory")
    try:
        os.unlink(name, dir_fd=parent_fd)  # the link itself, never what it points to
    except OSError:
        return _unanswerable(f"{shown} is a symlink; the supervisor never follows it and could not remove it")
    return _Refused(
        f"request refused: {shown} was a symlink, which the supervisor never follows; it removed the link "
        "(its target is untouched) and answers in a real mailbox again"
    )


def _unanswerable(message: str) -> _Refused:
    return _Refused(f"request refused: {message}", answerable=False)


def _read_claimed(dir_fd: int) -> Claimed:
    """The claimed file's bytes, checked on its descriptor (see :func:`claim_request`)."""
    try:
        fd = os.open(_CLAIMED_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _Refused(
                f"request refused: {REQUEST} is a symlink, which the supervisor never follows; write the request "
                "itself as a regular file (git agentops-request does)"
            ) from exc
        raise _Refused(f"request refused: {REQUEST} cannot be read ({exc.strerror}); not a regular file") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _Refused(f"request refused: {REQUEST} is not a regular file (a FIFO, socket or directory)")
        if info.st_nlink > 1:
            raise _Refused(
                f"request refused: {REQUEST} is a hard link ({info.st_nlink} links), so its content belongs to "
                "another file as well; it was not read: write a new file (git agentops-request does)"
            )
        too_large = f"request refused: over {MAX_REQUEST_BYTES // 1024} KiB"
        if info.st_size > MAX_REQUEST_BYTES:  # still answer by the digest of what was written, so the writer sees it
            raise _Refused(too_large, code="RUN_REQUEST_TOO_LARGE", digest=_digest_fd(fd))
        data = read_at_most(fd, MAX_REQUEST_BYTES + 1)
        if len(data) > MAX_REQUEST_BYTES:
            raise _Refused(too_large, code="RUN_REQUEST_TOO_LARGE", digest=_digest_fd(fd))
        return Claimed(data, sha256_hex(data))
    finally:
        os.close(fd)


def _digest_fd(fd: int) -> str | None:
    """SHA-256 of the whole file behind ``fd``, read from its start in chunks; None past :data:`_DIGEST_LIMIT`."""
    hasher = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        offset += len(chunk)
        if offset > _DIGEST_LIMIT:
            return None
        hasher.update(chunk)
    return hasher.hexdigest()


def _discard_claimed(dir_fd: int) -> None:
    """Remove the claimed name (a hard link's other names keep their content); a directory is moved aside."""
    try:
        os.unlink(_CLAIMED_NAME, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError:  # a directory: keep whatever the worker put in it, out of the way of the next claim
        with contextlib.suppress(OSError):
            os.rename(_CLAIMED_NAME, f"request.refused-{time.time_ns()}", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def parse_request(doc: Any, *, what: str = "request") -> Request:
    """The typed request of a request document -- the one place a request's shape is checked, by the client before
    it writes one and by the supervisor after it claims one. ``SCHEMA_INVALID`` naming the JSON path of the first
    problem (as :func:`~git_agentops.schema.documents.validate` says it; details: ``path``, ``errors`` and the
    ``problem`` itself) unless ``doc`` matches ``schemas/request.schema.json``."""
    errors = documents.schema_errors(doc, "request")
    if errors:
        first = errors[0]
        raise AgentOpsError(
            "SCHEMA_INVALID",
            f"{what} does not match schema 'request' at {first.json_path}: {first.message}",
            details={"schema": "request", "path": first.json_path, "errors": len(errors), "problem": first.message},
        )
    from ..model.request import from_valid

    return from_valid(doc)


def response(
    request_id: str | None, request_digest: str, code: str, message: str, data: Mapping[str, JsonValue] | None = None
) -> ResponseDoc:
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


def write_response(worktree: Path, doc: ResponseDoc) -> None:
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


def read_instructions(worktree: Path) -> InstructionsDoc:
    """The worker's ``instructions.json``, parsed strictly and schema-checked; ``REQUEST_NO_MAILBOX`` if missing."""
    data = read_private(worktree, INSTRUCTIONS, max_bytes=4 * 1024 * 1024)
    if data is None:
        raise AgentOpsError("REQUEST_NO_MAILBOX", f"{worktree / INSTRUCTIONS} is missing")
    doc: InstructionsDoc = documents.load(data, schema="instructions", what="instructions", max_bytes=4 * 1024 * 1024)
    return doc


def new_request_id() -> str:
    """A fresh ``req-<uuid4>``; the supervisor replays its stored response if the id comes again unchanged."""
    import uuid

    return f"req-{uuid.uuid4()}"


def send_raw(worktree: Path, data: bytes) -> str:
    """Write ``data`` as the pending request (atomically); returns its digest, which the response will carry."""
    write_private(worktree, REQUEST, data)
    return sha256_hex(data)


def send(worktree: Path, request: Mapping[str, JsonValue]) -> str:
    """Write ``request`` as canonical JSON plus a newline (:func:`send_raw`); returns the digest its response carries.

    Nothing is schema-checked here: :func:`~git_agentops.protocol.client.build_request` did that
    (:func:`parse_request`).
    """
    return send_raw(worktree, canonical_bytes(dict(request)) + b"\n")


def read_response(worktree: Path) -> ResponseDoc | None:
    """The current ``response.json``, or None when there is none or it cannot be read or validated (callers poll)."""
    try:
        data = read_private(worktree, RESPONSE, max_bytes=4 * 1024 * 1024)
    except AgentOpsError:
        return None
    if data is None:
        return None
    try:
        doc: ResponseDoc = documents.load(data, schema="response", what="response")
        return doc
    except AgentOpsError:
        return None


def wait_response(worktree: Path, request_digest: str, *, timeout: float, poll: float = 0.02) -> ResponseDoc:
    """The response to the request with this digest; ``REQUEST_TIMEOUT`` when none arrives in time."""
    deadline = time.monotonic() + timeout
    while True:
        found = read_response(worktree)
        if found is not None and found["requestDigest"] == request_digest:
            return found
        if time.monotonic() >= deadline:
            raise AgentOpsError("REQUEST_TIMEOUT", f"no response within {timeout:.0f}s (is the supervisor running?)")
        time.sleep(poll)
