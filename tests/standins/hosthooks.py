"""The pre-tool hooks of the stand-in CLIs: Claude Code's and Codex's ``PreToolUse`` command hooks, opencode's plugins.

Why: the real CLIs run the hooks configured for the working directory before each tool call, and git-agentops
puts its agent guard there; a stand-in that skipped them would let whole-run tests pass with a guard that never
fires -- and one that read them where the real CLI does not would let a misplaced guard pass. Each emulation
raises :class:`fakemodel.Denied` for a blocked call: Claude Code and opencode report it to the model, which stops;
Codex hands the model the reason as the command's output, and the model goes on.

* Claude Code: the ``hooks.PreToolUse`` groups of ``~/.claude/settings.json``, ``.claude/settings.json`` and
  ``.claude/settings.local.json`` (every scope runs; identical commands once), each group's ``matcher`` tested
  against the tool name (exact, a regex such as ``Edit|Write``, ``*`` or empty for all); ``"disableAllHooks":
  true`` in the merged settings (a later scope's key wins) turns every one of them off. A command hook runs
  through the shell in the working directory with ``CLAUDE_PROJECT_DIR`` set and the PreToolUse JSON on stdin;
  exit 2 blocks with its stderr fed back to the model, exit 0 with ``permissionDecision: "deny"`` JSON blocks
  with its reason, any other status is a non-blocking error (the call goes on).
* Codex (0.171): the ``hooks.PreToolUse`` groups of ``hooks.json`` and of the ``[hooks]`` table of ``config.toml``
  in each config layer -- the user's ``$CODEX_HOME`` and, only for a trusted project, the project's ``.codex/`` --
  same shape as Claude Code's, identical commands once. The caller decides which layers count (trust, ``[features]
  hooks``, ``--dangerously-bypass-hook-trust``). A command hook runs through ``sh -c`` (not a login shell: it keeps
  ``PATH``) with ``{session_id, turn_id, transcript_path, cwd, hook_event_name, model, permission_mode, tool_name:
  "Bash", tool_input: {command}, tool_use_id}`` on stdin; exit 2 with a reason on stderr blocks (without one it is
  a failed hook, and the call goes on), so does exit 0 with ``permissionDecision: "deny"`` or ``decision:
  "block"``; anything else lets the call go on.
* opencode: plugins are JavaScript, which a Python stand-in does not run. It finds the ``.js``/``.ts`` files of
  ``.opencode/plugin(s)/`` (project, up to the repository top) and ``$XDG_CONFIG_HOME/opencode/plugin(s)/``, and
  emulates the one kind it knows -- a guard plugin declaring ``const GUARD_COMMAND = "<JSON string>"`` -- by
  doing what that plugin does in ``tool.execute.before``: pipe ``{"tool", "command", "cwd", "sessionID",
  "callID"}`` into the command and throw (block) with its stderr on exit 2. Other plugins are logged and ignored.

Standard library only, like the rest of the stand-ins.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import fakemodel

DEFAULT_TIMEOUT: Final = 60.0
CODEX_TIMEOUT: Final = 600.0
_GUARD: Final = re.compile(r"^const GUARD_COMMAND = (\".*\")\s*;?\s*$", re.M)

PreTool = Callable[[str, Mapping[str, Any]], None]
"""A pre-tool hook runner: (tool name, tool input); raises :class:`fakemodel.Denied` to block the call."""


@dataclass(frozen=True, slots=True)
class CommandHook:
    """One configured command hook and the tool-name matcher of its group."""

    matcher: str
    command: str
    timeout: float


def _matches(matcher: str, tool: str) -> bool:
    if matcher in ("", "*"):
        return True
    try:
        return re.fullmatch(matcher, tool) is not None
    except re.error:
        return matcher == tool


def claude_settings_files(cwd: Path) -> list[Path]:
    """Where Claude Code reads settings with hooks, user scope first."""
    home = Path(os.environ.get("HOME") or Path.home())
    return [
        home / ".claude" / "settings.json",
        cwd / ".claude" / "settings.json",
        cwd / ".claude" / "settings.local.json",
    ]


def claude_hooks(cwd: Path) -> list[CommandHook]:
    """Every ``PreToolUse`` command hook configured for ``cwd``; an identical command is listed once. None when
    the settings merged in scope order say ``"disableAllHooks": true``."""
    found: list[CommandHook] = []
    disabled = False
    for path in claude_settings_files(cwd):
        try:
            doc = json.loads(path.read_text("utf-8"))
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            fakemodel.log("claude", f"settings file {path} ignored: {exc}")
            continue
        if isinstance(doc, dict) and "disableAllHooks" in doc:
            disabled = doc["disableAllHooks"] is True
        hooks = doc.get("hooks") if isinstance(doc, dict) else None
        groups = hooks.get("PreToolUse") if isinstance(hooks, dict) else None
        for group in groups if isinstance(groups, list) else []:
            if not isinstance(group, dict):
                continue
            for handler in group.get("hooks") or []:
                if isinstance(handler, dict) and handler.get("type") == "command" and handler.get("command"):
                    hook = CommandHook(
                        str(group.get("matcher") or ""),
                        str(handler["command"]),
                        float(handler.get("timeout") or DEFAULT_TIMEOUT),
                    )
                    if all(h.command != hook.command for h in found):
                        found.append(hook)
    if disabled:
        fakemodel.log("claude", "disableAllHooks: no hook runs")
        return []
    return found


def claude_pre_tool(hooks: Sequence[CommandHook], *, cwd: Path, session_id: str, mode: str) -> PreTool:
    """The runner Claude Code's permission check calls first, for each tool call."""

    def run(tool: str, tool_input: Mapping[str, Any]) -> None:
        event = {
            "session_id": session_id,
            "transcript_path": str(cwd / ".claude-standin-transcript.jsonl"),
            "cwd": str(cwd),
            "permission_mode": mode,
            "hook_event_name": "PreToolUse",
            "tool_name": tool,
            "tool_input": dict(tool_input),
            "tool_use_id": f"toolu_{uuid.uuid4().hex[:24]}",
        }
        for hook in hooks:
            if not _matches(hook.matcher, tool):
                continue
            done = _run(hook.command, event, cwd=cwd, timeout=hook.timeout, env={"CLAUDE_PROJECT_DIR": str(cwd)})
            if done is None:
                fakemodel.log("claude", f"PreToolUse:{tool} hook timed out: {hook.command}")
                continue
            if done.returncode == 2:
                reason = done.stderr.strip() or "No stderr output"
                raise fakemodel.Denied(f"PreToolUse:{tool} hook error: [{hook.command}]: {reason}")
            if done.returncode != 0:
                fakemodel.log("claude", f"PreToolUse:{tool} hook error (non-blocking, exit {done.returncode})")
                continue
            decision = _decision(done.stdout)
            if decision is not None:
                raise fakemodel.Denied(decision)

    return run


