"""``git agentops-policy``: check, show and trust the repository's ``.agentops/policy.toml``.

check [FILE]   every schema and rule problem with its code, file, line and JSON path (exit 1 if any)
show           the effective policy (defaults filled in) and its config hash
trust [--yes]  trust this exact policy for this repository (shows what it allows to run first); refused
               (POLICY_TRUST_AGENT) in an agent's environment -- trust is a person's decision -- and
               recorded with who granted it (git identity, login, terminal, --yes) and when
untrust        forget this repository's trust (allowed anywhere: it only lowers trust)
status         TRUSTED / STALE (what changed) / UNTRUSTED (exit 0 only when TRUSTED), and who trusted when
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import AgentOpsError
from .common import Context, Parser, build, run, subcommands

if TYPE_CHECKING:
    from ..model.policydoc import PolicyDoc


def build_parser() -> Parser:
    parser = build("git-agentops-policy", __doc__ or "")
    add = subcommands(parser)
    check = add("check", "report every problem of the policy file (exit 1 if any)")
    check.add_argument("file", nargs="?", help="policy file (default: .agentops/policy.toml of this worktree)")
    add("show", "print the effective policy and its config hash")
    trust = add("trust", "trust this exact policy for this repository (a person only, never an agent)")
    trust.add_argument("--yes", action="store_true", help="do not ask for confirmation (recorded in the trust store)")
    add("untrust", "forget this repository's trust")
    add("status", "TRUSTED, STALE or UNTRUSTED (exit 0 only when TRUSTED)")
    return parser


def _trust_context(ctx: Context) -> tuple[Any, Any, Any]:
    from ..policy.load import cache_dir_for, load_policy
    from ..policy.trust import TrustStore

    policy = load_policy(ctx.worktree(), cache_dir=cache_dir_for(ctx.store().common_dir))
    return policy, ctx.repo_identity(), TrustStore(ctx.state_dir(), ctx.clock)


def _check(args: argparse.Namespace, ctx: Context) -> int:
    from ..model.policy import POLICY_PATH, Policy
    from ..policy.load import check_text, read_policy_bytes, read_policy_file

    if args.file:
        data, source = read_policy_file(Path(args.file), args.file), args.file
    else:
        data, source = read_policy_bytes(ctx.worktree()), POLICY_PATH
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AgentOpsError("POLICY_TOML_INVALID", f"{source} is not UTF-8: {exc.reason}") from exc
    doc, problems = check_text(text)
    if doc is not None:
        policy = Policy.from_effective(doc, source)
        programs, warnings = _program_warnings(doc, text, source, ctx)
        ctx.emit(
            {
                "ok": True,
                "file": source,
                "configHash": policy.config_hash,
                "problems": [],
                "warnings": warnings,
                "programs": programs,
            },
            [w["rendered"] for w in warnings] + [f"{source}: OK (config hash {policy.config_hash})"],
        )
        return 0  # warnings do not change the answer: the policy is valid
    ctx.emit(
        {"ok": False, "file": source, "problems": [p.to_json(source) for p in problems]},
        [p.render(source) for p in problems] + [f"{len(problems)} problem(s) in {source}"],
    )
    return 1


def _program_warnings(
    doc: PolicyDoc, text: str, source: str, ctx: Context
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Each required command's program: found, made by setup, or missing (a ``POLICY_PROGRAM_MISSING`` warning).

    A valid policy whose test command names a program that is not there fails its first verification with
    "could not start"; saying so at check time is cheaper. Shell commands are the shell's business and not looked
    at. Programs are looked for on this ``PATH`` (verification keeps it) and relative to the top of this checkout.
    """
    from ..envs.tools import program_status
    from ..policy.load import locate

    try:
        root = ctx.worktree()
    except AgentOpsError:
        root = ctx.cwd
    setup = [step["argv"] for step in doc.get("worktree", {}).get("setup", [])]
    programs, warnings = [], []
    for index, command in enumerate(doc.get("verify", {}).get("commands", [])):
        argv = command["argv"]
        if not command.get("required", True) or command.get("shell") or not isinstance(argv, list):
            continue
        status = program_status(argv, root=root, path=ctx.env.get("PATH"), setup_argvs=setup)
        programs.append({"id": command["id"], **status.to_json()})
        if status.status == "missing":
            where = f"$.verify.commands[{index}].argv[0]"
            line = locate(text, ("verify", "commands", index, "argv"))
            rendered = f"warning[POLICY_PROGRAM_MISSING]: {source}:{line or '?'}: {where}: {status.detail}"
            warnings.append(
                {
                    "code": "POLICY_PROGRAM_MISSING",
                    "jsonPath": where,
                    "line": line,
                    "message": status.detail,
                    "rendered": rendered,
                }
            )
    return programs, warnings


