"""Agent hosts: default argv per kind, placeholders, what a host's output says about itself, the log header."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from git_agentops.errors import AgentOpsError
from git_agentops.hosts.launch import (
    HostSpec,
    Launch,
    agent_environment,
    check_available,
    command_for,
    fill,
    fill_env_value,
    generation_output,
    header,
    host_spec,
)
from git_agentops.hosts.output import parse
from git_agentops.model.hosts import allowed_commands, claude_allowed_tools, default_argv, default_resume_argv
from git_agentops.model.policy import Policy, budget_amount, effective


def _policy(hosts: dict[str, object], commands: list[dict[str, object]] | None = None) -> Policy:
    doc = {"version": 1, "verify": {"commands": commands or [{"id": "t", "argv": ["make", "test"]}]}, "hosts": hosts}
    return Policy.from_effective(effective(doc))


def _launch(tmp_path: Path, prompt: str, **kwargs: object) -> Launch:
    prompt_file = tmp_path / "prompt.md"
    prompt_file.write_text(prompt, encoding="utf-8")
    values: dict[str, object] = {
        "worktree": tmp_path,
        "mailbox": tmp_path / ".agentops" / "mailbox",
        "prompt_file": prompt_file,
        "log_file": tmp_path / "host.log",
        "run_id": "run-1",
        "worker_id": "worker-1",
        "generation": 3,
        "recipe": None,
        "git_common_dir": tmp_path / ".git",
    }
    values.update(kwargs)
    return Launch(**values)  # type: ignore[arg-type]


def test_default_argv_grant_the_least_that_lets_an_agent_work() -> None:
    """Invariant: no default argv skips permissions or a sandbox; each pre-approves git on its branch, the toolkit and
    the tests. The one "dangerously" flag is Codex's hook-trust bypass, which runs the guard (headless Codex has no
    TUI to review hooks in, and skips unreviewed ones silently)."""
    for kind in ("claude", "codex", "opencode"):
        argv = default_argv(kind, [["make", "test"]])
        assert "{prompt}" in argv
        risky = [a for a in argv if "dangerously" in a or "bypass" in a or a == "danger-full-access"]
        assert risky == (["--dangerously-bypass-hook-trust"] if kind == "codex" else [])
    claude = default_argv("claude", [["make", "test"]])
    assert claude[:3] == ("claude", "-p", "{prompt}")  # the prompt right after -p: no variadic flag can swallow it
    tools = next(a for a in claude if a.startswith("--allowedTools="))
    for rule in (
        "Bash(git commit *)",
        "Bash(git agentops-request *)",
        "Bash(git agentops-verify *)",
        "Bash(make test *)",
    ):
        assert rule in tools
    assert "Bash(git push" not in tools and "Bash(git config" not in tools and "Bash(git reset" not in tools
    codex = default_argv("codex", [])
    assert codex[:2] == ("codex", "exec") and "--full-auto" not in codex
    assert codex[codex.index("--sandbox") + 1] == "workspace-write"
    assert codex[codex.index("--add-dir") + 1] == "{git_common_dir}"
    assert codex[codex.index("-c") + 1] == "allow_login_shell=false"  # a login profile would reset PATH
    assert "git push" not in allowed_commands([])
    assert claude_allowed_tools(["make check"]).endswith("Bash(make check *)")  # a shell string stays as typed


def test_resume_argv_per_kind() -> None:
    assert default_resume_argv("claude", ["claude", "-p", "{prompt}", "--verbose"]) == (
        "claude",
        "-p",
        "{prompt}",
        "--resume",
        "{session}",
        "--verbose",
    )
    codex = default_resume_argv("codex", list(default_argv("codex", [])))
    assert codex[-3:] == ("resume", "{session}", "{prompt}") and codex.index("--add-dir") < codex.index("resume")
    assert default_resume_argv("opencode", ["opencode", "run", "{prompt}"])[-2:] == ("--session", "{session}")
    assert default_resume_argv("command", ["my-agent", "{prompt}"]) == ()


def test_the_effective_policy_holds_the_argv_that_will_run() -> None:
    """What trust shows and hashes is what runs: the kind's default argv, resume argv and env are filled in."""
    policy = _policy({"claude": {"kind": "claude"}, "mine": {"kind": "command", "argv": ["my-agent", "{prompt_file}"]}})
    claude = host_spec(policy, "claude")
    assert claude.argv == default_argv("claude", [["make", "test"]]) and claude.resume and claude.resume_argv
    mine = host_spec(policy, "mine")
    assert mine.argv == ("my-agent", "{prompt_file}") and not mine.resume
    assert host_spec(policy, "scripted").kind == "scripted"
    with pytest.raises(AgentOpsError) as unknown:
        host_spec(policy, "nope")
    assert unknown.value.code == "RUN_HOST_UNKNOWN"
    no_resume = _policy({"claude": {"kind": "claude", "resume": False}})
    assert not host_spec(no_resume, "claude").resume


