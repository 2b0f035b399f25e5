"""The supervisor: one process per run that starts workers, answers their requests and enforces the rules.

Exactly one supervisor serves a run: it holds an OS lock (``flock``) on ``$GIT_COMMON_DIR/agentops/runs/<run>/
supervisor.lock`` for its whole life; a second one gets ``RUN_SUPERVISOR_ACTIVE``; a ``kill -9`` releases the
lock with the process. Everything it knows is in the run's journal, so a new supervisor continues where a dead
one stopped: at start it stops any worker process the old one left behind (pid + start time), adopts a delivery
whose ref was created just before a crash, closes the budget interval the crash left open at the last
heartbeat, and restarts workers with a **new generation**, so nothing an old generation does can be published.
Being restarted is not the workers' failure: it uses none of their allowance (:mod:`git_agentops.model.lifecycle`).

A supervisor that will not serve the run -- its policy is not trusted, the run is not active, or it restarted too
often (``RUN_RESTART_STORM``) -- still stops the agent processes a dead one left behind before it refuses, records
that (``WORKER_LEFTOVER_STOPPED``, ``RUN_SUPERVISOR_REFUSED``) and says so in its refusal; so does
:meth:`Supervisor.stop_unsupervised`, which ``run stop`` and ``run pause`` use when no supervisor is left.

Each tick (every ``poll`` seconds) it: obeys the run status (paused/stopping/blocked/budget-limited end it,
awaiting-input idles it), charges the budget, reaps exited workers (:mod:`.workers`), acts on finished jobs,
answers at most one request per worker (:mod:`.requests`, :mod:`.actions`), starts workers that need a (new)
generation, provisions ready tasks up to ``max_workers`` (:mod:`.scheduler`) and keeps instructions current
(:mod:`.briefing`). Slow work -- provisioning a worktree, verifying a handoff, integrating -- runs in job threads
that get a frozen :class:`~git_agentops.runs.jobs.JobContext`, never the supervisor itself.

The request actions and the scheduler decide from a :class:`~.ports.Snapshot` and return effects; the loop carries
them out (:mod:`.effects`). The policy in force is one :class:`~.ports.Binding` (the policy, the jobs' context, the
confinement of generations), swapped whole by :meth:`Supervisor.rebind`.
"""

from __future__ import annotations

import contextlib
import os
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

import pygit2

from .. import eventkinds as kinds
from ..clock import Clock
from ..controls.apply import Fetcher, apply_pending
from ..errors import AgentOpsError, LockHeld, RunNotActive, StateTampered, raised_as
from ..gitstore.journal import Change, Event, Journal
from ..gitstore.private import file_lock, remove_private, write_private
from ..gitstore.repo import Store
from ..gitstore.salvage import Salvaged
from ..integrate.delivery import adopt_orphans, reverifier
from ..integrate.pipeline import clean_up, integrate
from ..lease import tenure
from ..lease.record import DEFAULT_TTL
from ..model.lifecycle import wake_events
from ..model.policy import Finalize, Policy
from ..model.run import (
    Role,
    Run,
    RunStatus,
    Worker,
    WorkerStatus,
    budget_spent,
    close_intervals,
    is_restart_storm,
    open_interval,
)
from ..notify.config import load_notify
from ..notify.deliver import Notifier
from ..policy.trust import Verdict, require_trusted
from ..protocol import mailbox
from ..runs import state as runstate
from ..runs.controls import Stopped
from ..runs.jobs import Answered, Block, Delivered, Integrated, JobContext, JobResult, Left, Refused, Wait
from ..transition import drive as transition
from ..transition import journal as transitions
from ..transition.record import policy_changes
from ..verify.credentials import HeldSecrets
from ..verify.proof import remove_ended_slots, sweep_slots
from ..workspace.live import Workspaces
from ..workspace.salvage import remove_with_salvage
from . import requests, scheduler
from .actions import ACTIONS, auto_finalize
from .briefing import Briefing
from .cache import StateCache
from .confine import Confinement
from .effects import execute
from .ports import Binding, Snapshot
from .refusals import Refusals
from .turns import TurnEnds, turn_grace
from .workers import Workers

