"""opencode (``opencode-ai``), run one-shot as ``opencode run PROMPT --format json``.

In ``run`` a permission that would ``ask`` is rejected, so the permissions come in ``OPENCODE_CONFIG_CONTENT``
(merged over the user's config): edits allowed, bash allowed only for the git subcommands, the toolkit and the
verification commands, ``external_directory`` allowed for the git common dir. Resuming adds ``--session SESSION``.

The guard is a plugin, ``.opencode/plugins/agentops-guard.js`` in the worktree (https://opencode.ai/docs/plugins/,
opencode 1.x): ``tool.execute.before`` pipes each bash command into the guard and throws with its stderr on exit
2. Every other plugin and the project's config (which can load more plugins, add tools or set permissions) that
the project does not track are cleared before each generation. The person's ``~/.config/opencode/opencode.json``
reaches the agent's private HOME reduced to what reaches a model (providers, model choices, update settings).

**No npm install at every start.** opencode 1.x runs ``npm install @opencode-ai/plugin`` (64 MB from the registry)
in each config directory that has plugins -- the worktree's ``.opencode/`` and ``~/.config/opencode/`` -- unless a
``package-lock.json`` there names it and ``node_modules/`` exists. The agent's private HOME is reset at every
generation and each worker's worktree is new, so every start waited 10-20 s for that download (and one without
network would wait for nothing). Our guard imports only ``node:`` modules and needs none of it: both places get a
lock naming the SDK and an empty ``node_modules/`` (measured with 1.18.33: 9.7 s to 0.2 s from reading the project
config to starting). A project that tracks its own ``.opencode/package-lock.json`` keeps it, and installs.

**No work nobody sees.** Two things opencode does for its TUI cost a headless generation for nothing, so the config
turns them off (measured with 1.18.33 against the test suite's mock model, ``tests/hosts/test_realcli.py``'s two
opencode runs: 59.7 s of CPU to 49.1 s, and 6 model requests fewer out of 41):

* the session title (``agent.title.disable``): each new session sends its first prompt to the small model to name
  itself -- one extra model request per session that the person pays for, and that ``--format json`` never reports,
  so no run's usage ever counted it;
* the snapshots (``snapshot: false``): at every model step opencode ran ``git add``/``write-tree`` of the whole
  worktree into a shadow repository under ``~/.local/share/opencode/snapshot`` -- 20 git processes for a one-step
  session -- for the TUI's undo and its diff of a session, which no one reads in the agent's private HOME (the
  worker's commits are the record). The events we parse are the same without them (``step_finish`` only loses its
  ``snapshot`` hash).

Left as they are: the file watcher (``OPENCODE_EXPERIMENTAL_DISABLE_FILEWATCHER``: no difference measured, even on a
worktree of 2,000 directories), and the person's own ``autoupdate``, ``share`` and models.dev settings (their choice,
and the prices opencode charges a step with come from models.dev).

``--format json`` prints ``step_start``/``step_finish`` per model step; ``step_finish`` (tokens, cost) comes only
after the step's tools ran, so a generation stopped inside a tool call has a step without its usage (``partial``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from .base import (
    TIMEOUT_SECONDS,
    HomeContext,
    HostKind,
    HostReport,
    VerifyArgvs,
    allowed_commands,
    as_dict,
    count,
    dollars,
    guard_command,
    json_bytes,
    json_object,
    session_id,
)

PLUGIN: Final = ".opencode/plugins/agentops-guard.js"
NO_INSTALL: Final = {
    "package-lock.json": b'{"lockfileVersion": 3, "packages": {"": {"dependencies": {"@opencode-ai/plugin": "*"}}}}\n',
    "node_modules/.agentops": b"",
}
"""What keeps opencode from installing its plugin SDK in a config directory: a lock naming it, ``node_modules/``."""
KEPT: Final = (
    "$schema",
    "provider",
    "model",
    "small_model",
    "enabled_providers",
    "disabled_providers",
    "autoupdate",
    "share",
    "username",
)
"""Keys of the person's ``opencode.json`` an agent's opencode gets: how to reach a model; never ``plugin``,
``permission``, ``mcp``, ``agent`` or ``command``."""

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


def plugin_source(hook_command: str) -> str:
    """The plugin calling ``hook_command`` (embedded as a JSON string literal, ASCII-only, so valid JS too)."""
    command = json.dumps(guard_command(hook_command, "opencode"))
    return _PLUGIN.replace("@COMMAND@", command).replace("@TIMEOUT_MS@", str(TIMEOUT_SECONDS * 1000))


def config(verify_argvs: VerifyArgvs) -> str:
    """``OPENCODE_CONFIG_CONTENT``: the permissions a headless ``opencode run`` needs (``ask`` would be rejected),
    and no session title or snapshots (see the module docstring)."""
    bash = {"*": "deny"}
    for command in allowed_commands(verify_argvs):
        bash[command] = "allow"
        bash[f"{command} *"] = "allow"
    doc = {
        "$schema": "https://opencode.ai/config.json",
        "snapshot": False,
        "agent": {"title": {"disable": True}},
        "permission": {
            "edit": "allow",
            "read": "allow",
            "bash": bash,
            "webfetch": "deny",
            "external_directory": {"*": "deny", "{git_common_dir}": "allow", "{git_common_dir}/**": "allow"},
        },
    }
    return json.dumps(doc)  # insertion order: opencode lets the last matching rule win, so "*" comes first


class Opencode(HostKind):
    name = "opencode"
    binary = "opencode"
    order = 30
    writable = ("~/.local/share/opencode", "~/.local/state/opencode", "~/.config/opencode", "~/.cache")
    pass_env = (
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_GENERATIVE_AI_API_KEY",
        "OPENROUTER_API_KEY",
    )
    home_files = ("~/.local/share/opencode/auth.json",)
    guard_file = PLUGIN
    cleared = (
        ".opencode/plugins",
        ".opencode/plugin",
        "opencode.json",
        "opencode.jsonc",
        ".opencode/opencode.json",
        ".opencode/opencode.jsonc",
    )
    sealed = ".opencode/plugins"
    home_settings = (".config/opencode", ".opencode")

    def default_argv(self, verify_argvs: VerifyArgvs) -> tuple[str, ...]:
        del verify_argvs
        return ("opencode", "run", "{prompt}", "--format", "json")

    def resume_argv(self, argv: Sequence[str]) -> tuple[str, ...]:
        return (*argv, "--session", "{session}") if "{prompt}" in argv else ()

    def default_env(self, verify_argvs: VerifyArgvs) -> dict[str, str]:
        return {"OPENCODE_CONFIG_CONTENT": config(verify_argvs)}

    def guard_files(self, hook_command: str) -> dict[str, bytes]:
        return {PLUGIN: plugin_source(hook_command).encode(), **{f".opencode/{k}": v for k, v in NO_INSTALL.items()}}

    def home_config(self, ctx: HomeContext) -> dict[str, bytes]:
        no_install = {f".config/opencode/{k}": v for k, v in NO_INSTALL.items()}
        base = ctx.person_path("XDG_CONFIG_HOME", ".config")
        for name in ("opencode.json", "opencode.jsonc", "config.json"):
            doc = json_object(ctx.read(f"{base}/opencode/{name}"))
            if doc:
                kept = {key: value for key, value in doc.items() if key in KEPT}
                if kept:
                    return {".config/opencode/opencode.json": json_bytes(kept), **no_install}
        return no_install

    def parse(self, events: list[dict[str, Any]]) -> HostReport:
        session = next((s for e in events if (s := session_id(e.get("sessionID")))), None)
        tokens_in = tokens_out = 0
        cost: float | None = None
        text = ""
        steps = 0
        for event in events:
            part = as_dict(event.get("part"))
            kind = event.get("type")
            if kind == "step_start":
                steps += 1
            elif kind == "step_finish":
                steps -= 1
                tokens = as_dict(part.get("tokens"))
                cache = as_dict(tokens.get("cache"))
                tokens_in += count(tokens.get("input")) + count(cache.get("read")) + count(cache.get("write"))
                tokens_out += count(tokens.get("output")) + count(tokens.get("reasoning"))
                step_cost = dollars(part.get("cost"))
                if step_cost is not None:
                    cost = (cost or 0.0) + step_cost
            elif kind == "text" and isinstance(part.get("text"), str):
                text += part["text"]
        return HostReport(bool(events), session, tokens_in, tokens_out, cost, text or None, partial=steps > 0)


KIND: Final = Opencode()
