"""Claiming, renewing and taking over a run's lease across machines that share one remote.

A run that publishes to a remote (``[run] remote``) is served under a lease (:mod:`git_agentops.lease.record`):

* :func:`claim` -- at a supervisor's start and with its heartbeat: fetch the run's refs (a run continued elsewhere
  arrives here), refuse while another machine's lease is unexpired (``RUN_LEASE_HELD``, naming the holder) or when
  this machine's state diverged from the remote's (``RUN_LEASE_LOST``: another machine continued the run from the
  last state it saw), write the lease, and push the run's refs and worker branches -- a CAS on the remote's state
  ref: of two machines claiming at once, one push lands and the other is ``RUN_LEASE_HELD``. A state commit on
  the remote that no supervisor wrote (pushed by anyone with write access: the server cannot tell) is quarantined
  by the fetch and gone past (``RUN_STATE_QUARANTINED``, :func:`git_agentops.runs.tamper.supersede`): the run
  keeps its own state and its lease, and its next push is a fast-forward over the forged commit;
* :func:`take_over` -- ``git agentops-run supervise RUN --take-over`` on another machine: fetch the run, wait out an
  unexpired lease (or refuse), then move the run to this machine: its repository path, every worker's worktree
  re-created here from the worker's last pushed commit (deliveries are frozen refs already), the scripted recipe
  from its artifact. The supervisor then claims the lease and starts every worker as a new generation, which
  fences every generation of the old machine.

The machine's id is ``git config agentops.machineId``, else one made once under the user's state dir.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Final

from .. import eventkinds as kinds
from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore import sync
from ..gitstore.events import QUARANTINED
from ..gitstore.journal import Change, Event
from ..gitstore.private import read_private, write_private
from ..gitstore.refs import read_ref
from ..gitstore.repo import Store
from ..model.run import RunStatus, WorkerStatus
from ..runs import state as runstate
from ..runs import tamper
from ..verify.workspaces import ensure_setup, ensure_worktree, mirror_branch, placement
from .record import Lease, claimed

MACHINE_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def machine_id(store: Store, state_dir: Path) -> str:
    """``agentops.machineId`` from git config, else this user's machine id (made once, under ``state_dir``)."""
    configured = store.config_value("agentops.machineId")
    if configured:
        if not MACHINE_ID.fullmatch(configured):
            raise AgentOpsError("USAGE", f"agentops.machineId {configured!r} must match {MACHINE_ID.pattern}")
        return configured
    found = read_private(state_dir, "machine-id", max_bytes=256)
    if found and MACHINE_ID.fullmatch(found.decode(errors="replace").strip()):
        return found.decode().strip()
    made = f"{os.uname().nodename.split('.')[0] or 'machine'}-{uuid.uuid4().hex[:8]}"
    made = re.sub(r"[^A-Za-z0-9._-]", "-", made).lstrip("-._") or uuid.uuid4().hex[:12]
    write_private(state_dir, "machine-id", made.encode() + b"\n")
    return made


def namespaces(run_id: str) -> tuple[str, ...]:
    """What moves with a run: its refs, its workers' branches, the agentops notes."""
    run_id = runstate.check_run_id(run_id)
    return (f"refs/agentops/runs/{run_id}/", f"refs/heads/agentops/{run_id}/", "refs/notes/agentops/")