HEARTBEAT_EVERY: Final = 2.0
CONTROLS_EVERY: Final = 0.5
STOP_GRACE: Final = 3.0
STOPPED_RUN: Final = frozenset({RunStatus.PAUSED, RunStatus.STOPPING, RunStatus.BLOCKED, RunStatus.BUDGET_LIMITED})


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
        machine: str | None = None,
        lease_ttl: float = DEFAULT_TTL,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.environ = MappingProxyType(dict(environ))
        self.clock = clock
        self.poll = poll
        self._log = log or (lambda message: None)
        self.dir = runstate.run_dir(store, run_id)
        self.state = StateCache(store, run_id, log=self.log)
        self.jobs: dict[str, Future[JobResult]] = {}  # worker id -> its provisioning, handoff or integration job
        self.executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="agentops-job")
        self.workspaces = Workspaces(
            policy.workspace,
            run_id=run_id,
            common_dir=store.common_dir,
            environ=self.environ,
            clock=clock,
            log=self.log,
        )
        ctx = JobContext(
            run_id=run_id,
            policy=policy,
            trust=trust,
            environ=self.environ,
            clock=clock,
            run_dir=self.dir,
            log=self.log,
            fault=self.fault,
            policy_file=transitions.blob_of(transitions.bound_file(store, run_id)),
            held=HeldSecrets.from_environ(self.environ),  # what agents never get, and deliveries never carry
            workspaces=self.workspaces,
        )
        self.bound = Binding(policy, ctx, Confinement(store, policy, self.environ, self.dir, self.log))
        self.transition: str | None = None  # the pending policy transition (transition.drive)
        self.refusals = Refusals()  # refusals held back per worker and code (supervisor.requests)
        self.machine, self.lease_ttl = machine, lease_ttl  # the lease of a run on a remote (lease.tenure)
        self.lease_renewed, self.lease_retry_at, self.lease_lost = 0.0, 0.0, False
        self.briefing = Briefing(self.state, runstate.recipe_path(store, run_id), self.log)
        self.workers = Workers(
            store,
            run_id,
            state=self.state,
            binding=lambda: self.bound,
            environ=self.environ,
            clock=clock,
            log=self.log,
            grace=grace,
            run_dir=self.dir,
            briefing=self.briefing,
            jobs=self.jobs,
            pending=lambda: self.transition,
        )
        self.turns = TurnEnds(self.workers.kill, self.workers.process_ended, self.log)
        self._last_heartbeat = 0.0
        self.fetcher: Fetcher | None = None  # signed controls from the remote (git_agentops.controls)
        self.held = False  # the integration waits for people's review: resumed when a decision makes the run active
        self._controls_checked = 0.0

    # -- what handlers see (supervisor.ports.Loop) ------------------------------------------------------------------
    @property
    def policy(self) -> Policy:
        return self.bound.policy

    @property
    def ctx(self) -> JobContext:
        return self.bound.ctx

    @property
    def journal(self) -> Journal:
        return self.state.journal

    def snapshot(self) -> Snapshot:
        return Snapshot.of(self.state, self.bound, busy=self.jobs, transition=self.transition)

    def log(self, message: str) -> None:
        self._log(message)

    def respond(self, worker: Worker, answer: Answered) -> AgentOpsError | None:
        try:
            mailbox.write_response(Path(worker.worktree), answer.response)  # the one writer of response.json
        except AgentOpsError as exc:
            return exc
        return None

    def set_worker(self, worker_id: str, *, event: kinds.EventCode, summary: str, **changes: Any) -> Worker:
        return self.workers.set(worker_id, event=event, summary=summary, **changes)

    def kill(self, worker: Worker) -> dict[str, Any]:
        return self.workers.kill(worker)

    def end_turn(self, worker: Worker, then: Callable[[Mapping[str, Any], bool], None]) -> None:
        self.turns.end(worker, turn_grace(self.policy), then)

    def stop_all(self, status: WorkerStatus, reason: str) -> None:
        self.turns.finish(now=True)  # a handoff in its grace goes on to its delivery job first
        self.workers.stop_all(status, reason)

    def busy(self, worker_id: str) -> bool:
        return worker_id in self.jobs

    def jobs_running(self) -> bool:
        return bool(self.jobs)

    def block(self, worker_id: str, code: str, reason: str) -> None:
        self.workers.block(worker_id, code, reason)

    def brief_policy(self) -> None:
        changes = str(policy_changes(self.policy.doc))
        self.briefing.policy = {"changes": changes, "transitions": transitions.brief(self.store, self.run_id)}

    def track_transition(self, transition_id: str | None) -> None:
        self.transition = transition_id
        self.brief_policy()

    def rebind(self, policy: Policy, policy_file: bytes | None) -> None:
        ctx = replace(self.ctx, policy=policy, policy_file=transitions.blob_of(policy_file))
        self.bound = Binding(policy, ctx, Confinement(self.store, policy, self.environ, self.dir, self.log))
        self.workspaces.spec = policy.workspace  # for workspaces made from now on; held ones keep what they have
        self.log(f"now bound to the policy {policy.config_hash[:12]}")

    def submit(self, worker_id: str, job: Callable[[Store], JobResult]) -> None:
        """Run ``job`` in a thread with its own repository handle (pygit2 objects are not shared across threads)."""

        def run_job() -> JobResult:
            store = Store(
                pygit2.Repository(str(self.store.git_dir)),
                clock=self.clock,
                identity=self.store.identity,
                fsync=self.store.fsync,
            )
            return job(store)

        self.jobs[worker_id] = self.executor.submit(run_job)

    def fault(self, point: str) -> None:
        """Crash-test injection: ``AGENTOPS_FAULT=<point>`` in the supervisor's environment kills it (SIGKILL)
        right there, so tests can prove every step is recoverable. Never set in normal use."""
        if self.environ.get("AGENTOPS_FAULT") == point:
            self.log(f"fault injection: SIGKILL at {point}")
            os.kill(os.getpid(), 9)

    def current_run(self) -> Run:
        """The run as the journal says now."""
        self.state.refresh()
        return self.state.run()

    # -- lifecycle ---------------------------------------------------------------------------------------------------
    def serve(self) -> RunStatus:
        """Hold the lock and supervise until the run ends. ``RUN_SUPERVISOR_ACTIVE``, ``RUN_NOT_ACTIVE``."""
        try:
            with file_lock(self.dir, "supervisor.lock", blocking=False):
                try:
                    remove_private(self.dir, runstate.STOPPING)  # a dead holder's
                    write_private(self.dir, "supervisor.pid", f"{os.getpid()}\n".encode())
                    while True:
                        remove_private(self.dir, runstate.RESTART)  # each start is the restart one asked for
                        try:
                            status = self._serve_locked()
                        except RunNotActive:
                            if not self._resumed_while_stopping():
                                raise
                        else:
                            # a run it left stopped may have been resumed since (even before the loop's last read)
                            if status is RunStatus.COMPLETE or not self._resumed_while_stopping():
                                return status
                        self.log(f"{self.run_id} was made active again while this supervisor stopped: serving it again")
                finally:  # while the lock is held: a next supervisor of the run never meets this one's services
                    self.executor.shutdown(wait=True, cancel_futures=False)
                    self.workspaces.release_all()  # services stop and ports are freed with the supervisor
        except LockHeld as exc:
            raise AgentOpsError("RUN_SUPERVISOR_ACTIVE", f"another supervisor already serves {self.run_id}") from exc
        finally:
            self.executor.shutdown(wait=True, cancel_futures=False)
            sweep_slots(self.environ, self.store)  # this run's clean checkouts if it ended, and dead runs' leftovers

    def _resumed_while_stopping(self) -> bool:
        """Whether the run was made active again (``resume``, ``answer``) while this supervisor was leaving it.

        A ``resume`` that found the lock held took the run as served; so before letting the lock go, this says it
        is stopping (:data:`~git_agentops.runs.state.STOPPING`) and only then reads the run's status. Either that
        read sees the resumed run (and this supervisor serves it again), or the resume, which wrote the status
        before it looked at the lock, sees the marker and waits for the lock to start a supervisor of its own."""
        if self.lease_lost:  # the run is another machine's now
            return False
        write_private(self.dir, runstate.STOPPING, f"{os.getpid()}\n".encode())
        run = self.current_run()
        if run.status in (RunStatus.ACTIVE, RunStatus.AWAITING_INPUT) and not run.disable_restart:
            remove_private(self.dir, runstate.STOPPING)
            return True
        return False

    def _serve_locked(self) -> RunStatus:
        tenure.claim(self)  # a run served from several machines: before anything is written here
        run = self.state.run()
        if run.status is RunStatus.COMPLETE:
            self.workers.reconcile(event=kinds.WORKER_LEFTOVER_STOPPED, why="the run is complete")
            return run.status
        try:
            require_trusted(self.ctx.trust)
        except AgentOpsError as exc:
            raise tenure.refuse(self, exc) from None
        if run.disable_restart or run.status in STOPPED_RUN:
            raise tenure.refuse(
                self,
                AgentOpsError(
                    "RUN_NOT_ACTIVE",
                    f"run {self.run_id} is {run.status}{' (' + run.status_reason + ')' if run.status_reason else ''}; "
                    f"'git agentops-run resume {self.run_id}' continues it",
                ),
            )
        if stopped := self.workspaces.recover():
            self.log(f"stopped {stopped} service instance(s) an earlier supervisor of {self.run_id} left running")
        self._startup()
        notifier = self._notifier()
        self.fetcher = self._fetcher()
        try:
            return self._loop()
        except StateTampered as exc:
            return self._tampered(exc)
        except KeyboardInterrupt:
            self.log("interrupted: stopping workers; 'git agentops-run supervise' continues the run")
            self.stop_all(WorkerStatus.STOPPED, "the supervisor was interrupted")
            raise
        finally:
            if not self.lease_lost:  # a lost lease: the run is another machine's, nothing is written
                with contextlib.suppress(AgentOpsError):
                    requests.flush_refusals(self, force=True)  # no coalesced count is lost on a clean stop
                self._close_budget()
                tenure.release(self)
            if notifier is not None:
                notifier.stop()  # after the last state is written: its notification goes out too
            if self.fetcher is not None:
                self.fetcher.stop()  # its last push carries the run's last state to the remote
                self.fetcher = None

    def _startup(self) -> None:
        now = self.clock.now()
        heartbeat = runstate.read_heartbeat(self.dir)
        if is_restart_storm(self.state.run(), now):
            self.set_status(
                RunStatus.BLOCKED,
                "RUN_RESTART_STORM: more than 3 supervisor starts within 5 minutes since the last resume",
                disable=True,
            )
            raise tenure.refuse(
                self,
                AgentOpsError(
                    "RUN_RESTART_STORM",
                    f"run {self.run_id} restarted too often; it is now blocked ('git agentops-run resume "
                    f"{self.run_id}' continues it)",
                ),
            )

        def start(change: Change, view: runstate.RunView) -> None:
            run = view.run()
            if any(i.end is None for i in run.intervals):  # left open by a crash: charge up to the last heartbeat
                run = close_intervals(run, heartbeat if heartbeat is not None else now)
            run = open_interval(replace(run, supervisor_starts=(*run.supervisor_starts, now)[-20:]), now)
            runstate.put_run(change, run)

        runstate.mutate(
            self.journal,
            start,
            Event(kinds.RUN_SUPERVISOR_START, f"supervisor {os.getpid()} started", {"pid": os.getpid()}),
        )
        self.state.refresh()
        self.workers.reconcile()
        adopt_orphans(self.store, self.run_id, self.clock, reverify=reverifier(self.ctx))
        self.state.refresh()
        self.transition = transition.discover(self)  # finished before anything else
        self.brief_policy()
        if self._resume_integration():
            self.log("resuming an interrupted integration")
        self.state.refresh()

    def _notifier(self) -> Notifier | None:
        """The person's notifications for this run, delivered in a thread of their own (``[notify]`` of their
        configuration, :mod:`git_agentops.notify`); None when they asked for none. A configuration that cannot be
        read is said in the log and notifies nothing: it never stops the run."""
        try:
            config = load_notify(self.environ)
        except AgentOpsError as exc:
            self.log(f"notifications are off: {exc.code}: {exc.message}")
            return None
        if not config.commands:
            return None
        notifier = Notifier(
            self.store, self.run_id, config, run_dir=self.dir, environ=self.environ, clock=self.clock, log=self.log
        )
        notifier.start()
        return notifier

    def _fetcher(self) -> Fetcher | None:
        """Fetch the signed controls of people on other machines from ``[controls] remote`` (else ``[run] remote``)
        every ``[controls] interval`` seconds, in a thread; None without a remote (controls adopted by ``git
        agentops-sync fetch`` are still applied)."""
        remote = self.policy.controls_remote
        if remote is None or self.lease_lost or remote == self.policy.remote:
            # a run on a remote target fetches its refs (controls too) and pushes them with every lease renewal
            # (lease.tenure): a second fetcher and pusher of the same refs would only race it
            return None
        fetcher = Fetcher(self.store, self.run_id, remote, self.policy.controls_interval, log=self.log)
        fetcher.start()
        return fetcher

    def _apply_controls(self) -> None:
        """Apply the signed controls not handled yet (:func:`git_agentops.controls.apply.apply_pending`): at once
        after a fetch brought new ones, else every :data:`CONTROLS_EVERY` seconds (``git agentops-sync`` may have
        adopted some)."""
        fresh = self.fetcher is not None and self.fetcher.fresh.is_set()
        now = time.monotonic()
        if not fresh and now - self._controls_checked < CONTROLS_EVERY:
            return
        self._controls_checked = now
        if self.fetcher is not None:
            self.fetcher.fresh.clear()
        try:
            done = apply_pending(
                self.store, self.run_id, self.policy, self.clock, remote=self.policy.controls_remote, log=self.log
            )
        except StateTampered:
            raise
        except AgentOpsError as exc:
            self.log(f"signed controls not applied this time: {exc.code}: {exc.message}")
            return
        except (OSError, ValueError, pygit2.GitError) as exc:  # a damaged object or ref: said, never the run's end
            self.log(f"signed controls not applied this time: {type(exc).__name__}: {exc}")
            return
        if done:
            self.state.refresh()

    def stop_unsupervised(self, why: str) -> list[Stopped] | None:
        """Without serving the run, stop what a dead supervisor left (``WORKER_LEFTOVER_STOPPED``), holding the run's
        lock meanwhile; None, doing nothing, while a supervisor holds it (it stops its own)."""
        try:
            with file_lock(self.dir, "supervisor.lock", blocking=False):
                stopped = self.workers.reconcile(event=kinds.WORKER_LEFTOVER_STOPPED, why=why)
                remove_ended_slots(self.environ, self.store, self.run_id)  # a stopped run's clean checkouts go
                return stopped
        except LockHeld:
            return None

    def clean(self) -> tuple[list[Salvaged], dict[str, str]]:
        """``run clean``: with the run's lock, stop what a dead supervisor left running (agents, services), then save
        each worker's unhanded-off work to a salvage ref and remove its worktree (:func:`remove_with_salvage`).
        Returns the salvages made and the worktrees kept, with why. ``RUN_SUPERVISOR_ACTIVE`` while a supervisor
        serves the run; ``RUN_NOT_ACTIVE`` for a run that is still active (stop it first)."""
        try:
            with file_lock(self.dir, "supervisor.lock", blocking=False):
                run = self.current_run()
                if run.status in (RunStatus.ACTIVE, RunStatus.AWAITING_INPUT) and not run.disable_restart:
                    raise AgentOpsError(
                        "RUN_NOT_ACTIVE",
                        f"{self.run_id} is {run.status}: stop it first ('git agentops-run stop {self.run_id}'), then "
                        "clean it",
                    )
                self.workers.reconcile(event=kinds.WORKER_LEFTOVER_STOPPED, why="the run is being cleaned")
                self.workspaces.recover()
                saved: list[Salvaged] = []
                kept: dict[str, str] = {}
                for worker in self.state.workers().values():
                    if not (Path(worker.worktree).exists() or Path(worker.worktree).is_symlink()):
                        continue
                    try:
                        made = remove_with_salvage(
                            self.store, self.run_id, worker, now=int(self.clock.now()), log=self.log
                        )
                    except AgentOpsError as exc:
                        kept[worker.worker_id] = f"{exc.code}: {exc.message}"
                        continue
                    if made is not None:
                        saved.append(made)
                root = Path(run.repository) / self.policy.worktree_root / self.run_id
                with contextlib.suppress(OSError):
                    root.rmdir()  # only when empty: a kept worktree keeps it
                remove_ended_slots(self.environ, self.store, self.run_id)
                return saved, kept
        except LockHeld as exc:
            raise AgentOpsError("RUN_SUPERVISOR_ACTIVE", f"a supervisor serves {self.run_id}; stop it first") from exc

    def _resume_integration(self) -> bool:
        """After a supervisor restart: roll an interrupted integration forward. True if one was pending."""
        run = self.state.run()
        if run.integration is None or not run.integration.pending:
            return False
        self.set_worker(
            run.coordinator_id,
            status=WorkerStatus.HANDING_OFF,
            process=None,
            event=kinds.INTEGRATION_RESUMED,
            summary=f"resuming the integration at step {run.integration.status}",
        )
        ctx = self.ctx
        self.submit(run.coordinator_id, lambda store: integrate(ctx, store))
        return True

    def _loop(self) -> RunStatus:
        idle_ticks = 0
        while True:
            if remove_private(self.dir, runstate.RESTART):  # resumed from a stop this loop did not see
                self.log(f"{self.run_id} was resumed: its workers start again as new generations")
                self.stop_all(WorkerStatus.STOPPED, "the run was resumed")
                self._wait_jobs()
                self.stop_all(WorkerStatus.STOPPED, "the run was resumed")
                self.state.refresh()
                return self.state.run().status
            self._apply_controls()
            self.state.refresh()
            run = self.state.run()
            if run.status is RunStatus.COMPLETE:
                self._wait_jobs()  # the integration's result: the coordinator answered, then the checkouts removed
                self.stop_all(WorkerStatus.STOPPED, "run complete")
                return run.status
            if run.disable_restart or run.status in STOPPED_RUN:
                self.stop_all(WorkerStatus.STOPPED, f"run {run.status}")  # now: the jobs may take minutes
                self._wait_jobs()
                self.stop_all(WorkerStatus.STOPPED, f"run {run.status}")
                self.state.refresh()
                return self.state.run().status
            now = self.clock.now()
            spent = budget_spent(run, self.state.workers().values(), now)
            if spent is not None:
                self.set_status(RunStatus.BUDGET_LIMITED, spent, disable=True)
                continue
            self._heartbeat(now)
            self.turns.finish()
            self.workers.reap()
            self.workers.release_finished()
            self._collect_jobs()
            if transition.drive(self):  # nothing else happens while the policy changes
                self._serve_requests()  # an idle worker's request is answered RUN_POLICY_TRANSITION_PENDING
                time.sleep(self.poll)
                continue
            if self.held and self.state.run().status is RunStatus.ACTIVE and not self.busy(run.coordinator_id):
                self.held = False  # a person decided: the integration goes on (or fails on a refusal)
                self.log("a person decided on the candidate: the integration goes on")
                self._resume_integration()
            self._wake_coordinator()
            if run.status is RunStatus.AWAITING_INPUT:
                time.sleep(self.poll)
                continue
            served = self._serve_requests()  # first: a waiting agent should not wait for provisioning
            requests.flush_refusals(self)  # the coalesced counts of refusals whose window has passed
            if self.transition is None:  # a policy request may just have recorded one: then nothing starts
                self.workers.restart()
                provisions = scheduler.schedule(self.snapshot())
                execute(self, provisions)
                if provisions:
                    self.state.refresh()
            self.briefing.refresh(self.busy)
            # poll fast while requests are flowing, back off to ``poll`` when idle
            idle_ticks = 0 if served else idle_ticks + 1
            time.sleep(self.poll if idle_ticks > 20 else min(self.poll, 0.01))

    def _serve_requests(self) -> bool:
        served = False
        for worker in list(self.state.workers().values()):
            if worker.status in (WorkerStatus.RUNNING, WorkerStatus.IDLE) and not self.busy(worker.worker_id):
                served = requests.serve(self, worker, ACTIONS) or served
                self.state.refresh()
                if self.state.run().status is not RunStatus.ACTIVE:
                    return served
        return served

    def _wake_coordinator(self) -> None:
        """Start an idle coordinator again for the events that need it (or integrate, with finalize = "auto")."""
        run = self.state.run()
        coordinator = self.state.workers().get(run.coordinator_id)
        if coordinator is None or coordinator.status is not WorkerStatus.IDLE or self.busy(coordinator.worker_id):
            return
        if run.status is not RunStatus.ACTIVE:
            return
        events = wake_events(run, coordinator, self.state.tasks(), self.state.answers())
        if not events:
            return
        if self.policy.doc["run"]["finalize"] == Finalize.AUTO and [e.kind for e in events] == ["delivered"]:
            execute(self, auto_finalize(self.snapshot(), coordinator, events[0].key))
        else:
            try:
                self.workers.start(coordinator.worker_id, wake=events)
            except RunNotActive:
                pass
            except AgentOpsError as exc:
                self.workers.block(coordinator.worker_id, exc.code, exc.message)
        self.state.refresh()

    # -- budget and heartbeat ----------------------------------------------------------------------------------------
    def _heartbeat(self, now: float) -> None:
        tenure.renew(self, now)
        if now - self._last_heartbeat >= HEARTBEAT_EVERY:
            runstate.write_heartbeat(self.dir, now)
            self._last_heartbeat = now

    def _close_budget(self) -> None:
        now = self.clock.now()
        try:
            runstate.mutate(
                self.journal,
                lambda change, view: runstate.put_run(change, close_intervals(view.run(), now)),
                Event(kinds.RUN_SUPERVISOR_STOP, f"supervisor {os.getpid()} stopped", {"pid": os.getpid()}),
            )
        except AgentOpsError as exc:
            self.log(f"could not close the budget interval: {exc}")

    def set_status(self, status: RunStatus, reason: str | None, *, disable: bool = False) -> None:
        def change_status(change: Change, view: runstate.RunView) -> None:
            run = view.run()
            if run.status is RunStatus.COMPLETE:
                return
            runstate.put_run(
                change,
                replace(run, status=status, status_reason=reason, disable_restart=run.disable_restart or disable),
            )

        runstate.mutate(
            self.journal,
            change_status,
            Event(kinds.RUN_STATUS, f"run {status}" + (f": {reason}" if reason else ""), {"status": str(status)}),
        )
        self.log(f"run {self.run_id}: {status}{': ' + reason if reason else ''}")

    # -- jobs --------------------------------------------------------------------------------------------------------
    def _collect_jobs(self) -> None:
        """Act on every finished job's result (see :mod:`git_agentops.runs.jobs`)."""
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
                self.workers.fail(worker_id, code, f"{error}\n{detail}", {"job": raised_as(error)})
            else:
                self._act(worker_id, future.result())
            self.state.refresh()

    def _act(self, worker_id: str, result: JobResult) -> None:
        match result:
            case Block(code, reason):
                self.workers.block(worker_id, code, reason)
            case Wait(code, reason, held=True):  # people review the candidate: the supervisor stays for them
                self.set_status(RunStatus.AWAITING_INPUT, f"{code}: {reason}")
                self.held = True
            case Wait(code, reason):
                self.set_status(RunStatus.BLOCKED, f"{code}: {reason}", disable=True)
            case Left(reason):
                self.log(f"{worker_id}: {reason}")
            case Refused(error, request, detail, head):
                response = requests.refuse_accepted(self, worker_id, request, error)
                worker = self.state.workers().get(worker_id)
                if worker is not None:  # a worktree that is gone has no one to tell: an unwritten answer is fine
                    self.respond(worker, Answered(response))
                self.workers.fail(worker_id, error.code, error.message, detail, head=head)
            case Delivered(task_id, commit, answer):
                delivered = self.state.workers().get(worker_id)
                if delivered is not None:  # the answer a stopped worker's next generation may still read
                    self.respond(delivered, answer)
                self.log(f"{worker_id}: {task_id} delivered as {commit[:12]}")
            case Integrated(candidate, answer):
                self._complete(candidate, answer)

    def _complete(self, candidate: str, answer: Answered) -> None:
        """The integration completed the run: answer the coordinator, then remove every checkout (the answer first:
        the coordinator's mailbox is in its checkout)."""
        run, workers = self.state.run(), list(self.state.workers().values())
        for worker in workers:
            if worker.role is Role.COORDINATOR:
                with contextlib.suppress(OSError):
                    self.respond(worker, answer)
        clean_up(self.store, self.ctx, run, workers)
        self.log(f"run {self.run_id} complete: {run.target} at {candidate[:12]}")

    def _wait_jobs(self) -> None:
        for future in list(self.jobs.values()):
            try:
                future.result(timeout=600)
            except Exception as exc:  # noqa: BLE001 -- _collect_jobs records it as the worker's failure
                self.log(f"a job ended with {type(exc).__name__}")
        self._collect_jobs()

    # -- run state the supervisor did not write ------------------------------------------------------------------------
    def _tampered(self, exc: AgentOpsError) -> RunStatus:
        """A write met a foreign tip (one the state cache reads it contains itself, :mod:`.cache`): contain it, then
        stop as any blocked run stops -- jobs waited for, every worker stopped. A tip that cannot be contained (no
        commit the supervisor wrote is left) gives nothing to stand on: the generations this supervisor started are
        killed, and the error stands."""
        for _ in range(5):
            self.log(str(exc))
            try:
                self.state.refresh()  # contains it: the last authentic state, the run blocked
                return self._loop()  # sees the run blocked: waits for the jobs and stops every worker
            except StateTampered as again:
                exc = again
        from ..process.groups import terminate_group

        for proc in list(self.workers.procs.values()):
            terminate_group(proc.pid, grace=self.workers.grace)
        raise exc
