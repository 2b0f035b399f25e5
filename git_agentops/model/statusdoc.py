"""The run status document's shape, as typed dictionaries: what ``git agentops-run status --json`` prints.

:func:`git_agentops.runs.controls.summary` builds it from the run's records, and the status line, ``run status``
and ``run watch`` (:mod:`git_agentops.cli.runinfo`, :mod:`git_agentops.watch.view`) read it -- in-process, or
from another process's JSON. It is an output format (scripts read ``--json``), so it stays a document; its shape
is declared here once, so that its builder and its readers are type-checked against the same keys instead of
reading ``Any``. The parts that are other records' JSON forms (a worker's usage, the integration, a transition, a
blocked cause) are read back through those records' ``from_json``.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from ..canonical import JsonObject


class BudgetDoc(TypedDict):
    """Active time, tokens and dollars spent, with their limits."""

    usedSeconds: float
    limitSeconds: int
    usedTokens: int
    usagePartial: bool
    reviewUsage: list[JsonObject]
    tokenLimit: int | None
    usedCostUsd: float | None
    costLimitUsd: float | None


class WorkerRowDoc(TypedDict):
    """A worker: its role, status, generation and task, and what each generation used (``Usage`` JSON forms)."""

    workerId: str
    role: str
    status: str
    generation: int
    taskId: str | None
    worktree: str
    blockedReason: str | None
    session: str | None
    usage: list[JsonObject]
    sandbox: str | None
    workspace: JsonObject | None  # WorkspaceCost: what making its workspace cost


class TaskRowDoc(TypedDict):
    """A task: its place in the tree, status, revision and delivered commit."""

    taskId: str
    title: str
    status: str
    parent: str | None
    dependencies: list[str]
    revision: int
    delivery: str | None
    blockedReason: str | None


class StatusPolicyDoc(TypedDict):
    """The policy the run is bound to and its transitions (``Transition`` JSON forms)."""

    configHash: str
    transitions: list[JsonObject]


class SandboxLineDoc(TypedDict):
    """The sandbox agents would run at here (added by ``run status`` itself)."""

    mode: str
    level: str
    reason: str | None


class StatusDoc(TypedDict):
    """Everything ``git agentops-run status`` shows."""

    runId: str
    status: str
    statusReason: str | None
    goal: str
    target: str
    base: str
    host: str
    budget: BudgetDoc
    contractHash: str
    rootTaskId: str | None
    integration: JsonObject | None
    workers: list[WorkerRowDoc]
    tasks: list[TaskRowDoc]
    questions: list[JsonObject]
    blocked: list[JsonObject]
    policy: StatusPolicyDoc
    sandbox: NotRequired[SandboxLineDoc]
