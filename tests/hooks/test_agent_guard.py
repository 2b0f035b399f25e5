"""The agent guard: ``git agentops-hook agent-command`` and the host configuration that calls it.

Why: an agent's Bash tool is one string, and the guard is the last check before the host runs it. These tests pin
what it refuses (and says why), what it lets through, that chains, substitutions and wrappers do not hide a
destructive part, that it speaks each host's contract (exit 2 and one line on stderr), that installing it keeps
nothing of what was there, and that the stand-in CLIs -- which behave like the real ones -- really run it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from git_agentops.cli import hook as hook_cli
from git_agentops.errors import AgentOpsError
from git_agentops.hooks import agent
from git_agentops.hooks.agent import install_agent_guard, refusals
from git_agentops.hooks.hostconfig import CLAUDE_SETTINGS, CODEX_CONFIG, OPENCODE_PLUGIN, hook_entry

from ..conftest import git, make_repo
from ..helpers import require_tool

ROOT = "/work/tree"
HOME = "/home/agent"
BIN = Path(__file__).parents[1] / "standins" / "bin"
TOKEN = "ghp_" + "A1b2C3d4" * 5  # github-token shaped, not a real token
HOOK = hook_entry(sys.executable)


def refused(command: str, *, cwd: str = ROOT) -> list[str]:
    return refusals(command, cwd=cwd, root=ROOT, home=HOME)


def run_hook(payload: object, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``git agentops-hook agent-command ARGS`` as a host runs it: the JSON on stdin, in the worktree."""
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return subprocess.run(
        [sys.executable, "-I", "-m", "git_agentops.cli.hook", "agent-command", *args],
        cwd=cwd,
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def claude_event(command: str, cwd: Path) -> dict[str, object]:
    """What Claude Code pipes into a ``PreToolUse`` hook for a Bash call."""
    return {
        "session_id": "0b1c2d3e-0000-4000-8000-000000000000",
        "transcript_path": str(cwd / "transcript.jsonl"),
        "cwd": str(cwd),
        "permission_mode": "acceptEdits",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "Run a command"},
        "tool_use_id": "toolu_01ABC",
    }


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


# -- the rules ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("rm -rf /", "deletes the filesystem root"),
        ("rm -r -f .", "deletes the worktree"),
        ("rm --recursive --force ..", "a directory above the worktree"),
        ("rm -rf ~", "deletes your home directory"),
        ("rm -rf ~/", "deletes your home directory"),
        ('rm -rf "$HOME"', "deletes your home directory"),
        ("rm -rf ${HOME}/", "deletes your home directory"),
        ("rm -rf *", "deletes everything in the worktree"),
        ("rm -rf ./* .*", "deletes everything in the worktree"),
        (f"rm -rf {ROOT}", "deletes the worktree"),
        ("rm -R /usr", "the top-level directory /usr"),
        ("rm -rf $BUILD/", "the filesystem root if $BUILD is empty"),
        ("find . -delete", "deletes the worktree"),
        ("find / -name '*' -exec rm -rf {} +", "deletes the filesystem root"),
        ("git reset --hard", "discards uncommitted work"),
        ("git reset --hard origin/main", "discards uncommitted work"),
        ("git clean -fdx", "deletes untracked files"),
        ("git clean --force", "deletes untracked files"),
        ("git push --force", "rewrites history"),
        ("git push -f origin HEAD", "rewrites history"),
        ("git push --force-with-lease origin x", "rewrites history"),
        ("git push origin +HEAD:refs/heads/x", "forced refspec"),
        ("git push --mirror backup", "every ref of the remote"),
        ("git push origin --delete refs/agentops/runs/r/state", "agentops refs are the supervisor's record"),
        ("git push origin :refs/notes/agentops/receipts", "agentops refs are the supervisor's record"),
        ("git push --no-verify origin HEAD:refs/heads/x", "skips the pre-push hook"),
        ("git update-ref refs/agentops/runs/r/state HEAD", "written only by the supervisor"),
        ("git update-ref -d refs/notes/agentops/receipts", "written only by the supervisor"),
        ("git notes --ref agentops/receipts add -m ok HEAD", "written only by the supervisor"),
        ("git notes --ref=refs/notes/agentops/evidence remove HEAD", "written only by the supervisor"),
        ("git config user.email me@example.invalid", "`git config` writes"),
        ("git config --unset core.bare", "`git config` writes"),
        ("git config set core.hooksPath /dev/null", "`git config` writes"),
        ("git -c core.hooksPath=/dev/null commit -m x", "replaces the repository hooks"),
        ("git -c core.fsmonitor=./evil status", "replaces the repository hooks"),
        ("git --config-env=core.hooksPath=HOOKS commit -m x", "replaces the repository hooks"),
        ("GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.hooksPath GIT_CONFIG_VALUE_0=/x git commit", "replaces the"),
        ("git commit --no-verify -m x", "skips the repository hooks"),
        ("git commit -nm x", "skips the repository hooks"),
        ("git commit -a -n -m x", "skips the repository hooks"),
        ("git merge --no-verify other", "skips the repository hooks"),
        ("git agentops-policy trust", "granted only by a person"),
        ("git-agentops-policy trust --yes", "granted only by a person"),
    ],
)
def test_each_destructive_command_is_refused_with_its_reason(command: str, why: str) -> None:
    reasons = refused(command)
    assert len(reasons) == 1 and why in reasons[0], reasons


