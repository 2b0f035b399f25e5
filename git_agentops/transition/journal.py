"""Where a run's policy transitions are kept, and the binding of a new policy by compare-and-swap.

Each transition is a journal of its own, ``refs/agentops/runs/<run>/journal/<transition>``, one commit per stage
(its tree: ``transition.json``, ``schemas/transition.schema.json``, and ``proposal.toml``, the proposed policy's
bytes). Stages move strictly forward (:meth:`~git_agentops.transition.record.Transition.advanced`); marking the
stage a journal is already at again is a no-op, so a supervisor that crashed between doing a stage's work and
marking it simply marks it. At most one transition of a run is pending (not ``complete`` or ``refused``); the
supervisor finds it with :func:`pending`.

The policy binding (``refs/agentops/runs/<run>/policy``) moves from the old policy to the new one in :func:`bind`,
by CAS on the binding: only when it still binds the transition's old config hash (or already binds its new one,
with this transition recorded last: a crash after the bind). ``base-config.json`` keeps the policy the run was
trusted under -- what a restarted supervisor checks the trust store against -- and ``binding.json`` lists every
transition bound, with the deliveries frozen under the policy it replaced. The trust store is never touched: the
new policy is bound to this run only.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

import pygit2

from .. import eventkinds as kinds
from ..canonical import JsonObject, canonical_bytes, sha256_hex
from ..errors import AgentOpsError
from ..gitstore.journal import Change, Event, Journal, JournalTampered, Snapshot
from ..gitstore.refs import list_refs
from ..gitstore.repo import Store
from ..model.policy import Policy
from ..model.run import RunStatus, WorkerStatus
from ..runs import state as runstate
from ..schema import documents
from .record import TRANSITION_PREFIX, Stage, Transition

RECORD: Final = "transition.json"
PROPOSAL: Final = "proposal.toml"
BOUND_FILE: Final = "policy.toml"  # in the binding: the bound policy file's bytes, as workers' checkouts get them
BASE: Final = "base-config.json"


def journal_prefix(run_id: str) -> str:
    """Where a run's transition journals live: one ref per transition under this prefix."""
    return f"{runstate.RUNS_PREFIX}{runstate.check_run_id(run_id)}/journal/"


def journal_ref(run_id: str, transition_id: str) -> str:
    """The journal ref of one transition of a run; ``RUN_TRANSITION_UNKNOWN`` for an id that is not one."""
    if not transition_id.startswith(TRANSITION_PREFIX) or not transition_id[len(TRANSITION_PREFIX) :].isalnum():
        raise AgentOpsError("RUN_TRANSITION_UNKNOWN", f"{transition_id!r} is not a policy transition id")
    return journal_prefix(run_id) + transition_id


def _journal(store: Store, run_id: str, transition_id: str) -> Journal:
    return Journal(store, journal_ref(run_id, transition_id))


def _read(snapshot: Snapshot) -> Transition | None:
    doc = snapshot.json(RECORD, schema="transition")
    return Transition.from_json(doc) if doc is not None else None


def read_unverified(store: Store, ref: str) -> Transition | None:
    """The transition a journal ref anywhere holds -- a remote's, mirrored -- read without its MAC checked: for
    showing a person what another machine's run waits for, never for acting on."""
    return _read(Journal(store, ref).read(verify=False))


def read(store: Store, run_id: str, transition_id: str) -> Transition:
    """One transition (``RUN_TRANSITION_UNKNOWN``; ``RUN_STATE_TAMPERED`` for a journal the toolkit did not write)."""
    journal = _journal(store, run_id, transition_id)
    try:
        found = _read(journal.read())
    except JournalTampered as exc:
        raise runstate.tampered(exc, run_id) from exc
    if found is None:
        raise AgentOpsError("RUN_TRANSITION_UNKNOWN", f"run {run_id} has no policy transition {transition_id}")
    return found


