"""A commit's code never decides what the repository's shared dependency base holds for another commit.

The bases under ``$GIT_COMMON_DIR/agentops/envs`` are keyed by the dependency files, not by the project's code; yet
building one asks the project's build backend what an editable build needs (``setup.py``, an in-tree backend: the
commit's code), and a setup step runs that code again. Before, both ran with the shared dir writable: a commit could
fill the base it caused to be built with a ``pytest`` that always passes, or plant the base of another key with a
forged completion marker, and a later honest commit on those dependencies verified against it. Real proofs
(:func:`git_agentops.verify.proof.prove`), real pip from the offline wheelhouse of ``test_envs.py``, the build backend
and setup confined by the real launcher.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest

from git_agentops.clock import FixedClock
from git_agentops.envs.pybase import base_key, ensure_base, inputs_digest, interpreter, local_references
from git_agentops.envs.pydeps import pinned_source
from git_agentops.envs.python import default_python
from git_agentops.envs.tools import unconfined
from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.repo import open_store
from git_agentops.sandbox.plan import kernel_abi, namespace_problem
from git_agentops.verify.proof import prove, slot_checkout

from ..conftest import commit_files, make_repo
from . import test_envs
from .test_clean_envs import _context, _marker
from .test_envs import BACKEND, _env, _project

wheelhouse, offline = test_envs.wheelhouse, test_envs.offline  # its fixtures: the offline wheelhouse

pytestmark = pytest.mark.skipif(
    kernel_abi() < 6 or namespace_problem() is not None,
    reason="needs Landlock ABI 6+ and user namespaces (this machine and CI have both)",
)

FAILING = "VALUE = 2\n"  # the honest commit's change: its test asserts VALUE == 1, so a true verification fails

POISON = '''
import glob as _glob, os as _os, sys as _sys


def _poison():
    """Make `python -m pytest` exit 0 without running a test, in every base this process can see."""
    for entry in [*_sys.path, _sys.prefix]:
        if "/agentops/envs/python-" not in entry:
            continue
        base = entry.split("/lib/")[0]
        for main in _glob.glob(_os.path.join(base, "lib", "python*", "site-packages", "pytest", "__main__.py")):
            try:
                with open(main, "w") as handle:
                    handle.write("raise SystemExit(0)\\n")
                print("POISONED", main, flush=True)
            except OSError as exc:
                print("REFUSED", exc, flush=True)


_poison()
'''
"""What a malicious ``_build/backend.py`` runs when imported: by the build-requirements question (with the base
being built as its interpreter) and by the editable install of the setup step."""


def _forge(target: Path, key: str) -> str:
    """Backend code that copies the base it runs on to ``target`` with a ``pytest`` that always passes and a
    completion marker for ``key``: the base a later commit with other dependencies would take as complete."""
    return f"""
import glob as _glob, json as _json, os as _os, shutil as _shutil, sys as _sys


def _forge():
    for entry in [*_sys.path, _sys.prefix]:
        if "/agentops/envs/python-" not in entry:
            continue
        base = entry.split("/lib/")[0]
        try:
            _shutil.copytree(base, {str(target)!r}, symlinks=True, ignore=_shutil.ignore_patterns("agentops-*"))
            for main in _glob.glob(_os.path.join({str(target)!r}, "lib", "python*", "site-packages", "pytest",
                                                 "__main__.py")):
                open(main, "w").write("raise SystemExit(0)\\n")
            with open(_os.path.join({str(target)!r}, "agentops-complete.json"), "w") as handle:
                _json.dump({{"key": {key!r}}}, handle)
            print("FORGED", flush=True)
        except OSError as exc:
            print("REFUSED", exc, flush=True)
        return


