"""The queue's journal when its target is on a remote (``[run] remote``): the remote's ref *is* the queue.

Supervisors on several machines share one queue, ``refs/agentops/queue/<target>`` on the remote: the local ref is
only a copy, brought to the remote's value before every read and write (:meth:`SharedJournal.pull`), and every
write is a journal commit on that copy pushed with the value read as its lease -- a compare-and-swap on the
server (:func:`git_agentops.gitstore.sync.push_atomic`). Another machine that wrote first makes the push fail
(``SYNC_REMOTE_MOVED``); the write is then made again on the remote's new value, as a local journal retries a lost
CAS. So the queue survives the loss of any machine: whichever supervisor holds its lease processes it.

What the remote holds is believed no more than a local ref: every commit must carry the MAC of the repository's key
(machines that share a queue share the key, ``git agentops-sync --export-key`` / ``--import-key``, as for taking
runs over). A tip pushed by anyone else -- an entry forged, replayed or reordered by someone with push access but
not a supervisor -- is never read: the local copy takes the last authentic value under it and goes on past the
foreign commits (:meth:`~git_agentops.gitstore.journal.Journal.supersede`: a two-parent commit, so the next push
is still a fast-forward the server accepts), kept in the history as evidence, the event saying
``RUN_STATE_TAMPERED``. A queue ref deleted on the remote, or rewound there to an older authentic value, is put back
from the copy by the next write; one written on an older copy after such a loss (diverged from this copy) is taken,
this copy kept as evidence. Whatever a value lacks is held against the runs' own records (:mod:`.audit`), which
restore it -- nothing published is published twice, nothing waiting is lost, no position is given twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, TypeVar

import pygit2

from ..errors import AgentOpsError, RemoteMoved
from ..gitstore import sync
from ..gitstore.events import QUARANTINED, Event
from ..gitstore.journal import Change, Journal, Mutation, Snapshot
from ..gitstore.refnames import RefConflict
from ..gitstore.refs import read_ref, update_ref
from ..gitstore.repo import Store
from ..gitstore.retry import Retry

T = TypeVar("T")
ATTEMPTS: Final = 8
"""Writes tried on the remote's newest value before ``SYNC_REMOTE_MOVED`` stands."""
WALK: Final = 1000
"""Foreign commits on top of a remote's queue looked past for the authentic value under them."""


