"""Publishing to a shared remote over a real SSH transport (OpenSSH's sshd on 127.0.0.1), as teams run it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..conftest import git
from ..helpers import simple_child
from ..runkit import command, recipe, start, supervisor_log, trust, verify_receipts, wait_for
from ..sshd import ssh_server
from .test_remote import guarded_server, server_chain


@pytest.mark.slow
def test_two_machines_publish_to_one_server_over_ssh_and_its_history_verifies(tmp_path: Path) -> None:
    """Invariant: over ``ssh://`` -- git's own transport, the server's pre-receive running behind sshd -- two runs on
    two machines both land, each by one atomic push with its receipt and notes, the later one rebuilt on the
    earlier one's tip; the server's history verifies and fsck is clean; the local checkouts stay clean."""
    server = guarded_server(tmp_path)
    base = git(server, "rev-parse", "main")
    with ssh_server(tmp_path) as sshd:
        machines = []
        for name in ("a", "b"):
            where = tmp_path / name
            git(tmp_path, "-c", f"core.sshCommand={sshd.command}", "clone", "-q", sshd.url(server), str(where))
            git(where, "config", "core.sshCommand", sshd.command)
            git(where, "config", "user.name", f"Machine {name.upper()}")
            assert git(where, "remote", "get-url", "origin").startswith("ssh://")
            machines.append(where)
        runs = {}
        for machine, name in zip(machines, ("a", "b"), strict=True):
            # one trust store serves both "machines" here, and a trust names the clone: each is trusted as it starts
            trust(machine)
            runs[machine] = start(
                machine, recipe(tmp_path, simple_child(name, f"src/{name}.txt"), finalize=True, name=f"{name}.toml")
            )
        docs = {
            m: wait_for(m, r, lambda d: d["status"] in ("complete", "blocked"), timeout=240) for m, r in runs.items()
        }
        for machine, doc in docs.items():
            assert doc["status"] == "complete", json.dumps(doc, indent=1) + supervisor_log(machine, runs[machine])
        fetched = command(machines[0], "agentops-sync", "fetch")  # the notes come back over ssh too
        assert fetched.returncode == 0, fetched.stderr
    chain = server_chain(server, base)
    assert len(chain) == 2 and {d["integration"]["candidate"] for d in docs.values()} == set(chain)
    verified = verify_receipts(server, f"{base}..main", "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    for path in ("src/a.txt", "src/b.txt"):
        assert git(server, "show", f"main:{path}")
    for machine in machines:
        assert git(machine, "status", "--porcelain") == ""
    assert git(machines[0], "notes", "--ref=agentops/receipts", "list", chain[0])  # fetched over ssh
    git(server, "fsck", "--strict", "--no-dangling")