def claim(
    store: Store,
    run_id: str,
    *,
    machine: str,
    pid: int,
    start_time: int,
    ttl: float,
    remote: str,
    clock: Clock,
    log: Callable[[str], None] | None = None,
) -> Lease | None:
    """Claim or renew the run's lease, through the remote (see the module docstring); a run completed here already
    needs none, and keeps the lease it had. A state on the remote that no supervisor wrote is quarantined and gone
    past (:func:`git_agentops.runs.tamper.supersede`; ``log`` hears of it), never adopted."""
    state_ref = runstate.state_ref(run_id)
    timeout = max(5.0, ttl / 2)  # a hanging remote must not outlive the lease it is renewing
    fetched = sync.fetch(store, remote, namespaces(run_id), timeout=timeout)
    _go_past(store, run_id, remote, fetched, log)
    if fetched.refs.get(state_ref) == "diverged":
        raise AgentOpsError(
            "RUN_LEASE_LOST",
            f"the state of {run_id} on {remote} went on without this machine (another machine took the run over); "
            "this machine stops and writes nothing more",
        )
    now = clock.now()
    view = runstate.read(store, run_id)
    current = view.lease()
    if view.run().status is RunStatus.COMPLETE:  # nothing to serve; whoever completed it, nothing is written
        if current is not None and current.holder != machine:
            raise AgentOpsError("RUN_LEASE_LOST", f"{run_id} was completed by machine {current.holder}")
        return current
    if current is not None and current.held_by_another(machine, now):
        raise AgentOpsError(
            "RUN_LEASE_HELD", f"{run_id} is served by {current.describe(now)}", details={"lease": current.to_json()}
        )

    def take(change: Change, view: runstate.RunView) -> Lease:
        lease = claimed(view.lease(), machine, pid, start_time, clock.now(), ttl)
        runstate.put_lease(change, lease)
        return lease

    renewing = current is not None and current.holder == machine and current.pid == pid
    lease = runstate.mutate(
        runstate.journal(store, run_id),
        take,
        Event(
            kinds.RUN_LEASE_RENEWED if renewing else kinds.RUN_LEASE_CLAIMED,
            f"lease {'renewed' if renewing else 'claimed'} by {machine} (pid {pid})",
            {"holder": machine, "pid": pid},
        ),
    )
    for worker in runstate.read(store, run_id).workers():  # work in progress goes to the remote too
        if worker.status is not WorkerStatus.DELIVERED and Path(worker.worktree).is_dir():
            mirror_branch(store, Path(worker.worktree), worker.branch)
    pushed = _push(store, run_id, remote, timeout=timeout, log=log)
    if pushed.refs.get(state_ref) not in ("pushed", "up to date"):
        raise AgentOpsError(
            "RUN_LEASE_HELD", f"another machine claimed {run_id} on {remote} at the same time; it serves the run"
        )
    return lease


def _go_past(store: Store, run_id: str, remote: str, synced: sync.Outcome, log: Callable[[str], None] | None) -> bool:
    """Go on past the forged journal tips of the run a sync quarantined
    (:func:`git_agentops.runs.tamper.supersede`); True when it did. ``RUN_LEASE_LOST`` when the remote's state below
    the forged tip is not this machine's history."""
    gone_past = False
    for quarantine in tamper.supersede(store, run_id, remote, synced.quarantined):
        if log is not None:
            log(f"{QUARANTINED}: {quarantine.describe()}")
        if quarantine.ref == runstate.state_ref(run_id) and quarantine.superseded is None:
            raise AgentOpsError(
                "RUN_LEASE_LOST",
                f"the state of {run_id} on {remote} went on without this machine, then took a commit no supervisor "
                f"wrote ({quarantine.commit[:12]}, kept under {quarantine.kept}); this machine stops and writes "
                "nothing more",
            )
        gone_past = gone_past or quarantine.superseded is not None
    return gone_past


def _push(
    store: Store, run_id: str, remote: str, *, timeout: float = sync.TIMEOUT, log: Callable[[str], None] | None = None
) -> sync.Outcome:
    """Push the run's refs; a forged state that landed on the remote since the last fetch is gone past and the push
    made again (a forger racing every push is given up on after three)."""
    pushed = sync.push(store, remote, namespaces(run_id), timeout=timeout)
    for _ in range(3):
        if not _go_past(store, run_id, remote, pushed, log):
            break
        pushed = sync.push(store, remote, namespaces(run_id), timeout=timeout)
    return pushed


