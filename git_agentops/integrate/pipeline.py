"""Integration: from every frozen delivery to the target branch, verified, reviewed, published once, receipted.

When the coordinator asks to ``finalize`` (``RUN_DELIVERIES_PENDING`` until every child task is delivered:
:func:`check_finalize`), the supervisor stops the writers and runs :func:`integrate` in a job, a journaled
transaction:

1. **prepared** -- merge every frozen delivery, in dependency order with ties broken by plan order, into the
   target's current tip, in memory, one merge commit per delivery; ``refs/agentops/runs/<run>/candidate`` -> the
   last one (a delivered repair task's delivery in the place of the one it repairs). A conflict is
   ``RUN_INTEGRATION_CONFLICT`` naming both tasks and the paths, and a repair task is planned for it
   (:mod:`.repair`): nothing is resolved by favouring a side;
2. **verified** -- the policy's commands on the supervisor's clean checkout of the candidate (:mod:`.gate`; the
   evidence cache by tree id applies to what the supervisor itself produced and can authenticate, so a candidate
   whose tree was already verified at a handoff costs nothing);
3. **reviewed** -- the required reviewers judge it (:mod:`.reviews`); a blocking finding is ``RUN_REVIEW_BLOCKED``;
4. **published** -- compare-and-swap of ``refs/heads/<target>`` from the base to the candidate; if the target
   moved meanwhile, the candidate is rebuilt on the new tip and re-verified (at most three times, then
   ``RUN_TARGET_CONTENDED``) -- never a force;
5. **receipted** -- the sealed, signed receipt (:mod:`git_agentops.receipts.build`) is added as a note on the
   candidate (create-only);
6. **complete** -- the run is complete; the loop answers the coordinator, then removes the worktrees
   (:func:`clean_up`; branches and delivery refs stay).

Each step is recorded in ``run.json`` (:class:`~git_agentops.model.integration.Integration`) before the next
starts; the transaction is the table :data:`STEPS`, driven by one roll-forward loop (:mod:`.steps`), so after a
crash the next supervisor rolls forward from the record by the same loop: the target moves at most once
(publishing is a CAS from the recorded base, and a candidate that is already in the target's history counts as
published), and once resumed a receipt exists exactly when the target moved. A failure before publishing is a
:class:`~git_agentops.runs.jobs.Refused` of the finalize request: the coordinator restarts with it as its
diagnostic.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Final

import pygit2

from .. import eventkinds as kinds
from ..controls import people
from ..errors import AgentOpsError, PushRefused, RemoteUnreachable
from ..gitstore import sync
from ..gitstore.checkout import (
    PUBLISH_LOCK,
    PUBLISH_LOCK_WAIT,
    checkouts_of,
    dirty_checkouts,
    move_checkout,
    shown_dirty,
)
from ..gitstore.journal import Change, Event
from ..gitstore.private import file_lock
from ..gitstore.refnames import RefConflict
from ..gitstore.refs import read_ref, update_ref
from ..gitstore.repo import Store
from ..mergequeue import audit as queueaudit
from ..mergequeue import book as queuebook
from ..mergequeue.record import EntryState, QueuedDelivery
from ..mergequeue.serve import wait_settled
from ..model.integration import BUILT, Integration, IntegrationStatus
from ..model.request import RequestRecord, ResponseDoc
from ..model.run import Role, Run, RunStatus, Worker, WorkerStatus
from ..model.task import Task, TaskStatus, delivered
from ..protocol import mailbox
from ..runs import state as runstate
from ..runs import tasks as taskbook
from ..runs.jobs import Answered, Integrated, JobContext, Left, Refused, Wait
from ..transition import journal as transitions
from ..verify.proof import remove_slots
from ..workspace.salvage import remove_with_salvage
from . import custody, receipting, repair
from .gate import gate
from .guards import candidate_breach
from .merge import ChainResult, integration_message, merge_chain
from .record import ZERO_DIGEST, advance, fail
from .remote import follow, publish, remote_tip
from .steps import Progress, Step, roll_forward

MAX_PUBLISH_ATTEMPTS: Final = 3


def check_finalize(worker: Worker, run: Run, tasks: Mapping[str, Task]) -> None:
    """``RUN_DELIVERIES_PENDING`` unless the coordinator asks and every child task is delivered."""
    if worker.role is not Role.COORDINATOR:
        raise AgentOpsError("RUN_DELIVERIES_PENDING", "only the coordinator finalizes")
    if run.root_task_id is None:
        raise AgentOpsError("RUN_DELIVERIES_PENDING", "plan the root task and its children first")
    children = [t for t in tasks.values() if t.parent is not None]
    pending = [f"{t.title} ({t.status})" for t in children if t.status is not TaskStatus.DELIVERED]
    if not children or pending:
        raise AgentOpsError(
            "RUN_DELIVERIES_PENDING",
            f"not every child task is delivered: {', '.join(pending) or 'no child task planned'}",
        )


# -- the transaction ---------------------------------------------------------------------------------------------------


def integrate(ctx: JobContext, store: Store) -> Integrated | Refused | Wait | Left:
    """The integration job (see the module docstring), from wherever the record says it stopped.

    A remote that stays unreachable, or a server that refuses the push, makes the run wait with everything kept
    (:mod:`.remote`): ``git agentops-run resume`` tries again.
    """
    try:
        return _integrate(ctx, store)
    except (RemoteUnreachable, PushRefused) as exc:
        ctx.log(f"waiting: {exc.message}")
        return Wait(exc.code, f"{exc.message}; 'git agentops-run resume {ctx.run_id}' tries again (nothing was lost)")


def _tip(ctx: JobContext, store: Store, target: str) -> str | None:
    """The target's tip: the remote's with ``[run] remote``, else the local branch's."""
    where = ctx.policy.remote
    return remote_tip(ctx, store, where, target) if where else read_ref(store, f"refs/heads/{target}")


