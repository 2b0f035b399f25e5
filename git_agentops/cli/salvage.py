"""``git agentops-run clean RUN`` and ``git agentops-run salvage RUN [--restore WORKER[/GENERATION]] [--into DIR]``.

``clean`` removes an ended run's worker worktrees, each after its unhanded-off work is saved to a salvage ref
(``refs/agentops/runs/<run>/salvage/<worker>/<generation>``); a worktree whose work cannot be saved is kept.
``salvage`` lists those refs, and ``--restore`` brings one back as a new worktree holding the work exactly as the
agent left it (uncommitted files uncommitted, its commits on HEAD).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..errors import AgentOpsError
from .common import Context


def configure(add: Any) -> None:
    clean = add("clean", "remove an ended run's worktrees, saving what was never handed off to salvage refs")
    clean.add_argument("run_id", metavar="RUN")
    salvage = add("salvage", "list a run's salvaged work, or restore one into a new worktree")
    salvage.add_argument("run_id", metavar="RUN")
    salvage.add_argument("--restore", metavar="WORKER[/GENERATION]", help="restore this salvage (newest generation)")
    salvage.add_argument(
        "--into", type=Path, metavar="DIR", help="with --restore: where (default .agentops/salvage/RUN-WORKER-GEN)"
    )


def clean(args: argparse.Namespace, ctx: Context, supervisor: Any) -> int:
    """``run clean`` through the run's (not serving) supervisor, which holds the run's lock meanwhile."""
    saved, kept = supervisor.clean()
    lines = [f"{args.run_id}: worktrees removed"]
    lines += [f"  {s.worker_id} generation {s.generation}: {len(s.paths)} path(s) saved to {s.ref}" for s in saved]
    lines += [f"  {worker}: kept ({why})" for worker, why in kept.items()]
    if saved:
        lines.append(f"'git agentops-run salvage {args.run_id} --restore WORKER' brings the work back")
    ctx.emit({"runId": args.run_id, "salvaged": [s.to_json() for s in saved], "kept": kept}, lines)
    return 0 if not kept else 1


def salvage(args: argparse.Namespace, ctx: Context) -> int:
    from ..gitstore.salvage import find, listing, restore
    from ..runs import state as runstate

    store = ctx.store()
    if not runstate.journal(store, args.run_id).exists():
        raise AgentOpsError("RUN_NOT_FOUND", f"no run {args.run_id!r}")
    if args.restore is None:
        if args.into is not None:
            raise AgentOpsError("USAGE", "--into goes with --restore")
        found = listing(store, args.run_id)
        lines = [
            f"{s.worker_id}/{s.generation}  {s.commit[:12]}  {len(s.paths)} path(s)"
            + (f": {', '.join(s.paths[:5])}{' ...' if len(s.paths) > 5 else ''}" if s.paths else " (commits only)")
            for s in found
        ] or [f"{args.run_id} has no salvaged work"]
        ctx.emit({"runId": args.run_id, "salvage": [s.to_json() for s in found]}, lines)
        return 0
    chosen = find(store, args.run_id, args.restore)
    if store.workdir is None:
        raise AgentOpsError("USAGE", "restore into a repository with a work tree, or name --into")
    into = (
        args.into or store.workdir / ".agentops" / "salvage" / f"{args.run_id}-{chosen.worker_id}-{chosen.generation}"
    )
    where = restore(store, chosen, into.resolve())
    ctx.emit(
        {"runId": args.run_id, "restored": chosen.to_json(), "path": str(where)},
        [
            f"restored {chosen.worker_id} generation {chosen.generation} at {where}",
            "  (git status there shows the work)",
        ],
    )
    return 0
