"""The scripted agent: recipe validation, a child's attempts on a real git worktree, the coordinator's planning.

The supervisor is faked: ``call`` records requests and answers them, and the coordinator's instructions come
from a small in-memory run that plans, delivers and blocks tasks as the test says. The last tests run the real
process (``python -m git_agentops.cli.agent``) against a fake supervisor thread on a real mailbox.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from git_agentops.clock import FixedClock
from git_agentops.errors import AgentOpsError
from git_agentops.hosts.recipe import Commit, Criterion, Recipe, Request, Run, Write, load_recipe
from git_agentops.hosts.scripted import Ran, make_runner, run_agent
from git_agentops.protocol import mailbox

from ..conftest import git, make_repo

HASH = "c" * 64

RECIPE = """
[plan]
title = "Calculator"
intent = "A calculator with a parser and a CLI"
criteria = ["parses expressions", { description = "the CLI prints results", runner = "acceptance" }]

[coordinator]
question = "Integers only?"
steps = [
  { write = "SKELETON.md", content = "skeleton\\n" },
  { commit = "Skeleton" },
]

[[tasks]]                       # listed before the task it depends on: planned after it
name = "cli"
title = "CLI"
intent = "A command line"
criteria = ["prints the result"]
depends_on = ["parser"]
[[tasks.attempts]]
steps = [{ write = "cli.py", content = "print(1)\\n" }, { commit = "Add CLI" }, { request = "handoff" }]

[[tasks]]
name = "parser"
title = "Parser"
intent = "Parse expressions"
criteria = ["parses 1+1"]
[[tasks.attempts]]
steps = [
  { write = "src/parser.py", content = "BROKEN\\n" },
  { write = "old.py", content = "old\\n" },
  { commit = "Parser, first try" },
  { run = ["python3", "-c", "import sys; sys.exit(4)"], timeout = 60 },
  { request = "handoff" },
]
[[tasks.attempts]]
steps = [
  { delete = "old.py" },
  { write = "src/parser.py", content = "def parse(s):\\n    return eval(s)\\n" },
  { commit = "Parser, fixed" },
  { commit = "nothing left to commit" },
  { request = "handoff", source_files = ["src/parser.py"] },
]

