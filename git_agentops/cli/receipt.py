"""``git agentops-receipt``: show and verify the signed integration receipts attached to commits.

    show REV                           the receipt of a commit (signatures, statement, predicate)
    verify REV|RANGE [--allowed-signers FILE [--allow-unsigned]] [--require-signature] [--allow-plain-commits]
                     [--require-sandbox namespace|landlock|none]

``verify`` is the CI check: envelope, payload type, signatures against the allowed signers (as Git checks
SSH-signed commits), subject = the commit and its tree, every seal, every task delivered, the recorded merge
chain = the commit's ancestry. For a range ``BASE..TIP`` every commit on the first-parent history must be covered
by a valid receipt (its own, or as a merge step of a later one): a plain commit fails (``RECEIPT_MISSING``) unless
``--allow-plain-commits`` or the base's ``[receipts] plain_commits = "allow"``; a merge step whose receipt is there
but invalid fails with that receipt's code, naming it and why it does not count; a range with nothing covered fails.
Exit 0 when all is valid, 1 when anything is not. Pin ``--allowed-signers`` in CI (it implies
``--require-signature``); without it the signers and rules come from the policy at BASE (for one commit: at its
first parent), never from the commit being verified. ``--require-sandbox LEVEL`` also refuses a receipt whose
agents (the coordinator, every delivering worker, every reviewer) did not all run at LEVEL or a stronger one
(``namespace`` > ``landlock`` > ``none``), or that records no level (``RECEIPT_SANDBOX_WEAKER``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..model.sandbox import LEVELS
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
    verify.add_argument(
        "--allow-unsigned",
        action="store_false",
        dest="require_signature",
        help="with --allowed-signers: accept unsigned receipts (local use; CI should not)",
    )
    verify.add_argument(
        "--allow-plain-commits", action="store_true", help="accept commits no receipt covers (listed as not covered)"
    )
    verify.add_argument(
        "--require-sandbox",
        choices=LEVELS,
        metavar="LEVEL",
        help=f"refuse receipts whose agents ran at a weaker sandbox level or record none ({', '.join(LEVELS)})",
    )
    return parser


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    from ..errors import AgentOpsError, RepoBare
    from ..receipts import check as receipt_check

    try:
        where = ctx.worktree() if args.command else ctx.cwd
    except RepoBare:  # a bare repository -- the server a team pushes to: git plumbing reads it as it is
        where = ctx.cwd
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
            _sandbox_line(predicate),
        ]
        for record in predicate["verification"]["value"]:
            origin = f"reused from {str(record.get('cachedFrom') or '?')[:12]}" if record.get("cached") else "fresh"
            producer = f", by {record['producer']}" if record.get("producer") else ""
            verdict = "passed" if record.get("passed") else f"failed (exit {record.get('exitCode')})"
            lines.append(f"verify {record.get('commandId', '?')}: {verdict}, {origin}{producer}")
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
            allow_plain=args.allow_plain_commits,
            progress=None if ctx.json else ctx.progress,  # on a terminal only
            require_sandbox=args.require_sandbox,
        )
        ok = bool(verdicts) and all(v.ok for v in verdicts)
        lines = [_verdict_line(v) for v in verdicts]
        receipted = [v for v in verdicts if v.code is None]
        lines.append(f"{len(receipted)} receipt(s) valid; {'all covered' if ok else 'INVALID'}")
        ctx.emit({"ok": ok, "verdicts": [v.to_json() for v in verdicts]}, lines)
        return 0 if ok else 1
    raise AgentOpsError("USAGE", "say what to do: show or verify")


def _sandbox_line(predicate: dict[str, Any]) -> str:
    agents = [(str(d["workerId"]), d.get("sandbox")) for d in predicate["deliveries"]["value"]]
    agents += [(f"reviewer {r['reviewer']}", r.get("sandbox")) for r in predicate["reviews"]["value"]]
    each = ", ".join(f"{who} {level or 'unrecorded'}" for who, level in agents)
    return f"sandbox: {predicate.get('sandbox') or 'not recorded'} ({each})"


def _verdict_line(verdict: Any) -> str:
    if not verdict.ok:
        return f"FAIL {verdict.commit[:12]} error[{verdict.code}]: {verdict.message}"
    if verdict.code is not None:
        return f"note {verdict.commit[:12]} {verdict.code}: {verdict.message}"
    signed = f"signed by {', '.join(verdict.principals)}" if verdict.principals else "valid (unsigned)"
    return f"ok   {verdict.commit[:12]} {signed}"


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
