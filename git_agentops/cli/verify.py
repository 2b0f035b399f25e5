"""``git agentops-verify``: run the trusted policy's verification commands in this worktree, record evidence.

Evidence is recorded as notes on the verified commit (``git notes --ref=agentops/evidence show HEAD``), saying
that it ran in this worktree and who ran it (a person, or an agent of a run); a run never reuses such evidence:
it verifies in a clean checkout of its own. A passing, authenticated result for the same tree, command, policy and
environment is reused unless ``--fresh``. Exit 0 when every required command passed, 1 otherwise.

Before the commands, the trusted policy's 'git agentops-env' setup steps whose environment is missing or stale
here (.agentops/venv, node_modules: the lockfile, the declared dependencies, the step's options or the
interpreter changed) are run, as pre-commit and tox make theirs on first use -- the first verification after
init needs no manual step. Progress goes to stderr on a terminal; what was made is listed ("setup" in --json).
A step that cannot make its environment is ENV_SETUP_FAILED, ENV_LOCK_UNUSABLE or ENV_PYTHON_MISSING naming the
step; commands that run an interpreter nothing made are VERIFY_ENV_MISSING, naming the setup step to add.

In a run's worker worktree (it holds .agentops/mailbox/instructions.json) this is the worker's own, advisory
check before it hands off: it runs the commands of the policy the RUN IS BOUND TO (refs/agentops/runs/<run>/policy,
not the worktree's policy file, not the trust store) and the acceptance runners of the worker's own task, on the
worktree's clean HEAD, and records nothing -- when the worker hands off, the supervisor re-verifies the commit
itself in a clean checkout, and nothing run inside a worker is ever taken as proof. Setup steps are not run again
(the supervisor ran them when it made the worktree). Exit 0 when the commands pass, 1 when one fails. Refused
there (exit 3): --task naming another task, running it for another worktree than the worker's own, or with
another worker's instructions (VERIFY_WORKER_REFUSED); a run whose binding cannot be read
(VERIFY_BOUND_POLICY_UNREADABLE). Anywhere, a path an agent's sandbox hides from it (the person's trust store, the
repository's private dir) is VERIFY_PATH_HIDDEN, not a crash.

This command talks to git through plumbing subprocesses rather than pygit2: importing pygit2 alone costs more
than the whole command is allowed to add to the commands it runs.
"""

from __future__ import annotations

import argparse
import errno
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ..canonical import JsonObject
from ..errors import AgentOpsError, Usage
from .common import Context, Parser, build, run

if TYPE_CHECKING:
    from ..gitstore.checkout import Probe
    from ..model.policy import Policy
    from ..verify.core import Outcome
    from ..verify.worker import WorkerCheck

HIDDEN_ERRNOS: Final = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
"""What reading or writing a path the sandbox withholds fails with (Landlock: EACCES; a covered mount: EROFS)."""
AGENT_MARKS: Final = ("AGENTOPS_WORKER_ID", "AGENTOPS_RUN_ID", "AGENTOPS_REVIEWER")
ADVISORY: Final = (
    "advisory: nothing was recorded. When you hand off (git agentops-request handoff), the supervisor re-verifies "
    "this commit itself in a clean checkout; a check run inside a worker is never taken as proof."
)


def build_parser() -> Parser:
    parser = build("git-agentops-verify", __doc__ or "")
    parser.add_argument(
        "--task",
        metavar="ID",
        help="also run the acceptance runners this task's criteria name (in a run's worker: only its own task, "
        "whose runners run anyway)",
    )
    parser.add_argument(
        "--fresh", action="store_true", help="ignore cached evidence; run every command (a worker's check always does)"
    )
    return parser


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    try:
        return _verify(args, ctx)
    except OSError as exc:
        if exc.errno not in HIDDEN_ERRNOS:
            raise
        raise _hidden(exc, ctx) from exc


def _hidden(exc: OSError, ctx: Context) -> AgentOpsError:
    """``VERIFY_PATH_HIDDEN`` for a path this process may not read or write (never a crash: see the module doc)."""
    path = exc.filename or "a path"
    if any(ctx.env.get(name) for name in AGENT_MARKS):
        why = (
            "an agent's sandbox hides the person's trust store and the repository's private dir on purpose. In a "
            "run's worker, run git agentops-verify in your own worktree to check your commit against the run's "
            "policy; either way the supervisor re-verifies your handoff itself in a clean checkout"
        )
    else:
        why = "check its permissions"
    return AgentOpsError(
        "VERIFY_PATH_HIDDEN",
        f"{path} is not accessible here ({exc.strerror or exc}): {why}",
        details={"path": str(path), "errno": exc.errno},
    )


