"""What a foreground ``run start`` or ``run supervise`` prints while the run goes on, and why it ended ``blocked``.

A run takes minutes; without this, a person saw the run id, minutes of nothing, then ``run-...: blocked``. On a
terminal (stderr a TTY), or with ``--progress``, a thread follows the run's journal -- as ``run watch`` does, reading
the state only when its ref moves, with its own repository handle -- and prints one line on stderr per planned task,
started generation, handoff, delivery, refusal, failure and block; a failed generation is followed by its first
failing command and first failing lines, read from the evidence the supervisor recorded (:mod:`git_agentops.runs.
why`). What ``--json`` prints on stdout is unchanged; the human result line is followed, for a blocked run, by why
(the task blocked first and its last failure).

Every line goes through :func:`~git_agentops.watch.view.clean`: nothing an agent wrote reaches the terminal as an
escape sequence.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from .. import eventkinds as kinds

if TYPE_CHECKING:
    from ..gitstore.events import Entry
    from ..gitstore.journal import Journal
    from ..gitstore.repo import Store
    from ..runs.state import RunView

POLL: Final = 0.25
SCAN_LIMIT: Final = 5000
SHOWN: Final = frozenset(
    {
        kinds.RUN_PLAN_CREATED,
        kinds.RUN_WORKER_PLANNED,
        kinds.TASK_REVISED,
        kinds.WORKER_STARTED,
        kinds.WORKER_HANDING_OFF,
        kinds.WORKER_FAILED,
        kinds.REQUEST_REFUSED,
        kinds.TASK_DELIVERED,
        kinds.WORKER_BLOCKED,
        kinds.INTEGRATION_REQUESTED,
        kinds.INTEGRATION_FAILED,
        kinds.INTEGRATION_VERIFIED,
        kinds.INTEGRATION_PUBLISHED,
        kinds.RUN_STATUS,
        kinds.RUN_COMPLETE,
    }
)
"""The events a person is told about; the rest (state bookkeeping, heartbeats of a kind) stay in ``run log``."""


class Follower:
    """Follows one run's journal in a thread and says each new event of :data:`SHOWN` (see the module docstring)."""

    def __init__(self, store: Store, run_id: str, say: Callable[[str], None]) -> None:
        import pygit2

        from ..gitstore.repo import Store as StoreType
        from ..runs import state as runstate

        # a handle of its own: pygit2 objects are not shared across threads
        own = StoreType(pygit2.Repository(str(store.git_dir)), clock=store.clock, identity=store.identity)
        self.store, self.run_id, self.say = own, run_id, say
        self.journal: Journal = runstate.journal(own, run_id)
        self.seen: str | None = self._tip()  # what happened before it started was said already (or not asked for)
        self.tasks: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agentops-progress", daemon=True)

    def _tip(self) -> str | None:
        from ..gitstore.refs import read_ref
        from ..runs.state import state_ref

        return read_ref(self.store, state_ref(self.run_id))

    def start(self) -> Follower:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop following, after saying what happened up to now."""
        self._stop.set()
        self._thread.join(timeout=10)
        self.poll()

    def _run(self) -> None:
        while not self._stop.wait(POLL):
            try:
                self.poll()
            except Exception as exc:  # noqa: BLE001 -- progress is a courtesy: it never stops the run it shows
                self.say(f"(progress stopped: {type(exc).__name__}: {exc})")
                return

    def poll(self) -> None:
        """Say the events since the last poll, oldest first."""
        tip = self._tip()
        if tip is None or tip == self.seen:
            return
        fresh: list[Entry] = []
        for n, entry in enumerate(self.journal.log()):
            if entry.commit == self.seen or n >= SCAN_LIMIT:
                break
            fresh.append(entry)
        self.seen = tip
        for entry in reversed(fresh):
            for line in self.lines(entry):
                self.say(line)

    def lines(self, entry: Entry) -> list[str]:
        """The lines that say ``entry`` (none for an event not in :data:`SHOWN` or a foreign commit)."""
        from ..runs.state import RunView
        from ..runs.why import event_cause
        from ..watch.view import clean

        if entry.foreign or entry.code not in SHOWN:
            return []
        cause = event_cause(self.store, self.journal, entry)
        # a handoff refused after it was taken: WORKER_FAILED says it
        if entry.code == kinds.REQUEST_REFUSED and not cause:
            return []
        view = RunView(self.journal.read_at(entry.commit))
        stamp = time.strftime("%H:%M:%S", time.localtime(entry.time))
        said = [f"{stamp} {text}" for text in self._headline(entry, view)]
        if said:
            said += [f"{'':9}{line}" for line in cause]
        return [clean(line, 400) for line in said]

    def _who(self, view: RunView, worker_id: object) -> str:
        if not isinstance(worker_id, str):
            return "the supervisor"
        try:
            worker = view.worker(worker_id)
        except Exception:  # noqa: BLE001 -- a worker the state no longer names is said by its id
            return worker_id
        if worker.task_id and str(worker.role) != "coordinator":
            try:
                return repr(view.task(worker.task_id).title)
            except Exception:  # noqa: BLE001
                return worker_id
        return worker_id

    def _headline(self, entry: Entry, view: RunView) -> list[str]:
        data, code = entry.data, entry.code
        who = self._who(view, data.get("workerId"))
        if code in (kinds.RUN_PLAN_CREATED, kinds.RUN_WORKER_PLANNED, kinds.TASK_REVISED):
            return self._planned(view)
        if code == kinds.WORKER_STARTED:
            worker = view.worker(str(data["workerId"]))
            return [f"{who}: generation {worker.generation} started ({worker.worker_id})"]
        if code == kinds.WORKER_HANDING_OFF:
            return [f"{who}: {entry.summary.rpartition(' hands off ')[2] or 'its work'} handed off; verifying it"]
        if code == kinds.WORKER_FAILED:
            return [f"{who}: generation {data.get('generation', '?')} failed: {data.get('code', entry.summary)}"]
        if code == kinds.REQUEST_REFUSED:
            return [f"{who}: request refused: {data.get('code')}"]
        if code == kinds.TASK_DELIVERED:
            return [f"{who}: delivered as {str(data.get('commit', ''))[:12]} (generation {data.get('generation')})"]
        if code == kinds.WORKER_BLOCKED:
            return [f"{who}: blocked: {data.get('code', '')}"]
        return [entry.summary]

    def _planned(self, view: RunView) -> list[str]:
        """A line for each task the plan has now and did not have at the last look."""
        run = view.run()
        tasks = view.tasks()
        new = [t for t in [run.root_task_id, *run.plan_order] if t and t in tasks and t not in self.tasks]
        self.tasks.update(new)
        lines = []
        for task_id in new:
            task = tasks[task_id]
            after = [repr(tasks[d].title) for d in task.dependencies if d in tasks]
            what = "goal" if task.parent is None else "task"
            lines.append(f"planned {what} {task.title!r}" + (f" (after {', '.join(after)})" if after else ""))
        return lines
