"""What a worker is told: its instructions document (``instructions.json``) and, for hosts that read prose, a prompt.

Both are pure functions of run state. The supervisor regenerates them whenever something a worker acts on changes
(its generation, the contract hash, the task list, answers: :mod:`git_agentops.supervisor.briefing`), so a worker
can always re-read them instead of remembering.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..model.run import Role, Run, Worker, worker_contract
from ..model.task import Task


def instructions(
    run: Run, worker: Worker, tasks: dict[str, Task], answers: list[dict[str, Any]], recipe: Path | None
) -> dict[str, Any]:
    """The ``instructions.json`` document of ``worker``: a pure function of the run state it is given.

    It carries the worker's identity, its generation, the contract hash its requests must bind
    (:func:`~git_agentops.model.run.worker_contract`), its own task, the child tasks in plan order (with the commit of
    each delivery), the answered questions, its diagnostic and its mailbox path.
    """
    children = [t for t in tasks.values() if t.parent is not None]
    order = {task_id: i for i, task_id in enumerate(run.plan_order)}
    children.sort(key=lambda t: order.get(t.id, len(order)))
    own = tasks.get(worker.task_id) if worker.task_id else None
    return {
        "version": 1,
        "runId": run.run_id,
        "workerId": worker.worker_id,
        "role": str(worker.role),
        "generation": worker.generation,
        "contractHash": worker_contract(run, worker, tasks),
        "goal": run.goal,
        "task": own.to_json() if own is not None else None,
        "tasks": [
            {
                "id": t.id,
                "title": t.title,
                "status": str(t.status),
                "dependencies": list(t.dependencies),
                "delivery": t.extra.get("delivery", {}).get("commit")
                if isinstance(t.extra.get("delivery"), dict)
                else None,
                "blockedReason": t.blocked_reason,
            }
            for t in children
        ],
        "rootTaskId": run.root_task_id,
        "diagnostic": worker.diagnostic,
        "answers": [
            {"questionId": a["questionId"], "prompt": a["prompt"], "answer": a["answer"]}
            for a in answers
            if a.get("answer") is not None
        ],
        "mailbox": str(Path(worker.worktree) / ".agentops" / "mailbox"),
        "worktree": worker.worktree,
        "base": worker.base,
        "host": worker.host,
        "recipe": str(recipe) if recipe is not None else None,
        "runStatus": str(run.status),
    }


def prompt(doc: dict[str, Any]) -> str:
    """A prompt for an agent that reads prose: its role, its task, the protocol, and why it was restarted."""
    lines = [
        f"# You are worker `{doc['workerId']}` (generation {doc['generation']}) of git-agentops run `{doc['runId']}`",
        "",
        f"Run goal: {doc['goal']}",
        "",
    ]
    if doc["role"] == Role.COORDINATOR:
        lines += [
            "You are the **coordinator**. Plan the work, do not implement it yourself:",
            "1. `git agentops-request plan --title T --intent I --criterion C1 --criterion C2` (2-5 criteria) creates",
            "   the root task bound to the goal.",
            "2. `git agentops-request worker --title T --intent I --criterion C [--depends-on TASK_ID]` plans a child",
            "   task; a child starts from your HEAD, with the frozen deliveries of its dependencies merged in.",
            "3. Re-read `.agentops/mailbox/instructions.json` to follow the children (`tasks[].status`).",
            "4. When every child is delivered: `git agentops-request finalize`.",
            "Ask the user with `git agentops-request question --prompt TEXT` when you cannot decide.",
        ]
    else:
        task = doc["task"] or {}
        lines += [f"## Your task: {task.get('title', '?')}", "", task.get("intent", ""), "", "Acceptance criteria:"]
        lines += [f"- {c['id']}: {c['description']}" for c in task.get("criteria", [])]
        lines += [
            "",
            "Work only in this worktree. Commit your changes (`git add -A && git commit -m ...`), keep the checkout",
            "clean, then hand off with `git agentops-request handoff`. The supervisor stops you, runs the",
            "repository's verification on your commit and freezes it as your delivery if it passes; if it fails",
            "you are restarted with the failure as a diagnostic.",
        ]
    if doc["diagnostic"]:
        lines += ["", "## Why you were restarted", "", doc["diagnostic"]]
    if doc["answers"]:
        lines += ["", "## Answers from the user", ""]
        lines += [f"- Q: {a['prompt']}\n  A: {a['answer']}" for a in doc["answers"]]
    lines += ["", "Your instructions, always current: `.agentops/mailbox/instructions.json`.", ""]
    return "\n".join(lines)
