"""The supervisor: one process per run that starts workers, answers their requests and enforces the rules.

Exactly one supervisor serves a run: it holds an OS lock (``flock``) on ``$GIT_COMMON_DIR/agentops/runs/<run>/
supervisor.lock`` for its whole life; a second one gets ``RUN_SUPERVISOR_ACTIVE``; a ``kill -9`` releases the
lock with the process. Everything it knows is in the run's journal, so a new supervisor continues where a dead
one stopped: at start it stops any worker process the old one left behind (pid + start time), adopts a delivery
whose ref was created just before a crash, closes the budget interval the crash left open at the last
heartbeat, and restarts workers with a **new generation**, so nothing an old generation does can be published.

Each tick (every ``poll`` seconds) it: obeys the run status (paused/stopping/blocked/budget-limited end it,
awaiting-input idles it), charges the budget, reaps exited workers (a worker that exits without delivering is a
failure: restart with a diagnostic, or block on no progress), provisions ready tasks up to ``max_workers``,
starts workers that need a (new) generation, and answers at most one request per worker. Slow work --
provisioning a worktree, verifying a handoff -- runs in job threads so other workers keep being served.
"""

from __future__ import annotations

import os
import subprocess
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

import pygit2

from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.journal import Change, Event
from ..gitstore.private import file_lock, read_private, write_private
from ..gitstore.repo import Store
from ..hosts.launch import Launch, host_spec, start
from ..model.policy import Policy
from ..model.run import (
    MAX_GENERATIONS,
    Failure,
    ProcessRef,
    Run,
    RunStatus,
    Worker,
    WorkerStatus,
    close_intervals,
    dependents,
    fingerprint,
    is_restart_storm,
    no_progress,
    open_interval,
    used_seconds,
)
from ..model.task import TaskStatus
from ..policy.trust import Verdict
from ..process.groups import ProcessIdentity, is_alive, terminate_group
from ..protocol import mailbox
from ..runs import state as runstate
from ..runs import tasks as taskbook
from . import instructions as instructions_mod
from .cache import StateCache, mutate

HEARTBEAT_EVERY: Final = 2.0
STOP_GRACE: Final = 3.0


def run_dir(store: Store, run_id: str) -> Path:
    return store.private_dir() / "runs" / runstate.check_run_id(run_id)


def recipe_path(store: Store, run_id: str) -> Path:
    return run_dir(store, run_id) / "recipe.toml"