def test_placeholders_are_replaced_by_exact_name_and_the_prompt_verbatim(tmp_path: Path) -> None:
    """A prompt with quotes, $() and backticks reaches the agent as one argv element, exactly; nothing expands it."""
    prompt = 'Say "hi" $(touch pwned) `touch pwned2` {worktree} %s {0} \\n'
    spec = HostSpec("x", "command", ("agent", "--p={prompt}", "{prompt}", "{unknown}", "{git_common_dir}"), False, {})
    argv, shell = command_for(spec, _launch(tmp_path, prompt))
    assert not shell
    assert argv == ["agent", "--p=" + prompt, prompt, "{unknown}", str(tmp_path / ".git")]
    assert not (tmp_path / "pwned").exists()
    assert fill("{a}{b}{{a}}", {"a": "1"}) == "1{b}{1}"


def test_json_env_values_stay_valid_json_whatever_the_path(tmp_path: Path) -> None:
    weird = tmp_path / 'we"ird\\dir'
    value = fill_env_value(
        json.dumps({"allow": {"{git_common_dir}/**": "allow"}, "n": 1}), {"git_common_dir": str(weird)}
    )
    assert json.loads(value) == {"allow": {f"{weird}/**": "allow"}, "n": 1}
    assert fill_env_value("plain {worktree}", {"worktree": "/w"}) == "plain /w"
    spec = HostSpec("o", "opencode", ("opencode",), False, {"CONFIG": '{"dir": "{worktree}", "p": "{prompt}"}'})
    env = agent_environment({"PATH": "/bin", "AGENTOPS_FAULT": "x"}, spec, _launch(tmp_path, "the prompt"))
    assert json.loads(env["CONFIG"]) == {"dir": str(tmp_path), "p": "{prompt}"}  # free text never goes into env
    assert "AGENTOPS_FAULT" not in env and env["AGENTOPS_GENERATION"] == "3"


def test_an_agent_s_pwd_is_its_worktree_never_the_persons_checkout(tmp_path: Path) -> None:
    """Invariant: ``PWD`` names the worktree (opencode works in ``$PWD``, not its cwd: with the person's ``PWD`` it
    read and wrote the person's main checkout)."""
    spec = HostSpec("o", "opencode", ("opencode",), False, {})
    person = {"PATH": "/bin", "PWD": "/home/person/repo", "OLDPWD": "/home/person"}
    env = agent_environment(person, spec, _launch(tmp_path, "p"))
    assert env["PWD"] == str(tmp_path) and "OLDPWD" not in env


def test_resuming_uses_the_resume_argv_with_the_session(tmp_path: Path) -> None:
    spec = HostSpec(
        "c",
        "claude",
        ("claude", "-p", "{prompt}"),
        False,
        {},
        ("claude", "-p", "{prompt}", "--resume", "{session}"),
        True,
    )
    argv, _ = command_for(spec, _launch(tmp_path, "p", session="sess-1"))
    assert argv == ["claude", "-p", "p", "--resume", "sess-1"]
    assert command_for(spec, _launch(tmp_path, "p"))[0] == ["claude", "-p", "p"]


