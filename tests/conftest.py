"""Hermetic test environment: every test gets its own HOME, XDG dirs and git config, a fixed identity and dates.

Nothing a test does may touch the real home directory, the system git config or the developer's identity; the
git CLI and libgit2 (whose config search path is process-global) are both pointed at the temporary home.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest
from hypothesis import settings

from git_agentops import eventkinds as event_kinds
from git_agentops.clock import FixedClock
from git_agentops.gitstore.identity import Identity
from git_agentops.gitstore.repo import Store, open_store

# Property tests are reproducible by default: the "ci" profile derandomises Hypothesis (a fixed seed per test, no
# example database), so a run that passed passes again. HYPOTHESIS_PROFILE=explore searches with fresh randomness
# and remembers failures in .hypothesis/ -- for hunting, not for CI.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

ROOT = Path(__file__).resolve().parent.parent
SCRATCH_EVENTS = frozenset(
    {"ART", "BUMP", "E", "EDIT", "NOTE", "NOTED", "ONE", "OTHER", "PLANNED", "RAW", "SEED", "STEP", "TAMPER", "TWO"}
    | {"TASK_PLANNED", "WIPE", "WORKER_ADDED"}
)
"""Made-up event kinds the tests of the journal machinery write: registered for this process only."""
event_kinds.allow_scratch(SCRATCH_EVENTS)


def pytest_configure(config: pytest.Config) -> None:
    """Compile the toolkit's and the tests' own modules to bytecode once, before any worker starts.

    Why: the suite starts thousands of Python processes from this checkout -- every ``git agentops-*`` command, the
    supervisors, the stand-in agents -- and with ``PYTHONDONTWRITEBYTECODE`` set (as in the shell CI runs in) and a
    fresh clone, none of them finds a ``.pyc``: each compiles every module it imports from source again, 0.2-0.6 s
    of CPU per process. Measured on ``tests/runs/test_run.py`` (2 workers, 2 cores): 75 s of CPU without, 55 s with.
    This writes exactly what one run without that variable would have written (``__pycache__``, ignored by git);
    Python checks each file's mtime and size, so a module edited later is compiled again, never run stale. The
    fixture projects are left alone: tests copy them into repositories, where a ``__pycache__`` would be a change.
    """
    if hasattr(config, "workerinput"):  # an xdist worker: the controller compiled before starting it
        return
    import compileall
    import re

    compileall.compile_dir(ROOT / "git_agentops", quiet=2)
    compileall.compile_dir(ROOT / "tests", quiet=2, rx=re.compile(r"[/\\]fixtures[/\\]"))


FIXED_DATE = "2026-01-01T00:00:00+00:00"
IDENTITY = Identity("Test Agent", "agent@example.invalid")

_GIT_ENV_TO_DROP = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "AGENTOPS_RUN_ID",
    "AGENTOPS_WORKER_ID",
    "AGENTOPS_GENERATION",
    "AGENTOPS_MAILBOX",
    # with the above, what marks an agent's environment: `policy trust` refuses to run in one
    "AGENTOPS_REVIEWER",
    "AGENTOPS_PROMPT",
    "AGENTOPS_REVIEW_INPUT",
    "AGENTOPS_REVIEW_REPORT",
)


@pytest.fixture(autouse=True)
def event_data_checked(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every event the toolkit writes in this process must fit its registered kind (``git_agentops.eventkinds``); a test
    marked ``event_data_free`` writes a registered kind with made-up data to test the journal itself."""
    event_kinds.check_data(request.node.get_closest_marker("event_data_free") is None)
    yield
    event_kinds.check_data(False)


def _session_seeds(factory: pytest.TempPathFactory) -> Path:
    """One pip-seeds directory for this pytest session: beside the xdist workers' temporary roots, so every worker
    shares it (the seeds' own lock orders two workers making the same one)."""
    base = factory.getbasetemp()
    path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "pip-seeds"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(autouse=True)
