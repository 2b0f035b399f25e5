"""``git agentops-sync``: move runs and the agentops notes between this repository and a remote.

    sync [push|fetch|both] [RUN] [--remote NAME]

fetch   bring local refs up to date: missing ones created, ones the remote is ahead of fast-forwarded, notes that
        diverged merged (the union; two different notes for one object are a conflict, the remote's kept aside);
        a run ref that diverged is reported, never forced; a local note the remote dropped or rewrote is kept
        (SYNC_NOTES_KEPT); a run journal tip of the remote that this repository's MAC key does not authenticate
        is kept under refs/agentops-quarantine/<remote>/ and never adopted (RUN_STATE_QUARANTINED)
push    fetch first, then one atomic push of every ref the remote lacks or is behind on, each with its expected
        old value (--force-with-lease, never a plain force); a remote that moved meanwhile is fetched again
both    fetch, then push (the default)

--export-key FILE / --import-key FILE move this repository's MAC key to another machine (a team's machines share
one, so each recognises the run state the other wrote: taking a run over needs it); nothing else is done.

RUN limits the run refs and worker branches to that run (the notes always go whole). The remote is --remote, else
the policy's [run] remote, else origin. Exit 0 when everything is in step, 1 when a ref diverged or notes
conflicted (SYNC_DIVERGED; listed), notes were kept or a state quarantined, 3 when the remote cannot be reached or
refuses (SYNC_REMOTE_UNREACHABLE, SYNC_PUSH_REFUSED with the server's message).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from .common import Context, Parser, build, run


def build_parser() -> Parser:
    parser = build("git-agentops-sync", __doc__ or "")
    parser.add_argument("action", nargs="?", choices=("push", "fetch", "both"), default="both")
    parser.add_argument("run_id", nargs="?", metavar="RUN", help="only this run's refs and branches")
    parser.add_argument("--remote", help="the remote (default: the policy's [run] remote, else origin)")
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument("--export-key", type=Path, metavar="FILE", help="write this repository's MAC key (0600), only")
    keys.add_argument("--import-key", type=Path, metavar="FILE", help="install another machine's MAC key, only")
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


def _keys(args: argparse.Namespace, ctx: Context) -> int:
    from ..errors import AgentOpsError
    from ..gitstore.keys import export_key, import_key

    private = ctx.store().private_dir()
    if args.export_key is not None:
        try:
            fd = os.open(args.export_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            raise AgentOpsError("USAGE", f"{args.export_key} exists; the key is never written over a file") from None
        with os.fdopen(fd, "wb") as handle:
            handle.write(export_key(private).hex().encode() + b"\n")
        ctx.emit({"exported": str(args.export_key)}, f"MAC key written to {args.export_key} (0600); keep it secret")
        return 0
    from ..files import read_bounded

    try:
        key = bytes.fromhex(read_bounded(args.import_key, 1024).decode("ascii").strip())
    except (OSError, ValueError) as exc:
        raise AgentOpsError(
            "KEY_INVALID", f"{args.import_key} does not hold a key made by --export-key: {exc}"
        ) from exc
    installed = import_key(private, key)
    ctx.emit({"imported": installed}, "MAC key installed" if installed else "this repository has that key already")
    return 0


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    from ..gitstore import sync

    if args.export_key is not None or args.import_key is not None:
        return _keys(args, ctx)
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
    for ref, objects in outcome.kept.items():
        ctx.warn(
            "SYNC_NOTES_KEPT",
            f"{ref} on {remote} lacks or rewrote the note of {len(objects)} object(s) this repository has "
            f"({', '.join(o[:12] for o in objects[:5])}); the local notes were kept (merged, not fast-forwarded)",
        )
    for ref, commit in outcome.quarantined.items():
        ctx.warn(
            "RUN_STATE_QUARANTINED",
            f"{ref} on {remote} is at {commit[:12]}, which no supervisor of this repository's team wrote (its MAC "
            f"does not check): kept under {sync.quarantine_ref(remote, ref, commit)}, not adopted; the run's "
            "supervisor goes on from its own state",
        )
    ctx.emit(doc, lines)
    return 1 if diverged or outcome.conflicts or outcome.kept or outcome.quarantined else 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
