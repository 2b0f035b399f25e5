#!/usr/bin/env python3
"""Benchmark of a worker's workspace being "ready at once": seconds until ready and extra disk, against the plain
``git worktree add`` + setup a person runs, side by side in one run.

The issue's target: creating a worker's workspace (worktree, dependency environment, ``node_modules``) on a
20k-file project with a warm cache costs at most 10 s and at most 200 MB of extra disk -- shared bases reused
read-only, dependency trees hard-linked or reflinked rather than copied.

The project (:func:`generate`) is a generated repository of ``--files`` tracked files (default 20,000): a src-layout
Python package whose ``pyproject.toml`` declares five runtime dependencies and a ``test`` extra (pytest), pinned by
a ``requirements-dev.txt`` lockfile -- the pinned form ``git agentops-env python`` follows with pip alone, no uv --
and a Node package whose ``package-lock.json`` npm itself writes for a few small real dependencies (lodash, semver,
ms, kleur, is-number, left-pad); around them, generated Python modules and JavaScript files in directories of 100,
committed and packed (a clone's state). Then, so a neighbour's load falls on both sides alike:

* **baseline cold**: ``git worktree add`` beside the repository, ``python3 -m venv .venv``,
  ``.venv/bin/python -m pip install -r requirements-dev.txt -e .``, ``npm ci`` -- with pip's and npm's caches
  empty (a private HOME);
* **toolkit cold**: the first worker's workspace as the supervisor makes it
  (:func:`~git_agentops.verify.workspaces.ensure_worktree` + :func:`~git_agentops.verify.workspaces.ensure_setup`
  with the policy ``git agentops-init`` writes for this project: its ``[[worktree.setup]]`` steps, confined);
  the shared Python base of the lockfile is built, npm's shared cache is empty;
* **baseline warm**: the same again in another worktree, the caches filled by the first;
* **toolkit warm**: another worker: the base is reused, npm's shared cache is filled.

The warm pair is made ``--warm-rounds`` times (default 3), alternating, and each side's median round is shown: a
20k-file checkout's seconds swing with the machine's I/O load. Before each workspace the disk is synced, so one
workspace's writeback is not charged to the next.

**ready_s** is the wall time from the first git command to the last setup step's exit; **cpu_s** the user + system
seconds of this process and every process it waited for meanwhile (the wall time of an idle machine). **extra_mb**
is what the workspace added to the disk: every file and directory under the benchmark's directory (the repository,
its ``.git`` with the shared environments, the worktrees, the private HOMEs with pip's and npm's caches and the
toolkit's scratch and pip seeds) counted ``du``-style -- allocated blocks (``st_blocks * 512``), each inode once
however many links it has -- after minus before. Beside each figure its parts: per step the seconds, and the new
bytes by where they are (the checkout's files, its git admin dir, the venv, ``node_modules``, the shared base, the
caches). Ratios are toolkit / baseline. Targets (warm): ready_s <= 10 and extra_mb <= 200 (MB = 10^6 bytes).

``--backend`` names the project's build backend: ``flit-core`` (the default), whose editable build asks for nothing
beyond itself, or ``hatchling``, whose editable build asks for ``editables``. With hatchling the toolkit's workspace
fails today unless a person's own checkout has set up the same lockfile first: the base the supervisor built holds
what a backend asked for that no person vouched for, and the ``git agentops-env python`` step in the worker's
worktree -- taken for a person's checkout -- tries to vouch for it by rewriting the base's completion marker, which
its sandbox keeps read-only (``RUN_SETUP_FAILED``: ``PermissionError`` on ``.agentops-complete.json.<pid>.tmp``).

Usage: ``python bench/workspace.py [--files N] [--warm-rounds N] [--backend flit-core|hatchling] [--dir DIR]
[--keep] [--no-deps]`` (``--no-deps``: a project with no dependencies and an in-tree build backend, nothing
downloaded -- what the smoke test runs). Last line: one JSON object, ``{"bench": "workspace", ...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from _clean_checkout import hermetic_env, seal
from benchenv import git

from git_agentops.clock import SystemClock
from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.repo import Store, open_store
from git_agentops.model.policy import Policy
from git_agentops.policy.load import policy_from_bytes
from git_agentops.policy.starter import propose, render, starter_policy
from git_agentops.verify.workspaces import ensure_setup, ensure_worktree, placement

RUN: Final = "bench"
PACKAGE: Final = "benchapp"
PER_DIR: Final = 100
TARGET_SECONDS: Final = 10.0
TARGET_MB: Final = 200.0
MB: Final = 1_000_000

PINS: Final = (
    "attrs==26.1.0",
    "certifi==2026.10.19.post1",
    "charset-normalizer==3.5.3",
    "click==8.5.1",
    "idna==3.20",
    "iniconfig==2.3.1",
    "markdown-it-py==4.3.0",
    "mdurl==0.1.2",
    "packaging==26.4",
    "pluggy==1.7.0",
    "pygments==2.21.0",
    "pytest==9.2.0",
    "pyyaml==6.0.4",
    "requests==2.34.2",
    "rich==15.0.0",
    "urllib3==2.8.0",
)
"""``requirements-dev.txt``: the project's runtime dependencies and test extra, resolved and pinned (as pip-compile
writes them)."""
NODE_DEPS: Final = {
    "is-number": "^7.0.0",
    "kleur": "^4.1.5",
    "left-pad": "^1.3.0",
    "lodash": "^4.17.21",
    "ms": "^2.1.3",
    "semver": "^7.6.0",
}

BACKENDS: Final = {
    "flit-core": '[build-system]\nrequires = ["flit_core>=3.9,<4"]\nbuild-backend = "flit_core.buildapi"\n',
    "hatchling": '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n',
}
"""The build backends the generated project can name: hatchling (``uv init``'s, hatch's, the PyPA tutorial's), whose
editable build asks for ``editables``; flit-core, whose editable build asks for nothing more."""
PYPROJECT: Final = f"""
[project]
name = "{PACKAGE}"
version = "0.1.0"
description = "A generated project for bench/workspace.py"
requires-python = ">=3.9"
dependencies = ["attrs>=23", "click>=8.1", "pyyaml>=6", "requests>=2.31", "rich>=13"]

[project.optional-dependencies]
test = ["pytest>=8"]

[tool.pytest.ini_options]
testpaths = ["tests"]
"""
PYPROJECT_NO_DEPS: Final = f"""[build-system]
requires = []
build-backend = "backend"
backend-path = ["_build"]

[project]
name = "{PACKAGE}"
version = "0.1.0"
dependencies = []
"""
BACKEND: Final = f'''"""A minimal PEP 660 backend: an editable wheel is a .pth naming src/ (nothing to download)."""
import base64, hashlib, os, zipfile

DIST, WHEEL = "{PACKAGE}-0.1.0.dist-info", "{PACKAGE}-0.1.0-py3-none-any.whl"


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    files = {{
        "_{PACKAGE}.pth": os.path.abspath("src") + "\\n",
        f"{{DIST}}/METADATA": "Metadata-Version: 2.1\\nName: {PACKAGE}\\nVersion: 0.1.0\\n",
        f"{{DIST}}/WHEEL": "Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
    }}
    with zipfile.ZipFile(os.path.join(wheel_directory, WHEEL), "w") as archive:
        record = []
        for path, text in files.items():
            archive.writestr(path, text)
            sha = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{{path}},sha256={{sha}},{{len(text.encode())}}")
        archive.writestr(f"{{DIST}}/RECORD", "\\n".join([*record, f"{{DIST}}/RECORD,,"]) + "\\n")
    return WHEEL
'''
PY_MODULE: Final = '''"""Generated module {n} of {group}: a record type and its parser."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Record{n}:
    key: str
    value: int
    weight: float = 1.0


def parse_{n}(line: str) -> Record{n}:
    key, value, weight = line.split(",")
    return Record{n}(key.strip(), int(value), float(weight))
'''
JS_MODULE: Final = """// Generated component {n} of {group}: a small view model and its formatter.
'use strict';
const make{n} = (items) => items.filter((item) => item.visible).map((item, index) => ({{
  id: `{group}-{n}-${{index}}`, label: String(item.label).trim(), weight: Number(item.weight || 1),
}}));
const format{n} = (model) => model.map((row) => `${{row.id}}: ${{row.label}} (${{row.weight}})`).join('\\n');
module.exports = {{ make{n}, format{n} }};
"""
PY_TEST: Final = f"""import unittest

import {PACKAGE}


class TestApp(unittest.TestCase):
    def test_version(self):
        self.assertEqual({PACKAGE}.VERSION, "0.1.0")
"""
JS_TEST: Final = """'use strict';
const test = require('node:test');
const assert = require('node:assert');
const { make0, format0 } = require('../web/g000/c000.js');

test('format', () => {
  assert.match(format0(make0([{ visible: true, label: 'a' }])), /a/);
});
"""


# -- the project -------------------------------------------------------------------------------------------------


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _package_json(deps: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "benchapp-web",
        "version": "0.1.0",
        "private": True,
        "scripts": {"test": "node --test test/"},
    }
    if deps:
        doc["dependencies"] = dict(NODE_DEPS)
    return doc


def _lock_node(repo: Path, env: Mapping[str, str], *, deps: bool, scratch: Path) -> None:
    """``package-lock.json``: written by npm from the registry, with a throwaway cache (so no figure starts warm);
    for a package without dependencies, the file npm would write, with no registry asked."""
    if not deps:
        doc = {
            "name": "benchapp-web",
            "version": "0.1.0",
            "lockfileVersion": 3,
            "requires": True,
            "packages": {"": {"name": "benchapp-web", "version": "0.1.0"}},
        }
        _write(repo / "package-lock.json", json.dumps(doc, indent=2) + "\n")
        return
    argv = ["npm", "install", "--package-lock-only", "--ignore-scripts", "--no-audit", "--no-fund"]
    done = subprocess.run(
        argv, cwd=repo, env={**env, "npm_config_cache": str(scratch)}, capture_output=True, text=True, check=False
    )
    shutil.rmtree(scratch, ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.strip()}")


def generate(repo: Path, env: Mapping[str, str], *, files: int, deps: bool = True, backend: str = "flit-core") -> int:
    """A committed, packed repository at ``repo`` of about ``files`` tracked files (see the module docstring).

    Returns how many files git tracks.
    """
    repo.mkdir(parents=True)
    git(repo.parent, "init", "-q", "-b", "main", str(repo), env=env)
    _write(repo / "pyproject.toml", BACKENDS[backend] + PYPROJECT if deps else PYPROJECT_NO_DEPS)
    if deps:
        _write(repo / "requirements-dev.txt", "".join(f"{pin}\n" for pin in PINS))
    else:
        _write(repo / "_build" / "backend.py", BACKEND)
    _write(repo / "package.json", json.dumps(_package_json(deps), indent=2) + "\n")
    _write(repo / ".gitignore", ".venv/\nnode_modules/\n.agentops/venv/\n.agentops/worktrees/\n__pycache__/\n")
    _write(repo / "README.md", "# benchapp\n\nA generated project for bench/workspace.py.\n")
    _write(repo / "src" / PACKAGE / "__init__.py", 'VERSION = "0.1.0"\n')
    _write(repo / "tests" / "test_app.py", PY_TEST)
    _write(repo / "test" / "app.test.js", JS_TEST)
    fixed = sum(1 for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts) + 1  # + package-lock.json
    _fill(repo, max(0, files - fixed))
    _lock_node(repo, env, deps=deps, scratch=repo.parent / "npm-lock-cache")
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-q", "-m", "Generated project", env=env)
    git(repo, "gc", "-q", env=env)
    return len(git(repo, "ls-files", "-z", env=env).split("\0"))


def _fill(repo: Path, count: int) -> None:
    """``count`` generated source files: three in five Python modules (in sub-packages), the rest JavaScript."""
    python = count * 3 // 5
    written = 0
    group = 0
    while written < count:
        in_python = written < python
        left = (python if in_python else count) - written
        if in_python:
            folder = repo / "src" / PACKAGE / f"g{group:03d}"
            _write(folder / "__init__.py", f'"""Generated group {group}."""\n')
            names = [f"m{n:03d}.py" for n in range(min(PER_DIR, left) - 1)]
            written += 1
        else:
            folder = repo / "web" / f"g{group:03d}"
            names = [f"c{n:03d}.js" for n in range(min(PER_DIR, left))]
        template = PY_MODULE if in_python else JS_MODULE
        for n, name in enumerate(names):
            _write(folder / name, template.format(n=n, group=f"g{group:03d}"))
        written += len(names)
        group += 1
        if in_python and written >= python:
            group = 0  # the JavaScript starts at web/g000


# -- extra disk ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Disk:
    """Every inode under a directory, once: its allocated bytes and one path that names it."""

    inodes: dict[tuple[int, int], tuple[int, str]]

    @property
    def total(self) -> int:
        return sum(size for size, _path in self.inodes.values())


def disk(root: Path) -> Disk:
    """``du``-style: allocated blocks (``st_blocks * 512``) of every file, directory and link under ``root``, each
    inode counted once however many hard links name it."""
    found: dict[tuple[int, int], tuple[int, str]] = {}
    st = root.lstat()
    found[(st.st_dev, st.st_ino)] = (st.st_blocks * 512, str(root))
    stack = [str(root)]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            found.setdefault((st.st_dev, st.st_ino), (st.st_blocks * 512, entry.path))
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return Disk(found)


def added(before: Disk, after: Disk, places: Sequence[tuple[str, Path]]) -> tuple[int, dict[str, int]]:
    """The bytes ``after`` holds beyond ``before``, and the same by place: the first of ``places`` (label, path)
    a changed inode lies under, else ``other``."""
    parts: dict[str, int] = {}
    prefixes = [(label, str(path) + os.sep, str(path)) for label, path in places]

    def where(path: str) -> str:
        return next((label for label, under, itself in prefixes if path.startswith(under) or path == itself), "other")

    for key, (size, path) in after.inodes.items():
        old = before.inodes.get(key, (0, path))[0]
        if size != old:
            parts[where(path)] = parts.get(where(path), 0) + size - old
    for key, (size, path) in before.inodes.items():
        if key not in after.inodes:
            parts[where(path)] = parts.get(where(path), 0) - size
    return after.total - before.total, {label: size for label, size in parts.items() if size}


# -- the two ways to a ready workspace --------------------------------------------------------------------------------


@dataclass(slots=True)
class Figure:
    """One workspace made: seconds until ready and extra bytes, each with its parts."""

    side: str
    cache: str
    path: Path
    ready_s: float = 0.0
    cpu_s: float = 0.0  # user + system seconds of this process and every process it waited for
    extra_bytes: int = 0
    steps: dict[str, float] = field(default_factory=dict)
    places: dict[str, int] = field(default_factory=dict)

    @property
    def extra_mb(self) -> float:
        return self.extra_bytes / MB

    def to_json(self) -> dict[str, Any]:
        return {
            "ready_s": round(self.ready_s, 2),
            "cpu_s": round(self.cpu_s, 2),
            "extra_mb": round(self.extra_mb, 1),
            "steps_s": {k: round(v, 2) for k, v in self.steps.items()},
            "places_mb": {k: round(v / MB, 1) for k, v in self.places.items()},
        }


def _run(argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(list(argv), cwd=cwd, env=dict(env), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed in {cwd}:\n{(done.stdout + done.stderr)[-3000:]}")
    return time.perf_counter() - start


def baseline(repo: Path, name: str, env: Mapping[str, str], *, node: bool) -> Figure:
    """``git worktree add`` + what a person runs to set it up (see the module docstring); the seconds of each."""
    path = repo.parent / name
    figure = Figure("baseline", "", path)
    figure.steps["git worktree add"] = _run(["git", "worktree", "add", "-q", "--detach", str(path)], repo, env)
    figure.steps["python -m venv"] = _run(["python3", "-m", "venv", ".venv"], path, env)
    pip = [".venv/bin/python", "-m", "pip", "install", "-q"]
    if (path / "requirements-dev.txt").is_file():
        pip += ["-r", "requirements-dev.txt"]
    figure.steps["pip install -e ."] = _run([*pip, "-e", "."], path, env)
    if node:
        figure.steps["npm ci"] = _run(["npm", "ci", "--no-audit", "--no-fund"], path, env)
    figure.ready_s = sum(figure.steps.values())
    return figure


def policy_for(repo: Path, env: Mapping[str, str]) -> Policy:
    """The policy ``git agentops-init`` writes for the project (its ``[[worktree.setup]]`` steps above all)."""
    doc = starter_policy(repo, target="main", proposal=propose(repo, path=env.get("PATH")))
    return policy_from_bytes(render(doc).encode())


def _marker_time(path: Path) -> float | None:
    try:
        at = json.loads(path.read_text("utf-8")).get("at")
    except (OSError, ValueError, AttributeError):
        return None
    return float(at) if isinstance(at, (int, float)) else None


def toolkit(store: Store, policy: Policy, worker: str, env: Mapping[str, str]) -> Figure:
    """A worker's workspace as the supervisor makes it: :func:`ensure_worktree`, then :func:`ensure_setup`.

    Its parts are read from what setup leaves: the time the shared base was reported built (``log``), and the
    ``at`` of the Python venv's and ``node_modules``' markers, each written as its step ends."""
    clock = SystemClock()
    repo = store.common_dir.parent
    where = placement(repo, policy.worktree_root, RUN, worker, f"refs/heads/agentops/{RUN}/{worker}")
    head = git(repo, "rev-parse", "HEAD", env=env)
    figure = Figure("toolkit", "", where.path)
    said: list[tuple[float, str]] = []
    start = time.perf_counter()
    ensure_worktree(store, where, start_commit=head, run_id=RUN, worker_id=worker, clock=clock)
    worktree = time.perf_counter()
    begun = clock.now()
    try:
        how = ensure_setup(
            store,
            where.path,
            policy,
            environ=env,
            clock=clock,
            last_user_resume=None,
            log=lambda message: said.append((clock.now(), message)),
        )
    except AgentOpsError as error:
        raise SystemExit(
            f"the toolkit could not set up {worker}'s workspace:\nerror[{error.code}]: {error.message}"
        ) from error
    done = time.perf_counter()
    ended = clock.now()
    if how != "ran":
        raise SystemExit(f"setup of {where.path} did not run ({how}): the policy has no setup steps")
    figure.steps["ensure_worktree"] = worktree - start
    built = next((at for at, message in said if message.startswith("built the shared base")), None)
    marks = [("shared python base (build)", built)]
    for step in policy.setup:
        words = step.argv.split() if isinstance(step.argv, str) else list(step.argv)
        if words[:3] == ["git", "agentops-env", "python"]:
            marks.append(
                ("step: agentops-env python", _marker_time(where.path / ".agentops" / "venv" / "agentops-env.json"))
            )
        elif words[:3] == ["git", "agentops-env", "node"]:
            marks.append(("step: agentops-env node", _marker_time(where.path / "node_modules" / ".agentops-env.json")))
    last = begun
    for label, at in marks:
        if at is not None:
            figure.steps[label] = at - last
            last = at
    figure.steps["setup: the rest"] = ended - last
    figure.ready_s = done - start
    return figure


# -- the run ----------------------------------------------------------------------------------------------------


def _cpu() -> float:
    """User + system seconds of this process and of every child it waited for (and theirs)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _places(figure: Figure, repo: Path, homes: Mapping[str, Path]) -> list[tuple[str, Path]]:
    """Where new bytes can be, most specific first."""
    common = repo / ".git"
    found = [
        ("venv", figure.path / ".venv"),
        ("venv", figure.path / ".agentops" / "venv"),
        ("node_modules", figure.path / "node_modules"),
        ("checkout", figure.path),
        ("git admin dir", common / "worktrees"),
        ("npm cache (shared)", common / "agentops" / "envs" / "npm-cache"),
        ("shared envs", common / "agentops" / "envs"),
        ("repository .git", common),
    ]
    for side, home in homes.items():
        found += [
            (f"pip cache ({side})", home / ".cache" / "pip"),
            (f"npm cache ({side})", home / ".npm"),
            (f"toolkit scratch + seeds ({side})", home / ".cache" / "git-agentops"),
            (f"home ({side})", home),
        ]
    return found


def _check_ready(figure: Figure, env: Mapping[str, str], *, node: bool) -> None:
    """The workspace works: the project and its dependencies import, node finds its modules (not timed)."""
    venv = ".venv" if figure.side == "baseline" else ".agentops/venv"
    code = f"import {PACKAGE}, sys; sys.exit(0 if {PACKAGE}.__file__.startswith({str(figure.path)!r}) else 3)"
    if (figure.path / "requirements-dev.txt").is_file():
        code = f"import attrs, click, pytest, requests, rich, yaml; {code}"
    _run([f"{venv}/bin/python", "-c", code], figure.path, env)
    if node and (figure.path / "node_modules" / "lodash").is_dir():
        _run(["node", "-e", "require('lodash'); require('semver')"], figure.path, env)


def measure(
    root: Path,
    *,
    files: int,
    deps: bool,
    base_env: Mapping[str, str],
    toolkit_env: Mapping[str, str],
    backend: str = "flit-core",
    warm_rounds: int = 1,
    progress: Callable[[str], None] = lambda _message: None,
) -> dict[str, Any]:
    """Generate the project under ``root`` and make the workspaces (see the module docstring): one cold on each
    side, then ``warm_rounds`` warm on each, alternating; the warm figure of a side is its median round.

    ``base_env``/``toolkit_env``: each side's environment, its HOME (pip's and npm's caches) its own and under
    ``root``; the toolkit's must be what this process's git calls see (the benchmark seals it)."""
    repo = root / "repo"
    start = time.perf_counter()
    tracked = generate(repo, base_env, files=files, deps=deps, backend=backend)
    progress(f"generated {tracked} tracked files in {time.perf_counter() - start:.1f} s")
    store = open_store(repo, clock=SystemClock())
    policy = policy_for(repo, toolkit_env)
    steps = [s.argv if isinstance(s.argv, str) else " ".join(s.argv) for s in policy.setup]
    node = shutil.which("npm", path=toolkit_env.get("PATH")) is not None
    homes = {"baseline": Path(base_env["HOME"]), "toolkit": Path(toolkit_env["HOME"])}
    made: dict[str, list[Figure]] = {}
    before = disk(root)
    rounds = [("cold", 1)] + [("warm", 2 + n) for n in range(warm_rounds)]
    for cache, index in rounds:
        for side in ("baseline", "toolkit"):
            os.sync()  # what the last workspace wrote is on disk: its writeback is not charged to this one
            used = _cpu()
            if side == "baseline":
                figure = baseline(repo, f"worktree-{index}", base_env, node=node)
            else:
                figure = toolkit(store, policy, f"w{index}", toolkit_env)
            figure.cpu_s = _cpu() - used
            figure.cache = cache
            after = disk(root)
            figure.extra_bytes, figure.places = added(before, after, _places(figure, repo, homes))
            before = after
            _check_ready(figure, base_env if side == "baseline" else toolkit_env, node=node)
            made.setdefault(f"{side}_{cache}", []).append(figure)
            progress(f"{side} {cache}: {figure.ready_s:.1f} s, {figure.extra_mb:.1f} MB")
    figures = {name: sorted(round_, key=lambda f: f.ready_s)[(len(round_) - 1) // 2] for name, round_ in made.items()}
    return {
        "rounds": {name: [round(f.ready_s, 2) for f in round_] for name, round_ in made.items() if len(round_) > 1},
        "tracked": tracked,
        "backend": backend if deps else "in-tree",
        "setup": steps,
        "figures": figures,
        "load": [round(x, 2) for x in os.getloadavg()],
    }


def summary(result: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON figures: each workspace's ready_s and extra_mb, the ratios, and whether the targets are met."""
    figures: dict[str, Figure] = result["figures"]
    doc: dict[str, Any] = {
        "bench": "workspace",
        "files": result["tracked"],
        "backend": result["backend"],
        "setup": result["setup"],
        "load_avg_after": result["load"],
        "warm_rounds_ready_s": result["rounds"],
    }
    for name, figure in figures.items():
        doc[f"{name}_ready_s"] = round(figure.ready_s, 2)
        doc[f"{name}_extra_mb"] = round(figure.extra_mb, 1)
        doc[f"{name}_cpu_s"] = round(figure.cpu_s, 2)
    for cache in ("cold", "warm"):
        kit, base = figures[f"toolkit_{cache}"], figures[f"baseline_{cache}"]
        doc[f"ready_ratio_{cache}"] = round(kit.ready_s / base.ready_s, 2)
        doc[f"disk_ratio_{cache}"] = round(kit.extra_bytes / base.extra_bytes, 2) if base.extra_bytes > 0 else None
    warm = figures["toolkit_warm"]
    doc["target_ready_met"] = warm.ready_s <= TARGET_SECONDS
    doc["target_disk_met"] = warm.extra_mb <= TARGET_MB
    doc["detail"] = {name: figure.to_json() for name, figure in figures.items()}
    return doc


def table(result: Mapping[str, Any]) -> str:
    """The figures side by side, then each workspace's parts."""
    figures: dict[str, Figure] = result["figures"]
    lines = [
        f"{'':<10}{'baseline s':>12}{'toolkit s':>12}{'ratio':>8}{'baseline MB':>14}{'toolkit MB':>12}{'ratio':>8}"
    ]
    for cache in ("cold", "warm"):
        base, kit = figures[f"baseline_{cache}"], figures[f"toolkit_{cache}"]
        disk_ratio = f"{kit.extra_bytes / base.extra_bytes:>8.2f}" if base.extra_bytes > 0 else f"{'-':>8}"
        lines.append(
            f"{cache:<10}{base.ready_s:>12.2f}{kit.ready_s:>12.2f}{kit.ready_s / base.ready_s:>8.2f}"
            f"{base.extra_mb:>14.1f}{kit.extra_mb:>12.1f}{disk_ratio}"
        )
    for name, values in result["rounds"].items():
        lines.append(f"{name} rounds: {', '.join(f'{v:.2f}' for v in values)} s (the median is shown)")
    for name, figure in figures.items():
        lines.append(f"\n{name}: {figure.ready_s:.2f} s ({figure.cpu_s:.2f} s of CPU), {figure.extra_mb:.1f} MB")
        lines += [f"  {label:<34}{seconds:>8.2f} s" for label, seconds in figure.steps.items()]
        lines += [
            f"  {label:<34}{size / MB:>8.1f} MB" for label, size in sorted(figure.places.items(), key=lambda kv: -kv[1])
        ]
    warm = figures["toolkit_warm"]
    met = warm.ready_s <= TARGET_SECONDS and warm.extra_mb <= TARGET_MB
    lines.append(
        f"\ntoolkit warm: {warm.ready_s:.2f} s (target <= {TARGET_SECONDS:.0f}), {warm.extra_mb:.1f} MB "
        f"(target <= {TARGET_MB:.0f}) -> {'ok' if met else 'MISSED'}"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--files", type=int, default=20_000, help="tracked files of the project (default 20000)")
    parser.add_argument("--dir", default=None, help="where to create the scratch directory")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (its path is printed)")
    parser.add_argument("--no-deps", action="store_true", help="no dependencies, nothing downloaded")
    parser.add_argument("--backend", choices=sorted(BACKENDS), default="flit-core", help="the project's build backend")
    parser.add_argument("--warm-rounds", type=int, default=3, help="warm workspaces per side; the median is shown")
    args = parser.parse_args()
    if shutil.which("git-agentops-env") is None:
        raise SystemExit("git-agentops-env is not on PATH: install the project (pip install -e .) first")
    root = Path(tempfile.mkdtemp(prefix="agentops-workspace-bench-", dir=args.dir)).resolve()
    try:
        base_env = hermetic_env(root / "home-baseline", os.environ)
        kit_env = hermetic_env(root / "home-toolkit", os.environ)
        seal(root / "home-toolkit", kit_env)
        result = measure(
            root,
            files=args.files,
            deps=not args.no_deps,
            backend=args.backend,
            warm_rounds=max(1, args.warm_rounds),
            base_env=base_env,
            toolkit_env=kit_env,
            progress=lambda message: print(message, file=sys.stderr, flush=True),
        )
    finally:
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(table(result))
    print(json.dumps(summary(result), sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