def _integrate(ctx: JobContext, store: Store) -> Integrated | Refused | Wait | Left:
    return roll_forward(ctx, store, QUEUE_STEPS if ctx.policy.queue_enabled else STEPS, _finish)


# -- the table of steps (:mod:`.steps`): each reads the record afresh; resuming is finding the first one due ----------


def _adopt(ctx: JobContext, store: Store, now: Progress) -> None:
    """A candidate built before a crash that the target already holds (the CAS or the push happened, the record
    was not written): the target's checkouts follow now, and the record says published."""
    integration, target = now.integration, now.run.target
    assert integration.candidate is not None  # the step's precondition
    tip = _tip(ctx, store, target)
    if tip is None or not _contains(store, tip, integration.candidate):
        return None
    if ctx.policy.remote and integration.base:  # pushed before a crash: the local target follows now
        follow(ctx, store, ctx.policy.remote, target, integration.base, integration.candidate)
    elif integration.base:  # the CAS moved it before a crash: its checkouts follow now
        _follow_local(ctx, store, target, integration.base, integration.candidate)
    advance(
        ctx,
        store,
        kinds.INTEGRATION_PUBLISHED,
        "the target already holds the candidate",
        status=IntegrationStatus.PUBLISHED,
    )


def _publish_gated(ctx: JobContext, store: Store, now: Progress) -> Wait | Refused | None:
    """A candidate gated before a crash, on the target's tip still: publish it without building it again (a tip
    that moved, or moves before the CAS, leaves the record as it is, and the next step rebuilds)."""
    integration, target = now.integration, now.run.target
    assert integration.base is not None and integration.candidate is not None  # the step's precondition
    if integration.base != _tip(ctx, store, target):
        return None
    published = _publish(ctx, store, target, integration.base, integration.candidate)
    return published if isinstance(published, Wait | Refused) else None


def _build(ctx: JobContext, store: Store, now: Progress) -> Refused | Wait | None:
    """Steps 1 to 4 as one step: a crash anywhere in them resumes by building on the target's tip anew."""
    return _build_and_publish(ctx, store, now.view)


