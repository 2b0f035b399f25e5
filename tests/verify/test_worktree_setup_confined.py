"""Setup in a worker's worktree runs the agent's code confined: after a resume, a policy transition or a takeover
the worktree holds what the agent wrote -- its ``setup.py``, its build backend -- and the supervisor runs the
policy's ``[[worktree.setup]]`` there. Those steps write the worktree, their own TMPDIR and cache, and nothing
else: never the repository's refs, the supervisor's private dir, a shared dependency base or the person's HOME.
Real worktrees, real setup processes under the real launcher (:func:`git_agentops.verify.workspaces.ensure_setup`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from git_agentops.clock import FixedClock
from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.checkout import admin_dir
from git_agentops.gitstore.repo import Store, open_store
from git_agentops.policy.load import policy_from_bytes
from git_agentops.sandbox.plan import kernel_abi, namespace_problem
from git_agentops.verify.workspaces import SETUP_ATTEMPT, ensure_setup, ensure_worktree, placement

from ..conftest import git, make_repo

WALLED = pytest.mark.skipif(
    kernel_abi() < 6 or namespace_problem() is not None,
    reason="needs Landlock ABI 6+ and user namespaces (this machine and CI have both)",
)

PLANTED = """
import json, os
targets = json.loads(TARGETS)
outcome = {}
for name, path in targets.items():
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a") as handle:
            handle.write("planted by setup.py\\n")
        outcome[name] = "written"
    except OSError as error:
        outcome[name] = type(error).__name__
open("outcome.json", "w").write(json.dumps(outcome))
"""


class Worktree:
    """A repository with one worker's worktree, whose first setup (``python3 setup.py``) failed at the start
    commit, and a complete shared base as the env tool leaves one."""

    def __init__(self, tmp_path: Path, sandbox: str) -> None:
        self.repo = make_repo(tmp_path / "repo", files={"setup.py": "raise SystemExit(3)\n"})
        self.clock = FixedClock()
        self.store: Store = open_store(self.repo, clock=self.clock)
        self.policy = policy_from_bytes(
            b'version = 1\n[run]\ntarget = "main"\n[[worktree.setup]]\nargv = ["python3", "setup.py"]\n'
            + sandbox.encode()
        )
        head = git(self.repo, "rev-parse", "HEAD")
        self.where = placement(self.repo, ".agentops/worktrees", "run-c", "w1", "refs/heads/agentops/run-c/w1")
        ensure_worktree(self.store, self.where, start_commit=head, run_id="run-c", worker_id="w1", clock=self.clock)
        self.shared = self.store.common_dir / "agentops" / "envs"
        self.base_file = self.shared / "python-0123456789abcdef" / "lib" / "site-packages" / "pytest.py"
        self.base_file.parent.mkdir(parents=True)
        self.base_file.write_text("# the real pytest\n")
        (self.base_file.parents[2] / "complete.json").write_text("{}\n")

    def targets(self) -> dict[str, Path]:
        home = Path(os.environ["HOME"])
        return {
            "ref": self.store.common_dir / "refs" / "heads" / "planted",
            "private": self.store.common_dir / "agentops" / "planted.json",
            "base": self.base_file,
            "new-base": self.shared / "python-fedcba9876543210" / "complete.json",
            "home": home / "planted-by-setup",
        }

    def setup(self, *, resumed: bool) -> str:
        self.clock.advance(5)
        resume = self.clock.now() if resumed else None
        return ensure_setup(
            self.store, self.where.path, self.policy, environ=os.environ, clock=self.clock, last_user_resume=resume
        )

    def plant(self) -> None:
        """The agent's own ``setup.py`` in its worktree, knowing where the repository keeps what it wants."""
        targets = json.dumps({name: str(path) for name, path in self.targets().items()})
        (self.where.path / "setup.py").write_text(PLANTED.replace("TARGETS", repr(targets)))


def _fail_then_plant(worktree: Worktree) -> None:
    """The first setup fails at the start commit; then the agent rewrites ``setup.py`` in its worktree."""
    with pytest.raises(AgentOpsError) as failed:
        worktree.setup(resumed=False)
    assert failed.value.code == "RUN_SETUP_FAILED"
    worktree.plant()


@WALLED
@pytest.mark.parametrize("level", ["namespace", "landlock"])
def test_a_planted_setup_py_run_after_a_resume_cannot_write_refs_private_dir_shared_bases_or_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, level: str
) -> None:
    """After the user's resume the agent's ``setup.py`` runs as a setup step: every write outside the worktree is
    refused by the kernel (at ``namespace`` and at ``landlock`` alone), the worktree itself is written, the setup
    completes, and the refs, private dir, shared bases and HOME are exactly as before."""
    if level == "landlock":
        from git_agentops.sandbox import plan

        monkeypatch.setattr(plan, "namespace_problem", lambda: "Operation not permitted")
    worktree = Worktree(tmp_path, f'[sandbox]\nlevel = "{level}"\n')
    _fail_then_plant(worktree)
    assert worktree.setup(resumed=True) == "ran"
    outcome = json.loads((worktree.where.path / "outcome.json").read_text())
    assert set(outcome) == set(worktree.targets())
    assert "written" not in outcome.values(), outcome
    targets = worktree.targets()
    assert not targets["ref"].exists() and not targets["private"].exists() and not targets["home"].exists()
    assert not targets["new-base"].parent.exists()
    assert worktree.base_file.read_text() == "# the real pytest\n"
    assert git(worktree.repo, "for-each-ref", "--format=%(refname)", "refs/heads/planted") == ""


def test_without_any_wall_a_setup_step_that_writes_a_shared_base_fails_and_is_not_marked_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At ``mode = "none"`` nothing stops the write, but it is found by stat right after the steps:
    ``RUN_SETUP_FAILED`` naming the base, the setup not complete (a retry needs the user's resume again)."""
    worktree = Worktree(tmp_path, '[sandbox]\nmode = "none"\n')
    _fail_then_plant(worktree)
    with pytest.raises(AgentOpsError) as caught:
        worktree.setup(resumed=True)
    assert caught.value.code == "RUN_SETUP_FAILED"
    assert str(worktree.base_file) in caught.value.message
    with pytest.raises(AgentOpsError) as again:
        worktree.setup(resumed=False)
    assert again.value.code == "RUN_SETUP_RECOVERY_REQUIRED"


def test_a_policy_that_requires_the_sandbox_runs_no_worktree_setup_where_there_is_none(tmp_path: Path) -> None:
    """``required = true`` with no wall to be had: ``RUN_SANDBOX_UNAVAILABLE`` before any step runs or any attempt
    is recorded, so nothing ran and nothing needs recovering."""
    worktree = Worktree(tmp_path, '[sandbox]\nmode = "none"\nrequired = true\n')
    worktree.plant()
    for _ in range(2):
        with pytest.raises(AgentOpsError) as caught:
            worktree.setup(resumed=False)
        assert caught.value.code == "RUN_SANDBOX_UNAVAILABLE"
    assert not (worktree.where.path / "outcome.json").exists()
    admin = admin_dir(worktree.where.path)
    assert admin is not None and not (admin / SETUP_ATTEMPT).exists()
