"""Verification tests the commit's own code: a pre-flight asks the commands' interpreter where the project's packages
resolve, and refuses (``VERIFY_ENV_OUTSIDE``) when it is outside the checkout -- the editable install from the main
checkout that made a worker's evidence describe the main checkout's code."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path

from ..conftest import git, make_repo
from ..helpers import HANDOFF, child, commit_step, write_step
from ..runkit import events, recipe, stop, wait_for

PYPROJECT = """[project]
name = "mylib"
version = "1.0"
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"
[tool.pytest.ini_options]
testpaths = ["tests"]
"""
GOOD = 'def greet():\n    return "hello"\n'
TEST = "from mylib import greet\n\n\ndef test_greet():\n    assert greet() == 'hello'\n"
POLICY = """version = 1
[run]
target = "main"
[[verify.commands]]
id = "tests"
argv = ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
parser = "pytest"
timeout = 120
"""


def _editable_from_main(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A src-layout project and the user's virtualenv with it installed "editable" from the main checkout."""
    repo = make_repo(
        tmp_path / "repo",
        files={
            "pyproject.toml": PYPROJECT,
            "src/mylib/__init__.py": GOOD,
            "tests/test_greet.py": TEST,
            ".gitignore": "__pycache__/\n",
            ".agentops/policy.toml": POLICY,
        },
    )
    venv = tmp_path / "uservenv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site_packages,) = (venv / "lib").glob("python*/site-packages")
    ours = next(p for p in site.getsitepackages() if Path(p).is_dir())  # where this suite's pytest lives
    (site_packages / "__editable__.mylib.pth").write_text(f"{repo / 'src'}\n{ours}\n")
    env = {**os.environ, "PATH": os.pathsep.join([str(venv / "bin"), os.environ["PATH"]])}
    done = subprocess.run(
        ["git", "agentops-policy", "trust", "--yes"], cwd=repo, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return repo, env


def _verify(cwd: Path, env: dict[str, str]) -> tuple[int, dict[str, object]]:
    done = subprocess.run(
        ["git", "agentops-verify", "--json"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    return done.returncode, json.loads(done.stdout or done.stderr)


def test_a_worktree_whose_package_resolves_to_the_main_checkout_is_refused(tmp_path: Path) -> None:
    repo, env = _editable_from_main(tmp_path)
    worktree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "side", str(worktree))
    (worktree / "src" / "mylib" / "__init__.py").write_text('def greet():\n    return "BROKEN"\n')
    git(worktree, "commit", "-qam", "break greet")
    code, doc = _verify(worktree, env)
    assert code == 3
    error = doc["error"]  # type: ignore[index]
    assert error["code"] == "VERIFY_ENV_OUTSIDE"
    assert "mylib resolves to" in error["message"] and str(repo / "src" / "mylib") in error["message"]
    assert git(worktree, "notes", "--ref=agentops/evidence", "list", "HEAD", check=False) == ""  # nothing recorded


def test_a_handoff_verified_against_the_main_checkout_is_refused_not_delivered(tmp_path: Path) -> None:
    """Before: the worker's broken jsonify 'passed' because the tests imported the main checkout's code."""
    repo, env = _editable_from_main(tmp_path)
    broken = child(
        "break",
        "Break greet",
        [[write_step("src/mylib/__init__.py", 'def greet():\n    return "BROKEN"\n'), commit_step("break"), HANDOFF]],
    )
    done = subprocess.run(
        [
            "git",
            "agentops-run",
            "start",
            "--goal",
            "x",
            "--recipe",
            str(recipe(tmp_path, broken)),
            "--detach",
            "--json",
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["runId"]
    try:
        doc = wait_for(
            repo, run_id, lambda d: any(t["status"] == "blocked" for t in d["tasks"] if t["parent"]), timeout=120
        )
    finally:
        stop(repo, run_id)
    refused = [e["data"]["code"] for e in events(repo, run_id) if e["code"] == "REQUEST_REFUSED"]
    assert "VERIFY_ENV_OUTSIDE" in refused
    assert not [t for t in doc["tasks"] if t["parent"] and t["status"] == "delivered"]


def test_in_the_main_checkout_the_code_is_its_own_the_environment_is_recorded_and_a_pass_reused_only_in_it(
    tmp_path: Path,
) -> None:
    """Invariants: in the main checkout the editable install is the checkout's own code, so verification runs and
    records the environment (lockfile and installed-set digests); reuse of a passing result by tree requires the
    same environment digest (lockfile, interpreter, installed set). One repository: the first verification of the
    second invariant is the one the first describes."""
    repo, env = _editable_from_main(tmp_path)
    code, doc = _verify(repo, env)
    assert code == 0, doc
    record = doc["results"][0]  # type: ignore[index]
    assert record["environment"]["lockDigest"] and record["environment"]["installedDigest"]
    assert record["tests"]["passed"] == 1
    git(repo, "commit", "-q", "--allow-empty", "-m", "same tree, new commit")
    code, doc = _verify(repo, env)
    assert code == 0 and doc["results"][0]["cached"] is True  # type: ignore[index]
    (site_packages,) = (tmp_path / "uservenv" / "lib").glob("python*/site-packages")
    extra = site_packages / "newdep-2.0.dist-info"
    extra.mkdir()
    (extra / "METADATA").write_text("Metadata-Version: 2.1\nName: newdep\nVersion: 2.0\n")
    git(repo, "commit", "-q", "--allow-empty", "-m", "same tree again")
    code, doc = _verify(repo, env)
    assert code == 0 and doc["results"][0]["cached"] is False  # type: ignore[index]  # a new dependency: re-run
