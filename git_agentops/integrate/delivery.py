"""Handoff -> frozen delivery: a worker's work counts only as the exact commit that passed verification.

A handoff is a pipeline that only goes downward:

1. **check** (loop thread, :func:`check_handoff`) -- the checkout is committed (``RUN_DELIVERY_DIRTY`` for a
   tracked change or an untracked file that is not a tool's artifact such as ``__pycache__/``); a worker that
   committed nothing may deliver "no change" only by naming existing ``sourceFiles`` (``RUN_NO_CHANGE_FILES``);
2. **stop** (the supervisor) -- the worker is marked ``handing-off`` and its process group stopped and confirmed
   dead;
3. **re-check** (:func:`deliver`, in a job, like everything below) -- HEAD and the contract are as they were
   (``RUN_DELIVERY_CHANGED``); the diff carries no secret -- secret-shaped, or one the supervisor holds, in any
   encoding (:mod:`.secrets`) -- and changes no protected path -- the policy, ``allowed_signers``, CI, hooks
   (:mod:`.guards`, ``RUN_DELIVERY_PROTECTED_PATH``);
4. **verify** -- the run's *bound* policy (not whatever policy file the worker's branch holds) on that commit, in
   the supervisor's own clean checkout of it (:mod:`git_agentops.verify.proof`): nothing the agent left in its
   worktree -- ignored files, ``--skip-worktree`` entries, a daemon swapping files -- can reach the commands. With
   ``[run] squash`` the commit is first squashed onto the task's base (:mod:`.squash`), and the squash is what is
   verified, recorded and frozen below;
5. **record** -- the delivery record on the commit's note under ``refs/notes/agentops/deliveries``, then
   ``refs/agentops/runs/<run>/deliveries/<task>`` -> the commit, **create-only** (a delivery is never moved), then
   the task delivered in the same state commit as the request's idempotency record;
6. **answer** -- ``RUN_WORKER_DELIVERED``, returned to the supervisor loop, which writes it to the worker's mailbox.

A crash between the note and the state commit leaves an orphan delivery ref; the next supervisor adopts it when
the delivery note authenticates and its commit verifies again (:func:`adopt_orphans`); a foreign delivery ref is
quarantined, never obeyed and never in the honest delivery's way (:mod:`.custody`). A failed step returns a
:class:`~git_agentops.runs.jobs.Refused`: the supervisor records it as the request's answer and restarts the
worker with a new generation and the failure as its diagnostic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pygit2

from .. import eventkinds as kinds
from ..canonical import canonical_bytes, digest
from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.checkout import admin_dir, head_and_changes
from ..gitstore.journal import Change, Event
from ..gitstore.keys import keyring
from ..gitstore.notes import DELIVERIES_REF, Notes
from ..gitstore.quarantine import reader_alternates
from ..gitstore.refs import create_ref, read_ref
from ..gitstore.repo import Store
from ..model.delivery import DELIVERY_NOTE, CommitId, Delivery, Digest
from ..model.request import RequestRecord, ResponseDoc
from ..model.run import Worker, WorkerStatus, worker_contract
from ..model.task import Task, TaskStatus
from ..protocol import mailbox
from ..runs import state as runstate
from ..runs import tasks as taskbook
from ..runs.jobs import Answered, Delivered, JobContext, Refused, Request
from ..verify.core import Outcome
from ..verify.failing import failed_commands
from ..verify.proof import prove
from ..verify.workspaces import mirror_branch
from . import custody
from .custody import seal_note
from .guards import protected_refusal
from .secrets import secrets_refusal
from .squash import mirror_evidence, squash


@dataclass(frozen=True, slots=True)
class Handoff:
    """An accepted handoff: who, which request, the commit it names and the contract it was made under."""

    worker: Worker
    request: Request
    head: str
    contract: str
    source_files: tuple[str, ...]


def delivery_digest(run_id: str, worker_id: str, generation: int, contract: str, head: CommitId) -> Digest:
    """What a delivery is: this run, this worker generation, this contract, this commit."""
    return Digest(
        digest({"runId": run_id, "workerId": worker_id, "generation": generation, "contract": contract, "head": head})
    )


# -- 1. check ----------------------------------------------------------------------------------------------------------


def check_handoff(worktree: Path, *, base: str | None, source_files: Sequence[str]) -> str:
    """The committed HEAD of ``worktree``; ``RUN_DELIVERY_DIRTY``, ``RUN_NO_CHANGE_FILES``.

    Untracked artifacts of the project's tools (:func:`~git_agentops.gitstore.checkout.is_artifact`) are not
    dirt: they are in no commit, and verification happens in a clean checkout of the commit anyway.
    """
    head, changes = head_and_changes(worktree, skip_artifacts=True)
    if head is None:
        raise AgentOpsError("RUN_DELIVERY_DIRTY", "the worktree has no commit")
    if changes:
        raise AgentOpsError(
            "RUN_DELIVERY_DIRTY",
            f"commit or clean first; uncommitted: {', '.join(changes[:10])}",
            details={"paths": changes},
        )
    if head == base:
        if not source_files:
            raise AgentOpsError(
                "RUN_NO_CHANGE_FILES",
                "nothing was committed since the task started: a no-change delivery must name the "
                "existing sourceFiles that already satisfy it",
            )
        missing = _missing_files(worktree, head, source_files)
        if missing:
            raise AgentOpsError("RUN_NO_CHANGE_FILES", f"sourceFiles not in the commit: {', '.join(missing)}")
    return head


def _missing_files(worktree: Path, commit: str, paths: Sequence[str]) -> list[str]:
    """The paths (files, or directories holding files) that ``commit``'s tree does not have."""
    repo = pygit2.Repository(str(worktree))
    quarantine = reader_alternates(admin_dir(worktree)).get("GIT_ALTERNATE_OBJECT_DIRECTORIES")
    if quarantine:  # its new objects are still in its quarantine: read them there (the commit is ingested later)
        repo.odb.add_disk_alternate(quarantine)
    tree = repo.revparse_single(commit).peel(pygit2.Tree)
    missing = []
    for path in paths:
        try:
            tree[path.rstrip("/")]
        except (KeyError, ValueError):  # absent, or not a path a tree can hold
            missing.append(path)
    return missing


