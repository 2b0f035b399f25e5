"""The ``policy`` request: a coordinator proposes a complete new policy for the rest of the run.

The proposed policy is read from the coordinator's worktree without following anything it placed (a symlink, a path
out, a file over 128 KiB are refused with their codes), validated as any policy, and judged against the bound one
(:mod:`git_agentops.model.judge`): nothing mandatory removed or weakened (``RUN_POLICY_INVALID`` with the JSON
path), no budget raised (``RUN_POLICY_BUDGET_RAISED``: that is ``git agentops-run resume --add-budget``, a person's
command), every added or changed capability approved with a reason (``RUN_POLICY_UNAPPROVED``), the expected hash
the policy in force (``RUN_POLICY_STALE``), no other transition pending (``RUN_POLICY_TRANSITION_PENDING``),
``[run] policy_changes`` not ``never`` (``RUN_POLICY_CHANGES_DISABLED``). Then the transition is recorded
``prepared`` and the request answered ``RUN_POLICY_PENDING``. With ``policy_changes = "user"`` (the default) the
run awaits a person -- ``git agentops-run approve RUN TRANSITION`` or ``refuse`` -- and every writer stops as for a
question; with ``"coordinator"`` the coordinator's approvals stand, recorded as authorizations that expire with the
run -- except for a person's decision (a setup step, what a required reviewer's host runs), which the coordinator
cannot approve for itself: refused ``RUN_POLICY_PERSON_REQUIRED`` whatever approvals it carries.
:mod:`.transition` applies it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ..canonical import sha256_hex
from ..errors import AgentOpsError
from ..gitstore.journal import Change
from ..gitstore.private import read_private
from ..integrate.secrets import clean_text
from ..model.judge import Weakening, budget_raises, person_decisions, weakenings
from ..model.policy import Policy
from ..model.run import Role, RunStatus, Worker, WorkerStatus
from ..model.transition import (
    MAX_PROPOSAL_BYTES,
    Stage,
    Transition,
    approval_problems,
    capability_changes,
    describe_changes,
    policy_changes,
    transition_id,
)
from ..policy.load import policy_from_bytes
from ..runs import state as runstate
from ..runs import transitions
from ..runs.jobs import Answered, Request
from ..runs.transitions import awaiting_reason
from .ports import Loop
from .requests import answer


def request(loop: Loop, worker: Worker, req: Request) -> dict[str, Any]:
    """The ``policy`` action (see the module docstring)."""
    if worker.role is not Role.COORDINATOR:
        raise AgentOpsError("RUN_COORDINATOR_REQUIRED", "only the coordinator may change the execution policy")
    old = loop.policy
    mode = policy_changes(old.doc)
    if mode == "never":
        raise AgentOpsError("RUN_POLICY_CHANGES_DISABLED", 'this run\'s policy says [run] policy_changes = "never"')
    store = loop.state.store
    pending = transitions.pending(store, loop.run_id)
    if pending is not None:
        raise AgentOpsError(
            "RUN_POLICY_TRANSITION_PENDING",
            f"the policy transition {pending.transition_id} is {pending.stage}; propose again once it has ended",
        )
    run = loop.state.run()
    if run.integration is not None and run.integration.pending:
        raise AgentOpsError("RUN_POLICY_STALE", "the run is integrating; the policy cannot change now")
    doc = req.doc
    if doc["expectedPolicyHash"] != old.config_hash:
        raise AgentOpsError(
            "RUN_POLICY_STALE",
            f"the policy in force is {old.config_hash}, not {doc['expectedPolicyHash']} (instructions.json: policy)",
            details={"policyConfigHash": old.config_hash},
        )
    data = read_private(Path(worker.worktree), doc["configFile"], max_bytes=MAX_PROPOSAL_BYTES)
    if data is None:
        raise AgentOpsError("RUN_POLICY_INVALID", f"{doc['configFile']} does not exist in the coordinator's worktree")
    new = validated(data, doc["configFile"])
    if new.config_hash == old.config_hash:
        raise AgentOpsError("RUN_POLICY_INVALID", "the proposal is the policy in force: nothing would change")
    tasks = loop.state.tasks().values()
    used_runners = {c.runner for t in tasks if t.current for c in t.criteria if c.runner}
    used_hosts = {w.host for w in loop.state.workers().values()} & set(old.doc["hosts"])  # not built-ins
    weakened = weakenings(old.doc, new.doc, used_runners=used_runners, used_hosts=used_hosts)
    _refuse("RUN_POLICY_INVALID", "the proposal removes or weakens what must stay", weakened)
    _refuse(
        "RUN_POLICY_BUDGET_RAISED",
        f"a policy change cannot raise the run's budget; a person adds budget with 'git agentops-run resume "
        f"{loop.run_id} --add-budget AMOUNT'",
        budget_raises(old.doc, new.doc),
    )
    decisions = person_decisions(old.doc, new.doc)
    if mode == "coordinator":
        _refuse(
            "RUN_POLICY_PERSON_REQUIRED",
            'only a person may approve this, and [run] policy_changes = "coordinator" has no person approve',
            decisions,
        )
    changes = capability_changes(old.doc, new.doc)
    # what the agent wrote is recorded cleaned (secret-shaped text redacted, control characters escaped)
    patterns = loop.policy.deny_patterns
    approvals = [{**a, "reason": clean_text(a["reason"], 4096, patterns, multiline=True)} for a in doc["approvals"]]
    refused = approval_problems(changes, approvals)
    if refused:
        code = "RUN_POLICY_INVALID" if any(p.code == "RUN_POLICY_INVALID" for p in refused) else "RUN_POLICY_UNAPPROVED"
        raise AgentOpsError(
            code,
            "; ".join(f"{p.path}: {p.message}" for p in refused),
            details={"problems": [{"code": p.code, "path": p.path, "message": p.message} for p in refused]},
        )
    now = loop.ctx.clock.now()
    transition = Transition(
        transition_id=transition_id(new.config_hash, approvals, old.config_hash, req.request_id),
        run_id=loop.run_id,
        stage=Stage.PREPARED,
        old_hash=old.config_hash,
        new_hash=new.config_hash,
        proposal_digest=sha256_hex(data),
        config_file=doc["configFile"],
        approvals=tuple(approvals),
        changes=tuple(c.to_json() for c in changes),
        mode=mode,
        requested_by={
            "workerId": worker.worker_id,
            "generation": worker.generation,
            "requestId": req.request_id,
            "requestDigest": req.digest,
        },
        requested_at=now,
        approved_by={"by": "coordinator", "name": f"{worker.worker_id} generation {worker.generation}", "at": now}
        if mode == "coordinator"
        else None,
        stages=({"stage": "prepared", "at": now},),
    )
    transitions.begin(store, transition, data)
    loop.ctx.fault("policy:prepared")
    loop.transition = transition.transition_id
    loop.brief_policy()
    lines = describe_changes(transition.changes)
    tid = transition.transition_id
    if mode == "user":
        message = (
            f"policy transition {tid} recorded; a person approves it with 'git agentops-run approve {loop.run_id} "
            f"{tid}' (or refuses it); every writer stops until then"
        )
        if decisions:
            message += "; it holds a person's decision: " + "; ".join(f"{w.path}: {w.message}" for w in decisions)
    else:
        message = f"policy transition {tid} recorded with your approvals; the writers stop while it is applied"

    def effect(change: Change, view: runstate.RunView) -> dict[str, Any]:
        if mode == "user":
            runstate.put_run(
                change, replace(view.run(), status=RunStatus.AWAITING_INPUT, status_reason=awaiting_reason(tid))
            )
        return {"transitionId": tid, "stage": "prepared", "approval": mode, "changes": lines}

    response = answer(loop, worker, req, "RUN_POLICY_PENDING", message, effect)
    unwritten = loop.respond(worker, Answered(response))  # before the requester is stopped with everyone else
    if unwritten is not None:
        raise unwritten
    loop.state.refresh()
    if mode == "user":
        loop.stop_all(WorkerStatus.FENCED, f"awaiting approval of {tid}")
    loop.log(
        f"{worker.worker_id} proposes {tid}: " + "; ".join(lines) if lines else f"{worker.worker_id} proposes {tid}"
    )
    return response


def _refuse(code: str, why: str, found: list[Weakening]) -> None:
    """``code`` naming every JSON path of ``found`` (nothing when it is empty)."""
    if found:
        raise AgentOpsError(
            code,
            f"{why}: " + "; ".join(f"{w.path}: {w.message}" for w in found),
            details={"problems": [{"path": w.path, "message": w.message} for w in found]},
        )


def validated(data: bytes, source: str) -> Policy:
    """The proposed policy, or ``RUN_POLICY_INVALID`` naming the first problem (all of them in the details)."""
    try:
        return policy_from_bytes(data, source=source)
    except AgentOpsError as exc:
        raise AgentOpsError(
            "RUN_POLICY_INVALID", f"{exc.code}: {exc.message}", details={"cause": exc.code, **exc.details}
        ) from exc
