"""``git agentops-verify``: run the policy's verification commands in this worktree and record evidence.

Its capability lands with issue #3; until then it refuses with ``NOT_IMPLEMENTED`` (exit 2) and does nothing.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .common import Context, Parser, build, not_implemented, run


def build_parser() -> Parser:
    parser = build(
        "git-agentops-verify", "Run the policy's verification commands in this worktree and record evidence."
    )
    parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    not_implemented("git agentops-verify", 3)


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
