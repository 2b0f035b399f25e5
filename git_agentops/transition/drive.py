"""Changing the execution policy mid-run: the journaled transition the loop drives, once :mod:`.propose` recorded it.

The transition (:func:`drive`, each tick while one is pending; nothing else happens meanwhile: no generation
starts, nothing is provisioned, no coordinator is woken). Every stage is re-entrant, and a supervisor that starts
with a pending transition finishes it before anything else:

* ``prepared`` (approved): the recorded proposal still hashes to its digest and the coordinator's file is still
  those bytes (``RUN_POLICY_PROPOSAL_CHANGED``), the binding still the old policy (``RUN_POLICY_TRANSITION_STALE``);
  every writer is stopped (fenced) and every job -- a handoff being verified, a worktree being provisioned -- is
  waited for, so what was handed off under the old policy is delivered under it; every writer's checkout must be
  clean (``RUN_POLICY_DIRTY``). Any of these refuses the transition, which ends ``refused``, and the writers go on
  under the old policy. Otherwise -> ``fenced``, recording the deliveries frozen so far (they keep their proof
  under the old policy; the final gate re-verifies the merged candidate under the new one);
* ``fenced``: the new policy is bound by CAS (:func:`git_agentops.transition.journal.bind`) -> ``bound``. From here
  the transition only rolls forward: a failure blocks the run with ``RUN_POLICY_RECOVERY_REQUIRED`` and ``git
  agentops-run resume`` continues it;
* ``bound``: the supervisor adopts the new policy; the run records its hash, and every task not yet delivered is
  revised to need fresh proof under it; every live worktree gets the bound policy file, committed by the
  supervisor where it is tracked (agents may not change it), and its setup re-run -> ``synchronized``;
* ``synchronized``: every writer the fence stopped, and the coordinator, gets a diagnostic saying what changed ->
  ``complete``; the loop then restarts them as new generations.

Crash points (``AGENTOPS_FAULT``): ``policy:prepared`` (recorded, the request not answered), ``policy:fence``
(fenced, not recorded), ``policy:fenced``, ``policy:bind`` (before the CAS), ``policy:bound-unmarked`` (bound, not
recorded), ``policy:bound``, ``policy:synchronizing`` (one worktree synchronised), ``policy:synchronized``,
``policy:told`` (writers told, not recorded), ``policy:complete``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from .. import eventkinds as kinds
from ..errors import AgentOpsError, SandboxUnavailable, SetupFailed, SetupRecoveryRequired, StateTampered
from ..gitstore.checkout import dirty_paths
from ..gitstore.journal import Change, Event
from ..gitstore.private import read_private, write_private
from ..gitstore.safegit import run_git
from ..gitstore.worktree import head_of
from ..integrate.secrets import clean_text
from ..model.policy import POLICY_PATH
from ..model.run import RunStatus, Worker, WorkerStatus
from ..model.task import TaskStatus, task_contract_hash
from ..runs import state as runstate
from ..runs import tasks as taskbook
from ..supervisor.ports import Loop
from ..verify.workspaces import ensure_setup
from . import journal as transitions
from .journal import awaiting_reason
from .propose import validated
from .record import (
    MAX_PROPOSAL_BYTES,
    FrozenDelivery,
    Stage,
    Transition,
    TransitionRefused,
    describe_changes,
)

# -- the transition --------------------------------------------------------------------------------------------------


def discover(loop: Loop) -> str | None:
    """At startup: the pending transition, if any, which becomes the loop's first business."""
    found = transitions.pending(loop.state.store, loop.run_id)
    if found is not None:
        loop.log(f"resuming the policy transition {found.transition_id} at {found.stage}")
    return found.transition_id if found is not None else None


def drive(loop: Loop) -> bool:
    """Advance the pending transition as far as it goes now; True while one is pending (the loop does nothing
    else this tick)."""
    if loop.transition is None:
        return False
    store = loop.state.store
    try:
        transition = transitions.read(store, loop.run_id, loop.transition)
    except StateTampered as exc:
        _set_run(loop, RunStatus.BLOCKED, f"RUN_STATE_TAMPERED: {exc.message}"[:8000], disable=True)
        return True
    if transition.ended:  # a person refused it
        loop.track_transition(None)
        return False
    try:
        if transition.stage is Stage.PREPARED:
            fenced = _fence(loop, transition)
            if fenced is None:
                return loop.transition is not None
            transition = fenced
        return _roll_forward(loop, transition)
    except AgentOpsError as exc:
        stage = transitions.read(store, loop.run_id, transition.transition_id).stage
        if stage is Stage.REFUSED:  # a person refused it meanwhile: nothing was bound
            loop.track_transition(None)
            return False
        if stage in (Stage.PREPARED, Stage.FENCED):
            _refuse(loop, transition, exc.code, exc.message)
            return False
        _recovery(loop, transition, exc)
        return True