class Supervisor:
    """Serves one run until it ends (or is interrupted). See the module docstring."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        *,
        policy: Policy,
        trust: Verdict,
        environ: Mapping[str, str],
        clock: Clock,
        poll: float = 0.05,
        log: Callable[[str], None] | None = None,
        grace: float = STOP_GRACE,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.policy = policy
        self.trust = trust
        self.environ = dict(environ)
        self.clock = clock
        self.poll = poll
        self.grace = grace
        self.log = log or (lambda message: None)
        self.state = StateCache(store, run_id)
        self.procs: dict[str, Any] = {}  # worker id -> Popen of the generation this supervisor started
        self.jobs: dict[str, Future[Any]] = {}  # worker id -> provisioning or handoff job
        self.executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="agentops-job")
        self._last_heartbeat = 0.0
        self._instructions_for: dict[str, tuple[Any, ...]] = {}
        self.dir = run_dir(store, run_id)

    # -- lifecycle ---------------------------------------------------------------------------------------------------
    def serve(self) -> RunStatus:
        """Hold the lock and supervise until the run ends. ``RUN_SUPERVISOR_ACTIVE``, ``RUN_NOT_ACTIVE``."""
        try:
            with file_lock(self.dir, "supervisor.lock", blocking=False):
                write_private(self.dir, "supervisor.pid", f"{os.getpid()}\n".encode())
                return self._serve_locked()
        except AgentOpsError as exc:
            if exc.code == "LOCK_HELD":
                raise AgentOpsError(
                    "RUN_SUPERVISOR_ACTIVE", f"another supervisor already serves {self.run_id}"
                ) from exc
            raise
        finally:
            self.executor.shutdown(wait=True, cancel_futures=False)

    def _serve_locked(self) -> RunStatus:
        run = self.state.run()
        if run.status is RunStatus.COMPLETE:
            return run.status
        if run.disable_restart or run.status in (
            RunStatus.BLOCKED,
            RunStatus.BUDGET_LIMITED,
            RunStatus.STOPPING,
            RunStatus.PAUSED,
        ):
            raise AgentOpsError(
                "RUN_NOT_ACTIVE",
                f"run {self.run_id} is {run.status}{' (' + run.status_reason + ')' if run.status_reason else ''}; "
                f"'git agentops-run resume {self.run_id}' continues it",
            )
        self._startup()
        try:
            return self._loop()
        except KeyboardInterrupt:
            self.log("interrupted: stopping workers; 'git agentops-run supervise' continues the run")
            self.stop_all(WorkerStatus.STOPPED, "the supervisor was interrupted")
            raise
        finally:
            self._close_budget()

    def _startup(self) -> None:
        now = self.clock.now()
        heartbeat = self._read_heartbeat()
        if is_restart_storm(self.state.run(), now):
            self._set_status(
                RunStatus.BLOCKED,
                "RUN_RESTART_STORM: more than 3 supervisor starts within 5 minutes since the last resume",
                disable=True,
            )
            raise AgentOpsError("RUN_RESTART_STORM", f"run {self.run_id} restarted too often; it is now blocked")

        def start(change: Change, view: runstate.RunView) -> None:
            run = view.run()
            if any(i.end is None for i in run.intervals):  # left open by a crash: charge up to the last heartbeat
                run = close_intervals(run, heartbeat if heartbeat is not None else now)
            run = open_interval(replace(run, supervisor_starts=(*run.supervisor_starts, now)[-20:]), now)
            runstate.put_run(change, run)

        mutate(
            self.state.journal,
            start,
            Event("RUN_SUPERVISOR_START", f"supervisor {os.getpid()} started", {"pid": os.getpid()}),
        )
        self.state.refresh()
        for worker in self.state.workers().values():
            if worker.process is not None or worker.status in (
                WorkerStatus.STARTING,
                WorkerStatus.RUNNING,
                WorkerStatus.IDLE,
                WorkerStatus.HANDING_OFF,
            ):
                self._kill(worker)
                self._set_worker(
                    worker.worker_id,
                    status=WorkerStatus.STOPPED,
                    process=None,
                    diagnostic=worker.diagnostic,
                    event="WORKER_RECONCILED",
                    summary=f"{worker.worker_id} generation {worker.generation} stopped after a supervisor restart",
                )
        from ..integrate.delivery import adopt_orphans
        from ..integrate.pipeline import resume_pending

        adopt_orphans(self.store, self.run_id, self.clock)
        self.state.refresh()
        if resume_pending(self):
            self.log("resuming an interrupted integration")
        self.state.refresh()

    def _loop(self) -> RunStatus:
        idle_ticks = 0
        while True:
            self.state.refresh()
            run = self.state.run()
            if run.status is RunStatus.COMPLETE:
                self.stop_all(WorkerStatus.STOPPED, "run complete")
                return run.status
            if run.disable_restart or run.status in (
                RunStatus.PAUSED,
                RunStatus.STOPPING,
                RunStatus.BLOCKED,
                RunStatus.BUDGET_LIMITED,
            ):
                self._wait_jobs()
                self.stop_all(WorkerStatus.STOPPED, f"run {run.status}")
                self.state.refresh()
                return self.state.run().status
            now = self.clock.now()
            if used_seconds(run.intervals, now) >= run.budget_seconds:
                self._set_status(
                    RunStatus.BUDGET_LIMITED, f"active-time budget of {run.budget_seconds}s spent", disable=True
                )
                continue
            self._heartbeat(now)
            self._reap()
            self._collect_jobs()
            if run.status is RunStatus.AWAITING_INPUT:
                time.sleep(self.poll)
                continue
            served = self._serve_requests()  # first: a waiting agent should not wait for provisioning
            self._restart_workers()
            self._schedule()
            self._refresh_instructions()
            # poll fast while requests are flowing, back off to ``poll`` when idle
            idle_ticks = 0 if served else idle_ticks + 1
            time.sleep(self.poll if idle_ticks > 20 else min(self.poll, 0.01))

    # -- budget and heartbeat ----------------------------------------------------------------------------------------
    def _heartbeat(self, now: float) -> None:
        if now - self._last_heartbeat >= HEARTBEAT_EVERY:
            write_private(self.dir, "heartbeat", f"{now}\n".encode())
            self._last_heartbeat = now

    def _read_heartbeat(self) -> float | None:
        try:
            data = read_private(self.dir, "heartbeat", max_bytes=64)
            return float(data) if data else None
        except (AgentOpsError, ValueError):
            return None

    def _close_budget(self) -> None:
        now = self.clock.now()
        try:
            mutate(
                self.state.journal,
                lambda change, view: runstate.put_run(change, close_intervals(view.run(), now)),
                Event("RUN_SUPERVISOR_STOP", f"supervisor {os.getpid()} stopped", {"pid": os.getpid()}),
            )
        except AgentOpsError as exc:
            self.log(f"could not close the budget interval: {exc}")

    # -- status ------------------------------------------------------------------------------------------------------
    def _set_status(self, status: RunStatus, reason: str | None, *, disable: bool = False) -> None:
        def change_status(change: Change, view: runstate.RunView) -> None:
            run = view.run()
            if run.status is RunStatus.COMPLETE:
                return
            runstate.put_run(
                change,
                replace(run, status=status, status_reason=reason, disable_restart=run.disable_restart or disable),
            )

        mutate(
            self.state.journal,
            change_status,
            Event("RUN_STATUS", f"run {status}" + (f": {reason}" if reason else ""), {"status": str(status)}),
        )
        self.log(f"run {self.run_id}: {status}{': ' + reason if reason else ''}")

    # -- workers -----------------------------------------------------------------------------------------------------
    def _set_worker(self, worker_id: str, *, event: str, summary: str, **changes: Any) -> Worker:
        def update(change: Change, view: runstate.RunView) -> Worker:
            worker = replace(view.worker(worker_id), **changes)
            runstate.put_worker(change, worker)
            return worker

        return mutate(self.state.journal, update, Event(event, summary, {"workerId": worker_id}))

    def _kill(self, worker: Worker) -> None:
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
        self.state.refresh()
        for worker in self.state.workers().values():
            if worker.worker_id in self.jobs and not self.jobs[worker.worker_id].done():
                continue
            if worker.process is not None or worker.status in (
                WorkerStatus.STARTING,
                WorkerStatus.RUNNING,
                WorkerStatus.IDLE,
            ):
                self._kill(worker)
                self._set_worker(
                    worker.worker_id,
                    status=status,
                    process=None,
                    event="WORKER_STOPPED",
                    summary=f"{worker.worker_id} stopped: {reason}",
                )

    def start_worker(self, worker_id: str) -> None:
        """Issue a new generation and launch the worker's host (the run must be active and unfenced)."""

        def next_generation(change: Change, view: runstate.RunView) -> Worker:
            run = view.run()
            if run.status is not RunStatus.ACTIVE or run.disable_restart:
                raise AgentOpsError("RUN_NOT_ACTIVE", f"run is {run.status}; no new generation starts")
            worker = view.worker(worker_id)
            worker = replace(
                worker,
                generation=worker.generation + 1,
                status=WorkerStatus.STARTING,
                process=None,
                started_at=self.clock.now(),
            )
            runstate.put_worker(change, worker)
            return worker

        worker = mutate(
            self.state.journal,
            next_generation,
            Event("WORKER_STARTING", f"{worker_id} starting a new generation", {"workerId": worker_id}),
        )
        self.state.refresh()
        worktree = Path(worker.worktree)
        doc = self._write_instructions(worker)
        spec = host_spec(self.policy, worker.host)
        recipe = recipe_path(self.store, self.run_id)
        launch = Launch(
            worktree=worktree,
            mailbox=worktree / mailbox.MAILBOX,
            prompt_file=worktree / mailbox.PROMPT,
            log_file=self._log_file(worker),
            run_id=self.run_id,
            worker_id=worker_id,
            generation=worker.generation,
            recipe=recipe if recipe.exists() else None,
        )
        mailbox.write_prompt(worktree, instructions_mod.prompt(doc))
        proc, identity = start(spec, launch, environ=self.environ)
        self.procs[worker_id] = proc
        self._set_worker(
            worker_id,
            status=WorkerStatus.RUNNING,
            process=ProcessRef(identity.pid, identity.start_time),
            event="WORKER_STARTED",
            summary=f"{worker_id} generation {worker.generation} started (pid {identity.pid})",
        )
        self.log(f"{worker_id}: generation {worker.generation} started ({spec.kind}, pid {identity.pid})")

    def _log_file(self, worker: Worker) -> Path:
        from ..gitstore.worktree import admin_dir

        admin = admin_dir(Path(worker.worktree))
        return (admin or self.dir) / "agentops" / f"host-{worker.worker_id}.log"

    def _log_tail(self, worker: Worker, lines: int = 15) -> str:
        try:
            data = self._log_file(worker).read_bytes()[-8000:].decode("utf-8", errors="replace")
        except OSError:
            return "(no log)"
        last_run = data.rsplit("\n=== generation ", 1)[-1]
        return "\n".join(last_run.splitlines()[-lines:])

    def _relevant(self, worker: Worker) -> tuple[Any, ...]:
        """What a worker's instructions depend on: rewrite them only when this changes."""
        run = self.state.run()
        answers = sum(1 for q in self.state.answers() if q.get("answer") is not None)
        tasks = self.state.tasks()
        if worker.role == "coordinator":
            seen: tuple[Any, ...] = (
                run.contract_hash,
                *sorted((t.id, str(t.status), t.revision) for t in tasks.values()),
            )
        else:
            own = tasks.get(worker.task_id or "")
            seen = (str(own.status), own.revision) if own else ()
        return (run.root_task_id, str(run.status), worker.generation, worker.diagnostic, answers, seen)

    def _write_instructions(self, worker: Worker) -> dict[str, Any]:
        recipe = recipe_path(self.store, self.run_id)
        doc = instructions_mod.instructions(
            self.state.run(), worker, self.state.tasks(), self.state.answers(), recipe if recipe.exists() else None
        )
        mailbox.write_instructions(Path(worker.worktree), doc)
        self._instructions_for[worker.worker_id] = self._relevant(worker)
        return doc

    def _refresh_instructions(self) -> None:
        """Rewrite a running worker's instructions when the state they describe changed."""
        for worker in self.state.workers().values():
            if worker.status not in (WorkerStatus.RUNNING, WorkerStatus.IDLE) or worker.worker_id in self.jobs:
                continue
            if self._instructions_for.get(worker.worker_id) != self._relevant(worker):
                try:
                    self._write_instructions(worker)
                except AgentOpsError as exc:
                    self.log(f"{worker.worker_id}: cannot write instructions: {exc}")

    def _restart_workers(self) -> None:
        """Start every worker that needs a generation: new ones, and stopped ones of an active run."""
        for worker in list(self.state.workers().values()):
            if worker.worker_id in self.jobs:
                continue
            if worker.status in (WorkerStatus.ASSIGNED, WorkerStatus.STOPPED, WorkerStatus.FENCED):
                if worker.generation >= MAX_GENERATIONS:
                    self.block_worker(
                        worker.worker_id,
                        "RUN_NO_PROGRESS",
                        f"{worker.worker_id} reached {MAX_GENERATIONS} generations without delivering",
                    )
                    continue
                try:
                    self.start_worker(worker.worker_id)
                except AgentOpsError as exc:
                    if exc.code == "RUN_NOT_ACTIVE":
                        return
                    self.block_worker(worker.worker_id, exc.code, exc.message)
                self.state.refresh()

    def _reap(self) -> None:
        """Find workers whose process ended without a delivery: a failure each."""
        for worker in list(self.state.workers().values()):
            if worker.status not in (WorkerStatus.RUNNING, WorkerStatus.IDLE, WorkerStatus.STARTING):
                continue
            if worker.worker_id in self.jobs:
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
            self.fail_worker(
                worker.worker_id,
                "RUN_WORKER_EXITED",
                f"the agent exited ({status}) without delivering; the end of its log:\n{self._log_tail(worker)}",
                {"exitCode": exit_code},
            )
        self.state.refresh()

    def fail_worker(
        self, worker_id: str, code: str, message: str, detail: Mapping[str, Any], head: str | None = None
    ) -> bool:
        """Record a failure; restart (True) or block on no progress (False)."""
        from ..gitstore.checkout import head as checkout_head

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
            self._set_worker(
                worker_id, failures=failures, process=None, event="WORKER_FAILED", summary=f"{worker_id}: {code}"
            )
            self.block_worker(
                worker_id, "RUN_NO_PROGRESS", f"the same failure twice without progress ({code}): {message[:2000]}"
            )
            return False
        diagnostic = (
            f"Generation {worker.generation} failed ({code}): {message[:6000]}\n"
            "Fix the cause and try again; the same failure twice without new commits blocks the task."
        )
        self._set_worker(
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

    def block_worker(self, worker_id: str, code: str, reason: str) -> None:
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
            if worker.role == "coordinator":
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
            self._kill(worker)
        mutate(
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

    # -- jobs --------------------------------------------------------------------------------------------------------
    def submit(self, worker_id: str, job: Callable[[Store], Any]) -> None:
        """Run ``job`` in a thread with its own repository handle (pygit2 objects are not shared across threads)."""

        def run_job() -> Any:
            store = Store(
                pygit2.Repository(str(self.store.git_dir)),
                clock=self.clock,
                identity=self.store.identity,
                fsync=self.store.fsync,
            )
            return job(store)

        self.jobs[worker_id] = self.executor.submit(run_job)

    def _collect_jobs(self) -> None:
        """Act on finished jobs: {"action": "ok"}, {"action": "block", code, reason} or {"action": "fail", ...}."""
        for worker_id, future in list(self.jobs.items()):
            if not future.done():
                continue
            del self.jobs[worker_id]
            self.state.refresh()
            error = future.exception()
            if error is not None:
                detail = "".join(traceback.format_exception(error))[-4000:]
                code = error.code if isinstance(error, AgentOpsError) else "RUN_REQUEST_FAILED"
                self.log(f"{worker_id}: job failed: {error}")
                self.fail_worker(worker_id, code, f"{error}\n{detail}", {"job": type(error).__name__})
            else:
                result = future.result() or {"action": "ok"}
                if result["action"] == "block":
                    self.block_worker(worker_id, result["code"], result["reason"])
                elif result["action"] == "fail":
                    self._answer_failed_handoff(worker_id, result)
            self.state.refresh()

    def _answer_failed_handoff(self, worker_id: str, result: dict[str, Any]) -> None:
        from .requests import record_refusal

        worker = self.state.workers().get(worker_id)
        answer = record_refusal(
            self,
            worker_id,
            result["request"],
            result["requestDigest"],
            result["rawDigest"],
            AgentOpsError(result["code"], result["message"][:8000]),
        )
        if worker is not None:
            try:
                mailbox.write_response(Path(worker.worktree), answer)
            except AgentOpsError:
                pass
        self.fail_worker(worker_id, result["code"], result["message"], result["detail"], head=result["head"])

    def _wait_jobs(self) -> None:
        for future in list(self.jobs.values()):
            try:
                future.result(timeout=600)
            except Exception as exc:  # noqa: BLE001 -- _collect_jobs records it as the worker's failure
                self.log(f"a job ended with {type(exc).__name__}")
        self._collect_jobs()

    # -- scheduling and requests (see scheduler.py and requests.py) --------------------------------------------------
    def _schedule(self) -> None:
        from .scheduler import schedule

        schedule(self)

    def _serve_requests(self) -> bool:
        from .requests import serve

        served = False
        for worker in list(self.state.workers().values()):
            if worker.status in (WorkerStatus.RUNNING, WorkerStatus.IDLE) and worker.worker_id not in self.jobs:
                served = serve(self, worker) or served
                self.state.refresh()
                if self.state.run().status is not RunStatus.ACTIVE:
                    return served
        return served

    def fault(self, point: str) -> None:
        """Crash-test injection: ``AGENTOPS_FAULT=<point>`` in the supervisor's environment kills it (SIGKILL)
        right there, so tests can prove every step is recoverable. Never set in normal use."""
        if self.environ.get("AGENTOPS_FAULT") == point:
            self.log(f"fault injection: SIGKILL at {point}")
            os.kill(os.getpid(), 9)

    def current_run(self) -> Run:
        self.state.refresh()
        return self.state.run()
