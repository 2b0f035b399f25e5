"""Trust: nothing runs untrusted; edits make it STALE naming the field; worktrees share trust; 0600 store; granted
by a person only -- never from an agent's variables, a run's worktree or a clean verification checkout -- and
recorded with who granted it and when."""

from __future__ import annotations

import getpass
import json
import os
import pty
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from git_agentops.clock import FixedClock
from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.clean import CleanCheckout
from git_agentops.gitstore.repo import open_store
from git_agentops.model.policy import Policy, effective
from git_agentops.policy.trust import (
    AGENT_VARIABLES,
    WORKTREE_RECORD,
    TrustStatus,
    TrustStore,
    agent_signs,
    describe_grant,
    normalise_remote,
    refuse_agent,
    repo_identity,
    require_trusted,
)
from git_agentops.verify.proof import slots_dir
from git_agentops.verify.workspaces import RECORD, Placement, ensure_worktree, placement

from ..conftest import git

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


# -- trust is granted by a person, never from an agent's surroundings ------------------------------------------------


def _trusted_store(run_cli: Any, repo: Path) -> bytes:
    """Trust the repository's policy as a person would; return the store's bytes."""
    granted = run_cli("git", "agentops-policy", "trust", "--yes", cwd=repo)
    assert granted.returncode == 0, granted.stderr
    return (_state_dir() / "trust.json").read_bytes()


def _refused(done: Any) -> None:
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert done.stderr.startswith("error[POLICY_TRUST_AGENT]: ") and "nothing was changed" in done.stderr


@pytest.mark.parametrize("variable", AGENT_VARIABLES)
def test_trust_is_refused_with_each_agent_variable_and_the_store_is_left_byte_for_byte(
    run_cli: Any, repo_path: Path, variable: str
) -> None:
    _setup(repo_path)
    before = _trusted_store(run_cli, repo_path)
    _setup(repo_path, POLICY.replace("'x'", "'weakened'"))
    done = run_cli("git", "agentops-policy", "trust", "--yes", "--json", cwd=repo_path, env={variable: "1"})
    assert done.returncode == 3 and json.loads(done.stderr)["error"]["code"] == "POLICY_TRUST_AGENT"
    assert (_state_dir() / "trust.json").read_bytes() == before
    empty = run_cli("git", "agentops-policy", "trust", "--yes", cwd=repo_path, env={variable: ""})  # set, if empty
    _refused(empty)
    assert (_state_dir() / "trust.json").read_bytes() == before
    assert run_cli("git", "agentops-policy", "status", cwd=repo_path).returncode == 1  # still STALE


def test_trust_is_refused_inside_a_run_worktree_and_under_the_worktree_root(
    run_cli: Any, repo_path: Path, clock: FixedClock
) -> None:
    _setup(repo_path)
    store = open_store(repo_path, clock=clock)
    head = git(repo_path, "rev-parse", "HEAD")
    where = placement(repo_path, ".agentops/worktrees", "run-1", "w1", "refs/heads/agentops/run-1/w1")
    assert ensure_worktree(store, where, start_commit=head, run_id="run-1", worker_id="w1", clock=clock)
    (where.path / "src").mkdir()
    for cwd in (where.path, where.path / "src"):
        done = run_cli("git", "agentops-policy", "trust", "--yes", cwd=cwd)
        _refused(done)
        assert "is a run's worktree" in done.stderr
    assert not (_state_dir() / "trust.json").exists()
    # a run worktree placed elsewhere is still known by its ownership record
    elsewhere = Placement(repo_path.parent / "outside" / "w2", "refs/heads/agentops/run-1/w2", "agentops-run-1-w2")
    assert ensure_worktree(store, elsewhere, start_commit=head, run_id="run-1", worker_id="w2", clock=clock)
    _refused(run_cli("git", "agentops-policy", "trust", "--yes", cwd=elsewhere.path))
    # and anything under the policy's worktree root, record or not
    plain = repo_path / ".agentops" / "worktrees" / "stray"
    plain.mkdir(parents=True)
    under = run_cli("git", "agentops-policy", "trust", "--yes", cwd=plain)
    _refused(under)
    assert "is under" in under.stderr
    assert not (_state_dir() / "trust.json").exists()
    # a linked worktree a person made (no ownership record) is fine: trust is shared by all worktrees
    git(repo_path, "worktree", "add", "-q", str(repo_path.parent / "mine"), "-b", "mine")
    assert run_cli("git", "agentops-policy", "trust", "--yes", cwd=repo_path.parent / "mine").returncode == 0