def test_the_log_header_names_the_argv_but_never_the_prompt(tmp_path: Path) -> None:
    secret_prompt = "a long prompt " * 50
    spec = HostSpec("c", "claude", ("claude", "-p", "{prompt}"), False, {})
    launch = _launch(tmp_path, secret_prompt)
    line = header(spec, launch, command_for(spec, launch)[0])
    assert line.startswith("=== generation 3 of worker-1") and secret_prompt not in line
    assert f"<prompt: {len(secret_prompt)} chars>" in line


def test_generation_output_is_what_the_last_generation_wrote(tmp_path: Path) -> None:
    log = tmp_path / "host.log"
    log.write_text("\n=== generation 1 of w: [...]\nold words\n\n=== generation 2 of w: [...]\nnew words\nlast line\n")
    assert generation_output(log, 2) == "new words\nlast line\n"
    assert "old words" in generation_output(log, 1)
    assert generation_output(tmp_path / "missing.log", 1) == ""


def test_a_missing_host_binary_is_refused_before_anything_runs(tmp_path: Path) -> None:
    spec = HostSpec("claude", "claude", ("claude-that-is-not-installed", "-p", "{prompt}"), False, {})
    with pytest.raises(AgentOpsError) as missing:
        check_available(spec, {"PATH": str(tmp_path)})
    assert missing.value.code == "RUN_HOST_FAILED" and "not on PATH" in missing.value.message
    check_available(HostSpec("scripted", "scripted", (), False, {}), {"PATH": ""})  # built in: always there


CLAUDE_STREAM = "\n".join(
    [
        "some text a CLI printed",
        json.dumps({"type": "system", "subtype": "init", "session_id": "11111111-2222"}),
        json.dumps(
            {
                "type": "assistant",
                "session_id": "11111111-2222",
                "message": {"usage": {"input_tokens": 100, "output_tokens": 7}},
            }
        ),
        json.dumps(
            {
                "type": "result",
                "session_id": "11111111-2222",
                "total_cost_usd": 0.0125,
                "result": "done",
                "usage": {"input_tokens": 120, "output_tokens": 30, "cache_read_input_tokens": 5},
            }
        ),
    ]
)


def test_claude_output_gives_session_usage_and_cost() -> None:
    report = parse("claude", CLAUDE_STREAM)
    assert report is not None and report.parsed
    assert (report.session, report.input_tokens, report.output_tokens, report.cost_usd) == (
        "11111111-2222",
        125,
        30,
        0.0125,
    )
    stopped = parse("claude", "\n".join(CLAUDE_STREAM.splitlines()[:3]))  # killed at its handoff: no result event
    assert stopped is not None and (stopped.session, stopped.input_tokens, stopped.cost_usd) == (
        "11111111-2222",
        100,
        None,
    )


def test_codex_and_opencode_output() -> None:
    codex = parse(
        "codex",
        "\n".join(
            json.dumps(e)
            for e in (
                {"type": "thread.started", "thread_id": "th-1"},
                {"type": "turn.completed", "usage": {"input_tokens": 10, "cached_input_tokens": 2, "output_tokens": 3}},
                {"type": "turn.completed", "usage": {"input_tokens": 5, "output_tokens": 1}},
            )
        ),
    )
    assert codex is not None and (codex.session, codex.input_tokens, codex.output_tokens, codex.cost_usd) == (
        "th-1",
        15,
        4,
        None,
    )
    opencode = parse(
        "opencode",
        json.dumps(
            {
                "type": "step_finish",
                "sessionID": "ses_abc",
                "part": {
                    "cost": 0.5,
                    "tokens": {"input": 9, "output": 4, "reasoning": 1, "cache": {"read": 1, "write": 0}},
                },
            }
        ),
    )
    assert opencode is not None and (
        opencode.session,
        opencode.input_tokens,
        opencode.output_tokens,
        opencode.cost_usd,
    ) == (
        "ses_abc",
        10,
        5,
        0.5,
    )


