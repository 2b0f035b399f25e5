"""A run whose policy declares a PostgreSQL service: every workspace -- each worker's, each verification's -- has a
database server of its own, its tests create and query a table there, and nothing of them is left after the run.
Then the bad services: one that exits at once and one that never becomes ready block the worker before its agent
starts, with their coded error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import commit_files, git
from ..helpers import HANDOFF, Part, child, commit_step
from ..runkit import command, project, recipe, start, supervisor_log, wait_for, wait_supervisor_gone
from .test_services import as_postgres, pg_tool

PSQL_CHECK = """\
import os, subprocess, sys
port = os.environ["AGENTOPS_SERVICE_DB_PORT"]
sql = ["create table t (x int)", "insert into t values (42)", "select sum(x) from t"]
argv = [sys.argv[1], "-h", "127.0.0.1", "-p", port, "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-tA"]
for statement in sql:  # "create table" fails where another workspace made t already: one database each
    argv += ["-c", statement]
out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.split()
assert out[-1] == "42", out
if len(sys.argv) > 2:
    open(sys.argv[2], "w").write(f"{port} {out[-1]}\\n")
print("table made and read on", port)
"""


def _toml_list(argv: tuple[str, ...]) -> str:
    return json.dumps(list(argv))


def _postgres_service(*, start: tuple[str, ...] | None = None, ready_timeout: int = 60) -> str:
    initdb = as_postgres(pg_tool("initdb"), "-D", "{data}", "-A", "trust", "-U", "postgres", "-N", "--no-locale")
    if os.geteuid() == 0:  # PostgreSQL refuses root: its data directory becomes nobody's first
        initdb = ("sh", "-c", 'chown nobody "$1" && shift && exec "$@"', "sh", "{data}", *initdb)
    server = as_postgres(
        pg_tool("postgres"), "-D", "{data}", "-h", "127.0.0.1", "-p", "{service_port}",
        "-c", "unix_socket_directories=", "-c", "fsync=off", "-c", "shared_buffers=16MB",
    )  # fmt: skip
    return f"""
[[worktree.services]]
name = "db"
init = {_toml_list(initdb)}
start = {_toml_list(start or server)}
ready = {_toml_list((pg_tool("pg_isready"), "-q", "-h", "127.0.0.1", "-p", "{service_port}", "-U", "postgres"))}
ready_timeout = {ready_timeout}
stop_timeout = 20
"""


NETWORKED = '\n[hosts.networked]\nkind = "scripted"\nnetwork = true\n'


@pytest.fixture
def traversable() -> Iterator[Path]:
    """A directory ``nobody`` may traverse (0711): as root, PostgreSQL runs as nobody and must reach its data."""
    base = Path(tempfile.mkdtemp(prefix="agentops-svc-", dir="/tmp"))
    base.chmod(0o711)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _project(root: Path, services: str) -> Path:
    policy = (
        services
        + NETWORKED
        + (
            '\n[[verify.commands]]\nid = "db"\n'
            f'argv = ["python3", "psql_check.py", "{pg_tool("psql")}"]\ntimeout = 120\n'
        )
    )
    repo = project(root, max_workers=2, extra_policy=policy, run_options='default_host = "networked"')
    commit_files(repo, {"psql_check.py": PSQL_CHECK}, "the database test")
    private = repo / ".git" / "agentops"
    private.mkdir(exist_ok=True)
    private.chmod(0o711)  # as root, nobody's server must traverse to its data directory in here
    return repo


def _postgres_processes(where: Path) -> list[str]:
    done = subprocess.run(["pgrep", "-af", "postgres"], capture_output=True, text=True, check=False)
    return [line for line in done.stdout.splitlines() if str(where) in line]


def test_invariant_each_workspace_has_its_own_database_and_none_is_left_after_the_run(traversable: Path) -> None:
    repo = _project(traversable, _postgres_service())
    tasks = Part()
    for name in ("a", "b"):
        steps = [{"run": ["python3", "psql_check.py", pg_tool("psql"), f"{name}.db"], "timeout": 120}]
        tasks = tasks + child(name, f"Part {name.upper()}", [[*steps, commit_step(name), HANDOFF]])
    run_id = start(repo, recipe(traversable, tasks, finalize=True))
    doc = wait_for(repo, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=600)
    assert doc["status"] == "complete", json.dumps(doc, indent=1)
    wait_supervisor_gone(repo, run_id)
    children = [w for w in doc["workers"] if w["role"] == "child"]
    assert all(w["workspace"]["services"][0].startswith("db:") for w in children), children
    report = command(repo, "agentops-run", "report", run_id)
    assert "## Workspaces" in report.stdout and " db on " in report.stdout, report.stdout
    ports = [git(repo, "show", f"main:{name}.db").split() for name in ("a", "b")]
    assert [p[1] for p in ports] == ["42", "42"] and ports[0][0] != ports[1][0]  # each agent: a server of its own
    state = repo / ".git" / "agentops" / "workspaces" / run_id
    left = list(state.glob("**/data"))
    assert not left, f"a workspace's database outlived the run: {left}\n{supervisor_log(repo, run_id)}"
    assert not list(state.glob("**/records/*")), "a service instance is still recorded"
    assert _postgres_processes(repo) == []


@pytest.mark.parametrize(
    ("start_argv", "code"),
    [(("sh", "-c", "echo 'no such config' >&2; exit 3"), "SERVICE_EXITED"), (("sleep", "600"), "SERVICE_NOT_READY")],
)
def test_a_service_that_exits_or_never_gets_ready_blocks_the_worker_before_it_starts(
    traversable: Path, start_argv: tuple[str, ...], code: str
) -> None:
    repo = _project(traversable, _postgres_service(start=start_argv, ready_timeout=2))
    run_id = start(repo, recipe(traversable, child("a", "Part A", [[commit_step("a"), HANDOFF]]), finalize=True))
    doc = wait_for(repo, run_id, lambda d: any(w["status"] == "blocked" for w in d["workers"]), timeout=180)
    blocked = [w for w in doc["workers"] if w["status"] == "blocked"]
    assert all(code in (w.get("blockedReason") or "") for w in blocked), json.dumps(blocked, indent=1)
    assert all(w["generation"] == 0 for w in blocked)  # no generation was issued: its agent never started
    state = repo / ".git" / "agentops" / "workspaces" / run_id
    assert not list(state.glob("**/records/*"))  # nothing left running
    from ..runkit import stop

    stop(repo, run_id)
