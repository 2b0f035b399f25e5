"""Recipes: what the built-in scripted agent does, written down in TOML.

The scripted agent lets the demo, the tests and users rehearse a whole run -- planning, children, failed
attempts, questions, malformed requests -- deterministically and without a model. A recipe says what the
coordinator plans and, for each child task, the steps of each attempt (attempt N is played by the worker's Nth
generation; the last one repeats). The README's "Recipes for the scripted agent" is the reference -- every key and
step, and a complete example a test runs (``git agentops-run demo --print-recipe`` prints another); in short::

    [plan]
    title = "Add a parser"; intent = "..."; criteria = ["parses x", "rejects y"]   # 2-5 criteria
    [coordinator]                      # optional
    finalize = true                    # request finalize once every child is delivered (default)
    one_shot = false                   # true: end the turn after planning; finalize when woken (agent CLIs' way)
    question = "Which format?"         # asked once, before planning
    steps = [{ write = "skeleton.py", content = "" }, { commit = "Skeleton" }]
    [[tasks]]
    name = "parser"; title = "Parser"; intent = "..."; criteria = ["..."]; depends_on = []
    [[tasks.attempts]]
    steps = [{ write = "parser.py", content = "..." }, { commit = "Add parser" }, { request = "handoff" }]
    [[tasks.repair]]                   # optional: the worker of a repair task of this task's delivery
    steps = [{ write = "parser.py", content = "both sides" }, { commit = "Merge" }, { request = "handoff" }]

A recipe is input a user wrote, so it is checked completely before anything runs: unknown keys and wrong types
against ``schemas/recipe.schema.json``, then what a schema cannot say -- task names and titles unique,
dependencies known and acyclic, exactly one action per step, paths relative without ``..`` (and never into
``.git``). The first problem is reported as ``RUN_RECIPE_INVALID`` naming the file, the line where it can be
found and the JSON path (``$.tasks[1].attempts[0].steps[2].write``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, NotRequired, TypeAlias, TypedDict, cast

from ..errors import AgentOpsError
from ..schema import documents
from ..schema.validator import json_path

MAX_RECIPE_BYTES: Final = 4 * 1024 * 1024
DEFAULT_RUN_TIMEOUT: Final = 600.0
ACTION_KEYS: Final = ("write", "delete", "commit", "run", "request", "question", "raw_request", "sleep", "exit")
COMPANIONS: Final[Mapping[str, str]] = {"content": "write", "timeout": "run", "source_files": "request"}


# -- the recipe document's shape (``schemas/recipe.schema.json``), read only once the schema has checked it -------


class CriterionDoc(TypedDict):
    """A criterion written as a table: its description and optional id, runner or review-only reason."""

    description: str
    id: NotRequired[str]
    runner: NotRequired[str]
    review_only: NotRequired[str]


CriterionValue: TypeAlias = "str | CriterionDoc"
"""A criterion: a plain description, or a table."""


class StepDoc(TypedDict, total=False):
    """A step: exactly one action key (:data:`ACTION_KEYS`) and its companions (:data:`COMPANIONS`)."""

    write: str
    content: str
    delete: str
    commit: str
    run: list[str]
    timeout: float
    request: str
    source_files: list[str]
    question: str
    raw_request: str
    sleep: float
    exit: int


class AttemptDoc(TypedDict):
    steps: list[StepDoc]


class TaskDoc(TypedDict):
    """A child task (``[[tasks]]``) and the steps of each of its attempts."""

    name: str
    title: str
    intent: str
    criteria: list[CriterionValue]
    depends_on: NotRequired[list[str]]
    attempts: list[AttemptDoc]
    repair: NotRequired[list[AttemptDoc]]


class ApprovalDoc(TypedDict):
    capability: str
    reason: str


class ReplanDoc(TypedDict):
    task: str
    criteria: list[CriterionValue]


class PolicyChangeDoc(TypedDict):
    """The coordinator's policy proposal (``[coordinator.policy]``)."""

    file: str
    content: str
    approvals: list[ApprovalDoc]
    replan: NotRequired[list[ReplanDoc]]


