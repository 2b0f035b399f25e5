"""``git agentops-run report RUN [--html FILE]``: what a run did, from its refs and notes (which it never changes).

The facts -- goal and root criteria, every task, a timeline of every generation of every worker, the evidence of
every handoff and of the final gate, the merge chain, the reviews and their findings, the receipt of the published
commit with CI's verdict on it, cost and tokens -- are gathered by :func:`git_agentops.report.collect.gather`. Plain
``report RUN`` prints them as Markdown (:mod:`git_agentops.report.markdown`); ``--json`` prints the facts document;
``--html FILE`` writes one self-contained HTML page (:mod:`git_agentops.report.html`: inline CSS and SVG, no script,
nothing fetched). This module is the command's boundary: its arguments, the check and atomic write of the file.

Nothing heavy is imported at module level: ``git agentops-run`` builds its parser with :func:`configure`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .. import __version__
from ..errors import AgentOpsError
from .common import Context, Parser


def configure(parser: Parser) -> None:
    """The ``report`` subcommand's arguments."""
    parser.add_argument("run_id", metavar="RUN", nargs="?", help="the run ('git agentops-run list' shows them)")
    parser.add_argument(
        "--all", action="store_true", help="with --html: one page of every run (the board, then each run in brief)"
    )
    parser.add_argument("--remote", metavar="NAME", help="with --all: add the runs on this remote to the board")
    parser.add_argument(
        "--html", type=Path, metavar="FILE", help="write one self-contained HTML page there instead of Markdown"
    )


def report(args: argparse.Namespace, ctx: Context) -> int:
    """Print (or write) the report of ``RUN``; ``RUN_NOT_FOUND``, ``OUTPUT_UNWRITABLE``."""
    from ..report.collect import gather
    from ..report.markdown import markdown

    target: Path | None = args.html
    if args.all or args.remote:
        return _all(args, ctx)
    if args.run_id is None:
        raise AgentOpsError("USAGE", "name the run ('git agentops-run list'), or --all --html FILE for every run")
    if target is not None:
        _check_writable(target)
    facts = gather(ctx.store(), args.run_id, clock=ctx.clock, environ=ctx.env)
    if target is not None:
        from ..report.html import render

        written = write_file(target, render(facts, version=__version__))
        ctx.emit(facts.to_json(), f"report of {facts.run.run_id} written to {written}")
        return 0
    ctx.emit(facts.to_json(), markdown(facts))
    return 0


def _all(args: argparse.Namespace, ctx: Context) -> int:
    """``report --html FILE --all [--remote NAME]``: the board and every run of this repository on one page."""
    from ..report.collect import gather
    from ..report.html import render_board
    from ..runs import board

    if not args.all or args.html is None or args.run_id is not None:
        raise AgentOpsError("USAGE", "one page of every run is 'report --all --html FILE [--remote NAME]' (no RUN)")
    _check_writable(args.html)
    store = ctx.store()
    rows = board.every(store, ctx.clock, args.remote)
    reports = []
    for row in rows:
        if row.where == "here" and row.status != "unreadable":
            reports.append(gather(store, row.run_id, clock=ctx.clock, environ=ctx.env))
    docs = [r.to_json() for r in rows]
    written = write_file(args.html, render_board(docs, reports, version=__version__, now=ctx.clock.now()))
    ctx.emit({"runs": docs, "written": str(written)}, f"{len(rows)} run(s) written to {written}")
    return 0


# -- the HTML file -----------------------------------------------------------------------------------------------------


def _check_writable(target: Path) -> None:
    """Refuse up front a path the page could not be written to (before any work is done)."""
    parent = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise AgentOpsError("OUTPUT_UNWRITABLE", f"--html {target}: is a directory; name a file")
    if not parent.is_dir():
        raise AgentOpsError("OUTPUT_UNWRITABLE", f"--html {target}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise AgentOpsError("OUTPUT_UNWRITABLE", f"--html {target}: permission denied")


def write_file(target: Path, text: str) -> Path:
    """Write ``text`` to ``target`` whole or not at all (a temporary file beside it, then a rename)."""
    import tempfile

    parent = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise AgentOpsError("OUTPUT_UNWRITABLE", f"--html {target}: {exc.strerror or exc}") from exc
    return target
