"""Shell-string hosts: free text never reaches ``/bin/sh``, and every substituted value is one shell-quoted word.

A ``shell = true`` host's argv is one string for ``/bin/sh -c``; a ``{prompt}`` in it would run the ``$(...)`` and
backticks of a task title the coordinator chose, so the policy refuses it. Paths and ids are substituted
``shlex.quote``-d, so a worktree whose path holds a space and a quote still works. List argvs are unchanged: each
placeholder fills one element verbatim.
"""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from git_agentops.canonical import canonical_bytes
from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.private import write_private
from git_agentops.hosts.launch import HostSpec, Launch, command_for
from git_agentops.model.policy import effective
from git_agentops.policy.cache import cache_key
from git_agentops.policy.load import _quoted_at, check_text, policy_from_bytes
from git_agentops.protocol import mailbox

from ..conftest import make_repo
from ..helpers import simple_child
from ..runkit import children_settled, cli, project, recipe, start, stop, supervisor_log, wait_for

SHELL_PROMPT = 'version = 1\n[hosts.sh]\nkind = "command"\nshell = true\nargv = "my-agent --message {prompt}"\n'


def test_prompt_in_a_shell_string_is_refused_naming_the_json_path_and_the_alternatives() -> None:
    doc, problems = check_text(SHELL_PROMPT)
    assert doc is None
    [problem] = problems
    assert (problem.code, problem.json_path, problem.line) == ("POLICY_VALUE_INVALID", "$.hosts.sh.argv", 5)
    assert "{prompt_file}" in problem.message and "$AGENTOPS_PROMPT" in problem.message
    with pytest.raises(AgentOpsError) as caught:
        policy_from_bytes(SHELL_PROMPT.encode())
    assert caught.value.code == "POLICY_VALUE_INVALID" and "$.hosts.sh.argv" in caught.value.message


def test_policy_check_on_the_command_line_refuses_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", files={".agentops/policy.toml": SHELL_PROMPT})
    done = cli(repo, "agentops-policy", "check")
    assert done.returncode == 1, done.stdout + done.stderr  # policy check: problems found
    out = done.stdout + done.stderr
    assert "POLICY_VALUE_INVALID" in out and "$.hosts.sh.argv" in out and "{prompt_file}" in out


@pytest.mark.parametrize(
    ("host", "code", "path", "says"),
    [
        ('shell = true\nargv = "agent --file \\"{prompt_file}\\""', "POLICY_VALUE_INVALID", "argv", "inside quotes"),
        ("shell = true\nargv = \"agent '{worktree}'\"", "POLICY_VALUE_INVALID", "argv", "write it bare"),
        (
            'shell = true\nargv = "agent {prompt_file}"\nresume_argv = "agent --resume {session} {prompt}"',
            "POLICY_VALUE_INVALID",
            "resume_argv",
            "free text",
        ),
        (
            'argv = ["agent", "{prompt}"]\nresume_argv = "agent --resume {session}"',
            "POLICY_SHELL_REQUIRED",
            "resume_argv",
            "only a shell can split",
        ),
    ],
)
def test_other_shell_string_mistakes_are_refused(host: str, code: str, path: str, says: str) -> None:
    _doc, problems = check_text(f'version = 1\n[hosts.x]\nkind = "command"\n{host}\n')
    assert [(p.code, p.json_path) for p in problems] == [(code, f"$.hosts.x.{path}")]
    assert says in problems[0].message


def test_list_argv_and_bare_placeholders_in_shell_strings_pass() -> None:
    for host in (
        'argv = ["agent", "--message", "{prompt}", "--dir={worktree}"]',
        'shell = true\nargv = "cd {worktree} && agent --file={prompt_file} \\"$AGENTOPS_PROMPT\\" 2>&1"',
    ):
        doc, problems = check_text(f'version = 1\n[hosts.x]\nkind = "command"\n{host}\n')
        assert problems == [] and doc is not None


def test_quoting_context_of_a_shell_string() -> None:
    cases = {"a '{x}'": True, 'a "{x}"': True, "a {x}": False, "a 'q' {x}": False, 'a "it\'s" {x}': False}
    cases |= {"a \\{x}": True, "a '\\' {x}": False, 'a "\\"" {x}': False}
    assert {text: _quoted_at(text, text.index("{x}")) for text in cases} == cases


def test_a_cached_entry_from_before_the_rule_does_not_bypass_it(tmp_path: Path) -> None:
    data = SHELL_PROMPT.encode()
    write_private(tmp_path, f"{cache_key(data)}.json", canonical_bytes(effective(tomllib.loads(SHELL_PROMPT))))
    with pytest.raises(AgentOpsError) as caught:
        policy_from_bytes(data, cache_dir=tmp_path)
    assert caught.value.code == "POLICY_VALUE_INVALID"


def _launch(worktree: Path, session: str | None = None) -> Launch:
    worktree.mkdir(parents=True, exist_ok=True)
    prompt = mailbox.write_prompt(worktree, "a prompt with $(touch pwned) and `touch pwned2`")
    return Launch(
        worktree=worktree,
        mailbox=worktree / mailbox.MAILBOX,
        prompt_file=prompt,
        log_file=worktree / "log",
        run_id="run-1",
        worker_id="w",
        generation=1,
        recipe=None,
        git_common_dir=worktree / ".git",
        session=session,
    )


def test_values_substituted_into_a_shell_string_are_shell_quoted(tmp_path: Path) -> None:
    worktree = tmp_path / 'it\'s a "dir" $(touch pwned) `x`'
    launch = _launch(worktree, session="s-1; touch pwned3")
    spec = HostSpec("sh", "command", "printf '%s\\n' {worktree} {prompt_file} {session}", True, {})
    resumed = HostSpec("sh", "command", "", True, {}, resume_argv="printf '%s\\n' {session}")
    [command], shell = command_for(spec, launch)
    assert shell
    done = subprocess.run(["/bin/sh", "-c", command], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == [str(worktree), str(launch.prompt_file), "s-1; touch pwned3"]
    [resume], _ = command_for(resumed, launch)
    assert subprocess.run(["/bin/sh", "-c", resume], capture_output=True, text=True, check=True).stdout == (
        "s-1; touch pwned3\n"
    )
    assert not list(tmp_path.glob("pwned*"))
    listed = HostSpec("l", "command", ("agent", "{worktree}", "--session={session}"), False, {})
    assert command_for(listed, launch) == (["agent", str(worktree), "--session=s-1; touch pwned3"], False)


SHELL_HOST = """
[hosts.sh]
kind = "command"
shell = true
argv = "test -f {prompt_file} && test -d {worktree} && cd {worktree} && exec python3 -m git_agentops.cli.agent"
"""


@pytest.mark.slow
def test_a_run_through_a_shell_host_in_a_path_with_a_quote_and_a_space(tmp_path: Path) -> None:
    root = tmp_path / "it's a dir"
    repo = project(root, extra_policy=SHELL_HOST, run_options='default_host = "sh"')
    run_id = start(repo, recipe(tmp_path, simple_child("a", "src/a.txt")))
    try:
        doc = wait_for(repo, run_id, children_settled, timeout=120)
        assert [t["status"] for t in doc["tasks"] if t["parent"]] == ["delivered"], supervisor_log(repo, run_id)
        assert all("it's a dir" in w["worktree"] for w in doc["workers"])
    finally:
        stop(repo, run_id)
    logs = "".join(p.read_text() for p in (repo / ".git" / "worktrees").glob("*/agentops/host-*.log"))
    assert "(sh, fresh session)" in logs and "'" in logs
