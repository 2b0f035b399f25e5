"""``git agentops-init``: write a starter ``.agentops/policy.toml`` for this project.

Detects the project's own test and check commands (pytest, package.json scripts with the package manager of its
lockfile, Cargo, go.mod, Makefile test/check targets), prints the policy and every change before making it, and
adds ``.agentops/worktrees/`` and ``.agentops/mailbox/`` to ``info/exclude``. An existing policy is never
replaced without ``--force``. Nothing in the policy runs until you commit it and 'git agentops-policy trust' it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ..errors import AgentOpsError
from .common import Context, Parser, build, not_implemented, run


def build_parser() -> Parser:
    parser = build("git-agentops-init", __doc__ or "")
    parser.add_argument("--dry-run", action="store_true", help="print what would be written; write nothing")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    parser.add_argument("--force", action="store_true", help="replace an existing policy")
    parser.add_argument("--hooks", action="store_true", help="install the repository hooks (issue #6)")
    return parser


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    from ..checkout import head
    from ..model.policy import POLICY_PATH
    from ..policy.load import check_text
    from ..starter import add_excludes, detect, missing_excludes, render, starter_policy

    if args.hooks:
        not_implemented("git agentops-init --hooks", 6)
    root = ctx.worktree()
    store = ctx.store()
    policy_file = root / POLICY_PATH
    if policy_file.exists() and not args.force:
        raise AgentOpsError("POLICY_EXISTS", f"{policy_file} exists; pass --force to replace it (nothing was changed)")
    try:
        branch = head(root).branch
    except AgentOpsError:
        branch = None
    target = branch.removeprefix("refs/heads/") if branch else "main"
    doc = starter_policy(root, target=target)
    text = render(doc)
    _, problems = check_text(text)
    if problems:  # a bug in the starter, never the user's fault
        raise AgentOpsError("POLICY_INVALID", f"the generated policy is invalid: {problems[0].message}")
    exclude_file = store.common_dir / "info" / "exclude"
    excludes = missing_excludes(exclude_file)
    detected = detect(root)
    plan = {
        "policy": str(policy_file),
        "replaces": policy_file.exists(),
        "detected": [d.to_json() for d in detected],
        "excludes": {"file": str(exclude_file), "add": excludes},
        "dryRun": args.dry_run,
    }
    if not ctx.json:
        ctx.out(f"{'Would write' if args.dry_run else 'Will write'} {policy_file}:\n")
        ctx.out(text)
        if not detected:
            ctx.out("No test or check command was detected: add [[verify.commands]] before trusting the policy.")
        if excludes:
            ctx.out(f"{'Would add' if args.dry_run else 'Will add'} to {exclude_file}: {', '.join(excludes)}")
    if args.dry_run:
        ctx.emit(plan)
        return 0
    ctx.confirm(f"Write {POLICY_PATH}?", yes=args.yes)
    policy_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = policy_file.with_name(policy_file.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(policy_file)
    add_excludes(exclude_file, excludes)
    ctx.emit(
        {**plan, "written": True},
        [
            f"wrote {policy_file}",
            f"next: review it, 'git add {POLICY_PATH} && git commit', then 'git agentops-policy trust'",
        ],
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
