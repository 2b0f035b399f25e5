"""Gemini CLI and aider as host kinds: what runs, what their agents' HOME and worktree get, what their output says.

Why: each claim in :mod:`git_agentops.model.hosts.gemini` and :mod:`git_agentops.model.hosts.aider` was observed on
the real CLIs (Gemini CLI 0.61.0, aider 0.86.2) against a local model; the fixtures under ``tests/fixtures/hosts/``
are their output and the hook input Gemini sent, captured then. These tests pin the argv that gives an agent the
least it needs, the guard where Gemini reads it (and nowhere an agent's file can turn it off), the person's settings
reduced to what reaches a model, and the usage each output reports -- including a generation stopped early.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from git_agentops.hooks import agent
from git_agentops.hooks.agent import command_of
from git_agentops.hooks.hostconfig import hook_entry, write_guard
from git_agentops.model.hosts import kind_of, model_hosts
from git_agentops.model.hosts.aider import SESSION, kept_config, tokens
from git_agentops.model.hosts.base import allowed_commands
from git_agentops.policy.excludes import EXCLUDES
from git_agentops.policy.starter import detect_agents, render, starter_policy
from git_agentops.sandbox.home import prepare_home

from ..conftest import make_repo

FIXTURES = Path(__file__).parents[1] / "fixtures" / "hosts"
HOOK = hook_entry(sys.executable)
VERIFY = [[".agentops/venv/bin/python", "-m", "pytest", "-q"], "make check, lint"]


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text("utf-8")


def run_hook(stdin: str, cwd: Path, host: str) -> subprocess.CompletedProcess[str]:
    """``git agentops-hook agent-command --host HOST`` as the host runs it: ``stdin`` as it sent it."""
    return subprocess.run(
        [sys.executable, "-I", "-m", "git_agentops.cli.hook", "agent-command", "--host", host],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_guard_knows_every_agent_cli_kind() -> None:
    """Invariant: ``agent-command --host KIND`` accepts exactly the kinds that are agent CLIs (it stays light, so it
    lists them itself instead of importing the registry)."""
    assert sorted(agent.HOSTS) == sorted(model_hosts())
    assert {"gemini", "aider"} <= set(model_hosts())


# -- Gemini CLI -------------------------------------------------------------------------------------------------------


def test_gemini_runs_headless_allowing_only_the_listed_commands() -> None:
    """Edits are accepted (``auto_edit``) and each allowed command is one prefix rule: never ``--yolo``. A command
    holding a comma is left out -- Gemini would cut it into rules for no tool."""
    argv = kind_of("gemini").default_argv(VERIFY)
    assert argv[:8] == (
        "gemini",
        "-p",
        "{prompt}",
        "--output-format",
        "stream-json",
        "--skip-trust",
        "--approval-mode",
        "auto_edit",
    )
    rules = [a.removeprefix("--allowed-tools=") for a in argv[8:]]
    assert all(a.startswith("--allowed-tools=") for a in argv[8:])
    expected = [c for c in allowed_commands(VERIFY) if "," not in c]
    assert rules == [f"run_shell_command({c})" for c in expected]
    assert "run_shell_command(.agentops/venv/bin/python -m pytest -q)" in rules
    assert "run_shell_command(git agentops-request)" in rules
    assert not any("make check" in r for r in rules)
    assert not {"--yolo", "-y", "yolo"} & set(argv)


def test_gemini_resumes_its_session_by_id() -> None:
    kind = kind_of("gemini")
    argv = kind.default_argv([])
    resumed = kind.resume_argv(argv)
    assert resumed[:5] == ("gemini", "-p", "{prompt}", "--resume", "{session}") and resumed[5:] == argv[3:]
    assert kind.resume_argv(["gemini", "--version"]) == ()


def _guard_group(doc: dict[str, object]) -> dict[str, object]:
    hooks = doc["hooks"]
    assert isinstance(hooks, dict) and list(hooks) == ["BeforeTool"]
    (group,) = hooks["BeforeTool"]
    assert isinstance(group, dict)
    return group


def test_gemini_guard_is_a_before_tool_hook_on_the_shell_tool_with_a_millisecond_timeout(tmp_path: Path) -> None:
    """Gemini counts a hook's timeout in milliseconds and lets the call through when it expires: 30 would be 30 ms,
    less than the guard's Python start. The matcher is a regex on the tool name."""
    worktree = make_repo(tmp_path / "repo")
    written = write_guard(worktree, "gemini", hook_command=HOOK).written
    assert written == (worktree / ".gemini" / "settings.json",)
    doc = json.loads(written[0].read_text())
    assert doc["hooksConfig"] == {"enabled": True}
    group = _guard_group(doc)
    matcher = str(group["matcher"])
    assert re.search(matcher, "run_shell_command") and re.search(matcher, "ShellTool")
    assert not any(re.search(matcher, tool) for tool in ("write_file", "replace", "read_file", "run_shell_commandx"))
    assert group["hooks"] == [{"type": "command", "command": f"{HOOK} agent-command --host gemini", "timeout": 30000}]
    assert "/.gemini/settings.json" in EXCLUDES


