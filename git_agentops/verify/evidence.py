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

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

from .. import __version__
from ..canonical import JsonValue, canonical_bytes, digest
from ..clock import iso8601
from ..errors import AgentOpsError
from ..gitstore.backend import ObjectBackend
from ..gitstore.keys import Keyring, keyring
from ..gitstore.notes import EVIDENCE_REF, Notes
from ..model.evidence import Attribution, EvidenceRecord, Provenance, Reading, Subject
from ..model.policy import CommandSpec
from ..schema import documents

if TYPE_CHECKING:
    from ..gitstore.repo import Store
    from ..process.command import CommandResult

__all__ = [
    "FOR_RUNS",
    "SUPERVISOR",
    "Attribution",
    "EvidenceRecord",
    "EvidenceStore",
    "Provenance",
    "Reading",
    "Subject",
    "authentic",
    "cached_copy",
    "environment_digest",
    "make_record",
    "note_line",
    "parse_records",
    "seal_record",
    "stored_tail",
]

TAIL_CHARS: Final = 4096
MAC_PURPOSE: Final = "evidence"

SUPERVISOR: Final = Provenance("supervisor", "clean")
FOR_RUNS: Final = frozenset({SUPERVISOR})
"""The provenance a run (handoff, final gate) accepts for reuse."""


def environment_digest(env: Mapping[str, str], environment: Mapping[str, JsonValue] | None = None) -> str:
    """What a reusable result must share with its reuse: the command's variables and, when known, the environment
    it ran in (lockfile digest, interpreter version, installed set: :mod:`git_agentops.envs.probe`)."""
    if environment is None:
        return digest(dict(env))
    return digest({"vars": dict(env), "environment": dict(environment)})


_ORPHAN_KEY_END: Final = r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"  # compiled (by re) when a tail was cut
_KEY_BEGIN: Final = r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"


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
        end = re.search(_ORPHAN_KEY_END, text)
        if end and not re.compile(_KEY_BEGIN).search(text, 0, end.start()):
            text = "[WITHHELD: part of a private key]" + text[end.end() :]
    text = redact(text)
    if len(text) <= TAIL_CHARS:
        return text
    kept = text[-TAIL_CHARS:]
    newline = kept.find("\n")
    return kept[newline + 1 :] if 0 <= newline < len(kept) - 1 else kept


def make_record(
    command: CommandSpec,
    kind: str,
    result: CommandResult,
    reading: Reading,
    subject: Subject,
    attribution: Attribution,
    provenance: Provenance | None = None,
) -> EvidenceRecord:
    """The evidence record (not yet sealed) of a ``command`` that ran: its ``result``, how its output was judged,
    what it verified and why it ran. Without ``provenance`` the record says nothing of who ran it (as records did
    before they said so)."""
    return EvidenceRecord(
        command_id=command.id,
        kind=kind,
        argv_digest=command.argv_digest,
        required=command.required,
        exit_code=result.exit_code,
        signal=result.signal,
        timed_out=result.timed_out,
        spawn_error=result.spawn_error,
        passed=reading.passed,
        duration_ms=round(result.duration * 1000),
        output_digest=result.output_digest,
        output_size=result.output_size,
        truncated=result.truncated,
        tail=reading.tail,
        tests=dict(reading.tests) if reading.tests is not None else None,
        parse_error=reading.parse_error,
        tree=subject.tree,
        commit=subject.commit,
        policy_config_hash=subject.policy_config_hash,
        env_digest=subject.env_digest,
        started_at=iso8601(result.started_at),
        cached=False,
        cached_from=None,
        task_id=attribution.task_id,
        criteria=tuple(attribution.criteria),
        toolkit_version=__version__,
        environment=dict(subject.environment) if subject.environment is not None else None,
        producer=provenance.producer if provenance is not None else None,
        checkout=provenance.checkout if provenance is not None else None,
    )


def seal_record(record: EvidenceRecord, keys: Keyring) -> EvidenceRecord:
    """``record`` with its MAC (replacing any it had)."""
    return replace(record, mac=keys.mac(MAC_PURPOSE, record.mac_input()))


