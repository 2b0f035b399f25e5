"""Test counts read from what a test runner really printed or wrote.

A verification command passes or fails by its exit status; the counts (passed, failed, skipped, errors) are
evidence *about* that run, shown to reviewers and stored in the evidence note. They come from the runner's own
output, never from the agent's account of it, so the parsers read the formats runners actually produce:

* **pytest** -- the final summary line (``=== 1 failed, 2 passed, 1 xfailed in 0.52s ===``, or the bare ``-q``
  form), coloured or not, with or without pytest-xdist. Only the *last* summary line counts: a test may print
  something that looks like one, pytest's own summary always comes last.
* **JUnit XML** -- as written by ``pytest --junitxml``, Maven surefire, jest-junit, go-junit-report. Each
  ``<testcase>`` is counted by its children; the aggregate ``tests=``/``failures=`` attributes are ignored because
  the writers disagree on them (pytest counts xfail as skipped, surefire counts reruns, some omit ``errors=``).
  The report is written by the command under verification -- that is, by code the agent controls -- so it is
  untrusted input: size-limited, and read by expat with handlers that refuse a DTD, any entity declaration or
  external entity the moment the parser meets one (a DTD is the only place entities, and so billion-laughs
  expansion or external entities, can come from), and an encoding outside the ASCII-compatible ones.
* **unittest** -- the closing ``Ran 5 tests in 0.012s`` line and the verdict after it (``OK``, ``OK (skipped=1)``,
  ``FAILED (failures=1, errors=2)``, ``NO TESTS RAN``), as ``python -m unittest`` and Django's runner print them.
  Only the last such pair counts, for the same reason as pytest's summary.
* **TAP** 12/13/14 -- top-level ``ok``/``not ok`` lines, ``# SKIP``/``# TODO`` directives, the plan, ``Bail out!``.
  ``node --test`` prints it when its reporter is ``tap`` (the starter policy sets ``--test-reporter=tap``); its
  closing totals (``# tests``, ``# pass``, ``# fail``...) count tests inside suites, so they win when present.

Counting rules, chosen so that a run counts the same through pytest's summary and through its JUnit report:

========================  =========================================================================
counted as                from
========================  =========================================================================
``passed``                pytest ``passed`` + ``xpassed``; a JUnit testcase with no failure/error/skipped
                          child; TAP ``ok`` (also ``ok ... # TODO``, a TODO that unexpectedly passed);
                          unittest's ``Ran`` count less every other outcome it names
``failed``                pytest ``failed``; JUnit ``<failure>``; TAP ``not ok``; unittest ``failures`` +
                          ``unexpected successes`` (unittest itself fails the run for those)
``skipped``               pytest ``skipped`` + ``xfailed``; JUnit ``<skipped>``; TAP ``# SKIP``, and
                          ``not ok ... # TODO`` (a failing TODO is expected, not a failure); unittest
                          ``skipped`` + ``expected failures``
``errors``                pytest ``error(s)``; JUnit ``<error>``; TAP ``Bail out!`` and planned tests that
                          never reported (see :func:`parse_tap`); unittest ``errors``
not counted               pytest ``deselected`` (not run by request), ``warning(s)``, ``rerun(s)`` and any
                          other word a plugin adds
========================  =========================================================================

A JUnit testcase with several children counts once: failure, then error, then skipped. The two sources differ on
one case: a test whose fixture errors in teardown is "1 passed, 1 error" in pytest's summary but one testcase
with an ``<error>`` in its report (and one that also failed gets two testcases, a failure and an error).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..errors import AgentOpsError
from ..gitstore.private import read_private, resolve_contained

MAX_JUNIT_BYTES: Final = 16 * 1024 * 1024
SPECS: Final = ("pytest", "unittest", "tap", "none", "junit:<relative path>")

# CSI sequences (colours, cursor movement) and the two-byte escapes; pytest colours each word of its summary.
_ANSI: Final = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|[@-Z\\-_])")


@dataclass(frozen=True, slots=True)
class TestCounts:
    """How many tests passed, failed, were skipped or errored in one verification run."""

    __test__ = False  # a value type, not a pytest test class

    passed: int
    failed: int
    skipped: int
    errors: int

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.skipped + self.errors

    def to_json(self) -> dict[str, int]:
        return {
            "passed": self.passed,
            "failed": self.failed,
            "skipped": self.skipped,
            "errors": self.errors,
            "total": self.total,
        }


def _lines(output: str) -> list[str]:
    """The output's lines without colours; ``splitlines`` also splits on the ``\\r`` of progress redraws."""
    return _ANSI.sub("", output).splitlines()


