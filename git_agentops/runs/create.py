"""Creating a run, binding its policy, and the user's controls over it (pause, resume, stop, answer).

``create_run`` refuses unless the policy is trusted; then, in order: records the run and its coordinator (with
the worktree path it *will* use) in a new journal, binds the policy (effective config, its hash, the toolkit
version and the trust record) under ``refs/agentops/runs/<run>/policy``, stores the scripted agent's recipe as
an artifact, makes sure worker worktrees and mailboxes are excluded from commits, and creates the coordinator's
worktree on ``refs/heads/agentops/<run>/coordinator`` at the target's tip. The supervisor then starts its first
generation.

Controls are compare-and-swap state changes a running supervisor notices on its next tick; ``resume`` also
records a *user resume*, which resets the restart-storm window and allows an interrupted setup to be replayed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import __version__
from ..canonical import canonical_bytes
from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.journal import Change, Event, Journal
from ..gitstore.private import write_private
from ..gitstore.refs import read_ref
from ..gitstore.repo import Store
from ..hosts.launch import host_spec
from ..model.policy import Policy, duration_seconds
from ..model.run import Run, RunStatus, Worker, WorkerStatus
from ..model.task import TaskStatus, contract_hash
from ..policy.trust import Verdict, require_trusted
from ..supervisor.cache import mutate
from ..supervisor.loop import run_dir
from . import state as runstate
from . import tasks as taskbook
from .workspaces import ensure_setup, ensure_worktree, placement


def repo_root(store: Store) -> Path:
    if store.common_dir.name != ".git" or store.is_bare:
        raise AgentOpsError("REPO_BARE", "runs need a repository with a main working tree (not a bare repository)")
    return store.common_dir.parent


def new_run_id(clock: Clock) -> str:
    return f"run-{time.strftime('%Y%m%d', time.gmtime(clock.now()))}-{uuid.uuid4().hex[:6]}"


def bind_policy(store: Store, run_id: str, policy: Policy, trust: Verdict, clock: Clock) -> None:
    journal = Journal(store, runstate.policy_ref(run_id))
    record = trust.record or {}

    def bind(change: Change) -> None:
        if change.exists("binding.json"):
            raise AgentOpsError("RUN_NOT_ACTIVE", f"{run_id} already has a policy binding")
        change.put("config.json", canonical_bytes(dict(policy.doc)) + b"\n")
        change.put_json(
            "binding.json",
            {
                "runId": run_id,
                "configHash": policy.config_hash,
                "toolkitVersion": __version__,
                "trust": {
                    "repository": trust.identity.repository,
                    "remote": trust.identity.remote,
                    "grantedAt": str(record.get("grantedAt", "")),
                },
                "boundAt": clock.now(),
            },
            schema="binding",
        )
        change.put("approvals.json", b"[]\n")

    journal.mutate(
        bind,
        Event(
            "POLICY_BOUND", f"policy {policy.config_hash[:12]} bound to {run_id}", {"configHash": policy.config_hash}
        ),
    )


def bound_policy(store: Store, run_id: str) -> Policy:
    """The policy a run was started with (not whatever the worktree holds now)."""
    from ..schema import documents

    snapshot = Journal(store, runstate.policy_ref(run_id)).read()
    data = snapshot.get("config.json")
    if data is None:
        raise AgentOpsError("RUN_NOT_FOUND", f"{run_id} has no policy binding")
    return Policy.from_effective(documents.parse_json(data, what="bound policy"))


def create_run(
    store: Store,
    *,
    goal: str,
    policy: Policy,
    trust: Verdict,
    host: str | None,
    recipe: Path | None,
    target: str | None,
    budget: str | None,
    environ: dict[str, str],
    clock: Clock,
) -> str:
    """Create and bind a run, and its coordinator's worktree; returns the run id. See the module docstring."""
    require_trusted(trust)
    goal = goal.strip()
    if not goal or len(goal) > 8000:
        raise AgentOpsError("USAGE", "--goal must be 1-8000 characters")
    root = repo_root(store)
    target = target or policy.target
    base = read_ref(store, f"refs/heads/{target}")
    if base is None:
        raise AgentOpsError(
            "OBJECT_MISSING",
            f"the target branch {target!r} does not exist: set [run] target in the policy, or pass --target BRANCH",
        )
    budget_seconds = duration_seconds(budget) if budget else policy.budget_seconds
    if budget and budget_seconds <= 0:
        raise AgentOpsError("USAGE", f"--budget {budget!r} is not a duration like 90m or 1h30m")
    host = host or policy.doc["run"]["default_host"]
    spec = host_spec(policy, host)
    recipe_bytes = None
    if recipe is not None:
        from ..hosts.recipe import load_recipe

        load_recipe(recipe)
        recipe_bytes = recipe.read_bytes()
    elif spec.kind == "scripted":
        raise AgentOpsError("RUN_RECIPE_INVALID", "the scripted host follows a recipe: pass --recipe FILE")
    run_id = new_run_id(clock)
    where = placement(root, policy.worktree_root, run_id, "coordinator", runstate.branch_ref(run_id, "coordinator"))
    now = clock.now()
    run = Run(
        run_id=run_id,
        goal=goal,
        target=target,
        base_commit=base,
        host=host,
        repository=str(root),
        policy_config_hash=policy.config_hash,
        budget_seconds=budget_seconds,
        created_at=now,
        contract_hash=contract_hash([]),
    )
    coordinator = Worker(
        worker_id="coordinator", role="coordinator", host=host, worktree=str(where.path), branch=where.branch, base=base
    )

    def create(change: Change) -> None:
        if change.exists("run.json"):
            raise AgentOpsError("RUN_NOT_ACTIVE", f"run {run_id} already exists")
        digest = change.put_artifact(recipe_bytes) if recipe_bytes is not None else None
        runstate.put_run(change, replace(run, recipe_digest=digest))
        runstate.put_worker(change, coordinator)

    runstate.journal(store, run_id).mutate(
        create,
        Event(
            "RUN_CREATED",
            f"run {run_id} created: {goal[:120]}",
            {"goal": goal, "target": target, "base": base, "host": host, "budgetSeconds": budget_seconds},
        ),
    )
    bind_policy(store, run_id, policy, trust, clock)
    if recipe_bytes is not None:
        write_private(run_dir(store, run_id), "recipe.toml", recipe_bytes)
    from ..policy.starter import add_excludes, missing_excludes

    exclude = store.common_dir / "info" / "exclude"
    add_excludes(exclude, [line for line in missing_excludes(exclude)])
    worktree_excludes = f"/{policy.worktree_root.strip('/')}/"
    if worktree_excludes not in (exclude.read_text("utf-8") if exclude.exists() else ""):
        add_excludes(exclude, [worktree_excludes])
    ensure_worktree(store, where, start_commit=base, run_id=run_id, worker_id="coordinator", clock=clock)
    ensure_setup(where.path, policy.setup, environ=environ, clock=clock, last_user_resume=None)
    return run_id


# -- controls ---------------------------------------------------------------------------------------------------------


def _control(store: Store, run_id: str, code: str, summary: str, fn: Callable[[Change, runstate.RunView], Run]) -> Run:
    journal = runstate.journal(store, run_id)
    if not journal.exists():
        raise AgentOpsError("RUN_NOT_FOUND", f"no run {run_id!r}")
    return mutate(journal, fn, Event(code, summary, {"runId": run_id}))


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


def resume(store: Store, run_id: str, clock: Clock, *, add_budget: int = 0) -> Run:
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
    from ..model.run import used_seconds

    view = runstate.read(store, run_id)
    run = view.run()
    tasks = view.tasks()
    order = {t: i for i, t in enumerate(run.plan_order)}
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
        },
        "contractHash": run.contract_hash,
        "rootTaskId": run.root_task_id,
        "integration": run.integration,
        "workers": [
            {
                "workerId": w.worker_id,
                "role": w.role,
                "status": str(w.status),
                "generation": w.generation,
                "taskId": w.task_id,
                "worktree": w.worktree,
                "blockedReason": w.blocked_reason,
            }
            for w in sorted(view.workers(), key=lambda w: (w.role != "coordinator", w.worker_id))
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
