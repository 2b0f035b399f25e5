"""The fake model behind the stand-in agent CLIs, and the tool gate each CLI puts between it and the machine.

Why: whole-run tests need agents that behave like the real one-shot CLIs (Claude Code ``claude -p``, OpenAI Codex
``codex exec``, ``opencode run``) -- their argument shapes, refusals, JSON output, sessions and permission or
sandbox rules -- without a model. The "model" here follows the prompt text literally: it recognises the three roles
git-agentops prompts for (reviewer, coordinator, child) and runs only the commands whose templates the prompt shows
in backticks. A prompt that forgets to tell an agent something therefore gets an agent that does not do it, and a
host argv that grants too little gets an agent whose tool calls are refused, exactly where a real one would fail.

Each wrapper in ``bin/`` parses its own CLI's arguments and hands this module a :class:`Policy` (what that CLI's
permission system or sandbox allows) and an :class:`Events` (how that CLI reports its progress on stdout). The model
acts only through a :class:`ToolGate`'s ``read``, ``write`` and ``bash``. Standard library only: real agents do not
import git_agentops, and neither may these.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NoReturn

# -- plumbing ----------------------------------------------------------------------------------------------------------


def log(cli: str, message: str) -> None:
    """Human-readable progress on stderr; never a line starting with ``{``, so no JSON parser mistakes it."""
    for line in message.splitlines() or [""]:
        sys.stderr.write(f"[{cli} stand-in] {line}\n")
    sys.stderr.flush()


def say(message: str) -> None:
    """A line on stderr exactly as the real CLI prints it (error and permission messages tests look for)."""
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.stderr.flush()


def emit(event: Mapping[str, Any]) -> None:
    """One JSON event line on stdout, flushed at once: the supervisor may kill the process at any moment."""
    sys.stdout.write(json.dumps(event, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def fail(message: str, code: int = 1) -> NoReturn:
    """Refuse like the real CLI: the message on stderr, then a non-zero exit."""
    say(message)
    raise SystemExit(code)


def read_stdin() -> str:
    """A piped prompt, if any. Only a stdin that is not a terminal is read (the supervisor gives ``/dev/null``)."""
    try:
        if sys.stdin is None or sys.stdin.isatty():
            return ""
        return sys.stdin.read()
    except (OSError, ValueError):
        return ""


def now_ms() -> int:
    """Wall-clock milliseconds, as the CLIs stamp their events."""
    return int(time.time() * 1000)


def inside(path: Path | str, root: Path | str) -> bool:
    """Whether ``path`` is ``root`` or below it, both resolved (symlinks, ``..``) the way a sandbox sees them."""
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root))


# -- sessions ----------------------------------------------------------------------------------------------------------

_SESSION_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,128}")


@dataclass
class Session:
    """One conversation: the prompt it started with, every prompt since, where it ran, and CLI settings.

    ``path`` is None for an ephemeral session (``codex exec --ephemeral``), which nothing can resume.
    """

    id: str
    prompt: str
    cwd: str
    turns: int = 1
    prompts: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    def to_json(self) -> dict[str, Any]:
        """The stored form (``updated`` orders sessions for ``--continue``/``--last``)."""
        return {
            "id": self.id,
            "prompt": self.prompt,
            "cwd": self.cwd,
            "turns": self.turns,
            "prompts": self.prompts,
            "settings": self.settings,
            "updated": time.time_ns(),
        }


STATE_DIRS: Final = {"claude": ".claude", "codex": ".codex", "opencode": ".local/share/opencode"}
"""Where each real CLI keeps its sessions, under ``$HOME``: a sandbox must let the stand-in write there too."""


def session_root(cli: str, home: Path) -> Path:
    """``$HOME/<the CLI's own state dir>/standin-sessions``."""
    return home / STATE_DIRS.get(cli, f".{cli}") / "standin-sessions"


class SessionStore:
    """``session_root(cli)/<id>.json``: written before the first tool call, so a killed agent resumes."""

    def __init__(self, cli: str) -> None:
        self.root = session_root(cli, Path(os.environ.get("HOME") or Path.home()))

    def new(
        self,
        session_id: str,
        prompt: str,
        cwd: Path,
        settings: Mapping[str, Any] | None = None,
        *,
        persist: bool = True,
    ) -> Session:
        """A fresh session, stored at once unless ``persist`` is False."""
        path = self.root / f"{session_id}.json" if persist else None
        session = Session(session_id, prompt, str(cwd), 1, [prompt], dict(settings or {}), path)
        self.save(session)
        return session

    def load(self, session_id: str) -> Session | None:
        """The stored session ``session_id``; None when there is none (or the id could not name a file)."""
        if not _SESSION_ID.fullmatch(session_id):
            return None
        path = self.root / f"{session_id}.json"
        try:
            doc = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            return None
        prompts = [str(p) for p in doc.get("prompts") or [doc["prompt"]]]
        return Session(
            session_id,
            doc["prompt"],
            doc["cwd"],
            int(doc.get("turns", 1)),
            prompts,
            dict(doc.get("settings") or {}),
            path,
        )

    def latest(self, cwd: Path) -> Session | None:
        """The most recently used session started in ``cwd`` (what ``--continue``/``--last`` pick)."""
        found: list[tuple[int, str]] = []
        for path in self.root.glob("*.json"):
            try:
                doc = json.loads(path.read_text("utf-8"))
            except (OSError, ValueError):
                continue
            if doc.get("cwd") == str(cwd):
                found.append((int(doc.get("updated", 0)), path.stem))
        return self.load(max(found)[1]) if found else None

    def resume(self, session: Session, prompt: str) -> None:
        """Another turn of ``session`` with ``prompt`` appended, stored before the turn starts."""
        session.turns += 1
        session.prompts.append(prompt)
        self.save(session)

    def save(self, session: Session) -> None:
        """Write the session atomically (a reader never sees half a file)."""
        if session.path is None:
            return
        session.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = session.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(session.to_json(), indent=1), "utf-8")
        os.replace(tmp, session.path)


# -- usage -------------------------------------------------------------------------------------------------------------


def cost_usd(input_tokens: int, output_tokens: int) -> float:
    """Dollars for a token count, at a fixed fake price (3 $/M in, 15 $/M out)."""
    return (input_tokens * 3 + output_tokens * 15) / 1e6


@dataclass
class Usage:
    """Deterministic usage: ``len(prompt)//4 + 100`` input tokens per tool call so far, 50 output tokens per call.

    :meth:`delta` hands out what was not reported yet, for CLIs that report usage per message or per step (the
    sum of those reports is then the total, even when the process is killed before its final summary).
    """

    prompt_chars: int
    calls: int = 0
    reported_in: int = 0
    reported_out: int = 0

    @property
    def input_tokens(self) -> int:
        """Input tokens so far."""
        return self.prompt_chars // 4 + 100 * self.calls

    @property
    def output_tokens(self) -> int:
        """Output tokens so far."""
        return 50 * self.calls

    @property
    def cost(self) -> float:
        """Dollars so far."""
        return cost_usd(self.input_tokens, self.output_tokens)

    def delta(self) -> tuple[int, int]:
        """Input and output tokens used since the last call."""
        tokens_in, tokens_out = self.input_tokens - self.reported_in, self.output_tokens - self.reported_out
        self.reported_in, self.reported_out = self.input_tokens, self.output_tokens
        return tokens_in, tokens_out


# -- shell commands ----------------------------------------------------------------------------------------------------


