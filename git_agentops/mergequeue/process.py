"""Processing a target's queue: speculative candidates, verified ``parallel`` at a time, the verified prefix
published by one compare-and-swap, only the culprit evicted.

One **round** (:func:`process_round`), run by the supervisor holding the queue's lease:

1. an entry the record says was being published when its processor died is settled by what the target holds;
2. candidate k is merged in memory on candidate k-1 (the first on the target's tip), for every waiting entry that
   shares the processor's policy and whose run is served (a paused or stopped run's entry keeps its place and is
   passed over until it is resumed), in queue order. An entry whose deliveries conflict with the target's tip is
   settled ``conflicted``, naming the paths, and its run plans a repair task (:mod:`git_agentops.integrate.repair`):
   nothing is resolved by favouring a side. One that conflicts with an entry ahead waits for it to settle;
3. the first ``parallel`` candidates are verified at once, each in a clean checkout of its own
   (:func:`git_agentops.verify.proof.prove`: evidence of an identical tree is reused);
4. the first candidate that failed, on top of candidates that all passed, is verified once more on the same tree (a
   flaky result is not an eviction; the record says it was retried); failing again, its entry is **evicted** with
   its evidence. A candidate that failed above it is not blamed: it is built again without the culprit next round;
5. the verified prefix is recorded as being published, the target moved to its last candidate by CAS (a target
   someone else moved just means the next round builds on the new tip), its clean checkouts follow, and the entries
   are settled ``published``. Each run then receipts its own integration.

On a target on a remote (``[run] remote``) the queue is the server's (:mod:`.shared`): a round first fetches the
runs' refs and notes of every machine, builds on the server's tip, and publishes the prefix with one atomic push of
the target, the queue settled ``published`` and every run's receipt, added beforehand (:func:`_publish_remote`):
the server's queue says published exactly when its target moved, so step 1 has nothing to settle there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from .. import eventkinds as kinds
from ..errors import AgentOpsError, RemoteMoved, TargetCheckedOutDirty
from ..gitstore import sync
from ..gitstore.checkout import (
    PUBLISH_LOCK,
    PUBLISH_LOCK_WAIT,
    checkouts_of,
    dirty_checkouts,
    move_checkout,
    shown_dirty,
)
from ..gitstore.journal import Event
from ..gitstore.private import file_lock
from ..gitstore.refnames import RefConflict
from ..gitstore.refs import read_ref, update_ref
from ..gitstore.repo import Store
from ..integrate.merge import ChainResult, integration_message, merge_chain
from ..model.delivery import CommitId
from ..runs import state as runstate
from ..runs.jobs import JobContext
from ..verify.core import Outcome
from ..verify.failing import failed_commands
from ..verify.proof import prove
from . import audit, book
from .record import Entry, EntryState
from .shared import ATTEMPTS, SharedJournal

NOTES: Final = ("refs/notes/agentops/",)

SPECULATION_DEPTH: Final = 16
"""Candidates built ahead in one round (only the first ``parallel`` are verified; the rest are cheap merges that
find conflicts early)."""


@dataclass(frozen=True, slots=True)
class Built:
    """An entry's speculative candidate: what it was built on and its merge chain."""

    entry: Entry
    base: str
    chain: ChainResult

    @property
    def candidate(self) -> str:
        assert self.chain.head is not None
        return self.chain.head


Result = Outcome | AgentOpsError
"""A verification's outcome, or why it could not run (a setup that failed, a checkout the commands changed)."""


@dataclass(frozen=True, slots=True)
class Checked:
    """A candidate's verification: its result(s) -- two when it was retried."""

    built: Built
    outcomes: tuple[Result, ...]

    @property
    def passed(self) -> bool:
        last = self.outcomes[-1]
        return isinstance(last, Outcome) and last.passed


