"""The stand-in agent CLIs (``tests/standins/bin``) on their own: argument shapes, refusals, output, sessions.

Why: whole-run tests trust these stand-ins to fail where the real ``claude -p``, ``codex exec`` and ``opencode
run`` fail -- a prompt swallowed by a variadic flag, Bash nobody allowed, a sandbox that cannot write a linked
worktree's git dir, an ``ask`` rejected in run mode -- and to do only what their prompt tells them. The
``git agentops-request`` and ``git agentops-verify`` the fake model calls here are stubs on PATH that record their
arguments, so no supervisor is involved.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from git_agentops.hosts.launch import fill, fill_env_value
from git_agentops.hosts.output import parse
from git_agentops.model.hosts import claude_allowed_tools, default_argv, default_env, default_resume_argv
from git_agentops.schema import documents

from .conftest import git, make_repo
from .standins import fakemodel

BIN = Path(__file__).parent / "standins" / "bin"
NO_INPUT = "Error: Input must be provided either through stdin or as a prompt argument when using --print"
BASH_DENIED = "Claude requested permissions to use Bash, but you haven't granted it yet."
WRITE_DENIED = "Claude requested permissions to use Write, but you haven't granted it yet."
ALL_STEPS = (
    '1. Commit your work: `git add -A && git commit -m "MESSAGE"`.\n'
    "2. Check it: `git agentops-verify`.\n"
    "3. Hand off: `git agentops-request handoff`.\n"
)
CLAUDE_TOOLS = f"--allowedTools={claude_allowed_tools([])}"

REQUEST_STUB = """#!/bin/sh
{ printf 'request'; for a in "$@"; do printf ' <%s>' "$a"; done; printf '\\n'; } >> "$STUB_LOG"
n=$(grep -c . "$STUB_LOG")
case "$1" in
  plan) echo "RUN_PLANNED: ok"; echo "  taskId: task-root" ;;
  worker) echo "RUN_WORKER_PLANNED: ok"; echo "  taskId: task-$n" ;;
  *) echo "RUN_WORKER_DELIVERED: ok" ;;
esac
"""
VERIFY_STUB = """#!/bin/sh
echo verify >> "$STUB_LOG"
echo "VERIFY_PASSED: ok"
"""


@pytest.fixture(autouse=True)
def stubs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-ins first on PATH, then the stub toolkit commands; returns the stub log."""
    stub_dir = tmp_path / "stubs"
    stub_dir.mkdir()
    for name, text in (("git-agentops-request", REQUEST_STUB), ("git-agentops-verify", VERIFY_STUB)):
        (stub_dir / name).write_text(text)
        (stub_dir / name).chmod(0o755)
    log = tmp_path / "stub.log"
    log.touch()
    monkeypatch.setenv("STUB_LOG", str(log))
    monkeypatch.setenv("PATH", os.pathsep.join([str(BIN), str(stub_dir), os.environ["PATH"]]))
    monkeypatch.delenv("OPENCODE_CONFIG_CONTENT", raising=False)
    monkeypatch.delenv("IS_SANDBOX", raising=False)
    return log


def calls(log: Path) -> list[list[str]]:
    """What the stubs were called with, in order: ``["request", action, args...]`` or ``["verify"]``."""
    return [[line.split(" ", 1)[0], *re.findall(r"<(.*?)>", line)] for line in log.read_text().splitlines()]


def run(
    argv: Sequence[str], cwd: Path, *, env: Mapping[str, str] | None = None, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a stand-in like the supervisor does (stdin closed unless ``input`` is given)."""
    return subprocess.run(
        list(argv),
        cwd=cwd,
        env={**os.environ, **(env or {})},
        input=input,
        stdin=subprocess.DEVNULL if input is None else None,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def events_of(stdout: str) -> list[dict[str, Any]]:
    """Every stdout line as a JSON object (each must be one)."""
    return [json.loads(line) for line in stdout.splitlines()]


def child_prompt(path: str = "hello.txt", content: str = "hi", *, steps: str = ALL_STEPS) -> str:
    """A child worker's prompt, shaped like git-agentops's, with only the ``steps`` templates shown."""
    return (
        "# You are worker `w-1` (generation 1) of git-agentops run `r-1`\n\nRun goal: test\n\n"
        f'## Your task: Write {path} (task-1)\n\nCreate {path} containing "{content}"\n\n'
        f"Acceptance criteria:\n- c1: {path} holds it\n\n{steps}"
    )


def linked_worktree(repo: Path, name: str) -> Path:
    """A linked worktree of ``repo`` on its own branch (its index and objects live in ``repo/.git``)."""
    path = repo.parent / name
    git(repo, "worktree", "add", "-q", "-b", name, str(path))
    return path


def commits(where: Path) -> list[str]:
    """Subjects of HEAD's history, newest first."""
    return git(where, "log", "--format=%s").splitlines()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


# -- every CLI -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cli", "expected"), [("claude", "2.1.300 (Claude Code)"), ("codex", "codex-cli 0.150.0"), ("opencode", "1.19.0")]
)
def test_version(cli: str, expected: str, tmp_path: Path) -> None:
    done = run([cli, "--version"], tmp_path)
    assert (done.returncode, done.stdout.strip()) == (0, expected)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["claude", "-p", "hi", "--resume", "6f2b0c1e-0000-4000-8000-000000000000"],
            "No conversation found with session ID: 6f2b0c1e-0000-4000-8000-000000000000",
        ),
        (["codex", "exec", "resume", "6f2b0c1e-0000-4000-8000-000000000000", "hi"], "no rollout found"),
        (["opencode", "run", "hi", "--session", "ses_000000000000000000000000"], "Error: Session not found"),
    ],
)
def test_resuming_an_unknown_session_fails(argv: list[str], message: str, repo: Path) -> None:
    done = run(argv, repo)
    assert done.returncode == 1 and message in done.stderr and done.stdout == ""


