"""A mock model server for the real agent CLIs: the fake model of ``tests/standins``, spoken over four model APIs.

Why: the stand-ins prove the supervisor drives CLIs shaped like the real ones; only the real CLIs prove it drives
*them* -- their argv, sandboxes, hooks, session files and output. They need a model. This one listens on
``127.0.0.1:0`` (standard library only) and speaks what each CLI calls:

* Claude Code: Anthropic Messages with SSE (``POST /v1/messages``) and ``/v1/messages/count_tokens``;
* Codex: OpenAI Responses, streamed (``POST /v1/responses``), its tool ``exec_command``;
* opencode (``@ai-sdk/openai-compatible``): chat completions, streamed with ``tool_calls`` and a usage chunk;
* Gemini CLI: ``/v1beta/models/M:generateContent`` (its model router's JSON-schema question, titles) and
  ``:streamGenerateContent?alt=sse``;
* aider: chat completions offering no tools, answered in its edit blocks and ``bash`` blocks, a whole turn per
  reply (:mod:`tests.realcli.mock_aider`).

The "model" is :func:`tests.standins.fakemodel.think`, *replayed*: a CLI sends the whole conversation each time,
so for each request the server finds the supervisor's prompt(s) in it (the CLI wraps them in system reminders,
environment context, AGENTS.md -- the prompt is the text from ``# You are`` on, and a resume prompt is the text
from ``The git-agentops supervisor resumed your session``), and the results of the tool calls made since the
newest prompt; it re-runs ``think()`` with a :class:`ReplayGate` whose ``read``/``write``/``bash`` return those
results in order. The first call with no recorded result is the answer: that tool call, in the CLI's own tool
(Claude ``Bash``/``Write``/``Read``; Codex ``exec_command``, writing with a heredoc and reading with ``cat``;
opencode ``bash``/``write``/``read``; Gemini ``run_shell_command``/``write_file``/``read_file``), with absolute
paths against the working directory the CLI states. When ``think()`` returns, its final message is the answer. A
request that carries no supervisor prompt or offers no tools (session titles, Gemini's router) gets a short plain
answer. A child may be made to try a destructive command first (``probe``), to see the CLI's guard refuse it.

Usage: every response reports deterministic token counts (from the request's size, or a fixed amount per
response), and :class:`Ledger` keeps what was reported, per response, tagged ``agent`` (a turn of a supervisor
prompt: role, worker, generation) or ``side``; the tests compare the run's recorded usage against it.
"""

from __future__ import annotations

import json
import re
import shlex
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from tests.standins import fakemodel

# -- the conversation, whatever API carried it ------------------------------------------------------------------------

