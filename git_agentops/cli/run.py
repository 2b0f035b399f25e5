"""``git agentops-run``: start, supervise and inspect runs of several agents on this repository.

Its capability lands with issue #4; until then it refuses with ``NOT_IMPLEMENTED`` (exit 2) and does nothing.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .common import Context, Parser, build, not_implemented, run, subcommands


def build_parser() -> Parser:
    parser = build("git-agentops-run", "Start, supervise and inspect runs of several agents on this repository.")
    add = subcommands(parser)
    add("start", "(lands with issue #4)").add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    add("supervise", "(lands with issue #4)").add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    add("status", "(lands with issue #4)").add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    add("list", "(lands with issue #4)").add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    add("log", "(lands with issue #4)").add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    add("pause", "(lands with issue #4)").add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    add("resume", "(lands with issue #4)").add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    add("stop", "(lands with issue #4)").add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    add("answer", "(lands with issue #4)").add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    add("demo", "(lands with issue #4)").add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    not_implemented(f"git agentops-run {args.command or ''}".strip(), 4)


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
