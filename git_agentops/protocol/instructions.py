"""What a worker is told: its instructions document (``instructions.json``) and, for hosts that read prose, a prompt.

Both are pure functions of run state. The supervisor regenerates them whenever something a worker acts on changes
(its generation, the contract hash, the task list, answers: :mod:`git_agentops.supervisor.briefing`), so a worker
can always re-read them instead of remembering.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..model.run import Role, Run, Worker, worker_contract
from ..model.task import Task


def instructions(
    run: Run,
    worker: Worker,
    tasks: dict[str, Task],
    answers: list[dict[str, Any]],
    recipe: Path | None,
    policy: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``instructions.json`` document of ``worker``: a pure function of the run state it is given.

    It carries the worker's identity, its generation, the contract hash its requests must bind
    (:func:`~git_agentops.model.run.worker_contract`), its own task, the child tasks in plan order (with the commit of
    each delivery), the answered questions, its diagnostic and its mailbox path; and ``policy``: the config hash in
    force (what a ``policy`` request names as expected), who approves changes, and the run's transitions.
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
                "delivery": t.delivery.commit if t.delivery is not None else None,
                "blockedReason": t.blocked_reason,
                "criteria": [c.to_json() for c in t.criteria],
            }
            for t in children
        ],
        "rootTaskId": run.root_task_id,
        "diagnostic": worker.diagnostic,
        "wake": worker.wake,
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
        "policy": {
            "configHash": run.policy_config_hash,
            "changes": "user",
            "transitions": [],
            **(policy or {}),
        },
    }


COORDINATOR_STEPS = """\
You are the **coordinator**: you plan the work, child workers implement it. Do not edit or commit files yourself.

1. If `rootTaskId` is null, create the root task bound to the goal (2-5 acceptance criteria):
   `git agentops-request plan --title "TITLE" --intent "WHAT AND WHY" --criterion "C1" --criterion "C2"`
2. Plan each child task (1-10 criteria); the answer prints its id as `taskId: task-...`, which later tasks name in
   `--depends-on`:
   `git agentops-request worker --title "TITLE" --intent "WHAT TO DO" --criterion "C1" [--depends-on TASK_ID]`
   A child starts in its own worktree from your HEAD, with the frozen deliveries of its dependencies merged in.
3. Then end your turn (exit). Ending your turn is how you wait: the supervisor runs the children and starts you again,
   with a section saying why, when every child is delivered, when a child is blocked, or when the answer to your
   question arrives.
4. When every child is delivered: `git agentops-request finalize` -- the supervisor merges the deliveries,
   verifies and reviews the result, publishes it and writes its receipt. Then end your turn.

   If two deliveries (or one and what reached the target meanwhile) conflict, the finalize fails with
   RUN_INTEGRATION_CONFLICT and the supervisor plans a repair task ("Resolve the merge conflict of: ...") whose
   worker resolves it keeping both sides; finalize again once it is delivered.

Task statuses: `planned` (waiting for its dependencies), `running`, `delivered`, `blocked` (see its blockedReason).
For a blocked child: re-plan it with a new revision, which starts it again,
`git agentops-request worker --task-id TASK_ID --title "..." --intent "..." --criterion "..."`, plan another task
instead, or ask the user: `git agentops-request question --prompt "TEXT"`.

Only you may change what the run executes (a verification command, an acceptance runner, a setup step, a host):
write the complete new policy to `.agentops/proposals/NAME.toml` in your worktree (never committed), then
`git agentops-request policy --file PATH --expected-policy-hash HASH --approve runner:ID --reason "WHY IT IS SAFE"`,
one `--approve`/`--reason` per added or changed capability, HASH being `policy.configHash` of instructions.json.
Never drop, weaken or re-point a required command, reviewer or signature rule: such a proposal is refused. Every
writer stops while the change is approved (by a person, unless the policy lets you) and applied; you are started
again with what changed. Commit source changes and let the children hand off before you propose.
"""

CHILD_STEPS = """\
1. Work only in this worktree; it is on your own branch.
2. Commit your work: `git add -A && git commit -m "MESSAGE"`. Leave no uncommitted changes (`git status` shows
   them); if the commit fails, read its error: nothing is delivered that is not committed.
