"""One board for every run: here and on a shared remote -- status, what each waits for, what it spent, its age.

``git agentops-run list --all`` reads every run of this repository; ``--remote NAME`` adds the remote's, fetched
into the sync mirror (``refs/agentops-sync/<remote>/runs/...``, :func:`git_agentops.gitstore.sync.mirror`) --
never into the runs' own refs: a board only reads, and acting on another machine's run goes through that run's
own commands. A remote run's state is read verified where this repository holds the team's key; otherwise, or when
its tip is not authentic, it is shown marked ``unverified`` and nothing reads more into it than the board.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.journal import Journal, JournalTampered
from ..gitstore.repo import Store
from ..model.run import RunStatus, WorkerStatus, used_seconds
from ..model.usage import total_usage
from ..transition import journal as transitions
from ..transition.record import Transition
from . import state as runstate


@dataclass(frozen=True, slots=True)
class Row:
    """A run on the board."""

    run_id: str
    where: str  # "here", or the remote it was read from
    status: str
    waits_for: str | None
    used_seconds: float
    budget_seconds: int
    tokens: int
    cost_usd: float | None
    created_at: float
    goal: str
    verified: bool = True

    def to_json(self) -> dict[str, Any]:
        """As ``run list --all --json`` prints it."""
        return {
            "runId": self.run_id,
            "where": self.where,
            "status": self.status,
            "waitsFor": self.waits_for,
            "usedSeconds": round(self.used_seconds, 1),
            "budgetSeconds": self.budget_seconds,
            "tokens": self.tokens,
            "costUsd": self.cost_usd,
            "createdAt": self.created_at,
            "goal": self.goal,
            "verified": self.verified,
        }


def waits_for(view: runstate.RunView, pending: Transition | None = None) -> str | None:
    """What the run waits for from a person, if anything: an answer, an approval (``pending``: its policy
    transition not yet approved), a resume, more budget."""
    run = view.run()
    open_questions = [q for q in view.questions() if q.get("answer") is None]
    if open_questions:
        return f"an answer to {len(open_questions)} question(s)"
    if (run.status_reason or "").startswith("RUN_REVIEW_PENDING"):
        return "a review by people ('git agentops-run review')"
    if pending is not None and not pending.approved:
        return f"an approval of {pending.transition_id} ('git agentops-run approve')"
    if run.status is RunStatus.BLOCKED:
        return f"a person: blocked ({(run.status_reason or 'see run status')[:80]})"
    if run.status is RunStatus.BUDGET_LIMITED:
        return "more budget (resume --add-budget)"
    if run.status is RunStatus.PAUSED:
        return "a resume"
    blocked = [w for w in view.workers() if w.status is WorkerStatus.BLOCKED]
    if blocked:
        return f"{len(blocked)} blocked worker(s)"
    return None


def row(
    view: runstate.RunView, where: str, clock: Clock, *, verified: bool = True, pending: Transition | None = None
) -> Row:
    """The board's row of one run's state (``pending``: its unfinished policy transition, read here only)."""
    run = view.run()
    tokens, cost = total_usage(run.accounts(view.workers()))
    return Row(
        run.run_id,
        where,
        str(run.status),
        None if run.status is RunStatus.COMPLETE else waits_for(view, pending),
        used_seconds(run.intervals, clock.now()),
        run.budget_seconds,
        tokens,
        cost,
        run.created_at,
        run.goal,
        verified,
    )


def here(store: Store, clock: Clock) -> list[Row]:
    """Every run of this repository; one whose state cannot be read is a row saying why."""
    rows = []
    for run_id in runstate.list_runs(store):
        try:
            rows.append(row(runstate.read(store, run_id), "here", clock, pending=transitions.pending(store, run_id)))
        except AgentOpsError as exc:
            rows.append(Row(run_id, "here", "unreadable", exc.code, 0.0, 0, 0, None, 0.0, exc.message, False))
    return rows


def remote(store: Store, name: str, clock: Clock, *, known: set[str], fetch: bool = True) -> list[Row]:
    """The remote's runs that are not among ``known`` (this repository's own), read from the sync mirror -- fetched
    into it first unless ``fetch`` is False (``watch --all`` fetches in a thread of its own)."""
    from ..gitstore.refs import list_refs
    from ..gitstore.sync import mirror, mirror_prefix

    if fetch:
        theirs = mirror(store, name, ("refs/agentops/runs/",))
    else:
        prefix = mirror_prefix(name)
        theirs = {"refs/" + k[len(prefix) :]: v for k, v in list_refs(store, prefix + "agentops/runs/").items()}
    rows = []
    for ref in sorted(theirs):
        parts = ref.split("/")
        if len(parts) != 5 or parts[4] != "state" or parts[3] in known:
            continue
        journal = Journal(store, mirror_prefix(name) + ref[len("refs/") :])
        try:
            view, verified = runstate.RunView(journal.read()), True
        except JournalTampered:
            view, verified = runstate.RunView(journal.read(verify=False)), False
        try:
            rows.append(row(view, name, clock, verified=verified))
        except AgentOpsError as exc:
            rows.append(Row(parts[3], name, "unreadable", exc.code, 0.0, 0, 0, None, 0.0, exc.message, False))
    return rows


def every(store: Store, clock: Clock, remote_name: str | None = None, *, fetch: bool = True) -> list[Row]:
    """The whole board, oldest run first: this repository's runs and, with ``remote_name``, the remote's others
    (fetched first unless ``fetch`` is False)."""
    rows = here(store, clock)
    if remote_name is not None:
        rows += remote(store, remote_name, clock, known={r.run_id for r in rows}, fetch=fetch)
    return sorted(rows, key=lambda r: r.created_at)