def _receipt(ctx: JobContext, store: Store, now: Progress) -> None:
    """Step 5 (:func:`_add_receipt`), recorded."""
    receipt_digest = _add_receipt(ctx, store)
    advance(
        ctx,
        store,
        kinds.INTEGRATION_RECEIPTED,
        "receipt added",
        status=IntegrationStatus.RECEIPTED,
        receipt_digest=receipt_digest,
    )


def _finish(ctx: JobContext, store: Store, now: Progress) -> Integrated:
    """Step 6 (:func:`_complete`): always due last."""
    candidate, response = _complete(ctx, store)
    return Integrated(candidate, Answered(response))  # the loop answers the coordinator, then calls clean_up


_DONE: Final = (IntegrationStatus.PUBLISHED, IntegrationStatus.RECEIPTED)
STEPS: Final = (
    Step(
        "adopt",
        lambda now: now.status in BUILT and now.integration.candidate is not None,
        _adopt,
        (IntegrationStatus.PUBLISHED,),
    ),
    Step(
        "publish",
        lambda now: (
            now.status is IntegrationStatus.REVIEWED
            and now.integration.candidate is not None
            and now.integration.base is not None
        ),
        _publish_gated,
        (IntegrationStatus.PUBLISHED,),
    ),
    Step(
        "build",
        lambda now: now.status not in _DONE,
        _build,
        (
            IntegrationStatus.PREPARED,
            IntegrationStatus.VERIFIED,
            IntegrationStatus.REVIEWED,
            IntegrationStatus.PUBLISHED,
            IntegrationStatus.FAILED,
        ),
    ),
    Step("receipt", lambda now: now.status is IntegrationStatus.PUBLISHED, _receipt, (IntegrationStatus.RECEIPTED,)),
)
"""The integration, in order; :func:`_finish` (``complete``) follows the last row. See :mod:`.steps`."""


