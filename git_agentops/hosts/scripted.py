"""The scripted agent: a deterministic worker that follows a recipe instead of a model, through the same mailbox
protocol as a model-driven agent (:mod:`git_agentops.protocol.client`), so the demo and the tests exercise the
real supervisor:

* **coordinator** -- runs its recipe steps (idempotent: an empty commit is skipped, so a restarted generation
  replays them harmlessly), asks its question once, plans the root task and each recipe task not yet planned (by
  title, dependencies mapped to task ids, in dependency order), proposes its policy change once and, when that
  transition is complete, re-plans the tasks it names; then watches until every child is delivered and requests
  ``finalize``. A blocked child ends it with status 2 once no other child can still deliver.
* **child** -- plays attempt ``min(generation, N)`` of its recipe task (found by title): a failing first attempt
  and a fixed second one rehearse the supervisor's restart path.

Every effect outside this process (the supervisor, git and commands, sleeping, logging) is passed in, so tests
drive it with fakes (:mod:`git_agentops.hosts.scripted_process` wires the real ones). Files are written through
:func:`resolve_contained`, so a planted symlink cannot redirect them. ``exit`` ends it with its code. The
supervisor stops it while it waits for a handoff's or a question's answer: that is the protocol working.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ..canonical import JsonObject, JsonValue
from ..clock import Clock
from ..errors import AgentOpsError, RequestTimeout
from ..gitstore.private import resolve_contained
from ..model.instructionsdoc import InstructionsDoc
from ..model.request import ResponseDoc
from ..model.task import REPAIR_TITLE, TaskStatus
from ..protocol import mailbox
from .recipe import (
    Commit,
    Delete,
    Exit,
    PolicyChange,
    Question,
    RawRequest,
    Recipe,
    Request,
    Run,
    Sleep,
    Step,
    Task,
    Write,
)

RAW_REQUEST_TIMEOUT: Final = 30.0
GIT_TIMEOUT: Final = 120.0
POLL: Final = 0.1
SYNC_TIMEOUT: Final = 30.0  # how long the instructions may lag behind an accepted plan/worker request
OUTPUT_TAIL: Final = 2000  # characters of a command's output copied to the log


@dataclass(frozen=True, slots=True)
class Ran:
    """What a command did: its exit code (None when it could not start, timed out or was signalled)."""

    exit_code: int | None
    output: str = ""
    problem: str = ""  # why there is no exit code


CallFn = Callable[[str, Mapping[str, JsonValue]], ResponseDoc]  # (action, fields) -> response
RunFn = Callable[[Sequence[str], Path, float], Ran]  # (argv, cwd, timeout) -> what it did
LogFn = Callable[[str], None]
SleepFn = Callable[[float], None]
InstructionsFn = Callable[[], InstructionsDoc]
RawFn = Callable[[bytes], ResponseDoc | None]  # send bytes as request.json -> its response, None if none


def make_runner(env: Mapping[str, str], *, clock: Clock) -> RunFn:
    """A :data:`RunFn` over :func:`git_agentops.process.run_command` with the agent's own environment."""
    from ..process.command import run_command

    def run(argv: Sequence[str], cwd: Path, timeout: float) -> Ran:
        result = run_command(list(argv), cwd=cwd, env=env, timeout=timeout, clock=clock, tail_bytes=OUTPUT_TAIL * 4)
        output = result.tail.decode("utf-8", "replace")
        if result.spawn_error:
            return Ran(None, output, f"could not start: {result.spawn_error}")
        if result.timed_out:
            return Ran(None, output, f"timed out after {timeout:g}s")
        if result.exit_code is None:
            return Ran(None, output, f"killed by signal {result.signal}")
        return Ran(result.exit_code, output)

    return run


def mailbox_raw(worktree: Path, *, timeout: float = RAW_REQUEST_TIMEOUT) -> RawFn:
    """A :data:`RawFn` writing bytes verbatim as the request and waiting for the response with their digest."""

    def send(data: bytes) -> ResponseDoc | None:
        digest = mailbox.send_raw(worktree, data)
        try:
            return mailbox.wait_response(worktree, digest, timeout=timeout)
        except RequestTimeout:
            return None

    return send