def process_round(ctx: JobContext, store: Store, target: str, me: book.Holder, parallel: int) -> int:
    """One round (see the module docstring); returns how many entries it settled (0: nothing to do now).

    ``RUN_TARGET_CHECKED_OUT_DIRTY`` when a checkout of the target has uncommitted changes (nothing is published;
    every entry keeps its place), ``QUEUE_LEASE_LOST`` when another supervisor took the queue."""
    remote = ctx.policy.remote
    if remote is not None:  # the runs of every machine, their deliveries and evidence, as the remote holds them
        sync.fetch(store, remote, ("refs/agentops/runs/", *NOTES))
    runs = audit.recorded(store, target)
    if audit.reconcile(store, target, me, ctx.clock.now(), runs, remote):
        ctx.log(f"queue: the queue of {target} did not match the runs' records; it was held against them")
    view = book.read(store, target, remote)
    settled = _roll_forward(ctx, store, target, me, view.doc.waiting()) if remote is None else 0
    if settled:
        return settled
    # a paused or stopped run's entry keeps its place and is passed over: published, nobody would receipt it
    served = [e for e in view.doc.waiting() if (run := runs.get(e.run_id)) is not None and run.active]
    waiting = _mine(ctx, served)
    if not waiting:
        return 0
    target_ref = f"refs/heads/{target}"
    tip = sync.mirror(store, remote, (target_ref,)).get(target_ref) if remote else read_ref(store, target_ref)
    if tip is None:
        raise AgentOpsError("OBJECT_MISSING", f"the target branch {target} is gone")
    built, conflicted = build(store, tip, waiting[:SPECULATION_DEPTH])
    if conflicted:
        event = _event(kinds.QUEUE_CONFLICTED, conflicted, "conflict(s)")
        book.settle(store, target, me, conflicted, event, remote)
        return len(conflicted)
    checked = _verify(ctx, store, built[: max(1, parallel)])
    prefix, culprit = judge(checked, lambda c: _again(ctx, store, c))
    if remote is not None:
        published = _publish_remote(ctx, store, target, me, tip, prefix, remote)
    else:
        published = _publish(ctx, store, target, me, tip, prefix)
    if culprit is not None and (published or not prefix):  # judged on candidates the target now holds (or its tip)
        evicted = _evicted(ctx, culprit)
        book.settle(store, target, me, [evicted], _event(kinds.QUEUE_EVICTED, [evicted], "evicted"), remote)
        published += 1
    return published


def _mine(ctx: JobContext, waiting: Sequence[Entry]) -> list[Entry]:
    """The waiting entries this processor may verify: those up to the first made under another policy (a
    supervisor bound to that policy processes the queue from there)."""
    out: list[Entry] = []
    for entry in waiting:
        if entry.policy_hash != ctx.policy.config_hash:
            break
        out.append(entry)
    return out


def build(store: Store, tip: str, entries: Sequence[Entry]) -> tuple[list[Built], list[Entry]]:
    """Candidate k on candidate k-1, in memory; (the candidates, the entries settled ``conflicted``).

    An entry whose deliveries conflict with the target's tip is settled ``conflicted`` (its run plans a repair task
    on that tip). One that conflicts with an entry ahead of it, not published yet, is passed over this round: it
    waits for that entry to settle -- published, its conflict is with the tip; evicted, it may merge cleanly -- so a
    repair never starts on work the target may not take."""
    built: list[Built] = []
    conflicted: list[Entry] = []
    head = tip
    for entry in entries:
        chain = merge_chain(
            store,
            head,
            [(d.task_id, d.commit) for d in entry.deliveries],
            message=integration_message({d.task_id: d.title for d in entry.deliveries}, entry.run_id),
        )
        if chain.conflict is None and chain.head is not None:
            built.append(Built(entry, head, chain))
            head = chain.head
            continue
        label, paths = chain.conflict or ("?", ())
        if any(_touched(store, tip, b, set(paths)) for b in built):
            continue  # waits for the entries ahead it conflicts with to settle
        conflicted.append(
            replace(
                entry,
                state=EntryState.CONFLICTED,
                code="RUN_INTEGRATION_CONFLICT",
                reason=f"the delivery of {label} conflicts with the target's tip {tip[:12]} in: {', '.join(paths)}",
                base=CommitId(tip),
                paths=tuple(paths),
                conflicting=label if label != "?" else None,
                settled_at=store.clock.now(),
            )
        )
    return built, conflicted


