"""Attacks staged from inside a real worker, with the real git CLI, against the walls of issue 23.

Why: each of these got through Landlock alone. A worker emptied the shared object store (all history lost), drove
the person's tmux server and ssh-agent (Landlock does not mediate pathname sockets), wrote hooks into the person's
``~/.claude`` and read, as root, the supervisor's ``/proc/PID/environ``. Each test runs a whole run with the
scripted agent, whose ``run`` steps are the attacker's shell, and then checks what the attack left: nothing of the
repository lost, nothing of the person's reached, and the run completes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_agentops.sandbox.plan import kernel_abi

from ..conftest import git, make_repo
from ..helpers import HANDOFF, allowed_signer, child, commit_step, simple_child, ssh_key, write_step
from ..runkit import CHECK_PY, cli, events, project, recipe, start, stop, trust, wait_for

pytestmark = pytest.mark.skipif(kernel_abi() < 6, reason="needs Landlock ABI 6+ (this machine has 7)")


def _try(name: str, command: str) -> dict[str, object]:
    """A run step that runs ``command`` and appends its exit status to ``attack.log`` in the worktree, which the
    worker commits: the record outlives the worktree, on the target (never fails the agent)."""
    return {"run": ["sh", "-c", f"({command}) >/dev/null 2>&1; echo RESULT {name}=$? >> attack.log; true"]}


def _results(repo: Path) -> dict[str, int]:
    logs = git(repo, "show", "main:attack.log")
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"RESULT (\w+)=(\d+)", logs)}


def _complete(repo: Path, run_id: str) -> dict[str, object]:
    try:
        doc = wait_for(repo, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=240)
    finally:
        stop(repo, run_id)
    assert doc["status"] == "complete", doc
    return doc


def _every_ref_readable(repo: Path) -> None:
    listing = git(repo, "for-each-ref", "--format=%(objectname) %(refname)").splitlines()
    assert listing
    for line in listing:
        oid, name = line.split(" ", 1)
        assert subprocess.run(["git", "cat-file", "-e", oid], cwd=repo, check=False).returncode == 0, name
    git(repo, "fsck", "--strict")


@pytest.mark.slow
def test_a_worker_that_wipes_gcs_and_repacks_the_object_store_loses_nothing(tmp_path: Path) -> None:
    """Invariant: objects are append-only for agents -- whatever a worker deletes, every ref stays readable."""
    repo = project(tmp_path)
    before = git(repo, "count-objects", "-v")
    wipe = 'C=$(git rev-parse --path-format=absolute --git-common-dir); rm -rf "$C"/objects/pack/* "$C"/objects/??'
    steps = [
        write_step("src/a.txt", "a\n"),
        commit_step("add a"),
        _try("wipe", wipe),
        _try("wipe_unset", f"env -u GIT_OBJECT_DIRECTORY -u GIT_ALTERNATE_OBJECT_DIRECTORIES sh -c '{wipe}'"),
        _try("gc", "git gc --prune=now"),
        _try("repack", "git repack -ad"),
        _try("prune_unset", "env -u GIT_OBJECT_DIRECTORY git prune --expire=now"),
        _try("still_reads", "git cat-file -e HEAD~1 && git log --oneline -3"),
        write_step("src/b.txt", "b\n"),
        commit_step("add b after the attack"),
        HANDOFF,
    ]
    run_id = start(repo, recipe(tmp_path, child("w", "Wiper", [steps]) + simple_child("o", "src/o.txt"), finalize=True))
    doc = _complete(repo, run_id)
    results = _results(repo)
    assert results["wipe"] != 0 and results["wipe_unset"] != 0 and results["prune_unset"] != 0, results
    assert results["still_reads"] == 0, results
    assert git(repo, "show", "main:src/a.txt") == "a" and git(repo, "show", "main:src/b.txt") == "b"
    _every_ref_readable(repo)
    assert "count: " in before
    assert doc["status"] == "complete"


@pytest.fixture
def person_servers(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The person's tmux server and ssh-agent (holding the receipt signing key), started before the run."""
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed: .ci/run installs it")
    tmux = tmp_path / "tmux-0" / "default"
    tmux.parent.mkdir(mode=0o700)
    subprocess.run(["tmux", "-S", str(tmux), "new-session", "-d", "sleep 600"], check=True, timeout=30)
    agent_sock = tmp_path / "ssh-agent" / "agent.1"
    agent_sock.parent.mkdir(mode=0o700)
    done = subprocess.run(["ssh-agent", "-s", "-a", str(agent_sock)], capture_output=True, text=True, check=True)
    pid = int(done.stdout.split("SSH_AGENT_PID=")[1].split(";")[0])
    try:
        yield {"tmux": str(tmux), "SSH_AUTH_SOCK": str(agent_sock), "SSH_AGENT_PID": str(pid)}
    finally:
        subprocess.run(["tmux", "-S", str(tmux), "kill-server"], check=False, timeout=30)
        os.kill(pid, signal.SIGTERM)


SIGNED_POLICY = """version = 1
[run]
target = "main"
[[verify.commands]]
id = "check"
argv = ["python3", "check.py"]
timeout = 60
[receipts]
allowed_signers = ".agentops/allowed_signers"
require_signature = true
"""


