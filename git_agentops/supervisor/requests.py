"""Answering worker requests: validation, fencing, idempotency, and the effect of each action.

Order of checks, each answered in the worker's ``response.json`` with its code (never an exception that stops
the supervisor or touches another worker):

1. the file itself: a regular file, no symlink, at most 128 KiB (``RUN_REQUEST_INVALID``/``..._TOO_LARGE``);
2. strict JSON and the request schema -- unknown fields refused (``RUN_REQUEST_INVALID``);
3. idempotency: a ``requestId`` seen before replays its stored response when the canonical content is the same,
   and is ``RUN_REQUEST_ID_CONFLICT`` otherwise;
4. fencing: the worker id and generation must be this mailbox's current ones (``RUN_REQUEST_STALE``);
5. the contract hash must be the run's current one and the run active (``RUN_CONTRACT_CHANGED``);
6. the action's own rules.

The effect of a request and its idempotency record are written in the **same** state commit, so a crash can
never apply a request twice or lose its answer.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..canonical import digest
from ..errors import AgentOpsError
from ..gitstore.journal import Change, Event
from ..model.run import RunStatus, Worker, WorkerStatus, has_cycle
from ..model.task import Criterion, TaskStatus, new_task
from ..protocol import mailbox
from ..runs import state as runstate
from ..runs import tasks as taskbook
from ..schema import documents
from .cache import mutate, recompute_contract
from .instructions import worker_contract

if TYPE_CHECKING:
    from .loop import Supervisor


def _criteria(items: list[Any]) -> list[Criterion]:
    out = []
    for index, item in enumerate(items, start=1):
        if isinstance(item, str):
            out.append(Criterion(f"c{index}", item))
        else:
            out.append(
                Criterion(item.get("id", f"c{index}"), item["description"], item.get("runner"), item.get("reviewOnly"))
            )
    return out


def _record(change: Change, request: dict[str, Any], request_digest: str, response: dict[str, Any], at: float) -> None:
    change.put_json(
        runstate.request_path(request["requestId"]),
        {
            "requestId": request["requestId"],
            "requestDigest": request_digest,
            "workerId": request["workerId"],
            "generation": request["generation"],
            "action": request["action"],
            "response": response,
            "at": at,
        },
        schema="request-record",
    )


def serve(sup: Supervisor, worker: Worker) -> bool:
    """Take and answer at most one request from this worker's mailbox; True if there was one."""
    worktree = Path(worker.worktree)
    claimed = mailbox.claim_request(worktree)
    if claimed is None:
        return False
    answer = _answer(sup, worker, claimed)
    if answer is None:  # handed to a job, which answers when done
        return True
    try:
        mailbox.write_response(worktree, answer)
    except AgentOpsError as exc:
        sup.log(f"{worker.worker_id}: cannot write the response ({exc.code}): {exc.message}")
    return True


def _answer(sup: Supervisor, worker: Worker, claimed: mailbox.Claimed) -> dict[str, Any] | None:
    if claimed.error is not None or claimed.data is None:
        error = claimed.error or AgentOpsError("RUN_REQUEST_INVALID", "empty request")
        return _refuse(sup, worker, None, claimed.digest, error)
    try:
        request = dict(
            documents.load(claimed.data, schema="request", what="request", max_bytes=mailbox.MAX_REQUEST_BYTES)
        )
    except AgentOpsError as exc:
        code = "RUN_REQUEST_TOO_LARGE" if exc.code == "DOC_TOO_LARGE" else "RUN_REQUEST_INVALID"
        raw_id = _peek_id(claimed.data)
        return _refuse(sup, worker, raw_id, claimed.digest, AgentOpsError(code, exc.message))
    request_digest = digest(request)
    previous = sup.state.view.request_record(request["requestId"])
    if previous is not None:
        if previous["requestDigest"] == request_digest:
            replayed: dict[str, Any] = {**previous["response"], "requestDigest": claimed.digest}
            return replayed
        return _refuse(
            sup,
            worker,
            request["requestId"],
            claimed.digest,
            AgentOpsError(
                "RUN_REQUEST_ID_CONFLICT", f"requestId {request['requestId']} was used before with different content"
            ),
        )
    if request["workerId"] != worker.worker_id or request["generation"] != worker.generation:
        return _refuse(
            sup,
            worker,
            request["requestId"],
            claimed.digest,
            AgentOpsError(
                "RUN_REQUEST_STALE",
                f"this mailbox belongs to {worker.worker_id} generation {worker.generation}, not "
                f"{request['workerId']} generation {request['generation']}",
            ),
        )
    run = sup.state.run()
    contract = worker_contract(run, worker, sup.state.tasks())
    if run.status is not RunStatus.ACTIVE or request["contractHash"] != contract:
        why = f"the run is {run.status}" if run.status is not RunStatus.ACTIVE else "the contract changed"
        return _refuse(
            sup,
            worker,
            request["requestId"],
            claimed.digest,
            AgentOpsError("RUN_CONTRACT_CHANGED", f"{why}: re-read instructions.json (contract {contract[:12]})"),
            data={"contractHash": contract},
        )
    handler = _ACTIONS.get(request["action"])
    if handler is None:
        return _refuse(
            sup,
            worker,
            request["requestId"],
            claimed.digest,
            AgentOpsError("RUN_ACTION_UNAVAILABLE", f"action {request['action']!r} is not available in this version"),
        )
    try:
        answered: dict[str, Any] | None = handler(sup, worker, request, request_digest, claimed.digest)
        return answered
    except AgentOpsError as exc:
        return _refuse(sup, worker, request["requestId"], claimed.digest, exc, record=(request, request_digest))


