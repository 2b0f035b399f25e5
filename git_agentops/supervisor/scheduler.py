"""Scheduling: a planned child task becomes ready when every dependency is delivered; then it is provisioned.

Provisioning a task's worker: record the worker and its worktree path in state *before* anything is created (so a
crash leaves an intent the next supervisor can finish), then -- in a job thread -- branch from the coordinator's
HEAD, merge each dependency's **frozen delivery** in memory (no worktree is touched; a merge commit per
dependency, in the dependencies' plan order), create the worktree on the result and run the policy's setup
steps. A merge conflict blocks the task and its dependents with ``RUN_DEPENDENCY_CONFLICT`` and the conflicted
paths; the worktree is still created at the last clean merge so the conflict can be inspected. At most
``max_workers`` children run at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import AgentOpsError
from ..gitstore.journal import Change, Event
from ..gitstore.refs import read_ref
from ..gitstore.repo import Store
from ..model.run import Worker, WorkerStatus
from ..model.task import TaskStatus
from ..runs import state as runstate
from ..runs import tasks as taskbook
from ..runs.workspaces import ensure_setup, ensure_worktree, placement
from .cache import mutate

if TYPE_CHECKING:
    from .loop import Supervisor


def child_worker_id(task_id: str) -> str:
    return "worker-" + task_id.removeprefix("task-")[:8]


def schedule(sup: Supervisor) -> None:
    run = sup.state.run()
    if run.root_task_id is None:
        return
    tasks = sup.state.tasks()
    workers = sup.state.workers()
    busy = sum(1 for w in workers.values() if w.role == "child" and (w.active or w.worker_id in sup.jobs))
    for task_id in run.plan_order:
        if busy >= sup.policy.max_workers:
            return
        task = tasks.get(task_id)
        if task is None or task.status is not TaskStatus.PLANNED:
            continue
        if not all(tasks[d].status is TaskStatus.DELIVERED for d in task.dependencies if d in tasks):
            continue
        worker_id = child_worker_id(task_id)
        if worker_id in workers and workers[worker_id].task_id != task_id:
            worker_id = f"{worker_id}-{len(workers)}"
        repo_root = Path(run.repository)
        where = placement(
            repo_root, sup.policy.worktree_root, sup.run_id, worker_id, runstate.branch_ref(sup.run_id, worker_id)
        )

        def intent(
            change: Change,
            view: runstate.RunView,
            task_id: str = task_id,
            worker_id: str = worker_id,
            where: Any = where,
        ) -> None:
            current = view.task(task_id)
            if current.status is not TaskStatus.PLANNED:
                raise AgentOpsError("RUN_NOT_ACTIVE", f"{task_id} is {current.status}")
            taskbook.put(
                change, replace(current, status=TaskStatus.RUNNING, extra={**current.extra, "workerId": worker_id})
            )
            runstate.put_worker(
                change,
                Worker(
                    worker_id=worker_id,
                    role="child",
                    host=view.run().host,
                    worktree=str(where.path),
                    branch=where.branch,
                    task_id=task_id,
                    status=WorkerStatus.ASSIGNED,
                    generation=0,
                    extra={"provisioning": True},
                ),
            )

        mutate(
            sup.state.journal,
            intent,
            Event(
                "TASK_PROVISIONING",
                f"provisioning {task_id} for {worker_id}",
                {"taskId": task_id, "workerId": worker_id},
            ),
        )
        deliveries = [(d, tasks[d].extra["delivery"]["commit"]) for d in _ordered(run.plan_order, task.dependencies)]
        coordinator = workers[run.coordinator_id]
        sup.submit(worker_id, _provision_job(sup, worker_id, where, deliveries, coordinator.branch, task_id))
        busy += 1
        sup.state.refresh()


def _provision_job(
    sup: Supervisor,
    worker_id: str,
    where: Any,
    deliveries: list[tuple[str, str]],
    coordinator_branch: str,
    task_id: str,
) -> Callable[[Store], dict[str, str]]:
    def job(store: Store) -> dict[str, str]:
        return provision(
            sup,
            store,
            worker_id=worker_id,
            where=where,
            deliveries=deliveries,
            coordinator_branch=coordinator_branch,
            task_id=task_id,
        )

    return job


def _ordered(plan_order: tuple[str, ...], dependencies: tuple[str, ...]) -> list[str]:
    rank = {task_id: i for i, task_id in enumerate(plan_order)}
    return sorted(dependencies, key=lambda d: rank.get(d, len(rank)))


def provision(
    sup: Supervisor,
    store: Store,
    *,
    worker_id: str,
    where: Any,
    deliveries: list[tuple[str, str]],
    coordinator_branch: str,
    task_id: str,
) -> dict[str, str]:
    """Job: branch, merge dependencies, create the worktree, run setup; {"action": "ok"|"block", ...}."""
    from ..integrate.merge import merge_chain

    start = read_ref(store, coordinator_branch)
    if start is None:
        return {
            "action": "block",
            "code": "RUN_WORKTREE_OWNERSHIP",
            "reason": f"the coordinator's branch {coordinator_branch} is gone",
        }
    head, conflict = start, None
    if deliveries:
        chain = merge_chain(
            store,
            start,
            deliveries,
            message=lambda label, commit: f"Merge frozen delivery of {label} ({commit[:12]})\n",
        )
        head = chain.steps[-1].commit if chain.steps else start
        conflict = chain.conflict
    ensure_worktree(store, where, start_commit=head, run_id=sup.run_id, worker_id=worker_id, clock=sup.clock)
    if conflict is not None:
        label, paths = conflict
        return {
            "action": "block",
            "code": "RUN_DEPENDENCY_CONFLICT",
            "reason": f"merging the delivery of {label} conflicts in: {', '.join(paths)} "
            f"(checkout kept at {where.path})",
        }
    run = runstate.read(store, sup.run_id).run()
    try:
        ensure_setup(
            where.path, sup.policy.setup, environ=sup.environ, clock=sup.clock, last_user_resume=run.last_user_resume
        )
    except AgentOpsError as exc:
        return {"action": "block", "code": exc.code, "reason": exc.message}
    journal = runstate.journal(store, sup.run_id)

    def ready(change: Change, view: runstate.RunView) -> None:
        worker = view.worker(worker_id)
        runstate.put_worker(
            change, replace(worker, base=head, extra={k: v for k, v in worker.extra.items() if k != "provisioning"})
        )

    mutate(
        journal,
        ready,
        Event(
            "WORKER_PROVISIONED",
            f"{worker_id} provisioned at {head[:12]}",
            {"workerId": worker_id, "taskId": task_id, "base": head, "dependencies": [d for d, _ in deliveries]},
        ),
    )
    return {"action": "ok"}
