"""``git agentops-verify`` run by a worker agent in its own worktree: the run's bound policy, advisory, never a crash.

Every child is told to check its commit with ``git agentops-verify`` before it hands off. Inside the sandbox the
person's trust store and the repository's private dir are hidden, and the command used to die there with exit 4.
Now, in a worker worktree, it checks the commit against the policy the run is bound to, records nothing, and says
that the supervisor re-verifies the handoff itself; what a worker may not do is a coded refusal (exit 3).

The first test is a real run: the built-in scripted agent is the child, inside the namespace sandbox (Landlock in
its own user and mount namespaces), and its ``run`` steps call the real command, printing its output between
markers into the host log. The others build a worker worktree by hand (a linked worktree, a policy binding ref and
mailbox instructions, as the supervisor makes them) to test the refusals one by one, fast.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from git_agentops.canonical import canonical_bytes
from git_agentops.errors import CODES, EXIT_REFUSED
from git_agentops.model.task import Criterion, new_task
from git_agentops.policy.load import load_policy
from git_agentops.sandbox.plan import kernel_abi, namespace_problem

from ..conftest import commit_files, git, make_repo
from ..helpers import HANDOFF, child, commit_step, write_step
from ..runkit import children_settled, project, recipe, start, status, stop, task_by_title, wait_for, worker_of

NEW_CODES = ("VERIFY_WORKER_REFUSED", "VERIFY_BOUND_POLICY_UNREADABLE", "VERIFY_PATH_HIDDEN")
RUN = "run-20260101-abcdef"
WORKER = "worker-1"
TASK = "task-00000000-0000-4000-8000-00000000000a"
OTHER_TASK = "task-00000000-0000-4000-8000-00000000000b"
sandboxed = pytest.mark.skipif(
    kernel_abi() < 6 or namespace_problem() is not None,
    reason="needs Landlock ABI 6+ and user namespaces (this machine has both)",
)


# -- a real run, in the sandbox ------------------------------------------------------------------------------------


SUMMARY_KEYS = ("passed", "advisory", "recorded", "notesCommit", "policy", "producer", "taskId")
JSON_SUMMARY = (
    'git agentops-verify --json > "$TMPDIR/verify.json"; rc=$?; python3 -c \''
    "import json, sys; doc = json.load(open(sys.argv[1])); "
    f"print(json.dumps({{k: doc[k] for k in {json.dumps(SUMMARY_KEYS)}}}))"
    '\' "$TMPDIR/verify.json"; (exit $rc)'
)
"""``--json``, cut to the keys the test reads (the host log keeps only the tail of a step's output)."""


def _verify_step(name: str, command: str = "git agentops-verify") -> dict[str, Any]:
    """A run step that runs ``command`` and prints its output between markers, then its exit status."""
    return {"run": ["sh", "-c", f"echo '<<{name}'; {command} 2>&1; echo \"{name}>> rc=$?\"; true"]}


def _outputs(repo: Path, worker_id: str) -> dict[str, tuple[str, int]]:
    """name -> (output, exit status) of every :func:`_verify_step` in the worker's host logs."""
    logs = "".join(
        p.read_text(errors="replace") for p in (repo / ".git" / "worktrees").glob(f"*/agentops/host-{worker_id}.log")
    )
    lines = [re.sub(r"^\d\d:\d\d:\d\d \[scripted [^]]+\] ", "", line) for line in logs.splitlines()]
    text = "\n".join(lines)
    return {
        m.group(1): (m.group(2), int(m.group(3)))
        for m in re.finditer(r"^<<(\w+)\n(.*?)^\1>> rc=(\d+)$", text, re.MULTILINE | re.DOTALL)
    }


@pytest.mark.slow
@sandboxed
def test_a_sandboxed_child_checks_its_commit_against_the_bound_policy(tmp_path: Path) -> None:
    """Exit 0 when the commit passes, 1 when the child's change breaks the check (naming it, with its tail); never
    4; the output names the bound policy and says the supervisor re-verifies. Nothing the worker ran is recorded:
    every evidence record in the repository is the supervisor's."""
    repo = project(tmp_path)
    person_state = os.environ["XDG_STATE_HOME"]
    steps = [
        write_step("src/good.txt", "fine\n"),
        commit_step("a good change"),
        _verify_step("passes"),
        _verify_step("passes_json", JSON_SUMMARY),
        # the person's trust store, named outright: the worker's check never reads it
        _verify_step("person_state", f"XDG_STATE_HOME={person_state} git agentops-verify"),
        _verify_step("other_task", f"git agentops-verify --task {OTHER_TASK}"),
        write_step("src/bad.txt", "BAD\n"),
        commit_step("a change that breaks the check"),
        _verify_step("fails"),
        write_step("src/bad.txt", "mended\n"),
        commit_step("mend it"),
        _verify_step("mended"),
        HANDOFF,
    ]
    run_id = start(repo, recipe(tmp_path, child("c", "Checked", [steps])))
    try:
        doc = wait_for(repo, run_id, children_settled, timeout=180)
        worker = worker_of(doc, task_by_title(doc, "Checked")["taskId"])
        outputs = _outputs(repo, worker["workerId"])
    finally:
        stop(repo, run_id)
    assert worker["sandbox"] == "namespace", worker
    assert set(outputs) == {"passes", "passes_json", "person_state", "other_task", "fails", "mended"}, outputs
    assert all(rc != 4 and "INTERNAL" not in out for out, rc in outputs.values()), outputs
    bound = git(repo, "cat-file", "blob", f"refs/agentops/runs/{run_id}/policy:binding.json")
    bound_hash = json.loads(bound)["configHash"]

    out, rc = outputs["passes"]
    assert rc == 0, out
    assert "check: PASS" in out and "PASSED:" in out
    assert f"bound policy {bound_hash[:12]}" in out and f"refs/agentops/runs/{run_id}/policy" in out
    assert "supervisor re-verifies" in out and "nothing was recorded" in out

    out, rc = outputs["passes_json"]
    report = json.loads(out)
    assert rc == 0 and report["passed"] is True
    assert report["advisory"] is True and report["recorded"] is False and report["notesCommit"] is None
    assert report["policy"]["configHash"] == bound_hash and report["policy"]["source"] == "run-binding"
    assert report["producer"] == "agent" and report["taskId"] == task_by_title(doc, "Checked")["taskId"]

    assert outputs["person_state"][1] == 0, outputs["person_state"]

    out, rc = outputs["other_task"]
    assert rc == EXIT_REFUSED and "error[VERIFY_WORKER_REFUSED]" in out, out

    out, rc = outputs["fails"]
    assert rc == 1, out
    assert "FAILED:" in out and "failed: check: FAIL (exit 1)" in out
    assert "--- last output of check ---" in out and "bad: ['src/bad.txt']" in out
    assert "supervisor re-verifies" in out

    assert outputs["mended"][1] == 0, outputs["mended"]
    assert task_by_title(status(repo, run_id), "Checked")["status"] == "delivered"
    producers = _evidence_producers(repo)
    assert producers and producers <= {("supervisor", "clean")}, producers


def _evidence_producers(repo: Path) -> set[tuple[str, str]]:
    listed = git(repo, "notes", "--ref=agentops/evidence", "list", check=False)
    found = set()
    for line in listed.splitlines():
        annotated = line.split()[1]
        for record in git(repo, "notes", "--ref=agentops/evidence", "show", annotated).splitlines():
            doc = json.loads(record)
            found.add((doc["producer"], doc["checkout"]))
    return found


# -- a worker worktree made by hand --------------------------------------------------------------------------------

POLICY = """version = 1
[run]
target = "main"
[[verify.commands]]
id = "check"
argv = ["python3", "check.py"]
timeout = 60
[[verify.runners]]
id = "accept"
argv = ["sh", "-c", "echo accepted"]
timeout = 60
[[worktree.setup]]
argv = ["true"]
"""
CHECK = """import pathlib, sys
bad = sorted(str(p) for p in pathlib.Path("src").glob("*") if "BAD" in p.read_text())
print("bad:", bad)
sys.exit(1 if bad else 0)
"""


def _worker_worktree(
    tmp_path: Path, *, binding: Mapping[str, Any] | None = None, instructed: str | None = None
) -> tuple[Path, Path]:
    """(main checkout, worker worktree): a linked worktree on its own branch, the run's policy binding ref and the
    worker's mailbox instructions, as the supervisor makes them. The person trusts the policy."""
    repo = make_repo(
        tmp_path / "repo",
        files={"check.py": CHECK, "src/a.txt": "a\n", ".agentops/policy.toml": POLICY, ".gitignore": "__pycache__/\n"},
    )
    done = subprocess.run(["git", "agentops-policy", "trust", "--yes"], cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    worktree = tmp_path / "worktrees" / WORKER
    git(repo, "worktree", "add", "-q", "-b", f"agentops/{RUN}/{WORKER}", str(worktree))
    with (repo / ".git" / "info" / "exclude").open("a") as exclude:
        exclude.write(".agentops/mailbox/\n")
    policy = load_policy(repo)
    _bind(repo, canonical_bytes(dict(policy.doc)) + b"\n", binding or {"runId": RUN, "configHash": policy.config_hash})
    task = new_task(
        TASK,
        title="T",
        intent="I",
        goal="G",
        criteria=[Criterion("c1", "accepted", runner="accept")],
        parent="task-00000000-0000-4000-8000-000000000000",
    )
    instructions = {
        "version": 1,
        "runId": RUN,
        "workerId": WORKER,
        "role": "child",
        "generation": 1,
        "contractHash": "0" * 64,
        "goal": "G",
        "task": task.to_json(),
        "tasks": [],
        "rootTaskId": None,
        "diagnostic": None,
        "answers": [],
        "mailbox": str(worktree / ".agentops" / "mailbox"),
        "worktree": str(worktree),
        "base": None,
        "host": "scripted",
        "recipe": None,
        "runStatus": "active",
        "policy": {"configHash": instructed or policy.config_hash, "changes": "user", "transitions": []},
    }
    from git_agentops.protocol.mailbox import write_instructions

    write_instructions(worktree, instructions)
    return repo, worktree


def _bind(repo: Path, config: bytes, binding: Mapping[str, Any]) -> None:
    """Write ``refs/agentops/runs/<RUN>/policy`` (a commit of config.json and binding.json) with plumbing."""

    def blob(data: bytes) -> str:
        done = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input=data, capture_output=True)
        return done.stdout.decode().strip()

    entries = (
        f"100644 blob {blob(config)}\tconfig.json\n100644 blob {blob(canonical_bytes(dict(binding)))}\tbinding.json\n"
    )
    tree = git(repo, "mktree", input=entries)
    commit = git(repo, "commit-tree", tree, "-m", "POLICY_BOUND")
    git(repo, "update-ref", f"refs/agentops/runs/{RUN}/policy", commit)


def _agent_env(worktree: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "AGENTOPS_RUN_ID": RUN,
        "AGENTOPS_WORKER_ID": WORKER,
        "AGENTOPS_GENERATION": "1",
        "AGENTOPS_MAILBOX": str(worktree / ".agentops" / "mailbox"),
        **extra,
    }


def _verify(cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "agentops-verify", *args], cwd=cwd, env=dict(env or os.environ), capture_output=True, text=True
    )


