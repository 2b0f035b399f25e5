"""The first ``git agentops-verify`` after ``init`` makes the checkout's environment itself (issue 25 item 5).

Real venvs and real pip, offline from the wheelhouse of ``test_envs.py``. The wheelhouse reaches pip through a
``pip.conf`` in the test's HOME -- how a person points pip at a mirror -- because verification gives setup the
variables a run's setup gets, which do not include ``PIP_*``.
"""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from ..conftest import git, make_repo
from ..envs import test_envs
from ..envs.test_envs import _project

wheelhouse = test_envs.wheelhouse  # its fixture: pytest and its dependencies as wheels

POLICY_TESTS = (
    '[[verify.commands]]\nid = "tests"\nargv = [".agentops/venv/bin/python", "-m", "pytest", "-q"]\n'
    'parser = "pytest"\ntimeout = 300\n'
)


def _pip_from(wheelhouse: Path) -> None:
    conf = Path(os.environ["HOME"]) / ".config" / "pip" / "pip.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(f"[global]\nno-index = true\nfind-links = {wheelhouse}\n")


def _adopt(run_cli: Any, repo: Path, policy: str | None = None) -> None:
    """init (or a policy written by hand), commit it, trust it: what a newcomer does before the first verify."""
    if policy is None:
        done = run_cli("git", "agentops-init", "--yes", cwd=repo)
        assert done.returncode == 0, done.stderr
    else:
        (repo / ".agentops").mkdir(exist_ok=True)
        (repo / ".agentops" / "policy.toml").write_text("version = 1\n" + policy)
    git(repo, "add", ".agentops/policy.toml")
    git(repo, "commit", "-qm", "policy")
    trusted = run_cli("git", "agentops-policy", "trust", "--yes", cwd=repo)
    assert trusted.returncode == 0, trusted.stderr


def _on_a_terminal(argv: list[str], cwd: Path, timeout: float = 600) -> tuple[int, str, str]:
    """Run ``argv`` with its stderr on a pseudo-terminal (stdout a pipe); its exit status, stdout and stderr."""
    main, secondary = pty.openpty()
    with open(os.devnull, "rb") as stdin:
        process = subprocess.Popen(argv, cwd=cwd, stdin=stdin, stdout=subprocess.PIPE, stderr=secondary)
    os.close(secondary)
    seen = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # EIO: every writer of the terminal is gone
                    break
                if not chunk:
                    break
                seen += chunk
            elif process.poll() is not None:
                break
        assert process.stdout is not None
        out = process.stdout.read().decode()
        status = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(main)
        if process.poll() is None:
            process.kill()
            process.wait()
    return status, out, seen.decode(errors="replace").replace("\r\n", "\n")


def test_the_first_verify_after_init_makes_the_environment_with_progress_then_reuses_it(
    run_cli: Any, tmp_path: Path, wheelhouse: Path
) -> None:
    repo = _project(tmp_path / "repo")
    _pip_from(wheelhouse)
    _adopt(run_cli, repo)
    assert not (repo / ".agentops" / "venv").exists()
    verify = shutil.which("git-agentops-verify")
    assert verify is not None
    status, out, terminal = _on_a_terminal([verify], repo)
    assert status == 0, out + terminal
    assert "setup 0: " in terminal and ".agentops/venv does not exist; making it (git agentops-env python" in terminal
    assert "building the shared base environment python-" in terminal
    assert "installing the project editable" not in terminal  # pip's own words stay in pip's output
    assert "making " in terminal and "tests: PASS" in terminal
    assert out.startswith("PASSED: ")  # on a terminal stdout says the verdict; progress went to stderr
    assert ".agentops" not in git(repo, "status", "--porcelain")  # the venv is excluded: the checkout is not dirty
    # without a terminal: quiet on stderr, what was made is in the output, and --json names it
    shutil.rmtree(repo / ".agentops" / "venv")
    again = run_cli("git", "agentops-verify", "--json", cwd=repo, timeout=600)
    assert again.returncode == 0, again.stderr
    assert again.stderr == ""
    doc = json.loads(again.stdout)
    (made,) = doc["setup"]
    assert made["step"] == 0 and made["why"].endswith(".agentops/venv does not exist")
    assert made["base"]["reused"] is True and made["venv"] == str((repo / ".agentops" / "venv").resolve())
    ready = run_cli("git", "agentops-verify", cwd=repo, timeout=600)
    assert ready.returncode == 0 and "setup" not in ready.stdout, ready.stdout  # nothing missing, nothing made
    # a commit that changes the declared dependencies makes the environment stale: the next verify remakes it
    pyproject = (repo / "pyproject.toml").read_text().replace('test = ["pytest"]', 'test = ["pytest"]\ndocs = []')
    (repo / "pyproject.toml").write_text(pyproject)
    git(repo, "commit", "-qam", "a docs extra")
    stale = run_cli("git", "agentops-verify", cwd=repo, timeout=600)
    assert stale.returncode == 0, stale.stdout + stale.stderr
    assert "setup 0: " in stale.stdout and "is stale: the lockfile, pyproject.toml's dependencies" in stale.stdout
    assert "tests: PASS" in stale.stdout


def test_an_environment_setup_cannot_make_is_a_coded_error_naming_the_step_and_the_fix(
    run_cli: Any, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", files={"pyproject.toml": "[project]\nname = 'p'\n", "p/__init__.py": ""})
    missing = tmp_path / "no-such-python"
    setup = f'[[worktree.setup]]\nargv = ["git", "agentops-env", "python", "--python", "{missing}"]\n'
    _adopt(run_cli, repo, POLICY_TESTS + setup)
    done = run_cli("git", "agentops-verify", cwd=repo)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.startswith(
        "error[ENV_PYTHON_MISSING]: verification needs the environment the policy's setup step 0 makes "
        f"({(repo / '.agentops' / 'venv').resolve()} does not exist), and 'git agentops-env python --python {missing}' "
        f"could not make it: the interpreter {missing} does not exist: install it, or name one"
    ), done.stderr
    assert "notesCommit" not in done.stdout and git(repo, "notes", "--ref=agentops/evidence", "list") == ""


def test_commands_that_run_an_environment_nothing_makes_say_so_and_name_the_setup_step(
    run_cli: Any, tmp_path: Path
) -> None:
    """The newcomer's message was 'cannot ask .../.agentops/venv/bin/python where the project's packages are (exit
    None): ' -- nothing after the colon. The environment does not exist, and that is what it says now."""
    repo = make_repo(tmp_path / "repo", files={"pyproject.toml": "[project]\nname = 'p'\n", "p/__init__.py": ""})
    _adopt(run_cli, repo, POLICY_TESTS)
    done = run_cli("git", "agentops-verify", cwd=repo)
    assert done.returncode == 3, done.stdout + done.stderr
    python = repo / ".agentops" / "venv" / "bin" / "python"
    assert done.stderr.startswith(
        f"error[VERIFY_ENV_MISSING]: the verification commands run {python.resolve()}, which does not exist: the "
        f"environment .agentops/venv has not been made in {repo}. Fix: give the policy the setup step that makes it "
        '-- [[worktree.setup]] argv = ["git", "agentops-env", "python"] -- which git agentops-verify and every run '
        "then run themselves, or run 'git agentops-env python' here once"
    ), done.stderr
    assert "exit None" not in done.stderr
