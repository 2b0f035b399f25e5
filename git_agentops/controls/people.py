"""The review queue for people: ``[review] people = N`` approvals by people before an integration publishes.

Once the model reviewers passed a candidate, the integration waits (``RUN_REVIEW_PENDING``, the run
``awaiting-input``) until N different people approved it or one refused it. A decision is a record in the run's
state, ``people/<id>.json``: who (the principal of a signed control, or the person's git identity at the
supervising machine), approve or refuse, the reason, and the candidate it judges -- held by its tree and base, so a
candidate rebuilt identically on the same tip keeps its approvals, and one built on a moved target needs new ones.
It also says which of the model reviewers' findings the person accepted (agreed with) and which not -- by default
all of them for a refusal, none for an approval -- from which ``git agentops-run reviewers`` computes each model
reviewer's precision. The approvals go into the receipt as reviews by ``person:<principal>`` whose report digest is
that of the decision record.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

import pygit2

from .. import eventkinds as kinds
from ..canonical import digest
from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.journal import Change, Event, Journal
from ..gitstore.repo import Store
from ..model.delivery import Digest, ReviewResult
from ..model.run import RunStatus
from ..runs import controls as runcontrols
from ..runs import state as runstate

PENDING: Final = "RUN_REVIEW_PENDING"
PERSON: Final = "person:"


def tree_of(store: Store, candidate: str) -> str:
    """The tree a candidate commit holds (what a person judges, with its base)."""
    obj: object = store.repo.get(candidate)
    if not isinstance(obj, pygit2.Commit):
        raise AgentOpsError("OBJECT_MISSING", f"the candidate {candidate[:12]} is not a commit here")
    return str(obj.tree_id)


def decisions(view: runstate.RunView) -> list[dict[str, Any]]:
    """Every person's decision recorded in the run, oldest first."""
    found = []
    for name in view.view.list("people"):
        doc = view.view.json(f"people/{name}", schema="people-decision")
        if doc is not None:
            found.append(dict(doc))
    return sorted(found, key=lambda d: (d["at"], d["decisionId"]))


def verdict(store: Store, run_id: str, base: str, candidate: str, needed: int) -> tuple[str, list[dict[str, Any]]]:
    """``("refused", [the refusal])``, ``("approved", approvals)`` (one per person, ``needed`` or more) or
    ``("waiting", approvals so far)`` for the candidate ``candidate`` built on ``base``."""
    tree = tree_of(store, candidate)
    mine = [d for d in decisions(runstate.read(store, run_id)) if d["tree"] == tree and d["base"] == base]
    refusals = [d for d in mine if d["decision"] == "refuse"]
    if refusals:
        return "refused", refusals[:1]
    approvals: dict[str, dict[str, Any]] = {}
    for d in mine:
        approvals.setdefault(d["principal"], d)
    return ("approved" if len(approvals) >= needed else "waiting"), list(approvals.values())


def as_reviews(approvals: Iterable[Mapping[str, Any]]) -> list[ReviewResult]:
    """The approvals as the receipt's reviews: ``person:<principal>``, ``approve``, the decision record's digest."""
    return [ReviewResult(reviewer_name(a["principal"]), "approve", Digest(digest(dict(a)))) for a in approvals]


def reviewer_name(principal: str) -> str:
    """``person:<principal>`` as a receipt names a reviewer: the e-mail of ``Name <email>``, other characters made
    ``-``."""
    inner = principal[principal.find("<") + 1 : principal.rfind(">")] if "<" in principal else principal
    return (PERSON + re.sub(r"[^A-Za-z0-9._@:/+-]", "-", inner.strip() or "unknown"))[:128]


def waiting(view: runstate.RunView) -> bool:
    """Whether the run's integration waits for people now."""
    run = view.run()
    return (run.status_reason or "").startswith(PENDING) and run.integration is not None


def decide(
    store: Store,
    run_id: str,
    *,
    decision_id: str,
    principal: str,
    decision: str,
    reason: str,
    candidate: str,
    accepted: Sequence[str] | None,
    rejected: Sequence[str] | None,
    clock: Clock,
    signed: runcontrols.Signed | None = None,
) -> dict[str, Any]:
    """Record a person's ``decision`` (approve or refuse) of the run's waiting candidate ``candidate`` (a full id or a
    prefix of 7 or more); the run is made active again so the integration goes on. ``CONTROL_STALE`` when the run
    waits for no people's review of that candidate (decided already, rebuilt, published)."""

    def fn(change: Change, view: runstate.RunView) -> dict[str, Any]:
        run = view.run()
        integration = run.integration
        if not waiting(view) or integration is None or integration.candidate is None or integration.base is None:
            raise AgentOpsError("CONTROL_STALE", f"{run_id} waits for no review by people now")
        if len(candidate) < 7 or not integration.candidate.startswith(candidate):
            raise AgentOpsError(
                "CONTROL_STALE",
                f"{run_id} waits for a review of {integration.candidate[:12]}, not of {candidate[:12]}",
            )
        if signed is not None:
            signed.put(change, view)
        findings = finding_ids(store, run_id)
        accept = set(findings if decision == "refuse" else ()) if accepted is None else set(accepted)
        reject = set(findings) - accept if rejected is None else set(rejected)
        record = {
            "decisionId": decision_id,
            "principal": principal[:256],
            "decision": decision,
            "reason": reason[:8000],
            "candidate": integration.candidate,
            "tree": tree_of(store, integration.candidate),
            "base": integration.base,
            "at": clock.now(),
            "findings": [{"id": f, "accepted": f in accept} for f in findings if f in accept or f in reject],
        }
        change.put_json(f"people/{decision_id}.json", record, schema="people-decision")
        runstate.put_run(change, replace(run, status=RunStatus.ACTIVE, status_reason=None))
        return record

    event = Event(
        kinds.RUN_REVIEW_DECIDED,
        f"{principal} {'approved' if decision == 'approve' else 'refused'} candidate {candidate[:12]}"
        + (f": {reason[:200]}" if reason else ""),
        {
            "runId": run_id,
            "decision": decision,
            "principal": principal[:256],
            "decisionId": decision_id,
            **(signed.data() if signed is not None else {}),
        },
    )
    return runstate.mutate(runstate.journal(store, run_id), fn, event)


def finding_ids(store: Store, run_id: str) -> list[str]:
    """``<reviewer>#<n>`` for every finding of the model reviewers of the run's integration (n from 1)."""
    out = []
    for reviewer, report in reports(store, run_id):
        out += [f"{reviewer}#{n}" for n in range(1, len(report.get("findings", ())) + 1)]
    return out


def reports(store: Store, run_id: str, journal: Journal | None = None) -> list[tuple[str, Mapping[str, Any]]]:
    """The model reviewers' reports of the run's last review: the artifacts its ``REVIEWS_RECORDED`` commit added
    (``journal``: another copy of the run's state, a remote's mirrored, read as it is)."""
    from ..report.collect import added_reports  # the report reads the same artifacts

    trusted = journal is None  # a mirrored copy is read unverified, for a person to look at
    journal = journal or runstate.journal(store, run_id)
    entry = next(
        (e for e in journal.log(limit=2000) if e.code == kinds.REVIEWS_RECORDED and not (trusted and e.foreign)),
        None,
    )
    if entry is None:
        return []
    found = [(str(r.get("reviewer", "?")), r) for r in added_reports(journal, entry.commit, entry.parent)]
    return sorted(found, key=lambda item: item[0])
