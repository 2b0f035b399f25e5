"""``git agentops-run review [RUN]`` and ``git agentops-run reviewers``: the review queue for people.

``review`` lists the integrations waiting for people (``[review] people``), most at-risk first -- the size of the
change, how near it comes to protected paths, tasks that failed before they were delivered, the model reviewers'
findings -- each with its diff stat, its evidence and the findings (``<reviewer>#<n>``). On a terminal, without a
decision, it walks them one at a time and asks: approve, refuse (with a reason), skip or quit. ``review RUN
--approve|--refuse [--reason R] [--accept IDS]`` records the decision: here when this repository supervises the
run, as a signed control through the remote otherwise (``--remote``, ``--wait``). ``--accept`` names the findings
the person agrees with (default: all of them for a refusal, none for an approval); the rest count as rejected.

``reviewers`` reports, from every decision recorded in this repository's runs, each model reviewer's precision:
the findings people accepted over the findings they judged.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any

from ..errors import AgentOpsError
from .common import Context


def configure(add: Any) -> Any:
    """The ``review`` and ``reviewers`` subcommands; returns ``review``'s parser (for the remote options)."""
    review = add("review", "the integrations waiting for people, most at-risk first; approve or refuse one")
    review.add_argument("run_id", metavar="RUN", nargs="?", help="decide this run's candidate (default: list them)")
    decision = review.add_mutually_exclusive_group()
    decision.add_argument("--approve", action="store_true", help="approve the run's waiting candidate")
    decision.add_argument("--refuse", action="store_true", help="refuse it: the integration fails, the run goes on")
    review.add_argument("--reason", default="", help="why (kept with the decision; told to the coordinator)")
    review.add_argument(
        "--accept",
        metavar="IDS",
        help="the model reviewers' findings you agree with, comma-separated (reviewer#n); default: all for a "
        "refusal, none for an approval",
    )
    add("reviewers", "each model reviewer's precision: the findings people accepted / the findings they judged")
    return review


@dataclass
class Pending:
    """An integration waiting for people, as the queue shows it."""

    run_id: str
    where: str
    candidate: str
    base: str
    risk: float
    why: list[str] = field(default_factory=list)
    stat: str = ""
    evidence: list[str] = field(default_factory=list)
    findings: list[tuple[str, str]] = field(default_factory=list)  # (id, text)

    def to_json(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "where": self.where,
            "candidate": self.candidate,
            "base": self.base,
            "risk": round(self.risk, 1),
            "why": self.why,
            "diffStat": self.stat,
            "evidence": self.evidence,
            "findings": [{"id": i, "text": t} for i, t in self.findings],
        }

    def lines(self) -> list[str]:
        out = [
            f"{self.run_id} ({self.where}): candidate {self.candidate[:12]} on {self.base[:12]}, risk {self.risk:.1f}"
        ]
        out += [f"  risk: {w}" for w in self.why]
        out += [f"  diff: {self.stat}"] if self.stat else []
        out += [f"  evidence: {e}" for e in self.evidence]
        out += [f"  finding {i}: {t}" for i, t in self.findings] or ["  findings: none"]
        return out


def _pending(ctx: Context, view: Any, where: str, journal: Any = None) -> Pending | None:
    import pygit2

    from ..controls import people
    from ..policy.load import load_policy

    run = view.run()
    integration = run.integration
    if not people.waiting(view) or integration is None or integration.candidate is None or integration.base is None:
        return None
    store = ctx.store()
    item = Pending(run.run_id, where, integration.candidate, integration.base, 0.0)
    try:
        diff = store.repo.diff(integration.base, integration.candidate)
        stats = diff.stats
        paths = [d.delta.new_file.path for d in diff]
        item.stat = f"{stats.files_changed} file(s), +{stats.insertions} -{stats.deletions}"
        size = (stats.insertions + stats.deletions) / 50
        item.risk += size
        item.why.append(f"{stats.insertions + stats.deletions} line(s) changed (+{size:.1f})")
        try:
            protected = load_policy(store.common_dir.parent).protected_paths
        except AgentOpsError:
            protected = (".agentops/**", ".github/**")
        tops = {p.split("/", 1)[0] for p in protected if "/" in p and not p.startswith(("*", "!"))}
        near = [p for p in paths if p.split("/", 1)[0] in tops]
        if near:
            item.risk += 5 * len(near)
            item.why.append(f"{len(near)} path(s) beside protected ones: {', '.join(near[:3])} (+{5 * len(near)})")
    except (KeyError, ValueError, pygit2.GitError):  # objects this clone lacks: no diff, still listed
        item.why.append("the diff is not available here (fetch the target)")
    repaired = [t for t in view.tasks().values() if t.delivery is not None and t.delivery.generation > 1]
    if repaired:
        item.risk += 3 * len(repaired)
        item.why.append(f"{len(repaired)} task(s) delivered after a failed generation (+{3 * len(repaired)})")
    for summary in integration.verification or ():
        item.evidence.append(
            f"{summary.get('commandId', '?')}: {'passed' if summary.get('passed') else 'FAILED'}"
            f" (exit {summary.get('exitCode', '?')})"
        )
    for reviewer, report in people.reports(store, run.run_id, journal):
        for n, finding in enumerate(report.get("findings", ()), start=1):
            blocking = bool(finding.get("blocking"))
            item.risk += 10 if blocking else 2
            text = f"{finding.get('severity', '?')}{' (blocking)' if blocking else ''}: {finding.get('message', '')}"
            item.findings.append((f"{reviewer}#{n}", text[:300]))
    if item.findings:
        item.why.append(f"{len(item.findings)} finding(s) of the model reviewers")
    return item


