"""Agents in the kernel sandbox, in real runs: what they need works with the real git CLI; what the issue forbids
fails at the kernel with EACCES (or EPERM for signals), and the run records nothing wrong.

The scripted agent is the agent here: it runs inside the launcher's Landlock domain like any host, so its own
``git add``/``commit`` and ``git agentops-request`` calls are the sandboxed git; its ``run`` steps play the
attacker and print one ``RESULT name=<exit status>`` line each to the host log, which the test reads.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from git_agentops.sandbox.plan import kernel_abi

from ..conftest import git
from ..helpers import HANDOFF, child, commit_step, require_tool, simple_child, write_step
from ..runkit import children_settled, project, recipe, start, stop, task_by_title, wait_for, worker_of

# needs the kernel's wall (see tests/sandbox/test_sandbox_launcher.py for why a missing Landlock skips rather than
# fails)
pytestmark = pytest.mark.skipif(kernel_abi() < 6, reason="needs Landlock ABI 6+ (this machine has 7)")


def _wheel(where: Path) -> Path:
    """A minimal pure-Python wheel of ``localpkg`` (what pip installs without an index or a build backend)."""
    import base64
    import hashlib
    import zipfile

    path = where / "localpkg-1.0-py3-none-any.whl"
    files = {
        "localpkg.py": b"VALUE = 42\n",
        "localpkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: localpkg\nVersion: 1.0\n",
        "localpkg-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("localpkg-1.0.dist-info/RECORD,,")
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr("localpkg-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def _node_package(repo: Path) -> None:
    """A Node package with a lockfile whose one dependency is a tarball the project vendors: what ``npm ci``
    installs offline, through its cache (in the agent's private HOME) into ``node_modules``."""
    npm = require_tool("npm", "apt-get install npm")
    dep = repo / "vendor" / "leftpad"
    dep.mkdir(parents=True)
    (dep / "package.json").write_text('{"name": "leftpad", "version": "1.0.0", "main": "index.js"}\n')
    (dep / "index.js").write_text("module.exports = (s, n) => String(s).padStart(n);\n")
    env = {**os.environ, "npm_config_cache": str(repo.parent / "npm-cache")}
    subprocess.run([npm, "pack", "--silent", "--pack-destination", str(repo / "vendor"), str(dep)], env=env, check=True)
    (repo / "package.json").write_text(
        '{"name": "proj", "version": "1.0.0", "private": true,'
        ' "dependencies": {"leftpad": "file:vendor/leftpad-1.0.0.tgz"}}\n'
    )
    subprocess.run([npm, "install", "--offline", "--no-audit", "--no-fund", "-s"], cwd=repo, env=env, check=True)
    subprocess.run(["rm", "-rf", str(repo / "node_modules"), str(dep)], check=True)
    git(repo, "add", "package.json", "package-lock.json", "vendor/leftpad-1.0.0.tgz")
    git(repo, "commit", "-qm", "a node package")


def _try(name: str, command: str) -> dict[str, object]:
    """A run step that runs ``command`` and prints its exit status (never fails the agent)."""
    return {"run": ["sh", "-c", f"{command} >/dev/null 2>&1; echo RESULT {name}=$?; true"]}


def _results(repo: Path, worker_id: str) -> dict[str, int]:
    logs = "".join(
        p.read_text(errors="replace") for p in (repo / ".git" / "worktrees").glob(f"*/agentops/host-{worker_id}.log")
    )
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"RESULT (\w+)=(\d+)", logs)}