# -- 3.-6. the job ---------------------------------------------------------------------------------------------------


def deliver(ctx: JobContext, store: Store, handoff: Handoff) -> Delivered | Refused:
    """Job: verify the stopped worker's commit and freeze it (see the module docstring)."""
    worktree = Path(handoff.worker.worktree)
    view = runstate.read(store, ctx.run_id)
    refused = _as_handed_off(handoff, worktree, worker_contract(view.run(), handoff.worker, view.tasks()))
    if refused is not None:
        return refused
    if mirror_branch(store, worktree, handoff.worker.branch) != handoff.head:  # its objects, out of its quarantine
        message = f"{handoff.head[:12]}'s objects are missing or do not hash to their names in the worker's store"
        return _refusal(handoff, "OBJECT_MISSING", message + "; commit again and hand off", {}, handoff.head)
    base = handoff.worker.base or view.run().base_commit
    refused = secrets_refusal(store, ctx.policy, handoff.request, base=base, head=handoff.head, held=ctx.held)
    if refused is not None:
        return refused
    target_tip = read_ref(store, f"refs/heads/{view.run().target}")
    refused = protected_refusal(
        store,
        ctx.policy,
        handoff.request,
        base=base,
        head=handoff.head,
        target_tip=target_tip,
        bound_policy=ctx.policy_file,
    )
    if refused is not None:
        return refused
    task = view.task(handoff.worker.task_id or "")
    squashed = None
    try:
        if ctx.policy.squash:  # the squash is what is verified, noted and frozen (see .squash for why first)
            squashed = squash(store, base=base, head=handoff.head, task_id=task.id)
        commit = squashed.commit if squashed is not None else handoff.head
        outcome = prove(ctx, store, slot=handoff.worker.worker_id, commit=commit, task=task)
    except AgentOpsError as exc:  # the environment is wrong (VERIFY_ENV_OUTSIDE...): say so, as the answer
        return _refusal(
            handoff, exc.code, f"{handoff.head[:12]} could not be verified: {exc.message}", {}, handoff.head
        )
    if squashed is not None:
        mirror_evidence(store, squashed, outcome.records)
    refused = _verification_refusal(handoff, outcome)
    if refused is not None:
        return refused
    delivery = _delivery(ctx.run_id, handoff, outcome, CommitId(commit))
    note = _delivery_note(store, ctx.run_id, task.id, handoff, delivery)
    ctx.fault("delivery:verified")
    # the record first, then the frozen ref: a crash between the two leaves a ref the next supervisor adopts
    Notes(store, DELIVERIES_REF).append(
        {commit: canonical_bytes(note) + b"\n"}, message=f"Delivery of {task.id} by {handoff.worker.worker_id}"
    )
    ctx.fault("delivery:noted")
    refused = _freeze(store, ctx.run_id, task.id, handoff, commit)
    if refused is not None:
        return refused
    ctx.fault("delivery:frozen")
    response = _mark_delivered(ctx, store, handoff, task.id, delivery)
    return Delivered(task.id, commit, Answered(response))  # the loop writes it to the worker's mailbox


