"""The integration as a table of steps, driven by one roll-forward loop.

An integration is a journaled transaction (:mod:`.pipeline`): each step writes the next state of the integration
record in ``run.json`` (:func:`.record.advance`, with its crash-test fault point ``integration:<status>``) before the
next step starts. Resuming after a crash is therefore not a separate code path: the roll-forward loop reads the
record afresh before every step, skips each step whose precondition the record does not meet, and runs the others
in order -- the first step not done yet is where it continues. Every step is written to be safe to repeat from its
start, which is the only place a step resumes from.

A step's precondition reads the record only (nothing remote, nothing slow); what a step must learn elsewhere -- the
target's tip, a note -- it learns in its action, which may then find there is nothing to do. An action either lets
the loop go on (None) or ends the transaction with the job's result (a refusal, a wait, the run integrated).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..gitstore.repo import Store
from ..model.integration import Integration, IntegrationStatus
from ..model.run import Run
from ..runs import state as runstate
from ..runs.jobs import Integrated, JobContext, Left, Refused, Wait

Outcome = Integrated | Refused | Wait | Left
"""How an integration job ends (see :mod:`git_agentops.runs.jobs`)."""


@dataclass(frozen=True, slots=True)
class Progress:
    """The integration record as the journal holds it before a step: what a precondition reads."""

    view: runstate.RunView
    run: Run
    integration: Integration

    @property
    def status(self) -> IntegrationStatus:
        return self.integration.status


@dataclass(frozen=True, slots=True)
class Step:
    """One row of the table: its name, when it applies, what it does and which record states it may write."""

    name: str
    when: Callable[[Progress], bool]
    act: Callable[[JobContext, Store, Progress], Outcome | None]
    writes: tuple[IntegrationStatus, ...] = ()
    """The record states (``integration:<status>`` fault points) this step's action advances through."""


def progress(store: Store, run_id: str) -> Progress:
    """The record now (a run without one reads as just requested)."""
    view = runstate.read(store, run_id)
    run = view.run()
    return Progress(view, run, run.integration or Integration(IntegrationStatus.REQUESTED))


def due(steps: Sequence[Step], now: Progress) -> Step | None:
    """The first step of ``steps`` whose precondition the record meets: where a resumed integration continues."""
    return next((step for step in steps if step.when(now)), None)


def roll_forward(
    ctx: JobContext, store: Store, steps: Sequence[Step], finish: Callable[[JobContext, Store, Progress], Outcome]
) -> Outcome:
    """Run every step whose precondition holds, in table order, re-reading the record before each; the first
    action that returns a result ends the transaction with it. Otherwise ``finish`` -- the last step, which always
    applies -- ends it."""
    for step in steps:
        now = progress(store, ctx.run_id)
        if not step.when(now):
            continue
        outcome = step.act(ctx, store, now)
        if outcome is not None:
            return outcome
    return finish(ctx, store, progress(store, ctx.run_id))