@pytest.mark.slow
def test_inside_the_sandbox_the_work_works_and_the_forbidden_fails_at_the_kernel(tmp_path: Path) -> None:
    repo = project(tmp_path)
    (repo / "vendor").mkdir()  # the wheel is the project's own: the agent's /tmp is private, the test's is not it
    wheel = _wheel(repo / "vendor").relative_to(repo)
    git(repo, "add", "vendor")
    git(repo, "commit", "-qm", "vendor a wheel")
    _node_package(repo)
    key_dir = tmp_path / "keys"
    key_dir.mkdir()
    (key_dir / "signing").write_text("PRIVATE\n")
    git(repo, "config", "agentops.signingKey", str(key_dir / "signing"))
    state = Path(os.environ["XDG_STATE_HOME"]) / "git-agentops" / "trust.json"
    common = repo / ".git"
    python = "python3 -c"
    steps = [
        write_step("src/a.txt", "a\n"),
        commit_step("add a"),  # the sandboxed git: objects, index and HEAD in the admin dir
        _try("commit_again", "echo more >> src/a.txt && git add -A && git commit -qm more"),
        _try("log", "git log --oneline -1"),
        _try(  # a real merge commit: MERGE_HEAD, ORIG_HEAD and the index live in the admin dir
            "merge",
            "B=$(git rev-parse HEAD) && echo side > src/side.txt && git add src/side.txt && git commit -qm side"
            " && S=$(git rev-parse HEAD) && git reset -q --hard $B && git merge --no-ff --no-edit -q $S"
            " && test $(git rev-list --count --merges HEAD) = 1",
        ),
        _try(
            "pip",  # a worktree venv, and pip installing into it (offline: a wheel the project vendors)
            f"python3 -m venv .agentops/venv && .agentops/venv/bin/pip install -q --no-index --no-cache-dir {wheel}"
            " && .agentops/venv/bin/python -c 'import localpkg; assert localpkg.VALUE == 42'",
        ),
        _try("tmp", 'echo x > "$TMPDIR/scratch" && cat "$TMPDIR/scratch"'),
        _try(  # npm ci, offline, its cache in the agent's own HOME; node_modules is an artifact, not dirt
            "npm",
            "npm ci --offline --no-audit --no-fund"
            " && node -e \"process.exit(require('leftpad')('x', 3) === '  x' ? 0 : 1)\""
            ' && test -d "$HOME/.npm/_cacache"',
        ),
        _try("update_ref", "git update-ref refs/heads/evil HEAD"),
        _try("notes", "git notes --ref=agentops/evidence add -m forged HEAD"),
        _try("state_ref", f"echo 0 > {common}/refs/agentops/x"),
        _try("config", "git config core.fsmonitor /bin/true"),
        _try("hooks", f"touch {common}/hooks/pre-commit"),
        _try("info", f"echo '*' >> {common}/info/exclude"),
        _try("other_worktree", f"touch {repo}/src/planted.txt"),
        _try("read_key", f"cat {key_dir / 'signing'}"),
        _try("read_trust", f"cat {state}"),
        _try("read_private", f"cat {common / 'agentops' / 'keys' / 'mac.key'}"),
        _try("list_private", f"ls {common / 'agentops' / 'keys'}"),
        _try("write_slots", f"mkdir -p {Path(os.environ['XDG_CACHE_HOME']) / 'git-agentops' / 'x'}"),
        _try("signal_supervisor", "kill -0 $(ps -o ppid= -p $PPID)"),
        _try("eacces", f"{python} \"import errno; open('{common}/config', 'a')\""),
        _try(
            "errno",
            f"{python} \"import sys\ntry:\n open('{common}/config', 'a')\nexcept OSError as e:\n sys.exit(e.errno)\"",
        ),
        HANDOFF,
    ]
    run_id = start(repo, recipe(tmp_path, child("s", "Sandboxed", [steps]) + simple_child("o", "src/o.txt")))
    try:
        doc = wait_for(repo, run_id, children_settled, timeout=180)
        worker = worker_of(doc, task_by_title(doc, "Sandboxed")["taskId"])["workerId"]
        results = _results(repo, worker)
    finally:
        stop(repo, run_id)
    for allowed in ("commit_again", "log", "merge", "pip", "tmp", "npm"):
        assert results.get(allowed) == 0, (allowed, results)
    for refused in (
        "update_ref",
        "notes",
        "state_ref",
        "config",
        "hooks",
        "info",
        "other_worktree",
        "read_key",
        "read_trust",
        "read_private",
        "list_private",
        "write_slots",
        "signal_supervisor",
        "eacces",
    ):
        assert results.get(refused, 0) != 0, (refused, results)
    assert results["errno"] == 13  # EACCES, from the kernel
    assert {t["status"] for t in doc["tasks"] if t["parent"]} == {"delivered"}  # and the run goes on
    assert git(repo, "for-each-ref", "refs/heads/evil") == ""
    assert git(repo, "config", "--get", "core.fsmonitor", check=False) == ""
    assert not (repo / "src" / "planted.txt").exists()


@pytest.mark.slow
def test_a_daemon_an_agent_leaves_is_dead_within_a_second_of_the_worker_being_stopped(tmp_path: Path) -> None:
    """Even with its environment scrubbed (nothing ties it to the worker but ancestry): the launcher is its
    subreaper, and stopping the worker stops the launcher's whole tree."""
    repo = project(tmp_path)
    # the pid goes to the agent's private TMPDIR (the sandbox lets it write nowhere the test could choose)
    loop = "echo $$ > $P; while true; do sleep 0.05; done"
    steps = [
        {
            "run": [
                "sh",
                "-c",
                'P="$TMPDIR/daemon.pid"; '
                f"env -i P=\"$P\" /usr/bin/setsid /bin/sh -c '{loop}' >/dev/null 2>&1 < /dev/null & "
                'while [ ! -s "$P" ]; do sleep 0.01; done',
            ]
        },
        {"sleep": 60},
    ]
    run_id = start(repo, recipe(tmp_path, child("d", "Daemon", [steps])))
    try:
        deadline = time.monotonic() + 60
        while not (found := [p for p in repo.glob(".git/worktrees/*/agentops-tmp/daemon.pid") if p.read_text()]):
            assert time.monotonic() < deadline, "the daemon never started"
            time.sleep(0.05)
        pid = int(found[0].read_text())
        os.kill(pid, 0)  # alive, in its own session
        assert os.getsid(pid) == pid
    finally:
        stop(repo, run_id)
    deadline = time.monotonic() + 1.0
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    listed = subprocess.run(["ps", "-o", "pid=,stat=", "-p", str(pid)], capture_output=True, text=True, check=False)
    assert not _alive(pid), f"daemon {pid} survived the worker: {listed.stdout}"
    assert listed.stdout.strip() == "" or listed.stdout.split()[1].startswith("Z"), listed.stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