[[reviewers]]
name = "claude"
verdict = "approve"
findings = [{ severity = "low", message = "eval is risky" }]
"""


def write_recipe(tmp_path: Path, text: str = RECIPE, name: str = "recipe.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- recipes ------------------------------------------------------------------------------------------------------


def test_a_recipe_loads_into_values(tmp_path: Path) -> None:
    recipe = load_recipe(write_recipe(tmp_path))
    assert recipe.plan.criteria == (
        Criterion("parses expressions"),
        Criterion("the CLI prints results", runner="acceptance"),
    )
    assert recipe.plan.criteria[1].to_request() == {"description": "the CLI prints results", "runner": "acceptance"}
    assert recipe.coordinator.finalize is True and recipe.coordinator.question == "Integers only?"
    assert recipe.coordinator.steps == (Write("SKELETON.md", "skeleton\n"), Commit("Skeleton"))
    assert [t.name for t in recipe.tasks] == ["cli", "parser"]
    assert [t.name for t in recipe.planning_order()] == ["parser", "cli"]
    parser = recipe.tasks[1]
    assert parser.attempts[0].steps[3] == Run(("python3", "-c", "import sys; sys.exit(4)"), 60.0)
    assert parser.attempts[1].steps[-1] == Request("handoff", ("src/parser.py",))
    assert [parser.attempt_for(g)[0] for g in (1, 2, 3, 9)] == [1, 2, 2, 2]
    assert recipe.reviewers[0].findings[0].blocking is False and len(recipe.digest) == 64


MINIMAL = '[plan]\ntitle = "P"\nintent = "I"\ncriteria = ["a", "b"]\n'
TASK = '[[tasks]]\nname = "{name}"\ntitle = "{title}"\nintent = "I"\ncriteria = ["c"]\ndepends_on = {deps}\n{attempts}'
ATTEMPT = "[[tasks.attempts]]\nsteps = [{steps}]\n"


def task(name: str, *, title: str | None = None, deps: str = "[]", steps: str = "", attempts: int = 1) -> str:
    return TASK.format(
        name=name, title=title or name.title(), deps=deps, attempts=ATTEMPT.format(steps=steps) * attempts
    )


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        (MINIMAL.replace("title", "titel"), "$.plan.titel", "unknown key 'titel'"),
        (MINIMAL + "[coordinator]\nfinalise = true\n", "$.coordinator.finalise", "unknown key"),
        (MINIMAL.replace('["a", "b"]', '"a"'), "$.plan.criteria", "is not of type 'array'"),
        (MINIMAL.replace('["a", "b"]', '["a"]'), "$.plan.criteria", "at least 2 items"),
        (MINIMAL + task("a", steps='{ sleep = "1" }'), "$.tasks[0].attempts[0].steps[0].sleep", "not of type"),
        (MINIMAL + task("a", steps="{ exit = 300 }"), "$.tasks[0].attempts[0].steps[0].exit", "maximum"),
        (MINIMAL + task("a", steps='{ request = "plan" }'), "$.tasks[0].attempts[0].steps[0].request", "one of"),
        (MINIMAL + task("a", attempts=0), "$.tasks[0]", "'attempts' is a required property"),
        (MINIMAL + task("a") + task("a", title="Other"), "$.tasks[1].name", "already used by $.tasks[0]"),
        (MINIMAL + task("a") + task("b", title="A"), "$.tasks[1].title", "title 'A' is already used"),
        (MINIMAL + task("a", title="P"), "$.tasks[0].title", "already used by $.plan"),
        (MINIMAL + task("a", deps='["zed"]'), "$.tasks[0].depends_on[0]", "no task named 'zed'"),
        (MINIMAL + task("a", deps='["a"]'), "$.tasks[0].depends_on[0]", "depends on itself"),
        (
            MINIMAL + task("a", deps='["c"]') + task("b", deps='["a"]') + task("c", deps='["b"]'),
            "$.tasks[0].depends_on",
            "dependency cycle: a -> c -> b -> a",
        ),
        (MINIMAL + task("a", steps='{ write = "../x", content = "" }'), ".steps[0].write", "'..'"),
        (MINIMAL + task("a", steps='{ delete = "/etc/passwd" }'), ".steps[0].delete", "not absolute"),
        (MINIMAL + task("a", steps='{ write = ".git/config", content = "" }'), ".steps[0].write", ".git"),
        (MINIMAL + task("a", steps='{ write = "x" }'), ".steps[0]", "needs content"),
        (MINIMAL + task("a", steps='{ commit = "m", exit = 1 }'), ".steps[0]", "exactly one of"),
        (MINIMAL + task("a", steps='{ content = "x" }'), ".steps[0]", "found: none"),
        (MINIMAL + task("a", steps='{ commit = "m", timeout = 3 }'), ".steps[0].timeout", "goes only with 'run'"),
        (
            MINIMAL + task("a", steps='{ request = "handoff", source_files = ["a/../../b"] }'),
            ".steps[0].source_files[0]",
            "'..'",
        ),
        (MINIMAL + '[[reviewers]]\nname = "r"\nverdict = "maybe"\n', "$.reviewers[0].verdict", "is not one of"),
    ],
)
def test_invalid_recipes_name_the_file_and_the_json_path(tmp_path: Path, text: str, where: str, message: str) -> None:
    path = write_recipe(tmp_path, text)
    with pytest.raises(AgentOpsError) as caught:
        load_recipe(path)
    error = caught.value
    assert error.code == "RUN_RECIPE_INVALID" and error.exit_status == 3
    assert str(path) in error.message and where in error.message and message in error.message, error.message
    assert error.details["file"] == str(path)


def test_the_line_of_the_problem_is_named(tmp_path: Path) -> None:
    path = write_recipe(tmp_path, MINIMAL + task("a") + task("a", title="Other"))
    with pytest.raises(AgentOpsError) as caught:
        load_recipe(path)
    line = caught.value.details["line"]
    assert path.read_text().splitlines()[line - 1] == 'name = "a"' and line > 10
    assert f"{path}:{line}: $.tasks[1].name" in caught.value.message


@pytest.mark.parametrize("data", [b"[plan\n", b"\xff\xfe", b""])
def test_unreadable_recipes_are_invalid(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "r.toml"
    path.write_bytes(data)
    with pytest.raises(AgentOpsError) as caught:
        load_recipe(path)
    assert caught.value.code == "RUN_RECIPE_INVALID"
    with pytest.raises(AgentOpsError):
        load_recipe(tmp_path / "missing.toml")


# -- a child ------------------------------------------------------------------------------------------------------

PARSER_ID = "task-00000000-0000-4000-8000-0000000000a1"
CLI_ID = "task-00000000-0000-4000-8000-0000000000a2"
ROOT_ID = "task-00000000-0000-4000-8000-0000000000ff"


def instructions_doc(worktree: Path, **overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "version": 1,
        "runId": "run-1",
        "workerId": "coordinator",
        "role": "coordinator",
        "generation": 1,
        "contractHash": HASH,
        "goal": "a calculator",
        "task": None,
        "tasks": [],
        "rootTaskId": None,
        "diagnostic": None,
        "answers": [],
        "mailbox": str(worktree / mailbox.MAILBOX),
        "worktree": str(worktree),
        "base": None,
        "host": "scripted",
        "recipe": None,
        "runStatus": "active",
    }
    doc.update(overrides)
    return doc


def task_record(task_id: str, title: str) -> dict[str, Any]:
    return {
        "id": task_id,
        "revision": 1,
        "title": title,
        "intent": "Parse expressions",
        "goal": "a calculator",
        "criteria": [{"id": "c1", "description": "parses 1+1"}],
        "parent": ROOT_ID,
        "dependencies": [],
        "status": "running",
        "supersededBy": None,
        "policyConfigHash": None,
    }


@pytest.fixture
def child_worktree(tmp_path: Path) -> Path:
    """A linked worktree on its own branch, its mailbox excluded from commits as the supervisor does."""
    repo = make_repo(tmp_path / "repo")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text(".agentops/mailbox/\n")
    worktree = tmp_path / "worktrees" / "parser"
    git(repo, "worktree", "add", "-q", "-b", "agentops/run-1/parser", str(worktree))
    return worktree


class FakeCall:
    def __init__(self, *responses: tuple[str, dict[str, Any]]) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.responses = list(responses)

    def __call__(self, action: str, fields: Mapping[str, Any]) -> Mapping[str, Any]:
        self.calls.append((action, dict(fields)))
        code, data = self.responses.pop(0) if self.responses else ("RUN_WORKER_DELIVERED", {"sourceCommit": "0" * 40})
        return mailbox.response("r", "0" * 64, code, code.lower(), data)


def play_child(worktree: Path, recipe: Recipe, generation: int, call: FakeCall, log: list[str]) -> int:
    mailbox.write_instructions(
        worktree,
        instructions_doc(
            worktree, workerId="parser", role="child", generation=generation, task=task_record(PARSER_ID, "Parser")
        ),
    )
    return run_agent(
        worktree,
        recipe,
        call=call,
        log=log.append,
        run=make_runner(dict(os.environ), clock=FixedClock()),
        sleep=lambda s: None,
    )


def test_a_child_plays_attempt_n_for_generation_n_and_the_last_one_repeats(
    tmp_path: Path, child_worktree: Path
) -> None:
    recipe = load_recipe(write_recipe(tmp_path))
    log: list[str] = []
    call = FakeCall()
    assert play_child(child_worktree, recipe, 1, call, log) == 0
    assert git(child_worktree, "log", "--format=%s", "-n1") == "Parser, first try"
    assert (child_worktree / "src/parser.py").read_text() == "BROKEN\n" and (child_worktree / "old.py").exists()
    assert "exit code 4" in log and any("attempt 1/2" in line for line in log)
    assert call.calls == [("handoff", {})]

    assert play_child(child_worktree, recipe, 2, call, log) == 0
    assert git(child_worktree, "log", "--format=%s") == "Parser, fixed\nParser, first try\ninitial"
    assert not (child_worktree / "old.py").exists()
    assert git(child_worktree, "show", "--name-status", "--format=", "HEAD").splitlines() == [
        "D\told.py",
        "M\tsrc/parser.py",
    ]
    assert "nothing to commit; skipped" in log
    assert call.calls[-1] == ("handoff", {"sourceFiles": ["src/parser.py"]})

    log.clear()
    assert play_child(child_worktree, recipe, 5, call, log) == 0  # generation 5 replays the last attempt
    assert any("attempt 2/2" in line for line in log)
    assert git(child_worktree, "log", "--format=%s", "-n1") == "Parser, fixed"  # nothing new to commit
    assert git(child_worktree, "status", "--porcelain") == ""  # and the mailbox was never committed
    assert any(line.startswith("response RUN_WORKER_DELIVERED") for line in log)


def test_an_exit_step_ends_the_agent_with_its_code(tmp_path: Path, child_worktree: Path) -> None:
    steps = '{ write = "a.txt", content = "a" }, { exit = 3 }, { write = "b.txt", content = "b" }'
    recipe = load_recipe(write_recipe(tmp_path, MINIMAL + task("parser", title="Parser", steps=steps)))
    call = FakeCall()
    assert play_child(child_worktree, recipe, 1, call, []) == 3
    assert (child_worktree / "a.txt").exists() and not (child_worktree / "b.txt").exists()
    assert call.calls == []


def test_a_stale_generation_does_nothing(tmp_path: Path, child_worktree: Path) -> None:
    recipe = load_recipe(write_recipe(tmp_path))
    mailbox.write_instructions(
        child_worktree,
        instructions_doc(child_worktree, role="child", generation=2, task=task_record(PARSER_ID, "Parser")),
    )
    call, log = FakeCall(), []
    status = run_agent(
        child_worktree, recipe, call=call, log=log.append, run=lambda *a: Ran(0), sleep=lambda s: None, generation=1
    )
    assert status == 1 and call.calls == [] and "stale" in log[-1]
    assert not (child_worktree / "src").exists()


def test_a_child_whose_task_the_recipe_lacks_is_refused(tmp_path: Path, child_worktree: Path) -> None:
    recipe = load_recipe(write_recipe(tmp_path))
    mailbox.write_instructions(
        child_worktree, instructions_doc(child_worktree, role="child", task=task_record(PARSER_ID, "Docs"))
    )
    with pytest.raises(AgentOpsError) as caught:
        run_agent(child_worktree, recipe, call=FakeCall(), log=lambda s: None, run=lambda *a: Ran(0))
    assert caught.value.code == "RUN_RECIPE_INVALID" and "'Docs'" in caught.value.message


def test_child_question_raw_request_and_sleep_steps(tmp_path: Path, child_worktree: Path) -> None:
    steps = '{ question = "Base 10?" }, { raw_request = "{not json" }, { sleep = 0.25 }, { question = "Tabs?" }'
    recipe = load_recipe(write_recipe(tmp_path, MINIMAL + task("parser", title="Parser", steps=steps)))
    answers: list[dict[str, str]] = [{"questionId": "q0", "prompt": "Tabs?", "answer": "no"}]
    doc = instructions_doc(child_worktree, role="child", task=task_record(PARSER_ID, "Parser"), answers=answers)
    reads = itertools.count()

    def instructions() -> Mapping[str, Any]:
        if next(reads) == 3:  # the answer arrives while the agent waits
            answers.append({"questionId": "q1", "prompt": "Base 10?", "answer": "yes"})
        return doc

    raw: list[bytes] = []
    slept: list[float] = []
    call = FakeCall(("RUN_AWAITING_INPUT", {"questionId": "q1"}))
    log: list[str] = []
    status = run_agent(
        child_worktree,
        recipe,
        call=call,
        log=log.append,
        run=lambda *a: Ran(0),
        sleep=slept.append,
        instructions=instructions,
        raw=lambda data: raw.append(data) or None,
    )
    assert status == 0
    assert call.calls == [("question", {"prompt": "Base 10?"})]  # "Tabs?" was answered before
    assert "answer: 'yes'" in log and "question already answered: 'Tabs?'" in log
    assert raw == [b"{not json"] and any("no response to the raw request" in line for line in log)
    assert 0.25 in slept


# -- the coordinator ------------------------------------------------------------------------------------------------


class FakeRun:
    """A supervisor's view for the coordinator: plans and tasks appear as requests are accepted."""

    def __init__(self, worktree: Path, *, lag: int = 0) -> None:
        self.worktree = worktree
        self.root: str | None = None
        self.tasks: list[dict[str, Any]] = []
        self.answers: list[dict[str, str]] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.ids = iter([PARSER_ID, CLI_ID])
        self.lag = lag  # how many reads the instructions lag behind an accepted request
        self.stale_reads = 0
        self.shown: tuple[str | None, list[dict[str, Any]]] = (None, [])
        self.deliver_after: int | None = None  # reads of the waiting loop before each delivery
        self.block: str | None = None
        self.reads = 0
        self.progress = 0

    def call(self, action: str, fields: Mapping[str, Any]) -> Mapping[str, Any]:
        self.calls.append((action, dict(fields)))
        data: dict[str, Any] = {}
        if action == "question":
            self.answers.append({"questionId": "q1", "prompt": fields["prompt"], "answer": "yes"})
            code, data = "RUN_AWAITING_INPUT", {"questionId": "q1"}
        elif action == "plan":
            self.root = ROOT_ID
            code, data = "RUN_PLAN_CREATED", {"taskId": ROOT_ID, "contractHash": HASH}
        elif action == "worker":
            task_id = next(self.ids)
            self.tasks.append(
                {
                    "id": task_id,
                    "title": fields["title"],
                    "status": "planned",
                    "dependencies": list(fields["dependencies"]),
                    "delivery": None,
                    "blockedReason": None,
                }
            )
            code, data = "RUN_WORKER_PLANNED", {"taskId": task_id}
        else:
            code = "RUN_COMPLETE"
        self.stale_reads = self.lag
        return mailbox.response("r", "0" * 64, code, code.lower(), data)

    def instructions(self) -> Mapping[str, Any]:
        self.reads += 1
        if self.stale_reads:
            self.stale_reads -= 1
        else:
            self.shown = (self.root, [dict(t) for t in self.tasks])
        if len(self.shown[1]) == 2:  # everything planned and shown: tasks progress as time passes
            self.progress += 1
        if self.progress and self.progress % 3 == 0:
            pending = [t for t in self.tasks if t["status"] != "delivered"]
            if pending and self.block == pending[0]["title"]:
                pending[0].update(status="blocked", blockedReason="RUN_NO_PROGRESS: same failure twice")
            elif pending:
                pending[0].update(status="delivered", delivery="1" * 40)
        root, tasks = self.shown
        return instructions_doc(self.worktree, rootTaskId=root, tasks=tasks, answers=list(self.answers))


