"""``git agentops-receipt``: show and verify the signed integration receipts attached to commits.

    show REV                           the receipt of a commit (signatures, statement, predicate)
    verify REV|RANGE [--allowed-signers FILE] [--require-signature]

``verify`` is the CI check: envelope, payload type, signatures against the allowed signers (as Git checks
SSH-signed commits), subject = the commit and its tree, every seal, every task delivered, the recorded merge
chain = the commit's ancestry; for a range ``A..B``, every integration merge on the first-parent history must be
covered by a receipt. Exit 0 when all are valid, 1 when any is not. Pin ``--allowed-signers`` in CI: by default
the file named by the policy committed at each verified commit is used.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from .common import Context, Parser, build, run, subcommands


def build_parser() -> Parser:
    parser = build("git-agentops-receipt", __doc__ or "")
    add = subcommands(parser)
    show = add("show", "show the receipt of a commit")
    show.add_argument("rev", metavar="REV")
    verify = add("verify", "verify the receipts of a commit or a range (exit 1 if any is invalid)")
    verify.add_argument("spec", metavar="REV|RANGE")
    verify.add_argument("--allowed-signers", type=Path, metavar="FILE", help="trust these signers (ssh format)")
    verify.add_argument("--require-signature", action="store_true", default=None, help="an unsigned receipt is invalid")
    return parser


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    from ..errors import AgentOpsError
    from ..receipts import check as receipt_check

    where = ctx.worktree() if args.command else ctx.cwd
    if args.command == "show":
        doc = receipt_check.show(where, args.rev, environ=ctx.env, clock=ctx.clock)
        predicate = doc["statement"]["predicate"]
        integration = predicate["integration"]["value"]
        lines = [
            f"receipt of {doc['commit']}",
            f"signatures: {', '.join(s['keyid'] for s in doc['signatures']) or 'none'}",
            f"run: {predicate['runId']}  goal: {predicate['goal']['value']}",
            f"target: {integration['target']}  base: {integration['base'][:12]}",
            "merge order: " + " -> ".join(integration["order"]),
        ]
        ctx.emit(doc, lines)
        return 0
    if args.command == "verify":
        if args.allowed_signers is not None and not args.allowed_signers.is_file():
            raise AgentOpsError("USAGE", f"--allowed-signers {args.allowed_signers}: no such file")
        verdicts = receipt_check.check(
            where,
            args.spec,
            environ=ctx.env,
            clock=ctx.clock,
            allowed_signers=args.allowed_signers.resolve() if args.allowed_signers else None,
            require_signature=args.require_signature,
        )
        ok = all(v.ok for v in verdicts)
        lines = [
            f"{'ok  ' if v.ok else 'FAIL'} {v.commit[:12]} "
            + (
                f"signed by {', '.join(v.principals)}"
                if v.ok and v.principals
                else ("valid (unsigned)" if v.ok else f"error[{v.code}]: {v.message}")
            )
            for v in verdicts
        ]
        lines.append(
            f"{len(verdicts)} receipt(s) checked: {'all valid' if ok else 'INVALID'}"
            if verdicts
            else "no integrated commit in that range"
        )
        ctx.emit({"ok": ok, "verdicts": [v.to_json() for v in verdicts]}, lines)
        return 0 if ok else 1
    raise AgentOpsError("USAGE", "say what to do: show or verify")


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
