"""What every kind of agent host is: one small interface, one module per kind (:mod:`git_agentops.model.hosts`).

A kind says how its CLI runs unattended and how to read what it printed:

* ``default_argv`` / ``resume_argv`` / ``default_env``: what ``git agentops-init`` writes into the policy (so the
  person reads, and trusts, exactly what runs), from the verification commands an agent must be allowed to run;
* ``writable``, ``pass_env``, ``home_files``: what its agents write outside their worktree, which of the person's
  credential variables they get, which of the person's files are copied into their private HOME;
* ``guard_files`` (in the worktree) and ``home_config`` (in the agent's private HOME): its pre-tool hook
  configuration calling the agent guard, written whole before every generation, and the places it reads settings
  from that are cleared of what an agent left (``cleared``, ``sealed``);
* ``unnest``: what changes in its argv when it runs inside our sandbox (a sandbox of its own that cannot nest);
* ``parse``: the JSON events of one generation's output as a :class:`HostReport` (session, usage, final text).
* ``builtin_module``, ``network``, ``follows_recipe``: a built-in agent of ours (``scripted``): the module our own
  interpreter runs, a host without a ``[hosts]`` entry, whether it reaches the network, whether it plays a recipe.

Adding a host is adding a module that defines ``KIND``, an instance of a :class:`HostKind` subclass.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

TOOLKIT_COMMANDS: Final = ("git agentops-request", "git agentops-verify")
GIT_SUBCOMMANDS: Final = ("status", "diff", "log", "show", "add", "commit", "merge", "rm", "mv", "restore", "ls-files")
"""The git subcommands an agent needs on its own branch; never push, reset, config, update-ref or notes."""
TIMEOUT_SECONDS: Final = 30
"""How long a host waits for the guard before it gives up on one call."""

VerifyArgvs = Sequence[Sequence[str] | str]


@dataclass(frozen=True, slots=True)
class HostReport:
    """What a generation's output said about itself. ``parsed`` is False when it held no JSON event at all.

    ``partial`` is True when the output shows work whose usage it never reported -- a generation stopped before its
    host printed the figures (a step without its ``step_finish``, a turn without ``turn.completed``, Claude's cost
    without its ``result``): the counted figures are then a floor, and the run says so."""

    parsed: bool
    session: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    result: str | None = None  # the final message, where the host prints one
    partial: bool = False

    @property
    def reported_usage(self) -> bool:
        """Whether the host said anything about what it used (or was stopped before it could)."""
        return bool(self.input_tokens or self.output_tokens or self.cost_usd is not None or self.partial)


def command_prefix(argv: Sequence[str] | str) -> str:
    """A verification command as the agent would type it (a shell string stays a string)."""
    return argv if isinstance(argv, str) else shlex.join(argv)


def allowed_commands(verify_argvs: Iterable[Sequence[str] | str]) -> list[str]:
    """The shell command prefixes an agent may run: git on its branch, the toolkit, the verification commands."""
    commands = [f"git {sub}" for sub in GIT_SUBCOMMANDS] + list(TOOLKIT_COMMANDS)
    for argv in verify_argvs:
        prefix = command_prefix(argv)
        if prefix not in commands:
            commands.append(prefix)
    return commands


def after_prompt(argv: Sequence[str], *extra: str) -> tuple[str, ...]:
    """``argv`` with ``extra`` right after its ``{prompt}`` element (``()`` when it has none: it cannot resume)."""
    args = list(argv)
    if "{prompt}" not in args:
        return ()
    at = args.index("{prompt}") + 1
    return (*args[:at], *extra, *args[at:])


def guard_command(hook_command: str, kind: str) -> str:
    """The shell command a host runs before a tool call: ``HOOK_COMMAND agent-command --host KIND``."""
    return f"{hook_command} agent-command --host {kind}"


def hook_settings(
    command: str, *, event: str = "PreToolUse", matcher: str = "Bash", timeout: int = TIMEOUT_SECONDS
) -> dict[str, Any]:
    """One pre-tool hook group calling ``command``, in the shape Claude Code, Codex and Gemini CLI all take (Claude
    Code and Codex count its ``timeout`` in seconds, Gemini CLI in milliseconds)."""
    group = {"matcher": matcher, "hooks": [{"type": "command", "command": command, "timeout": timeout}]}
    return {"hooks": {event: [group]}}


# -- reading a generation's output ------------------------------------------------------------------------------------

_SESSION: Final = re.compile(r"[A-Za-z0-9._:-]{1,256}")


def events_of(text: str) -> list[dict[str, Any]]:
    """Every JSON object printed on a line of its own."""
    events = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def count(value: Any) -> int:
    """A token count as a host printed it (anything else counts 0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def dollars(value: Any) -> float | None:
    """A cost in dollars as a host printed it (None when it is not a non-negative number)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def session_id(value: Any) -> str | None:
    """A session id a host printed, when it is one we can pass back on an argv."""
    return value if isinstance(value, str) and _SESSION.fullmatch(value) else None


def json_object(data: bytes | None) -> dict[str, Any] | None:
    """A JSON object file's content (None when absent, not UTF-8 or not an object); ``//`` and ``/* */`` comments
    are allowed, as JSONC files have them."""
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        try:
            doc = json.loads(_strip_comments(text))
        except ValueError:
            return None
    return doc if isinstance(doc, dict) else None


_JSONC: Final = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/', re.S)


def _strip_comments(text: str) -> str:
    return _JSONC.sub(lambda m: m.group(0) if m.group(0).startswith('"') else "", text)


def json_bytes(doc: Mapping[str, Any]) -> bytes:
    """``doc`` as an indented JSON file's bytes."""
    return (json.dumps(doc, indent=2) + "\n").encode()


# -- the interface ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HomeContext:
    """What a kind's :meth:`HostKind.home_config` works from: the person's HOME and environment (for the settings
    they wrote, read through ``read``: an absolute path's bytes, None when absent or unreadable), the worktree the
    agent works in, and the guard's hook command."""

    person_home: str
    environ: Mapping[str, str]
    worktree: str
    hook_command: str
    read: Callable[[str], bytes | None]

    def person_path(self, variable: str, default: str) -> str:
        """The directory the person's ``variable`` names when it is absolute, else ``default`` below their HOME."""
        named = self.environ.get(variable, "")
        return named if named.startswith("/") else f"{self.person_home.rstrip('/')}/{default}"


class HostKind:
    """A kind of agent host. Every method has the default of a host that needs nothing (``command``)."""

    name: ClassVar[str] = ""
    binary: ClassVar[str | None] = None
    """The program ``init`` and ``doctor`` look for on PATH (None: not an agent CLI)."""
    order: ClassVar[int] = 100
    """Preference among the agent CLIs found: the first found becomes the default host."""
    writable: ClassVar[tuple[str, ...]] = ("~/.cache",)
    pass_env: ClassVar[tuple[str, ...]] = ()
    home_files: ClassVar[tuple[str, ...]] = ()
    guard_file: ClassVar[str | None] = None
    """The worktree file its guard lives in: a project that tracks it keeps it, and this host gets no guard there."""
    cleared: ClassVar[tuple[str, ...]] = ()
    """Other places in the worktree it reads settings, hooks or plugins from: cleared of what the project does not
    track before each generation."""
    sealed: ClassVar[str | None] = None
    """A directory holding only our files once cleared: made 0555."""
    guard_in_home: ClassVar[bool] = False
    """Its guard is in the agent's private HOME (:meth:`home_config`): a project tracking ``guard_file`` only keeps
    that file, the guard still runs."""
    cumulative: ClassVar[bool] = False
    """A resumed session reports the session's running token total, not the generation's (Codex)."""
    home_settings: ClassVar[tuple[str, ...]] = ()
    """Where in HOME it reads user-scope settings, hooks and plugins: removed from an agent's private HOME before
    each generation (and rewritten by :meth:`home_config`)."""
    leaves: ClassVar[tuple[str, ...]] = ()
    """What it writes into the worktree of its own accord (caches, histories; a trailing ``/`` for a directory):
    excluded from commits like the guard files (``info/exclude``), so it never makes a checkout dirty."""
    builtin_module: ClassVar[str | None] = None
    """The module of ours it runs with the supervisor's own interpreter (``python -m``) instead of a policy argv:
    a built-in agent. It is a host under its own name without a ``[hosts]`` entry, and ``policy trust`` does not
    warn about the environment it gets (it is our code, not a program of the person's)."""
    network: ClassVar[bool] = True
    """Whether the built-in host (:attr:`builtin_module`) may reach the network (False: a namespace of its own with
    nothing in it)."""
    follows_recipe: ClassVar[bool] = False
    """It plays a recipe instead of asking a model: a run on it needs one (``--recipe``)."""

    def default_argv(self, verify_argvs: VerifyArgvs) -> tuple[str, ...]:
        """The argv ``init`` writes, allowing the verification commands ``verify_argvs`` (``()``: none)."""
        del verify_argvs
        return ()

    def resume_argv(self, argv: Sequence[str]) -> tuple[str, ...]:
        """How to resume a session with the host's own ``argv`` (``()``: it cannot)."""
        del argv
        return ()

    def default_env(self, verify_argvs: VerifyArgvs) -> dict[str, str]:
        """Environment it needs besides the person's (opencode takes its permissions this way)."""
        del verify_argvs
        return {}

    def guard_files(self, hook_command: str) -> dict[str, bytes]:
        """Every file of its guard in the worktree, with its whole content."""
        del hook_command
        return {}

    def home_config(self, ctx: HomeContext) -> dict[str, bytes]:
        """Files (relative to the agent's private HOME) written whole before each generation: the person's own
        settings for this CLI with what could weaken the guard left out, and the guard where the CLI reads it."""
        del ctx
        return {}

    def config_env(self, home: str) -> dict[str, str]:
        """Variables naming where it reads its configuration, pointed into the agent's private ``home`` (set even
        when the agent keeps the person's HOME, so its settings are never the person's)."""
        del home
        return {}

    def unnest(self, argv: list[str]) -> tuple[list[str], str]:
        """The argv to run inside our sandbox, and a log line when it changed (a sandbox of its own that cannot
        start nested is turned off: ours is the wall)."""
        return argv, ""

    def parse(self, events: list[dict[str, Any]]) -> HostReport | None:
        """What one generation's JSON events say (None: this kind prints nothing we read)."""
        del events
        return None

    def parse_text(self, text: str) -> HostReport | None:
        """What one generation's whole output says; JSON-event hosts parse their events."""
        return self.parse(events_of(text))