@pytest.mark.parametrize(
    "command",
    [
        "git status",
        "git add -A",
        "git commit -m 'fix: handle -n and --force in the parser'",
        "git commit -m \"$(cat <<'EOF'\nDon't reset --hard here\n\nCo-Authored-By: A <a@example.invalid>\nEOF\n)\"",
        "python -m pytest -q",
        "ls -la",
        "rm build/x.o",
        "rm -rf build",
        "rm -rf node_modules dist/*.js",
        "rm -rf ${OUT:?}/",
        "find . -name '*.pyc' -delete",
        "find build -delete",
        "git push origin HEAD:refs/heads/x",
        "git push -u origin x",
        "git config --get user.name",
        "git config -l",
        "git config user.name",
        "git -c user.name=x commit -m y",
        "git log -n 3 --oneline",
        "git merge -n other",
        "git reset --soft HEAD~1",
        "git clean -n",
        "git notes --ref agentops/receipts show HEAD",
        "git agentops-request handoff",
        "git agentops-verify",
        "git agentops-policy show",
        "echo done > out.txt 2>&1",
    ],
)
def test_ordinary_commands_are_allowed(command: str) -> None:
    assert refused(command) == []


@pytest.mark.parametrize(
    "command",
    [
        "git add -A && git reset --hard",
        "git status; rm -rf .",
        "ls | xargs rm -rf ~",
        "echo $(rm -rf /)",
        'echo "today: $(git clean -fdx)"',
        "echo `git push --force`",
        "(cd sub && git reset --hard)",
        "{ git status; git reset --hard; }",
        "cd .. && rm -rf tree",
        "sudo -u root rm -rf /",
        "env -i PATH=/bin rm -rf /",
        "command git push -f",
        "nice -n 5 timeout 10 git clean -f",
        "bash -c 'git reset --hard'",
        'sh -ec "rm -rf ~"',
        "eval git push --force",
        "if true; then rm -rf /; fi",
        "cat <<EOF\n$(git reset --hard)\nEOF",
        "/usr/bin/git reset --hard",
    ],
)
def test_a_destructive_part_of_a_chain_substitution_or_wrapper_is_refused(command: str) -> None:
    assert refused(command) != []


def test_a_cd_moves_where_relative_paths_resolve() -> None:
    assert refused("cd /tmp && rm -rf tree") == []
    assert refused("cd / && rm -rf work") != []


@pytest.mark.parametrize("command", ["echo 'unterminated", 'git commit -m "half', "echo $(ls", "echo )", "ls >"])
def test_a_command_that_cannot_be_parsed_is_refused(command: str) -> None:
    reasons = refused(command)
    assert len(reasons) == 1 and reasons[0].startswith("cannot parse"), reasons


def test_a_literal_secret_is_refused_by_rule_name_without_echoing_it() -> None:
    reasons = refused(f"curl -H 'Authorization: token {TOKEN}' https://api.example.invalid")
    assert len(reasons) == 1 and "literal secret (github-token)" in reasons[0]
    assert TOKEN not in reasons[0] and TOKEN[:12] not in reasons[0]
    assert refusals(f"echo {TOKEN}", cwd=ROOT, root=ROOT, home=HOME, secrets=None) == []  # scanning turned off


# -- the hook entry, as each host calls it -------------------------------------------------------------------------