def _touched(store: Store, tip: str, built: Built, paths: set[str]) -> bool:
    """Whether ``built``'s deliveries changed any of ``paths`` against the tip the round builds on."""
    diff = store.resolve_commit(built.base).tree.diff_to_tree(store.resolve_commit(built.candidate).tree)
    return any({d.old_file.path, d.new_file.path} & paths for d in diff.deltas)


def _verify(ctx: JobContext, store: Store, built: Sequence[Built]) -> list[Checked]:
    """Verify the candidates at once, each in its own slot and with its own repository handle."""
    if len(built) <= 1:
        return [Checked(b, (_prove(ctx, store, f"queue-{i}", b.candidate),)) for i, b in enumerate(built)]
    with ThreadPoolExecutor(max_workers=len(built), thread_name_prefix="agentops-queue") as pool:
        futures = [pool.submit(_prove_own, ctx, store, f"queue-{i}", b.candidate) for i, b in enumerate(built)]
        return [Checked(b, (f.result(),)) for b, f in zip(built, futures, strict=True)]


def _prove_own(ctx: JobContext, store: Store, slot: str, commit: str) -> Result:
    own = store.reopen()
    return _prove(ctx, own, slot, commit)


def _prove(ctx: JobContext, store: Store, slot: str, commit: str) -> Result:
    ctx.log(f"queue: verifying candidate {commit[:12]} ({slot})")
    try:
        return prove(ctx, store, slot=slot, commit=commit, task=None)
    except AgentOpsError as exc:  # the candidate's own setup or commands: its failure, not the processor's
        ctx.log(f"queue: candidate {commit[:12]} could not be verified: {exc.code}: {exc.message}")
        return exc


def _again(ctx: JobContext, store: Store, checked: Checked) -> Checked:
    """The same tree verified once more (a failing record is never reused, so the commands run again)."""
    ctx.log(f"queue: candidate {checked.built.candidate[:12]} failed; verifying it once more before an eviction")
    return Checked(checked.built, (*checked.outcomes, _prove(ctx, store, "queue-0", checked.built.candidate)))


def judge(checked: Sequence[Checked], again: Callable[[Checked], Checked]) -> tuple[list[Checked], Checked | None]:
    """(the verified prefix, the culprit): the first failure on top of passing candidates is verified ``again``;
    passing then, it stays in the prefix and the next is judged; failing, it is the culprit and nothing above it
    counts (those were built on it)."""
    prefix: list[Checked] = []
    for first in checked:
        item = first if first.passed else again(first)
        if not item.passed:
            return prefix, item
        prefix.append(item)
    return prefix, None


def _summaries(outcome: Result) -> tuple[dict[str, object], ...]:
    from ..receipts.statement import evidence_summary  # lazily: the receipts package is integration-only

    return tuple(evidence_summary(r.to_json()) for r in outcome.records) if isinstance(outcome, Outcome) else ()


def _fresh(checked: Checked) -> int:
    """How many verifications ran commands (a fully reused outcome is not counted)."""
    return sum(1 for o in checked.outcomes if not isinstance(o, Outcome) or any(not r.cached for r in o.records))


