"""``git agentops-init`` on fixture projects shaped like real ones, then ``git agentops-verify``.

Each project under ``tests/fixtures/projects/`` carries its own CI workflow, and the starter policy must run what
that workflow runs: one command per test suite (never a suite twice), every lint, format and type tool it runs,
each enabled only when the policy's setup installs it and otherwise commented out with the fix, and the right
parser for each. The tests read each workflow's ``run:`` lines themselves (PyYAML, no help from the code under
test) and map every line, by hand, to the policy commands that stand for it; a line or a command missing from the
map fails the test.

The projects, shaped like the four real ones this was tried on and two more:

* ``srclib`` -- a src-layout library with ``uv.lock`` and PEP 735 groups (``tests``, ``typing``, ``dev``,
  ``pre-commit``), tox in pyproject.toml and pre-commit, CI through ``uv run tox`` (pallets/flask);
* ``flatpkg`` -- a flat layout with tox.ini, a Makefile and unittest, CI through tox (Python-Markdown);
* ``node-esm`` -- an ESM package with package-lock.json, ``node --test`` and a ``check`` script (eslint, prettier,
  tsc) whose tools the package does not declare;
* ``bigsrc`` -- a larger src-layout project with Makefile ``test`` and ``check`` (ruff, mypy, stubtest), nox and
  pre-commit that name the same tools again, and a pytest JUnit report;
* ``gomod`` -- a Go module with no dependencies (vet, gofmt, test);
* ``rustcrate`` -- a Rust crate with no dependencies (fmt, clippy, test).

Python projects install offline from a wheelhouse of this interpreter's own packages (see ``tests/envs/test_envs.py``);
they build with an in-tree backend, so no build requirement is downloaded.
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
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..conftest import git

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "projects"
WHEELS = ("pytest", "ruff", "markdown-it-py", "pyyaml")


def _repack(name: str, house: Path) -> None:
    """An installed distribution as a wheel again; files installed outside site-packages (ruff's binary in
    ``bin/``) go back into the wheel's ``.data/scripts``."""
    dist = importlib.metadata.distribution(name)
    stem = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    record, info_dir = [], None
    with zipfile.ZipFile(house / f"{stem}-{dist.version}-py3-none-any.whl", "w") as archive:
        for file in dist.files or []:
            parts = file.parts
            if "__pycache__" in parts:
                continue
            if parts[0] == "..":
                if "bin" not in parts:
                    continue
                target = f"{stem}-{dist.version}.data/scripts/{parts[-1]}"
            else:
                target = file.as_posix()
            if parts[0].endswith(".dist-info"):
                info_dir = parts[0]
                if parts[-1] in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json"):
                    continue
            source = Path(str(file.locate()))
            if parts[0] == ".." and source.read_bytes()[:2] == b"#!":
                continue  # a console script pip writes again from entry_points.txt
            data = source.read_bytes()
            info = zipfile.ZipInfo(target)
            info.external_attr = (0o100000 | (source.stat().st_mode & 0o777)) << 16  # a regular file, its mode
            archive.writestr(info, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{target},sha256={digest},{len(data)}")
        assert info_dir is not None
        archive.writestr(f"{info_dir}/RECORD", "\n".join([*record, f"{info_dir}/RECORD,,"]) + "\n")


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixtures' Python dependencies, from this interpreter's installed packages, as wheels."""
    from packaging.requirements import Requirement

    house = tmp_path_factory.mktemp("starter-wheelhouse")
    todo, done = list(WHEELS), set()
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


def _rust_bin(tmp_path: Path) -> str | None:
    """A directory of the Rust toolchain's own programs when ``cargo`` on PATH is a rustup proxy (which cannot
    find its toolchains under the tests' temporary HOME); None when cargo is a plain install (Debian's)."""
    cargo = shutil.which("cargo")
    if cargo is None or not (Path(cargo).parent / "rustup").exists():
        return None
    cargo_home = Path(cargo).parent.parent  # ~/.cargo/bin/cargo; rustup's own default home is ~/.rustup beside it
    real = cargo_home / "bin"
    env = {**os.environ, "RUSTUP_HOME": str(cargo_home.parent / ".rustup"), "CARGO_HOME": str(cargo_home)}
    folder = tmp_path / "rust-bin"
    folder.mkdir()
    for program in ("cargo", "rustc", "rustdoc", "cargo-clippy", "clippy-driver", "cargo-fmt", "rustfmt"):
        done = subprocess.run(
            [str(real / "rustup"), "which", program], capture_output=True, text=True, env=env, check=False, timeout=60
        )
        assert done.returncode == 0 or program not in ("cargo", "rustc"), done.stderr
        if done.returncode == 0:
            (folder / program).symlink_to(done.stdout.strip())
    return str(folder)


@dataclass(frozen=True)
class Expect:
    """What init must propose for one fixture, and what its first verification must report."""

    setup: list[list[str]]
    enabled: dict[str, list[str] | str]  # id -> argv
    disabled: dict[str, str]  # id -> the fix the reason must name
    ci: dict[str, list[str]]  # each run: line of the fixture's workflows -> the policy ids that stand for it
    parsers: dict[str, str] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # id -> expected test counts


VENV_PY = [".agentops/venv/bin/python", "-m"]
EXPECT: dict[str, Expect] = {
    "srclib": Expect(
        setup=[["git", "agentops-env", "python", "--group", "tests", "--group", "dev"]],
        enabled={
            "tests": [*VENV_PY, "pytest", "-q"],
            "lint": [*VENV_PY, "ruff", "check", "--no-fix"],  # [tool.ruff] fix = true must not rewrite the checkout
            "format": [*VENV_PY, "ruff", "format", "--check"],
        },
        disabled={"types": 'add "--group typing" to the setup step'},
        ci={
            "uv run --locked tox run -e py${{ matrix.python }}": ["tests"],
            "uv run --locked tox run -e typing": ["types"],
            "uv run --locked --group pre-commit pre-commit run --all-files": ["lint", "format"],
        },
        parsers={"tests": "pytest"},
        counts={"tests": {"passed": 4, "failed": 0, "skipped": 0}},
    ),
    "flatpkg": Expect(
        setup=[["git", "agentops-env", "python", "--extra", "testing"]],
        enabled={"tests": [*VENV_PY, "unittest", "discover", "tests"]},  # coverage run -m unittest, unwrapped
        disabled={"lint": 'add "--with flake8" to the setup step', "lint-codespell": '"--with codespell"'},
        ci={
            "python -m pip install --upgrade pip tox\n": [],
            "python -m pip install --upgrade pip tox": [],
            "python -m tox -e ${{ matrix.tox-env }}": ["tests", "lint", "lint-codespell"],
        },
        parsers={"tests": "unittest"},
        counts={"tests": {"passed": 5, "failed": 0, "skipped": 0}},
    ),
    "node-esm": Expect(
        setup=[["git", "agentops-env", "node"]],
        enabled={"tests": ["npm", "run", "--silent", "test"]},
        disabled={"check": "npm install -D eslint prettier typescript"},
        ci={"npm ci": [], "npm test": ["tests"], "npm run check": ["check"]},
        parsers={"tests": "tap"},
        counts={"tests": {"passed": 4, "failed": 0, "skipped": 1}},
    ),
    "bigsrc": Expect(
        setup=[["git", "agentops-env", "python", "--extra", "test", "--group", "dev"]],
        enabled={
            "tests": 'PATH="$PWD/.agentops/venv/bin:$PATH" make test',
            "lint": [*VENV_PY, "ruff", "check", "--no-fix", "src", "tests"],
        },
        disabled={"types": 'add "--group typing"', "types-stubtest": 'add "--group typing"'},
        ci={
            "python -m pip install --upgrade pip\npython -m pip install -e '.[test]'\n": [],
            "make test": ["tests"],
            "python -m pip install -e . --group dev --group typing": [],
            "make check": ["lint", "types", "types-stubtest"],
        },
        parsers={"tests": "junit:build/junit.xml"},
        counts={"tests": {"passed": 32, "failed": 0, "skipped": 1}},
    ),
    "gomod": Expect(
        setup=[["git", "agentops-env", "go"]],
        enabled={
            "go-test": ["go", "test", "-count=1", "./..."],
            "go-vet": ["go", "vet", "./..."],
            "gofmt": 'test -z "$(gofmt -l .)"',
        },
        disabled={},
        ci={"go vet ./...": ["go-vet"], 'test -z "$(gofmt -l .)"': ["gofmt"], "go test -count=1 ./...": ["go-test"]},
    ),
    "rustcrate": Expect(
        setup=[["git", "agentops-env", "cargo"]],
        enabled={
            "cargo-test": ["cargo", "test", "--locked"],
            "cargo-clippy": ["cargo", "clippy", "--all-targets", "--", "-D", "warnings"],
            "cargo-fmt": ["cargo", "fmt", "--all", "--", "--check"],
        },
        disabled={},
        ci={
            "cargo fmt --all -- --check": ["cargo-fmt"],
            "cargo clippy --all-targets -- -D warnings": ["cargo-clippy"],
            "cargo test --locked": ["cargo-test"],
        },
    ),
}


def _ci_lines(root: Path) -> list[str]:
    """Every ``run:`` of the project's GitHub workflows, as written."""
    lines = []
    for path in sorted((root / ".github" / "workflows").glob("*.y*ml")):
        for job in yaml.safe_load(path.read_text())["jobs"].values():
            lines += [step["run"] for step in job["steps"] if "run" in step]
    return lines