def _refused(done: subprocess.CompletedProcess[str], code: str) -> dict[str, Any]:
    assert done.returncode == EXIT_REFUSED, done.stdout + done.stderr
    error: dict[str, Any] = json.loads(done.stderr)["error"]
    assert error["code"] == code, error
    return error


def _no_evidence(repo: Path) -> bool:
    return git(repo, "for-each-ref", "refs/notes/agentops/evidence") == ""


def test_the_check_runs_the_bound_policy_and_the_workers_runners_and_records_nothing(tmp_path: Path) -> None:
    repo, worktree = _worker_worktree(tmp_path)
    done = _verify(worktree, "--json", env=_agent_env(worktree))
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert [(r["commandId"], r["kind"]) for r in report["results"]] == [("check", "command"), ("accept", "runner")]
    assert report["taskId"] == TASK and report["results"][1]["criteria"] == ["c1"]
    assert report["recorded"] is False and report["setup"] == {"steps": 1, "ranHere": False}
    assert report["policy"]["ref"] == f"refs/agentops/runs/{RUN}/policy"
    human = _verify(worktree, env=_agent_env(worktree))
    assert human.returncode == 0, human.stderr
    assert "setup: the bound policy's 1 setup step(s) ran in this worktree" in human.stdout
    assert "supervisor re-verifies" in human.stdout
    assert _no_evidence(repo)


