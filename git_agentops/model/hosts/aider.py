"""aider (``aider-chat`` on PyPI), run one-shot as ``aider --message PROMPT``.

Checked against aider 0.86.2 (its ``--help`` and source, and runs against a local model):

* **No tools, no hooks.** The model answers with edit blocks, which aider applies, and fenced ``bash`` blocks,
  which aider offers to run. Only the SEARCH/REPLACE formats collect those commands (``whole``, aider's default
  for a model it does not know, never runs one), hence ``--edit-format diff``. Each command runs with
  ``subprocess.Popen(command, shell=True)`` -- always ``/bin/sh``: ``$SHELL`` is used only when stdin is a TTY
  (pexpect, ``$SHELL -i -c``), and an agent's stdin is ``/dev/null``. So a guard shell named by ``$SHELL`` would
  never run, aider has no pre-command hook, and **the sandbox is the only wall** (no ``agent-command`` guard).
* **Confirmations.** ``--yes-always`` answers "no" to running a shell command (that one needs an explicit yes), so
  an agent could never run ``git agentops-request handoff``. Without it, with stdin at EOF, every question takes
  its default -- yes, for commands too. So there is no ``--yes-always``, and the questions whose yes we do not
  want are removed: ``--no-gitignore`` (adding ``.aider*`` to the project's ``.gitignore``), ``--no-detect-urls``
  (scraping a URL in the prompt or a reply, and offering to pip-install playwright for it). A command's output is
  added to the chat but not answered within the same ``--message`` run.
* **Commits.** aider commits every edit it applies (``--auto-commits``, kept: an agent's work is commits on its
  branch), and by default with ``--no-verify`` -- skipping the repository hooks that enforce the run's rules, which
  the guard refuses to any agent: ``--git-commit-verify``. A file it is about to edit that is dirty is committed
  first (``--dirty-commits``). Commit messages come from its weak model (a call not in its usage lines).
* **What it reads.** aider puts in its chat only files git tracks, and the model has no tool to read another:
  ``--read {input}`` shows it, read-only, the file git-agentops gives it -- a worker's ``instructions.json``, a
  reviewer's review input (both kept out of git) -- without which a coordinator cannot plan at all.
* **Resume.** aider has no session id. ``--restore-chat-history`` (checked headless) reloads the chat history
  file, which stays in the worktree: a generation that printed aider's banner reports the session
  ``chat-history``, and resuming adds that flag.
* **What it leaves in the worktree** -- ``.aider.tags.cache.v4/`` (its repository map), ``.aider.chat.history.md``,
  ``.aider.input.history`` -- is in ``info/exclude`` (:attr:`Aider.leaves`). It also reads ``.aider.conf.yml``,
  ``.env`` and ``.aiderignore`` there (the project's, or an agent's from an earlier generation: no guard, so
  nothing is cleared; options on the argv outrank a config file).
* **Settings.** The person's ``~/.aider.conf.yml`` reaches the agent's private HOME reduced to the keys that reach
  a model (:data:`KEPT`: never ``yes-always``, ``lint-cmd``/``test-cmd`` or history files);
  ``~/.aider.model.settings.yml`` and ``~/.aider.model.metadata.json`` (the model's prices and context window;
  without them aider downloads litellm's list, and knows no cost for a model that is not on it) are copied whole.
* **Output** is text: ``Tokens: N sent, M received. Cost: $X message, $Y session.`` after each model reply
  (counts of 1000 and more rounded: ``2.5k``, ``25k``), read by :meth:`Aider.parse_text`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from .base import HomeContext, HostKind, HostReport, VerifyArgvs

SESSION: Final = "chat-history"
"""The session an aider generation reports: its chat history file, restored with ``--restore-chat-history``."""
CONFIG: Final = ".aider.conf.yml"
KEPT: Final = frozenset(
    {
        "model",
        "weak-model",
        "editor-model",
        "editor-edit-format",
        "edit-format",
        "architect",
        "alias",
        "reasoning-effort",
        "thinking-tokens",
        "openai-api-key",
        "anthropic-api-key",
        "openai-api-base",
        "openai-api-type",
        "openai-api-version",
        "openai-api-deployment-id",
        "openai-organization-id",
        "api-key",
        "set-env",
        "model-settings-file",
        "model-metadata-file",
        "verify-ssl",
        "timeout",
        "max-chat-history-tokens",
        "cache-prompts",
        "cache-keepalive-pings",
        "map-tokens",
        "map-refresh",
        "map-multiplier-no-files",
        "check-model-accepts-settings",
        "show-model-warnings",
        "stream",
    }
)
"""Keys of the person's ``~/.aider.conf.yml`` an agent's aider gets: how to reach and use a model."""

_KEY: Final = re.compile(r"([A-Za-z0-9][A-Za-z0-9_-]*)\s*:")
_TOKENS: Final = re.compile(
    r"Tokens: (?P<sent>[\d.]+k?) sent(?:, (?P<write>[\d.]+k?) cache write)?(?:, (?P<hit>[\d.]+k?) cache hit)?,"
    r" (?P<received>[\d.]+k?) received\."
)
_COST: Final = re.compile(r"Cost: \$(?P<message>[\d.]+) message, \$(?P<session>[\d.]+) session\.")
_BANNER: Final = re.compile(r"Aider v\d")


def kept_config(text: str) -> str:
    """The top-level entries of an ``.aider.conf.yml`` whose key is in :data:`KEPT`, each with its indented or
    ``- item`` continuation lines; comments and everything else dropped. A line-level reading (aider's config is
    a flat mapping), so no YAML parser is needed: an entry it cannot place is left out."""
    out: list[str] = []
    keep = False
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0] in " \t-":
            if keep:
                out.append(line)
            continue
        match = _KEY.match(line)
        keep = match is not None and match.group(1) in KEPT
        if keep:
            out.append(line)
    return "\n".join(out) + "\n" if out else ""


def tokens(text: str) -> int:
    """A token count as aider prints it: ``766``, ``2.5k``, ``25k``."""
    try:
        return round(float(text[:-1]) * 1000) if text.endswith("k") else int(text)
    except ValueError:
        return 0


class Aider(HostKind):
    name = "aider"
    binary = "aider"
    order = 50
    writable = ("~/.aider", "~/.cache")
    pass_env = (
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GEMINI_API_KEY",
        "DEEPSEEK_API_KEY",
        "OPENROUTER_API_KEY",
        "AIDER_OPENAI_API_KEY",
        "AIDER_ANTHROPIC_API_KEY",
        "AIDER_API_KEY",
    )
    home_files = ("~/.aider.model.settings.yml", "~/.aider.model.metadata.json")
    home_settings = (CONFIG, ".aider.model.settings.yml", ".aider.model.metadata.json", ".env")
    leaves = (".aider.tags.cache.v*/", ".aider.chat.history.md", ".aider.input.history")

    def default_argv(self, verify_argvs: VerifyArgvs) -> tuple[str, ...]:
        del verify_argvs
        return (
            "aider",
            "--message",
            "{prompt}",
            "--read",
            "{input}",
            "--edit-format",
            "diff",
            "--git-commit-verify",
            "--no-gitignore",
            "--no-detect-urls",
            "--no-analytics",
            "--no-check-update",
            "--no-show-release-notes",
            "--no-pretty",
            "--no-fancy-input",
        )

    def resume_argv(self, argv: Sequence[str]) -> tuple[str, ...]:
        return (*argv, "--restore-chat-history") if "{prompt}" in argv else ()

    def home_config(self, ctx: HomeContext) -> dict[str, bytes]:
        data = ctx.read(f"{ctx.person_home.rstrip('/')}/{CONFIG}")
        try:
            text = kept_config(data.decode("utf-8")) if data else ""
        except UnicodeDecodeError:
            return {}
        return {CONFIG: text.encode()} if text else {}

    def parse_text(self, text: str) -> HostReport:
        rows = text.splitlines()
        lines = [m for row in rows if (m := _TOKENS.match(row))]
        banner = any(_BANNER.match(row) for row in rows)
        if not lines and not banner:
            return HostReport(False)
        tokens_in = sum(tokens(m["sent"]) + tokens(m["hit"] or "0") for m in lines)
        tokens_out = sum(tokens(m["received"]) for m in lines)
        costs = [m for row in rows if (m := _COST.search(row))]
        cost = float(costs[-1]["session"]) if costs else None
        # no usage line at all: stopped (or failed) before the model's first answer ended -- the figures are a floor
        return HostReport(True, SESSION, tokens_in, tokens_out, cost, partial=not lines)


KIND: Final = Aider()
