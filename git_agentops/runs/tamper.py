"""Containing run state the supervisor did not write, losing nothing.

Worker agents run as the same OS user as the supervisor, so plain git lets one append a commit to its run's state
journal (swap a neighbour's delivered commit in ``tasks/...``, unblock itself) or to the policy binding. Every
commit the toolkit writes carries an ``Agentops-Mac`` (:mod:`git_agentops.gitstore.events`); a tip without a
valid one is *foreign*, and :class:`~git_agentops.gitstore.journal.Journal` neither reads nor builds on it.

:func:`contain` puts such a run back on ground the supervisor wrote:

* **state** -- the newest authentic commit on the first-parent chain below the foreign tip is found, and a new,
  MAC'd commit is appended *on top of the foreign tip* (compare-and-swap) whose tree is that authentic tree with
  ``run.json`` blocked (``RUN_STATE_TAMPERED``, fenced until a user resume). Its event ``RUN_STATE_TAMPERED``
  names the ref, the foreign commits (at most :data:`~git_agentops.gitstore.events.FOREIGN_LISTED`) and the
  commit restored from. The foreign commits stay in the history -- ``git agentops-run log`` shows them, marked --
  so nothing is lost and nothing is hidden;
* **policy binding** -- the same restore of its last authentic tree; the run is blocked through the state journal,
  with an event naming the policy ref;
* a ref with **no authentic commit at all** (made by a foreigner, or every commit foreign because the key was
  replaced) is not given invented state: it is reported (:attr:`Containment.restored` False) and left alone.

``git agentops-run resume`` afterwards is a person accepting the restored state; the supervisor then continues
from it. What a foreign commit claimed never reached anything: every read of state refuses a foreign tip.

A foreign commit on a **remote** is another matter: anyone with write access to the server can push one on top of
a run's state (a server has no key to tell), and blocking the run for it would let one push stop every live run.
A fetch quarantines it instead of adopting it (:mod:`git_agentops.gitstore.sync`), and :func:`supersede` lets the
supervisor go on from its own state: when the remote's chain below the forged commit is this machine's own history,
a ``RUN_STATE_QUARANTINED`` commit is appended on the local tip with the forged commit as its second parent
(:meth:`~git_agentops.gitstore.journal.Journal.supersede`) -- the run's next push is a fast-forward on the server
again, the forged commit stays there as evidence, and nothing of it is read. When the remote went on elsewhere
before it was forged, nothing is written: that run is another machine's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import pygit2

from .. import eventkinds as kinds
from ..gitstore.events import QUARANTINED, find_foreign
from ..gitstore.journal import Change, Event, Foreign, Journal, JournalTampered
from ..gitstore.refs import read_ref
from ..gitstore.repo import Store
from ..gitstore.sync import quarantine_ref
from ..model.run import RunStatus
from . import state as runstate

CODE = kinds.RUN_STATE_TAMPERED


@dataclass(frozen=True, slots=True)
class Containment:
    """What :func:`contain` found on one ref and what it did about it."""

    run_id: str
    ref: str
    tip: str
    """The foreign tip it found."""
    foreign: tuple[str, ...]
    """The foreign commits, newest first (bounded; ``count`` says how many there were)."""
    count: int
    restored_from: str | None
    """The newest authentic commit below them, whose tree was restored; None when there was none."""
    commit: str | None
    """The authentic commit appended on top of the foreign tip; None when nothing could be restored."""

    @property
    def restored(self) -> bool:
        """Whether there was an authentic state to restore (and so it was)."""
        return self.restored_from is not None

    def data(self) -> dict[str, Any]:
        """The event data: the ref, the foreign commits and what was restored."""
        return {
            "ref": self.ref,
            "foreign": list(self.foreign),
            "foreignCount": self.count,
            "restoredFrom": self.restored_from,
        }

    def describe(self) -> str:
        """One paragraph for a person: what was found, what was done, what to do."""
        found = (
            f"{self.ref} held {self.count} commit(s) the supervisor did not write "
            f"(newest {self.tip[:12]}: {', '.join(c[:12] for c in self.foreign[:5])}"
            f"{', ...' if self.count > 5 else ''})"
        )
        if self.restored_from is None:
            return f"{found}, and no commit the supervisor wrote: nothing was restored and the run cannot continue"
        return (
            f"{found}; the state of {self.restored_from[:12]} was restored on top of them and the run is blocked. "
            f"'git agentops-run log {self.run_id}' shows them; 'git agentops-run resume {self.run_id}' accepts the "
            "restored state"
        )


def check(store: Store, run_id: str) -> list[Foreign]:
    """The run's journals (state, policy binding) whose tip is foreign; writes nothing."""
    found = [_journal(store, run_id, which).foreign() for which in ("state", "policy")]
    return [f for f in found if f is not None]


