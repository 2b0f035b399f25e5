"""The statuses of a run and of its workers: closed sets, kept apart from the records that hold them
(:mod:`git_agentops.model.run`) so that the repository hooks (:mod:`git_agentops.hooks.rules`), which read
``run.json`` and a worker's record straight from the journal, compare with them without importing the record
machinery. This module imports nothing but :mod:`enum`; the values are the strings ``run.json`` and the worker
records hold.
"""

from __future__ import annotations

import enum


class RunStatus(enum.StrEnum):
    """A run's status; :mod:`git_agentops.model.run`'s docstring says what each means. ``complete`` is sticky."""

    ACTIVE = "active"
    PAUSED = "paused"
    AWAITING_INPUT = "awaiting-input"
    BLOCKED = "blocked"
    BUDGET_LIMITED = "budget-limited"
    STOPPING = "stopping"
    COMPLETE = "complete"


class WorkerStatus(enum.StrEnum):
    """A worker's lifecycle state.

    :data:`git_agentops.model.run.ACTIVE_WORKER` holds the states of a worker still on its task; the supervisor
    starts a new generation for ``assigned``, ``stopped`` and ``fenced`` workers.
    """

    ASSIGNED = "assigned"
    STARTING = "starting"
    RUNNING = "running"
    IDLE = "idle"
    HANDING_OFF = "handing-off"
    STOPPED = "stopped"
    FENCED = "fenced"
    BLOCKED = "blocked"
    DELIVERED = "delivered"
