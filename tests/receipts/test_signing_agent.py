"""The receipt signing key stays out of agents' hands: signed through ssh-agent, and no agent learns the socket.

Why: ``agentops.signingKey`` naming a private key file puts the key on disk where any process of the user outside
the sandbox can read it; with ssh-agent (the key named by its ``.pub``, as git's ``user.signingKey`` allows) only
the agent holds it -- and then the agent's socket is the secret, so agents must not be told where it is.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_agentops.clock import SystemClock
from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.repo import open_store
from git_agentops.hosts.launch import KEY_AGENTS, HostSpec, Launch, agent_environment
from git_agentops.receipts import sshsig

from ..conftest import git, make_repo
from ..helpers import allowed_signer, ssh_key


@pytest.fixture
def ssh_agent(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A real ``ssh-agent`` on a socket in ``tmp_path``; its environment."""
    sock = tmp_path / "agent.sock"
    done = subprocess.run(["ssh-agent", "-s", "-a", str(sock)], capture_output=True, text=True, check=True)
    pid = int(done.stdout.split("SSH_AGENT_PID=")[1].split(";")[0])
    try:
        yield {"SSH_AUTH_SOCK": str(sock), "SSH_AGENT_PID": str(pid)}
    finally:
        os.kill(pid, signal.SIGTERM)


def test_a_receipt_is_signed_through_ssh_agent_when_the_key_names_its_public_half(
    tmp_path: Path, ssh_agent: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key = ssh_key(tmp_path / "key")
    subprocess.run(["ssh-add", "-q", str(key)], env={**os.environ, **ssh_agent}, check=True, capture_output=True)
    key.unlink()  # only the agent has the private half now
    for name, value in ssh_agent.items():
        monkeypatch.setenv(name, value)
    signature = sshsig.sign(b"payload", key=key.with_suffix(".pub"))
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(allowed_signer("ci", key))
    assert sshsig.verify(b"payload", signature, allowed_signers=allowed) == "ci"


def test_without_the_agent_a_public_key_cannot_sign_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = ssh_key(tmp_path / "key")
    key.unlink()
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    with pytest.raises(AgentOpsError) as raised:
        sshsig.sign(b"payload", key=key.with_suffix(".pub"))
    assert raised.value.code == "RECEIPT_SIGNING_FAILED"


def test_agents_are_not_told_where_the_key_agents_are(tmp_path: Path) -> None:
    launch = Launch(tmp_path, tmp_path / "mailbox", tmp_path / "prompt.md", tmp_path / "log", "r", "w", 1, None)
    environ = {"PATH": "/usr/bin", "HOME": "/home/x", "SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1", "SSH_AGENT_PID": "1"}
    env = agent_environment(environ, HostSpec("h", "command", ("true",), False, {}), launch)
    assert not KEY_AGENTS & set(env) and env["HOME"] == "/home/x"
    opted = HostSpec("h", "command", ("true",), False, {"SSH_AUTH_SOCK": "/run/fetch.sock"})
    assert agent_environment(environ, opted, launch)["SSH_AUTH_SOCK"] == "/run/fetch.sock"  # a host may ask


@pytest.mark.parametrize(("private", "sock", "status"), [(True, "", "warn"), (False, "/s", "ok"), (False, "", "warn")])
def test_doctor_says_where_receipts_are_signed_from(tmp_path: Path, private: bool, sock: str, status: str) -> None:
    from git_agentops.diagnose.checks import _signing

    repo = make_repo(tmp_path / "repo")
    key = ssh_key(tmp_path / "key")
    git(repo, "config", "agentops.signingKey", str(key if private else key.with_suffix(".pub")))
    check = _signing(open_store(repo, clock=SystemClock()), {"SSH_AUTH_SOCK": sock} if sock else {})
    assert check.status == status, check
    if private:
        assert "ssh-add" in (check.remedy or "") and ".pub" in (check.remedy or "")