def _roll_forward(loop: Loop, transition: Transition) -> bool:
    store, clock, fault = loop.state.store, loop.ctx.clock, loop.ctx.fault
    tid = transition.transition_id
    data = transitions.proposal(store, loop.run_id, tid)
    policy = validated(data, transition.config_file)
    if transition.stage is Stage.FENCED:
        fault("policy:bind")
        transitions.bind(store, transition, policy, data, clock.now())
        fault("policy:bound-unmarked")
        transition = transitions.update(
            store, loop.run_id, tid, Stage.BOUND, clock.now(), f"{policy.config_hash[:12]} bound"
        )
        fault("policy:bound")
    if transition.stage is Stage.BOUND:
        loop.rebind(policy, data)
        contract = _synchronize(loop, transition, data)
        transition = transitions.update(
            store, loop.run_id, tid, Stage.SYNCHRONIZED, clock.now(), "worktrees synchronised", contract_hash=contract
        )
        fault("policy:synchronized")
    if transition.stage is Stage.SYNCHRONIZED:
        _tell_writers(loop, transition)
        fault("policy:told")
        transitions.update(store, loop.run_id, tid, Stage.COMPLETE, clock.now(), "complete")
        fault("policy:complete")
        loop.log(f"policy transition {tid} complete: the run is bound to {transition.new_hash[:12]}")
    loop.track_transition(None)
    return False


def _fence(loop: Loop, transition: Transition) -> Transition | None:
    """Stage ``prepared``: wait for approval, check, stop and drain; the transition at ``fenced``, or None while it
    must wait (or was refused)."""
    run = loop.state.run()
    tid = transition.transition_id
    if not transition.approved:
        if run.status is RunStatus.ACTIVE:  # a crash between the record and the run's status: wait as asked
            _set_run(loop, RunStatus.AWAITING_INPUT, awaiting_reason(tid))
            loop.stop_all(WorkerStatus.FENCED, f"awaiting approval of {tid}")
        return None
    if run.status is RunStatus.AWAITING_INPUT and run.status_reason == awaiting_reason(tid):
        _set_run(loop, RunStatus.ACTIVE, None)
        run = loop.state.run()
    if run.status is not RunStatus.ACTIVE:
        return None
    store = loop.state.store
    data = transitions.proposal(store, loop.run_id, tid)  # RUN_POLICY_PROPOSAL_CHANGED when the record was edited
    requester = loop.state.workers().get(transition.requested_by.worker_id)
    if requester is not None:
        try:
            now = read_private(Path(requester.worktree), transition.config_file, max_bytes=MAX_PROPOSAL_BYTES)
        except AgentOpsError:
            now = None
        if now != data:
            raise AgentOpsError(
                "RUN_POLICY_PROPOSAL_CHANGED",
                f"{transition.config_file} changed (or went) after it was proposed: the approved bytes are not the "
                "file's any more; propose again",
            )
    if loop.policy.config_hash != transition.old_hash:
        raise AgentOpsError(
            "RUN_POLICY_TRANSITION_STALE",
            f"{tid} replaces {transition.old_hash[:12]}, but the run is bound to {loop.policy.config_hash[:12]}",
        )
    loop.stop_all(WorkerStatus.FENCED, f"policy transition {tid}")
    if loop.jobs_running():
        return None  # a handoff or provisioning finishes under the old policy first
    loop.state.refresh()
    dirty = _dirty_writers(loop, transition)
    if dirty:
        raise AgentOpsError(
            "RUN_POLICY_DIRTY",
            "every writer's checkout must be clean before the policy changes: " + "; ".join(dirty),
            details={"dirty": dirty},
        )
    loop.ctx.fault("policy:fence")
    workers = loop.state.workers().values()
    delivered = [
        FrozenDelivery(t.id, t.delivery.commit, t.policy_config_hash or transition.old_hash)
        for t in loop.state.tasks().values()
        if t.status is TaskStatus.DELIVERED and t.delivery is not None
    ]
    resume = sorted(
        w.worker_id
        for w in workers
        if w.status in (WorkerStatus.FENCED, WorkerStatus.STOPPED, WorkerStatus.IDLE)
        or w.worker_id == transition.requested_by.worker_id
    )
    fenced = transitions.update(
        store,
        loop.run_id,
        tid,
        Stage.FENCED,
        loop.ctx.clock.now(),
        f"writers fenced; {len(delivered)} delivered under the old policy",
        delivered=tuple(delivered),
        resume=tuple(resume),
    )
    loop.ctx.fault("policy:fenced")
    return fenced