@pytest.mark.parametrize(
    ("fresh", "resume"),
    [
        (
            ["claude", "-p", "hello", "--output-format", "json"],
            ["claude", "-p", "again", "--output-format", "json", "--resume", "{id}"],
        ),
        (["codex", "exec", "--json", "hello"], ["codex", "exec", "--json", "resume", "{id}", "again"]),
        (
            ["opencode", "run", "hello", "--format", "json"],
            ["opencode", "run", "again", "--format", "json", "-s", "{id}"],
        ),
    ],
)
def test_resuming_a_known_session_continues_it(fresh: list[str], resume: list[str], repo: Path) -> None:
    cli = fresh[0]
    first = run(fresh, repo)
    session = parse(cli, first.stdout).session
    assert first.returncode == 0 and session
    second = run([a.replace("{id}", session) for a in resume], repo)
    assert second.returncode == 0, second.stderr
    assert parse(cli, second.stdout).session == session
    stored = json.loads((fakemodel.session_root(cli, Path(os.environ["HOME"])) / f"{session}.json").read_text())
    assert (stored["prompt"], stored["turns"], stored["prompts"]) == ("hello", 2, ["hello", "again"])


# -- claude --------------------------------------------------------------------------------------------------------


def test_claude_refuses_a_missing_prompt(tmp_path: Path) -> None:
    done = run(["claude", "-p", "--output-format", "json"], tmp_path)
    assert done.returncode == 1 and NO_INPUT in done.stderr and done.stdout == ""
    piped = run(["claude", "-p"], tmp_path, input="")
    assert piped.returncode == 1 and NO_INPUT in piped.stderr
    assert run(["claude", "-p"], tmp_path, input="hello from stdin").returncode == 0


def test_claude_variadic_allowed_tools_swallows_a_prompt_after_it(tmp_path: Path) -> None:
    swallowed = run(["claude", "-p", "--allowedTools", "Read", "Bash(git status *)", "say hi"], tmp_path)
    assert swallowed.returncode == 1 and NO_INPUT in swallowed.stderr
    one_value = run(["claude", "-p", "--allowedTools=Read,Bash(git status *)", "say hi"], tmp_path)
    assert one_value.returncode == 0, one_value.stderr
    before = run(["claude", "-p", "say hi", "--allowedTools", "Read", "Write"], tmp_path)
    assert before.returncode == 0, before.stderr


def test_claude_refuses_unknown_options_and_values(tmp_path: Path) -> None:
    assert "unknown option '--bogus'" in run(["claude", "-p", "hi", "--bogus"], tmp_path).stderr
    bad = run(["claude", "-p", "hi", "--permission-mode", "yolo"], tmp_path)
    assert bad.returncode == 1 and "Allowed choices are default, acceptEdits" in bad.stderr
    assert run(["claude", "hi"], tmp_path).returncode == 1  # no interactive session without a terminal


@pytest.mark.skipif(
    os.geteuid() != 0, reason="Claude Code refuses this flag only to root; these tests run unprivileged"
)
def test_claude_refuses_skipping_permissions_as_root(tmp_path: Path) -> None:
    refusal = "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons"
    done = run(["claude", "-p", "hi", "--dangerously-skip-permissions"], tmp_path)
    assert done.returncode == 1 and refusal in done.stderr
    assert refusal in run(["claude", "-p", "hi", "--permission-mode", "bypassPermissions"], tmp_path).stderr
    assert (
        run(["claude", "-p", "hi", "--dangerously-skip-permissions"], tmp_path, env={"IS_SANDBOX": "1"}).returncode == 0
    )


