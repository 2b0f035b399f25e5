"""Policy transitions end to end: a coordinator changes what the run executes mid-run, through the journal
``prepared -> fenced -> bound -> synchronized -> complete``, approved by a person or by itself, crash-safe at every
stage (``AGENTOPS_FAULT``), and recorded in the receipt."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ..conftest import git
from ..helpers import HANDOFF, child, toml, write_step
from ..runkit import (
    POLICY,
    cli,
    command,
    events,
    project,
    start,
    status,
    supervisor_log,
    trust,
    verify_receipts,
    wait_for,
    wait_supervisor_gone,
)

RUNNER_ARGV = ["python3", "-c", "import pathlib, sys; sys.exit(0 if pathlib.Path('src/b.txt').exists() else 1)"]
PROPOSAL_FILE = ".agentops/proposals/runner.toml"


def proposed(run_options: str) -> str:
    """The starting policy plus one acceptance runner (what the coordinator proposes)."""
    return (
        POLICY.format(max_workers=3, run_options=run_options)
        + '[[verify.runners]]\nid = "acceptance"\nargv = '
        + json.dumps(RUNNER_ARGV)
        + "\ntimeout = 60\n"
    )


def scenario(
    tmp: Path, run_options: str, *, first_sleep: float = 1.0, later_at_once: bool = False, extra_policy: str = ""
) -> Path:
    """Plan A, and B depending on A; propose the runner; once complete, re-plan B to need it. ``later_at_once``: A's
    first generation only sleeps first, every later one writes at once. ``extra_policy``: the starting policy's
    other tables, kept in the proposal."""
    work = [write_step("src/a.txt", "a\n"), {"commit": "Add a"}, HANDOFF]
    tasks = child(
        "a",
        "Part A",
        [[{"sleep": first_sleep}, *work], *([work] if later_at_once else [])],
    ) + child("b", "Part B", [[write_step("src/b.txt", "b\n"), {"commit": "Add b"}, HANDOFF]], ["a"])
    doc: dict[str, Any] = {
        "plan": {"title": "Build it", "intent": "Build the parts", "criteria": ["parts exist", "check passes"]},
        "coordinator": {
            "finalize": True,
            "one_shot": True,
            "policy": {
                "file": PROPOSAL_FILE,
                "content": proposed(run_options) + extra_policy,
                "approvals": [{"capability": "runner:acceptance", "reason": "reads one file; runs nothing else"}],
                "replan": [
                    {
                        "task": "b",
                        "criteria": [
                            {"description": "b exists, as the acceptance runner checks", "runner": "acceptance"}
                        ],
                    }
                ],
            },
        },
        "tasks": list(tasks.tasks),
    }
    path = tmp / "recipe.toml"
    path.write_text(toml(doc))
    return path


def receipt(repo: Path) -> dict[str, Any]:
    import base64

    note = git(repo, "notes", "--ref=agentops/receipts", "show", "main")
    envelope = json.loads(note)
    return dict(json.loads(base64.b64decode(envelope["payload"]))["predicate"])


def transitions_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return list(doc["policy"]["transitions"])


def assert_completed_once(repo: Path, run_id: str, base: str, doc: dict[str, Any]) -> None:
    """The invariants every way to the end shares."""
    assert doc["status"] == "complete", json.dumps(doc, indent=1) + supervisor_log(repo, run_id)
    done = transitions_of(doc)
    assert len(done) == 1 and done[0]["stage"] == "complete", done  # exactly one transition, complete
    stages = [s["stage"] for s in done[0]["stages"]]
    assert stages == ["prepared", "fenced", "bound", "synchronized", "complete"], stages  # each stage exactly once
    binding = json.loads(git(repo, "show", f"refs/agentops/runs/{run_id}/policy:binding.json"))
    assert [t["transitionId"] for t in binding["transitions"]] == [done[0]["transitionId"]]  # bound exactly once
    assert binding["configHash"] == done[0]["newConfigHash"] == doc["policy"]["configHash"]
    assert binding["baseConfigHash"] == done[0]["oldConfigHash"]
    chain = git(repo, "rev-list", "--first-parent", f"{base}..main").split()
    assert len(chain) == 2, chain  # the target moved once: one merge per delivery
    kids = [t for t in doc["tasks"] if t["parent"]]
    assert all(t["status"] == "delivered" for t in kids)
    for task in kids:  # no delivery lost: each frozen ref is the recorded delivery, merged once
        assert git(repo, "rev-parse", f"refs/agentops/runs/{run_id}/deliveries/{task['taskId']}") == task["delivery"]
        assert git(repo, "merge-base", "--is-ancestor", task["delivery"], "main", check=False) == ""
    verified = verify_receipts(repo, "main", "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    predicate = receipt(repo)
    policy = predicate["policy"]["value"]
    assert policy["configHash"] == done[0]["newConfigHash"]
    assert [t["transitionId"] for t in policy["transitions"]] == [done[0]["transitionId"]]
    assert {v["policyConfigHash"] for v in predicate["verification"]["value"]} == {policy["configHash"]}
    # the new runner's evidence: B's delivery was proven with it, under the new policy
    b = next(t for t in kids if t["title"] == "Part B")
    evidence = next(d for d in predicate["deliveries"]["value"] if d["taskId"] == b["taskId"])["evidence"]
    runner = [e for e in evidence if e["commandId"] == "acceptance"]
    assert runner and runner[0]["passed"] and runner[0]["policyConfigHash"] == policy["configHash"]
    # the bound policy file is what main now has, committed by the supervisor (it came with the deliveries)
    assert git(repo, "show", "main:.agentops/policy.toml") == git(
        repo, "show", f"refs/agentops/runs/{run_id}/policy:policy.toml"
    )
    # no writer ran under a half-bound policy: nothing started from the request until the writers were told,
    # and every generation started after it under the new policy
    log = events(repo, run_id)
    codes = [e["code"] for e in log]
    if "RUN_POLICY_PENDING" in codes:
        asked = codes.index("RUN_POLICY_PENDING")
    else:  # killed before it answered: the restarted supervisor found the transition before anything else
        asked = [i for i, c in enumerate(codes) if c == "RUN_SUPERVISOR_START"][1]
    told = codes.index("POLICY_WRITERS_TOLD")
    assert "WORKER_STARTING" not in codes[asked:told], codes[asked:told]
    after = [e for e in log[told:] if e["code"] == "WORKER_STARTING"]
    assert after and all(e["data"]["policyConfigHash"] == policy["configHash"] for e in after)
    git(repo, "fsck", "--strict")


def test_a_person_approves_an_added_runner_and_the_run_completes_with_its_evidence(tmp_path: Path) -> None:
    """The issue's scenario with the default approval (a person): the run waits awaiting-input showing the
    runner's full argv; ``run approve`` lets the supervisor apply it; B is re-planned to need the runner; the
    receipt carries the transition and the runner's evidence. The trust store is not changed by the run."""
    repo = project(tmp_path)
    trust_store = Path(os.environ["XDG_STATE_HOME"]) / "git-agentops" / "trust.json"
    trust_before = trust_store.read_bytes()
    base = git(repo, "rev-parse", "main")
    run_id = start(repo, scenario(tmp_path, ""))
    doc = wait_for(repo, run_id, lambda d: d["status"] == "awaiting-input" and transitions_of(d), timeout=120)
    pending = transitions_of(doc)[0]
    assert pending["stage"] == "prepared" and pending["approvedBy"] is None
    assert pending["changes"][0]["capabilityId"] == "runner:acceptance"
    shown = command(repo, "agentops-run", "status", run_id)
    assert "runner:acceptance (added): python3 -c" in shown.stdout and "git agentops-run approve" in shown.stdout
    board = json.loads(command(repo, "agentops-run", "list", "--all", "--json").stdout)["runs"]
    assert board[0]["waitsFor"].startswith(f"an approval of {pending['transitionId']}")  # the board says so too
    coordinator = Path(next(w["worktree"] for w in doc["workers"] if w["role"] == "coordinator"))
    for where, env in ((coordinator, {}), (repo, {"AGENTOPS_RUN_ID": run_id})):  # an agent approving itself
        refused = subprocess.run(
            ["git", "agentops-run", "approve", run_id, pending["transitionId"]],
            cwd=where,
            capture_output=True,
            text=True,
            env={**os.environ, **env},
            check=False,
        )
        assert refused.returncode == 3 and "RUN_APPROVAL_AGENT" in refused.stderr, refused.stderr
    assert transitions_of(status(repo, run_id))[0]["approvedBy"] is None
    approved = command(repo, "agentops-run", "approve", run_id, pending["transitionId"][:12])
    assert approved.returncode == 0, approved.stderr
    assert "runner:acceptance (added)" in approved.stdout
    doc = wait_for(repo, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=240)
    assert_completed_once(repo, run_id, base, doc)
    done = transitions_of(doc)[0]
    assert done["approvedBy"]["by"] == "user" and "@" in done["approvedBy"]["name"]
    policy = receipt(repo)["policy"]["value"]
    assert policy["transitions"][0]["approvedBy"] == "user"
    b = next(t for t in doc["tasks"] if t["title"] == "Part B")
    assert b["revision"] >= 2  # re-planned to need the runner
    assert trust_store.read_bytes() == trust_before  # the run bound the new policy to itself only
    assert command(repo, "agentops-policy", "status").returncode != 0  # main's new policy needs a person's trust
    report = command(repo, "agentops-run", "report", run_id)
    assert report.returncode == 0, report.stderr
    assert "## Policy changes" in report.stdout and "runner:acceptance (added): python3 -c" in report.stdout


