"""What request handlers and the scheduler need from the supervisor loop, as a small protocol.

The handlers (:mod:`.requests`, :mod:`.actions`) and the scheduler run in the loop thread and act through this
interface only, so they depend on what they use -- the state cache, worker updates, stopping, submitting a job,
the log -- and not on :class:`~git_agentops.supervisor.loop.Supervisor`, which imports them. Tests can hand them
a fake loop (``tests/fakes.py``).

Most handlers do not act through it at all: they read a :class:`Snapshot` -- a frozen view of the run state and of
the policy in force -- and return the effects to carry out (:mod:`.effects`), which the loop executes in order.
The policy in force is held in one place, the loop's :class:`Binding`, which ``rebind`` swaps whole: the policy,
the jobs' context and the confinement of new generations can never disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from ..errors import AgentOpsError
from ..eventkinds import EventCode
from ..gitstore.journal import Journal
from ..gitstore.repo import Store
from ..model.policy import Policy
from ..model.run import Run, RunStatus, Worker, WorkerStatus
from ..model.task import Task
from ..runs.jobs import Answered, JobContext, JobResult
from .cache import StateCache
from .confine import Confinement
from .refusals import Refusals


@dataclass(frozen=True, slots=True)
class Binding:
    """The policy the loop serves the run under, and what is derived from it: the context every job gets and the
    confinement of every generation started. One value, replaced whole by ``rebind``."""

    policy: Policy
    ctx: JobContext
    confine: Confinement


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a handler reads: the run state at one journal commit, the binding in force, the workers a job holds.

    ``store`` is there for reading objects (a handed-off commit's history), never for writing: a handler's writes
    are the effects it returns."""

    run_id: str
    run: Run
    tasks: Mapping[str, Task]
    workers: Mapping[str, Worker]
    binding: Binding
    busy: frozenset[str]
    transition: str | None
    store: Store

    @property
    def policy(self) -> Policy:
        return self.binding.policy

    @property
    def ctx(self) -> JobContext:
        return self.binding.ctx

    @classmethod
    def of(cls, state: StateCache, binding: Binding, *, busy: Iterable[str], transition: str | None) -> Snapshot:
        """What the loop's state cache says now (read-only views), with ``binding`` in force."""
        return cls(
            run_id=state.run_id,
            run=state.run(),
            tasks=MappingProxyType(state.tasks()),
            workers=MappingProxyType(state.workers()),
            binding=binding,
            busy=frozenset(busy),
            transition=transition,
            store=state.store,
        )


class Loop(Protocol):
    """The supervisor loop as its handlers see it (the loop thread only)."""

    run_id: str
    state: StateCache
    refusals: Refusals
    """The loop's refusal coalescer (:mod:`.refusals`)."""

    @property
    def transition(self) -> str | None:
        """The pending policy transition's id (:mod:`git_agentops.transition.drive`), or None."""
        ...

    @property
    def policy(self) -> Policy:
        """The policy in force (the binding's)."""
        ...

    @property
    def ctx(self) -> JobContext:
        """The context of every job started now (the binding's)."""
        ...

    def snapshot(self) -> Snapshot:
        """The run state as the journal says now, with the binding in force: what handlers read."""
        ...

    @property
    def journal(self) -> Journal:
        """The run's state journal (for compare-and-swap mutations)."""
        ...

    def respond(self, worker: Worker, answer: Answered) -> AgentOpsError | None:
        """Write ``answer`` to ``worker``'s mailbox -- the one writer of ``response.json`` -- and return the error
        that kept it from being written (a mailbox the worker broke), for the caller to judge; None when written."""
        ...

    def set_worker(self, worker_id: str, *, event: EventCode, summary: str, **changes: Any) -> Worker:
        """Update one worker record by CAS, recording ``event``."""
        ...

    def kill(self, worker: Worker) -> dict[str, Any]:
        """Stop the worker's process group and reap it (nothing of it runs on return); returns the worker changes
        that account for the stopped generation (session, usage), for the caller's next update."""
        ...

    def end_turn(self, worker: Worker, then: Callable[[Mapping[str, Any], bool], None]) -> None:
        """Give ``worker`` the run's turn grace to end its turn by itself (:mod:`.turns`), then stop and account it
        and call ``then(accounted, ended_by_itself)`` -- in a later tick; at once when the grace is 0."""
        ...

    def stop_all(self, status: WorkerStatus, reason: str) -> None:
        """Stop every running worker (except those a job holds) and record ``status``."""
        ...

    def submit(self, worker_id: str, job: Callable[[Store], JobResult]) -> None:
        """Run ``job`` in a job thread on the worker's behalf; the loop acts on its result."""
        ...

    def busy(self, worker_id: str) -> bool:
        """Whether a job is running for this worker."""
        ...

    def jobs_running(self) -> bool:
        """Whether any job (provisioning, handoff, integration) is still running."""
        ...

    def block(self, worker_id: str, code: str, reason: str) -> None:
        """Block a worker, its task and every task depending on it."""
        ...

    def rebind(self, policy: Policy, policy_file: bytes | None) -> None:
        """Adopt ``policy`` (and the bound policy file's bytes): every job and generation started later uses it."""
        ...

    def set_status(self, status: RunStatus, reason: str | None, *, disable: bool = False) -> None:
        """Set the run's status and reason by CAS (``disable`` also fences new generations); a complete run stays."""
        ...

    def brief_policy(self) -> None:
        """Tell every worker's instructions the policy in force and the run's transitions (after one changed)."""
        ...

    def track_transition(self, transition_id: str | None) -> None:
        """The pending policy transition is now ``transition_id`` (None: it ended); every worker's instructions say
        so (:meth:`brief_policy`)."""
        ...

    def log(self, message: str) -> None:
        """A line for the supervisor's log."""
        ...