PROMPT_START: Final = re.compile(r"^# You are |^The git-agentops supervisor resumed your session", re.M)
_WORKER: Final = re.compile(r"^# You are worker `([^`]+)` \(generation (\d+)\)", re.M)
_RESUMED_AS: Final = re.compile(r"resumed your session as generation (\d+) of worker `([^`]+)`")
_REVIEWER: Final = re.compile(r"^# You are reviewer `([^`]+)`", re.M)
_CWD: Final = (
    re.compile(r"Primary working directory: (\S+)"),
    re.compile(r"<cwd>([^<\n]+)</cwd>"),
    re.compile(r"Working directory: (\S+)"),
    re.compile(r"working in the directory: (\S+?)\.?\s*$", re.M),
    re.compile(r"Current working directory:\s*(\S+)"),
    re.compile(r"Workspace Directories:\**\n\s*- (\S+)"),
)


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call of the fake model: ``tool`` is ``read``, ``write`` or ``bash``; ``target`` a path or command."""

    tool: str
    target: str
    content: str | None = None


@dataclass(frozen=True, slots=True)
class Result:
    """A tool call's result as the model saw it: 0 or an exit code, and the text (a read: the file's text)."""

    code: int
    text: str


@dataclass
class Conversation:
    """What one request says, in the API's terms boiled down: the supervisor's prompts in order, the results of
    the tool calls since the newest prompt, the working directory the CLI states, and whether tools are offered."""

    prompts: list[str] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    cwd: str | None = None
    tools: tuple[str, ...] = ()
    texts: list[str] = field(default_factory=list)  # every user or system text, to find the cwd in

    def prompt(self, text: str) -> None:
        """A user text: if it holds a supervisor prompt, a new turn starts (its results so far are the old turn's)."""
        self.texts.append(text)
        text = unquote(text)
        found = PROMPT_START.search(text)
        if found is None:
            return
        self.prompts.append(text[found.start() :])
        self.results = []

    def working_dir(self) -> str | None:
        """The cwd the CLI stated, if it did."""
        if self.cwd:
            return self.cwd
        for text in self.texts:
            for pattern in _CWD:
                found = pattern.search(text)
                if found:
                    return found.group(1).rstrip("/") or "/"
        return None


def unquote(text: str) -> str:
    """A prompt as ``opencode run`` sends it, back to what it was given: opencode wraps an argument holding a space
    in double quotes and puts a backslash before each double quote inside (``"# You are ... \\"alpha\\" ..."``)."""
    inner = text.strip()
    if len(inner) > 1 and inner[0] == inner[-1] == '"' and PROMPT_START.match(inner[1:]):
        return inner[1:-1].replace('\\"', '"')
    return text


@dataclass(frozen=True, slots=True)
class Who:
    """Whom a turn is for, from its prompts: ``role`` is coordinator, child, reviewer or "" (none we know)."""

    role: str
    worker: str
    generation: int


def who(prompts: Sequence[str]) -> Who:
    """The role, worker and generation the newest prompts name."""
    if not prompts:
        return Who("", "", 0)
    reviewer = _REVIEWER.search(prompts[0])
    if reviewer:
        return Who("reviewer", f"reviewer-{reviewer.group(1)}", 1)
    role, worker, generation = "", "", 0
    for text in prompts:
        started = _WORKER.search(text)
        if started:
            worker, generation = started.group(1), int(started.group(2))
            role = "coordinator" if "You are the **coordinator**" in text else "child"
        resumed = _RESUMED_AS.search(text)
        if resumed:
            generation, worker = int(resumed.group(1)), resumed.group(2)
    return Who(role, worker, generation)


# -- replaying the fake model ----------------------------------------------------------------------------------------


class NeedCall(Exception):
    """``think()`` asked for a result nobody recorded yet: this call is the model's answer."""

    def __init__(self, call: Call) -> None:
        super().__init__(f"{call.tool} {call.target}")
        self.call = call


class ReplayGate(fakemodel.ToolGate):
    """A tool gate that answers from the recorded results, in order, and raises :class:`NeedCall` past their end.

    It touches nothing: the CLI ran the calls, and their results came back in the conversation. ``think()`` only
    calls ``log``, ``path``, ``read``, ``write`` and ``bash``, so the policy, events and usage of a real gate are
    not needed (nor set).
    """

    def __init__(self, cwd: Path, results: Sequence[Result], notes: list[str]) -> None:
        self.cli = "mock"
        self.cwd = cwd
        self.results = list(results)
        self.used = 0
        self.notes = notes

    def log(self, message: str) -> None:
        """A step of the model's reasoning, kept for the server's log."""
        self.notes.append(message)

    def _replay(self, call: Call) -> tuple[int, str]:
        if self.used >= len(self.results):
            raise NeedCall(call)
        result = self.results[self.used]
        self.used += 1
        return result.code, result.text

    def read(self, path: str) -> tuple[int, str]:
        """The recorded result of reading ``path`` (absolute against the cwd)."""
        return self._replay(Call("read", str(self.path(path))))

    def write(self, path: str, text: str) -> tuple[int, str]:
        """The recorded result of writing ``text`` to ``path``."""
        return self._replay(Call("write", str(self.path(path)), text))

    def bash(self, command: str) -> tuple[int, str]:
        """The recorded result of running ``command`` in the cwd."""
        return self._replay(Call("bash", command))


@dataclass(frozen=True, slots=True)
class Move:
    """The model's answer to one request: a tool call, or (``call`` None) its final ``text``."""

    call: Call | None
    text: str
    notes: tuple[str, ...] = ()


def decide(conversation: Conversation, *, probe: str | None = None) -> Move:
    """Re-run ``think()`` over the conversation's newest turn; the first call it makes past the recorded results
    is the answer, else its final message. A child's turn first runs ``probe`` (a command the guard must refuse)."""
    prompts = conversation.prompts
    session = fakemodel.Session("replay", prompts[0], conversation.working_dir() or ".", prompts=list(prompts))
    turn = fakemodel.turn_of(session)
    notes: list[str] = []
    gate = ReplayGate(Path(conversation.working_dir() or "."), conversation.results, notes)
    try:
        if probe and who(prompts).role == "child":
            gate.bash(probe)
        text = fakemodel.think(turn, gate)
    except NeedCall as need:
        return Move(need.call, "", tuple(notes))
    return Move(None, text, tuple(notes))


# -- usage and the ledger --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """One response's reported usage: ``kind`` agent (a turn of a supervisor prompt) or side (anything else)."""

    number: int
    api: str
    kind: str
    role: str
    worker: str
    generation: int
    input_tokens: int
    output_tokens: int
    answer: str
    prompts: int = 1
    """How many supervisor prompts the conversation held (2 or more: a resumed session)."""

    @property
    def tokens(self) -> int:
        """Input and output tokens together."""
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class Totals:
    """Summed usage of some ledger entries."""

    input_tokens: int
    output_tokens: int
    responses: int

    @property
    def tokens(self) -> int:
        """Input and output tokens together (what a run's token budget counts)."""
        return self.input_tokens + self.output_tokens


class Ledger:
    """Every usage the server reported, in order (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[Entry] = []

    def add(self, entry: Entry) -> None:
        """Record one response's usage (only once the response was written whole)."""
        with self._lock:
            self._entries.append(entry)

    def entries(self) -> list[Entry]:
        """A copy of every entry so far."""
        with self._lock:
            return list(self._entries)

    def totals(self, kind: str | None = "agent", *, worker: str | None = None, generation: int | None = None) -> Totals:
        """Summed usage of the entries of ``kind`` (None: all), of one ``worker`` and ``generation`` if given."""
        chosen = [
            e
            for e in self.entries()
            if (kind is None or e.kind == kind)
            and (worker is None or e.worker == worker)
            and (generation is None or e.generation == generation)
        ]
        return Totals(sum(e.input_tokens for e in chosen), sum(e.output_tokens for e in chosen), len(chosen))

    def generations(self, kind: str = "agent") -> dict[tuple[str, int], Totals]:
        """(worker, generation) -> that generation's summed usage, for every generation seen."""
        keys = dict.fromkeys((e.worker, e.generation) for e in self.entries() if e.kind == kind)
        return {key: self.totals(kind, worker=key[0], generation=key[1]) for key in keys}


Usage = Callable[[bytes, str], tuple[int, int]]
"""How many (input, output) tokens a response reports, from the raw request body and the answer's JSON."""


def usage_by_size(body: bytes, answer: str) -> tuple[int, int]:
    """The default: a token per 4 bytes of request, a token per 4 characters of answer (at least 1 each)."""
    return max(1, len(body) // 4), max(1, len(answer) // 4)


def fixed_usage(input_tokens: int, output_tokens: int) -> Usage:
    """Every response reports the same usage (a run's tokens are then a count of its responses)."""

    def usage(body: bytes, answer: str) -> tuple[int, int]:
        del body, answer
        return input_tokens, output_tokens

    return usage


# -- the APIs --------------------------------------------------------------------------------------------------------


def text_of(content: Any) -> str:
    """The text of a message content: a string, or the text parts of a list of blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(block.get("text") or "")
            for block in content
            if isinstance(block, dict) and block.get("type") in ("text", "input_text", "output_text", None)
        )
    return ""


_LINE_NUMBER: Final = re.compile(r"^ *\d+(?:\u2192|\t|\| |: )", re.M)
_REMINDER: Final = re.compile(r"\s*<system-reminder>.*?</system-reminder>\s*", re.S)


def file_text(shown: str) -> str:
    """A file as a read tool showed it, back to the file's text: line numbers and system reminders taken off."""
    text = _REMINDER.sub("\n", shown)
    lines = text.split("\n")
    numbered = [line for line in lines if line]
    if numbered and all(_LINE_NUMBER.match(line) for line in numbered):
        text = "\n".join(_LINE_NUMBER.sub("", line, count=1) for line in lines)
    return text


class Api(ABC):
    """One model API: how to read a request into a :class:`Conversation` and how to answer with a :class:`Move`."""

    name = ""
    tools: Mapping[str, str] = {}
    """The fake model's tool (``bash``/``read``/``write``) -> this API's CLI's tool name."""

    @abstractmethod
    def conversation(self, body: dict[str, Any]) -> Conversation:
        """The request's conversation."""

    @abstractmethod
    def arguments(self, call: Call, cwd: str | None) -> dict[str, Any]:
        """The tool call's arguments as the CLI's tool takes them."""

    def side_text(self, body: dict[str, Any]) -> str:
        """The answer to a request that is not a turn of a supervisor prompt."""
        del body
        return "OK"


def _abs(path: str, cwd: str | None) -> str:
    return path if path.startswith("/") or cwd is None else f"{cwd.rstrip('/')}/{path}"


def shell_write(path: str, content: str) -> str:
    """A shell command writing ``content`` to ``path`` (parents made): a quoted heredoc, or printf when the text
    does not end with a newline or holds the delimiter."""
    parent = path.rsplit("/", 1)[0] or "/"
    target = shlex.quote(path)
    mark = "AGENTOPS_MOCK_EOF"
    if content.endswith("\n") and mark not in content:
        return f"mkdir -p {shlex.quote(parent)} && cat > {target} <<'{mark}'\n{content}{mark}"
    return f"mkdir -p {shlex.quote(parent)} && printf %s {shlex.quote(content)} > {target}"


class Anthropic(Api):
    """Claude Code: Messages API. Tool results are ``tool_result`` blocks answering ``tool_use`` blocks."""

    name = "anthropic"
    tools = {"bash": "Bash", "read": "Read", "write": "Write"}

    def conversation(self, body: dict[str, Any]) -> Conversation:
        conv = Conversation(tools=tuple(str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict)))
        system = body.get("system")
        conv.texts.append(text_of(system) if isinstance(system, list) else str(system or ""))
        names: dict[str, str] = {}
        for message in body.get("messages") or []:
            content = message.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
            for block in blocks:
                kind = block.get("type")
                if kind == "tool_use":
                    names[str(block.get("id"))] = str(block.get("name"))
                elif kind == "tool_result":
                    shown = text_of(block.get("content"))
                    name = names.get(str(block.get("tool_use_id")), "")
                    text = file_text(shown) if name == "Read" and not block.get("is_error") else shown
                    code = _EXIT.match(shown) if block.get("is_error") else None
                    conv.results.append(Result(int(code.group(1)) if code else int(bool(block.get("is_error"))), text))
                elif kind == "text" and message.get("role") == "user":
                    conv.prompt(str(block.get("text") or ""))
        return conv

    def arguments(self, call: Call, cwd: str | None) -> dict[str, Any]:
        if call.tool == "bash":
            return {"command": call.target, "description": "Run a command"}
        if call.tool == "write":
            return {"file_path": _abs(call.target, cwd), "content": call.content or ""}
        return {"file_path": _abs(call.target, cwd)}


_EXIT: Final = re.compile(r"(?:Process exited with code|Exit code:?|exit code:?)\s*(-?\d+)", re.I)


def _codex_output(raw: Any) -> Result:
    """An ``exec_command`` result: its exit code and the command's output (after Codex's ``Output:`` header)."""
    text = text_of(raw) if not isinstance(raw, dict) else str(raw.get("output") or raw.get("content") or "")
    try:  # some Codex versions send a JSON document {"output": ..., "metadata": {"exit_code": ...}}
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and "output" in doc:
        meta = doc.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        return Result(int(meta.get("exit_code") or 0), str(doc["output"]))
    found = _EXIT.search(text)
    head, sep, output = text.partition("\nOutput:\n")
    if not sep:
        output = text
    return Result(int(found.group(1)) if found and found.start() < len(head) + 1 else 0, output)


class Responses(Api):
    """Codex: the Responses API. Its ``exec_command`` runs a shell command; files go through the shell too."""

    name = "responses"
    tools = {"bash": "exec_command", "read": "exec_command", "write": "exec_command"}

    def conversation(self, body: dict[str, Any]) -> Conversation:
        tools = tuple(str(t.get("name") or t.get("type")) for t in body.get("tools") or [] if isinstance(t, dict))
        conv = Conversation(tools=tools)
        conv.texts.append(str(body.get("instructions") or ""))
        for item in body.get("input") or []:
            kind = item.get("type")
            if kind == "message" and item.get("role") in ("user", "developer", "system"):
                text = text_of(item.get("content"))
                if item.get("role") == "user":
                    conv.prompt(text)
                else:
                    conv.texts.append(text)
            elif kind in ("function_call_output", "custom_tool_call_output"):
                conv.results.append(_codex_output(item.get("output")))
        return conv

    def arguments(self, call: Call, cwd: str | None) -> dict[str, Any]:
        if call.tool == "read":
            command = f"cat {shlex.quote(_abs(call.target, cwd))}"
        elif call.tool == "write":
            command = shell_write(_abs(call.target, cwd), call.content or "")
        else:
            command = call.target
        args: dict[str, Any] = {"cmd": command}
        if cwd:
            args["workdir"] = cwd
        return args


def _opencode_output(name: str, content: Any) -> Result:
    text = text_of(content)
    if name == "read":
        found = re.search(r"<content>\n?(.*?)\n?(?:\(End of file[^)]*\)\n?)?</content>", text, re.S)
        body = found.group(1) if found else text
        return Result(0, file_text(body))
    code = _EXIT.search(text)
    return Result(int(code.group(1)) if code else 0, text)


class ChatCompletions(Api):
    """opencode (``@ai-sdk/openai-compatible``): chat completions, ``tool_calls`` answered by ``tool`` messages."""

    name = "chat"
    tools = {"bash": "bash", "read": "read", "write": "write"}

    def conversation(self, body: dict[str, Any]) -> Conversation:
        tools = tuple(
            str((t.get("function") or {}).get("name")) for t in body.get("tools") or [] if isinstance(t, dict)
        )
        conv = Conversation(tools=tools)
        names: dict[str, str] = {}
        for message in body.get("messages") or []:
            role = message.get("role")
            if role == "system":
                conv.texts.append(text_of(message.get("content")))
            elif role == "user":
                conv.prompt(text_of(message.get("content")))
            elif role == "assistant":
                for tool_call in message.get("tool_calls") or []:
                    names[str(tool_call.get("id"))] = str((tool_call.get("function") or {}).get("name"))
            elif role == "tool":
                name = names.get(str(message.get("tool_call_id")), "")
                conv.results.append(_opencode_output(name, message.get("content")))
        return conv

    def arguments(self, call: Call, cwd: str | None) -> dict[str, Any]:
        if call.tool == "bash":
            return {"command": call.target, "description": "Run a command"}
        if call.tool == "write":
            return {"filePath": _abs(call.target, cwd), "content": call.content or ""}
        return {"filePath": _abs(call.target, cwd)}


def _gemini_output(name: str, response: Any) -> Result:
    doc = response if isinstance(response, dict) else {}
    if "error" in doc:
        return Result(1, str(doc["error"]))
    text = str(doc.get("output") if "output" in doc else doc.get("content", json.dumps(doc)))
    if name == "read_file":
        return Result(0, file_text(text))
    code = re.search(r"^Exit Code: (-?\d+)", text, re.M)
    return Result(int(code.group(1)) if code else 0, text)


def fill_schema(schema: Any) -> Any:
    """The smallest value a JSON schema accepts, as far as a router's question needs (first enum value, minimum)."""
    if not isinstance(schema, dict):
        return None
    if schema.get("enum"):
        return schema["enum"][0]
    kind = str(schema.get("type") or "object").lower()
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: fill_schema(sub) for name, sub in props.items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    if kind == "boolean":
        return False
    return "simple"


class Gemini(Api):
    """Gemini CLI: ``contents`` with ``functionCall`` parts answered by ``functionResponse`` parts."""

    name = "gemini"
    tools = {"bash": "run_shell_command", "read": "read_file", "write": "write_file"}

    def conversation(self, body: dict[str, Any]) -> Conversation:
        declared = []
        for tool in body.get("tools") or []:
            declared += [str(d.get("name")) for d in tool.get("functionDeclarations") or [] if isinstance(d, dict)]
        conv = Conversation(tools=tuple(declared))
        system = body.get("systemInstruction") or body.get("system_instruction") or {}
        conv.texts += [str(p.get("text") or "") for p in system.get("parts") or [] if isinstance(p, dict)]
        for content in body.get("contents") or []:
            for part in content.get("parts") or []:
                if "functionResponse" in part:
                    response = part["functionResponse"]
                    conv.results.append(_gemini_output(str(response.get("name")), response.get("response")))
                elif "text" in part and content.get("role") == "user":
                    conv.prompt(str(part["text"]))
        return conv

    def arguments(self, call: Call, cwd: str | None) -> dict[str, Any]:
        if call.tool == "bash":
            return {"command": call.target, "description": "Run a command"}
        if call.tool == "write":
            return {"file_path": _abs(call.target, cwd), "content": call.content or ""}
        return {"file_path": _abs(call.target, cwd)}

    def side_text(self, body: dict[str, Any]) -> str:
        config = body.get("generationConfig") or {}
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
        if schema is not None or config.get("responseMimeType") == "application/json":
            return json.dumps(fill_schema(schema or {}))
        return "OK"


APIS: Final = {"anthropic": Anthropic(), "responses": Responses(), "chat": ChatCompletions(), "gemini": Gemini()}


def api_of(path: str) -> Api | None:
    """Which API a request path belongs to."""
    if path.startswith("/v1/messages"):
        return APIS["anthropic"]
    if path.endswith("/responses"):
        return APIS["responses"]
    if path.endswith("/chat/completions"):
        return APIS["chat"]
    if ":generateContent" in path or ":streamGenerateContent" in path:
        return APIS["gemini"]
    return None


# -- the server ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Asked:
    """What a :class:`Hold` judges a request by: whose turn it is and the results of its tool calls so far."""

    who: Who
    results: tuple[Result, ...]


@dataclass
class Hold:
    """Keep the first agent response matching ``when`` until released: the test can then act (kill the supervisor,
    read a host log) while an agent is known to be mid-turn, waiting on the model."""

    when: Callable[[Asked], bool]
    holding: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    used: bool = False
    asked: Asked | None = None
    """The request it holds (or held)."""

    def asked_worker(self) -> str | None:
        """The worker whose request it holds (or held), None before it holds one."""
        return None if self.asked is None else self.asked.who.worker


class MockModel:
    """The server: :meth:`start` it (or use it as a context manager), point the CLIs at :attr:`url`.

    ``usage`` decides the reported token counts (default :func:`usage_by_size`); ``probe`` is a command each child
    turn tries first; ``log`` is a JSON-lines file of every request (its body with ``log_bodies``) and answer.
    """

    def __init__(
        self,
        *,
        usage: Usage = usage_by_size,
        probe: str | None = None,
        log: Path | None = None,
        log_bodies: bool = False,
    ) -> None:
        self.usage = usage
        self.probe = probe
        self.ledger = Ledger()
        self.log_path = log
        self.log_bodies = log_bodies
        self.holds: list[Hold] = []
        self._lock = threading.Lock()
        self._numbers = iter(range(1, 1 << 62))
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle
    def start(self) -> MockModel:
        """Listen on 127.0.0.1 (a free port) in a daemon thread."""
        model = self

        class Handler(_Handler):
            mock = model

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="mockmodel", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening; held responses are released."""
        for hold in self.holds:
            hold.released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> MockModel:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The port it listens on."""
        assert self._server is not None, "not started"
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no path)."""
        return f"http://127.0.0.1:{self.port}"

    def hold(self, when: Callable[[Asked], bool]) -> Hold:
        """Hold the first agent response for a turn matching ``when`` until ``release()``d."""
        hold = Hold(when)
        self.holds.append(hold)
        return hold

    def next_number(self) -> int:
        """The next request's number (1, 2, ...)."""
        with self._lock:
            return next(self._numbers)

    def write_log(self, record: Mapping[str, Any]) -> None:
        """Append one record to the log file, if there is one, stamped ``at`` its local time of day as the
        supervisor's log shows it (``HH:MM:SS.ss``): where a slow run spends its time -- between a generation's
        start and its first request, or between two requests."""
        if self.log_path is None:
            return
        now = time.time()
        stamped = {"at": time.strftime("%H:%M:%S", time.localtime(now)) + f"{now % 1:.2f}"[1:], **record}
        with self._lock, self.log_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(stamped, ensure_ascii=False) + "\n")

    def totals(self, kind: str | None = "agent") -> Totals:
        """The ledger's totals (agent turns by default)."""
        return self.ledger.totals(kind)

    def log_tail(self, lines: int = 60) -> str:
        """The last records of the log, for a failing test's message."""
        if self.log_path is None or not self.log_path.exists():
            return "(no mock model log)"
        records = self.log_path.read_text("utf-8").splitlines()[-lines:]
        return "\n".join(r[:1500] for r in records)


