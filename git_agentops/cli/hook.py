"""``git agentops-hook TYPE [ARGS]``: what the hook shims installed by ``git agentops-init --hooks`` call.

TYPE is ``pre-commit``, ``pre-merge-commit``, ``post-merge``, ``pre-push``, ``reference-transaction`` or
``pre-receive``; ARGS and stdin are git's. Exit 0 lets git go on; 1 refuses, with one ``error[CODE]: ...`` line
per broken rule saying what to do instead.

``git agentops-hook agent-command [--host claude|codex|opencode|gemini|aider]`` is the agent guard that each
worker worktree's host configuration calls before every shell command the agent runs: it reads the host's
tool-call JSON on stdin (Claude Code's and Codex's ``PreToolUse`` input, Gemini CLI's ``BeforeTool`` one, or
``{"command": ..., "cwd": ...}``), and exits
0 to allow it or 2 -- the hosts' "block" -- with one line on stderr saying why it is refused (a recursive
delete of the worktree, home or root; ``git reset --hard``, ``git clean -f``, force pushes, ``--no-verify``,
``git config`` writes, writes to agentops refs and notes, ``git agentops-policy trust``, a literal secret, a
line it cannot parse) and what to do instead.

This entry point is on every commit's path, so it does not go through the usual argparse boundary: it reads its
arguments itself and imports the rules only when there is something to check. A failure of the hook itself never
blocks git, except for a ref update inside the agentops namespaces, where it fails closed (``HOOK_FAILED``).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from .common import Parser

USAGE = __doc__ or ""


def build_parser() -> Parser:
    """The parser for ``--help`` and the man page; hook calls never build it (see the module docstring)."""
    from .common import build

    parser = build("git-agentops-hook", USAGE, json_flag=False)
    parser.add_argument("type", nargs="?", metavar="TYPE")
    parser.add_argument("args", nargs="*", metavar="ARGS")
    return parser


def _help(argv: Sequence[str]) -> int:
    from .common import run

    return run(build_parser(), lambda args, ctx: 2, argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0].startswith("-"):
        return _help(args)
    hook, rest = args[0], args[1:]
    if hook == "agent-command":
        return _agent_command(rest)
    from ..hooks.fast import STDIN_HOOKS, dispatch
    from ..hooks.where import NAMESPACES

    stdin = sys.stdin.buffer.read() if hook in STDIN_HOOKS and not sys.stdin.isatty() else b""
    try:
        status, lines = dispatch(hook, rest, cwd=os.getcwd(), env=os.environ, stdin=stdin)
    except Exception as crash:  # noqa: BLE001 -- a tool bug must not block git, unless our refs are at stake
        closed = hook in STDIN_HOOKS and any(ns in stdin for ns in NAMESPACES)
        sys.stderr.write(
            f"{'error[HOOK_FAILED]' if closed else 'warning[HOOK_FAILED]'}: git-agentops {hook} hook "
            f"failed ({type(crash).__name__}: {crash}); "
            + ("refusing the agentops ref update\n" if closed else "not checked\n")
        )
        return 1 if closed else 0
    for line in lines:
        sys.stderr.write(line + "\n")
    return status


def _agent_command(args: Sequence[str]) -> int:
    """The agent guard. Its own failure allows the command (with a warning): the guard is defence in depth, and
    a tool bug must not stop every agent; the kernel sandbox still holds."""
    from ..hooks.agent import agent_command

    try:
        stdin = b"" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
        status, lines = agent_command(args, stdin=stdin, cwd=os.getcwd(), env=os.environ)
    except Exception as crash:  # noqa: BLE001 -- a tool bug must not block every agent command
        sys.stderr.write(
            f"warning[HOOK_FAILED]: git-agentops agent guard failed ({type(crash).__name__}: {crash}); "
            "command not checked\n"
        )
        return 0
    for line in lines:
        sys.stderr.write(line + "\n")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
