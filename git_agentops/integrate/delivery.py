"""Handoff -> frozen delivery: a worker's work counts only as the exact commit that passed verification.

When a child worker hands off, the supervisor

1. checks the checkout is clean and committed (``RUN_DELIVERY_DIRTY``); a worker that committed nothing may
   deliver "no change" only by naming existing ``sourceFiles`` (``RUN_NO_CHANGE_FILES``);
2. marks the worker ``handing-off`` and stops its process group, confirming it is dead -- from here on nothing
   can change the checkout behind the supervisor's back;
3. re-checks HEAD, cleanliness and the contract (``RUN_DELIVERY_CHANGED``);
4. runs verification on that commit with the run's *bound* policy (not whatever policy file the worker's branch
   holds), recording evidence notes (the evidence cache by tree applies);
5. re-checks HEAD and cleanliness once more;
6. creates ``refs/agentops/runs/<run>/deliveries/<task>`` -> that commit, **create-only**: a delivery is never
   moved; appends a delivery record (run, task, worker, generation, delivery digest, contract, evidence digests)
   to the commit's note under ``refs/notes/agentops/deliveries``; and marks the task delivered in the same state
   commit as the request's idempotency record.

A crash between the ref (6) and the state commit leaves an orphan delivery ref; the next supervisor adopts it when
the delivery note names this run and task (:func:`adopt_orphans`). A failed verification restarts the worker
with a new generation and the failure as its diagnostic; the same failure twice without progress blocks it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..canonical import canonical_bytes, digest
from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.checkout import Head, head_and_changes
from ..gitstore.journal import Change, Event
from ..gitstore.notes import DELIVERIES_REF, Notes
from ..gitstore.refs import create_ref, read_ref
from ..gitstore.repo import Store
from ..model.run import WorkerStatus
from ..model.task import Task, TaskStatus
from ..protocol import mailbox
from ..runs import state as runstate
from ..runs import tasks as taskbook
from ..schema import documents

if TYPE_CHECKING:
    from ..model.run import Worker
    from ..supervisor.loop import Supervisor


def delivery_digest(run_id: str, worker_id: str, generation: int, contract: str, head: str) -> str:
    return digest(
        {"runId": run_id, "workerId": worker_id, "generation": generation, "contract": contract, "head": head}
    )


def _missing_files(worktree: Path, commit: str, paths: list[str]) -> list[str]:
    done = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", "-z", commit, "--", *paths],
        cwd=worktree,
        capture_output=True,
        timeout=60,
        check=False,
    )
    present = {p.decode(errors="replace") for p in done.stdout.split(b"\0") if p}
    return [p for p in paths if p not in present and not any(x.startswith(p.rstrip("/") + "/") for x in present)]


def accept_handoff(
    sup: Supervisor, worker: Worker, request: dict[str, Any], request_digest: str, raw_digest: str
) -> None:
    """Checks, stop, then hand the slow part (verification) to a job. Raises coded refusals."""
    from ..supervisor.instructions import worker_contract

    worktree = Path(worker.worktree)
    head, changes = head_and_changes(worktree)
    if head is None:
        raise AgentOpsError("RUN_DELIVERY_DIRTY", "the worktree has no commit")
    if changes:
        raise AgentOpsError(
            "RUN_DELIVERY_DIRTY",
            f"commit or clean first; uncommitted: {', '.join(changes[:10])}",
            details={"paths": changes},
        )
    source_files = list(request.get("sourceFiles") or [])
    if head == worker.base:
        if not source_files:
            raise AgentOpsError(
                "RUN_NO_CHANGE_FILES",
                "nothing was committed since the task started: a no-change delivery must name the "
                "existing sourceFiles that already satisfy it",
            )
        missing = _missing_files(worktree, head, source_files)
        if missing:
            raise AgentOpsError("RUN_NO_CHANGE_FILES", f"sourceFiles not in the commit: {', '.join(missing)}")
    contract = worker_contract(sup.state.run(), worker, sup.state.tasks())
    sup._set_worker(
        worker.worker_id,
        status=WorkerStatus.HANDING_OFF,
        event="WORKER_HANDING_OFF",
        summary=f"{worker.worker_id} hands off {head[:12]}",
    )
    sup._kill(worker)
    sup._set_worker(
        worker.worker_id,
        process=None,
        event="WORKER_STOPPED_FOR_HANDOFF",
        summary=f"{worker.worker_id} generation {worker.generation} stopped for its handoff",
    )
    sup.submit(
        worker.worker_id,
        lambda store: deliver(
            sup,
            store,
            worker=worker,
            request=request,
            request_digest=request_digest,
            raw_digest=raw_digest,
            head=head,
            contract=contract,
            source_files=source_files,
        ),
    )


def _failure(
    worker: Worker,
    request: dict[str, Any],
    request_digest: str,
    raw_digest: str,
    code: str,
    message: str,
    detail: dict[str, Any],
    head: str | None,
) -> dict[str, Any]:
    return {
        "action": "fail",
        "code": code,
        "message": message,
        "detail": detail,
        "head": head,
        "request": request,
        "requestDigest": request_digest,
        "rawDigest": raw_digest,
    }


def _failed_commands(records: list[dict[str, Any]]) -> list[list[str]]:
    out = []
    for r in records:
        if r["required"] and not r["passed"]:
            why = (
                "timeout"
                if r["timedOut"]
                else "spawn"
                if r["spawnError"]
                else "parse"
                if r["parseError"]
                else "tests"
                if r["tests"] and (r["tests"]["failed"] or r["tests"]["errors"]) and r["exitCode"] == 0
                else f"exit:{r['exitCode'] if r['exitCode'] is not None else 'signal ' + str(r['signal'])}"
            )
            out.append([r["commandId"], why])
    return sorted(out)


def deliver(
    sup: Supervisor,
    store: Store,
    *,
    worker: Worker,
    request: dict[str, Any],
    request_digest: str,
    raw_digest: str,
    head: str,
    contract: str,
    source_files: list[str],
) -> dict[str, Any]:
    """Job: verify the stopped worker's commit and freeze it. Returns what the loop must do next."""
    from ..supervisor.instructions import worker_contract
    from ..verify.core import verify_checkout
    from ..verify.evidence import EvidenceStore

    worktree = Path(worker.worktree)
    view = runstate.read(store, sup.run_id)
    now_head, changes = head_and_changes(worktree)
    if now_head != head or changes or worker_contract(view.run(), worker, view.tasks()) != contract:
        why = "HEAD moved" if now_head != head else ("the checkout changed" if changes else "the contract changed")
        return _failure(
            worker,
            request,
            request_digest,
            raw_digest,
            "RUN_DELIVERY_CHANGED",
            f"{why} during the handoff; take a new handoff",
            {"why": why},
            now_head,
        )
    task = view.task(worker.task_id or "")
    tree = subprocess.run(
        ["git", "rev-parse", f"{head}^{{tree}}"], cwd=worktree, capture_output=True, text=True, timeout=60, check=False
    ).stdout.strip()
    outcome = verify_checkout(
        EvidenceStore(store),
        worktree=worktree,
        policy=sup.policy,
        trust=sup.trust,
        environ=sup.environ,
        clock=sup.clock,
        task=task,
        known_head=Head(head, tree, None),
    )
    after, changes = head_and_changes(worktree)
    if after != head or changes:
        return _failure(
            worker,
            request,
            request_digest,
            raw_digest,
            "RUN_DELIVERY_CHANGED",
            "the checkout changed during verification",
            {"why": "changed during verification"},
            after,
        )
    if not outcome.passed:
        failed = outcome.failures()
        lines = []
        for record in failed:
            lines.append(
                f"- {record['commandId']}: exit {record['exitCode']}, "
                f"{'timed out, ' if record['timedOut'] else ''}{record['parseError'] or ''}"
            )
            if record["tail"]:
                lines.append(
                    "  last output:\n" + "\n".join("    " + x for x in record["tail"].rstrip()[-1500:].splitlines())
                )
        return _failure(
            worker,
            request,
            request_digest,
            raw_digest,
            "RUN_VERIFICATION_FAILED",
            "verification failed on " + head[:12] + ":\n" + "\n".join(lines),
            {"failed": _failed_commands(outcome.records)},
            head,
        )
    task_id = task.id
    ref = runstate.delivery_ref(sup.run_id, task_id)
    delivered_digest = delivery_digest(sup.run_id, worker.worker_id, worker.generation, contract, head)
    evidence = [digest(r) for r in outcome.records]
    note = {
        "runId": sup.run_id,
        "taskId": task_id,
        "workerId": worker.worker_id,
        "generation": worker.generation,
        "sourceCommit": head,
        "deliveryDigest": delivered_digest,
        "contractHash": contract,
        "evidence": evidence,
        "noChange": head == worker.base,
        "sourceFiles": source_files,
    }
    sup.fault("delivery:verified")
    # the record first, then the frozen ref: a crash between the two leaves a ref the next supervisor adopts
    Notes(store, DELIVERIES_REF).append(
        {head: canonical_bytes(note) + b"\n"}, message=f"Delivery of {task_id} by {worker.worker_id}"
    )
    sup.fault("delivery:noted")
    if not create_ref(store, ref, head, f"agentops: frozen delivery of {task_id}") and read_ref(store, ref) != head:
        return _failure(
            worker,
            request,
            request_digest,
            raw_digest,
            "RUN_DELIVERY_CHANGED",
            f"{ref} already points at another commit; deliveries are never moved",
            {"why": "ref"},
            head,
        )
    sup.fault("delivery:frozen")
    answer = mailbox.response(
        request["requestId"],
        raw_digest,
        "RUN_WORKER_DELIVERED",
        f"{task_id} delivered as {head[:12]}",
        {"taskId": task_id, "sourceCommit": head, "deliveryDigest": delivered_digest},
    )

    def freeze(change: Change, view: runstate.RunView) -> None:
        _mark_delivered(change, view.task(task_id), note)
        runstate.put_worker(
            change, replace(view.worker(worker.worker_id), status=WorkerStatus.DELIVERED, process=None, diagnostic=None)
        )
        change.put_json(
            runstate.request_path(request["requestId"]),
            {
                "requestId": request["requestId"],
                "requestDigest": request_digest,
                "workerId": worker.worker_id,
                "generation": worker.generation,
                "action": "handoff",
                "response": answer,
                "at": sup.clock.now(),
            },
            schema="request-record",
        )

    runstate.journal(store, sup.run_id).mutate(
        lambda change: freeze(change, runstate.RunView(change)),
        Event(
            "TASK_DELIVERED",
            f"{task_id} delivered by {worker.worker_id} as {head[:12]}",
            {
                "taskId": task_id,
                "workerId": worker.worker_id,
                "generation": worker.generation,
                "commit": head,
                "deliveryDigest": delivered_digest,
            },
        ),
    )
    try:
        mailbox.write_response(worktree, answer)
    except AgentOpsError:
        pass
    return {"action": "ok"}