def queue(ctx: Context, remote: str | None) -> list[Pending]:
    """Every integration waiting for people here (and on ``remote``), most at-risk first."""
    from ..gitstore.journal import Journal
    from ..gitstore.sync import mirror, mirror_prefix
    from ..runs import state as runstate

    store = ctx.store()
    found: list[Pending] = []
    for run_id in runstate.list_runs(store):
        try:
            item = _pending(ctx, runstate.read(store, run_id), "here")
        except AgentOpsError:
            continue
        if item is not None:
            found.append(item)
    if remote is not None:
        known = {p.run_id for p in found} | set(runstate.list_runs(store))
        for ref in sorted(mirror(store, remote, ("refs/agentops/runs/",))):
            parts = ref.split("/")
            if len(parts) != 5 or parts[4] != "state" or parts[3] in known:
                continue
            journal = Journal(store, mirror_prefix(remote) + ref[len("refs/") :])
            try:
                item = _pending(ctx, runstate.RunView(journal.read(verify=False)), remote, journal)
            except AgentOpsError:
                continue
            if item is not None:
                found.append(item)
    return sorted(found, key=lambda p: (-p.risk, p.run_id))


def review(args: argparse.Namespace, ctx: Context, remote: str | None) -> int:
    """``run review``: the queue, a walk through it, or one decision (module docstring)."""
    from .transition import refuse_agent

    if args.run_id is None:
        if args.approve or args.refuse:
            raise AgentOpsError("USAGE", "--approve and --refuse decide one run's candidate: name the run")
        items = queue(ctx, args.remote)
        if not ctx.json and sys.stdin.isatty() and items:
            return _walk(args, ctx, items)
        lines = [line for item in items for line in [*item.lines(), ""]] or ["no integration waits for people"]
        ctx.emit({"pending": [i.to_json() for i in items]}, lines)
        return 0
    if not (args.approve or args.refuse):
        raise AgentOpsError("USAGE", "say --approve or --refuse (without RUN: the queue)")
    refuse_agent(ctx)  # an agent's vote on its own integration is no person's review
    return decide(args, ctx, remote, "approve" if args.approve else "refuse")


def decide(args: argparse.Namespace, ctx: Context, remote: str | None, decision: str) -> int:
    """Record (here) or send (``remote``) one person's decision on ``args.run_id``'s waiting candidate."""
    from ..controls import people
    from ..controls.record import new_id
    from ..runs import state as runstate
    from .transition import approver

    accept = [a for a in (args.accept or "").split(",") if a] if args.accept is not None else None
    if remote is not None:
        from .remotecontrol import send

        return send(args, ctx, remote, decision=decision, accept=accept)
    store = ctx.store()
    view = runstate.read(store, args.run_id)
    integration = view.run().integration
    if not people.waiting(view) or integration is None or integration.candidate is None:
        raise AgentOpsError("CONTROL_STALE", f"{args.run_id} waits for no review by people now")
    who = approver(ctx)
    record = people.decide(
        store,
        args.run_id,
        decision_id=new_id(ctx.clock.now()),
        principal=who,
        decision=decision,
        reason=args.reason,
        candidate=integration.candidate,
        accepted=accept,
        rejected=None,
        clock=ctx.clock,
    )
    doc: dict[str, Any] = {"runId": args.run_id, "decision": record}
    lines = [
        f"{who} {'approved' if decision == 'approve' else 'refused'} candidate {integration.candidate[:12]} of "
        f"{args.run_id}; its supervisor goes on"
    ]
    from .spawn import supervise_in_background

    supervise_in_background(ctx, args.run_id, doc, lines)  # a supervisor that died meanwhile: a new one
    ctx.emit(doc, lines)
    return 0


def _walk(args: argparse.Namespace, ctx: Context, items: list[Pending]) -> int:
    from .remotecontrol import remote_for

    for item in items:
        ctx.out("\n".join(item.lines()))
        answer = input("[a]pprove, [r]efuse, [s]kip, [q]uit? ").strip().lower()[:1]
        if answer == "q":
            break
        if answer not in ("a", "r"):
            continue
        args.run_id = item.run_id
        args.reason = input("reason: ").strip()
        decide(args, ctx, remote_for(args, ctx), "approve" if answer == "a" else "refuse")
    return 0


def reviewers(ctx: Context) -> int:
    """``run reviewers``: each model reviewer's precision over the decisions recorded in this repository's runs."""
    from ..controls import people
    from ..runs import state as runstate

    store = ctx.store()
    raised: dict[str, int] = {}
    accepted: dict[str, int] = {}
    for run_id in runstate.list_runs(store):
        try:
            view = runstate.read(store, run_id)
        except AgentOpsError:
            continue
        for decision in people.decisions(view):
            for finding in decision["findings"]:
                name = str(finding["id"]).rsplit("#", 1)[0]
                raised[name] = raised.get(name, 0) + 1
                accepted[name] = accepted.get(name, 0) + (1 if finding["accepted"] else 0)
    rows = [
        {"reviewer": r, "raised": raised[r], "accepted": accepted[r], "precision": round(accepted[r] / raised[r], 3)}
        for r in sorted(raised)
    ]
    lines = [f"{'REVIEWER':<24}{'JUDGED':>8}{'ACCEPTED':>10}{'PRECISION':>11}"]
    lines += [f"{r['reviewer']:<24}{r['raised']:>8}{r['accepted']:>10}{r['precision']:>11.0%}" for r in rows]
    ctx.emit({"reviewers": rows}, lines if rows else ["no finding of a model reviewer has been judged by a person"])
    return 0