def contain(store: Store, run_id: str) -> list[Containment]:
    """Contain every foreign tip of the run's state and policy journals (see the module docstring).

    Returns what it did, one entry per ref that was foreign; [] when both were authentic (or another process
    contained them first). Safe to call from any process at any time: every write is a compare-and-swap.
    ``KEY_INVALID`` when the key file is damaged; ``JOURNAL_CONTENDED`` after the retry deadline.
    """
    done: list[Containment] = []
    state = _restore(store, run_id, runstate.journal(store, run_id), block=True)
    if state is not None:
        done.append(state)
    policy = _restore(store, run_id, _journal(store, run_id, "policy"), block=False)
    if policy is not None:
        done.append(policy)
        if state is None or state.restored:  # the state journal is authentic: block the run there
            runstate.mutate(
                runstate.journal(store, run_id),
                lambda change, view: _block(change, _reason(policy)),
                Event(CODE, policy.describe(), policy.data()),
            )
    return done


def _journal(store: Store, run_id: str, which: str) -> Journal:
    return runstate.journal(store, run_id) if which == "state" else Journal(store, runstate.policy_ref(run_id))


def _restore(store: Store, run_id: str, journal: Journal, *, block: bool) -> Containment | None:
    def restore(change: Change, found: Foreign) -> Containment:
        report = Containment(run_id, found.ref, found.tip, found.commits, found.count, found.authentic, None)
        if block:
            _block(change, _reason(report))
        change.event = Event(CODE, report.describe(), report.data())
        return report

    try:
        done = journal.restore(restore, Event(CODE, "restored"))
    except JournalTampered:
        found = journal.foreign()
        if found is None:  # contained meanwhile by another process
            return None
        return Containment(run_id, found.ref, found.tip, found.commits, found.count, None, None)
    if done is None:
        return None
    return replace(done.value, commit=done.commit)


def _reason(report: Containment) -> str:
    return f"{CODE}: {report.describe()}"[:8000]


def _block(change: Change, reason: str) -> None:
    """run.json blocked and fenced with ``reason`` (a complete run stays complete: that is sticky)."""
    view = runstate.RunView(change)
    if not view.exists:
        return
    run = view.run()
    if run.status is RunStatus.COMPLETE:
        return
    runstate.put_run(change, replace(run, status=RunStatus.BLOCKED, status_reason=reason, disable_restart=True))


@dataclass(frozen=True, slots=True)
class Quarantine:
    """A journal tip a remote holds that this repository cannot authenticate, and what :func:`supersede` did."""

    run_id: str
    remote: str
    ref: str
    commit: str
    """The remote's tip, kept under :attr:`kept` and never adopted."""
    authentic: str | None
    """The newest authentic commit on the remote's first-parent chain below it (None: there is none)."""
    superseded: str | None
    """The local commit that goes on past it; None when the remote's chain is not this machine's history."""

    @property
    def kept(self) -> str:
        """The quarantine ref that keeps the forged commit."""
        return quarantine_ref(self.remote, self.ref, self.commit)

    def data(self) -> dict[str, Any]:
        """The event data."""
        return {
            "remote": self.remote,
            "ref": self.ref,
            "commit": self.commit,
            "quarantine": self.kept,
            "authentic": self.authentic,
        }

    def describe(self) -> str:
        """One line for the log."""
        found = (
            f"{self.remote} holds {self.ref} at {self.commit[:12]}, a commit no supervisor of this run wrote (its "
            f"MAC does not check): kept under {self.kept}, not adopted"
        )
        if self.superseded is None:
            return f"{found}; and below it the remote's state went on without this machine"
        return f"{found}; the run goes on from its own state ({self.superseded[:12]} descends from both)"


def supersede(store: Store, run_id: str, remote: str, quarantined: Mapping[str, str]) -> list[Quarantine]:
    """Go on past each forged journal tip of ``run_id`` that a fetch from ``remote`` quarantined (ref -> the
    remote's tip; see the module docstring). Returns one :class:`Quarantine` per ref of this run.
    ``RUN_STATE_TAMPERED`` when the local journal is foreign itself, ``JOURNAL_CONTENDED``, ``KEY_INVALID``."""
    prefix = runstate.state_ref(run_id).removesuffix("state")
    done = []
    for ref, commit in sorted(quarantined.items()):
        if not ref.startswith(prefix):
            continue
        tip: object = store.repo.get(commit)
        local = read_ref(store, ref)
        if not isinstance(tip, pygit2.Commit) or local is None:
            continue
        found = find_foreign(store, ref, tip)
        authentic = found.authentic if found is not None else commit
        report = Quarantine(run_id, remote, ref, commit, authentic, None)
        ours = authentic is not None and (authentic == local or store.repo.descendant_of(local, authentic))
        if ours:
            journal = runstate.journal(store, run_id) if ref == runstate.state_ref(run_id) else Journal(store, ref)
            summary = (
                f"{ref.removeprefix(prefix)} on {remote} at {commit[:12]} was not written by a supervisor of this "
                "run: quarantined, not adopted; the run goes on from its own state"
            )
            made = journal.supersede(commit, Event(QUARANTINED, summary, report.data()))
            report = replace(report, superseded=made.commit if made is not None else local)
        done.append(report)
    return done