def _peek_id(data: bytes) -> str | None:
    try:
        doc = documents.parse_json(data, max_bytes=mailbox.MAX_REQUEST_BYTES)
    except AgentOpsError:
        return None
    value = doc.get("requestId") if isinstance(doc, dict) else None
    return value if isinstance(value, str) and len(value) <= 64 else None


def _refuse(
    sup: Supervisor,
    worker: Worker,
    request_id: str | None,
    raw_digest: str,
    error: AgentOpsError,
    *,
    data: dict[str, Any] | None = None,
    record: tuple[dict[str, Any], str] | None = None,
) -> dict[str, Any]:
    answer = mailbox.response(request_id, raw_digest, error.code, error.message, data)

    def note(change: Change, view: runstate.RunView) -> None:
        if record is not None:  # a refusal by the action's own rules is part of the request's idempotent story
            _record(change, record[0], record[1], answer, sup.clock.now())

    mutate(
        sup.state.journal,
        note,
        Event(
            "REQUEST_REFUSED",
            f"{worker.worker_id}: {error.code}",
            {
                "workerId": worker.worker_id,
                "generation": worker.generation,
                "code": error.code,
                "requestId": request_id,
                "requestDigest": raw_digest,
                "message": error.message[:2000],
            },
        ),
    )
    sup.log(f"{worker.worker_id}: refused request ({error.code}): {error.message.splitlines()[0][:200]}")
    return answer


def record_refusal(
    sup: Supervisor, worker_id: str, request: dict[str, Any], request_digest: str, raw_digest: str, error: AgentOpsError
) -> dict[str, Any]:
    """A refusal decided after the request was accepted (a failed handoff): recorded like any answer."""
    worker = sup.state.workers()[worker_id]
    return _refuse(sup, worker, request["requestId"], raw_digest, error, record=(request, request_digest))


