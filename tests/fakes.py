"""An in-process fake supervisor loop and fake host, for unit tests of what the supervisor decides.

The supervisor's handlers (request actions, the scheduler) read a snapshot and return effects; the integration is a
table of steps. A test builds a run in a repository under ``tmp_path`` (:func:`new_run`), feeds requests and state
to the handlers, asserts the effects they return and, once :func:`git_agentops.supervisor.effects.execute` carried
them out on a :class:`FakeLoop`, the state in the run's journal -- with no supervisor process, no agent process and
no polling (the way ghstack's tests drive an in-memory GitHub).

What is fake is only what would start or stop a process: :class:`FakeHost` stands for the agents (each one ends its
turn as soon as it is asked, and used nothing); jobs are recorded, not run, until the test runs them
(:meth:`FakeLoop.run_jobs`) inline in its own thread. State, mailboxes, refs and notes are the real ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from git_agentops import eventkinds as kinds
from git_agentops.clock import Clock
from git_agentops.errors import AgentOpsError
from git_agentops.eventkinds import EventCode
from git_agentops.gitstore.journal import Change, Event, Journal
from git_agentops.gitstore.repo import Store
from git_agentops.model.policy import Policy, effective
from git_agentops.model.run import Role, Run, RunStatus, Worker, WorkerStatus, worker_contract
from git_agentops.model.task import contract_hash
from git_agentops.policy.trust import RepoIdentity, TrustStatus, Verdict
from git_agentops.protocol import mailbox
from git_agentops.protocol.client import build_request
from git_agentops.runs import state as runstate
from git_agentops.runs.jobs import Answered, JobContext, JobResult
from git_agentops.supervisor.briefing import Briefing
from git_agentops.supervisor.cache import StateCache
from git_agentops.supervisor.confine import Confinement
from git_agentops.supervisor.ports import Binding, Snapshot
from git_agentops.supervisor.refusals import Refusals
from git_agentops.supervisor.workers import Workers

from .conftest import git

RUN = "run-fake"

CHECK = {"id": "check", "argv": ["python3", "check.py"], "timeout": 60}


def fake_policy(*, max_workers: int = 3, run: Mapping[str, Any] | None = None) -> Policy:
    """A policy as ``.agentops/policy.toml`` would give it: one verify command, unconfined agents."""
    doc = effective(
        {
            "run": {"target": "main", "max_workers": max_workers, **(run or {})},
            "verify": {"commands": [dict(CHECK)]},
            "sandbox": {"mode": "none"},
        }
    )
    return Policy.from_effective(doc)


@dataclass(slots=True)
class FakeHost:
    """The run's agents, in-process: asked to end its turn, each has already ended it and reported no usage."""

    killed: list[str] = field(default_factory=list)

    def ended(self, worker: Worker) -> bool:
        return True

    def kill(self, worker: Worker) -> dict[str, Any]:
        self.killed.append(worker.worker_id)
        return {}

    def request(self, loop: FakeLoop, worker_id: str, action: str, **fields: Any) -> dict[str, Any]:
        """Write a request into the worker's mailbox as ``git agentops-request`` does (the worker's own identity,
        generation and contract); returns it."""
        snap = loop.snapshot()
        worker = snap.workers[worker_id]
        instructions = {
            "workerId": worker.worker_id,
            "generation": worker.generation,
            "contractHash": worker_contract(snap.run, worker, dict(snap.tasks)),
        }
        request = build_request(instructions, action, fields)
        mailbox.send(Path(worker.worktree), request)
        return request


