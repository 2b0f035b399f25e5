"""A worker's instructions, as typed dictionaries (``schemas/instructions.schema.json``).

The instructions are a JSON document an agent reads from its mailbox, written by another process: it is checked
against its schema where it is read (:func:`git_agentops.protocol.mailbox.read_instructions`) and an agent then reads
it as it is, key by key. Their shape is declared here once, as :mod:`.policydoc` does for the policy, so that
such a reader (the scripted agent, :mod:`git_agentops.hosts.scripted`) is type-checked against the schema instead
of reading ``Any``. A key marked ``NotRequired`` is one the schema lets the document leave out.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from ..canonical import JsonObject, JsonValue


class AnswerDoc(TypedDict):
    """A question the user answered (``answers[]``)."""

    questionId: str
    prompt: str
    answer: str


class TaskEntryDoc(TypedDict):
    """One task of the run as every worker sees it (``tasks[]``)."""

    id: str
    title: str
    status: str
    dependencies: list[str]
    delivery: str | None
    blockedReason: str | None
    criteria: NotRequired[list[JsonObject]]


class AssignedTaskDoc(TypedDict):
    """The worker's own task (``task``): the task document (``schemas/task.schema.json``)."""

    id: str
    revision: int
    title: str
    intent: str
    goal: str
    criteria: list[JsonValue]
    parent: str | None
    dependencies: list[str]
    status: str
    supersededBy: int | None
    policyConfigHash: str | None
    blockedReason: NotRequired[str | None]
    extra: NotRequired[JsonObject]


class TransitionEntryDoc(TypedDict):
    """A policy transition of the run as a coordinator sees it (``policy.transitions[]``)."""

    transitionId: str
    stage: str
    oldConfigHash: str
    newConfigHash: str
    configFile: str
    requestId: str
    refused: NotRequired[JsonObject | None]


class PolicyEntryDoc(TypedDict):
    """The policy in force (``policy``): its config hash, who approves changes, the run's transitions."""

    configHash: str
    changes: str
    transitions: list[TransitionEntryDoc]


class InstructionsDoc(TypedDict):
    """``instructions.json``: who the worker is, its generation and contract, its task, what it must do next."""

    version: int
    runId: str
    workerId: str
    role: str
    generation: int
    contractHash: str
    goal: str
    task: AssignedTaskDoc | None
    tasks: list[TaskEntryDoc]
    rootTaskId: str | None
    diagnostic: str | None
    answers: list[AnswerDoc]
    mailbox: str
    worktree: str
    base: str | None
    host: str
    recipe: str | None
    runStatus: str
    wake: NotRequired[str | None]
    policy: NotRequired[PolicyEntryDoc]
