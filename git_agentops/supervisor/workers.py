"""The worker lifecycle: start a generation, stop it, notice it ended, and decide between restart and block.

* **start** -- issue a new generation by CAS (only while the run is active, unfenced and no policy transition is
  pending: ``RUN_POLICY_TRANSITION_PENDING``), write its instructions and prompt, launch its host in its worktree;
* **kill** -- SIGTERM the worker's process group, SIGKILL after the grace, and reap it: then nothing of it runs;
* **reap** -- a worker whose process ended has its commits taken out of its quarantine (its branch mirrored), is
  accounted (the session id and usage its host reported) and judged: a coordinator that ended its turn after
  planning is *idle* (:mod:`git_agentops.model.lifecycle`); any other end without a delivery is a failure
  (``RUN_WORKER_EXITED``, with the end of its log); a resumed session that failed at once starts afresh;
* **wake** -- an idle coordinator starts again (a new generation, its session resumed) once per event needing it;
* **reconcile** -- a supervisor that takes over stops the process groups a dead one left running (or, refusing the
  run, stops them and leaves it): an interruption, never the agent's failure (:func:`~git_agentops.model.lifecycle.
  interrupted`); the next generation is told why it starts;
* **fail** -- record the failure; restart with a diagnostic, unless it is the same failure twice in a row
  (:func:`~git_agentops.model.run.no_progress`: the same commands failing with the same normalised lines, new
  commits or not), which blocks, or the worker failed :data:`~git_agentops.model.run.MAX_GENERATIONS` generations;
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

from .. import eventkinds as kinds
from ..clock import Clock
from ..errors import AgentOpsError, RunNotActive, TransitionPending
from ..gitstore.checkout import admin_dir
from ..gitstore.checkout import head as checkout_head
from ..gitstore.journal import Change, Event
from ..gitstore.repo import Store
from ..hosts.launch import Launch, generation_output, generation_tail, host_spec, start
from ..model.lifecycle import (
    Wake,
    allowance_spent,
    failed_generations,
    idle_problem,
    interrupted,
    restart_wake,
)
from ..model.policy import Policy
from ..model.run import (
    NO_PROGRESS_REPEATS,
    Failure,
    ProcessRef,
    Role,
    RunStatus,
    Worker,
    WorkerStatus,
    budget_spent,
    dependents,
    fingerprint,
    no_progress,
)
from ..model.task import TaskStatus
from ..process.groups import ProcessIdentity, is_alive
from ..protocol import instructions, mailbox
from ..runs import state as runstate
from ..runs import tasks as taskbook
from ..runs.controls import Stopped, run_processes, stop_group, stop_stray
from ..verify.failing import output_of
from ..verify.workspaces import mirror_branch
from .briefing import Briefing
from .cache import StateCache
from .confine import Confinement
from .ports import Binding
from .usage import account

ALIVE = (WorkerStatus.STARTING, WorkerStatus.RUNNING)
"""A generation's process runs (an ``idle`` coordinator has none: it ended its turn and waits to be woken)."""


