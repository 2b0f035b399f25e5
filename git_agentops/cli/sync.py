"""``git agentops-sync``: move runs and the agentops notes between this repository and a remote.

    sync [push|fetch|both] [RUN] [--remote NAME]

fetch   bring local refs up to date: missing ones created, ones the remote is ahead of fast-forwarded, notes that
        diverged merged (the union; two different notes for one object are a conflict, the remote's kept aside);
        a run ref that diverged is reported, never forced
push    fetch first, then one atomic push of every ref the remote lacks or is behind on, each with its expected
        old value (--force-with-lease, never a plain force); a remote that moved meanwhile is fetched again
both    fetch, then push (the default)

RUN limits the run refs and worker branches to that run (the notes always go whole). The remote is --remote, else
the policy's [run] remote, else origin. Exit 0 when everything is in step, 1 when a ref diverged or notes
conflicted (SYNC_DIVERGED; listed), 3 when the remote cannot be reached or refuses (SYNC_REMOTE_UNREACHABLE,
SYNC_PUSH_REFUSED with the server's message).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .common import Context, Parser, build, run


def build_parser() -> Parser:
    parser = build("git-agentops-sync", __doc__ or "")
    parser.add_argument("action", nargs="?", choices=("push", "fetch", "both"), default="both")
    parser.add_argument("run_id", nargs="?", metavar="RUN", help="only this run's refs and branches")
    parser.add_argument("--remote", help="the remote (default: the policy's [run] remote, else origin)")
    return parser


def default_remote(ctx: Context) -> str:
    """The policy's ``[run] remote`` when the checkout has a valid policy, else ``origin``."""
    from ..errors import AgentOpsError
    from ..policy.load import load_policy

    store = ctx.store()
    if store.is_bare:
        return "origin"
    try:
        policy = load_policy(store.common_dir.parent)
    except AgentOpsError:
        return "origin"
    return str(policy.doc["run"].get("remote") or "origin")


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    from ..gitstore import sync
    from ..runs.state import check_run_id

    store = ctx.store()
    remote = args.remote or default_remote(ctx)
    namespaces: Sequence[str] = sync.NAMESPACES
    if args.run_id:
        run_id = check_run_id(args.run_id)
        namespaces = (f"refs/agentops/runs/{run_id}/", f"refs/heads/agentops/{run_id}/", "refs/notes/agentops/")
    fetched = sync.fetch(store, remote, namespaces) if args.action == "fetch" else None
    pushed = sync.push(store, remote, namespaces) if args.action in ("push", "both") else None
    outcome = pushed or fetched
    assert outcome is not None
    doc = {"remote": remote, "action": args.action, **outcome.to_json()}
    lines = [f"{ref}: {what}" for ref, what in sorted(outcome.refs.items()) if what != "up to date"]
    same = sum(1 for what in outcome.refs.values() if what == "up to date")
    lines.append(f"{remote}: {len(outcome.refs) - same} ref(s) moved, {same} already in step")
    diverged = sorted(ref for ref, what in outcome.refs.items() if what == "diverged")
    for ref, objects in outcome.conflicts.items():
        ctx.warn(
            "SYNC_DIVERGED",
            f"{ref}: {len(objects)} object(s) have a different note on {remote} "
            f"({', '.join(o[:12] for o in objects[:5])}); the local notes stay, the remote's are kept under "
            f"{sync.mirror_prefix(remote)}conflicts/",
        )
    if diverged:
        ctx.warn(
            "SYNC_DIVERGED", f"{len(diverged)} ref(s) diverged from {remote} and were not forced: {', '.join(diverged)}"
        )
    ctx.emit(doc, lines)
    return 1 if diverged or outcome.conflicts else 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