REWRITES = frozenset({"--fix", "--write", "-w", "--write-changes", "--unsafe-fixes", "--in-place", "-i"})
"""Options that make a tool rewrite files (ruff, prettier, codespell, autopep8...): never in a verification."""


def _checkout(name: str, tmp_path: Path) -> Path:
    repo = tmp_path / name
    shutil.copytree(FIXTURES / name, repo, ignore=shutil.ignore_patterns("__pycache__", ".ruff_cache", "target"))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"{name} as published")
    return repo


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_init_proposes_what_ci_runs_and_the_first_verify_passes(
    name: str, run_cli: Any, tmp_path: Path, wheelhouse: Path
) -> None:
    expect = EXPECT[name]
    repo = _checkout(name, tmp_path)
    env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse), "PIP_CONFIG_FILE": os.devnull}
    rust = _rust_bin(tmp_path)
    if rust is not None:
        env["PATH"] = f"{rust}{os.pathsep}{os.environ['PATH']}"

    plan_run = run_cli("git", "agentops-init", "--dry-run", "--json", cwd=repo, env=env)
    assert plan_run.returncode == 0, plan_run.stderr
    plan = json.loads(plan_run.stdout)
    assert plan["setup"] == expect.setup
    assert {d["id"]: d["argv"] for d in plan["detected"]} == expect.enabled
    assert {d["id"] for d in plan["disabled"]} == set(expect.disabled)
    for off in plan["disabled"]:
        assert expect.disabled[off["id"]] in off["reason"], off
    for ident, parser in expect.parsers.items():
        assert next(d for d in plan["detected"] if d["id"] == ident)["parser"] == parser
    for proposed in (*plan["detected"], *plan["disabled"]):  # a verification checks; it never rewrites the checkout
        assert not REWRITES.intersection(proposed["argv"] if isinstance(proposed["argv"], list) else []), proposed

    # the policy's commands are what the project's own CI runs: every run: line maps to the commands standing for
    # it, and every command stands for one of them
    ci = _ci_lines(repo)
    assert set(ci) == set(expect.ci), "the fixture's workflows changed: map each run: line by hand"
    every = {d["id"] for d in plan["detected"]} | {d["id"] for d in plan["disabled"]}
    assert {ident for ids in expect.ci.values() for ident in ids} == every

    done = run_cli("git", "agentops-init", "--yes", cwd=repo, env=env)
    assert done.returncode == 0, done.stderr
    git(repo, "add", ".agentops/policy.toml")
    git(repo, "commit", "-q", "-m", "policy from git agentops-init")
    trusted = run_cli("git", "agentops-policy", "trust", "--yes", cwd=repo, env=env)
    assert trusted.returncode == 0, trusted.stderr
    # no manual step: verify makes the environment the policy's setup describes, then verifies
    verify = run_cli("git", "agentops-verify", "--json", cwd=repo, env=env, timeout=900)
    assert verify.returncode == 0, verify.stdout[-6000:] + verify.stderr[-3000:]
    report = json.loads(verify.stdout)
    records = {r["commandId"]: r for r in report["results"]}
    assert set(records) == set(expect.enabled)
    assert all(r["passed"] for r in records.values())
    for ident, counts in expect.counts.items():
        tests = records[ident]["tests"]
        assert {k: tests[k] for k in counts} == counts, tests
    assert git(repo, "status", "--porcelain") == ""  # check mode: nothing was rewritten