def _refusal(handoff: Handoff, code: str, message: str, detail: Mapping[str, object], head: str | None) -> Refused:
    return Refused(AgentOpsError(code, message), handoff.request, dict(detail), head)


def _as_handed_off(handoff: Handoff, worktree: Path, contract: str) -> Refused | None:
    """``RUN_DELIVERY_CHANGED`` when HEAD, the checkout or the contract is not what the handoff named."""
    now_head, changes = head_and_changes(worktree, skip_artifacts=True)
    if now_head == handoff.head and not changes and contract == handoff.contract:
        return None
    why = "HEAD moved" if now_head != handoff.head else ("the checkout changed" if changes else "the contract changed")
    return _refusal(
        handoff, "RUN_DELIVERY_CHANGED", f"{why} during the handoff; take a new handoff", {"why": why}, now_head
    )


def _verification_refusal(handoff: Handoff, outcome: Outcome) -> Refused | None:
    """``RUN_VERIFICATION_FAILED`` naming each failed command and the end of its output."""
    if outcome.passed:
        return None
    lines = []
    for record in outcome.failures():
        lines.append(
            f"- {record.command_id}: exit {record.exit_code}, "
            f"{'timed out, ' if record.timed_out else ''}{record.parse_error or ''}"
        )
        if record.tail:
            lines.append("  last output:\n" + "\n".join("    " + x for x in record.tail.rstrip()[-1500:].splitlines()))
    return _refusal(
        handoff,
        "RUN_VERIFICATION_FAILED",
        "verification failed on " + handoff.head[:12] + ":\n" + "\n".join(lines),
        {"failed": failed_commands(outcome.records)},
        handoff.head,
    )


def _delivery(run_id: str, handoff: Handoff, outcome: Outcome, commit: CommitId) -> Delivery:
    """The delivery of ``commit`` (the handed-off commit, or its squash: then ``squashed_from`` names the
    handed-off one)."""
    worker = handoff.worker
    return Delivery(
        commit=commit,
        digest=delivery_digest(run_id, worker.worker_id, worker.generation, handoff.contract, commit),
        worker_id=worker.worker_id,
        generation=worker.generation,
        evidence=tuple(Digest(r.digest) for r in outcome.records),
        no_change=handoff.head == worker.base,
        squashed_from=CommitId(handoff.head) if commit != handoff.head else None,
    )


def _delivery_note(store: Store, run_id: str, task_id: str, handoff: Handoff, delivery: Delivery) -> dict[str, Any]:
    """The sealed delivery note: the delivery in the note's spelling, with the run, task, contract and source
    files it was delivered under."""
    record: dict[str, object] = {
        "runId": run_id,
        "taskId": task_id,
        "contractHash": handoff.contract,
        "sourceFiles": list(handoff.source_files),
        **DELIVERY_NOTE.dump(delivery),
    }
    return seal_note(record, keyring(store.private_dir()))


def _freeze(store: Store, run_id: str, task_id: str, handoff: Handoff, commit: str) -> Refused | None:
    """Create the frozen delivery ref to ``commit``, create-only.

    A ref already there is an earlier delivery of this task only if an authentic delivery note says so
    (``RUN_DELIVERY_CHANGED``: deliveries are never moved); anything else is someone else's -- a worker that
    created its neighbour's delivery ref to block it -- and is quarantined (:func:`custody.quarantine`) so the
    honest delivery goes on.
    """
    ref = runstate.delivery_ref(run_id, task_id)
    for _ in range(3):
        if create_ref(store, ref, commit, f"agentops: frozen delivery of {task_id}"):
            return None
        existing = read_ref(store, ref)
        if existing == commit or existing is None:
            continue
        if custody.note_for(store, existing, run_id, task_id) is not None:
            return _refusal(
                handoff,
                "RUN_DELIVERY_CHANGED",
                f"{ref} already points at another delivery of this task; deliveries are never moved",
                {"why": "ref"},
                handoff.head,
            )
        if custody.quarantine(store, run_id, ref, existing, commit, "created by someone else before the delivery"):
            return None
    return _refusal(handoff, "RUN_DELIVERY_CHANGED", f"{ref} kept changing; take a new handoff", {"why": "ref"}, None)


