"""``git agentops-request``: send a request from a worker to its run supervisor and wait for the response.

Its capability lands with issue #4; until then it refuses with ``NOT_IMPLEMENTED`` (exit 2) and does nothing.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .common import Context, Parser, build, not_implemented, run


def build_parser() -> Parser:
    parser = build(
        "git-agentops-request", "Send a request from a worker to its run supervisor and wait for the response."
    )
    parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    not_implemented("git agentops-request", 4)


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
