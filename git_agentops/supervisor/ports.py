"""What request handlers and the scheduler need from the supervisor loop, as a small protocol.

The handlers (:mod:`.requests`, :mod:`.actions`) and the scheduler run in the loop thread and act through this
interface only, so they depend on what they use -- the state cache, worker updates, stopping, submitting a job,
the log -- and not on :class:`~git_agentops.supervisor.loop.Supervisor`, which imports them. Tests can hand them
a fake loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..errors import AgentOpsError
from ..gitstore.journal import Journal
from ..gitstore.repo import Store
from ..model.policy import Policy
from ..model.run import RunStatus, Worker, WorkerStatus
from ..runs.jobs import Answered, JobContext, JobResult
from .cache import StateCache
from .refusals import Refusals


class Loop(Protocol):
    """The supervisor loop as its handlers see it (the loop thread only)."""

    run_id: str
    policy: Policy
    state: StateCache
    ctx: JobContext
    transition: str | None
    """The pending policy transition's id (:mod:`.transition`), or None."""
    refusals: Refusals
    """The loop's refusal coalescer (:mod:`.refusals`)."""

    @property
    def journal(self) -> Journal:
        """The run's state journal (for compare-and-swap mutations)."""
        ...

    def respond(self, worker: Worker, answer: Answered) -> AgentOpsError | None:
        """Write ``answer`` to ``worker``'s mailbox -- the one writer of ``response.json`` -- and return the error
        that kept it from being written (a mailbox the worker broke), for the caller to judge; None when written."""
        ...

    def set_worker(self, worker_id: str, *, event: str, summary: str, **changes: Any) -> Worker:
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

    def log(self, message: str) -> None:
        """A line for the supervisor's log."""
        ...
