"""OpenAI Codex CLI (``@openai/codex``), run one-shot as ``codex exec``, which never asks for approvals.

Checked against Codex 0.171 (``codex exec --help``, https://developers.openai.com/codex/hooks) and its behaviour:

* **Its own sandbox cannot nest in ours.** ``--sandbox workspace-write`` runs every command under bubblewrap, which
  cannot start inside our sandbox (the nested user namespace's uid map is refused: ``bwrap: setting up uid map:
  Permission denied``), and its legacy Landlock mode refuses to run without bubblewrap. The policy keeps
  ``--sandbox workspace-write`` -- the wall when our sandbox is off, with ``--add-dir GIT_COMMON_DIR`` so ``git
  commit`` in a linked worktree can write the common git dir -- and inside our sandbox the launcher turns it to
  ``danger-full-access`` (:meth:`Codex.unnest`, logged in the host log): ours is then the wall, and Codex's would
  only break every command.
* **No login shell.** Codex runs commands with ``bash -lc`` by default, and a login profile resets ``PATH`` (``git:
  'agentops-request' is not a git command``): ``-c allow_login_shell=false``.
* **The guard where Codex reads it.** A linked worktree is resolved to its main repository, so a worktree's
  ``.codex/`` is never read; and project config is skipped unless the project is trusted. So each agent gets its own
  ``CODEX_HOME`` (its private HOME's ``.codex``, also when it keeps the person's HOME): ``hooks.json`` there is the
  user layer, read for any project, and ``--dangerously-bypass-hook-trust`` runs it without the TUI's hash review
  (non-managed hooks are otherwise skipped silently). ``config.toml`` there is the person's own (their model
  provider, model, profiles) without ``hooks``, ``notify``, ``projects``, sandbox and approval settings, plus
  ``[features] hooks = true`` and the worktree trusted. The worktree's ``.codex/config.toml`` is ours too (hooks on),
  in case a later Codex reads it.
* ``--json`` streams events with the thread id; usage comes only in ``turn.completed``: a turn stopped before it
  ends reports none (``partial``). Resuming is ``codex exec ... resume SESSION PROMPT`` (flags go between ``exec``
  and ``resume``). Codex reads stdin when it is not a TTY: the supervisor gives it ``/dev/null``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from typing import Any, Final

from .base import (
    HomeContext,
    HostKind,
    HostReport,
    VerifyArgvs,
    as_dict,
    count,
    guard_command,
    hook_settings,
    json_bytes,
    session_id,
)

PROJECT_CONFIG: Final = ".codex/config.toml"
NESTED_SANDBOXES: Final = frozenset({"read-only", "workspace-write"})
"""``--sandbox`` modes that run each command under Codex's bubblewrap, which cannot start inside our sandbox."""
DROPPED: Final = (
    "hooks",
    "notify",
    "projects",
    "sandbox_mode",
    "sandbox_workspace_write",
    "approval_policy",
    "allow_login_shell",
)
"""Keys of the person's ``config.toml`` an agent's Codex never gets: its own hooks and trusted projects, a notifier
that runs a program, and sandbox and approval settings (the argv decides those)."""
PROJECT_TEXT: Final = """\
# git-agentops: Codex's project configuration in this worker worktree, rewritten at each worker start.
[features]
hooks = true
"""


def _person_config(data: bytes | None) -> dict[str, Any]:
    try:
        return tomllib.loads(data.decode("utf-8")) if data else {}
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return {}


def _without_unsafe(doc: dict[str, Any]) -> dict[str, Any]:
    kept = {key: value for key, value in doc.items() if key not in DROPPED}
    features = {k: v for k, v in as_dict(kept.get("features")).items() if k not in ("hooks", "codex_hooks")}
    kept["features"] = {**features, "hooks": True}
    profiles = as_dict(kept.get("profiles"))
    if profiles:
        kept["profiles"] = {
            name: {k: v for k, v in as_dict(profile).items() if k not in DROPPED} for name, profile in profiles.items()
        }
    return kept