def test_a_person_refuses_and_the_run_goes_on_under_its_policy(tmp_path: Path) -> None:
    """Refused: the journal ends ``refused``, nothing is bound, the coordinator is told, the run stays active."""
    repo = project(tmp_path)
    run_id = start(repo, scenario(tmp_path, "", first_sleep=30))
    doc = wait_for(repo, run_id, lambda d: d["status"] == "awaiting-input" and transitions_of(d), timeout=120)
    tid = transitions_of(doc)[0]["transitionId"]
    refused = command(repo, "agentops-run", "refuse", run_id, tid, "--reason", "not this week")
    assert refused.returncode == 0, refused.stderr
    doc = wait_for(repo, run_id, lambda d: transitions_of(d)[0]["stage"] == "refused" and d["status"] == "active")
    record = transitions_of(doc)[0]
    assert record["refused"]["code"] == "RUN_POLICY_REFUSED" and "not this week" in record["refused"]["message"]
    binding = json.loads(git(repo, "show", f"refs/agentops/runs/{run_id}/policy:binding.json"))
    assert "transitions" not in binding and binding["configHash"] == record["oldConfigHash"]
    again = command(repo, "agentops-run", "approve", run_id, tid)
    assert again.returncode != 0 and "RUN_POLICY_TRANSITION_STALE" in again.stderr
    command(repo, "agentops-run", "stop", run_id)


