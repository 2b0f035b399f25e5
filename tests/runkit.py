"""Helpers for end-to-end run tests: a small trusted project, recipes, and waiting on a detached supervisor."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

from .conftest import git, make_repo
from .golden import checked
from .helpers import Part, recipe_text

CHECK_PY = """import pathlib, sys
files = sorted(pathlib.Path("src").rglob("*.txt"))
bad = [str(p) for p in files if "BAD" in p.read_text()]
print("checked", len(files), "files; bad:", bad)
sys.exit(1 if bad else 0)
"""

POLICY = """version = 1
[run]
target = "main"
max_workers = {max_workers}
{run_options}
[[verify.commands]]
id = "check"
argv = ["python3", "check.py"]
timeout = 60
"""


UNCONFINED = '[sandbox]\nmode = "none"\n'
"""Policy lines that run agents without the kernel sandbox: the tests of the supervisor's own defences, which must
hold where Landlock is missing (``test_sandbox_runs`` shows the kernel refusing the same writes)."""


def project(root: Path, *, max_workers: int = 3, extra_policy: str = "", run_options: str = "") -> Path:
    """A small trusted project; ``run_options`` are more lines of its ``[run]`` table, ``extra_policy`` more tables."""
    repo = make_repo(
        root / "repo",
        files={
            "check.py": CHECK_PY,
            "src/base.txt": "hello\n",
            ".agentops/policy.toml": POLICY.format(max_workers=max_workers, run_options=run_options) + extra_policy,
            ".gitignore": "__pycache__/\n",
        },
    )
    trust(repo)
    return repo


def trust(repo: Path) -> None:
    """``git agentops-policy trust --yes`` in ``repo``, run in this process: the command's own ``main`` (parsing,
    the agent refusal, the grant, its output), without a process start-up and the imports of a fresh interpreter
    (~0.4 s of CPU, paid by every test that makes a project). The command as a process is what
    ``tests/policy/test_trust.py`` runs; what it writes does not depend on which process runs it: the grantor's login,
    git identity and terminal (none: stdin is not one under pytest, nor in the subprocess it replaces)."""
    done = in_process(repo, "git_agentops.cli.policy", "trust", "--yes")
    assert done.returncode == 0, done.stderr


def in_process(cwd: Path, module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``main(args)`` of the command module ``module`` (``git_agentops.cli.NAME``) run in this process, in ``cwd``,
    with this process's (the test's hermetic) environment; its exit status and what it printed, as a subprocess's.

    Only for commands that return (never ``supervise`` nor a foreground ``start``: they would serve the run in
    this process; a detached start spawns its supervisor as a process and returns, see :func:`start`) and only
    where a test's subject is not the process itself (its start-up, its signals, its exit): one test per command
    keeps running it for real."""
    import importlib
    import io

    main = importlib.import_module(module).main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(args))
    return subprocess.CompletedProcess([module, *args], int(status), out.getvalue(), err.getvalue())


def cli(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


def recipe(
    tmp: Path, children: Part, *, finalize: bool = False, one_shot: bool = False, name: str = "recipe.toml"
) -> Path:
    path = tmp / name
    path.write_text(recipe_text(children, finalize=finalize, one_shot=one_shot))
    return path


START = ("--detach", "--json")


def start(repo: Path, recipe_path: Path, *extra: str, env: dict[str, str] | None = None) -> str:
    """``git agentops-run start --goal ... --recipe RECIPE --detach --json EXTRA`` run in this process
    (:func:`in_process`); the run id. ``env`` adds to the supervisor's environment (``AGENTOPS_FAULT``).

    Why in-process: most run tests begin here, and as a process it was ~0.25 s of CPU, nearly all of it a fresh
    interpreter's start-up and imports; what it does is the same function's work either way -- the run created in
    the repository, then the supervisor spawned as a real detached process (``--detach``: it is a child of this
    process now, in a session of its own, reaped by :mod:`subprocess` once it exits). The path to it sets no
    signal handler and leaves no thread, fd, cwd or umask behind (``cli/run.py`` ``_start``,
    ``supervisor/spawn.py``). The supervisor's environment is the command's (``Context.env``, filtered by
    ``service_env``), so it is built as ``git`` would have built it: :func:`as_git_subcommand` for the duration of
    the call only. The command as a process, spawning a supervisor that serves the run, keeps its own tests:
    ``tests/cli/test_service.py`` (``test_without_a_user_systemd_the_supervisor_is_a_detached_process_that_resume_
    revives``), ``tests/hosts/test_agent_hosts.py`` and ``tests/sandbox/test_sandbox_policy.py``."""
    argv = ("start", "--goal", "Build the parts", "--recipe", str(recipe_path), *START, *extra)
    done = command(repo, "agentops-run", *argv, env=env)
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["runId"])


