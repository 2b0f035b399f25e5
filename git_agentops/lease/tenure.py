"""Who serves a run: a supervisor that refuses it, and the lease of a run that publishes to a remote.

* :func:`refuse` -- a supervisor that will not serve the run (untrusted policy, run not active...) still stops the
  agent processes a dead one left, records that, and says so in its refusal.
* :func:`claim` / :func:`renew` -- with ``[run] remote`` the supervisor serves under a lease
  (:mod:`git_agentops.lease.claim`), claimed before anything else at its start and renewed with its heartbeat every
  third of the lease's life. When the lease is held by another machine (``RUN_LEASE_HELD``) or was lost to one
  (``RUN_LEASE_LOST``: this machine's state diverged from the remote's), the supervisor stops the agent processes
  of the run on this machine and exits **without writing anything**: the run is the other machine's now.
"""

from __future__ import annotations

import os
from typing import Protocol

from .. import eventkinds as kinds
from ..clock import Clock
from ..errors import AgentOpsError, LeaseHeld, LeaseLost
from ..gitstore.journal import Event, Journal
from ..gitstore.repo import Store
from ..model.policy import Policy
from ..process.groups import process_identity, terminate_group
from ..runs import state as runstate
from ..runs.controls import Stopped, run_processes, stop_group, stop_stray, stopped_note
from ..supervisor.cache import StateCache
from ..supervisor.workers import Workers
from . import claim as leases


class Supervisor(Protocol):
    """What tenure needs of the supervisor (:class:`~git_agentops.supervisor.loop.Supervisor`)."""

    store: Store
    run_id: str
    clock: Clock
    state: StateCache
    workers: Workers
    machine: str | None
    lease_ttl: float
    lease_renewed: float
    lease_retry_at: float
    lease_lost: bool

    @property
    def policy(self) -> Policy:
        """The policy in force."""
        ...

    @property
    def journal(self) -> Journal:
        """The run's state journal."""
        ...

    def log(self, message: str) -> None:
        """A line for the supervisor's log."""
        ...


LOST = (LeaseHeld, LeaseLost)


def refuse(sup: Supervisor, error: AgentOpsError) -> AgentOpsError:
    """Not serving the run: first stop what a dead supervisor left running, record it, and say so in ``error``."""
    stopped: list[Stopped] = sup.workers.reconcile(
        event=kinds.WORKER_LEFTOVER_STOPPED, why=f"the supervisor refused to serve the run ({error.code})"
    )
    note = stopped_note(stopped)
    runstate.mutate(
        sup.journal,
        lambda change, view: None,
        Event(
            kinds.RUN_SUPERVISOR_REFUSED,
            f"supervisor {os.getpid()} refused to serve the run ({error.code}); {note}",
            {"code": error.code, "message": error.message[:2000], "stopped": [s.to_json() for s in stopped]},
        ),
    )
    sup.log(f"refused ({error.code}); {note}")
    return AgentOpsError(error.code, f"{error.message}; {note}", details=error.details)


def claim(sup: Supervisor) -> None:
    """At start, before anything is written: claim the lease of a run that publishes to a remote."""
    remote = sup.policy.remote
    if remote is None or sup.machine is None:
        return
    identity = process_identity(os.getpid())
    try:
        leases.claim(
            sup.store,
            sup.run_id,
            machine=sup.machine,
            pid=os.getpid(),
            start_time=identity.start_time if identity is not None else 0,
            ttl=sup.lease_ttl,
            remote=remote,
            clock=sup.clock,
            log=sup.log,
        )
    except LOST as exc:
        raise lost(sup, exc) from None
    sup.state.refresh()
    sup.lease_renewed = sup.clock.now()


def renew(sup: Supervisor, now: float) -> None:
    """With the heartbeat: renew the lease every third of its life (and push the run's refs with it).

    A remote that does not answer -- or refuses the push, fails it half-way, moved -- is tried again at the next
    beat; once the lease has gone unrenewed for its whole life another machine may have taken the run over, so the
    supervisor stops as one that lost it, its agents with it. Only a lease another machine holds stops it at once."""
    if sup.policy.remote is None or sup.machine is None or now - sup.lease_renewed < sup.lease_ttl / 3:
        return
    if now < sup.lease_retry_at:
        return
    try:
        claim(sup)
    except LOST:  # claim has stopped this machine's agents already
        raise
    except AgentOpsError as exc:
        if now - sup.lease_renewed < sup.lease_ttl:
            sup.lease_retry_at = now + min(5.0, sup.lease_ttl / 6)
            sup.log(f"could not renew the lease ({exc.code}); trying again: {exc.message[:300]}")
            return
        raise lost(
            sup,
            AgentOpsError(
                "RUN_LEASE_LOST",
                f"the lease went unrenewed for {now - sup.lease_renewed:.0f}s ({exc.code}: {exc.message[:300]}); "
                "another machine may serve the run now",
            ),
        ) from None


def release(sup: Supervisor) -> None:
    """A supervisor that stops (the run complete, paused, blocked...): its lease ends now, and the run's refs go to
    the remote one last time -- so the server shows how the run ended, and another machine may serve it at once.
    Best effort: an unreachable remote leaves the lease to expire."""
    remote = sup.policy.remote
    if remote is None or sup.machine is None or not sup.lease_renewed:
        return
    try:
        leases.release(sup.store, sup.run_id, machine=sup.machine, remote=remote, clock=sup.clock)
    except AgentOpsError as exc:
        sup.log(f"could not release the lease ({exc.code}); it expires by itself: {exc.message[:300]}")


def lost(sup: Supervisor, exc: AgentOpsError) -> AgentOpsError:
    """The run is another machine's: stop every agent process of it here, write nothing, and say why."""
    sup.lease_lost = True
    for proc in list(sup.workers.procs.values()):
        terminate_group(proc.pid, grace=sup.workers.grace)
    for worker in sup.state.workers().values():
        if worker.process is not None:
            stop_group(worker.process, grace=sup.workers.grace)
    for identity, _, _ in run_processes(sup.run_id):
        stop_stray(identity, grace=sup.workers.grace)
    sup.log(f"{exc.code}: {exc.message}; stopped this machine's agents of the run and wrote nothing")
    return exc