def adopt_orphans(store: Store, run_id: str, clock: Clock) -> list[str]:
    """Mark delivered the tasks whose delivery ref and note exist but whose state commit was lost in a crash."""
    view = runstate.read(store, run_id)
    adopted: list[str] = []
    notes = Notes(store, DELIVERIES_REF)
    for task in view.tasks().values():
        if task.status is TaskStatus.DELIVERED or task.parent is None:
            continue
        commit = read_ref(store, runstate.delivery_ref(run_id, task.id))
        if commit is None:
            continue
        records = []
        for line in (notes.read(commit) or b"").splitlines():
            try:
                records.append(documents.parse_json(line))
            except AgentOpsError:
                continue
        record = next(
            (
                r
                for r in reversed(records)
                if isinstance(r, dict)
                and r.get("runId") == run_id
                and r.get("taskId") == task.id
                and r.get("sourceCommit") == commit
            ),
            None,
        )
        if record is None:
            continue

        def adopt(change: Change, task_id: str = task.id, record: dict[str, Any] = record) -> None:
            v = runstate.RunView(change)
            _mark_delivered(change, v.task(task_id), record)
            worker_id = record["workerId"]
            if f"{worker_id}.json" in v.view.list("workers"):
                runstate.put_worker(change, replace(v.worker(worker_id), status=WorkerStatus.DELIVERED, process=None))

        runstate.journal(store, run_id).mutate(
            adopt,
            Event(
                "TASK_DELIVERY_ADOPTED",
                f"{task.id} delivery adopted after a crash",
                {"taskId": task.id, "commit": commit},
            ),
        )
        adopted.append(task.id)
    return adopted


def _mark_delivered(change: Change, task: Task, note: Mapping[str, Any]) -> None:
    """Record on the task the delivery its delivery note describes (the live path and adoption share it)."""
    delivery = {
        "commit": note["sourceCommit"],
        "digest": note["deliveryDigest"],
        "workerId": note["workerId"],
        "generation": note["generation"],
        "evidence": note["evidence"],
        "noChange": note["noChange"],
    }
    taskbook.put(change, replace(task, status=TaskStatus.DELIVERED, extra={**task.extra, "delivery": delivery}))
