"""The candidate's gate: its setup and verification in its own checkout, then the reviews the policy requires.

Steps 2 (**verified**) and 3 (**reviewed**) of the integration (:mod:`.pipeline`). The candidate gets its own
environment, as every verified checkout does, so the commands test the candidate's code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..canonical import canonical_bytes
from ..errors import AgentOpsError
from ..gitstore.checkout import Head
from ..gitstore.journal import Change, Event
from ..gitstore.repo import Store
from ..model.integration import IntegrationStatus
from ..model.run import Run
from ..model.task import Task
from ..receipts.statement import evidence_summary
from ..runs import state as runstate
from ..runs.jobs import JobContext, Refusal
from ..runs.workspaces import ensure_setup
from ..verify.core import verify_checkout
from ..verify.evidence import EvidenceStore
from .record import advance, fail
from .reviews import diff_text, review_input, run_reviews


def gate(
    ctx: JobContext, store: Store, checkout: Path, run: Run, root: Task | None, candidate: str, base: str, tree: str
) -> Refusal | None:
    """Steps 2 and 3: the setup and the policy's commands in the candidate's checkout, then the reviews.

    The candidate gets its own environment, as every verified checkout does: its setup steps run first, so the
    commands test the candidate's code, not an environment left by another checkout.
    """
    try:
        ensure_setup(checkout, ctx.policy.setup, environ=ctx.environ, clock=ctx.clock, last_user_resume=None)
        outcome = verify_checkout(
            EvidenceStore(store),
            worktree=checkout,
            policy=ctx.policy,
            trust=ctx.trust,
            environ=ctx.environ,
            clock=ctx.clock,
            task=root,
            known_head=Head(candidate, tree, None),
        )
    except AgentOpsError as exc:
        return fail(ctx, store, exc.code, f"the candidate {candidate[:12]} could not be verified: {exc.message}", {})
    if not outcome.passed:
        lines = [
            f"- {r['commandId']}: exit {r['exitCode']}{' (timed out)' if r['timedOut'] else ''}\n"
            + r["tail"].rstrip()[-1200:]
            for r in outcome.failures()
        ]
        return fail(
            ctx,
            store,
            "RUN_VERIFICATION_FAILED",
            f"the integration candidate {candidate[:12]} failed verification:\n" + "\n".join(lines),
            {"failed": sorted(r["commandId"] for r in outcome.failures())},
        )
    verification = [evidence_summary(r) for r in outcome.records]
    advance(
        ctx,
        store,
        "INTEGRATION_VERIFIED",
        f"candidate {candidate[:12]} verified",
        status=IntegrationStatus.VERIFIED,
        verification=verification,
    )
    reviews: list[dict[str, Any]] = []
    if int(ctx.policy.doc["review"]["required"]) > 0:
        refused, reviews = _review(ctx, store, checkout, run, candidate, base, verification)
        if refused is not None:
            return refused
    advance(
        ctx,
        store,
        "INTEGRATION_REVIEWED",
        f"candidate {candidate[:12]} reviewed",
        status=IntegrationStatus.REVIEWED,
        reviews=reviews,
    )
    return None


def _review(
    ctx: JobContext,
    store: Store,
    checkout: Path,
    run: Run,
    candidate: str,
    base: str,
    verification: list[dict[str, Any]],
) -> tuple[Refusal | None, list[dict[str, Any]]]:
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
    )
    blocking = {r.reviewer: r.blocking for r in results if r.blocking}
    reviews = [r.to_json() for r in results]
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
        keep, Event("REVIEWS_RECORDED", f"{len(results)} review(s)", {"reviews": reviews})
    )
    return None, reviews
