"""``git agentops-run``: start, supervise and inspect runs of several agents on this repository.

    start --goal TEXT [--host NAME] [--recipe FILE] [--target BRANCH] [--budget DURATION] [--detach] [--progress]
    supervise RUN [--take-over [--wait SECONDS]] [--progress]   serve an existing run (after a crash, a pause,
                           with --detach elsewhere); --take-over fetches it from the remote and serves it on this
                           machine once the other machine's lease has expired (RUN_LEASE_HELD names the holder)
    status [RUN]           run status, budget, workers and tasks (the newest run by default)
    list [--all] [--remote NAME]   every run in this repository; --all: a board -- status, what each waits for,
                           active time, tokens, age; --remote: the remote's runs too (fetched read-only)
    log [RUN]              the run's events, oldest first, with why under a failure (the newest run by default)
    pause RUN | stop RUN   ask the supervisor to stop the writers (stop also fences the run)
    resume RUN [--add-budget AMOUNT]... [--no-supervise]   AMOUNT: 30m, $2.50 or 50k tokens
    answer RUN QUESTION TEXT
    approve RUN TRANSITION | refuse RUN TRANSITION [--reason TEXT]   decide a coordinator's policy change
    queue [TARGET] [--all] a target's merge queue: its entries, their state, what each waits for
    clean RUN              remove an ended run's worktrees, each after its unhanded-off work is saved to a
                           salvage ref (a worktree whose work cannot be saved is kept)
    salvage RUN [--restore WORKER[/GENERATION]] [--into DIR]   list a run's salvaged work, or restore it into a
                           new worktree exactly as the agent left it
    watch [RUN]            a live view of a run in the terminal (reads only; q quits)
    report RUN [--html FILE]   what a run did: Markdown, or one self-contained HTML file
    demo [--dir DIR] [--keep] | demo --print-recipe   an end-to-end run on a scratch repository, or its recipe

In the foreground, start and supervise return when the run ends: exit 0 complete, 1 blocked, budget-limited,
paused or stopped, 3 refused; on a terminal (or with --progress) they print a line on stderr per planned task,
generation, handoff, delivery, refusal and block as it happens, and a blocked run ends with why. With --detach,
start returns once a supervisor is running.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import AgentOpsError
from ..model.run import RunStatus
from .common import Context, Parser, build, run, seconds, subcommands
from .runinfo import list_runs, log, show_status

if TYPE_CHECKING:
    from ..runs.controls import Stopped
    from ..supervisor.loop import Supervisor


def build_parser() -> Parser:
    parser = build("git-agentops-run", __doc__ or "")
    add = subcommands(parser)
    start = add("start", "create a run and supervise it")
    start.add_argument("--goal", required=True, help="what the run must achieve (immutable)")
    start.add_argument("--host", help="agent host for the workers (default: the policy's run.default_host)")
    start.add_argument("--recipe", type=Path, help="recipe for the built-in scripted agent")
    start.add_argument("--target", help="branch to integrate into (default: the policy's run.target)")
    start.add_argument("--budget", help="active-time budget, like 90m or 1h30m (default: the policy's)")
    start.add_argument("--detach", action="store_true", help="supervise in the background and return")
    start.add_argument("--progress", action="store_true", help=PROGRESS_HELP)
    supervise = add("supervise", "serve an existing run until it ends")
    supervise.add_argument("run_id", metavar="RUN")
    supervise.add_argument(
        "--take-over", action="store_true", help="fetch the run from the remote and serve it on this machine"
    )
    supervise.add_argument("--remote", help="with --take-over: the remote (default: the policy's, else origin)")
    supervise.add_argument(
        "--wait",
        type=seconds(zero=True),
        default=None,
        metavar="SECONDS",
        help="with --take-over: wait this long for another machine's lease to expire (default: refuse at once)",
    )
    supervise.add_argument("--progress", action="store_true", help=PROGRESS_HELP)
    status = add("status", "show a run")
    status.add_argument("run_id", metavar="RUN", nargs="?")
    listing = add("list", "list the runs of this repository (--all: a board of them; --remote: the remote's too)")
    listing.add_argument("--all", action="store_true", help="what each waits for, its spend and its age")
    listing.add_argument("--remote", metavar="NAME", help="also the runs on this remote (fetched, read only)")
    log = add("log", "show a run's events, oldest first")
    log.add_argument("run_id", metavar="RUN", nargs="?", help="the run (default: the newest)")
    log.add_argument("--limit", type=int, default=0, help="only the newest N events")
    for name, text in (
        ("pause", "pause a run (writers stop; resume continues)"),
        ("stop", "stop a run for good (resume can still revive it)"),
    ):
        add(name, text).add_argument("run_id", metavar="RUN")
    resume = add("resume", "make a run active again and supervise it in the background")
    resume.add_argument("run_id", metavar="RUN")
    resume.add_argument(
        "--add-budget",
        action="append",
        metavar="AMOUNT",
        help="extend a budget: active time (30m), dollars ($2.50) or tokens (50k tokens); repeat for several",
    )
    resume.add_argument("--no-supervise", action="store_true", help="only mark it active")
    answer = add("answer", "answer a worker's question")
    answer.add_argument("run_id", metavar="RUN")
    answer.add_argument("question_id", metavar="QUESTION")
    answer.add_argument("text", metavar="TEXT")
    answer.add_argument("--no-supervise", action="store_true", help="only record the answer")
    from . import queue, remotecontrol, report, review, salvage, transition, watch  # heavy imports run later

    remotecontrol.add_options(answer)

    for decision in (*transition.configure(add), review.configure(add)):
        remotecontrol.add_options(decision)
    queue.configure(add)
    salvage.configure(add)

    watch.configure(add("watch", "a live view of a run (reads only; q quits)"))
    report.configure(add("report", "what a run did, as Markdown or one self-contained HTML file"))
    demo = add("demo", "run the built-in end-to-end demo on a scratch repository")
    demo.add_argument("--dir", type=Path, help="where to build the scratch repository")
    demo.add_argument("--keep", action="store_true", help="keep the scratch repository")
    demo.add_argument(
        "--print-recipe", action="store_true", help="print the scripted agent's recipe the demo plays (TOML) and exit"
    )
    return parser


PROGRESS_HELP = "print what the run does on stderr as it happens, even when stderr is not a terminal"


def _logger(ctx: Context, run_dir: Path, *, echo: bool = True) -> Any:
    from ..gitstore.private import write_private

    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "supervisor.log"
    if not path.exists():
        write_private(run_dir, "supervisor.log", b"")

    def log(message: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {message}"
        with path.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")
        if echo:
            ctx.progress(line)

    return log


def _supervisor(ctx: Context, run_id: str, *, echo: bool = True) -> Supervisor:
    """The run's supervisor, not serving yet; it refuses an untrusted policy itself, after stopping leftovers."""
    from ..lease.claim import machine_id
    from ..policy.trust import TrustStore
    from ..runs.create import bound_policy
    from ..runs.state import run_dir
    from ..supervisor.loop import Supervisor
    from ..transition.journal import base_policy

    store = ctx.store()
    policy = bound_policy(store, run_id)
    # trust is of the policy the run started under: a transition binds its change to this run only
    verdict = TrustStore(ctx.state_dir(), ctx.clock).status(ctx.repo_identity(), base_policy(store, run_id))
    return Supervisor(
        store,
        run_id,
        policy=policy,
        trust=verdict,
        environ=ctx.env,
        clock=ctx.clock,
        log=_logger(ctx, run_dir(store, run_id), echo=echo),
        machine=machine_id(store, ctx.state_dir()),
        lease_ttl=_lease_ttl(ctx),
    )