class _Exit(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class _Agent:
    def __init__(
        self,
        worktree: Path,
        recipe: Recipe,
        *,
        call: CallFn,
        log: LogFn,
        run: RunFn,
        sleep: SleepFn,
        instructions: InstructionsFn,
        raw: RawFn,
        poll: float,
    ) -> None:
        self.worktree = worktree
        self.recipe = recipe
        self.call_fn = call
        self.log = log
        self.run_fn = run
        self.sleep = sleep
        self.instructions = instructions
        self.raw = raw
        self.poll = poll

    # -- talking to the supervisor -------------------------------------------------------------------------------

    def call(self, action: str, fields: Mapping[str, JsonValue]) -> ResponseDoc:
        self.log(f"request {action}" + (f" {dict(fields)}" if fields else ""))
        started = time.perf_counter()
        response = self.call_fn(action, fields)
        self._log_response(response, (time.perf_counter() - started) * 1000)
        return response

    def _log_response(self, response: ResponseDoc, elapsed_ms: float | None = None) -> None:
        data = _data(response)
        took = f" ({elapsed_ms:.1f} ms)" if elapsed_ms is not None else ""
        self.log(f"response {response['code']}: {response['message']}" + (f" {dict(data)}" if data else "") + took)

    def ask(self, prompt: str) -> None:
        """Ask ``prompt`` unless it was answered already; then wait until the instructions carry the answer."""
        if self._answer(self.instructions(), prompt, None) is not None:
            self.log(f"question already answered: {prompt!r}")
            return
        response = self.call("question", {"prompt": prompt})
        if not response["ok"]:
            return
        question_id = _data(response).get("questionId")
        self.log("waiting for the answer (the supervisor normally stops this process meanwhile)")
        while (answer := self._answer(self.instructions(), prompt, question_id)) is None:
            self.sleep(self.poll)
        self.log(f"answer: {answer!r}")

    @staticmethod
    def _answer(instructions: InstructionsDoc, prompt: str, question_id: JsonValue) -> str | None:
        for entry in instructions["answers"]:
            if (question_id is not None and entry["questionId"] == question_id) or entry["prompt"] == prompt:
                return str(entry["answer"])
        return None

    # -- steps -----------------------------------------------------------------------------------------------------

    def steps(self, steps: Sequence[Step], what: str) -> None:
        for number, step in enumerate(steps, start=1):
            self.log(f"{what} step {number}/{len(steps)}: {_describe(step)}")
            self.step(step)

    def step(self, step: Step) -> None:
        match step:
            case Write(path, content):
                target = resolve_contained(self.worktree, path)
                if target.is_dir():
                    raise AgentOpsError("PATH_NOT_REGULAR", f"cannot write {path}: it is a directory")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content, encoding="utf-8")
            case Delete(path):
                self._delete(path)
            case Commit(message):
                self._commit(message)
            case Run(argv, timeout):
                ran = self.run_fn(argv, self.worktree, timeout)
                if ran.output.strip():
                    self.log(f"output (tail):\n{ran.output.rstrip()[-OUTPUT_TAIL:]}")
                self.log(f"exit code {ran.exit_code}" if ran.exit_code is not None else f"no exit code: {ran.problem}")
            case Request(action, source_files):
                self.call(action, {"sourceFiles": list(source_files)} if source_files else {})
            case Question(prompt):
                self.ask(prompt)
            case RawRequest(data):
                response = self.raw(self._fill(data).encode("utf-8"))
                if response is None:
                    self.log(f"no response to the raw request within {RAW_REQUEST_TIMEOUT:g}s; carrying on")
                else:
                    self._log_response(response)
            case Sleep(seconds):
                self.sleep(seconds)
            case Exit(code):
                raise _Exit(code)

    def _fill(self, text: str) -> str:
        """Raw requests may name this worker: {worker_id}, {generation} and {contract_hash} are filled in."""
        doc = self.instructions()
        return (
            text.replace("{worker_id}", str(doc["workerId"]))
            .replace("{generation}", str(doc["generation"]))
            .replace("{contract_hash}", str(doc["contractHash"]))
        )

    def _delete(self, path: str) -> None:
        relative = Path(path)
        # the parent directories may be symlinks that stay inside; the last segment is removed, never followed
        parent = resolve_contained(self.worktree, relative.parent) if relative.parent != Path(".") else self.worktree
        target = parent / relative.name
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
        else:
            self.log(f"{path} does not exist; nothing to delete")

    def _git(self, *args: str, ok: tuple[int, ...] = (0,)) -> int:
        ran = self.run_fn(["git", *args], self.worktree, GIT_TIMEOUT)
        if ran.exit_code not in ok:
            why = f"exit code {ran.exit_code}" if ran.exit_code is not None else ran.problem
            raise AgentOpsError("GIT_FAILED", f"git {' '.join(args)} failed ({why}): {ran.output.strip()[-500:]}")
        assert ran.exit_code is not None
        return ran.exit_code

    def _commit(self, message: str) -> None:
        self._git("add", "-A")
        # the mailbox is excluded through info/exclude; should it not be, it still never goes into a commit
        self._git("rm", "-r", "-q", "--cached", "--ignore-unmatch", "--", mailbox.MAILBOX)
        merging = self._git("rev-parse", "-q", "--verify", "MERGE_HEAD", ok=(0, 1)) == 0  # concluding a merge
        if not merging and self._git("diff", "--cached", "--quiet", ok=(0, 1)) == 0:
            self.log("nothing to commit; skipped")
            return
        self._git("commit", "-q", "-m", message)
        self.log("committed")

    # -- roles -----------------------------------------------------------------------------------------------------

    def coordinate(self) -> int:
        recipe = self.recipe
        self.steps(recipe.coordinator.steps, "coordinator")
        if recipe.coordinator.question:
            self.ask(recipe.coordinator.question)
        if self.instructions()["rootTaskId"] is None:
            plan = recipe.plan
            fields = {"title": plan.title, "intent": plan.intent, "criteria": [c.to_request() for c in plan.criteria]}
            response = self.call("plan", fields)
            if not response["ok"]:
                return 1
            root = _data(response).get("taskId")
            self._sync(lambda doc: doc["rootTaskId"] is not None and doc["rootTaskId"] == (root or doc["rootTaskId"]))
        else:
            self.log("the root task exists already")
        for task in recipe.planning_order():
            if not self._plan_child(task):
                return 1
        if recipe.coordinator.policy is not None and not self._policy(recipe.coordinator.policy):
            return 0  # proposed, or not complete yet: end the turn; the supervisor starts it again when it ends
        if recipe.coordinator.one_shot:
            return self._act_and_end_turn()
        return self._wait_and_finalize()

    def _act_and_end_turn(self) -> int:
        """One-shot: finalize when every child is delivered, otherwise end the turn and wait to be woken."""
        instructions = self.instructions()
        children = [t for t in instructions["tasks"] if t["id"] != instructions["rootTaskId"]]
        if instructions.get("wake"):
            self.log(f"woken: {instructions['wake']}")
        blocked = [t for t in children if t["status"] == TaskStatus.BLOCKED]
        if blocked and all(t["status"] in ("blocked", "delivered") for t in children):
            for task in blocked:
                self.log(f"task {task['title']!r} ({task['id']}) is blocked: {task['blockedReason']}")
            return 2
        if children and all(t["status"] == TaskStatus.DELIVERED for t in children) and self.recipe.coordinator.finalize:
            return 0 if self.call("finalize", {})["ok"] else 1
        self.log("ending my turn; the supervisor wakes me when something needs me")
        return 0

    def _policy(self, change: PolicyChange) -> bool:
        """Propose ``change`` once; True when its transition ended (the tasks to re-plan re-planned, if complete)."""
        policy = self.instructions()["policy"]
        mine = [t for t in policy["transitions"] if t["configFile"] == change.file]
        if not mine:
            self.step(Write(change.file, change.content))
            approvals: list[JsonValue] = [
                {"capabilityId": c, "classification": "non-dangerous", "reason": r} for c, r in change.approvals
            ]
            fields: JsonObject = {
                "configFile": change.file,
                "expectedPolicyHash": policy["configHash"],
                "approvals": approvals,
            }
            self.call("policy", fields)
            return False
        if mine[-1]["stage"] not in ("complete", "refused"):
            self.log(f"the policy transition {mine[-1]['transitionId']} is {mine[-1]['stage']}")
            return False
        if mine[-1]["stage"] == "complete":
            tasks = {t["title"]: t for t in self.instructions()["tasks"]}
            for name, criteria in change.replan:
                task = next(t for t in self.recipe.tasks if t.name == name)
                wanted = [c.to_request() for c in criteria]
                current = tasks.get(task.title)
                if current is None or [(c["description"], c.get("runner")) for c in current["criteria"]] == [
                    (c.description, c.runner) for c in criteria
                ]:
                    continue
                replanned: JsonObject = {
                    "title": task.title,
                    "intent": task.intent,
                    "criteria": wanted,
                    "taskId": current["id"],
                }
                self.call("worker", {**replanned, "dependencies": list(current["dependencies"])})
        return True

    def _plan_child(self, task: Task) -> bool:
        ids = {entry["title"]: entry["id"] for entry in self.instructions()["tasks"]}
        if task.title in ids:
            self.log(f"task {task.name!r} is planned already ({ids[task.title]})")
            return True
        dependencies = []
        for name in task.depends_on:
            title = next(t.title for t in self.recipe.tasks if t.name == name)
            if title not in ids:
                self.log(f"task {task.name!r}: dependency {name!r} is not among the run's tasks; giving up")
                return False
            dependencies.append(ids[title])
        fields = {
            "title": task.title,
            "intent": task.intent,
            "criteria": [c.to_request() for c in task.criteria],
            "dependencies": dependencies,
        }
        response = self.call("worker", fields)
        if not response["ok"]:
            return False
        planned = _data(response).get("taskId")
        self._sync(
            lambda doc: any(t["id"] == planned or (planned is None and t["title"] == task.title) for t in doc["tasks"])
        )
        return True

    def _sync(self, reflects: Callable[[InstructionsDoc], bool]) -> None:
        """Wait until the instructions reflect what the supervisor just accepted.

        The supervisor answers first and rewrites every worker's instructions right after, so reading them at
        once may still show the old task list and contract hash; the next request would then bind a stale hash.
        """
        for _ in range(int(SYNC_TIMEOUT / self.poll) if self.poll > 0 else 1):
            if reflects(self.instructions()):
                return
            self.sleep(self.poll)
        self.log(f"the instructions still do not show it after {SYNC_TIMEOUT:g}s; carrying on")

    def _wait_and_finalize(self) -> int:
        expected = {task.title for task in self.recipe.tasks}
        shown = ""
        while True:
            instructions = self.instructions()
            if instructions["runStatus"] == "complete":
                self.log("the run is complete")
                return 0
            children = [t for t in instructions["tasks"] if t["id"] != instructions["rootTaskId"]]
            blocked = [t for t in children if t["status"] == TaskStatus.BLOCKED]
            if blocked and all(t["status"] in ("blocked", "delivered") for t in children):  # nothing else can move
                for task in blocked:
                    self.log(f"task {task['title']!r} ({task['id']}) is blocked: {task['blockedReason']}")
                return 2
            delivered = {t["title"] for t in children if t["status"] == TaskStatus.DELIVERED}
            if len(delivered) == len(children) and expected <= delivered:
                break
            status = ", ".join(f"{t['title']}: {t['status']}" for t in children)
            if status != shown:
                self.log(f"waiting for {len(children) - len(delivered)} of {len(children)} tasks ({status})")
                shown = status
            self.sleep(self.poll)
        if not self.recipe.coordinator.finalize:
            # Idle rather than exit: an exited coordinator is a failure the supervisor would repair.
            self.log("every task is delivered; finalize = false, so waiting here until the run ends")
            while self.instructions()["runStatus"] == "active":
                self.sleep(max(self.poll, 0.5))
            return 0
        return 0 if self.call("finalize", {})["ok"] else 1

    def child(self, instructions: InstructionsDoc, generation: int) -> int:
        own = instructions["task"]
        if own is None:
            self.log("no task is assigned to this worker; nothing to do")
            return 1
        extra = own.get("extra")
        repair = extra.get("repair") if isinstance(extra, Mapping) else None
        repairing = isinstance(repair, Mapping)
        title = own["title"]
        if isinstance(repair, Mapping):  # a repair task: the recipe's repair attempts of the task it repairs
            title = next((t["title"] for t in instructions["tasks"] if t["id"] == repair.get("taskId")), title)
            while self.recipe.task_titled(title) is None and title.startswith(REPAIR_TITLE):
                title = title.removeprefix(REPAIR_TITLE)  # a repair of a repair
        task = self.recipe.task_titled(title)
        where = f"recipe {self.recipe.path}"
        if task is None:
            raise AgentOpsError("RUN_RECIPE_INVALID", f"{where} has no task titled {title!r} ({own['id']})")
        if repairing and not task.repair:
            raise AgentOpsError("RUN_RECIPE_INVALID", f"{where}: task {task.name!r} has no repair attempts")
        number, attempt = task.attempt_for(generation, repairing=repairing)
        what = "repair attempt" if repairing else "attempt"
        total = len(task.repair if repairing else task.attempts)
        self.log(f"task {task.name!r} ({own['id']}), generation {generation}: {what} {number}/{total}")
        self.steps(attempt.steps, f"attempt {number}")
        self.log("attempt done")
        return 0