def _decision(stdout: str) -> str | None:
    """The reason of a ``permissionDecision: "deny"`` in a hook's JSON output, else None."""
    try:
        doc = json.loads(stdout) if stdout.strip().startswith("{") else None
    except ValueError:
        return None
    output = doc.get("hookSpecificOutput") if isinstance(doc, dict) else None
    if isinstance(output, dict) and output.get("permissionDecision") == "deny":
        return str(output.get("permissionDecisionReason") or "denied by a PreToolUse hook")
    return None


def _groups(doc: Any) -> list[Any]:
    hooks = doc.get("hooks") if isinstance(doc, dict) else None
    groups = hooks.get("PreToolUse") if isinstance(hooks, dict) else None
    return groups if isinstance(groups, list) else []


def codex_hooks(layers: Sequence[tuple[Path, Mapping[str, Any]]]) -> list[CommandHook]:
    """Every ``PreToolUse`` command hook of the given config layers, lowest precedence first: each layer is its
    folder (``hooks.json`` there) and its parsed ``config.toml`` (the ``[hooks]`` table). An identical command is
    listed once."""
    found: list[CommandHook] = []
    for folder, config in layers:
        sources: list[Any] = []
        try:
            sources.append(json.loads((folder / "hooks.json").read_text("utf-8")))
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            fakemodel.log("codex", f"failed to parse hooks config {folder / 'hooks.json'}: {exc}")
        sources.append(dict(config))
        for group in (g for doc in sources for g in _groups(doc)):
            if not isinstance(group, dict):
                continue
            for handler in group.get("hooks") or []:
                if isinstance(handler, dict) and handler.get("type") == "command" and handler.get("command"):
                    timeout = handler.get("timeout", handler.get("timeout_sec")) or CODEX_TIMEOUT
                    hook = CommandHook(str(group.get("matcher") or ""), str(handler["command"]), float(timeout))
                    if all(h.command != hook.command for h in found):
                        found.append(hook)
    return found