class CoordinatorDoc(TypedDict, total=False):
    """``[coordinator]``: every key optional (the defaults are :class:`Coordinator`'s)."""

    finalize: bool
    one_shot: bool
    question: str
    steps: list[StepDoc]
    policy: PolicyChangeDoc


class PlanDoc(TypedDict):
    title: str
    intent: str
    criteria: list[CriterionValue]


class FindingDoc(TypedDict):
    severity: str
    message: str
    blocking: NotRequired[bool]


class ReviewerDoc(TypedDict):
    name: str
    verdict: str
    findings: NotRequired[list[FindingDoc]]


class RecipeDoc(TypedDict):
    """A recipe file, as TOML gives it once the schema accepted it."""

    plan: PlanDoc
    coordinator: NotRequired[CoordinatorDoc]
    tasks: NotRequired[list[TaskDoc]]
    reviewers: NotRequired[list[ReviewerDoc]]


_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f\\]")

JsonPath = tuple[str | int, ...]


# -- the recipe, as values -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Criterion:
    description: str
    id: str | None = None
    runner: str | None = None
    review_only: str | None = None

    def to_request(self) -> str | dict[str, str]:
        """The criterion as a request carries it: a plain string when it is only a description."""
        if self.id is None and self.runner is None and self.review_only is None:
            return self.description
        out = {"description": self.description}
        for key, value in (("id", self.id), ("runner", self.runner), ("reviewOnly", self.review_only)):
            if value is not None:
                out[key] = value
        return out


@dataclass(frozen=True, slots=True)
class Write:
    path: str
    content: str


@dataclass(frozen=True, slots=True)
class Delete:
    path: str


@dataclass(frozen=True, slots=True)
class Commit:
    message: str


@dataclass(frozen=True, slots=True)
class Run:
    argv: tuple[str, ...]
    timeout: float = DEFAULT_RUN_TIMEOUT


@dataclass(frozen=True, slots=True)
class Request:
    action: str  # handoff | finalize
    source_files: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Question:
    prompt: str


@dataclass(frozen=True, slots=True)
class RawRequest:
    data: str


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class Exit:
    code: int


Step = Write | Delete | Commit | Run | Request | Question | RawRequest | Sleep | Exit


@dataclass(frozen=True, slots=True)
class Plan:
    title: str
    intent: str
    criteria: tuple[Criterion, ...]


