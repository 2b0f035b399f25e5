"""Chain of custody: a delivery counts only when its state record, its frozen ref, its note and its evidence agree.

The run state is authenticated (its journal commits are MAC'd), but the refs and notes around it are plain git
objects any worker can write. A worker once created its neighbour's delivery ref before the neighbour delivered
(the honest handoff was then refused, twice: a denial of service), forged a delivery ref and note and had the
supervisor adopt them after a ``kill -9``, and moved a delivery ref (ignored, but never reported). So:

* **Delivery notes are MAC'd** (:func:`seal_note`); only an authentic note is ever believed (:func:`note_for`).
* **A foreign ref is quarantined, never obeyed and never in the way** (:func:`quarantine`): its value is moved to
  ``refs/agentops/runs/<run>/quarantine/<ref name>/<commit>`` (kept, for whoever investigates) in the same atomic
  ref transaction that puts the supervisor's value in place, and the run log gets ``RUN_REF_QUARANTINED``.
* **At integration** (:func:`check_delivered`) each delivered task's state record must name the same commit and
  digest as an authentic delivery note, and every evidence record the note names must exist on the commit,
  authenticate, have passed, and come from the supervisor's clean checkout (``RUN_DELIVERY_MISMATCH``); a frozen
  ref that does not point at the recorded commit is quarantined and restored.
* **A target that moved to commits nobody reviewed** is reported (:func:`unreviewed`): each first-parent commit
  between the run's base and the tip the candidate is built on that carries no receipt. The integration still
  builds on it; the receipt lists them, and what CI makes of that is the receipt check's business.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pygit2

from .. import eventkinds as kinds
from ..canonical import canonical_bytes
from ..errors import AgentOpsError
from ..gitstore.journal import Event
from ..gitstore.keys import Keyring, keyring
from ..gitstore.notes import DELIVERIES_REF, RECEIPTS_REF, Notes
from ..gitstore.refnames import RefConflict
from ..gitstore.refs import RefUpdate, read_ref, update_refs
from ..gitstore.repo import Store
from ..model.delivery import CommitId, Digest
from ..model.integration import BUILT, IntegrationStatus
from ..model.task import Task
from ..runs import state as runstate
from ..schema import documents
from ..verify.evidence import SUPERVISOR, EvidenceStore

NOTE_PURPOSE: Final = "delivery"
UNREVIEWED_LIMIT: Final = 100


def seal_note(record: dict[str, object], keys: Keyring) -> dict[str, object]:
    """``record`` (a delivery note) with its MAC."""
    record["mac"] = keys.mac(NOTE_PURPOSE, canonical_bytes({k: v for k, v in record.items() if k != "mac"}))
    return record


def authentic_note(record: Mapping[str, object], keys: Keyring) -> bool:
    """Whether this repository's supervisor wrote the delivery note ``record`` as it is."""
    data = canonical_bytes({k: v for k, v in record.items() if k != "mac"})
    return keys.check(NOTE_PURPOSE, data, record.get("mac"))


def note_for(store: Store, commit: str, run_id: str, task_id: str) -> dict[str, Any] | None:
    """The newest *authentic* delivery note on ``commit`` for this run and task (forged lines are skipped)."""
    keys = keyring(store.private_dir())
    for line in reversed((Notes(store, DELIVERIES_REF).read(commit) or b"").splitlines()):
        try:
            record = documents.parse_json(line)
        except AgentOpsError:
            continue
        if (
            isinstance(record, dict)
            and record.get("runId") == run_id
            and record.get("taskId") == task_id
            and record.get("sourceCommit") == commit
            and authentic_note(record, keys)
        ):
            return record
    return None


def quarantine_ref(ref: str, commit: str) -> str:
    """Where a foreign value of ``ref`` is kept: under the run's ``quarantine/``, named by the ref and the commit."""
    head, _, rest = ref.partition("/runs/")
    run_id, _, name = rest.partition("/")
    return f"{head}/runs/{run_id}/quarantine/{name}/{commit}"


def quarantine(store: Store, run_id: str, ref: str, foreign: str, restore: str | None, why: str) -> str | None:
    """Move the foreign value of ``ref`` aside and put ``restore`` (or nothing) in its place, atomically, then log
    ``RUN_REF_QUARANTINED``. Returns the quarantine ref, or None when ``ref`` changed meanwhile (nothing done)."""
    kept = quarantine_ref(ref, foreign)
    updates = [RefUpdate(ref, restore, foreign), RefUpdate(kept, foreign, read_ref(store, kept))]
    try:
        update_refs(store, updates, f"agentops: quarantine a foreign {ref}", quarantine=True)
    except RefConflict:
        return None
    runstate.mutate(
        runstate.journal(store, run_id),
        lambda change, view: None,
        Event(
            kinds.RUN_REF_QUARANTINED,
            f"{ref} held {foreign[:12]}, which the supervisor did not write; kept as {kept}",
            {"ref": ref, "foreignCommit": foreign, "quarantinedAs": kept, "restored": restore, "why": why},
        ),
    )
    return kept


@dataclass(frozen=True, slots=True)
class Mismatch:
    """Why a delivered task's custody chain does not hold."""

    task_id: str
    why: str


