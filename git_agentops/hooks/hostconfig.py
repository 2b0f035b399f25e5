"""Write each agent host's own pre-tool hook configuration into a worker worktree, calling the agent guard.

What the hosts offer, checked against their documentation (the contracts change often; re-check before relying
on a detail):

* **Claude Code** (https://code.claude.com/docs/en/hooks, formerly docs.anthropic.com/en/docs/claude-code/hooks):
  hooks live in ``~/.claude/settings.json``, ``.claude/settings.json`` (shared) and ``.claude/settings.local.json``
  (local, not committed); hooks of every scope run, identical commands once. Shape: ``{"hooks": {"PreToolUse":
  [{"matcher": "Bash", "hooks": [{"type": "command", "command": "...", "timeout": SECONDS}]}]}}``; the matcher is
  the tool name (exact, a regex such as ``Edit|Write``, or ``*``). The hook gets one JSON object on stdin:
  ``session_id``, ``transcript_path``, ``cwd``, ``permission_mode``, ``hook_event_name`` (``"PreToolUse"``),
  ``tool_name`` (``"Bash"``), ``tool_input`` (``{"command", "description", "timeout", "run_in_background"}``),
  ``tool_use_id``. Exit 0 lets the call go on; **exit 2 blocks it and stderr is fed back to Claude** ("Claude
  Code ignores stdout and any JSON in it"); any other status is a non-blocking error (so a crashed hook fails
  open). Instead of exit 2 a hook may exit 0 with ``{"hookSpecificOutput": {"hookEventName": "PreToolUse",
  "permissionDecision": "deny", "permissionDecisionReason": "..."}}`` on stdout; the two are mutually exclusive
  and we use exit 2 only. PreToolUse runs before the permission rules, in every permission mode, and project
  hooks run in ``claude -p`` without a trust dialog. ``UserPromptSubmit`` could also block a prompt holding a
  secret, but its exit 2 erases the prompt and shows the reason to the user only -- in a headless run the
  agent would just do nothing, and our prompts are written by the supervisor -- so it is not installed.
* **opencode 1.x** (https://opencode.ai/docs/plugins/): JavaScript/TypeScript files in ``.opencode/plugins/``
  (the loader also accepts ``.opencode/plugin/``) are loaded at startup; every export is called as a plugin
  function ``async ({project, client, $, directory, worktree}) => hooks``, so the file exports that one function
  and nothing else. ``"tool.execute.before": async (input, output)`` runs before each tool with ``input.tool``
  (``"bash"``), ``input.sessionID``, ``input.callID`` and ``output.args`` (``{command, description, timeout,
  workdir}`` for bash); **throwing an Error blocks the call** and its message becomes the tool's error. Our
  plugin pipes ``{"tool", "command", "cwd", "sessionID", "callID"}`` into the guard and throws with its stderr on
  exit 2. OpenCode 2 replaced this API (a default export ``Plugin.define({id, setup(ctx)})``,
  https://opencode.ai/v2/docs/build/plugins/migrate-v1; "V1 plugin implementations do not run in V2"); the
  plugin written here is for 1.x, as is our ``opencode run`` stand-in.
* **Codex CLI** (https://developers.openai.com/codex/hooks): hooks are on by default since 0.124 (``[features]
  hooks = false`` turns them off; ``codex_hooks`` was the old flag) and come from ``hooks.json`` or inline
  ``[hooks]`` next to each config layer: ``~/.codex/`` and ``<repo>/.codex/``. Same shape and contract as Claude
  Code: ``PreToolUse`` with matcher ``Bash`` (shell tools are reported as ``Bash``), stdin JSON with
  ``tool_name``, ``tool_input.command``, ``cwd``, ``turn_id``..., and exit 2 with a reason on stderr blocks the
  call (``permissionDecision: "deny"`` JSON too; codex-rs/hooks/src/events/pre_tool_use.rs). Two conditions,
  both outside the worktree, decide whether a project's ``.codex/hooks.json`` runs at all: the project must be
  trusted (``[projects."<path>"] trust_level = "trusted"`` in ``$CODEX_HOME/config.toml``, or ``codex exec
  --trust``, 0.169+), and each non-managed hook must be reviewed and trusted by its hash in the TUI's ``/hooks``
  -- or the run passes ``--dangerously-bypass-hook-trust`` (openai/codex#21768), which a headless ``codex exec``
  needs. Untrusted hooks are skipped silently. So we write ``.codex/hooks.json`` (PreToolUse, matcher ``Bash``),
  and it guards only a Codex launched with that flag in a trusted project. The older ``notify`` setting only
  reports a finished turn and cannot deny anything.

Every file is written through :func:`git_agentops.gitstore.private.write_private` (atomic, no symlink anywhere
below the worktree: a tracked ``.claude`` symlink cannot redirect the write), and the paths are returned so the
caller can list them in the worktree's ``info/exclude``: they never reach a commit.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any, Final

from ..errors import AgentOpsError
from ..gitstore.private import read_private, write_private

CLAUDE_SETTINGS: Final = ".claude/settings.local.json"
OPENCODE_PLUGIN: Final = ".opencode/plugins/agentops-guard.js"
CODEX_HOOKS: Final = ".codex/hooks.json"
GUARD_FILES: Final = {"claude": CLAUDE_SETTINGS, "codex": CODEX_HOOKS, "opencode": OPENCODE_PLUGIN}
"""The one file each host's guard lives in, relative to the worktree (``info/exclude`` lists them)."""
TIMEOUT_SECONDS: Final = 30
MARKER: Final = "agent-command --host"
"""Every guard command contains this; an old guard hook (any ``hook_command``) is recognised and replaced by it."""