def release(store: Store, run_id: str, *, machine: str, remote: str, clock: Clock) -> None:
    """End this machine's lease now and push the run's refs (the supervisor stops serving the run)."""

    def end(change: Change, view: runstate.RunView) -> None:
        current = view.lease()
        if current is not None and current.holder == machine:
            now = clock.now()
            runstate.put_lease(change, replace(current, expires_at=now, renewed_at=now))

    runstate.mutate(
        runstate.journal(store, run_id), end, Event(kinds.RUN_LEASE_RELEASED, f"lease released by {machine}", {})
    )
    _push(store, run_id, remote)


def take_over(
    store: Store,
    run_id: str,
    *,
    remote: str,
    machine: str,
    root: Path,
    clock: Clock,
    wait: float | None,
    environ: Mapping[str, str],
) -> Lease | None:
    """Fetch the run and wait out another machine's lease (``wait`` seconds at most; None: refuse at once), then
    move the run to this machine (see the module docstring). Returns the lease that was in place."""
    sync.fetch(store, remote, namespaces(run_id))
    lease = runstate.read(store, run_id).lease()
    deadline = time.monotonic() + (wait or 0.0)
    while lease is not None and lease.held_by_another(machine, clock.now()):
        left = deadline - time.monotonic()
        if wait is None or left <= 0:
            raise AgentOpsError(
                "RUN_LEASE_HELD",
                f"{run_id} is served by {lease.describe(clock.now())}; take it over once that lease expires",
                details={"lease": lease.to_json()},
            )
        time.sleep(min(2.0, left, max(0.1, lease.expires_at - clock.now())))
        sync.fetch(store, remote, namespaces(run_id))
        lease = runstate.read(store, run_id).lease()
    relocate(store, run_id, root=root, clock=clock, environ=environ)
    return lease


def relocate(store: Store, run_id: str, *, root: Path, clock: Clock, environ: Mapping[str, str]) -> None:
    """The run's paths on this machine, and a worktree for every worker that has not delivered, at its branch,
    with the policy's setup done there (``RUN_SETUP_FAILED`` stops the takeover: fix it and take over again)."""
    from ..policy.excludes import add_excludes, missing_excludes
    from ..runs.create import bound_policy

    policy = bound_policy(store, run_id)
    view = runstate.read(store, run_id)
    run = view.run()
    moved = {}
    for worker in view.workers():
        where = placement(root, policy.worktree_root, run_id, worker.worker_id, worker.branch)
        if worker.status is not WorkerStatus.DELIVERED:
            start = read_ref(store, worker.branch) or worker.base or run.base_commit
            ensure_worktree(store, where, start_commit=start, run_id=run_id, worker_id=worker.worker_id, clock=clock)
            ensure_setup(store, where.path, policy, environ=environ, clock=clock, last_user_resume=clock.now())
        moved[worker.worker_id] = str(where.path)

    def move(change: Change, view: runstate.RunView) -> None:
        runstate.put_run(change, replace(view.run(), repository=str(root)))
        for worker in view.workers():
            if worker.worktree != moved[worker.worker_id]:
                runstate.put_worker(change, replace(worker, worktree=moved[worker.worker_id], process=None))

    runstate.mutate(
        runstate.journal(store, run_id),
        move,
        Event(kinds.RUN_RELOCATED, f"{run_id} moved to {root}", {"repository": str(root)}),
    )
    exclude = store.common_dir / "info" / "exclude"
    add_excludes(exclude, missing_excludes(exclude))
    if f"/{policy.worktree_root.strip('/')}/" not in (exclude.read_text("utf-8") if exclude.exists() else ""):
        add_excludes(exclude, [f"/{policy.worktree_root.strip('/')}/"])
    recipe = runstate.read(store, run_id).run().recipe_digest
    if recipe and not runstate.recipe_path(store, run_id).exists():
        data = runstate.journal(store, run_id).read().artifact(recipe)
        write_private(runstate.run_dir(store, run_id), "recipe.toml", data)