class SharedJournal(Journal):
    """A journal whose home is ``remote``'s ref of the same name (see the module docstring).

    The local copy never holds a commit the remote does not: a write is committed, pushed with the remote's value
    as its lease, and only then is the copy moved to it -- so the copy only ever moves forward, and a write that lost
    the race on the server leaves nothing behind."""

    def __init__(self, store: Store, ref: str, remote: str) -> None:
        super().__init__(store, ref)
        self.remote = remote
        self._push_with: tuple[str | None, tuple[sync.Send, ...]] | None = None  # (lease, also) while writing

    def pull(self) -> str | None:
        """Bring the local copy up to the remote's value; returns that value (None: the remote has no queue).

        The remote's authentic value is taken when it is ahead of the copy; one behind it (the ref rewound there)
        leaves the copy as it is, and the next write puts it back; none (deleted there) too. One that diverged from
        the copy (written on an older copy after the ref was lost there) is taken too -- the remote is the queue --
        by a two-parent commit that keeps the copy as evidence, so the copy still only moves forward; what the copy
        held and the remote lacks comes back from the runs' records (:mod:`.audit`). A value this repository
        cannot authenticate is gone on past from the authentic value under it: the copy supersedes it, a
        two-parent commit the next write pushes as a fast-forward. ``SYNC_REMOTE_UNREACHABLE``."""
        theirs = sync.mirror(self.store, self.remote, (self.ref,)).get(self.ref)
        mine = read_ref(self.store, self.ref)
        if theirs is None or theirs == mine:
            return theirs
        commit: object = self.store.repo.get(theirs)
        authentic = isinstance(commit, pygit2.Commit) and self.is_authentic(commit)
        under = theirs if authentic else self._last_authentic(theirs)
        if under is not None and under != mine:
            if mine is None or self.store.repo.descendant_of(under, mine):
                self._move_to(under, mine)
            elif not self.store.repo.descendant_of(mine, under):
                self._take(under, mine)
            mine = read_ref(self.store, self.ref)
        if authentic:
            return theirs
        if mine is None:
            raise AgentOpsError(
                "RUN_STATE_TAMPERED",
                f"{self.remote}'s {self.ref} ends in {theirs[:12]}, a commit no supervisor of this repository wrote, "
                "and this machine has no authentic copy of the queue to go on from; nothing in it is acted on",
                details={"ref": self.ref, "commit": theirs},
            )
        if not self.store.repo.descendant_of(mine, theirs):
            summary = (
                f"RUN_STATE_TAMPERED: {self.remote}'s {self.ref} ended in {theirs[:12]}, a commit no supervisor "
                "wrote (an entry forged, replayed or reordered by someone else): never read, gone on past"
            )
            self.supersede(theirs, Event(QUARANTINED, summary, self._evidence(theirs, mine)))
        return theirs

    def _evidence(self, kept: str, authentic: str) -> dict[str, object]:
        """A quarantine event's data, ``kept`` referenced under the quarantine refs (never collected)."""
        ref = sync.quarantine_ref(self.remote, self.ref, kept)
        if read_ref(self.store, ref) is None:
            update_ref(self.store, ref, kept, None, "agentops: a queue value not adopted, kept as evidence")
        return {"remote": self.remote, "ref": self.ref, "commit": kept, "quarantine": ref, "authentic": authentic}

    def _move_to(self, theirs: str, mine: str | None) -> None:
        try:
            update_ref(self.store, self.ref, theirs, mine, f"agentops: {self.remote}'s {self.ref}")
        except RefConflict:
            pass  # a local writer moved the copy meanwhile: its lease is stale, its write is made again

    def _take(self, theirs: str, mine: str) -> None:
        """The remote's authentic value that diverged from the copy, taken: a commit of its tree on it, with the
        copy as a second parent (evidence), moved onto the copy by CAS."""
        remote_value, copy = self.store.resolve_commit(theirs), self.store.resolve_commit(mine)
        summary = (
            f"{self.remote}'s {self.ref} ({theirs[:12]}) diverged from this machine's copy ({mine[:12]}): the "
            "remote's taken, the copy kept as evidence"
        )
        event = Event(QUARANTINED, summary, self._evidence(mine, theirs))
        new = self._commit(remote_value.tree_id, remote_value, event, copy.id)
        try:
            self._move(new, copy, event)
        except Retry:
            pass  # a local writer moved the copy meanwhile: the next pull takes the remote's value again

    def _last_authentic(self, commit: str) -> str | None:
        """The newest authentic commit on ``commit``'s first-parent chain (None within :data:`WALK`)."""
        current: object = self.store.repo.get(commit)
        for _ in range(WALK):
            if not isinstance(current, pygit2.Commit):
                return None
            if self.is_authentic(current):
                return str(current.id)
            current = current.parents[0] if current.parents else None
        return None

    def _append(
        self, tree: pygit2.Oid, parent: pygit2.Commit | None, event: Event, evidence: pygit2.Oid | None = None
    ) -> pygit2.Oid:
        if self._push_with is None:  # a supersede: local until the next write pushes it
            return super()._append(tree, parent, event, evidence)
        lease, also = self._push_with
        new = self._commit(tree, parent, event, evidence)
        sync.push_atomic(self.store, self.remote, [sync.Send(self.ref, str(new), lease), *also])
        self._move(new, parent, event)
        return new

    def read(self, *, verify: bool = True) -> Snapshot:
        self.pull()
        return super().read(verify=verify)

    def attempt(
        self, fn: Callable[[Change], T], event: Event | None = None, also: Sequence[sync.Send] = ()
    ) -> Mutation[T]:
        """One write on the remote's newest value, pushed with it as the lease and with ``also`` in the same atomic
        push; ``SYNC_REMOTE_MOVED`` (nothing written anywhere) when another machine wrote first, or ``also`` lost."""
        theirs = self.pull()
        self._push_with = (theirs, tuple(also))
        try:
            done = super().mutate(fn, event)
        finally:
            self._push_with = None
        mine = read_ref(self.store, self.ref)
        if done.commit is None and mine is not None and mine != theirs:  # a copy the remote lacks: put it back
            sync.push_atomic(self.store, self.remote, [sync.Send(self.ref, mine, theirs), *also])
        return done

    def mutate(self, fn: Callable[[Change], T], event: Event | None = None) -> Mutation[T]:
        """:meth:`attempt`, made again on the remote's new value when another machine wrote first
        (``SYNC_REMOTE_MOVED`` after :data:`ATTEMPTS`)."""
        for _ in range(ATTEMPTS):
            try:
                return self.attempt(fn, event)
            except RemoteMoved:
                continue
        raise AgentOpsError(
            "SYNC_REMOTE_MOVED", f"{self.remote}'s {self.ref} kept moving: {ATTEMPTS} writes lost the race"
        )
