"""The scripted agent's process: ``python -m git_agentops.cli.agent``, started by the supervisor in a worktree.

This module is only the process boundary: it hands its environment, its directory and a log on stderr (which ends
up in the worker's host log) to :func:`git_agentops.hosts.scripted_process.play` -- or, with
``AGENTOPS_REVIEW_REPORT`` set, plays a reviewer (:func:`~git_agentops.hosts.scripted_process.review`) -- and
exits with its status.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .common import Context, Parser, build, run


def build_parser() -> Parser:
    return build("git-agentops-agent", __doc__ or "", json_flag=False)


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    from ..hosts.scripted_process import play, review

    if ctx.env.get("AGENTOPS_REVIEW_REPORT"):
        print(review(ctx.env), file=ctx.stderr)
        return 0

    def write(line: str) -> None:
        print(line, file=ctx.stderr, flush=True)

    return play(ctx.env, ctx.cwd, clock=ctx.clock, write=write)


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)


if __name__ == "__main__":
    sys.exit(main())
