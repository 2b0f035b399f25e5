"""Google's Gemini CLI (``@google/gemini-cli``), run one-shot as ``gemini -p PROMPT --output-format stream-json``.

Checked against Gemini CLI 0.61.0 (``gemini --help``, its bundled source, and runs against a local model):

* **Permissions.** Headless, a tool call its policy engine would ask about is denied (the model gets "Tool execution
  denied by policy." and goes on). ``--approval-mode auto_edit`` accepts the file edits; shell commands are allowed
  by one ``--allowed-tools=run_shell_command(PREFIX)`` per git subcommand, toolkit command and verification command
  (a prefix rule: ``PREFIX`` alone or followed by a space; each part of a ``&&``/``;``/``|`` chain must match one; a
  redirection is asked about, hence denied) -- the least that lets an agent work, where ``--yolo`` would allow
  every command. The flag is deprecated for the policy engine's TOML files (``--policy FILE``; it still works in
  0.61 and prints a warning on stderr); it splits its values on commas, so a verification command holding a comma
  cannot be named and is left out (the agent cannot run it directly; ``git agentops-verify`` runs them all).
  Gemini also refuses headless edits of build files (``package.json``, ``pyproject.toml``, ``Makefile``,
  ``Cargo.toml``, ``go.mod``...: "Build File Protection") in every approval mode, ``--yolo`` included.
* **Trust.** Hooks run only in a trusted folder, and headless Gemini exits (55) in an untrusted one:
  ``--skip-trust`` trusts the worktree for the session. It takes effect after the settings were loaded, so the
  worktree's ``.gemini/settings.json`` is *not* read (observed: a ``"hooksConfig": {"enabled": false}`` there did
  not stop the guard), while ``GEMINI_CLI_TRUST_WORKSPACE=true`` in the environment would make it read (and let it
  turn the hooks off). The worktree's ``.gemini/policies/`` *is* read once trusted, and headless accepts new ones
  silently: everything in ``.gemini/`` that the project does not track is cleared before each generation.
* **The guard** is a ``BeforeTool`` hook (matcher on ``run_shell_command``) in the user settings,
  ``~/.gemini/settings.json`` of the agent's private HOME, which Gemini reads for any project; ``GEMINI_CLI_HOME``
  points Gemini there also when the agent keeps the person's HOME. Its ``timeout`` is in **milliseconds** (a hook
  that times out fails open: 30 means 30 ms). The same hook with ``hooksConfig.enabled`` is written to the
  worktree's ``.gemini/settings.json`` (workspace settings outrank user settings) in case Gemini reads it;
  identical hooks run once. The hook gets ``{session_id, transcript_path, cwd, hook_event_name: "BeforeTool",
  timestamp, tool_name: "run_shell_command", tool_input: {command, description, dir_path?}}``; exit 2 blocks the
  call and its stderr reaches the model ("Tool execution blocked: <stderr>"), also with ``--yolo``.
* **Settings.** The person's ``settings.json`` reaches the agent reduced to what reaches a model: ``security.auth``
  (``selectedType``: without it a run against ``GOOGLE_GEMINI_BASE_URL`` exits 41 "Invalid auth method selected."),
  ``model``, ``modelConfigs``, ``billing`` and ``privacy``; never ``hooks``, ``hooksConfig``, ``tools``,
  ``mcpServers``, ``policyPaths``, ``general.defaultApprovalMode`` or the rest of ``security`` (``folderTrust``,
  ``toolSandboxing``). Auto-update is turned off. What an agent could plant in its HOME that Gemini reads --
  user policies (which outrank ``--allowed-tools``), extensions (hooks, MCP servers), agents, skills, commands --
  is removed before each generation.
* **Its own sandbox** (a docker/podman container with ``--sandbox``/``tools.sandbox``/``GEMINI_SANDBOX``, or
  bubblewrap per tool with ``security.toolSandboxing``) is off by default and stays off: ours is the wall.
* **Output.** ``--output-format stream-json`` prints ``init`` (the session id), ``message`` (``role``, ``content``,
  assistant text as deltas), ``tool_use``/``tool_result`` and a final ``result`` whose ``stats`` hold the whole
  run's tokens (every model call, the router's too) -- and nothing before it: a generation stopped before its
  ``result`` reports no usage (``partial``). ``--resume SESSION`` continues a session (the same id; its ``stats``
  count only the new run). The CLI relaunches itself as a child node process whose parent ignores SIGINT, SIGTERM
  and SIGHUP: stop it by its process group (``GEMINI_CLI_NO_RELAUNCH=true`` keeps it one process).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from .base import (
    TIMEOUT_SECONDS,
    HomeContext,
    HostKind,
    HostReport,
    VerifyArgvs,
    after_prompt,
    allowed_commands,
    as_dict,
    count,
    guard_command,
    hook_settings,
    json_bytes,
    json_object,
    session_id,
)

SETTINGS: Final = ".gemini/settings.json"
SHELL_TOOL: Final = "run_shell_command"
MATCHER: Final = "^(run_shell_command|ShellTool)$"
"""The hook matcher, a regex on the tool name: the shell tool by its name and by the alias its policy engine
knows."""
KEPT: Final = ("model", "modelConfigs", "billing", "privacy")
"""Top-level keys of the person's ``settings.json`` an agent's Gemini gets whole (with ``security.auth``)."""
OURS: Final = {"general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False}}


def allowed_tools(verify_argvs: VerifyArgvs) -> list[str]:
    """One ``--allowed-tools=run_shell_command(PREFIX)`` per allowed command; a prefix holding a comma is left
    out (Gemini splits the flag's values on commas, which would cut it into rules for no tool)."""
    return [f"--allowed-tools={SHELL_TOOL}({c})" for c in allowed_commands(verify_argvs) if "," not in c]


def guard_settings(hook_command: str) -> dict[str, Any]:
    """The ``BeforeTool`` hook calling the guard (its timeout in milliseconds), with hooks switched on."""
    doc = hook_settings(
        guard_command(hook_command, "gemini"), event="BeforeTool", matcher=MATCHER, timeout=TIMEOUT_SECONDS * 1000
    )
    return {"hooksConfig": {"enabled": True}, **doc}


def _person_settings(doc: dict[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {key: doc[key] for key in KEPT if key in doc}
    auth = as_dict(as_dict(doc.get("security")).get("auth"))
    if auth:
        kept["security"] = {"auth": auth}
    return kept


class Gemini(HostKind):
    name = "gemini"
    binary = "gemini"
    order = 40
    writable = ("~/.gemini", "~/.cache")
    pass_env = ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_ACCESS_TOKEN")
    home_files = ("~/.gemini/oauth_creds.json", "~/.gemini/google_accounts.json", "~/.gemini/gemini-credentials.json")
    guard_file = SETTINGS
    guard_in_home = True
    cleared = (".gemini",)
    sealed = ".gemini"
    home_settings = (
        ".gemini/settings.json",
        ".gemini/policies",
        ".gemini/extensions",
        ".gemini/agents",
        ".gemini/skills",
        ".gemini/commands",
        ".gemini/trustedFolders.json",
    )

    def default_argv(self, verify_argvs: VerifyArgvs) -> tuple[str, ...]:
        return (
            "gemini",
            "-p",
            "{prompt}",
            "--output-format",
            "stream-json",
            "--skip-trust",
            "--approval-mode",
            "auto_edit",
            *allowed_tools(verify_argvs),
        )

    def resume_argv(self, argv: Sequence[str]) -> tuple[str, ...]:
        return after_prompt(argv, "--resume", "{session}")

    def guard_files(self, hook_command: str) -> dict[str, bytes]:
        return {SETTINGS: json_bytes(guard_settings(hook_command))}

    def home_config(self, ctx: HomeContext) -> dict[str, bytes]:
        base = ctx.environ.get("GEMINI_CLI_HOME", "")
        source = f"{(base if base.startswith('/') else ctx.person_home).rstrip('/')}/{SETTINGS}"
        person = _person_settings(json_object(ctx.read(source)) or {})
        return {SETTINGS: json_bytes({**person, **OURS, **guard_settings(ctx.hook_command)})}

    def config_env(self, home: str) -> dict[str, str]:
        return {"GEMINI_CLI_HOME": home}

    def parse(self, events: list[dict[str, Any]]) -> HostReport:
        session = next((s for e in events if e.get("type") == "init" and (s := session_id(e.get("session_id")))), None)
        result = next((e for e in reversed(events) if e.get("type") == "result"), None)
        text = ""
        for event in events:
            kind = event.get("type")
            if kind in ("tool_use", "tool_result") or (kind == "message" and event.get("role") == "user"):
                text = ""  # the final message is what the model said after its last tool call
            elif kind == "message" and event.get("role") == "assistant" and isinstance(event.get("content"), str):
                text += event["content"]
        if result is None:
            return HostReport(bool(events), session, result=text or None, partial=bool(events))
        stats = as_dict(result.get("stats"))
        tokens_in = count(stats.get("input_tokens"))
        tokens_out = count(stats.get("output_tokens"))
        # thinking tokens, billed as output, are only in total_tokens
        tokens_out += max(0, count(stats.get("total_tokens")) - tokens_in - tokens_out)
        return HostReport(True, session, tokens_in, tokens_out, None, text or None)


KIND: Final = Gemini()