def test_gemini_worktree_settings_the_project_does_not_track_are_cleared(tmp_path: Path) -> None:
    """Once trusted, Gemini loads the worktree's ``.gemini/policies/`` (accepting new ones headless without a word):
    an agent's policy allowing every command must not outlive its generation."""
    worktree = make_repo(tmp_path / "repo")
    planted = worktree / ".gemini" / "policies" / "allow.toml"
    planted.parent.mkdir(parents=True)
    planted.write_text('[[rule]]\ntoolName = "run_shell_command"\ndecision = "allow"\npriority = 999\n')
    (worktree / ".gemini" / "settings.json").write_text('{"hooksConfig": {"enabled": false}}')
    installed = write_guard(worktree, "gemini", hook_command=HOOK)
    assert not planted.exists() and ".gemini/policies/allow.toml" in installed.removed
    assert json.loads((worktree / ".gemini" / "settings.json").read_text())["hooksConfig"] == {"enabled": True}
    assert stat.S_IMODE((worktree / ".gemini").stat().st_mode) == 0o555


def _gemini_person(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "person"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(
        "// mine\n"
        + json.dumps(
            {
                "security": {
                    "auth": {"selectedType": "gemini-api-key"},
                    "folderTrust": {"enabled": True},
                    "toolSandboxing": True,
                },
                "model": {"name": "gemini-2.5-pro"},
                "privacy": {"usageStatisticsEnabled": False},
                "general": {"defaultApprovalMode": "yolo", "vimMode": True},
                "hooksConfig": {"enabled": False, "disabled": ["anything"]},
                "hooks": {"BeforeTool": []},
                "tools": {"sandbox": "docker", "allowed": ["run_shell_command"]},
                "mcpServers": {"evil": {"command": "/bin/evil"}},
                "policyPaths": ["/elsewhere"],
            }
        )
    )
    (home / ".gemini" / "oauth_creds.json").write_text('{"access_token": "person"}')
    return {"HOME": str(home), "PATH": os.environ.get("PATH", "")}


def test_gemini_gets_the_persons_model_settings_and_our_guard_in_its_own_home(tmp_path: Path) -> None:
    """Invariant: what reaches the agent's Gemini from the person's settings is how to reach a model (auth, model,
    privacy); never hooks, hook switches, tools, MCP servers, policy paths, an approval mode or trust settings."""
    environ = _gemini_person(tmp_path)
    kind = kind_of("gemini")
    home = tmp_path / "agent-home"
    prepare_home(
        home, kind="gemini", home_files=kind.home_files, environ=environ, worktree=tmp_path / "wt", hook_command=HOOK
    )
    doc = json.loads((home / ".gemini" / "settings.json").read_text())
    assert doc["security"] == {"auth": {"selectedType": "gemini-api-key"}}
    assert doc["model"] == {"name": "gemini-2.5-pro"} and doc["privacy"] == {"usageStatisticsEnabled": False}
    assert doc["general"] == {"enableAutoUpdate": False, "enableAutoUpdateNotification": False}
    assert doc["hooksConfig"] == {"enabled": True}
    assert _guard_group(doc)["hooks"] == [
        {"type": "command", "command": f"{HOOK} agent-command --host gemini", "timeout": 30000}
    ]
    assert not {"tools", "mcpServers", "policyPaths"} & set(doc)
    assert (home / ".gemini" / "oauth_creds.json").read_text() == '{"access_token": "person"}'
    assert kind.config_env(str(home)) == {"GEMINI_CLI_HOME": str(home)}


def test_gemini_reads_the_persons_settings_where_gemini_cli_home_says_and_has_a_guard_without_any(
    tmp_path: Path,
) -> None:
    environ = _gemini_person(tmp_path)
    elsewhere = tmp_path / "gemini-home"
    (elsewhere / ".gemini").mkdir(parents=True)
    (elsewhere / ".gemini" / "settings.json").write_text('{"model": {"name": "from-gemini-cli-home"}}')
    home = tmp_path / "agent-home"
    prepare_home(
        home,
        kind="gemini",
        home_files=(),
        environ={**environ, "GEMINI_CLI_HOME": str(elsewhere)},
        worktree=tmp_path / "wt",
        hook_command=HOOK,
    )
    assert json.loads((home / ".gemini" / "settings.json").read_text())["model"] == {"name": "from-gemini-cli-home"}
    bare = tmp_path / "bare-home"
    prepare_home(
        bare, kind="gemini", home_files=(), environ={"HOME": str(tmp_path / "nobody")}, worktree=bare, hook_command=HOOK
    )
    doc = json.loads((bare / ".gemini" / "settings.json").read_text())
    assert "security" not in doc and _guard_group(doc)["matcher"]


def test_what_an_agent_plants_in_its_home_for_gemini_is_gone_at_the_next_start(tmp_path: Path) -> None:
    """User policies outrank ``--allowed-tools``; extensions bring hooks and MCP servers: an agent's own do not
    outlive its generation."""
    home = tmp_path / "agent-home"
    planted = [home / ".gemini" / "policies" / "allow.toml", home / ".gemini" / "extensions" / "x" / "e.json"]
    for path in planted:
        path.parent.mkdir(parents=True)
        path.write_text("planted")
    memory = home / ".gemini" / "GEMINI.md"  # its memory (save_memory) is its own to keep
    memory.write_text("remember")
    prepare_home(
        home, kind="gemini", home_files=(), environ={"HOME": str(tmp_path / "p")}, worktree=home, hook_command=HOOK
    )
    assert not any(path.exists() for path in planted) and memory.read_text() == "remember"


def test_gemini_stream_json_reports_session_usage_and_final_message() -> None:
    """A whole generation of the real CLI (nine tool calls: the guard refusing two, the policy denying two)."""
    report = kind_of("gemini").parse_text(fixture("gemini-0.61.0-run.jsonl"))
    assert report is not None and report.parsed and not report.partial
    assert report.session == "46d0335e-8022-46c5-b2ad-b32399e9a8d2"
    assert (report.input_tokens, report.output_tokens, report.cost_usd) == (1000, 70, None)
    assert report.result == "All done: "


def test_gemini_stopped_before_its_result_is_partial() -> None:
    """Gemini prints usage only in its final ``result``: a generation stopped mid-answer reports none, and says
    so."""
    report = kind_of("gemini").parse_text(fixture("gemini-0.61.0-stopped.jsonl"))
    assert report is not None and report.parsed and report.partial and report.reported_usage
    assert report.session == "938e89d8-08f2-4269-b272-73827a7a0eb9"
    assert (report.input_tokens, report.output_tokens) == (0, 0)
    assert report.result == "thinking..."


def test_gemini_resumed_run_keeps_its_session_and_counts_only_itself() -> None:
    report = kind_of("gemini").parse_text(fixture("gemini-0.61.0-resumed.jsonl"))
    assert report is not None and report.session == "16a126e2-8d79-4c32-97d2-3fa0a9479b6c"
    assert (report.input_tokens, report.output_tokens, report.partial) == (200, 14, False)
    assert report.result == "second answer after resume"


def test_gemini_thinking_tokens_count_as_output() -> None:
    events: list[dict[str, Any]] = [
        {"type": "init", "session_id": "s1"},
        {
            "type": "result",
            "status": "success",
            "stats": {"total_tokens": 150, "input_tokens": 100, "output_tokens": 20},
        },
    ]
    report = kind_of("gemini").parse(events)
    assert report is not None and (report.input_tokens, report.output_tokens) == (100, 50)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("gemini-0.61.0-before-tool-rm.json", "deletes your home directory"),
        ("gemini-0.61.0-before-tool-dir-path.json", "`git clean -f` deletes untracked files"),
    ],
)
def test_the_guard_refuses_what_gemini_sent_for_a_destructive_command(tmp_path: Path, name: str, why: str) -> None:
    """Exactly the bytes Gemini CLI 0.61 piped into its ``BeforeTool`` hook: exit 2 and the reason on stderr, which
    Gemini gives the model as "Tool execution blocked: <reason>"."""
    stdin = fixture(name)
    done = run_hook(stdin, tmp_path, "gemini")
    assert done.returncode == 2 and why in done.stderr and done.stdout == ""
    harmless = json.loads(stdin)
    harmless["tool_input"]["command"] = "git status --short"
    assert run_hook(json.dumps(harmless), tmp_path, "gemini").returncode == 0
    other_tool = {**json.loads(stdin), "tool_name": "write_file", "tool_input": {"file_path": "x", "content": "y"}}
    assert run_hook(json.dumps(other_tool), tmp_path, "gemini").returncode == 0