def authentic(record: EvidenceRecord, keys: Keyring) -> bool:
    """Whether this repository's toolkit wrote ``record`` exactly as it is."""
    return keys.check(MAC_PURPOSE, record.mac_input(), record.mac)


def parse_records(data: bytes | None, *, what: str) -> list[EvidenceRecord]:
    """The records of one evidence note (JSON lines), each validated by its schema -- the one place evidence is
    read. Lines that are not valid records are skipped."""
    if not data:
        return []
    records: list[EvidenceRecord] = []
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            records.append(EvidenceRecord.from_json(documents.load(line, schema="evidence-record", what=what)))
        except AgentOpsError:  # a foreign or damaged line never breaks the reading of the others
            pass
    return records


def _newest_first(data: bytes | None, *, what: str) -> Iterator[EvidenceRecord]:
    """:func:`parse_records` from the last line up, each line parsed only when the one after it was not wanted: the
    cache takes the newest record that fits, and a tree verified many times must not cost a validation per line."""
    for line in reversed(data.splitlines() if data else []):
        if line.strip():
            yield from parse_records(line, what=what)


def note_line(record: EvidenceRecord) -> bytes:
    """The line of an evidence note that holds ``record``."""
    return canonical_bytes(record.to_json()) + b"\n"


class EvidenceStore:
    """Evidence notes of one repository (through pygit2 or git plumbing), authenticated with its MAC key."""

    def __init__(self, store: Store | ObjectBackend, private_dir: Path) -> None:
        self.notes = Notes(store, EVIDENCE_REF)
        self.keys = keyring(private_dir)
        self.private_dir = private_dir

    def for_commit(self, commit: str) -> list[EvidenceRecord]:
        return parse_records(self.notes.read(commit), what=f"evidence of {commit}")

    def authentic_for_commit(self, commit: str) -> list[EvidenceRecord]:
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
    ) -> EvidenceRecord | None:
        """A passing, authenticated record for this tree and exactly this command, policy and environment
        (newest first); with ``accept``, only one of those provenances."""
        for entry in _newest_first(self.notes.read(tree), what=f"evidence cache of tree {tree}"):
            if accept is not None and entry.provenance not in accept:
                continue
            if (
                entry.passed is True
                and entry.tree == tree
                and entry.argv_digest == argv_digest
                and entry.policy_config_hash == policy_hash
                and entry.env_digest == env_digest
                and authentic(entry, self.keys)  # last: the MAC is the one costly check
            ):
                return entry
        return None

    def record(
        self, commit: str, tree: str, records: Iterable[EvidenceRecord]
    ) -> tuple[str | None, list[EvidenceRecord]]:
        """Seal the records and append them to the commit's note, and passing fresh ones to the tree's (the cache).

        Returns the notes commit (None when there was nothing to record) and the sealed records, as the notes hold
        them.
        """
        sealed = [seal_record(record, self.keys) for record in records]
        if not sealed:
            return None, sealed
        lines: dict[str, bytes] = {}
        for record in sealed:
            documents.validate(record.to_json(), "evidence-record", what=f"evidence record {record.command_id}")
            line = note_line(record)
            lines[commit] = lines.get(commit, b"") + line
            if record.passed and not record.cached:
                lines[tree] = lines.get(tree, b"") + line
        notes_commit = self.notes.append(lines, message=f"Evidence for {commit[:12]} ({len(sealed)} record(s))")
        return notes_commit, sealed


def cached_copy(
    record: EvidenceRecord,
    *,
    commit: str,
    command: CommandSpec,
    attribution: Attribution,
    started_at: float,
) -> EvidenceRecord:
    """The evidence line for a cache hit: the cached result, attributed to this commit and this command (not yet
    sealed)."""
    return replace(
        record,
        command_id=command.id,
        required=command.required,
        commit=commit,
        cached=True,
        cached_from=record.commit,
        task_id=attribution.task_id,
        criteria=tuple(attribution.criteria),
        started_at=iso8601(started_at),
        duration_ms=0,
        toolkit_version=__version__,
        mac=None,
    )
