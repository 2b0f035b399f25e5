"""Where a run keeps its state, and typed access to it.

A run's state is the tree of its journal ``refs/agentops/runs/<run>/state``:

    run.json                          the run record (schemas/run.schema.json)
    workers/<worker>.json             one record per worker
    tasks/<task>/r<NNNN>.json         every revision of every task (see taskbook)
    requests/<aa>/<sha256(id)>.json   the idempotency record of each request: its digest and its response
    questions/<id>.json               questions and their answers
    lease.json                        which machine's supervisor serves the run, until when
    artifacts/<aa>/<sha256>           content-addressed blobs (the recipe, diagnostics...)

Every change is one journal commit whose message is the event, so ``git log refs/agentops/runs/<run>/state``
is the run's audit trail. This module only maps names to paths and JSON to values; the rules live in
``model.run`` and the supervisor.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Final, TypeVar

from ..canonical import sha256_hex
from ..errors import AgentOpsError
from ..gitstore.journal import Change, Event, Journal, JournalTampered, Snapshot
from ..gitstore.private import read_private, write_private
from ..gitstore.refnames import check_component
from ..gitstore.refs import list_refs
from ..gitstore.repo import Store
from ..lease.record import Lease
from ..model.request import RequestRecord
from ..model.run import Run, Worker
from ..model.task import Task, contract_hash
from . import tasks as taskbook

T = TypeVar("T")

RUNS_PREFIX: Final = "refs/agentops/runs/"
RUN_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_run_id(run_id: str) -> str:
    if not RUN_ID.fullmatch(run_id) or run_id.endswith((".lock", ".")) or ".." in run_id:
        raise AgentOpsError("RUN_NOT_FOUND", f"{run_id!r} is not a run id")
    return check_component(run_id, "run id")


def state_ref(run_id: str) -> str:
    return f"{RUNS_PREFIX}{check_run_id(run_id)}/state"


def policy_ref(run_id: str) -> str:
    return f"{RUNS_PREFIX}{check_run_id(run_id)}/policy"


def candidate_ref(run_id: str) -> str:
    return f"{RUNS_PREFIX}{check_run_id(run_id)}/candidate"


def delivery_ref(run_id: str, task_id: str) -> str:
    return f"{RUNS_PREFIX}{check_run_id(run_id)}/deliveries/{task_id}"


def branch_ref(run_id: str, worker_id: str) -> str:
    return f"refs/heads/agentops/{check_run_id(run_id)}/{check_component(worker_id, 'worker id')}"


def run_dir(store: Store, run_id: str) -> Path:
    """The run's private directory, ``$GIT_COMMON_DIR/agentops/runs/<run>/``: lock, heartbeat, logs, recipe."""
    return store.private_dir() / "runs" / check_run_id(run_id)


STOPPING: Final = "supervisor.stopping"
"""In the run's private dir: written by a supervisor that holds the run's lock and is about to let it go (the run
is no longer active), before it looks at the run's status one last time. A starter finding the lock held waits
for such a holder instead of taking the run as served (:func:`git_agentops.supervisor.spawn.spawn_supervisor`);
the holder serves the run again if it was made active meanwhile. Meaningless without the lock held: every new
holder removes a dead one's."""


RESTART: Final = "supervisor.restart"
"""In the run's private dir: written by ``resume`` of a stopped run (blocked, paused, budget-limited) that found
the lock held by a supervisor that is not stopping -- one whose loop never saw the stop, the resume landing between
the status write and its next look. That supervisor takes it as the restart a new supervisor would have been: its
workers stopped, its jobs finished, then served again from the start (an interrupted integration rolled forward)."""


def write_heartbeat(directory: Path, now: float) -> None:
    """The supervisor's heartbeat in the run's private dir: a crash's open budget interval is closed there."""
    write_private(directory, "heartbeat", f"{now}\n".encode())


def read_heartbeat(directory: Path) -> float | None:
    """The last heartbeat (None when there is none or it is unreadable)."""
    try:
        data = read_private(directory, "heartbeat", max_bytes=64)
        return float(data) if data else None
    except (AgentOpsError, ValueError):
        return None


def recipe_path(store: Store, run_id: str) -> Path:
    """Where the scripted agent's recipe of this run is kept (it exists only for scripted runs)."""
    return run_dir(store, run_id) / "recipe.toml"


def request_path(request_id: str) -> str:
    key = sha256_hex(request_id)
    return f"requests/{key[:2]}/{key}.json"


def list_runs(store: Store) -> list[str]:
    return sorted(
        name[len(RUNS_PREFIX) : -len("/state")]
        for name in list_refs(store, RUNS_PREFIX)
        if name.endswith("/state") and name.count("/") == 4
    )