def test_gemini_dir_path_is_where_the_command_runs(tmp_path: Path) -> None:
    """``run_shell_command`` takes the directory it runs in, relative to the project root: ``rm -rf ..`` in a
    subdirectory deletes the worktree."""
    worktree = make_repo(tmp_path / "repo")
    (worktree / "sub").mkdir()
    doc = json.loads(fixture("gemini-0.61.0-before-tool-rm.json"))
    doc["cwd"] = str(worktree)
    doc["tool_input"] = {"command": "rm -rf ..", "description": "d", "dir_path": "sub"}
    assert command_of(doc) == ("rm -rf ..", str(worktree / "sub"))
    done = run_hook(json.dumps(doc), tmp_path, "gemini")
    assert done.returncode == 2 and "deletes the worktree" in done.stderr
    doc["tool_input"]["dir_path"] = str(worktree / "sub")  # an absolute one stays
    assert command_of(doc) == ("rm -rf ..", str(worktree / "sub"))


# -- aider ------------------------------------------------------------------------------------------------------------


def test_aider_argv_lets_the_model_run_commands_and_commits_through_the_repository_hooks() -> None:
    """``--yes-always`` would refuse every shell command (an agent could never hand off); ``--edit-format diff`` is
    the format whose replies carry them; aider's commits skip the repository's hooks unless told otherwise."""
    argv = kind_of("aider").default_argv(VERIFY)
    assert argv[:3] == ("aider", "--message", "{prompt}")
    assert "--yes-always" not in argv and "--yes" not in argv
    assert argv[argv.index("--edit-format") + 1] == "diff"
    for flag in ("--git-commit-verify", "--no-gitignore", "--no-detect-urls", "--no-analytics", "--no-check-update"):
        assert flag in argv
    assert "--no-git-commit-verify" not in argv and "--no-auto-commits" not in argv