class Workers:
    """The workers of one run, as the loop thread manages them; ``jobs`` is the loop's job table."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        *,
        state: StateCache,
        binding: Callable[[], Binding],
        environ: Mapping[str, str],
        clock: Clock,
        log: Callable[[str], None],
        grace: float,
        run_dir: Path,
        briefing: Briefing,
        jobs: Mapping[str, Future[Any]],
        pending: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.state = state
        self.binding = binding  # the loop's: the policy in force and the confinement of generations, one value
        self.environ = environ
        self.clock = clock
        self.log = log
        self.grace = grace
        self.run_dir = run_dir
        self.briefing = briefing
        self.jobs = jobs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}  # worker id -> the generation this supervisor started
        self.pending = pending  # the pending policy transition, if any: no generation starts meanwhile

    @property
    def policy(self) -> Policy:
        """The policy in force (the loop's binding)."""
        return self.binding().policy

    @property
    def confine(self) -> Confinement:
        """How the generations started now are confined (the loop's binding)."""
        return self.binding().confine

    def set(
        self,
        worker_id: str,
        *,
        event: kinds.EventCode,
        summary: str,
        data: Mapping[str, Any] | None = None,
        **changes: Any,
    ) -> Worker:
        """Update one worker record by CAS, recording ``event`` (with ``data`` besides the worker's id)."""

        def update(change: Change, view: runstate.RunView) -> Worker:
            worker = replace(view.worker(worker_id), **changes)
            runstate.put_worker(change, worker)
            return worker

        return runstate.mutate(
            self.state.journal, update, Event(event, summary, {**(data or {}), "workerId": worker_id})
        )

    # -- processes ---------------------------------------------------------------------------------------------------
    def kill(self, worker: Worker) -> dict[str, Any]:
        """Stop a worker's process group (SIGTERM, SIGKILL after the grace) and reap it, and every process that left
        the group but carries its ``AGENTOPS_WORKER_ID`` (a ``setsid`` daemon): nothing of the worker is left running.
        Returns the changes that account for the stopped generation (:meth:`account`); empty without a process."""
        proc = self.procs.pop(worker.worker_id, None)
        had_process = proc is not None or worker.process is not None
        if worker.process is not None:
            stop_group(worker.process, grace=self.grace)
        for identity, worker_id, _ in run_processes(self.run_id):  # what escaped its group (a setsid daemon)
            if worker_id == worker.worker_id:
                stop_stray(identity, grace=self.grace)
        if proc is not None:
            try:
                proc.wait(timeout=self.grace + 2)
            except subprocess.TimeoutExpired:
                self.log(f"{worker.worker_id}: pid {proc.pid} survived SIGKILL; it will be reaped later")
        return self.account(worker) if had_process else {}

    def process_ended(self, worker: Worker) -> bool:
        """Whether the generation's process (the one this supervisor started, else the recorded one) has exited."""
        proc = self.procs.get(worker.worker_id)
        if proc is not None:
            return proc.poll() is not None
        ref = worker.process
        return ref is None or not is_alive(ProcessIdentity(ref.pid, ref.start_time))

    def account(self, worker: Worker) -> dict[str, Any]:
        """The session id and usage the host reported for the worker's current generation, as worker changes
        (:func:`.usage.account`)."""
        kind = host_spec(self.policy, worker.host).kind
        return account(kind, worker, generation_output(self.log_file(worker), worker.generation), self.note)

    def note(self, worker_id: str, code: kinds.EventCode, summary: str) -> None:
        """An event on the run's log that changes no state (a diagnostic)."""
        runstate.mutate(self.state.journal, lambda change, view: None, Event(code, summary, {"workerId": worker_id}))

    def stop_all(self, status: WorkerStatus, reason: str) -> None:
        """Stop every live worker whose job is not running, recording ``status``."""
        self.state.refresh()
        for worker in self.state.workers().values():
            job = self.jobs.get(worker.worker_id)
            if job is not None and not job.done():
                continue
            if worker.process is not None or worker.status in ALIVE:
                accounted = self.kill(worker)
                self.set(
                    worker.worker_id,
                    status=status,
                    process=None,
                    event=kinds.WORKER_STOPPED,
                    summary=f"{worker.worker_id} stopped: {reason}",
                    **accounted,
                )

    def reconcile(
        self, *, event: kinds.EventCode = kinds.WORKER_RECONCILED, why: str = "the previous supervisor died"
    ) -> list[Stopped]:
        """Stop whatever the generations of a dead supervisor left running; returns the groups that still ran.

        Run by the supervisor that takes the run's lock (to serve it, or refusing to: then ``event`` and ``why`` say
        so). Each such worker is :func:`~git_agentops.model.lifecycle.interrupted` -- not failed -- by ``event``;
        then any other process naming the run (launched but not recorded yet, a reviewer) is stopped as well.
        """
        stopped: list[Stopped] = []
        self.state.refresh()
        for worker in list(self.state.workers().values()):
            process = worker.process
            if process is None and worker.status not in (*ALIVE, WorkerStatus.HANDING_OFF):
                continue
            data: dict[str, Any] = {"workerId": worker.worker_id, "generation": worker.generation, "reason": why}
            what = f"{worker.worker_id} generation {worker.generation}"
            survivors = stop_group(process, grace=self.grace) if process is not None else None
            if process is not None and survivors is not None:
                stopped.append(Stopped(worker.worker_id, worker.generation, process.pid, survivors))
                data["process"] = stopped[-1].to_json()
                what += f" (pid {process.pid}, still running)"
            changes = self.account(worker) if process is not None else {}
            self._interrupt(worker.worker_id, why, changes, Event(event, f"{what} stopped: {why}", data))
        for identity, worker_id, generation in run_processes(self.run_id):
            survivors = stop_stray(identity, grace=self.grace)
            if survivors is not None:
                stopped.append(Stopped(worker_id, generation, identity.pid, survivors))
                self.note(worker_id, event, f"{stopped[-1].describe()}, not in the run state, stopped: {why}")
        self.state.refresh()
        return stopped

    def _interrupt(self, worker_id: str, why: str, changes: Mapping[str, Any], event: Event) -> None:
        def update(change: Change, view: runstate.RunView) -> None:
            runstate.put_worker(change, replace(interrupted(view.worker(worker_id), why), **changes))

        runstate.mutate(self.state.journal, update, event)

    # -- generations ---------------------------------------------------------------------------------------------------
    def start(self, worker_id: str, *, wake: list[Wake] | None = None) -> None:
        """Issue a new generation and launch the worker's host (the run must be active and unfenced).

        ``wake`` are the events an idle coordinator is woken for: recorded on it in the same commit, and told in its
        prompt. Where the host can resume and the worker has a session, the session is resumed with a short prompt
        of what changed.
        """
        spec = host_spec(self.policy, self.state.workers()[worker_id].host)

        if (transition := self.pending()) is not None:
            raise AgentOpsError("RUN_POLICY_TRANSITION_PENDING", f"{transition} is pending; no generation starts")
        held = None  # ports and services: the provisioning's, or new after a restart; before a generation is issued
        if (workspaces := self.binding().ctx.workspaces) is not None and not workspaces.empty:
            held = workspaces.acquire(worker_id)

        def next_generation(change: Change, view: runstate.RunView) -> Worker:
            run = view.run()
            if run.status is not RunStatus.ACTIVE or run.disable_restart:
                raise AgentOpsError("RUN_NOT_ACTIVE", f"run is {run.status}; no new generation starts")
            if (spent := budget_spent(run, view.workers(), self.clock.now())) is not None:  # the loop ends the run
                raise AgentOpsError("RUN_NOT_ACTIVE", f"{spent}; no new generation starts")
            current = view.worker(worker_id)
            told = [f"- {event.reason}" for event in wake or ()] + [line for line in [restart_wake(current)] if line]
            worker = replace(
                current,
                generation=current.generation + 1,
                status=WorkerStatus.STARTING,
                process=None,
                started_at=self.clock.now(),
                wake="\n".join(told) if told else None,
                resumed=current.session if spec.resume and current.session else None,
                interrupted=None,
                woken_for=(*current.woken_for, *(event.key for event in wake or ())),
            )
            runstate.put_worker(change, worker)
            return worker

        why = f" (woken: {', '.join(event.kind for event in wake)})" if wake else ""
        worker = runstate.mutate(
            self.state.journal,
            next_generation,
            Event(
                kinds.WORKER_STARTING,
                f"{worker_id} starting a new generation{why}",
                {"workerId": worker_id, "policyConfigHash": self.policy.config_hash},
            ),
        )
        self.state.refresh()
        worktree = Path(worker.worktree)
        if not worktree.is_dir():
            raise AgentOpsError(
                "RUN_WORKTREE_REMOVED",
                f"{worker_id}'s worktree {worktree} was removed ('git agentops-run clean'); its work is on its branch "
                f"{worker.branch} and in 'git agentops-run salvage {self.run_id}'",
            )
        doc = self.briefing.write(worker)
        recipe = self.briefing.recipe
        session = worker.resumed
        launch = Launch(
            worktree=worktree,
            mailbox=worktree / mailbox.MAILBOX,
            prompt_file=worktree / mailbox.PROMPT,
            log_file=self.log_file(worker),
            run_id=self.run_id,
            worker_id=worker_id,
            generation=worker.generation,
            recipe=recipe if recipe.exists() else None,
            git_common_dir=self.store.common_dir,
            session=session,
        )
        text = instructions.resume_prompt(doc) if session else instructions.prompt(doc)
        mailbox.write_prompt(worktree, text)
        if held is not None:
            launch = replace(launch, workspace_env=held.env)
        sandbox = self.confine.sandbox(worker, spec, launch.recipe)
        proc, identity = start(
            spec, launch, environ=self.environ, sandbox=sandbox, spec_path=self.confine.spec_path(worker)
        )
        self.procs[worker_id] = proc
        self.set(
            worker_id,
            status=WorkerStatus.RUNNING,
            process=ProcessRef(identity.pid, identity.start_time),
            sandbox=worker.ran_at(sandbox.mode),  # the weakest level of any generation (model.sandbox)
            event=kinds.WORKER_STARTED,
            summary=f"{worker_id} generation {worker.generation} started (pid {identity.pid})",
        )
        self.log(f"{worker_id}: generation {worker.generation} started ({spec.kind}, pid {identity.pid})")

    def release_finished(self) -> None:
        """Free the workspaces (ports, services) of workers that are done: delivered or blocked, no job running."""
        workspaces = self.binding().ctx.workspaces
        if workspaces is None or workspaces.empty:
            return
        for worker in self.state.workers().values():
            if worker.status in (WorkerStatus.DELIVERED, WorkerStatus.BLOCKED) and worker.worker_id not in self.jobs:
                workspaces.release(worker.worker_id)

    def restart(self) -> None:
        """Start every worker that needs a generation: new ones, and stopped ones of an active run."""
        for worker in list(self.state.workers().values()):
            if worker.worker_id in self.jobs:
                continue
            if worker.status in (WorkerStatus.ASSIGNED, WorkerStatus.STOPPED, WorkerStatus.FENCED):
                if allowance_spent(worker):
                    self.block(
                        worker.worker_id,
                        "RUN_NO_PROGRESS",
                        f"{worker.worker_id} failed {failed_generations(worker)} generations without delivering "
                        "(supervisor restarts not counted)",
                    )
                    continue
                try:
                    self.start(worker.worker_id)
                except (RunNotActive, TransitionPending):
                    return
                except AgentOpsError as exc:
                    self.block(worker.worker_id, exc.code, exc.message)
                self.state.refresh()

    # -- endings -------------------------------------------------------------------------------------------------------
    def log_file(self, worker: Worker) -> Path:
        """The host's output log of this worker, in its worktree's admin dir (never in the work tree)."""
        admin = admin_dir(Path(worker.worktree))
        return (admin or self.run_dir) / "agentops" / f"host-{worker.worker_id}.log"

    def log_tail(self, worker: Worker, lines: int = 15) -> str:
        """The last lines its current generation wrote, without a secret the supervisor holds (it goes into state)."""
        return generation_tail(self.log_file(worker), worker.generation, lines, self.confine.held)

    def reap(self) -> None:
        """Judge every worker whose process ended without a delivery (see the module docstring)."""
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
            if worker.process is not None:
                stop_group(worker.process, grace=self.grace)  # what it left running in its group dies with it
            mirror_branch(self.store, Path(worker.worktree), worker.branch)  # its commits, out of its quarantine
            self._ended(worker, exit_code, self.account(worker))
        self.state.refresh()

    def _ended(self, worker: Worker, exit_code: int | None, accounted: dict[str, Any]) -> None:
        tail = self.log_tail(worker)
        if worker.resumed and exit_code not in (0, None):
            self.set(
                worker.worker_id,
                status=WorkerStatus.STOPPED,
                process=None,
                session=None,
                resumed=None,
                event=kinds.HOST_RESUME_FAILED,
                summary=f"{worker.worker_id}: resuming session {worker.resumed} failed "
                f"(status {exit_code}); starting a fresh session",
                **{k: v for k, v in accounted.items() if k != "session"},
            )
            last = tail.splitlines()[-1] if tail else "no output"
            self.log(f"{worker.worker_id}: resume failed ({last}); starting fresh")
            return
        if worker.role is Role.COORDINATOR:
            problem = idle_problem(self.state.run(), self.state.tasks(), exit_code)
            if problem is None:
                self.set(
                    worker.worker_id,
                    status=WorkerStatus.IDLE,
                    process=None,
                    event=kinds.WORKER_IDLE,
                    summary=f"{worker.worker_id} ended its turn; idle until an event needs it",
                    **accounted,
                )
                self.log(f"{worker.worker_id}: ended its turn; idle")
                return
            message = f"The coordinator ended, but {problem}. The end of its output:\n{tail}"
        elif exit_code == 0:
            message = (
                "The agent ended its turn without handing off: commit your work and run "
                f"'git agentops-request handoff' to deliver it. The end of its output:\n{tail}"
            )
        else:
            status = f"status {exit_code}" if exit_code is not None else "status unknown"
            message = f"The agent exited ({status}) without delivering. The end of its output:\n{tail}"
        self.fail(worker.worker_id, "RUN_WORKER_EXITED", message, {"exitCode": exit_code}, changes=accounted)

    def fail(
        self,
        worker_id: str,
        code: str,
        message: str,
        detail: Mapping[str, Any],
        head: str | None = None,
        *,
        changes: Mapping[str, Any] | None = None,
    ) -> bool:
        """Record a failure; restart (True) or block on no progress (False). ``changes`` go into the same update."""
        worker = self.state.workers().get(worker_id, None)
        if worker is None:
            return False
        if head is None:
            try:
                head = checkout_head(Path(worker.worktree)).commit
            except AgentOpsError:
                head = None
        output = output_of(detail)
        failure = Failure(
            fingerprint(code, detail), code, message[:8000], worker.generation, head, self.clock.now(), output
        )
        failures = (*worker.failures, failure)[-10:]
        extra = dict(changes or {})
        stuck = no_progress(failures)
        if not stuck:
            extra["status"] = WorkerStatus.STOPPED
            extra["diagnostic"] = (
                f"Generation {worker.generation} failed ({code}): {message[:6000]}\n"
                "The same failure twice in a row blocks the task: the same commands failing with the same lines, "
                "even on new commits, or any failure again with nothing new committed."
            )
        self.set(
            worker_id,
            failures=failures,
            process=None,
            event=kinds.WORKER_FAILED,
            summary=f"{worker_id}: {code}",
            # what a reader needs to say why (the CLI reads the failing lines from the evidence on ``head``)
            data={"code": code, "generation": worker.generation, "head": head, "output": output},
            **extra,
        )
        if stuck:
            same = "failing the same way" if output is not None else "with nothing new committed"
            generations = " and ".join(str(f.generation) for f in failures[-NO_PROGRESS_REPEATS:])
            self.block(
                worker_id,
                "RUN_NO_PROGRESS",
                f"the same failure twice in a row ({code}, generations {generations}, {same}): {message[:2000]}",
            )
            return False
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
        accounted = self.kill(worker) if worker is not None else {}
        if accounted:
            self.set(worker_id, event=kinds.WORKER_STOPPED, summary=f"{worker_id} stopped to be blocked", **accounted)
        runstate.mutate(
            self.state.journal,
            block,
            Event(
                kinds.WORKER_BLOCKED,
                f"{worker_id} blocked: {code}",
                {"workerId": worker_id, "code": code, "reason": reason[:2000]},
            ),
        )
        self.log(f"{worker_id}: BLOCKED ({code}) {reason.splitlines()[0] if reason else ''}")
        self.state.refresh()
