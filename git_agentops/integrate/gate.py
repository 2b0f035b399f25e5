"""The candidate's gate: its verification in the supervisor's clean checkout of it, then the required reviews.

Steps 2 (**verified**) and 3 (**reviewed**) of the integration (:mod:`.pipeline`). The candidate is verified like
every handoff (:func:`git_agentops.verify.proof.prove`, slot ``candidate``): its own setup, exactly its files, and
reuse only of evidence the supervisor produced in a clean checkout and can authenticate -- so a single delivery
onto an unchanged target, whose tree is the delivery's, costs nothing, and a forged evidence note costs the
forger nothing but a re-run. The reviewers then read the same checkout.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Final

from .. import eventkinds as kinds
from ..canonical import canonical_bytes
from ..errors import AgentOpsError
from ..gitstore.journal import Change, Event
from ..gitstore.repo import Store
from ..hooks.hostconfig import hook_entry
from ..hosts.launch import HostSpec
from ..model.delivery import ReviewResult
from ..model.integration import IntegrationStatus
from ..model.run import Run
from ..model.task import Task
from ..model.usage import ReviewerUsage
from ..runs import state as runstate
from ..runs.jobs import JobContext, Refused
from ..sandbox.plan import Sandbox, choose_mode, for_reviewer
from ..verify.failing import failed_commands
from ..verify.proof import prove, slot_checkout
from .guards import candidate_breach
from .record import advance, fail
from .reviews import Confine, Review, diff_text, review_input, run_reviews

CANDIDATE_SLOT: Final = "candidate"


def gate(ctx: JobContext, store: Store, run: Run, root: Task | None, candidate: str, base: str) -> Refused | None:
    """Steps 2 and 3: the policy's commands on the candidate in a clean checkout, then the reviews (first of all:
    the candidate changes no protected path against the tip it was built on)."""
    breach = candidate_breach(store, ctx.policy, base=base, candidate=candidate, bound_policy=ctx.policy_file)
    if breach is not None:
        return fail(ctx, store, breach.code, breach.message, dict(breach.detail))
    try:
        outcome = prove(ctx, store, slot=CANDIDATE_SLOT, commit=candidate, task=root)
    except AgentOpsError as exc:
        return fail(ctx, store, exc.code, f"the candidate {candidate[:12]} could not be verified: {exc.message}", {})
    if not outcome.passed:
        lines = [
            f"- {r.command_id}: exit {r.exit_code}{' (timed out)' if r.timed_out else ''}\n" + r.tail.rstrip()[-1200:]
            for r in outcome.failures()
        ]
        return fail(
            ctx,
            store,
            "RUN_VERIFICATION_FAILED",
            f"the integration candidate {candidate[:12]} failed verification:\n" + "\n".join(lines),
            {"failed": failed_commands(outcome.records)},
        )
    from ..receipts.statement import evidence_summary  # lazily: the receipts package is integration-only

    verification = [evidence_summary(r.to_json()) for r in outcome.records]
    advance(
        ctx,
        store,
        kinds.INTEGRATION_VERIFIED,
        f"candidate {candidate[:12]} verified",
        status=IntegrationStatus.VERIFIED,
        verification=verification,
    )
    reviews: list[ReviewResult] = []
    if int(ctx.policy.doc["review"]["required"]) > 0:
        checkout = slot_checkout(ctx, store, CANDIDATE_SLOT).root
        refused, reviews = _review(ctx, store, checkout, run, candidate, base, verification)
        if refused is not None:
            return refused
    advance(
        ctx,
        store,
        kinds.INTEGRATION_REVIEWED,
        f"candidate {candidate[:12]} reviewed",
        status=IntegrationStatus.REVIEWED,
        reviews=reviews,
    )
    return None


def _confiner(ctx: JobContext, store: Store) -> Confine:
    """Each reviewer's sandbox: the policy's mode (``RUN_SANDBOX_UNAVAILABLE`` if required and impossible), its
    spec in the run's private dir."""
    mode, reason = choose_mode(ctx.policy.sandbox_mode, ctx.policy.sandbox_required, ctx.policy.sandbox_level)
    key = store.config_value("agentops.signingKey")

    def confine(spec: HostSpec, checkout: Path, scratch: Path, name: str) -> tuple[Sandbox, Path]:
        box = for_reviewer(
            mode=mode,
            reason=reason,
            checkout=checkout,
            scratch=scratch,
            common_dir=store.common_dir,
            environ=ctx.environ,
            signing_key=key,
            host_writable=spec.writable,
            policy_writable=ctx.policy.sandbox_writable,
            deny_read=ctx.policy.sandbox_deny_read,
            recipe=runstate.recipe_path(store, ctx.run_id),
            home_files=spec.home_files,
            network=spec.network,
            kind=spec.kind,
            hook_command=hook_entry(sys.executable),
        )
        where = ctx.run_dir / "sandbox"
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        return box, where / f"{name}.json"

    return confine


def _review(
    ctx: JobContext,
    store: Store,
    checkout: Path,
    run: Run,
    candidate: str,
    base: str,
    verification: Sequence[Mapping[str, object]],
) -> tuple[Refused | None, list[ReviewResult]]:
    view = runstate.read(store, ctx.run_id)
    doc = review_input(
        goal=run.goal,
        tasks=[t.to_json() for t in view.tasks().values()],
        base=base,
        candidate=candidate,
        diff=diff_text(Path(run.repository), base, candidate),
        evidence=verification,
    )
    recipe = runstate.recipe_path(store, ctx.run_id)
    results = run_reviews(
        ctx.policy,
        checkout=checkout,
        input_doc=doc,
        environ=ctx.environ,
        clock=ctx.clock,
        recipe=recipe if recipe.exists() else None,
        git_common_dir=store.common_dir,
        log_dir=ctx.run_dir / "reviews",
        confine=_confiner(ctx, store),
    )
    _account(store, ctx.run_id, results)
    blocking = {r.reviewer: r.blocking for r in results if r.blocking}
    reviews = [r.result() for r in results]
    if blocking:
        findings = "\n".join(f"- {name}: {item}" for name, items in blocking.items() for item in items)
        return (
            fail(
                ctx,
                store,
                "RUN_REVIEW_BLOCKED",
                f"review blocked the candidate {candidate[:12]}:\n{findings}",
                {"reviewers": sorted(blocking)},
            ),
            reviews,
        )

    def keep(change: Change) -> None:
        for result in results:
            if result.report is not None:
                change.put_artifact(canonical_bytes(result.report) + b"\n")

    runstate.journal(store, ctx.run_id).mutate(
        keep, Event(kinds.REVIEWS_RECORDED, f"{len(results)} review(s)", {"reviews": [r.to_json() for r in reviews]})
    )
    return None, reviews


def _account(store: Store, run_id: str, results: Sequence[Review]) -> None:
    """Add what each reviewer attempt used to the run's spend (``budget.reviewUsage``), whatever the verdict: a
    review costs what it costs, and the budget counts it."""
    spent = tuple(ReviewerUsage(r.reviewer, usage) for r in results for usage in r.usage)
    if not spent:
        return

    def add(change: Change, view: runstate.RunView) -> None:
        run = view.run()
        runstate.put_run(change, replace(run, review_usage=(*run.review_usage, *spent)[-4096:]))

    tokens = sum(entry.usage.tokens for entry in spent)
    runstate.mutate(
        runstate.journal(store, run_id),
        add,
        Event(kinds.REVIEW_USAGE, f"{len(spent)} review attempt(s) used {tokens} tokens", {"tokens": tokens}),
    )