def _writers(loop: Loop) -> list[Worker]:
    """The workers whose checkouts follow the policy: every one with a worktree that has not delivered."""
    return [
        w for w in loop.state.workers().values() if w.status is not WorkerStatus.DELIVERED and Path(w.worktree).is_dir()
    ]


def _dirty_writers(loop: Loop, transition: Transition) -> list[str]:
    out = []
    for worker in _writers(loop):
        paths = dirty_paths(Path(worker.worktree))
        if worker.worker_id == transition.requested_by.worker_id:
            paths = [p for p in paths if p[3:] != transition.config_file]
        if paths:
            out.append(f"{worker.worker_id}: {', '.join(paths[:8])}")
    return out


def _synchronize(loop: Loop, transition: Transition, data: bytes) -> str:
    """Stage ``bound``: the run's hash and tasks, then every live worktree (see the module docstring); returns the
    new contract hash."""
    new_hash = transition.new_hash

    def revise(change: Change, view: runstate.RunView) -> str:
        run = view.run()
        if run.policy_config_hash != new_hash:
            runstate.put_run(change, replace(run, policy_config_hash=new_hash))
        for task in view.tasks().values():
            if task.status is not TaskStatus.DELIVERED and task.policy_config_hash != new_hash:
                taskbook.revise_in(change, task.id, task_contract_hash(task), policy_config_hash=new_hash)
        return runstate.recompute_contract(change, view).contract_hash

    contract = runstate.mutate(
        loop.journal,
        revise,
        Event(
            kinds.POLICY_TASKS_REVISED,
            f"{transition.transition_id}: the run is bound to {new_hash[:12]}; tasks not delivered need fresh proof",
            {"transitionId": transition.transition_id, "configHash": new_hash},
        ),
    )
    loop.state.refresh()
    synced = 0
    for worker in _writers(loop):
        if _sync_worktree(loop, worker, transition, data):
            synced += 1
            if synced == 1:
                loop.ctx.fault("policy:synchronizing")
        try:
            ensure_setup(
                loop.state.store,
                Path(worker.worktree),
                loop.policy,
                environ=dict(loop.ctx.environ),
                clock=loop.ctx.clock,
                last_user_resume=loop.state.run().last_user_resume,
                log=loop.ctx.log,
            )
        except (SetupFailed, SetupRecoveryRequired, SandboxUnavailable) as exc:
            loop.block(worker.worker_id, exc.code, f"setup under the new policy failed: {exc.message}")
    return contract


