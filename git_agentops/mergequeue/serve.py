"""A queued run's side of the merge queue: wait for its entry to settle, processing the queue while it holds the
lease.

Every supervisor whose run waits in the queue polls the queue's journal (reads only); when the lease is free -- no
holder, an expired one, or a holder whose process is gone on this machine -- it takes the lease by CAS and runs
rounds (:func:`.process.process_round`) until its own entry settles, then gives the lease up for the next waiting
supervisor. The queue therefore survives the crash of whichever supervisor was processing it.
"""

from __future__ import annotations

import os
import time
from typing import Final

from ..errors import QueueLeaseLost, TargetCheckedOutDirty
from ..gitstore.repo import Store
from ..model.run import RunStatus
from ..process.groups import boot_id, process_identity
from ..runs import state as runstate
from ..runs.jobs import JobContext, Left, Wait
from . import book
from .process import process_round
from .record import Entry

POLL: Final = 0.2
"""Seconds between two reads of the queue by a supervisor that waits without the lease."""
REMOTE_POLL: Final = 1.0
"""The same for a queue on a remote (each read is a fetch)."""


def holder(store: Store) -> book.Holder:
    """This supervisor as the queue's lease names it: the machine (``agentops.machineId``, else this boot) and
    its pid identity."""
    machine = store.config_value("agentops.machineId") or f"boot-{(boot_id() or 'unknown').replace('-', '')[:16]}"
    me = process_identity(os.getpid())
    return book.Holder(machine, os.getpid(), me.start_time if me is not None else 0)


def wait_settled(ctx: JobContext, store: Store, target: str, position: int) -> Entry | Left | Wait:
    """The run's entry once settled (published, evicted, conflicted), processing the queue whenever this
    supervisor may; :class:`Left` when the run is no longer active (the entry keeps its place), :class:`Wait` when
    a checkout of the target is dirty."""
    me, remote = holder(store), ctx.policy.remote
    missing = False
    try:
        while True:
            entry = book.read(store, target, remote).doc.entry(position)
            if entry is not None and not entry.waiting:
                return entry
            if entry is None and not missing:  # a queue ref rewound or deleted: restored from the run's record
                missing = True
                ctx.log(f"queue: the queue of {target} does not hold entry #{position}; waiting for it to be restored")
            status = runstate.read(store, ctx.run_id).run().status
            if status is not RunStatus.ACTIVE:
                return Left(f"the run is {status}; its queue entry #{position} keeps its place")
            if book.claim(store, target, me, ctx.clock.now(), remote=remote) is not None:
                try:
                    if process_round(ctx, store, target, me, ctx.policy.queue_parallel):
                        continue
                except QueueLeaseLost:
                    continue
                except TargetCheckedOutDirty as exc:
                    return Wait(exc.code, exc.message)
                book.release(store, target, me, remote)  # nothing it may do now (another policy's entry is ahead)
            time.sleep(POLL if remote is None else REMOTE_POLL)
    finally:
        book.release(store, target, me, remote)
