"""``git agentops-policy``: check, show and trust the repository's .agentops/policy.toml.

Its capability lands with issue #3; until then it refuses with ``NOT_IMPLEMENTED`` (exit 2) and does nothing.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .common import Context, Parser, build, not_implemented, run, subcommands


def build_parser() -> Parser:
    parser = build("git-agentops-policy", "Check, show and trust the repository's .agentops/policy.toml.")
    add = subcommands(parser)
    add("check", "(lands with issue #3)").add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    add("show", "(lands with issue #3)").add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    add("trust", "(lands with issue #3)").add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    add("untrust", "(lands with issue #3)").add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    add("status", "(lands with issue #3)").add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    not_implemented(f"git agentops-policy {args.command or ''}".strip(), 3)


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