def test_claude_denies_bash_nobody_allowed(repo: Path, stubs: Path) -> None:
    argv = ["claude", "-p", child_prompt(), "--output-format", "stream-json", "--verbose", "--permission-mode"]
    done = run([*argv, "acceptEdits"], repo)
    assert done.returncode == 0, done.stderr
    assert (repo / "hello.txt").read_text() == "hi\n"  # acceptEdits: a write in the cwd is allowed
    assert BASH_DENIED in done.stderr.splitlines()
    events = events_of(done.stdout)
    results = [b for e in events if e["type"] == "user" for b in e["message"]["content"]]
    assert results[-1] == {
        "type": "tool_result",
        "tool_use_id": results[-1]["tool_use_id"],
        "content": BASH_DENIED,
        "is_error": True,
    }
    result = events[-1]
    assert result["type"] == "result" and "denied" in str(result["result"])
    assert [d["tool_name"] for d in result["permission_denials"]] == ["Bash"]
    assert commits(repo) == ["initial"] and calls(stubs) == []  # it stopped: no commit, no handoff


def test_claude_write_needs_accept_edits_or_a_rule(repo: Path) -> None:
    denied = run(["claude", "-p", child_prompt()], repo)
    assert denied.returncode == 0 and WRITE_DENIED in denied.stderr and not (repo / "hello.txt").exists()
    assert "denied" in denied.stdout
    ruled = run(["claude", "-p", child_prompt(steps=""), "--allowedTools=Write"], repo)
    assert ruled.returncode == 0 and (repo / "hello.txt").exists()


def test_claude_rules_allow_each_part_of_a_compound_command(repo: Path, stubs: Path) -> None:
    only_add = run(
        ["claude", "-p", child_prompt(), "--permission-mode", "acceptEdits", "--allowedTools=Bash(git add *)"], repo
    )
    assert BASH_DENIED in only_add.stderr and commits(repo) == ["initial"]
    legacy = "--allowedTools=Bash(git add:*),Bash(git commit:*),Bash(git agentops-verify),Bash(git agentops-request *)"
    done = run(["claude", "-p", child_prompt(), "--permission-mode", "acceptEdits", legacy], repo)
    assert done.returncode == 0 and commits(repo) == ["Write hello.txt", "initial"]
    assert calls(stubs) == [["verify"], ["request", "handoff"]]


def test_claude_stream_json_needs_verbose(tmp_path: Path) -> None:
    done = run(["claude", "-p", "hi", "--output-format", "stream-json"], tmp_path)
    assert done.returncode == 1
    assert "Error: When using --print, --output-format=stream-json requires --verbose" in done.stderr


