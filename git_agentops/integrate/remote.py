"""A target on a remote: the tip is the remote's, and publishing is one atomic push with expected old values.

With ``[run] remote = "origin"`` the candidate is built on the remote's target tip (fetched), and publishing is one
``git push --atomic`` of the target and every agentops notes ref -- the receipt, the delivery and evidence notes --
each with ``--force-with-lease=<ref>:<expected>`` (never a plain force; :func:`git_agentops.gitstore.sync.
push_atomic`). The notes come in the same fetch as the target's tip and are merged (another machine's notes are
kept, never overwritten), so publishing costs one push; the receipt is written on the candidate before the push,
so the server's ``pre-receive`` finds it among the incoming refs. What can happen:

* the push lands -- the local target follows as a local publish moves it (:func:`follow`): when it was at the
  base, every checkout of it is brought to the new tip, index and files (git's ``updateInstead``), and then the
  branch moves; when a checkout has uncommitted changes, or the branch is elsewhere, the branch is left alone and
  the run's log says so (``RUN_TARGET_NOT_FOLLOWED``, with the command that brings it up). Never a branch that
  moved under a checkout still at the old tree (``git status`` would show the integration reversed, staged);
* the remote's target moved meanwhile -- nothing was pushed; the pipeline rebuilds on the new tip and verifies
  again, exactly as for a local target. The notes moved -- fetched, merged, pushed again;
* the server refused it (its ``pre-receive``) -- ``SYNC_PUSH_REFUSED`` with the server's own message: the run waits
  with everything kept, and ``git agentops-run resume`` tries again;
* the remote cannot be reached -- retried with backoff (1 s, doubling, at most 60 s apart) for ``[run]
  remote_patience`` (10 minutes by default), each attempt an event; then the run waits
  (``SYNC_REMOTE_UNREACHABLE``) and ``run resume`` tries again. Never a half-published state: the push is atomic.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Final, TypeVar

from .. import eventkinds as kinds
from ..errors import AgentOpsError, RemoteMoved, RemoteUnreachable
from ..gitstore import sync
from ..gitstore.checkout import dirty_checkouts, follow_checkouts
from ..gitstore.journal import Event
from ..gitstore.refnames import RefConflict
from ..gitstore.refs import list_refs, read_ref, update_ref
from ..gitstore.repo import Store
from ..model.policy import Policy, duration_seconds
from ..runs import state as runstate
from ..runs.jobs import JobContext

T = TypeVar("T")
NOTES: Final = ("refs/notes/agentops/",)
DEFAULT_PATIENCE: Final = 600.0
MAX_BACKOFF: Final = 60.0


def patience(policy: Policy) -> float:
    """``[run] remote_patience`` in seconds."""
    value = policy.doc["run"].get("remote_patience")
    return float(duration_seconds(value)) if value else DEFAULT_PATIENCE


def patiently(ctx: JobContext, store: Store, what: str, attempt: Callable[[], T]) -> T:
    """``attempt()`` until the remote answers, with backoff, for the policy's patience; then
    ``SYNC_REMOTE_UNREACHABLE`` stands. Each miss is an event on the run's log."""
    deadline = time.monotonic() + patience(ctx.policy)
    delay, tries = 1.0, 0
    while True:
        try:
            return attempt()
        except RemoteUnreachable as exc:
            tries += 1
            left = deadline - time.monotonic()
            if left <= 0:
                raise AgentOpsError(
                    "SYNC_REMOTE_UNREACHABLE",
                    f"{what}: the remote did not answer in {tries} attempt(s) over {patience(ctx.policy):g}s: "
                    f"{exc.message[-500:]}",
                ) from exc
            wait = min(delay, left, MAX_BACKOFF)
            note(ctx, store, f"{what}: the remote did not answer (attempt {tries}); retrying in {wait:.0f}s")
            time.sleep(wait)
            delay *= 2


def note(ctx: JobContext, store: Store, summary: str) -> None:
    """An event on the run's log, and the supervisor's log."""
    ctx.log(summary)
    runstate.mutate(
        runstate.journal(store, ctx.run_id), lambda change, view: None, Event(kinds.INTEGRATION_REMOTE, summary, {})
    )


def remote_tip(ctx: JobContext, store: Store, remote: str, target: str) -> str | None:
    """The remote's target tip, fetched (its objects too) into the mirror, with the remote's agentops notes in the
    same fetch -- merged into the local ones, so that publishing is one push with nothing to fetch first."""
    ref = f"refs/heads/{target}"

    def fetch() -> str | None:
        theirs = sync.mirror(store, remote, (ref, *NOTES))
        sync.adopt(store, remote, {k: v for k, v in theirs.items() if k.startswith(NOTES)})
        return theirs.get(ref)

    return patiently(ctx, store, f"fetching {target} from {remote}", fetch)


