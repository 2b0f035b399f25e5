"""The user's controls over a run -- pause, stop, resume, answer -- what ``run status`` shows, and stopping the
agent processes nobody supervises any more.

Controls are compare-and-swap state changes a running supervisor notices on its next tick; ``resume`` also
records a *user resume*, which resets the restart-storm window and allows an interrupted setup to be replayed.

Agents outlive a supervisor that dies (each leads its own session), so whoever takes the run's supervisor lock
next -- a new supervisor, one refusing to serve the run, or ``run stop`` -- stops what the dead one left running:
each worker's recorded process group (:func:`stop_group`, safe against pid reuse), then any other process whose
environment names the run (:func:`run_processes`: a generation launched but not recorded yet, a reviewer).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import eventkinds as kinds
from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.journal import Change, Event
from ..gitstore.repo import Store
from ..model.run import ProcessRef, Role, Run, RunStatus, WorkerStatus, used_seconds
from ..model.statusdoc import StatusDoc
from ..model.task import TaskStatus
from ..model.usage import total_usage, usage_partial
from ..process.groups import (
    ProcessIdentity,
    group_members,
    is_alive,
    process_identity,
    terminate_group,
    terminate_process,
)
from ..transition import journal as transitions
from ..transition.record import ApprovedBy, Stage, Transition, TransitionRefused
from . import state as runstate
from . import tamper
from . import tasks as taskbook
from .why import causes


@dataclass(frozen=True, slots=True)
class Signed:
    """A control that came signed from another machine: its id, who signed it, and the record of its outcome that
    is written in the same journal commit as its effect (so it is applied once: :mod:`git_agentops.controls.apply`)."""

    control_id: str
    signer: str
    record: Mapping[str, Any]

    def data(self) -> dict[str, Any]:
        """The event data it adds."""
        return {"controlId": self.control_id, "signer": self.signer}

    def put(self, change: Change, view: runstate.RunView) -> None:
        """Record the outcome in ``change``; ``CONTROL_STALE`` if the run has one for this control already."""
        if view.control(self.control_id) is not None:
            raise AgentOpsError("CONTROL_STALE", f"control {self.control_id} was handled already")
        runstate.put_control(change, self.record)


def _control(
    store: Store,
    run_id: str,
    code: kinds.EventCode,
    summary: str,
    fn: Callable[[Change, runstate.RunView], Run],
    signed: Signed | None = None,
) -> Run:
    journal = runstate.journal(store, run_id)
    if not journal.exists():
        raise AgentOpsError("RUN_NOT_FOUND", f"no run {run_id!r}")
    # a person's control applies to the state the supervisor wrote: a foreign tip is contained first, and a resume
    # that met one is refused once, so that accepting the restored state is a decision made knowing it
    contained = tamper.contain(store, run_id)
    restored = all(c.restored for c in contained)
    if contained and (code == kinds.RUN_RESUMED or not restored):
        raise AgentOpsError(
            "RUN_STATE_TAMPERED",
            " ".join(c.describe() + "." for c in contained)
            + (" Resume again to accept the restored state." if restored else ""),
            details={"contained": [c.data() for c in contained]},
        )
    if signed is not None:
        inner = fn

        def fn(change: Change, view: runstate.RunView) -> Run:
            signed.put(change, view)
            return inner(change, view)

    data = {"runId": run_id, **(signed.data() if signed is not None else {})}
    return runstate.mutate(journal, fn, Event(code, summary, data))


def pause(store: Store, run_id: str) -> Run:
    def fn(change: Change, view: runstate.RunView) -> Run:
        run = view.run()
        if run.status not in (RunStatus.ACTIVE, RunStatus.AWAITING_INPUT):
            raise AgentOpsError("RUN_NOT_ACTIVE", f"{run_id} is {run.status}; only an active run can be paused")
        run = replace(run, status=RunStatus.PAUSED, status_reason="paused by the user")
        runstate.put_run(change, run)
        return run

    return _control(store, run_id, kinds.RUN_PAUSED, "paused by the user", fn)


def stop(store: Store, run_id: str) -> Run:
    def fn(change: Change, view: runstate.RunView) -> Run:
        run = view.run()
        if run.status is RunStatus.COMPLETE:
            raise AgentOpsError("RUN_NOT_ACTIVE", f"{run_id} is complete")
        run = replace(run, status=RunStatus.STOPPING, status_reason="stopped by the user", disable_restart=True)
        runstate.put_run(change, run)
        return run

    return _control(store, run_id, kinds.RUN_STOPPED, "stopped by the user", fn)


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
                started = task.parent is None or task.worker_id is not None
                taskbook.put(
                    change,
                    replace(task, status=TaskStatus.RUNNING if started else TaskStatus.PLANNED, blocked_reason=None),
                )
        return run

    return _control(store, run_id, kinds.RUN_RESUMED, "resumed by the user", fn)


def answer(
    store: Store, run_id: str, question_id: str, text: str, clock: Clock, *, signed: Signed | None = None
) -> Run:
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

    who = f" by {signed.signer} (signed control {signed.control_id})" if signed is not None else ""
    return _control(store, run_id, kinds.RUN_ANSWERED, f"question {question_id} answered{who}", fn, signed)


def approve(
    store: Store, run_id: str, given: str, approver: str, clock: Clock, *, signed: Signed | None = None
) -> tuple[Transition, Run]:
    """A person approves the pending policy transition ``given`` (an id or a unique prefix): the supervisor applies
    it next (``RUN_TRANSITION_UNKNOWN``; ``RUN_POLICY_TRANSITION_STALE`` once it ended)."""
    transition_id = transitions.resolve(store, run_id, given)
    transition = transitions.read(store, run_id, transition_id)
    if transition.ended:
        raise AgentOpsError("RUN_POLICY_TRANSITION_STALE", f"{transition_id} is {transition.stage}")
    if not transition.approved:
        transition = transitions.update(
            store,
            run_id,
            transition_id,
            None,
            clock.now(),
            f"approved by {approver}",
            expect=Stage.PREPARED,
            approved_by=ApprovedBy("user", approver[:256], clock.now()),
        )

    def fn(change: Change, view: runstate.RunView) -> Run:
        run = view.run()
        open_questions = [q for q in view.questions() if q["answer"] is None]
        if run.status_reason == transitions.awaiting_reason(transition_id) and not open_questions:
            run = replace(run, status=RunStatus.ACTIVE, status_reason=None)
            runstate.put_run(change, run)
        return run

    summary = f"{transition_id} approved by {approver}"
    return transition, _control(store, run_id, kinds.RUN_POLICY_APPROVED, summary, fn, signed)


def refuse(store: Store, run_id: str, given: str, approver: str, reason: str, clock: Clock) -> Transition:
    """A person refuses the policy transition ``given`` before it is applied; the run goes on under its policy."""
    transition_id = transitions.resolve(store, run_id, given)
    tamper.contain(store, run_id)
    message = f"refused by {approver}" + (f": {reason}" if reason.strip() else "")
    now = clock.now()
    transition = transitions.update(
        store,
        run_id,
        transition_id,
        Stage.REFUSED,
        now,
        message,
        expect=Stage.PREPARED,
        refused=TransitionRefused("RUN_POLICY_REFUSED", message[:8000], approver[:256], now),
    )
    transitions.tell_refused(runstate.journal(store, run_id), transition, "RUN_POLICY_REFUSED", message)
    return transition


def summary(store: Store, run_id: str, clock: Clock) -> StatusDoc:
    """Everything ``git agentops-run status`` shows, as one JSON-able document."""
    view = runstate.read(store, run_id)
    run = view.run()
    tasks = view.tasks()
    order = {t: i for i, t in enumerate(run.plan_order)}
    tokens, cost = total_usage(run.accounts(view.workers()))
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
            "usagePartial": usage_partial(run.accounts(view.workers())),
            "reviewUsage": [entry.to_json() for entry in run.review_usage],
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
                "sandbox": w.sandbox,
                "workspace": w.workspace.to_json() if w.workspace is not None else None,
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
                "delivery": t.delivery.commit if t.delivery is not None else None,
                "blockedReason": t.blocked_reason,
            }
            for t in sorted(tasks.values(), key=lambda t: (t.parent is not None, order.get(t.id, 0)))
        ],
        "questions": [q for q in view.questions()],
        "blocked": [cause.to_json() for cause in causes(store, view)],  # why, said once (runs.why)
        "policy": {
            "configHash": run.policy_config_hash,
            "transitions": [t.to_json() for t in transitions.all_of(store, run_id)],
        },
    }


# -- agent processes nobody supervises ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stopped:
    """An agent's process group stopped because no supervisor serves it any more."""

    worker_id: str
    generation: int | None
    pid: int  # the group's id too: every agent leads its own session and process group
    survivors: tuple[int, ...] = ()  # alive after SIGKILL (stuck in the kernel); normally none

    def describe(self) -> str:
        """``worker generation N (pid P)``, and any survivor."""
        generation = f" generation {self.generation}" if self.generation is not None else ""
        lost = f"; pids {', '.join(map(str, self.survivors))} survived SIGKILL" if self.survivors else ""
        return f"{self.worker_id}{generation} (pid {self.pid}){lost}"

    def to_json(self) -> dict[str, Any]:
        """As event data and ``--json`` output."""
        return {
            "workerId": self.worker_id,
            "generation": self.generation,
            "pid": self.pid,
            "pgid": self.pid,
            "survivors": list(self.survivors),
        }