def proposal(store: Store, run_id: str, transition_id: str) -> bytes:
    """The proposed policy's bytes as the transition recorded them; ``RUN_POLICY_PROPOSAL_CHANGED`` when they no
    longer hash to the digest the record names."""
    journal = _journal(store, run_id, transition_id)
    try:
        snapshot = journal.read()
    except JournalTampered as exc:
        raise runstate.tampered(exc, run_id) from exc
    record, data = _read(snapshot), snapshot.get(PROPOSAL)
    if record is None or data is None or sha256_hex(data) != record.proposal_digest:
        raise AgentOpsError(
            "RUN_POLICY_PROPOSAL_CHANGED", f"the recorded proposal of {transition_id} is missing or was changed"
        )
    return data


def all_of(store: Store, run_id: str) -> list[Transition]:
    """Every transition of the run, oldest first."""
    found = [read(store, run_id, name.rsplit("/", 1)[1]) for name in list_refs(store, journal_prefix(run_id))]
    return sorted(found, key=lambda t: (t.requested_at, t.transition_id))


def pending(store: Store, run_id: str) -> Transition | None:
    """The run's transition that is neither complete nor refused, if any."""
    return next((t for t in all_of(store, run_id) if not t.ended), None)


def resolve(store: Store, run_id: str, given: str) -> str:
    """A transition id from what a person typed: the id, or a unique prefix of it (``RUN_TRANSITION_UNKNOWN``)."""
    names = [name.rsplit("/", 1)[1] for name in list_refs(store, journal_prefix(run_id))]
    if given in names:
        return given
    matches = [n for n in names if n.startswith(given) or n[len(TRANSITION_PREFIX) :].startswith(given)]
    if len(matches) == 1 and len(given) >= 4:
        return matches[0]
    shown = ", ".join(sorted(names)) or "none"
    raise AgentOpsError("RUN_TRANSITION_UNKNOWN", f"run {run_id} has no single transition {given!r} (it has: {shown})")


def begin(store: Store, transition: Transition, data: bytes) -> Transition:
    """Record a new transition at ``prepared`` with its proposal (``RUN_POLICY_TRANSITION_PENDING`` if it exists)."""

    def create(change: Change) -> Transition:
        if change.exists(RECORD):
            raise AgentOpsError(
                "RUN_POLICY_TRANSITION_PENDING", f"the transition {transition.transition_id} was proposed before"
            )
        change.put(PROPOSAL, data)
        change.put_json(RECORD, transition.to_json(), schema="transition")
        return transition

    event = Event(
        kinds.POLICY_PREPARED,
        f"policy transition {transition.transition_id}: {transition.old_hash[:12]} -> {transition.new_hash[:12]}",
        {"transitionId": transition.transition_id, "from": transition.old_hash, "to": transition.new_hash},
    )
    return _journal(store, transition.run_id, transition.transition_id).mutate(create, event).value


def update(
    store: Store,
    run_id: str,
    transition_id: str,
    stage: Stage | None,
    at: float,
    summary: str,
    *,
    expect: Stage | None = None,
    **changes: Any,
) -> Transition:
    """Move the transition to ``stage`` (None: stay, changing fields only) by CAS; at that stage already, nothing
    is written and the record is returned as it is. With ``expect``, ``RUN_POLICY_TRANSITION_STALE`` unless the
    transition is at that stage when the CAS lands (a person's refusal never races the supervisor's fence)."""

    def mark(change: Change) -> Transition:
        current = _read(change)
        if current is None:
            raise AgentOpsError("RUN_TRANSITION_UNKNOWN", f"run {run_id} has no policy transition {transition_id}")
        if stage is not None and current.stage is stage:
            return current
        if expect is not None and current.stage is not expect:
            raise AgentOpsError(
                "RUN_POLICY_TRANSITION_STALE", f"{transition_id} is {current.stage} already, not {expect}"
            )
        if current.ended:
            raise AgentOpsError("RUN_POLICY_TRANSITION_STALE", f"{transition_id} is {current.stage} already")
        try:
            new = current.advanced(stage, at, **changes) if stage is not None else replace(current, **changes)
        except ValueError as exc:
            raise AgentOpsError("RUN_POLICY_TRANSITION_STALE", str(exc)) from exc
        change.put_json(RECORD, new.to_json(), schema="transition")
        return new

    code = kinds.POLICY_STAGE[stage]
    event = Event(code, f"{transition_id}: {summary}", {"transitionId": transition_id})
    try:
        return _journal(store, run_id, transition_id).mutate(mark, event).value
    except JournalTampered as exc:
        raise runstate.tampered(exc, run_id) from exc


