"""The supervisor's clean checkouts share the repository's dependency base instead of building one each.

A clean checkout is a repository of its own, so ``git rev-parse --git-common-dir`` in it names its private
``.git``: before, every handoff's checkout built a base there (123 MB and 30-58 s on a real project). Real venvs and
real pip, offline, as in ``test_envs.py`` (its wheelhouse and project)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from git_agentops.clock import FixedClock
from git_agentops.envs.tools import shared_dir
from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.clean import CONFIG, CleanCheckout, clean_source
from git_agentops.gitstore.repo import open_store
from git_agentops.model.policy import Policy, effective
from git_agentops.policy.trust import RepoIdentity, TrustStatus, Verdict
from git_agentops.runs.jobs import JobContext
from git_agentops.verify.proof import prove, slot_checkout

from ..conftest import commit_files, git, make_repo
from . import test_envs
from .test_envs import _env, _project

wheelhouse, offline = test_envs.wheelhouse, test_envs.offline  # its fixtures: the offline wheelhouse

SETUP = ["git", "agentops-env", "python", "--extra", "test"]


def _context(repo: Path, tmp_path: Path, offline_env: dict[str, str]) -> JobContext:
    doc = effective(
        {
            "verify": {
                "commands": [
                    {"id": "tests", "argv": [".agentops/venv/bin/python", "-m", "pytest", "-q"], "timeout": 300}
                ]
            },
            "worktree": {"setup": [{"argv": SETUP, "timeout": 600, "env": offline_env}]},
        }
    )
    policy = Policy.from_effective(doc)
    trust = Verdict(TrustStatus.TRUSTED, RepoIdentity(str(repo), f"local:{repo}"), policy.config_hash)
    return JobContext("run-envs", policy, trust, dict(os.environ), FixedClock(), tmp_path / "run", print, print)


def _marker(checkout: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((checkout / ".agentops" / "venv" / "agentops-env.json").read_text())
    return doc


def test_a_clean_checkout_builds_a_missing_base_in_the_repositorys_shared_dir_and_none_of_its_own(
    run_cli: Any, tmp_path: Path, offline: dict[str, str]
) -> None:
    """Invariants: the first verification before any worker set up builds the base once, in the repository's
    shared dir where every checkout finds it (the main checkout's setup then reuses it); a clean checkout uses the
    repository's base and builds none of its own, later verifications reuse it unchanged, and their tests run on
    the clean checkout's own code. One repository for both: the base the first verification builds is the one the
    later ones must reuse, so the suite builds it once."""
    repo = _project(tmp_path / "repo")
    ctx = _context(repo, tmp_path, offline)
    store = open_store(repo, clock=FixedClock())
    outcome = prove(ctx, store, slot="w1", commit=git(repo, "rev-parse", "HEAD"), task=None)
    assert outcome.passed, outcome.records
    checkout = slot_checkout(ctx, store, "w1").root
    base = Path(_marker(checkout)["base"])
    assert base.parent == (repo / ".git" / "agentops" / "envs").resolve()
    assert not (checkout / ".git" / "agentops" / "envs").exists(), "the clean checkout built a base of its own"
    again = _env(run_cli, repo, offline)  # the main checkout now reuses what the clean checkout built
    assert again["base"]["reused"] is True and Path(again["base"]["path"]) == base
    built = (base / "agentops-complete.json").read_bytes()
    # and the tests ran on the clean checkout's own code, not the main checkout's
    second = commit_files(repo, {"src/tinyproj/__init__.py": "VALUE = 2\n"})
    refused = prove(ctx, store, slot="w2", commit=second, task=None)
    assert not refused.passed and refused.records[0].exit_code == 1
    assert "assert 2 == 1" in refused.records[0].tail
    assert _marker(slot_checkout(ctx, store, "w2").root)["base"] == str(base)
    assert not (slot_checkout(ctx, store, "w2").root / ".git" / "agentops" / "envs").exists()
    assert (base / "agentops-complete.json").read_bytes() == built, "the shared base was rebuilt"


def test_only_a_toolkit_made_clean_checkout_is_redirected(tmp_path: Path) -> None:
    """The redirection is bound to what the toolkit wrote where agents cannot write: its marker, its config byte for
    byte, alternates naming a real repository's objects. A look-alike repository keeps its own shared dir."""
    repo = make_repo(tmp_path / "repo")
    common = (repo / ".git").resolve()
    slot = CleanCheckout(tmp_path / "slot", repo / ".git" / "objects")
    slot.populate(git(repo, "rev-parse", "HEAD"))
    assert clean_source(slot.git_dir) == common
    assert shared_dir(slot.git_dir) == common / "agentops" / "envs"
    assert clean_source(common) is None and shared_dir(common) == common / "agentops" / "envs"

    def lookalike(name: str, *, marker: bool = True, config: str = CONFIG, alternates: str | None = None) -> Path:
        git_dir = tmp_path / name / ".git"
        (git_dir / "objects" / "info").mkdir(parents=True)
        (git_dir / "config").write_text(config)
        if marker:
            (git_dir / "agentops-clean").write_text("")
        (git_dir / "objects" / "info" / "alternates").write_text(alternates or f"{common / 'objects'}\n")
        return git_dir

    cases = {
        "no marker": lookalike("a", marker=False),
        "another config": lookalike("b", config=CONFIG + "[core]\n\tfsmonitor = true\n"),
        "two alternates": lookalike("c", alternates=f"{common / 'objects'}\n{tmp_path}/x/objects\n"),
        "a relative alternate": lookalike("d", alternates="../../repo/.git/objects\n"),
        "not a repository's objects": lookalike("e", alternates=f"{tmp_path / 'objects'}\n"),
    }
    (tmp_path / "objects").mkdir()
    for what, git_dir in cases.items():
        assert clean_source(git_dir) is None, what
        assert shared_dir(git_dir) == git_dir / "agentops" / "envs", what
    link = tmp_path / "link" / ".git"
    link.parent.mkdir()
    link.symlink_to(slot.git_dir)
    assert clean_source(link) is None


def test_a_setup_step_the_supervisor_cannot_read_as_the_env_command_gets_no_base_built_and_is_told_why(
    tmp_path: Path, offline: dict[str, str]
) -> None:
    """Setup in a clean checkout sees the shared environments read-only, so a missing base is built by the
    supervisor before the steps -- for each step it reads as ``git agentops-env python``. One hidden in a longer
    shell line gets none: ``RUN_SETUP_FAILED`` carrying ``ENV_SETUP_FAILED`` that says how to write the step, and
    nothing is made in the shared environments."""
    repo = _project(tmp_path / "repo")
    doc = effective(
        {
            "verify": {"commands": [{"id": "tests", "argv": [".agentops/venv/bin/python", "-m", "pytest", "-q"]}]},
            "worktree": {
                "setup": [{"argv": "true && git agentops-env python --extra test", "shell": True, "env": offline}]
            },
        }
    )
    policy = Policy.from_effective(doc)
    trust = Verdict(TrustStatus.TRUSTED, RepoIdentity(str(repo), f"local:{repo}"), policy.config_hash)
    ctx = JobContext("run-envs", policy, trust, dict(os.environ), FixedClock(), tmp_path / "run", print, print)
    store = open_store(repo, clock=FixedClock())
    with pytest.raises(AgentOpsError) as caught:
        prove(ctx, store, slot="w1", commit=git(repo, "rev-parse", "HEAD"), task=None)
    assert caught.value.code == "RUN_SETUP_FAILED"
    assert "ENV_SETUP_FAILED" in caught.value.message and "as a command of its own" in caught.value.message
    assert not list(shared_dir(repo / ".git").glob("python-*"))


POISONING_TEST = """import glob, os

import tinyproj


def test_value():
    # the commit's own test edits the environment the slot keeps for the next commit: a .pth runs at every start
    (site,) = glob.glob(".agentops/venv/lib/python*/site-packages")
    with open(os.path.join(site, "zz_poison.pth"), "w") as handle:
        handle.write("import os; os.environ['POISONED'] = '1'\\n")
    assert tinyproj.VALUE == 1
"""
HONEST_TEST = """import os

import tinyproj


def test_value():
    assert os.environ.get("POISONED") is None, "the environment a previous commit's tests edited was reused"
    assert tinyproj.VALUE == 1
"""


def test_what_one_commits_tests_change_in_the_kept_environment_is_never_reused_for_the_next_commit(
    tmp_path: Path, offline: dict[str, str]
) -> None:
    """A slot keeps what setup made (the venv) for the next commit on the same dependencies; the commands run the
    commit's code with the checkout writable. A commit whose test plants a ``.pth`` in the kept venv must not hand
    it to the next commit verified in that slot: setup is made again. An honest commit keeps the slot's setup."""
    repo = _project(tmp_path / "repo")
    said: list[str] = []
    ctx = _context(repo, tmp_path, offline)
    ctx = JobContext(ctx.run_id, ctx.policy, ctx.trust, ctx.environ, ctx.clock, ctx.run_dir, said.append, print)
    store = open_store(repo, clock=FixedClock())
    honest = git(repo, "rev-parse", "HEAD")
    assert prove(ctx, store, slot="w1", commit=honest, task=None).passed
    made = [line for line in said if line.startswith("set up the verification checkout w1")]
    assert len(made) == 1
    again = commit_files(repo, {"README.md": "same dependencies\n"})
    assert prove(ctx, store, slot="w1", commit=again, task=None).passed
    assert [line for line in said if line.startswith("set up the verification checkout w1")] == made, "reused"
    poisoner = commit_files(repo, {"tests/test_value.py": POISONING_TEST}, "a test that edits the kept venv")
    assert prove(ctx, store, slot="w1", commit=poisoner, task=None).passed
    assert any("the commands changed what setup made in the verification checkout w1" in line for line in said)
    victim = commit_files(repo, {"tests/test_value.py": HONEST_TEST}, "an honest commit on the same dependencies")
    outcome = prove(ctx, store, slot="w1", commit=victim, task=None)
    assert outcome.passed, outcome.records[0]["tail"]
    checkout = slot_checkout(ctx, store, "w1").root
    assert not list(checkout.glob(".agentops/venv/lib/python*/site-packages/zz_poison.pth"))
    assert len([line for line in said if line.startswith("set up the verification checkout w1")]) == 2
