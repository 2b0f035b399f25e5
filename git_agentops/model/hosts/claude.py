"""Claude Code (``@anthropic-ai/claude-code``), run one-shot as ``claude -p PROMPT``.

``--permission-mode acceptEdits`` accepts file edits in the working directory; Bash is denied unless an
``--allowedTools`` rule matches, so the rules name the git subcommands, the toolkit's commands and each verification
command (the ``--allowedTools=...`` form, because the variadic flag would otherwise swallow what follows). Claude
Code 2.x has no ``Glob``, ``Grep`` or ``LS`` tools (its Read, Edit and Write cover files; search is Bash), so no rule
names them. ``--output-format stream-json --verbose`` streams JSON lines: the session id first, ``usage`` on every
``assistant`` event and ``total_cost_usd`` only in the final ``result`` -- a generation stopped before its result
has its tokens counted and its cost marked partial. Resuming adds ``--resume SESSION``.

The guard is a ``PreToolUse`` hook (matcher ``Bash``) in ``.claude/settings.local.json`` of the worktree; the
person's ``~/.claude/settings.json`` reaches the agent's private HOME without ``hooks``, ``disableAllHooks`` and
``permissions`` (its ``env``, ``model`` and ``apiKeyHelper`` are what the agent needs to reach its model).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from .base import (
    HomeContext,
    HostKind,
    HostReport,
    VerifyArgvs,
    after_prompt,
    allowed_commands,
    as_dict,
    count,
    dollars,
    guard_command,
    hook_settings,
    json_bytes,
    json_object,
    session_id,
)

SETTINGS: Final = ".claude/settings.local.json"
DROPPED: Final = ("hooks", "disableAllHooks", "permissions", "enabledPlugins", "extraKnownMarketplaces")
"""Keys of the person's ``~/.claude/settings.json`` an agent never gets: its own hooks and permissions could
weaken the guard (``disableAllHooks``) or widen what runs without it."""


def allowed_tools(verify_argvs: VerifyArgvs) -> str:
    """The ``--allowedTools`` value: file tools plus one ``Bash(<prefix> *)`` rule per allowed command (a rule
    ending in `` *`` also matches the bare prefix)."""
    rules = ["Read", "Edit", "Write"]
    rules += [f"Bash({command} *)" for command in allowed_commands(verify_argvs)]
    return ",".join(rules)


def _tokens_in(usage: dict[str, Any]) -> int:
    return (
        count(usage.get("input_tokens"))
        + count(usage.get("cache_creation_input_tokens"))
        + count(usage.get("cache_read_input_tokens"))
    )


class Claude(HostKind):
    name = "claude"
    binary = "claude"
    order = 10
    writable = ("~/.claude", "~/.claude.json", "~/.cache")
    pass_env = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
    home_files = ("~/.claude/.credentials.json", "~/.claude.json")
    guard_file = SETTINGS
    cleared = (".claude/settings.json",)
    home_settings = (".claude/settings.json", ".claude/settings.local.json")

    def default_argv(self, verify_argvs: VerifyArgvs) -> tuple[str, ...]:
        return (
            "claude",
            "-p",
            "{prompt}",
            "--output-format",
            "stream-json",
            "--verbose",
            "--permission-mode",
            "acceptEdits",
            f"--allowedTools={allowed_tools(verify_argvs)}",
        )

    def resume_argv(self, argv: Sequence[str]) -> tuple[str, ...]:
        return after_prompt(argv, "--resume", "{session}")

    def guard_files(self, hook_command: str) -> dict[str, bytes]:
        # the local scope outranks the project and user ones key by key: a "disableAllHooks": true left below it
        # (in the agent's own HOME, say) does not switch the guard off
        doc = {"disableAllHooks": False, **hook_settings(guard_command(hook_command, self.name))}
        return {SETTINGS: json_bytes(doc)}

    def home_config(self, ctx: HomeContext) -> dict[str, bytes]:
        doc = json_object(ctx.read(f"{ctx.person_path('CLAUDE_CONFIG_DIR', '.claude')}/settings.json"))
        if not doc:
            return {}
        kept = {key: value for key, value in doc.items() if key not in DROPPED}
        return {".claude/settings.json": json_bytes(kept)} if kept else {}

    def parse(self, events: list[dict[str, Any]]) -> HostReport:
        session = next((s for e in events if (s := session_id(e.get("session_id")))), None)
        result = next((e for e in reversed(events) if e.get("type") == "result"), None)
        if result is not None:
            usage = as_dict(result.get("usage"))
            text = result.get("result")
            return HostReport(
                True,
                session_id(result.get("session_id")) or session,
                _tokens_in(usage),
                count(usage.get("output_tokens")),
                dollars(result.get("total_cost_usd")),
                text if isinstance(text, str) else None,
            )
        # stopped before its result: each message's usage (repeated on every content block of it) counted once
        by_message: dict[str, dict[str, Any]] = {}
        for index, event in enumerate(events):
            message = as_dict(event.get("message")) if event.get("type") == "assistant" else {}
            usage = as_dict(message.get("usage"))
            if usage:
                by_message[str(message.get("id") or index)] = usage
        tokens_in = sum(_tokens_in(u) for u in by_message.values())
        tokens_out = sum(count(u.get("output_tokens")) for u in by_message.values())
        return HostReport(bool(events), session, tokens_in, tokens_out, None, partial=bool(events))


KIND: Final = Claude()