class Codex(HostKind):
    name = "codex"
    binary = "codex"
    order = 20
    writable = ("~/.codex", "~/.cache")
    pass_env = ("OPENAI_API_KEY", "CODEX_API_KEY")
    home_files = ("~/.codex/auth.json",)
    guard_file = PROJECT_CONFIG
    cleared = (".codex",)
    sealed = ".codex"
    home_settings = (".codex/config.toml", ".codex/hooks.json")
    guard_in_home = True
    cumulative = True  # `exec resume` prints the thread's usage so far in turn.completed

    def default_argv(self, verify_argvs: VerifyArgvs) -> tuple[str, ...]:
        del verify_argvs
        return (
            "codex",
            "exec",
            "--sandbox",
            "workspace-write",
            "--add-dir",
            "{git_common_dir}",
            "-c",
            "allow_login_shell=false",
            "--dangerously-bypass-hook-trust",
            "--json",
            "{prompt}",
        )

    def resume_argv(self, argv: Sequence[str]) -> tuple[str, ...]:
        args = list(argv)
        if "{prompt}" not in args or args[:2] != ["codex", "exec"]:
            return ()
        without = [a for a in args if a != "{prompt}"]
        return (*without, "resume", "{session}", "{prompt}")

    def guard_files(self, hook_command: str) -> dict[str, bytes]:
        del hook_command
        return {PROJECT_CONFIG: PROJECT_TEXT.encode()}

    def home_config(self, ctx: HomeContext) -> dict[str, bytes]:
        import tomli_w

        source = ctx.person_path("CODEX_HOME", ".codex")
        config = _without_unsafe(_person_config(ctx.read(f"{source}/config.toml")))
        config["projects"] = {ctx.worktree: {"trust_level": "trusted"}}
        files = {
            ".codex/config.toml": tomli_w.dumps(config).encode(),
            ".codex/hooks.json": json_bytes(hook_settings(guard_command(ctx.hook_command, self.name))),
        }
        if source != ctx.person_path("", ".codex"):  # the person's CODEX_HOME is not ~/.codex: home_files miss it
            auth = ctx.read(f"{source}/auth.json")
            if auth is not None:
                files[".codex/auth.json"] = auth
        return files

    def config_env(self, home: str) -> dict[str, str]:
        return {"CODEX_HOME": f"{home.rstrip('/')}/.codex"}

    def unnest(self, argv: list[str]) -> tuple[list[str], str]:
        out = list(argv)
        for at, arg in enumerate(out):
            if arg in ("--sandbox", "-s") and at + 1 < len(out) and out[at + 1] in NESTED_SANDBOXES:
                was, out[at + 1] = out[at + 1], "danger-full-access"
                return out, (
                    f"codex's own sandbox ({was}, bubblewrap) cannot start inside the agentops sandbox: it is off "
                    "(--sandbox danger-full-access), and the agentops sandbox is the wall\n"
                )
            if arg.startswith("--sandbox=") and arg.split("=", 1)[1] in NESTED_SANDBOXES:
                out[at] = "--sandbox=danger-full-access"
                return out, "codex's own sandbox cannot start inside the agentops sandbox: it is off\n"
        return argv, ""

    def parse(self, events: list[dict[str, Any]]) -> HostReport:
        session = next(
            (s for e in events if e.get("type") == "thread.started" and (s := session_id(e.get("thread_id")))), None
        )
        tokens_in = tokens_out = 0
        message = None
        open_turn = False
        for event in events:
            kind = event.get("type")
            if kind == "turn.started":
                open_turn = True
            elif kind in ("turn.completed", "turn.failed"):
                open_turn = False
                usage = as_dict(event.get("usage"))
                tokens_in += count(usage.get("input_tokens"))
                tokens_out += count(usage.get("output_tokens"))
            item = as_dict(event.get("item"))
            if kind == "item.completed" and item.get("type") == "agent_message" and isinstance(item.get("text"), str):
                message = item["text"]
        return HostReport(bool(events), session, tokens_in, tokens_out, None, message, partial=open_turn)


KIND: Final = Codex()