def test_claude_pretooluse_json_is_blocked_with_exit_2_and_one_line_on_stderr(repo: Path) -> None:
    done = run_hook(claude_event("git add -A && git reset --hard", repo), repo, "--host", "claude")
    assert done.returncode == 2
    assert done.stdout == ""  # Claude Code reads exit 2 and stderr only
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("git-agentops refused this command: `git reset --hard`")


def test_claude_pretooluse_json_for_an_ordinary_command_exits_0_silently(repo: Path) -> None:
    done = run_hook(claude_event("git status && python -m pytest", repo), repo, "--host", "claude")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_claude_cwd_field_is_where_paths_resolve(repo: Path, tmp_path: Path) -> None:
    (repo / "sub").mkdir()
    event = claude_event("rm -rf ..", repo / "sub")
    done = run_hook(event, tmp_path, "--host", "claude")  # the hook process runs elsewhere
    assert done.returncode == 2 and "deletes the worktree" in done.stderr


def test_the_generic_shape_of_the_opencode_plugin_is_checked(repo: Path) -> None:
    payload = {"tool": "bash", "command": "git push --force", "cwd": str(repo), "sessionID": "s", "callID": "c"}
    done = run_hook(payload, repo, "--host", "opencode")
    assert done.returncode == 2 and "rewrites history" in done.stderr
    payload["command"] = "git push origin HEAD:refs/heads/x"
    assert run_hook(payload, repo, "--host", "opencode").returncode == 0


def test_codex_shell_commands_in_argv_form_are_checked(repo: Path) -> None:
    event = {**claude_event("", repo), "turn_id": "t1", "tool_input": {"command": ["bash", "-lc", "rm -rf ~"]}}
    assert run_hook(event, repo, "--host", "codex").returncode == 2


def test_calls_of_other_tools_pass_unchecked(repo: Path) -> None:
    event = {**claude_event("", repo), "tool_name": "Write", "tool_input": {"file_path": "a", "content": TOKEN}}
    assert run_hook(event, repo, "--host", "claude").returncode == 0


@pytest.mark.parametrize("stdin", ["not json", "[1, 2", ""])
def test_hook_input_that_is_not_json_is_refused(repo: Path, stdin: str) -> None:
    done = run_hook(stdin, repo)
    assert done.returncode == 2 and "cannot parse the hook input" in done.stderr


def test_an_unknown_host_is_a_usage_error(repo: Path) -> None:
    done = run_hook({"command": "ls"}, repo, "--host", "cursor")
    assert done.returncode == 2 and "unknown host 'cursor'" in done.stderr


def test_a_crash_of_the_guard_itself_allows_the_command_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def crash(*args: object, **kwargs: object) -> tuple[int, list[str]]:
        raise RuntimeError("boom")

    monkeypatch.setattr(agent, "agent_command", crash)
    assert hook_cli.main(["agent-command", "--host", "claude"]) == 0
    assert "warning[HOOK_FAILED]" in capsys.readouterr().err


# -- writing the host configuration ------------------------------------------------------------------------------


def test_claude_settings_are_ours_whole_whatever_was_there(repo: Path) -> None:
    """Invariant: ``.claude/settings.local.json`` holds our hook and nothing else after an install, whatever it
    held before (the agent writes this worktree); reinstalling writes the same bytes."""
    planted: dict[str, Any] = {
        "permissions": {"allow": ["Bash(*)"]},
        "disableAllHooks": True,
        "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "true"}]}]},
    }
    (repo / ".claude").mkdir()
    (repo / CLAUDE_SETTINGS).write_text(json.dumps(planted))
    assert install_agent_guard(repo, "claude", hook_command=HOOK) == [repo / CLAUDE_SETTINGS]
    first = (repo / CLAUDE_SETTINGS).read_text()
    install_agent_guard(repo, "claude", hook_command=HOOK)
    assert (repo / CLAUDE_SETTINGS).read_text() == first
    assert json.loads(first) == {
        "disableAllHooks": False,
        "hooks": {
            "PreToolUse": [
                {
                    "matcher": "Bash",
                    "hooks": [{"type": "command", "command": f"{HOOK} agent-command --host claude", "timeout": 30}],
                }
            ]
        },
    }


def test_a_settings_file_that_is_not_json_is_replaced_too(repo: Path) -> None:
    (repo / ".claude").mkdir()
    (repo / CLAUDE_SETTINGS).write_text("{ not json")
    install_agent_guard(repo, "claude", hook_command=HOOK)
    assert "agent-command --host claude" in (repo / CLAUDE_SETTINGS).read_text()