def test_claude_stream_json_events(repo: Path) -> None:
    prompt = child_prompt()
    done = run(
        [
            "claude",
            "-p",
            prompt,
            "--output-format",
            "stream-json",
            "--verbose",
            "--permission-mode",
            "acceptEdits",
            CLAUDE_TOOLS,
        ],
        repo,
    )
    assert done.returncode == 0, done.stderr
    events = events_of(done.stdout)
    first, last = events[0], events[-1]
    assert (first["type"], first["subtype"], first["permissionMode"]) == ("system", "init", "acceptEdits")
    assert all(e["session_id"] == first["session_id"] for e in events)
    uses = [b for e in events if e["type"] == "assistant" for b in e["message"]["content"] if b["type"] == "tool_use"]
    assert [u["name"] for u in uses] == ["Write", "Bash", "Bash", "Bash"]
    assert uses[1]["input"]["command"] == "git add -A && git commit -m 'Write hello.txt'"
    assert last["type"] == "result" and last["subtype"] == "success" and last["is_error"] is False
    usage = {
        "input_tokens": len(prompt) // 4 + 400,
        "output_tokens": 200,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    assert last["usage"] == usage and last["total_cost_usd"] == pytest.approx(
        (usage["input_tokens"] * 3 + 200 * 15) / 1e6
    )
    report = parse("claude", done.stdout)
    assert report is not None and report.session == first["session_id"] and report.output_tokens == 200
    killed = parse("claude", "\n".join(done.stdout.splitlines()[:-2]))  # stopped before its result: summed messages
    assert killed is not None and (killed.input_tokens, killed.output_tokens) == (usage["input_tokens"], 200)


def test_claude_json_and_text_output(repo: Path) -> None:
    as_json = run(["claude", "-p", "hello", "--output-format", "json"], repo)
    (result,) = events_of(as_json.stdout)
    assert result["type"] == "result" and result["num_turns"] == 1 and result["usage"]["input_tokens"] == 1
    as_text = run(["claude", "-p", "hello"], repo)
    assert as_text.stdout.strip() == result["result"]


# -- codex ---------------------------------------------------------------------------------------------------------


def test_codex_read_only_by_default_rejects_writes(repo: Path, stubs: Path) -> None:
    done = run(["codex", "exec", child_prompt()], repo)
    assert done.returncode == 0, done.stderr
    assert not (repo / "hello.txt").exists() and "writing is blocked by read-only sandbox" in done.stderr
    assert "Read-only file system" in done.stderr and commits(repo) == ["initial"]
    assert done.stdout.strip().startswith("Done:")  # the final message, on stdout
    assert calls(stubs) == []  # verify and the request could not write either: they failed, not ran


def test_codex_linked_worktree_needs_add_dir_for_the_common_git_dir(repo: Path, stubs: Path) -> None:
    codex_home = Path(os.environ["HOME"]) / ".codex"  # this test's repos live under /tmp, which codex may write
    codex_home.mkdir()
    (codex_home / "config.toml").write_text("[sandbox_workspace_write]\nexclude_slash_tmp = true\n")
    common = Path(os.path.realpath(repo / ".git"))
    without = linked_worktree(repo, "without")
    done = run(["codex", "exec", "--sandbox", "workspace-write", "--json", child_prompt()], without)
    assert done.returncode == 0, done.stderr
    items = [e["item"] for e in events_of(done.stdout) if e["type"] == "item.completed"]
    commit = next(i for i in items if i["type"] == "command_execution" and "git commit" in i["command"])
    assert commit["exit_code"] == 128
    lock = f"fatal: Unable to create '{common}/worktrees/without/index.lock': Read-only file system"
    assert lock in commit["aggregated_output"]
    assert commits(without) == ["initial"] and git(without, "status", "--porcelain") == "?? hello.txt"
    assert calls(stubs)[-1] == ["request", "handoff"]  # it did not notice, and handed off uncommitted work
    added = linked_worktree(repo, "added")
    done = run(["codex", "exec", "--sandbox", "workspace-write", "--add-dir", str(common), child_prompt()], added)
    assert done.returncode == 0 and commits(added) == ["Write hello.txt", "initial"]


def test_codex_writes_under_tmp_unless_excluded(repo: Path) -> None:
    worktree = linked_worktree(repo, "tmp")
    done = run(["codex", "exec", "-s", "workspace-write", child_prompt()], worktree)
    assert done.returncode == 0 and commits(worktree)[0] == "Write hello.txt"  # /tmp is a writable root


def test_codex_full_auto_is_deprecated_workspace_write(repo: Path) -> None:
    done = run(["codex", "exec", "--full-auto", child_prompt(steps="")], repo)
    assert done.returncode == 0
    assert "warning: --full-auto is deprecated; use --sandbox workspace-write" in done.stderr
    assert (repo / "hello.txt").read_text() == "hi\n"


def test_codex_protects_a_top_level_git_dir(repo: Path) -> None:
    done = run(
        [
            "codex",
            "exec",
            "-c",
            "sandbox_workspace_write.exclude_slash_tmp=true",
            "-s",
            "workspace-write",
            child_prompt(),
        ],
        repo,
    )
    assert done.returncode == 0 and (repo / "hello.txt").exists() and commits(repo) == ["initial"]
    assert "index.lock': Read-only file system" in done.stderr


def test_codex_json_events(repo: Path) -> None:
    prompt = child_prompt()
    done = run(["codex", "exec", "--sandbox", "danger-full-access", "--json", "-o", "last.txt", prompt], repo)
    assert done.returncode == 0, done.stderr
    events = events_of(done.stdout)
    assert [e["type"] for e in events[:2]] == ["thread.started", "turn.started"]
    assert events[-1] == {
        "type": "turn.completed",
        "usage": {"input_tokens": len(prompt) // 4 + 400, "cached_input_tokens": 0, "output_tokens": 200},
    }
    items = [e["item"] for e in events if e["type"] == "item.completed"]
    assert [i["type"] for i in items] == ["file_change", *["command_execution"] * 3, "agent_message"]
    assert items[0]["changes"] == [{"path": str(repo / "hello.txt"), "kind": "add"}]
    started = [e["item"]["id"] for e in events if e["type"] == "item.started"]
    assert started == [i["id"] for i in items[1:4]]
    report = parse("codex", done.stdout)
    assert report is not None and report.session == events[0]["thread_id"] and report.result == items[-1]["text"]
    assert (repo / "last.txt").read_text() == report.result


def test_codex_refusals(tmp_path: Path, repo: Path) -> None:
    outside = run(["codex", "exec", "hi"], tmp_path)
    assert outside.returncode == 1
    assert "Not inside a trusted directory and --skip-git-repo-check was not specified." in outside.stderr
    assert run(["codex", "exec", "--skip-git-repo-check", "hi"], tmp_path).returncode == 0
    assert run(["codex", "exec"], repo).returncode == 1  # no prompt
    assert "No prompt provided" in run(["codex", "exec", "--json"], repo).stderr
    unknown = run(["codex", "exec", "--bogus", "hi"], repo)
    assert unknown.returncode == 2 and "unexpected argument '--bogus' found" in unknown.stderr
    assert run(["codex", "exec", "--sandbox", "yolo", "hi"], repo).returncode == 2
    assert run(["codex", "hi"], repo).returncode == 1  # the interactive TUI needs a terminal
    assert run(["codex", "exec", "one", "two"], repo).returncode == 2


def test_codex_resumed_session_keeps_its_sandbox(repo: Path) -> None:
    first = run(["codex", "exec", "--json", "-s", "workspace-write", "hello"], repo)
    session = parse("codex", first.stdout).session
    assert session
    resumed = run(["codex", "exec", "resume", session, child_prompt(steps="")], repo)
    assert resumed.returncode == 0 and (repo / "hello.txt").exists() and "sandbox: workspace-write" in resumed.stderr
    (repo / "hello.txt").unlink()
    flagged = run(["codex", "exec", "-s", "read-only", "resume", session, child_prompt(steps="")], repo)
    assert flagged.returncode == 0 and not (repo / "hello.txt").exists()
    ephemeral = run(["codex", "exec", "--json", "--ephemeral", "hello"], repo)
    gone = parse("codex", ephemeral.stdout).session
    assert run(["codex", "exec", "resume", str(gone), "again"], repo).returncode == 1


# -- opencode ------------------------------------------------------------------------------------------------------


def test_opencode_rejects_an_external_directory_ask_and_allows_a_rule(repo: Path, stubs: Path) -> None:
    common = os.path.realpath(repo / ".git")
    asked = linked_worktree(repo, "asked")
    done = run(["opencode", "run", child_prompt(), "--format", "json"], asked)
    assert done.returncode == 0, done.stderr
    assert f"permission requested: external_directory ({common}/worktrees/asked); auto-rejecting" in done.stderr
    tools = [e["part"] for e in events_of(done.stdout) if e["type"] == "tool_use"]
    assert [(t["tool"], t["state"]["status"]) for t in tools] == [("write", "completed"), ("bash", "error")]
    assert commits(asked) == ["initial"] and calls(stubs) == []  # rejected: the turn ends there
    allowed = linked_worktree(repo, "allowed")
    config = {"permission": {"external_directory": {"*": "deny", common: "allow", f"{common}/**": "allow"}}}
    done = run(
        ["opencode", "run", child_prompt(), "--format", "json"],
        allowed,
        env={"OPENCODE_CONFIG_CONTENT": json.dumps(config)},
    )
    assert done.returncode == 0 and "permission requested" not in done.stderr
    assert commits(allowed) == ["Write hello.txt", "initial"] and calls(stubs)[-1] == ["request", "handoff"]
    auto = linked_worktree(repo, "auto")
    assert run(["opencode", "run", "--auto", child_prompt()], auto).returncode == 0
    assert commits(auto)[0] == "Write hello.txt"


def test_opencode_last_matching_rule_wins(repo: Path, stubs: Path) -> None:
    rules = fakemodel.permission_rules({"bash": {"*": "deny", "git status": "allow", "git status *": "allow"}})
    assert fakemodel.decide(rules, "bash", "git status --short") == "allow"
    assert fakemodel.decide(rules, "bash", "git status") == "allow"
    assert fakemodel.decide(rules, "bash", "git push") == "deny"
    assert fakemodel.decide(fakemodel.permission_rules("deny"), "edit", "a.txt") == "deny"
    assert fakemodel.decide(fakemodel.permission_rules(None), "external_directory", "/x") == "ask"
    deny_last = {"permission": {"bash": {"*": "allow", "git agentops-request *": "deny"}}}
    done = run(["opencode", "run", child_prompt()], repo, env={"OPENCODE_CONFIG_CONTENT": json.dumps(deny_last)})
    assert done.returncode == 0 and "prevents you from using this specific tool call" in done.stderr
    assert calls(stubs) == [["verify"]] and commits(repo)[0] == "Write hello.txt"
    allow_last = {"permission": {"bash": {"git agentops-request *": "deny", "*": "allow"}}}
    done = run(["opencode", "run", child_prompt()], repo, env={"OPENCODE_CONFIG_CONTENT": json.dumps(allow_last)})
    assert done.returncode == 0 and calls(stubs)[-1] == ["request", "handoff"]


def test_opencode_config_file_is_merged_under_the_environment(repo: Path) -> None:
    (repo / "opencode.json").write_text(json.dumps({"permission": {"edit": "deny", "bash": "allow"}}))
    denied = run(["opencode", "run", child_prompt(steps="")], repo)
    assert denied.returncode == 0 and not (repo / "hello.txt").exists()
    override = json.dumps({"permission": {"edit": "allow"}})
    allowed = run(["opencode", "run", child_prompt(steps="")], repo, env={"OPENCODE_CONFIG_CONTENT": override})
    assert allowed.returncode == 0 and (repo / "hello.txt").exists()


def test_opencode_json_events(repo: Path) -> None:
    prompt = child_prompt()
    done = run(["opencode", "run", "--format", "json", prompt], repo)
    assert done.returncode == 0, done.stderr
    events = events_of(done.stdout)
    session = events[0]["sessionID"]
    assert str(session).startswith("ses_") and all(e["sessionID"] == session for e in events)
    assert all(isinstance(e["timestamp"], int) for e in events)
    assert events[0]["type"] == "step_start" and events[-1]["type"] == "step_finish"
    assert events[-1]["part"]["reason"] == "stop"
    tools = [e["part"] for e in events if e["type"] == "tool_use"]
    assert [t["tool"] for t in tools] == ["write", "bash", "bash", "bash"]
    assert all(t["state"]["status"] == "completed" for t in tools)
    report = parse("opencode", done.stdout)
    assert report is not None and report.session == session and report.result and report.result.startswith("Done:")
    assert (report.input_tokens, report.output_tokens) == (len(prompt) // 4 + 400, 200)
    assert report.cost_usd == pytest.approx(((len(prompt) // 4 + 400) * 3 + 200 * 15) / 1e6)


def test_opencode_refusals(repo: Path) -> None:
    empty = run(["opencode", "run"], repo)
    assert empty.returncode == 1 and "Error: You must provide a message or a command" in empty.stderr
    assert "Unknown argument: bogus" in run(["opencode", "run", "--bogus", "hi"], repo).stderr
    assert run(["opencode", "run", "--format", "xml", "hi"], repo).returncode == 1
    assert run(["opencode"], repo).returncode == 1  # no terminal UI
    words = run(["opencode", "run", "--format", "json", "say", "hello"], repo)
    assert parse("opencode", words.stdout).session
    stored = fakemodel.SessionStore("opencode").load(str(parse("opencode", words.stdout).session))
    assert stored is not None and stored.prompt == "say hello"


# -- the fake model ------------------------------------------------------------------------------------------------


def review_prompt(name: str, *, retry: bool = False) -> str:
    """A reviewer prompt with the sentences the fake model reads."""
    text = (
        f"# You are reviewer `{name}` of a git-agentops integration\n\nGoal of the run: test\n\n"
        f"Read the review input, `.agentops/review/input-{name}.json` (JSON: goal, tasks ...).\n\n"
        f"Write your report, as one JSON document, to `.agentops/review/report-{name}.json`, then end your turn.\n"
    )
    if retry:
        text += "\n## Your previous report was not accepted\n\nreport-x.json: missing 'verdict'\n"
    return text


@pytest.mark.parametrize("retry", [False, True])
def test_reviewer_writes_a_report_matching_the_schema(repo: Path, retry: bool) -> None:
    review = repo / ".agentops" / "review"
    review.mkdir(parents=True)
    tasks = [{"id": "task-a", "criteria": [{"id": "c1"}, {"id": "c2"}]}, {"id": "task-b", "criteria": [{"id": "c1"}]}]
    doc = {"goal": "g", "tasks": tasks, "base": "b", "candidate": "c", "diff": "", "evidence": []}
    (review / "input-rev.json").write_text(json.dumps(doc))
    done = run(["claude", "-p", review_prompt("rev", retry=retry), "--permission-mode", "acceptEdits"], repo)
    assert done.returncode == 0, done.stderr
    report = documents.load((review / "report-rev.json").read_bytes(), schema="review-report")
    assert report["reviewer"] == "rev" and report["verdict"] == "approve" and report["findings"] == []
    assert [(c["taskId"], c["id"], c["result"]) for c in report["criteria"]] == [
        ("task-a", "c1", "pass"),
        ("task-a", "c2", "pass"),
        ("task-b", "c1", "pass"),
    ]


def test_child_writes_commits_verifies_and_hands_off(repo: Path, stubs: Path) -> None:
    done = run(
        ["claude", "-p", child_prompt("sub/a.txt", "A b"), "--permission-mode", "acceptEdits", CLAUDE_TOOLS], repo
    )
    assert done.returncode == 0, done.stderr
    assert (repo / "sub" / "a.txt").read_text() == "A b\n"
    assert commits(repo) == ["Write sub/a.txt", "initial"] and git(repo, "status", "--porcelain") == ""
    assert calls(stubs) == [["verify"], ["request", "handoff"]]


def test_child_only_does_what_its_prompt_shows(repo: Path, stubs: Path) -> None:
    steps = '1. Commit your work: `git add -A && git commit -m "MESSAGE"`.\n'
    done = run(["claude", "-p", child_prompt(steps=steps), "--permission-mode", "acceptEdits", CLAUDE_TOOLS], repo)
    assert done.returncode == 0 and commits(repo)[0] == "Write hello.txt"
    assert calls(stubs) == []  # no handoff (and no verify) without their commands in the prompt
    bare = run(
        [
            "claude",
            "-p",
            child_prompt(steps="Hand off: git agentops-request handoff\n"),
            CLAUDE_TOOLS,
            "--permission-mode",
            "acceptEdits",
        ],
        repo,
    )
    assert bare.returncode == 0 and calls(stubs) == []  # a command not in backticks is not a template


def test_resumed_child_does_its_task_again(repo: Path, stubs: Path) -> None:
    argv = ["claude", "-p", child_prompt(), "--output-format", "json", "--permission-mode", "acceptEdits", CLAUDE_TOOLS]
    first = run(argv, repo)
    session = parse("claude", first.stdout).session
    (repo / "hello.txt").write_text("broken\n")
    note = (
        "The git-agentops supervisor resumed your session as generation 2 of worker `w-1`. Here is what changed.\n\n"
        "## Why you were started again\n\nverification failed: hello.txt is wrong\n\n"
        "Do your part, then end your turn.\n"
    )
    again = run(["claude", "-p", note, "--resume", str(session), *argv[3:]], repo)
    assert again.returncode == 0, again.stderr
    assert (repo / "hello.txt").read_text() == "hi\n" and commits(repo)[0] == "Write hello.txt"
    assert [c for c in calls(stubs) if c[0] == "request"] == [["request", "handoff"]] * 2


COORDINATOR = (
    "# You are worker `coordinator` (generation 1) of git-agentops run `r-1`\n\n"
    'Run goal: Write files: a.txt says "A"; b.txt says "B b" after a.txt\n\n'
    "You are the **coordinator**: you plan the work, child workers implement it.\n\n"
    '1. `git agentops-request plan --title "TITLE" --intent "WHAT AND WHY" --criterion "C1" --criterion "C2"`\n'
    '2. `git agentops-request worker --title "TITLE" --intent "WHAT TO DO" --criterion "C1" [--depends-on TASK_ID]`\n'
    "3. Then end your turn.\n"
    "4. When every child is delivered: `git agentops-request finalize`.\n"
)


def coordinator_run(repo: Path, prompt: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """The coordinator prompt on claude, allowed to send requests."""
    argv = ["claude", "-p", prompt, "--output-format", "json", "--allowedTools=Read,Bash(git agentops-request *)"]
    return run([*argv, *extra], repo)


def instructions(repo: Path, root: str | None, tasks: list[dict[str, str]]) -> None:
    """The coordinator's ``instructions.json``, with only the fields the fake model reads."""
    mailbox = repo / ".agentops" / "mailbox"
    mailbox.mkdir(parents=True, exist_ok=True)
    (mailbox / "instructions.json").write_text(json.dumps({"rootTaskId": root, "tasks": tasks, "goal": "ignored"}))


def test_coordinator_plans_then_finalizes_when_woken(repo: Path, stubs: Path) -> None:
    instructions(repo, None, [])
    first = coordinator_run(repo, COORDINATOR)
    assert first.returncode == 0, first.stderr
    goal = 'Write files: a.txt says "A"; b.txt says "B b" after a.txt'
    assert calls(stubs) == [
        [
            "request",
            "plan",
            "--title",
            goal[:60],
            "--intent",
            goal,
            "--criterion",
            "every file exists",
            "--criterion",
            "every file holds its content",
        ],
        [
            "request",
            "worker",
            "--title",
            "Write a.txt",
            "--intent",
            'Create a.txt containing "A"',
            "--criterion",
            'a.txt holds "A"',
        ],
        [
            "request",
            "worker",
            "--title",
            "Write b.txt",
            "--intent",
            'Create b.txt containing "B b"',
            "--criterion",
            'b.txt holds "B b"',
            "--depends-on",
            "task-2",
        ],
    ]
    instructions(
        repo, "task-root", [{"id": "task-2", "title": "Write a.txt"}, {"id": "task-3", "title": "Write b.txt"}]
    )
    blocked = (
        "The git-agentops supervisor resumed your session as generation 2 of worker `coordinator`.\n\n"
        "## Why you were started now\n\n- Child task 'Write a.txt' (task-2) is blocked: it failed\n"
    )
    session = str(parse("claude", first.stdout).session)
    assert coordinator_run(repo, blocked, "--resume", session).returncode == 0
    assert len(calls(stubs)) == 3  # a blocked child: it just ends its turn
    delivered = (
        "The git-agentops supervisor resumed your session as generation 3 of worker `coordinator`.\n\n"
        "## Why you were started now\n\n- Every child task (2) is delivered: check them below, then finalize "
        "('git agentops-request finalize') or plan more work.\n"
    )
    assert coordinator_run(repo, delivered, "--resume", session).returncode == 0
    assert calls(stubs)[3:] == [["request", "finalize"]]


def test_coordinator_without_a_template_cannot_act(repo: Path, stubs: Path) -> None:
    instructions(repo, None, [])
    no_worker = "\n".join(line for line in COORDINATOR.splitlines() if "request worker" not in line)
    done = coordinator_run(repo, no_worker)
    assert done.returncode == 0 and [c[1] for c in calls(stubs)] == ["plan"]
    assert "shows no `git agentops-request worker` command" in done.stderr


# -- the hosts' default argv ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["claude", "codex", "opencode"])
def test_default_host_argv_lets_a_child_deliver_from_a_linked_worktree(kind: str, repo: Path, stubs: Path) -> None:
    worktree = linked_worktree(repo, "child")
    values = {"prompt": child_prompt(), "git_common_dir": os.path.realpath(repo / ".git"), "worktree": str(worktree)}
    argv = [fill(arg, values) for arg in default_argv(kind, [])]
    env = {name: fill_env_value(value, values) for name, value in default_env(kind, []).items()}
    done = run(argv, worktree, env=env)
    assert done.returncode == 0, done.stderr
    assert commits(worktree) == ["Write hello.txt", "initial"] and git(worktree, "status", "--porcelain") == ""
    assert calls(stubs) == [["verify"], ["request", "handoff"]]
    report = parse(kind, done.stdout)
    assert report is not None and report.session and report.reported_usage
    note = "The git-agentops supervisor resumed your session as generation 2 of worker `w-1`.\n"
    values = {**values, "prompt": note, "session": report.session}
    again = run([fill(arg, values) for arg in default_resume_argv(kind, default_argv(kind, []))], worktree, env=env)
    assert again.returncode == 0, again.stderr
    assert parse(kind, again.stdout).session == report.session and calls(stubs)[-1] == ["request", "handoff"]
    assert len(calls(stubs)) == 4


def test_the_fake_model_reads_the_prompts_git_agentops_writes(repo: Path, stubs: Path) -> None:
    """The real prompt builders, not hand-written look-alikes: if they drift, the fake model stops understanding."""
    from git_agentops.integrate.reviews import review_prompt as real_review_prompt
    from git_agentops.protocol.instructions import prompt, resume_prompt

    goal = 'Write files: a.txt says "A"; b.txt says "B" after a.txt'
    base = {"runId": "r-1", "goal": goal, "diagnostic": None, "wake": None, "answers": [], "generation": 1}
    task = {
        "id": "task-2",
        "title": "Write a.txt",
        "intent": 'Create a.txt containing "A"',
        "criteria": [{"id": "c1", "description": 'a.txt holds "A"'}],
    }
    child = {**base, "workerId": "w-2", "role": "child", "task": task, "tasks": [], "rootTaskId": "task-root"}
    argv = [fill(a, {"prompt": prompt(child)}) for a in default_argv("claude", [])]
    assert run(argv, repo).returncode == 0
    assert commits(repo)[0] == "Write a.txt" and calls(stubs) == [["verify"], ["request", "handoff"]]

    coordinator = {
        **base,
        "workerId": "coordinator",
        "role": "coordinator",
        "task": None,
        "tasks": [],
        "rootTaskId": None,
    }
    instructions(repo, None, [])
    first = run([fill(a, {"prompt": prompt(coordinator)}) for a in default_argv("claude", [])], repo)
    assert [c[1] for c in calls(stubs)[2:]] == ["plan", "worker", "worker"]
    assert calls(stubs)[-1][-2:] == ["--depends-on", "task-4"]
    tasks = [{"id": "task-4", "title": "Write a.txt"}, {"id": "task-5", "title": "Write b.txt"}]
    instructions(repo, "task-root", tasks)
    table = [{**t, "status": "delivered", "dependencies": [], "blockedReason": None} for t in tasks]
    wake = (
        "- Every child task (2) is delivered: check them below, then finalize ('git agentops-request finalize') "
        "or plan more work."
    )
    woken = {**coordinator, "generation": 2, "wake": wake, "tasks": table, "rootTaskId": "task-root"}
    session = str(parse("claude", first.stdout).session)
    resume = [
        fill(a, {"prompt": resume_prompt(woken), "session": session})
        for a in default_resume_argv("claude", default_argv("claude", []))
    ]
    assert run(resume, repo).returncode == 0
    assert calls(stubs)[-1] == ["request", "finalize"]

    review = repo / ".agentops" / "review"
    review.mkdir(parents=True)
    doc = {
        "goal": goal,
        "tasks": [{**task, "id": "task-4"}],
        "base": "b" * 40,
        "candidate": "c" * 40,
        "diff": "",
        "evidence": [],
    }
    (review / "input-claude.json").write_text(json.dumps(doc))
    text = real_review_prompt(
        "claude",
        doc,
        input_path=".agentops/review/input-claude.json",
        report_path=".agentops/review/report-claude.json",
        retry=None,
    )
    assert run([fill(a, {"prompt": text}) for a in default_argv("claude", [])], repo).returncode == 0
    report = documents.load((review / "report-claude.json").read_bytes(), schema="review-report")
    assert report["criteria"] == [{"taskId": "task-4", "id": "c1", "result": "pass"}]