def _verify(args: argparse.Namespace, ctx: Context) -> int:
    from ..gitstore.checkout import probe

    where = probe(ctx.cwd)
    if where.head is None:
        raise AgentOpsError("VERIFY_NO_COMMIT", f"HEAD of {where.toplevel} has no commit yet")
    check = _worker_check(args, ctx, where.toplevel)
    if check is not None:
        return _verify_in_worker(check, ctx)
    return _verify_here(args, ctx, where)


def _worker_check(args: argparse.Namespace, ctx: Context, toplevel: Path) -> WorkerCheck | None:
    """The worker check when this is a run's worker worktree (its mailbox instructions are at its top); None for
    any other checkout. ``VERIFY_WORKER_REFUSED`` when ``$AGENTOPS_MAILBOX`` names another worker worktree."""
    from ..protocol.mailbox import INSTRUCTIONS, find_worktree, read_instructions

    if not (toplevel / INSTRUCTIONS).is_file():
        named = ctx.env.get("AGENTOPS_MAILBOX")
        if named:
            try:
                mine = find_worktree(toplevel, named)
            except AgentOpsError:  # no mailbox where it points: not a worker, as before
                return None
            raise AgentOpsError(
                "VERIFY_WORKER_REFUSED",
                f"you are a run's worker in {mine}, and {toplevel} is not your worktree: run git agentops-verify "
                "there to check your commit",
                details={"worktree": str(mine), "here": str(toplevel)},
            )
        return None
    from ..verify.worker import prepare

    instructions = read_instructions(toplevel)
    env_ids = {name: ctx.env[name] for name in ("AGENTOPS_RUN_ID", "AGENTOPS_WORKER_ID") if ctx.env.get(name)}
    return prepare(toplevel, instructions, env_ids, task_id=args.task)


def _verify_in_worker(check: WorkerCheck, ctx: Context) -> int:
    from ..verify.core import AGENT, describe
    from ..verify.worker import check_worker_commit

    outcome = check_worker_commit(
        check, environ=ctx.env, clock=ctx.clock, progress=ctx.progress if ctx.interactive else None
    )
    policy = check.policy
    steps = len(policy.setup)
    verdict = "PASSED" if outcome.passed else "FAILED"
    summary = [] if ctx.interactive else list(map(describe, outcome.records))
    summary.append(
        f"{verdict}: {outcome.commit[:12]} (tree {outcome.tree[:12]}) against the run's bound policy "
        f"{policy.config_hash[:12]} ({check.ref}), checked in worker {check.worker_id}'s worktree"
    )
    for failure in outcome.failures():
        summary.append(f"failed: {describe(failure)}")
        if failure.tail:
            summary.append(f"--- last output of {failure.command_id} ---\n{failure.tail.rstrip()[-2000:]}")
    if check.policy_moved:
        summary.append(
            f"note: instructions.json names policy {str(check.instructed_hash)[:12]}, but the run is bound to "
            f"{policy.config_hash[:12]} now (a policy transition): checked with the bound one, as the supervisor will"
        )
    if steps:
        summary.append(
            f"setup: the bound policy's {steps} setup step(s) ran in this worktree when the supervisor made it; they "
            "are not run again here (the supervisor runs them in its clean checkout)"
        )
    summary.append(ADVISORY)
    ctx.emit(_worker_json(check, outcome, AGENT.producer, AGENT.checkout, steps), summary)
    return 0 if outcome.passed else 1


def _worker_json(check: WorkerCheck, outcome: Outcome, producer: str, checkout: str, steps: int) -> JsonObject:
    return {
        **outcome.to_json(),
        "producer": producer,
        "checkout": checkout,
        "advisory": True,
        "recorded": False,
        "reverifiedBy": "supervisor",
        "policy": {
            "source": "run-binding",
            "ref": check.ref,
            "bindingCommit": check.binding_commit,
            "configHash": check.policy.config_hash,
            "instructedConfigHash": check.instructed_hash,
            "runId": check.run_id,
            "workerId": check.worker_id,
        },
        "setup": {"steps": steps, "ranHere": False},
        "taskId": check.task.id if check.task is not None else None,
    }