def split_commands(command: str) -> list[tuple[str, str]]:
    """The simple commands of a shell line and the operator after each (``&&``, ``||``, ``;``, ``|``, ``&``, ``""``).

    Why: permission rules apply to each part of a compound command (``git add -A && git commit ...``), as in the
    real CLIs. Quotes and backslashes are respected; ``2>&1`` and ``&>`` are redirections, not operators.
    """
    parts: list[tuple[str, str]] = []
    buf: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(command):
        ch = command[i]
        if quote is not None:
            buf.append(ch)
            if ch == quote:
                quote = None
            elif ch == "\\" and quote == '"' and i + 1 < len(command):
                buf.append(command[i + 1])
                i += 1
            i += 1
            continue
        if ch in "'\"":
            quote = ch
            buf.append(ch)
            i += 1
            continue
        if ch == "\\" and i + 1 < len(command):
            buf.append(command[i : i + 2])
            i += 2
            continue
        pair = command[i : i + 2]
        if pair in ("&&", "||"):
            op, i = pair, i + 2
        elif ch in ";|\n" or (ch == "&" and not (buf and buf[-1] in "<>") and command[i + 1 : i + 2] != ">"):
            op, i = ch, i + 1
        else:
            buf.append(ch)
            i += 1
            continue
        text = "".join(buf).strip()
        if text:
            parts.append((text, "\n" if op == "\n" else op))
        elif parts:
            parts[-1] = (parts[-1][0], op)
        buf = []
    text = "".join(buf).strip()
    if text:
        parts.append((text, ""))
    return parts


def words(command: str) -> list[str]:
    """A simple command's words (shell quoting undone; on a quoting error, split on whitespace)."""
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def run_shell(command: str, cwd: Path) -> tuple[int, str]:
    """Run ``command`` as the Bash tool does: through the shell, in ``cwd``, stdout and stderr captured together."""
    done = subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True, errors="replace", check=False)
    return done.returncode, done.stdout + done.stderr


_GIT_WRITES: Final = (
    "add commit merge rm mv restore stash checkout switch reset rebase cherry-pick revert am pull fetch notes "
    "update-ref gc"
)
GIT_WRITES: Final = frozenset(_GIT_WRITES.split())
"""git subcommands that write into the repository's git dir (index, refs, objects)."""


@dataclass(frozen=True, slots=True)
class GitDirs:
    """Where a repository keeps its state: a linked worktree's own git dir, and the common dir with the objects."""

    git_dir: Path
    common_dir: Path
    toplevel: Path | None


def git_dirs(where: Path) -> GitDirs | None:
    """The git dirs of the repository at ``where`` (None outside a repository), as absolute resolved paths."""
    done = subprocess.run(
        ["git", "rev-parse", "--absolute-git-dir", "--git-common-dir"],
        cwd=where,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) < 2:
        return None
    common = Path(lines[1]) if Path(lines[1]).is_absolute() else where / lines[1]
    top = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], cwd=where, capture_output=True, text=True, check=False
    )
    toplevel = Path(os.path.realpath(top.stdout.strip())) if top.returncode == 0 and top.stdout.strip() else None
    return GitDirs(Path(os.path.realpath(lines[0])), Path(os.path.realpath(common)), toplevel)


@dataclass(frozen=True, slots=True)
class Effect:
    """What a simple command writes besides the files an agent edits, which a sandbox or rule may refuse.

    ``kind``: ``git`` (a git subcommand that writes the git dir and common dir), ``request`` (``git
    agentops-request``: the worktree's mailbox) or ``verify`` (``git agentops-verify``: the common git dir).
    """

    kind: str
    writes: tuple[Path, ...]
    dirs: GitDirs


def effect_of(command: str, cwd: Path) -> Effect | None:
    """What the simple command ``command`` writes outside the worktree's files; None for a read-only command.

    Why a classification and not a real sandbox: the stand-ins must refuse what the real sandboxes refuse (a
    linked worktree's index and objects live in the common git dir, outside the worktree) without root or
    kernel features. Anything that is neither git writing its state nor the toolkit's commands counts as read-only.
    """
    argv = words(command)
    while argv and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[0]):
        argv = argv[1:]
    if not argv:
        return None
    program, rest, where = os.path.basename(argv[0]), argv[1:], cwd
    if program.startswith("git-"):
        sub = program[4:]
    elif program == "git":
        i = 0
        while i < len(rest) and rest[i].startswith("-"):
            if rest[i] in ("-C", "-c", "--git-dir", "--work-tree", "--namespace") and i + 1 < len(rest):
                if rest[i] == "-C":
                    where = where / rest[i + 1]
                i += 2
            else:
                i += 1
        if i >= len(rest):
            return None
        sub = rest[i]
    else:
        return None
    if sub not in GIT_WRITES and sub not in ("agentops-request", "agentops-verify"):
        return None
    dirs = git_dirs(where) if where.is_dir() else None
    if dirs is None:
        return None  # not a repository: git fails on its own
    if sub == "agentops-request":
        top = dirs.toplevel or Path(os.path.realpath(where))
        return Effect("request", (top / ".agentops" / "mailbox",), dirs)
    if sub == "agentops-verify":
        return Effect("verify", (dirs.common_dir,), dirs)
    return Effect("git", tuple(dict.fromkeys((dirs.git_dir, dirs.common_dir))), dirs)


# -- the tool gate -----------------------------------------------------------------------------------------------------


