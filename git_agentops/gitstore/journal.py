"""A journal: state as a commit chain on one ref, appended by compare-and-swap.

Each commit's tree *is* the state -- a mapping of paths (``run.json``, ``workers/w1.json``, ``artifacts/ab/<sha>``)
to bytes -- and each commit's message *is* the event that produced it: a one-line summary, a blank line and an
``Agentops-Event:`` trailer holding the event as canonical JSON. ``git log <ref>`` is therefore the audit trail,
and ``git show <ref>:run.json`` the current state.

:meth:`Journal.mutate` reads the tip, lets a function change a copy-on-write view of the tree (:mod:`.treeview`),
writes only the subtrees that function touched (so its cost does not grow with the number of entries), commits with
the old tip as the only parent, and moves the ref from the old tip to the new commit by compare-and-swap. When
another writer got there first, the *whole* operation -- read, function, write -- runs again with backoff and
jitter until a deadline (``JOURNAL_CONTENDED``). The function must therefore be a pure function of the view it is given.
An :class:`~git_agentops.errors.AgentOpsError` raised by the function aborts the mutation and writes nothing.

**Authenticity.** Every commit written here carries an ``Agentops-Mac`` trailer (:mod:`.events`). The tip's tree
*is* the state, so an authentic tip authenticates all of it: :meth:`Journal.read` and :meth:`Journal.mutate` refuse a
foreign tip (``RUN_STATE_TAMPERED``); :meth:`Journal.log` shows foreign commits, marked; :meth:`Journal.restore`
contains one by appending the newest authentic state again on top of it, the foreign commits kept as evidence;
:meth:`Journal.supersede` goes on past a foreign commit a *remote* holds (a two-parent commit: the journal's own tip
first, the foreign commit second), so that publishing the journal there stays a fast-forward.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

import pygit2

from .. import eventkinds as kinds
from ..errors import AgentOpsError
from .events import (
    EVENT_TRAILER,
    QUARANTINED,
    Entry,
    Event,
    Foreign,
    JournalTampered,
    find_foreign,
    first_parent,
    foreign_entry,
    is_authentic,
    parse_event,
    remember,
    seal,
)
from .refnames import RefConflict, check_ref_name
from .refs import RefUpdate, _LockBusy, read_commit_ref, read_ref, try_update_refs
from .repo import Store
from .retry import DEFAULT_POLICY, Retry, RetryPolicy, RetryStats, run_with_retry
from .treeview import Change, Snapshot, artifact_path, check_path

__all__ = [
    "EVENT_TRAILER",
    "Change",
    "Entry",
    "Event",
    "Foreign",
    "Journal",
    "JournalTampered",
    "Mutation",
    "Snapshot",
    "artifact_path",
    "check_path",
    "parse_event",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Mutation(Generic[T]):
    """The outcome of :meth:`Journal.mutate`: the function's value and the commit it appended (if any)."""

    value: T
    commit: str | None
    attempts: int