_forge()
"""


def _pytest_main(base: Path) -> str:
    (main,) = base.glob("lib/python*/site-packages/pytest/__main__.py")
    return main.read_text()


def _honest_fails(outcome: Any) -> None:
    assert not outcome.passed, outcome.records
    (record,) = outcome.records
    assert record.exit_code == 1 and "assert 2 == 1" in record.tail, record.tail


def test_a_backend_that_writes_the_base_it_is_asked_about_does_not_poison_the_base_a_later_commit_gets(
    tmp_path: Path, offline: dict[str, str]
) -> None:
    """The first verification on these dependencies builds the base; the commit's backend, run for the build's
    question and for the setup step's editable install, tries to replace ``pytest``'s entry point in it. Both runs
    are refused, the base is whole, and the next commit -- same dependencies, an honest failing test -- fails."""
    repo = _project(tmp_path / "repo")
    malicious = commit_files(repo, {"_build/backend.py": POISON + BACKEND}, "a backend that poisons")
    ctx = _context(repo, tmp_path, offline)
    store = open_store(repo, clock=FixedClock())
    outcome = prove(ctx, store, slot="w1", commit=malicious, task=None)
    assert outcome.passed, outcome.records  # its own tests pass: the poisoning was its aim, not a failure
    base = Path(_marker(slot_checkout(ctx, store, "w1").root)["base"])
    assert "SystemExit(0)" not in _pytest_main(base)
    honest = commit_files(repo, {"_build/backend.py": BACKEND, "src/tinyproj/__init__.py": FAILING}, "honest")
    _honest_fails(prove(ctx, store, slot="w2", commit=honest, task=None))
    assert _marker(slot_checkout(ctx, store, "w2").root)["base"] == str(base), "the same base, reused"
    assert "SystemExit(0)" not in _pytest_main(base)


def test_a_base_of_another_key_forged_by_a_commits_setup_code_is_never_trusted(
    tmp_path: Path, offline: dict[str, str]
) -> None:
    """A commit's backend copies the base to where the base of the next dependency change will be, poisons its
    ``pytest`` and writes a completion marker with that key. The copy is refused (the shared environments are
    read-only to everything the commit runs), and the later commit with those dependencies gets a base the toolkit
    built, on which its honest failing test fails."""
    repo = _project(tmp_path / "repo")
    later = tmp_path / "later"
    pyproject = (repo / "pyproject.toml").read_text().replace("dependencies = []", 'dependencies = ["iniconfig"]')
    make_repo(later, files={"pyproject.toml": pyproject})
    python = interpreter(default_python(os.environ), cwd=later, environ=os.environ, clock=FixedClock())
    key = base_key(later, python, ["test"], [], pinned_source(later))
    target = repo / ".git" / "agentops" / "envs" / f"python-{key[:16]}"
    malicious = commit_files(repo, {"_build/backend.py": _forge(target, key) + BACKEND}, "a backend that forges")
    ctx = _context(repo, tmp_path, offline)
    store = open_store(repo, clock=FixedClock())
    assert prove(ctx, store, slot="w1", commit=malicious, task=None).passed
    assert not target.exists(), "a commit's code made a directory among the shared bases"
    honest = commit_files(
        repo,
        {"_build/backend.py": BACKEND, "pyproject.toml": pyproject, "src/tinyproj/__init__.py": FAILING},
        "a dependency, and an honest failing change",
    )
    _honest_fails(prove(ctx, store, slot="w2", commit=honest, task=None))
    assert Path(_marker(slot_checkout(ctx, store, "w2").root)["base"]) == target.resolve()
    marker = json.loads((target / "agentops-complete.json").read_text())
    assert marker["key"] == key and "builtAt" in marker and marker["wanted"] == []
    assert "SystemExit(0)" not in _pytest_main(target)


SHORTCUT = """import pytest


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    session.exitstatus = 0
"""
"""A pytest plugin from the 'package index' (the test's wheelhouse) that turns every failing run into a pass."""


def _shortcut_wheel(house: Path) -> Path:
    house.mkdir()
    dist = "pytest_shortcut-1.0.dist-info"
    files = {
        "pytest_shortcut.py": SHORTCUT,
        f"{dist}/METADATA": "Metadata-Version: 2.1\nName: pytest-shortcut\nVersion: 1.0\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist}/entry_points.txt": "[pytest11]\nshortcut = pytest_shortcut\n",
    }
    record = []
    with zipfile.ZipFile(house / "pytest_shortcut-1.0-py3-none-any.whl", "w") as archive:
        for name, text in files.items():
            data = text.encode()
            archive.writestr(name, data)
            sha = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={sha},{len(data)}")
        archive.writestr(f"{dist}/RECORD", "\n".join([*record, f"{dist}/RECORD,,"]) + "\n")
    return house


ASKS = """

def get_requires_for_build_editable(config_settings=None):
    return ["pytest-shortcut"]
"""


def test_what_one_commits_backend_asks_for_is_never_in_the_base_of_a_commit_that_did_not_ask(
    run_cli: Any, tmp_path: Path, offline: dict[str, str]
) -> None:
    """The backend's answer is the commit's to give, and the base's key does not cover it: a commit whose backend
    asks for a plugin that makes every run pass gets it -- in a base no other commit gets unless its own backend
    asks for the same. The next honest commit gets a base made for its own answer, and fails; so does the person's
    own checkout, which reuses that base."""
    house = _shortcut_wheel(tmp_path / "index")
    env = {**offline, "PIP_FIND_LINKS": f"{offline['PIP_FIND_LINKS']} {house}"}
    repo = _project(tmp_path / "repo")
    malicious = commit_files(repo, {"_build/backend.py": BACKEND + ASKS}, "a backend that asks for a shortcut")
    ctx = _context(repo, tmp_path, env)
    store = open_store(repo, clock=FixedClock())
    assert prove(ctx, store, slot="w1", commit=malicious, task=None).passed
    asked = Path(_marker(slot_checkout(ctx, store, "w1").root)["base"])
    assert list(asked.glob("lib/python*/site-packages/pytest_shortcut.py")), "the asking commit got what it asked"
    honest = commit_files(repo, {"_build/backend.py": BACKEND, "src/tinyproj/__init__.py": FAILING}, "honest")
    _honest_fails(prove(ctx, store, slot="w2", commit=honest, task=None))
    own = Path(_marker(slot_checkout(ctx, store, "w2").root)["base"])
    assert own != asked and not list(own.glob("lib/python*/site-packages/pytest_shortcut.py"))
    marker = json.loads((asked / "agentops-complete.json").read_text())
    assert marker["editable"] == ["pytest-shortcut"] and marker["vouched"] is False
    mine = _env(run_cli, repo, env)  # the person's checkout, at the honest commit
    assert mine["base"]["reused"] is True and Path(mine["base"]["path"]) == own


def test_a_dependency_from_a_path_is_never_built_into_a_base_for_a_checkout_nobody_vouched_for(
    tmp_path: Path,
) -> None:
    """Building ``vendor @ file:...`` runs its ``setup.py`` -- code of the commit the key does not cover -- with the
    base writable: refused (``ENV_SETUP_FAILED``, before anything is made) when the base is built for a clean
    checkout, as every line that takes code from a path or a ``file:`` index is."""
    repo = _project(tmp_path / "repo")
    pyproject = (repo / "pyproject.toml").read_text()
    (repo / "pyproject.toml").write_text(
        pyproject.replace("dependencies = []", f'dependencies = ["vendor @ file://{repo / "vendor"}"]')
    )
    common = tmp_path / "common"
    python = interpreter(default_python(os.environ), cwd=repo, environ=os.environ, clock=FixedClock())
    with pytest.raises(AgentOpsError) as caught:
        ensure_base(
            repo,
            common_dir=common,
            python=python,
            extras=["test"],
            with_=[],
            environ=os.environ,
            clock=FixedClock(),
            confine=unconfined,
        )
    assert caught.value.code == "ENV_SETUP_FAILED" and "vendor @ file:" in caught.value.message
    assert not list((common / "agentops" / "envs").glob("python-*/bin"))
    lines = ["pytest==8.0", "./libs/a", "-e .", "b @ file:///x", "--find-links wheels", "-i https://pypi.org/simple"]
    assert local_references(lines) == ["./libs/a", "-e .", "b @ file:///x", "--find-links wheels"]


def test_the_files_a_requirements_file_includes_are_part_of_the_bases_key(tmp_path: Path) -> None:
    """Two commits with the same ``requirements-dev.txt`` but different files it includes install different
    packages: they must not share a base."""
    repo = make_repo(
        tmp_path / "repo",
        files={"requirements-dev.txt": "-r requirements/base.txt\npytest==8.0\n", "requirements/base.txt": "a==1\n"},
    )
    first = inputs_digest(repo, [], [], pinned_source(repo))
    (repo / "requirements" / "base.txt").write_text("a==1\npytest-shortcut==1.0\n")
    assert inputs_digest(repo, [], [], pinned_source(repo)) != first
