"""``git agentops-verify``: run the trusted policy's verification commands in this worktree, record evidence.

Evidence is recorded as notes on the verified commit (``git notes --ref=agentops/evidence show HEAD``), saying
that it ran in this worktree and who ran it (a person, or an agent of a run); a run never reuses such evidence:
it verifies in a clean checkout of its own. A passing, authenticated result for the same tree, command, policy and
environment is reused unless ``--fresh``. Exit 0 when every required command passed, 1 otherwise.

This command talks to git through plumbing subprocesses rather than pygit2: importing pygit2 alone costs more
than the whole command is allowed to add to the commands it runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ..errors import AgentOpsError
from .common import Context, Parser, build, run


def build_parser() -> Parser:
    parser = build("git-agentops-verify", __doc__ or "")
    parser.add_argument("--task", metavar="ID", help="also run the acceptance runners this task's criteria name")
    parser.add_argument("--fresh", action="store_true", help="ignore cached evidence; run every command")
    return parser


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    from ..gitstore.backend import GitCliBackend, git_config
    from ..gitstore.checkout import probe
    from ..gitstore.identity import DEFAULT_IDENTITY, Identity
    from ..policy.load import cache_dir_for, load_policy
    from ..policy.trust import TrustStore, repo_identity
    from ..verify.core import AGENT, PERSON, describe, verify_checkout
    from ..verify.evidence import EvidenceStore

    where = probe(ctx.cwd)
    worktree, common_dir = where.toplevel, where.common_dir
    if where.head is None:
        raise AgentOpsError("VERIFY_NO_COMMIT", f"HEAD of {worktree} has no commit yet")
    config = git_config(worktree, "user.name", "user.email", "remote.origin.url")
    name, email = config.get("user.name"), config.get("user.email")
    identity = Identity(name, email) if name and email else DEFAULT_IDENTITY
    policy = load_policy(worktree, cache_dir=cache_dir_for(common_dir))
    verdict = TrustStore(ctx.state_dir(), ctx.clock).status(
        repo_identity(common_dir, config.get("remote.origin.url")), policy
    )
    task = None
    if args.task:
        from ..runs.tasks import find

        task = find(ctx.store(), args.task)[1]
    backend = GitCliBackend(
        worktree,
        environ=ctx.env,
        identity=identity,
        clock=ctx.clock,
        loose_objects=where.objects_dir if where.object_format == "sha1" else None,
    )
    in_agent = any(ctx.env.get(name) for name in ("AGENTOPS_WORKER_ID", "AGENTOPS_RUN_ID", "AGENTOPS_REVIEWER"))
    provenance = AGENT if in_agent else PERSON
    outcome = verify_checkout(
        EvidenceStore(backend, common_dir / "agentops"),
        worktree=worktree,
        policy=policy,
        trust=verdict,
        environ=ctx.env,
        clock=ctx.clock,
        task=task,
        fresh=args.fresh,
        progress=ctx.progress if ctx.interactive else None,
        provenance=provenance,
    )
    verdict_line = (
        f"{'PASSED' if outcome.passed else 'FAILED'}: {outcome.commit[:12]} (tree {outcome.tree[:12]}), "
        f"verified in this worktree by {'an agent' if in_agent else 'you'} -- runs re-verify in a clean checkout"
    )
    summary = [verdict_line] if ctx.interactive else [*map(describe, outcome.records), verdict_line]
    for failure in outcome.failures():
        if failure["tail"]:
            summary.append(f"--- last output of {failure['commandId']} ---\n{failure['tail'].rstrip()[-2000:]}")
    ctx.emit({**outcome.to_json(), "producer": provenance.producer, "checkout": provenance.checkout}, summary)
    return 0 if outcome.passed else 1


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