@dataclass(frozen=True, slots=True)
class PolicyChange:
    """``[coordinator.policy]``: a complete policy to propose once, its approvals, and the tasks to re-plan (by name,
    with new criteria) once the transition is complete."""

    file: str
    content: str
    approvals: tuple[tuple[str, str], ...]
    replan: tuple[tuple[str, tuple[Criterion, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class Coordinator:
    finalize: bool = True
    one_shot: bool = False  # end the turn after planning and act when woken, as agent CLIs do
    question: str | None = None
    steps: tuple[Step, ...] = ()
    policy: PolicyChange | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    steps: tuple[Step, ...]


@dataclass(frozen=True, slots=True)
class Task:
    name: str
    title: str
    intent: str
    criteria: tuple[Criterion, ...]
    depends_on: tuple[str, ...]
    attempts: tuple[Attempt, ...]
    repair: tuple[Attempt, ...] = ()  # played by the worker of a repair task of this task's delivery

    def attempt_for(self, generation: int, *, repairing: bool = False) -> tuple[int, Attempt]:
        """The 1-based number and the attempt the worker's ``generation`` plays (the last one repeats): of the
        task's own attempts, or of its ``repair`` ones for the worker of its repair task."""
        attempts = self.repair if repairing else self.attempts
        number = max(1, min(generation, len(attempts)))
        return number, attempts[number - 1]


@dataclass(frozen=True, slots=True)
class Finding:
    severity: str
    message: str
    blocking: bool = False


@dataclass(frozen=True, slots=True)
class Reviewer:
    name: str
    verdict: str  # approve | reject
    findings: tuple[Finding, ...] = ()


@dataclass(frozen=True, slots=True)
class Recipe:
    path: Path
    digest: str  # sha256 of the file's bytes
    plan: Plan
    coordinator: Coordinator = field(default_factory=Coordinator)
    tasks: tuple[Task, ...] = ()
    reviewers: tuple[Reviewer, ...] = ()

    def task_titled(self, title: str) -> Task | None:
        return next((task for task in self.tasks if task.title == title), None)

    def planning_order(self) -> tuple[Task, ...]:
        """The tasks in recipe order, except that a task always comes after the tasks it depends on."""
        done: set[str] = set()
        order: list[Task] = []
        pending = list(self.tasks)
        while pending:  # acyclic (checked at load), so every pass places at least one task
            for task in pending:
                if all(dep in done for dep in task.depends_on):
                    order.append(task)
                    done.add(task.name)
                    pending.remove(task)
                    break
        return tuple(order)


# -- loading -------------------------------------------------------------------------------------------------------


class _Problem(Exception):
    def __init__(self, where: JsonPath, message: str) -> None:
        super().__init__(message)
        self.where = where
        self.message = message


def load_recipe(path: Path) -> Recipe:
    """Read and check the recipe at ``path``. ``RUN_RECIPE_INVALID`` names the file, line and JSON path."""
    from ..files import read_bounded

    try:
        data = read_bounded(path, MAX_RECIPE_BYTES)
    except OSError as exc:
        raise AgentOpsError("RUN_RECIPE_INVALID", f"recipe {path} cannot be read: {exc.strerror or exc}") from exc
    if len(data) > MAX_RECIPE_BYTES:
        raise AgentOpsError("RUN_RECIPE_INVALID", f"recipe {path} is over {MAX_RECIPE_BYTES} bytes")
    return parse_recipe(data, path=path)


def parse_recipe(data: bytes, *, path: Path) -> Recipe:
    """Check recipe bytes (``path`` is only named in errors and kept on the result)."""
    import tomllib

    try:
        text = data.decode("utf-8")
        doc = tomllib.loads(text)
    except UnicodeDecodeError as exc:
        raise AgentOpsError("RUN_RECIPE_INVALID", f"recipe {path} is not UTF-8 (byte {exc.start})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise AgentOpsError("RUN_RECIPE_INVALID", f"recipe {path} is not valid TOML: {exc}") from exc
    errors = documents.schema_errors(doc, "recipe")
    if errors:
        # an unknown key first: a typo also makes the key it misspells "missing", and the typo is the news
        first = next((e for e in errors if e.keyword == "additionalProperties"), errors[0])
        raise _invalid(path, text, first.path, first.message, problems=len(errors))
    try:
        recipe = cast(RecipeDoc, doc)  # the schema checked the shape the type declares
        _check(recipe)
        return _build(recipe, path, hashlib.sha256(data).hexdigest())
    except _Problem as problem:
        raise _invalid(path, text, problem.where, problem.message) from None


def _invalid(path: Path, text: str, where: JsonPath, message: str, *, problems: int = 1) -> AgentOpsError:
    from ..policy.load import locate

    line = locate(text, where)
    at = f"{path}:{line}" if line else str(path)
    more = f" (and {problems - 1} more problem{'s' if problems > 2 else ''})" if problems > 1 else ""
    return AgentOpsError(
        "RUN_RECIPE_INVALID",
        f"recipe {at}: {json_path(where)}: {message}{more}",
        details={"file": str(path), "line": line, "path": json_path(where), "problems": problems},
    )


def check_path(text: str) -> str | None:
    """Why ``text`` is not a usable worktree path (relative, no ``..``, not into ``.git``); None when it is."""
    if _CONTROL.search(text):
        return "must not contain control characters or backslashes"
    if text.startswith("/"):
        return "must be relative to the worktree, not absolute"
    parts = [part for part in text.split("/") if part not in ("", ".")]
    if not parts:
        return "names no file"
    if ".." in parts:
        return "must not climb out of the worktree with '..'"
    if parts[0] == ".git":
        return "must not write into .git"
    return None


def _steps_of(doc: RecipeDoc) -> Iterator[tuple[JsonPath, StepDoc]]:
    for index, step in enumerate(doc.get("coordinator", {}).get("steps", [])):
        yield ("coordinator", "steps", index), step
    for t, task in enumerate(doc.get("tasks", [])):
        for key, attempts in (("attempts", task["attempts"]), ("repair", task.get("repair", []))):
            for a, attempt in enumerate(attempts):
                for s, step in enumerate(attempt["steps"]):
                    yield ("tasks", t, key, a, "steps", s), step


def _criteria_of(doc: RecipeDoc) -> Iterator[tuple[JsonPath, CriterionValue]]:
    for index, item in enumerate(doc["plan"]["criteria"]):
        yield ("plan", "criteria", index), item
    for t, task in enumerate(doc.get("tasks", [])):
        for index, item in enumerate(task["criteria"]):
            yield ("tasks", t, "criteria", index), item
    for r, replan in enumerate(doc.get("coordinator", {}).get("policy", {}).get("replan", [])):
        for index, item in enumerate(replan["criteria"]):
            yield ("coordinator", "policy", "replan", r, "criteria", index), item


def _check(doc: RecipeDoc) -> None:
    """The rules a schema cannot say, in document order; raises the first :class:`_Problem`."""
    for where, criterion in _criteria_of(doc):
        if not isinstance(criterion, str) and "runner" in criterion and "review_only" in criterion:
            raise _Problem((*where, "review_only"), "a criterion has a runner or is review-only, not both")
        text = criterion if isinstance(criterion, str) else criterion["description"]
        if not text.strip():
            raise _Problem(where, "a criterion must say something (it is blank)")
    for where, step in _steps_of(doc):
        actions = [key for key in ACTION_KEYS if key in step]
        if len(actions) != 1:
            found = ", ".join(actions) or "none"
            raise _Problem(where, f"a step has exactly one of {', '.join(ACTION_KEYS)} (found: {found})")
        for companion, owner in COMPANIONS.items():
            if companion in step and owner not in step:
                raise _Problem((*where, companion), f"{companion!r} goes only with {owner!r}")
        if "write" in step and "content" not in step:
            raise _Problem(where, 'a write step needs content (content = "" for an empty file)')
        for key, target in (("write", step.get("write")), ("delete", step.get("delete"))):
            if target is not None and (why := check_path(target)):
                raise _Problem((*where, key), f"{target!r} {why}")
        for index, name in enumerate(step.get("source_files", [])):
            if why := check_path(name):
                raise _Problem((*where, "source_files", index), f"{name!r} {why}")
    tasks = doc.get("tasks", [])
    names: dict[str, int] = {}
    titles: dict[str, str] = {doc["plan"]["title"]: "$.plan"}
    for index, task in enumerate(tasks):
        if task["name"] in names:
            other = names[task["name"]]
            raise _Problem(("tasks", index, "name"), f"name {task['name']!r} is already used by $.tasks[{other}]")
        names[task["name"]] = index
        if task["title"] in titles:
            other_title = titles[task["title"]]
            raise _Problem(("tasks", index, "title"), f"title {task['title']!r} is already used by {other_title}")
        titles[task["title"]] = f"$.tasks[{index}]"
    for index, task in enumerate(tasks):
        for d, dep in enumerate(task.get("depends_on", [])):
            if dep == task["name"]:
                raise _Problem(("tasks", index, "depends_on", d), f"task {dep!r} depends on itself")
            if dep not in names:
                known = ", ".join(sorted(names)) or "none"
                raise _Problem(("tasks", index, "depends_on", d), f"no task named {dep!r} (known: {known})")
    cycle = _find_cycle({task["name"]: list(task.get("depends_on", [])) for task in tasks})
    if cycle:
        raise _Problem(("tasks", names[cycle[0]], "depends_on"), f"dependency cycle: {' -> '.join(cycle)}")
    change = doc.get("coordinator", {}).get("policy")
    if change is not None:
        if why := check_path(change["file"]):
            raise _Problem(("coordinator", "policy", "file"), f"{change['file']!r} {why}")
        for index, replan in enumerate(change.get("replan", [])):
            if replan["task"] not in names:
                raise _Problem(("coordinator", "policy", "replan", index, "task"), f"no task named {replan['task']!r}")
    names_seen: set[str] = set()
    for index, reviewer in enumerate(doc.get("reviewers", [])):
        if reviewer["name"] in names_seen:
            raise _Problem(("reviewers", index, "name"), f"reviewer {reviewer['name']!r} appears twice")
        names_seen.add(reviewer["name"])


def _find_cycle(graph: Mapping[str, Sequence[str]]) -> list[str] | None:
    """One dependency cycle as ``[a, b, ..., a]``, in recipe order of discovery; None when there is none."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in graph.get(node, ()):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in graph:
        if node not in state and (found := visit(node)):
            return found
    return None


def _criterion(value: CriterionValue) -> Criterion:
    if isinstance(value, str):
        return Criterion(value)
    return Criterion(value["description"], value.get("id"), value.get("runner"), value.get("review_only"))


def _step(raw: StepDoc) -> Step:
    if "write" in raw:
        return Write(raw["write"], raw["content"])
    if "delete" in raw:
        return Delete(raw["delete"])
    if "commit" in raw:
        return Commit(raw["commit"])
    if "run" in raw:
        return Run(tuple(raw["run"]), float(raw.get("timeout", DEFAULT_RUN_TIMEOUT)))
    if "request" in raw:
        return Request(raw["request"], tuple(raw.get("source_files", ())))
    if "question" in raw:
        return Question(raw["question"])
    if "raw_request" in raw:
        return RawRequest(raw["raw_request"])
    if "sleep" in raw:
        return Sleep(float(raw["sleep"]))
    return Exit(int(raw["exit"]))


def _policy_change(raw: PolicyChangeDoc) -> PolicyChange:
    return PolicyChange(
        file=raw["file"],
        content=raw["content"],
        approvals=tuple((a["capability"], a["reason"]) for a in raw["approvals"]),
        replan=tuple((r["task"], tuple(map(_criterion, r["criteria"]))) for r in raw.get("replan", [])),
    )


def _finding(raw: FindingDoc) -> Finding:
    return Finding(raw["severity"], raw["message"], bool(raw.get("blocking", False)))


def _build(doc: RecipeDoc, path: Path, digest: str) -> Recipe:
    plan = doc["plan"]
    coordinator = doc.get("coordinator", {})
    return Recipe(
        path=path,
        digest=digest,
        plan=Plan(plan["title"], plan["intent"], tuple(map(_criterion, plan["criteria"]))),
        coordinator=Coordinator(
            finalize=bool(coordinator.get("finalize", True)),
            one_shot=bool(coordinator.get("one_shot", False)),
            question=coordinator.get("question"),
            steps=tuple(map(_step, coordinator.get("steps", []))),
            policy=_policy_change(coordinator["policy"]) if "policy" in coordinator else None,
        ),
        tasks=tuple(
            Task(
                name=task["name"],
                title=task["title"],
                intent=task["intent"],
                criteria=tuple(map(_criterion, task["criteria"])),
                depends_on=tuple(task.get("depends_on", [])),
                attempts=tuple(Attempt(tuple(map(_step, a["steps"]))) for a in task["attempts"]),
                repair=tuple(Attempt(tuple(map(_step, a["steps"]))) for a in task.get("repair", [])),
            )
            for task in doc.get("tasks", [])
        ),
        reviewers=tuple(
            Reviewer(r["name"], r["verdict"], tuple(map(_finding, r.get("findings", []))))
            for r in doc.get("reviewers", [])
        ),
    )
