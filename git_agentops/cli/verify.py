"""``git agentops-verify``: run the trusted policy's verification commands in this worktree, record evidence.

Evidence is recorded as notes on the verified commit (``git notes --ref=agentops/evidence show HEAD``). A passing
result for the same tree, command, policy and environment is reused unless ``--fresh``. Exit 0 when every
required command passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .common import Context, Parser, build, run


def build_parser() -> Parser:
    parser = build("git-agentops-verify", __doc__ or "")
    parser.add_argument("--task", metavar="ID", help="also run the acceptance runners this task's criteria name")
    parser.add_argument("--fresh", action="store_true", help="ignore cached evidence; run every command")
    return parser


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    from ..policy.load import cache_dir_for, load_policy
    from ..policy.trust import TrustStore
    from ..verify.core import verify_checkout

    store = ctx.store()
    worktree = ctx.worktree()
    policy = load_policy(worktree, cache_dir=cache_dir_for(store.common_dir))
    verdict = TrustStore(ctx.state_dir(), ctx.clock).status(ctx.repo_identity(), policy)
    task = None
    if args.task:
        from ..taskbook import find

        task = find(store, args.task)[1]
    outcome = verify_checkout(
        store,
        worktree=worktree,
        policy=policy,
        trust=verdict,
        environ=ctx.env,
        clock=ctx.clock,
        task=task,
        fresh=args.fresh,
        progress=ctx.progress if ctx.interactive else None,
    )
    if ctx.interactive:
        summary = [f"{'PASSED' if outcome.passed else 'FAILED'}: {outcome.commit[:12]} (tree {outcome.tree[:12]})"]
    else:
        from ..verify.core import describe

        summary = [describe(r) for r in outcome.records]
        summary.append(f"{'PASSED' if outcome.passed else 'FAILED'}: {outcome.commit[:12]} (tree {outcome.tree[:12]})")
    for failure in outcome.failures():
        if failure["tail"] and not ctx.json:
            summary.append(f"--- last output of {failure['commandId']} ---\n{failure['tail'].rstrip()[-2000:]}")
    ctx.emit(outcome.to_json(), summary)
    return 0 if outcome.passed else 1


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
