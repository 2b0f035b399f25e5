"""Verify a commit: run the trusted policy's commands on exactly its files and record evidence.

Two places, one procedure:

* :func:`verify_checkout` -- ``git agentops-verify``, in the caller's own worktree. It refuses a dirty checkout
  (``VERIFY_DIRTY``), but whatever git ignores there is present, so its records say ``checkout: worktree`` and a
  run never reuses them.
* :func:`verify_clean` -- the supervisor's handoffs and final gate, in a checkout it made from the commit
  (:mod:`git_agentops.gitstore.clean`): nothing but the commit's files, re-hashed before and after, and git config
  the agents cannot touch. Its records say ``producer: supervisor, checkout: clean``.

:func:`verify_checkout` is :func:`check_in_place` with the trust check before it, a verification slot around it
(:mod:`.slots`: a person's suite counts against ``[run] max_verifications`` like the supervisor's, taken only when a
command must run) and the record after it; a run's worker checking its own commit uses :func:`check_in_place` alone
-- the run's bound policy, no trust check, no slot, nothing read from or written to the evidence notes
(:mod:`.worker`).

Order of operations, and why:

1. **Trust first.** Nothing from a policy runs unless the user trusted that exact policy (``POLICY_UNTRUSTED``).
2. **A checkout that is exactly the commit**: evidence is about a commit, so the files the commands see must be
   exactly that commit's tree.
3. **Each command** runs with its argv (no shell unless the policy says so), in the checkout root, in a scrubbed
   environment, in its own process group, under its timeout -- unless a passing, authenticated record for the same
   tree, argv, policy and environment is already cached (see :mod:`.evidence`).
4. **Re-check** that no tracked file changed while the commands ran; otherwise the results describe no commit and
   nothing is recorded (``VERIFY_DIRTY`` in place, ``VERIFY_CHECKOUT_CHANGED`` in a clean checkout).
5. **Record** every result, MAC'd, as evidence notes on the commit (and passing ones on the tree).

The outcome passes when every *required* command passed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ..canonical import JsonObject, JsonValue
from ..clock import Clock
from ..envs.probe import probe
from ..errors import AgentOpsError
from ..gitstore.checkout import Head, dirty_and_untracked, head, head_changes_and_untracked
from ..model.policy import CommandSpec, Policy
from ..model.workspace import expand
from ..policy.trust import Verdict, require_trusted
from ..process.command import run_command, scrub_environment
from .evidence import (
    FOR_RUNS,
    SUPERVISOR,
    Attribution,
    EvidenceRecord,
    EvidenceStore,
    Provenance,
    Reading,
    Subject,
    cached_copy,
    environment_digest,
    make_record,
    stored_tail,
)
from .made import MadeFiles

if TYPE_CHECKING:
    from ..gitstore.clean import CleanCheckout
    from ..model.task import Task
    from ..sandbox.checkout import Wall
    from ..workspace.live import Workspace

Progress = Callable[[str], None]
PERSON: Final = Provenance("person", "worktree")
AGENT: Final = Provenance("agent", "worktree")


@dataclass(frozen=True, slots=True)
class Planned:
    command: CommandSpec
    kind: str  # "command" | "runner"
    criteria: tuple[str, ...] = ()


@dataclass
class Outcome:
    commit: str
    tree: str
    records: list[EvidenceRecord] = field(default_factory=list)
    notes_commit: str | None = None
    environment: Mapping[str, JsonValue] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.records if r.required)

    def failures(self) -> list[EvidenceRecord]:
        return [r for r in self.records if r.required and not r.passed]

    def to_json(self) -> JsonObject:
        return {
            "passed": self.passed,
            "commit": self.commit,
            "tree": self.tree,
            "notesCommit": self.notes_commit,
            "results": [r.to_json() for r in self.records],
        }


def plan(policy: Policy, task: Task | None) -> list[Planned]:
    """The policy's commands, then the acceptance runners the task's criteria name (each runner once)."""
    planned = [Planned(c, "command") for c in policy.commands]
    if task is not None:
        from ..model.task import check_runners

        check_runners(task, (r.id for r in policy.runners))
        by_runner: dict[str, list[str]] = {}
        for criterion in task.criteria:
            if criterion.runner is not None:
                by_runner.setdefault(criterion.runner, []).append(criterion.id)
        for runner_id, criteria in by_runner.items():
            runner = policy.runner(runner_id)
            assert runner is not None  # check_runners guarantees it
            planned.append(Planned(runner, "runner", tuple(criteria)))
    return planned


def describe(record: EvidenceRecord) -> str:
    if record.cached:
        state = "PASS (cached)"
    elif record.passed:
        state = "PASS"
    elif record.timed_out:
        state = "TIMEOUT"
    elif record.spawn_error:
        state = f"DID NOT START ({record.spawn_error})"
    elif record.parse_error:
        state = f"FAIL ({record.parse_error})"
    else:
        ended = f"exit {record.exit_code}" if record.exit_code is not None else f"signal {record.signal}"
        state = f"FAIL ({ended})"
    tests = record.tests
    counts = f", {tests['passed']} passed / {tests['failed']} failed / {tests['skipped']} skipped" if tests else ""
    return f"{record.command_id}: {state}{counts} in {record.duration_ms / 1000:.1f}s"


def verify_checkout(
    evidence: EvidenceStore,
    *,
    worktree: Path,
    policy: Policy,
    trust: Verdict,
    environ: Mapping[str, str],
    clock: Clock,
    task: Task | None = None,
    fresh: bool = False,
    progress: Progress | None = None,
    grace: float = 3.0,
    known_head: Head | None = None,
    provenance: Provenance = PERSON,
    git_dir: Path | None = None,
) -> Outcome:
    """Run (or reuse) every planned command on the clean HEAD of the caller's ``worktree``; record evidence.

    This is ``git agentops-verify``: it runs where the person (or an agent) is, so its records say so
    (``checkout: worktree``) and runs never reuse them. Untracked files that an earlier verification of this
    checkout created (``tests/__pycache__/``...) and that are unchanged since are not dirt (:mod:`.made`).

    Raises ``POLICY_UNTRUSTED``, ``VERIFY_DIRTY``, ``VERIFY_NO_COMMIT``, ``VERIFY_NO_COMMANDS``,
    ``TASK_RUNNER_UNKNOWN``, and ``VERIFY_ENV_OUTSIDE`` when the pre-flight finds the project's code resolving
    outside the checkout (:mod:`git_agentops.envs.probe`). A failing command is not an exception: it is a record
    with ``passed: false``.
    """
    require_trusted(trust)
    with contextlib.ExitStack() as held:

        def take_slot() -> None:  # only when a command must run: a cache hit waits for no one
            from .slots import verification_slot

            what = f"git agentops-verify in {worktree}"
            held.enter_context(
                verification_slot(evidence.private_dir, policy.max_verifications, what=what, waiting=progress)
            )

        outcome = check_in_place(
            evidence,
            worktree=worktree,
            policy=policy,
            environ=environ,
            clock=clock,
            task=task,
            fresh=fresh,
            progress=progress,
            grace=grace,
            known_head=known_head,
            provenance=provenance,
            git_dir=git_dir,
            before_run=take_slot if provenance == PERSON else None,
        )
    outcome.notes_commit, outcome.records = evidence.record(outcome.commit, outcome.tree, outcome.records)
    return outcome


def check_in_place(
    evidence: EvidenceStore | None,
    *,
    worktree: Path,
    policy: Policy,
    environ: Mapping[str, str],
    clock: Clock,
    task: Task | None = None,
    fresh: bool = False,
    progress: Progress | None = None,
    grace: float = 3.0,
    known_head: Head | None = None,
    provenance: Provenance = PERSON,
    before_run: Callable[[], None] | None = None,
    git_dir: Path | None = None,
) -> Outcome:
    """:func:`verify_checkout` without its trust check and without recording: the commands run (or, with an
    ``evidence`` store and not ``fresh``, are reused) on the clean HEAD of ``worktree``; nothing is written but the
    made-files record in the worktree's git dir. With ``evidence=None`` nothing is read from or written to the
    evidence notes (a run's worker: :mod:`.worker`). The caller decides whether ``policy`` may run. A caller that
    already asked git where ``worktree`` is (its top) and what its HEAD is passes ``git_dir`` and ``known_head``: each
    is one git call fewer (a person's verification asks once: :func:`git_agentops.gitstore.checkout.probe`).

    Raises ``VERIFY_DIRTY``, ``VERIFY_NO_COMMIT``, ``VERIFY_NO_COMMANDS``, ``TASK_RUNNER_UNKNOWN``,
    ``VERIFY_ENV_OUTSIDE``.
    """
    planned = _planned(policy, task)
    start = known_head or head(worktree)
    made = MadeFiles.load(worktree, git_dir=git_dir)
    # one git status: what is dirty, what is there already -- every entry: the files earlier verifications made are
    # dropped from it, and a cut taken before that would let them hide the dirt behind them
    changes, untracked = dirty_and_untracked(worktree, limit=None)
    dirty = made.not_dirt(changes)
    if dirty:
        raise AgentOpsError(
            "VERIFY_DIRTY",
            f"{worktree} has uncommitted changes ({', '.join(dirty[:5])}{' ...' if len(dirty) > 5 else ''}); "
            "evidence is about a commit: commit or clean them first",
            details={"paths": dirty[:50]},
        )
    before = set(untracked)
    outcome = _run_all(
        evidence,
        planned,
        cwd=worktree,
        commit=start.commit,
        tree=start.tree,
        policy=policy,
        environ=environ,
        clock=clock,
        task=task,
        fresh=fresh or evidence is None,
        progress=progress,
        grace=grace,
        provenance=provenance,
        accept=None,
        before_run=before_run,
    )
    ran = any(not r.cached for r in outcome.records)
    # one git status after the commands: did HEAD or a tracked file change, and which untracked files are there now
    after, changed, now = head_changes_and_untracked(worktree) if ran else (start.commit, [], [])
    if after != start.commit or changed:  # when nothing ran, nothing can have changed the checkout
        what = "HEAD moved" if after != start.commit else ", ".join(changed[:5])
        raise AgentOpsError(
            "VERIFY_DIRTY",
            f"the checkout changed while verifying ({what}); nothing was recorded -- a verification command must "
            "not modify tracked files",
        )
    if ran:
        with contextlib.suppress(OSError):  # a convenience (:mod:`.made`): never what decides the outcome
            made.remember([p for p in now if p not in before])
    return outcome


def verify_clean(
    evidence: EvidenceStore,
    checkout: CleanCheckout,
    *,
    commit: str,
    tree: str,
    policy: Policy,
    trust: Verdict,
    environ: Mapping[str, str],
    clock: Clock,
    task: Task | None = None,
    progress: Progress | None = None,
    grace: float = 3.0,
    wall: Wall | None = None,
    workspace: Workspace | None = None,
) -> Outcome:
    """Run (or reuse) every planned command in a supervisor-owned clean checkout of ``commit``; record evidence.

    The checkout must hold exactly ``commit`` (:meth:`CleanCheckout.inspect` was clean); afterwards its tracked
    files are re-hashed and must be unchanged (``VERIFY_CHECKOUT_CHANGED``, nothing recorded). Only records the
    supervisor produced in a clean checkout are reused. The commands' git reads no global or system config.
    With ``wall`` (a run's proofs always give one: :func:`git_agentops.verify.proof.confinement`) the commands -- and
    the pre-flight, which starts the checkout's interpreter and so its ``.pth`` files -- run confined
    (:mod:`git_agentops.sandbox.checkout`): they write the checkout, their TMPDIR and the slot's cache, nothing else.
    """
    require_trusted(trust)
    planned = _planned(policy, task)
    git_env = checkout.command_git_env()  # (re)written now: before the snapshot, not during the commands
    guarded = wall.snapshot() if wall is not None else {}
    outcome = _run_all(
        evidence,
        planned,
        cwd=checkout.root,
        commit=commit,
        tree=tree,
        policy=policy,
        environ=environ,
        clock=clock,
        task=task,
        fresh=False,
        progress=progress,
        grace=grace,
        provenance=SUPERVISOR,
        accept=FOR_RUNS,
        git_env=git_env,
        wall=wall,
        workspace=workspace,
    )
    if wall is not None and (written := wall.written(guarded)):  # before inspect: it reads the checkout's .git
        raise AgentOpsError(
            "VERIFY_CHECKOUT_CHANGED",
            f"the verification commands wrote what they may only read ({', '.join(written[:8])}); nothing was recorded",
            details={"written": written},
        )
    if any(not r.cached for r in outcome.records):
        from ..gitstore.clean import is_discovered

        drift = checkout.inspect(commit)
        if drift.changed:
            raise AgentOpsError(
                "VERIFY_CHECKOUT_CHANGED",
                f"the verification commands changed the commit's files ({drift.describe()}); nothing was recorded "
                "-- a verification command must not modify tracked files",
                details={"changed": list(drift.changed)},
            )
        planted = [p for p in drift.extra if is_discovered(p)]
        if planted:  # a command makes caches and build output, never a conftest.py: someone else wrote it
            raise AgentOpsError(
                "VERIFY_CHECKOUT_CHANGED",
                f"files that change how the tools run appeared in the checkout while the commands ran "
                f"({', '.join(planted[:8])}); nothing was recorded",
                details={"extra": planted},
            )
    outcome.notes_commit, outcome.records = evidence.record(commit, tree, outcome.records)
    return outcome


def _planned(policy: Policy, task: Task | None) -> list[Planned]:
    planned = plan(policy, task)
    if not planned:
        raise AgentOpsError(
            "VERIFY_NO_COMMANDS", f"{policy.source} defines no [[verify.commands]]: there is nothing to verify"
        )
    return planned


def _run_all(
    evidence: EvidenceStore | None,
    planned: list[Planned],
    *,
    cwd: Path,
    commit: str,
    tree: str,
    policy: Policy,
    environ: Mapping[str, str],
    clock: Clock,
    task: Task | None,
    fresh: bool,
    progress: Progress | None,
    grace: float,
    provenance: Provenance,
    accept: frozenset[Provenance] | None,
    git_env: Mapping[str, str] | None = None,
    before_run: Callable[[], None] | None = None,
    wall: Wall | None = None,
    workspace: Workspace | None = None,
) -> Outcome:
    """The pre-flight, then each planned command run or reused, as records (not yet stored); ``before_run`` is
    called once, before the first command that is not reused (a person's verification takes its slot there)."""
    argvs = [p.command.argv for p in planned]
    if wall is not None:
        environment = probe(cwd, argvs, {**scrub_environment(environ), **(git_env or {})}, clock=clock, run=wall.run)
    else:
        environment = probe(cwd, argvs, scrub_environment(environ), clock=clock)
    outcome = Outcome(commit, tree, environment=environment.to_json())
    total = len(planned)
    task_id = task.id if task is not None else None
    block = None
    if workspace is None and policy.workspace.ports:  # a person's verification: a block of ports for its commands
        from ..workspace.ports import allocate

        block = allocate(policy.workspace.ports, holder=f"verification of {commit[:12]}", environ=environ)
    workspace_env = workspace.env if workspace else (block.environment() if block else {})
    workspace_values = workspace.values if workspace else (block.values() if block else {})
    try:
        for index, item in enumerate(planned, start=1):
            attribution = Attribution(task_id, item.criteria)
            command = item.command
            env = scrub_environment(environ, command.env)
            env_digest = environment_digest(env, environment.to_json())
            hit = None
            if not fresh and evidence is not None:
                hit = evidence.cached(
                    tree,
                    argv_digest=command.argv_digest,
                    policy_hash=policy.config_hash,
                    env_digest=env_digest,
                    accept=accept,
                )
            if hit is not None:
                record = cached_copy(
                    hit, commit=commit, command=command, attribution=attribution, started_at=clock.now()
                )
            else:
                if before_run is not None:
                    before_run()
                    before_run = None
                if progress:
                    progress(f"[{index}/{total}] {command.id}: running {command.description or _shown(command)}")
                record = _run_one(
                    item,
                    cwd=cwd,
                    env={**env, **(git_env or {}), **workspace_env},  # not in the env digest
                    values=workspace_values,
                    subject=Subject(tree, commit, policy.config_hash, env_digest, environment.to_json()),
                    attribution=attribution,
                    policy=policy,
                    clock=clock,
                    grace=grace,
                    provenance=provenance,
                    wall=wall,
                )
            outcome.records.append(record)
            if progress:
                progress(f"[{index}/{total}] {describe(record)}")
    finally:
        if block is not None:
            block.release()
    return outcome


def _run_one(
    item: Planned,
    *,
    cwd: Path,
    env: Mapping[str, str],
    subject: Subject,
    attribution: Attribution,
    policy: Policy,
    clock: Clock,
    grace: float,
    provenance: Provenance,
    wall: Wall | None = None,
    values: Mapping[str, str] | None = None,
) -> EvidenceRecord:
    command = item.command
    run = wall.run if wall is not None else run_command
    # a workspace's ports are filled in only now: the argv digest (what the evidence is about) is the policy's argv
    argv = expand(command.argv, values) if values else command.argv
    result = run(argv, cwd=cwd, env=env, timeout=command.timeout, shell=command.shell, grace=grace, clock=clock)
    tests, parse_error = None, None
    if command.parser != "none":  # "none" counts nothing: the parsers (and their patterns) only for one that does
        from .parsers import parse_counts

        try:
            seen = result.output + result.tail if result.truncated else result.output
            counts = parse_counts(command.parser, seen.decode(errors="replace"), worktree=cwd)
            tests = counts.to_json() if counts is not None else None
        except AgentOpsError as exc:
            parse_error = f"{exc.code}: {exc.message}"
    passed = result.ok and parse_error is None and not (tests is not None and (tests["failed"] or tests["errors"]))
    tail = stored_tail(
        result.tail, lambda text: _redact(text, policy.deny_patterns), cut=result.output_size > len(result.tail)
    )
    reading = Reading(passed, tests, parse_error, tail)
    return make_record(command, item.kind, result, reading, subject, attribution, provenance)


def _redact(text: str, patterns: tuple[str, ...]) -> str:
    from .redact import redact  # compiling the secret rules is only worth it when there is output

    return redact(text, patterns)


def _shown(command: CommandSpec) -> str:
    return command.argv if isinstance(command.argv, str) else " ".join(command.argv)
