"""``git agentops-run status``, ``list`` and ``log``: what a run is and did, read from its refs (never changed)."""

from __future__ import annotations

import argparse
from typing import TypedDict

from ..canonical import JsonObject
from ..errors import AgentOpsError
from ..model.statusdoc import BudgetDoc, StatusDoc, TaskRowDoc
from ..model.task import TaskStatus
from ..model.usage import Usage
from ..model.workspace import WorkspaceCost
from .common import Context


class RunLine(TypedDict):
    """A run as ``run list --json`` shows it."""

    runId: str
    status: str
    goal: str
    createdAt: float


class EventLine(TypedDict):
    """A journal event as ``run log --json`` shows it, with the cause said under a failure, refusal or block."""

    commit: str
    code: str
    summary: str
    data: JsonObject
    time: float
    foreign: bool
    cause: list[str]


def latest(ctx: Context) -> str:
    from ..runs.state import list_runs

    runs = list_runs(ctx.store())
    if not runs:
        raise AgentOpsError("RUN_NOT_FOUND", "this repository has no runs ('git agentops-run start' creates one)")
    return max(runs, key=lambda r: _created(ctx, r))


def _created(ctx: Context, run_id: str) -> float:
    from ..runs import state as runstate

    try:
        return runstate.read(ctx.store(), run_id).run().created_at
    except AgentOpsError:
        return 0.0


def _spend(budget: BudgetDoc) -> str:
    """The tokens and dollars the hosts reported, with their limits, for the status line."""
    parts = []
    if budget["usedTokens"] or budget["tokenLimit"]:
        limit = f" of {budget['tokenLimit']}" if budget["tokenLimit"] else ""
        floor = " (partial: a stopped generation's last figures were never printed)" if budget["usagePartial"] else ""
        parts.append(f"{budget['usedTokens']} tokens{limit}{floor}")
    if budget["usedCostUsd"] is not None or budget["costLimitUsd"]:
        used = budget["usedCostUsd"] or 0.0
        limit = f" of ${budget['costLimitUsd']:.2f}" if budget["costLimitUsd"] else ""
        parts.append(f"${used:.2f}{limit}")
    return (", " + ", ".join(parts)) if parts else ""


def show_status(args: argparse.Namespace, ctx: Context) -> int:
    from ..runs.controls import summary
    from ..runs.create import bound_policy
    from ..sandbox.plan import choose_mode

    run_id = args.run_id or latest(ctx)
    doc = summary(ctx.store(), run_id, ctx.clock)
    policy = bound_policy(ctx.store(), run_id)
    try:
        mode, why = choose_mode(policy.sandbox_mode, policy.sandbox_required, policy.sandbox_level)
    except AgentOpsError as exc:
        mode, why = "unavailable", exc.message
    doc["sandbox"] = {"mode": mode, "level": mode, "reason": why}
    if mode in ("none", "unavailable"):
        ctx.warn("RUN_UNSANDBOXED", f"agents of {run_id} run without the sandbox: {why}")
    elif why:
        ctx.warn("RUN_SANDBOX_WEAKER", f"agents of {run_id} run at sandbox level {mode}: {why}")
    because = why_lines(doc)
    lines = [
        f"run {doc['runId']}: {doc['status']}"
        + (f" ({doc['statusReason']})" if doc["statusReason"] and not _said(doc) else ""),
        *because,
        f"goal:   {doc['goal']}",
        f"target: {doc['target']} (base {doc['base'][:12]})",
        f"budget: {doc['budget']['usedSeconds']:.0f}s of {doc['budget']['limitSeconds']}s active time"
        + _spend(doc["budget"]),
        "",
        f"{'WORKER':<18}{'ROLE':<13}{'STATUS':<13}{'GEN':>4}  {'TOKENS':>9} {'COST':>8}  {'SANDBOX':<10}TASK",
    ]
    for w in doc["workers"]:
        usage = [Usage.from_json(u) for u in w["usage"]]
        tokens = sum(u.tokens for u in usage)
        costs = [u.cost_usd for u in usage if u.cost_usd is not None]
        cost = f"${sum(costs):.2f}" if costs else "-"
        shown = f"{tokens}+" if any(u.partial for u in usage) else str(tokens or "-")  # + : a floor
        lines.append(
            f"{w['workerId']:<18}{w['role']:<13}{w['status']:<13}{w['generation']:>4}  "
            f"{shown:>9} {cost:>8}  {w.get('sandbox') or '-':<10}{w['taskId'] or '-'}"
        )
        if (workspace := w.get("workspace")) is not None:  # what making its workspace cost, its ports and services
            lines.append(f"{'':<18}workspace: {WorkspaceCost.from_json(workspace).describe()}")
    lines += ["", f"{'TASK':<42}{'STATUS':<11}{'DELIVERY':<14}TITLE"]
    for task in doc["tasks"]:
        lines.append(f"{task['taskId']:<42}{task['status']:<11}{(task['delivery'] or '-')[:12]:<14}{task['title']}")
        if task["blockedReason"]:
            lines.append(f"{'':<42}{_blocked_note(task, doc)}")
    from ..transition.record import Transition
    from .transition import change_lines

    for record in doc["policy"]["transitions"]:
        transition = Transition.from_json(record)
        if transition.ended:
            continue
        lines += ["", *change_lines(transition)]
        if not transition.approved:
            lines.append(f"  approve: git agentops-run approve {doc['runId']} {transition.transition_id}")
            lines.append(f"  refuse:  git agentops-run refuse {doc['runId']} {transition.transition_id} --reason TEXT")
    for question in doc["questions"]:
        if question["answer"] is None:
            lines.append(f"\nquestion {question['questionId']} from {question['workerId']}: {question['prompt']}")
            lines.append(f"  answer: git agentops-run answer {doc['runId']} {question['questionId']} 'TEXT'")
    ctx.emit(doc, lines)
    return 0