FAULTS = [
    "policy:prepared",
    "policy:fence",
    "policy:fenced",
    "policy:bind",
    "policy:bound-unmarked",
    "policy:bound",
    "policy:synchronizing",
    "policy:synchronized",
    "policy:told",
    "policy:complete",
]


@pytest.mark.slow
@pytest.mark.parametrize("point", FAULTS)
def test_kill_9_at_each_stage_then_supervise_completes_the_transition_exactly_once(tmp_path: Path, point: str) -> None:
    """Invariant: a supervisor killed with SIGKILL at any stage boundary or inside a stage, then ``supervise``d
    again, completes the transition exactly once; no writer ran under a half-bound policy, no delivery is lost or
    merged twice, the target moved once, and the receipt is valid."""
    repo = project(tmp_path, run_options='policy_changes = "coordinator"')
    base = git(repo, "rev-parse", "main")
    # killed at `prepared`, before the fence, A is still at work: the new supervisor stops what the dead one left
    # running and fences the writers itself. A's first generation sleeps through that: stopped between its write and
    # its commit, its checkout would be dirty and the transition refused (RUN_POLICY_DIRTY) -- a path of its own
    # (test_every_policy_request_refusal_has_its_code_and_loses_nothing), not this one; later generations write at once.
    early = point == "policy:prepared"
    recipe_path = scenario(
        tmp_path, 'policy_changes = "coordinator"', first_sleep=10 if early else 1.0, later_at_once=early
    )
    run_id = start(repo, recipe_path, env={"AGENTOPS_FAULT": point})
    wait_supervisor_gone(repo, run_id)
    assert f"fault injection: SIGKILL at {point}" in supervisor_log(repo, run_id)
    supervised = subprocess.Popen(
        ["git", "agentops-run", "supervise", run_id], cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        doc = wait_for(repo, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=240)
    finally:
        supervised.wait(timeout=120)
    assert_completed_once(repo, run_id, base, doc)
    assert transitions_of(doc)[0]["approvedBy"]["by"] == "coordinator"
    assert status(repo, run_id)["policy"]["transitions"][0]["stage"] == "complete"


# -- every refusal, on one live run ----------------------------------------------------------------------------------

SIGNED_POLICY = """version = 1
[run]
target = "main"
max_workers = 3
{run_options}
[[verify.commands]]
id = "check"
argv = ["python3", "check.py"]
timeout = 60
[hosts.reviewer-a]
kind = "scripted"
[review]
required = 1
reviewers = ["reviewer-a"]
[receipts]
require_signature = true
"""


def slow_child_recipe(tmp: Path) -> Path:
    tasks = child("a", "Part A", [[{"sleep": 300}, write_step("src/a.txt", "a\n"), {"commit": "Add a"}, HANDOFF]])
    doc = {
        "plan": {"title": "Build it", "intent": "Build the parts", "criteria": ["parts exist", "check passes"]},
        "coordinator": {"finalize": True, "one_shot": True},
        "tasks": list(tasks.tasks),
        "reviewers": [{"name": "reviewer-a", "verdict": "approve"}],
    }
    path = tmp / "slow.toml"
    path.write_text(toml(doc))
    return path


def live_run(tmp: Path, run_options: str = "") -> tuple[Path, str, dict[str, Any]]:
    """A run whose coordinator planned and ended its turn (idle, still served) while child A sleeps."""
    from ..conftest import make_repo
    from ..runkit import CHECK_PY

    repo = make_repo(
        tmp / "repo",
        files={
            "check.py": CHECK_PY,
            "src/base.txt": "hello\n",
            ".agentops/policy.toml": SIGNED_POLICY.format(run_options=run_options),
            ".gitignore": "__pycache__/\n",
        },
    )
    trust(repo)
    run_id = start(repo, slow_child_recipe(tmp))
    doc = wait_for(
        repo,
        run_id,
        lambda d: {w["role"]: w["status"] for w in d["workers"]} == {"coordinator": "idle", "child": "running"},
        timeout=120,
    )
    return repo, run_id, doc


def ask(worktree: Path, file: str, *extra: str, expected: str | None = None) -> tuple[int, dict[str, Any]]:
    """``git agentops-request policy`` from ``worktree``, run in this process (``runkit.command``: the same
    request written and the same response read; the client as a process is ``tests/protocol/``'s); (exit status,
    the response or the error document)."""
    if expected is None:
        expected = json.loads((worktree / ".agentops/mailbox/instructions.json").read_text())["policy"]["configHash"]
    argv = ["policy", "--file", file, "--expected-policy-hash", expected, "--json"]
    done = command(worktree, "agentops-request", *argv, *extra, "--timeout", "60")
    doc = json.loads(done.stdout) if done.stdout.strip() else json.loads(done.stderr.strip().splitlines()[-1])
    return done.returncode, doc


def code_of(doc: dict[str, Any]) -> str:
    return str(doc.get("code") or doc.get("error", {}).get("code"))


def base_text(run_options: str = "") -> str:
    return SIGNED_POLICY.format(run_options=run_options)


RUNNER = '[[verify.runners]]\nid = "acceptance"\nargv = ["python3", "-c", "print(1)"]\n'
APPROVE = ("--approve", "runner:acceptance", "--reason", "prints one line")

WEAKENED = [
    (
        "dropped",
        lambda t: t.replace('[[verify.commands]]\nid = "check"\nargv = ["python3", "check.py"]\ntimeout = 60\n', ""),
        "$.verify.commands[0]",
    ),
    (
        "optional",
        lambda t: t.replace("timeout = 60\n", "timeout = 60\nrequired = false\n", 1),
        "$.verify.commands[0].required",
    ),
    ("timeout", lambda t: t.replace("timeout = 60", "timeout = 5", 1), "$.verify.commands[0].timeout"),
    ("argv", lambda t: t.replace('["python3", "check.py"]', '["true"]'), "$.verify.commands[0].argv"),
    (
        "signature",
        lambda t: t.replace("require_signature = true", "require_signature = false"),
        "$.receipts.require_signature",
    ),
    (
        "reviewer",
        lambda t: t.replace('reviewers = ["reviewer-a"]', "reviewers = []").replace("required = 1", "required = 0"),
        "$.review.reviewers[0]",
    ),
    ("sandbox", lambda t: t + '[sandbox]\nmode = "none"\n', "$.sandbox.mode"),
    ("protected", lambda t: t + '[guardrails]\nprotected_paths = [".agentops/**"]\n', "$.guardrails.protected_paths"),
]


def test_every_policy_request_refusal_has_its_code_and_loses_nothing(tmp_path: Path) -> None:
    """Each bad proposal is refused with its code (and the JSON path of what it weakens); a valid one is pending
    and a second is RUN_POLICY_TRANSITION_PENDING; a proposal file changed before the fence, and a dirty writer,
    refuse the transition itself -- and through all of it the binding never moves."""
    repo, run_id, doc = live_run(tmp_path)
    coordinator = Path(next(w["worktree"] for w in doc["workers"] if w["role"] == "coordinator"))
    kid = Path(next(w["worktree"] for w in doc["workers"] if w["role"] == "child"))
    proposals = coordinator / ".agentops/proposals"
    proposals.mkdir(parents=True)
    binding_before = git(repo, "rev-parse", f"refs/agentops/runs/{run_id}/policy")

    def propose(name: str, text: str | bytes, *extra: str, **kw: Any) -> tuple[int, dict[str, Any]]:
        path = proposals / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return ask(coordinator, f".agentops/proposals/{name}", *extra, **kw)

    # who and against what
    (kid / ".agentops/proposals").mkdir(parents=True, exist_ok=True)
    (kid / ".agentops/proposals/p.toml").write_text(base_text() + RUNNER)
    status_code, answer = ask(kid, ".agentops/proposals/p.toml", *APPROVE)
    assert (status_code, code_of(answer)) == (1, "RUN_COORDINATOR_REQUIRED"), answer
    assert code_of(propose("stale.toml", base_text() + RUNNER, *APPROVE, expected="0" * 64)[1]) == "RUN_POLICY_STALE"
    # the file itself
    assert code_of(ask(coordinator, ".agentops/proposals/missing.toml", *APPROVE)[1]) == "RUN_POLICY_INVALID"
    outside = tmp_path / "outside.toml"
    outside.write_text(base_text() + RUNNER)
    (proposals / "link.toml").symlink_to(outside)
    assert code_of(ask(coordinator, ".agentops/proposals/link.toml", *APPROVE)[1]) == "PATH_SYMLINK"
    (coordinator / ".agentops/linked").symlink_to(proposals)
    assert code_of(ask(coordinator, ".agentops/linked/link.toml", *APPROVE)[1]) == "PATH_SYMLINK"
    big = (base_text() + RUNNER + "# " + "x" * (129 * 1024) + "\n").encode()
    assert code_of(propose("big.toml", big, *APPROVE)[1]) == "DOC_TOO_LARGE"
    for bad_path in ("../outside.toml", "/etc/passwd"):
        status_code, answer = ask(coordinator, bad_path, *APPROVE)
        assert status_code == 2 and code_of(answer) == "USAGE", answer  # refused before anything is sent
    # what it says
    _, answer = propose("toml.toml", "version = 1\n[run\n", *APPROVE)
    assert code_of(answer) == "RUN_POLICY_INVALID" and "POLICY_TOML_INVALID" in answer["message"]
    _, answer = propose("unknown.toml", base_text() + "[verify.typo]\n", *APPROVE)
    assert code_of(answer) == "RUN_POLICY_INVALID" and "POLICY_UNKNOWN_KEY" in answer["message"]
    _, answer = propose("same.toml", base_text())
    assert code_of(answer) == "RUN_POLICY_INVALID" and "nothing would change" in answer["message"]
    for name, weaken, path in WEAKENED:
        _, answer = propose(f"{name}.toml", weaken(base_text() + RUNNER), *APPROVE)
        assert code_of(answer) == "RUN_POLICY_INVALID", (name, answer)
        assert path in answer["message"], (name, answer["message"])
    # approvals
    _, answer = propose("unapproved.toml", base_text() + RUNNER)
    assert code_of(answer) == "RUN_POLICY_UNAPPROVED" and "runner:acceptance" in answer["message"]
    status_code, answer = propose("blank.toml", base_text() + RUNNER, "--approve", "runner:acceptance", "--reason", " ")
    assert (status_code, code_of(answer)) == (2, "USAGE")  # a blank reason is not sent (the supervisor refuses it too)
    _, answer = propose("extra.toml", base_text() + RUNNER, *APPROVE, "--approve", "command:check", "--reason", "x")
    assert code_of(answer) == "RUN_POLICY_INVALID" and "command:check" in answer["message"]
    assert git(repo, "rev-parse", f"refs/agentops/runs/{run_id}/policy") == binding_before
    assert not refs_under(repo, f"refs/agentops/runs/{run_id}/journal/")  # no transition was recorded

    # a valid one is pending; a second one is refused while it is
    status_code, answer = propose("good.toml", base_text() + RUNNER, *APPROVE)
    assert (status_code, code_of(answer)) == (0, "RUN_POLICY_PENDING"), answer
    tid = answer["data"]["transitionId"]
    wait_for(repo, run_id, lambda d: d["status"] == "awaiting-input")
    _, answer = propose("second.toml", base_text() + RUNNER + "\n# another\n", *APPROVE)
    assert code_of(answer) == "RUN_POLICY_TRANSITION_PENDING", answer
    # the proposal changes before the fence: the approved bytes are not the file's any more
    (proposals / "good.toml").write_text(base_text() + RUNNER.replace("print(1)", "print(2)"))
    assert command(repo, "agentops-run", "approve", run_id, tid, "--no-supervise").returncode == 0
    doc = wait_for(repo, run_id, lambda d: transitions_of(d)[0]["stage"] == "refused", timeout=60)
    assert transitions_of(doc)[0]["refused"]["code"] == "RUN_POLICY_PROPOSAL_CHANGED"
    assert git(repo, "rev-parse", f"refs/agentops/runs/{run_id}/policy") == binding_before

    # a writer's checkout is dirty at the fence
    doc = wait_for(
        repo,
        run_id,
        lambda d: (
            d["status"] == "active" and any(w["role"] == "child" and w["status"] == "running" for w in d["workers"])
        ),
        timeout=60,
    )
    (kid / "scratch.txt").write_text("uncommitted\n")
    _, answer = propose("again.toml", base_text() + RUNNER + "# again\n", *APPROVE)
    assert code_of(answer) == "RUN_POLICY_PENDING", answer
    again = answer["data"]["transitionId"]
    assert command(repo, "agentops-run", "approve", run_id, again, "--no-supervise").returncode == 0
    doc = wait_for(
        repo, run_id, lambda d: [t["stage"] for t in transitions_of(d)] == ["refused", "refused"], timeout=60
    )
    refused = transitions_of(doc)[1]["refused"]
    assert refused["code"] == "RUN_POLICY_DIRTY" and "scratch.txt" in refused["message"]
    assert git(repo, "rev-parse", f"refs/agentops/runs/{run_id}/policy") == binding_before
    assert doc["status"] == "active"
    command(repo, "agentops-run", "stop", run_id)


def refs_under(repo: Path, prefix: str) -> list[str]:
    return [line for line in git(repo, "for-each-ref", "--format=%(refname)", prefix).splitlines() if line]


def test_policy_changes_never_refuses_every_proposal(tmp_path: Path) -> None:
    repo, run_id, doc = live_run(tmp_path, 'policy_changes = "never"')
    coordinator = Path(next(w["worktree"] for w in doc["workers"] if w["role"] == "coordinator"))
    (coordinator / ".agentops/proposals").mkdir(parents=True)
    (coordinator / ".agentops/proposals/p.toml").write_text(base_text('policy_changes = "never"') + RUNNER)
    _, answer = ask(coordinator, ".agentops/proposals/p.toml", *APPROVE)
    assert code_of(answer) == "RUN_POLICY_CHANGES_DISABLED", answer
    command(repo, "agentops-run", "stop", run_id)


def test_a_failure_after_the_bind_blocks_the_run_and_resume_rolls_it_forward(tmp_path: Path) -> None:
    """Once bound, a transition only rolls forward: a worktree whose commit fails (its index locked) blocks the run
    with RUN_POLICY_RECOVERY_REQUIRED, nothing lost; after the cause is gone, ``run resume`` completes it once."""
    options = 'policy_changes = "coordinator"'
    repo = project(tmp_path, run_options=options)
    base = git(repo, "rev-parse", "main")
    run_id = start(repo, scenario(tmp_path, options), env={"AGENTOPS_FAULT": "policy:bound"})
    wait_supervisor_gone(repo, run_id)
    doc = status(repo, run_id)
    assert transitions_of(doc)[0]["stage"] == "bound"
    child_worktree = Path(next(w["worktree"] for w in doc["workers"] if w["role"] == "child"))
    lock = Path(git(child_worktree, "rev-parse", "--absolute-git-dir")) / "index.lock"
    lock.write_text("")
    done = cli(repo, "agentops-run", "supervise", run_id, timeout=180)
    assert done.returncode == 1, done.stdout + done.stderr
    doc = status(repo, run_id)
    assert doc["status"] == "blocked" and doc["statusReason"].startswith("RUN_POLICY_RECOVERY_REQUIRED"), doc
    assert "RUN_POLICY_SYNC_FAILED" in doc["statusReason"]
    assert transitions_of(doc)[0]["stage"] == "bound"  # not refused, not complete: waiting to roll forward
    lock.unlink()
    assert command(repo, "agentops-run", "resume", run_id).returncode == 0
    doc = wait_for(repo, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=240)
    assert_completed_once(repo, run_id, base, doc)


# -- issue 23, item 5: what an approval alone let through, each through the real request ----------------------------

COORDINATOR = 'policy_changes = "coordinator"'
REVIEWER_HOST = '[hosts.reviewer-a]\nkind = "scripted"\n'
PLANT = (
    "[[worktree.setup]]\n"
    "argv = [\"python3\", \"-c\", \"open('conftest.py', 'w').write('def pytest_runtest_makereport(): pass\\\\n')\"]\n"
)
HOLES = [
    (
        "host writable widened",
        lambda opts: base_text(opts).replace(REVIEWER_HOST, REVIEWER_HOST + 'writable = ["/"]\n'),
        ("--approve", "host:reviewer-a", "--reason", "it needs to write its state"),
        "RUN_POLICY_INVALID",
        "$.hosts.reviewer-a.writable",
    ),
    (
        "reviewer host replaced",
        lambda opts: base_text(opts).replace(
            REVIEWER_HOST, '[hosts.reviewer-a]\nkind = "command"\nargv = ["sh", "-c", "echo approve"]\nwritable = []\n'
        ),
        ("--approve", "host:reviewer-a", "--reason", "a faster reviewer"),
        "RUN_POLICY_PERSON_REQUIRED",
        "$.hosts.reviewer-a.argv",
    ),
    (
        "setup step added",
        lambda opts: base_text(opts) + PLANT,
        ("--approve", "setup:0", "--reason", "configures pytest"),
        "RUN_POLICY_PERSON_REQUIRED",
        "$.worktree.setup[0]",
    ),
    (
        "budget raised",
        lambda opts: base_text(opts.replace("max_cost_usd = 5.0", "max_cost_usd = 1000.0") + '\nbudget = "10h"'),
        (),
        "RUN_POLICY_BUDGET_RAISED",
        "$.run.budget",
    ),
]


@pytest.mark.parametrize(("hole", "proposal", "approvals", "code", "path"), HOLES, ids=[h[0] for h in HOLES])
def test_what_only_a_person_may_decide_is_refused_when_the_coordinator_approves_itself(
    tmp_path: Path, hole: str, proposal: Any, approvals: tuple[str, ...], code: str, path: str
) -> None:
    """Before, each was accepted with the coordinator's own approval under ``policy_changes = "coordinator"`` (the
    budget with none at all): a host's writable widened, the required reviewer's host replaced by a command that
    always approves, a setup step that writes a ``conftest.py``, the budget raised. Each is refused with its code
    and JSON path, nothing is recorded, and the binding does not move."""
    options = COORDINATOR + ("\nmax_cost_usd = 5.0" if hole == "budget raised" else "")
    repo, run_id, doc = live_run(tmp_path, options)
    coordinator = Path(next(w["worktree"] for w in doc["workers"] if w["role"] == "coordinator"))
    binding_before = git(repo, "rev-parse", f"refs/agentops/runs/{run_id}/policy")
    (coordinator / ".agentops/proposals").mkdir(parents=True)
    (coordinator / ".agentops/proposals/p.toml").write_text(proposal(options))
    status_code, answer = ask(coordinator, ".agentops/proposals/p.toml", *approvals)
    assert (status_code, code_of(answer)) == (1, code), answer
    assert path in answer["message"], answer["message"]
    if code == "RUN_POLICY_BUDGET_RAISED":
        assert "--add-budget" in answer["message"] and "$.run.max_cost_usd" in answer["message"]
    assert git(repo, "rev-parse", f"refs/agentops/runs/{run_id}/policy") == binding_before
    assert not refs_under(repo, f"refs/agentops/runs/{run_id}/journal/")
    command(repo, "agentops-run", "stop", run_id)


def test_a_persons_decision_waits_for_a_person_and_a_budget_is_never_a_policy_change(tmp_path: Path) -> None:
    """With the default approval (a person), a setup step and a replaced reviewer host are what the person decides:
    the transition is pending and says so. Raising the budget is refused even then: it is ``run resume
    --add-budget``."""
    repo, run_id, doc = live_run(tmp_path)
    coordinator = Path(next(w["worktree"] for w in doc["workers"] if w["role"] == "coordinator"))
    (coordinator / ".agentops/proposals").mkdir(parents=True)
    (coordinator / ".agentops/proposals/budget.toml").write_text(base_text('budget = "10h"'))
    _, answer = ask(coordinator, ".agentops/proposals/budget.toml")
    assert code_of(answer) == "RUN_POLICY_BUDGET_RAISED", answer
    (coordinator / ".agentops/proposals/setup.toml").write_text(base_text() + PLANT)
    status_code, answer = ask(coordinator, ".agentops/proposals/setup.toml", *HOLES[2][2])
    assert (status_code, code_of(answer)) == (0, "RUN_POLICY_PENDING"), answer
    assert "person's decision" in answer["message"] and "$.worktree.setup[0]" in answer["message"]
    doc = wait_for(repo, run_id, lambda d: d["status"] == "awaiting-input")
    assert transitions_of(doc)[0]["approvedBy"] is None
    command(repo, "agentops-run", "stop", run_id)