@pytest.fixture
def coordinator_worktree(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "coord")
    (repo / ".git" / "info" / "exclude").write_text(".agentops/\n")
    return repo


def coordinate(worktree: Path, recipe: Recipe, fake: FakeRun, log: list[str]) -> int:
    return run_agent(
        worktree,
        recipe,
        call=fake.call,
        log=log.append,
        run=make_runner(dict(os.environ), clock=FixedClock()),
        sleep=lambda s: None,
        instructions=fake.instructions,
    )


@pytest.mark.parametrize("lag", [0, 3])
def test_the_coordinator_plans_the_root_then_children_in_dependency_order_waits_and_finalizes(
    tmp_path: Path, coordinator_worktree: Path, lag: int
) -> None:
    recipe = load_recipe(write_recipe(tmp_path))
    fake, log = FakeRun(coordinator_worktree, lag=lag), []
    assert coordinate(coordinator_worktree, recipe, fake, log) == 0
    assert [action for action, _ in fake.calls] == ["question", "plan", "worker", "worker", "finalize"]
    assert fake.calls[1][1] == {
        "title": "Calculator",
        "intent": "A calculator with a parser and a CLI",
        "criteria": ["parses expressions", {"description": "the CLI prints results", "runner": "acceptance"}],
    }
    assert fake.calls[2][1] == {
        "title": "Parser",
        "intent": "Parse expressions",
        "criteria": ["parses 1+1"],
        "dependencies": [],
    }
    assert fake.calls[3][1]["title"] == "CLI" and fake.calls[3][1]["dependencies"] == [PARSER_ID]
    assert fake.calls[4] == ("finalize", {})
    assert git(coordinator_worktree, "log", "--format=%s") == "Skeleton\ninitial"
    assert any(line.startswith("waiting for ") and "of 2 tasks" in line for line in log)
    # a later generation replays its steps harmlessly and plans nothing twice
    fake.calls.clear()
    assert coordinate(coordinator_worktree, recipe, fake, log) == 0
    assert [action for action, _ in fake.calls] == ["finalize"]
    assert git(coordinator_worktree, "log", "--format=%s") == "Skeleton\ninitial"