def _lease_ttl(ctx: Context) -> float:
    """``AGENTOPS_LEASE_TTL`` (seconds a lease lasts unrenewed; tests shorten it), else the default."""
    from ..lease.record import DEFAULT_TTL

    text = ctx.env.get("AGENTOPS_LEASE_TTL")
    try:
        return float(text) if text else DEFAULT_TTL
    except ValueError:
        raise AgentOpsError("USAGE", f"AGENTOPS_LEASE_TTL must be a number of seconds, not {text!r}") from None


def _take_over(ctx: Context, args: argparse.Namespace) -> None:
    """``supervise --take-over``: the run fetched from the remote and moved to this machine (lease.claim)."""
    from ..lease.claim import machine_id, take_over
    from ..runs.create import repo_root
    from .sync import default_remote

    store = ctx.store()
    remote = args.remote or default_remote(ctx)
    found = take_over(
        store,
        args.run_id,
        remote=remote,
        machine=machine_id(store, ctx.state_dir()),
        root=repo_root(store),
        clock=ctx.clock,
        wait=args.wait,
        environ=ctx.env,
    )
    if found is not None:
        ctx.progress(f"taking over {args.run_id} from machine {found.holder} (term {found.term})")


def _supervise(ctx: Context, run_id: str, *, progress: bool = False) -> str:
    """Serve the run in this process until it ends; with ``progress`` (or on a terminal), say what it does as it
    happens (:mod:`.progress`) instead of echoing the supervisor's own log."""
    from ..sandbox.namespace import set_dumpable

    set_dumpable(False)  # its /proc files (environ, maps, mem) are closed to agents, even to an agent that is root
    follow = progress or ctx.interactive
    supervisor = _supervisor(ctx, run_id, echo=not follow)

    def terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    if not follow:
        return str(supervisor.serve())
    from .progress import Follower

    def say(line: str) -> None:
        print(line, file=ctx.stderr, flush=True)

    follower = Follower(ctx.store(), run_id, say).start()
    try:
        return str(supervisor.serve())
    finally:
        follower.stop()