def _mark_delivered(ctx: JobContext, store: Store, handoff: Handoff, task_id: str, delivery: Delivery) -> ResponseDoc:
    """The state commit: task delivered, worker delivered, the request's record; returns the response."""
    worker_id, commit = handoff.worker.worker_id, delivery.commit
    squashed = f" (the squash of {handoff.head[:12]})" if commit != handoff.head else ""
    response = mailbox.response(
        handoff.request.request_id,
        handoff.request.raw_digest,
        "RUN_WORKER_DELIVERED",
        f"{task_id} delivered as {commit[:12]}{squashed}",
        {"taskId": task_id, "sourceCommit": commit, "deliveryDigest": delivery.digest},
    )

    def freeze(change: Change, view: runstate.RunView) -> None:
        mark_task_delivered(change, view.task(task_id), delivery)
        runstate.put_worker(
            change, replace(view.worker(worker_id), status=WorkerStatus.DELIVERED, process=None, diagnostic=None)
        )
        runstate.put_request_record(
            change,
            RequestRecord(
                handoff.request.request_id,
                handoff.request.digest,
                worker_id,
                handoff.worker.generation,
                "handoff",
                response,
                ctx.clock.now(),
            ),
        )

    runstate.mutate(
        runstate.journal(store, ctx.run_id),
        freeze,
        Event(
            kinds.TASK_DELIVERED,
            f"{task_id} delivered by {worker_id} as {commit[:12]}{squashed}",
            {
                "taskId": task_id,
                "workerId": worker_id,
                "generation": handoff.worker.generation,
                "commit": commit,
                "deliveryDigest": delivery.digest,
                **({"squashedFrom": handoff.head} if squashed else {}),
            },
        ),
    )
    return response


def mark_task_delivered(change: Change, task: Task, delivery: Delivery) -> None:
    """Record ``delivery`` on the task (the live path and adoption share it)."""
    taskbook.put(change, replace(task, status=TaskStatus.DELIVERED, delivery=delivery))


# -- after a crash ---------------------------------------------------------------------------------------------------


Reverify = Callable[[Store, Task, Delivery], "str | None"]
"""``reverify(store, task, delivery)``: None when the delivered commit passes verification again, else why not."""


def adopt_orphans(store: Store, run_id: str, clock: Clock, *, reverify: Reverify | None = None) -> list[str]:
    """Mark delivered the tasks whose delivery ref and note exist but whose state commit was lost in a crash.

    An orphan is adopted only when its delivery note authenticates and its commit passes verification again
    (``reverify``: the supervisor's own, in a clean checkout, where authentic evidence of the same tree is
    reused; without it, the authenticated evidence the note names is checked). A ref without an authentic note, or
    whose commit does not verify, is quarantined and reported; the task is verified afresh at its next handoff.
    """
    view = runstate.read(store, run_id)
    run = view.run()
    adopted: list[str] = []
    for task in view.tasks().values():
        if task.status is TaskStatus.DELIVERED or task.parent is None:
            continue
        ref = runstate.delivery_ref(run_id, task.id)
        commit = read_ref(store, ref)
        if commit is None:
            continue
        note = custody.note_for(store, commit, run_id, task.id)
        found = Delivery.from_note(note) if note is not None else None
        why = "no authentic delivery note" if found is None else None
        if found is not None:
            why = (
                reverify(store, task, found)
                if reverify is not None
                else custody.check_evidence(store, found.commit, list(found.evidence), {run.policy_config_hash})
            )
        if why is not None or found is None:
            custody.quarantine(store, run_id, ref, commit, None, f"an orphaned delivery that was not adopted: {why}")
            continue

        def adopt(change: Change, view: runstate.RunView, task_id: str = task.id, found: Delivery = found) -> None:
            mark_task_delivered(change, view.task(task_id), found)
            worker_id = found.worker_id
            if f"{worker_id}.json" in view.view.list("workers"):
                runstate.put_worker(
                    change, replace(view.worker(worker_id), status=WorkerStatus.DELIVERED, process=None)
                )

        runstate.mutate(
            runstate.journal(store, run_id),
            adopt,
            Event(
                kinds.TASK_DELIVERY_ADOPTED,
                f"{task.id} delivery adopted after a crash, verified again",
                {"taskId": task.id, "commit": commit},
            ),
        )
        adopted.append(task.id)
    return adopted


def reverifier(ctx: JobContext) -> Reverify:
    """The supervisor's re-verification of an orphaned delivery: :func:`prove` in the delivering worker's slot."""

    def reverify(store: Store, task: Task, delivery: Delivery) -> str | None:
        try:
            outcome = prove(ctx, store, slot=delivery.worker_id, commit=delivery.commit, task=task)
        except AgentOpsError as exc:
            return f"{exc.code}: {exc.message}"
        return None if outcome.passed else "it fails verification"

    return reverify