class Denied(Exception):
    """A tool call the CLI's permission system refused.

    ``stop``: whether the model gives up and ends its turn (Claude Code and opencode report a refused permission
    to the model as a failed tool call it cannot get around); codex's sandbox instead lets the command run and
    fail, so the model carries on with ``exit_code`` and the message as the command's output.
    """

    def __init__(self, message: str, *, stop: bool = True, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.stop = stop
        self.exit_code = exit_code


PreTool = Callable[[str, Mapping[str, Any]], None]
"""A CLI's pre-tool hooks (``tests/standins/hosthooks.py``): (tool name, tool input); raises :class:`Denied`."""


class Policy(ABC):
    """What one CLI lets the model do; a check raises :class:`Denied` to refuse a tool call."""

    def check_read(self, path: Path) -> None:
        """Refuse reading ``path`` (every CLI here may read by default)."""
        return None

    @abstractmethod
    def check_write(self, path: Path) -> None:
        """Refuse writing ``path``."""

    @abstractmethod
    def check_bash(self, command: str) -> None:
        """Refuse running ``command``."""

    def run_bash(self, command: str, cwd: Path) -> tuple[int, str]:
        """Run an allowed command (a sandbox overrides this to let refused parts fail the way they would)."""
        self.check_bash(command)
        return run_shell(command, cwd)


@dataclass
class Call:
    """One tool call, as a CLI reports it: ``tool`` is ``read``, ``write`` or ``bash``; ``target`` a path or command."""

    number: int
    tool: str
    target: str
    content: str | None = None
    created: bool = False
    exit_code: int = 0
    output: str = ""
    denied: bool = False

    @property
    def is_error(self) -> bool:
        """Whether the tool result is an error (refused, or the tool or command failed)."""
        return self.denied or self.exit_code != 0


class Events(ABC):
    """How one CLI reports a turn on stdout (and stderr): every event flushed as soon as it happens."""

    session_id = ""

    def started(self, session: Session) -> None:
        """The turn starts (before any tool call)."""
        self.session_id = session.id

    def tool_started(self, call: Call, usage: Usage) -> None:  # noqa: B027 - optional hook
        """A tool call is about to run (``usage`` already counts it)."""

    def tool_finished(self, call: Call, usage: Usage) -> None:  # noqa: B027 - optional hook
        """A tool call ended (``call`` holds its result)."""

    @abstractmethod
    def finished(self, text: str, usage: Usage, denials: Sequence[Call]) -> None:
        """The turn ends with the model's final message."""


class StopTurn(Exception):
    """The model cannot go on (a refused tool call): it ends its turn, saying why."""


class ToolGate:
    """The model's only way to act: ``read``, ``write`` and ``bash``, each checked by the CLI's policy and reported."""

    def __init__(self, cli: str, cwd: Path, policy: Policy, events: Events, usage: Usage) -> None:
        self.cli = cli
        self.cwd = cwd
        self.policy = policy
        self.events = events
        self.usage = usage
        self.denials: list[Call] = []

    def log(self, message: str) -> None:
        """A step of the model, on stderr."""
        log(self.cli, message)

    def path(self, path: str) -> Path:
        """``path`` made absolute against the working directory."""
        target = Path(path)
        return target if target.is_absolute() else self.cwd / target

    def read(self, path: str) -> tuple[int, str]:
        """The text of ``path``: (0, text), or (1, why) when it cannot be read."""
        target = self.path(path)

        def act() -> tuple[int, str]:
            try:
                return 0, target.read_text("utf-8")
            except OSError as exc:
                return 1, f"File does not exist or cannot be read: {target} ({exc.strerror})"

        return self._call(Call(0, "read", str(target)), lambda: self.policy.check_read(target), act)

    def write(self, path: str, text: str) -> tuple[int, str]:
        """Write ``text`` to ``path`` (parents created): (0, message), or (non-zero, why)."""
        target = self.path(path)

        def act() -> tuple[int, str]:
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, "utf-8")
            except OSError as exc:
                return 1, f"Could not write {target}: {exc.strerror}"
            return 0, f"Wrote {len(text)} characters to {target}"

        call = Call(0, "write", str(target), text, created=not target.exists())
        return self._call(call, lambda: self.policy.check_write(target), act)

    def bash(self, command: str) -> tuple[int, str]:
        """Run ``command`` in the working directory: (exit code, stdout and stderr)."""
        return self._call(Call(0, "bash", command), lambda: None, lambda: self.policy.run_bash(command, self.cwd))

    def _call(self, call: Call, check: Callable[[], None], act: Callable[[], tuple[int, str]]) -> tuple[int, str]:
        self.usage.calls += 1
        call.number = self.usage.calls
        self.log(f"tool {call.number}: {call.tool} {call.target}")
        self.events.tool_started(call, self.usage)
        try:
            check()
            call.exit_code, call.output = act()
        except Denied as refused:
            call.exit_code, call.output, call.denied = refused.exit_code, refused.message, True
            say(refused.message)
            self.events.tool_finished(call, self.usage)
            if refused.stop:
                self.denials.append(call)
                raise StopTurn(refused.message) from None
            return call.exit_code, call.output
        shown = call.output.strip().splitlines()
        self.log(f"  exit {call.exit_code}" + (f": {shown[-1][:200]}" if shown else ""))
        self.events.tool_finished(call, self.usage)
        return call.exit_code, call.output


def run_turn(cli: str, *, session: Session, prompt: str, cwd: Path, policy: Policy, events: Events) -> int:
    """One one-shot turn of ``session`` on ``prompt``: the model acts through the gate, then the turn ends (0)."""
    usage = Usage(len(prompt))
    gate = ToolGate(cli, cwd, policy, events, usage)
    how = f"resumed (turn {session.turns})" if session.turns > 1 else "new"
    log(cli, f"session {session.id} ({how}) in {cwd}")
    events.started(session)
    text = think(turn_of(session), gate)
    events.finished(text, usage, gate.denials)
    log(cli, f"turn ended: {text}")
    return 0


# -- the fake model ----------------------------------------------------------------------------------------------------

_REVIEWER: Final = re.compile(r"\A\s*# You are reviewer `([^`]+)` of a git-agentops integration")
_REVIEW_INPUT: Final = re.compile(r"Read the review input, `([^`]+)`")
_REVIEW_REPORT: Final = re.compile(r"Write your report, as one JSON document, to `([^`]+)`")
_COORDINATOR: Final = "You are the **coordinator**"
_TASK: Final = re.compile(r"^## Your task: (.*) \(([^()]*)\)[ \t]*$", re.M)
_INTENT: Final = re.compile(r'Create (\S+) containing "(.*)"')
_GOAL: Final = re.compile(r"^Run goal: (.*)$", re.M)
_ITEM: Final = re.compile(r'(\S+) says "(.*)"(?: after (\S+))?')
_TASK_ID: Final = re.compile(r"^\s*taskId:\s*(\S+)", re.M)
_SPAN: Final = re.compile(r"`([^`\n]+)`")
_RESUMED: Final = "The git-agentops supervisor resumed your session"
INSTRUCTIONS: Final = ".agentops/mailbox/instructions.json"


@dataclass(frozen=True, slots=True)
class Turn:
    """What the model works from: the prompt its session started with, and the newest prompt when resumed."""

    original: str
    latest: str | None = None

    @property
    def text(self) -> str:
        """Everything the model was told (templates may come from either prompt)."""
        return self.original if self.latest is None else f"{self.original}\n{self.latest}"

    @property
    def situation(self) -> str:
        """The prompt whose "why you were started" sections are current: the newest one."""
        return self.original if self.latest is None else self.latest


def turn_of(session: Session) -> Turn:
    """The :class:`Turn` of a session: a resume note adds to the original prompt; a whole new prompt replaces it."""
    prompts = session.prompts or [session.prompt]
    start = 0
    for i, text in enumerate(prompts):
        if i and text.lstrip().startswith("# You are "):
            start = i
    return Turn(prompts[start], prompts[-1] if len(prompts) - 1 > start else None)


def backticked(text: str, prefix: str) -> list[str]:
    """The commands the prompt shows in backticks that start with ``prefix`` (as whole words)."""
    spans = (span.strip() for span in _SPAN.findall(text))
    return [span for span in spans if span == prefix or span.startswith(prefix + " ")]


def template_flags(spans: Iterable[str]) -> set[str]:
    """The ``--flags`` the templates show (optional ``[--flag VALUE]`` ones too)."""
    flags: set[str] = set()
    for span in spans:
        for word in words(span):
            word = word.strip("[]")
            if word.startswith("--"):
                flags.add(word.split("=", 1)[0])
    return flags


def section(text: str, title: str) -> str:
    """The body of the ``## title`` section of ``text`` ("" when there is none)."""
    found = re.search(rf"^## {re.escape(title)}[ \t]*$", text, re.M)
    if found is None:
        return ""
    rest = text[found.end() :]
    following = re.search(r"^## ", rest, re.M)
    return (rest[: following.start()] if following else rest).strip()


def think(turn: Turn, gate: ToolGate) -> str:
    """Play the role the prompt gives; return the final message (the turn then ends)."""
    if turn.latest is not None:
        how = "the supervisor resumed me" if turn.latest.lstrip().startswith(_RESUMED) else "a follow-up prompt"
        gate.log(f"{how}: acting on my original prompt and the new prompt's sections")
    try:
        if _REVIEWER.match(turn.original):
            return review(turn, gate)
        if _COORDINATOR in turn.original:
            return coordinate(turn, gate)
        if _TASK.search(turn.original):
            return implement(turn, gate)
        gate.log("the prompt gives none of the roles I know (reviewer, coordinator, child task): nothing to do")
        return "I found nothing in this prompt that I know how to do."
    except StopTurn as stop:
        gate.log(f"stopping: {stop}")
        return f"I could not finish: a tool call was denied ({stop})"


