"""The CLI boundary: help, usage errors, coded refusals, JSON errors, crash logs, doctor."""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from git_agentops.cli import common, docgen
from git_agentops.errors import AgentOpsError
from git_agentops.schema import documents

from ..conftest import git

COMMANDS = docgen.COMMANDS


def _bin(name: str) -> str:
    path = shutil.which(f"git-agentops-{name}")
    assert path, f"git-agentops-{name} is not installed on PATH"
    return path


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help_and_version(run_cli: Any, repo_path: Path, name: str) -> None:
    done = run_cli(_bin(name), "--help", cwd=repo_path)
    assert done.returncode == 0 and f"usage: git-agentops-{name}" in done.stdout
    short = run_cli("git", f"agentops-{name}", "-h", cwd=repo_path)
    assert short.returncode == 0 and f"usage: git-agentops-{name}" in short.stdout
    version = run_cli(_bin(name), "--version", cwd=repo_path)
    assert version.returncode == 0 and "0.1.0" in version.stdout


@pytest.mark.parametrize("name", COMMANDS)
def test_git_dash_dash_help_opens_the_man_page(run_cli: Any, repo_path: Path, name: str) -> None:
    """``git agentops-X --help`` is rewritten by git into ``git help``: the installed man page must exist."""
    done = run_cli("git", f"agentops-{name}", "--help", cwd=repo_path, env={"MANPAGER": "cat", "PAGER": "cat"})
    assert done.returncode == 0, done.stderr
    assert f"git-agentops-{name}" in done.stdout and "EXIT STATUS" in done.stdout


def test_man_pages_and_error_table_are_current() -> None:
    assert docgen.main(["--check"]) == 0


def test_usage_error_is_coded_exit_2(run_cli: Any, repo_path: Path) -> None:
    done = run_cli(_bin("doctor"), "--bogus", cwd=repo_path)
    assert done.returncode == 2 and done.stderr.startswith("error[USAGE]: unrecognized arguments: --bogus")


def test_durations_are_finite_and_in_range_or_usage_errors(run_cli: Any, repo_path: Path) -> None:
    """Invariant: every SECONDS option refuses a negative, NaN, infinite or absurd duration before doing anything;
    ``--wait 0`` (take over only if the lease is free now) is allowed."""
    parse = common.seconds(zero=True)
    assert parse("0") == 0 and parse("2.5") == 2.5
    for bad in ("-5", "nan", "inf", "1e9", "abc", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad)
    with pytest.raises(argparse.ArgumentTypeError):
        common.seconds()("0")
    for argv in (
        ("run", "supervise", "run-20260101-abcdef", "--take-over", "--wait", "-5"),
        ("run", "supervise", "run-20260101-abcdef", "--take-over", "--wait", "nan"),
        ("run", "watch", "x", "--interval", "inf"),
        ("request", "handoff", "--timeout", "-1"),
    ):
        done = run_cli(_bin(argv[0]), *argv[1:], cwd=repo_path)
        assert done.returncode == 2 and done.stderr.startswith("error[USAGE]: "), (argv, done.stderr)


def test_approving_in_a_run_that_is_not_there_is_run_not_found(run_cli: Any, repo_path: Path) -> None:
    for command in (("approve",), ("refuse", "--reason", "x")):
        done = run_cli(_bin("run"), command[0], "run-20260101-abcdef", "t1", *command[1:], cwd=repo_path)
        assert done.returncode == 3 and done.stderr.startswith("error[RUN_NOT_FOUND]: "), done.stderr


def test_json_error_object_matches_its_schema(run_cli: Any, repo_path: Path) -> None:
    done = run_cli(_bin("run"), "status", "run-nope", "--json", cwd=repo_path)
    assert done.returncode == 3 and done.stdout == ""
    doc = json.loads(done.stderr)
    documents.validate(doc, "error")
    assert doc["error"]["code"] == "RUN_NOT_FOUND" and doc["error"]["exitStatus"] == 3


