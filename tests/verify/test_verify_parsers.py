"""Test-count parsers on real runner output: pytest (plain, coloured, -q, xdist), its JUnit report, surefire,
jest-junit and go-junit-report shapes, TAP; hostile reports (DTD, oversize, malformed) and report paths that
leave the worktree are refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from git_agentops.errors import AgentOpsError
from git_agentops.verify.parsers import (
    MAX_JUNIT_BYTES,
    TestCounts,
    parse_counts,
    parse_junit,
    parse_pytest,
    parse_tap,
)

# a test file with every outcome (its skip and xfail markers are data): the parsers must count each one
MIX = textwrap.dedent(
    """
    import warnings

    import pytest


    def test_pass():
        pass


    def test_pass2():
        pass


    def test_warns():
        warnings.warn(UserWarning("careful"))


    def test_fail():
        assert 1 == 2


    @pytest.mark.skip(reason="not today")
    def test_skip():
        pass


    @pytest.mark.xfail(reason="known bug")
    def test_xfail():
        assert False


    @pytest.mark.xfail(reason="fixed already")
    def test_xpass():
        pass


    @pytest.fixture
    def broken():
        raise RuntimeError("boom")


    def test_error(broken):
        pass


    def test_prints_a_fake_summary():
        print("===== 99 passed in 0.01s =====")
    """
)
# test_pass, test_pass2, test_warns, test_prints_a_fake_summary + the xpass
MIX_ALL = TestCounts(passed=5, failed=1, skipped=2, errors=1)


def _pytest(project: Path, *args: str) -> str:
    """Run a real pytest on ``project`` (its own rootdir and ini, no cache); return stdout + stderr.

    A run that hangs (a nested xdist run once did, under a loaded CI machine) is aborted with SIGABRT across its
    process group, so that every process of it -- the workers too -- prints where it was stuck, and the test fails
    with that."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "PYTHONPATH"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"
    # its own --basetemp: a run that makes one under the shared root deletes the oldest there (other sessions' trees,
    # up to gigabytes after a few whole-suite runs: 30 s of this test's time on a developer's machine)
    basetemp = ["--basetemp", str(project.parent / "nested-basetemp")]
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *basetemp, *args]
    with subprocess.Popen(
        argv,
        cwd=project,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGABRT)
            out, err = proc.communicate(timeout=60)
            pytest.fail(f"{argv} hung for 120 s; where it was:\n{out[-8000:]}\n{err[-20000:]}")
    assert proc.returncode in (0, 1, 2, 5), out + err  # 2: interrupted by a collection error
    return out + err


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "test_mix.py").write_text(MIX)
    return root


# -- pytest, real output -------------------------------------------------------------------------------------


def test_real_pytest_run_coloured_with_deselection_matches_its_junit_report(project: Path) -> None:
    output = _pytest(project, "--color=yes", "-k", "not test_pass2", "--junitxml=reports/junit.xml")
    assert "\x1b[" in output and "99 passed" in output  # colours, and the fake summary a test printed
    expected = TestCounts(passed=4, failed=1, skipped=2, errors=1)  # deselected is not counted
    assert parse_pytest(output) == expected
    assert parse_junit((project / "reports" / "junit.xml").read_bytes()) == expected
    assert parse_counts("junit:reports/junit.xml", output, worktree=project) == expected
    assert parse_counts("pytest", output, worktree=project) == expected


def test_real_pytest_quiet(project: Path) -> None:
    output = _pytest(project, "-q", "--color=no")
    assert output.rstrip().splitlines()[-1].startswith("1 failed, 4 passed")
    assert parse_pytest(output) == MIX_ALL
    assert MIX_ALL.to_json() == {"passed": 5, "failed": 1, "skipped": 2, "errors": 1, "total": 9}


@pytest.mark.slow
def test_real_pytest_xdist(project: Path) -> None:
    output = _pytest(project, "-n", "2", "-v", "--color=yes")
    assert "[gw" in output and "created: 2/2 workers" in output
    assert parse_pytest(output) == MIX_ALL