@pytest.mark.slow
def test_the_persons_tmux_and_ssh_agent_are_unreachable_while_the_supervisor_signs_through_the_agent(
    tmp_path: Path, person_servers: dict[str, str]
) -> None:
    key = ssh_key(tmp_path / "key", comment="ci")
    agent_env = {k: v for k, v in person_servers.items() if k.startswith("SSH_")}
    subprocess.run(["ssh-add", "-q", str(key)], env={**os.environ, **agent_env}, check=True, capture_output=True)
    key.unlink()  # only ssh-agent holds the private half: the README's recommended set-up
    repo = make_repo(
        tmp_path / "repo",
        files={
            "check.py": CHECK_PY,
            "src/base.txt": "hello\n",
            ".agentops/policy.toml": SIGNED_POLICY,
            ".gitignore": "__pycache__/\n",
            ".agentops/allowed_signers": allowed_signer("ci@example", key),
        },
    )
    git(repo, "config", "agentops.signingKey", str(key.with_suffix(".pub")))
    trust(repo)
    hooks = repo / ".git" / "hooks"
    tmux, sock = person_servers["tmux"], person_servers["SSH_AUTH_SOCK"]
    connect = "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])"
    steps = [
        _try("tmux", f"tmux -S {tmux} run-shell 'touch {hooks}/planted'"),
        _try("tmux_connect", f'python3 -c "{connect}" {tmux}'),
        _try("ssh_add", f"SSH_AUTH_SOCK={sock} ssh-add -l"),
        _try("agent_connect", f'python3 -c "{connect}" {sock}'),
        _try("find_sockets", "ls /tmp/ssh-* /tmp/tmux-* /run/user/*/ 2>/dev/null | grep -q ."),
        _try("told", 'test -n "$SSH_AUTH_SOCK$TMUX"'),
        write_step("src/a.txt", "a\n"),
        commit_step("add a"),
        HANDOFF,
    ]
    run_id = start(repo, recipe(tmp_path, child("s", "Snoop", [steps]), finalize=True), env=agent_env)
    _complete(repo, run_id)
    results = _results(repo)
    for refused in ("tmux", "tmux_connect", "ssh_add", "agent_connect", "find_sockets", "told"):
        assert results.get(refused, 0) != 0, (refused, results)
    assert not (hooks / "planted").exists()
    done = cli(repo, "agentops-receipt", "verify", "main", "--json", "--require-signature")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["ok"] is True


@pytest.mark.slow
def test_the_persons_tool_config_and_caches_are_not_writable_and_proc_of_the_supervisor_is_closed(
    tmp_path: Path,
) -> None:
    home = Path(os.environ["HOME"])
    for path in (home / ".claude", home / ".config" / "opencode", home / ".cache" / "pip"):
        path.mkdir(parents=True, exist_ok=True)
    settings = home / ".claude" / "settings.json"
    settings.write_text("{}\n")
    repo = project(tmp_path)
    # the real HOME of the person, spelled out: the agent's own HOME is a private one
    hook = '{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"touch /tmp/pwned"}]}]}}'
    chain = (
        "import os\n"
        "def parent(pid):\n"
        "    return int(open(f'/proc/{pid}/status').read().split('PPid:')[1].split()[0])\n"
        "launcher = os.getppid()\n"
        "while b'launcher.py' not in open(f'/proc/{launcher}/cmdline', 'rb').read():\n"
        "    launcher = parent(launcher)\n"
        "supervisor = parent(launcher)\n"
        "assert b'agentops' in open(f'/proc/{supervisor}/cmdline', 'rb').read()\n"
        "import sys\n"
        "if sys.argv[1] == 'check': sys.exit(0)  # the chain itself is right: refusals below are the kernel's\n"
        "target = {'launcher': launcher, 'supervisor': supervisor}[sys.argv[1]]\n"
        "open(f'/proc/{target}/' + sys.argv[2], 'rb').read(1)\n"
    )
    steps = [
        _try("claude_settings", f"echo '{hook}' > {settings}"),
        _try("opencode_plugin", f"echo 'export default 1' > {home}/.config/opencode/plugin.js"),
        _try("pip_cache", f"touch {home}/.cache/pip/poisoned"),
        _try("own_home", 'mkdir -p "$HOME/.claude" && echo {} > "$HOME/.claude/settings.json"'),
        _try("home_is_private", f'test "$HOME" != {home}'),
        write_step("chain.py", chain),
        _try("chain_ok", "python3 chain.py check"),
        _try("sup_environ", "python3 chain.py supervisor environ"),
        _try("sup_maps", "python3 chain.py supervisor maps"),
        _try("launcher_environ", "python3 chain.py launcher environ"),
        _try("own_environ", "cat /proc/self/environ"),
        {"delete": "chain.py"},
        write_step("src/a.txt", "a\n"),
        commit_step("add a"),
        HANDOFF,
    ]
    run_id = start(repo, recipe(tmp_path, child("h", "Homes", [steps]), finalize=True))
    _complete(repo, run_id)
    results = _results(repo)
    for refused in ("claude_settings", "opencode_plugin", "pip_cache", "sup_environ", "sup_maps", "launcher_environ"):
        assert results.get(refused, 0) != 0, (refused, results)
    for allowed in ("chain_ok", "own_home", "home_is_private", "own_environ"):
        assert results.get(allowed) == 0, (allowed, results)
    assert settings.read_text() == "{}\n"
    assert not (home / ".config" / "opencode" / "plugin.js").exists()
    assert not (home / ".cache" / "pip" / "poisoned").exists()
    assert not [e for e in events(repo, run_id) if e["code"] == "REQUEST_REFUSED"]
