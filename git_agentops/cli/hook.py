"""``git agentops-hook TYPE [ARGS]``: what the hook shims installed by ``git agentops-init --hooks`` call.

TYPE is ``pre-commit``, ``pre-merge-commit``, ``post-merge``, ``pre-push``, ``reference-transaction`` or
``pre-receive``; ARGS and stdin are git's. Exit 0 lets git go on; 1 refuses, with one ``error[CODE]: ...`` line
per broken rule saying what to do instead.

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
    from ..hooks.fast import STDIN_HOOKS, dispatch
    from ..hooks.where import NAMESPACES

    stdin = sys.stdin.buffer.read() if hook in STDIN_HOOKS and not sys.stdin.isatty() else b""
    try:
        status, lines = dispatch(hook, rest, cwd=os.getcwd(), env=os.environ, stdin=stdin)
    except Exception as crash:  # noqa: BLE001 -- a tool bug must not block git, unless our refs are at stake
        closed = hook in ("reference-transaction", "pre-receive", "pre-push") and any(ns in stdin for ns in NAMESPACES)
        sys.stderr.write(
            f"{'error[HOOK_FAILED]' if closed else 'warning[HOOK_FAILED]'}: git-agentops {hook} hook "
            f"failed ({type(crash).__name__}: {crash}); "
            + ("refusing the agentops ref update\n" if closed else "not checked\n")
        )
        return 1 if closed else 0
    for line in lines:
        sys.stderr.write(line + "\n")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