def _show(args: argparse.Namespace, ctx: Context) -> int:
    from ..integrate.guards import in_repo_hooks, protected_patterns
    from ..policy.load import render_toml

    policy, identity, trust = _trust_context(ctx)
    verdict = trust.status(identity, policy)
    store = ctx.store()
    judged = protected_patterns(store, policy, hooks_path=in_repo_hooks(store))
    protected = list(reversed(dict.fromkeys(reversed(judged))))  # a repeated pattern counts where it comes last
    lines = [
        f"# effective policy of {policy.source} (defaults filled in)",
        render_toml(policy.doc).rstrip(),
        "",
        f"# config hash: {policy.config_hash}",
        f"# trust: {verdict.status}",
        "# protected paths, the last match deciding (a delivery may not change them; .agentops/**, the "
        f"allowed_signers file and the in-repository core.hooksPath are always added): {', '.join(protected)}",
    ]
    ctx.emit(
        {
            "configHash": policy.config_hash,
            "policy": policy.doc,
            "trust": verdict.to_json(),
            "protectedPaths": protected,
        },
        lines,
    )
    return 0


def _runs_what(policy: Any) -> list[str]:
    def shown(c: Any) -> str:
        argv = c.argv if isinstance(c.argv, str) else " ".join(c.argv)
        return f"{argv}{'  (shell)' if c.shell else ''}"

    lines = [f"  verify {c.id}: {shown(c)}" for c in policy.commands]
    lines += [f"  runner {c.id}: {shown(c)}" for c in policy.runners]
    lines += [f"  setup {i}: {shown(c)}" for i, c in enumerate(policy.setup)]
    for name, host in policy.doc["hosts"].items():
        lines += _host_capabilities(name, host)
    sandbox = policy.doc.get("sandbox", {})
    if sandbox.get("mode") == "none":
        lines.append("  sandbox: none -- agents run as you, unconfined")
    for path in sandbox.get("writable", []):
        lines.append(f"  every agent may write: {path}")
    return lines or ["  (no commands)"]


def _host_capabilities(name: str, host: Any) -> list[str]:
    """What trusting a host allows: its argv, how it resumes, the environment it gets on top of yours, the credentials
    of yours it is given (``pass_env``)."""
    from ..model.hosts import kind_of

    def argv(value: Any) -> str:
        return shlex.join(value) if isinstance(value, list) else str(value)

    lines = [f"  host {name} ({host['kind']}): {argv(host['argv']) if host.get('argv') else '(built in)'}"]
    if host.get("resume") and host.get("resume_argv"):
        lines.append(f"      resumes a session with: {argv(host['resume_argv'])}")
    for key, value in sorted(host.get("env", {}).items()):
        shown = value if len(value) <= 400 else value[:400] + f"... ({len(value)} chars)"
        lines.append(f"      env {key}={shown}")
    if host.get("writable"):
        lines.append(f"      may write, in the sandbox: {', '.join(host['writable'])}")
    if host.get("pass_env"):
        lines.append(f"      is given these credentials of your environment: {', '.join(host['pass_env'])}")
    if kind_of(host["kind"]).builtin_module is None:  # a program of the person's, not our built-in agent
        lines.append(
            "      runs with your environment minus its other credentials (tokens, keys, passwords) and AGENTOPS_*"
        )
    return lines