def test_the_coordinator_plans_only_what_is_missing_after_a_restart(tmp_path: Path, coordinator_worktree: Path) -> None:
    recipe = load_recipe(write_recipe(tmp_path))
    fake = FakeRun(coordinator_worktree)
    fake.root, fake.answers = ROOT_ID, [{"questionId": "q0", "prompt": "Integers only?", "answer": "yes"}]
    fake.tasks.append(
        {"id": "task-00000000-0000-4000-8000-00000000000b", "title": "Parser", "status": "running",
         "dependencies": [], "delivery": None, "blockedReason": None}
    )  # fmt: skip
    fake.ids = iter([CLI_ID])
    assert coordinate(coordinator_worktree, recipe, fake, []) == 0
    assert [action for action, _ in fake.calls] == ["worker", "finalize"]
    assert fake.calls[0][1]["dependencies"] == ["task-00000000-0000-4000-8000-00000000000b"]


def test_a_blocked_child_ends_the_coordinator_with_status_2(tmp_path: Path, coordinator_worktree: Path) -> None:
    recipe = load_recipe(write_recipe(tmp_path))
    fake, log = FakeRun(coordinator_worktree), []
    fake.block = "CLI"
    assert coordinate(coordinator_worktree, recipe, fake, log) == 2
    assert "finalize" not in [action for action, _ in fake.calls]
    assert any("'CLI'" in line and "is blocked: RUN_NO_PROGRESS" in line for line in log)