def review(turn: Turn, gate: ToolGate) -> str:
    """Reviewer: read the review input, write an approving report naming every criterion, end the turn."""
    name = _REVIEWER.match(turn.original)
    assert name is not None
    reviewer = name.group(1)
    if section(turn.situation, "Your previous report was not accepted"):
        gate.log("my previous report was not accepted: writing a valid one")
    report_at = _REVIEW_REPORT.search(turn.text)
    if report_at is None:
        gate.log("the prompt names no report path: nothing I can write")
        return "The prompt does not say where my report goes."
    tasks: list[Any] = []
    input_at = _REVIEW_INPUT.search(turn.text)
    if input_at is None:
        gate.log("the prompt names no review input: reporting on no criteria")
    else:
        code, text = gate.read(input_at.group(1))
        try:
            doc = json.loads(text) if code == 0 else {}
        except ValueError:
            gate.log("the review input is not JSON: reporting on no criteria")
            doc = {}
        tasks = [t for t in doc.get("tasks") or [] if isinstance(t, dict)] if isinstance(doc, dict) else []
    criteria = [
        {"taskId": str(task.get("id")), "id": str(criterion.get("id")), "result": "pass"}
        for task in tasks
        for criterion in task.get("criteria") or []
        if isinstance(criterion, dict)
    ]
    report = {
        "reviewer": reviewer,
        "verdict": "approve",
        "summary": f"All {len(criteria)} criteria of {len(tasks)} tasks pass.",
        "criteria": criteria,
        "findings": [],
    }
    code, why = gate.write(report_at.group(1), json.dumps(report, indent=2) + "\n")
    if code != 0:
        return f"I could not write my report: {why}"
    return f"Approved: {len(criteria)} criteria pass. Report written to {report_at.group(1)}."


def request(turn: Turn, gate: ToolGate, action: str, fields: Sequence[tuple[str, str]]) -> str | None:
    """The ``git agentops-request ACTION`` command filled from the prompt's template; None when it shows none.

    Every value is shell-quoted. A flag the template does not show is left out (the model does not invent flags).
    """
    prefix = f"git agentops-request {action}"
    spans = backticked(turn.text, prefix)
    if not spans:
        gate.log(f"the prompt shows no `{prefix}` command: I cannot {action}")
        return None
    flags = template_flags(spans)
    command = [prefix]
    for flag, value in fields:
        if flag not in flags:
            gate.log(f"the prompt's `{prefix}` shows no {flag}: leaving out {flag} {value!r}")
            continue
        command.append(f"{flag} {shlex.quote(value)}")
    return " ".join(command)


def goal_items(goal: str) -> list[tuple[str, str, str | None]]:
    """``Write files: <path> says "<content>"[ after <path>]; ...`` as (path, content, after) items."""
    _, sep, rest = goal.partition("Write files:")
    if not sep:
        return []
    items = []
    for raw in rest.split("; "):
        found = _ITEM.fullmatch(raw.strip())
        if found is not None:
            items.append((found.group(1), found.group(2), found.group(3)))
    return items


def coordinate(turn: Turn, gate: ToolGate) -> str:
    """Coordinator: plan the root task and one child per goal item, finalize when told every child is delivered."""
    why = section(turn.situation, "Why you were started now")
    if "is blocked" in why:
        gate.log("a child is blocked: ending my turn")
        return "A child task is blocked; I end my turn."
    code, text = gate.read(INSTRUCTIONS)
    try:
        doc = json.loads(text) if code == 0 else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        gate.log(f"cannot read {INSTRUCTIONS}: ending my turn")
        return "I could not read my instructions."
    found = _GOAL.search(turn.original)
    goal = found.group(1).strip() if found else str(doc.get("goal") or "")
    if doc.get("rootTaskId") is None:
        command = request(
            turn,
            gate,
            "plan",
            [
                ("--title", goal[:60]),
                ("--intent", goal),
                ("--criterion", "every file exists"),
                ("--criterion", "every file holds its content"),
            ],
        )
        if command is None:
            return "I cannot plan: the prompt shows no plan command."
        code, out = gate.bash(command)
        if code != 0:
            return f"The supervisor refused my plan: {out.strip()[:300]}"
    ids = {str(t.get("title")): str(t.get("id")) for t in doc.get("tasks") or [] if isinstance(t, dict)}
    planned = 0
    items = goal_items(goal)
    if not items:
        gate.log("the goal lists no 'Write files:' items: no child task to plan")
    for path, content, after in items:
        title = f"Write {path}"
        if title in ids:
            continue
        fields = [
            ("--title", title),
            ("--intent", f'Create {path} containing "{content}"'),
            ("--criterion", f'{path} holds "{content}"'),
        ]
        if after is not None:
            if f"Write {after}" in ids:
                fields.append(("--depends-on", ids[f"Write {after}"]))
            else:
                gate.log(f"no task writes {after}: planning {title} without that dependency")
        command = request(turn, gate, "worker", fields)
        if command is None:
            return "I cannot plan child tasks: the prompt shows no worker command."
        code, out = gate.bash(command)
        task_id = _TASK_ID.search(out)
        if code == 0 and task_id is not None:
            ids[title] = task_id.group(1)
            planned += 1
        else:
            gate.log(f"the supervisor did not accept {title}: {out.strip()[:300]}")
    if "Every child task" in why and planned == 0:
        if not backticked(turn.text, "git agentops-request finalize"):
            gate.log("every child is delivered, but the prompt shows no `git agentops-request finalize`")
            return "Every child is delivered; I was not shown how to finalize."
        code, out = gate.bash("git agentops-request finalize")
        return f"Finalize requested (exit {code})."
    return f"Planned {planned} child task(s); ending my turn to wait for them."


_ALSO: Final = re.compile(r"Also run: `(.+)`")


def implement(turn: Turn, gate: ToolGate) -> str:
    """Child: write the file the intent names, then commit, verify and hand off -- each only if the prompt shows it."""
    task = _TASK.search(turn.original)
    assert task is not None
    title = task.group(1)
    following = [line.strip() for line in turn.original[task.end() :].splitlines() if line.strip()]
    intent = _INTENT.fullmatch(following[0]) if following else None
    if intent is None:
        gate.log(f"I do not understand the intent of {title!r}: ending my turn")
        return "I do not know how to do this task."
    path, content = intent.group(1), intent.group(2)
    for line in following[1:]:  # a task may ask for more, destructive or not: this model does as it is told
        also = _ALSO.fullmatch(line)
        if also is not None:
            gate.bash(also.group(1))
    if section(turn.situation, "Why you were started again"):
        gate.log("started again after a failure: doing my task again")
    gate.write(path, content + "\n")
    done = [f"wrote {path}"]
    if backticked(turn.text, "git add -A && git commit -m"):
        code, _ = gate.bash(f"git add -A && git commit -m {shlex.quote(title)}")
        done.append(f"committed (exit {code})")
    else:
        gate.log("the prompt shows no commit command: not committing")
    if backticked(turn.text, "git agentops-verify"):
        code, _ = gate.bash("git agentops-verify")
        done.append(f"verified (exit {code})")
    if backticked(turn.text, "git agentops-request handoff"):
        code, _ = gate.bash("git agentops-request handoff")
        done.append(f"handed off (exit {code})")
    else:
        gate.log("the prompt shows no handoff command: not handing off")
    return "Done: " + ", ".join(done) + "."


# -- Claude Code -------------------------------------------------------------------------------------------------------

CLAUDE_TOOLS: Final = (
    "Task", "Bash", "CronCreate", "CronDelete", "CronList", "Edit", "EnterWorktree", "ExitWorktree", "NotebookEdit",
    "Read", "ReportFindings", "ScheduleWakeup", "SendMessage", "Skill", "TaskCreate", "TaskGet", "TaskList",
    "TaskOutput", "TaskStop", "TaskUpdate", "WebFetch", "WebSearch", "Workflow", "Write",
)  # fmt: skip
"""The tools Claude Code 2.1.197 lists in its ``init`` event. There is no Glob, Grep or LS in 2.x (it searches with
Bash): a rule naming them is accepted without a word and grants nothing."""
CLAUDE_STREAM_OUTPUT_TOKENS: Final = 1
"""The ``output_tokens`` on every ``assistant`` event: Claude Code copies the usage of the API's ``message_start``
(output not counted yet) onto each content block it emits; the real count reaches only the final ``result``."""
_RULE: Final = re.compile(r"([A-Za-z_][\w-]*)(?:\((.*)\))?", re.S)