@pytest.mark.parametrize("kind", ["claude", "codex", "opencode"])
def test_a_host_that_prints_no_json_reports_nothing_and_fails_nothing(kind: str) -> None:
    report = parse(kind, "Error: something went wrong\nplain text only\n{not json\n[1, 2]\n")
    assert report is not None and not report.parsed and not report.reported_usage and report.session is None


def test_hostile_values_in_host_output_are_ignored() -> None:
    report = parse(
        "claude",
        json.dumps(
            {
                "type": "result",
                "session_id": "../../etc/passwd; rm -rf",
                "total_cost_usd": -5,
                "usage": {"input_tokens": "9"},
            }
        ),
    )
    assert report is not None and report.session is None and report.cost_usd is None and report.input_tokens == 0
    assert parse("command", CLAUDE_STREAM) is None and parse("scripted", "") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30m", (1800, 0.0, 0)),
        ("$2.50", (0, 2.5, 0)),
        ("1.5usd", (0, 1.5, 0)),
        ("50k tokens", (0, 0.0, 50000)),
        ("7 tokens", (0, 0.0, 7)),
    ],
)
def test_budget_amounts(text: str, expected: tuple[int, float, int]) -> None:
    assert budget_amount(text) == expected


@pytest.mark.parametrize("text", ["", "2.5", "ten minutes", "$-1", "5 apples", "30m $2"])
def test_bad_budget_amounts_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        budget_amount(text)


# -- the agent's environment: the person's, scrubbed of credentials ----------------------------------------------

GITHUB = "ghp_" + "Z" * 36
PERSON = {
    "PATH": "/usr/bin",
    "HOME": "/home/me",
    "GIT_AUTHOR_NAME": "Me Myself",
    "EDITOR": "vim",
    "GITHUB_TOKEN": GITHUB,
    "MY_SERVICE_PASSWORD": "correct horse battery",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "LEAKY": f"x={GITHUB}",  # no credential name, a secret value
    "ANTHROPIC_API_KEY": "sk-ant-" + "a" * 40,
    "ANTHROPIC_BASE_URL": "https://proxy.example",
    "OPENAI_API_KEY": "sk-" + "B" * 40,
    "AGENTOPS_FAULT": "x",
}


def test_agents_never_get_the_persons_credentials(tmp_path: Path) -> None:
    spec = HostSpec("c", "command", ("agent",), False, {})
    env = agent_environment(PERSON, spec, _launch(tmp_path, "p"))
    for name in ("GITHUB_TOKEN", "MY_SERVICE_PASSWORD", "AWS_SECRET_ACCESS_KEY", "LEAKY", "ANTHROPIC_API_KEY"):
        assert name not in env
    assert GITHUB not in json.dumps(env) and "correct horse" not in json.dumps(env)
    assert env["HOME"] == "/home/me" and env["GIT_AUTHOR_NAME"] == "Me Myself" and env["EDITOR"] == "vim"
    assert env["ANTHROPIC_BASE_URL"] == "https://proxy.example" and "AGENTOPS_FAULT" not in env


def test_pass_env_carries_exactly_the_named_credentials(tmp_path: Path) -> None:
    claude = HostSpec("c", "claude", ("claude",), False, {})
    launch = _launch(tmp_path, "p")
    by_default = agent_environment(PERSON, claude, launch)  # the kind's own: what it needs to reach its model
    assert by_default["ANTHROPIC_API_KEY"] == PERSON["ANTHROPIC_API_KEY"] and "OPENAI_API_KEY" not in by_default
    named = agent_environment(PERSON, claude, launch, pass_env=["GITHUB_TOKEN", "AGENTOPS_FAULT", "NOT_SET"])
    passed = {k for k in PERSON if k in named and PERSON[k] == named[k]}
    assert passed == {"HOME", "GIT_AUTHOR_NAME", "EDITOR", "ANTHROPIC_BASE_URL", "GITHUB_TOKEN"}  # PATH: ours first
    assert "NOT_SET" not in named and "AGENTOPS_FAULT" not in named  # nothing of the supervisor's, ever
    assert "ANTHROPIC_API_KEY" not in agent_environment(PERSON, claude, launch, pass_env=())


