"""What a person is told, and how: the notification kinds, the ``[notify]`` table as values, and the document a
notifier reads on stdin.

``[notify]`` lives in the person's own configuration (``$XDG_CONFIG_HOME/git-agentops/config.toml``), never in a
repository's policy: being woken up is the person's choice, and a repository must not make their machine run a
command it names. ::

    [notify]
    retries = 5                                  # attempts after the first, with backoff (1 s, 2 s, 4 s ... 5 min)
    backoff = 1.0                                # seconds before the first retry

    [[notify.commands]]
    format = "desktop"                           # notify-send TITLE BODY, where notify-send is installed

    [[notify.commands]]                          # a webhook: the JSON document on stdin, POSTed by a command of yours
    argv = ["curl", "-fsS", "-H", "content-type: application/json", "--data-binary", "@-", "https://hooks.example/x"]
    events = ["question", "approval", "run-blocked"]
    timeout = 20

A **kind** is what a person acts on; each comes from one journal event (:func:`kind_of`): a worker's question
(``question``), a policy change awaiting approval (``approval``), a task blocked (``blocked``), the budget reached
(``budget``), the run blocked (``run-blocked``) or complete (``complete``), an integration that failed
(``failed``). The document (:func:`document`, ``schemas/notification.schema.json``) carries an ``id`` -- the event's
commit and the kind -- that a receiver deduplicates by: delivery is at least once (a supervisor killed between a
command's success and its record of it sends that one again), and in journal order.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from .. import eventkinds as kinds
from ..errors import AgentOpsError

VERSION: Final = 1
DEFAULT_RETRIES: Final = 5
DEFAULT_TIMEOUT: Final = 30.0
BACKOFF_FIRST: Final = 1.0
BACKOFF_MAX: Final = 300.0


class Kind(enum.StrEnum):
    """What a notification is about."""

    QUESTION = "question"
    APPROVAL = "approval"
    BLOCKED = "blocked"
    BUDGET = "budget"
    RUN_BLOCKED = "run-blocked"
    COMPLETE = "complete"
    FAILED = "failed"


TITLES: Final = {
    Kind.QUESTION: "a worker asks a question",
    Kind.APPROVAL: "a policy change awaits your approval",
    Kind.BLOCKED: "a task is blocked",
    Kind.BUDGET: "the run reached its budget",
    Kind.RUN_BLOCKED: "the run is blocked",
    Kind.COMPLETE: "the run is complete",
    Kind.FAILED: "an integration failed",
}


_BY_EVENT: Final[Mapping[str, Kind]] = {
    kinds.RUN_AWAITING_INPUT: Kind.QUESTION,
    kinds.RUN_POLICY_PENDING: Kind.APPROVAL,
    kinds.WORKER_BLOCKED: Kind.BLOCKED,
    kinds.RUN_COMPLETE: Kind.COMPLETE,
    kinds.INTEGRATION_FAILED: Kind.FAILED,
}
_BY_STATUS: Final[Mapping[str, Kind]] = {"blocked": Kind.RUN_BLOCKED, "budget-limited": Kind.BUDGET}


def kind_of(code: str, data: Mapping[str, Any]) -> Kind | None:
    """The notification an authentic journal event of ``code`` (with ``data``) calls for, if any (the codes are
    the registered kinds': a renamed one cannot silently stop its notification)."""
    if code == kinds.RUN_STATUS:
        return _BY_STATUS.get(str(data.get("status")))
    return _BY_EVENT.get(code)


class Format(enum.StrEnum):
    """How a command is told: the JSON document on stdin, or a desktop notification's title and body as argv."""

    JSON = "json"
    DESKTOP = "desktop"


@dataclass(frozen=True, slots=True)
class Command:
    """One ``[[notify.commands]]`` entry."""

    argv: tuple[str, ...]
    format: Format = Format.JSON
    events: frozenset[Kind] = frozenset(Kind)
    timeout: float = DEFAULT_TIMEOUT

    def wants(self, kind: Kind) -> bool:
        """Whether this command is told about ``kind``."""
        return kind in self.events


@dataclass(frozen=True, slots=True)
class NotifyConfig:
    """The ``[notify]`` table: its commands and how often a failed delivery is tried again."""

    commands: tuple[Command, ...] = ()
    retries: int = DEFAULT_RETRIES
    backoff: float = BACKOFF_FIRST  # seconds before the first retry; each later one waits twice as long

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], *, source: str) -> NotifyConfig:
        """From the parsed table; ``NOTIFY_CONFIG_INVALID`` naming the first thing wrong, and where."""

        def bad(where: str, why: str) -> AgentOpsError:
            return AgentOpsError("NOTIFY_CONFIG_INVALID", f"{source}: [notify]{where}: {why}")

        unknown = set(doc) - {"commands", "retries", "backoff"}
        if unknown:
            raise bad("", f"unknown key(s) {', '.join(sorted(unknown))}")
        retries = doc.get("retries", DEFAULT_RETRIES)
        if not isinstance(retries, int) or isinstance(retries, bool) or not 0 <= retries <= 20:
            raise bad(".retries", "a whole number from 0 to 20")
        first = doc.get("backoff", BACKOFF_FIRST)
        if not isinstance(first, int | float) or isinstance(first, bool) or not 0.01 <= first <= 60:
            raise bad(".backoff", "seconds before the first retry, from 0.01 to 60")
        entries = doc.get("commands", [])
        if not isinstance(entries, list):
            raise bad(".commands", "a list of tables ([[notify.commands]])")
        commands = []
        for index, entry in enumerate(entries):
            where = f".commands[{index}]"
            if not isinstance(entry, dict):
                raise bad(where, "a table")
            unknown = set(entry) - {"argv", "format", "events", "timeout"}
            if unknown:
                raise bad(where, f"unknown key(s) {', '.join(sorted(unknown))}")
            try:
                shape = Format(entry.get("format", Format.JSON))
            except ValueError:
                raise bad(f"{where}.format", f"one of {', '.join(Format)}") from None
            argv = entry.get("argv", ["notify-send"] if shape is Format.DESKTOP else None)
            if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a for a in argv):
                raise bad(f"{where}.argv", "a non-empty list of non-empty strings (the command and its arguments)")
            events = entry.get("events", list(Kind))
            if not isinstance(events, list) or not events or not all(e in set(Kind) for e in events):
                raise bad(f"{where}.events", f"a non-empty list of {', '.join(Kind)}")
            timeout = entry.get("timeout", DEFAULT_TIMEOUT)
            if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= 600:
                raise bad(f"{where}.timeout", "seconds, more than 0 and at most 600")
            commands.append(Command(tuple(argv), shape, frozenset(Kind(e) for e in events), float(timeout)))
        return cls(tuple(commands), retries, float(first))


def document(
    run_id: str, kind: Kind, *, commit: str, code: str, summary: str, data: Mapping[str, Any], time: float
) -> dict[str, Any]:
    """The JSON document a notifier reads on stdin (``schemas/notification.schema.json``)."""
    return {
        "version": VERSION,
        "id": f"{commit}:{kind}",
        "kind": str(kind),
        "title": f"{run_id}: {TITLES[kind]}",
        "runId": run_id,
        "event": {"commit": commit, "code": code, "summary": summary, "data": dict(data), "time": time},
    }


def backoff(attempt: int, first: float = BACKOFF_FIRST) -> float:
    """Seconds before attempt ``attempt`` (1: the first retry): ``first``, twice that, four times... at most
    :data:`BACKOFF_MAX`."""
    return float(min(BACKOFF_MAX, first * 2 ** max(0, attempt - 1)))