def _queued(ctx: JobContext, store: Store, now: Progress) -> Refused | Wait | Left | None:
    """With ``[queue] enabled``: steps 1 to 4 through the target's merge queue (:mod:`git_agentops.mergequeue`). The
    deliveries are checked, merged on the target's tip for the guards (and, when reviews are required, verified and
    reviewed there as without the queue), enqueued once, and the run waits -- processing the queue while it holds
    its lease -- until its entry is published (the record then says so), evicted or conflicted (the finalize is
    refused with the queue's evidence)."""
    run, tasks, integration = now.run, now.view.tasks(), now.integration
    order, refused = _custody(ctx, store, run, tasks)
    if refused is not None:
        return refused
    position = integration.queue_position
    if integration.status is not IntegrationStatus.QUEUED or position is None:
        tip = _tip(ctx, store, run.target)
        if tip is None:
            return fail(ctx, store, "OBJECT_MISSING", f"the target branch {run.target} is gone", {})
        chain = merge_chain(
            store,
            tip,
            [(task_id, delivered(tasks[task_id]).commit) for task_id in order],
            message=integration_message({t: tasks[t].title for t in order}, ctx.run_id),
        )
        if chain.conflict is not None or chain.head is None:
            return _conflict(ctx, store, tip, chain, tasks)
        breach = candidate_breach(store, ctx.policy, base=tip, candidate=chain.head, bound_policy=ctx.policy_file)
        if breach is not None:
            return fail(ctx, store, breach.code, breach.message, dict(breach.detail))
        if int(ctx.policy.doc["review"]["required"]) > 0:
            _prepare(ctx, store, tip, chain.head, chain, order, 1)
            root = tasks[run.root_task_id] if run.root_task_id else None
            refused = gate(ctx, store, run, root, chain.head, tip)
            if refused is not None:
                return refused
        if ctx.policy.remote is not None:  # the run's record and deliveries first: what other machines hold it to
            sync.push(store, ctx.policy.remote, (f"refs/agentops/runs/{ctx.run_id}/", "refs/notes/agentops/"))
            sync.fetch(store, ctx.policy.remote, ("refs/agentops/runs/",))  # the positions other machines' runs took
        entry = queuebook.enqueue(
            store,
            run.target,
            ctx.run_id,
            [QueuedDelivery(t, tasks[t].title, delivered(tasks[t]).commit) for t in order],
            ctx.policy.config_hash,
            ctx.clock.now(),
            ctx.policy.remote,
            floor=queueaudit.highest_position(store, run.target) + 1,
        )
        position = entry.position
        ctx.fault("queue:enqueued")  # in the queue, not in the run's record yet: enqueueing again finds the entry
        advance(
            ctx,
            store,
            kinds.INTEGRATION_QUEUED,
            f"enqueued as #{position} on the merge queue of {run.target}",
            status=IntegrationStatus.QUEUED,
            queue_position=position,
            order=order,
        )
    settled = wait_settled(ctx, store, run.target, position)
    if isinstance(settled, Left | Wait):
        return settled
    if settled.state is EntryState.CONFLICTED and settled.base is not None and settled.conflicting is not None:
        return _refuse_conflict(
            ctx,
            store,
            settled.conflicting,
            settled.base,
            settled.paths or (),
            f"the target {run.target} at {settled.base[:12]}",
            f"queue entry #{position}: {settled.reason}",
            {"queuePosition": position, "paths": list(settled.paths or ())},
            queue_position=position,
        )
    if settled.state is not EntryState.PUBLISHED:
        code = settled.code or "RUN_VERIFICATION_FAILED"
        detail: dict[str, object] = {"queuePosition": position}
        return fail(ctx, store, code, f"queue entry #{position}: {settled.reason}", detail)
    if ctx.policy.remote is not None and settled.base and settled.candidate:
        # the receipt the processor pushed with it comes back with the notes; the local target follows the remote's
        there = remote_tip(ctx, store, ctx.policy.remote, run.target) or settled.candidate
        local = read_ref(store, f"refs/heads/{run.target}")
        behind = local is not None and local != there and _contains(store, there, local)
        follow(ctx, store, ctx.policy.remote, run.target, local if behind and local else settled.base, there)
    advance(
        ctx,
        store,
        kinds.INTEGRATION_PUBLISHED,
        f"the merge queue moved {run.target} to {str(settled.candidate)[:12]} (entry #{position})",
        **settled.published_fields(),
    )
    return None


QUEUE_STEPS: Final = (
    Step(
        "queue",
        lambda now: now.status not in _DONE,
        _queued,
        (IntegrationStatus.PREPARED, IntegrationStatus.QUEUED, IntegrationStatus.PUBLISHED, IntegrationStatus.FAILED),
    ),
    STEPS[-1],
)
"""The integration through the target's merge queue (``[queue] enabled``): the queue publishes, the run receipts."""


def _contains(store: Store, tip: str, commit: str) -> bool:
    """Whether ``commit`` is ``tip`` or one of its ancestors (``git merge-base --is-ancestor``)."""
    try:
        return tip == commit or bool(store.repo.descendant_of(tip, commit))
    except (pygit2.GitError, KeyError, ValueError):  # an object this repository does not have
        return False