class Journal:
    """A commit-chain journal on ``ref`` whose commits carry the repository's MAC (see the module docstring)."""

    def __init__(self, store: Store, ref: str, *, retry: RetryPolicy = DEFAULT_POLICY) -> None:
        self.store = store
        self.ref = check_ref_name(ref)
        self.retry = retry

    def _tip(self) -> pygit2.Commit | None:
        return read_commit_ref(self.store, self.ref)

    def exists(self) -> bool:
        """Whether the journal's ref exists (its first committed mutation creates it); ``REF_SYMBOLIC`` for a symref."""
        return read_ref(self.store, self.ref) is not None

    def is_authentic(self, commit: pygit2.Commit) -> bool:
        """Whether the toolkit wrote ``commit`` on this journal (:func:`.events.is_authentic`; ``KEY_INVALID``)."""
        return is_authentic(self.store, self.ref, commit)

    def foreign(self) -> Foreign | None:
        """None when the tip is authentic or absent; else what is foreign on the chain, and what is authentic below."""
        return find_foreign(self.store, self.ref, self._tip())

    def _checked(self, tip: pygit2.Commit | None) -> pygit2.Commit | None:
        if tip is not None and not self.is_authentic(tip):
            raise JournalTampered(self.ref, str(tip.id))
        return tip

    def read(self, *, verify: bool = True) -> Snapshot:
        """The current state (an empty snapshot when the journal does not exist yet).

        ``RUN_STATE_TAMPERED`` (:class:`JournalTampered`) when the tip is foreign; ``verify=False`` reads it
        anyway, for forensics only -- nothing read that way may be acted on.
        """
        tip = self._tip()
        return Snapshot(self.store, self._checked(tip) if verify else tip)

    def read_at(self, commit: str) -> Snapshot:
        """The state as of ``commit`` (which must be on this journal's chain), unverified: history, for forensics."""
        obj: object = self.store.repo.get(commit)
        if not isinstance(obj, pygit2.Commit):
            raise AgentOpsError("OBJECT_MISSING", f"{commit} is not a commit in this repository")
        return Snapshot(self.store, obj)

    def _append(
        self, tree: pygit2.Oid, parent: pygit2.Commit | None, event: Event, evidence: pygit2.Oid | None = None
    ) -> pygit2.Oid:
        """Commit ``event`` (sealed with its MAC) on ``parent`` -- with ``evidence`` as a second parent, for
        :meth:`supersede` -- and move the ref there by CAS; :class:`Retry` when the race is lost or the ref is
        locked."""
        new = self._commit(tree, parent, event, evidence)
        self._move(new, parent, event)
        return new

    def _commit(
        self, tree: pygit2.Oid, parent: pygit2.Commit | None, event: Event, evidence: pygit2.Oid | None = None
    ) -> pygit2.Oid:
        """Write the commit of ``event`` (sealed with its MAC) on ``parent`` (and ``evidence``); no ref moves."""
        parents = [parent.id] if parent is not None else []
        if evidence is not None:
            parents.append(evidence)
        message = seal(
            self.store, self.ref, str(tree), [str(p) for p in parents], event.message(self.store.clock.now())
        )
        signature = self.store.signature()
        new = self.store.repo.create_commit(None, signature, signature, message, tree, parents)
        remember(self.store, self.ref, str(new))
        return new

    def _move(self, new: pygit2.Oid, parent: pygit2.Commit | None, event: Event) -> None:
        """The ref from ``parent`` to ``new`` by CAS; :class:`Retry` when the race is lost or the ref is locked."""
        expected = str(parent.id) if parent is not None else None
        try:
            try_update_refs(self.store, [RefUpdate(self.ref, new, expected)], event.summary[:100])
        except RefConflict as lost:
            raise Retry(f"{self.ref} moved") from lost
        except _LockBusy as busy:
            raise Retry(f"{self.ref} locked") from busy

    def mutate(self, fn: Callable[[Change], T], event: Event | None = None) -> Mutation[T]:
        """Apply ``fn`` to the current state and append the result by CAS, retrying the whole operation.

        ``fn`` may set ``change.event`` to replace ``event``. Nothing is committed when ``fn`` changed nothing
        and there is no event. Raises ``RUN_STATE_TAMPERED`` (:class:`JournalTampered`; nothing is written) when
        the tip is foreign, ``JOURNAL_CONTENDED`` after the retry deadline, or whatever ``fn`` raises.
        """
        stats = RetryStats()

        def attempt() -> tuple[T, str | None]:
            tip = self._checked(self._tip())
            change = Change(self.store, tip)
            change.event = event
            value = fn(change)
            if not change.changed and change.event is None:
                return value, None
            tree = change.write_tree() if change.changed else (tip.tree_id if tip else change.write_tree())
            return value, str(self._append(tree, tip, change.event or Event(kinds.STATE_CHANGED, "state changed")))

        value, commit = run_with_retry(
            attempt, policy=self.retry, code="JOURNAL_CONTENDED", what=f"mutating {self.ref}", stats=stats
        )
        return Mutation(value, commit, stats.attempts)

    def restore(self, fn: Callable[[Change, Foreign], T], event: Event) -> Mutation[T] | None:
        """Contain a foreign tip: ``fn`` edits a view of the newest authentic commit below it, and the result is
        appended *on top of the foreign tip* by CAS -- the foreign commits stay in the history as evidence and the
        tip is authentic again. ``fn`` may set ``change.event`` to replace ``event``.

        None when the tip is authentic (nothing to contain -- also when another writer contained it first).
        ``RUN_STATE_TAMPERED`` (:class:`JournalTampered`) when no authentic commit is on the chain: nothing is
        invented. ``JOURNAL_CONTENDED`` after the retry deadline.
        """
        stats = RetryStats()

        def attempt() -> tuple[T, str] | None:
            found = self.foreign()
            if found is None:
                return None
            if found.authentic is None:
                raise JournalTampered(
                    self.ref,
                    found.tip,
                    f"{self.ref} is at {found.tip[:12]} and none of the {found.count} commits on its first-parent "
                    "chain was written by this repository's toolkit: there is no state to restore",
                )
            tip: object = self.store.repo.get(found.tip)
            base: object = self.store.repo.get(found.authentic)
            assert isinstance(tip, pygit2.Commit) and isinstance(base, pygit2.Commit)
            change = Change(self.store, base)
            change.event = event
            value = fn(change, found)
            tree = change.write_tree() if change.changed else base.tree_id
            return value, str(self._append(tree, tip, change.event or event))

        done = run_with_retry(
            attempt, policy=self.retry, code="JOURNAL_CONTENDED", what=f"restoring {self.ref}", stats=stats
        )
        return Mutation(done[0], done[1], stats.attempts) if done is not None else None

    def supersede(self, foreign: str, event: Event) -> Mutation[None] | None:
        """Go on past a foreign commit another copy of this journal holds (a remote's, quarantined when fetched):
        append on top of the authentic tip a commit of the same tree whose second parent is ``foreign``, by CAS.

        The ref then descends from ``foreign``, so pushing it where ``foreign`` is the tip is a fast-forward -- the
        one move a server that keeps history accepts -- while nothing of ``foreign`` is read or built on: the
        first-parent chain, which is the state and the log, stays the toolkit's own, and ``foreign`` stays in the
        history as evidence. ``event`` must be :data:`.events.QUARANTINED` (the one merge a journal may hold).

        None when the tip already descends from ``foreign``. ``RUN_STATE_TAMPERED`` (:class:`JournalTampered`)
        when the local tip is foreign itself or absent, ``OBJECT_MISSING`` when ``foreign`` is not a commit here,
        ``JOURNAL_CONTENDED`` after the retry deadline.
        """
        if event.code != QUARANTINED:
            raise ValueError(f"a journal merge is only ever a {QUARANTINED} event")
        other: object = self.store.repo.get(foreign)
        if not isinstance(other, pygit2.Commit):
            raise AgentOpsError("OBJECT_MISSING", f"{foreign} is not a commit in this repository")
        stats = RetryStats()

        def attempt() -> str | None:
            tip = self._checked(self._tip())
            if tip is None:
                raise JournalTampered(self.ref, foreign, f"{self.ref} does not exist here: nothing to go on from")
            if tip.id == other.id or self.store.repo.descendant_of(tip.id, other.id):
                return None
            return str(self._append(tip.tree_id, tip, event, other.id))

        commit = run_with_retry(
            attempt, policy=self.retry, code="JOURNAL_CONTENDED", what=f"superseding {self.ref}", stats=stats
        )
        return Mutation(None, commit, stats.attempts) if commit is not None else None

    def log(self, *, limit: int | None = None) -> Iterator[Entry]:
        """Events newest first, following first parents from the tip; foreign commits too, marked ``foreign``
        (:func:`.events.foreign_entry`). ``KEY_INVALID`` for a damaged key file."""
        commit = self._tip()
        count = 0
        while commit is not None and (limit is None or count < limit):
            yield parse_event(commit) if self.is_authentic(commit) else foreign_entry(commit)
            count += 1
            commit = first_parent(self.store, commit)
