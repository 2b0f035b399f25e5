"""Delivering notifications: from the run's committed journal to the person's commands, in order, retried, never in
the run's way.

A :class:`Notifier` reads the run's journal -- what is there is committed, so every notification comes after the
state that caused it -- from its **cursor** (the last event it queued), queues one delivery per (event, command)
the person subscribed to, and runs them in journal order, each with its timeout. A command that fails or hangs is
tried again after 1, 2, 4 ... seconds (at most 5 minutes apart, ``retries`` times), then given up; either way the
run's log says so. Cursor and queue are one file in the run's private dir (``notify.json``), written after each
change, so a restarted supervisor goes on where this one stopped and nothing is queued twice; a delivery whose
command succeeded just before a ``kill -9`` (its removal not yet written) is sent again: at least once, with the
document's ``id`` for the receiver to deduplicate by.

It runs in a thread of its own with its own repository handle: a slow webhook never delays the loop.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..canonical import digest
from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.private import read_private, write_private
from ..gitstore.repo import Store
from ..process.command import run_command, scrub_environment
from ..runs import state as runstate
from .record import Command, Format, NotifyConfig, backoff, document, kind_of

STATE: Final = "notify.json"
POLL: Final = 0.5


def command_key(command: Command) -> str:
    """A command's identity across restarts: what it runs and how, not its place in the list."""
    return digest({"argv": list(command.argv), "format": str(command.format)})[:16]


@dataclass(slots=True)
class Delivery:
    """One notification to one command, until it is delivered or given up."""

    key: str
    doc: dict[str, Any]
    attempt: int = 0
    due: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "doc": self.doc, "attempt": self.attempt, "due": self.due}


class Notifier:
    """The deliveries of one run (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        config: NotifyConfig,
        *,
        run_dir: Path,
        environ: Mapping[str, str],
        clock: Clock,
        log: Callable[[str], None],
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.config = config
        self.run_dir = run_dir
        self.environ = environ
        self.clock = clock
        self.log = log
        self.commands = {command_key(c): c for c in config.commands}
        self.cursor: str | None = None
        self.queue: list[Delivery] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._load()

    # -- state ----------------------------------------------------------------------------------------------------
    def _load(self) -> None:
        raw = read_private(self.run_dir, STATE)
        if raw is None:
            return
        try:
            doc = json.loads(raw)
            self.cursor = doc["cursor"]
            self.queue = [Delivery(d["key"], d["doc"], int(d["attempt"]), float(d["due"])) for d in doc["queue"]]
        except (ValueError, KeyError, TypeError) as exc:
            self.log(f"notify: {STATE} is unreadable ({exc}); starting from the run's first event")
            self.cursor, self.queue = None, []

    def _save(self) -> None:
        doc = {"cursor": self.cursor, "queue": [d.to_json() for d in self.queue]}
        write_private(self.run_dir, STATE, json.dumps(doc, sort_keys=True).encode())

    # -- the work --------------------------------------------------------------------------------------------------
    def poll(self) -> int:
        """Queue a delivery for every new notifiable event; returns how many were queued."""
        journal = runstate.journal(self.store, self.run_id)
        if not journal.exists():
            return 0
        fresh = []
        for entry in journal.log():
            if entry.commit == self.cursor:
                break
            fresh.append(entry)
        if not fresh:
            return 0
        queued = 0
        for entry in reversed(fresh):  # oldest first: journal order
            if entry.foreign:
                continue  # not the supervisor's: nothing it claims happened
            kind = kind_of(entry.code, entry.data)
            if kind is None:
                continue
            doc = document(
                self.run_id,
                kind,
                commit=entry.commit,
                code=entry.code,
                summary=entry.summary,
                data=entry.data,
                time=entry.time,
            )
            for key, command in self.commands.items():
                if command.wants(kind):
                    self.queue.append(Delivery(key, doc))
                    queued += 1
        self.cursor = fresh[0].commit
        self._save()
        return queued

    def deliver_due(self) -> int:
        """Run every delivery that is due, in order; returns how many succeeded."""
        done = 0
        waiting: set[str] = set()  # commands with an earlier delivery still to make: each is told in journal order
        for delivery in list(self.queue):
            if delivery.key in waiting:
                continue
            if delivery.due > time.monotonic():
                waiting.add(delivery.key)
                continue
            command = self.commands.get(delivery.key)
            if command is None:  # the person took the command out of their configuration
                self.queue.remove(delivery)
                self._save()
                continue
            problem = self._run(command, delivery.doc)
            if problem is None:
                self.queue.remove(delivery)
                self.log(f"notified {command.argv[0]}: {delivery.doc['title']} ({delivery.doc['id'][:12]})")
                done += 1
            elif delivery.attempt >= self.config.retries:
                self.queue.remove(delivery)
                self.log(f"notify: gave up on {command.argv[0]} for {delivery.doc['id'][:12]}: {problem}")
            else:
                delivery.attempt += 1
                delivery.due = time.monotonic() + backoff(delivery.attempt, self.config.backoff)
                waiting.add(delivery.key)
                self.log(f"notify: {command.argv[0]} failed ({problem}); trying again (attempt {delivery.attempt})")
            self._save()
        return done

    def _run(self, command: Command, doc: Mapping[str, Any]) -> str | None:
        if command.format is Format.DESKTOP:
            argv = [*command.argv, str(doc["title"]), str(doc["event"]["summary"])]
            stdin = b""  # a desktop notifier reads nothing
        else:
            argv = list(command.argv)
            stdin = json.dumps(doc, sort_keys=True).encode() + b"\n"
        env = scrub_environment(self.environ, {"AGENTOPS_NOTIFY_KIND": str(doc["kind"])})
        try:
            result = run_command(
                argv, cwd=self.run_dir, env=env, timeout=command.timeout, stdin=stdin, clock=self.clock
            )
        except AgentOpsError as exc:
            return exc.message
        if result.ok:
            return None
        if result.timed_out:
            return f"timed out after {command.timeout:g}s"
        return result.spawn_error or f"exited {result.exit_code}"

    # -- the thread ------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Poll and deliver in a thread of its own until :meth:`stop`."""
        if not self.commands or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._serve, name="agentops-notify", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        # from now on the store is this thread's alone (pygit2 objects are not shared across threads)
        self.store = self.store.reopen()
        while True:
            stopping = self._stop.is_set()  # once more after stop: the run's last state is notified too
            try:
                self.poll()
                self.deliver_due()
            except AgentOpsError as exc:
                self.log(f"notify: {exc.code}: {exc.message}")
            if stopping:
                return
            self._stop.wait(POLL)

    def stop(self, *, flush: float = 5.0) -> None:
        """Stop the thread after a last look (up to ``flush`` seconds for what is due now)."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=flush + max((c.timeout for c in self.commands.values()), default=0))
        self._thread = None
