"""What each kind of agent host needs to run unattended: its argv, how to resume a session, what to pre-approve.

Every agent here runs one-shot: it gets a prompt, works, and ends its turn (exits). Headless CLIs cannot ask a
person for a permission, so each default argv grants, up front, the least that lets an agent do its job -- edit
files in its worktree, run the repository's verification commands, ``git add``/``git commit``/``git merge``, and
call ``git agentops-request`` and ``git agentops-verify`` -- and nothing it would need ``--dangerously-*`` for:

* **claude** -- ``claude -p PROMPT``: ``--permission-mode acceptEdits`` accepts file edits in the working
  directory; Bash is denied unless an ``--allowedTools`` rule matches, so the rules name the git subcommands, the
  toolkit's commands and each verification command (the ``--allowedTools=...`` form, because the variadic flag
  would otherwise swallow what follows). ``--output-format stream-json --verbose`` streams JSON lines: the session
  id comes first and the usage and cost at the end, and an agent stopped at its handoff still leaves its session.
  Resuming adds ``--resume SESSION``.
* **codex** -- ``codex exec``, which never asks for approvals, with ``--sandbox workspace-write`` (the default is
  read-only) and ``--add-dir GIT_COMMON_DIR``: a linked worktree's index, HEAD and objects live in the common git
  dir, outside the workspace, and without it every ``git commit`` fails. ``--json`` streams events with the thread
  id and token usage. Resuming is ``codex exec ... resume SESSION PROMPT`` (flags go between ``exec`` and
  ``resume``; the session keeps its sandbox).
* **opencode** -- ``opencode run PROMPT --format json``. In ``run`` a permission that would ``ask`` is rejected,
  so the permissions come in ``OPENCODE_CONFIG_CONTENT`` (merged over the user's config): edits allowed, bash
  allowed only for the same commands, ``external_directory`` allowed for the git common dir. Resuming adds
  ``--session SESSION``.
* **command** -- any argv the policy gives; **scripted** -- the built-in recipe player.

Each kind also names the variables of the person's environment it needs to reach its model (``pass_env``,
:data:`DEFAULT_PASS_ENV`): agents start with the person's environment *scrubbed* of credentials
(:mod:`git_agentops.verify.credentials`), and only the variables a host's ``pass_env`` names come through although
they look like credentials -- an API key, an auth token. ``git agentops-init`` writes them out, so ``policy trust``
shows which of the person's secrets each host is given.

Placeholders in an argv element or an ``env`` value: ``{prompt}``, ``{prompt_file}``, ``{mailbox}``,
``{worktree}``, ``{git_common_dir}``, ``{session}`` (resume only), and for reviewers ``{input}`` and
``{report}``. Only these exact names are replaced; any other brace is left as it is.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Sequence
from typing import Final

TOOLKIT_COMMANDS: Final = ("git agentops-request", "git agentops-verify")
GIT_SUBCOMMANDS: Final = ("status", "diff", "log", "show", "add", "commit", "merge", "rm", "mv", "restore", "ls-files")
"""The git subcommands an agent needs on its own branch; never push, reset, config, update-ref or notes."""

KINDS: Final = ("scripted", "command", "claude", "codex", "opencode")
MODEL_HOSTS: Final = ("claude", "codex", "opencode")


def _command_prefix(argv: Sequence[str] | str) -> str:
    """A verification command as the agent would type it (a shell string stays a string)."""
    return argv if isinstance(argv, str) else shlex.join(argv)


def allowed_commands(verify_argvs: Iterable[Sequence[str] | str]) -> list[str]:
    """The shell command prefixes an agent may run: git on its branch, the toolkit, the verification commands."""
    commands = [f"git {sub}" for sub in GIT_SUBCOMMANDS] + list(TOOLKIT_COMMANDS)
    for argv in verify_argvs:
        prefix = _command_prefix(argv)
        if prefix not in commands:
            commands.append(prefix)
    return commands


def claude_allowed_tools(verify_argvs: Iterable[Sequence[str] | str]) -> str:
    """The ``--allowedTools`` value: file tools plus one ``Bash(<prefix> *)`` rule per allowed command.

    A rule ending in `` *`` also matches the bare prefix, so ``Bash(git agentops-verify *)`` allows
    ``git agentops-verify`` itself.
    """
    rules = ["Read", "Edit", "Write", "Glob", "Grep", "LS"]
    rules += [f"Bash({command} *)" for command in allowed_commands(verify_argvs)]
    return ",".join(rules)


def opencode_config(verify_argvs: Iterable[Sequence[str] | str]) -> str:
    """``OPENCODE_CONFIG_CONTENT``: the permissions a headless ``opencode run`` needs (``ask`` would be rejected)."""
    bash = {"*": "deny"}
    for command in allowed_commands(verify_argvs):
        bash[command] = "allow"
        bash[f"{command} *"] = "allow"
    config = {
        "$schema": "https://opencode.ai/config.json",
        "permission": {
            "edit": "allow",
            "read": "allow",
            "bash": bash,
            "webfetch": "deny",
            "external_directory": {"*": "deny", "{git_common_dir}": "allow", "{git_common_dir}/**": "allow"},
        },
    }
    return json.dumps(config)  # insertion order: opencode lets the last matching rule win, so "*" comes first


def default_argv(kind: str, verify_argvs: Sequence[Sequence[str] | str]) -> tuple[str, ...]:
    """The argv a host of ``kind`` gets when the policy names none (``()`` for kinds without a default)."""
    if kind == "claude":
        return (
            "claude",
            "-p",
            "{prompt}",
            "--output-format",
            "stream-json",
            "--verbose",
            "--permission-mode",
            "acceptEdits",
            f"--allowedTools={claude_allowed_tools(verify_argvs)}",
        )
    if kind == "codex":
        return ("codex", "exec", "--sandbox", "workspace-write", "--add-dir", "{git_common_dir}", "--json", "{prompt}")
    if kind == "opencode":
        return ("opencode", "run", "{prompt}", "--format", "json")
    return ()


def default_resume_argv(kind: str, argv: Sequence[str]) -> tuple[str, ...]:
    """How to resume a session with the host's own ``argv`` (``()`` when the kind cannot resume)."""
    args = list(argv)
    if kind == "claude" and "{prompt}" in args:
        at = args.index("{prompt}") + 1
        return (*args[:at], "--resume", "{session}", *args[at:])
    if kind == "codex" and "{prompt}" in args and args[:2] == ["codex", "exec"]:
        without = [a for a in args if a != "{prompt}"]
        return (*without, "resume", "{session}", "{prompt}")
    if kind == "opencode" and "{prompt}" in args:
        return (*args, "--session", "{session}")
    return ()