class FakeLoop:
    """The supervisor loop as its handlers see it (:class:`git_agentops.supervisor.ports.Loop`), in-process.

    Worker records are updated, stopped and blocked by the real :class:`~git_agentops.supervisor.workers.Workers`
    (no worker has a process here, so nothing is signalled); a turn ends at once through the :class:`FakeHost`;
    a submitted job waits in :attr:`jobs` until :meth:`run_jobs`.
    """

    def __init__(self, store: Store, run_id: str, policy: Policy, *, clock: Clock, host: FakeHost) -> None:
        self.store = store
        self.run_id = run_id
        self.host = host
        self.logs: list[str] = []
        self.stopped: list[tuple[WorkerStatus, str]] = []
        self.jobs: dict[str, Callable[[Store], JobResult]] = {}
        self.transition: str | None = None
        self.briefed = 0
        self.refusals = Refusals()
        self.answered: list[tuple[str, Mapping[str, Any]]] = []  # (worker, response): what respond() wrote
        run_dir = runstate.run_dir(store, run_id)
        trust = Verdict(TrustStatus.TRUSTED, RepoIdentity(str(store.common_dir), "local:fake"), policy.config_hash)
        ctx = JobContext(run_id, policy, trust, {}, clock, run_dir, self.log, lambda point: None)
        self.bound = Binding(policy, ctx, Confinement(store, policy, {}, run_dir, self.log))
        self.state = StateCache(store, run_id, log=self.log)
        self.workers = Workers(
            store,
            run_id,
            state=self.state,
            binding=lambda: self.bound,
            environ={},
            clock=clock,
            log=self.log,
            grace=0.0,
            run_dir=run_dir,
            briefing=Briefing(self.state, runstate.recipe_path(store, run_id), self.log),
            jobs={},
        )

    # -- ports.Loop ---------------------------------------------------------------------------------------------------
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
        self.state.refresh()
        return Snapshot.of(self.state, self.bound, busy=self.jobs, transition=self.transition)

    def respond(self, worker: Worker, answer: Answered) -> AgentOpsError | None:
        """As the supervisor's: the one writer of ``response.json``."""
        try:
            mailbox.write_response(Path(worker.worktree), answer.response)
        except AgentOpsError as exc:
            return exc
        self.answered.append((worker.worker_id, answer.response))
        return None

    def set_worker(self, worker_id: str, *, event: EventCode, summary: str, **changes: Any) -> Worker:
        return self.workers.set(worker_id, event=event, summary=summary, **changes)

    def kill(self, worker: Worker) -> dict[str, Any]:
        return self.host.kill(worker)

    def end_turn(self, worker: Worker, then: Callable[[Mapping[str, Any], bool], None]) -> None:
        then(self.host.kill(worker), self.host.ended(worker))

    def stop_all(self, status: WorkerStatus, reason: str) -> None:
        self.stopped.append((status, reason))
        self.workers.stop_all(status, reason)

    def submit(self, worker_id: str, job: Callable[[Store], JobResult]) -> None:
        assert worker_id not in self.jobs, f"{worker_id} already has a job"
        self.jobs[worker_id] = job

    def busy(self, worker_id: str) -> bool:
        return worker_id in self.jobs

    def jobs_running(self) -> bool:
        return bool(self.jobs)

    def block(self, worker_id: str, code: str, reason: str) -> None:
        self.workers.block(worker_id, code, reason)

    def rebind(self, policy: Policy, policy_file: bytes | None) -> None:
        confine = Confinement(self.store, policy, {}, self.ctx.run_dir, self.log)
        self.bound = Binding(policy, replace(self.ctx, policy=policy), confine)

    def set_status(self, status: RunStatus, reason: str | None, *, disable: bool = False) -> None:
        def change_status(change: Change, view: runstate.RunView) -> None:
            run = view.run()
            runstate.put_run(change, replace(run, status=status, status_reason=reason, disable_restart=disable))

        runstate.mutate(self.journal, change_status, Event(kinds.RUN_STATUS, f"run {status}", {"status": str(status)}))

    def brief_policy(self) -> None:
        self.briefed += 1

    def track_transition(self, transition_id: str | None) -> None:
        self.transition = transition_id
        self.brief_policy()

    def log(self, message: str) -> None:
        self.logs.append(message)

    # -- for the test -------------------------------------------------------------------------------------------------
    def run_jobs(self) -> dict[str, JobResult]:
        """Run every submitted job now, in this thread, on the loop's repository handle; their results."""
        jobs, self.jobs = self.jobs, {}
        return {worker_id: job(self.store) for worker_id, job in jobs.items()}

    def worker(self, worker_id: str) -> Worker:
        self.state.refresh()
        return self.state.workers()[worker_id]

    def run(self) -> Run:
        self.state.refresh()
        return self.state.run()

    def event_codes(self) -> list[str]:
        """The codes of the run's events, oldest first."""
        return [entry.code for entry in reversed(list(self.journal.log()))]


def new_run(repo: Path, store: Store, clock: Clock, *, policy: Policy | None = None) -> FakeLoop:
    """A run as ``git agentops-run start`` leaves it (its state, its coordinator's worktree on the target's tip),
    served by a :class:`FakeLoop`."""
    policy = policy or fake_policy()
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "branch", "-M", "main")
    coordinator = add_worktree(repo, "coordinator", base)
    run = Run(
        run_id=RUN,
        goal="the goal",
        target="main",
        base_commit=base,
        host="scripted",
        repository=str(repo),
        policy_config_hash=policy.config_hash,
        budget_seconds=3600,
        created_at=clock.now(),
        contract_hash=contract_hash([]),
    )
    worker = Worker(
        "coordinator",
        Role.COORDINATOR,
        "scripted",
        str(coordinator),
        runstate.branch_ref(RUN, "coordinator"),
        base=base,
    )

    def create(change: Change) -> None:
        runstate.put_run(change, run)
        runstate.put_worker(change, replace(worker, status=WorkerStatus.RUNNING, generation=1))

    runstate.journal(store, RUN).mutate(
        create,
        Event(
            kinds.RUN_CREATED,
            "run created",
            {"goal": run.goal, "target": run.target, "base": base, "host": "scripted", "budgetSeconds": 3600},
        ),
    )
    return FakeLoop(store, RUN, policy, clock=clock, host=FakeHost())


def add_worktree(repo: Path, name: str, commit: str) -> Path:
    """A linked checkout of ``commit`` on the branch ``agentops/<run>/<name>``, with a mailbox directory."""
    path = repo.parent / "worktrees" / name
    git(repo, "worktree", "add", "-q", "-b", f"agentops/{RUN}/{name}", str(path), commit)
    (path / mailbox.MAILBOX).mkdir(parents=True)
    exclude = Path(git(path, "rev-parse", "--git-common-dir"))
    exclude = exclude if exclude.is_absolute() else path / exclude
    with (exclude / "info" / "exclude").open("a") as out:
        out.write("/.agentops/mailbox/\n")
    return path