def _done(
    sup: Supervisor,
    worker: Worker,
    request: dict[str, Any],
    request_digest: str,
    raw_digest: str,
    code: str,
    message: str,
    effect: Any,
    data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Apply ``effect(change, view) -> data`` and record the request and its response in one commit."""

    def apply(change: Change, view: runstate.RunView) -> dict[str, Any]:
        extra = effect(change, view) or {}
        answer = mailbox.response(request["requestId"], raw_digest, code, message, {**(data or {}), **extra})
        _record(change, request, request_digest, answer, sup.clock.now())
        return answer

    return mutate(
        sup.state.journal,
        apply,
        Event(
            code,
            f"{worker.worker_id}: {message}"[:200],
            {
                "workerId": worker.worker_id,
                "generation": worker.generation,
                "requestId": request["requestId"],
                "action": request["action"],
            },
        ),
    )


# -- actions ---------------------------------------------------------------------------------------------------------


def _plan(
    sup: Supervisor, worker: Worker, request: dict[str, Any], request_digest: str, raw_digest: str
) -> dict[str, Any]:
    if worker.role != "coordinator":
        raise AgentOpsError("RUN_COORDINATOR_REQUIRED", "only the coordinator plans the root task")

    def effect(change: Change, view: runstate.RunView) -> dict[str, Any]:
        run = view.run()
        if run.root_task_id is not None:
            raise AgentOpsError("RUN_PLAN_INVALID", f"the root task {run.root_task_id} already exists")
        try:
            task = new_task(
                taskbook.new_task_id(),
                title=request["title"],
                intent=request["intent"],
                goal=run.goal,
                criteria=_criteria(request["criteria"]),
                policy_config_hash=sup.policy.config_hash,
            )
        except AgentOpsError as exc:
            raise AgentOpsError("RUN_PLAN_INVALID", exc.message) from exc
        taskbook.create(change, replace(task, status=TaskStatus.RUNNING, extra={"workerId": worker.worker_id}))
        runstate.put_run(change, replace(run, root_task_id=task.id))
        runstate.put_worker(change, replace(view.worker(worker.worker_id), task_id=task.id))
        run = recompute_contract(change, view)
        return {"taskId": task.id, "contractHash": run.contract_hash}

    return _done(sup, worker, request, request_digest, raw_digest, "RUN_PLAN_CREATED", "root task created", effect)


def _worker(
    sup: Supervisor, worker: Worker, request: dict[str, Any], request_digest: str, raw_digest: str
) -> dict[str, Any]:
    if worker.role != "coordinator" or sup.state.run().root_task_id is None:
        raise AgentOpsError("RUN_COORDINATOR_REQUIRED", "only the coordinator plans children, after 'plan'")

    def effect(change: Change, view: runstate.RunView) -> dict[str, Any]:
        run = view.run()
        tasks = view.tasks()
        dependencies = list(request["dependencies"])
        unknown = [d for d in dependencies if d not in tasks or tasks[d].parent is None]
        if unknown:
            raise AgentOpsError("RUN_DEPENDENCY_UNKNOWN", f"unknown dependencies: {', '.join(unknown)}")
        replanning = request.get("taskId")
        if replanning is not None and (replanning not in tasks or tasks[replanning].status is not TaskStatus.PLANNED):
            raise AgentOpsError("RUN_PLAN_INVALID", f"{replanning} is not a planned task that can be re-planned")
        task_id = replanning or taskbook.new_task_id()
        edges = {t.id: list(t.dependencies) for t in tasks.values()}
        edges[task_id] = dependencies
        cycle = has_cycle(edges)
        if cycle:
            raise AgentOpsError("RUN_DEPENDENCY_CYCLE", f"dependency cycle: {' -> '.join(cycle)}")
        try:
            task = new_task(
                task_id,
                title=request["title"],
                intent=request["intent"],
                goal=run.goal,
                criteria=_criteria(request["criteria"]),
                parent=run.root_task_id,
                dependencies=dependencies,
                policy_config_hash=sup.policy.config_hash,
            )
        except AgentOpsError as exc:
            raise AgentOpsError("RUN_PLAN_INVALID", exc.message) from exc
        from ..model.task import check_runners

        try:
            check_runners(task, (r.id for r in sup.policy.runners))
        except AgentOpsError as exc:
            raise AgentOpsError("RUN_PLAN_INVALID", exc.message) from exc
        if replanning:
            old = tasks[replanning]
            taskbook.put(change, replace(old, superseded_by=old.revision + 1))
            taskbook.put(change, replace(task, revision=old.revision + 1))
        else:
            taskbook.create(change, task)
            runstate.put_run(change, replace(run, plan_order=(*run.plan_order, task.id)))
        recompute_contract(change, view)
        return {"taskId": task.id}

    return _done(sup, worker, request, request_digest, raw_digest, "RUN_WORKER_PLANNED", "child task planned", effect)


def _question(
    sup: Supervisor, worker: Worker, request: dict[str, Any], request_digest: str, raw_digest: str
) -> dict[str, Any]:
    prompt = request["prompt"]
    if not prompt.strip():
        raise AgentOpsError("RUN_QUESTION_INVALID", "the prompt is blank")
    question_id = f"q-{uuid.uuid4().hex[:12]}"

    def effect(change: Change, view: runstate.RunView) -> dict[str, Any]:
        runstate.put_question(
            change,
            {
                "questionId": question_id,
                "workerId": worker.worker_id,
                "generation": worker.generation,
                "prompt": prompt,
                "askedAt": sup.clock.now(),
                "answer": None,
                "answeredAt": None,
            },
        )
        runstate.put_run(
            change,
            replace(
                view.run(),
                status=RunStatus.AWAITING_INPUT,
                status_reason=f"question {question_id} from {worker.worker_id}",
            ),
        )
        return {"questionId": question_id}

    answer = _done(
        sup,
        worker,
        request,
        request_digest,
        raw_digest,
        "RUN_AWAITING_INPUT",
        f"question {question_id} recorded; answer with 'git agentops-run answer {sup.run_id} {question_id} TEXT'",
        effect,
    )
    mailbox.write_response(Path(worker.worktree), answer)  # before the asker is stopped with everyone else
    sup.state.refresh()
    sup.stop_all(WorkerStatus.FENCED, f"awaiting the answer to {question_id}")
    sup.log(f"{worker.worker_id} asks ({question_id}): {prompt}")
    return answer


def _handoff(
    sup: Supervisor, worker: Worker, request: dict[str, Any], request_digest: str, raw_digest: str
) -> dict[str, Any] | None:
    if worker.role == "coordinator":
        raise AgentOpsError("RUN_COORDINATOR_FINALIZE_REQUIRED", "the coordinator finalizes; it does not hand off")
    from ..integrate.delivery import accept_handoff

    accept_handoff(sup, worker, request, request_digest, raw_digest)
    return None  # the delivery job answers when verification is done


def _finalize(
    sup: Supervisor, worker: Worker, request: dict[str, Any], request_digest: str, raw_digest: str
) -> dict[str, Any] | None:
    from ..integrate.pipeline import accept_finalize

    accept_finalize(sup, worker, request, request_digest, raw_digest)
    return None  # the integration job answers when it is done


def _policy(
    sup: Supervisor, worker: Worker, request: dict[str, Any], request_digest: str, raw_digest: str
) -> dict[str, Any]:
    raise AgentOpsError("RUN_ACTION_UNAVAILABLE", "journaled policy transitions are not available in this version")


_ACTIONS: dict[str, Any] = {
    "plan": _plan,
    "worker": _worker,
    "question": _question,
    "handoff": _handoff,
    "finalize": _finalize,
    "policy": _policy,
}
