"""The worker lifecycle: start a generation, stop it, notice it ended, and decide between restart and block.

* **start** -- issue a new generation by CAS (only while the run is active and unfenced), write the worker's
  instructions and prompt, and launch its host in its worktree;
* **kill** -- SIGTERM the worker's process group, SIGKILL after the grace period, and reap it: once this returns
  nothing of that generation runs;
* **reap** -- a worker whose process ended without a delivery has failed (``RUN_WORKER_EXITED``, with the end of
  its log);
* **fail** -- record the failure; restart with a diagnostic, unless the same failure repeated without progress,
  which blocks;
* **block** -- the worker, its task and every task depending on it (and the run, for the coordinator).

Everything here runs in the loop thread.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.checkout import head as checkout_head
from ..gitstore.journal import Change, Event
from ..gitstore.repo import Store
from ..gitstore.worktree import admin_dir
from ..hosts.launch import Launch, host_spec, start
from ..model.policy import Policy
from ..model.run import (
    MAX_GENERATIONS,
    Failure,
    ProcessRef,
    Role,
    RunStatus,
    Worker,
    WorkerStatus,
    dependents,
    fingerprint,
    no_progress,
)
from ..model.task import TaskStatus
from ..process.groups import ProcessIdentity, is_alive, terminate_group
from ..protocol import instructions, mailbox
from ..runs import state as runstate
from ..runs import tasks as taskbook
from .briefing import Briefing
from .cache import StateCache

ALIVE = (WorkerStatus.STARTING, WorkerStatus.RUNNING, WorkerStatus.IDLE)


class Workers:
    """The workers of one run, as the loop thread manages them; ``jobs`` is the loop's job table."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        *,
        state: StateCache,
        policy: Policy,
        environ: Mapping[str, str],
        clock: Clock,
        log: Callable[[str], None],
        grace: float,
        run_dir: Path,
        briefing: Briefing,
        jobs: Mapping[str, Future[Any]],
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.state = state
        self.policy = policy
        self.environ = environ
        self.clock = clock
        self.log = log
        self.grace = grace
        self.run_dir = run_dir
        self.briefing = briefing
        self.jobs = jobs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}  # worker id -> the generation this supervisor started

    def set(self, worker_id: str, *, event: str, summary: str, **changes: Any) -> Worker:
        """Update one worker record by CAS, recording ``event``."""

        def update(change: Change, view: runstate.RunView) -> Worker:
            worker = replace(view.worker(worker_id), **changes)
            runstate.put_worker(change, worker)
            return worker

        return runstate.mutate(self.state.journal, update, Event(event, summary, {"workerId": worker_id}))

    # -- processes ---------------------------------------------------------------------------------------------------
    def kill(self, worker: Worker) -> None:
        """Stop a worker's process group (SIGTERM, then SIGKILL after the grace) and reap it."""
        proc = self.procs.pop(worker.worker_id, None)
        if worker.process is not None and is_alive(ProcessIdentity(worker.process.pid, worker.process.start_time)):
            terminate_group(worker.process.pid, grace=self.grace)
        if proc is not None:
            try:
                proc.wait(timeout=self.grace + 2)
            except subprocess.TimeoutExpired:
                self.log(f"{worker.worker_id}: pid {proc.pid} survived SIGKILL; it will be reaped later")

    def stop_all(self, status: WorkerStatus, reason: str) -> None:
        """Stop every live worker whose job is not running, recording ``status``."""
        self.state.refresh()
        for worker in self.state.workers().values():
            job = self.jobs.get(worker.worker_id)
            if job is not None and not job.done():
                continue
            if worker.process is not None or worker.status in ALIVE:
                self.kill(worker)
                self.set(
                    worker.worker_id,
                    status=status,
                    process=None,
                    event="WORKER_STOPPED",
                    summary=f"{worker.worker_id} stopped: {reason}",
                )

    def reconcile(self) -> None:
        """After a supervisor restart: stop whatever the old supervisor's generations left running."""
        for worker in self.state.workers().values():
            if worker.process is not None or worker.status in (*ALIVE, WorkerStatus.HANDING_OFF):
                self.kill(worker)
                self.set(
                    worker.worker_id,
                    status=WorkerStatus.STOPPED,
                    process=None,
                    diagnostic=worker.diagnostic,
                    event="WORKER_RECONCILED",
                    summary=f"{worker.worker_id} generation {worker.generation} stopped after a supervisor restart",
                )

    # -- generations ---------------------------------------------------------------------------------------------------
    def start(self, worker_id: str) -> None:
        """Issue a new generation and launch the worker's host (the run must be active and unfenced)."""

        def next_generation(change: Change, view: runstate.RunView) -> Worker:
            run = view.run()
            if run.status is not RunStatus.ACTIVE or run.disable_restart:
                raise AgentOpsError("RUN_NOT_ACTIVE", f"run is {run.status}; no new generation starts")
            current = view.worker(worker_id)
            worker = replace(
                current,
                generation=current.generation + 1,
                status=WorkerStatus.STARTING,
                process=None,
                started_at=self.clock.now(),
            )
            runstate.put_worker(change, worker)
            return worker

        worker = runstate.mutate(
            self.state.journal,
            next_generation,
            Event("WORKER_STARTING", f"{worker_id} starting a new generation", {"workerId": worker_id}),
        )
        self.state.refresh()
        worktree = Path(worker.worktree)
        doc = self.briefing.write(worker)
        spec = host_spec(self.policy, worker.host)
        recipe = self.briefing.recipe
        launch = Launch(
            worktree=worktree,
            mailbox=worktree / mailbox.MAILBOX,
            prompt_file=worktree / mailbox.PROMPT,
            log_file=self.log_file(worker),
            run_id=self.run_id,
            worker_id=worker_id,
            generation=worker.generation,
            recipe=recipe if recipe.exists() else None,
        )
        mailbox.write_prompt(worktree, instructions.prompt(doc))
        proc, identity = start(spec, launch, environ=self.environ)
        self.procs[worker_id] = proc
        self.set(
            worker_id,
            status=WorkerStatus.RUNNING,
            process=ProcessRef(identity.pid, identity.start_time),
            event="WORKER_STARTED",
            summary=f"{worker_id} generation {worker.generation} started (pid {identity.pid})",
        )
        self.log(f"{worker_id}: generation {worker.generation} started ({spec.kind}, pid {identity.pid})")

    def restart(self) -> None:
        """Start every worker that needs a generation: new ones, and stopped ones of an active run."""
        for worker in list(self.state.workers().values()):
            if worker.worker_id in self.jobs:
                continue
            if worker.status in (WorkerStatus.ASSIGNED, WorkerStatus.STOPPED, WorkerStatus.FENCED):
                if worker.generation >= MAX_GENERATIONS:
                    self.block(
                        worker.worker_id,
                        "RUN_NO_PROGRESS",
                        f"{worker.worker_id} reached {MAX_GENERATIONS} generations without delivering",
                    )
                    continue
                try:
                    self.start(worker.worker_id)
                except AgentOpsError as exc:
                    if exc.code == "RUN_NOT_ACTIVE":
                        return
                    self.block(worker.worker_id, exc.code, exc.message)
                self.state.refresh()

    # -- endings -------------------------------------------------------------------------------------------------------
    def log_file(self, worker: Worker) -> Path:
        """The host's output log of this worker, in its worktree's admin dir (never in the work tree)."""
        admin = admin_dir(Path(worker.worktree))
        return (admin or self.run_dir) / "agentops" / f"host-{worker.worker_id}.log"

    def log_tail(self, worker: Worker, lines: int = 15) -> str:
        """The last lines its current generation wrote."""
        try:
            data = self.log_file(worker).read_bytes()[-8000:].decode("utf-8", errors="replace")
        except OSError:
            return "(no log)"
        last_run = data.rsplit("\n=== generation ", 1)[-1]
        return "\n".join(last_run.splitlines()[-lines:])

    def reap(self) -> None:
        """Find workers whose process ended without a delivery: a failure each."""
        for worker in list(self.state.workers().values()):
            if worker.status not in ALIVE or worker.worker_id in self.jobs:
                continue
            proc = self.procs.get(worker.worker_id)
            exit_code: int | None
            if proc is not None:
                exit_code = proc.poll()
                if exit_code is None:
                    continue
                self.procs.pop(worker.worker_id, None)
            else:
                if worker.process is not None and is_alive(
                    ProcessIdentity(worker.process.pid, worker.process.start_time)
                ):
                    continue
                exit_code = None
            status = f"status {exit_code}" if exit_code is not None else "not our child"
            self.fail(
                worker.worker_id,
                "RUN_WORKER_EXITED",
                f"the agent exited ({status}) without delivering; the end of its log:\n{self.log_tail(worker)}",
                {"exitCode": exit_code},
            )
        self.state.refresh()

    def fail(self, worker_id: str, code: str, message: str, detail: Mapping[str, Any], head: str | None = None) -> bool:
        """Record a failure; restart (True) or block on no progress (False)."""
        worker = self.state.workers().get(worker_id, None)
        if worker is None:
            return False
        if head is None:
            try:
                head = checkout_head(Path(worker.worktree)).commit
            except AgentOpsError:
                head = None
        failure = Failure(fingerprint(code, detail), code, message[:8000], worker.generation, head, self.clock.now())
        failures = (*worker.failures, failure)[-10:]
        if no_progress(failures):
            self.set(worker_id, failures=failures, process=None, event="WORKER_FAILED", summary=f"{worker_id}: {code}")
            self.block(
                worker_id, "RUN_NO_PROGRESS", f"the same failure twice without progress ({code}): {message[:2000]}"
            )
            return False
        diagnostic = (
            f"Generation {worker.generation} failed ({code}): {message[:6000]}\n"
            "Fix the cause and try again; the same failure twice without new commits blocks the task."
        )
        self.set(
            worker_id,
            status=WorkerStatus.STOPPED,
            failures=failures,
            process=None,
            diagnostic=diagnostic,
            event="WORKER_FAILED",
            summary=f"{worker_id}: {code}",
        )
        self.log(f"{worker_id}: {code}: {message.splitlines()[0] if message else ''}")
        return True

    def block(self, worker_id: str, code: str, reason: str) -> None:
        """Block a worker, its task and every task depending on it (and the run, if it is the coordinator)."""

        def block(change: Change, view: runstate.RunView) -> Worker:
            worker = replace(
                view.worker(worker_id),
                status=WorkerStatus.BLOCKED,
                process=None,
                blocked_reason=f"{code}: {reason}"[:8000],
            )
            runstate.put_worker(change, worker)
            tasks = view.tasks()
            if worker.task_id and worker.task_id in tasks:
                for task_id in [worker.task_id, *dependents(tasks, worker.task_id)]:
                    task = tasks[task_id]
                    if task.status is not TaskStatus.DELIVERED:
                        why = (
                            f"{code}: {reason}"
                            if task_id == worker.task_id
                            else f"{code}: dependency {worker.task_id} blocked"
                        )
                        taskbook.put(change, replace(task, status=TaskStatus.BLOCKED, blocked_reason=why[:4000]))
            if worker.role is Role.COORDINATOR:
                run = view.run()
                runstate.put_run(
                    change,
                    replace(
                        run, status=RunStatus.BLOCKED, status_reason=f"{code}: {reason}"[:8000], disable_restart=True
                    ),
                )
            return worker

        worker = self.state.workers().get(worker_id)
        if worker is not None:
            self.kill(worker)
        runstate.mutate(
            self.state.journal,
            block,
            Event(
                "WORKER_BLOCKED",
                f"{worker_id} blocked: {code}",
                {"workerId": worker_id, "code": code, "reason": reason[:2000]},
            ),
        )
        self.log(f"{worker_id}: BLOCKED ({code}) {reason.splitlines()[0] if reason else ''}")
        self.state.refresh()