def split_tool_rules(values: Iterable[str]) -> list[str]:
    """``--allowedTools`` values as rules: each value split on commas and spaces outside parentheses."""
    rules: list[str] = []
    for value in values:
        depth = 0
        buf: list[str] = []
        for ch in value:
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth = max(0, depth - 1)
            if depth == 0 and (ch == "," or ch.isspace()):
                if buf:
                    rules.append("".join(buf))
                buf = []
                continue
            buf.append(ch)
        if buf:
            rules.append("".join(buf))
    return rules


def bash_rule_matches(spec: str | None, command: str) -> bool:
    """Whether a ``Bash(spec)`` rule allows the simple command ``command`` (Claude Code's rule syntax).

    ``Bash`` alone matches everything; ``Bash(prefix:*)`` is the legacy prefix form; otherwise ``*`` matches any
    characters, and a spec ending in `` *`` also matches the bare prefix; without ``*`` the match is exact.
    """
    if spec is None or spec in ("", "*"):
        return True
    if spec.endswith(":*"):
        return command.startswith(spec[:-2])
    if "*" not in spec:
        return command == spec
    if spec.endswith(" *") and command == spec[:-2]:
        return True
    return re.fullmatch(".*".join(re.escape(part) for part in spec.split("*")), command, re.S) is not None


class ClaudePermissions(Policy):
    """Claude Code's permission rules in print mode, where nothing can be asked: what is not allowed is denied."""

    def __init__(
        self,
        cwd: Path,
        mode: str,
        allowed: Sequence[str],
        disallowed: Sequence[str],
        dirs: Sequence[Path],
        *,
        pre_tool: PreTool | None = None,
    ) -> None:
        self.cwd = cwd
        self.mode = mode
        self.allowed = [self._rule(r) for r in allowed]
        self.disallowed = [self._rule(r) for r in disallowed]
        self.dirs = list(dirs)
        self.pre_tool = pre_tool
        for tool in dict.fromkeys(tool for tool, _ in (*self.allowed, *self.disallowed)):
            if tool not in CLAUDE_TOOLS:  # Claude Code says nothing; the stand-in's log says why a rule did nothing
                log("claude", f"a permission rule names {tool!r}, which is no Claude Code tool: it matches nothing")

    @staticmethod
    def _rule(text: str) -> tuple[str, str | None]:
        found = _RULE.fullmatch(text.strip())
        return (found.group(1), found.group(2)) if found else (text.strip(), None)

    @staticmethod
    def message(tool: str) -> str:
        """What Claude Code answers a tool call nobody granted."""
        return f"Claude requested permissions to use {tool}, but you haven't granted it yet."

    def _file_rule(self, rules: Sequence[tuple[str, str | None]], tools: Sequence[str], path: Path) -> bool:
        relative = os.path.relpath(path, self.cwd)
        return any(
            tool in tools and (spec is None or fnmatch.fnmatch(relative, spec) or fnmatch.fnmatch(str(path), spec))
            for tool, spec in rules
        )

    def check_read(self, path: Path) -> None:
        """Reading is always allowed, unless a ``--disallowedTools`` rule says otherwise."""
        if self._file_rule(self.disallowed, ("Read",), path):
            raise Denied(self.message("Read"))

    def check_write(self, path: Path) -> None:
        """Writes: ``acceptEdits`` inside a working directory, an ``Edit``/``Write`` rule, or ``bypassPermissions``."""
        if self._file_rule(self.disallowed, ("Edit", "Write"), path):
            raise Denied(self.message("Write"))
        if self.mode == "bypassPermissions":
            return
        if self.mode != "plan":
            if self.mode == "acceptEdits" and any(inside(path, d) for d in self.dirs):
                return
            if self._file_rule(self.allowed, ("Edit", "Write"), path):
                return
        raise Denied(self.message("Write"))

    def check_bash(self, command: str) -> None:
        """Bash: the ``PreToolUse`` hooks first (they run before the rules, in every mode), then every part of the
        command must match an allow rule (none a deny rule), or ``bypassPermissions``."""
        if self.pre_tool is not None:
            self.pre_tool("Bash", {"command": command, "description": "Run a command"})
        parts = [text for text, _ in split_commands(command)]
        if any(tool == "Bash" and bash_rule_matches(spec, p) for tool, spec in self.disallowed for p in parts):
            raise Denied(self.message("Bash"))
        if self.mode == "bypassPermissions":
            return
        if self.mode != "plan" and parts:
            rules = [spec for tool, spec in self.allowed if tool == "Bash"]
            if all(any(bash_rule_matches(spec, p) for spec in rules) for p in parts):
                return
        raise Denied(self.message("Bash"))


class ClaudeEvents(Events):
    """``--output-format``: ``text`` (the final message), ``json`` (one result object), ``stream-json`` (events).

    As in Claude Code 2.1.197: ``usage`` is on every ``assistant`` event (repeated on each content block of one API
    message, with the output not yet counted), ``total_cost_usd`` and the real totals only in the final ``result``;
    a run stopped before its result leaves its messages' usage and no cost.
    """

    def __init__(self, output_format: str, *, cwd: Path, mode: str, model: str) -> None:
        self.format = output_format
        self.cwd = cwd
        self.mode = mode
        self.model = model
        self.begun = time.monotonic()

    def _tool_id(self, call: Call) -> str:
        return f"toolu_{self.session_id.replace('-', '')[:12]}{call.number:04d}"

    @staticmethod
    def _input(call: Call) -> dict[str, Any]:
        if call.tool == "bash":
            return {"command": call.target, "description": "Run a command"}
        if call.tool == "write":
            return {"file_path": call.target, "content": call.content}
        return {"file_path": call.target}

    def _assistant(self, content: list[dict[str, Any]], usage: Usage, stop_reason: str) -> None:
        """One API message, as Claude Code streams it: an ``assistant`` event per content block, each repeating the
        message's id and its ``message_start`` usage (this message's input, :data:`CLAUDE_STREAM_OUTPUT_TOKENS`)."""
        tokens_in, _ = usage.delta()
        message_id = f"msg_{uuid.uuid4().hex[:24]}"
        for block in content:
            emit(
                {
                    "type": "assistant",
                    "session_id": self.session_id,
                    "parent_tool_use_id": None,
                    "message": {
                        "id": message_id,
                        "type": "message",
                        "role": "assistant",
                        "model": self.model,
                        "content": [block],
                        "stop_reason": stop_reason,
                        "usage": {
                            "input_tokens": tokens_in,
                            "output_tokens": CLAUDE_STREAM_OUTPUT_TOKENS,
                            "cache_creation_input_tokens": 0,
                            "cache_read_input_tokens": 0,
                        },
                    },
                }
            )

    def started(self, session: Session) -> None:
        """stream-json: the ``system``/``init`` event, which carries the session id first."""
        super().started(session)
        if self.format == "stream-json":
            emit(
                {
                    "type": "system",
                    "subtype": "init",
                    "cwd": str(self.cwd),
                    "session_id": self.session_id,
                    "tools": list(CLAUDE_TOOLS),
                    "mcp_servers": [],
                    "model": self.model,
                    "permissionMode": self.mode,
                    "apiKeySource": "none",
                }
            )

    def tool_started(self, call: Call, usage: Usage) -> None:
        """stream-json: the assistant message asking for the tool -- a sentence, then the ``tool_use`` -- with this
        message's usage on both of its events."""
        if self.format == "stream-json":
            name = {"bash": "Bash", "write": "Write", "read": "Read"}[call.tool]
            says = {"bash": "Running", "write": "Writing", "read": "Reading"}[call.tool]
            text = {"type": "text", "text": f"{says} {call.target.splitlines()[0] if call.target else ''}".rstrip()}
            block = {"type": "tool_use", "id": self._tool_id(call), "name": name, "input": self._input(call)}
            self._assistant([text, block], usage, "tool_use")

    def tool_finished(self, call: Call, usage: Usage) -> None:
        """stream-json: the user message carrying the tool result."""
        if self.format == "stream-json":
            result = {
                "type": "tool_result",
                "tool_use_id": self._tool_id(call),
                "content": call.output,
                "is_error": call.is_error,
            }
            emit(
                {
                    "type": "user",
                    "session_id": self.session_id,
                    "parent_tool_use_id": None,
                    "message": {"role": "user", "content": [result]},
                }
            )

    def finished(self, text: str, usage: Usage, denials: Sequence[Call]) -> None:
        """The final message (text), or the ``result`` object (json, and last of the stream)."""
        if self.format == "text":
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
            return
        if self.format == "stream-json":
            self._assistant([{"type": "text", "text": text}], usage, "end_turn")
        emit(
            {
                "type": "result",
                "subtype": "success",
                "is_error": False,
                "duration_ms": int((time.monotonic() - self.begun) * 1000),
                "duration_api_ms": 0,
                "num_turns": usage.calls + 1,
                "result": text,
                "session_id": self.session_id,
                "total_cost_usd": usage.cost,
                "usage": {
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                },
                "permission_denials": [
                    {
                        "tool_name": {"bash": "Bash", "write": "Write", "read": "Read"}[c.tool],
                        "tool_use_id": self._tool_id(c),
                        "tool_input": self._input(c),
                    }
                    for c in denials
                ],
            }
        )


