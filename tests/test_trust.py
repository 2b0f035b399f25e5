"""Trust: nothing runs untrusted; edits make it STALE naming the field; worktrees share trust; 0600 store."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from git_agentops.clock import FixedClock
from git_agentops.errors import AgentOpsError
from git_agentops.model.policy import Policy, effective
from git_agentops.policy.trust import TrustStatus, TrustStore, normalise_remote, repo_identity, require_trusted

from .conftest import git

POLICY = """version = 1
[[verify.commands]]
id = "marker"
argv = ["python3", "-c", "open('RAN', 'w').write('x')"]
"""


def _setup(repo: Path, text: str = POLICY) -> None:
    (repo / ".agentops").mkdir(exist_ok=True)
    (repo / ".agentops" / "policy.toml").write_text(text)
    (repo / ".gitignore").write_text("RAN\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "policy")


def _state_dir() -> Path:
    return Path(os.environ["XDG_STATE_HOME"]) / "git-agentops"


@pytest.mark.parametrize(
    ("url", "identity"),
    [
        ("git@github.com:Org/Repo.git", "github.com/org/repo"),
        ("https://user:pw@GitHub.com/Org/Repo.git/", "github.com/org/repo"),
        ("ssh://git@example.com:2222/Team/Proj.git", "example.com:2222/Team/Proj"),
        ("ssh://git@example.com:22/Team/Proj", "example.com/Team/Proj"),
        ("https://example.com:443/a/b.git", "example.com/a/b"),
        ("git://host.example/x.git", "host.example/x"),
    ],
)
def test_remote_identities_are_normalised(url: str, identity: str, tmp_path: Path) -> None:
    assert normalise_remote(url, base=tmp_path) == identity


def test_local_remotes_become_local_paths(tmp_path: Path) -> None:
    (tmp_path / "up.git").mkdir()
    assert normalise_remote(str(tmp_path / "up.git"), base=tmp_path) == f"local:{tmp_path.resolve()}/up"
    assert normalise_remote("file://" + str(tmp_path / "up.git"), base=tmp_path) == f"local:{tmp_path.resolve()}/up"
    assert normalise_remote("../up.git", base=tmp_path / "clone") == f"local:{tmp_path.resolve()}/up"


def test_untrusted_policy_runs_nothing(run_cli: Any, repo_path: Path) -> None:
    _setup(repo_path)
    done = run_cli("git", "agentops-verify", cwd=repo_path)
    assert done.returncode == 3
    assert done.stderr.startswith("error[POLICY_UNTRUSTED]: ") and "git agentops-policy trust" in done.stderr
    assert not (repo_path / "RAN").exists()  # the command that would create the file never ran
    status = run_cli("git", "agentops-policy", "status", "--json", cwd=repo_path)
    assert status.returncode == 1 and json.loads(status.stdout)["status"] == "UNTRUSTED"


def test_trust_then_runs_then_edit_makes_it_stale_naming_the_field(run_cli: Any, repo_path: Path) -> None:
    _setup(repo_path)
    refused = run_cli("git", "agentops-policy", "trust", cwd=repo_path)  # not a terminal, no --yes
    assert refused.returncode == 3 and "CONFIRMATION_REQUIRED" in refused.stderr
    granted = run_cli("git", "agentops-policy", "trust", "--yes", cwd=repo_path)
    assert granted.returncode == 0, granted.stderr
    assert "marker: python3 -c" in granted.stdout  # it showed what it allows to run
    store_file = _state_dir() / "trust.json"
    assert stat.S_IMODE(store_file.stat().st_mode) == 0o600 and stat.S_IMODE(store_file.parent.stat().st_mode) == 0o700
    assert run_cli("git", "agentops-policy", "status", cwd=repo_path).returncode == 0
    verified = run_cli("git", "agentops-verify", cwd=repo_path)
    assert verified.returncode == 0, verified.stderr
    assert (repo_path / "RAN").exists()
    (repo_path / "RAN").unlink()
    _setup(repo_path, POLICY.replace("'x'", "'y'"))
    status = run_cli("git", "agentops-policy", "status", "--json", cwd=repo_path)
    verdict = json.loads(status.stdout)
    assert status.returncode == 1 and verdict["status"] == "STALE"
    assert verdict["differences"] == ["configHash", "$.verify.commands[0].argv[2]"]
    again = run_cli("git", "agentops-verify", cwd=repo_path)
    assert again.returncode == 3 and "STALE" in again.stderr and "$.verify.commands[0].argv[2]" in again.stderr
    assert not (repo_path / "RAN").exists()


def test_trust_granted_in_main_worktree_holds_in_a_linked_worktree(
    run_cli: Any, repo_path: Path, tmp_path: Path
) -> None:
    _setup(repo_path)
    assert run_cli("git", "agentops-policy", "trust", "--yes", cwd=repo_path).returncode == 0
    git(repo_path, "worktree", "add", "-q", str(tmp_path / "linked"), "-b", "side")
    status = json.loads(run_cli("git", "agentops-policy", "status", "--json", cwd=tmp_path / "linked").stdout)
    assert status["status"] == "TRUSTED" and status["repository"] == str(repo_path.resolve())
    assert run_cli("git", "agentops-verify", cwd=tmp_path / "linked").returncode == 0
    assert run_cli("git", "agentops-policy", "untrust", cwd=tmp_path / "linked").returncode == 0
    assert run_cli("git", "agentops-policy", "status", cwd=repo_path).returncode == 1


def test_store_grant_revoke_and_toolkit_version_staleness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = TrustStore(tmp_path / "state", FixedClock())
    identity = repo_identity(tmp_path / "repo" / ".git", "git@github.com:o/r.git")
    policy = Policy.from_effective(effective({"version": 1}))
    assert store.status(identity, policy).status is TrustStatus.UNTRUSTED
    store.grant(identity, policy)
    assert store.status(identity, policy).status is TrustStatus.TRUSTED
    elsewhere = repo_identity(tmp_path / "clone" / ".git", "https://github.com/O/R")
    moved = store.status(elsewhere, policy)  # same remote, another checkout: related but not the same
    assert moved.status is TrustStatus.STALE and moved.differences == ("repository",)
    monkeypatch.setattr("git_agentops.policy.trust.__version__", "9.9.9")
    newer = store.status(identity, policy)
    assert newer.status is TrustStatus.STALE and newer.differences == ("toolkitVersion",)
    with pytest.raises(AgentOpsError) as caught:
        require_trusted(newer)
    assert caught.value.code == "POLICY_UNTRUSTED" and "toolkitVersion" in caught.value.message
    assert store.revoke(identity) == 1 and store.revoke(identity) == 0


def test_corrupt_trust_store_is_refused_and_left_alone(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "trust.json").write_text('{"version": 1, "records": "oops"}')
    store = TrustStore(state, FixedClock())
    identity = repo_identity(tmp_path / ".git", None)
    policy = Policy.from_effective(effective({"version": 1}))
    for call in (lambda: store.status(identity, policy), lambda: store.grant(identity, policy)):
        with pytest.raises(AgentOpsError) as caught:
            call()
        assert caught.value.code == "TRUST_STORE_INVALID"
    assert (state / "trust.json").read_text() == '{"version": 1, "records": "oops"}'
    (state / "trust.json").unlink()
    (state / "trust.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(AgentOpsError) as link:
        store.status(identity, policy)
    assert link.value.code == "TRUST_STORE_INVALID" and "symlink" in link.value.message
