"""What a failed verification command said: its failing lines, to show a person and to tell one failure from another.

A command's evidence record keeps the redacted tail of its output (:mod:`.evidence`). Two uses read it again:

* **showing** -- a foreground run, ``run log`` and ``run status`` name the first failing command and its first
  failing lines (:func:`failing_lines`): the lines that look like a diagnostic (``error``, ``FAILED``, ``E   assert``,
  ``path:12:5: E501 ...``, ``not ok``, a traceback), else the last lines of the tail;
* **comparing** -- the supervisor blocks a task that fails twice in a row *the same way*
  (:func:`~git_agentops.model.run.no_progress`), even when each generation made a new commit. Each failed command
  is summed up as ``[command id, how it ended, symptom]`` (:func:`failed_commands`): the symptom is the digest of
  its failing lines after :func:`normalise` took out what differs between two runs of the same failure --
  timestamps, durations, memory addresses, temporary directories, object ids, the count of tests that passed --
  so the same failure digests the same, and a different failing test, message or line does not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from ..canonical import digest
from ..model.evidence import EvidenceRecord

SHOWN_LINES: Final = 5
"""How many failing lines a person is shown for one command."""
LINE_CHARS: Final = 240

_ANSI: Final = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?")
_FAILING: Final = re.compile(
    r"\b(?:errors?|fail(?:ed|ures?|s)?|fatal|panic(?:ked)?|exception|traceback|assert(?:ion)?\w*)\b"
    r"|^\s*E\s{2,}"  # pytest's assertion detail
    r"|^not ok\b"  # TAP
    r"|^\S+?:\d+(?::\d+)?:\s"  # path:line[:col]: a compiler's or linter's diagnostic
    r"|^---\s*FAIL",  # go test
    re.IGNORECASE,
)
_QUIET: Final = re.compile(  # with match: "0 errors", or a section rule (``==== FAILURES ====``), a heading
    r"\s*(?:0 errors?|no errors?|errors?: 0)\b|\s*[=_*#-]{3,}.*[=_*#-]{3,}\s*\Z",
    re.IGNORECASE,
)
_NORMALISE: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"), "<time>"),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b"), "<time>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "0x<addr>"),
    (
        re.compile(
            r"(?:/private)?/(?:tmp|var/tmp|dev/shm|var/folders/[^/\s]+/[^/\s]+/T)"
            r"/(?:pytest-of-[^/\s]+/pytest-\d+|[^/\s:'\"()\[\],]+)"
        ),
        "<tmp>",
    ),
    (re.compile(r"\b[0-9a-f]{40}(?:[0-9a-f]{24})?\b"), "<id>"),
    (
        re.compile(r"\b\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|s|sec|secs|seconds?|min|mins|minutes?)\b", re.IGNORECASE),
        "<duration>",
    ),
    (re.compile(r"\b\d+ (passed|skipped|deselected|xfailed|xpassed|warnings?|subtests passed)\b"), r"N \1"),
    (re.compile(r"\[\s*\d+%\]"), "[N%]"),  # pytest's progress column
    (re.compile(r"[ \t]+"), " "),
)


def normalise(line: str) -> str:
    """``line`` without what differs between two runs of the same failure (see the module docstring)."""
    text = _ANSI.sub("", line)
    for pattern, replacement in _NORMALISE:
        text = pattern.sub(replacement, text)
    return text.strip()


def _lines(tail: str) -> list[str]:
    return [line.rstrip() for line in _ANSI.sub("", tail).splitlines() if line.strip()]


def failing_lines(tail: str) -> list[str]:
    """The lines of ``tail`` that look like a diagnostic, in order; all its non-blank lines when none does."""
    lines = _lines(tail)
    found = [line for line in lines if _FAILING.search(line) and not _QUIET.match(line)]
    return found or lines


def shown(tail: str, limit: int = SHOWN_LINES) -> list[str]:
    """The first ``limit`` failing lines of ``tail``, each cut to :data:`LINE_CHARS`: what a person is shown."""
    return [line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…" for line in failing_lines(tail)[:limit]]


def symptom(tail: str) -> str:
    """The digest of ``tail``'s normalised failing lines, as a set: the same failure digests the same."""
    return digest(sorted({normalise(line) for line in failing_lines(tail)} - {""}))


def ended(record: EvidenceRecord) -> str:
    """How a failed command ended, in one word: ``timeout``, ``spawn``, ``parse``, ``tests``, ``exit:N``."""
    if record.timed_out:
        return "timeout"
    if record.spawn_error:
        return "spawn"
    if record.parse_error:
        return "parse"
    if record.tests and (record.tests["failed"] or record.tests["errors"]) and record.exit_code == 0:
        return "tests"
    return f"exit:{record.exit_code if record.exit_code is not None else 'signal ' + str(record.signal)}"


def failed_required(records: Iterable[EvidenceRecord]) -> list[EvidenceRecord]:
    """The failed required commands of one verification, each once (its last record), in the order they ran."""
    last: dict[str, EvidenceRecord] = {}
    for record in records:
        if record.required and not record.passed:
            last.pop(record.command_id, None)
            last[record.command_id] = record
    return list(last.values())


def failed_commands(records: Iterable[EvidenceRecord]) -> list[list[str]]:
    """``[command id, how it ended, symptom]`` of each failed required command, sorted: a verification failure's
    fingerprint (never its timing, its commit or anything else that differs between two runs of one failure)."""
    return sorted([r.command_id, ended(r), symptom(r.tail or "")] for r in failed_required(records))


def output_of(detail: Mapping[str, Any]) -> str | None:
    """The digest of the failing output a refusal's ``detail`` names (a verification failure's ``failed``, made by
    :func:`failed_commands`); None for a failure that names no output (an agent that exited, a rule broken)."""
    failed = detail.get("failed")
    if not isinstance(failed, Sequence) or not failed:
        return None
    if not all(isinstance(entry, Sequence) and not isinstance(entry, str) and len(entry) == 3 for entry in failed):
        return None
    return digest([list(entry) for entry in failed])