# -- Codex -------------------------------------------------------------------------------------------------------------

SANDBOX_MODES: Final = ("read-only", "workspace-write", "danger-full-access")
LOGIN_SHELLS: Final = ("bash", "zsh", "sh")
_CLONE_NEWUSER: Final = 0x10000000
_BWRAP: list[str | None] = []


def bwrap_failure() -> str | None:
    """What bubblewrap prints when it cannot build Codex's sandbox here (``bwrap: setting up uid map: Permission
    denied``); None when it can.

    Why a probe and not a setting: whether ``--sandbox read-only``/``workspace-write`` work depends on where Codex
    runs -- inside the agentops sandbox Landlock refuses the write of a nested user namespace's ``uid_map`` -- so
    the stand-in asks the kernel what bwrap asks it: a child process unshares a user namespace and maps its uid
    (bwrap writes ``uid_map`` first, dying with ``setting up uid map: ERROR``). Asked once per process.
    """
    if _BWRAP:
        return _BWRAP[0]
    failure: str | None = None
    if sys.platform == "linux":
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        uid = os.getuid()
        reader, writer = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: unshare, map, report; never returns into Python's cleanup
            message = ""
            try:
                if libc.unshare(_CLONE_NEWUSER) != 0:
                    code = ctypes.get_errno()
                    if code == 1:  # EPERM
                        message = (
                            "No permissions to creating new namespace, likely because the kernel does not allow "
                            "non-privileged user namespaces. On e.g. debian this can be enabled with 'sysctl "
                            "kernel.unprivileged_userns_clone=1'."
                        )
                    else:
                        message = f"Creating new namespace failed: {os.strerror(code)}"
                else:
                    try:
                        with open("/proc/self/uid_map", "w", encoding="ascii") as handle:
                            handle.write(f"{uid} {uid} 1\n")
                    except OSError as exc:
                        message = f"setting up uid map: {exc.strerror}"
                os.write(writer, message.encode())
            finally:
                os._exit(0)
        os.close(writer)
        with os.fdopen(reader, "rb") as handle:
            said = handle.read().decode()
        os.waitpid(pid, 0)
        failure = f"bwrap: {said}" if said else None
    _BWRAP.append(failure)
    return failure


def user_shell() -> str:
    """The shell Codex runs commands with: the account's login shell (``$SHELL`` if that names none it knows)."""
    import pwd

    try:
        account = pwd.getpwuid(os.getuid()).pw_shell
    except KeyError:
        account = ""
    for shell in (account, os.environ.get("SHELL") or ""):
        if os.path.basename(shell) in LOGIN_SHELLS and os.access(shell, os.X_OK):
            return shell
    return "/bin/bash" if os.access("/bin/bash", os.X_OK) else "/bin/sh"