def _ended(ctx: Context, run_id: str, status: str) -> int:
    """The result of a foreground run: ``RUN: STATUS`` (the ``--json`` document as before) and, for a blocked run,
    why -- the task blocked first and its last failure (:mod:`git_agentops.runs.why`)."""
    lines = [f"{run_id}: {status}"]
    if status == RunStatus.BLOCKED and not ctx.json:
        from ..runs import state as runstate
        from ..runs.why import cause_lines, causes
        from ..watch.view import clean

        try:
            found = causes(ctx.store(), runstate.read(ctx.store(), run_id))
        except AgentOpsError as exc:  # the run ended all the same; only its story could not be read
            found, lines = [], [*lines, f"why: unknown ({exc.code}: {exc.message})"]
        if found:
            lines += ["why:", *(f"  {clean(line, 2000)}" for line in cause_lines(found))]
        lines.append(f"'git agentops-run status {run_id}' and 'git agentops-run log {run_id}' say more")
    ctx.emit({"runId": run_id, "status": status}, lines)
    return _exit_for(status)


def _stop_agents(ctx: Context, run_id: str, why: str, *, wait: float = 15.0) -> list[Stopped] | None:
    """After pause/stop: wait for the run's supervisor to stop its workers and exit, then stop what is left running
    (everything, when its supervisor had died). None when the supervisor is still busy after ``wait`` seconds."""
    try:
        supervisor = _supervisor(ctx, run_id)
    except AgentOpsError as exc:  # the run is stopped all the same; only its processes could not be looked at
        ctx.warn(exc.code, f"could not look for agent processes left running: {exc.message}")
        return None
    deadline = time.monotonic() + wait
    while (stopped := supervisor.stop_unsupervised(why)) is None:
        if time.monotonic() > deadline:
            return None
        time.sleep(0.1)
    return stopped


def _exit_for(status: str) -> int:
    return 0 if status == RunStatus.COMPLETE else 1