def check_evidence(
    store: Store, commit: CommitId, digests: Sequence[Digest], policy_hashes: Collection[str]
) -> str | None:
    """None when every evidence record named by ``digests`` is on ``commit``, authentic, passed (if required) and
    the supervisor's, under one of ``policy_hashes`` (the run's policy; for a delivery frozen before a policy
    transition, the policy it was proven under too); else why not."""
    records = {r.digest: r for r in EvidenceStore(store, store.private_dir()).authentic_for_commit(commit)}
    missing = [d for d in digests if d not in records]
    if missing:
        return f"{len(missing)} evidence record(s) it names are not on {commit[:12]} or do not authenticate"
    for name in digests:
        record = records[name]
        if record.provenance != SUPERVISOR:
            return f"evidence {record.command_id} was not produced by the supervisor in a clean checkout"
        if record.required and not record.passed:
            return f"evidence {record.command_id} did not pass"
        if record.policy_config_hash not in policy_hashes:
            return f"evidence {record.command_id} was made under another policy"
    if not digests:
        return "the delivery names no evidence"
    return None


def check_delivered(store: Store, run_id: str, task: Task, policy_hashes: Collection[str]) -> Mismatch | None:
    """The custody chain of one delivered task (see the module docstring); a moved ref is quarantined here."""
    delivery = task.delivery
    commit = delivery.commit if delivery is not None else ""
    ref = runstate.delivery_ref(run_id, task.id)
    current = read_ref(store, ref)
    if current != commit:
        if current is not None:
            quarantine(store, run_id, ref, current, commit, "the frozen ref was moved away from the recorded delivery")
        else:
            update_refs(store, [RefUpdate(ref, commit, None)], f"agentops: restore the frozen delivery of {task.id}")
    note = note_for(store, commit, run_id, task.id)
    if note is None:
        return Mismatch(task.id, f"no authentic delivery note on {commit[:12]}")
    if (
        delivery is None
        or note.get("deliveryDigest") != delivery.digest
        or list(note.get("evidence") or []) != list(delivery.evidence)
    ):
        return Mismatch(task.id, "the delivery note and the run state disagree")
    why = check_evidence(store, delivery.commit, list(note["evidence"]), policy_hashes)
    return Mismatch(task.id, why) if why is not None else None


def unreviewed(store: Store, since: str, tip: str) -> tuple[list[str], bool]:
    """First-parent commits from ``tip`` down to ``since`` (exclusive) that carry no receipt, newest first (at most
    :data:`UNREVIEWED_LIMIT`); and whether ``since`` is not an ancestor of ``tip`` at all (history rewritten)."""
    if tip == since:
        return [], False
    repo = store.repo
    try:
        rewritten = not repo.descendant_of(tip, since)
    except (pygit2.GitError, KeyError, ValueError):
        rewritten = True
    from ..receipts.verify import claimed_steps  # lazily: the receipts package is integration-only

    receipts = Notes(store, RECEIPTS_REF)
    in_flight = _in_flight(store)
    covered: set[str] = set()
    found: list[str] = []
    walker = repo.walk(tip, pygit2.enums.SortMode.TOPOLOGICAL)
    walker.simplify_first_parent()
    if not rewritten:
        walker.hide(since)
    for count, commit in enumerate(walker):
        if count >= UNREVIEWED_LIMIT * 4 or len(found) >= UNREVIEWED_LIMIT:
            break
        oid = str(commit.id)
        if oid in covered:
            continue
        note = receipts.read(oid)
        if note is not None:  # a receipt: it and the merge steps its run recorded are a reviewed integration
            steps, run_id = claimed_steps(note)
            if run_id is not None and _recorded(store, run_id, oid, steps):
                covered.update(steps)
        elif oid in in_flight:  # another run's candidate, published a moment before its receipt is added
            covered.update(in_flight[oid])
        else:
            found.append(oid)
    return found, rewritten


def _recorded(store: Store, run_id: str, candidate: str, steps: tuple[str, ...]) -> bool:
    """Whether ``run_id``'s own (authentic) record says it integrated ``candidate`` through exactly ``steps``: a
    receipt note anyone could have written names the merge steps it covers, and only the run's record makes them
    count here (a run this repository does not hold leaves its inner steps reported)."""
    try:
        integration = runstate.read(store, run_id).run().integration
    except AgentOpsError:
        return False
    return (
        integration is not None
        and integration.candidate == candidate
        and tuple(step.commit for step in integration.steps or ()) == steps
    )


def _in_flight(store: Store) -> dict[str, tuple[str, ...]]:
    """Each run's built or published, not yet receipted candidate -> its merge steps, from the run's own
    (authentic) record: a commit another supervisor has just moved the target to, and is about to receipt, is not
    "unreviewed" (the record says published only after the compare-and-swap, so a built one counts too)."""
    out: dict[str, tuple[str, ...]] = {}
    for run_id in runstate.list_runs(store):
        try:
            integration = runstate.read(store, run_id).run().integration
        except AgentOpsError:
            continue
        if (
            integration is not None
            and (integration.status in BUILT or integration.status is IntegrationStatus.PUBLISHED)
            and integration.candidate is not None
        ):
            out[integration.candidate] = tuple(step.commit for step in integration.steps or ())
    return out
