"""Evidence: what a verification command did, recorded as notes, and reused by tree id.

Each command's result becomes one **evidence record** (``schemas/evidence-record.schema.json``): which command
(id and argv digest), how it ended (exit code, signal, timeout), how long it took, the digest and a redacted tail
of its output, parsed test counts, and exactly what was verified -- tree id, commit id, policy config hash and
environment digest. Records are JSON lines appended to a note on the verified commit under
``refs/notes/agentops/evidence`` (``git notes --ref=agentops/evidence show <commit>`` reads them).

**Cache.** A passing record is also appended to a note on the verified *tree*. A later verification of the same
tree -- on another commit, after a merge or rebase that produced an already verified tree -- with the same argv
digest, policy hash and environment digest reuses it instead of running the command again (``--fresh`` bypasses
this), and records a new evidence line on the new commit marked ``cached`` with the commit it came from. The key
is the tree, not the commit, because the tree is what the command saw.

**Provenance and authentication.** Any process that can write the object database can write notes -- a worker
agent wrote a passing record with an all-zero output digest, and the gate ran nothing. So each record says who
produced it (``producer``: the supervisor, a person, or an agent calling ``git agentops-verify``) and where
(``checkout``: a clean checkout the supervisor made from the commit, or the caller's worktree), and carries a MAC
(``mac``, :mod:`git_agentops.gitstore.keys`) over everything else. A record whose MAC does not check is never
reused. A run reuses only what the supervisor produced in a clean checkout (:data:`FOR_RUNS`); a person's
verification reuses any authenticated record. CI does not trust local evidence at all: it checks receipts, which
seal the summaries they rely on, each saying whether its result was fresh or reused and from which commit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from .. import __version__
from ..canonical import canonical_bytes, digest
from ..clock import iso8601
from ..errors import AgentOpsError
from ..gitstore.backend import ObjectBackend
from ..gitstore.keys import Keyring, keyring
from ..gitstore.notes import EVIDENCE_REF, Notes
from ..model.policy import CommandSpec
from ..schema import documents

if TYPE_CHECKING:
    from ..gitstore.repo import Store

TAIL_CHARS: Final = 4096
MAC_PURPOSE: Final = "evidence"


@dataclass(frozen=True, slots=True)
class Provenance:
    """Who produced a record and where: ``supervisor``/``person``/``agent``, ``clean``/``worktree``."""

    producer: str
    checkout: str


SUPERVISOR: Final = Provenance("supervisor", "clean")
FOR_RUNS: Final = frozenset({SUPERVISOR})
"""The provenance a run (handoff, final gate) accepts for reuse."""


def environment_digest(env: Mapping[str, str], environment: Mapping[str, Any] | None = None) -> str:
    """What a reusable result must share with its reuse: the command's variables and, when known, the environment
    it ran in (lockfile digest, interpreter version, installed set: :mod:`git_agentops.envs.probe`)."""
    if environment is None:
        return digest(dict(env))
    return digest({"vars": dict(env), "environment": dict(environment)})


_ORPHAN_KEY_END: Final = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_KEY_BEGIN: Final = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")


def stored_tail(tail: bytes, redact: Callable[[str], str], *, cut: bool) -> str:
    """The last ~4 KiB of output as text, redacted.

    ``cut`` says the tail window started inside the output: its first line may be the end of a token, and a
    private key may have been cut mid-body so that only its END line survives -- everything up to such an
    orphaned END line is withheld, since redaction cannot recognise half a key.
    """
    text = tail.decode("utf-8", errors="replace")
    if not text:
        return ""
    if cut:
        text = text[text.find("\n") + 1 :]
        end = _ORPHAN_KEY_END.search(text)
        if end and not _KEY_BEGIN.search(text, 0, end.start()):
            text = "[WITHHELD: part of a private key]" + text[end.end() :]
    text = redact(text)
    if len(text) <= TAIL_CHARS:
        return text
    kept = text[-TAIL_CHARS:]
    newline = kept.find("\n")
    return kept[newline + 1 :] if 0 <= newline < len(kept) - 1 else kept


def make_record(
    *,
    command: CommandSpec,
    kind: str,
    result: Any,
    passed: bool,
    tests: Mapping[str, int] | None,
    parse_error: str | None,
    tail: str,
    tree: str,
    commit: str,
    policy_hash: str,
    env_digest: str,
    task_id: str | None,
    criteria: Sequence[str],
    environment: Mapping[str, Any] | None = None,
    provenance: Provenance | None = None,
) -> dict[str, Any]:
    """One evidence record (``schemas/evidence-record.schema.json``) of a command that ran (not yet MAC'd)."""
    record = {
        "commandId": command.id,
        "kind": kind,
        "argvDigest": command.argv_digest,
        "required": command.required,
        "exitCode": result.exit_code,
        "signal": result.signal,
        "timedOut": result.timed_out,
        "spawnError": result.spawn_error,
        "passed": passed,
        "durationMs": round(result.duration * 1000),
        "outputDigest": result.output_digest,
        "outputSize": result.output_size,
        "truncated": result.truncated,
        "tail": tail,
        "tests": dict(tests) if tests is not None else None,
        "parseError": parse_error,
        "tree": tree,
        "commit": commit,
        "policyConfigHash": policy_hash,
        "envDigest": env_digest,
        "startedAt": iso8601(result.started_at),
        "cached": False,
        "cachedFrom": None,
        "taskId": task_id,
        "criteria": list(criteria),
        "toolkitVersion": __version__,
    }
    if environment is not None:
        record["environment"] = dict(environment)
    if provenance is not None:
        record["producer"], record["checkout"] = provenance.producer, provenance.checkout
    return record


def _mac_input(record: Mapping[str, Any]) -> bytes:
    return canonical_bytes({k: v for k, v in record.items() if k != "mac"})


def seal_record(record: dict[str, Any], keys: Keyring) -> dict[str, Any]:
    """``record`` with its MAC (replacing any it had)."""
    record["mac"] = keys.mac(MAC_PURPOSE, _mac_input(record))
    return record


def authentic(record: Mapping[str, Any], keys: Keyring) -> bool:
    """Whether this repository's toolkit wrote ``record`` exactly as it is."""
    return keys.check(MAC_PURPOSE, _mac_input(record), record.get("mac"))


def parse_records(data: bytes | None, *, what: str) -> list[dict[str, Any]]:
    """The records of one evidence note (JSON lines). Lines that are not valid records are skipped."""
    if not data:
        return []
    records: list[dict[str, Any]] = []
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            records.append(documents.load(line, schema="evidence-record", what=what))
        except AgentOpsError:  # a foreign or damaged line never breaks the reading of the others
            pass
    return records


class EvidenceStore:
    """Evidence notes of one repository (through pygit2 or git plumbing), authenticated with its MAC key."""

    def __init__(self, store: Store | ObjectBackend, private_dir: Path) -> None:
        self.notes = Notes(store, EVIDENCE_REF)
        self.keys = keyring(private_dir)
        self.private_dir = private_dir

    def for_commit(self, commit: str) -> list[dict[str, Any]]:
        return parse_records(self.notes.read(commit), what=f"evidence of {commit}")

    def authentic_for_commit(self, commit: str) -> list[dict[str, Any]]:
        """The records on ``commit`` this repository's toolkit wrote (forged or damaged lines left out)."""
        return [r for r in self.for_commit(commit) if authentic(r, self.keys)]

    def cached(
        self,
        tree: str,
        *,
        argv_digest: str,
        policy_hash: str,
        env_digest: str,
        accept: frozenset[Provenance] | None = None,
    ) -> dict[str, Any] | None:
        """A passing, authenticated record for this tree and exactly this command, policy and environment
        (newest first); with ``accept``, only one of those provenances."""
        entries = parse_records(self.notes.read(tree), what=f"evidence cache of tree {tree}")
        for entry in entries[::-1]:
            if accept is not None and Provenance(entry.get("producer", ""), entry.get("checkout", "")) not in accept:
                continue
            if (
                authentic(entry, self.keys)
                and entry["passed"] is True
                and entry["tree"] == tree
                and entry["argvDigest"] == argv_digest
                and entry["policyConfigHash"] == policy_hash
                and entry["envDigest"] == env_digest
            ):
                return entry
        return None

    def record(self, commit: str, tree: str, records: Iterable[dict[str, Any]]) -> str | None:
        """Append records to the commit's note, and passing fresh ones to the tree's (the cache)."""
        records = list(records)
        if not records:
            return None
        lines: dict[str, bytes] = {}
        for record in records:
            seal_record(record, self.keys)
            documents.validate(record, "evidence-record", what=f"evidence record {record['commandId']}")
            line = canonical_bytes(record) + b"\n"
            lines[commit] = lines.get(commit, b"") + line
            if record["passed"] and not record["cached"]:
                lines[tree] = lines.get(tree, b"") + line
        return self.notes.append(lines, message=f"Evidence for {commit[:12]} ({len(records)} record(s))")


def cached_copy(
    record: Mapping[str, Any],
    *,
    commit: str,
    command: CommandSpec,
    task_id: str | None,
    criteria: Sequence[str],
    started_at: float,
) -> dict[str, Any]:
    """The evidence line for a cache hit: the cached result, attributed to this commit and this command."""
    copy: dict[str, Any] = json.loads(json.dumps(record))
    copy.pop("mac", None)
    copy.update(
        {
            "commandId": command.id,
            "required": command.required,
            "commit": commit,
            "cached": True,
            "cachedFrom": record["commit"],
            "taskId": task_id,
            "criteria": list(criteria),
            "startedAt": iso8601(started_at),
            "durationMs": 0,
            "toolkitVersion": __version__,
        }
    )
    return copy
