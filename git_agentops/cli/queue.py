"""``git agentops-run queue [TARGET] [--json]``: a target's merge queue -- its entries, their state, what each
waits for, and who processes it."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import AgentOpsError
from .common import Context


def configure(add: Any) -> None:
    queue = add("queue", "show a target's merge queue: entries, their state, what each waits for")
    queue.add_argument("target", metavar="TARGET", nargs="?", help="the target branch (default: the policy's)")
    queue.add_argument("--all", action="store_true", help="every settled entry the queue keeps, not the last 10")


def _default_target(ctx: Context) -> str:
    from ..policy.load import cache_dir_for, load_policy

    try:
        return str(load_policy(ctx.worktree(), cache_dir=cache_dir_for(ctx.store().common_dir)).doc["run"]["target"])
    except AgentOpsError as exc:
        raise AgentOpsError("USAGE", f"name the target (the policy could not be read: {exc.message})") from None


def show(args: argparse.Namespace, ctx: Context) -> int:
    from ..mergequeue import book
    from ..mergequeue.record import Entry

    target = args.target or _default_target(ctx)
    view = book.read(ctx.store(), target)
    now = ctx.clock.now()
    waiting = view.doc.waiting()
    head_policy = waiting[0].policy_hash if waiting else None

    def waits_for(entry: Entry, index: int) -> str | None:
        if not entry.waiting:
            return None
        if entry.publishing:
            return "being published"
        if entry.policy_hash != head_policy:
            return f"a supervisor bound to its policy {entry.policy_hash[:12]} (the entries ahead have another)"
        if view.lease is None or view.lease.expired(now):
            return "a waiting supervisor to take the queue's lease"
        return "its candidate's verification" if index == 0 else f"{index} entr{'y' if index == 1 else 'ies'} ahead"

    settled = [e for e in view.doc.entries if not e.waiting]
    shown = settled if args.all else settled[-10:]
    rows = [(e, waits_for(e, i)) for i, e in enumerate(waiting)] + [(e, None) for e in reversed(shown)]
    lease = view.lease
    doc = {
        "target": target,
        "ref": book.queue_ref(target),
        "commit": view.commit,
        "lease": lease.to_json() if lease is not None else None,
        "waiting": len(waiting),
        "entries": [{**e.to_json(), "waitsFor": why} for e, why in rows],
    }
    holder = f"processed by {lease.describe(now)}" if lease is not None else "nobody processes it now"
    lines = [f"merge queue of {target} ({book.queue_ref(target)}): {len(waiting)} waiting; {holder}"]
    for entry, why in rows:
        lines.append("  " + _line(entry, why, now))
    if not view.doc.entries:
        lines.append("  (empty: no run has been integrated through it)")
    ctx.emit(doc, lines)
    return 0


def _line(entry: Any, why: str | None, now: float) -> str:
    what = f"#{entry.position:<4} {entry.run_id}  {entry.state:<10}"
    tasks = f"{len(entry.deliveries)} deliver{'y' if len(entry.deliveries) == 1 else 'ies'}"
    if why is not None:
        return f"{what} {tasks}, enqueued {max(0, now - entry.enqueued_at):.0f} s ago; waits for {why}"
    if entry.state == "published":
        below = f" with #{', #'.join(map(str, entry.below))} below" if entry.below else ""
        return f"{what} {tasks} -> {str(entry.candidate)[:12]}{below} ({entry.verifications} verification(s))"
    return f"{what} {tasks}: error[{entry.code}]: {(entry.reason or '').splitlines()[0] if entry.reason else ''}"