def test_trust_is_refused_inside_a_clean_verification_checkout(
    run_cli: Any, repo_path: Path, clock: FixedClock
) -> None:
    _setup(repo_path)
    store = open_store(repo_path, clock=clock)
    slot = CleanCheckout(slots_dir(os.environ, store, "run-1") / "w1", repo_path / ".git" / "objects")
    slot.populate(git(repo_path, "rev-parse", "HEAD"))
    assert (slot.root / ".agentops" / "policy.toml").is_file()
    done = run_cli("git", "agentops-policy", "trust", "--yes", cwd=slot.root)
    _refused(done)
    assert str(Path(os.environ["XDG_CACHE_HOME"]).resolve() / "git-agentops" / "verify") in done.stderr
    assert not (_state_dir() / "trust.json").exists()


def test_untrust_only_lowers_trust_and_is_allowed_in_an_agents_environment(run_cli: Any, repo_path: Path) -> None:
    _setup(repo_path)
    _trusted_store(run_cli, repo_path)
    done = run_cli("git", "agentops-policy", "untrust", cwd=repo_path, env={"AGENTOPS_WORKER_ID": "w1"})
    assert done.returncode == 0, done.stderr
    assert run_cli("git", "agentops-policy", "status", cwd=repo_path).returncode == 1


def test_agent_signs_name_the_variables_the_run_worktree_record_and_the_fenced_roots(tmp_path: Path) -> None:
    assert WORKTREE_RECORD == RECORD  # the record verify/workspaces writes is the one trust looks for
    git_dir = tmp_path / "admin"
    (git_dir / "agentops").mkdir(parents=True)
    assert agent_signs({}, cwd=tmp_path) == []
    assert agent_signs({"AGENTOPS_RUN_ID": "r"}, cwd=tmp_path) == ["$AGENTOPS_RUN_ID is set"]
    assert agent_signs({}, cwd=tmp_path, git_dir=git_dir) == []
    (git_dir / "agentops" / "worktree.json").write_text("{}")
    assert agent_signs({}, cwd=tmp_path, git_dir=git_dir) == [
        f"the repository's git dir {git_dir} belongs to a run's worktree"
    ]
    inner = tmp_path / "cache" / "verify" / "x"
    inner.mkdir(parents=True)
    assert agent_signs({}, cwd=inner, fenced=[tmp_path / "cache" / "verify"]) == [
        f"{inner.resolve()} is under {(tmp_path / 'cache' / 'verify').resolve()}"
    ]
    with pytest.raises(AgentOpsError) as caught:
        refuse_agent(["$AGENTOPS_RUN_ID is set"])
    assert caught.value.code == "POLICY_TRUST_AGENT" and caught.value.details == {"signs": ["$AGENTOPS_RUN_ID is set"]}
    refuse_agent([])  # nothing to say: no refusal


def test_who_trusted_and_when_is_recorded_and_shown(run_cli: Any, repo_path: Path) -> None:
    _setup(repo_path)
    granted = run_cli("git", "agentops-policy", "trust", "--yes", "--json", cwd=repo_path)
    assert granted.returncode == 0, granted.stderr
    expected = {"login": getpass.getuser(), "name": "Test Agent", "email": "agent@example.invalid", "tty": None}
    record = json.loads(granted.stdout)["record"]
    assert record["grantedBy"] == {**expected, "yes": True} and record["grantedAt"]
    [stored] = json.loads((_state_dir() / "trust.json").read_text())["records"]
    assert stored["grantedBy"] == record["grantedBy"] and stored["grantedAt"] == record["grantedAt"]
    status = json.loads(run_cli("git", "agentops-policy", "status", "--json", cwd=repo_path).stdout)
    assert status["trustedBy"] == record["grantedBy"] and status["trustedAt"] == record["grantedAt"]
    human = run_cli("git", "agentops-policy", "status", cwd=repo_path).stdout
    who = f"trusted by {expected['login']} (Test Agent <agent@example.invalid>) at {record['grantedAt']}"
    assert f"{who} without a terminal, with --yes" in human
    _setup(repo_path, POLICY.replace("'x'", "'y'"))
    stale = run_cli("git", "agentops-policy", "status", cwd=repo_path).stdout
    assert f"policy {record['configHash'][:12]} {who}" in stale  # what was trusted, by whom, when
    again = run_cli("git", "agentops-policy", "trust", "--yes", cwd=repo_path).stdout
    assert f"Last {who}" in again and "trusted by" in again.splitlines()[-1]