class CodexSandbox(Policy):
    """Codex's sandbox for ``codex exec`` (which never asks for approval): writes only under the writable roots.

    Under ``workspace-write`` the roots are the working directory, each ``--add-dir``, the configured
    ``writable_roots`` and ``/tmp`` and ``$TMPDIR`` (unless excluded in the config); a root's top-level ``.git``
    directory stays read-only, as in Codex. Refused file writes are rejected patches; refused commands still run
    their other parts, and the refused part fails the way the command fails on a read-only file system.

    What Codex 0.171 does around that: ``read-only`` and ``workspace-write`` run every command (and patch) under
    bubblewrap, which cannot start nested in a sandbox that refuses it a user namespace (:func:`bwrap_failure`):
    then everything fails with bwrap's message and exit 1, and no event reports it; ``danger-full-access`` runs
    commands directly. Every command runs in the user's shell as a *login* shell (``bash -lc``), whose profile
    (Debian's ``/etc/profile``) resets ``PATH`` -- ``git agentops-request`` is then not found --, unless
    ``allow_login_shell = false``. The ``PreToolUse`` hooks run first (``pre_tool``, ``hosthooks.codex_pre_tool``):
    a blocked command is not run and not reported either; the model gets ``Command blocked by PreToolUse hook:
    REASON. Command: COMMAND`` and goes on. Reads are shell commands here too (``cat PATH``).
    """

    def __init__(
        self,
        mode: str,
        roots: Sequence[Path],
        *,
        shell: str = "/bin/sh",
        login: bool = False,
        pre_tool: PreTool | None = None,
    ) -> None:
        self.mode = mode
        self.roots = [Path(os.path.realpath(r)) for r in roots]
        self.shell = shell
        self.login = login
        self.pre_tool = pre_tool
        self._screened: tuple[str, str, Denied | None] | None = None

    def shown(self, command: str) -> str:
        """The command as Codex reports it: ``/bin/bash -lc 'COMMAND'``."""
        return f"{self.shell} {'-lc' if self.login else '-c'} {shlex.quote(command)}"

    def shell_command(self, tool: str, target: str) -> str:
        """The shell command a call is to Codex (a read is ``cat PATH``)."""
        return f"cat {shlex.quote(target)}" if tool == "read" else target

    def _verdict(self, tool: str, target: str) -> Denied | None:
        if tool != "write" and self.pre_tool is not None:
            command = self.shell_command(tool, target)
            try:
                self.pre_tool("Bash", {"command": command})
            except Denied as blocked:
                return Denied(f"Command blocked by PreToolUse hook: {blocked.message}. Command: {command}", stop=False)
        if self.mode != "danger-full-access" and (failure := bwrap_failure()) is not None:
            return Denied(failure + "\n", stop=False, exit_code=1)
        return None

    def screen(self, call: Call) -> bool:
        """Whether ``call`` runs (and is reported): decided before Codex reports it -- hooks, then bubblewrap --
        and kept for the check that follows (the gate reports a call before it checks it)."""
        verdict = self._verdict(call.tool, call.target)
        self._screened = (call.tool, call.target, verdict)
        return verdict is None

    def _refuse_unscreened(self, tool: str, target: str) -> None:
        screened, self._screened = self._screened, None
        if screened is not None and screened[:2] == (tool, target):
            verdict = screened[2]
        else:
            verdict = self._verdict(tool, target)
        if verdict is not None:
            raise verdict

    def writable(self, path: Path) -> bool:
        """Whether the sandbox lets a process write ``path``."""
        if self.mode == "danger-full-access":
            return True
        if self.mode == "read-only":
            return False
        for root in self.roots:
            if inside(path, root) and not ((root / ".git").is_dir() and inside(path, root / ".git")):
                return True
        return False

    def check_read(self, path: Path) -> None:
        """A read is a command (``cat PATH``): hooks and bubblewrap may stop it."""
        self._refuse_unscreened("read", str(path))

    def check_write(self, path: Path) -> None:
        """A file write (an ``apply_patch``) outside the writable roots is rejected."""
        self._refuse_unscreened("write", str(path))
        if self.writable(path):
            return
        if self.mode == "read-only":
            raise Denied(
                "patch rejected: writing is blocked by read-only sandbox; rejected by user approval settings",
                stop=False,
            )
        raise Denied("patch rejected: writing outside of the project; rejected by user approval settings", stop=False)

    def check_bash(self, command: str) -> None:
        """Never raises: the sandbox does not refuse commands, it makes their writes fail (see :meth:`run_bash`)."""
        return None

    def _shell(self, command: str, cwd: Path) -> tuple[int, str]:
        done = subprocess.run(
            [self.shell, "-lc" if self.login else "-c", command],
            cwd=cwd,
            capture_output=True,
            text=True,
            errors="replace",
            check=False,
        )
        return done.returncode, done.stdout + done.stderr

    def _failure(self, text: str, cwd: Path) -> tuple[int, str] | None:
        """How the simple command ``text`` fails in this sandbox; None when it may run."""
        effect = effect_of(text, cwd)
        if effect is None or all(self.writable(p) for p in effect.writes):
            return None
        if effect.kind == "git":
            if not self.writable(effect.dirs.git_dir):
                return 128, f"fatal: Unable to create '{effect.dirs.git_dir}/index.lock': Read-only file system\n"
            return 128, (
                "error: insufficient permission for adding an object to repository database "
                f"{effect.dirs.common_dir}/objects\nfatal: failed to write object\n"
            )
        blocked = next(p for p in effect.writes if not self.writable(p))
        return 1, f"error: [Errno 30] Read-only file system: '{blocked}'\n"

    def run_bash(self, command: str, cwd: Path) -> tuple[int, str]:
        """Run ``command``; parts that would write outside the roots fail, the rest run (shell operators honoured)."""
        self._refuse_unscreened("bash", command)
        parts = split_commands(command)
        failures = [self._failure(text, cwd) for text, _ in parts]
        if not any(failures):
            return self._shell(command, cwd)
        code, output, previous = 0, [], ""
        i = 0
        while i < len(parts):
            group = [i]  # a pipeline runs, or fails, as one
            while parts[group[-1]][1] == "|" and group[-1] + 1 < len(parts):
                group.append(group[-1] + 1)
            if previous in ("", ";", "&", "\n") or (previous == "&&") == (code == 0):
                failed = next((failures[j] for j in group if failures[j]), None)
                if failed is not None:
                    code, out = failed
                else:
                    code, out = self._shell(" | ".join(parts[j][0] for j in group), cwd)
                output.append(out)
            previous = parts[group[-1]][1]
            i = group[-1] + 1
        return code, "".join(output)


class CodexEvents(Events):
    """``codex exec`` output: JSON events with ``--json``, else progress on stderr and the final message on stdout.

    As in Codex 0.171: commands are reported as the shell runs them (``/bin/bash -lc '...'``); a call the sandbox
    screened out (a hook blocked it, bubblewrap could not start) is not reported at all; usage comes only in
    ``turn.completed``, so a turn stopped before it ends reports none.
    """

    def __init__(
        self,
        json_mode: bool,
        *,
        cwd: Path,
        sandbox: str,
        model: str,
        last_message: Path | None,
        policy: CodexSandbox | None = None,
        warnings: Sequence[str] = (),
    ) -> None:
        self.json = json_mode
        self.cwd = cwd
        self.sandbox = sandbox
        self.model = model
        self.last_message = last_message
        self.policy = policy
        self.warnings = list(warnings)
        self.items = 0
        self.ids: dict[int, str] = {}
        self.hidden: set[int] = set()

    def _next_id(self) -> str:
        self.items += 1
        return f"item_{self.items - 1}"

    def _item_id(self, call: Call) -> str:
        if call.number not in self.ids:
            self.ids[call.number] = self._next_id()
        return self.ids[call.number]

    def _command(self, call: Call) -> str:
        if self.policy is None:
            return f"cat {shlex.quote(call.target)}" if call.tool == "read" else call.target
        return self.policy.shown(self.policy.shell_command(call.tool, call.target))

    def started(self, session: Session) -> None:
        """``thread.started`` (the thread id), warnings as ``error`` items, ``turn.started``; without --json, the
        banner on stderr."""
        super().started(session)
        if self.json:
            emit({"type": "thread.started", "thread_id": self.session_id})
            for warning in self.warnings:
                emit({"type": "item.completed", "item": {"id": self._next_id(), "type": "error", "message": warning}})
            emit({"type": "turn.started"})
        else:
            say(
                "OpenAI Codex v0.171.0 (stand-in)\n--------\n"
                f"workdir: {self.cwd}\nmodel: {self.model}\nsandbox: {self.sandbox}\n"
                f"session id: {self.session_id}\n--------"
            )
            for warning in self.warnings:
                say(f"WARNING: {warning}")

    def failed(self, message: str) -> None:
        """The turn fails before the model acted (no model provider, no credentials): ``error``, ``turn.failed``."""
        if self.json:
            emit({"type": "error", "message": message})
            emit({"type": "turn.failed", "error": {"message": message}})
        else:
            say(f"ERROR: {message}")

    def tool_started(self, call: Call, usage: Usage) -> None:
        """``item.started`` for a command (file changes are reported once, completed); a screened-out call, none."""
        if self.policy is not None and not self.policy.screen(call):
            self.hidden.add(call.number)
            return
        if call.tool == "write":
            return
        if self.json:
            emit(
                {
                    "type": "item.started",
                    "item": {
                        "id": self._item_id(call),
                        "type": "command_execution",
                        "command": self._command(call),
                        "aggregated_output": "",
                        "exit_code": None,
                        "status": "in_progress",
                    },
                }
            )
        else:
            say(f"exec\n{self._command(call)} in {self.cwd}")

    def tool_finished(self, call: Call, usage: Usage) -> None:
        """``item.completed``: a ``command_execution`` with its output and exit code, or a ``file_change``."""
        if call.number in self.hidden:
            return
        status = "failed" if call.is_error else "completed"
        if call.tool == "write":
            item: dict[str, Any] = {
                "id": self._item_id(call),
                "type": "file_change",
                "changes": [{"path": call.target, "kind": "add" if call.created else "update"}],
                "status": status,
            }
        else:
            item = {
                "id": self._item_id(call),
                "type": "command_execution",
                "command": self._command(call),
                "aggregated_output": call.output,
                "exit_code": call.exit_code,
                "status": status,
            }
        if self.json:
            emit({"type": "item.completed", "item": item})
        else:
            say(f"{call.tool} {status} (exit {call.exit_code}):\n{call.output[-2000:]}")

    def finished(self, text: str, usage: Usage, denials: Sequence[Call]) -> None:
        """The ``agent_message`` and ``turn.completed`` with the usage; ``-o FILE`` gets the final message."""
        if self.json:
            emit({"type": "item.completed", "item": {"id": self._next_id(), "type": "agent_message", "text": text}})
            emit(
                {
                    "type": "turn.completed",
                    "usage": {
                        "input_tokens": usage.input_tokens,
                        "cached_input_tokens": 0,
                        "cache_write_input_tokens": 0,
                        "output_tokens": usage.output_tokens,
                        "reasoning_output_tokens": 0,
                    },
                }
            )
        else:
            say(f"codex\n{text}\ntokens used: {usage.input_tokens + usage.output_tokens}")
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
        if self.last_message is not None:
            self.last_message.write_text(text, "utf-8")


