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
:mod:`.drive` applies it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import eventkinds as kinds
from ..canonical import sha256_hex
from ..errors import AgentOpsError
from ..gitstore.journal import Change
from ..gitstore.private import read_private
from ..integrate.secrets import clean_text
from ..model.judge import Weakening, budget_raises, person_decisions, weakenings
from ..model.policy import Policy
from ..model.run import Role, RunStatus, Worker, WorkerStatus
from ..policy.load import policy_from_bytes
from ..runs import state as runstate
from ..runs.jobs import Request
from ..supervisor.effects import Answer, BeginTransition, Effect, Log, StopWorkers
from ..supervisor.ports import Snapshot
from . import journal as transitions
from .journal import awaiting_reason
from .record import (
    MAX_PROPOSAL_BYTES,
    Approval,
    ApprovedBy,
    ChangeMode,
    RequestedBy,
    Stage,
    StageMark,
    Transition,
    approval_problems,
    capability_changes,
    describe_changes,
    policy_changes,
    transition_id,
)


def request(snap: Snapshot, worker: Worker, req: Request) -> tuple[Effect, ...]:
    """The ``policy`` action (see the module docstring): the transition recorded ``prepared`` and made the loop's
    business, the request answered (in the mailbox at once), then -- awaiting a person -- every writer fenced."""
    if worker.role is not Role.COORDINATOR:
        raise AgentOpsError("RUN_COORDINATOR_REQUIRED", "only the coordinator may change the execution policy")
    old = snap.policy
    mode = policy_changes(old.doc)
    if mode is ChangeMode.NEVER:
        raise AgentOpsError("RUN_POLICY_CHANGES_DISABLED", 'this run\'s policy says [run] policy_changes = "never"')
    pending = transitions.pending(snap.store, snap.run_id)
    if pending is not None:
        raise AgentOpsError(
            "RUN_POLICY_TRANSITION_PENDING",
            f"the policy transition {pending.transition_id} is {pending.stage}; propose again once it has ended",
        )
    run = snap.run
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
    tasks = snap.tasks.values()
    used_runners = {c.runner for t in tasks if t.current for c in t.criteria if c.runner}
    used_hosts = {w.host for w in snap.workers.values()} & set(old.doc["hosts"])  # not built-ins
    weakened = weakenings(old.doc, new.doc, used_runners=used_runners, used_hosts=used_hosts)
    _refuse("RUN_POLICY_INVALID", "the proposal removes or weakens what must stay", weakened)
    _refuse(
        "RUN_POLICY_BUDGET_RAISED",
        f"a policy change cannot raise the run's budget; a person adds budget with 'git agentops-run resume "
        f"{snap.run_id} --add-budget AMOUNT'",
        budget_raises(old.doc, new.doc),
    )
    decisions = person_decisions(old.doc, new.doc)
    if mode is ChangeMode.COORDINATOR:
        _refuse(
            "RUN_POLICY_PERSON_REQUIRED",
            'only a person may approve this, and [run] policy_changes = "coordinator" has no person approve',
            decisions,
        )
    changes = capability_changes(old.doc, new.doc)
    # what the agent wrote is recorded cleaned (secret-shaped text redacted, control characters escaped)
    patterns = snap.policy.deny_patterns
    approvals = [{**a, "reason": clean_text(a["reason"], 4096, patterns, multiline=True)} for a in doc["approvals"]]
    refused = approval_problems(changes, approvals)
    if refused:
        code = "RUN_POLICY_INVALID" if any(p.code == "RUN_POLICY_INVALID" for p in refused) else "RUN_POLICY_UNAPPROVED"
        raise AgentOpsError(
            code,
            "; ".join(f"{p.path}: {p.message}" for p in refused),
            details={"problems": [{"code": p.code, "path": p.path, "message": p.message} for p in refused]},
        )
    now = snap.ctx.clock.now()
    transition = Transition(
        transition_id=transition_id(new.config_hash, approvals, old.config_hash, req.request_id),
        run_id=snap.run_id,
        stage=Stage.PREPARED,
        old_hash=old.config_hash,
        new_hash=new.config_hash,
        proposal_digest=sha256_hex(data),
        config_file=doc["configFile"],
        approvals=tuple(map(Approval.from_json, approvals)),
        changes=tuple(changes),
        mode=mode,
        requested_by=RequestedBy(worker.worker_id, worker.generation, req.request_id, req.digest),
        requested_at=now,
        approved_by=ApprovedBy("coordinator", f"{worker.worker_id} generation {worker.generation}", now)
        if mode is ChangeMode.COORDINATOR
        else None,
        stages=(StageMark(Stage.PREPARED, now),),
    )
    lines = describe_changes(transition.changes)
    tid = transition.transition_id
    if mode is ChangeMode.USER:
        message = (
            f"policy transition {tid} recorded; a person approves it with 'git agentops-run approve {snap.run_id} "
            f"{tid}' (or refuses it); every writer stops until then"
        )
        if decisions:
            message += "; it holds a person's decision: " + "; ".join(f"{w.path}: {w.message}" for w in decisions)
    else:
        message = f"policy transition {tid} recorded with your approvals; the writers stop while it is applied"

    def effect(change: Change, view: runstate.RunView) -> dict[str, Any]:
        if mode is ChangeMode.USER:
            runstate.put_run(
                change, replace(view.run(), status=RunStatus.AWAITING_INPUT, status_reason=awaiting_reason(tid))
            )
        return {"transitionId": tid, "stage": "prepared", "approval": mode, "changes": lines}

    fence = (StopWorkers(WorkerStatus.FENCED, f"awaiting approval of {tid}"),) if mode is ChangeMode.USER else ()
    return (
        BeginTransition(transition, data),
        # in the mailbox before the requester is stopped with everyone else
        Answer(worker, req, kinds.RUN_POLICY_PENDING, message, effect, deliver=True),
        *fence,
        Log(
            f"{worker.worker_id} proposes {tid}: " + "; ".join(lines) if lines else f"{worker.worker_id} proposes {tid}"
        ),
    )


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