def _evicted(ctx: JobContext, culprit: Checked) -> Entry:
    outcome = culprit.outcomes[-1]
    if isinstance(outcome, Outcome):
        lines = [
            f"- {r.command_id}: exit {r.exit_code}{' (timed out)' if r.timed_out else ''}\n" + r.tail.rstrip()[-1200:]
            for r in outcome.failures()
        ]
        failed = ", ".join(command for command, *_ in failed_commands(outcome.records))
    else:
        lines, failed = [f"- error[{outcome.code}]: {outcome.message}"], outcome.code
    return replace(
        culprit.built.entry,
        state=EntryState.EVICTED,
        code="RUN_VERIFICATION_FAILED",
        reason=(
            f"its queue candidate {culprit.built.candidate[:12]} (built on {culprit.built.base[:12]}) failed "
            f"verification twice ({failed}):\n" + "\n".join(lines)
        ),
        base=CommitId(culprit.built.base),
        candidate=CommitId(culprit.built.candidate),
        steps=culprit.built.chain.steps,
        verification=_summaries(outcome),
        verifications=culprit.built.entry.verifications + _fresh(culprit),
        retried=len(culprit.outcomes) > 1,
        settled_at=ctx.clock.now(),
    )


def _published(ctx: JobContext, checked: Checked, below: tuple[int, ...]) -> Entry:
    built = checked.built
    return replace(
        built.entry,
        state=EntryState.WAITING,  # until the CAS: settled published by _settle_published
        base=CommitId(built.base),
        candidate=CommitId(built.candidate),
        steps=built.chain.steps,
        below=below,
        verification=_summaries(checked.outcomes[-1]),
        verifications=built.entry.verifications + _fresh(checked),
        retried=len(checked.outcomes) > 1,
        publishing=True,
    )


def _publish(ctx: JobContext, store: Store, target: str, me: book.Holder, tip: str, prefix: Sequence[Checked]) -> int:
    """Record the prefix as being published, move the target by CAS, let its checkouts follow, settle it."""
    if not prefix:
        return 0
    target_ref = f"refs/heads/{target}"
    with file_lock(store.private_dir(), PUBLISH_LOCK, timeout=PUBLISH_LOCK_WAIT):
        checked_out, dirty = dirty_checkouts(store.common_dir, target_ref)
        if dirty:
            raise TargetCheckedOutDirty(
                f"{target} is checked out with uncommitted changes ({shown_dirty(dirty)}); the queue publishes "
                "once they are committed or stashed",
            )
        positions = [c.built.entry.position for c in prefix]
        entries = [_published(ctx, c, tuple(positions[:i])) for i, c in enumerate(prefix)]
        book.settle(store, target, me, entries, _event(kinds.QUEUE_PUBLISHING, entries, "being published"))
        ctx.fault("queue:publishing")
        last = entries[-1].candidate
        assert last is not None
        try:
            update_ref(
                store, target_ref, last, tip, f"agentops: merge queue publishes #{positions[0]}..#{positions[-1]}"
            )
        except RefConflict:
            ctx.log(f"queue: {target} moved while verifying; the next round builds on its new tip")
            return _unpublished(store, target, me, entries, "the target moved")
        ctx.fault(
            "queue:moved"
        )  # the branch moved, its checkouts not yet: the next processor brings them (_roll_forward)
        _follow(ctx, target, tip, last, checked_out)
    return _settle_published(ctx, store, target, me, entries)


