"""``git agentops-sync``: push and fetch refs/agentops/* and the agentops notes through a remote.

Its capability lands with issue #7; until then it refuses with ``NOT_IMPLEMENTED`` (exit 2) and does nothing.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .common import Context, Parser, build, not_implemented, run


def build_parser() -> Parser:
    parser = build("git-agentops-sync", "Push and fetch refs/agentops/* and the agentops notes through a remote.")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    not_implemented("git agentops-sync", 7)


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
