"""``[sandbox]`` as a user meets it: a run that requires the sandbox and cannot have it is refused before anything
is created; a run without it says so on start, resume and status. Kernel-independent (the Landlock ABI is faked
where the kernel's answer matters), so it runs everywhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from git_agentops.errors import AgentOpsError
from git_agentops.sandbox import plan

from ..conftest import git
from ..helpers import simple_child
from ..runkit import cli, project, recipe, stop, wait_for


def test_a_required_sandbox_the_kernel_lacks_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan, "kernel_abi", lambda: 0)
    with pytest.raises(AgentOpsError) as refused:
        plan.choose_mode("landlock", required=True)
    assert refused.value.code == "RUN_SANDBOX_UNAVAILABLE" and "Landlock" in refused.value.message
    assert plan.choose_mode("landlock", required=False)[0] == "none"  # not required: unconfined, with the reason
    with pytest.raises(AgentOpsError) as contradictory:
        plan.choose_mode("none", required=True)
    assert contradictory.value.code == "RUN_SANDBOX_UNAVAILABLE"


def test_run_start_refuses_before_creating_anything(tmp_path: Path) -> None:
    repo = project(tmp_path, extra_policy='[sandbox]\nmode = "none"\nrequired = true\n')
    before = git(repo, "for-each-ref", "refs/agentops")
    done = cli(repo, "agentops-run", "start", "--goal", "g", "--recipe", str(recipe(tmp_path, simple_child("a", "a"))))
    assert done.returncode == 3 and "error[RUN_SANDBOX_UNAVAILABLE]" in done.stderr, done.stderr
    assert git(repo, "for-each-ref", "refs/agentops") == before  # no run, no state: nothing to clean up


def test_an_unsandboxed_run_warns_on_start_and_in_status(tmp_path: Path) -> None:
    repo = project(tmp_path, extra_policy='[sandbox]\nmode = "none"\n')
    path = recipe(tmp_path, simple_child("a", "src/a.txt"))
    done = cli(repo, "agentops-run", "start", "--goal", "g", "--recipe", str(path), "--detach", "--json")
    assert done.returncode == 0, done.stderr
    assert "warning[RUN_UNSANDBOXED]" in done.stderr and 'mode = "none"' in done.stderr
    run_id = json.loads(done.stdout)["runId"]
    try:
        wait_for(repo, run_id, lambda d: all(t["status"] == "delivered" for t in d["tasks"] if t["parent"]))
        status = cli(repo, "agentops-run", "status", run_id, "--json")
        assert "warning[RUN_UNSANDBOXED]" in status.stderr
        assert json.loads(status.stdout)["sandbox"]["mode"] == "none"
    finally:
        stop(repo, run_id)