def _build_and_publish(ctx: JobContext, store: Store, view: runstate.RunView) -> Refused | Wait | None:
    """Build the candidate on the target's tip, gate it, and move the target to it by CAS; rebuild if it moved."""
    run = view.run()
    tasks = view.tasks()
    order, refused = _custody(ctx, store, run, tasks)
    if refused is not None:
        return refused
    deliveries = [(task_id, delivered(tasks[task_id]).commit) for task_id in order]
    root = tasks[run.root_task_id] if run.root_task_id else None
    for attempt in range(1, MAX_PUBLISH_ATTEMPTS + 1):
        base = _tip(ctx, store, run.target)
        if base is None:
            return fail(ctx, store, "OBJECT_MISSING", f"the target branch {run.target} is gone", {})
        _report_unreviewed(ctx, store, run, base)
        chain = merge_chain(
            store,
            base,
            deliveries,
            message=integration_message({t: tasks[t].title for t in order}, ctx.run_id),
        )
        if chain.conflict is not None or chain.head is None:
            return _conflict(ctx, store, base, chain, tasks)
        candidate = chain.head
        _prepare(ctx, store, base, candidate, chain, order, attempt)
        refused = gate(ctx, store, run, root, candidate, base)
        if refused is not None:
            return refused
        published = _publish(ctx, store, run.target, base, candidate)
        if published is False:
            ctx.log(f"{run.target} moved while integrating; rebuilding the candidate (attempt {attempt})")
            continue
        return published if isinstance(published, Wait | Refused) else None
    return fail(
        ctx,
        store,
        "RUN_TARGET_CONTENDED",
        f"{run.target} kept moving: {MAX_PUBLISH_ATTEMPTS} candidates were rebuilt",
        {},
    )


def _custody(ctx: JobContext, store: Store, run: Run, tasks: dict[str, Task]) -> tuple[list[str], Refused | None]:
    """The deliveries' merge order (dependency order, ties by plan order), or the refusal of one whose refs, notes
    or evidence do not agree with the (authentic) state."""
    order = repair.merge_order(run.plan_order, tasks)
    frozen_before = _frozen_before_transitions(store, ctx.run_id)
    for task_id in order:
        commit = str(delivery.commit if (delivery := tasks[task_id].delivery) is not None else None)
        hashes = {run.policy_config_hash, *frozen_before.get((task_id, commit), ())}
        mismatch = custody.check_delivered(store, ctx.run_id, tasks[task_id], hashes)
        if mismatch is not None:
            return order, fail(
                ctx,
                store,
                "RUN_DELIVERY_MISMATCH",
                f"the delivery of {task_id} ({tasks[task_id].title}) does not hold together: {mismatch.why}",
                {"taskId": task_id, "why": mismatch.why},
            )
    return order, None


def _frozen_before_transitions(store: Store, run_id: str) -> dict[tuple[str, str], set[str]]:
    """(task id, delivery commit) -> the policy hashes it was proven under, for the deliveries frozen before a
    policy transition (the binding lists them): their evidence stays valid under the policy it was made under."""
    out: dict[tuple[str, str], set[str]] = {}
    for bound in transitions.binding(store, run_id).get("transitions", ()):
        for frozen in bound["delivered"]:
            out.setdefault((frozen["taskId"], frozen["commit"]), set()).add(frozen["configHash"])
    return out


def _publish(ctx: JobContext, store: Store, target: str, base: str, candidate: str) -> bool | Wait | Refused:
    """Step 4: move the target from ``base`` to ``candidate`` by CAS; False when it moved meanwhile.

    A checkout of the target is kept consistent as git's ``updateInstead`` keeps it for a push: a clean one is
    brought to the new tip (index and files) right after the CAS; a dirty one makes the run wait before the CAS
    (``RUN_TARGET_CHECKED_OUT_DIRTY``, naming the worktree and its files), with the candidate kept.
    """
    held = _people(ctx, store, base, candidate)
    if held is not None:
        return held
    target_ref = f"refs/heads/{target}"
    where = ctx.policy.remote
    if where is not None:
        return _publish_remote(ctx, store, where, target, base, candidate)
    # the check, the CAS and the checkouts' follow are one step among supervisors: another's check between this
    # CAS and this follow would read the half-moved checkout as a person's staged reversal and wait for nothing
    with file_lock(store.private_dir(), PUBLISH_LOCK, timeout=PUBLISH_LOCK_WAIT):
        checked_out, dirty = dirty_checkouts(store.common_dir, target_ref)
        if dirty:
            reason = (
                f"{target} is checked out with uncommitted changes ({shown_dirty(dirty)}); publishing would leave "
                "them looking like the integration reversed. Commit or stash them, then "
                f"'git agentops-run resume {ctx.run_id}' (the candidate {candidate[:12]} is kept)"
            )
            ctx.log(f"waiting: {reason}")
            return Wait("RUN_TARGET_CHECKED_OUT_DIRTY", reason)
        try:
            update_ref(store, target_ref, candidate, base, f"agentops: integrate run {ctx.run_id}")
        except RefConflict:
            return False
        ctx.fault("integration:moved")  # the branch moved, its checkouts not yet: a restart brings them
        _follow_local(ctx, store, target, base, candidate, checked_out)
    advance(
        ctx,
        store,
        kinds.INTEGRATION_PUBLISHED,
        f"{target} moved to {candidate[:12]}" + (f"; {len(checked_out)} checkout(s) updated" if checked_out else ""),
        status=IntegrationStatus.PUBLISHED,
        published_at=ctx.clock.now(),
    )
    return True