_PLUGIN: Final = """\
// git-agentops guard for opencode: every bash command goes through `git agentops-hook agent-command` first.
// Written by git-agentops into this worker worktree (excluded from commits) and rewritten at each worker start.
import { spawnSync } from "node:child_process"

const GUARD_COMMAND = @COMMAND@

export const AgentopsGuard = async ({ directory, worktree }) => ({
  "tool.execute.before": async (input, output) => {
    if (input.tool !== "bash") return
    const args = (output && output.args) || {}
    if (typeof args.command !== "string") return
    const cwd = typeof args.workdir === "string" ? args.workdir : directory || worktree
    const done = spawnSync(GUARD_COMMAND, {
      shell: true,
      cwd: directory || worktree,
      encoding: "utf8",
      timeout: @TIMEOUT_MS@,
      input: JSON.stringify({
        tool: input.tool, command: args.command, cwd, sessionID: input.sessionID, callID: input.callID,
      }),
    })
    if (done.status === 2) throw new Error((done.stderr || "").trim() || "refused by the git-agentops guard")
  },
})
"""


def hook_entry(python: str) -> str:
    """``hook_command`` for an installed toolkit: ``PYTHON -I -m git_agentops.cli.hook``. ``-I`` keeps the worktree
    (the agent's own files) off ``sys.path``: a worktree of a repository holding a ``git_agentops`` package -- this
    toolkit's own -- must not replace the guard that checks it."""
    return shlex.join([python, "-I", "-m", "git_agentops.cli.hook"])


def guard_command(hook_command: str, kind: str) -> str:
    """The shell command a host runs: ``HOOK_COMMAND agent-command --host KIND``."""
    return f"{hook_command} agent-command --host {kind}"


def plugin_source(hook_command: str) -> str:
    """The opencode plugin calling ``hook_command`` (the command is embedded as a JSON string literal)."""
    command = json.dumps(guard_command(hook_command, "opencode"))  # ASCII-only, so also a valid JS literal
    return _PLUGIN.replace("@COMMAND@", command).replace("@TIMEOUT_MS@", str(TIMEOUT_SECONDS * 1000))


def _hook_group(command: str) -> dict[str, Any]:
    return {"matcher": "Bash", "hooks": [{"type": "command", "command": command, "timeout": TIMEOUT_SECONDS}]}


def merge_settings(existing: dict[str, Any], command: str) -> dict[str, Any]:
    """``existing`` Claude Code (or Codex ``hooks.json``) settings with our PreToolUse group in place of any older
    guard group; every other key, event and hook of the user is kept as it was. ``JSON_INVALID`` when ``hooks``
    or ``hooks.PreToolUse`` is not what the host expects (we would not know how to merge)."""
    hooks = existing.get("hooks", {})
    if not isinstance(hooks, dict) or not isinstance(hooks.get("PreToolUse", []), list):
        raise AgentOpsError("JSON_INVALID", "'hooks' must be an object whose 'PreToolUse' is a list of matcher groups")
    groups = []
    for group in hooks.get("PreToolUse", []):
        handlers = group.get("hooks") if isinstance(group, dict) else None
        if isinstance(handlers, list):
            kept = [h for h in handlers if not (isinstance(h, dict) and MARKER in str(h.get("command", "")))]
            if not kept and handlers:
                continue  # a group of ours only
            groups.append({**group, "hooks": kept})
        else:
            groups.append(group)
    groups.append(_hook_group(command))
    return {**existing, "hooks": {**hooks, "PreToolUse": groups}}


def _merge_json_file(worktree: Path, rel: str, command: str) -> Path:
    data = read_private(worktree, rel)
    try:
        existing = json.loads(data) if data and data.strip() else {}
    except ValueError as exc:
        raise AgentOpsError("JSON_INVALID", f"{worktree / rel} is not valid JSON ({exc}); fix or remove it") from exc
    if not isinstance(existing, dict):
        raise AgentOpsError("JSON_INVALID", f"{worktree / rel} must hold a JSON object")
    merged = merge_settings(existing, command)
    text = json.dumps(merged, indent=2) + "\n"
    if data != text.encode():
        write_private(worktree, rel, text.encode(), durable=False)
    return worktree / rel


def write_guard(worktree: Path, kind: str, *, hook_command: str) -> list[Path]:
    """Write host ``kind``'s guard configuration into ``worktree``; returns every path of it (also when it was
    already up to date), for ``info/exclude``. Kinds without pre-tool hooks (``scripted``, ``command``) get
    nothing. ``JSON_INVALID`` for an existing settings file we cannot merge into; ``PATH_SYMLINK`` /
    ``PATH_NOT_REGULAR`` when a path below the worktree is a symlink or not a file."""
    command = guard_command(hook_command, kind)
    if kind == "claude":
        return [_merge_json_file(worktree, CLAUDE_SETTINGS, command)]
    if kind == "codex":
        return [_merge_json_file(worktree, CODEX_HOOKS, command)]
    if kind != "opencode":
        return []
    source = plugin_source(hook_command).encode()
    if read_private(worktree, OPENCODE_PLUGIN) != source:
        write_private(worktree, OPENCODE_PLUGIN, source, durable=False)
    return [worktree / OPENCODE_PLUGIN]
