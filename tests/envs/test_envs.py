"""Checkout environments: real venvs and real pip, offline.

Every test that builds a Python environment installs from a local wheelhouse only (``PIP_NO_INDEX=1``,
``PIP_FIND_LINKS``, no pip config file): the wheels are the test interpreter's own installed pytest and its
dependencies, repacked once per session from their ``RECORD``. That keeps the suite deterministic and independent
of the network and of the machine's pip cache (the hermetic HOME has none), at the price of ~1 s per session. The
projects build with a tiny in-tree PEP 517/660 backend (``backend-path``), so no build requirement has to be
downloaded either; the real-world backend (hatchling from PyPI) is what ``bench/verify.py`` measures.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from git_agentops.envs.pydeps import declared, filtered_requirements, installed_names, pinned_source, requirements_for
from git_agentops.envs.tools import program_status

from ..conftest import git, make_repo

BACKEND = '''"""A minimal PEP 517/660 backend: an editable wheel is a .pth naming src/."""
import base64, hashlib, os, zipfile

NAME, VERSION = "tinyproj", "0.1"
DIST = f"{NAME}-{VERSION}.dist-info"


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    files = {
        f"_{NAME}_editable.pth": os.path.abspath("src") + "\\n",
        f"{DIST}/METADATA": f"Metadata-Version: 2.1\\nName: {NAME}\\nVersion: {VERSION}\\n",
        f"{DIST}/WHEEL": "Wheel-Version: 1.0\\nGenerator: tiny\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
    }
    name = f"{NAME}-{VERSION}-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as archive:
        for path, text in files.items():
            data = text.encode()
            archive.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(data)}")
        archive.writestr(f"{DIST}/RECORD", "\\n".join(record + [f"{DIST}/RECORD,,"]) + "\\n")
    return name
'''

PYPROJECT = """[build-system]
requires = []
build-backend = "backend"
backend-path = ["_build"]

[project]
name = "tinyproj"
version = "0.1"
dependencies = []

[project.optional-dependencies]
test = ["pytest"]

[tool.pytest.ini_options]
testpaths = ["tests"]

[tool.ruff]
line-length = 100

[tool.mypy]
strict = true
"""


def _repack(name: str, wheelhouse: Path) -> None:
    """An installed distribution as a wheel again: every file its RECORD lists under site-packages."""
    dist = importlib.metadata.distribution(name)
    stem = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    record = []
    with zipfile.ZipFile(wheelhouse / f"{stem}-{dist.version}-py3-none-any.whl", "w") as archive:
        info_dir = None
        for file in dist.files or []:
            parts = file.parts
            if parts[0] == ".." or "__pycache__" in parts:
                continue
            if parts[0].endswith(".dist-info"):
                info_dir = parts[0]
                if parts[-1] in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json"):
                    continue
            data = Path(str(file.locate())).read_bytes()
            archive.writestr(file.as_posix(), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{file.as_posix()},sha256={digest},{len(data)}")
        assert info_dir is not None
        archive.writestr(f"{info_dir}/RECORD", "\n".join([*record, f"{info_dir}/RECORD,,"]) + "\n")


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pytest and what it needs on this interpreter, as wheels."""
    house = tmp_path_factory.mktemp("wheelhouse")
    todo, done = ["pytest"], set()
    while todo:
        name = todo.pop()
        if name in done:
            continue
        done.add(name)
        _repack(name, house)
        for spec in importlib.metadata.requires(name) or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name.lower())
    return house


@pytest.fixture
def offline(wheelhouse: Path) -> dict[str, str]:
    """The environment that makes pip install from the wheelhouse only."""
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse), "PIP_CONFIG_FILE": os.devnull}


def _project(path: Path, value: int = 1) -> Path:
    return make_repo(
        path,
        files={
            "pyproject.toml": PYPROJECT,
            "_build/backend.py": BACKEND,
            "src/tinyproj/__init__.py": f"VALUE = {value}\n",
            "tests/test_value.py": "import tinyproj\n\n\ndef test_value():\n    assert tinyproj.VALUE == 1\n",
        },
    )