# -- the binding ---------------------------------------------------------------------------------------------------


def binding(store: Store, run_id: str) -> dict[str, Any]:
    """``binding.json`` of the run's policy binding (``RUN_NOT_FOUND`` without one)."""
    try:
        snapshot = Journal(store, runstate.policy_ref(run_id)).read()
    except JournalTampered as exc:
        raise runstate.tampered(exc, run_id) from exc
    doc = snapshot.json("binding.json", schema="binding")
    if doc is None:
        raise AgentOpsError("RUN_NOT_FOUND", f"{run_id} has no policy binding")
    return dict(doc)


def base_policy(store: Store, run_id: str) -> Policy:
    """The policy the run was started under -- the one the trust store must still trust -- whatever transitions
    bound since."""
    try:
        snapshot = Journal(store, runstate.policy_ref(run_id)).read()
    except JournalTampered as exc:
        raise runstate.tampered(exc, run_id) from exc
    data = snapshot.get(BASE) or snapshot.get("config.json")
    if data is None:
        raise AgentOpsError("RUN_NOT_FOUND", f"{run_id} has no policy binding")
    return Policy.from_effective(documents.parse_json(data, what="bound policy"))


def bound_file(store: Store, run_id: str) -> bytes | None:
    """The bytes of the policy file a transition bound (what workers' checkouts are synchronised to), if any."""
    snapshot = Journal(store, runstate.policy_ref(run_id)).read()
    return snapshot.get(BOUND_FILE)


def blob_id(data: bytes) -> str:
    """The git blob id ``data`` has (without writing it)."""
    return str(pygit2.hash(data))


def blob_of(data: bytes | None) -> str | None:
    """:func:`blob_id` of the bound policy file, or None when no transition bound one."""
    return blob_id(data) if data is not None else None