def test_a_symlinked_config_dir_cannot_redirect_the_write(repo: Path, tmp_path: Path) -> None:
    """Invariant: nothing is written through a symlink below the worktree. The agent's own link is removed (the
    directory it points to is untouched); one the project tracks is refused."""
    from git_agentops.hooks.hostconfig import write_guard

    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / ".claude").symlink_to(outside)
    with pytest.raises(AgentOpsError) as raised:
        write_guard(repo, "claude", hook_command=HOOK, tracked=lambda rel: rel == ".claude")
    assert raised.value.code == "PATH_SYMLINK" and list(outside.iterdir()) == []
    installed = write_guard(repo, "claude", hook_command=HOOK)
    assert installed.removed == (".claude",) and list(outside.iterdir()) == []
    assert (repo / ".claude").is_dir() and not (repo / ".claude").is_symlink()
    assert "agent-command --host claude" in (repo / CLAUDE_SETTINGS).read_text()


def test_each_host_gets_its_own_configuration(repo: Path) -> None:
    installed = install_agent_guard(repo, "opencode", hook_command=HOOK)
    no_install = [repo / ".opencode/package-lock.json", repo / ".opencode/node_modules/.agentops"]
    assert installed == [repo / OPENCODE_PLUGIN, *no_install]  # opencode then downloads no plugin SDK per start
    plugin = (repo / OPENCODE_PLUGIN).read_text()
    assert f"const GUARD_COMMAND = {json.dumps(HOOK + ' agent-command --host opencode')}" in plugin
    assert plugin.count("export ") == 1  # opencode 1.x calls every export as a plugin
    # Codex never reads a linked worktree's .codex/: its guard is in the agent's own CODEX_HOME (test_codex_home),
    # and the worktree only keeps hooks on in case a later Codex reads it
    assert install_agent_guard(repo, "codex", hook_command=HOOK) == [repo / CODEX_CONFIG]
    assert (repo / CODEX_CONFIG).read_text().endswith("[features]\nhooks = true\n")
    assert install_agent_guard(repo, "scripted", hook_command=HOOK) == []
    assert git(repo, "status", "--porcelain", "--ignored") != ""  # the caller excludes them via info/exclude


