"""The stand-in agent CLIs (``tests/standins/bin``) on their own: argument shapes, refusals, output, sessions.

Why: whole-run tests trust these stand-ins to fail where the real ``claude -p``, ``codex exec`` and ``opencode
run`` fail -- a prompt swallowed by a variadic flag, Bash nobody allowed, a sandbox that cannot write a linked
worktree's git dir, an ``ask`` rejected in run mode -- and to do only what their prompt tells them. The
``git agentops-request`` and ``git agentops-verify`` the fake model calls here are stubs on PATH that record their
arguments, so no supervisor is involved. What the real CLIs do wrong around a supervisor -- Codex's bubblewrap that
cannot nest in our sandbox, its login shell that loses ``PATH``, its hooks read only where it reads them, usage
that a stopped generation never reports -- is asserted here too, so a stand-in that forgets it fails.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from git_agentops.hosts.launch import fill, fill_env_value
from git_agentops.hosts.output import parse
from git_agentops.model.hosts import claude_allowed_tools, default_argv, default_env, default_resume_argv
from git_agentops.sandbox import landlock
from git_agentops.sandbox.spec import Mode, Rule, SandboxSpec, launcher_command, write_spec
from git_agentops.schema import documents

from ..conftest import git, make_repo
from ..standins import fakemodel

BIN = Path(__file__).parents[1] / "standins" / "bin"
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
if [ "$1" = handoff ] && [ -n "$STUB_HANDOFF_WAITS" ]; then exec sleep 120; fi  # waits for a supervisor
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
    for name in ("CODEX_HOME", "OPENAI_API_KEY", "STUB_HANDOFF_WAITS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CODEX_API_KEY", "standin-key")  # codex's default OpenAI provider has credentials
    return log


def bwrap_failure() -> str | None:
    """What the codex stand-in's bubblewrap probe says in this test environment (asked in a child process)."""
    probe = "import sys; sys.path.insert(0, sys.argv[1]); import fakemodel; print(fakemodel.bwrap_failure() or '')"
    done = subprocess.run(
        [sys.executable, "-c", probe, str(BIN.parent)], capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout.strip() or None


BWRAP = bwrap_failure()
needs_bwrap = pytest.mark.skipif(
    BWRAP is not None, reason=f"Codex's bubblewrap cannot start on this machine either: {BWRAP}"
)


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


def start(argv: Sequence[str], cwd: Path, *, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """Start a stand-in in its own process group (stdin closed), to be stopped mid-turn by :func:`stop`."""
    return subprocess.Popen(
        list(argv),
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def stop_in_handoff(proc: subprocess.Popen[str], log: Path) -> str:
    """Wait until the agent sits in ``git agentops-request handoff``, kill its whole group as a supervisor stops a
    generation, and return what it printed on stdout until then."""
    deadline = time.monotonic() + 60
    while not any(c[:2] == ["request", "handoff"] for c in calls(log)):
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "the agent never reached its handoff"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    return out


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
    ("cli", "expected"), [("claude", "2.1.300 (Claude Code)"), ("codex", "codex-cli 0.171.0"), ("opencode", "1.19.0")]
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
    assert all("total_cost_usd" not in json.dumps(e) for e in events[:-1])  # the cost is in the result alone
    assistant = [e["message"] for e in events if e["type"] == "assistant"]
    assert len(assistant) == 9  # four messages of a sentence and a tool call, then the final text
    by_id: dict[str, list[dict[str, Any]]] = {}
    for message in assistant:
        by_id.setdefault(message["id"], []).append(message["usage"])
    assert [len(u) for u in by_id.values()] == [2, 2, 2, 2, 1] and all(u[0] == u[-1] for u in by_id.values())
    assert sum(u[0]["input_tokens"] for u in by_id.values()) == usage["input_tokens"]
    assert all(u[0]["output_tokens"] == fakemodel.CLAUDE_STREAM_OUTPUT_TOKENS for u in by_id.values())
    killed = parse("claude", "\n".join(done.stdout.splitlines()[:-2]))  # stopped before its result: summed messages
    assert killed is not None and killed.cost_usd is None
    assert (killed.input_tokens, killed.output_tokens) == (usage["input_tokens"], 4)  # each message counted once


def test_claude_has_no_glob_grep_or_ls(repo: Path, stubs: Path) -> None:
    assert not {"Glob", "Grep", "LS"} & set(fakemodel.CLAUDE_TOOLS)
    argv = ["claude", "-p", child_prompt(), "--output-format", "stream-json", "--verbose", "--permission-mode"]
    done = run([*argv, "acceptEdits", "--allowedTools=Glob,Grep(*),LS,Bash(git add *)"], repo)
    assert done.returncode == 0, done.stderr
    init = events_of(done.stdout)[0]
    assert init["subtype"] == "init" and "Bash" in init["tools"] and not {"Glob", "Grep", "LS"} & set(init["tools"])
    assert "names 'Grep', which is no Claude Code tool" in done.stderr  # accepted in silence, matching nothing
    assert BASH_DENIED in done.stderr and commits(repo) == ["initial"]


def test_claude_stopped_in_its_handoff_reports_usage_but_no_cost(repo: Path, stubs: Path) -> None:
    prompt = child_prompt()
    argv = ["claude", "-p", prompt, "--output-format", "stream-json", "--verbose", "--permission-mode", "acceptEdits"]
    out = stop_in_handoff(start([*argv, CLAUDE_TOOLS], repo, env={"STUB_HANDOFF_WAITS": "1"}), stubs)
    events = events_of(out)
    assert events[-1]["type"] == "assistant" and events[-1]["message"]["content"][0]["name"] == "Bash"
    assert not any(e["type"] == "result" or "total_cost_usd" in json.dumps(e) for e in events)
    report = parse("claude", out)
    assert report is not None and report.cost_usd is None and report.partial
    assert (report.input_tokens, report.output_tokens) == (len(prompt) // 4 + 400, 4)


def test_claude_json_and_text_output(repo: Path) -> None:
    as_json = run(["claude", "-p", "hello", "--output-format", "json"], repo)
    (result,) = events_of(as_json.stdout)
    assert result["type"] == "result" and result["num_turns"] == 1 and result["usage"]["input_tokens"] == 1
    as_text = run(["claude", "-p", "hello"], repo)
    assert as_text.stdout.strip() == result["result"]


# -- codex ---------------------------------------------------------------------------------------------------------


@needs_bwrap
def test_codex_read_only_by_default_rejects_writes(repo: Path, stubs: Path) -> None:
    done = run(["codex", "exec", child_prompt()], repo)
    assert done.returncode == 0, done.stderr
    assert not (repo / "hello.txt").exists() and "writing is blocked by read-only sandbox" in done.stderr
    assert "Read-only file system" in done.stderr and commits(repo) == ["initial"]
    assert done.stdout.strip().startswith("Done:")  # the final message, on stdout
    assert calls(stubs) == []  # verify and the request could not write either: they failed, not ran


@needs_bwrap
def test_codex_linked_worktree_needs_add_dir_for_the_common_git_dir(repo: Path, stubs: Path) -> None:
    codex_home = Path(os.environ["HOME"]) / ".codex"  # this test's repos live under /tmp, which codex may write
    codex_home.mkdir()
    (codex_home / "config.toml").write_text("[sandbox_workspace_write]\nexclude_slash_tmp = true\n")
    common = Path(os.path.realpath(repo / ".git"))
    without = linked_worktree(repo, "without")
    no_login = ["-c", "allow_login_shell=false"]  # a login shell would not find the request stub
    done = run(["codex", "exec", "--sandbox", "workspace-write", *no_login, "--json", child_prompt()], without)
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


@needs_bwrap
def test_codex_writes_under_tmp_unless_excluded(repo: Path) -> None:
    worktree = linked_worktree(repo, "tmp")
    done = run(["codex", "exec", "-s", "workspace-write", child_prompt()], worktree)
    assert done.returncode == 0 and commits(worktree)[0] == "Write hello.txt"  # /tmp is a writable root


@needs_bwrap
def test_codex_full_auto_is_deprecated_workspace_write(repo: Path) -> None:
    done = run(["codex", "exec", "--full-auto", child_prompt(steps="")], repo)
    assert done.returncode == 0
    assert "warning: --full-auto is deprecated; use --sandbox workspace-write" in done.stderr
    assert (repo / "hello.txt").read_text() == "hi\n"


@needs_bwrap
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
    usage = {"input_tokens": len(prompt) // 4 + 400, "output_tokens": 200, "reasoning_output_tokens": 0}
    assert events[-1] == {
        "type": "turn.completed",
        "usage": {**usage, "cached_input_tokens": 0, "cache_write_input_tokens": 0},
    }
    assert not any('"usage":' in json.dumps(e) for e in events[:-1])  # in turn.completed alone
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


@needs_bwrap
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


def sandboxed(tmp_path: Path, argv: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a stand-in the way the supervisor runs an agent: under the launcher, confined by Landlock (its repository,
    HOME and /tmp writable; the system, the interpreter and the stand-ins readable; /proc read-only)."""
    rw: tuple[Any, ...] = ("read", "write", "execute")
    system = [p for p in ("/usr", "/bin", "/lib", "/lib64", "/etc", "/proc", "/sys") if os.path.isdir(p)]
    rules = (
        *(Rule(p, ("read", "execute")) for p in system),
        Rule(os.path.realpath(sys.base_prefix), ("read", "execute")),
        Rule(str(BIN.parent), ("read", "execute")),
        Rule("/dev", ("read", "write")),
        Rule("/tmp", rw),
        Rule(os.path.realpath(os.environ["HOME"]), rw),
    )
    python = os.path.realpath(sys.executable)  # the base interpreter: a venv's pyvenv.cfg may be out of reach
    spec = SandboxSpec((python, str(BIN / argv[0]), *argv[1:]), str(cwd), rules, mode=Mode.LANDLOCK)
    write_spec(tmp_path / "spec.json", spec)
    return subprocess.run(
        launcher_command(tmp_path / "spec.json"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.skipif(landlock.abi() < 1, reason="this kernel has no Landlock: the agentops sandbox cannot be built")
def test_codex_sandbox_cannot_nest_in_ours(tmp_path: Path, repo: Path, stubs: Path) -> None:
    """Inside Landlock, bwrap may create a user namespace but not write its uid map: every command and patch of
    --sandbox workspace-write fails with bwrap's message, and no event says so; danger-full-access works."""
    nested = sandboxed(tmp_path, ["codex", "exec", "-s", "workspace-write", "--json", child_prompt()], repo)
    assert nested.returncode == 0, nested.stderr
    assert "bwrap: setting up uid map: Permission denied" in nested.stderr
    items = [e["item"] for e in events_of(nested.stdout) if e["type"].startswith("item.")]
    assert [i["type"] for i in items] == ["agent_message"]  # the write and the three commands are not reported
    assert not (repo / "hello.txt").exists() and commits(repo) == ["initial"]
    direct = sandboxed(tmp_path, ["codex", "exec", "-s", "danger-full-access", "--json", child_prompt()], repo)
    assert direct.returncode == 0 and "bwrap" not in direct.stderr
    assert commits(repo) == ["Write hello.txt", "initial"]


def login_shell_keeps(path_dir: Path) -> bool:
    """Whether this machine's login profile keeps a directory on PATH (Debian's /etc/profile resets it)."""
    shell = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(BIN.parent)!r}); import fakemodel; "
         "print(fakemodel.user_shell())"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    done = subprocess.run([shell, "-lc", 'echo "$PATH"'], capture_output=True, text=True, check=False)
    return str(path_dir) in done.stdout.split(os.pathsep)


def test_codex_runs_commands_in_a_login_shell_that_loses_path(tmp_path: Path, repo: Path, stubs: Path) -> None:
    if login_shell_keeps(tmp_path / "stubs"):
        pytest.skip("this machine's login profile keeps PATH: a login shell finds the stubs")
    argv = ["codex", "exec", "-s", "danger-full-access", "--json"]
    login = run([*argv, child_prompt()], repo)
    assert login.returncode == 0, login.stderr
    commands = [e["item"] for e in events_of(login.stdout) if e["type"] == "item.completed" and "command" in e["item"]]
    assert all(re.fullmatch(r"/\S+ -lc '.*'", i["command"], re.S) for i in commands)
    assert "git: 'agentops-request' is not a git command" in commands[-1]["aggregated_output"]
    assert commits(repo)[0] == "Write hello.txt" and calls(stubs) == []  # git is found; the toolkit is not
    plain = run([*argv, "-c", "allow_login_shell=false", child_prompt(content="again")], repo)
    assert plain.returncode == 0 and calls(stubs) == [["verify"], ["request", "handoff"]]
    assert all(" -c '" in e["item"]["command"] for e in events_of(plain.stdout) if e["type"] == "item.started")


GUARD_HOOK = """#!/bin/sh
input=$(cat)
printf '%s\\n' "$input" >> "$HOOK_LOG"
case "$input" in *'"command": "git agentops-request'*) echo "handoffs are off" >&2; exit 2 ;; esac
"""


def hook_file(where: Path, tmp_path: Path, name: str) -> Path:
    """``where/hooks.json`` with one PreToolUse (Bash) hook logging its input to ``tmp_path/NAME.log`` and
    blocking ``git agentops-request``; returns the log."""
    script = tmp_path / f"{name}.sh"
    script.write_text(GUARD_HOOK)
    script.chmod(0o755)
    log = tmp_path / f"{name}.log"
    command = f"HOOK_LOG={log} {script}"
    where.mkdir(parents=True, exist_ok=True)
    group = {"matcher": "Bash", "hooks": [{"type": "command", "command": command, "timeout": 30}]}
    (where / "hooks.json").write_text(json.dumps({"hooks": {"PreToolUse": [group]}}))
    return log


def hook_inputs(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []


def test_codex_user_hooks_run_only_with_the_bypass_flag(tmp_path: Path, repo: Path, stubs: Path) -> None:
    codex_home = tmp_path / "codex-home"
    log = hook_file(codex_home, tmp_path, "user")
    env = {"CODEX_HOME": str(codex_home)}
    argv = ["codex", "exec", "-s", "danger-full-access", "-c", "allow_login_shell=false", "--json"]
    skipped = run([*argv, child_prompt()], repo, env=env)
    assert skipped.returncode == 0 and hook_inputs(log) == []  # not trusted: skipped without a word
    assert calls(stubs)[-1] == ["request", "handoff"]
    guarded = run([*argv, "--dangerously-bypass-hook-trust", child_prompt(content="two")], repo, env=env)
    assert guarded.returncode == 0, guarded.stderr
    seen = hook_inputs(log)
    assert [i["tool_input"]["command"] for i in seen] == [
        "git add -A && git commit -m 'Write hello.txt'",
        "git agentops-verify",
        "git agentops-request handoff",
    ]
    assert {(i["hook_event_name"], i["tool_name"], i["cwd"], i["permission_mode"]) for i in seen} == {
        ("PreToolUse", "Bash", str(repo), "bypassPermissions")
    }
    assert len(calls(stubs)) == 3 and calls(stubs)[-1] == ["verify"]  # the handoff was blocked, not run
    events = events_of(guarded.stdout)
    warnings = [e["item"]["message"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "error"]
    assert warnings and all("--dangerously-bypass-hook-trust` is enabled" in w for w in warnings)
    shown = [e["item"]["command"] for e in events if e["type"] == "item.started"]
    assert len(shown) == 2 and not any("agentops-request" in c for c in shown)  # a blocked command: no event
    assert "Command blocked by PreToolUse hook: handoffs are off. Command: git agentops-request handoff" in (
        guarded.stderr
    )
    assert events[-1]["type"] == "turn.completed"  # the model went on and ended its turn
    log.unlink()
    for off in (["-c", "features.hooks=false"], ["--disable", "hooks"]):
        run([*argv, "--dangerously-bypass-hook-trust", *off, child_prompt(content="three")], repo, env=env)
        assert hook_inputs(log) == [] and calls(stubs)[-1] == ["request", "handoff"]


def test_codex_reads_project_hooks_of_the_main_repository_once_trusted(tmp_path: Path, repo: Path, stubs: Path) -> None:
    worktree = linked_worktree(repo, "wt")
    main_log = hook_file(repo / ".codex", tmp_path, "main")
    worktree_log = hook_file(worktree / ".codex", tmp_path, "worktree")
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    env = {"CODEX_HOME": str(codex_home)}
    argv = ["codex", "exec", "-s", "danger-full-access", "-c", "allow_login_shell=false"]
    argv += ["--dangerously-bypass-hook-trust", "--json", child_prompt(steps="Check it: `git agentops-verify`.\n")]
    assert run(argv, worktree, env=env).returncode == 0
    assert hook_inputs(main_log) == hook_inputs(worktree_log) == []  # the project is not trusted
    trusting = run([*argv[:2], "--trust", *argv[2:]], worktree, env=env)
    assert trusting.returncode == 0, trusting.stderr
    assert len(hook_inputs(main_log)) == 1 and hook_inputs(worktree_log) == []  # the worktree's .codex/ is not read
    config = (codex_home / "config.toml").read_text()
    assert f'[projects."{os.path.realpath(repo)}"]\ntrust_level = "trusted"' in config  # --trust is saved
    assert run(argv, worktree, env=env).returncode == 0 and len(hook_inputs(main_log)) == 2
    (codex_home / "config.toml").write_text(f'[projects."{worktree}"]\ntrust_level = "untrusted"\n')
    assert run([*argv[:2], "--trust", *argv[2:]], worktree, env=env).returncode == 0
    assert len(hook_inputs(main_log)) == 2  # --trust does not override an explicitly untrusted project
    (codex_home / "config.toml").write_text(f'[projects."{worktree}"]\ntrust_level = "trusted"\n')
    assert run(argv, worktree, env=env).returncode == 0
    assert len(hook_inputs(main_log)) == 3 and hook_inputs(worktree_log) == []


def test_codex_reads_its_config_from_codex_home(tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CODEX_API_KEY")
    argv = ["codex", "exec", "--json", "-s", "danger-full-access", child_prompt(steps="")]
    missing = run(argv, repo, env={"CODEX_HOME": str(tmp_path / "nowhere")})
    assert missing.returncode == 1 and missing.stdout == ""
    assert f'CODEX_HOME points to "{tmp_path / "nowhere"}", but that path does not exist' in missing.stderr
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    env = {"CODEX_HOME": str(codex_home)}
    unconfigured = run(argv, repo, env=env)  # the default OpenAI provider, without credentials
    assert unconfigured.returncode == 1 and not (repo / "hello.txt").exists()
    events = events_of(unconfigured.stdout)
    assert [e["type"] for e in events] == ["thread.started", "turn.started", "error", "turn.failed"]
    assert "401 Unauthorized" in events[-1]["error"]["message"]
    report = parse("codex", unconfigured.stdout)
    assert report is not None and (report.input_tokens, report.output_tokens) == (0, 0)
    provider = '[model_providers.mock]\nname = "mock"\nbase_url = "http://127.0.0.1:9/v1"\nenv_key = "MOCK_KEY"\n'
    (codex_home / "config.toml").write_text(f'model_provider = "mock"\nmodel = "m1"\n{provider}')
    no_key = run(argv, repo, env=env)
    assert no_key.returncode == 1 and events_of(no_key.stdout)[-1] == {
        "type": "turn.failed",
        "error": {"message": "Missing environment variable: `MOCK_KEY`."},
    }
    keyed = run(argv, repo, env={**env, "MOCK_KEY": "k"})
    assert keyed.returncode == 0 and (repo / "hello.txt").exists() and "model provider mock" in keyed.stderr
    session = parse("codex", keyed.stdout).session
    assert (codex_home / "standin-sessions" / f"{session}.json").is_file()  # sessions live in CODEX_HOME
    (codex_home / "config.toml").write_text('model_provider = "nope"\n')
    unknown = run(argv, repo, env=env)
    assert unknown.returncode == 1 and "Error: Model provider `nope` not found" in unknown.stderr


def test_codex_reads_a_piped_stdin(repo: Path) -> None:
    argv = ["codex", "exec", "--json", "--skip-git-repo-check"]
    closed = run([*argv, "hello"], repo)  # /dev/null: read, and nothing appended
    assert "Reading additional input from stdin..." in closed.stderr
    stored = fakemodel.SessionStore("codex").load(str(parse("codex", closed.stdout).session))
    assert stored is not None and stored.prompt == "hello"
    piped = run([*argv, "hello"], repo, input="more\n")
    assert "Reading additional input from stdin..." in piped.stderr
    stored = fakemodel.SessionStore("codex").load(str(parse("codex", piped.stdout).session))
    assert stored is not None and stored.prompt == "hello\n\n<stdin>\nmore\n</stdin>"
    only = run(argv, repo, input="from stdin")
    assert "Reading prompt from stdin..." in only.stderr and only.returncode == 0
    stored = fakemodel.SessionStore("codex").load(str(parse("codex", only.stdout).session))
    assert stored is not None and stored.prompt == "from stdin"
    empty = run(argv, repo)
    assert empty.returncode == 1 and "No prompt provided via stdin." in empty.stderr


def test_codex_stopped_in_its_handoff_reports_no_usage(repo: Path, stubs: Path) -> None:
    argv = ["codex", "exec", "-s", "danger-full-access", "-c", "allow_login_shell=false", "--json", child_prompt()]
    out = stop_in_handoff(start(argv, repo, env={"STUB_HANDOFF_WAITS": "1"}), stubs)
    events = events_of(out)
    assert events[-1]["type"] == "item.started" and "agentops-request handoff" in events[-1]["item"]["command"]
    assert not any('"usage":' in json.dumps(e) for e in events)  # usage comes in turn.completed alone
    report = parse("codex", out)
    assert report is not None and report.partial and (report.input_tokens, report.output_tokens) == (0, 0)


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


def test_opencode_stopped_in_its_handoff_loses_that_steps_usage(repo: Path, stubs: Path) -> None:
    prompt = child_prompt()
    out = stop_in_handoff(
        start(["opencode", "run", "--format", "json", prompt], repo, env={"STUB_HANDOFF_WAITS": "1"}), stubs
    )
    events = events_of(out)
    assert [e["type"] for e in events][-4:] == ["step_start", "tool_use", "step_finish", "step_start"]
    finished = [e["part"] for e in events if e["type"] == "step_finish"]
    assert len(finished) == 3  # write, commit, verify: each step's usage came once its tool had run
    report = parse("opencode", out)
    assert report is not None and report.partial
    assert (report.input_tokens, report.output_tokens) == (len(prompt) // 4 + 300, 150)  # the handoff's step: lost
    assert report.cost_usd == pytest.approx(((len(prompt) // 4 + 300) * 3 + 150 * 15) / 1e6)


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


@pytest.mark.parametrize("kind", ["claude", pytest.param("codex", marks=needs_bwrap), "opencode"])
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
