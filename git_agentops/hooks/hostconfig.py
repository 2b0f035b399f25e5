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

The guard's files are **owned whole** by the supervisor (:mod:`.owned`): before every generation each host's
files are written from scratch -- never merged with what is there, so an agent's ``"disableAllHooks": true``,
``permissions.allow: ["Bash(*)"]`` or ``[features] hooks = false`` does not outlive its generation -- and every
other place in the worktree that host reads settings or hooks from (:data:`CLEARED`) loses whatever the project
does not track: Claude Code's ``.claude/settings.json``; every other file of ``.codex/``; every other plugin of
``.opencode/plugins/`` and ``.opencode/plugin/``, and opencode's project config (``opencode.json(c)`` at the top
and in ``.opencode/``, which can load more plugins -- run after ours, one could rewrite a command ours let through
--, add tools or set permissions). What the project tracks is the project's and is left alone (its primary guard
file tracked: the host gets no guard, see :meth:`git_agentops.supervisor.confine.Confinement.guard`). Files are
written 0444, and ``.codex/`` and ``.opencode/plugins/`` sealed 0555 when they hold only ours; the agent runs as
the same user, so that is advisory (it may chmod them back and write): the rewrite at the next generation is what
holds. Nothing follows a symlink below the worktree (a ``.claude`` symlink cannot redirect the write). The files
are in the worktree's ``info/exclude`` (:data:`git_agentops.policy.starter.EXCLUDES`): they never reach a commit.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..errors import AgentOpsError
from .owned import OwnedTree

CLAUDE_SETTINGS: Final = ".claude/settings.local.json"
OPENCODE_PLUGIN: Final = ".opencode/plugins/agentops-guard.js"
CODEX_HOOKS: Final = ".codex/hooks.json"
CODEX_CONFIG: Final = ".codex/config.toml"
GUARD_FILES: Final = {"claude": CLAUDE_SETTINGS, "codex": CODEX_HOOKS, "opencode": OPENCODE_PLUGIN}
"""The file each host's guard lives in, relative to the worktree: a project that tracks it keeps it, and that host
gets no guard."""
OWNED: Final = {"claude": (CLAUDE_SETTINGS,), "codex": (CODEX_HOOKS, CODEX_CONFIG), "opencode": (OPENCODE_PLUGIN,)}
"""Every file written whole for each host (``info/exclude`` lists them); one the project tracks is not written."""
CLEARED: Final = {
    "claude": (".claude/settings.json",),
    "codex": (".codex",),
    "opencode": (
        ".opencode/plugins",
        ".opencode/plugin",
        "opencode.json",
        "opencode.jsonc",
        ".opencode/opencode.json",
        ".opencode/opencode.jsonc",
    ),
}
"""The other places in a worktree each host reads settings, hooks or plugins from: whatever there the project does
not track is removed (a directory: everything in it but our files)."""
SEALED: Final = {"codex": ".codex", "opencode": ".opencode/plugins"}
"""The directory holding only our files once cleared: made 0555, unless the project tracks something in it."""
TIMEOUT_SECONDS: Final = 30
MARKER: Final = "agent-command --host"
"""Every guard command contains this."""
CODEX_CONFIG_TEXT: Final = """\
# git-agentops: Codex's project configuration in this worker worktree, rewritten at each worker start.
[features]
hooks = true
"""


@dataclass(frozen=True, slots=True)
class Installed:
    """What :func:`write_guard` did: the files it wrote, and the agent's files it removed (relative paths)."""

    written: tuple[Path, ...] = ()
    removed: tuple[str, ...] = ()


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


def settings(command: str) -> dict[str, Any]:
    """Our one ``PreToolUse`` group calling ``command``, as Claude Code and Codex (``hooks.json``) both take it."""
    group = {"matcher": "Bash", "hooks": [{"type": "command", "command": command, "timeout": TIMEOUT_SECONDS}]}
    return {"hooks": {"PreToolUse": [group]}}


def contents(kind: str, hook_command: str) -> dict[str, bytes]:
    """Every file of host ``kind``'s guard and its whole content. Claude Code's settings also say
    ``"disableAllHooks": false``: the local scope outranks the project and user ones key by key, so a ``true``
    left below it (in the agent's own HOME, say) does not switch the guard off. Codex's ``hooks.json`` holds only
    ``hooks`` (its root takes ``description`` and ``hooks`` and Codex refuses anything else); its ``config.toml``
    keeps hooks on."""
    command = guard_command(hook_command, kind)
    if kind == "claude":
        doc = {"disableAllHooks": False, **settings(command)}
        return {CLAUDE_SETTINGS: (json.dumps(doc, indent=2) + "\n").encode()}
    if kind == "codex":
        hooks = json.dumps(settings(command), indent=2) + "\n"
        return {CODEX_HOOKS: hooks.encode(), CODEX_CONFIG: CODEX_CONFIG_TEXT.encode()}
    if kind == "opencode":
        return {OPENCODE_PLUGIN: plugin_source(hook_command).encode()}
    return {}


def _nothing_tracked(rel: str) -> bool:
    del rel
    return False


def write_guard(
    worktree: Path, kind: str, *, hook_command: str, tracked: Callable[[str], bool] = _nothing_tracked
) -> Installed:
    """Write host ``kind``'s guard configuration into ``worktree`` whole and remove what the agent left where that
    host reads settings (:data:`CLEARED`). ``tracked(rel)`` says whether the project tracks a path (a file, or a
    directory holding tracked files): such a path is neither written nor removed. Kinds without pre-tool hooks
    (``scripted``, ``command``) get nothing. ``PATH_SYMLINK`` / ``PATH_NOT_REGULAR`` when a path on the way is a
    symlink or not a directory and the project tracks it; ``HOOK_GUARD_UNWRITABLE`` when the filesystem refuses."""
    ours = {rel: data for rel, data in contents(kind, hook_command).items() if not tracked(rel)}
    if not ours:
        return Installed()
    tree = OwnedTree(worktree, tracked)
    try:
        written = tuple(tree.write(rel, data) for rel, data in ours.items())
        for rel in CLEARED.get(kind, ()):
            tree.prune(rel, keep=frozenset(ours))
        sealed = SEALED.get(kind)
        if sealed is not None and not tracked(sealed):
            tree.seal(sealed)
    except OSError as exc:
        raise AgentOpsError(
            "HOOK_GUARD_UNWRITABLE", f"cannot write the {kind} guard into {worktree}: {exc.strerror or exc}"
        ) from exc
    return Installed(written, tuple(tree.removed))
