"""Integration: from every frozen delivery to the target branch, verified, reviewed, published once, receipted.

When the coordinator asks to ``finalize`` (``RUN_DELIVERIES_PENDING`` until every child task is delivered), the
supervisor stops the writers and runs a journaled transaction in a job:

1. **prepared** -- merge every frozen delivery, in dependency order with ties broken by plan order, into the
   target's current tip, in memory, one merge commit per delivery; ``refs/agentops/runs/<run>/candidate`` -> the
   last one. A conflict is ``RUN_INTEGRATION_CONFLICT`` naming both tasks and the paths;
2. **verified** -- the policy's commands on a temporary detached checkout of the candidate (the evidence cache by
   tree id applies, so a candidate whose tree was already verified costs nothing);
3. **reviewed** -- the required reviewers judge it; a blocking finding is ``RUN_REVIEW_BLOCKED``;
4. **published** -- compare-and-swap of ``refs/heads/<target>`` from the base to the candidate; if the target
   moved meanwhile, the candidate is rebuilt on the new tip and re-verified (at most three times, then
   ``RUN_TARGET_CONTENDED``) -- never a force;
5. **receipted** -- the sealed, signed receipt is added as a note on the candidate (create-only);
6. **complete** -- the run is complete and its worktrees removed (branches and delivery refs stay).

Each step is recorded in ``run.json`` before the next starts. After a crash the next supervisor rolls forward
from the record: the target moves at most once (publishing is a CAS from the recorded base, and a candidate that
is already in the target's history counts as published), and once resumed a receipt exists exactly when the
target moved. A failure before publishing restarts the coordinator with the failure as its diagnostic.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from .. import __version__
from ..canonical import sha256_hex
from ..errors import AgentOpsError
from ..gitstore.checkout import Head
from ..gitstore.journal import Change, Event
from ..gitstore.notes import RECEIPTS_REF, Notes
from ..gitstore.refnames import RefConflict
from ..gitstore.refs import read_ref, update_ref
from ..gitstore.repo import Store
from ..gitstore.worktree import add_detached_worktree, remove_detached_worktree, remove_worktree
from ..model.run import RunStatus, WorkerStatus, topological
from ..model.task import TaskStatus
from ..protocol import mailbox
from ..runs import state as runstate
from ..runs import tasks as taskbook

if TYPE_CHECKING:
    from ..model.run import Run, Worker
    from ..supervisor.loop import Supervisor

MAX_PUBLISH_ATTEMPTS: Final = 3


def accept_finalize(
    sup: Supervisor, worker: Worker, request: dict[str, Any], request_digest: str, raw_digest: str
) -> None:
    """Check that everything is delivered, stop the writers, and start the integration job."""
    run = sup.state.run()
    if worker.role != "coordinator":
        raise AgentOpsError("RUN_DELIVERIES_PENDING", "only the coordinator finalizes")
    if run.root_task_id is None:
        raise AgentOpsError("RUN_DELIVERIES_PENDING", "plan the root task and its children first")
    children = [t for t in sup.state.tasks().values() if t.parent is not None]
    pending = [f"{t.title} ({t.status})" for t in children if t.status is not TaskStatus.DELIVERED]
    if not children or pending:
        raise AgentOpsError(
            "RUN_DELIVERIES_PENDING",
            f"not every child task is delivered: {', '.join(pending) or 'no child task planned'}",
        )
    request_info = {
        "requestId": request["requestId"],
        "requestDigest": request_digest,
        "rawDigest": raw_digest,
        "generation": worker.generation,
    }

    def begin(change: Change, view: runstate.RunView) -> None:
        current = view.run()
        runstate.put_run(
            change, replace(current, integration={"status": "requested", "request": request_info, "attempts": 0})
        )
        runstate.put_worker(change, replace(view.worker(worker.worker_id), status=WorkerStatus.HANDING_OFF))

    sup.state.journal.mutate(
        lambda change: begin(change, runstate.RunView(change)),
        Event("INTEGRATION_REQUESTED", f"{worker.worker_id} asks to finalize", {"requestId": request["requestId"]}),
    )
    sup._kill(worker)
    sup.submit(worker.worker_id, lambda store: integrate(sup, store))


def resume_pending(sup: Supervisor) -> bool:
    """After a supervisor restart: roll an interrupted integration forward. True if one was pending."""
    run = sup.state.run()
    if not run.integration or run.integration.get("status") in (None, "complete", "failed"):
        return False
    coordinator = run.coordinator_id
    sup._set_worker(
        coordinator,
        status=WorkerStatus.HANDING_OFF,
        process=None,
        event="INTEGRATION_RESUMED",
        summary=f"resuming the integration at step {run.integration.get('status')}",
    )
    sup.submit(coordinator, lambda store: integrate(sup, store))
    return True


# -- the transaction ---------------------------------------------------------------------------------------------------


def _set(sup: Supervisor, store: Store, code: str, summary: str, **fields: Any) -> Run:
    run_id = sup.run_id

    def update(change: Change) -> Run:
        view = runstate.RunView(change)
        run = view.run()
        integration = {**(run.integration or {}), **fields}
        run = replace(run, integration=integration)
        runstate.put_run(change, run)
        return run

    run = (
        runstate.journal(store, run_id)
        .mutate(update, Event(code, summary, {k: v for k, v in fields.items() if k not in ("reviews", "verification")}))
        .value
    )
    if "status" in fields:
        sup.fault(f"integration:{fields['status']}")
    return run


def _is_ancestor(repo_dir: Path, commit: str, of: str) -> bool:
    return (
        subprocess.run(
            ["git", "merge-base", "--is-ancestor", commit, of],
            cwd=repo_dir,
            capture_output=True,
            timeout=60,
            check=False,
        ).returncode
        == 0
    )


def _changed(repo_dir: Path, base: str, commit: str) -> set[str]:
    done = subprocess.run(
        ["git", "diff", "--name-only", "-z", base, commit], cwd=repo_dir, capture_output=True, timeout=120, check=False
    )
    return {p.decode(errors="replace") for p in done.stdout.split(b"\0") if p}


def _conflict_parties(
    repo_dir: Path, base: str, merged: list[tuple[str, str]], label: str, paths: tuple[str, ...]
) -> str:
    """Which earlier delivery (or the target itself) touched the conflicted paths."""
    for other, commit in merged:
        if _changed(repo_dir, base, commit) & set(paths):
            return other
    return "the target branch"


def _fail(store: Store, sup: Supervisor, code: str, message: str, detail: dict[str, Any]) -> dict[str, Any]:
    run = runstate.read(store, sup.run_id).run()
    info = (run.integration or {}).get("request", {})
    _set(sup, store, "INTEGRATION_FAILED", f"integration failed: {code}", status="failed", failure=code)
    request = {
        "requestId": info.get("requestId", "finalize"),
        "workerId": run.coordinator_id,
        "generation": info.get("generation", 1),
        "action": "finalize",
    }
    return {
        "action": "fail",
        "code": code,
        "message": message,
        "detail": detail,
        "head": None,
        "request": request,
        "requestDigest": info.get("requestDigest", "0" * 64),
        "rawDigest": info.get("rawDigest", "0" * 64),
    }


def integrate(sup: Supervisor, store: Store) -> dict[str, Any]:
    """The integration job (see the module docstring). Returns what the supervisor loop must do next."""
    from ..supervisor.loop import run_dir
    from .merge import merge_chain

    view = runstate.read(store, sup.run_id)
    run = view.run()
    repo_dir = Path(run.repository)
    target_ref = f"refs/heads/{run.target}"
    integration = dict(run.integration or {})
    status = integration.get("status")
    if status in ("prepared", "verified", "reviewed"):
        tip = read_ref(store, target_ref)
        if tip is not None and _is_ancestor(repo_dir, integration["candidate"], tip):
            run = _set(
                sup, store, "INTEGRATION_PUBLISHED", "the target already holds the candidate", status="published"
            )
            status = "published"
    if status not in ("published", "receipted"):
        tasks = view.tasks()
        children = [t for t in tasks.values() if t.parent is not None]
        plan = [t for t in run.plan_order if t in tasks]
        order = topological(plan, {t.id: list(t.dependencies) for t in children})
        deliveries = [(task_id, tasks[task_id].extra["delivery"]["commit"]) for task_id in order]
        root = tasks[run.root_task_id] if run.root_task_id else None
        for attempt in range(1, MAX_PUBLISH_ATTEMPTS + 1):
            base = read_ref(store, target_ref)
            if base is None:
                return _fail(store, sup, "OBJECT_MISSING", f"the target branch {run.target} is gone", {})
            chain = merge_chain(
                store,
                base,
                deliveries,
                message=lambda label, commit: (
                    f"Integrate {tasks[label].title} ({label})\n\nFrozen delivery {commit} of run {sup.run_id}.\n"
                ),
            )
            if chain.conflict is not None or chain.head is None:
                label, paths = chain.conflict or ("?", ())
                merged = [(s.label, s.parents[1]) for s in chain.steps]
                other = _conflict_parties(repo_dir, base, merged, label, paths)
                return _fail(
                    store,
                    sup,
                    "RUN_INTEGRATION_CONFLICT",
                    f"the delivery of {label} ({tasks[label].title if label in tasks else label}) conflicts "
                    f"with {other} in: {', '.join(paths)}",
                    {"tasks": sorted([label, other]), "paths": list(paths)},
                )
            candidate = chain.head
            steps = [
                {"label": s.label, "commit": s.commit, "parents": list(s.parents), "tree": s.tree} for s in chain.steps
            ]
            update_ref(
                store,
                runstate.candidate_ref(sup.run_id),
                candidate,
                read_ref(store, runstate.candidate_ref(sup.run_id)),
                "agentops: integration candidate",
            )
            _set(
                sup,
                store,
                "INTEGRATION_PREPARED",
                f"candidate {candidate[:12]} on {base[:12]}",
                status="prepared",
                base=base,
                candidate=candidate,
                order=order,
                steps=steps,
                attempts=attempt,
            )
            checkout = run_dir(store, sup.run_id) / f"candidate-{candidate[:12]}"
            if checkout.exists():
                remove_detached_worktree(store, checkout)
            add_detached_worktree(store, checkout, candidate)
            try:
                result = _verify_and_review(sup, store, checkout, run, root, candidate, base, chain.steps[-1].tree)
            finally:
                remove_detached_worktree(store, checkout)
            if result is not None:
                return result
            try:
                update_ref(store, target_ref, candidate, base, f"agentops: integrate run {sup.run_id}")
            except RefConflict:
                sup.log(f"{run.target} moved while integrating; rebuilding the candidate (attempt {attempt})")
                continue
            _set(
                sup,
                store,
                "INTEGRATION_PUBLISHED",
                f"{run.target} moved to {candidate[:12]}",
                status="published",
                publishedAt=sup.clock.now(),
            )
            break
        else:
            return _fail(
                store,
                sup,
                "RUN_TARGET_CONTENDED",
                f"{run.target} kept moving: {MAX_PUBLISH_ATTEMPTS} candidates were rebuilt",
                {},
            )
    run = runstate.read(store, sup.run_id).run()
    if run.integration and run.integration.get("status") == "published":
        receipt_digest = _add_receipt(sup, store)
        _set(
            sup,
            store,
            "INTEGRATION_RECEIPTED",
            "receipt added",
            status="receipted",
            receiptDigest=receipt_digest,
        )
    _complete(sup, store)
    return {"action": "ok"}


def _verify_and_review(
    sup: Supervisor, store: Store, checkout: Path, run: Run, root: Any, candidate: str, base: str, tree: str
) -> dict[str, Any] | None:
    from ..receipts.statement import evidence_summary
    from ..supervisor.loop import recipe_path, run_dir
    from ..verify.core import verify_checkout
    from ..verify.evidence import EvidenceStore
    from .reviews import diff_text, review_input, run_reviews

    outcome = verify_checkout(
        EvidenceStore(store),
        worktree=checkout,
        policy=sup.policy,
        trust=sup.trust,
        environ=sup.environ,
        clock=sup.clock,
        task=root,
        known_head=Head(candidate, tree, None),
    )
    if not outcome.passed:
        lines = [
            f"- {r['commandId']}: exit {r['exitCode']}{' (timed out)' if r['timedOut'] else ''}\n"
            + r["tail"].rstrip()[-1200:]
            for r in outcome.failures()
        ]
        return _fail(
            store,
            sup,
            "RUN_VERIFICATION_FAILED",
            f"the integration candidate {candidate[:12]} failed verification:\n" + "\n".join(lines),
            {"failed": sorted(r["commandId"] for r in outcome.failures())},
        )
    verification = [evidence_summary(r) for r in outcome.records]
    _set(
        sup,
        store,
        "INTEGRATION_VERIFIED",
        f"candidate {candidate[:12]} verified",
        status="verified",
        verification=verification,
    )
    reviews: list[dict[str, Any]] = []
    if int(sup.policy.doc["review"]["required"]) > 0:
        view = runstate.read(store, sup.run_id)
        tasks = [t.to_json() for t in view.tasks().values()]
        doc = review_input(
            goal=run.goal,
            tasks=tasks,
            base=base,
            candidate=candidate,
            diff=diff_text(Path(run.repository), base, candidate),
            evidence=verification,
        )
        recipe = recipe_path(store, sup.run_id)
        results = run_reviews(
            sup.policy,
            checkout=checkout,
            scratch=run_dir(store, sup.run_id) / "reviews",
            input_doc=doc,
            environ=sup.environ,
            clock=sup.clock,
            recipe=recipe if recipe.exists() else None,
        )
        blocking = {r.reviewer: r.blocking for r in results if r.blocking}
        reviews = [r.to_json() for r in results]
        if blocking:
            findings = "\n".join(f"- {name}: {item}" for name, items in blocking.items() for item in items)
            return _fail(
                store,
                sup,
                "RUN_REVIEW_BLOCKED",
                f"review blocked the candidate {candidate[:12]}:\n{findings}",
                {"reviewers": sorted(blocking)},
            )

        def keep(change: Change) -> None:
            for result in results:
                if result.report is not None:
                    change.put_artifact(documents_bytes(result.report))

        runstate.journal(store, sup.run_id).mutate(
            keep, Event("REVIEWS_RECORDED", f"{len(results)} review(s)", {"reviews": reviews})
        )
    _set(
        sup,
        store,
        "INTEGRATION_REVIEWED",
        f"candidate {candidate[:12]} reviewed",
        status="reviewed",
        reviews=reviews,
    )
    return None


def documents_bytes(doc: Any) -> bytes:
    from ..canonical import canonical_bytes

    return canonical_bytes(doc) + b"\n"


def signing_keys(store: Store) -> list[Path]:
    """``agentops.signingKey``, else ``user.signingKey`` when ``gpg.format`` is ssh (as git signs commits)."""
    key = store.config_value("agentops.signingKey")
    if key is None and (store.config_value("gpg.format") or "").lower() == "ssh":
        key = store.config_value("user.signingKey")
    if not key:
        return []
    if key.startswith("key::"):
        literal = store.private_dir() / "signing-key.pub"
        literal.parent.mkdir(parents=True, exist_ok=True)
        literal.write_text(key[len("key::") :] + "\n")
        return [literal]
    return [Path(key).expanduser()]


def _add_receipt(sup: Supervisor, store: Store) -> str:
    from ..receipts import build_predicate, build_statement, make_receipt

    view = runstate.read(store, sup.run_id)
    run = view.run()
    integration = dict(run.integration or {})
    candidate = integration["candidate"]
    tasks = view.tasks()
    notes = Notes(store, RECEIPTS_REF)
    existing = notes.read(candidate)
    if existing is not None:  # a crash after the note, before the journal: the receipt is already there
        return sha256_hex(existing)
    deliveries = []
    for task_id in integration["order"]:
        delivery = tasks[task_id].extra["delivery"]
        deliveries.append(
            {
                "taskId": task_id,
                "workerId": delivery["workerId"],
                "generation": delivery["generation"],
                "sourceCommit": delivery["commit"],
                "deliveryDigest": delivery["digest"],
            }
        )
    predicate = build_predicate(
        run_id=run.run_id,
        goal=run.goal,
        policy_config_hash=sup.policy.config_hash,
        toolkit_version=__version__,
        tasks=list(tasks.values()),
        contract_hash=run.contract_hash,
        deliveries=deliveries,
        integration={
            "target": run.target,
            "base": integration["base"],
            "order": integration["order"],
            "steps": integration["steps"],
        },
        verification=integration.get("verification", []),
        reviews=integration.get("reviews", []),
        created_at=sup.clock.now(),
    )
    tree = integration["steps"][-1]["tree"]
    statement = build_statement(commit=candidate, tree=tree, subject_name=run.target, predicate=predicate)
    data = make_receipt(statement, keys=signing_keys(store))
    try:
        notes.add(candidate, data, message=f"Receipt of run {run.run_id}")
    except AgentOpsError as exc:
        if exc.code != "NOTE_EXISTS":
            raise
    return sha256_hex(data)


def _complete(sup: Supervisor, store: Store) -> None:
    view = runstate.read(store, sup.run_id)
    run = view.run()
    integration = dict(run.integration or {})
    info = integration.get("request", {})
    answer = mailbox.response(
        info.get("requestId"),
        info.get("rawDigest", "0" * 64),
        "RUN_COMPLETE",
        f"{run.target} is at {integration.get('candidate', '')[:12]}, receipted",
        {"commit": integration.get("candidate"), "receiptDigest": integration.get("receiptDigest")},
    )

    def finish(change: Change) -> None:
        v = runstate.RunView(change)
        current = v.run()
        runstate.put_run(
            change,
            replace(
                current,
                status=RunStatus.COMPLETE,
                status_reason=None,
                integration={**(current.integration or {}), "status": "complete"},
            ),
        )
        for worker in v.workers():
            if worker.status is not WorkerStatus.DELIVERED:
                runstate.put_worker(
                    change,
                    replace(
                        worker,
                        status=WorkerStatus.DELIVERED if worker.role == "coordinator" else worker.status,
                        process=None,
                    ),
                )
        if current.root_task_id:
            root = v.task(current.root_task_id)
            taskbook.put(change, replace(root, status=TaskStatus.DELIVERED))
        if info.get("requestId"):
            change.put_json(
                runstate.request_path(info["requestId"]),
                {
                    "requestId": info["requestId"],
                    "requestDigest": info.get("requestDigest", "0" * 64),
                    "workerId": current.coordinator_id,
                    "generation": info.get("generation", 1),
                    "action": "finalize",
                    "response": answer,
                    "at": sup.clock.now(),
                },
                schema="request-record",
            )

    runstate.journal(store, sup.run_id).mutate(
        finish,
        Event(
            "RUN_COMPLETE",
            f"run complete: {run.target} at {integration.get('candidate', '')[:12]}",
            {"candidate": integration.get("candidate"), "receiptDigest": integration.get("receiptDigest")},
        ),
    )
    coordinator = view.workers()
    for worker in coordinator:
        if worker.role == "coordinator":
            try:
                mailbox.write_response(Path(worker.worktree), answer)
            except (AgentOpsError, OSError):
                pass
    for worker in view.workers():  # branches and delivery refs stay; checkouts go
        name = f"agentops-{sup.run_id}-{worker.worker_id}"[:200]
        remove_worktree(store, Path(worker.worktree), name)
    root = Path(run.repository) / sup.policy.worktree_root / sup.run_id
    if root.is_dir() and not any(root.iterdir()):
        shutil.rmtree(root, ignore_errors=True)
    sup.log(f"run {sup.run_id} complete: {run.target} at {integration.get('candidate', '')[:12]}")
