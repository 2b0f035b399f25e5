"""The rules repository hooks enforce, fired by the real git CLI through the installed shims.

Each test names the invariant it checks. Hooks are installed with ``git agentops-init --hooks``; the worker
tests run a real supervisor with the scripted agent, whose own commits go through the same ``pre-commit`` hook.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_agentops.cli import hook as hook_cli
from git_agentops.hooks import fast
from git_agentops.verify.redact import RULES, find_secrets

from ..conftest import git, make_repo
from ..helpers import HANDOFF, child, write_step
from ..runkit import cli, events, project, recipe, start, status, stop, task_by_title, trust, wait_for

# a made-up OpenSSH key body: secret-shaped, never a real key
KEY_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"
PRIVATE_KEY = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_BODY}\n-----END OPENSSH PRIVATE KEY-----\n"
SAMPLES = {
    "private-key": PRIVATE_KEY,
    "aws-access-key-id": "key = AKIAIOSFODNN7EXAMPLE",
    "aws-secret-access-key": "SecretAccessKey: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "github-token": "token ghp_" + "a1B2" * 9,
    "gitlab-token": "glptt-" + "x1" * 12,
    "slack-token": "xoxb-123456789012-abcdef",
    "anthropic-key": "sk-ant-" + "A1" * 12,
    "openai-key": "sk-proj-" + "Ab1" * 8,
    "google-api-key": "AIza" + "B" * 35,
    "stripe-key": "rk_live_" + "c" * 24,
    "npm-token": "npm_" + "D" * 36,
    "jwt": "eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.sig",
}


def install_hooks(repo: Path, *extra: str) -> None:
    done = cli(repo, "agentops-init", "--hooks", "--yes", *extra)
    assert done.returncode == 0, done.stderr


def commit(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "commit", "-q", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
        timeout=60,
    )


def run_git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=120)


def error_codes(stderr: str) -> list[str]:
    return [line.split("]", 1)[0].split("[", 1)[1] for line in stderr.splitlines() if "error[" in line]


# -- the secret prefilter ---------------------------------------------------------------------------------------


def test_every_builtin_secret_rule_has_a_sample_that_passes_the_prefilter() -> None:
    assert set(SAMPLES) == set(RULES)
    for rule, sample in SAMPLES.items():
        assert [f.rule for f in find_secrets(sample)] == [rule], rule
        assert fast.might_hold_secret(sample.encode()), rule


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from([*SAMPLES.values(), "x", " ", "\n", "-", "_", "A", "K", "I", "=", "ey", "J", "sk", "gh", "p"]),
        max_size=12,
    )
)
def test_the_prefilter_never_skips_text_a_rule_matches(pieces: list[str]) -> None:
    text = "".join(pieces)
    if find_secrets(text):
        assert fast.might_hold_secret(text.encode())


# -- reference-transaction: our namespaces only ---------------------------------------------------------------


@pytest.fixture
def hooked(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo", files={"a.txt": "a\n"})
    for n in range(2):
        (repo / "a.txt").write_text(f"a{n}\n")
        git(repo, "commit", "-qam", f"change {n}")
    install_hooks(repo)
    return repo


def test_a_delivery_ref_is_created_once_and_never_moved_or_deleted(hooked: Path) -> None:
    ref = "refs/agentops/runs/r1/deliveries/t1"
    head, parent = git(hooked, "rev-parse", "HEAD"), git(hooked, "rev-parse", "HEAD~1")
    assert run_git(hooked, "update-ref", ref, parent).returncode == 0
    moved = run_git(hooked, "update-ref", ref, head)
    assert moved.returncode != 0 and "HOOK_REF_CREATE_ONLY" in error_codes(moved.stderr), moved.stderr
    deleted = run_git(hooked, "update-ref", "-d", ref)
    assert deleted.returncode != 0 and "HOOK_REF_CREATE_ONLY" in error_codes(deleted.stderr), deleted.stderr
    assert git(hooked, "rev-parse", ref) == parent


def test_run_state_moves_forward_only_and_is_never_deleted(hooked: Path) -> None:
    ref = "refs/agentops/runs/r1/state"
    first, second, third = (git(hooked, "rev-parse", f"HEAD~{n}") for n in (2, 1, 0))
    assert run_git(hooked, "update-ref", ref, second).returncode == 0
    back = run_git(hooked, "update-ref", ref, first)
    assert back.returncode != 0 and error_codes(back.stderr) == ["HOOK_REF_FAST_FORWARD_ONLY"], back.stderr
    assert "only moves forward" in back.stderr
    assert run_git(hooked, "update-ref", ref, third).returncode == 0  # forward is fine
    gone = run_git(hooked, "update-ref", "-d", ref)
    assert gone.returncode != 0 and error_codes(gone.stderr) == ["HOOK_REF_DELETE"]
    assert git(hooked, "rev-parse", ref) == third
    notes = run_git(hooked, "notes", "--ref=agentops/evidence", "add", "-m", "x", "HEAD")
    assert notes.returncode == 0, notes.stderr  # git notes appends: a fast-forward


def test_refs_outside_our_namespaces_are_untouched_even_with_unreadable_agentops_state(hooked: Path) -> None:
    (hooked / ".git" / "refs" / "agentops" / "runs" / "r9").mkdir(parents=True)
    (hooked / ".git" / "refs" / "agentops" / "runs" / "r9" / "state").write_text("garbage\n")
    (hooked / ".agentops").mkdir(exist_ok=True)
    (hooked / ".agentops" / "policy.toml").write_text("this is [not toml\n")
    (hooked / ".git" / "agentops").mkdir(exist_ok=True)
    (hooked / ".git" / "agentops" / "cache").write_text("not a directory")
    parent = git(hooked, "rev-parse", "HEAD~1")
    assert run_git(hooked, "branch", "feature", parent).returncode == 0
    assert run_git(hooked, "update-ref", "refs/heads/feature", "HEAD").returncode == 0
    assert run_git(hooked, "update-ref", "refs/heads/feature", parent).returncode == 0  # backwards is not ours
    assert run_git(hooked, "update-ref", "-d", "refs/heads/feature").returncode == 0
    assert run_git(hooked, "tag", "v1").returncode == 0
    done = commit(hooked, "--allow-empty", "-m", "still works")
    assert done.returncode == 0, done.stderr


def _main_with(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], stdin: bytes
) -> int:
    def crash(*args: object, **kwargs: object) -> tuple[int, list[str]]:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(fast, "dispatch", crash)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    return hook_cli.main(argv)


def test_a_crashing_hook_fails_open_outside_our_namespaces(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    line = f"{'0' * 40} {'1' * 40} refs/heads/main\n".encode()
    assert _main_with(monkeypatch, capsys, ["reference-transaction", "prepared"], line) == 0
    assert "warning[HOOK_FAILED]" in capsys.readouterr().err
    assert _main_with(monkeypatch, capsys, ["pre-commit"], b"") == 0


def test_a_crashing_hook_fails_closed_inside_our_namespaces(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    line = f"{'0' * 40} {'1' * 40} refs/agentops/runs/r/state\n".encode()
    assert _main_with(monkeypatch, capsys, ["reference-transaction", "prepared"], line) == 1
    assert "error[HOOK_FAILED]" in capsys.readouterr().err


def test_an_unknown_hook_type_is_a_usage_error(hooked: Path) -> None:
    done = cli(hooked, "agentops-hook", "post-checkout")
    assert done.returncode == 2 and "error[USAGE]" in done.stderr


FAST_PATH_PROBE = """
import os, sys
from git_agentops.hooks.fast import dispatch
print(dispatch("pre-commit", [], cwd=os.getcwd(), env=os.environ, stdin=b""))
line = ("0" * 40 + " " + "1" * 40 + " refs/heads/topic\\n").encode()
print(dispatch("reference-transaction", ["prepared"], cwd=os.getcwd(), env=os.environ, stdin=line))
print(sorted(m for m in ("pygit2", "jsonschema", "dulwich") if m in sys.modules))
"""


def test_the_fast_path_imports_neither_pygit2_nor_jsonschema(hooked: Path) -> None:
    (hooked / ".agentops").mkdir()
    (hooked / ".agentops" / "policy.toml").write_text("version = 1\n")  # a policy to read (its cache is cold)
    (hooked / "b.txt").write_text("plain text\n")
    git(hooked, "add", "b.txt")
    done = subprocess.run([sys.executable, "-c", FAST_PATH_PROBE], cwd=hooked, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["(0, [])", "(0, [])", "[]"]


# -- pre-commit outside run worktrees: only secrets --------------------------------------------------------------


def test_a_staged_secret_is_refused_with_path_and_line_and_the_value_redacted(hooked: Path) -> None:
    (hooked / "notes.md").write_text("# notes\n\nnothing here\n")
    (hooked / "deploy.env").write_text("A=1\nTOKEN=" + SAMPLES["github-token"].split()[1] + "\n")
    git(hooked, "add", "notes.md", "deploy.env")
    done = commit(hooked, "-m", "add config")
    assert done.returncode == 1 and error_codes(done.stderr) == ["HOOK_SECRET"], done.stderr
    assert "deploy.env:2: github-token" in done.stderr
    assert SAMPLES["github-token"].split()[1] not in done.stderr and "[REDACTED:github-token]" in done.stderr
    git(hooked, "rm", "-q", "--cached", "deploy.env")
    assert commit(hooked, "-m", "just notes").returncode == 0


def test_policy_can_turn_secret_scanning_off_and_add_patterns(hooked: Path) -> None:
    (hooked / ".agentops").mkdir()
    policy = hooked / ".agentops" / "policy.toml"
    policy.write_text('version = 1\n[guardrails]\ndeny_patterns = ["internal-[0-9]{6}"]\n')
    (hooked / "x.txt").write_text("ticket internal-123456\n")
    git(hooked, "add", "x.txt")
    done = commit(hooked, "-m", "x")
    assert done.returncode == 1 and "x.txt:1: policy-0" in done.stderr and "123456" not in done.stderr
    policy.write_text("version = 1\n[guardrails]\nsecret_scanning = false\n")
    (hooked / "x.txt").write_text(PRIVATE_KEY)
    git(hooked, "add", "x.txt")
    assert commit(hooked, "-m", "x").returncode == 0


# -- pre-commit and merges in a worker worktree ----------------------------------------------------------------


@pytest.mark.slow
def test_worker_worktree_rules(tmp_path: Path) -> None:
    """Only the current generation commits; private files and secrets are refused; only deliveries are merged;
    the post-merge hook warns but never writes run state."""
    repo = project(tmp_path)
    install_hooks(repo)
    base = git(repo, "rev-parse", "HEAD")
    recipe_text = child("a", "Part A", [[write_step("src/a.txt", "a\n"), '{ commit = "Add a" }', HANDOFF]]) + child(
        "b",
        "Part B",
        [
            [write_step("src/b.txt", "BAD\n"), '{ commit = "Add b (bad)" }', HANDOFF],  # fails verification
            ["{ sleep = 300 }"],  # generation 2 stays up while the test works in its worktree
        ],
        ["a"],
    )
    run_id = start(repo, recipe(tmp_path, recipe_text))
    try:
        doc = wait_for(repo, run_id, second_generation_running("Part B"))
        b_task = task_by_title(doc, "Part B")
        worker = next(w for w in doc["workers"] if w["taskId"] == b_task["taskId"])
        tree = Path(worker["worktree"])
        head = git(tree, "rev-parse", "HEAD")
        # the agent's own generation-1 commit went through the hook and was accepted
        assert git(tree, "log", "--format=%s", "-1", "HEAD") == "Add b (bad)"

        (tree / "src" / "c.txt").write_text("c\n")
        git(tree, "add", "src/c.txt")
        stale = commit(tree, "-m", "stale", env={"AGENTOPS_GENERATION": "1"})
        assert stale.returncode == 1 and error_codes(stale.stderr) == ["HOOK_STALE_WORKER"], stale.stderr
        assert "generation 1" in stale.stderr and git(tree, "rev-parse", "HEAD") == head

        (tree / ".agentops" / "mailbox" / "note.txt").write_text("private\n")
        git(tree, "add", "-f", ".agentops/mailbox/note.txt")
        private = commit(tree, "-m", "mailbox", env={"AGENTOPS_GENERATION": "2"})
        assert private.returncode == 1 and error_codes(private.stderr) == ["HOOK_PRIVATE_PATH"], private.stderr
        git(tree, "rm", "-q", "--cached", ".agentops/mailbox/note.txt")

        (tree / "id_ed25519").write_text(PRIVATE_KEY)
        git(tree, "add", "id_ed25519")
        secret = commit(tree, "-m", "key", env={"AGENTOPS_GENERATION": "2"})
        assert secret.returncode == 1 and error_codes(secret.stderr) == ["HOOK_SECRET"], secret.stderr
        assert "id_ed25519:1: private-key" in secret.stderr and KEY_BODY not in secret.stderr
        git(tree, "rm", "-q", "--cached", "id_ed25519")

        policy = tree / ".agentops" / "policy.toml"
        policy.write_text(policy.read_text() + "\n# loosen things\n")
        git(tree, "add", ".agentops/policy.toml")
        changed = commit(tree, "-m", "policy", env={"AGENTOPS_GENERATION": "2"})
        assert changed.returncode == 1 and error_codes(changed.stderr) == ["HOOK_POLICY_CHANGE"], changed.stderr
        git(tree, "checkout", "HEAD", "--", ".agentops/policy.toml")

        current = commit(tree, "-m", "current", env={"AGENTOPS_GENERATION": "2"})
        assert current.returncode == 0, current.stderr
        (tree / "src" / "d.txt").write_text("d\n")
        git(tree, "add", "src/d.txt")
        from_instructions = commit(tree, "-m", "generation from the mailbox instructions")
        assert from_instructions.returncode == 0, from_instructions.stderr

        # a branch that is not a frozen delivery of Part B's dependency (Part A)
        git(repo, "branch", "side", base)
        side = make_side_commit(repo, tmp_path)
        merged = run_git(tree, "merge", "--no-ff", "-m", "merge side", side)
        assert merged.returncode != 0 and error_codes(merged.stderr) == ["HOOK_MERGE_NOT_DELIVERY"], merged.stderr
        a_task = task_by_title(doc, "Part A")
        assert f"allowed: {a_task['taskId']} {a_task['delivery'][:12]}" in merged.stderr
        run_git(tree, "merge", "--abort")
        stopped = run_git(tree, "merge", "--no-commit", "--no-ff", side)  # stops before committing: no hook yet
        assert stopped.returncode == 0, stopped.stderr
        concluded = commit(tree, "-m", "conclude the merge", env={"AGENTOPS_GENERATION": "2"})
        assert error_codes(concluded.stderr) == ["HOOK_MERGE_NOT_DELIVERY"], concluded.stderr
        run_git(tree, "merge", "--abort")
        forced = run_git(tree, "merge", "--no-verify", "--no-ff", "-m", "merge side anyway", side)
        assert forced.returncode == 0 and "warning[HOOK_MERGE_NOT_DELIVERY]" in forced.stderr, forced.stderr
        assert "the supervisor records it when this worker hands off" in forced.stderr
        # a hook runs in the agent's own git process: it warns, and writes no run state (that is the supervisor's)
        log = events(repo, run_id)
        assert not [e for e in log if e["foreign"] or e["code"].startswith("HOOK_")], log
    finally:
        stop(repo, run_id)


def second_generation_running(title: str) -> Callable[[dict[str, Any]], bool]:
    def ready(doc: dict[str, Any]) -> bool:
        task = next((t for t in doc["tasks"] if t["title"] == title), None)
        return task is not None and any(
            w["taskId"] == task["taskId"] and w["generation"] == 2 and w["status"] == "running" for w in doc["workers"]
        )

    return ready


def make_side_commit(repo: Path, tmp_path: Path) -> str:
    side = tmp_path / "side"
    git(repo, "worktree", "add", "-q", str(side), "side")
    (side / "side.txt").write_text("side\n")
    git(side, "add", "side.txt")
    git(side, "commit", "-qm", "side work")
    return git(side, "rev-parse", "HEAD")


# -- pre-push and pre-receive -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_pushing_the_target_needs_a_receipt_and_a_server_refuses_rewriting_deliveries(tmp_path: Path) -> None:
    repo = project(tmp_path)
    remote = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(remote))
    git(repo, "remote", "add", "origin", str(remote))
    trust(repo)  # trust is keyed by the origin URL too
    install_hooks(repo)
    server = cli(remote, "agentops-init", "--server", "--yes")
    assert server.returncode == 0, server.stderr
    base = git(repo, "rev-parse", "main")

    (repo / "src" / "direct.txt").write_text("direct\n")
    git(repo, "add", "src/direct.txt")
    git(repo, "commit", "-qm", "a commit nobody integrated")
    refused = run_git(repo, "push", "origin", "main")
    assert refused.returncode != 0 and error_codes(refused.stderr) == ["HOOK_RECEIPT_INVALID"], refused.stderr
    assert "RECEIPT_MISSING" in refused.stderr
    assert git(remote, "rev-parse", "main") == base
    bypass = run_git(repo, "push", "--no-verify", "origin", "main")  # skips our pre-push, not the server's
    assert bypass.returncode != 0 and "HOOK_RECEIPT_INVALID" in bypass.stderr, bypass.stderr
    assert git(remote, "rev-parse", "main") == base
    other = run_git(repo, "push", "--no-verify", "origin", "main:refs/heads/topic")  # not the target: not ours
    assert other.returncode == 0, other.stderr
    git(repo, "reset", "-q", "--hard", base)

    simple = child("a", "Part A", [[write_step("src/a.txt", "a\n"), '{ commit = "Add a" }', HANDOFF]])
    run_id = start(repo, recipe(tmp_path, simple, finalize=True))
    doc = wait_for(repo, run_id, lambda d: d["status"] == "complete")
    candidate = doc["integration"]["candidate"]
    assert git(repo, "rev-parse", "main") == candidate
    pushed = run_git(repo, "push", "origin", "main", "refs/notes/agentops/receipts", "refs/notes/agentops/deliveries")
    assert pushed.returncode == 0, pushed.stderr  # the server read the receipt from the notes pushed with it
    assert git(remote, "rev-parse", "main") == candidate

    delivery_ref = f"refs/agentops/runs/{run_id}/deliveries/{task_by_title(doc, 'Part A')['taskId']}"
    assert run_git(repo, "push", "origin", delivery_ref).returncode == 0  # creating it is fine
    rewrite = run_git(repo, "push", "origin", f"+{base}:{delivery_ref}")
    assert rewrite.returncode != 0 and "HOOK_REF_CREATE_ONLY" in error_codes(rewrite.stderr), rewrite.stderr
    bypass = run_git(repo, "push", "--no-verify", "origin", f"+{base}:{delivery_ref}")  # skips our pre-push...
    assert bypass.returncode != 0 and "HOOK_REF_CREATE_ONLY" in bypass.stderr, bypass.stderr  # ...not the server's
    assert git(remote, "rev-parse", delivery_ref) == git(repo, "rev-parse", delivery_ref)
    deleted = run_git(repo, "push", "--no-verify", "origin", f":{delivery_ref}")
    assert deleted.returncode != 0 and "HOOK_REF_CREATE_ONLY" in deleted.stderr
    assert status(repo, run_id)["status"] == "complete"
    assert json.loads(git(repo, "notes", "--ref=agentops/receipts", "show", candidate))["payloadType"]

    (repo / "src" / "after.txt").write_text("after\n")  # a plain commit on top of the receipted tip
    git(repo, "add", "src/after.txt")
    git(repo, "commit", "-qm", "a plain commit after the integration")
    plain = run_git(repo, "push", "--no-verify", "origin", "main")
    assert plain.returncode != 0 and "RECEIPT_MISSING" in plain.stderr, plain.stderr  # the range fails closed
    assert git(remote, "rev-parse", "main") == candidate


@pytest.mark.slow
def test_a_server_whose_policy_allows_plain_commits_takes_one_on_top_of_an_integration(tmp_path: Path) -> None:
    repo = project(tmp_path, extra_policy='[receipts]\nplain_commits = "allow"\n')
    remote = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(remote))
    git(repo, "remote", "add", "origin", str(remote))
    trust(repo)
    assert cli(remote, "agentops-init", "--server", "--yes").returncode == 0
    simple = child("a", "Part A", [[write_step("src/a.txt", "a\n"), '{ commit = "Add a" }', HANDOFF]])
    run_id = start(repo, recipe(tmp_path, simple, finalize=True))
    try:
        wait_for(repo, run_id, lambda d: d["status"] == "complete")
    finally:
        stop(repo, run_id)
    notes = ("refs/notes/agentops/receipts", "refs/notes/agentops/deliveries")
    assert run_git(repo, "push", "origin", "main", *notes).returncode == 0
    (repo / "src" / "after.txt").write_text("after\n")
    git(repo, "add", "src/after.txt")
    git(repo, "commit", "-qm", "a plain commit after the integration")
    pushed = run_git(repo, "push", "origin", "main")
    assert pushed.returncode == 0, pushed.stderr
    assert git(remote, "rev-parse", "main") == git(repo, "rev-parse", "main")