def _refuse_agent(ctx: Context, policy: Any = None, repository: str | None = None) -> None:
    """``POLICY_TRUST_AGENT`` in an agent's surroundings: its variables, a run's worktree (by its ownership record,
    or under the policy's ``worktree_root``), the supervisor's clean checkouts."""
    from ..model.globs import normalise
    from ..model.policy import DEFAULT_WORKTREE_ROOT
    from ..policy.trust import agent_signs, refuse_agent
    from ..verify.confined_setup import verify_root

    fenced = [verify_root(ctx.env)]
    git_dir = None
    if policy is not None and repository is not None:
        roots = dict.fromkeys((normalise(policy.worktree_root), DEFAULT_WORKTREE_ROOT))
        fenced += [Path(repository) / root for root in roots if root]  # "." fences nothing: records still tell
        git_dir = ctx.store().git_dir
    refuse_agent(agent_signs(ctx.env, cwd=ctx.cwd, git_dir=git_dir, fenced=fenced))


def _grantor(ctx: Context, yes: bool) -> Any:
    """Who is granting trust: the git identity, the login name, the terminal on stdin, whether ``--yes`` was given."""
    import getpass
    import os
    import sys

    from ..policy.trust import Grantor

    try:
        login = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container): the number says as much
        login = str(os.getuid())
    try:
        tty = os.ttyname(sys.stdin.fileno()) if sys.stdin is not None and sys.stdin.isatty() else None
    except (OSError, ValueError):
        tty = None
    store = ctx.store()

    def clip(value: str | None, limit: int = 1024) -> str | None:
        return value[:limit] if value else None

    return Grantor(
        clip(login, 256) or str(os.getuid()),
        clip(store.config_value("user.name")),
        clip(store.config_value("user.email")),
        clip(tty),
        yes,
    )


def _trust(args: argparse.Namespace, ctx: Context) -> int:
    from ..policy.trust import TrustStatus, describe_grant

    _refuse_agent(ctx)  # before anything is read: an agent's variables need no policy to be refused
    policy, identity, trust = _trust_context(ctx)
    _refuse_agent(ctx, policy, identity.repository)
    verdict = trust.status(identity, policy)
    if not ctx.json:
        ctx.out(f"Trusting policy {policy.config_hash[:12]} for {identity.repository} ({identity.remote}).")
        if verdict.record is not None:
            ctx.out(f"Last trusted {describe_grant(verdict.record)}.")
        if verdict.differences:
            ctx.out(f"Changed since the last trust: {', '.join(verdict.differences)}")
        ctx.out("It allows these commands to run on this machine:")
        ctx.out("\n".join(_runs_what(policy)))
    ctx.confirm("Trust this policy?", yes=args.yes)
    record = trust.grant(identity, policy, by=_grantor(ctx, args.yes))
    ctx.emit(
        {"status": str(TrustStatus.TRUSTED), "record": {k: v for k, v in record.to_json().items() if k != "policy"}},
        [f"TRUSTED: {policy.config_hash} for {identity.repository}", f"trusted {describe_grant(record)}"],
    )
    return 0


def _untrust(args: argparse.Namespace, ctx: Context) -> int:
    from ..policy.trust import TrustStore

    identity = ctx.repo_identity()
    removed = TrustStore(ctx.state_dir(), ctx.clock).revoke(identity)
    ctx.emit(
        {"removed": removed, "repository": identity.repository},
        f"removed {removed} trust record(s) for {identity.repository}",
    )
    return 0


def _status(args: argparse.Namespace, ctx: Context) -> int:
    from ..policy.trust import TrustStatus, describe_grant

    policy, identity, trust = _trust_context(ctx)
    verdict = trust.status(identity, policy)
    lines = [f"{verdict.status}: policy {policy.config_hash[:12]} in {identity.repository}"]
    if verdict.record is not None:
        which = (
            "trusted" if verdict.status == TrustStatus.TRUSTED else f"policy {verdict.record.config_hash[:12]} trusted"
        )
        lines.append(f"{which} {describe_grant(verdict.record)}")
    if verdict.differences:
        lines.append("changed since trusted: " + ", ".join(verdict.differences))
    if verdict.status != TrustStatus.TRUSTED:
        lines.append("review it with 'git agentops-policy show', trust it with 'git agentops-policy trust'")
    ctx.emit(verdict.to_json(), lines)
    return 0 if verdict.status == TrustStatus.TRUSTED else 1


_HANDLERS = {"check": _check, "show": _show, "trust": _trust, "untrust": _untrust, "status": _status}


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    if not args.command:
        raise AgentOpsError("USAGE", "say what to do: check, show, trust, untrust or status")
    return _HANDLERS[args.command](args, ctx)


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
