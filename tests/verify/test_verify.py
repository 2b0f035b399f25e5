"""git agentops-verify end to end: real commands, real evidence notes read back by the git CLI, the cache."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from git_agentops.schema import documents

from ..conftest import git
from ..helpers import toml
from ..runkit import command, trust

# the project a verification command runs: its skipped test is data, counted as skipped in the evidence
PYTEST_FILE = """
import pytest

def test_one(): assert True
def test_two(): assert True
@pytest.mark.skip(reason="later")
def test_three(): pass
"""


def _project(repo: Path, commands: str, *, extra_files: dict[str, str] | None = None) -> None:
    (repo / ".agentops").mkdir(exist_ok=True)
    (repo / ".agentops" / "policy.toml").write_text("version = 1\n" + commands)
    (repo / ".gitignore").write_text("__pycache__/\n.pytest_cache/\nreport.xml\n")
    for name, text in (extra_files or {}).items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "project")


def _trust(run_cli: Any, repo: Path) -> None:
    trust(repo)  # in this process (runkit.trust); the command as a process is tests/policy/test_trust.py's


def _verify(run_cli: Any, repo: Path, *args: str) -> tuple[int, dict[str, Any]]:
    """``git agentops-verify --json ARGS`` run in this process (``runkit.command``: the same verification, its
    commands real processes, without a fresh interpreter's imports); the human output, the exit statuses and the
    environment scrubbing are checked on the command as a process below (``run_cli``)."""
    done = command(repo, "agentops-verify", "--json", *args)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def _cmd(cid: str, argv: list[str], **extra: Any) -> str:
    return toml({"verify": {"commands": [{"id": cid, "argv": argv, **extra}]}})


def _evidence(repo: Path, rev: str = "HEAD") -> list[dict[str, Any]]:
    text = git(repo, "notes", "--ref=agentops/evidence", "show", rev)
    return [json.loads(line) for line in text.splitlines()]


def test_passing_run_parses_real_pytest_and_junit_counts_and_records_evidence(run_cli: Any, repo_path: Path) -> None:
    _project(
        repo_path,
        _cmd("tests", ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"], parser="pytest")
        + _cmd(
            "junit",
            ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml=report.xml"],
            parser="junit:report.xml",
        ),
        extra_files={"test_sample.py": PYTEST_FILE},
    )
    _trust(run_cli, repo_path)
    status, outcome = _verify(run_cli, repo_path)
    assert status == 0 and outcome["passed"] is True
    counts = {r["commandId"]: r["tests"] for r in outcome["results"]}
    assert counts["tests"] == {"passed": 2, "failed": 0, "skipped": 1, "errors": 0, "total": 3}
    assert counts["junit"] == counts["tests"]
    head, tree = git(repo_path, "rev-parse", "HEAD"), git(repo_path, "rev-parse", "HEAD^{tree}")
    records = _evidence(repo_path)  # readable by the git CLI
    assert [r["commandId"] for r in records] == ["tests", "junit"]
    for record in records:
        documents.validate(record, "evidence-record")
        assert record["commit"] == head and record["tree"] == tree and record["exitCode"] == 0
        assert len(record["outputDigest"]) == 64 and record["policyConfigHash"] and record["envDigest"]
        assert record["cached"] is False and record["startedAt"].endswith("Z")
    assert "2 passed, 1 skipped" in records[0]["tail"]


def test_failing_required_command_exits_1_and_optional_failure_does_not(run_cli: Any, repo_path: Path) -> None:
    _project(repo_path, _cmd("ok", ["true"]) + _cmd("flaky", ["false"], required=False))
    _trust(run_cli, repo_path)
    status, outcome = _verify(run_cli, repo_path)
    assert status == 0 and [r["passed"] for r in outcome["results"]] == [True, False]
    _project(repo_path, _cmd("ok", ["true"]) + _cmd("broken", ["sh", "-c", "echo boom >&2; exit 3"]))
    _trust(run_cli, repo_path)
    human = run_cli("git", "agentops-verify", cwd=repo_path)
    assert human.returncode == 1
    assert "broken: FAIL (exit 3)" in human.stdout and "boom" in human.stdout and "FAILED" in human.stdout
    assert _evidence(repo_path)[-1]["exitCode"] == 3


def test_failed_test_counts_fail_even_with_exit_zero(run_cli: Any, repo_path: Path) -> None:
    _project(repo_path, _cmd("tap", ["printf", "1..2\\nok 1\\nnot ok 2\\n"], parser="tap"))
    _trust(run_cli, repo_path)
    status, outcome = _verify(run_cli, repo_path)
    assert status == 1 and outcome["results"][0]["tests"]["failed"] == 1 and outcome["results"][0]["exitCode"] == 0


def test_timeout_with_a_sleeping_grandchild_ends_within_timeout_plus_grace(run_cli: Any, repo_path: Path) -> None:
    _project(repo_path, _cmd("hang", ["sh", "-c", "sleep 60 & sleep 60"], timeout=1))
    _trust(run_cli, repo_path)
    start = time.monotonic()
    status, outcome = _verify(run_cli, repo_path)
    elapsed = time.monotonic() - start
    assert status == 1 and outcome["results"][0]["timedOut"] is True
    assert elapsed < 1 + 3 + 2.5  # timeout + grace + process start-up margin


def test_dirty_checkout_is_refused_and_nothing_runs(run_cli: Any, repo_path: Path) -> None:
    _project(repo_path, _cmd("marker", ["touch", "RAN"]))
    _trust(run_cli, repo_path)
    for make_dirty, undo in (
        (lambda: (repo_path / "README.md").write_text("changed\n"), lambda: git(repo_path, "checkout", "README.md")),
        (lambda: (repo_path / "new.txt").write_text("untracked\n"), lambda: (repo_path / "new.txt").unlink()),
        (
            lambda: ((repo_path / "s.txt").write_text("s"), git(repo_path, "add", "s.txt")),
            lambda: (git(repo_path, "rm", "-q", "--cached", "s.txt"), (repo_path / "s.txt").unlink()),
        ),
    ):
        make_dirty()
        done = run_cli("git", "agentops-verify", cwd=repo_path)
        assert done.returncode == 3 and done.stderr.startswith("error[VERIFY_DIRTY]: "), done.stderr
        assert not (repo_path / "RAN").exists()
        undo()
    (repo_path / "ignored.log").write_text("x")  # ignored files do not count
    (repo_path / ".gitignore").write_text((repo_path / ".gitignore").read_text() + "*.log\nRAN\n")
    git(repo_path, "commit", "-qam", "ignore logs")
    assert run_cli("git", "agentops-verify", cwd=repo_path).returncode == 0


def test_a_command_that_modifies_tracked_files_records_nothing(run_cli: Any, repo_path: Path) -> None:
    _project(repo_path, _cmd("formatter", ["sh", "-c", "echo reformatted > README.md"]))
    _trust(run_cli, repo_path)
    done = run_cli("git", "agentops-verify", cwd=repo_path)
    assert done.returncode == 3 and "changed while verifying" in done.stderr
    assert git(repo_path, "notes", "--ref=agentops/evidence", "list", check=False) == ""


def test_huge_output_is_capped_and_digested_whole(run_cli: Any, repo_path: Path) -> None:
    script = "import sys\nfor i in range(300000): sys.stdout.write('line %06d of noise\\n' % i)\n"
    _project(repo_path, _cmd("noisy", ["python3", "noisy.py"]), extra_files={"noisy.py": script})
    _trust(run_cli, repo_path)
    status, outcome = _verify(run_cli, repo_path)
    record = outcome["results"][0]
    expected = "".join(f"line {i:06d} of noise\n" for i in range(300000)).encode()
    assert status == 0 and record["truncated"] is True and record["outputSize"] == len(expected) > 4 * 1024 * 1024
    assert record["outputDigest"] == hashlib.sha256(expected).hexdigest()
    assert len(record["tail"]) <= 4096 and record["tail"].endswith("line 299999 of noise\n")


def test_secret_in_output_is_redacted_in_the_stored_tail(run_cli: Any, repo_path: Path) -> None:
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    key = "AKIA" + "ABCDEFGHIJKLMNOP"
    _project(repo_path, _cmd("leaky", ["sh", "-c", f"echo token={token}; echo key {key}; echo done"]))
    _trust(run_cli, repo_path)
    _, outcome = _verify(run_cli, repo_path)
    tail = outcome["results"][0]["tail"]
    assert token not in tail and key not in tail and "[REDACTED:github-token]" in tail and "done" in tail
    stored = git(repo_path, "notes", "--ref=agentops/evidence", "show", "HEAD")
    assert token not in stored and key not in stored


def test_cache_hit_for_same_tree_on_another_commit_and_fresh_bypasses_it(run_cli: Any, repo_path: Path) -> None:
    _project(repo_path, _cmd("count", ["sh", "-c", "echo run >> ../runs.log"]))
    _trust(run_cli, repo_path)
    runs = repo_path.parent / "runs.log"
    first_commit = git(repo_path, "rev-parse", "HEAD")
    assert _verify(run_cli, repo_path)[0] == 0 and runs.read_text().count("run") == 1
    git(repo_path, "commit", "-q", "--allow-empty", "-m", "same tree, new commit")
    status, outcome = _verify(run_cli, repo_path)
    record = outcome["results"][0]
    assert status == 0 and record["cached"] is True and record["cachedFrom"] == first_commit
    assert runs.read_text().count("run") == 1  # not run again
    assert _evidence(repo_path)[0]["cached"] is True
    human = run_cli("git", "agentops-verify", cwd=repo_path)
    assert "PASS (cached)" in human.stdout
    _, fresh = _verify(run_cli, repo_path, "--fresh")
    assert fresh["results"][0]["cached"] is False and runs.read_text().count("run") == 2
    (repo_path / "README.md").write_text("new tree\n")
    git(repo_path, "commit", "-qam", "new tree")
    _, changed = _verify(run_cli, repo_path)
    assert changed["results"][0]["cached"] is False and runs.read_text().count("run") == 3


def test_cache_misses_when_the_environment_differs(run_cli: Any, repo_path: Path) -> None:
    _project(repo_path, _cmd("env", ["sh", "-c", "echo run >> ../env-runs.log"]))
    _trust(run_cli, repo_path)
    assert _verify(run_cli, repo_path)[0] == 0
    done = run_cli("git", "agentops-verify", "--json", cwd=repo_path, env={"LANG": "xx_XX.UTF-8"})
    assert json.loads(done.stdout)["results"][0]["cached"] is False
    secret = run_cli("git", "agentops-verify", "--json", cwd=repo_path, env={"MY_TOKEN": "not passed through"})
    assert json.loads(secret.stdout)["results"][0]["cached"] is True  # scrubbed away: same environment


def test_task_runners_run_for_criteria_and_unknown_runner_is_refused(run_cli: Any, repo_path: Path, store: Any) -> None:
    from git_agentops.gitstore.journal import Event, Journal
    from git_agentops.model.task import Criterion, new_task
    from git_agentops.runs import tasks as taskbook

    _project(
        repo_path,
        _cmd("unit", ["true"]) + '[[verify.runners]]\nid = "acceptance"\nargv = ["sh", "-c", "echo accepted"]\n',
    )
    _trust(run_cli, repo_path)
    good = new_task(
        "task-00000000-0000-4000-8000-00000000000a",
        title="T",
        intent="I",
        goal="G",
        criteria=[Criterion("c1", "works", runner="acceptance"), Criterion("c2", "reads well", review_only="style")],
    )
    bad = new_task(
        "task-00000000-0000-4000-8000-00000000000b",
        title="T",
        intent="I",
        goal="G",
        criteria=[Criterion("c1", "works", runner="smoke"), Criterion("c2", "x")],
    )
    journal = Journal(store, "refs/agentops/runs/r1/state")
    for task in (good, bad):
        journal.mutate(lambda change, t=task: taskbook.create(change, t), Event("TASK_PLANNED", "planned"))
    status, outcome = _verify(run_cli, repo_path, "--task", good.id)
    runner = outcome["results"][-1]
    assert status == 0 and runner["kind"] == "runner" and runner["criteria"] == ["c1"] and runner["taskId"] == good.id
    refused = run_cli("git", "agentops-verify", "--task", bad.id, cwd=repo_path)
    assert refused.returncode == 3 and "TASK_RUNNER_UNKNOWN" in refused.stderr
    missing = run_cli("git", "agentops-verify", "--task", "task-nope", cwd=repo_path)
    assert missing.returncode == 3 and "TASK_NOT_FOUND" in missing.stderr


def test_missing_junit_report_is_a_coded_parse_failure(run_cli: Any, repo_path: Path) -> None:
    _project(
        repo_path,
        _cmd("nojunit", ["true"], parser="junit:missing.xml")
        + _cmd("escape", ["true"], parser="junit:../../etc/passwd"),
    )
    _trust(run_cli, repo_path)
    status, outcome = _verify(run_cli, repo_path)
    errors = [r["parseError"] for r in outcome["results"]]
    assert status == 1 and errors[0].startswith("VERIFY_PARSE_FAILED") and errors[1].startswith("PATH_ESCAPE")


def test_policy_without_commands_and_command_that_cannot_start(run_cli: Any, repo_path: Path) -> None:
    _project(repo_path, "")
    _trust(run_cli, repo_path)
    empty = run_cli("git", "agentops-verify", cwd=repo_path)
    assert empty.returncode == 3 and "VERIFY_NO_COMMANDS" in empty.stderr
    _project(repo_path, _cmd("ghost", ["definitely-not-a-command-xyz"]))
    _trust(run_cli, repo_path)
    status, outcome = _verify(run_cli, repo_path)
    assert status == 1 and outcome["results"][0]["spawnError"] and outcome["results"][0]["exitCode"] is None


@pytest.mark.parametrize("where", ["unborn", "bare"])
def test_verify_without_a_commit_or_worktree(run_cli: Any, tmp_path: Path, where: str) -> None:
    repo = tmp_path / where
    git(tmp_path, "init", "-q", *(["--bare"] if where == "bare" else []), str(repo))
    done = run_cli("git", "agentops-verify", cwd=repo)
    assert done.returncode == 3
    assert ("VERIFY_NO_COMMIT" if where == "unborn" else "REPO_BARE") in done.stderr


@pytest.mark.parametrize("args", [(), ("--fresh",)], ids=["cache-hit", "fresh"])
def test_a_persons_verify_never_imports_pygit2(run_cli: Any, repo_path: Path, args: tuple[str, ...]) -> None:
    """Importing pygit2 alone costs more than the whole command may add to what it runs (bench/verify.py: 150 ms
    over the command, 200 ms for a cache hit), so a person's verification talks to git through plumbing only."""
    import subprocess
    import sys

    _project(repo_path, _cmd("noop", ["true"]))
    _trust(run_cli, repo_path)
    assert _verify(run_cli, repo_path)[0] == 0
    code = (
        "import sys\nfrom git_agentops.cli.verify import main\n"
        f"status = main({list(args)!r})\n"
        "print('LOADED', sorted(m for m in ('pygit2', 'jsonschema', 'dulwich') if m in sys.modules), status)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=repo_path, capture_output=True, text=True, check=False)
    assert done.stdout.splitlines()[-1] == "LOADED [] 0", done.stdout + done.stderr


LAZY_FOR_A_PERSON = (
    "tomllib",  # only a project with a pyproject.toml (the policy is read from its cache)
    "git_agentops.model.hosts",  # only a policy that has hosts
    "git_agentops.gitstore.clean",  # the supervisor's clean checkout
    "git_agentops.cli.env",  # the setup freshness check: only a policy with setup steps
    "git_agentops.verify.worker",  # the worker's own check: only in a worker's worktree
    "git_agentops.verify.parsers",  # only a command whose output is counted (parser other than "none")
)
LAZY_ON_A_CACHE_HIT = ("git_agentops.verify.slots",)  # only when a command runs


@pytest.mark.parametrize("args", [(), ("--fresh",)], ids=["cache-hit", "fresh"])
def test_a_persons_verify_imports_only_what_its_path_needs(
    run_cli: Any, repo_path: Path, args: tuple[str, ...]
) -> None:
    """What a person's verification of a policy without hosts or setup steps, in a project without a pyproject.toml,
    imports: never the modules of the paths it does not take (bench/verify.py's budget is mostly imports); a cache
    hit not even the slot or the output parsers."""
    import subprocess
    import sys

    _project(repo_path, _cmd("noop", ["true"]))
    _trust(run_cli, repo_path)
    assert _verify(run_cli, repo_path)[0] == 0
    unwanted = LAZY_FOR_A_PERSON + (LAZY_ON_A_CACHE_HIT if not args else ())
    code = (
        "import sys\nfrom git_agentops.cli.verify import main\n"
        f"status = main({list(args)!r})\n"
        f"print('LOADED', sorted(m for m in {unwanted!r} if m in sys.modules), status)"
    )
    for _ in range(2):  # the first records what this environment (not run_cli's) may reuse: the second is a hit
        done = subprocess.run([sys.executable, "-c", code], cwd=repo_path, capture_output=True, text=True, check=False)
    assert done.stdout.splitlines()[-1] == "LOADED [] 0", done.stdout + done.stderr
    assert ("PASS (cached)" in done.stdout) == (not args), done.stdout


def test_files_earlier_verifications_made_never_hide_dirt_listed_after_them(run_cli: Any, repo_path: Path) -> None:
    """A person's verify drops the untracked files its earlier runs made from what counts as dirt. With more than 50
    of them, a planted file listed after them was cut off before that filter and the dirty checkout verified."""
    _project(repo_path, _cmd("make", ["sh", "-c", "for i in $(seq 10 70); do echo x > made$i.txt; done"]))
    _trust(run_cli, repo_path)
    assert _verify(run_cli, repo_path)[0] == 0  # 61 files made, recorded as made by verification
    (repo_path / "zz_planted.py").write_text("planted\n")  # untracked, sorts after every made file
    done = run_cli("git", "agentops-verify", "--fresh", cwd=repo_path)
    assert done.returncode == 3 and "error[VERIFY_DIRTY]" in done.stderr and "zz_planted.py" in done.stderr
