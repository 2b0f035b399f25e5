"""The user's controls over a run -- pause, stop, resume, answer -- and what ``run status`` shows.

Controls are compare-and-swap state changes a running supervisor notices on its next tick; ``resume`` also
records a *user resume*, which resets the restart-storm window and allows an interrupted setup to be replayed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.journal import Change, Event
from ..gitstore.repo import Store
from ..model.run import Role, Run, RunStatus, WorkerStatus, total_usage, used_seconds
from ..model.task import TaskStatus
from . import state as runstate
from . import tasks as taskbook


def _control(store: Store, run_id: str, code: str, summary: str, fn: Callable[[Change, runstate.RunView], Run]) -> Run:
    journal = runstate.journal(store, run_id)
    if not journal.exists():
        raise AgentOpsError("RUN_NOT_FOUND", f"no run {run_id!r}")
    return runstate.mutate(journal, fn, Event(code, summary, {"runId": run_id}))


def pause(store: Store, run_id: str) -> Run:
    def fn(change: Change, view: runstate.RunView) -> Run:
        run = view.run()
        if run.status not in (RunStatus.ACTIVE, RunStatus.AWAITING_INPUT):
            raise AgentOpsError("RUN_NOT_ACTIVE", f"{run_id} is {run.status}; only an active run can be paused")
        run = replace(run, status=RunStatus.PAUSED, status_reason="paused by the user")
        runstate.put_run(change, run)
        return run

    return _control(store, run_id, "RUN_PAUSED", "paused by the user", fn)


def stop(store: Store, run_id: str) -> Run:
    def fn(change: Change, view: runstate.RunView) -> Run:
        run = view.run()
        if run.status is RunStatus.COMPLETE:
            raise AgentOpsError("RUN_NOT_ACTIVE", f"{run_id} is complete")
        run = replace(run, status=RunStatus.STOPPING, status_reason="stopped by the user", disable_restart=True)
        runstate.put_run(change, run)
        return run

    return _control(store, run_id, "RUN_STOPPED", "stopped by the user", fn)


def resume(
    store: Store, run_id: str, clock: Clock, *, add_budget: int = 0, add_cost_usd: float = 0.0, add_tokens: int = 0
) -> Run:
    """Make a paused, stopped, blocked or budget-limited run active again (a *user resume*)."""

    def fn(change: Change, view: runstate.RunView) -> Run:
        run = view.run()
        if run.status is RunStatus.COMPLETE:
            raise AgentOpsError("RUN_NOT_ACTIVE", f"{run_id} is complete")
        open_questions = [q for q in view.questions() if q["answer"] is None]
        status = RunStatus.AWAITING_INPUT if open_questions else RunStatus.ACTIVE
        run = replace(
            run,
            status=status,
            status_reason=None,
            disable_restart=False,
            last_user_resume=clock.now(),
            budget_seconds=run.budget_seconds + add_budget,
            cost_limit_usd=run.cost_limit_usd + add_cost_usd if run.cost_limit_usd is not None else None,
            token_limit=run.token_limit + add_tokens if run.token_limit is not None else None,
        )
        runstate.put_run(change, run)
        for worker in view.workers():  # a resume is the user saying "try again"
            if worker.status is WorkerStatus.BLOCKED:
                runstate.put_worker(
                    change, replace(worker, status=WorkerStatus.STOPPED, failures=(), blocked_reason=None)
                )
        for task in view.tasks().values():
            if task.status is TaskStatus.BLOCKED:
                started = task.parent is None or "workerId" in task.extra
                taskbook.put(
                    change,
                    replace(task, status=TaskStatus.RUNNING if started else TaskStatus.PLANNED, blocked_reason=None),
                )
        return run

    return _control(store, run_id, "RUN_RESUMED", "resumed by the user", fn)


def answer(store: Store, run_id: str, question_id: str, text: str, clock: Clock) -> Run:
    if not text.strip():
        raise AgentOpsError("USAGE", "the answer is empty")

    def fn(change: Change, view: runstate.RunView) -> Run:
        questions = {q["questionId"]: q for q in view.questions()}
        question = questions.get(question_id)
        if question is None or question["answer"] is not None:
            open_ids = [q for q, doc in questions.items() if doc["answer"] is None]
            raise AgentOpsError(
                "RUN_QUESTION_UNKNOWN", f"no open question {question_id!r} (open: {', '.join(open_ids) or 'none'})"
            )
        runstate.put_question(change, {**question, "answer": text, "answeredAt": clock.now()})
        run = view.run()
        still_open = [q for q, doc in questions.items() if doc["answer"] is None and q != question_id]
        if run.status is RunStatus.AWAITING_INPUT and not still_open:
            run = replace(run, status=RunStatus.ACTIVE, status_reason=None, last_user_resume=clock.now())
            runstate.put_run(change, run)
        return run

    return _control(store, run_id, "RUN_ANSWERED", f"question {question_id} answered", fn)


def summary(store: Store, run_id: str, clock: Clock) -> dict[str, Any]:
    """Everything ``git agentops-run status`` shows, as one JSON-able document."""
    view = runstate.read(store, run_id)
    run = view.run()
    tasks = view.tasks()
    order = {t: i for i, t in enumerate(run.plan_order)}
    tokens, cost = total_usage(view.workers())
    return {
        "runId": run.run_id,
        "status": str(run.status),
        "statusReason": run.status_reason,
        "goal": run.goal,
        "target": run.target,
        "base": run.base_commit,
        "host": run.host,
        "budget": {
            "usedSeconds": round(used_seconds(run.intervals, clock.now()), 1),
            "limitSeconds": run.budget_seconds,
            "usedTokens": tokens,
            "tokenLimit": run.token_limit,
            "usedCostUsd": round(cost, 6) if cost is not None else None,
            "costLimitUsd": run.cost_limit_usd,
        },
        "contractHash": run.contract_hash,
        "rootTaskId": run.root_task_id,
        "integration": run.integration.to_json() if run.integration else None,
        "workers": [
            {
                "workerId": w.worker_id,
                "role": str(w.role),
                "status": str(w.status),
                "generation": w.generation,
                "taskId": w.task_id,
                "worktree": w.worktree,
                "blockedReason": w.blocked_reason,
                "session": w.session,
                "usage": [u.to_json() for u in w.usage],
            }
            for w in sorted(view.workers(), key=lambda w: (w.role is not Role.COORDINATOR, w.worker_id))
        ],
        "tasks": [
            {
                "taskId": t.id,
                "title": t.title,
                "status": str(t.status),
                "parent": t.parent,
                "dependencies": list(t.dependencies),
                "revision": t.revision,
                "delivery": (t.extra.get("delivery") or {}).get("commit"),
                "blockedReason": t.blocked_reason,
            }
            for t in sorted(tasks.values(), key=lambda t: (t.parent is not None, order.get(t.id, 0)))
        ],
        "questions": [q for q in view.questions()],
    }
