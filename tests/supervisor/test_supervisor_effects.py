"""The supervisor's decisions as values: request actions and the scheduler return effects from a snapshot, the loop
carries them out; the integration is a table of steps. Driven in-process by the fake loop and host
(:mod:`tests.fakes`): no supervisor process, no agent, no polling."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from git_agentops import eventkinds as kinds
from git_agentops.canonical import digest
from git_agentops.clock import FixedClock
from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.journal import Change, Event
from git_agentops.gitstore.refs import read_ref, update_ref
from git_agentops.gitstore.repo import Store
from git_agentops.integrate import pipeline
from git_agentops.integrate.record import advance
from git_agentops.integrate.steps import Progress, Step, due, progress, roll_forward
from git_agentops.model.delivery import CommitId, Delivery, Digest
from git_agentops.model.integration import Integration, IntegrationStatus
from git_agentops.model.run import Role, WorkerStatus, worker_contract
from git_agentops.model.task import TaskStatus
from git_agentops.protocol import mailbox
from git_agentops.protocol.client import build_request
from git_agentops.runs import state as runstate
from git_agentops.runs import tasks as taskbook
from git_agentops.runs.jobs import Answered, Integrated, JobContext, Provisioned, Request
from git_agentops.supervisor import actions, requests, scheduler
from git_agentops.supervisor.effects import (
    Answer,
    BeginTransition,
    ChangeState,
    EndTurn,
    Log,
    Respond,
    SetWorker,
    StopWorkers,
    Submit,
    execute,
)
from git_agentops.supervisor.loop import Supervisor
from git_agentops.transition import journal as transitions

from ..conftest import commit_files, git
from ..fakes import RUN, FakeLoop, fake_policy, new_run

CRITERIA = ["it works", "it is tested"]


@pytest.fixture
def loop(repo_path: Path, store: Store, clock: FixedClock) -> FakeLoop:
    commit_files(repo_path, {"check.py": "print('ok')\n"}, "a check")
    return new_run(repo_path, store, clock)


def _request(loop: FakeLoop, worker_id: str, action: str, **fields: Any) -> Request:
    """A request as the worker would send it, as the supervisor accepted it."""
    snap = loop.snapshot()
    worker = snap.workers[worker_id]
    doc = build_request(
        {
            "workerId": worker_id,
            "generation": worker.generation,
            "contractHash": worker_contract(snap.run, worker, dict(snap.tasks)),
        },
        action,
        fields,
    )
    return Request(doc, digest(doc), digest(doc))


def _planned(loop: FakeLoop, *children: tuple[str, list[str]]) -> dict[str, str]:
    """The root task and ``children`` (title, titles depended on) planned by the handlers; title -> task id."""
    coordinator = loop.worker("coordinator")
    execute(loop, actions.plan(loop.snapshot(), coordinator, _request(loop, "coordinator", "plan", **_task("Root"))))
    ids: dict[str, str] = {}
    for title, after in children:
        request = _request(loop, "coordinator", "worker", dependencies=[ids[t] for t in after], **_task(title))
        response = execute(loop, actions.plan_child(loop.snapshot(), coordinator, request))
        assert response is not None and response["code"] == "RUN_WORKER_PLANNED"
        ids[title] = response["data"]["taskId"]
    return ids


def _task(title: str) -> dict[str, Any]:
    return {"title": title, "intent": f"do {title}", "criteria": CRITERIA}


# -- requests ----------------------------------------------------------------------------------------------------------


def test_plan_decides_one_answer_and_changes_nothing_until_the_loop_carries_it_out(loop: FakeLoop) -> None:
    request = _request(loop, "coordinator", "plan", **_task("Root"))
    effects = actions.plan(loop.snapshot(), loop.worker("coordinator"), request)
    assert [type(e) for e in effects] == [Answer]
    assert loop.run().root_task_id is None and loop.state.view.request_record(request.request_id) is None
    response = execute(loop, effects)
    assert response is not None and response["code"] == "RUN_PLAN_CREATED"
    assert loop.run().root_task_id == response["data"]["taskId"]
    record = loop.state.view.request_record(request.request_id)
    assert record is not None and record.response == response  # the answer and its idempotency record: one commit
    assert loop.event_codes()[-1] == "RUN_PLAN_CREATED"


def test_a_request_in_the_mailbox_is_answered_in_the_mailbox_and_replayed_unchanged(loop: FakeLoop) -> None:
    sent = loop.host.request(loop, "coordinator", "plan", **_task("Root"))
    coordinator = loop.worker("coordinator")
    assert requests.serve(loop, coordinator, actions.ACTIONS)
    first = mailbox.read_response(Path(coordinator.worktree))
    assert first is not None and first["code"] == "RUN_PLAN_CREATED" and first["requestId"] == sent["requestId"]
    root = loop.run().root_task_id
    mailbox.send(Path(coordinator.worktree), sent)  # the same request again: its recorded answer, nothing done twice
    assert requests.serve(loop, loop.worker("coordinator"), actions.ACTIONS)
    assert mailbox.read_response(Path(coordinator.worktree)) == first
    assert loop.run().root_task_id == root and loop.event_codes().count("RUN_PLAN_CREATED") == 1


def test_a_child_cannot_plan_and_its_refusal_changes_no_state(loop: FakeLoop) -> None:
    ids = _planned(loop, ("A", []))
    child = replace(loop.worker("coordinator"), worker_id="worker-x", role=Role.CHILD, task_id=ids["A"])
    with pytest.raises(AgentOpsError) as refused:
        actions.plan(loop.snapshot(), child, _request(loop, "coordinator", "plan", **_task("Again")))
    assert refused.value.code == "RUN_COORDINATOR_REQUIRED"


def test_a_dependency_cycle_is_refused_before_anything_is_written(loop: FakeLoop) -> None:
    ids = _planned(loop, ("A", []), ("B", ["A"]))
    replan = _request(loop, "coordinator", "worker", dependencies=[ids["B"]], taskId=ids["A"], **_task("A"))
    effects = actions.plan_child(loop.snapshot(), loop.worker("coordinator"), replan)
    before = loop.event_codes()
    with pytest.raises(AgentOpsError) as refused:
        execute(loop, effects)
    assert refused.value.code == "RUN_DEPENDENCY_CYCLE" and loop.event_codes() == before


def test_a_question_is_answered_in_the_mailbox_before_every_writer_is_fenced(loop: FakeLoop) -> None:
    coordinator = loop.worker("coordinator")
    request = _request(loop, "coordinator", "question", prompt="which colour?")
    effects = actions.question(loop.snapshot(), coordinator, request)
    assert [type(e) for e in effects] == [Answer, StopWorkers, Log]
    answer = effects[0]
    assert isinstance(answer, Answer) and answer.deliver
    assert effects[1] == StopWorkers(WorkerStatus.FENCED, effects[1].reason)  # type: ignore[union-attr]
    response = execute(loop, effects)
    assert response is not None and mailbox.read_response(Path(coordinator.worktree)) == response
    assert loop.run().status.value == "awaiting-input"
    assert loop.worker("coordinator").status is WorkerStatus.FENCED
    assert loop.stopped == [(WorkerStatus.FENCED, f"awaiting the answer to {response['data']['questionId']}")]


PROPOSAL = """version = 1
[run]
target = "main"
max_workers = 3
[sandbox]
mode = "none"
[[verify.commands]]
id = "check"
argv = ["python3", "check.py"]
timeout = 60
[[verify.commands]]
id = "check-again"
argv = ["python3", "check.py", "again"]
timeout = 60
"""


def test_a_policy_proposal_is_recorded_and_made_the_loops_business_before_it_is_answered(loop: FakeLoop) -> None:
    coordinator = loop.worker("coordinator")
    (Path(coordinator.worktree) / ".agentops").mkdir(exist_ok=True)
    (Path(coordinator.worktree) / ".agentops" / "proposed.toml").write_text(PROPOSAL)
    request = _request(
        loop,
        "coordinator",
        "policy",
        configFile=".agentops/proposed.toml",
        expectedPolicyHash=loop.policy.config_hash,
        approvals=[{"capabilityId": "command:check-again", "reason": "a second check"}],
    )
    effects = actions.HANDLERS["policy"](loop.snapshot(), coordinator, request)
    assert [type(e) for e in effects] == [BeginTransition, Answer, StopWorkers, Log]
    assert (loop.transition, transitions.pending(loop.store, RUN)) == (None, None)  # decided, nothing done yet
    response = execute(loop, effects)
    assert response is not None and response["code"] == "RUN_POLICY_PENDING"
    pending = transitions.pending(loop.store, RUN)
    assert pending is not None and loop.transition == pending.transition_id == response["data"]["transitionId"]
    assert loop.briefed == 1 and mailbox.read_response(Path(coordinator.worktree)) == response
    assert loop.run().status.value == "awaiting-input" and loop.worker("coordinator").status is WorkerStatus.FENCED


def test_a_policy_proposal_under_policy_changes_never_is_refused_before_anything_is_recorded(
    repo_path: Path, store: Store, clock: FixedClock
) -> None:
    loop = new_run(repo_path, store, clock, policy=fake_policy(run={"policy_changes": "never"}))
    request = _request(
        loop, "coordinator", "policy", configFile="p.toml", expectedPolicyHash=loop.policy.config_hash, approvals=[]
    )
    with pytest.raises(AgentOpsError) as refused:
        actions.HANDLERS["policy"](loop.snapshot(), loop.worker("coordinator"), request)
    assert refused.value.code == "RUN_POLICY_CHANGES_DISABLED" and transitions.pending(store, RUN) is None


def _provisioned_child(loop: FakeLoop, title: str = "A") -> str:
    """A child task scheduled, its provisioning job run in-process, its worker running generation 1."""
    ids = _planned(loop, (title, []))
    execute(loop, scheduler.schedule(loop.snapshot()))
    (worker_id,) = loop.jobs
    results = loop.run_jobs()
    assert isinstance(results[worker_id], Provisioned), results
    loop.set_worker(worker_id, status=WorkerStatus.RUNNING, generation=1, event="WORKER_STARTED", summary="started")
    assert loop.worker(worker_id).task_id == ids[title]
    return worker_id


def test_a_handoff_is_accepted_the_worker_stopped_then_its_delivery_job_submitted(loop: FakeLoop) -> None:
    worker_id = _provisioned_child(loop)
    worker = loop.worker(worker_id)
    head = commit_files(Path(worker.worktree), {"src/a.txt": "a\n"}, "part A")
    effects = actions.handoff(loop.snapshot(), worker, _request(loop, worker_id, "handoff"))
    assert [type(e) for e in effects] == [SetWorker, Respond, EndTurn]
    assert effects[0] == SetWorker(
        worker_id, "WORKER_HANDING_OFF", f"{worker_id} hands off {head[:12]}", {"status": WorkerStatus.HANDING_OFF}
    )
    assert execute(loop, effects) is None  # the delivery job answers
    accepted = mailbox.read_response(Path(worker.worktree))
    assert accepted is not None and accepted["code"] == "RUN_HANDOFF_ACCEPTED" and accepted["data"] == {"head": head}
    assert loop.host.killed == [worker_id] and list(loop.jobs) == [worker_id]
    assert loop.event_codes()[-2:] == ["WORKER_HANDING_OFF", "WORKER_STOPPED_FOR_HANDOFF"]
    assert loop.worker(worker_id).status is WorkerStatus.HANDING_OFF and loop.worker(worker_id).process is None


def test_a_handoff_of_a_dirty_checkout_is_refused_and_nothing_stops(loop: FakeLoop) -> None:
    worker_id = _provisioned_child(loop)
    worker = loop.worker(worker_id)
    commit_files(Path(worker.worktree), {"src/a.txt": "a\n"}, "part A")
    (Path(worker.worktree) / "src" / "a.txt").write_text("changed, not committed\n")
    loop.host.request(loop, worker_id, "handoff")
    assert requests.serve(loop, worker, actions.ACTIONS)
    refused = mailbox.read_response(Path(worker.worktree))
    assert refused is not None and refused["code"] == "RUN_DELIVERY_DIRTY" and "src/a.txt" in refused["message"]
    assert loop.worker(worker_id).status is WorkerStatus.RUNNING and not loop.jobs and not loop.host.killed


def test_a_coordinator_finalizing_with_a_child_pending_is_refused(loop: FakeLoop) -> None:
    _planned(loop, ("A", []))
    with pytest.raises(AgentOpsError) as refused:
        actions.finalize(loop.snapshot(), loop.worker("coordinator"), _request(loop, "coordinator", "finalize"))
    assert refused.value.code == "RUN_DELIVERIES_PENDING"


def test_finalize_records_the_integration_requested_then_submits_it_after_the_turn(loop: FakeLoop) -> None:
    ids = _planned(loop, ("A", []))
    _deliver(loop, ids["A"], git(Path(loop.run().repository), "rev-parse", "HEAD"))
    coordinator = loop.worker("coordinator")
    request = _request(loop, "coordinator", "finalize")
    effects = actions.finalize(loop.snapshot(), coordinator, request)
    assert [type(e) for e in effects] == [ChangeState, Respond, EndTurn]
    execute(loop, effects)
    integration = loop.run().integration
    assert integration is not None and integration.status is IntegrationStatus.REQUESTED
    assert integration.request is not None and integration.request.request_id == request.request_id
    assert loop.worker("coordinator").status is WorkerStatus.HANDING_OFF and list(loop.jobs) == ["coordinator"]


# -- the scheduler -----------------------------------------------------------------------------------------------------


def _deliver(loop: FakeLoop, task_id: str, commit: str) -> None:
    def delivered(change: Change, view: runstate.RunView) -> None:
        task = view.task(task_id)
        taskbook.put(
            change,
            replace(
                task,
                status=TaskStatus.DELIVERED,
                delivery=Delivery(CommitId(commit), Digest("0" * 64), scheduler.child_worker_id(task_id), 1),
            ),
        )

    runstate.mutate(
        loop.journal,
        delivered,
        Event(
            kinds.TASK_DELIVERED,
            f"{task_id} delivered",
            {
                "taskId": task_id,
                "workerId": scheduler.child_worker_id(task_id),
                "generation": 1,
                "commit": commit,
                "deliveryDigest": "0" * 64,
            },
        ),
    )


def _submitted(effects: tuple[Any, ...]) -> list[str]:
    return [e.worker_id for e in effects if isinstance(e, Submit)]


def test_the_scheduler_provisions_ready_tasks_in_plan_order_and_leaves_dependents_waiting(loop: FakeLoop) -> None:
    ids = _planned(loop, ("A", []), ("B", ["A"]), ("C", []))
    effects = scheduler.schedule(loop.snapshot())
    assert [type(e) for e in effects] == [ChangeState, Submit, ChangeState, Submit]
    assert _submitted(effects) == [scheduler.child_worker_id(ids["A"]), scheduler.child_worker_id(ids["C"])]
    execute(loop, effects)
    tasks = loop.snapshot().tasks
    assert [tasks[ids[t]].status for t in "ABC"] == [TaskStatus.RUNNING, TaskStatus.PLANNED, TaskStatus.RUNNING]
    assert loop.worker(scheduler.child_worker_id(ids["A"])).status is WorkerStatus.ASSIGNED
    assert scheduler.schedule(loop.snapshot()) == ()  # nothing else is ready: nothing is decided twice


def test_the_scheduler_starts_no_more_than_max_workers_children(
    repo_path: Path, store: Store, clock: FixedClock
) -> None:
    loop = new_run(repo_path, store, clock, policy=fake_policy(max_workers=1))
    ids = _planned(loop, ("A", []), ("B", []))
    assert _submitted(scheduler.schedule(loop.snapshot())) == [scheduler.child_worker_id(ids["A"])]


def test_a_dependent_starts_once_its_dependency_is_delivered_with_that_delivery_merged_in(loop: FakeLoop) -> None:
    ids = _planned(loop, ("A", []), ("B", ["A"]))
    execute(loop, scheduler.schedule(loop.snapshot()))
    loop.jobs.clear()  # A's provisioning is not the point here
    delivered = commit_files(Path(loop.run().repository), {"src/a.txt": "a\n"}, "A's delivery")
    _deliver(loop, ids["A"], delivered)
    effects = scheduler.schedule(loop.snapshot())
    assert _submitted(effects) == [scheduler.child_worker_id(ids["B"])]
    job = effects[-1]
    assert isinstance(job, Submit) and isinstance(job.job, partial)
    provision = job.job.args[1]
    assert isinstance(provision, scheduler.Provision) and provision.deliveries == ((ids["A"], delivered),)


# -- the integration: a table of steps ---------------------------------------------------------------------------------


def _at(loop: FakeLoop, status: IntegrationStatus, **fields: Any) -> Progress:
    now = progress(loop.store, RUN)
    return replace(now, integration=Integration(status, **fields))


def test_resuming_an_integration_is_finding_the_first_step_due(loop: FakeLoop) -> None:
    steps = pipeline.STEPS
    for status, candidate, expected in [
        (IntegrationStatus.REQUESTED, None, "build"),
        (IntegrationStatus.FAILED, None, "build"),
        (IntegrationStatus.PREPARED, None, "build"),
        (IntegrationStatus.PREPARED, "c" * 40, "adopt"),
        (IntegrationStatus.REVIEWED, "c" * 40, "adopt"),
        (IntegrationStatus.PUBLISHED, "c" * 40, "receipt"),
        (IntegrationStatus.RECEIPTED, "c" * 40, None),
    ]:
        step = due(steps, _at(loop, status, candidate=candidate, base="b" * 40))
        assert (step.name if step else None) == expected, status
    gated = _at(loop, IntegrationStatus.REVIEWED, candidate="c" * 40, base="b" * 40)
    after_adopt = due(steps[1:], gated)
    assert after_adopt is not None and after_adopt.name == "publish"  # a gated candidate is published, not rebuilt


@pytest.mark.event_data_free  # seeds the integration record at a step, not as the step writes it
def test_the_adopt_step_records_a_target_the_crash_left_moved_as_published(loop: FakeLoop) -> None:
    repo = Path(loop.run().repository)
    base = git(repo, "rev-parse", "main")
    candidate = git(repo, "commit-tree", f"{base}^{{tree}}", "-p", base, "-m", "the candidate")
    advance(
        loop.ctx,
        loop.store,
        "INTEGRATION_PREPARED",
        "x",
        status=IntegrationStatus.REVIEWED,
        base=base,
        candidate=candidate,
    )
    update_ref(loop.store, "refs/heads/main", candidate, base, "the CAS, before the crash")
    now = progress(loop.store, RUN)
    step = due(pipeline.STEPS, now)
    assert step is not None and step.name == "adopt"
    assert step.act(loop.ctx, loop.store, now) is None
    after = progress(loop.store, RUN)
    assert after.status is IntegrationStatus.PUBLISHED and loop.event_codes()[-1] == "INTEGRATION_PUBLISHED"
    nxt = due(pipeline.STEPS, after)
    assert nxt is not None and nxt.name == "receipt"


@pytest.mark.event_data_free  # seeds the integration record at a step, not as the step writes it
def test_the_publish_step_leaves_the_record_when_the_target_moved_and_the_build_step_follows(loop: FakeLoop) -> None:
    repo = Path(loop.run().repository)
    base = git(repo, "rev-parse", "main")
    candidate = git(repo, "commit-tree", f"{base}^{{tree}}", "-p", base, "-m", "the candidate")
    advance(
        loop.ctx,
        loop.store,
        "INTEGRATION_PREPARED",
        "x",
        status=IntegrationStatus.REVIEWED,
        base=base,
        candidate=candidate,
    )
    moved = commit_files(repo, {"elsewhere.txt": "x\n"}, "someone else's commit")
    publish = next(s for s in pipeline.STEPS if s.name == "publish")
    before = loop.event_codes()
    now = progress(loop.store, RUN)
    assert publish.act(loop.ctx, loop.store, now) is None
    assert loop.event_codes() == before and read_ref(loop.store, "refs/heads/main") == moved
    rest = pipeline.STEPS[pipeline.STEPS.index(publish) + 1 :]
    nxt = due(rest, progress(loop.store, RUN))
    assert nxt is not None and nxt.name == "build"


@pytest.mark.event_data_free  # seeds the integration record at a step, not as the step writes it
def test_the_roll_forward_loop_rereads_the_record_before_each_step(loop: FakeLoop) -> None:
    ran: list[str] = []

    def to(status: IntegrationStatus, name: str) -> Any:
        def act(ctx: JobContext, store: Store, now: Progress) -> None:
            ran.append(name)
            advance(ctx, store, "INTEGRATION_PREPARED", name, status=status)

        return act

    table = (
        Step("one", lambda p: p.status is IntegrationStatus.REQUESTED, to(IntegrationStatus.PREPARED, "one")),
        Step("again", lambda p: p.status is IntegrationStatus.REQUESTED, to(IntegrationStatus.FAILED, "again")),
        Step("two", lambda p: p.status is IntegrationStatus.PREPARED, to(IntegrationStatus.VERIFIED, "two")),
    )
    outcome = roll_forward(
        loop.ctx, loop.store, table, lambda ctx, store, now: Integrated(str(now.status), Answered({}))
    )
    assert ran == ["one", "two"] and outcome == Integrated("verified", Answered({}))
    ran.clear()
    assert roll_forward(
        loop.ctx, loop.store, table, lambda ctx, store, now: Integrated("done", Answered({}))
    ) == Integrated("done", Answered({}))
    assert ran == []  # resumed after the last step: nothing is done again


# -- the binding -------------------------------------------------------------------------------------------------------


def test_rebinding_swaps_the_policy_the_jobs_context_and_the_confinement_together(loop: FakeLoop) -> None:
    trust = loop.ctx.trust
    supervisor = Supervisor(loop.store, RUN, policy=loop.policy, trust=trust, environ={}, clock=loop.ctx.clock)
    try:
        new = fake_policy(max_workers=1)
        supervisor.rebind(new, b"version = 1\n")
        assert supervisor.policy is new and supervisor.ctx.policy is new and supervisor.bound.confine.policy is new
        assert supervisor.workers.policy is new and supervisor.workers.confine is supervisor.bound.confine
        assert supervisor.snapshot().policy is new and supervisor.ctx.policy_file is not None
    finally:
        supervisor.executor.shutdown()