def run_agent(
    worktree: Path,
    recipe: Recipe,
    *,
    call: CallFn,
    log: LogFn,
    run: RunFn,
    sleep: SleepFn = time.sleep,
    instructions: InstructionsFn | None = None,
    raw: RawFn | None = None,
    generation: int | None = None,
    poll: float = POLL,
) -> int:
    """Play ``recipe`` in ``worktree`` for the role its instructions give; returns the agent's exit status.

    0 done (a coordinator's finalize was accepted, or a child played its attempt), 1 a refused plan/worker/finalize
    request or a stale start, 2 a child task became blocked, N for an ``exit = N`` step. ``generation`` is the
    one the agent was started as (default: the instructions'); when the instructions name another, this process
    is stale and does nothing. ``instructions`` and ``raw`` default to the worktree's mailbox. Raises
    ``RUN_RECIPE_INVALID`` (a child whose task the recipe lacks), ``GIT_FAILED``, ``REQUEST_TIMEOUT``, and
    ``PATH_ESCAPE``/``PATH_NOT_REGULAR`` for a write or delete a symlink would lead out of the worktree or onto a
    directory.
    """
    read = instructions or (lambda: mailbox.read_instructions(worktree))  # schema-checked
    agent = _Agent(
        worktree,
        recipe,
        call=call,
        log=log,
        run=run,
        sleep=sleep,
        instructions=read,
        raw=raw or mailbox_raw(worktree),
        poll=poll,
    )
    first = read()
    own_generation = first["generation"] if generation is None else generation
    if own_generation != first["generation"]:
        log(f"started as generation {own_generation}, but the instructions are for {first['generation']}: stale")
        return 1
    log(f"{first['role']} {first['workerId']}, generation {own_generation} of run {first['runId']}")
    log(f"recipe {recipe.path} (sha256 {recipe.digest[:12]})")
    if first["diagnostic"]:
        log(f"diagnostic from the supervisor: {first['diagnostic']}")
    try:
        status = agent.coordinate() if first["role"] == "coordinator" else agent.child(first, own_generation)
    except _Exit as done:
        log(f"exit {done.code}")
        return done.code
    log(f"finished with status {status}")
    return status