# -- opencode ----------------------------------------------------------------------------------------------------------


def wildcard(text: str, pattern: str) -> bool:
    """opencode's pattern match: ``*`` any characters, ``?`` one, anchored; a trailing `` *`` may match nothing."""
    regex = "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)
    if regex.endswith(r"\ .*"):
        regex = regex[: -len(r"\ .*")] + "( .*)?"
    return re.fullmatch(regex, text, re.S) is not None


def merge_config(base: Any, over: Any) -> Any:
    """Deep merge (objects merged key by key, ``over`` winning), keeping ``base``'s key order first."""
    if isinstance(base, dict) and isinstance(over, dict):
        merged = dict(base)
        for key, value in over.items():
            merged[key] = merge_config(base[key], value) if key in base else value
        return merged
    return over


def permission_rules(permission: Any) -> list[tuple[str, str, str]]:
    """A ``permission`` config as (permission, pattern, action) rules in order, after opencode's defaults."""
    rules = [("*", "*", "allow"), ("external_directory", "*", "ask")]
    if isinstance(permission, str):
        rules.append(("*", "*", permission))
    elif isinstance(permission, dict):
        for key, value in permission.items():
            if isinstance(value, str):
                rules.append((str(key), "*", value))
            elif isinstance(value, dict):
                rules += [(str(key), str(pattern), str(action)) for pattern, action in value.items()]
    return rules


def decide(rules: Sequence[tuple[str, str, str]], permission: str, pattern: str) -> str:
    """The action for ``permission`` on ``pattern``: the last matching rule wins (``ask`` when none matches)."""
    action = "ask"
    for rule_permission, rule_pattern, rule_action in rules:
        if wildcard(permission, rule_permission) and wildcard(pattern, rule_pattern):
            action = rule_action
    return action


class OpencodePermissions(Policy):
    """opencode's permission rules in ``run`` mode, where an ``ask`` is rejected (approved with ``--auto``)."""

    def __init__(
        self, cwd: Path, rules: Sequence[tuple[str, str, str]], *, auto: bool, pre_tool: PreTool | None = None
    ) -> None:
        self.cwd = cwd
        self.rules = list(rules)
        self.auto = auto
        self.pre_tool = pre_tool

    def require(self, permission: str, pattern: str) -> None:
        """Raise :class:`Denied` unless ``permission`` on ``pattern`` is allowed (or asked, with ``--auto``)."""
        action = decide(self.rules, permission, pattern)
        if action == "allow":
            return
        if action == "ask":
            if self.auto:
                log("opencode", f"permission requested: {permission} ({pattern}); auto-approving (--auto)")
                return
            say(f"permission requested: {permission} ({pattern}); auto-rejecting")
            raise Denied(f"The user rejected permission to use this specific tool call ({permission}: {pattern}).")
        raise Denied(
            "The user has specified a rule which prevents you from using this specific tool call "
            f"({permission}: {pattern})."
        )

    def _file(self, permission: str, path: Path) -> None:
        if not inside(path, self.cwd):
            self.require("external_directory", str(path))
            self.require(permission, str(path))
        else:
            self.require(permission, os.path.relpath(os.path.realpath(path), os.path.realpath(self.cwd)))

    def check_read(self, path: Path) -> None:
        """``read`` (and ``external_directory`` outside the working directory)."""
        self._file("read", path)

    def check_write(self, path: Path) -> None:
        """``edit`` (and ``external_directory`` outside the working directory)."""
        self._file("edit", path)

    def check_bash(self, command: str) -> None:
        """The plugins' ``tool.execute.before`` first; then per simple command: ``external_directory`` for the git
        dirs it writes outside the cwd, then ``bash``."""
        if self.pre_tool is not None:
            self.pre_tool("bash", {"command": command, "description": "Run a command"})
        for text, _ in split_commands(command):
            effect = effect_of(text, self.cwd)
            for path in effect.writes if effect is not None else ():
                if not inside(path, self.cwd):
                    self.require("external_directory", str(path))
            self.require("bash", text)


class OpencodeEvents(Events):
    """``opencode run --format json``: one event per line, each with ``type``, ``timestamp`` and ``sessionID``.

    Each tool call is one model step: ``step_start`` when the model asks for it, then -- only once the tool has
    run -- its ``tool_use`` and the step's ``step_finish`` with the step's tokens and cost. A run stopped inside a
    tool call (``git agentops-request handoff`` waiting for the supervisor) therefore never reports that step's
    usage, as in opencode 1.18.
    """

    def __init__(self, json_mode: bool) -> None:
        self.json = json_mode
        self.message_id = f"msg_{uuid.uuid4().hex[:24]}"
        self.parts = 0

    def _emit(self, kind: str, part: dict[str, Any]) -> None:
        self.parts += 1
        base = {
            "id": f"prt_{self.message_id[4:16]}{self.parts:04d}",
            "sessionID": self.session_id,
            "messageID": self.message_id,
        }
        emit({"type": kind, "timestamp": now_ms(), "sessionID": self.session_id, "part": {**base, **part}})

    def _step_finish(self, usage: Usage, reason: str) -> None:
        tokens_in, tokens_out = usage.delta()
        self._emit(
            "step_finish",
            {
                "type": "step-finish",
                "reason": reason,
                "cost": cost_usd(tokens_in, tokens_out),
                "tokens": {"input": tokens_in, "output": tokens_out, "reasoning": 0, "cache": {"read": 0, "write": 0}},
            },
        )

    def tool_started(self, call: Call, usage: Usage) -> None:
        """Each tool call is one model step: ``step_start``."""
        if self.json:
            self._emit("step_start", {"type": "step-start"})

    def tool_finished(self, call: Call, usage: Usage) -> None:
        """``tool_use`` with the call's state (``error`` when refused or failed), then the step's ``step_finish``."""
        failed = call.denied or (call.tool != "bash" and call.exit_code != 0)
        if not self.json:
            log("opencode", f"| {call.tool} {'error' if failed else 'completed'}")
            return
        if call.tool == "bash":
            tool_input: dict[str, Any] = {"command": call.target, "description": "Run a command"}
        else:
            tool_input = {"filePath": call.target}
            if call.tool == "write":
                tool_input["content"] = call.content
        state: dict[str, Any] = {
            "status": "error" if failed else "completed",
            "input": tool_input,
            "output": call.output,
            "time": {"start": now_ms(), "end": now_ms()},
        }
        if failed:
            state["error"] = call.output
        else:
            state["metadata"] = {"exit": call.exit_code} if call.tool == "bash" else {}
        self._emit("tool_use", {"type": "tool", "tool": call.tool, "callID": f"call_{call.number}", "state": state})
        self._step_finish(usage, "tool-calls")

    def finished(self, text: str, usage: Usage, denials: Sequence[Call]) -> None:
        """The last step: the text part and ``step_finish`` with reason ``stop``; without json, just the text."""
        if not self.json:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
            return
        self._emit("step_start", {"type": "step-start"})
        self._emit("text", {"type": "text", "text": text, "time": {"start": now_ms(), "end": now_ms()}})
        self._step_finish(usage, "stop")