def test_a_grant_at_the_prompt_records_the_terminal_and_no_yes(repo_path: Path) -> None:
    _setup(repo_path)
    leader, follower = pty.openpty()
    try:
        terminal = os.ttyname(follower)
        os.write(leader, b"y\n")
        done = subprocess.run(
            ["git", "agentops-policy", "trust"],
            cwd=repo_path,
            stdin=follower,
            stderr=follower,
            stdout=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert done.returncode == 0, done.stdout
    [stored] = json.loads((_state_dir() / "trust.json").read_text())["records"]
    assert stored["grantedBy"]["tty"] == terminal and stored["grantedBy"]["yes"] is False
    assert f"on {terminal}, confirmed at the prompt" in done.stdout


def test_a_store_written_before_grants_were_attributed_still_loads(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = TrustStore(state, FixedClock())
    identity = repo_identity(tmp_path / "repo" / ".git", None)
    policy = Policy.from_effective(effective({"version": 1}))
    record = store.grant(identity, policy)
    assert "grantedBy" not in record.to_json()  # a grant with no grantor is recorded as before
    verdict = store.status(identity, policy)
    assert verdict.status is TrustStatus.TRUSTED and verdict.to_json()["trustedBy"] is None
    assert describe_grant(record) == f"at {record.granted_at} (who is not recorded)"


def test_a_policy_that_reaches_the_target_without_a_person_is_stale_until_a_person_trusts_that_hash(
    run_cli: Any, repo_path: Path, tmp_path: Path
) -> None:
    """Invariant: trust follows the config hash, never the branch. A delivery cannot change ``.agentops/`` (see
    test_guards), so the one way left is the target moved to a commit with another policy -- here by a push from a
    clone. That policy is STALE; an agent's ``trust`` is refused without touching the store; the policy trusted
    before stays trusted where it is still checked out; only a person's trust of the new hash makes it TRUSTED."""
    _setup(repo_path)
    trusted_commit = git(repo_path, "rev-parse", "HEAD")
    before = _trusted_store(run_cli, repo_path)
    trusted_hash = json.loads(run_cli("git", "agentops-policy", "status", "--json", cwd=repo_path).stdout)["configHash"]
    git(repo_path, "config", "receive.denyCurrentBranch", "updateInstead")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo_path), str(clone))
    (clone / ".agentops" / "policy.toml").write_text(POLICY.replace("'x'", "'pwned'"))
    git(clone, "commit", "-q", "-am", "weaken the policy")
    git(clone, "push", "-q", "origin", "main")
    assert git(repo_path, "rev-parse", "HEAD") != trusted_commit
    status = json.loads(run_cli("git", "agentops-policy", "status", "--json", cwd=repo_path).stdout)
    assert status["status"] == "STALE" and status["trustedConfigHash"] == trusted_hash
    assert status["configHash"] != trusted_hash and "configHash" in status["differences"]
    verify = run_cli("git", "agentops-verify", cwd=repo_path)
    assert verify.returncode == 3 and "POLICY_UNTRUSTED" in verify.stderr and not (repo_path / "RAN").exists()
    agent = {"AGENTOPS_RUN_ID": "run-1", "AGENTOPS_WORKER_ID": "w1", "AGENTOPS_GENERATION": "2"}
    _refused(run_cli("git", "agentops-policy", "trust", "--yes", cwd=repo_path, env=agent))
    assert (_state_dir() / "trust.json").read_bytes() == before
    git(repo_path, "worktree", "add", "-q", "--detach", str(tmp_path / "old"), trusted_commit)
    old = json.loads(run_cli("git", "agentops-policy", "status", "--json", cwd=tmp_path / "old").stdout)
    assert old["status"] == "TRUSTED" and old["configHash"] == trusted_hash
    assert json.loads(run_cli("git", "agentops-policy", "status", "--json", cwd=repo_path).stdout)["status"] == "STALE"
    assert run_cli("git", "agentops-policy", "trust", "--yes", cwd=repo_path).returncode == 0  # the person
    assert run_cli("git", "agentops-policy", "status", cwd=repo_path).returncode == 0


def test_the_hermetic_test_environment_drops_every_agent_variable() -> None:
    """Invariant: the suite passes when an agent runs it -- ``policy trust`` in a test is a person's, so none of the
    variables that refuse it may leak in from the environment pytest was started in."""
    from ..conftest import _GIT_ENV_TO_DROP

    assert set(AGENT_VARIABLES) <= set(_GIT_ENV_TO_DROP)
