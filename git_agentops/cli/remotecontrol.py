"""A person's decision about a run another machine supervises: sent as a signed control through the remote.

``answer``, ``approve`` and ``refuse`` (and ``review``) act here when the run is this repository's; with ``--remote
NAME``, or for a run this repository does not have, they send a signed control through the remote instead
(:mod:`git_agentops.controls.send`): what is decided is checked against the remote's copy of the run and shown
first; ``--wait SECONDS`` waits for the supervising machine to say what it did with it (applied, or refused with
its code), as its pushed state records.
"""

from __future__ import annotations

import argparse
from typing import Any

from .common import Context


def add_options(parser: argparse.ArgumentParser) -> None:
    """``--remote`` and ``--wait``, on each command that can send a control."""
    parser.add_argument(
        "--remote",
        metavar="NAME",
        help="send a signed control through this remote to the machine that supervises the run (default for a run "
        "this repository does not have: the policy's [run] remote, else origin)",
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="with a control sent: wait up to SECONDS for the supervising machine to apply or refuse it",
    )


def remote_for(args: argparse.Namespace, ctx: Context) -> str | None:
    """The remote a control goes through, or None to act here: ``--remote``, else -- for a run this repository
    does not have -- the default remote when one is configured."""
    from ..gitstore.refs import read_ref
    from ..runs.state import check_run_id, state_ref

    if args.remote:
        return str(args.remote)
    store = ctx.store()
    if read_ref(store, state_ref(check_run_id(args.run_id))) is not None:
        return None
    from .sync import default_remote

    remote = default_remote(ctx)
    return remote if store.config_value(f"remote.{remote}.url") is not None else None


def send(
    args: argparse.Namespace,
    ctx: Context,
    remote: str,
    *,
    decision: str | None = None,
    accept: list[str] | None = None,
) -> int:
    """Check, sign, push (and with ``--wait``, wait for) one control of ``args.command``'s kind (``review``: the
    person's ``decision`` on the waiting candidate, the findings they ``accept``)."""
    from ..controls import send as sending
    from ..controls.record import Control, new_id
    from ..errors import CODES, AgentOpsError
    from ..receipts.build import signing_keys
    from .transition import approver, change_lines

    if args.wait < 0:
        raise AgentOpsError("USAGE", "--wait takes a number of seconds, 0 or more")
    store = ctx.store()
    kind = str(args.command)
    theirs = sending.fetch_run(store, remote, args.run_id)
    now = ctx.clock.now()
    who = approver(ctx)
    lines: list[str] = []
    fields: dict[str, Any] = {}
    if kind == "review":
        from ..controls import people

        integration = theirs.view.run().integration
        if not people.waiting(theirs.view) or integration is None or integration.candidate is None:
            raise AgentOpsError("CONTROL_STALE", f"{args.run_id} on {remote} waits for no review by people now")
        fields = {"candidate": integration.candidate, "decision": decision, "reason": args.reason}
        if accept is not None:
            fields["accept"] = ",".join(accept)
        lines.append(f"candidate {integration.candidate[:12]} of {args.run_id}: {decision}")
    elif kind == "answer":
        if not args.text.strip():
            raise AgentOpsError("USAGE", "the answer is empty")
        question = theirs.open_question(args.question_id)
        fields = {"question_id": args.question_id, "text": args.text}
        lines.append(f"question {args.question_id}: {question.get('prompt', '')}")
    else:
        transition = sending.pending_transition(store, remote, args.run_id, args.transition)
        fields = {"transition": transition.transition_id}
        if kind == "refuse":
            fields["reason"] = args.reason
        lines.extend(change_lines(transition))
    control = Control(new_id(now), args.run_id, kind, now, who, **fields)
    commit = sending.send(store, remote, control, signing_keys(store))
    doc: dict[str, Any] = {
        "runId": args.run_id,
        "remote": remote,
        "controlId": control.control_id,
        "commit": commit,
        "kind": kind,
        "outcome": None,
    }
    lines.append(
        f"signed control {control.control_id} ({control.describe()}) sent to {remote}; the supervising machine "
        "applies it when it fetches"
    )
    if args.wait > 0:
        from ..controls.send import wait_for_outcome

        outcome = wait_for_outcome(store, remote, args.run_id, control.control_id, args.wait)
        doc["outcome"] = outcome
        if outcome is None:
            ctx.emit(doc, lines)
            raise AgentOpsError(
                "CONTROL_PENDING",
                f"no outcome of control {control.control_id} on {remote} within {args.wait:g}s: the supervising "
                "machine has not fetched it yet (it is not lost: it is applied when it does)",
            )
        if outcome["outcome"] != "applied":
            ctx.emit(doc, lines)
            code = str(outcome["code"]) if str(outcome["code"]) in CODES else "CONTROL_INVALID"
            raise AgentOpsError(code, f"the supervising machine refused it: {outcome['message']}")
        lines.append(f"applied by the supervising machine (signer {outcome['signer']})")
    ctx.emit(doc, lines)
    return 0
