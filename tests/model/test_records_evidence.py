"""``EvidenceRecord`` against the evidence lines the dict-based code wrote (``tests/fixtures/evidence``).

The record's JSON form is a format on disk, its MAC is over that form and a delivery names records by its digest:
a record read from a note and written again must be the same bytes, old lines must still authenticate, and the
builders must produce, from the same parts, exactly what the old ones did.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from git_agentops.canonical import canonical_bytes
from git_agentops.gitstore.keys import KEY_PATH, Keyring
from git_agentops.model.evidence import FIELDS, Attribution, EvidenceRecord, Provenance, Reading, Subject
from git_agentops.model.jsonform import ALWAYS
from git_agentops.model.policy import CommandSpec
from git_agentops.process.command import CommandResult
from git_agentops.schema import documents
from git_agentops.verify.evidence import authentic, cached_copy, make_record, note_line, parse_records, seal_record

FIXTURE = Path(__file__).parents[1] / "fixtures" / "evidence"
LINES = (FIXTURE / "records.jsonl").read_bytes().splitlines(keepends=True)
TREE, COMMIT, COMMIT2 = "1" * 40, "2" * 40, "3" * 40
ENVIRONMENT = {"lockDigest": "e" * 64, "python": "3.11.7", "installedDigest": None}
TESTS = CommandSpec(id="tests", argv=("pytest", "-q"), shell=False, timeout=600.0, parser="pytest")
LINT = CommandSpec(id="lint", argv="ruff check .", shell=True, timeout=60.0, required=False)
RUNNER = CommandSpec(id="accept", argv=("python3", "check.py"), shell=False, timeout=30.0)


@pytest.fixture
def keys(tmp_path: Path) -> Keyring:
    """The key the fixture's lines were sealed with."""
    (tmp_path / "keys").mkdir()
    path = tmp_path / KEY_PATH
    path.write_bytes(bytes.fromhex((FIXTURE / "mac.key.hex").read_text().strip()))
    os.chmod(path, 0o600)
    return Keyring(tmp_path)


def _result(**changes: object) -> CommandResult:
    base = CommandResult(
        argv=("pytest", "-q"),
        exit_code=0,
        signal=None,
        timed_out=False,
        spawn_error=None,
        started_at=1764633600.25,
        duration=1.2344,
        output_size=120,
        output_digest="d" * 64,
        output=b"",
        tail=b"",
        truncated=False,
    )
    return replace(base, **changes)


def _subject(environment: dict[str, str | None] | None = None) -> Subject:
    return Subject(TREE, COMMIT, "b" * 64, "c" * 64, environment)


def _rebuilt() -> list[EvidenceRecord]:
    """The fixture's records, from the parts the old code was given (tests/fixtures/evidence/README.md)."""
    counts = {"passed": 3, "failed": 0, "skipped": 1, "errors": 0, "total": 4}
    zero = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0, "total": 0}
    first = make_record(
        TESTS,
        "command",
        _result(),
        Reading(True, counts, None, "3 passed, 1 skipped\n"),
        _subject(ENVIRONMENT),
        Attribution("t1"),
        Provenance("supervisor", "clean"),
    )
    timed_out = _result(exit_code=None, signal=9, timed_out=True, duration=60.0004, truncated=True, output_size=10**6)
    lint = make_record(
        LINT, "command", timed_out, Reading(False, None, None, "é ünïcode … tail\n"), _subject(), Attribution()
    )
    unparsed = make_record(
        RUNNER,
        "runner",
        _result(exit_code=1),
        Reading(False, zero, "PARSE_NO_COUNTS: no summary line", ""),
        _subject(),
        Attribution("t1", ("c1", "c2")),
        Provenance("person", "worktree"),
    )
    unstarted = make_record(
        RUNNER,
        "runner",
        _result(exit_code=None, spawn_error="No such file: python3"),
        Reading(False, None, None, ""),
        _subject(ENVIRONMENT),
        Attribution(None, ("c1",)),
        Provenance("agent", "worktree"),
    )
    return [first, lint, unparsed, unstarted]


def test_every_line_the_old_code_wrote_parses_authenticates_and_is_written_back_byte_for_byte(keys: Keyring) -> None:
    records = parse_records(b"".join(LINES), what="the fixture")
    assert len(records) == len(LINES) == 5
    for line, record in zip(LINES, records, strict=True):
        assert note_line(record) == line
        assert authentic(record, keys)
        assert record.mac is not None and seal_record(record, keys) == record  # the same MAC, recomputed
    digests = json.loads((FIXTURE / "digests.json").read_text())
    assert [r.digest for r in records] == digests  # what deliveries already name them by


def test_keys_added_later_stay_absent_from_a_record_written_without_them() -> None:
    (lint,) = parse_records(LINES[1], what="the lint line")
    assert (lint.environment, lint.producer, lint.checkout) == (None, None, None)
    assert {"environment", "producer", "checkout"}.isdisjoint(lint.to_json())
    assert lint.provenance == Provenance("", "")  # what a reuse filter compares with
    assert set(lint.to_json()) == {f.key for f in FIELDS.fields if f.absent is ALWAYS} | {"mac"}


def test_the_builders_make_from_the_same_parts_what_the_old_code_made(keys: Keyring) -> None:
    old = parse_records(b"".join(LINES), what="the fixture")
    for built, line in zip(_rebuilt(), LINES[:4], strict=True):  # the fifth is a cache hit: below
        assert built.mac is None
        same_version = replace(built, toolkit_version=json.loads(line)["toolkitVersion"])
        assert note_line(seal_record(same_version, keys)) == line
    hit = cached_copy(
        old[0], commit=COMMIT2, command=TESTS, attribution=Attribution("t2", ("c3",)), started_at=1764633700.5
    )
    assert hit.mac is None and hit.cached and hit.cached_from == COMMIT
    hit = replace(hit, toolkit_version=json.loads(LINES[4])["toolkitVersion"])
    assert note_line(seal_record(hit, keys)) == LINES[4]


def test_a_changed_field_no_longer_authenticates_until_sealed_again(keys: Keyring) -> None:
    record = parse_records(LINES[0], what="the first line")[0]
    for changed in (replace(record, passed=False), replace(record, criteria=("x",)), replace(record, producer=None)):
        assert not authentic(changed, keys)
        assert authentic(seal_record(changed, keys), keys)


def test_the_json_form_is_schema_valid_and_round_trips_through_from_json() -> None:
    for record in [*_rebuilt(), *parse_records(b"".join(LINES), what="the fixture")]:
        doc = record.to_json()
        documents.validate(doc, "evidence-record", what="a rebuilt record")
        assert EvidenceRecord.from_json(doc) == record
        assert EvidenceRecord.from_json(json.loads(canonical_bytes(doc))) == record


def test_a_damaged_or_foreign_line_is_skipped_and_the_others_are_read() -> None:
    damaged = LINES[0].replace(b'"kind":"command"', b'"kind":"shell"')
    foreign = b'{"record": 1}\n'
    records = parse_records(damaged + foreign + b"not json\n" + LINES[2], what="a mixed note")
    assert [r.command_id for r in records] == ["accept"]