def test_real_pytest_teardown_error_differs_between_summary_and_junit(project: Path) -> None:
    (project / "test_mix.py").write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.fixture
            def bad_teardown():
                yield
                raise RuntimeError("teardown")

            def test_fails(bad_teardown):
                assert False

            def test_passes(bad_teardown):
                pass
            """
        )
    )
    output = _pytest(project, "--junitxml=junit.xml")
    assert parse_pytest(output) == TestCounts(passed=1, failed=1, skipped=0, errors=2)
    # pytest writes a second testcase for the failing test's teardown error, and only an error for the other
    assert parse_junit((project / "junit.xml").read_bytes()) == TestCounts(passed=0, failed=1, skipped=0, errors=2)


def test_real_pytest_collection_error_and_empty_run(project: Path) -> None:
    (project / "test_mix.py").write_text("import no_such_module_here\n")
    assert parse_pytest(_pytest(project)) == TestCounts(0, 0, 0, 1)
    (project / "test_mix.py").write_text("def helper():\n    pass\n")
    empty = _pytest(project)
    assert "no tests ran" in empty
    assert parse_pytest(empty) == TestCounts(0, 0, 0, 0)


# -- pytest, summary forms -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "===== 3 passed, 1 failed, 2 skipped, 1 xfailed, 1 xpassed, 2 warnings, 1 error in 0.52s =====",
            TestCounts(4, 1, 3, 1),
        ),
        ("5 passed in 0.01s", TestCounts(5, 0, 0, 0)),
        ("1 failed, 2 passed in 1.20s (0:00:01)", TestCounts(2, 1, 0, 0)),
        ("= 1 passed in 3723.01s (1:02:03) =", TestCounts(1, 0, 0, 0)),
        ("no tests ran in 0.01s", TestCounts(0, 0, 0, 0)),
        ("======================== no tests ran in 0.01s ========================", TestCounts(0, 0, 0, 0)),
        ("==== 2 deselected in 0.01s ====", TestCounts(0, 0, 0, 0)),
        ("3 errors in 0.10s", TestCounts(0, 0, 0, 3)),
        ("1 error in 0.10s", TestCounts(0, 0, 0, 1)),
        ("== 1 failed, 1 rerun, 2 subtests passed in 0.10s ==", TestCounts(0, 1, 0, 0)),
        ("=== 2 passed, 1 warning in 0.5 seconds ===", TestCounts(2, 0, 0, 0)),  # pytest < 5
        ("\x1b[32m= \x1b[32m\x1b[1m7 passed\x1b[0m\x1b[32m in 0.05s\x1b[0m\x1b[32m =\x1b[0m", TestCounts(7, 0, 0, 0)),
    ],
)
def test_pytest_summary_forms(line: str, expected: TestCounts) -> None:
    assert parse_pytest(f"collected 9 items\n\ntest_x.py ..F\n{line}\n") == expected


def test_pytest_last_summary_wins_and_none_without_one() -> None:
    assert parse_pytest("== 99 passed in 0.01s ==\nnoise\n== 1 failed in 0.02s ==\n") == TestCounts(0, 1, 0, 0)
    assert parse_pytest("progress 10%\r== 2 passed in 0.02s ==\r\n") == TestCounts(2, 0, 0, 0)
    for output in ("", "Traceback (most recent call last):\nImportError: boom\n", "5 passed the review\n"):
        assert parse_pytest(output) is None


# -- JUnit -----------------------------------------------------------------------------------------------------

SUREFIRE = b"""<?xml version="1.0" encoding="UTF-8"?>
<testsuite xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" name="com.example.AppTest" time="0.05"
    tests="5" errors="1" skipped="1" failures="1">
  <properties><property name="java.version" value="21"/></properties>
  <testcase name="adds" classname="com.example.AppTest" time="0.001"/>
  <testcase name="flaky" classname="com.example.AppTest" time="0.002">
    <flakyFailure message="first try" type="java.lang.AssertionError"><![CDATA[at line 3]]></flakyFailure>
  </testcase>
  <testcase name="subtracts" classname="com.example.AppTest" time="0.001">
    <failure message="expected: 1 but was: 2" type="org.opentest4j.AssertionFailedError"><![CDATA[
<!DOCTYPE html><html>the page the test printed</html>]]></failure>
    <system-out><![CDATA[<!ENTITY not a declaration here>]]></system-out>
  </testcase>
  <testcase name="divides" classname="com.example.AppTest" time="0">
    <error message="/ by zero" type="java.lang.ArithmeticException">java.lang.ArithmeticException</error>
  </testcase>
  <testcase name="later" classname="com.example.AppTest" time="0"><skipped message="@Disabled"/></testcase>
