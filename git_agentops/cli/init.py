"""``git agentops-init``: write a starter ``.agentops/policy.toml`` for this project, or install its hooks.

Proposes what the project already runs -- its CI workflows (.github/workflows), package.json scripts, Makefile
targets, tox environments, nox sessions and pre-commit hooks, followed down to the test runners and tools they
start, and the configuration of pytest, unittest, ruff, mypy, Cargo and Go -- one command per test suite and per
tool, with the parser for its output (pytest, unittest, TAP for node --test, JUnit where the tool writes a report),
and the setup steps that make each checkout's own environment ('git agentops-env python|node|cargo|go'): a
Python project's commands run .agentops/venv/bin/python, with the project installed from that checkout, never
the main checkout's editable install. A tool that setup will not install is written commented out, with the fix
(the dependency group or extra that holds it: add "--group typing" to the setup step). Prints the policy, its
setup command and every change before making it (also when it then stops for confirmation), and adds
.agentops/worktrees/, .agentops/mailbox/, .agentops/venv/ (and the like) to info/exclude. An existing policy
is never replaced without --force. Nothing in the policy runs until you commit it and 'git agentops-policy
trust' it; then the first 'git agentops-verify' makes this checkout's environment itself (its
'git agentops-env' steps; any other setup step is yours to run once).

--hooks installs the pre-commit, pre-merge-commit, post-merge, pre-push and reference-transaction shims into
$GIT_COMMON_DIR/hooks, or into core.hooksPath when it is set (a relative one resolves against the top of the
worktree, as git does). A hook already there is kept as <hook>.legacy and runs first; its failure stops git.
Reinstalling changes nothing; --uninstall-hooks removes the shims and puts the previous hooks back exactly.
--server installs the pre-receive shim into a shared bare repository and prints what it will take from there. A
branch's first push is its baseline, taken as it is (and so is the push that first gives it a policy): set up an
empty server by installing the hook, then pushing the project ('git push origin main'); or push first and install
after -- history already there is not judged again. From then on the target only moves forward, to commits a
valid receipt covers (a run's integration) or to a person's policy commit: one parent, changing only .agentops/**
and the allowed signers file, SSH-signed ('git -c gpg.format=ssh commit -S') by a key that the allowed signers at
the tip it replaces list for namespace "git". Hooks are advisory (git commit --no-verify skips them); CI running
'git agentops-receipt verify' is the authority.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ..errors import AgentOpsError
from .common import Context, Parser, build, run


def build_parser() -> Parser:
    parser = build("git-agentops-init", __doc__ or "")
    parser.add_argument("--dry-run", action="store_true", help="print what would be written; write nothing")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    parser.add_argument("--force", action="store_true", help="replace an existing policy")
    parser.add_argument("--hooks", action="store_true", help="install the hook shims (not the policy)")
    parser.add_argument(
        "--uninstall-hooks", action="store_true", help="remove the hook shims and restore the hooks they chained"
    )
    parser.add_argument("--server", action="store_true", help="in a bare repository: install the pre-receive shim")
    return parser


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    from ..gitstore.checkout import head
    from ..model.policy import POLICY_PATH
    from ..policy.excludes import add_excludes, missing_excludes
    from ..policy.load import check_text
    from ..policy.starter import detect_agents, propose, render, starter_policy

    if args.hooks or args.uninstall_hooks or args.server:
        return _hooks(args, ctx)
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
    agents = detect_agents(ctx.env.get("PATH"))
    proposal = propose(root, path=ctx.env.get("PATH"))
    doc = starter_policy(root, target=target, agents=agents, proposal=proposal)
    text = render(doc, proposal.disabled)
    _, problems = check_text(text)
    if problems:  # a bug in the starter, never the user's fault
        raise AgentOpsError("POLICY_INVALID", f"the generated policy is invalid: {problems[0].message}")
    exclude_file = store.common_dir / "info" / "exclude"
    excludes = missing_excludes(exclude_file)
    detected = proposal.commands
    run_here = proposal.setup_commands()
    plan = {
        "policy": str(policy_file),
        "replaces": policy_file.exists(),
        "detected": [d.to_json() for d in detected],
        "disabled": [d.to_json() for d in proposal.disabled],
        "setup": [list(step) for step in proposal.setup],
        "runHere": run_here,
        "agents": [{"kind": a.kind, "path": a.path, "version": a.version} for a in agents],
        "excludes": {"file": str(exclude_file), "add": excludes},
        "dryRun": args.dry_run,
    }
    if not ctx.json:
        ctx.out(f"{'Would write' if args.dry_run else 'Will write'} {policy_file}:\n")
        ctx.out(text)
        if not detected:
            ctx.out("No test or check command was detected: add [[verify.commands]] before trusting the policy.")
        for off in proposal.disabled:
            ctx.out(f"Not enabled: {off.command.id} ({off.reason}).")
        for agent in agents:
            ctx.out(f"Found the agent CLI {agent.kind} at {agent.path} ({agent.version}).")
        if not agents:
            from ..model.hosts import agent_clis

            known = ", ".join(str(kind.binary) for kind in agent_clis())  # each kind module names its program
            ctx.out(f"No agent CLI ({known}) was found on PATH: the policy has only the scripted host.")
        if excludes:
            ctx.out(f"{'Would add' if args.dry_run else 'Will add'} to {exclude_file}: {', '.join(excludes)}")
        for command in run_here:  # before the confirmation, so a person who stops here knows what verify needs
            ctx.out(f"Its setup ('git agentops-verify' runs it here on first use; workers' worktrees too): {command}")
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
            *(
                f"setup ('git agentops-verify' runs it here on first use; workers' worktrees too): {c}"
                for c in run_here
            ),
        ],
    )
    return 0


def _hooks(args: argparse.Namespace, ctx: Context) -> int:
    """--hooks, --server, --uninstall-hooks: print the plan, confirm, carry it out."""
    import shutil
    import sys

    from ..hooks import HOOK_NAMES
    from ..hooks.install import ALL_HOOKS, SERVER_HOOKS, apply, hook_module, locate, plan_install, plan_uninstall

    if args.uninstall_hooks and (args.hooks or args.server):
        raise AgentOpsError("USAGE", "--uninstall-hooks removes every shim; do not combine it with --hooks/--server")
    if args.force:
        raise AgentOpsError("USAGE", "--force replaces the policy; it does nothing for hooks (reinstalling is safe)")
    target = locate(ctx.cwd)
    if args.server and not target.bare:
        raise AgentOpsError(
            "USAGE",
            f"--server installs the pre-receive hook of a shared bare repository; {target.common_dir} is not bare "
            "(use --hooks here)",
        )
    if args.hooks and target.bare:
        raise AgentOpsError("USAGE", "a bare repository runs no commit or push hooks: use --server there")
    python = sys.executable or ""
    module = str(hook_module())
    if args.uninstall_hooks:
        steps = plan_uninstall(target.directory, ALL_HOOKS)
        steps = [s for s in steps if s.name in HOOK_NAMES or s.changes]  # pre-receive only when it is there
        verb = "uninstall"
    else:
        names = SERVER_HOOKS if args.server else HOOK_NAMES
        steps = plan_install(target.directory, names, python=python, module=module)
        verb = "install"
    on_path = shutil.which("git-agentops-hook", path=ctx.env.get("PATH"))
    changes = [s for s in steps if s.changes]
    doc: dict[str, object] = {
        **target.to_json(),
        "operation": verb,
        "hooks": [s.to_json() for s in steps],
        "command": on_path,
        "fallback": [python, "-m", "git_agentops.cli.hook"],
        "dryRun": args.dry_run,
        "changed": False,
    }
    expected: list[str] = []
    if args.server:  # what the hook will take from here, and how an empty server is set up
        from ..hooks.server import describe, expectations
        from ..hooks.where import Where

        here = str(target.common_dir)
        branches = describe(Where(here, here, None, ctx.env))
        doc["branches"] = [b.to_json() for b in branches]
        expected = expectations(branches)
    if not ctx.json:
        ctx.out(f"Hooks directory: {target.describe()}")
        if verb == "install":
            runs = f"{on_path} (on PATH)" if on_path else "git-agentops-hook is not on PATH here"
            ctx.out(f"The shims call {runs}; without it on PATH: {python} -m git_agentops.cli.hook")
        if not target.directory.is_dir() and changes:
            ctx.out(f"{'Would create' if args.dry_run else 'Will create'} {target.directory}")
        ctx.out(f"{'Would' if args.dry_run else 'Will'} {verb}:" if changes else "Nothing to change:")
        width = max(len(s.name) for s in steps) if steps else 0
        for step in steps:
            ctx.out(f"  {step.name:<{width}}  {step.describe()}")
        for line in expected:
            ctx.out(line)
    if args.dry_run or not changes:
        ctx.emit(doc)
        return 0
    ctx.confirm(f"{verb.capitalize()} {len(changes)} hook(s) in {target.directory}?", yes=args.yes)
    apply(target.directory, steps)
    done = "installed" if verb == "install" else "uninstalled"
    ctx.emit({**doc, "changed": True}, f"{done}: {', '.join(s.name for s in changes)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