def default_env(kind: str, verify_argvs: Sequence[Sequence[str] | str]) -> dict[str, str]:
    """Environment a host of ``kind`` needs besides the user's (opencode takes its permissions this way)."""
    if kind == "opencode":
        return {"OPENCODE_CONFIG_CONTENT": opencode_config(verify_argvs)}
    return {}


DEFAULT_WRITABLE: Final[dict[str, tuple[str, ...]]] = {
    "claude": ("~/.claude", "~/.claude.json", "~/.cache"),
    "codex": ("~/.codex", "~/.cache"),
    "opencode": ("~/.local/share/opencode", "~/.local/state/opencode", "~/.config/opencode", "~/.cache"),
    "command": ("~/.cache",),
    "scripted": (),
}
"""What each kind's agent writes outside its worktree, so the sandbox lets it: its session state, its config and
``~/.cache`` (pip, npm, the host's own). ``git agentops-init`` writes them out, so ``policy trust`` shows them."""


def default_writable(kind: str) -> tuple[str, ...]:
    """The paths (``~`` unexpanded) a host of ``kind`` writes outside its worktree."""
    return DEFAULT_WRITABLE.get(kind, ("~/.cache",))


DEFAULT_PASS_ENV: Final[dict[str, tuple[str, ...]]] = {
    "claude": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"),
    "codex": ("OPENAI_API_KEY", "CODEX_API_KEY"),
    "opencode": (
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_GENERATIVE_AI_API_KEY",
        "OPENROUTER_API_KEY",
    ),
    "command": (),
    "scripted": (),
}
"""The credential variables each kind's agent is given from the person's environment (``[hosts.<name>] pass_env``
when the policy names none): what its CLI reads to reach its model. Variables that do not look like credentials
(``ANTHROPIC_BASE_URL``, ``OPENAI_BASE_URL``) come through anyway and need no entry."""


def default_pass_env(kind: str) -> tuple[str, ...]:
    """The names of the person's credential variables a host of ``kind`` is given (none for unknown kinds)."""
    return DEFAULT_PASS_ENV.get(kind, ())


DEFAULT_HOME_FILES: Final[dict[str, tuple[str, ...]]] = {
    "claude": ("~/.claude/.credentials.json", "~/.claude.json"),
    "codex": ("~/.codex/auth.json",),
    "opencode": ("~/.local/share/opencode/auth.json",),
    "command": (),
    "scripted": (),
}
"""The person's files each kind's agent needs to authenticate, copied into its private HOME at every start
(``[hosts.<name>] home_files`` when the policy names none); the originals are never writable to an agent."""


def default_home_files(kind: str) -> tuple[str, ...]:
    """The person's files (``~`` unexpanded) a host of ``kind`` gets a copy of in its private HOME."""
    return DEFAULT_HOME_FILES.get(kind, ())