def _run_boundary(handler: Any, argv: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    parser = common.build("git-agentops-test", "test")
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    status = common.run(parser, handler, argv)
    return status, out.getvalue(), err.getvalue()


def test_unexpected_exception_exits_4_with_traceback_log_in_common_dir(
    repo_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(args: Any, ctx: common.Context) -> int:
        raise ZeroDivisionError("boom")

    sub = repo_path / "sub"
    sub.mkdir()
    status, out, err = _run_boundary(crash, [], sub, monkeypatch)
    assert status == 4 and out == ""
    assert err.startswith("error[INTERNAL]: unexpected ZeroDivisionError: boom; traceback in ")
    assert err.count("\n") == 1  # one line on stderr
    log = Path(err.strip().rsplit("traceback in ", 1)[1])
    assert log.parent == repo_path / ".git" / "agentops" / "log"
    assert "ZeroDivisionError: boom" in log.read_text() and (log.stat().st_mode & 0o777) == 0o600
    status, _, err = _run_boundary(crash, ["--json"], sub, monkeypatch)
    doc = json.loads(err)
    documents.validate(doc, "error")
    assert status == 4 and doc["error"]["code"] == "INTERNAL" and Path(doc["error"]["log"]).exists()


def test_crash_outside_a_repository_logs_to_user_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hermetic: Path
) -> None:
    def crash(args: Any, ctx: common.Context) -> int:
        raise RuntimeError("x")

    status, _, err = _run_boundary(crash, [], tmp_path, monkeypatch)
    log = Path(err.strip().rsplit("traceback in ", 1)[1])
    assert status == 4 and log.is_relative_to(Path(os.environ["XDG_STATE_HOME"]) / "git-agentops" / "log")


def test_interrupt_exits_130_and_refusal_uses_code_exit_status(
    repo_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(args: Any, ctx: common.Context) -> int:
        raise KeyboardInterrupt

    def refused(args: Any, ctx: common.Context) -> int:
        raise AgentOpsError("REF_CONFLICT", "lost the race")

    assert _run_boundary(interrupted, [], repo_path, monkeypatch)[:3:2] == (130, "error[INTERRUPTED]: interrupted\n")
    assert _run_boundary(refused, [], repo_path, monkeypatch)[:3:2] == (3, "error[REF_CONFLICT]: lost the race\n")


def test_doctor_healthy_in_a_repository(run_cli: Any, repo_path: Path) -> None:
    done = run_cli(_bin("doctor"), "--json", cwd=repo_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    documents.validate(report, "doctor-report")
    checks = {c["id"]: c for c in report["checks"]}
    assert report["healthy"] is True
    for check_id in (
        "python",
        "pygit2",
        "dulwich",
        "jsonschema",
        "tomli-w",
        "schemas",
        "git",
        "ssh-keygen",
        "repository",
        "common-dir",
        "fsync",
        "hooks",
    ):
        assert check_id in checks, check_id
    assert checks["common-dir"]["value"] == str((repo_path / ".git").resolve())
    assert checks["hooks"]["status"] == "warn" and checks["hooks"]["value"]["hooks"]["pre-commit"] == "missing"
    human = run_cli(_bin("doctor"), cwd=repo_path)
    assert human.returncode == 0 and human.stdout.rstrip().endswith("healthy")


def test_doctor_in_a_linked_worktree_reports_the_common_dir(run_cli: Any, repo_path: Path, tmp_path: Path) -> None:
    git(repo_path, "worktree", "add", "-q", str(tmp_path / "wt"), "-b", "side")
    report = json.loads(run_cli(_bin("doctor"), "--json", cwd=tmp_path / "wt").stdout)
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["common-dir"]["value"] == str((repo_path / ".git").resolve())
    assert checks["repository"]["value"] == str((tmp_path / "wt").resolve())


def test_doctor_outside_a_repository_warns_and_without_git_fails(run_cli: Any, tmp_path: Path) -> None:
    outside = run_cli(_bin("doctor"), "--json", cwd=tmp_path)
    report = json.loads(outside.stdout)
    assert outside.returncode == 0 and {c["id"]: c["status"] for c in report["checks"]}["repository"] == "warn"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    no_git = run_cli(sys.executable, _bin("doctor"), cwd=tmp_path, env={"PATH": str(bin_dir)})
    assert no_git.returncode == 1
    assert "FAIL  git" in no_git.stdout and "NOT healthy" in no_git.stdout


def test_doctor_reports_stale_ref_locks(run_cli: Any, repo_path: Path) -> None:
    lock = repo_path / ".git" / "refs" / "agentops" / "runs" / "r1" / "state.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    os.utime(lock, (1, 1))
    report = json.loads(run_cli(_bin("doctor"), "--json", cwd=repo_path).stdout)
    stale = [c for c in report["checks"] if c["id"] == "stale-locks"]
    assert stale and stale[0]["status"] == "warn" and stale[0]["value"] == [str(lock.resolve())]


@pytest.mark.parametrize("name", COMMANDS)
def test_source_checkout_launchers_work(run_cli: Any, repo_path: Path, name: str) -> None:
    launcher = Path(__file__).resolve().parents[2] / "bin" / f"git-agentops-{name}"
    done = run_cli(str(launcher), "--version", cwd=repo_path)
    assert done.returncode == 0 and f"git-agentops-{name} 0.1.0" in done.stdout


def test_doctor_is_healthy_without_the_optional_dulwich_and_jsonschema(repo_path: Path) -> None:
    """dulwich and jsonschema are test extras: without them the doctor says so and stays healthy."""
    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('dulwich', 'jsonschema'):\n"
        "            raise ImportError(f'{name} blocked by the test')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from pathlib import Path\n"
        "from git_agentops.diagnose.checks import diagnose\n"
        "report = diagnose(Path('.'), path=None)\n"
        "import json; print(json.dumps(report.to_json()))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=repo_path, capture_output=True, text=True, check=True)
    report = json.loads(done.stdout)
    checks = {c["id"]: c for c in report["checks"]}
    assert "optional" in checks["dulwich"]["detail"] and checks["dulwich"]["status"] == "ok"
    assert "optional" in checks["jsonschema"]["detail"] and checks["jsonschema"]["status"] == "ok"
    assert checks["schemas"]["status"] == "ok" and "not meta-validated" in checks["schemas"]["detail"]
