"""Scheduling: a planned child task becomes ready when every dependency is delivered; then it is provisioned.

Provisioning a task's worker: record the worker and its worktree path in state *before* anything is created (so a
crash leaves an intent the next supervisor can finish), then -- in a job -- branch from the coordinator's HEAD,
merge each dependency's **frozen delivery** in memory (no worktree is touched; a merge commit per dependency, in
the dependencies' plan order), create the worktree on the result and run the policy's setup steps. A merge
conflict blocks the task and its dependents with ``RUN_DEPENDENCY_CONFLICT`` and the conflicted paths; the
worktree is still created at the last clean merge so the conflict can be inspected. A repair task
(:mod:`git_agentops.integrate.repair`) starts instead where its conflict happened, with the conflicting delivery
being merged and its conflicts left in the worktree for its worker. At most ``max_workers`` children run at once.

:func:`schedule` decides from a snapshot and returns what to do -- each task's intent recorded, then its
provisioning job submitted (:mod:`.effects`) -- and the loop carries that out.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, replace
from pathlib import Path

from .. import eventkinds as kinds
from ..errors import AgentOpsError
from ..gitstore.checkout import admin_dir
from ..gitstore.journal import Change, Event
from ..gitstore.refs import read_ref
from ..gitstore.repo import Store
from ..integrate.merge import merge_chain
from ..integrate.repair import start_merge
from ..model.run import Role, Worker, WorkerStatus
from ..model.task import Repair, TaskStatus, delivered
from ..model.workspace import WorkspaceCost
from ..runs import state as runstate
from ..runs import tasks as taskbook
from ..runs.jobs import Block, JobContext, Provisioned
from ..verify.workspaces import Placement, ensure_setup, ensure_worktree, mirror_branch, placement
from ..workspace import localfiles
from ..workspace.cost import disk_bytes
from .effects import ChangeState, Effect, Submit
from .ports import Snapshot


def child_worker_id(task_id: str) -> str:
    """The worker id of a task's first worker: ``worker-`` and the task id's first eight hex digits."""
    return "worker-" + task_id.removeprefix("task-")[:8]


@dataclass(frozen=True, slots=True)
class Provision:
    """What the provisioning job of one child needs: where, on what, with which deliveries merged in."""

    worker_id: str
    task_id: str
    where: Placement
    coordinator_branch: str
    coordinator_worktree: str
    deliveries: tuple[tuple[str, str], ...]  # (task id, delivered commit), in plan order
    repair: Repair | None = None  # a repair task: start at its ``onto``, merging its delivery


def schedule(snap: Snapshot) -> tuple[Effect, ...]:
    """Provision ready tasks, in plan order, while fewer than ``max_workers`` children are busy: for each, its
    intent recorded, then its provisioning job submitted."""
    run = snap.run
    if run.root_task_id is None:
        return ()
    tasks = snap.tasks
    workers = snap.workers
    busy = sum(1 for w in workers.values() if w.role is Role.CHILD and (w.active or w.worker_id in snap.busy))
    effects: list[Effect] = []
    for task_id in run.plan_order:
        if busy >= snap.policy.max_workers:
            break
        task = tasks.get(task_id)
        if task is None or task.status is not TaskStatus.PLANNED:
            continue
        if not all(tasks[d].status is TaskStatus.DELIVERED for d in task.dependencies if d in tasks):
            continue
        worker_id = child_worker_id(task_id)
        if worker_id in workers and workers[worker_id].task_id != task_id:
            worker_id = f"{worker_id}-{len(workers)}"
        where = placement(
            Path(run.repository),
            snap.policy.worktree_root,
            snap.run_id,
            worker_id,
            runstate.branch_ref(snap.run_id, worker_id),
        )
        effects.append(_intent(task_id, worker_id, where))
        order = {t: i for i, t in enumerate(run.plan_order)}
        job = Provision(
            worker_id=worker_id,
            task_id=task_id,
            where=where,
            coordinator_branch=workers[run.coordinator_id].branch,
            coordinator_worktree=workers[run.coordinator_id].worktree,
            deliveries=()
            if task.repair is not None
            else tuple(
                (d, delivered(tasks[d]).commit)
                for d in sorted(task.dependencies, key=lambda d: order.get(d, len(order)))
            ),
            repair=task.repair,
        )
        effects.append(Submit(worker_id, functools.partial(_provision_job, snap.ctx, job)))
        busy += 1
    return tuple(effects)


def _intent(task_id: str, worker_id: str, where: Placement) -> ChangeState:
    """The task running, and its worker assigned to the worktree path it will get, before anything exists."""

    def intent(change: Change, view: runstate.RunView) -> None:
        current = view.task(task_id)
        if current.status is not TaskStatus.PLANNED:
            raise AgentOpsError("RUN_NOT_ACTIVE", f"{task_id} is {current.status}")
        taskbook.put(change, replace(current, status=TaskStatus.RUNNING, worker_id=worker_id))
        previous = view.worker(worker_id) if f"{worker_id}.json" in view.view.list("workers") else None
        runstate.put_worker(
            change,
            Worker(
                worker_id=worker_id,
                role=Role.CHILD,
                host=view.run().host,
                worktree=str(where.path),
                branch=where.branch,
                task_id=task_id,
                status=WorkerStatus.ASSIGNED,
                generation=previous.generation if previous else 0,  # a fencing token never goes back
                provisioning=True,
                session=previous.session if previous else None,
                usage=previous.usage if previous else (),
            ),
        )

    return ChangeState(
        intent,
        Event(
            kinds.TASK_PROVISIONING,
            f"provisioning {task_id} for {worker_id}",
            {"taskId": task_id, "workerId": worker_id},
        ),
    )


def _provision_job(ctx: JobContext, job: Provision, store: Store) -> Provisioned | Block:
    return provision(ctx, store, job)


def provision(ctx: JobContext, store: Store, job: Provision) -> Provisioned | Block:
    """Job: branch, merge dependencies, create the worktree, run setup (see the module docstring)."""
    began = time.monotonic()
    if job.repair is not None:
        start: str | None = job.repair.onto
    else:
        start = mirror_branch(store, Path(job.coordinator_worktree), job.coordinator_branch)  # what it committed
        start = start or read_ref(store, job.coordinator_branch)
    if start is None:
        return Block("RUN_WORKTREE_OWNERSHIP", f"the coordinator's branch {job.coordinator_branch} is gone")
    head, conflict = start, None
    if job.deliveries:
        chain = merge_chain(
            store,
            start,
            job.deliveries,
            message=lambda label, commit: f"Merge frozen delivery of {label} ({commit[:12]})\n",
        )
        head = chain.steps[-1].commit if chain.steps else start
        conflict = chain.conflict
    run = runstate.read(store, ctx.run_id).run()
    workspace = ctx.policy.workspace
    try:
        includes = localfiles.sources(store, Path(run.repository), workspace.include) if workspace.include else []
    except AgentOpsError as exc:  # before the worktree exists: nothing is made for a policy that cannot be served
        return Block(exc.code, exc.message)
    made = ensure_worktree(
        store, job.where, start_commit=head, run_id=ctx.run_id, worker_id=job.worker_id, clock=ctx.clock
    )
    if made and includes:  # only into a worktree just made: no agent has written there yet
        localfiles.copy_into(includes, job.where.path)
    if conflict is not None:
        label, paths = conflict
        return Block(
            "RUN_DEPENDENCY_CONFLICT",
            f"merging the delivery of {label} conflicts in: {', '.join(paths)} (checkout kept at {job.where.path})",
        )
    try:
        held = (
            ctx.workspaces.acquire(job.worker_id) if ctx.workspaces is not None and not ctx.workspaces.empty else None
        )
        ensure_setup(
            store,
            job.where.path,
            ctx.policy,
            environ=ctx.environ,
            clock=ctx.clock,
            last_user_resume=run.last_user_resume,
            log=ctx.log,
            workspace=held,
        )
        if job.repair is not None:  # after the setup: a conflicted lockfile must not break it
            start_merge(job.where.path, job.repair, store.identity)
    except AgentOpsError as exc:
        return Block(exc.code, exc.message)

    admin = admin_dir(job.where.path)
    cost = WorkspaceCost(
        seconds=round(time.monotonic() - began, 2),
        disk_bytes=disk_bytes(job.where.path, *([admin] if admin is not None else [])),
        ports=held.block.ports if held is not None and held.block is not None else (),
        services=held.services() if held is not None else (),
    )
    ctx.log(f"{job.worker_id}: workspace ready ({cost.describe()})")

    def ready(change: Change, view: runstate.RunView) -> None:
        worker = view.worker(job.worker_id)
        runstate.put_worker(change, replace(worker, base=head, provisioning=False, workspace=cost))

    runstate.mutate(
        runstate.journal(store, ctx.run_id),
        ready,
        Event(
            kinds.WORKER_PROVISIONED,
            f"{job.worker_id} provisioned at {head[:12]}",
            {
                "workerId": job.worker_id,
                "taskId": job.task_id,
                "base": head,
                "dependencies": [d for d, _ in job.deliveries],
            },
        ),
    )
    return Provisioned(job.worker_id, head)
