"""What a job of the supervisor is given, and what it gives back.

Slow work -- provisioning a worktree, verifying a handoff, integrating -- runs in job threads so that the
supervisor keeps answering the other workers meanwhile. A job gets a frozen :class:`JobContext` (the few values it
needs, and its two side effects: the log and the crash-test fault injector) and its own repository handle; it never
sees the supervisor itself, whose state cache belongs to the loop thread. It returns one typed :data:`JobResult`,
which the loop acts on:

* :class:`Provisioned`, :class:`Delivered`, :class:`Integrated` -- the job did what it was for (it already wrote
  every state change, the request's record among them); a delivery and an integration carry their
  :class:`Answered`, which the loop writes to the worker's mailbox;
* :class:`Block` -- a rule stopped the worker's task (a dependency conflict, a setup failure): block it;
* :class:`Wait` -- a person must act first (commit or stash the checked-out target): the run waits, blocked;
* :class:`Left` -- the run was paused or stopped while the job waited (in the merge queue): nothing changes;
* :class:`Refused` -- the job refused a request it had accepted (a handoff that failed verification, a finalize
  whose integration failed): the loop records the refusal as that request's answer, writes it to the worker's
  mailbox, and fails the worker, which restarts.

A job never writes a mailbox: only the loop thread does (one writer of ``response.json``), so an answer never races
another answer to the same worker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..clock import Clock
from ..errors import AgentOpsError
from ..model.policy import Policy
from ..model.request import Request as TypedRequest
from ..model.request import ResponseDoc
from ..policy.trust import Verdict
from ..verify.credentials import NO_HELD_SECRETS, HeldSecrets

if TYPE_CHECKING:
    from ..workspace.live import Workspaces


@dataclass(frozen=True, slots=True)
class JobContext:
    """Everything a job may use besides its repository handle; the same for every job of one supervisor."""

    run_id: str
    policy: Policy
    trust: Verdict
    environ: Mapping[str, str]
    clock: Clock
    run_dir: Path
    log: Callable[[str], None]
    fault: Callable[[str], None]
    """``fault(point)``: the crash-test hook (``AGENTOPS_FAULT``), a no-op in normal use."""
    policy_file: str | None = None
    """The git blob id of the policy file a transition bound (None before any): the one change of
    ``.agentops/policy.toml`` a delivery may carry (:mod:`git_agentops.integrate.guards`)."""
    held: HeldSecrets = NO_HELD_SECRETS
    """The secret values of the supervisor's environment (:meth:`HeldSecrets.from_environ`, computed once): a
    delivery carrying one, in any encoding, is refused (:mod:`git_agentops.integrate.secrets`)."""
    workspaces: Workspaces | None = None
    """The supervisor's workspaces (ports, services): the same registry for every job and the loop; None outside a
    supervisor (:mod:`git_agentops.workspace.live`)."""


@dataclass(frozen=True, slots=True)
class Request:
    """A request the supervisor accepted: the document, its canonical digest, and the digest of the bytes the
    worker wrote (every response carries the latter, so the worker can tell its answer from a stale one)."""

    doc: Mapping[str, Any]
    digest: str
    raw_digest: str
    body: TypedRequest | None = None
    """The typed request the supervisor parsed ``doc`` into (None for one it made itself: an automatic finalize)."""

    @property
    def request_id(self) -> str:
        """The worker's ``requestId``: the key of the idempotency record."""
        return str(self.doc["requestId"])


@dataclass(frozen=True, slots=True)
class Answered:
    """A request answered: the response document the loop writes to the worker's mailbox."""

    response: ResponseDoc


@dataclass(frozen=True, slots=True)
class Provisioned:
    """A child's worktree exists at ``base`` with its dependencies merged in and its setup done."""

    worker_id: str
    base: str


@dataclass(frozen=True, slots=True)
class Delivered:
    """A handoff passed verification and is frozen as ``commit``."""

    task_id: str
    commit: str
    answer: Answered


@dataclass(frozen=True, slots=True)
class Integrated:
    """The target moved to ``candidate``, which carries a receipt; the run is complete. The loop writes
    ``answer`` to the coordinator's mailbox, then removes the run's checkouts
    (:func:`git_agentops.integrate.pipeline.clean_up`)."""

    candidate: str
    answer: Answered


@dataclass(frozen=True, slots=True)
class Block:
    """A rule stopped the job's worker: block it, its task and the tasks depending on it."""

    code: str
    reason: str


@dataclass(frozen=True, slots=True)
class Wait:
    """The run cannot go on until a person acts (a dirty checkout of the target): it waits, blocked with the
    reason, with nothing lost; ``git agentops-run resume`` continues where it stopped."""

    code: str
    reason: str
    held: bool = False  # a person's review ([review] people): the run awaits input and the supervisor stays


@dataclass(frozen=True, slots=True)
class Left:
    """The job let go of work the run's record keeps (an integration waiting in the merge queue when the run was
    paused or stopped): nothing changes now; the supervisor that serves the run again rolls it forward."""

    reason: str


@dataclass(frozen=True, slots=True)
class Refused:
    """The job refused ``request`` after accepting it, with ``error`` (the code and message the worker is answered
    with, unchanged until the loop's one conversion into a response); ``head`` is what the worker had (for
    no-progress)."""

    error: AgentOpsError
    request: Request
    detail: Mapping[str, Any] = field(default_factory=dict)
    head: str | None = None

    @property
    def code(self) -> str:
        return self.error.code

    @property
    def message(self) -> str:
        return self.error.message


JobResult = Provisioned | Delivered | Integrated | Block | Wait | Left | Refused