def codex_pre_tool(
    hooks: Sequence[CommandHook], *, cwd: Path, session_id: str, model: str, permission_mode: str
) -> PreTool:
    """The runner Codex calls before each shell command; it raises :class:`fakemodel.Denied` with the hook's reason
    alone (Codex words what the model sees: ``Command blocked by PreToolUse hook: REASON. Command: COMMAND``)."""
    turn_id = str(uuid.uuid4())

    def run(tool: str, tool_input: Mapping[str, Any]) -> None:
        event = {
            "session_id": session_id,
            "turn_id": turn_id,
            "transcript_path": None,
            "cwd": str(cwd),
            "hook_event_name": "PreToolUse",
            "model": model,
            "permission_mode": permission_mode,
            "tool_name": tool,
            "tool_input": dict(tool_input),
            "tool_use_id": f"call_{uuid.uuid4().hex[:24]}",
        }
        reasons: list[str] = []
        for hook in hooks:  # Codex runs every matching hook, then blocks if any of them did
            if not _matches(hook.matcher, tool):
                continue
            done = _run(hook.command, event, cwd=cwd, timeout=hook.timeout, env={})
            if done is None:
                fakemodel.log("codex", f"hook timed out after {hook.timeout:g}s: {hook.command}")
            elif done.returncode == 2 and done.stderr.strip():
                reasons.append(done.stderr.strip())
            elif done.returncode == 2:
                fakemodel.log("codex", "PreToolUse hook exited with code 2 but did not write a blocking reason")
            elif done.returncode != 0:
                fakemodel.log("codex", f"hook exited with code {done.returncode}")
            elif (reason := _decision(done.stdout) or _legacy_block(done.stdout)) is not None:
                reasons.append(reason)
        if reasons:
            raise fakemodel.Denied(reasons[0])

    return run


def _legacy_block(stdout: str) -> str | None:
    """The reason of a ``{"decision": "block", "reason": ...}`` answer, else None."""
    try:
        doc = json.loads(stdout) if stdout.strip().startswith("{") else None
    except ValueError:
        return None
    if isinstance(doc, dict) and doc.get("decision") == "block":
        return str(doc.get("reason") or "blocked by a PreToolUse hook")
    return None


def _run(
    command: str, event: Mapping[str, Any], *, cwd: Path, timeout: float, env: Mapping[str, str]
) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            command,
            shell=True,
            cwd=cwd,
            input=json.dumps(event),
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **env},
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None


def opencode_plugin_files(cwd: Path) -> list[Path]:
    """The plugin files opencode loads for ``cwd``: global first, then the project's, outermost first."""
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path(os.environ.get("HOME") or Path.home()) / ".config")
    dirs = [Path(xdg) / "opencode"]
    project: list[Path] = []
    for directory in (cwd, *cwd.parents):
        project.append(directory / ".opencode")
        if (directory / ".git").exists():
            break
    dirs += reversed(project)
    return [
        path
        for base in dirs
        for sub in ("plugin", "plugins")
        for path in sorted((base / sub).glob("*"))
        if path.suffix in (".js", ".ts") and path.is_file()
    ]


def opencode_pre_tool(cwd: Path, *, session_id: str) -> PreTool:
    """The ``tool.execute.before`` hooks of the plugins opencode would load for ``cwd``, as far as emulated."""
    guards: list[str] = []
    for path in opencode_plugin_files(cwd):
        found = _GUARD.search(path.read_text("utf-8", errors="replace"))
        if found is None:
            fakemodel.log("opencode", f"plugin {path} loaded; the stand-in runs no JavaScript, its hooks are ignored")
            continue
        guards.append(str(json.loads(found.group(1))))

    def run(tool: str, tool_input: Mapping[str, Any]) -> None:
        command = tool_input.get("command")
        if tool != "bash" or not isinstance(command, str):
            return
        event = {
            "tool": tool,
            "command": command,
            "cwd": str(cwd),
            "sessionID": session_id,
            "callID": f"call_{uuid.uuid4().hex[:12]}",
        }
        for guard in guards:
            done = _run(guard, event, cwd=cwd, timeout=30.0, env={})
            if done is not None and done.returncode == 2:
                raise fakemodel.Denied(done.stderr.strip() or "refused by the git-agentops guard")

    return run