def _start(args: argparse.Namespace, ctx: Context) -> int:
    from ..policy.load import cache_dir_for, load_policy
    from ..policy.trust import TrustStore
    from ..runs.create import create_run

    store = ctx.store()
    policy = load_policy(ctx.worktree(), cache_dir=cache_dir_for(store.common_dir))
    verdict = TrustStore(ctx.state_dir(), ctx.clock).status(ctx.repo_identity(), policy)
    recipe = args.recipe.resolve() if args.recipe else None
    _sandbox_warning(ctx, policy)  # RUN_SANDBOX_UNAVAILABLE before anything is created
    run_id = create_run(
        store,
        goal=args.goal,
        policy=policy,
        trust=verdict,
        host=args.host,
        recipe=recipe,
        target=args.target,
        budget=args.budget,
        environ=dict(ctx.env),
        clock=ctx.clock,
    )
    from ..runs import state as runstate
    from ..runs.create import target_warnings

    for code, warning in target_warnings(store, runstate.read(store, run_id).run().target, policy.remote):
        ctx.warn(code, warning)
    if os.getuid() == 0:  # said once the run exists, so a refusal before it stays one clean error
        ctx.warn(
            "RUN_AGENTS_AS_ROOT",
            "agents run as root: in their own user namespace they hold no capability and cannot read the "
            "supervisor's /proc files, but every file of root's is theirs to read where the sandbox allows; "
            "run as an ordinary user where you can",
        )
    if args.detach:
        # the service managers: imported by the commands that start one
        from ..supervisor.spawn import spawn_supervisor

        spawned = spawn_supervisor(store, run_id, cwd=ctx.cwd, env=ctx.env)
        ctx.emit(
            {"runId": run_id, "detached": True, **spawned.to_json()},
            [run_id, f"supervising in the background ({spawned.describe()}); 'git agentops-run status {run_id}'"],
        )
        return 0
    if not ctx.json:
        ctx.out(run_id)
        sys.stdout.flush()
    return _ended(ctx, run_id, _supervise(ctx, run_id, progress=args.progress))


def _sandbox_warning(ctx: Context, policy: Any) -> str | None:
    """Warn (``RUN_UNSANDBOXED``) when agents would run without the kernel sandbox, and say why; refuse with
    ``RUN_SANDBOX_UNAVAILABLE`` when the policy requires it and it cannot be had."""
    from ..sandbox.plan import choose_mode

    mode, why = choose_mode(policy.sandbox_mode, policy.sandbox_required, policy.sandbox_level)
    if mode == "none":
        ctx.warn("RUN_UNSANDBOXED", f"agents run without the sandbox ({why}): they can write what you can write")
        return why
    if why:
        ctx.warn("RUN_SANDBOX_WEAKER", f"agents run at sandbox level {mode}: {why}")
        return why
    return None


def _control(args: argparse.Namespace, ctx: Context) -> int:
    from ..model.policy import budget_amount
    from ..runs import controls as runs

    store = ctx.store()
    from_stop = False  # resumed from a stop (blocked, paused, budget-limited...)
    if args.command == "pause":
        result = runs.pause(store, args.run_id)
    elif args.command == "stop":
        result = runs.stop(store, args.run_id)
    elif args.command == "answer":
        result = runs.answer(store, args.run_id, args.question_id, args.text, ctx.clock)
    else:
        seconds, dollars, tokens = 0, 0.0, 0
        for amount in args.add_budget or ():
            try:
                more = budget_amount(amount)
            except ValueError as exc:
                raise AgentOpsError("USAGE", str(exc)) from None
            seconds, dollars, tokens = seconds + more[0], dollars + more[1], tokens + more[2]
        from ..runs.state import read

        from_stop = read(store, args.run_id).run().status not in (RunStatus.ACTIVE, RunStatus.AWAITING_INPUT)
        result = runs.resume(store, args.run_id, ctx.clock, add_budget=seconds, add_cost_usd=dollars, add_tokens=tokens)
    doc: dict[str, Any] = {"runId": args.run_id, "status": str(result.status)}
    lines = [f"{args.run_id}: {result.status}"]
    if args.command in ("pause", "stop"):
        stopped = _stop_agents(ctx, args.run_id, f"the run was {'paused' if args.command == 'pause' else 'stopped'}")
        doc["stoppedProcesses"] = [s.to_json() for s in stopped] if stopped is not None else None
        # its systemd unit or launchd job goes too: nothing restarts it
        from ..supervisor.spawn import release_supervisor

        doc["supervisorUnitRemoved"] = release_supervisor(store, args.run_id, ctx.env)
        if stopped is None:
            lines.append("its supervisor is still finishing a job; it stops the rest of the run when the job ends")
        elif stopped:
            lines.append(runs.stopped_note(stopped))
    if args.command in ("resume", "answer") and not getattr(args, "no_supervise", False):
        from ..runs.create import bound_policy

        _sandbox_warning(ctx, bound_policy(store, args.run_id))
        from .spawn import supervise_in_background

        # resumed from a stop: a supervisor still holding the run (its loop has not seen the stop) starts it again
        supervise_in_background(ctx, args.run_id, doc, lines, restart=from_stop)
    ctx.emit(doc, lines)
    return 0