def _people(ctx: JobContext, store: Store, base: str, candidate: str) -> Wait | Refused | None:
    """``[review] people``: the candidate publishes once that many people approved it (their approvals join its
    reviews, so the receipt names them); a person's refusal fails the integration (``RUN_REVIEW_REFUSED``); until
    then the run waits for them (``RUN_REVIEW_PENDING``, held: the supervisor stays and applies their decisions)."""
    needed = ctx.policy.people
    if needed <= 0:
        return None
    state, found = people.verdict(store, ctx.run_id, base, candidate, needed)
    if state == "refused":
        who = found[0]
        return fail(
            ctx,
            store,
            "RUN_REVIEW_REFUSED",
            f"{who['principal']} refused candidate {candidate[:12]}" + (f": {who['reason']}" if who["reason"] else ""),
            {"principal": who["principal"], "decisionId": who["decisionId"]},
        )
    if state == "waiting":
        reason = (
            f"candidate {candidate[:12]} waits for {needed - len(found)} more approval(s) by people "
            f"('git agentops-run review {ctx.run_id}')"
        )
        ctx.log(f"waiting: {reason}")
        return Wait(people.PENDING, reason, held=True)
    integration = runstate.read(store, ctx.run_id).run().integration
    models = [r for r in (integration.reviews or ()) if not r.reviewer.startswith(people.PERSON)] if integration else []
    names = ", ".join(a["principal"] for a in found)
    advance(
        ctx, store, kinds.INTEGRATION_APPROVED, f"approved by {names}", reviews=[*models, *people.as_reviews(found)]
    )
    return None


def _follow_local(
    ctx: JobContext, store: Store, target: str, base: str, candidate: str, checked_out: list[Path] | None = None
) -> None:
    """Bring the checkouts of a local target the CAS moved from ``base`` to ``candidate`` up to it (index and files).

    Safe to repeat, as a restart after a crash between the CAS and this does: a checkout already at the candidate's
    tree is left as it is (two-way ``read-tree``), one changed since is refused by git and logged, never overwritten.
    """
    for worktree in checkouts_of(store.common_dir, f"refs/heads/{target}") if checked_out is None else checked_out:
        try:
            move_checkout(worktree, base, candidate)
        except AgentOpsError as exc:  # changed between the check and the CAS: git refused to overwrite anything
            ctx.log(
                f"{target} moved, but its checkout {worktree} could not follow: {exc.message}; commit or stash "
                f"there, then 'git read-tree -m -u {base[:12]} {candidate[:12]}'"
            )


def _publish_remote(ctx: JobContext, store: Store, remote: str, target: str, base: str, candidate: str) -> bool:
    """Step 4 on a remote: the receipt first (the server's pre-receive reads it among the incoming refs), then one
    atomic push of the target and the notes (:func:`.remote.publish`); False when the remote's target moved."""
    _add_receipt(ctx, store)
    if not publish(ctx, store, remote, target, base, candidate):  # the local target follows in there (or not)
        return False
    ctx.fault("integration:pushed")  # on the server, not recorded yet: a restart finds the candidate there
    advance(
        ctx,
        store,
        kinds.INTEGRATION_PUBLISHED,
        f"{remote}'s {target} moved to {candidate[:12]} (one atomic push with the receipt and the notes)",
        status=IntegrationStatus.PUBLISHED,
        published_at=ctx.clock.now(),
    )
    return True


