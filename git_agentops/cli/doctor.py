"""``git agentops-doctor``: is this machine and repository ready? Exit 0 when healthy, 1 otherwise."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .common import Context, Parser, build, run


def build_parser() -> Parser:
    return build(
        "git-agentops-doctor",
        "Check Python, pygit2/libgit2, dulwich, git, ssh-keygen, the schemas, the repository, its hooks and the\n"
        "kernel's sandbox for agents (Landlock).\n"
        "Exit status: 0 healthy, 1 something failed (warnings do not fail).",
    )


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    from ..diagnose.checks import CheckStatus, diagnose

    marks = {CheckStatus.OK: "ok  ", CheckStatus.WARN: "warn", CheckStatus.FAIL: "FAIL"}

    report = diagnose(ctx.cwd, path=ctx.env.get("PATH"), environ=ctx.env)
    lines = []
    for check in report.checks:
        lines.append(f"{marks[check.status]}  {check.id:<12} {check.detail}")
        if check.remedy and check.status != CheckStatus.OK:
            lines.append(f"      {'':<12} -> {check.remedy}")
    lines.append("healthy" if report.healthy else "NOT healthy: fix the FAIL lines above")
    ctx.emit(report.to_json(), lines)
    return 0 if report.healthy else 1


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
