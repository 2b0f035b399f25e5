"""``git agentops-run approve|refuse RUN TRANSITION``: a person decides a coordinator's policy change.

Both show every capability the proposal adds or changes with its full argv (``run status`` shows the same while
the transition waits). ``approve`` records who approved and makes the run active again; the supervisor then fences
the writers, binds the new policy to this run only (the trust store is not touched) and restarts them. ``refuse``
ends the transition; the run goes on under the policy it had, and the coordinator is told why.
"""

from __future__ import annotations

import argparse
import getpass
from typing import TYPE_CHECKING, Any

from .common import Context

if TYPE_CHECKING:
    from ..canonical import JsonObject


def configure(add: Any) -> tuple[Any, Any]:
    """The ``approve`` and ``refuse`` subcommands (their parsers, for the options of a remote decision)."""
    approve = add("approve", "approve a pending policy transition (the change is shown)")
    approve.add_argument("run_id", metavar="RUN")
    approve.add_argument("transition", metavar="TRANSITION", help="its id (policy-...) or a unique prefix")
    approve.add_argument("--no-supervise", action="store_true", help="only record the approval")
    refuse = add("refuse", "refuse a pending policy transition; the run goes on under its policy")
    refuse.add_argument("run_id", metavar="RUN")
    refuse.add_argument("transition", metavar="TRANSITION", help="its id (policy-...) or a unique prefix")
    refuse.add_argument("--reason", default="", help="told to the coordinator")
    refuse.add_argument("--no-supervise", action="store_true", help="only record the refusal")
    return approve, refuse


def approver(ctx: Context) -> str:
    """Who decides: git's ``user.name <user.email>`` of this repository, else the login name."""
    store = ctx.store()
    name, email = store.config_value("user.name"), store.config_value("user.email")
    if name:
        return f"{name} <{email}>" if email else name
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "unknown user"


def change_lines(transition: Any) -> list[str]:
    """What a person sees: the old and new policy and every added or changed capability with its full argv."""
    from ..transition.record import describe_changes

    lines = [
        f"policy transition {transition.transition_id} ({transition.stage}): "
        f"{transition.old_hash[:12]} -> {transition.new_hash[:12]}, proposed by {transition.requested_by.worker_id} "
        f"in {transition.config_file}",
    ]
    reasons = {a.capability_id: a.reason for a in transition.approvals}
    for change, line in zip(transition.changes, describe_changes(transition.changes), strict=True):
        lines.append(f"  {line}")
        lines.append(f"      reason given: {reasons.get(change.capability_id, '-')}")
    if not transition.changes:
        lines.append("  (no capability added or changed: only settings that need no approval)")
    return lines


def refuse_agent(ctx: Context) -> None:
    """``RUN_APPROVAL_AGENT`` in an agent's surroundings (its variables, a run's worktree): an approval is a
    person's decision. (A sandboxed agent cannot write the run's journals anyway: it cannot read their key.)"""
    from ..errors import AgentOpsError
    from ..policy.trust import agent_signs
    from ..verify.confined_setup import verify_root

    signs = agent_signs(ctx.env, cwd=ctx.cwd, git_dir=ctx.store().git_dir, fenced=[verify_root(ctx.env)])
    if signs:
        raise AgentOpsError(
            "RUN_APPROVAL_AGENT",
            f"refusing to approve a policy change from an agent's environment ({'; '.join(signs)}); nothing was "
            "changed. Approve it yourself, in your own shell, from the main checkout",
            details={"signs": signs},
        )


def handle(args: argparse.Namespace, ctx: Context) -> int:
    from ..runs import controls
    from ..runs.state import read

    store = ctx.store()
    read(store, args.run_id)  # RUN_NOT_FOUND for a run that is not there, before its transitions are looked for
    who = approver(ctx)
    if args.command == "approve":
        transition, run = controls.approve(store, args.run_id, args.transition, who, ctx.clock)
        lines = [*change_lines(transition), f"approved by {who}; run {args.run_id} is {run.status}"]
        doc: JsonObject = {"runId": args.run_id, "status": str(run.status), "transition": transition.to_json()}
    else:
        transition = controls.refuse(store, args.run_id, args.transition, who, args.reason, ctx.clock)
        lines = [*change_lines(transition), f"refused by {who}; the run goes on under its policy"]
        doc = {"runId": args.run_id, "transition": transition.to_json()}
    if not args.no_supervise:
        from .spawn import supervise_in_background

        supervise_in_background(ctx, args.run_id, doc, lines)
    ctx.emit(doc, lines)
    return 0
