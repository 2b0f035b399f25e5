"""What each request action does, once :mod:`.requests` has validated, fenced and de-duplicated it.

| action     | who                       | effect                                                                    |
|------------|---------------------------|---------------------------------------------------------------------------|
| ``plan``     | the coordinator, once     | creates the root task bound to the goal                                   |
| ``worker``   | the coordinator           | plans (or re-plans) a child task with its dependencies                    |
| ``question`` | anyone                    | records the question, stops every writer, the run awaits input            |
| ``handoff``  | a child                   | checks the checkout, stops the worker, verifies and freezes in a job      |
| ``finalize`` | the coordinator           | every child delivered: stops the writers and integrates in a job          |
| ``policy``   | the coordinator           | records a policy transition (:mod:`git_agentops.transition`)              |

Each action reads a :class:`~.ports.Snapshot` and returns the effects to carry out (:mod:`.effects`): the loop
executes them, in order, and a test can assert them without a supervisor. An action refuses by raising
:class:`~git_agentops.errors.AgentOpsError`; the refusal is recorded as the request's answer. ``handoff`` and
``finalize`` answer from their job (after an acceptance the agent reads while it ends its turn).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pygit2

from .. import eventkinds as kinds
from ..canonical import digest
from ..errors import AgentOpsError
from ..gitstore.journal import Change, Event
from ..gitstore.repo import Store
from ..integrate.delivery import Handoff, check_handoff, deliver
from ..integrate.pipeline import check_finalize, integrate
from ..integrate.secrets import clean_text
from ..model.delivery import Digest, PendingFinalize
from ..model.integration import Integration, IntegrationStatus
from ..model.request import ResponseDoc
from ..model.run import Role, RunStatus, Worker, WorkerStatus, has_cycle, worker_contract
from ..model.task import Criterion, Task, TaskStatus, check_runners, new_task
from ..protocol import mailbox
from ..runs import state as runstate
from ..runs import tasks as taskbook
from ..runs.jobs import Request
from ..transition import propose as proposal
from .effects import (
    Answer,
    ChangeState,
    Effect,
    EndTurn,
    Log,
    Respond,
    StopWorkers,
    Submit,
    execute,
    set_worker,
)
from .ports import Loop, Snapshot
from .requests import Action

Effects = tuple[Effect, ...]
Handler = Callable[[Snapshot, Worker, Request], Effects]
"""An action: what to do about a request, from a snapshot (see the module docstring)."""


def _criteria(items: list[Any]) -> list[Criterion]:
    out = []
    for index, item in enumerate(items, start=1):
        if isinstance(item, str):
            out.append(Criterion(f"c{index}", item))
        else:
            out.append(
                Criterion(item.get("id", f"c{index}"), item["description"], item.get("runner"), item.get("reviewOnly"))
            )
    return out


def plan(snap: Snapshot, worker: Worker, request: Request) -> Effects:
    """``plan``: the root task (``RUN_COORDINATOR_REQUIRED``, ``RUN_PLAN_INVALID``)."""
    if worker.role is not Role.COORDINATOR:
        raise AgentOpsError("RUN_COORDINATOR_REQUIRED", "only the coordinator plans the root task")
    doc = request.doc

    def effect(change: Change, view: runstate.RunView) -> dict[str, Any]:
        run = view.run()
        if run.root_task_id is not None:
            raise AgentOpsError("RUN_PLAN_INVALID", f"the root task {run.root_task_id} already exists")
        try:
            task = new_task(
                taskbook.new_task_id(),
                title=doc["title"],
                intent=doc["intent"],
                goal=run.goal,
                criteria=_criteria(doc["criteria"]),
                policy_config_hash=snap.policy.config_hash,
            )
        except AgentOpsError as exc:
            raise AgentOpsError("RUN_PLAN_INVALID", exc.message) from exc
        taskbook.create(change, replace(task, status=TaskStatus.RUNNING, worker_id=worker.worker_id))
        runstate.put_run(change, replace(run, root_task_id=task.id))
        runstate.put_worker(change, replace(view.worker(worker.worker_id), task_id=task.id))
        run = runstate.recompute_contract(change, view)
        return {"taskId": task.id, "contractHash": run.contract_hash}

    return (Answer(worker, request, kinds.RUN_PLAN_CREATED, "root task created", effect),)


def plan_child(snap: Snapshot, worker: Worker, request: Request) -> Effects:
    """``worker``: a child task (``RUN_DEPENDENCY_UNKNOWN``, ``RUN_DEPENDENCY_CYCLE``, ``RUN_PLAN_INVALID``)."""
    if worker.role is not Role.COORDINATOR or snap.run.root_task_id is None:
        raise AgentOpsError("RUN_COORDINATOR_REQUIRED", "only the coordinator plans children, after 'plan'")
    doc = request.doc

    def effect(change: Change, view: runstate.RunView) -> dict[str, Any]:
        run = view.run()
        tasks = view.tasks()
        dependencies = list(doc["dependencies"])
        unknown = [d for d in dependencies if d not in tasks or tasks[d].parent is None]
        if unknown:
            raise AgentOpsError("RUN_DEPENDENCY_UNKNOWN", f"unknown dependencies: {', '.join(unknown)}")
        replanning = doc.get("taskId")
        if replanning is not None and (
            replanning not in tasks or tasks[replanning].status not in (TaskStatus.PLANNED, TaskStatus.BLOCKED)
        ):
            raise AgentOpsError(
                "RUN_PLAN_INVALID", f"{replanning} is not a planned or blocked task that can be re-planned"
            )
        task_id = replanning or taskbook.new_task_id()
        edges = {t.id: list(t.dependencies) for t in tasks.values()}
        edges[task_id] = dependencies
        cycle = has_cycle(edges)
        if cycle:
            raise AgentOpsError("RUN_DEPENDENCY_CYCLE", f"dependency cycle: {' -> '.join(cycle)}")
        try:
            task = new_task(
                task_id,
                title=doc["title"],
                intent=doc["intent"],
                goal=run.goal,
                criteria=_criteria(doc["criteria"]),
                parent=run.root_task_id,
                dependencies=dependencies,
                policy_config_hash=snap.policy.config_hash,
            )
            check_runners(task, (r.id for r in snap.policy.runners))
        except AgentOpsError as exc:
            raise AgentOpsError("RUN_PLAN_INVALID", exc.message) from exc
        if replanning:
            old = tasks[replanning]
            taskbook.put(change, replace(old, superseded_by=old.revision + 1))
            taskbook.put(
                change, replace(task, revision=old.revision + 1, worker_id=old.worker_id, delivery=old.delivery)
            )
            if old.status is TaskStatus.BLOCKED:  # what it blocked may run again once it delivers
                for other in tasks.values():
                    if (
                        other.status is TaskStatus.BLOCKED
                        and other.blocked_reason
                        and replanning in other.blocked_reason
                    ):
                        taskbook.put(change, replace(other, status=TaskStatus.PLANNED, blocked_reason=None))
        else:
            taskbook.create(change, task)
            runstate.put_run(change, replace(run, plan_order=(*run.plan_order, task.id)))
        runstate.recompute_contract(change, view)
        return {"taskId": task.id}

    return (Answer(worker, request, kinds.RUN_WORKER_PLANNED, "child task planned", effect),)


def question(snap: Snapshot, worker: Worker, request: Request) -> Effects:
    """``question``: record it, answer, then stop every writer until a person answers (``RUN_QUESTION_INVALID``)."""
    prompt = request.doc["prompt"]
    if not prompt.strip():
        raise AgentOpsError("RUN_QUESTION_INVALID", "the prompt is blank")
    question_id = f"q-{uuid.uuid4().hex[:12]}"

    def effect(change: Change, view: runstate.RunView) -> dict[str, Any]:
        runstate.put_question(
            change,
            {
                "questionId": question_id,
                "workerId": worker.worker_id,
                "generation": worker.generation,
                "prompt": prompt,
                "askedAt": snap.ctx.clock.now(),
                "answer": None,
                "answeredAt": None,
            },
        )
        runstate.put_run(
            change,
            replace(
                view.run(),
                status=RunStatus.AWAITING_INPUT,
                status_reason=f"question {question_id} from {worker.worker_id}",
            ),
        )
        return {"questionId": question_id}

    return (
        Answer(
            worker,
            request,
            kinds.RUN_AWAITING_INPUT,
            f"question {question_id} recorded; answer with 'git agentops-run answer {snap.run_id} {question_id} TEXT'",
            effect,
            deliver=True,  # before the asker is stopped with everyone else
        ),
        StopWorkers(WorkerStatus.FENCED, f"awaiting the answer to {question_id}"),
        Log(f"{worker.worker_id} asks ({question_id}): {clean_text(prompt, 200, snap.ctx.policy.deny_patterns)}"),
    )


def handoff(snap: Snapshot, worker: Worker, request: Request) -> Effects:
    """``handoff``: check the checkout, stop the worker, then verify and freeze its commit in a job."""
    if worker.role is Role.COORDINATOR:
        raise AgentOpsError("RUN_COORDINATOR_FINALIZE_REQUIRED", "the coordinator finalizes; it does not hand off")
    source_files = tuple(request.doc.get("sourceFiles") or ())
    head = check_handoff(Path(worker.worktree), base=worker.base, source_files=source_files)
    job = Handoff(
        worker=worker,
        request=request,
        head=head,
        contract=worker_contract(snap.run, worker, dict(snap.tasks)),
        source_files=source_files,
    )
    ctx = snap.ctx

    def stopped(accounted: Mapping[str, Any], by_itself: bool) -> Effects:
        how = "ended its turn" if by_itself else "stopped"
        return (
            set_worker(
                worker.worker_id,
                process=None,
                event=kinds.WORKER_STOPPED_FOR_HANDOFF,
                summary=f"{worker.worker_id} generation {worker.generation} {how} after its handoff",
                **accounted,
            ),
            Submit(worker.worker_id, lambda store: deliver(ctx, store, job)),
        )

    return (
        *foreign_merges(snap.store, snap.tasks, worker, head),
        set_worker(
            worker.worker_id,
            status=WorkerStatus.HANDING_OFF,
            event=kinds.WORKER_HANDING_OFF,
            summary=f"{worker.worker_id} hands off {head[:12]}",
        ),
        _accepted(
            worker,
            request,
            "RUN_HANDOFF_ACCEPTED",
            f"the supervisor took commit {head[:12]}: it verifies it itself in a clean checkout and freezes it. End "
            "your turn now; if verification fails you are started again with the failure.",
            {"head": head},
        ),
        EndTurn(worker, stopped),
    )


def _accepted(worker: Worker, request: Request, code: str, message: str, data: Mapping[str, Any]) -> Respond:
    """Tell the agent its handoff or finalize was taken, so it ends its turn (and its host prints its usage) while
    the supervisor works; the job's own answer replaces this one in the mailbox when it is done (and when the
    mailbox cannot be written, the agent is stopped at the end of its grace all the same)."""
    return Respond(worker, mailbox.response(request.request_id, request.raw_digest, code, message, data))


def _note_foreign_merges(loop: Loop, worker: Worker, head: str) -> None:
    """:func:`foreign_merges`, carried out at once (for a caller holding the loop rather than a snapshot)."""
    execute(loop, foreign_merges(loop.state.store, loop.state.tasks(), worker, head))


def foreign_merges(store: Store, tasks: Mapping[str, Task], worker: Worker, head: str) -> Effects:
    """``WORKER_FOREIGN_MERGE`` when the commits a child hands off merge in anything but the frozen deliveries of
    its task's dependencies -- what the ``post-merge`` hook can only warn about (a hook runs in the agent's own git
    process, so it never writes run state; the supervisor notes it here). Nothing when there is none."""
    task = tasks.get(worker.task_id or "")
    allowed = {
        delivery.commit
        for d in (task.dependencies if task is not None else ())
        if d in tasks and (delivery := tasks[d].delivery) is not None
    }
    repo = store.repo
    try:
        walker = repo.walk(pygit2.Oid(hex=head), pygit2.enums.SortMode.TOPOLOGICAL)
        if worker.base:
            walker.hide(pygit2.Oid(hex=worker.base))
        foreign = [str(p) for c in itertools.islice(walker, 1000) for p in c.parent_ids[1:] if str(p) not in allowed]
    except (KeyError, ValueError, pygit2.GitError):  # an object this repository does not have
        return ()
    if not foreign:
        return ()
    return (
        ChangeState(
            lambda change, view: None,
            Event(
                kinds.WORKER_FOREIGN_MERGE,
                f"{worker.worker_id} hands off {head[:12]}, which merges {', '.join(c[:12] for c in foreign[:5])}: "
                "not the frozen delivery of a dependency",
                {"workerId": worker.worker_id, "head": head, "commits": foreign[:20]},
            ),
        ),
    )


def finalize(snap: Snapshot, worker: Worker, request: Request) -> Effects:
    """``finalize``: every child delivered (``RUN_DELIVERIES_PENDING``); stop the coordinator, integrate in a job."""
    check_finalize(worker, snap.run, snap.tasks)
    pending = PendingFinalize(request.request_id, Digest(request.digest), Digest(request.raw_digest), worker.generation)
    ctx = snap.ctx

    def stopped(accounted: Mapping[str, Any], by_itself: bool) -> Effects:
        how = "ended its turn" if by_itself else "stopped"
        account = (
            (set_worker(worker.worker_id, event=kinds.WORKER_STOPPED, summary=f"{how} for integration", **accounted),)
            if accounted
            else ()
        )
        return (*account, Submit(worker.worker_id, lambda store: integrate(ctx, store)))

    return (
        begin_integration(worker, pending, summary=f"{worker.worker_id} asks to finalize"),
        _accepted(
            worker,
            request,
            "RUN_FINALIZE_ACCEPTED",
            "the supervisor integrates every delivery, has it reviewed and publishes it. End your turn now; you are "
            "woken if anything needs you.",
            {},
        ),
        EndTurn(worker, stopped),
    )


def auto_finalize(snap: Snapshot, coordinator: Worker, wake_key: str) -> Effects:
    """``[run] finalize = "auto"``: every child delivered, so integrate without waking the coordinator.

    The integration answers a request of the supervisor's own (``automatic``), so that a failure is recorded and
    restarts the coordinator with it exactly as a failed ``finalize`` would.
    """
    check_finalize(coordinator, snap.run, snap.tasks)
    key = digest({"auto-finalize": wake_key})
    pending = PendingFinalize(
        f"auto-finalize-{key[:12]}", Digest(key), Digest(key), coordinator.generation, automatic=True
    )
    ctx = snap.ctx
    return (
        begin_integration(coordinator, pending, summary="every child is delivered: integrating", woken_for=wake_key),
        Submit(coordinator.worker_id, lambda store: integrate(ctx, store)),
    )


def begin_integration(
    worker: Worker, pending: PendingFinalize, *, summary: str, woken_for: str | None = None
) -> ChangeState:
    """The integration recorded as requested and the coordinator as handing off, in one commit."""

    def begin(change: Change, view: runstate.RunView) -> None:
        earlier = view.run().integration
        prior = (earlier.candidate or earlier.prior_candidate) if earlier is not None else None
        integration = Integration(IntegrationStatus.REQUESTED, request=pending, attempts=0, prior_candidate=prior)
        runstate.put_run(change, replace(view.run(), integration=integration))
        current = view.worker(worker.worker_id)
        woken = (*current.woken_for, woken_for) if woken_for else current.woken_for
        runstate.put_worker(change, replace(current, status=WorkerStatus.HANDING_OFF, woken_for=woken))

    return ChangeState(begin, Event(kinds.INTEGRATION_REQUESTED, summary, {"requestId": pending.request_id}))


def acting(handler: Handler) -> Action:
    """The request action that carries out what ``handler`` returns from the loop's snapshot (:mod:`.effects`):
    the response of its answer, or None when a job answers."""

    def act(loop: Loop, worker: Worker, request: Request) -> ResponseDoc | None:
        return execute(loop, handler(loop.snapshot(), worker, request))

    return act


HANDLERS: Mapping[str, Handler] = {
    "plan": plan,
    "worker": plan_child,
    "question": question,
    "handoff": handoff,
    "finalize": finalize,
    "policy": proposal.request,
}
"""Every action, by request action: what it decides."""

ACTIONS: Mapping[str, Action] = {name: acting(handler) for name, handler in HANDLERS.items()}
"""Every action as :mod:`.requests` calls it: decided from the loop's snapshot, carried out by the loop."""