def test_the_mailbox_alone_marks_a_worker_worktree(tmp_path: Path) -> None:
    """An agent's subprocess that lost the supervisor's variables is still a worker in its worktree."""
    repo, worktree = _worker_worktree(tmp_path)
    done = _verify(worktree, "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["advisory"] is True, done.stderr
    assert _no_evidence(repo)


def test_the_bound_policy_counts_not_the_worktrees_file(tmp_path: Path) -> None:
    """The worker commits a policy whose check always passes: its check still runs the run's bound policy."""
    repo, worktree = _worker_worktree(tmp_path)
    weak = POLICY.replace('argv = ["python3", "check.py"]', 'argv = ["true"]')
    commit_files(worktree, {".agentops/policy.toml": weak, "src/b.txt": "BAD\n"}, "weaken the check")
    done = _verify(worktree, env=_agent_env(worktree))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "failed: check: FAIL (exit 1)" in done.stdout and "src/b.txt" in done.stdout
    assert _no_evidence(repo)


def test_instructions_naming_another_policy_are_noted_and_the_binding_wins(tmp_path: Path) -> None:
    """Instructions not yet rewritten after a transition: the supervisor verifies with the binding, so does this."""
    _repo, worktree = _worker_worktree(tmp_path, instructed="1" * 64)
    done = _verify(worktree, env=_agent_env(worktree))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "instructions.json names policy 111111111111, but the run is bound to" in done.stdout


def test_a_failing_command_is_exit_1_naming_it_with_its_tail(tmp_path: Path) -> None:
    _repo, worktree = _worker_worktree(tmp_path)
    commit_files(worktree, {"src/b.txt": "BAD\n"}, "break it")
    done = _verify(worktree, env=_agent_env(worktree))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED:" in done.stdout and "--- last output of check ---" in done.stdout
    assert "bad: ['src/b.txt']" in done.stdout


def test_another_tasks_runners_are_refused(tmp_path: Path) -> None:
    _repo, worktree = _worker_worktree(tmp_path)
    error = _refused(
        _verify(worktree, "--json", "--task", OTHER_TASK, env=_agent_env(worktree)), "VERIFY_WORKER_REFUSED"
    )
    assert error["details"] == {"task": OTHER_TASK, "ownTask": TASK}
    assert _verify(worktree, "--task", TASK, env=_agent_env(worktree)).returncode == 0


def test_another_workers_instructions_are_refused(tmp_path: Path) -> None:
    _repo, worktree = _worker_worktree(tmp_path)
    env = _agent_env(worktree, AGENTOPS_WORKER_ID="worker-2")
    assert "worker-2" in _refused(_verify(worktree, "--json", env=env), "VERIFY_WORKER_REFUSED")["message"]
    env = _agent_env(worktree, AGENTOPS_RUN_ID="run-other")
    _refused(_verify(worktree, "--json", env=env), "VERIFY_WORKER_REFUSED")


def test_a_worker_verifying_another_checkout_is_refused(tmp_path: Path) -> None:
    repo, worktree = _worker_worktree(tmp_path)
    error = _refused(_verify(repo, "--json", env=_agent_env(worktree)), "VERIFY_WORKER_REFUSED")
    assert error["details"]["worktree"] == str(worktree)
    assert _no_evidence(repo)


@pytest.mark.parametrize(
    "damage",
    ["no-ref", "wrong-hash", "other-run"],
)
def test_a_binding_that_cannot_be_read_is_refused(tmp_path: Path, damage: str) -> None:
    binding = {"runId": "run-other" if damage == "other-run" else RUN, "configHash": "0" * 64}
    repo, worktree = _worker_worktree(tmp_path, binding=None if damage == "no-ref" else binding)
    if damage == "no-ref":
        git(repo, "update-ref", "-d", f"refs/agentops/runs/{RUN}/policy")
    error = _refused(_verify(worktree, "--json", env=_agent_env(worktree)), "VERIFY_BOUND_POLICY_UNREADABLE")
    assert "hand off anyway" in error["message"]


def test_a_person_outside_worker_worktrees_is_unchanged(tmp_path: Path) -> None:
    """The main checkout: the trusted policy, evidence recorded as the person's."""
    repo, _worktree = _worker_worktree(tmp_path)
    done = _verify(repo, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["producer"] == "person" and report["notesCommit"] and "advisory" not in report
    assert not _no_evidence(repo)


@sandboxed
def test_a_hidden_trust_store_is_a_coded_refusal_not_a_crash(tmp_path: Path) -> None:
    """The issue's crash, at the kernel: an agent (no mailbox here) whose environment names the person's trust
    store, which its Landlock rules hide (EACCES) -- ``VERIFY_PATH_HIDDEN``, exit 3, never INTERNAL."""
    from git_agentops.sandbox.rules import Places, agent_rules
    from git_agentops.sandbox.spec import Mode, SandboxSpec, launcher_command, write_spec

    repo, _worktree = _worker_worktree(tmp_path)
    common = repo / ".git"
    checkout = tmp_path / "agent-checkout"  # an agent's checkout that is no worker's: the person's path is taken
    git(repo, "worktree", "add", "-q", "--detach", str(checkout))
    state = Path(os.environ["XDG_STATE_HOME"]) / "git-agentops"
    assert (state / "trust.json").is_file()
    scratch = tmp_path / "agent-tmp"
    scratch.mkdir()
    places = Places(
        worktree=checkout,
        admin_dir=common / "worktrees" / checkout.name,
        common_dir=common,
        tmpdir=scratch,
        private_dir=common / "agentops",
        verify_root=Path(os.environ["XDG_CACHE_HOME"]) / "git-agentops",
        trust_dir=state,
        signing_key=None,
        readable_private=(common / "agentops" / "envs", common / "agentops" / "cache"),
    )
    argv = ("git", "agentops-verify", "--json")
    spec = tmp_path / "spec.json"
    rules = agent_rules(places, own=[checkout, places.admin_dir, scratch])
    write_spec(spec, SandboxSpec(argv, str(checkout), tuple(rules), mode=Mode.LANDLOCK))
    env = {**os.environ, "AGENTOPS_WORKER_ID": WORKER, "TMPDIR": str(scratch)}
    done = subprocess.run(launcher_command(spec), env=env, capture_output=True, text=True, timeout=120, check=False)
    error = _refused(done, "VERIFY_PATH_HIDDEN")
    assert str(state) in error["details"]["path"] and error["details"]["errno"] == 13
    assert "sandbox hides" in error["message"]


def test_any_hidden_path_becomes_the_coded_refusal(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """Whatever path this command is refused (EACCES, EPERM, EROFS), the answer is VERIFY_PATH_HIDDEN; any other
    OSError stays what it is (a real crash, logged)."""
    from git_agentops.cli import verify

    def hidden(args: Any, ctx: Any) -> int:
        raise PermissionError(13, "Permission denied", "/home/someone/.local/state/git-agentops")

    monkeypatch.setattr(verify, "_verify", hidden)
    monkeypatch.setenv("AGENTOPS_RUN_ID", RUN)
    assert verify.main(["--json"]) == EXIT_REFUSED
    error = json.loads(capsys.readouterr().err)["error"]
    assert error["code"] == "VERIFY_PATH_HIDDEN" and error["details"]["path"].endswith("git-agentops")


def test_the_new_codes_are_registered_refusals_and_documented() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text("utf-8")
    from git_agentops.cli.verify import build_parser

    help_text = build_parser().format_help()
    for code in NEW_CODES:
        assert CODES[code].exit_status == EXIT_REFUSED
        assert f"| `{code}` | 3 |" in readme
        assert code in help_text
