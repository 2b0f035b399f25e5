"""The scripted agent's process, wired: what ``python -m git_agentops.cli.agent`` runs in a worktree.

The supervisor launches the built-in ``scripted`` host with the worktree as its current directory and
``AGENTOPS_RUN_ID``, ``AGENTOPS_WORKER_ID``, ``AGENTOPS_GENERATION``, ``AGENTOPS_MAILBOX`` and
``AGENTOPS_RECIPE`` in its environment. :func:`play` reads that environment (handed in by the command, which alone
reads the process's own), loads the recipe and hands real side effects (the mailbox client, commands run with the
agent's environment, ``time.sleep``, a log line writer, which ends up in the worker's host log) to
:func:`git_agentops.hosts.scripted.run_agent`, whose return value is the exit status.

Its generation comes from ``$AGENTOPS_GENERATION`` rather than from the instructions file: it is the fencing
token this process was started with, so a process that outlived its generation can never speak for the next one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ..clock import Clock
from ..errors import AgentOpsError

if TYPE_CHECKING:
    from ..canonical import JsonValue
    from ..model.request import ResponseDoc

REQUEST_TIMEOUT: Final = 3600.0  # a finalize integrates and verifies everything; a dead supervisor restarts us


def _generation(text: str | None) -> int | None:
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise AgentOpsError("USAGE", f"AGENTOPS_GENERATION must be a positive integer, not {text!r}")
    return int(text)


def play(env: Mapping[str, str], cwd: Path, *, clock: Clock, write: Callable[[str], None]) -> int:
    """Play the recipe as the worker ``env`` names, from ``cwd`` in its worktree; ``write`` takes each log line.
    The exit status. ``USAGE``, ``RUN_RECIPE_INVALID``."""
    from ..protocol import client, mailbox
    from .recipe import load_recipe
    from .scripted import make_runner, run_agent

    worktree = mailbox.find_worktree(cwd, env.get("AGENTOPS_MAILBOX"))
    instructions = mailbox.read_instructions(worktree)
    generation = _generation(env.get("AGENTOPS_GENERATION"))
    worker = env.get("AGENTOPS_WORKER_ID") or instructions["workerId"]
    prefix = f"[scripted {worker} g{generation or instructions['generation']}]"

    def log(text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        for line in text.splitlines() or [""]:
            write(f"{stamp} {prefix} {line}")

    if env.get("AGENTOPS_WORKER_ID") and env["AGENTOPS_WORKER_ID"] != instructions["workerId"]:
        log(f"the instructions are for worker {instructions['workerId']}, not for me; stopping")
        return 1
    where = env.get("AGENTOPS_RECIPE") or instructions["recipe"]
    if not where:
        raise AgentOpsError(
            "RUN_RECIPE_INVALID", "no recipe: neither AGENTOPS_RECIPE nor instructions.recipe names one"
        )
    recipe = load_recipe(cwd / Path(where))

    def call(action: str, fields: Mapping[str, JsonValue]) -> ResponseDoc:
        return client.call(worktree, action, fields, timeout=REQUEST_TIMEOUT, generation=generation)

    runner = make_runner(env, clock=clock)
    return run_agent(worktree, recipe, call=call, log=log, run=runner, sleep=time.sleep, generation=generation)


def review(env: Mapping[str, str]) -> str:
    """Review mode: play the recipe's reviewer named ``$AGENTOPS_REVIEWER`` and write its report. The line saying
    its verdict. ``RUN_RECIPE_INVALID``."""
    import json

    from ..schema import documents
    from .recipe import load_recipe
    from .scripted import review_report

    recipe = load_recipe(Path(env["AGENTOPS_RECIPE"])) if env.get("AGENTOPS_RECIPE") else None
    if recipe is None:
        raise AgentOpsError("RUN_RECIPE_INVALID", "a scripted reviewer needs $AGENTOPS_RECIPE")
    review_input = json.loads(Path(env["AGENTOPS_REVIEW_INPUT"]).read_text("utf-8"))
    report = review_report(recipe, env.get("AGENTOPS_REVIEWER", ""), review_input)
    Path(env["AGENTOPS_REVIEW_REPORT"]).write_bytes(documents.dump(report, schema="review-report"))
    return f"scripted reviewer {report['reviewer']}: {report['verdict']}"
