"""The mock model's aider protocol: chat completions with no tools, answered in aider's edit blocks and ``bash`` blocks.

Why a protocol of its own: aider offers the model no tools. The model answers in text -- SEARCH/REPLACE blocks that
aider applies (and commits), fenced ``bash`` blocks that aider runs after the reply (one line at a time, with
``/bin/sh``) -- and in a ``--message`` run nothing it ran comes back: aider sends a second request only to *reflect*
(a file the reply named was added to the chat, an edit did not apply, lint failed). So where the other CLIs replay
:func:`tests.standins.fakemodel.think` one tool call per request, an aider turn is answered whole: ``think()`` is
replayed with every call *assumed* to succeed, and all of them go into one reply, in order --

* a **write** inside the repository is a SEARCH/REPLACE block (an empty SEARCH for a file not in the chat, which
  aider creates; the whole shown content for a file in the chat); a write aider would not apply -- to an absolute
  path outside the repository, or into a directory git-agentops keeps out of git (:data:`KEPT_OUT`: a reviewer's
  report), which aider skips as ignored -- is a ``printf`` line in the ``bash`` block;
* a **bash** call is a line of the ``bash`` block (its output is not seen: the model goes on as if it exited 0);
* a **read** of a file in the chat -- added to it, or read-only (``--read``, ``read:`` in ``.aider.conf.yml``) --
  gets its content from the chat; of an absolute path, from the disk (what aider cannot show the model, the mock
  reads itself: it runs on the same machine); of any other file, the reply names it and stops -- aider adds a file
  the reply names to the chat and asks again, with its content, if git tracks it.

Requests that are not an agent's turn get a plain answer: commit messages (aider's weak model writes one per
commit), history summaries. A ``probe`` is never played: aider has no guard, so the probe would run.

:mod:`tests.realcli.mockmodel` asks :func:`answer` first about every chat completions request that offers no tools
(``_Handler._answer``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .mockmodel import Conversation, Result, Who, decide, text_of, who

RULES: Final = re.compile(r"\n+# \*SEARCH/REPLACE block\* Rules:")
"""Where aider's reminder of its edit format starts, appended to the newest user message."""
ADDED: Final = "I have *added these files to the chat*"
READ_ONLY: Final = "Here are some READ ONLY files"
"""How aider's messages listing the files in the chat start: editable ones, and read-only ones."""
KEPT_OUT: Final = (".agentops/mailbox/", ".agentops/review/", ".agentops/proposals/")
"""Directories of a worktree git-agentops excludes from git (``info/exclude``): aider skips an edit to a file there
("matches gitignore spec"), so the model writes one with the shell."""
_FILE: Final = re.compile(r"(?:\A|\n)(?P<path>[^\n`]+)\n```[^\n]*\n(?P<content>.*?)\n?```(?=\n|\Z)", re.S)
CODER: Final = "Act as an expert software developer"
COMMIT: Final = "one-line Git commit messages"
SUMMARY: Final = "summarize"
MAX_CALLS: Final = 64
"""How many calls one reply may carry (``think()`` makes a handful; this only stops a loop)."""


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to one aider request: ``agent`` (a turn of a supervisor prompt) or ``side``; whom it is for."""

    kind: str
    who: Who
    text: str
    prompts: int = 0


def is_aider(body: dict[str, Any]) -> bool:
    """A chat completions request from aider: no tools, and aider's system prompt."""
    if body.get("tools"):
        return False
    messages = body.get("messages") or []
    system = text_of(messages[0].get("content")) if messages and isinstance(messages[0], dict) else ""
    return messages[0].get("role") == "system" and (CODER in system or COMMIT in system or SUMMARY in system)


def files_in_chat(messages: list[dict[str, Any]]) -> dict[str, str]:
    """The files aider showed the model as in the chat, by their path relative to the repository: the newest
    listing of each wins."""
    files: dict[str, str] = {}
    for message in messages:
        text = text_of(message.get("content"))
        if message.get("role") != "user" or not text.startswith((ADDED, READ_ONLY)):
            continue
        for found in _FILE.finditer(text):
            files[found.group("path").strip()] = found.group("content")
    return files


def conversation(messages: list[dict[str, Any]]) -> Conversation:
    """The supervisor's prompts among the user messages (each without aider's format reminder)."""
    conv = Conversation(tools=("aider",))
    for message in messages:
        if message.get("role") == "user":
            conv.prompt(RULES.split(text_of(message.get("content")), 1)[0])
    return conv


def edit_block(path: str, old: str, new: str) -> str:
    """One SEARCH/REPLACE block (an empty ``old`` creates the file)."""
    search = f"{old}\n" if old and not old.endswith("\n") else old
    replace = new if new.endswith("\n") else f"{new}\n"
    return f"{path}\n```\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n```\n"


def answer(body: dict[str, Any]) -> Reply | None:
    """The reply to an aider request, or None when ``body`` is not one (the server answers it as usual)."""
    if not is_aider(body):
        return None
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    system = text_of(messages[0].get("content"))
    if COMMIT in system:
        return Reply("side", Who("", "", 0), "Apply the requested change")
    conv = conversation(messages)
    if CODER not in system or not conv.prompts:
        return Reply("side", who(conv.prompts), "OK", len(conv.prompts))
    return Reply("agent", who(conv.prompts), turn_text(conv, files_in_chat(messages)), len(conv.prompts))


def shell_write(path: str, content: str) -> str:
    """One line of shell writing ``content`` to ``path`` (aider runs a ``bash`` block line by line): ``printf`` with
    a line per argument, then the text after the last newline, if any."""
    lines = content.split("\n")
    last = lines.pop()
    parts = [f"printf '%s\\n' {' '.join(shlex.quote(line) for line in lines)}"] if lines else []
    parts += [f"printf %s {shlex.quote(last)}"] if last else []
    return f"{{ {'; '.join(parts) or ':'}; }} > {shlex.quote(path)}"


def turn_text(conv: Conversation, files: dict[str, str]) -> str:
    """The whole turn as one reply: ``think()`` replayed, every call assumed to succeed (see the module's doc)."""
    results: list[Result] = []
    edits: list[str] = []
    commands: list[str] = []
    final = ""
    for _ in range(MAX_CALLS):
        conv.results = list(results)
        move = decide(conv)  # never the probe: aider would run it unguarded
        call = move.call
        if call is None:
            final = move.text
            break
        rel = call.target.removeprefix("./")
        if call.tool == "read":
            if rel in files:
                results.append(Result(0, files[rel]))
            elif rel.startswith("/") and Path(rel).is_file():
                results.append(Result(0, Path(rel).read_text("utf-8", errors="replace")))
            elif not rel.startswith("/"):
                final = f"I need to see this file first; please add it to the chat:\n\n{rel}\n"
                break
            else:
                results.append(Result(1, f"{rel}: no such file"))
        elif call.tool == "write":
            content = call.content or ""
            if rel.startswith(("/", *KEPT_OUT)):
                commands.append(shell_write(rel, content))
            else:
                edits.append(edit_block(rel, files.get(rel, ""), content))
            results.append(Result(0, ""))
        else:
            commands.append(" ".join(call.target.splitlines()))  # aider runs a block line by line
            results.append(Result(0, ""))
    parts = [final or "Here is my change."]
    parts += edits
    if commands:
        parts.append("```bash\n" + "\n".join(commands) + "\n```\n")
    return "\n\n".join(part.rstrip("\n") + "\n" for part in parts)