def _data(response: ResponseDoc) -> Mapping[str, JsonValue]:
    """A response's ``data`` object (empty when it has none)."""
    data = response.get("data")
    return data if isinstance(data, Mapping) else {}


def _describe(step: Step) -> str:
    match step:
        case Write(path, content):
            return f"write {path} ({len(content.encode('utf-8'))} bytes)"
        case Delete(path):
            return f"delete {path}"
        case Commit(message):
            return f"commit {message!r}"
        case Run(argv, timeout):
            return f"run {list(argv)} (timeout {timeout:g}s)"
        case Request(action, source_files):
            return f"request {action}" + (f" with source files {list(source_files)}" if source_files else "")
        case Question(prompt):
            return f"question {prompt!r}"
        case RawRequest(data):
            return f"raw request ({len(data.encode('utf-8'))} bytes)"
        case Sleep(seconds):
            return f"sleep {seconds:g}s"
        case Exit(code):
            return f"exit {code}"


def review_report(recipe: Recipe, reviewer: str, review_input: Mapping[str, JsonValue]) -> JsonObject:
    """The report the recipe's ``[[reviewers]]`` entry named ``reviewer`` gives on this candidate.

    Every criterion of every task is judged ``pass`` when the verdict is approve and ``unknown`` otherwise; the
    findings are the recipe's. ``RUN_RECIPE_INVALID`` when the recipe has no such reviewer.
    """
    entry = next((r for r in recipe.reviewers if r.name == reviewer), None)
    if entry is None:
        raise AgentOpsError("RUN_RECIPE_INVALID", f"the recipe has no [[reviewers]] entry named {reviewer!r}")
    result = "pass" if entry.verdict == "approve" else "unknown"
    return {
        "reviewer": reviewer,
        "verdict": entry.verdict,
        "summary": f"scripted review by {reviewer} of {str(review_input.get('candidate', ''))[:12]}",
        "criteria": [
            {"taskId": t["id"], "id": c["id"], "result": result}
            for t in _objects(review_input.get("tasks", []))
            for c in _objects(t.get("criteria", []))
        ],
        "findings": [{"severity": f.severity, "message": f.message, "blocking": f.blocking} for f in entry.findings],
    }


def _objects(value: JsonValue) -> list[Mapping[str, JsonValue]]:
    """The objects of a JSON array (the review input's tasks, a task's criteria); none when it is not one."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [item for item in value if isinstance(item, Mapping)]
    return []