def test_a_hosts_own_env_is_kept_as_written(tmp_path: Path) -> None:
    spec = HostSpec("c", "command", ("agent",), False, {"SERVICE_TOKEN": "written-in-the-policy"})
    assert agent_environment(PERSON, spec, _launch(tmp_path, "p"))["SERVICE_TOKEN"] == "written-in-the-policy"


def test_pass_env_defaults_per_kind_are_in_the_effective_policy_and_the_starter(tmp_path: Path) -> None:
    from git_agentops.hosts.launch import passed_variables
    from git_agentops.policy.starter import AgentCli, starter_policy

    policy = _policy({"c": {"kind": "claude"}, "x": {"kind": "codex"}, "n": {"kind": "command", "argv": ["a"]}})
    hosts = policy.doc["hosts"]
    assert hosts["c"]["pass_env"] == ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"]
    assert hosts["x"]["pass_env"] == ["OPENAI_API_KEY", "CODEX_API_KEY"] and hosts["n"]["pass_env"] == []
    assert passed_variables(policy, "x") == ("OPENAI_API_KEY", "CODEX_API_KEY")
    assert passed_variables(policy, "scripted") == ()
    own = _policy({"c": {"kind": "claude", "pass_env": ["ANTHROPIC_API_KEY"]}})
    assert passed_variables(own, "c") == ("ANTHROPIC_API_KEY",) and own.config_hash != policy.config_hash
    agents = [AgentCli("claude", "/bin/claude", "1"), AgentCli("opencode", "/bin/opencode", "1")]
    doc = starter_policy(tmp_path, target="main", agents=agents)
    assert doc["hosts"]["claude"]["pass_env"] == hosts["c"]["pass_env"]
    assert "OPENAI_API_KEY" in doc["hosts"]["opencode"]["pass_env"]


def test_pass_env_names_a_variable_never_one_of_the_supervisors() -> None:
    from git_agentops.policy.load import check_text

    base = 'version = 1\n[hosts.c]\nkind = "claude"\n'
    assert check_text(base + 'pass_env = ["ANTHROPIC_API_KEY"]\n')[1] == []
    for bad in ('["AGENTOPS_RUN_ID"]', '["A B"]', '["X", "X"]'):
        assert check_text(base + f"pass_env = {bad}\n")[1] != [], bad


def test_a_built_in_agent_is_a_host_by_its_kind_name_and_runs_our_module_with_our_interpreter(tmp_path: Path) -> None:
    """Invariant: what a built-in agent is comes from its kind's plugin (``builtin_module``, ``network``,
    ``follows_recipe``), asked through the registry: ``scripted`` is the one built-in, needs no ``[hosts]`` entry,
    has no network and no program to look for, and runs ``python -m git_agentops.cli.agent`` -- also when a policy
    host of kind ``scripted`` (a reviewer) has a name of its own. An unknown name lists the built-ins first."""
    import sys

    from git_agentops.model.hosts import builtin_hosts, kind_of

    assert [kind.name for kind in builtin_hosts()] == ["scripted"]
    scripted = kind_of("scripted")
    assert scripted.builtin_module == "git_agentops.cli.agent" and scripted.follows_recipe and not scripted.network
    assert not any(kind.builtin_module or kind.follows_recipe for kind in builtin_hosts() if kind is not scripted)
    policy = _policy({"reviewer-a": {"kind": "scripted"}})
    for name in ("scripted", "reviewer-a"):
        spec = host_spec(policy, name)
        assert spec.kind == "scripted" and spec.binary is None
        assert command_for(spec, _launch(tmp_path, "p")) == ([sys.executable, "-m", "git_agentops.cli.agent"], False)
    assert not host_spec(policy, "scripted").network and host_spec(policy, "reviewer-a").network
    with pytest.raises(AgentOpsError) as unknown:
        host_spec(policy, "nope")
    assert "(known: scripted, reviewer-a)" in unknown.value.message