def _env(run_cli: Any, cwd: Path, env: dict[str, str], *args: str) -> dict[str, Any]:
    done = run_cli("git", "agentops-env", "python", "--extra", "test", *args, "--json", cwd=cwd, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def _imported(checkout: Path) -> tuple[str, str]:
    python = checkout / ".agentops" / "venv" / "bin" / "python"
    code = "import tinyproj; print(tinyproj.VALUE, tinyproj.__file__)"
    out = subprocess.run([str(python), "-I", "-B", "-c", code], capture_output=True, text=True, check=True)
    value, where = out.stdout.split()
    return value, where


def test_base_is_built_once_each_worktree_imports_its_own_code_and_an_interrupted_base_is_rebuilt(
    run_cli: Any, tmp_path: Path, offline: dict[str, str]
) -> None:
    """Invariants: the base is built once and reused by every checkout of the repository, each of which imports
    its own code; a base left without its completion marker (what a kill -9 before the marker leaves behind) is
    deleted and built again. One test, one repository: the interrupted base is the one the first part built, so
    the suite builds it once for both."""
    repo = _project(tmp_path / "repo")
    git(repo, "checkout", "-q", "-b", "other")
    (repo / "src" / "tinyproj" / "__init__.py").write_text("VALUE = 2\n")
    git(repo, "commit", "-qam", "other code")
    git(repo, "checkout", "-q", "main")
    git(repo, "worktree", "add", "-q", str(tmp_path / "wt"), "other")
    first = _env(run_cli, repo, offline)
    marker = Path(first["base"]["path"]) / "agentops-complete.json"
    built = (marker.read_bytes(), marker.stat().st_mtime_ns, sorted(p.name for p in marker.parent.iterdir()))
    second = _env(run_cli, tmp_path / "wt", offline)
    assert first["base"]["reused"] is False and second["base"]["reused"] is True
    assert first["base"]["path"] == second["base"]["path"]
    assert Path(first["base"]["path"]).parent == (repo / ".git" / "agentops" / "envs").resolve()
    # the base is the expensive part and a checkout reuses it: untouched, not built again (timing it against the
    # first build flaked under a loaded CI: 4.2 s cold, 2.1 s warm)
    assert (marker.read_bytes(), marker.stat().st_mtime_ns, sorted(p.name for p in marker.parent.iterdir())) == built
    assert _imported(repo) == ("1", str((repo / "src" / "tinyproj" / "__init__.py").resolve()))
    assert _imported(tmp_path / "wt") == ("2", str((tmp_path / "wt" / "src" / "tinyproj" / "__init__.py").resolve()))
    assert first["packages"] == {"tinyproj": str((repo / "src" / "tinyproj" / "__init__.py").resolve())}
    # the project is not in the base: only the checkout's venv has it
    base_python = Path(first["base"]["path"]) / "bin" / "python"
    probe = subprocess.run([str(base_python), "-c", "import tinyproj"], capture_output=True, check=False)
    assert probe.returncode != 0
    again = _env(run_cli, repo, offline)
    assert again["noop"] is True
    assert (tmp_path / "wt" / ".agentops" / "venv" / "bin" / "pytest").exists()  # scripts twinned into the venv
    assert git(repo, "status", "--porcelain") == "" and git(tmp_path / "wt", "status", "--porcelain") == ""
    human = run_cli("git", "agentops-env", "python", "--extra", "test", cwd=tmp_path / "wt", env=offline)
    assert human.returncode == 0 and "nothing to do" in human.stdout and len(human.stdout.splitlines()) == 1
    # an interrupted base is deleted and rebuilt
    base = Path(first["base"]["path"])
    (base / "agentops-complete.json").unlink()  # what a kill -9 before the marker leaves behind
    (base / "half-written").write_text("junk")
    again = _env(run_cli, repo, offline)
    assert again["base"]["reused"] is False and again["noop"] is False
    assert (base / "agentops-complete.json").is_file() and not (base / "half-written").exists()
    assert _imported(repo)[0] == "1"


def test_init_policy_first_verify_passes_without_lint_tools(
    run_cli: Any, tmp_path: Path, offline: dict[str, str]
) -> None:
    """A src-layout project with ruff and mypy configured but not installed: init, commit, trust, run the setup
    once here as init says, verify -- and it passes, with ruff and mypy left commented out."""
    repo = _project(tmp_path / "repo")
    done = run_cli("git", "agentops-init", "--yes", cwd=repo, env=offline)
    assert done.returncode == 0, done.stderr
    assert (
        "setup ('git agentops-verify' runs it here on first use; workers' worktrees too): "
        "git agentops-env python --extra test" in done.stdout
    )
    text = (repo / ".agentops" / "policy.toml").read_text()
    assert "# [[verify.commands]]  # not enabled: ruff is not installed in .agentops/venv" in text
    assert "# [[verify.commands]]  # not enabled: mypy is not installed in .agentops/venv" in text
    check = run_cli("git", "agentops-policy", "check", cwd=repo)
    assert check.returncode == 0 and "warning" not in check.stdout, check.stdout
    git(repo, "add", ".agentops/policy.toml")
    git(repo, "commit", "-qm", "policy")
    assert run_cli("git", "agentops-policy", "trust", "--yes", cwd=repo).returncode == 0
    setup = run_cli("git", "agentops-env", "python", "--extra", "test", cwd=repo, env=offline, timeout=300)
    assert setup.returncode == 0, setup.stderr
    verify = run_cli("git", "agentops-verify", cwd=repo, timeout=300)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "tests: PASS, 1 passed" in verify.stdout


def test_missing_and_failing_tools_are_env_setup_failed(run_cli: Any, tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "repo",
        files={"package.json": '{"scripts": {"test": "jest"}}', "package-lock.json": "{}", "Cargo.toml": "[package]"},
    )
    bare = tmp_path / "bin"
    bare.mkdir()
    os.symlink(shutil.which("git") or "git", bare / "git")
    command = shutil.which("git-agentops-env")
    assert command is not None
    for sub, tool in (("node", "npm"), ("cargo", "cargo"), ("go", None)):
        done = run_cli(sys.executable, command, sub, cwd=repo, env={"PATH": str(bare)})
        assert done.returncode == 3, (sub, done.stderr)
        if tool is not None:
            assert f"error[ENV_SETUP_FAILED]: {tool} is not on PATH" in done.stderr
        else:
            assert "error[ENV_SETUP_FAILED]" in done.stderr and "no go.mod" in done.stderr
    not_python = run_cli("git", "agentops-env", "python", cwd=repo)
    assert not_python.returncode == 3 and "is not a Python project" in not_python.stderr
    (repo / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    missing_python = run_cli("git", "agentops-env", "python", "--python", str(tmp_path / "nope"), cwd=repo)
    assert missing_python.returncode == 3
    assert f"error[ENV_PYTHON_MISSING]: the interpreter {tmp_path / 'nope'} does not exist" in missing_python.stderr
    not_on_path = run_cli("git", "agentops-env", "python", "--python", "python3.0", cwd=repo)
    assert not_on_path.returncode == 3 and "the interpreter python3.0 is not on PATH" in not_on_path.stderr
    broken = tmp_path / "broken-python"
    broken.write_text("#!/bin/sh\necho 'cannot start' >&2\nexit 1\n")
    broken.chmod(0o755)
    failing_python = run_cli("git", "agentops-env", "python", "--python", str(broken), cwd=repo)
    assert failing_python.returncode == 3 and "error[ENV_SETUP_FAILED]" in failing_python.stderr
    assert "asking the interpreter its version" in failing_python.stderr and "cannot start" in failing_python.stderr
    (bare / "npm").write_text("#!/bin/sh\necho 'npm ERR! registry unreachable'\nexit 1\n")
    (bare / "npm").chmod(0o755)
    failed = run_cli(sys.executable, command, "node", "--json", cwd=repo, env={"PATH": str(bare)})
    error = json.loads(failed.stderr)["error"]
    assert failed.returncode == 3 and error["code"] == "ENV_SETUP_FAILED"
    assert "npm ci --prefer-offline" in error["message"] and "registry unreachable" in error["message"]


def _fake(bin_dir: Path, name: str, log: Path) -> None:
    """A stand-in for a package manager: records its argv and cwd (and npm's cache variable), then succeeds."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text(f'#!/bin/sh\necho "{name} $* | $PWD | ${{npm_config_cache:-}}" >> {log}\nmkdir -p node_modules\n')
    script.chmod(0o755)


def test_node_cargo_and_go_run_the_lockfile_tool_ci_style(run_cli: Any, tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    bin_dir = tmp_path / "bin"
    for name in ("npm", "pnpm", "yarn", "bun", "cargo", "go"):
        _fake(bin_dir, name, log)
    path = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    npm = make_repo(tmp_path / "npm", files={"package.json": "{}", "package-lock.json": "{}"})
    git(npm, "worktree", "add", "-q", str(tmp_path / "npm-wt"))
    assert run_cli("git", "agentops-env", "node", cwd=tmp_path / "npm-wt", env=path).returncode == 0
    again = run_cli("git", "agentops-env", "node", "--json", cwd=tmp_path / "npm-wt", env=path)
    assert json.loads(again.stdout)["noop"] is True  # same lockfile: nothing to do
    cases = {
        "pnpm": ({"package.json": "{}", "pnpm-lock.yaml": ""}, "node", "pnpm install --frozen-lockfile"),
        "yarn1": ({"package.json": "{}", "yarn.lock": "", ".yarnrc": ""}, "node", "yarn --version"),
        "berry": (
            {"package.json": '{"packageManager": "yarn@4.1.0"}', "yarn.lock": ""},
            "node",
            "yarn install --immutable",
        ),
        "bun": ({"package.json": "{}", "bun.lock": ""}, "node", "bun install --frozen-lockfile"),
        "cargo": ({"Cargo.toml": "[package]", "Cargo.lock": ""}, "cargo", "cargo fetch --locked"),
        "go": ({"go.mod": "module x\n"}, "go", "go mod download"),
    }
    for name, (files, sub, expected) in cases.items():
        repo = make_repo(tmp_path / name, files=files)
        done = run_cli("git", "agentops-env", sub, cwd=repo, env=path)
        assert done.returncode == 0, (name, done.stderr)
        assert expected in log.read_text(), (name, log.read_text())
    calls = log.read_text().splitlines()
    cache = (tmp_path / "npm" / ".git" / "agentops" / "envs" / "npm-cache").resolve()
    assert calls[0] == f"npm ci --prefer-offline --no-audit --no-fund | {(tmp_path / 'npm-wt').resolve()} | {cache}"
    assert len([c for c in calls if c.startswith("npm ")]) == 1
    assert "yarn install --frozen-lockfile" in log.read_text()  # the fake yarn --version says nothing: yarn 1


def test_policy_check_warns_about_missing_programs(run_cli: Any, repo_path: Path, tmp_path: Path) -> None:
    policy = (
        "version = 1\n"
        '[[verify.commands]]\nid = "tests"\nargv = [".agentops/venv/bin/python", "-m", "pytest"]\n'
        '[[verify.commands]]\nid = "lint"\nargv = ["agentops-no-such-linter", "check"]\n'
        '[[verify.commands]]\nid = "optional"\nargv = ["agentops-no-such-tool"]\nrequired = false\n'
        '[[verify.commands]]\nid = "script"\nargv = ["./missing.sh"]\n'
        '[[worktree.setup]]\nargv = ["git", "agentops-env", "python", "--extra", "test"]\n'
    )
    (repo_path / ".agentops").mkdir()
    (repo_path / ".agentops" / "policy.toml").write_text(policy)
    done = run_cli("git", "agentops-policy", "check", cwd=repo_path)
    assert done.returncode == 0, done.stdout
    warnings = [line for line in done.stdout.splitlines() if line.startswith("warning[")]
    assert warnings == [
        "warning[POLICY_PROGRAM_MISSING]: .agentops/policy.toml:7: $.verify.commands[1].argv[0]: "
        "agentops-no-such-linter is not on PATH",
        "warning[POLICY_PROGRAM_MISSING]: .agentops/policy.toml:14: $.verify.commands[3].argv[0]: "
        f"./missing.sh does not exist in {repo_path}",
    ]
    report = json.loads(run_cli("git", "agentops-policy", "check", "--json", cwd=repo_path).stdout)
    statuses = {p["id"]: p["status"] for p in report["programs"]}
    assert statuses == {"tests": "made by setup", "lint": "missing", "script": "missing"}
    assert [w["code"] for w in report["warnings"]] == ["POLICY_PROGRAM_MISSING"] * 2
    without_setup = policy.split("[[worktree.setup]]")[0]
    (repo_path / ".agentops" / "policy.toml").write_text(without_setup)
    alone = run_cli("git", "agentops-policy", "check", cwd=repo_path)
    assert alone.returncode == 0 and "no [[worktree.setup]] step runs it" in alone.stdout


# -- what a base installs, read from the project's files ----------------------------------------------------------


def test_dependency_sources_in_order_and_self_references_expanded(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / "requirements").mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        "[project]\nname = 'My_Proj'\ndependencies = ['click>=8']\n"
        "[project.optional-dependencies]\ntest = ['pytest']\ndev = ['my-proj[test]', 'ruff']\n"
        "[dependency-groups]\nlint = ['mypy', {include-group = 'more'}]\nmore = ['types-requests']\n"
        "dev = [{include-group = 'lint'}]\n"
    )
    decl = declared(root)
    assert requirements_for(decl, ["dev"]) == ["click>=8", "pytest", "ruff", "mypy", "types-requests"]
    assert {"pytest", "ruff", "mypy", "click"} <= installed_names(root, ["dev"])
    assert pinned_source(root, ["dev"], have=[]) is None
    (root / "requirements" / "tests.txt").write_text(
        "-e .\npytest==8.0 \\\n    --hash=sha256:abc\n-r base.txt\n./vendored\nidna==3.7  # pinned\n"
    )
    pinned = pinned_source(root, [], have=["uv"])
    assert pinned is not None and pinned.kind == "requirements" and pinned.file == root / "requirements" / "tests.txt"
    (root / "uv.lock").write_text("")
    for have in ([], ["uv"]):  # the project's lock comes first, whether or not uv is on PATH
        uv = pinned_source(root, ["dev", "test"], have=have)
        assert uv is not None and (uv.kind, uv.file) == ("uv", root / "uv.lock")
    assert filtered_requirements(root / "requirements" / "tests.txt") == [
        "pytest==8.0 --hash=sha256:abc",
        f"-r {(root / 'requirements' / 'base.txt').resolve()}",
        "idna==3.7",
    ]


def test_program_status_for_bare_names_and_setup_made_paths(tmp_path: Path) -> None:
    setup = [["git", "agentops-env", "python", "--venv", "env"]]
    assert program_status(["git"], root=tmp_path, path=os.environ["PATH"], setup_argvs=setup).status == "found"
    assert program_status(["env/bin/python"], root=tmp_path, path="", setup_argvs=setup).status == "made by setup"
    venv = program_status([".agentops/venv/bin/python"], root=tmp_path, path="", setup_argvs=setup)
    assert venv.status == "missing" and "no [[worktree.setup]] step" in venv.detail


def test_src_layout_editable_from_main_a_broken_change_is_refused_and_a_correct_one_delivered(
    run_cli: Any, tmp_path: Path, wheelhouse: Path
) -> None:
    """Invariant: with the policy init writes, every checkout verifies its own code -- even when the person's
    virtualenv has the project installed editable from the main checkout (the set-up that published a breaking
    change before). Attempt 1 breaks the tests in the worker's code (refused ``RUN_VERIFICATION_FAILED``), attempt 2
    is correct and is delivered and published."""
    import site

    from ..helpers import HANDOFF, child, commit_step, write_step
    from ..runkit import events, recipe, start, stop, wait_for

    repo = _project(tmp_path / "repo")
    (repo / ".gitignore").write_text("__pycache__/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore caches")
    user_venv = tmp_path / "uservenv"  # the person's virtualenv: tinyproj "editable" from the main checkout
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(user_venv)], check=True)
    (site_packages,) = (user_venv / "lib").glob("python*/site-packages")
    ours = next(p for p in site.getsitepackages() if Path(p).is_dir())
    (site_packages / "_tinyproj_editable.pth").write_text(f"{repo / 'src'}\n{ours}\n")
    os.environ["PATH"] = os.pathsep.join([str(user_venv / "bin"), os.environ["PATH"]])  # the test's HOME is its own
    pip_conf = Path(os.environ["HOME"]) / ".config" / "pip" / "pip.conf"  # how a person points pip at a mirror
    pip_conf.parent.mkdir(parents=True, exist_ok=True)
    mirror = Path(os.environ["HOME"]) / "wheels"  # in HOME: setup runs confined, with a /tmp of its own
    shutil.copytree(wheelhouse, mirror)
    pip_conf.write_text(f"[global]\nno-index = true\nfind-links = {mirror}\n")
    assert run_cli("git", "agentops-init", "--yes", cwd=repo).returncode == 0
    git(repo, "add", ".agentops/policy.toml")
    git(repo, "commit", "-qm", "policy")
    assert run_cli("git", "agentops-policy", "trust", "--yes", cwd=repo).returncode == 0
    new_test = "import tinyproj\n\n\ndef test_double():\n    assert tinyproj.double(2) == 4\n"
    attempts = [
        [write_step("src/tinyproj/__init__.py", "VALUE = 2\n"), commit_step("break VALUE"), HANDOFF],
        [
            write_step("src/tinyproj/__init__.py", "VALUE = 1\n\n\ndef double(x):\n    return 2 * x\n"),
            write_step("tests/test_double.py", new_test),
            commit_step("add double"),
            HANDOFF,
        ],
    ]
    run_id = start(repo, recipe(tmp_path, child("double", "Add double", attempts), finalize=True))
    try:
        doc = wait_for(repo, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=240)
    finally:
        stop(repo, run_id)
    assert doc["status"] == "complete", doc
    refused = [e["data"] for e in events(repo, run_id) if e["code"] == "REQUEST_REFUSED"]
    assert [r["code"] for r in refused] == ["RUN_VERIFICATION_FAILED"], refused
    assert git(repo, "show", "main:src/tinyproj/__init__.py").startswith("VALUE = 1")
    assert git(repo, "show", "main:tests/test_double.py") == new_test.rstrip("\n")
