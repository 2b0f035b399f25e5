"""``git agentops-hook``: entry point of the repository hook shims installed by 'git agentops-init --hooks'.

Its capability lands with issue #6; until then it refuses with ``NOT_IMPLEMENTED`` (exit 2) and does nothing.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .common import Context, Parser, build, not_implemented, run


def build_parser() -> Parser:
    parser = build(
        "git-agentops-hook", "Entry point of the repository hook shims installed by 'git agentops-init --hooks'."
    )
    parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    not_implemented("git agentops-hook", 6)


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