def why_lines(doc: StatusDoc) -> list[str]:
    """``why:`` and the causes of a blocked run or task (:mod:`git_agentops.runs.why`), each said once and whole,
    without control characters; nothing when nothing is blocked."""
    from ..runs.why import Cause, cause_lines
    from ..watch.view import clean

    found = [Cause.from_json(c) for c in doc.get("blocked") or ()]
    if not found:
        return []
    return ["why:", *(f"  {clean(line, 2000)}" for line in cause_lines(found))]


def _said(doc: StatusDoc) -> bool:
    """Whether the run's status reason is one of the causes ``why:`` shows (then it is not said twice)."""
    from ..runs.why import headline

    said = headline(doc["statusReason"] or "")  # called only when there is a reason
    return any(c["headline"] == said for c in doc.get("blocked") or ())


def _blocked_note(task: TaskRowDoc, doc: StatusDoc) -> str:
    """Under a blocked task in the table: where its reason is (said once, under ``why:``), or what it waits on."""
    from ..runs.why import own_reason

    reason = task["blockedReason"] or ""
    if own_reason(reason):
        return f"blocked: {reason.partition(':')[0]} (why: above)"
    titles = {t["taskId"]: t["title"] for t in doc["tasks"]}
    waits = [
        titles.get(d, d)
        for d in task["dependencies"]
        if any(t["taskId"] == d and t["status"] == TaskStatus.BLOCKED for t in doc["tasks"])
    ]
    return f"blocked: waits on {', '.join(repr(w) for w in waits) or 'a blocked dependency'}"


def list_runs(args: argparse.Namespace, ctx: Context) -> int:
    from ..runs import state as runstate

    if args.all or args.remote:
        return _board(args, ctx)

    docs: list[RunLine] = []
    for run_id in runstate.list_runs(ctx.store()):
        try:
            r = runstate.read(ctx.store(), run_id).run()
            docs.append({"runId": run_id, "status": str(r.status), "goal": r.goal, "createdAt": r.created_at})
        except AgentOpsError as exc:
            docs.append({"runId": run_id, "status": "unreadable", "goal": exc.message, "createdAt": 0})
    docs.sort(key=lambda d: d["createdAt"])
    ctx.emit({"runs": docs}, [f"{d['runId']:<26}{d['status']:<16}{d['goal'][:80]}" for d in docs] or ["no runs"])
    return 0


def _board(args: argparse.Namespace, ctx: Context) -> int:
    """``list --all [--remote NAME]``: every run, here and on the remote -- what each waits for, its spend, its age."""
    from ..runs import board
    from ..watch.view import board_lines

    rows = board.every(ctx.store(), ctx.clock, args.remote)
    docs = [r.to_json() for r in rows]
    ctx.emit({"runs": docs}, board_lines(docs, ctx.clock.now()) if rows else ["no runs"])
    return 0


def log(args: argparse.Namespace, ctx: Context) -> int:
    from ..clock import iso8601
    from ..runs import state as runstate
    from ..runs.why import event_cause
    from ..watch.view import clean

    run_id = args.run_id or latest(ctx)
    store = ctx.store()
    journal = runstate.journal(store, run_id)
    if not journal.exists():
        raise AgentOpsError("RUN_NOT_FOUND", f"no run {run_id!r}")
    entries = list(journal.log(limit=args.limit or None))[::-1]
    docs: list[EventLine] = [
        {
            "commit": e.commit,
            "code": e.code,
            "summary": e.summary,
            "data": dict(e.data),
            "time": e.time,
            "foreign": e.foreign,  # not written by the supervisor: what it claims was never acted on
            "cause": event_cause(store, journal, e),  # why, under a failure, a refusal or a block (runs.why)
        }
        for e in entries
    ]
    lines: list[str] = []
    for d in docs:
        if d["foreign"]:
            lines.append(f"{iso8601(d['time'])}  [foreign] {d['commit'][:12]} {d['code']}: {d['summary']}")
            continue
        lines.append(f"{iso8601(d['time'])}  {d['code']:<26} {d['summary']}")
        lines += [f"{'':<26}{clean(line, 400)}" for line in d["cause"]]
    ctx.emit({"runId": run_id, "events": docs}, lines)
    return 0