def publish(ctx: JobContext, store: Store, remote: str, target: str, base: str, candidate: str) -> bool:
    """Push the target from ``base`` to ``candidate`` with every agentops notes ref, atomically; False when the
    remote's target moved (nothing was pushed). ``SYNC_PUSH_REFUSED``, ``SYNC_REMOTE_UNREACHABLE``."""
    ref = f"refs/heads/{target}"
    for attempt in range(5):
        if attempt:  # the notes moved on the remote: fetch and merge them again
            patiently(ctx, store, f"fetching the notes from {remote}", partial(sync.fetch, store, remote, NOTES))
        sends = [sync.Send(ref, candidate, base), *notes_sends(store, remote)]
        try:
            patiently(ctx, store, f"pushing {target} to {remote}", partial(sync.push_atomic, store, remote, sends))
        except RemoteMoved:
            now = remote_tip(ctx, store, remote, target)
            if now == candidate:  # ours already, from a push that crashed before it was recorded
                follow(ctx, store, remote, target, base, candidate)
                return True
            if now != base:
                return False  # moved: rebuild
            continue  # only the notes moved: merge them again
        follow(ctx, store, remote, target, base, candidate)
        return True
    raise AgentOpsError("SYNC_REMOTE_MOVED", f"the agentops notes on {remote} kept moving: 5 pushes refused")


def notes_sends(store: Store, remote: str) -> list[sync.Send]:
    """Every local agentops notes ref the remote (as last fetched) does not hold as it is here, leased on the
    remote's value: what an atomic publish carries with the target."""
    theirs = {
        "refs/" + name[len(sync.mirror_prefix(remote)) :]: oid
        for name, oid in list_refs(store, sync.mirror_prefix(remote) + "notes/").items()
    }
    return [
        sync.Send(name, mine, theirs.get(name))
        for name, mine in sorted(list_refs(store, NOTES[0]).items())
        if theirs.get(name) != mine
    ]


def follow(ctx: JobContext, store: Store, remote: str, target: str, base: str, candidate: str) -> None:
    """The local target follows the published one, with its checkouts, or is left alone and the run says why.

    Asked after the push, before the branch moves (a checkout's cleanliness means nothing once it has moved):
    when the branch is at ``base`` and each checkout of it is clean, the checkouts are brought to ``candidate``
    first, all or none (:func:`~git_agentops.gitstore.checkout.follow_checkouts`, as git's ``updateInstead`` does
    for a push), then the branch by CAS (a checkout moved back if that loses a race). Otherwise nothing local
    changes and a ``RUN_TARGET_NOT_FOLLOWED`` event names the reason and the fix.
    """
    ref = f"refs/heads/{target}"
    local = read_ref(store, ref)
    checked_out, dirty = dirty_checkouts(store.common_dir, ref)
    if local == candidate:
        return
    stays = f"{target} here stays at {local[:12] if local else 'nothing'}; {remote}'s is at {candidate[:12]}"
    if local not in (None, base) or (local is None and checked_out):
        _not_followed(
            ctx,
            store,
            f"{stays}: it is not where the run built ({base[:12]}); 'git pull {remote} {target}' brings it up",
            {"published": candidate, "local": local, "base": base},
        )
        return
    if dirty:
        files = sorted({path for paths in dirty.values() for path in paths})
        _not_followed(
            ctx,
            store,
            f"{stays}: its checkout has uncommitted changes; 'git stash && git merge --ff-only {candidate[:12]} && "
            f"git stash pop' brings it up ({', '.join(f.split(' ', 1)[-1] for f in files[:3])})",
            {"published": candidate, "local": local, "dirty": {str(w): paths for w, paths in dirty.items()}},
        )
        return
    try:
        if local is not None:
            follow_checkouts(checked_out, base, candidate)
    except AgentOpsError as exc:  # a change made since the check: read-tree overwrote nothing
        _not_followed(ctx, store, f"{stays}: {exc.message}", {"published": candidate, "local": local})
        return
    try:
        update_ref(store, ref, candidate, local, "agentops: follow the published target")
    except RefConflict:
        if local is not None:
            try:
                follow_checkouts(checked_out, candidate, base)  # back to the tree of the ref they saw
            except AgentOpsError:
                pass
        _not_followed(ctx, store, f"{stays}: it was moved meanwhile", {"published": candidate, "local": local})


def _not_followed(ctx: JobContext, store: Store, summary: str, data: Mapping[str, object]) -> None:
    """A ``RUN_TARGET_NOT_FOLLOWED`` event on the run's log (and the supervisor's log): nothing local was moved."""
    ctx.log(f"RUN_TARGET_NOT_FOLLOWED: {summary}; {data}")
    runstate.mutate(
        runstate.journal(store, ctx.run_id),
        lambda change, view: None,
        Event(kinds.RUN_TARGET_NOT_FOLLOWED, summary, data),
    )