# -- pytest ----------------------------------------------------------------------------------------------------

_PYTEST_ITEM: Final = r"\d+ [a-z]+(?: [a-z]+)*"
_PYTEST_SUMMARY: Final = re.compile(
    rf"^\s*(?:=+ )?(?P<items>no tests ran|{_PYTEST_ITEM}(?:, {_PYTEST_ITEM})*)"
    r" in \d+(?:\.\d+)?\s*s(?:econds)?(?: \(\d+:\d\d:\d\d(?:\.\d+)?\))?(?: =+)?\s*$"
)
_PYTEST_WORDS: Final = {
    "passed": "passed",
    "xpassed": "passed",
    "failed": "failed",
    "skipped": "skipped",
    "xfailed": "skipped",
    "error": "errors",
    "errors": "errors",
}


def parse_pytest(output: str) -> TestCounts | None:
    """Counts from the last pytest summary line of ``output``; None if pytest printed none (it crashed, or
    the command was not pytest)."""
    for line in reversed(_lines(output)):
        match = _PYTEST_SUMMARY.match(line)
        if match is None:
            continue
        totals = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
        items = match.group("items")
        if items != "no tests ran":
            for item in items.split(", "):
                number, word = item.split(" ", 1)
                field = _PYTEST_WORDS.get(word)
                if field is not None:
                    totals[field] += int(number)
        return TestCounts(**totals)
    return None


# -- unittest --------------------------------------------------------------------------------------------------

_UNITTEST_RAN: Final = re.compile(r"Ran (\d+) tests? in \d+(?:\.\d+)?s")
_UNITTEST_VERDICT: Final = re.compile(r"(OK|FAILED|NO TESTS RAN)(?: \((?P<items>[a-z ]+=\d+(?:, [a-z ]+=\d+)*)\))?")
_UNITTEST_WORDS: Final = {
    "failures": "failed",
    "unexpected successes": "failed",
    "errors": "errors",
    "skipped": "skipped",
    "expected failures": "skipped",
}


def parse_unittest(output: str) -> TestCounts | None:
    """Counts from the last ``Ran N tests in Ts`` line of ``output`` and the verdict that follows it (blank lines
    between them allowed); None if unittest printed none.

    A failing ``subTest`` is one failure of its own, so failures can outnumber the tests run: ``passed`` is never
    below zero, and ``total`` is then more than ``Ran`` says.
    """
    lines = [line.strip() for line in _lines(output)]
    for index in range(len(lines) - 1, -1, -1):
        ran = _UNITTEST_RAN.fullmatch(lines[index])
        if ran is None:
            continue
        after = next((line for line in lines[index + 1 :] if line), "")
        verdict = _UNITTEST_VERDICT.fullmatch(after)
        if verdict is None:
            continue
        totals = {"failed": 0, "skipped": 0, "errors": 0}
        for item in (verdict.group("items") or "").split(", ") if verdict.group("items") else []:
            word, number = item.rsplit("=", 1)
            field = _UNITTEST_WORDS.get(word)
            if field is not None:
                totals[field] += int(number)
        passed = max(0, int(ran.group(1)) - sum(totals.values()))
        return TestCounts(passed=passed, **totals)
    return None


# -- JUnit XML -------------------------------------------------------------------------------------------------

# Encodings whose reports we read; anything else (UTF-16/32, EBCDIC...) is refused by the parser's XML
# declaration handler rather than decoded.
_ASCII_COMPATIBLE: Final = frozenset(
    {"utf-8", "utf8", "us-ascii", "ascii", "iso-8859-1", "latin-1", "latin1", "iso-8859-15", "windows-1252", "cp1252"}
)


class _Refused(Exception):
    """Raised from inside an expat handler to stop the parse (expat re-raises it from ``Parse``)."""


def _local(name: str) -> str:
    """The element name without its namespace (``uri}local`` with ``namespace_separator="}"``)."""
    return name.rsplit("}", 1)[-1]


