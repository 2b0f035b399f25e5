"""The scripted agent's process: ``python -m git_agentops.cli.agent``, started by the supervisor in a worktree.

The supervisor launches the built-in ``scripted`` host with the worktree as its current directory and
``AGENTOPS_RUN_ID``, ``AGENTOPS_WORKER_ID``, ``AGENTOPS_GENERATION``, ``AGENTOPS_MAILBOX`` and
``AGENTOPS_RECIPE`` in its environment. This module is only the process boundary: it reads that environment,
loads the recipe and hands real side effects (the mailbox client, commands run with the agent's environment,
``time.sleep``, a log on stderr, which ends up in the worker's host log) to
:func:`git_agentops.hosts.scripted.run_agent`, whose return value is the exit status.

Its generation comes from ``$AGENTOPS_GENERATION`` rather than from the instructions file: it is the fencing
token this process was started with, so a process that outlived its generation can never speak for the next one.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from ..errors import AgentOpsError
from .common import Context, Parser, build, run

REQUEST_TIMEOUT: Final = 3600.0  # a finalize integrates and verifies everything; a dead supervisor restarts us


def build_parser() -> Parser:
    return build("git-agentops-agent", __doc__ or "", json_flag=False)


def _generation(text: str | None) -> int | None:
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise AgentOpsError("USAGE", f"AGENTOPS_GENERATION must be a positive integer, not {text!r}")
    return int(text)


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    from ..hosts.recipe import load_recipe
    from ..hosts.scripted import make_runner, run_agent
    from ..protocol import client, mailbox

    env = ctx.env
    if env.get("AGENTOPS_REVIEW_REPORT"):
        return _review(ctx)
    worktree = mailbox.find_worktree(ctx.cwd, env.get("AGENTOPS_MAILBOX"))
    instructions = mailbox.read_instructions(worktree)
    generation = _generation(env.get("AGENTOPS_GENERATION"))
    worker = env.get("AGENTOPS_WORKER_ID") or instructions["workerId"]
    prefix = f"[scripted {worker} g{generation or instructions['generation']}]"

    def log(text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        for line in text.splitlines() or [""]:
            print(f"{stamp} {prefix} {line}", file=ctx.stderr, flush=True)

    if env.get("AGENTOPS_WORKER_ID") and env["AGENTOPS_WORKER_ID"] != instructions["workerId"]:
        log(f"the instructions are for worker {instructions['workerId']}, not for me; stopping")
        return 1
    where = env.get("AGENTOPS_RECIPE") or instructions["recipe"]
    if not where:
        raise AgentOpsError(
            "RUN_RECIPE_INVALID", "no recipe: neither AGENTOPS_RECIPE nor instructions.recipe names one"
        )
    recipe = load_recipe(ctx.cwd / Path(where))

    def call(action: str, fields: Mapping[str, Any]) -> Mapping[str, Any]:
        return client.call(worktree, action, fields, timeout=REQUEST_TIMEOUT, generation=generation)

    runner = make_runner(env, clock=ctx.clock)
    return run_agent(worktree, recipe, call=call, log=log, run=runner, sleep=time.sleep, generation=generation)


def _review(ctx: Context) -> int:
    """Review mode: play the recipe's reviewer named ``$AGENTOPS_REVIEWER`` and write its report."""
    import json

    from ..hosts.recipe import load_recipe
    from ..hosts.scripted import review_report
    from ..schema import documents

    env = ctx.env
    recipe = load_recipe(Path(env["AGENTOPS_RECIPE"])) if env.get("AGENTOPS_RECIPE") else None
    if recipe is None:
        raise AgentOpsError("RUN_RECIPE_INVALID", "a scripted reviewer needs $AGENTOPS_RECIPE")
    review_input = json.loads(Path(env["AGENTOPS_REVIEW_INPUT"]).read_text("utf-8"))
    report = review_report(recipe, env.get("AGENTOPS_REVIEWER", ""), review_input)
    Path(env["AGENTOPS_REVIEW_REPORT"]).write_bytes(documents.dump(report, schema="review-report"))
    print(f"scripted reviewer {report['reviewer']}: {report['verdict']}", file=ctx.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)


if __name__ == "__main__":
    sys.exit(main())
