"""Workspaces in real runs: ports that never collide across concurrent runs, the person's local files in every
worktree and never in a delivery, and blocks freed by the kernel when a supervisor is killed."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from git_agentops.workspace import ports

from ..conftest import commit_files, git
from ..helpers import HANDOFF, Part, child, commit_step, write_step
from ..runkit import command, events, project, recipe, start, stop, supervisor_pid, wait_for, wait_supervisor_gone

SERVE_CHECK = """\
import http.server, os, pathlib, sys, threading, time, urllib.request, uuid

port = int(os.environ["AGENTOPS_PORT"])
assert os.environ["AGENTOPS_PORTS"].split(",")[0] == str(port), os.environ["AGENTOPS_PORTS"]
token = uuid.uuid4().hex


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(token.encode())

    def log_message(self, *args):
        pass


server = http.server.HTTPServer(("127.0.0.1", port), Handler)  # EADDRINUSE if another workspace serves here
threading.Thread(target=server.serve_forever, daemon=True).start()
for _ in range(10):  # held a while, so that the runs' servers overlap in time
    got = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read().decode()
    assert got == token, f"port {port} answered with another server's token"
    time.sleep(0.1)
server.shutdown()
if len(sys.argv) > 1:
    pathlib.Path(sys.argv[1]).parent.mkdir(exist_ok=True)
    pathlib.Path(sys.argv[1]).write_text(f"{port} {os.readlink('/proc/self/ns/net')}\\n")
print("served on", port)
"""

NETWORKED = """
[hosts.networked]
kind = "scripted"
network = true  # the agents share the machine's network: a collision between them would be a real one
"""

PORTS_POLICY = """
[worktree]
ports = 2

[[verify.commands]]
id = "serve"
argv = ["python3", "serve_check.py"]
timeout = 120
"""


def _served(name: str) -> list[Any]:
    """An agent that runs the project's server test in its worktree, records the port, commits and hands off."""
    return [
        {"run": ["python3", "serve_check.py", f"served/{name}.txt"], "timeout": 120},
        commit_step(f"Serve {name}"),
        HANDOFF,
    ]


def _project(root: Path, extra: str, *, networked: bool = False) -> Path:
    options = 'default_host = "networked"' if networked else ""
    repo = project(root, max_workers=4, extra_policy=extra + (NETWORKED if networked else ""), run_options=options)
    commit_files(repo, {"serve_check.py": SERVE_CHECK}, "the server test")
    return repo


def test_invariant_16_workers_in_4_concurrent_runs_each_reach_their_own_server(tmp_path: Path) -> None:
    names = ("a", "b", "c", "d")
    runs: list[tuple[Path, str]] = []
    for index in range(4):
        repo = _project(tmp_path / f"run{index}", PORTS_POLICY, networked=True)
        tasks = Part()
        for name in names:
            tasks = tasks + child(name, f"Part {name.upper()}", [_served(name)])
        runs.append((repo, start(repo, recipe(tmp_path, tasks, finalize=True, name=f"recipe{index}.toml"))))
    served: list[int] = []
    for repo, run_id in runs:
        doc = wait_for(repo, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=600)
        assert doc["status"] == "complete", json.dumps(doc, indent=1)
        children = [w for w in doc["workers"] if w["role"] == "child"]
        assert all(len(w["workspace"]["ports"]) == 2 and w["workspace"]["seconds"] > 0 for w in children), children
        assert all(w["workspace"]["diskBytes"] > 0 for w in children)
        for name in names:  # the agent's own test reached its own server, on its block's first port
            port, network = git(repo, "show", f"main:served/{name}.txt").split()
            assert network == os.readlink("/proc/self/ns/net")  # in the machine's network, beside the others
            served.append(int(port))
    assert len(served) == 16 and len(set(served)) == 16, served
    # the verifications ran the same test in their own checkouts, with blocks of their own: every one passed
    # (a collision is an EADDRINUSE or another server's token: the run would have blocked)


def test_invariant_kill_9_of_every_supervisor_frees_every_block_and_resume_finishes(tmp_path: Path) -> None:
    locks = {"AGENTOPS_PORTS_DIR": str(tmp_path / "port-locks")}
    sleepy = [write_step("src/w.txt", "w\n"), commit_step("w"), "{ sleep = 600 }", HANDOFF]
    done = [write_step("src/w.txt", "w\n"), commit_step("w"), HANDOFF]
    runs: list[tuple[Path, str]] = []
    for index in range(2):
        repo = _project(tmp_path / f"run{index}", PORTS_POLICY)
        tasks = child("p", "Part P", [sleepy, done]) + child("q", "Part Q", [sleepy, done])
        runs.append((repo, start(repo, recipe(tmp_path, tasks, finalize=True, name=f"r{index}.toml"), env=locks)))
    for repo, run_id in runs:
        wait_for(repo, run_id, lambda d: sum(w["status"] == "running" for w in d["workers"]) == 3, timeout=180)
    held = ports.holders(locks)
    assert len(held) == 2 * 3 * 2, held  # 2 runs x (coordinator and 2 children) x 2 ports
    for repo, run_id in runs:
        os.kill(supervisor_pid(repo, run_id), signal.SIGKILL)
        wait_supervisor_gone(repo, run_id)
    assert ports.holders(locks) == {}  # the kernel dropped them with their holders
    for repo, run_id in runs:
        resumed = command(repo, "agentops-run", "resume", run_id, "--json", env=locks)
        assert resumed.returncode == 0, resumed.stderr
    for repo, run_id in runs:
        doc = wait_for(repo, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=300)
        assert doc["status"] == "complete", json.dumps(doc, indent=1)
        wait_supervisor_gone(repo, run_id)
    assert ports.holders(locks) == {}  # and nothing is held once the runs are over