class RunView:
    """Typed reads of one state snapshot (or of a mutation's copy-on-write view)."""

    def __init__(self, view: Snapshot) -> None:
        self.view = view

    @property
    def exists(self) -> bool:
        return self.view.exists("run.json")

    def run(self) -> Run:
        doc = self.view.json("run.json", schema="run")
        if doc is None:
            raise AgentOpsError("RUN_NOT_FOUND", "this run has no run.json")
        return Run.from_json(doc)

    def worker(self, worker_id: str) -> Worker:
        doc = self.view.json(f"workers/{worker_id}.json", schema="worker")
        if doc is None:
            raise AgentOpsError("RUN_WORKER_UNKNOWN", f"no worker {worker_id!r} in this run")
        return Worker.from_json(doc)

    def workers(self) -> list[Worker]:
        return [self.worker(name[:-5]) for name in self.view.list("workers") if name.endswith(".json")]

    def tasks(self) -> dict[str, Task]:
        return {t.id: t for t in taskbook.all_current(self.view)}

    def task(self, task_id: str) -> Task:
        return taskbook.current(self.view, task_id)

    def request_record(self, request_id: str) -> RequestRecord | None:
        doc = self.view.json(request_path(request_id), schema="request-record")
        return RequestRecord.from_json(doc) if doc is not None else None

    def lease(self) -> Lease | None:
        """Which machine's supervisor serves the run (:mod:`git_agentops.lease.record`); None before any did."""
        doc = self.view.json("lease.json", schema="lease")
        return Lease.from_json(doc) if doc is not None else None

    def control(self, control_id: str) -> dict[str, Any] | None:
        """The recorded outcome of a signed control, if it was handled."""
        doc = self.view.json(f"controls/{control_id}.json", schema="control-record")
        return dict(doc) if doc is not None else None

    def controls(self) -> list[dict[str, Any]]:
        """Every handled control's outcome, in id order."""
        return [doc for name in sorted(self.view.list("controls")) if (doc := self.control(name[:-5])) is not None]

    def questions(self) -> Iterator[dict[str, Any]]:
        for name in self.view.list("questions"):
            doc = self.view.json(f"questions/{name}", schema="question")
            if doc is not None:
                yield dict(doc)


def put_run(change: Change, run: Run) -> None:
    change.put_json("run.json", run.to_json(), schema="run")


def put_worker(change: Change, worker: Worker) -> None:
    change.put_json(f"workers/{worker.worker_id}.json", worker.to_json(), schema="worker")


def put_lease(change: Change, lease: Lease) -> None:
    change.put_json("lease.json", lease.to_json(), schema="lease")


def put_request_record(change: Change, record: RequestRecord) -> None:
    """The idempotency record of an answered request: the one writer, in the commit of the request's effect."""
    change.put_json(request_path(record.request_id), record.to_json(), schema="request-record")


def put_control(change: Change, record: Mapping[str, Any]) -> None:
    """What the supervisor did with a signed control (:class:`git_agentops.controls.record.Outcome`), once."""
    change.put_json(f"controls/{record['controlId']}.json", dict(record), schema="control-record")


def put_question(change: Change, question: dict[str, Any]) -> None:
    change.put_json(f"questions/{sha256_hex(question['questionId'])[:32]}.json", question, schema="question")


def journal(store: Store, run_id: str) -> Journal:
    return Journal(store, state_ref(run_id))


def read(store: Store, run_id: str) -> RunView:
    """The current state of a run; ``RUN_NOT_FOUND`` when there is no such run, ``RUN_STATE_TAMPERED`` when its tip
    is a commit the supervisor did not write (see :mod:`.tamper`)."""
    try:
        snapshot = journal(store, run_id).read()
    except JournalTampered as exc:
        raise tampered(exc, run_id) from exc
    view = RunView(snapshot)
    if not view.exists:
        raise AgentOpsError("RUN_NOT_FOUND", f"no run {run_id!r} ('git agentops-run list' shows the runs)")
    return view


def tampered(exc: JournalTampered, run_id: str) -> JournalTampered:
    """``exc`` with what a person can do about it."""
    return JournalTampered(
        exc.ref,
        exc.commit,
        f"{exc.message}. 'git agentops-run log {run_id}' shows the foreign commits; the run's supervisor (or "
        f"'git agentops-run resume {run_id}') restores the last state it wrote and blocks the run",
    )


def mutate(journal: Journal, fn: Callable[[Change, RunView], T], event: Event) -> T:
    """Apply ``fn(change, view)`` to the run state by CAS (the view reads the change's copy-on-write tree)."""
    return journal.mutate(lambda change: fn(change, RunView(change)), event).value


def recompute_contract(change: Change, view: RunView) -> Run:
    """Store the contract hash of the current task tree in run.json (revision +1 when it changed)."""
    run = view.run()
    current = contract_hash(view.tasks().values())
    if current != run.contract_hash:
        run = replace(run, contract_hash=current, contract_revision=run.contract_revision + 1)
        put_run(change, run)
    return run