class _JUnitCounter:
    """Counts ``<testcase>`` elements by their direct children while expat reads the report."""

    def __init__(self) -> None:
        self.root: str | None = None
        self.stack: list[tuple[str, set[str] | None]] = []  # element, and for a testcase its children's names
        self.passed = self.failed = self.skipped = self.errors = 0

    def start(self, name: str, attributes: object) -> None:
        local = _local(name)
        if self.root is None:
            self.root = local
        if self.stack and self.stack[-1][1] is not None:
            children = self.stack[-1][1]
            assert children is not None
            children.add(local)
        self.stack.append((local, set() if local == "testcase" else None))

    def end(self, name: str) -> None:
        _, children = self.stack.pop()
        if children is None:
            return
        if "failure" in children:
            self.failed += 1
        elif "error" in children:
            self.errors += 1
        elif "skipped" in children:
            self.skipped += 1
        else:
            self.passed += 1


def _refuse(what: str) -> Callable[..., Any]:
    def handler(*_: object) -> Any:
        raise _Refused(what)

    return handler


def parse_junit(data: bytes, *, what: str = "JUnit report") -> TestCounts:
    """Count the ``<testcase>`` elements of a JUnit XML report by their children.

    ``DOC_TOO_LARGE`` over 16 MiB; ``VERIFY_PARSE_FAILED`` for a DTD, a non-UTF-8 encoding, malformed XML, or a
    root that is neither ``<testsuites>`` nor ``<testsuite>``. ``what`` names the report in messages.
    """
    if len(data) > MAX_JUNIT_BYTES:
        raise AgentOpsError("DOC_TOO_LARGE", f"{what} is {len(data)} bytes, over its limit of {MAX_JUNIT_BYTES}")
    from xml.parsers import expat  # only reports need it; keep the import off the common path

    counter = _JUnitCounter()
    parser = expat.ParserCreate(namespace_separator="}")
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)

    def declaration(version: str, encoding: str | None, standalone: int) -> None:
        if encoding is not None and encoding.lower() not in _ASCII_COMPATIBLE:
            raise _Refused(f"declares encoding {encoding!r}; expected UTF-8")

    parser.XmlDeclHandler = declaration
    dtd = "declares a DOCTYPE (or other markup declaration); refusing it (entity expansion)"
    parser.StartDoctypeDeclHandler = _refuse(dtd)
    parser.EntityDeclHandler = _refuse(dtd)
    parser.UnparsedEntityDeclHandler = _refuse(dtd)
    parser.NotationDeclHandler = _refuse(dtd)
    parser.ExternalEntityRefHandler = _refuse("refers to an external entity; refusing it")
    parser.StartElementHandler = counter.start
    parser.EndElementHandler = counter.end
    try:
        parser.Parse(data, True)
    except _Refused as refused:
        raise AgentOpsError("VERIFY_PARSE_FAILED", f"{what} {refused}") from None
    except expat.ExpatError as exc:
        raise AgentOpsError("VERIFY_PARSE_FAILED", f"{what} is not well-formed XML: {exc}") from exc
    if counter.root not in ("testsuites", "testsuite"):
        raise AgentOpsError(
            "VERIFY_PARSE_FAILED", f"{what} has root <{counter.root}>; expected <testsuites> or <testsuite>"
        )
    return TestCounts(counter.passed, counter.failed, counter.skipped, counter.errors)


# -- TAP -------------------------------------------------------------------------------------------------------

_TAP_PLAN: Final = re.compile(r"1\.\.(\d+)\s*(?:#.*)?")
_TAP_TEST: Final = re.compile(r"(not )?ok\b(.*)")
# The directive follows an unescaped '#'; Test::Harness accepts "# skip", "# SKIPPED: why", "# TODO later".
_TAP_DIRECTIVE: Final = re.compile(r"(?<!\\)#\s*(SKIP\S*|TODO)\b", re.IGNORECASE)
_TAP_BAIL: Final = re.compile(r"Bail out!")
# node --test ends its TAP with totals as comments; they count the tests inside suites, which the top-level lines
# (one per suite) do not
_NODE_TOTAL: Final = re.compile(r"# (tests|suites|pass|fail|cancelled|skipped|todo|duration_ms) (\d+(?:\.\d+)?)")