INCLUDE_POLICY = """
[worktree]
include = [".env.local"]
include_in_verify = true

[[verify.commands]]
id = "env"
argv = ["grep", "-q", "DATABASE_URL", ".env.local"]  # the tests read it: the verification checkout has it too
"""


def test_env_local_is_in_every_worktree_and_verification_and_refused_in_a_delivery(tmp_path: Path) -> None:
    repo = _project(tmp_path, INCLUDE_POLICY)
    commit_files(repo, {".gitignore": "__pycache__/\n.env.local\n"}, "ignore the local env")
    (repo / ".env.local").write_text("DATABASE_URL=postgres://local/dev\n")
    (repo / ".env.local").chmod(0o600)
    forced = {"run": ["git", "add", "-f", ".env.local"], "timeout": 30}  # past .gitignore, on purpose
    tasks = (
        child("a", "Part A", [[forced, write_step("src/a.txt", "a\n"), commit_step("a"), HANDOFF]])
        + child("c", "Part C", [[write_step("src/c.txt", "c\n"), commit_step("c"), HANDOFF]])
        + child("b", "Part B", [[write_step("src/b.txt", "b\n"), "{ sleep = 600 }"]])
    )
    run_id = start(repo, recipe(tmp_path, tasks, finalize=True))
    deadline = time.monotonic() + 180
    while not (refused := [e for e in events(repo, run_id) if "RUN_DELIVERY_SECRET" in json.dumps(e)]):
        assert time.monotonic() < deadline, "the delivery that commits .env.local must be refused"
        time.sleep(0.5)
    assert ".env.local" in json.dumps(refused)
    doc = wait_for(
        repo, run_id, lambda d: any(t["title"] == "Part C" and t["delivery"] for t in d["tasks"]), timeout=180
    )
    worktrees = [Path(w["worktree"]) for w in doc["workers"]]
    assert len(worktrees) == 4  # the coordinator's too
    for worktree in worktrees:
        assert (worktree / ".env.local").read_text() == "DATABASE_URL=postgres://local/dev\n"
        assert (worktree / ".env.local").stat().st_mode & 0o777 == 0o600
    stop(repo, run_id)
    assert "postgres://local/dev" not in git(repo, "log", "-p", "main")


def test_no_free_ports_left_blocks_the_worker_before_its_agent_starts(tmp_path: Path) -> None:
    narrow = {"AGENTOPS_PORTS_DIR": str(tmp_path / "port-locks"), "AGENTOPS_PORT_RANGE": "30500-30502"}
    repo = _project(tmp_path, PORTS_POLICY)
    with ports.allocate(2, holder="someone else", environ=narrow):  # 30500-30501 taken: no block of 2 is left
        run_id = start(repo, recipe(tmp_path, child("a", "Part A", [_served("a")]), finalize=True), env=narrow)
        doc = wait_for(repo, run_id, lambda d: any(w["status"] == "blocked" for w in d["workers"]), timeout=120)
    blocked = [w for w in doc["workers"] if w["status"] == "blocked"]
    assert all("WORKSPACE_NO_PORTS" in w["blockedReason"] and w["generation"] == 0 for w in blocked), blocked
    stop(repo, run_id)


def test_setup_steps_get_the_workspace_s_port_in_every_worktree(tmp_path: Path) -> None:
    setup = """
[worktree]
ports = 1

[[worktree.setup]]
argv = ["sh", "-c", "echo \\"{port} $AGENTOPS_PORT\\" > .setup-port"]
"""
    repo = _project(tmp_path, setup)
    commit_files(repo, {".gitignore": "__pycache__/\n.setup-port\n"}, "ignore what setup makes")
    tasks = child("a", "Part A", [[write_step("src/a.txt", "a\n"), "{ sleep = 600 }"]])
    run_id = start(repo, recipe(tmp_path, tasks, finalize=True))
    doc = wait_for(repo, run_id, lambda d: any(w["status"] == "running" for w in d["workers"] if w["role"] == "child"))
    ports = []
    for worker in doc["workers"]:  # the coordinator's (set up when the run was created) and the child's
        placeholder, variable = (Path(worker["worktree"]) / ".setup-port").read_text().split()
        assert placeholder == variable and 20000 <= int(placeholder) <= 29999, (placeholder, variable)
        ports.append(int(placeholder))
    assert len(ports) == 2
    stop(repo, run_id)
