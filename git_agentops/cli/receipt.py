"""``git agentops-receipt``: show and verify the signed integration receipts attached to commits.

Its capability lands with issue #5; until then it refuses with ``NOT_IMPLEMENTED`` (exit 2) and does nothing.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .common import Context, Parser, build, not_implemented, run, subcommands


def build_parser() -> Parser:
    parser = build("git-agentops-receipt", "Show and verify the signed integration receipts attached to commits.")
    add = subcommands(parser)
    add("show", "(lands with issue #5)").add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    add("verify", "(lands with issue #5)").add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    not_implemented(f"git agentops-receipt {args.command or ''}".strip(), 5)


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