</testsuite>
"""

JEST = b"""<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="jest tests" tests="4" failures="1" errors="0" time="1.2">
  <testsuite name="sum" errors="0" failures="1" skipped="1" timestamp="2026-01-01T00:00:00" time="0.4" tests="3">
    <testcase classname="sum adds" name="sum adds" time="0.002"></testcase>
    <testcase classname="sum fails" name="sum fails" time="0.003">
      <failure>Error: expect(received).toBe(expected)</failure>
    </testcase>
    <testcase classname="sum todo" name="sum todo" time="0"><skipped/></testcase>
  </testsuite>
  <testsuite name="empty" errors="0" failures="0" skipped="0" tests="1" time="0.1">
    <testcase classname="empty ok" name="empty ok" time="0.001"/>
  </testsuite>
</testsuites>
"""

GO_JUNIT_REPORT = b"""<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="3" failures="1" skipped="1">
\t<testsuite name="example.com/pkg" tests="3" failures="1" errors="0" id="0" hostname="h" skipped="1" time="0.01">
\t\t<properties><property name="go.version" value="go1.22.0"></property></properties>
\t\t<testcase name="TestOK" classname="example.com/pkg" time="0.000"></testcase>
\t\t<testcase name="TestBad" classname="example.com/pkg" time="0.000">
\t\t\t<failure message="Failed"><![CDATA[    x_test.go:9: nope]]></failure>
\t\t</testcase>
\t\t<testcase name="TestLater" classname="example.com/pkg" time="0.000">
\t\t\t<skipped message="Skipped"><![CDATA[    x_test.go:12: later]]></skipped>
\t\t</testcase>
\t</testsuite>
</testsuites>
"""


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # a flaky test passed on rerun; a DOCTYPE/ENTITY inside CDATA is text, not a declaration
        (SUREFIRE, TestCounts(passed=2, failed=1, skipped=1, errors=1)),
        (JEST, TestCounts(passed=2, failed=1, skipped=1, errors=0)),
        (GO_JUNIT_REPORT, TestCounts(passed=1, failed=1, skipped=1, errors=0)),
        (b"\xef\xbb\xbf<testsuites/>", TestCounts(0, 0, 0, 0)),
        (
            b"<?xml version='1.0' encoding='ISO-8859-1'?><!-- made by hand --><?pi x?>\n<testsuite>"
            b"<testcase name='caf\xe9'><failure/><error/></testcase><testcase><error/><skipped/></testcase>"
            b"</testsuite>",
            TestCounts(passed=0, failed=1, skipped=0, errors=1),
        ),
        (
            b'<r:testsuite xmlns:r="urn:x"><r:testcase/><r:testcase><r:skipped/></r:testcase></r:testsuite>',
            TestCounts(passed=1, failed=0, skipped=1, errors=0),
        ),
    ],
)
def test_junit_shapes_count_testcases_not_attributes(data: bytes, expected: TestCounts) -> None:
    assert parse_junit(data) == expected


@pytest.mark.parametrize(
    "data",
    [
        b'<?xml version="1.0"?>\n<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">]>\n'
        b"<testsuite><testcase name='&lol2;'/></testsuite>",
        b'<!DOCTYPE testsuite SYSTEM "file:///etc/passwd"><testsuite/>',
        b'<?xml version="1.0"?><!-- hi --><!ENTITY x "y"><testsuite/>',
        b"\xef\xbb\xbf  <!doctype testsuite><testsuite/>",
        b"<testsuite><!ENTITY x 'y'></testsuite>",  # not a DTD: a syntax error
        '<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE x><testsuite/>'.encode("utf-16"),
        b'<?xml version="1.0" encoding="cp037"?><testsuite/>',
        # tricks a byte-level prolog check could miss; expat sees the declaration whatever surrounds it
        "<!-- a comment --><!DOCTYPE x [<!ENTITY e 'y'>]><testsuite/>".encode("utf-16"),  # BOM, no declaration
        b"<?xml version='1.0'?><?pi <!DOCTYPE?><!--<testsuite/>--><!DOCTYPE x><testsuite/>",
        b'<?xml version="1.0"?>\r\n\t<!DOCTYPE testsuite PUBLIC "x" "http://example.invalid/x.dtd"><testsuite/>',
        b"<testsuite><testcase></testsuite>",
        b"not xml at all",
        b"",
        b"<html><body/></html>",
    ],
)
def test_junit_hostile_or_malformed_reports_are_refused(data: bytes) -> None:
    """Invariant: a DTD, an entity or an exotic encoding is refused by the parser itself, wherever it stands."""
    with pytest.raises(AgentOpsError) as caught:
        parse_junit(data, what="JUnit report out/junit.xml")
    assert caught.value.code == "VERIFY_PARSE_FAILED"
    assert "JUnit report out/junit.xml" in caught.value.message


def test_junit_oversize_is_refused_before_parsing() -> None:
    data = b"<!DOCTYPE x>" + b" " * MAX_JUNIT_BYTES
    with pytest.raises(AgentOpsError) as caught:
        parse_junit(data)
    assert caught.value.code == "DOC_TOO_LARGE"


# -- TAP -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tap", "expected"),
    [
        ("TAP version 13\n1..3\nok 1 - a\nnot ok 2 - b\nok 3 - c # SKIP no network\n", TestCounts(1, 1, 1, 0)),
        ("ok 1\nok 2 # skip\nnot ok 3 # TODO not yet\nok 4 # todo done early\n1..4\n", TestCounts(2, 0, 2, 0)),
        ("ok 1 - has \\# SKIP escaped\nnot ok 2 # SKIPPED: platform\n", TestCounts(1, 0, 1, 0)),
        ("1..5\nok 1\nnot ok 2\n", TestCounts(1, 1, 0, 3)),  # two planned tests never reported
        ("1..4\nok 1\nBail out! database down\nok 2\n", TestCounts(1, 0, 0, 3)),
        ("ok 1\nBail out!\n", TestCounts(1, 0, 0, 1)),
        ("1..0 # SKIP no python here\n", TestCounts(0, 0, 0, 0)),
        ("1..2\nok 1\nok 2\nok 3 - one more than planned\n", TestCounts(3, 0, 0, 0)),
        ("1..1\nok 1\n1..2\nok 1\nnot ok 2\n", TestCounts(2, 1, 0, 0)),  # two concatenated streams
        (
            # node --test: subtests and YAML diagnostics are indented; the parent line reports them
            "TAP version 13\n# Subtest: suite\n    # Subtest: inner\n    not ok 1 - inner\n      ---\n"
            "      duration_ms: 0.1\n      ...\n    1..1\nnot ok 1 - suite\n  ---\n  ok 7: yaml\n  ...\n"
            "# Subtest: other\nok 2 - other\n1..2\n# tests 2\n# pass 1\n",
            TestCounts(1, 1, 0, 0),
        ),
        ("\x1b[32mok 1\x1b[0m\nokay, not a test\n", TestCounts(1, 0, 0, 0)),
    ],
)
def test_tap(tap: str, expected: TestCounts) -> None:
    assert parse_tap(tap) == expected


def test_tap_without_plan_or_tests_is_none() -> None:
    assert parse_tap("") is None
    assert parse_tap("# just a comment\n  ok 1 - indented\nhello\n") is None


# -- parse_counts ------------------------------------------------------------------------------------------------


def test_parse_counts_dispatch(tmp_path: Path) -> None:
    assert parse_counts("none", "5 passed in 0.1s", worktree=tmp_path) is None
    assert parse_counts("pytest", "5 passed in 0.1s", worktree=tmp_path) == TestCounts(5, 0, 0, 0)
    assert parse_counts("tap", "1..1\nok 1\n", worktree=tmp_path) == TestCounts(1, 0, 0, 0)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "j.xml").write_bytes(JEST)
    (tmp_path / "link").symlink_to("out")  # a symlink that stays inside is followed
    assert parse_counts("junit:link/j.xml", "", worktree=tmp_path) == TestCounts(2, 1, 1, 0)
    for spec in ("junit", "PYTEST", "pytest ", "junit-xml:x", ""):
        with pytest.raises(AgentOpsError) as caught:
            parse_counts(spec, "", worktree=tmp_path)
        assert caught.value.code == "VERIFY_PARSE_FAILED"


def test_parse_counts_missing_report(tmp_path: Path) -> None:
    for rel in ("out/junit.xml", "no/such/dir/junit.xml"):
        with pytest.raises(AgentOpsError) as caught:
            parse_counts(f"junit:{rel}", "", worktree=tmp_path)
        assert caught.value.code == "VERIFY_PARSE_FAILED"
        assert caught.value.message == f"the command wrote no JUnit report at {rel}"


def test_parse_counts_report_paths_cannot_escape(tmp_path: Path) -> None:
    worktree = tmp_path / "wt"
    worktree.mkdir()
    outside = tmp_path / "outside.xml"
    outside.write_bytes(JEST)
    (worktree / "report.xml").symlink_to(outside)
    (worktree / "dir").symlink_to(tmp_path)
    for rel in ("../outside.xml", "/etc/passwd", str(outside), "a/../../outside.xml", "report.xml", "dir/outside.xml"):
        with pytest.raises(AgentOpsError) as caught:
            parse_counts(f"junit:{rel}", "", worktree=worktree)
        assert caught.value.code == "PATH_ESCAPE", rel


def test_parse_counts_report_must_be_a_small_regular_file(tmp_path: Path) -> None:
    (tmp_path / "dir.xml").mkdir()
    os.mkfifo(tmp_path / "fifo.xml")
    for rel in ("dir.xml", "fifo.xml"):
        with pytest.raises(AgentOpsError) as caught:
            parse_counts(f"junit:{rel}", "", worktree=tmp_path)
        assert caught.value.code == "PATH_NOT_REGULAR"
    with (tmp_path / "big.xml").open("wb") as handle:
        handle.truncate(MAX_JUNIT_BYTES + 1)
    with pytest.raises(AgentOpsError) as caught:
        parse_counts("junit:big.xml", "", worktree=tmp_path)
    assert caught.value.code == "DOC_TOO_LARGE"
    with pytest.raises(AgentOpsError) as caught:
        parse_counts("junit:", "", worktree=tmp_path)
    assert caught.value.code == "PATH_INVALID"


def test_junit_in_utf16_without_a_dtd_is_read() -> None:
    """expat decodes a BOM-marked UTF-16 report itself; without a DTD there is nothing to refuse."""
    data = "<testsuite><testcase name='\u00e9'/><testcase><failure/></testcase></testsuite>".encode("utf-16")
    assert parse_junit(data) == TestCounts(1, 1, 0, 0)
