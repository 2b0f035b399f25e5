"""What a handler asks the supervisor loop to do, as values: effects, which the loop alone carries out, in order.

A request action (:mod:`.actions`) or the scheduler (:mod:`.scheduler`) reads a :class:`~.ports.Snapshot` and
returns a tuple of effects instead of writing state, answering, stopping or submitting jobs itself. That makes
each decision a value a test can assert (``tests/fakes.py`` runs them with no supervisor process), and puts every
write in one place -- :func:`execute` -- in the order the handler gave:

| effect              | carried out as                                                                            |
|---------------------|-------------------------------------------------------------------------------------------|
| ``ChangeState``     | one compare-and-swap mutation of the run state recording its event                        |
| ``Answer``          | the request's answer: the mutation and the request's idempotency record, in one commit    |
| ``SetWorker``       | one worker record updated by CAS, recording its event                                     |
| ``Respond``         | a response written into a worker's mailbox now (best effort: a checkout may be gone)      |
| ``StopWorkers``     | every live worker stopped and recorded with a status (a job's worker excepted)            |
| ``EndTurn``         | the worker given its turn grace, stopped and accounted; then the effects ``then`` returns |
| ``Submit``          | a job started in a job thread on a worker's behalf                                        |
| ``BeginTransition`` | a policy transition recorded ``prepared``: from then on the loop's business               |
| ``Log``             | a line in the supervisor's log                                                            |

An effect that fails raises (an ``AgentOpsError`` from a CAS mutation, say) and the effects after it are not
carried out -- exactly as when the handler made the calls itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..canonical import JsonObject
from ..eventkinds import EventCode
from ..gitstore.journal import Change, Event
from ..gitstore.repo import Store
from ..model.request import ResponseDoc
from ..model.run import Worker, WorkerStatus
from ..runs import state as runstate
from ..runs.jobs import Answered, JobResult, Request
from ..transition import journal as transitions
from ..transition.record import Transition
from .ports import Loop
from .requests import answer


@dataclass(frozen=True, slots=True)
class ChangeState:
    """A compare-and-swap mutation of the run state: ``fn(change, view)`` applied, ``event`` recorded."""

    fn: Callable[[Change, runstate.RunView], object]
    event: Event


@dataclass(frozen=True, slots=True)
class Answer:
    """The request answered ``code``: ``fn`` applied and the request's record written in one commit
    (:func:`.requests.answer`); ``deliver`` also writes the response into the worker's mailbox at once, before the
    effects that follow (a question is answered before its asker is stopped)."""

    worker: Worker
    request: Request
    code: EventCode
    message: str
    fn: Callable[[Change, runstate.RunView], JsonObject | None]
    deliver: bool = False


@dataclass(frozen=True, slots=True)
class SetWorker:
    """One worker record updated by CAS with ``changes``, recording ``event``."""

    worker_id: str
    event: EventCode
    summary: str
    changes: Mapping[str, Any]


def set_worker(worker_id: str, *, event: EventCode, summary: str, **changes: Any) -> SetWorker:
    """A :class:`SetWorker` (its changes frozen)."""
    return SetWorker(worker_id, event, summary, MappingProxyType(dict(changes)))


@dataclass(frozen=True, slots=True)
class Respond:
    """``response`` written into the worker's mailbox now; a worktree that is gone has no one to tell."""

    worker: Worker
    response: ResponseDoc


@dataclass(frozen=True, slots=True)
class StopWorkers:
    """Every live worker whose job is not running stopped, and recorded ``status`` because of ``reason``."""

    status: WorkerStatus
    reason: str


@dataclass(frozen=True, slots=True)
class EndTurn:
    """``worker`` given the run's turn grace to end its turn (:mod:`.turns`), then stopped and accounted; ``then``
    gets the accounting and whether it ended by itself, and returns the effects to carry out then (a later tick)."""

    worker: Worker
    then: Callable[[Mapping[str, Any], bool], Sequence[Effect]]


@dataclass(frozen=True, slots=True)
class Submit:
    """``job`` run in a job thread on the worker's behalf, with its own repository handle."""

    worker_id: str
    job: Callable[[Store], JobResult]


@dataclass(frozen=True, slots=True)
class BeginTransition:
    """``transition`` recorded ``prepared`` with the proposed file's bytes; from then on the loop drives it, and the
    instructions of every worker say so (crash point ``policy:prepared``: recorded, the request not answered)."""

    transition: Transition
    data: bytes


@dataclass(frozen=True, slots=True)
class Log:
    """A line for the supervisor's log."""

    message: str


Effect = ChangeState | Answer | SetWorker | Respond | StopWorkers | EndTurn | Submit | BeginTransition | Log


def execute(loop: Loop, effects: Iterable[Effect]) -> ResponseDoc | None:
    """Carry out ``effects`` in order (the loop thread only); the response of the last :class:`Answer`, if any."""
    answered: ResponseDoc | None = None
    for effect in effects:
        match effect:
            case ChangeState(fn, event):
                runstate.mutate(loop.journal, fn, event)
            case Answer(worker, request, code, message, fn, deliver):
                answered = answer(loop, worker, request, code, message, fn)
                if deliver:  # the request's answer in the mailbox now, before what the next effects do
                    unwritten = loop.respond(worker, Answered(answered))
                    if unwritten is not None:
                        raise unwritten
                    loop.state.refresh()
            case SetWorker(worker_id, event, summary, changes):
                loop.set_worker(worker_id, event=event, summary=summary, **changes)
            case Respond(worker, response):
                # unwritten: the agent is stopped all the same; a worktree that is gone has no one to tell
                loop.respond(worker, Answered(response.copy()))
            case StopWorkers(status, reason):
                loop.stop_all(status, reason)
            case EndTurn(worker, then):
                loop.end_turn(worker, _continuation(loop, then))
            case Submit(worker_id, job):
                loop.submit(worker_id, job)
            case BeginTransition(transition, data):
                transitions.begin(loop.state.store, transition, data)
                loop.ctx.fault("policy:prepared")
                loop.track_transition(transition.transition_id)
            case Log(message):
                loop.log(message)
    return answered


def _continuation(
    loop: Loop, then: Callable[[Mapping[str, Any], bool], Sequence[Effect]]
) -> Callable[[Mapping[str, Any], bool], None]:
    def carry_out(accounted: Mapping[str, Any], by_itself: bool) -> None:
        execute(loop, then(accounted, by_itself))

    return carry_out