def stopped_note(stopped: Sequence[Stopped]) -> str:
    """What a refusal or ``run stop`` says about the agent processes it stopped."""
    if not stopped:
        return "no agent process was left running"
    shown = "; ".join(s.describe() for s in stopped)
    return f"stopped {len(stopped)} agent process group(s) no supervisor was serving any more: {shown}"


def stop_group(process: ProcessRef, *, grace: float) -> tuple[int, ...] | None:
    """Stop the process group a worker generation runs as: SIGTERM, ``grace``, SIGKILL, then look again.

    None when nothing of it runs; otherwise the pids still alive afterwards (normally none). The group's id is the
    agent's pid. Its leader is known by pid + start time; once it has exited, the members that started after it are
    still its group (a pid is not given out again while a group of that id exists). A leader slot held by a process
    with another start time means the pid was reused: that group is someone else's and is left alone.
    """
    leader = process_identity(process.pid)
    if leader is not None and leader.start_time != process.start_time:
        return None
    if not any(_started_since(pid, process.start_time) for pid in group_members(process.pid)):
        return None
    return terminate_group(process.pid, grace=grace)


def _started_since(pid: int, start_time: int) -> bool:
    identity = process_identity(pid)
    return identity is not None and identity.start_time >= start_time


def run_processes(run_id: str) -> list[tuple[ProcessIdentity, str, int | None]]:
    """Live processes whose environment names this run, as (identity, worker id, generation).

    Every agent carries ``AGENTOPS_RUN_ID`` (:func:`~git_agentops.hosts.launch.agent_environment`) and so does what
    it starts, unless it scrubs its environment. This process and its ancestors never count. Linux: reads ``/proc``.
    """
    own = _ancestors()
    found = []
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit() or int(entry.name) in own:
                continue
            try:
                raw = Path("/proc", entry.name, "environ").read_bytes()
            except OSError:  # gone, or another user's
                continue
            env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
            if env.get(b"AGENTOPS_RUN_ID") != run_id.encode():
                continue
            identity = process_identity(int(entry.name))
            if identity is None:
                continue
            generation = env.get(b"AGENTOPS_GENERATION", b"")
            worker = env.get(b"AGENTOPS_WORKER_ID", b"?").decode("utf-8", "replace")
            found.append((identity, worker, int(generation) if generation.isdigit() else None))
    return found


def stop_stray(identity: ProcessIdentity, *, grace: float) -> tuple[int, ...] | None:
    """Stop one process :func:`run_processes` found: its whole group when it leads one, otherwise it and its
    descendants (:func:`~git_agentops.process.groups.terminate_process`)."""
    try:
        leads = os.getpgid(identity.pid) == identity.pid
    except ProcessLookupError:
        return None
    if leads:
        return stop_group(ProcessRef(identity.pid, identity.start_time), grace=grace)
    if not is_alive(identity):
        return None
    return terminate_process(identity, grace=grace)


def _ancestors() -> set[int]:
    pids = {os.getpid()}
    pid = os.getpid()
    while pid > 1:
        try:
            status = Path("/proc", str(pid), "status").read_text("ascii", "replace")
        except OSError:
            break
        line = next((row for row in status.splitlines() if row.startswith("PPid:")), "PPid: 0")
        pid = int(line.split()[1])
        pids.add(pid)
    return pids