@dataclass(frozen=True, slots=True)
class Answer:
    """What the server answers a request with: a tool call or text, and whom it was for."""

    api: Api
    who: Who
    kind: str
    move: Move
    model: str
    results: tuple[Result, ...] = ()
    prompts: int = 0


class _Handler(BaseHTTPRequestHandler):
    """One HTTP exchange. HTTP/1.1 with ``Content-Length`` for JSON; SSE streams close the connection when done."""

    protocol_version = "HTTP/1.1"
    mock: MockModel

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the mock's own log has the requests."""
        del format, args

    def do_GET(self) -> None:
        """Nothing is served on GET (model lists and update checks get a 404)."""
        number = self.mock.next_number()
        self.mock.write_log({"n": number, "method": "GET", "path": self.path})
        self._json({"error": {"message": "not found"}}, 404)

    def do_POST(self) -> None:
        """A model request: answer it, record the usage it reports."""
        number = self.mock.next_number()
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = urlsplit(self.path).path
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        record: dict[str, Any] = {"n": number, "method": "POST", "path": self.path}
        if self.mock.log_bodies:
            record["body"] = body
        if path.endswith("/count_tokens"):
            self.mock.write_log({**record, "answer": "count_tokens"})
            self._json({"input_tokens": max(1, len(raw) // 4)})
            return
        api = api_of(path)
        if api is None or not isinstance(body, dict):
            self.mock.write_log({**record, "answer": "unknown path"})
            self._json({"error": {"message": f"the mock model does not serve {path}"}}, 404)
            return
        answer = self._answer(api, body)
        record.update(
            api=api.name,
            kind=answer.kind,
            who=[answer.who.role, answer.who.worker, answer.who.generation],
            call=None if answer.move.call is None else [answer.move.call.tool, answer.move.call.target[:300]],
            text=answer.move.text[:300],
            notes=list(answer.move.notes)[-5:],
            results=[[r.code, r.text[:200]] for r in answer.results],
        )
        self._hold(answer)
        payload = self._payload(answer, body)
        tokens_in, tokens_out = self.mock.usage(raw, json.dumps(payload, sort_keys=True))
        try:
            self._send(answer, body, payload, tokens_in, tokens_out)
        except OSError as exc:  # the CLI went away (killed mid-request): it never saw this usage
            self.mock.write_log({**record, "undelivered": str(exc)})
            return
        self.mock.ledger.add(
            Entry(
                number,
                api.name,
                answer.kind,
                answer.who.role,
                answer.who.worker,
                answer.who.generation,
                tokens_in,
                tokens_out,
                "call" if answer.move.call else "text",
                answer.prompts,
            )
        )
        self.mock.write_log({**record, "usage": [tokens_in, tokens_out]})

    # -- deciding
    def _answer(self, api: Api, body: dict[str, Any]) -> Answer:
        model = str(body.get("model") or "mock-model")
        if api.name == "chat" and not body.get("tools"):
            from . import mock_aider  # imported here: it imports this module

            reply = mock_aider.answer(body)
            if reply is not None:
                return Answer(api, reply.who, reply.kind, Move(None, reply.text), model, prompts=reply.prompts)
        conversation = api.conversation(body)
        if not conversation.prompts or not conversation.tools or self._is_side(api, body):
            move = Move(None, api.side_text(body))
            return Answer(api, who(conversation.prompts), "side", move, model, prompts=len(conversation.prompts))
        move = decide(conversation, probe=self.mock.probe)
        if move.call is not None and api.tools[move.call.tool] not in conversation.tools:
            shown = ", ".join(conversation.tools)
            move = Move(None, f"I need the {api.tools[move.call.tool]} tool, which I was not given ({shown}).")
        prompts = len(conversation.prompts)
        return Answer(api, who(conversation.prompts), "agent", move, model, tuple(conversation.results), prompts)

    @staticmethod
    def _is_side(api: Api, body: dict[str, Any]) -> bool:
        if api.name != "gemini":
            return False
        config = body.get("generationConfig") or {}
        return bool(config.get("responseJsonSchema") or config.get("responseSchema"))

    def _hold(self, answer: Answer) -> None:
        if answer.kind != "agent":
            return
        for hold in self.mock.holds:
            with self.mock._lock:
                asked = Asked(answer.who, answer.results)
                mine = not hold.used and hold.when(asked)
                if mine:
                    hold.used, hold.asked = True, asked
            if mine:
                hold.holding.set()
                hold.released.wait(timeout=300)

    def _payload(self, answer: Answer, body: dict[str, Any]) -> dict[str, Any]:
        """The answer's content in the API's terms (before usage is added): what the usage is computed from."""
        call = answer.move.call
        if call is None:
            return {"text": answer.move.text}
        cwd = answer.api.conversation(body).working_dir()
        return {"tool": answer.api.tools[call.tool], "arguments": answer.api.arguments(call, cwd)}

    # -- writing
    def _send(
        self, answer: Answer, body: dict[str, Any], payload: dict[str, Any], tokens_in: int, tokens_out: int
    ) -> None:
        name = answer.api.name
        stream = bool(body.get("stream")) or ":streamGenerateContent" in self.path or name == "responses"
        events = {
            "anthropic": _anthropic_events,
            "responses": _responses_events,
            "chat": _chat_events,
            "gemini": _gemini_events,
        }[name](answer.model, payload, tokens_in, tokens_out)
        if stream:
            self._sse(events, done=name == "chat")
        else:
            self._json(_whole(name, answer.model, payload, tokens_in, tokens_out))

    def _json(self, doc: Any, code: int = 200) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _sse(self, events: Iterable[tuple[str | None, dict[str, Any]]], *, done: bool) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        for event, data in events:
            head = f"event: {event}\n" if event else ""
            self.wfile.write(f"{head}data: {json.dumps(data)}\n\n".encode())
        if done:
            self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def _id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def _anthropic_events(
    model: str, payload: dict[str, Any], tokens_in: int, tokens_out: int
) -> Iterator[tuple[str | None, dict[str, Any]]]:
    usage = {
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    message: dict[str, Any] = {
        "id": _id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},  # as the API does: the output is counted in message_delta
    }
    yield "message_start", {"type": "message_start", "message": message}
    if "tool" in payload:
        block = {"type": "tool_use", "id": _id("toolu_"), "name": payload["tool"], "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(payload["arguments"])}
        stop = "tool_use"
    else:
        block = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": payload["text"]}
        stop = "end_turn"
    yield "content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}
    yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": 0}
    yield (
        "message_delta",
        {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": usage},
    )
    yield "message_stop", {"type": "message_stop"}


def _responses_events(
    model: str, payload: dict[str, Any], tokens_in: int, tokens_out: int
) -> Iterator[tuple[str | None, dict[str, Any]]]:
    response: dict[str, Any] = {
        "id": _id("resp_"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress",
        "model": model,
        "output": [],
    }
    yield "response.created", {"type": "response.created", "response": response}
    if "tool" in payload:
        arguments = json.dumps(payload["arguments"])
        item: dict[str, Any] = {
            "type": "function_call",
            "id": _id("fc_"),
            "call_id": _id("call_"),
            "name": payload["tool"],
            "arguments": arguments,
            "status": "completed",
        }
        yield (
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": 0, "item": {**item, "arguments": ""}},
        )
        yield (
            "response.function_call_arguments.delta",
            {
                "type": "response.function_call_arguments.delta",
                "item_id": item["id"],
                "output_index": 0,
                "delta": arguments,
            },
        )
    else:
        item = {
            "type": "message",
            "id": _id("msg_"),
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": payload["text"], "annotations": []}],
        }
        yield (
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": 0, "item": {**item, "content": []}},
        )
        yield (
            "response.output_text.delta",
            {
                "type": "response.output_text.delta",
                "item_id": item["id"],
                "output_index": 0,
                "content_index": 0,
                "delta": payload["text"],
            },
        )
    yield "response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}
    usage = {
        "input_tokens": tokens_in,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": tokens_out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": tokens_in + tokens_out,
    }
    done = {**response, "status": "completed", "output": [item], "usage": usage}
    yield "response.completed", {"type": "response.completed", "response": done}


def _chat_events(
    model: str, payload: dict[str, Any], tokens_in: int, tokens_out: int
) -> Iterator[tuple[str | None, dict[str, Any]]]:
    base = {"id": _id("chatcmpl-"), "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    if "tool" in payload:
        call = {
            "index": 0,
            "id": _id("call_"),
            "type": "function",
            "function": {"name": payload["tool"], "arguments": json.dumps(payload["arguments"])},
        }
        delta: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        finish = "tool_calls"
    else:
        delta = {"role": "assistant", "content": payload["text"]}
        finish = "stop"
    yield None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    yield None, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    usage = {"prompt_tokens": tokens_in, "completion_tokens": tokens_out, "total_tokens": tokens_in + tokens_out}
    yield None, {**base, "choices": [], "usage": usage}


def _gemini_response(payload: dict[str, Any], tokens_in: int, tokens_out: int) -> dict[str, Any]:
    if "tool" in payload:
        part: dict[str, Any] = {"functionCall": {"name": payload["tool"], "args": payload["arguments"]}}
    else:
        part = {"text": payload["text"]}
    return {
        "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {
            "promptTokenCount": tokens_in,
            "candidatesTokenCount": tokens_out,
            "totalTokenCount": tokens_in + tokens_out,
        },
        "modelVersion": "mock-model",
        "responseId": _id("gem-"),
    }


def _gemini_events(
    model: str, payload: dict[str, Any], tokens_in: int, tokens_out: int
) -> Iterator[tuple[str | None, dict[str, Any]]]:
    del model
    yield None, _gemini_response(payload, tokens_in, tokens_out)


def _whole(api: str, model: str, payload: dict[str, Any], tokens_in: int, tokens_out: int) -> dict[str, Any]:
    """A non-streamed answer."""
    if api == "gemini":
        return _gemini_response(payload, tokens_in, tokens_out)
    if api == "anthropic":
        if "tool" in payload:
            content: list[dict[str, Any]] = [
                {"type": "tool_use", "id": _id("toolu_"), "name": payload["tool"], "input": payload["arguments"]}
            ]
        else:
            content = [{"type": "text", "text": payload["text"]}]
        return {
            "id": _id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": "tool_use" if "tool" in payload else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out},
        }
    if api == "chat":
        if "tool" in payload:
            message: dict[str, Any] = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": _id("call_"),
                        "type": "function",
                        "function": {"name": payload["tool"], "arguments": json.dumps(payload["arguments"])},
                    }
                ],
            }
        else:
            message = {"role": "assistant", "content": payload["text"]}
        return {
            "id": _id("chatcmpl-"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if "tool" in payload else "stop"}
            ],
            "usage": {
                "prompt_tokens": tokens_in,
                "completion_tokens": tokens_out,
                "total_tokens": tokens_in + tokens_out,
            },
        }
    raise ValueError(f"no whole answer for {api}")


def serve(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.realcli.mockmodel [LOG]``: run the server in the foreground (prints its URL), for trying a
    CLI by hand; with LOG, every request's body is logged there."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    log = Path(args[0]) if args else None
    with MockModel(log=log, log_bodies=log is not None) as mock:
        print(mock.url, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    raise SystemExit(serve())