def test_a_refused_plan_or_finalize_exits_1_and_finalize_false_stops_at_delivery(
    tmp_path: Path, coordinator_worktree: Path
) -> None:
    recipe = load_recipe(write_recipe(tmp_path, MINIMAL))
    call = FakeCall(("RUN_PLAN_INVALID", {}))
    doc = instructions_doc(coordinator_worktree)
    status = run_agent(
        coordinator_worktree, recipe, call=call, log=lambda s: None, run=lambda *a: Ran(0), instructions=lambda: doc
    )
    assert status == 1 and [a for a, _ in call.calls] == ["plan"]

    doc = instructions_doc(coordinator_worktree, rootTaskId=ROOT_ID)
    call = FakeCall(("RUN_DEPENDENCY_CONFLICT", {}))
    status = run_agent(
        coordinator_worktree, recipe, call=call, log=lambda s: None, run=lambda *a: Ran(0), instructions=lambda: doc
    )
    assert status == 1 and [a for a, _ in call.calls] == ["finalize"]

    recipe = load_recipe(write_recipe(tmp_path, MINIMAL + "[coordinator]\nfinalize = false\n", "no-finalize.toml"))
    call = FakeCall()
    reads: list[int] = []

    def idle_until_stopped() -> dict[str, Any]:  # with finalize = false the coordinator idles until the run ends
        reads.append(1)
        return {**doc, "runStatus": "active" if len(reads) < 5 else "stopping"}

    status = run_agent(
        coordinator_worktree,
        recipe,
        call=call,
        log=lambda s: None,
        run=lambda *a: Ran(0),
        instructions=idle_until_stopped,
        sleep=lambda s: None,
    )
    assert status == 0 and call.calls == [] and len(reads) >= 5