def parse_tap(output: str) -> TestCounts | None:
    """Counts from a TAP stream; None if it has neither a plan nor a test line.

    Only lines at column 0 count: indented lines are subtests (their parent reports their outcome) or YAML
    diagnostics. Several plans (concatenated streams) add up. If the plans promise more tests than reported, each
    missing one is an error; ``Bail out!`` ends the stream and counts as an error -- as many as the planned tests
    it left unrun, at least one. ``1..0 # SKIP`` is a valid stream of zero tests.
    """
    lines = _lines(output)
    node = _node_totals(lines)
    if node is not None:
        return node
    passed = failed = skipped = 0
    planned: int | None = None
    seen_test = bailed = False
    for line in lines:
        if _TAP_BAIL.match(line):
            bailed = True
            break
        plan = _TAP_PLAN.fullmatch(line)
        if plan is not None:
            planned = (planned or 0) + int(plan.group(1))
            continue
        test = _TAP_TEST.fullmatch(line)
        if test is None:
            continue
        seen_test = True
        directive = _TAP_DIRECTIVE.search(test.group(2))
        kind = directive.group(1).upper()[:4] if directive else ""
        ok = test.group(1) is None
        if kind == "SKIP" or (kind == "TODO" and not ok):
            skipped += 1
        elif ok:
            passed += 1
        else:
            failed += 1
    if planned is None and not seen_test and not bailed:
        return None
    missing = max(0, (planned or 0) - (passed + failed + skipped))
    errors = max(1, missing) if bailed else missing
    return TestCounts(passed, failed, skipped, errors)


def _node_totals(lines: list[str]) -> TestCounts | None:
    """node's closing totals (``# tests 5``, ``# pass 4``, ``# fail 0``...) when they are the last lines after the
    last plan: ``todo`` counts as skipped, ``cancelled`` (a test cut short by a timeout or its file's crash) as an
    error. None when the stream does not end with them."""
    totals: dict[str, int] = {}
    for line in reversed(lines):
        found = _NODE_TOTAL.fullmatch(line.strip())
        if found is None:
            break
        totals.setdefault(found.group(1), int(float(found.group(2))))
    if not {"tests", "pass", "fail"} <= set(totals):
        return None
    skipped = totals.get("skipped", 0) + totals.get("todo", 0)
    return TestCounts(totals["pass"], totals["fail"], skipped, totals.get("cancelled", 0))


# -- dispatch --------------------------------------------------------------------------------------------------


def parse_counts(spec: str, output: str, *, worktree: Path) -> TestCounts | None:
    """Counts for a policy's ``counts`` spec: ``pytest``, ``unittest`` or ``tap`` (parsed from ``output``), ``none``, or
    ``junit:<path>`` (a report the command wrote, relative to ``worktree``).

    The report path comes from the policy and the file from the command, so it is resolved inside the worktree
    (``PATH_ESCAPE`` for ``..``, an absolute path or a symlink leading out; ``PATH_INVALID``) and read without
    following a final symlink, as a regular file, size-limited (``PATH_SYMLINK``, ``PATH_NOT_REGULAR``,
    ``DOC_TOO_LARGE``). ``VERIFY_PARSE_FAILED`` for an unknown spec, a missing or bad report.
    """
    if spec == "pytest":
        return parse_pytest(output)
    if spec == "unittest":
        return parse_unittest(output)
    if spec == "tap":
        return parse_tap(output)
    if spec == "none":
        return None
    if spec.startswith("junit:"):
        rel = spec.removeprefix("junit:")
        path = resolve_contained(worktree, rel)
        if path.is_dir():  # read_private would fail opening it as a file
            raise AgentOpsError("PATH_NOT_REGULAR", f"the JUnit report {rel} is a directory")
        data = read_private(path.parent, path.name, max_bytes=MAX_JUNIT_BYTES)
        if data is None:
            raise AgentOpsError("VERIFY_PARSE_FAILED", f"the command wrote no JUnit report at {rel}")
        return parse_junit(data, what=f"JUnit report {rel}")
    raise AgentOpsError("VERIFY_PARSE_FAILED", f"unknown counts spec {spec!r}; expected one of {', '.join(SPECS)}")