def test_the_opencode_plugin_throws_the_guard_reason_and_lets_ordinary_commands_run(repo: Path, tmp_path: Path) -> None:
    require_tool("node", "apt-get install -y nodejs (node runs the plugin's JavaScript)")
    install_agent_guard(repo, "opencode", hook_command=HOOK)
    module = tmp_path / "plugin.mjs"  # .mjs: node treats it as an ES module whatever its version
    shutil.copyfile(repo / OPENCODE_PLUGIN, module)
    harness = """
const [plugin, directory, command] = process.argv.slice(1)
const mod = await import(plugin)
const hooks = await Object.values(mod)[0]({ directory, worktree: directory })
try {
  await hooks["tool.execute.before"]({ tool: "bash", sessionID: "s", callID: "c" }, { args: { command } })
  console.log("allowed")
} catch (error) {
  console.log("blocked: " + error.message)
}
"""
    for command, expected in (("git clean -fdx", "blocked: git-agentops refused"), ("git status", "allowed")):
        done = subprocess.run(
            ["node", "--input-type=module", "-e", harness, str(module), str(repo), command],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0 and done.stdout.startswith(expected), done.stdout + done.stderr


# -- the stand-ins run it the way the real CLIs do ---------------------------------------------------------------

SECRET_TASK = (
    "# You are worker `w-1` (generation 1) of git-agentops run `r-1`\n\nRun goal: test\n\n"
    f'## Your task: Rotate {TOKEN} (task-1)\n\nCreate notes.txt containing "rotated"\n\n'
    "Acceptance criteria:\n- c1: notes.txt holds it\n\n"
    '1. Commit your work: `git add -A && git commit -m "MESSAGE"`.\n'
)


def standin(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": os.pathsep.join([str(BIN), os.environ["PATH"]])}
    env.pop("OPENCODE_CONFIG_CONTENT", None)
    return subprocess.run(
        argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False
    )


def test_standin_claude_runs_the_guard_before_bash_and_reports_its_reason(repo: Path) -> None:
    install_agent_guard(repo, "claude", hook_command=HOOK)
    argv = ["claude", "-p", SECRET_TASK, "--output-format", "stream-json", "--verbose"]
    done = standin(
        [*argv, "--permission-mode", "acceptEdits", "--allowedTools=Bash(git add *),Bash(git commit *)"], repo
    )
    assert done.returncode == 0, done.stderr
    assert git(repo, "log", "--format=%s") == "initial"  # the commit was blocked
    events = [json.loads(line) for line in done.stdout.splitlines()]
    results = [b for e in events if e["type"] == "user" for b in e["message"]["content"]]
    refusal = results[-1]["content"]
    assert results[-1]["is_error"] and refusal.startswith("PreToolUse:Bash hook error: [")
    assert "literal secret (github-token)" in refusal and TOKEN not in refusal
    assert "literal secret (github-token)" in events[-1]["result"]  # the agent reports why it stopped


def test_standin_claude_without_the_guard_commits(repo: Path) -> None:
    argv = ["claude", "-p", SECRET_TASK, "--permission-mode", "acceptEdits", "--allowedTools=Bash(git *)"]
    assert standin(argv, repo).returncode == 0
    assert git(repo, "log", "-1", "--format=%s") == f"Rotate {TOKEN}"  # what the guard prevents


def test_standin_opencode_runs_the_guard_plugin_before_bash(repo: Path) -> None:
    install_agent_guard(repo, "opencode", hook_command=HOOK)
    done = standin(["opencode", "run", SECRET_TASK, "--format", "json"], repo)
    assert done.returncode == 0, done.stderr
    assert git(repo, "log", "--format=%s") == "initial"
    tools = [json.loads(line)["part"] for line in done.stdout.splitlines()]
    bash = [p for p in tools if p.get("type") == "tool" and p["tool"] == "bash"]
    assert bash[-1]["state"]["status"] == "error"
    assert "literal secret (github-token)" in bash[-1]["state"]["error"] and TOKEN not in bash[-1]["state"]["error"]


# -- every listed command, refused through a stand-in Claude Code as the real one calls the hook ----------------------

LISTED = {
    "rm -rf /": "deletes the filesystem root",
    "rm -rf .": "deletes the worktree",
    "rm -rf ..": "a directory above the worktree",
    "rm -rf ~": "deletes your home directory",
    "git reset --hard": "discards uncommitted work",
    "git push --force origin HEAD": "rewrites history",
    "git push --force-with-lease origin HEAD": "rewrites history",
    "git push --mirror origin": "every ref of the remote",
    "git push origin +HEAD:refs/heads/main": "forced refspec",
    "git update-ref refs/agentops/runs/r/state HEAD": "written only by the supervisor",
    "git notes --ref=agentops/evidence add -m forged HEAD": "written only by the supervisor",
    "git config core.hooksPath /dev/null": "`git config` writes",
}


def _guarded_claude(repo: Path, tmp_path: Path, also: str) -> list[dict[str, Any]]:
    """The stand-in Claude Code allowing every Bash command (``--allowedTools=Bash``; its PreToolUse hooks run
    before the permission rules), asked to run ``also`` -- inside the Landlock launcher writing only ``repo``:
    should the guard fail, the destructive command must still not reach anything else."""
    from git_agentops.sandbox.plan import Sandbox
    from git_agentops.sandbox.rules import RW_DEVICES
    from git_agentops.sandbox.spec import Rule

    install_agent_guard(repo, "claude", hook_command=HOOK)
    task = (
        "# You are worker `w-1` (generation 1) of git-agentops run `r-1`\n\nRun goal: test\n\n"
        f'## Your task: Guarded (task-1)\n\nCreate notes.txt containing "x"\nAlso run: `{also}`\n'
    )
    home = Path(os.environ["HOME"])
    rules = [Rule("/", ("read", "execute")), Rule(str(repo), ("read", "write", "execute"))]
    rules += [Rule(str(home / ".claude"), ("read", "write"))]
    (home / ".claude").mkdir(exist_ok=True)
    rules += [Rule(d, ("read", "write")) for d in RW_DEVICES if os.path.exists(d)]
    argv = [
        "claude",
        "-p",
        task,
        "--output-format",
        "stream-json",
        "--verbose",
        "--permission-mode",
        "acceptEdits",
        "--allowedTools=Write,Bash",
    ]
    env = {**os.environ, "PATH": os.pathsep.join([str(BIN), os.environ["PATH"]])}
    sandbox = Sandbox("landlock" if landlock_abi() >= 1 else "none", rules=tuple(rules))
    done = subprocess.run(
        sandbox.wrap(argv, repo, tmp_path / "spec.json"),
        cwd=repo,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def landlock_abi() -> int:
    from git_agentops.sandbox.landlock import abi

    return abi()


def _bash_results(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    uses = {
        b["id"]: b["input"]["command"]
        for e in events
        if e["type"] == "assistant"
        for b in e["message"]["content"]
        if b.get("type") == "tool_use" and b["name"] == "Bash"
    }
    return [
        {**b, "command": uses[b["tool_use_id"]]}
        for e in events
        if e["type"] == "user"
        for b in e["message"]["content"]
        if b.get("tool_use_id") in uses
    ]


@pytest.mark.parametrize("command", sorted(LISTED))
def test_a_standin_claude_code_is_refused_each_listed_command_by_its_pretooluse_hook(
    repo: Path, tmp_path: Path, command: str
) -> None:
    """Invariant: the hook blocks the call before it runs (exit 2, the reason fed back to the model), the model
    sees the reason, and the repository is as it was."""
    events = _guarded_claude(repo, tmp_path, command)
    [result] = [r for r in _bash_results(events) if r["command"] == command]
    assert result["is_error"] and result["content"].startswith("PreToolUse:Bash hook error: ["), result
    assert LISTED[command] in result["content"], result["content"]
    assert git(repo, "log", "--format=%s") == "initial" and (repo / ".git").is_dir()
    assert git(repo, "for-each-ref", "refs/agentops", "refs/notes") == ""
    assert git(repo, "config", "--get", "core.hooksPath", check=False) == ""


def test_a_standin_claude_code_runs_an_ordinary_command_the_guard_lets_through(repo: Path, tmp_path: Path) -> None:
    events = _guarded_claude(repo, tmp_path, "git status --short && ls")
    [result] = [r for r in _bash_results(events) if r["command"].startswith("git status")]
    assert not result["is_error"], result


# -- installed by the supervisor into each worker worktree --------------------------------------------------------


@pytest.mark.parametrize("kind", ["claude", "codex", "opencode"])
def test_the_supervisor_writes_the_guard_of_the_workers_host_and_git_never_sees_it(repo: Path, kind: str) -> None:
    """Invariant: before each start the worktree holds its host's guard configuration, and ``git status`` in it
    stays clean (the run's ``info/exclude`` lists every guard file), so no delivery carries it."""
    from git_agentops.clock import SystemClock
    from git_agentops.gitstore.repo import open_store
    from git_agentops.hooks.hostconfig import guard_file
    from git_agentops.model.policy import Policy, effective
    from git_agentops.policy.excludes import add_excludes, missing_excludes
    from git_agentops.supervisor.confine import Confinement

    exclude = repo / ".git" / "info" / "exclude"
    add_excludes(exclude, missing_excludes(exclude))  # as run creation does
    worktree = repo.parent / "w"
    git(repo, "worktree", "add", "-q", "--detach", str(worktree))
    logged: list[str] = []
    store = open_store(repo, clock=SystemClock())
    policy = Policy.from_effective(effective({"version": 1}))
    Confinement(store, policy, {}, repo / ".git" / "agentops", logged.append).guard(worktree, kind)
    written = (worktree / str(guard_file(kind))).read_text()
    assert f"agent-command --host {kind}" in written if kind != "codex" else "hooks = true" in written
    assert git(worktree, "status", "--porcelain", "--untracked-files=all") == ""
    assert logged == []


def test_a_guard_file_the_project_tracks_is_left_alone_and_the_skip_logged(repo: Path) -> None:
    from git_agentops.clock import SystemClock
    from git_agentops.gitstore.repo import open_store
    from git_agentops.model.policy import Policy, effective
    from git_agentops.supervisor.confine import Confinement

    (repo / ".claude").mkdir()
    (repo / CLAUDE_SETTINGS).write_text('{"hooks": {}}\n')
    git(repo, "add", CLAUDE_SETTINGS)
    git(repo, "commit", "-q", "-m", "the project's own claude settings")
    worktree = repo.parent / "w"
    git(repo, "worktree", "add", "-q", "--detach", str(worktree))
    logged: list[str] = []
    store = open_store(repo, clock=SystemClock())
    Confinement(store, Policy.from_effective(effective({"version": 1})), {}, repo, logged.append).guard(
        worktree, "claude"
    )
    assert (worktree / CLAUDE_SETTINGS).read_text() == '{"hooks": {}}\n'
    assert len(logged) == 1 and "tracks .claude/settings.local.json" in logged[0]