# -- the real process ---------------------------------------------------------------------------------------------


@pytest.fixture
def fake_supervisor(child_worktree: Path) -> Iterator[list[dict[str, Any] | None]]:
    """Answers every request in the child's mailbox: handoffs are delivered, anything unparsable is refused."""
    seen: list[dict[str, Any] | None] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            claimed = mailbox.claim_request(child_worktree)
            if claimed is None:
                time.sleep(0.005)
                continue
            try:
                request = json.loads(claimed.data or b"")
            except ValueError:
                request = None
            seen.append(request)
            if request is None:
                doc = mailbox.response(None, claimed.digest, "RUN_REQUEST_INVALID", "request is not JSON")
            else:
                doc = mailbox.response(
                    request["requestId"],
                    claimed.digest,
                    "RUN_WORKER_DELIVERED",
                    "delivered",
                    {"sourceCommit": "1" * 40},
                )
            mailbox.write_response(child_worktree, doc)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield seen
    stop.set()
    thread.join(timeout=10)


def test_the_agent_process_reads_its_environment_and_plays_the_recipe(
    tmp_path: Path, child_worktree: Path, fake_supervisor: list[dict[str, Any] | None]
) -> None:
    steps = (
        '{ write = "a.txt", content = "a" }, { commit = "Add a" }, { raw_request = "{not json" }, '
        '{ request = "handoff" }, { exit = 5 }'
    )
    recipe = write_recipe(tmp_path, MINIMAL + task("parser", title="Parser", steps=steps))
    mailbox.write_instructions(
        child_worktree,
        instructions_doc(
            child_worktree, workerId="parser", role="child", generation=2, task=task_record(PARSER_ID, "Parser")
        ),
    )
    env = dict(os.environ)
    env.update(
        AGENTOPS_RUN_ID="run-1",
        AGENTOPS_WORKER_ID="parser",
        AGENTOPS_GENERATION="2",
        AGENTOPS_MAILBOX=str(child_worktree / mailbox.MAILBOX),
        AGENTOPS_RECIPE=str(recipe),
    )
    done = subprocess.run(
        [sys.executable, "-m", "git_agentops.cli.agent"],
        cwd=child_worktree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 5, done.stderr
    assert done.stdout == ""
    assert "[scripted parser g2]" in done.stderr and "response RUN_REQUEST_INVALID: request is not JSON" in done.stderr
    assert "response RUN_WORKER_DELIVERED: delivered" in done.stderr
    assert git(child_worktree, "log", "--format=%s", "-n1") == "Add a"
    raw, handoff = fake_supervisor
    assert raw is None and handoff is not None
    assert (handoff["action"], handoff["workerId"], handoff["generation"]) == ("handoff", "parser", 2)


def test_the_agent_process_refuses_a_bad_recipe_with_its_code(tmp_path: Path, child_worktree: Path) -> None:
    recipe = write_recipe(tmp_path, MINIMAL.replace("title", "titel"))
    mailbox.write_instructions(child_worktree, instructions_doc(child_worktree, recipe=str(recipe)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTOPS_")}
    done = subprocess.run(
        [sys.executable, "-m", "git_agentops.cli.agent"],
        cwd=child_worktree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3 and done.stderr.startswith("error[RUN_RECIPE_INVALID]: recipe ")
    assert "$.plan.titel" in done.stderr


def test_a_write_through_a_symlink_out_of_the_worktree_is_refused(tmp_path: Path, child_worktree: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (child_worktree / "link").symlink_to(outside)
    steps = '{ write = "link/pwned.txt", content = "x" }'
    recipe = load_recipe(write_recipe(tmp_path, MINIMAL + task("parser", title="Parser", steps=steps)))
    with pytest.raises(AgentOpsError) as caught:
        play_child(child_worktree, recipe, 1, FakeCall(), [])
    assert caught.value.code == "PATH_ESCAPE" and not (outside / "pwned.txt").exists()


def test_delete_removes_a_symlink_itself_and_tolerates_what_is_gone(tmp_path: Path, child_worktree: Path) -> None:
    (child_worktree / "keep").mkdir()
    (child_worktree / "keep" / "data.txt").write_text("keep me\n")
    (child_worktree / "link").symlink_to("keep/data.txt")
    (child_worktree / "tree" / "deep").mkdir(parents=True)
    (child_worktree / "tree" / "deep" / "x").write_text("x")
    steps = '{ delete = "link" }, { delete = "tree" }, { delete = "never/was.txt" }'
    recipe = load_recipe(write_recipe(tmp_path, MINIMAL + task("parser", title="Parser", steps=steps)))
    log: list[str] = []
    assert play_child(child_worktree, recipe, 1, FakeCall(), log) == 0
    assert not (child_worktree / "link").is_symlink() and not (child_worktree / "tree").exists()
    assert (child_worktree / "keep" / "data.txt").read_text() == "keep me\n"
    assert "never/was.txt does not exist; nothing to delete" in log


def test_recipes_written_by_the_helpers_keep_any_text_exactly(tmp_path: Path) -> None:
    """Quotes, backslashes, newlines and characters outside the BMP survive the trip through tomli_w and tomllib."""
    from ..helpers import HANDOFF, child, recipe_text, write_step

    title = 'Ship it \U0001f680 "quoted" \\ back\\slash'
    content = 'line one\nline \U0001f9ea two\t"q"\n'
    path = write_recipe(
        tmp_path, recipe_text(child("a", title, [[write_step("src/a.txt", content), HANDOFF]]), finalize=True)
    )
    loaded = load_recipe(path)
    assert loaded.tasks[0].title == title
    assert loaded.tasks[0].attempts[0].steps[0] == Write("src/a.txt", content)


def test_the_demo_recipe_and_policy_are_valid_toml_that_loads(tmp_path: Path) -> None:
    from git_agentops.demo import scenario as demo
    from git_agentops.policy.load import policy_from_bytes

    assert len(load_recipe(write_recipe(tmp_path, demo.recipe())).tasks) == 3
    policy = policy_from_bytes(demo.policy('/opt/py "3"/bin/python').encode(), source="demo")
    assert policy.commands[0].argv == ('/opt/py "3"/bin/python', "run_tests.py")