def bind(store: Store, transition: Transition, policy: Policy, data: bytes, at: float) -> bool:
    """Bind ``policy`` (the transition's new one, whose file is ``data``) in place of its old one, by CAS.

    True when this call bound it; False when it was bound already (by this transition: a crash after the bind).
    ``RUN_POLICY_TRANSITION_STALE`` when the binding holds anything else.
    """
    if policy.config_hash != transition.new_hash:
        raise AgentOpsError("RUN_POLICY_PROPOSAL_CHANGED", f"{transition.transition_id}: the proposal's hash changed")

    def rebind(change: Change) -> bool:
        current = change.json("binding.json", schema="binding")
        if current is None:
            raise AgentOpsError("RUN_NOT_FOUND", f"{transition.run_id} has no policy binding")
        done = [t["transitionId"] for t in current.get("transitions", ())]
        if current["configHash"] == transition.new_hash and done and done[-1] == transition.transition_id:
            return False
        if current["configHash"] != transition.old_hash:
            raise AgentOpsError(
                "RUN_POLICY_TRANSITION_STALE",
                f"{transition.transition_id} replaces {transition.old_hash[:12]}, but the run is bound to "
                f"{current['configHash'][:12]}",
            )
        if not change.exists(BASE):
            change.put(BASE, change.get("config.json") or b"")
        change.put("config.json", canonical_bytes(dict(policy.doc)) + b"\n")
        change.put(BOUND_FILE, data)
        approved_by = transition.approved_by.to_json() if transition.approved_by is not None else {}
        record = {
            "transitionId": transition.transition_id,
            "from": transition.old_hash,
            "to": transition.new_hash,
            "approvedBy": approved_by,
            "approvals": [a.to_json() for a in transition.approvals],
            "changes": [{k: v for k, v in c.to_json().items() if k != "definition"} for c in transition.changes],
            "delivered": [d.to_json() for d in transition.delivered],
            "boundAt": at,
        }
        doc = {
            **current,
            "configHash": transition.new_hash,
            "baseConfigHash": current.get("baseConfigHash", transition.old_hash),
            "proposalBlob": blob_id(data),
            "transitions": [*current.get("transitions", ()), record],
        }
        change.put_json("binding.json", doc, schema="binding")
        authorizations = [
            {
                "authorizationId": f"{transition.transition_id}:{a.capability_id}",
                "capabilityId": a.capability_id,
                "reason": a.reason,
                "approvedBy": approved_by,
                "definitionDigest": _definition_digest(transition, a.capability_id),
                "policyConfigHash": transition.new_hash,
                "expires": f"with run {transition.run_id}",
            }
            for a in transition.approvals
        ]
        change.put("approvals.json", canonical_bytes(authorizations) + b"\n")
        return True

    event = Event(
        kinds.POLICY_REBOUND,
        f"policy {transition.new_hash[:12]} bound by {transition.transition_id}",
        {"transitionId": transition.transition_id, "configHash": transition.new_hash},
    )
    try:
        return Journal(store, runstate.policy_ref(transition.run_id)).mutate(rebind, event).value
    except JournalTampered as exc:
        raise runstate.tampered(exc, transition.run_id) from exc


def _definition_digest(transition: Transition, capability_id: str) -> str | None:
    """The digest of the definition an approval vouches for (None: the capability is not among the changes)."""
    change = transition.change_of(capability_id)
    return change.definition_digest if change is not None else None


# -- telling the run -------------------------------------------------------------------------------------------------

AWAITING: Final = "policy transition "
"""How the run's status reason starts while a transition awaits a person."""


def awaiting_reason(transition_id: str) -> str:
    """The run's status reason while ``transition_id`` awaits a person's approval."""
    return f"{AWAITING}{transition_id} awaits approval"


def tell_refused(journal: Journal, transition: Transition, code: str, message: str) -> None:
    """The run goes on (active again if it awaited this transition); the requester is told why, and an idle
    coordinator started again to hear it."""
    requester = transition.requested_by.worker_id
    text = f"Your policy change {transition.transition_id} was refused ({code}): {message}"

    def tell(change: Change, view: runstate.RunView) -> None:
        run = view.run()
        if run.status is RunStatus.AWAITING_INPUT and run.status_reason == awaiting_reason(transition.transition_id):
            runstate.put_run(change, replace(run, status=RunStatus.ACTIVE, status_reason=None))
        try:
            worker = view.worker(requester)
        except AgentOpsError:
            return
        status = WorkerStatus.STOPPED if worker.status is WorkerStatus.IDLE else worker.status
        runstate.put_worker(change, replace(worker, diagnostic=text[:8000], status=status))

    runstate.mutate(
        journal,
        tell,
        Event(kinds.POLICY_TRANSITION_REFUSED, f"{transition.transition_id} refused ({code})", {"code": code}),
    )


def brief(store: Store, run_id: str) -> list[JsonObject]:
    """The run's transitions as a worker's instructions show them."""
    return [
        {
            "transitionId": t.transition_id,
            "stage": str(t.stage),
            "oldConfigHash": t.old_hash,
            "newConfigHash": t.new_hash,
            "configFile": t.config_file,
            "requestId": t.requested_by.request_id,
            "refused": t.refused.to_json() if t.refused is not None else None,
        }
        for t in all_of(store, run_id)
    ]