def test_aider_resumes_by_restoring_its_chat_history_and_has_no_guard(tmp_path: Path) -> None:
    kind = kind_of("aider")
    argv = kind.default_argv([])
    assert kind.resume_argv(argv) == (*argv, "--restore-chat-history")
    assert kind.resume_argv(["aider", "--version"]) == ()
    assert kind.guard_file is None and kind.guard_files(HOOK) == {}
    worktree = make_repo(tmp_path / "repo")
    assert write_guard(worktree, "aider", hook_command=HOOK).written == ()


def test_what_aider_leaves_in_the_worktree_never_makes_it_dirty() -> None:
    for rel in ("/.aider.tags.cache.v*/", "/.aider.chat.history.md", "/.aider.input.history"):
        assert rel in EXCLUDES


def test_aider_gets_the_persons_model_settings_without_what_would_change_how_it_runs(tmp_path: Path) -> None:
    """``yes-always`` cannot be undone on the command line (and would stop every command); ``lint-cmd`` and
    ``test-cmd`` run programs; histories are placed by us."""
    person = tmp_path / "person"
    person.mkdir()
    (person / ".aider.conf.yml").write_text(
        "# my settings\n"
        "model: openai/my-model\n"
        "openai-api-base: http://127.0.0.1:9/v1\n"
        "yes-always: true\n"
        "lint-cmd:\n"
        '  - "python: /bin/evil"\n'
        "set-env:\n"
        "  - FOO=bar\n"
        "chat-history-file: /elsewhere\n"
        "auto-test: true\n"
    )
    (person / ".aider.model.metadata.json").write_text('{"openai/my-model": {"input_cost_per_token": 1e-06}}')
    home = tmp_path / "agent-home"
    kind = kind_of("aider")
    prepare_home(
        home,
        kind="aider",
        home_files=kind.home_files,
        environ={"HOME": str(person)},
        worktree=tmp_path / "wt",
        hook_command=HOOK,
    )
    assert (home / ".aider.conf.yml").read_text() == (
        "model: openai/my-model\nopenai-api-base: http://127.0.0.1:9/v1\nset-env:\n  - FOO=bar\n"
    )
    assert "input_cost_per_token" in (home / ".aider.model.metadata.json").read_text()
    assert kept_config("yes-always: true\n# nothing else\n") == ""


