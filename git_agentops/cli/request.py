"""``git agentops-request``: send a request from a worker to its run supervisor and wait for the response.

This is how an agent talks to its supervisor: run it anywhere inside the worker's worktree (or with
``$AGENTOPS_MAILBOX`` naming the mailbox). It writes one request, atomically, to the worktree's mailbox, carrying
the worker id, generation and contract hash of ``.agentops/mailbox/instructions.json``, and waits for the answer.
When the answer is that the contract changed, it re-reads the instructions and sends the same action once more
with the new contract hash.

actions and their fields:
  plan       --title --intent --criterion... (2-5)       create the root task (coordinator, once)
  worker     --title --intent --criterion... [--depends-on TASK_ID...] [--task-id TASK_ID]
                                                         plan a child task, or re-plan one not yet started
  handoff    [--source-file PATH...]                     deliver this task (files only for a no-change delivery)
  question   --prompt TEXT                               ask the user; writers stop until it is answered
  finalize   [--source-file PATH...]                     integrate every delivery (coordinator)
  policy     --file PATH --expected-policy-hash HASH (--approve CAPABILITY --reason TEXT)...
                                                         propose a complete new policy (coordinator); one
                                                         approval per added or changed command:<id>,
                                                         runner:<id>, setup:<index> or host:<name>
                                                         (--approval CAPABILITY=REASON is the same)

Prints ``CODE: message`` and the response's data (``--json``: the response document). Exit 0 when the
supervisor accepted the request, 1 when it refused it or no answer came within --timeout (REQUEST_TIMEOUT),
2 for missing or misplaced fields (nothing is sent), 3 outside a worker worktree (REQUEST_NO_MAILBOX).
An agent may be stopped while it waits (after a handoff or a question): that is expected.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from ..errors import AgentOpsError
from .common import Context, Parser, build, run, seconds

DEFAULT_TIMEOUT = 600.0

# option dest -> the request field it fills
_FIELDS: dict[str, str] = {
    "title": "title",
    "intent": "intent",
    "criterion": "criteria",
    "depends_on": "dependencies",
    "task_id": "taskId",
    "source_file": "sourceFiles",
    "prompt": "prompt",
    "config_file": "configFile",
    "expected_policy_hash": "expectedPolicyHash",
    "approval": "approvals",
}
_OPTION: dict[str, str] = {field: "--" + dest.replace("_", "-") for dest, field in _FIELDS.items()}


def _approval(text: str) -> tuple[str, str]:
    capability, sep, reason = text.partition("=")
    if not sep or not capability.strip() or not reason.strip():
        raise argparse.ArgumentTypeError(f"expected CAPABILITY=REASON (e.g. 'command:lint=read-only'), not {text!r}")
    return capability.strip(), reason


def build_parser() -> Parser:
    parser = build("git-agentops-request", __doc__ or "")
    from ..model.request import ACTIONS

    parser.add_argument("action", metavar="ACTION", choices=ACTIONS, help=f"one of: {', '.join(ACTIONS)}")
    parser.add_argument("--title", help="task title (plan, worker)")
    parser.add_argument("--intent", help="what the task is for (plan, worker)")
    parser.add_argument("--criterion", action="append", metavar="TEXT", help="an acceptance criterion; repeat")
    parser.add_argument("--depends-on", action="append", metavar="TASK_ID", help="a dependency (worker); repeat")
    parser.add_argument("--task-id", metavar="TASK_ID", help="re-plan this not-yet-started task (worker)")
    parser.add_argument(
        "--source-file", action="append", metavar="PATH", help="a source file of a no-change delivery; repeat"
    )
    parser.add_argument("--prompt", help="the question to ask (question)")
    parser.add_argument(
        "--file", "--config-file", dest="config_file", metavar="PATH", help="the proposed policy file (policy)"
    )
    parser.add_argument("--expected-policy-hash", metavar="HASH", help="config hash of the policy it replaces")
    parser.add_argument(
        "--approval",
        action="append",
        type=_approval,
        metavar="CAPABILITY=REASON",
        help="approval of one changed capability (command:<id>, runner:<id>, setup:<n>, host:<name>); repeat",
    )
    parser.add_argument(
        "--approve", action="append", metavar="CAPABILITY", help="a capability the proposal adds or changes; repeat"
    )
    parser.add_argument("--reason", action="append", metavar="TEXT", help="why, for the --approve before it")
    parser.add_argument(
        "--timeout",
        type=seconds(),
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"how long to wait for the response (default {DEFAULT_TIMEOUT:.0f})",
    )
    return parser


def fields_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The request fields the options name; ``USAGE`` when the action lacks one or does not take one."""
    from ..model.request import field_problems
    from ..protocol.client import approvals

    action: str = args.action
    if args.approve or args.reason:
        if len(args.approve or ()) != len(args.reason or ()):
            raise AgentOpsError("USAGE", "each --approve CAPABILITY needs one --reason TEXT")
        pairs = list(zip(args.approve, args.reason, strict=True))
        if any(not c.strip() or not r.strip() for c, r in pairs):
            raise AgentOpsError("USAGE", "--approve and --reason may not be blank")
        args.approval = [*(args.approval or []), *((c.strip(), r) for c, r in pairs)]
    fields: dict[str, Any] = {}
    for dest, field in _FIELDS.items():
        value = getattr(args, dest)
        if value is None:
            continue
        fields[field] = approvals(value) if dest == "approval" else value
    if action == "worker":
        fields.setdefault("dependencies", [])
    if action == "policy":
        fields.setdefault("approvals", [])  # a change of settings alone needs none
    missing, misplaced = field_problems(action, fields)  # the request's one field table, named as options here
    if missing:
        shown = ", ".join(_OPTION[f] for f in missing)
        raise AgentOpsError("USAGE", f"{action} needs {shown} (see 'git-agentops-request --help')")
    if misplaced:
        raise AgentOpsError("USAGE", f"{action} does not take {', '.join(_OPTION[f] for f in misplaced)}")
    return fields


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    from ..protocol import client, mailbox

    fields = fields_from_args(args)  # before anything is looked up or written
    worktree = mailbox.find_worktree(ctx.cwd, ctx.env.get("AGENTOPS_MAILBOX"))
    generation = _own_generation(ctx.env.get("AGENTOPS_GENERATION"))
    ctx.progress(f"{args.action}: waiting for the supervisor (up to {args.timeout:.0f}s)...")
    response = client.call(worktree, args.action, fields, timeout=args.timeout, generation=generation)
    ctx.emit(response, client.describe(response))
    return 0 if response["ok"] else 1


def _own_generation(text: str | None) -> int | None:
    """The generation an agent was started as (``$AGENTOPS_GENERATION``): its fencing token, when it has one."""
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise AgentOpsError("USAGE", f"AGENTOPS_GENERATION must be a positive integer, not {text!r}")
    return int(text)


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
