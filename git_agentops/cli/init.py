"""``git agentops-init``: write a starter .agentops/policy.toml for this project; install hooks with --hooks.

Its capability lands with issue #3; until then it refuses with ``NOT_IMPLEMENTED`` (exit 2) and does nothing.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .common import Context, Parser, build, not_implemented, run


def build_parser() -> Parser:
    parser = build(
        "git-agentops-init", "Write a starter .agentops/policy.toml for this project; install hooks with --hooks."
    )
    parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    not_implemented("git agentops-init", 3)


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
