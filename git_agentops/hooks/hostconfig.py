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
  needs. Untrusted hooks are skipped silently -- and Codex resolves a linked worktree to its main repository,
  so a worktree's ``.codex/`` is never read. So Codex's guard is not here: each agent gets its own ``CODEX_HOME``
  whose ``hooks.json`` is the user layer, read for any project (:mod:`git_agentops.model.hosts.codex`). The
  worktree only gets ``.codex/config.toml`` with hooks on, in case a later Codex reads it. The older ``notify``
  setting only
  reports a finished turn and cannot deny anything.
* **Gemini CLI 0.61** (checked against its source and runs; :mod:`git_agentops.model.hosts.gemini`): hooks in
  ``settings.json`` of each scope (user ``~/.gemini/``, workspace ``.gemini/``), shape ``{"hooks": {"BeforeTool":
  [{"matcher": "<regex on the tool name>", "hooks": [{"type": "command", "command": "...", "timeout":
  MILLISECONDS}]}]}}`` -- a hook that times out fails open, so the timeout is 30000, not 30. Stdin:
  ``session_id``, ``transcript_path``, ``cwd``, ``hook_event_name`` (``"BeforeTool"``), ``timestamp``,
  ``tool_name`` (``"run_shell_command"``), ``tool_input`` (``{"command", "description", "dir_path"?}``); exit 2
  blocks the call with stderr as the reason, in every approval mode. Hooks run only in a trusted folder, and
  ``--skip-trust`` trusts it after the settings were loaded, so the worktree's ``.gemini/settings.json`` is not
  read: the guard is in the user settings of the agent's private HOME (``GEMINI_CLI_HOME``); the worktree's copy
  (identical hooks run once) holds in case a later Gemini reads it, and ``.gemini/`` is cleared like ``.codex/``.
* **aider** has no hooks and runs a proposed shell command with ``/bin/sh`` (``$SHELL`` only with a TTY): it gets
  no guard; the sandbox is its only wall (:mod:`git_agentops.model.hosts.aider`).

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
are in the worktree's ``info/exclude`` (:data:`git_agentops.policy.excludes.EXCLUDES`): they never reach a commit.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ..errors import AgentOpsError
from ..gitstore.owned import OwnedTree
from ..model.hosts import registry
from ..model.hosts.base import TIMEOUT_SECONDS, guard_command, hook_settings
from ..model.hosts.claude import SETTINGS as CLAUDE_SETTINGS
from ..model.hosts.codex import PROJECT_CONFIG as CODEX_CONFIG
from ..model.hosts.opencode import PLUGIN as OPENCODE_PLUGIN
from ..model.hosts.opencode import plugin_source

__all__ = [
    "CLAUDE_SETTINGS",
    "CODEX_CONFIG",
    "OPENCODE_PLUGIN",
    "TIMEOUT_SECONDS",
    "Installed",
    "contents",
    "guard_command",
    "guard_file",
    "hook_entry",
    "plugin_source",
    "settings",
    "write_guard",
]

MARKER: Final = "agent-command --host"
"""Every guard command contains this."""


def guard_file(kind: str) -> str | None:
    """The file host ``kind``'s guard lives in, relative to the worktree: a project that tracks it keeps it, and
    that host gets no guard (None: the kind has no worktree guard)."""
    host = registry().get(kind)
    return None if host is None else host.guard_file


@dataclass(frozen=True, slots=True)
class Installed:
    """What :func:`write_guard` did: the files it wrote, and the agent's files it removed (relative paths)."""

    written: tuple[Path, ...] = ()
    removed: tuple[str, ...] = ()


def hook_entry(python: str) -> str:
    """``hook_command`` for an installed toolkit: ``PYTHON -I -m git_agentops.cli.hook``. ``-I`` keeps the worktree
    (the agent's own files) off ``sys.path``: a worktree of a repository holding a ``git_agentops`` package -- this
    toolkit's own -- must not replace the guard that checks it."""
    return shlex.join([python, "-I", "-m", "git_agentops.cli.hook"])


def settings(command: str) -> dict[str, object]:
    """Our one ``PreToolUse`` group calling ``command``, as Claude Code and Codex (``hooks.json``) both take it."""
    return hook_settings(command)


def contents(kind: str, hook_command: str) -> dict[str, bytes]:
    """Every worktree file of host ``kind``'s guard and its whole content (its kind module says which)."""
    host = registry().get(kind)
    return {} if host is None else host.guard_files(hook_command)


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
        host = registry().get(kind)
        for rel in host.cleared if host else ():
            tree.prune(rel, keep=frozenset(ours))
        sealed = host.sealed if host else None
        if sealed is not None and not tracked(sealed):
            tree.seal(sealed)
    except OSError as exc:
        raise AgentOpsError(
            "HOOK_GUARD_UNWRITABLE", f"cannot write the {kind} guard into {worktree}: {exc.strerror or exc}"
        ) from exc
    return Installed(written, tuple(tree.removed))