def test_an_agents_aider_config_in_its_home_is_gone_at_the_next_start(tmp_path: Path) -> None:
    home = tmp_path / "agent-home"
    home.mkdir()
    (home / ".aider.conf.yml").write_text("yes-always: true\n")
    (home / ".env").write_text("AIDER_YES_ALWAYS=true\n")
    prepare_home(
        home, kind="aider", home_files=(), environ={"HOME": str(tmp_path / "p")}, worktree=home, hook_command=HOOK
    )
    assert not (home / ".aider.conf.yml").exists() and not (home / ".env").exists()


def test_aider_text_output_reports_usage_per_reply_and_its_session_cost() -> None:
    """The real CLI's output: a reply naming a file not yet in the chat (added, asked again), the edit applied and
    committed, two commands run. Each reply prints its tokens; the last ``session`` cost is the run's."""
    report = kind_of("aider").parse_text(fixture("aider-0.86.2-run.txt"))
    assert report is not None and report.parsed and not report.partial
    assert (report.input_tokens, report.output_tokens) == (2500 + 2600, 57 + 57)
    assert report.cost_usd == pytest.approx(0.0053)
    assert report.session == SESSION


def test_aider_resumed_and_stopped_outputs() -> None:
    resumed = kind_of("aider").parse_text(fixture("aider-0.86.2-resumed.txt"))
    assert resumed is not None and (resumed.input_tokens, resumed.output_tokens) == (2700, 8)
    assert resumed.cost_usd == pytest.approx(0.0027) and not resumed.partial
    stopped = kind_of("aider").parse_text(fixture("aider-0.86.2-stopped.txt"))
    assert stopped is not None and stopped.parsed and stopped.partial and stopped.reported_usage
    assert (stopped.input_tokens, stopped.output_tokens, stopped.cost_usd) == (0, 0, None)
    nothing = kind_of("aider").parse_text("Traceback (most recent call last):\n  boom\n")
    assert nothing is not None and not nothing.parsed and not nothing.reported_usage


def test_aider_cache_figures_and_rounded_counts() -> None:
    text = (
        "Aider v0.86.2\n"
        "Tokens: 12k sent, 3.0k cache write, 9.5k cache hit, 250 received.\n"
        "Cost: $0.05 message, $0.05 session.\n"
        "Tokens: 766 sent, 1.2k received. Cost: $0.01 message, $0.06 session.\n"
    )
    report = kind_of("aider").parse_text(text)
    assert report is not None and (report.input_tokens, report.output_tokens) == (12000 + 9500 + 766, 1450)
    assert report.cost_usd == pytest.approx(0.06)
    assert [tokens(t) for t in ("766", "2.5k", "25k", "x")] == [766, 2500, 25000, 0]


# -- init -------------------------------------------------------------------------------------------------------------


def test_init_writes_a_host_section_for_each_found_on_path(tmp_path: Path) -> None:
    """``git agentops-init`` with ``gemini`` and ``aider`` on PATH: each gets its argv, writable paths and passed
    credential variables written out, and the policy checks."""
    from git_agentops.policy.load import check_text

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, version in (("gemini", "0.61.0"), ("aider", "aider 0.86.2")):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\necho '{version}'\n")
        script.chmod(0o755)
    agents = detect_agents(str(bin_dir))
    assert [(a.kind, a.version) for a in agents] == [("gemini", "0.61.0"), ("aider", "aider 0.86.2")]
    root = make_repo(tmp_path / "repo")
    doc = starter_policy(root, target="main", agents=agents)
    gemini, aider = doc["hosts"]["gemini"], doc["hosts"]["aider"]
    assert gemini["argv"][:3] == ["gemini", "-p", "{prompt}"] and "--skip-trust" in gemini["argv"]
    assert gemini["pass_env"][0] == "GEMINI_API_KEY" and gemini["writable"] == ["~/.gemini", "~/.cache"]
    assert aider["argv"][:3] == ["aider", "--message", "{prompt}"] and "OPENAI_API_KEY" in aider["pass_env"]
    effective, problems = check_text(render(doc))
    assert problems == [] and effective is not None
    assert effective["hosts"]["gemini"]["resume_argv"][3:5] == ["--resume", "{session}"]
    assert effective["hosts"]["aider"]["resume_argv"][-1] == "--restore-chat-history"