def _verify_here(args: argparse.Namespace, ctx: Context, where: Probe) -> int:
    from ..gitstore.backend import GitCliBackend, git_config
    from ..gitstore.identity import DEFAULT_IDENTITY, Identity
    from ..policy.load import cache_dir_for, load_policy
    from ..policy.trust import TrustStore, repo_identity, require_trusted
    from ..verify.core import AGENT, PERSON, describe, verify_checkout
    from ..verify.evidence import EvidenceStore

    worktree, common_dir = where.toplevel, where.common_dir
    config = git_config(worktree, "user.name", "user.email", "remote.origin.url")
    name, email = config.get("user.name"), config.get("user.email")
    identity = Identity(name, email) if name and email else DEFAULT_IDENTITY
    policy = load_policy(worktree, cache_dir=cache_dir_for(common_dir))
    verdict = TrustStore(ctx.state_dir(), ctx.clock).status(
        repo_identity(common_dir, config.get("remote.origin.url")), policy
    )
    task = None
    if args.task:
        from ..runs.tasks import find

        task = find(ctx.store(), args.task)[1]
    backend = GitCliBackend(
        worktree,
        environ=ctx.env,
        identity=identity,
        clock=ctx.clock,
        loose_objects=where.objects_dir if where.object_format == "sha1" else None,
    )
    in_agent = any(ctx.env.get(name) for name in AGENT_MARKS)
    provenance = AGENT if in_agent else PERSON
    require_trusted(verdict)  # before the setup below: it is the policy's too
    made = _make_environments(policy, worktree, ctx)
    outcome = verify_checkout(
        EvidenceStore(backend, common_dir / "agentops"),
        worktree=worktree,
        policy=policy,
        trust=verdict,
        environ=ctx.env,
        clock=ctx.clock,
        task=task,
        fresh=args.fresh,
        progress=ctx.progress if ctx.interactive else None,
        provenance=provenance,
        known_head=where.head,  # the probe's: HEAD and the git dir are asked of git once
        git_dir=where.git_dir,
    )
    verdict_line = (
        f"{'PASSED' if outcome.passed else 'FAILED'}: {outcome.commit[:12]} (tree {outcome.tree[:12]}), "
        f"verified in this worktree by {'an agent' if in_agent else 'you'} -- runs re-verify in a clean checkout"
    )
    summary = [verdict_line] if ctx.interactive else [*made.lines, *map(describe, outcome.records), verdict_line]
    for failure in outcome.failures():
        if failure.tail:
            summary.append(f"--- last output of {failure.command_id} ---\n{failure.tail.rstrip()[-2000:]}")
    doc = {**outcome.to_json(), "producer": provenance.producer, "checkout": provenance.checkout, "setup": made.docs}
    ctx.emit(doc, summary)
    return 0 if outcome.passed else 1


@dataclass(frozen=True, slots=True)
class Made:
    """The environments verification made before running the commands: a line and a document each."""

    lines: tuple[str, ...] = ()
    docs: tuple[JsonObject, ...] = ()


def _make_environments(policy: Policy, worktree: Path, ctx: Context) -> Made:
    """Run the policy's ``git agentops-env`` setup steps whose environment is missing or stale here, as pre-commit
    and tox make theirs on first use: the first verification after init needs no manual step.

    Only those steps: any other setup step is the person's to run in their own checkout. Each runs in process,
    with the environment a run's setup gets (the scrubbed variables and the step's own ``env``), so what works here
    works in a run. Progress on a terminal; a step that cannot make its environment raises its own code
    (``ENV_SETUP_FAILED``, ``ENV_LOCK_UNUSABLE``, ``ENV_PYTHON_MISSING``), saying which step and why it ran.
    """
    if not policy.setup:  # the freshness check, and what it imports, only for a policy that has setup steps
        return Made()
    import shlex
    import time

    from ..process.command import scrub_environment
    from .env import env_state, make_env, parse_step

    lines, docs = [], []
    progress = ctx.progress if ctx.interactive else None
    for index, step in enumerate(policy.setup):
        args = parse_step(step.argv)
        if args is None:
            continue
        env = scrub_environment(ctx.env, step.env)
        state = env_state(args, worktree, env)
        if state is None or state.ready:
            continue
        shown = step.argv if isinstance(step.argv, str) else shlex.join(step.argv)
        ctx.progress(f"setup {index}: {state.why}; making it ({shown})")
        start = time.monotonic()
        try:
            doc, line = make_env(args, worktree, env, ctx.clock, progress)
        except AgentOpsError as exc:
            code = "ENV_SETUP_FAILED" if isinstance(exc, Usage) else exc.code
            raise AgentOpsError(
                code,
                f"verification needs the environment the policy's setup step {index} makes ({state.why}), and "
                f"'{shown}' could not make it: {exc.message}",
                details={**exc.details, "step": index, "argv": step.argv},
            ) from exc
        ctx.progress(f"setup {index}: {line} ({time.monotonic() - start:.1f}s)")
        lines.append(f"setup {index}: {state.why}; made it: {line}")
        docs.append({"step": index, "argv": step.argv, "why": state.why, **doc})
    return Made(tuple(lines), tuple(docs))


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
