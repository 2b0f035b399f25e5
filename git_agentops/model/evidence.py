"""The evidence record: what one verification command did, and exactly what it verified, as one typed value.

A record is written as one JSON line of a note under ``refs/notes/agentops/evidence``
(``schemas/evidence-record.schema.json``), and its MAC is taken over the canonical JSON of that line without
``mac``; a delivery names its records by the digest of the line. So the JSON form is a format, not a detail: the
dataclass fields below declare it once -- each field's key on disk, and whether the key is left out when the value
is None (the keys added after the first records were written, ``environment``, ``producer`` and ``checkout``, and
the MAC itself) -- and :meth:`EvidenceRecord.to_json` and :meth:`EvidenceRecord.from_json` are generated from that
map. A record read from a note and written again is the same bytes, and its MAC still checks.

Validation is the schema's, once, at the edge that reads a note (:func:`git_agentops.verify.evidence.parse_records`);
nothing after it looks at the dict. Sealing (the MAC key) and storing are :mod:`git_agentops.verify.evidence`'s:
this module does no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

from ..canonical import canonical_bytes, digest
from . import jsonform
from .jsonform import JsonRecord
from .jsonform import on_disk as _on_disk


@dataclass(frozen=True, slots=True)
class Provenance:
    """Who produced a record and where: ``supervisor``/``person``/``agent``, ``clean``/``worktree``."""

    producer: str
    checkout: str


@dataclass(frozen=True, slots=True)
class Subject:
    """Exactly what a command verified -- the tree it saw, the commit it was asked about, under which policy and in
    which environment. A passing result is reused only for the same tree, policy and environment digest."""

    tree: str
    commit: str
    policy_config_hash: str
    env_digest: str
    environment: Mapping[str, str | None] | None = None


@dataclass(frozen=True, slots=True)
class Attribution:
    """Why the command ran: the task it verified (None outside a run) and the acceptance criteria a runner checks."""

    task_id: str | None = None
    criteria: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Reading:
    """How the command's output was judged: passed or not, its parsed test counts (or why they could not be parsed),
    and the redacted tail that is kept of it."""

    passed: bool
    tests: Mapping[str, int] | None
    parse_error: str | None
    tail: str


@dataclass(frozen=True, slots=True)
class EvidenceRecord(JsonRecord):
    """One command's evidence (see the module docstring). ``mac`` is None until the record is sealed; ``to_json``
    is the note line's object, ``from_json`` reads one its schema accepted (:func:`git_agentops.verify.evidence.
    parse_records` is the edge that validates)."""

    command_id: str = _on_disk("commandId")
    kind: str = _on_disk("kind")  # "command" | "runner"
    argv_digest: str = _on_disk("argvDigest")
    required: bool = _on_disk("required")
    exit_code: int | None = _on_disk("exitCode")
    signal: int | None = _on_disk("signal")
    timed_out: bool = _on_disk("timedOut")
    spawn_error: str | None = _on_disk("spawnError")
    passed: bool = _on_disk("passed")
    duration_ms: int = _on_disk("durationMs")
    output_digest: str = _on_disk("outputDigest")
    output_size: int = _on_disk("outputSize")
    truncated: bool = _on_disk("truncated")
    tail: str = _on_disk("tail")
    tests: Mapping[str, int] | None = _on_disk("tests")
    parse_error: str | None = _on_disk("parseError")
    tree: str = _on_disk("tree")
    commit: str = _on_disk("commit")
    policy_config_hash: str = _on_disk("policyConfigHash")
    env_digest: str = _on_disk("envDigest")
    started_at: str = _on_disk("startedAt")
    cached: bool = _on_disk("cached")
    cached_from: str | None = _on_disk("cachedFrom")
    task_id: str | None = _on_disk("taskId")
    criteria: tuple[str, ...] = _on_disk("criteria")
    toolkit_version: str = _on_disk("toolkitVersion")
    environment: Mapping[str, str | None] | None = _on_disk("environment", absent=None)
    producer: str | None = _on_disk("producer", absent=None)
    checkout: str | None = _on_disk("checkout", absent=None)
    mac: str | None = _on_disk("mac", absent=None)

    def mac_input(self) -> bytes:
        """What the MAC covers: the canonical JSON of the record without ``mac``."""
        return canonical_bytes(replace(self, mac=None).to_json())

    @property
    def digest(self) -> str:
        """The record's name in a delivery: the digest of its line (the MAC included)."""
        return digest(self.to_json())

    @property
    def provenance(self) -> Provenance:
        """Who produced it where; empty strings for a record written before records said so."""
        return Provenance(self.producer or "", self.checkout or "")


FIELDS: Final = jsonform.field_map(EvidenceRecord)
"""The record's declared field map (every field, in declaration order): its JSON form."""