3. Check it before handing off: `git agentops-verify` runs this repository's verification on your last commit and
   prints what failed. If something fails, fix it, commit again and re-run it.
4. Hand off: `git agentops-request handoff`. The supervisor stops you, verifies your commit itself and freezes it as
   your delivery; that ends your turn. If the verification fails you are started again with the failure below.
   If the task needs no change, hand off naming the files that already satisfy it:
   `git agentops-request handoff --source-file PATH`.
"""

COORDINATOR_COMMANDS = """\
Your commands, as before: `git agentops-request finalize` once every child is delivered;
`git agentops-request worker --title "TITLE" --intent "WHAT TO DO" --criterion "C1" [--depends-on TASK_ID]` to plan
more, with `--task-id TASK_ID` to re-plan a blocked task; `git agentops-request question --prompt "TEXT"` to ask.
"""

CHILD_COMMANDS = """\
Your commands, as before: `git add -A && git commit -m "MESSAGE"`, `git agentops-verify` to check your last commit,
then `git agentops-request handoff` to deliver it.
"""

PROTOCOL = """\
## How to talk to the supervisor

- `git agentops-request ACTION ...` sends one request and prints the answer (`CODE: message`, then its data); exit
  status 0 means accepted, 1 refused (the message says why). Run it from anywhere in this worktree.
- Your instructions, always current: `.agentops/mailbox/instructions.json` (your task, every task's id, status and
  delivery, answers to questions). Re-read it rather than remembering.
- You run one-shot: do your part, then end your turn. Nothing you say counts, only requests and commits.
"""


def _task_table(doc: dict[str, Any]) -> list[str]:
    if not doc["tasks"]:
        return ["(no child task is planned yet)"]
    lines = ["| id | title | status | depends on |", "|---|---|---|---|"]
    for task in doc["tasks"]:
        status = task["status"] + (f": {task['blockedReason'][:300]}" if task.get("blockedReason") else "")
        lines.append(f"| {task['id']} | {task['title']} | {status} | {', '.join(task['dependencies']) or '-'} |")
    return lines


def prompt(doc: dict[str, Any]) -> str:
    """A prompt for an agent that reads prose: its role, its task, the protocol, and why it was started now."""
    lines = [
        f"# You are worker `{doc['workerId']}` (generation {doc['generation']}) of git-agentops run `{doc['runId']}`",
        "",
        f"Run goal: {doc['goal']}",
        "",
    ]
    if doc["role"] == Role.COORDINATOR:
        lines += [COORDINATOR_STEPS, "## Tasks now", "", f"Root task: {doc['rootTaskId'] or 'not planned yet'}", ""]
        lines += _task_table(doc)
    else:
        task = doc["task"] or {}
        lines += [f"## Your task: {task.get('title', '?')} ({task.get('id', '?')})", "", task.get("intent", ""), ""]
        lines += ["Acceptance criteria:"]
        lines += [f"- {c['id']}: {c['description']}" for c in task.get("criteria", [])]
        lines += ["", CHILD_STEPS]
    lines += ["", PROTOCOL]
    lines += _situation(doc)
    return "\n".join(lines) + "\n"


def _situation(doc: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    if doc.get("wake"):
        lines += ["", "## Why you were started now", "", doc["wake"]]
    if doc["diagnostic"]:
        lines += ["", "## Why you were started again", "", doc["diagnostic"]]
    if doc["answers"]:
        lines += ["", "## Answers from the user", ""]
        lines += [f"- Q ({a['questionId']}): {a['prompt']}\n  A: {a['answer']}" for a in doc["answers"]]
    return lines


def resume_prompt(doc: dict[str, Any]) -> str:
    """What a resumed session is told: what changed since its last turn (the instructions file has the rest)."""
    lines = [
        f"The git-agentops supervisor resumed your session as generation {doc['generation']} of worker "
        f"`{doc['workerId']}`. Here is what changed; `.agentops/mailbox/instructions.json` has the rest, and every "
        "request now carries this generation.",
    ]
    lines += _situation(doc)
    if doc["role"] == Role.COORDINATOR:
        lines += ["", "## Tasks now", "", *_task_table(doc), "", COORDINATOR_COMMANDS]
    else:
        lines += ["", CHILD_COMMANDS]
    lines += ["", "Do your part, then end your turn."]
    return "\n".join(lines) + "\n"