def _demo(args: argparse.Namespace, ctx: Context) -> int:
    import shutil
    import tempfile

    from ..demo.scenario import recipe, run_demo

    if args.print_recipe:  # a complete, working recipe to start one's own from
        text = recipe()
        ctx.emit({"recipe": text}, text.removesuffix("\n"))
        return 0
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="agentops-demo-", dir=args.dir)).resolve()

    def say(text: str) -> None:
        if not ctx.json:
            ctx.out(text)
            sys.stdout.flush()

    try:
        summary = run_demo(root, environ=ctx.env, say=say)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    ok = summary["status"] == RunStatus.COMPLETE and summary["receipt"]["ok"]
    lines = [f"run {summary['runId']}: {summary['status']} in {summary['seconds']}s"]
    for task in summary["tasks"]:
        lines.append(
            f"  {task['title']:<10} {task['status']:<10} generation {task['generation']}  "
            f"delivery {(task['delivery'] or '-')[:12]}"
        )
    lines.append(f"  verification failures repaired: {summary['repairs']}")
    lines.append(f"  merge order: {' -> '.join(summary['mergeOrder'])}")
    lines.append(f"  reviews: {', '.join(r['reviewer'] + ' ' + r['verdict'] for r in summary['reviews'])}")
    verdicts = summary["receipt"]["verdicts"]
    signer = ", ".join(p for v in verdicts for p in v.get("principals", []))
    lines.append(
        f"  receipt on {(summary['candidate'] or '-')[:12]}: "
        + (f"valid, signed by {signer}" if summary["receipt"]["ok"] else "INVALID")
    )
    lines.append(f"kept in {root}" if args.keep else "scratch repository removed (--keep keeps it)")
    ctx.emit({**summary, "kept": bool(args.keep)}, lines)
    return 0 if ok else 1


def remotecontrol_remote(args: argparse.Namespace, ctx: Context) -> str | None:
    """The remote a decision goes through as a signed control, or None to act here (:mod:`.remotecontrol`)."""
    from .remotecontrol import remote_for

    return remote_for(args, ctx)


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    if args.command == "start":
        return _start(args, ctx)
    if args.command == "supervise":
        if args.take_over:
            _take_over(ctx, args)
        return _ended(ctx, args.run_id, _supervise(ctx, args.run_id, progress=args.progress))
    if args.command == "status":
        return show_status(args, ctx)
    if args.command == "list":
        return list_runs(args, ctx)
    if args.command == "log":
        return log(args, ctx)
    if args.command == "answer" and (remote := remotecontrol_remote(args, ctx)) is not None:
        from .remotecontrol import send

        return send(args, ctx, remote)
    if args.command in ("pause", "stop", "resume", "answer"):
        return _control(args, ctx)
    if args.command in ("approve", "refuse"):
        from .transition import handle, refuse_agent

        if args.command == "approve":
            refuse_agent(ctx)  # an agent's approval is refused before anything is sent anywhere
        if (remote := remotecontrol_remote(args, ctx)) is not None:
            from .remotecontrol import send

            return send(args, ctx, remote)
        return handle(args, ctx)
    if args.command == "review":
        from .review import review

        return review(args, ctx, remotecontrol_remote(args, ctx) if args.run_id else None)
    if args.command == "reviewers":
        from .review import reviewers

        return reviewers(ctx)
    if args.command == "demo":
        return _demo(args, ctx)
    if args.command == "clean":
        from .salvage import clean

        return clean(args, ctx, _supervisor(ctx, args.run_id))
    if args.command == "salvage":
        from .salvage import salvage

        return salvage(args, ctx)
    if args.command == "queue":
        from .queue import show

        return show(args, ctx)
    if args.command == "watch":
        from .watch import watch

        return watch(args, ctx)
    if args.command == "report":
        from .report import report

        return report(args, ctx)
    raise AgentOpsError(
        "USAGE", "say what to do: start, supervise, status, list, log, pause, resume, stop, answer, approve, refuse"
    )


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)


if __name__ == "__main__":
    raise SystemExit(main())