def _sync_worktree(loop: Loop, worker: Worker, transition: Transition, data: bytes) -> bool:
    """Write the bound policy file into one checkout and commit it there when it is tracked; True if it changed.

    Nothing the agent placed is followed (a symlinked ``.agentops`` or policy file is ``RUN_POLICY_DIRTY``)."""
    worktree = Path(worker.worktree)
    tracked = run_git(worktree, "ls-files", "--error-unmatch", "--", POLICY_PATH).returncode == 0
    if not tracked:
        return False
    head_of(loop.state.store, worktree)  # its commits out of its quarantine: ours goes on top, in the shared store
    try:
        current = read_private(worktree, POLICY_PATH, max_bytes=4 * MAX_PROPOSAL_BYTES)
    except AgentOpsError as exc:
        raise AgentOpsError("RUN_POLICY_DIRTY", f"{worker.worker_id}: {POLICY_PATH}: {exc.message}") from exc
    head_blob = run_git(worktree, "rev-parse", "--verify", "-q", f"HEAD:{POLICY_PATH}").stdout.decode().strip()
    if current == data and head_blob == transitions.blob_id(data):
        return False
    dirty = [p for p in dirty_paths(worktree) if p[3:] not in (POLICY_PATH, transition.config_file)]
    if dirty:
        raise AgentOpsError(
            "RUN_POLICY_DIRTY", f"{worker.worker_id}'s checkout changed while fenced: {', '.join(dirty)}"
        )
    try:  # atomically, and never through a symlink the agent may have put there since the check above
        write_private(worktree, POLICY_PATH, data)
    except AgentOpsError as exc:
        raise AgentOpsError("RUN_POLICY_DIRTY", f"{worker.worker_id}: {POLICY_PATH}: {exc.message}") from exc
    identity = loop.state.store.identity
    done = run_git(
        worktree,
        "-c",
        f"user.name={identity.name}",
        "-c",
        f"user.email={identity.email}",
        "-c",
        "commit.gpgSign=false",
        "commit",
        "-q",
        "--no-verify",
        "-m",
        f"Synchronize the run's policy ({transition.transition_id})\n\nBound by the supervisor of run "
        f"{loop.run_id}: {transition.old_hash[:12]} -> {transition.new_hash[:12]}.\n",
        "--",
        POLICY_PATH,
    )
    if done.returncode != 0:
        raise AgentOpsError(
            "RUN_POLICY_SYNC_FAILED",
            f"committing {POLICY_PATH} in {worktree} failed: {done.stderr.decode(errors='replace')[-1000:]}",
        )
    return True


def _tell_writers(loop: Loop, transition: Transition) -> None:
    """Stage ``synchronized``: the diagnostic of every writer to restart; an idle coordinator is started again."""
    lines = describe_changes(transition.changes)
    by = transition.approved_by
    text = (
        f"Execution policy changed: transition {transition.transition_id} ({transition.old_hash[:12]} -> "
        f"{transition.new_hash[:12]}), approved by {by.by if by else '?'} ({by.name if by else '?'}), was assessed and "
        "synchronized.\n"
        + "".join(f"- {line}\n" for line in lines)
        + "Tasks not yet delivered were revised: their proof must be made under the new policy. "
        "Authorization expires with this run."
    )
    resume = set(transition.resume) | {transition.requested_by.worker_id}

    def tell(change: Change, view: runstate.RunView) -> None:
        for worker in view.workers():
            if worker.worker_id not in resume or worker.status in (WorkerStatus.DELIVERED, WorkerStatus.BLOCKED):
                continue
            status = WorkerStatus.STOPPED if worker.status is WorkerStatus.IDLE else worker.status
            runstate.put_worker(change, replace(worker, diagnostic=text, status=status))

    runstate.mutate(
        loop.journal,
        tell,
        Event(kinds.POLICY_WRITERS_TOLD, f"{transition.transition_id}: writers restart", {"resume": sorted(resume)}),
    )
    loop.state.refresh()


def _refuse(loop: Loop, transition: Transition, code: str, message: str) -> None:
    """End a transition before ``bound``: nothing changes; the writers go on under the old policy."""
    store, now = loop.state.store, loop.ctx.clock.now()
    shown = clean_text(message, 4000, loop.policy.deny_patterns, multiline=True)
    transitions.update(
        store,
        loop.run_id,
        transition.transition_id,
        Stage.REFUSED,
        now,
        f"refused ({code})",
        refused=TransitionRefused(code, shown, "supervisor", now),
    )
    transitions.tell_refused(loop.journal, transition, code, shown)
    loop.state.refresh()
    loop.track_transition(None)
    loop.log(f"policy transition {transition.transition_id} refused ({code}): {shown.splitlines()[0] if shown else ''}")


def _recovery(loop: Loop, transition: Transition, exc: AgentOpsError) -> None:
    """A failure after ``bound``: the run is blocked, nothing is lost, and ``run resume`` rolls it forward."""
    reason = (
        f"RUN_POLICY_RECOVERY_REQUIRED: the policy transition {transition.transition_id} is bound but could not be "
        f"completed ({exc.code}: {exc.message[:2000]}); fix that, then 'git agentops-run resume {loop.run_id}'"
    )
    _set_run(loop, RunStatus.BLOCKED, reason, disable=True)
    loop.log(reason)


def _set_run(loop: Loop, status: RunStatus, reason: str | None, *, disable: bool = False) -> None:
    loop.set_status(status, reason, disable=disable)
    loop.state.refresh()