def _report_unreviewed(ctx: JobContext, store: Store, run: Run, base: str) -> None:
    """Record the target commits since the run's base that nobody reviewed (no receipt): in the run log and,
    through the integration record, in the receipt. The candidate is still built on them."""
    found, rewritten = custody.unreviewed(store, run.base_commit, base)
    if not found and not rewritten:
        return
    shown = ", ".join(c[:12] for c in found[:5]) + (" ..." if len(found) > 5 else "")
    summary = f"{run.target} moved to {len(found)} commit(s) without a receipt since the run started: {shown}"
    if rewritten:
        summary = (
            f"{run.target}'s history was rewritten since the run started ({run.base_commit[:12]} is gone); " + summary
        )
    ctx.log(summary)
    advance(ctx, store, kinds.RUN_TARGET_UNREVIEWED, summary, unreviewed=found, target_rewritten=rewritten or None)


def _prepare(
    ctx: JobContext, store: Store, base: str, candidate: str, chain: ChainResult, order: list[str], attempt: int
) -> None:
    """Point the candidate ref at the new candidate and record step 1 (a candidate ref someone else moved is
    quarantined, not silently overwritten)."""
    steps = list(chain.steps)
    candidate_ref = runstate.candidate_ref(ctx.run_id)
    current = read_ref(store, candidate_ref)
    record = runstate.read(store, ctx.run_id).run().integration or Integration(IntegrationStatus.REQUESTED)
    if current is not None and current not in (record.candidate, record.prior_candidate):
        custody.quarantine(
            store, ctx.run_id, candidate_ref, current, None, "the candidate ref was moved by someone else"
        )
        current = None
    update_ref(store, candidate_ref, candidate, current, "agentops: integration candidate")
    advance(
        ctx,
        store,
        kinds.INTEGRATION_PREPARED,
        f"candidate {candidate[:12]} on {base[:12]}",
        status=IntegrationStatus.PREPARED,
        base=base,
        candidate=candidate,
        order=order,
        steps=steps,
        attempts=attempt,
    )


def _conflict(ctx: JobContext, store: Store, base: str, chain: ChainResult, tasks: dict[str, Task]) -> Refused:
    """``RUN_INTEGRATION_CONFLICT`` naming the delivery, the party it conflicts with and the paths; the repair task
    planned for it (:mod:`.repair`) is named too."""
    label, paths = chain.conflict or ("?", ())
    other = "the target branch"
    for step in chain.steps:  # which earlier delivery touched the conflicted paths
        if _changed(store, base, step.parents[1]) & set(paths):
            other = step.label
            break
    title = tasks[label].title if label in tasks else label
    onto = chain.steps[-1].commit if chain.steps else base
    return _refuse_conflict(
        ctx,
        store,
        label,
        onto,
        paths,
        f"the delivery of {other} ({tasks[other].title})" if other in tasks else f"the target at {base[:12]}",
        f"the delivery of {label} ({title}) conflicts with {other} in: {', '.join(paths)}",
        {"tasks": sorted([label, other]), "paths": list(paths)},
    )


def _refuse_conflict(
    ctx: JobContext,
    store: Store,
    task_id: str,
    onto: str,
    paths: Sequence[str],
    with_what: str,
    message: str,
    detail: dict[str, object],
    *,
    queue_position: int | None = None,
) -> Refused:
    """Plan the repair task of a conflict (:func:`.repair.plan`), then refuse the finalize naming it."""
    planned = repair.plan(ctx, store, task_id, onto, paths, with_what, queue_position=queue_position)
    if planned is not None:
        message += (
            f"; repair task {planned.id} was planned: its worker resolves the conflict in a worktree at "
            f"{onto[:12]} with the delivery being merged; finalize again once it is delivered"
        )
        detail = {**detail, "repairTask": planned.id}
    else:
        message += f"; no repair task was planned (more than {repair.MAX_REPAIR_DEPTH} repairs, or no delivery)"
    return fail(ctx, store, "RUN_INTEGRATION_CONFLICT", message, detail)


