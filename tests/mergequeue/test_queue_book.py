"""The queue's journal, lease and candidates, in process: enqueue, claim, fencing, forgery, speculation, judging."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from git_agentops import eventkinds as kinds
from git_agentops.errors import AgentOpsError, QueueLeaseLost
from git_agentops.gitstore.journal import Event
from git_agentops.gitstore.repo import Store
from git_agentops.mergequeue import book
from git_agentops.mergequeue.process import Built, Checked, build, judge
from git_agentops.mergequeue.record import Entry, EntryState, QueuedDelivery
from git_agentops.verify.core import Outcome

from ..conftest import git

HASH = "a" * 64
NOW = 1_800_000_000.0


def me(pid: int | None = None) -> book.Holder:
    return book.Holder("m1", pid or os.getpid(), _start_time(pid or os.getpid()))


def _start_time(pid: int) -> int:
    from git_agentops.process.groups import process_identity

    found = process_identity(pid)
    return found.start_time if found is not None else 1


def delivery(repo: Path, name: str, path: str, content: str) -> QueuedDelivery:
    """A commit on a side branch off main writing ``path``."""
    git(repo, "checkout", "-q", "-b", name, "main")
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(content)
    git(repo, "add", path)
    git(repo, "commit", "-q", "-m", f"{name} writes {path}")
    commit = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    return QueuedDelivery(f"task-{name}", f"Part {name}", commit)  # type: ignore[arg-type]


def test_enqueue_appends_in_order_and_is_safe_to_repeat(store: Store, repo_path: Path) -> None:
    """Invariant: positions are given in enqueue order and never reused; enqueueing the same deliveries again (a
    supervisor restarted after the write) returns the same entry."""
    a = delivery(repo_path, "a", "src/a.txt", "a\n")
    b = delivery(repo_path, "b", "src/b.txt", "b\n")
    first = book.enqueue(store, "main", "run-1", [a], HASH, NOW)
    second = book.enqueue(store, "main", "run-2", [b], HASH, NOW)
    again = book.enqueue(store, "main", "run-1", [a], HASH, NOW)
    assert (first.position, second.position, again.position) == (1, 2, 1)
    doc = book.read(store, "main").doc
    assert [e.run_id for e in doc.waiting()] == ["run-1", "run-2"] and doc.next_position == 3
    # other deliveries of the same run: the old entry gives way, the new one goes to the end
    other = book.enqueue(store, "main", "run-1", [b], HASH, NOW)
    doc = book.read(store, "main").doc
    assert other.position == 3 and doc.entry(1) is not None and doc.entry(1).code == "RUN_QUEUE_REPLACED"  # type: ignore[union-attr]
    shown = json.loads(git(repo_path, "show", "refs/agentops/queue/main:queue.json"))
    assert [e["position"] for e in shown["entries"]] == [1, 2, 3]


def test_the_lease_is_held_by_one_live_process_and_settling_is_fenced_by_it(store: Store, repo_path: Path) -> None:
    """Invariant: while a live process holds the queue's lease nobody else takes it; a holder whose process is gone
    (on this machine) or whose lease expired loses it at once; a processor that lost the lease writes nothing."""
    entry = book.enqueue(store, "main", "run-1", [delivery(repo_path, "a", "src/a.txt", "a\n")], HASH, NOW)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        other = me(sleeper.pid)
        assert book.claim(store, "main", other, NOW) is not None
        assert book.claim(store, "main", me(), NOW + 1) is None  # held by a live process
        done = replace(entry, state=EntryState.PUBLISHED)
        with pytest.raises(QueueLeaseLost):
            book.settle(store, "main", me(), [done], _event())
        assert book.read(store, "main").doc.entry(1) == entry  # nothing written
    finally:
        sleeper.kill()
        sleeper.wait()
    lease = book.claim(store, "main", me(), NOW + 2)  # its holder is gone: taken at once, the term moves on
    assert lease is not None and lease.term == 2 and lease.pid == os.getpid()
    with pytest.raises(QueueLeaseLost):  # the dead holder's settle (a zombie processor) is fenced
        book.settle(store, "main", me(sleeper.pid), [replace(entry, state=EntryState.PUBLISHED)], _event())
    stranger = book.Holder("m2", 4242, 7)
    assert book.claim(store, "main", stranger, NOW + 3) is None  # another machine waits for the expiry...
    assert book.claim(store, "main", stranger, NOW + 2 + book.LEASE_TTL) is not None  # ...and takes it then
    book.release(store, "main", me())  # not the holder any more: nothing happens
    assert book.read(store, "main").lease is not None


def test_a_queue_commit_no_supervisor_wrote_is_never_acted_on(store: Store, repo_path: Path) -> None:
    """Invariant: an entry forged, replayed or reordered by writing the queue ref directly -- with git, as any
    process of the user can -- leaves a tip without the repository's MAC: reading, enqueueing and claiming refuse
    it (``RUN_STATE_TAMPERED``) and nothing is integrated from it."""
    book.enqueue(store, "main", "run-1", [delivery(repo_path, "a", "src/a.txt", "a\n")], HASH, NOW)
    ref = "refs/agentops/queue/main"
    doc = json.loads(git(repo_path, "show", f"{ref}:queue.json"))
    forged = delivery(repo_path, "evil", "src/evil.txt", "x\n")
    doc["entries"].insert(
        0, {**doc["entries"][0], "position": 9, "runId": "run-evil", "deliveries": [forged.to_json()]}
    )
    blob = git(repo_path, "hash-object", "-w", "--stdin", input=json.dumps(doc))
    tree = git(repo_path, "mktree", input=f"100644 blob {blob}\tqueue.json\n")
    commit = git(repo_path, "commit-tree", tree, "-p", git(repo_path, "rev-parse", ref), "-m", "queue: more")
    git(repo_path, "update-ref", ref, commit)
    for attempt in (
        lambda: book.read(store, "main"),
        lambda: book.enqueue(store, "main", "run-2", [forged], HASH, NOW),
        lambda: book.claim(store, "main", me(), NOW),
    ):
        with pytest.raises(AgentOpsError) as caught:
            attempt()
        assert caught.value.code == "RUN_STATE_TAMPERED"


def _entry(position: int, run_id: str, deliveries: list[QueuedDelivery]) -> Entry:
    return Entry(position, run_id, tuple(deliveries), HASH, NOW, EntryState.WAITING)


def test_candidates_build_on_each_other_a_conflict_ahead_waits_and_one_with_the_tip_is_settled(
    store: Store, repo_path: Path
) -> None:
    """Invariant: candidate k is a merge on candidate k-1; an entry whose delivery conflicts with one ahead that is
    not published yet is passed over (it waits for that entry to settle) while the entries after it build on what
    is ahead of it; one whose delivery conflicts with the target's tip is set aside ``conflicted`` with the paths,
    the tip and the conflicting task -- never resolved by favouring a side."""
    tip = git(repo_path, "rev-parse", "main")
    a = delivery(repo_path, "a", "src/shared.txt", "from a\n")
    b = delivery(repo_path, "b", "src/b.txt", "b\n")
    c = delivery(repo_path, "c", "src/shared.txt", "from c\n")
    d = delivery(repo_path, "d", "src/d.txt", "d\n")
    entries = [_entry(1, "run-a", [a]), _entry(2, "run-b", [b]), _entry(3, "run-c", [c]), _entry(4, "run-d", [d])]
    built, conflicted = build(store, tip, entries)
    assert [x.entry.run_id for x in built] == ["run-a", "run-b", "run-d"] and conflicted == []
    assert built[0].base == tip and built[1].base == built[0].candidate and built[2].base == built[1].candidate
    assert git(repo_path, "show", f"{built[2].candidate}:src/shared.txt") == "from a"
    # entry 1 published: entry 3 now conflicts with the tip itself
    published = built[0].candidate
    built, conflicted = build(store, published, entries[2:])
    assert [x.entry.run_id for x in built] == ["run-d"]
    [lost] = conflicted
    assert lost.state is EntryState.CONFLICTED and lost.code == "RUN_INTEGRATION_CONFLICT"
    assert lost.paths == ("src/shared.txt",) and lost.base == published and lost.conflicting == "task-c"
    assert published[:12] in (lost.reason or "")


def _checked(position: int, *results: bool) -> Checked:
    entry = _entry(position, f"run-{position}", [])
    return Checked(Built(entry, "0" * 40, None), tuple(_outcome(ok) for ok in results))  # type: ignore[arg-type]


class _Record:
    """What :attr:`Outcome.passed` reads of an evidence record."""

    required = True
    cached = False

    def __init__(self, passed: bool) -> None:
        self.passed = passed


def _outcome(ok: bool) -> Outcome:
    return Outcome("c" * 40, "t" * 40, records=[_Record(ok)])  # type: ignore[list-item]


def test_the_verified_prefix_ends_at_the_first_candidate_that_fails_twice() -> None:
    """Invariant: the first failure on top of passing candidates is verified again on the same tree; a pass then
    keeps it (and what was verified above it) in the prefix, a second failure makes it the culprit and nothing
    above it counts; a candidate above a culprit is never blamed."""
    again_calls: list[int] = []

    def again(result: bool) -> Callable[[Checked], Checked]:
        def retry(item: Checked) -> Checked:
            again_calls.append(item.built.entry.position)
            return replace(item, outcomes=(*item.outcomes, _outcome(result)))

        return retry

    prefix, culprit = judge([_checked(1, True), _checked(2, True)], again(False))  # type: ignore[arg-type]
    assert [c.built.entry.position for c in prefix] == [1, 2] and culprit is None and again_calls == []
    prefix, culprit = judge([_checked(1, True), _checked(2, False), _checked(3, False)], again(False))  # type: ignore[arg-type]
    assert [c.built.entry.position for c in prefix] == [1] and culprit is not None
    assert culprit.built.entry.position == 2 and len(culprit.outcomes) == 2 and again_calls == [2]  # 3 not blamed
    prefix, culprit = judge([_checked(1, False), _checked(2, True)], again(True))  # type: ignore[arg-type]
    assert [c.built.entry.position for c in prefix] == [1, 2] and culprit is None  # flaky: retried, kept
    assert len(prefix[0].outcomes) == 2


def _event() -> Event:
    return Event(kinds.QUEUE_PUBLISHED, "test", {"positions": [1]})


def test_entries_that_are_not_what_their_runs_recorded_are_stale_and_the_runs_order_is_restored(
    repo_path: Path,
) -> None:
    """Invariant: held against the runs' own records, a waiting entry pointing at commits its run never froze, or
    standing at a position its run did not record (the queue reordered), is evicted ``QUEUE_ENTRY_STALE``; the run's
    recorded entry comes back at the recorded position; an entry whose run still records nothing yet stands."""
    from git_agentops.mergequeue.audit import Recorded, _reconciled
    from git_agentops.mergequeue.record import QueueDoc
    from git_agentops.model.integration import IntegrationStatus

    a = delivery(repo_path, "a", "src/a.txt", "a\n")
    b = delivery(repo_path, "b", "src/b.txt", "b\n")
    forged = delivery(repo_path, "forged", "src/x.txt", "x\n")
    doc = QueueDoc("main")
    for entry in (_entry(1, "run-a", [forged]), _entry(2, "run-b", [b]), _entry(3, "run-c", [a])):
        doc = doc.with_entry(entry)
    runs = {
        "run-a": Recorded("run-a", IntegrationStatus.QUEUED, 1, (a,), HASH, True),  # never froze `forged`
        "run-b": Recorded("run-b", IntegrationStatus.QUEUED, 5, (b,), HASH, True),  # recorded at #5, not #2
        "run-c": Recorded("run-c", IntegrationStatus.PREPARED, None, (), HASH, True),  # enqueued, not recorded yet
    }
    fixed, changed = _reconciled(doc, runs, NOW)
    states = {e.position: (e.run_id, e.state, e.code) for e in fixed.entries}
    assert states[2] == ("run-b", EntryState.EVICTED, "QUEUE_ENTRY_STALE")
    assert states[5] == ("run-b", EntryState.WAITING, None) and fixed.entry(5).deliveries == (b,)  # type: ignore[union-attr]
    assert states[3] == ("run-c", EntryState.WAITING, None)
    # run-a's forged entry at its own position is evicted; its recorded one cannot take the settled position back
    assert states[1] == ("run-a", EntryState.EVICTED, "QUEUE_ENTRY_STALE")
    assert changed == 3 and [e.position for e in fixed.waiting()] == [3, 5]
    assert _reconciled(fixed, runs, NOW)[1] == 0  # held once, it stands