def _publish_remote(
    ctx: JobContext, store: Store, target: str, me: book.Holder, tip: str, prefix: Sequence[Checked], remote: str
) -> int:
    """On a remote target: the prefix settled ``published`` in the queue's copy, each run's receipt added on its
    candidate, then **one atomic push** of the target (leased on the tip it was built on), the queue and the
    agentops notes -- the server's ``pre-receive`` finds every receipt among the incoming refs, and the queue says
    published exactly when the target moved. The remote's target moved meanwhile: nothing was pushed, the next
    round builds on its new tip; only the queue or the notes moved: merged, and pushed again."""
    if not prefix:
        return 0
    from ..integrate.receipting import add_receipt  # lazily: the receipts package is integration-only
    from ..integrate.remote import follow, notes_sends

    target_ref, shared = f"refs/heads/{target}", book.journal(store, target, remote)
    assert isinstance(shared, SharedJournal)
    positions = [c.built.entry.position for c in prefix]
    now = ctx.clock.now()
    done = [
        replace(_published(ctx, c, tuple(positions[:i])), state=EntryState.PUBLISHED, publishing=False, settled_at=now)
        for i, c in enumerate(prefix)
    ]
    for entry in done:  # what each run records once published, receipted now: the push carries the receipts
        integration = runstate.read(store, entry.run_id).run().integration
        assert integration is not None  # a queued run's (audit.recorded)
        add_receipt(store, entry.run_id, entry.policy_hash, now, entry.published(integration))
    last = done[-1].candidate
    assert last is not None
    write, event = book.settler(target, me, done), _event(kinds.QUEUE_PUBLISHED, done, "published")
    ctx.fault("queue:publishing")  # receipted here, nothing pushed: the next processor builds the prefix again
    for _ in range(ATTEMPTS):
        try:  # the queue's write, the target and the receipts in one atomic push
            shared.attempt(write, event, also=[sync.Send(target_ref, last, tip), *notes_sends(store, remote)])
        except RemoteMoved:
            if sync.mirror(store, remote, (target_ref,)).get(target_ref) != tip:
                ctx.log(f"queue: {remote}'s {target} moved while verifying; the next round builds on its new tip")
                return 0
            sync.fetch(store, remote, NOTES)  # the queue or the notes moved: merged, then pushed again
            continue
        ctx.fault("queue:moved")
        follow(ctx, store, remote, target, tip, last)
        return len(done)
    raise AgentOpsError("SYNC_REMOTE_MOVED", f"{remote}'s queue of {target} kept moving: {ATTEMPTS} pushes lost")


def _follow(ctx: JobContext, target: str, old: str, new: str, checkouts: Sequence[Path]) -> None:
    """The target's clean checkouts brought from ``old`` to ``new`` (index and files), as git's ``updateInstead``
    does for a push; safe to repeat (a checkout already at ``new`` stays), one changed since is left alone, logged."""
    for worktree in checkouts:
        try:
            move_checkout(worktree, old, new)
        except AgentOpsError as exc:
            ctx.log(f"{target} moved, but its checkout {worktree} could not follow: {exc.message}")


def _settle_published(ctx: JobContext, store: Store, target: str, me: book.Holder, entries: list[Entry]) -> int:
    now = ctx.clock.now()
    done = [replace(e, state=EntryState.PUBLISHED, publishing=False, settled_at=now) for e in entries]
    book.settle(store, target, me, done, _event(kinds.QUEUE_PUBLISHED, done, "published"))
    return len(done)


def _roll_forward(ctx: JobContext, store: Store, target: str, me: book.Holder, waiting: Sequence[Entry]) -> int:
    """Entries a dead processor was publishing: published if the target holds their candidates, else waiting
    again (their candidates are built anew)."""
    publishing = [e for e in waiting if e.publishing]
    if not publishing:
        return 0
    tip = read_ref(store, f"refs/heads/{target}")
    last = publishing[-1].candidate
    held = tip is not None and last is not None and (tip == last or store.repo.descendant_of(tip, last))
    if held:
        assert last is not None and publishing[0].base is not None
        _follow(ctx, target, publishing[0].base, last, checkouts_of(store.common_dir, f"refs/heads/{target}"))
        return _settle_published(ctx, store, target, me, publishing)
    return _unpublished(store, target, me, publishing, "the target does not hold them")


def _unpublished(store: Store, target: str, me: book.Holder, entries: Sequence[Entry], why: str) -> int:
    """Entries recorded as being published that the target did not take: waiting again, built anew next round."""
    again = [replace(e, publishing=False) for e in entries]
    book.settle(store, target, me, again, _event(kinds.QUEUE_REBUILT, entries, f"to be built again: {why}"))
    return 0


def _event(code: kinds.EventCode, entries: Sequence[Entry], what: str) -> Event:
    shown = ", ".join(e.label for e in entries)
    return Event(code, f"queue: {shown} {what}", {"positions": [e.position for e in entries]})