def _changed(store: Store, base: str, commit: str) -> set[str]:
    """Paths that differ between two commits (both names of a rename: no rename detection)."""
    diff = store.resolve_commit(base).tree.diff_to_tree(store.resolve_commit(commit).tree)
    paths: set[str] = set()
    for delta in diff.deltas:
        paths.update(p for p in (delta.old_file.path, delta.new_file.path) if p)
    return paths


def _add_receipt(ctx: JobContext, store: Store) -> str:
    """Step 5: the receipt note on the candidate (:func:`.receipting.add_receipt`)."""
    return receipting.add_receipt(store, ctx.run_id, ctx.policy.config_hash, ctx.clock.now())


def _complete(ctx: JobContext, store: Store) -> tuple[str, ResponseDoc]:
    """Step 6: the run complete and the finalize request recorded; returns the candidate and the response, which
    the loop writes to the coordinator's mailbox before it removes the checkouts (:func:`clean_up`)."""
    view = runstate.read(store, ctx.run_id)
    run = view.run()
    integration = run.integration or Integration(IntegrationStatus.REQUESTED)
    pending = integration.request
    candidate = integration.candidate or ""
    response = mailbox.response(
        pending.request_id if pending is not None else None,
        pending.raw_digest if pending is not None else ZERO_DIGEST,
        "RUN_COMPLETE",
        f"{run.target} is at {candidate[:12]}, receipted",
        {"commit": integration.candidate, "receiptDigest": integration.receipt_digest},
    )

    def finish(change: Change, view: runstate.RunView) -> None:
        current = view.run()
        done = (current.integration or integration).advanced(status=IntegrationStatus.COMPLETE)
        runstate.put_run(change, replace(current, status=RunStatus.COMPLETE, status_reason=None, integration=done))
        for worker in view.workers():
            if worker.status is not WorkerStatus.DELIVERED:
                status = WorkerStatus.DELIVERED if worker.role is Role.COORDINATOR else worker.status
                runstate.put_worker(change, replace(worker, status=status, process=None))
        if current.root_task_id:
            taskbook.put(change, replace(view.task(current.root_task_id), status=TaskStatus.DELIVERED))
        if pending is not None and pending.request_id:
            runstate.put_request_record(
                change,
                RequestRecord(
                    pending.request_id,
                    pending.request_digest,
                    current.coordinator_id,
                    pending.generation,
                    "finalize",
                    response,
                    ctx.clock.now(),
                ),
            )

    runstate.mutate(
        runstate.journal(store, ctx.run_id),
        finish,
        Event(
            kinds.RUN_COMPLETE,
            f"run complete: {run.target} at {candidate[:12]}",
            {"candidate": integration.candidate, "receiptDigest": integration.receipt_digest},
        ),
    )
    return candidate, response


def clean_up(store: Store, ctx: JobContext, run: Run, workers: list[Worker]) -> None:
    """After the run completed and the coordinator was answered: remove every worker checkout (branches and
    delivery refs stay), the run's worktree directory when empty, and its clean-checkout slots."""
    for worker in workers:
        with contextlib.suppress(AgentOpsError):  # not saved: the worktree is kept (and the log says why)
            remove_with_salvage(store, ctx.run_id, worker, now=int(ctx.clock.now()), log=ctx.log)
    root = Path(run.repository) / ctx.policy.worktree_root / ctx.run_id
    if root.is_dir() and not any(root.iterdir()):
        shutil.rmtree(root, ignore_errors=True)
    remove_slots(ctx.environ, store, ctx.run_id)
