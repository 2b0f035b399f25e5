"""Conflicts become work: a delivery that cannot be merged is given back to its run as a **repair task**.

When an integration's merge chain stops on a conflict -- a delivery against the target's tip (what another run
published, or what the merge queue published ahead of it) or against a sibling's delivery merged before it --
nothing is resolved by favouring a side. The supervisor plans a repair task in the run (:func:`plan`), a sibling of
the conflicting task that depends on it, carrying a :class:`~git_agentops.model.task.Repair`: the delivery, the
commit it would not merge onto (``onto``), the paths and what is on the other side. The finalize is refused with
``RUN_INTEGRATION_CONFLICT`` naming the repair task, and the coordinator is restarted with that diagnostic.

Then the run goes on as it always does: the scheduler provisions the repair task at once (its one dependency is
delivered), its worktree starting at ``onto`` with the delivery **being merged** -- ``git status`` shows the
conflicted paths and both sides, ``MERGE_HEAD`` names the delivery (:func:`start_merge`) -- and its worker
resolves the conflicts, commits the merge and hands it off; it is verified in a clean checkout and frozen like
any delivery. Its criteria are the conflicting task's own: the repaired work must still meet them.

In the merge order (:func:`merge_order`) a delivered repair takes the place of the delivery it repairs (its
commit contains it); a repair of a repair stands in for both. The coordinator finalizes again; the candidate is
built on the target's tip anew.

Planning is idempotent: the repair for one (delivery, ``onto``) is planned once, so an integration that crashed
between planning it and recording the failure plans nothing twice when it resumes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Final

from .. import eventkinds as kinds
from ..errors import AgentOpsError
from ..gitstore.identity import Identity
from ..gitstore.journal import Change, Event
from ..gitstore.repo import Store
from ..gitstore.safegit import run_git
from ..model.delivery import CommitId
from ..model.run import topological
from ..model.task import REPAIR_TITLE, Repair, Task, TaskStatus, new_task
from ..runs import state as runstate
from ..runs import tasks as taskbook
from ..runs.jobs import JobContext

MAX_REPAIR_DEPTH: Final = 8
"""Repairs of repairs of one task before the supervisor stops planning more (the run then stays refused, with the
conflict, for a person)."""

CONFLICT_STYLE: Final = "zdiff3"
"""The markers a repair worktree shows: ours, the merge base and theirs -- both sides and what they changed from."""


def merge_order(plan_order: Sequence[str], tasks: Mapping[str, Task]) -> list[str]:
    """The deliveries to merge, in dependency order (ties by plan order), each delivered repair in the place of
    the delivery it repairs (see the module docstring)."""
    children = [t for t in tasks.values() if t.parent is not None]
    order = topological([t for t in plan_order if t in tasks], {t.id: list(t.dependencies) for t in children})
    stand_in = _stand_ins(order, tasks)
    out: list[str] = []
    for task_id in order:
        if tasks[task_id].repair is not None:
            continue  # merged in the place of the delivery it repairs
        chosen = stand_in.get(task_id, task_id)
        if chosen not in out:
            out.append(chosen)
    return out


def _stand_ins(order: Sequence[str], tasks: Mapping[str, Task]) -> dict[str, str]:
    """task -> the newest delivered repair of it, followed through repairs of repairs."""
    repaired: dict[str, str] = {}
    for task_id in order:  # later in the order wins: the newest repair
        task = tasks[task_id]
        if task.repair is not None and task.status is TaskStatus.DELIVERED:
            repaired[task.repair.task_id] = task_id
    out: dict[str, str] = {}
    for task_id in order:
        chosen, seen = task_id, {task_id}
        while chosen in repaired and repaired[chosen] not in seen:
            chosen = repaired[chosen]
            seen.add(chosen)
        out[task_id] = chosen
    return out


def depth(tasks: Mapping[str, Task], task_id: str) -> int:
    """How many repairs stand behind ``task_id`` (0 for a task that repairs nothing)."""
    n, current = 0, tasks.get(task_id)
    while current is not None and current.repair is not None and n <= MAX_REPAIR_DEPTH:
        n, current = n + 1, tasks.get(current.repair.task_id)
    return n


def plan(
    ctx: JobContext,
    store: Store,
    task_id: str,
    onto: str,
    paths: Sequence[str],
    with_what: str,
    *,
    queue_position: int | None = None,
) -> Task | None:
    """The repair task of the delivery of ``task_id`` that conflicted on ``onto``: planned now, or the one planned
    for that conflict before. None when ``task_id`` has no delivery to repair, or already stands on
    :data:`MAX_REPAIR_DEPTH` repairs."""

    def add(change: Change, view: runstate.RunView) -> Task | None:
        tasks = view.tasks()
        conflicting = tasks.get(task_id)
        if conflicting is None or conflicting.delivery is None or depth(tasks, task_id) >= MAX_REPAIR_DEPTH:
            return None
        delivery = conflicting.delivery.commit
        for task in tasks.values():
            if task.repair is not None and (task.repair.task_id, task.repair.delivery, task.repair.onto) == (
                task_id,
                delivery,
                onto,
            ):
                return task
        run = view.run()
        repair = Repair(task_id, delivery, CommitId(onto), tuple(paths), with_what, queue_position)
        task = replace(
            new_task(
                taskbook.new_task_id(),
                title=f"{REPAIR_TITLE}{conflicting.title}"[:200],
                intent=_intent(conflicting, repair),
                goal=run.goal,
                criteria=conflicting.criteria,
                parent=conflicting.parent,
                dependencies=(task_id,),
                policy_config_hash=ctx.policy.config_hash,
            ),
            repair=repair,
        )
        taskbook.create(change, task)
        runstate.put_run(change, replace(run, plan_order=(*run.plan_order, task.id)))
        runstate.recompute_contract(change, view)
        return task

    return runstate.mutate(
        runstate.journal(store, ctx.run_id),
        add,
        Event(
            kinds.TASK_REPAIR_PLANNED,
            f"a repair task for the conflicting delivery of {task_id}",
            {"taskId": task_id, "onto": onto, "paths": list(paths)},
        ),
    )


def _intent(conflicting: Task, repair: Repair) -> str:
    shown = ", ".join(repair.paths[:20]) + (f" and {len(repair.paths) - 20} more" if len(repair.paths) > 20 else "")
    return (
        f"The frozen delivery of task {conflicting.id} ({conflicting.title!r}, commit {repair.delivery[:12]}) could "
        f"not be merged onto {repair.onto[:12]}: it and {repair.with_what} both changed {shown}. Your worktree "
        f"starts at {repair.onto[:12]} with that delivery being merged (git status lists the conflicted paths; "
        "each conflict shows ours -- what is already there --, the merge base and theirs -- the delivery). "
        "Resolve every conflict so that both sides' changes are kept and the task's criteria still hold, then "
        "commit the merge (git add, git commit) and hand it off. Never drop one side to make the conflict go "
        f"away. The task it repairs: {conflicting.intent}"
    )[:8000]


def start_merge(worktree: Path, repair: Repair, identity: Identity) -> None:
    """Leave ``worktree`` (at ``repair.onto``) merging the repaired delivery, its conflicts for the worker; safe to
    repeat (a merge already in progress, or a HEAD that moved on, is left as it is). ``GIT_FAILED`` when git
    could not even start the merge."""
    head = run_git(worktree, "rev-parse", "--verify", "--quiet", "HEAD")
    merging = run_git(worktree, "rev-parse", "--verify", "--quiet", "MERGE_HEAD")
    if merging.returncode == 0 or head.stdout.decode().strip() != repair.onto:
        return
    done = run_git(
        worktree,
        "-c",
        f"merge.conflictStyle={CONFLICT_STYLE}",
        "-c",
        f"user.name={identity.name}",  # git wants one to start a merge; the worker's commit carries its own
        "-c",
        f"user.email={identity.email}",
        "merge",
        "--no-ff",
        "--no-commit",
        "--no-edit",
        "-m",
        f"Merge the delivery of {repair.task_id} ({repair.delivery[:12]}) onto {repair.onto[:12]}",
        repair.delivery,
    )
    still = run_git(worktree, "rev-parse", "--verify", "--quiet", "MERGE_HEAD")
    if still.returncode != 0:
        output = (done.stdout + done.stderr).decode("utf-8", "replace").strip()[-2000:]
        raise AgentOpsError("GIT_FAILED", f"git merge of {repair.delivery[:12]} in {worktree} did not start: {output}")