def command(cwd: Path, name: str, *args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``git NAME ARGS`` for a toolkit command (``git agentops-X ...``: ``main`` of ``git_agentops.cli.X``), run in
    this process (:func:`in_process`) with the environment git gives it (:func:`as_git_subcommand`, ``env`` added
    for the call only): what :func:`cli` returns, without a process start-up. Also for the commands that spawn a
    detached supervisor (``run start --detach``, ``resume``, ``answer``): it runs as a real process either way."""
    module = "git_agentops.cli." + name.removeprefix("agentops-")
    with as_git_subcommand(env or {}), warnings.catch_warnings():
        # the Popen of a detached supervisor is dropped while it runs, on purpose: it is meant to outlive the command
        warnings.simplefilter("ignore", ResourceWarning)
        return in_process(cwd, module, *args)


@functools.cache
def _git_exec_path() -> str:
    return git("/", "--exec-path")


@contextlib.contextmanager
def as_git_subcommand(extra: Mapping[str, str]) -> Iterator[None]:
    """This process's environment, while the block runs, as ``git agentops-X`` gives it to the command
    ``git-agentops-X`` it runs: ``extra`` added (what ``subprocess.run(env={**os.environ, **extra})`` gave), then
    ``GIT_EXEC_PATH`` set and git's exec path put first on ``PATH``, as git does for every external subcommand.
    Restored after (and the toolkit's own git calls started from it again, :func:`set_base_environment`)."""
    from git_agentops.gitstore.safegit import set_base_environment

    exec_path = _git_exec_path()
    added = {**extra}
    added["PATH"] = os.pathsep.join([exec_path, added.get("PATH", os.environ.get("PATH", ""))])
    added["GIT_EXEC_PATH"] = exec_path
    saved = {name: os.environ.get(name) for name in added}
    os.environ.update(added)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value
        set_base_environment(os.environ)


def status(repo: Path, run_id: str) -> dict[str, Any]:
    """What ``git agentops-run status RUN --json`` prints, run in this process (:func:`in_process`).

    Why in-process: every wait of every run test ends with it, and as a process it was ~0.35 s of CPU (a fresh
    interpreter importing pygit2 and the run model) beside the supervisor under test; the document is the same
    function's output either way -- the state is read from the repository afresh at each call. The command as a
    process keeps its own tests (``tests/runs/test_run.py``, ``tests/cli/test_cli.py``)."""
    done = in_process(repo, "git_agentops.cli.run", "status", run_id, "--json")
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


REFS_EVERY = 0.05
"""Seconds between two looks at the repository's refs while waiting on a run (a walk of a few dozen small files)."""
STATUS_AT_LEAST_EVERY = 10.0
"""Seconds after which ``git agentops-run status`` is asked although no ref moved, or the run's state read here
did not satisfy the predicate: a safety net for anything status shows that is not in a ref (today only
``budget.usedSeconds``) or not in :func:`git_agentops.runs.controls.summary` (``sandbox``)."""


@checked
def wait_for(
    repo: Path, run_id: str, predicate: Callable[[dict[str, Any]], bool], *, timeout: float = 90
) -> dict[str, Any]:
    """``git agentops-run status --json`` once ``predicate`` holds for it (an AssertionError after ``timeout``).

    Why not poll that command: each is a whole process, a third of a second of CPU, and on two cores polling it
    kept a core busy beside the supervisor under test; backing off (to 0.8 s) made each wait end up to 0.8 s
    late instead. Everything status shows is read from the run's refs, so the refs are watched (a few dozen
    files, every :data:`REFS_EVERY` s); when one moved, the run's summary is read here, in-process (a few ms:
    the function status prints); only once the predicate holds for that is the command run, and what it prints
    -- checked against the predicate again -- is what the test gets."""
    deadline = time.monotonic() + timeout
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    seen: tuple[tuple[str, bytes], ...] | None = None
    asked = time.monotonic()
    doc: dict[str, Any] | None = None
    while True:
        refs = ref_values(common)  # before reading the state: a move while it is read is seen on the next look
        if refs != seen:
            seen = refs
            peeked = peek(repo, run_id)
            if peeked is None or _holds(predicate, peeked):
                doc, asked = status(repo, run_id), time.monotonic()
                if _holds(predicate, doc):
                    return doc
        if time.monotonic() - asked >= STATUS_AT_LEAST_EVERY:
            doc, asked = status(repo, run_id), time.monotonic()
            if _holds(predicate, doc):
                return doc
        if time.monotonic() > deadline:
            doc = status(repo, run_id)
            if _holds(predicate, doc):
                return doc
            raise AssertionError(
                f"timed out; last status:\n{json.dumps(doc, indent=1)}\n{supervisor_log(repo, run_id)}"
            )
        time.sleep(REFS_EVERY)


def peek(repo: Path, run_id: str) -> dict[str, Any] | None:
    """The run's summary read in this process (a fresh repository handle, nothing cached), or None when it cannot
    be read, for whatever reason -- it is only a hint of when to ask: the caller then asks the command, which
    says why."""
    from git_agentops.clock import SystemClock
    from git_agentops.gitstore.repo import open_store
    from git_agentops.runs.controls import summary

    clock = SystemClock()
    try:
        return cast(dict[str, Any], summary(open_store(repo, clock=clock), run_id, clock))  # a StatusDoc
    except Exception:  # a hint only: see above
        return None


def ref_values(common: Path) -> tuple[tuple[str, bytes], ...]:
    """Every loose ref file under ``common/refs`` and ``packed-refs``, with its content: equal twice only when no
    ref moved in between (a file being replaced is read as it is, or skipped; either way it differs from before)."""
    found = []
    for base, _dirs, files in os.walk(common / "refs"):
        for name in files:
            path = os.path.join(base, name)
            with contextlib.suppress(OSError):
                found.append((path, Path(path).read_bytes()))
    with contextlib.suppress(OSError):
        found.append(("packed-refs", (common / "packed-refs").read_bytes()))
    return tuple(sorted(found))


def _holds(predicate: Callable[[dict[str, Any]], bool], doc: dict[str, Any]) -> bool:
    """``predicate(doc)``; False while what it looks for is not there yet (a task not planned, a worker not
    started: ``task_by_title`` and ``worker_of`` raise StopIteration, a missing key LookupError)."""
    try:
        return predicate(doc)
    except (StopIteration, LookupError):
        return False


def children_settled(doc: dict[str, Any]) -> bool:
    kids = [t for t in doc["tasks"] if t["parent"]]
    return bool(kids) and all(t["status"] in ("delivered", "blocked") for t in kids)


def supervisor_log(repo: Path, run_id: str) -> str:
    path = repo / ".git" / "agentops" / "runs" / run_id / "supervisor.log"
    out = path.read_text() if path.exists() else "(no supervisor log)"
    extra = repo / ".git" / "agentops" / "runs" / run_id / "supervisor.out"
    return out + ("\n--- supervisor.out ---\n" + extra.read_text() if extra.exists() else "")


def supervisor_pid(repo: Path, run_id: str) -> int:
    return int((repo / ".git" / "agentops" / "runs" / run_id / "supervisor.pid").read_text().strip())


def supervisor_running(repo: Path, run_id: str) -> bool:
    import fcntl

    lock = repo / ".git" / "agentops" / "runs" / run_id / "supervisor.lock"
    if not lock.exists():
        return False
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


@checked
def wait_supervisor_gone(repo: Path, run_id: str, timeout: float = 120) -> None:
    """Until the run's supervisor exits (a fault injection killed it, or the run ended)."""
    deadline = time.monotonic() + timeout
    while supervisor_running(repo, run_id):
        assert time.monotonic() < deadline, "the supervisor did not exit"
        time.sleep(0.1)


@checked
def stop(repo: Path, run_id: str, *, timeout: float = 30) -> None:
    """``git agentops-run stop RUN`` (run in this process, see :func:`status`), then until its supervisor exited."""
    in_process(repo, "git_agentops.cli.run", "stop", run_id)
    deadline = time.monotonic() + timeout
    while supervisor_running(repo, run_id):
        if time.monotonic() > deadline:
            os.kill(supervisor_pid(repo, run_id), signal.SIGKILL)
            raise AssertionError("the supervisor did not stop")
        time.sleep(0.1)


def task_by_title(doc: dict[str, Any], title: str) -> dict[str, Any]:
    return next(t for t in doc["tasks"] if t["title"] == title)


def worker_of(doc: dict[str, Any], task_id: str) -> dict[str, Any]:
    return next(w for w in doc["workers"] if w["taskId"] == task_id)


def events(repo: Path, run_id: str) -> list[dict[str, Any]]:
    """What ``git agentops-run log RUN --json`` lists, run in this process (see :func:`status`)."""
    done = in_process(repo, "git_agentops.cli.run", "log", run_id, "--json")
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout)["events"])


def verify_receipts(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``git agentops-receipt verify ARGS`` run in this process (:func:`in_process`): what it prints and its exit
    status. Checking a run's receipts is how many run tests end, and as a process each check was a fresh
    interpreter's imports; the verdicts are the same function's either way, read from the repository afresh. The
    command as a process keeps its own tests (``tests/receipts/``)."""
    return in_process(cwd, "git_agentops.cli.receipt", "verify", *args)


def refs(repo: Path, prefix: str) -> dict[str, str]:
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", prefix)
    return dict(line.split(" ", 1) for line in out.splitlines() if line)