def hermetic(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("home")
    for var in _GIT_ENV_TO_DROP:
        monkeypatch.delenv(var, raising=False)
    xdg = {
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_STATE_HOME": home / ".local" / "state",
        "XDG_CACHE_HOME": home / ".cache",
        "XDG_DATA_HOME": home / ".local" / "share",
    }
    for var, path in xdg.items():
        path.mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(var, str(path))
    # a person's pip seeds serve all their repositories (git_agentops.envs.pipseed); this session's tests share one
    # directory of them, as one person's repositories do: the first base made from an interpreter pays ensurepip
    (xdg["XDG_CACHE_HOME"] / "git-agentops").mkdir()
    (xdg["XDG_CACHE_HOME"] / "git-agentops" / "pip-seeds").symlink_to(_session_seeds(tmp_path_factory))
    gitconfig = home / ".gitconfig"
    gitconfig.write_text(
        "[user]\n\tname = Test Agent\n\temail = agent@example.invalid\n"
        "[init]\n\tdefaultBranch = main\n[commit]\n\tgpgsign = false\n[advice]\n\tdetachedHead = false\n"
        "[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n"
    )
    monkeypatch.setenv("HOME", str(home))
    # the console scripts installed next to this interpreter, even when the venv is not activated
    monkeypatch.setenv("PATH", os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    # detached supervisors stay plain processes: never units in a developer's own user manager (which would also
    # restart the ones tests kill on purpose); tests/cli/test_service.py brings its own systemd
    monkeypatch.setenv("AGENTOPS_SUPERVISOR_MANAGER", "process")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    for who in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{who}_NAME", "Test Agent")
        monkeypatch.setenv(f"GIT_{who}_EMAIL", "agent@example.invalid")
        monkeypatch.setenv(f"GIT_{who}_DATE", FIXED_DATE)
    monkeypatch.setenv("GIT_TERMINAL_PROMPT", "0")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    from git_agentops.gitstore.safegit import set_base_environment

    set_base_environment(os.environ)  # what the CLI boundary does for the toolkit's own git calls
    empty = home / "empty-system-config"
    empty.mkdir()
    levels = pygit2.enums.ConfigLevel
    saved = {level: pygit2.settings.search_path[level] for level in (levels.SYSTEM, levels.XDG, levels.GLOBAL)}
    pygit2.settings.search_path[levels.SYSTEM] = str(empty)
    pygit2.settings.search_path[levels.XDG] = str(home / ".config")
    pygit2.settings.search_path[levels.GLOBAL] = str(home)
    try:
        yield home
    finally:
        for level, value in saved.items():
            pygit2.settings.search_path[level] = value


def git(cwd: Path | str, *args: str, check: bool = True, input: str | None = None) -> str:
    """Run the real git CLI; return stdout (stripped)."""
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, input=input, check=False, timeout=120
    )
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout.strip()


def commit_files(repo: Path, files: dict[str, str | bytes | None], message: str = "change") -> str:
    """Write (or, for None, delete) files and commit them without hooks; returns the new HEAD."""
    for name, content in files.items():
        path = repo / name
        if content is None:
            git(repo, "rm", "-q", "-r", name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-verify", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def make_repo(path: Path, *, files: dict[str, str] | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    for name, content in (files or {"README.md": "hello\n"}).items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


@pytest.fixture
def repo_path(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(step=1.0)


@pytest.fixture
def store(repo_path: Path, clock: FixedClock) -> Store:
    return open_store(repo_path, clock=clock, identity=IDENTITY)


@pytest.fixture
def run_cli(monkeypatch: pytest.MonkeyPatch) -> object:
    """Run a CLI command as a subprocess (the installed console script), returning CompletedProcess."""

    def _run(
        *args: str, cwd: Path, env: dict[str, str] | None = None, input: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        full_env = dict(os.environ)
        full_env.update(env or {})
        return subprocess.run(
            list(args),
            cwd=cwd,
            capture_output=True,
            text=True,
            env=full_env,
            input=input,
            timeout=timeout,
            check=False,
        )

    return _run
