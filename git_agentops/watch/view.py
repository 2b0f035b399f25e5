"""What ``git agentops-run watch`` shows: a frame of a run's state, laid out as plain text or as a ``rich`` screen.

:mod:`git_agentops.cli.watch` reads the run (only when its state ref moves) into a :class:`Frame` and the selected
worker's host log into a :class:`LogTail`; this module turns them into lines. Both layouts come from the same rows
(:func:`task_rows`, :func:`worker_rows`) so the pipe and the terminal say the same things. Everything shown that an
agent or a person wrote -- the goal, titles, questions, event summaries, log lines -- goes through :func:`clean`
first: no control character or escape sequence of theirs reaches the terminal, and ``rich`` gets
:class:`~rich.text.Text`, never markup.

The screen fits the terminal it is given (80x24 included): the header, budget, questions and section rules always
show; the task tree, the worker table and the log share the rest, the log keeping at least a few lines, and a list
that does not fit ends in ``... N more``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from rich.console import RenderableType

    from ..canonical import JsonObject
    from ..model.statusdoc import StatusDoc, TaskRowDoc

_CONTROL: Final = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|[\x00-\x1f\x7f-\x9f]")
"""An ANSI CSI or OSC sequence, or any other C0/C1 control character (tabs and newlines included)."""

STYLES: Final = {
    "complete": "bold green",
    "delivered": "green",
    "receipted": "green",
    "published": "green",
    "blocked": "bold red",
    "failed": "bold red",
    "fenced": "red",
    "budget-limited": "bold red",
    "stopping": "red",
    "awaiting-input": "bold yellow",
    "active": "yellow",
    "running": "yellow",
    "starting": "yellow",
    "handing-off": "yellow",
    "ready": "cyan",
    "assigned": "cyan",
}
"""A status's style; one not named here is dim. Only the 8 standard colours, which every terminal has."""

MIN_LOG_LINES: Final = 3
MAX_QUESTIONS: Final = 2
PLAIN_LOG_LINES: Final = 10  # a snapshot's share of the log
PLAIN_EVENT: Final = 100


@dataclass(frozen=True, slots=True)
class LastEvent:
    """A journal event, as a worker's latest or the run's newest."""

    code: str
    summary: str
    time: float


@dataclass(frozen=True, slots=True)
class Frame:
    """One read of a run: ``controls.summary`` and what the journal says each worker did last."""

    doc: StatusDoc
    tip: str | None  # the state commit read
    read_at: float  # clock time of the read: budget and ages count on from it
    clock_running: bool  # the run had an open budget interval (a supervisor was serving it)
    events: Mapping[str, LastEvent]  # worker id -> its latest event
    newest: LastEvent | None
    problem: str | None = None  # why the last read failed; the frame then shows the state before it

    @property
    def status(self) -> str:
        return str(self.doc["status"])


@dataclass(frozen=True, slots=True)
class LogTail:
    """The last lines of the selected worker's host log (its current generation's)."""

    worker: str | None
    title: str  # what it is, for the section rule
    lines: tuple[str, ...]


def clean(text: object, limit: int = 400) -> str:
    """``text`` on one line, without control characters or escape sequences, at most ``limit`` characters."""
    flat = _CONTROL.sub(lambda m: " " if m.group() in ("\t", "\n", "\r") else "", str(text))
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h10m``: a budget or an elapsed time."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def age(seconds: float) -> str:
    """How long ago, in one unit: ``5s``, ``12m``, ``3h``, ``2d``."""
    s = max(0, int(seconds))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def _count(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 10_000 else str(n)


def budget_line(frame: Frame, now: float) -> str:
    """Active time of the limit, then tokens and dollars where a host reported them."""
    budget = frame.doc["budget"]
    used = float(budget["usedSeconds"]) + (max(0.0, now - frame.read_at) if frame.clock_running else 0.0)
    parts = [f"{duration(used)} of {duration(budget['limitSeconds'])} active"]
    if budget["usedTokens"] or budget["tokenLimit"]:
        limit = f" of {_count(budget['tokenLimit'])}" if budget["tokenLimit"] else ""
        parts.append(f"{_count(budget['usedTokens'])} tokens{limit}")
    if budget["usedCostUsd"] is not None or budget["costLimitUsd"]:
        limit = f" of ${budget['costLimitUsd']:.2f}" if budget["costLimitUsd"] else ""
        parts.append(f"${budget['usedCostUsd'] or 0.0:.2f}{limit}")
    return ", ".join(parts)


def integration_line(doc: StatusDoc) -> str:
    """The integration stage: its status, candidate and attempts, or why it failed."""
    record = doc.get("integration")
    if not record:
        return "not started"
    from ..model.integration import Integration

    integration = Integration.from_json(record)
    text = str(integration.status)
    if integration.failure:
        text += f": {clean(integration.failure, 80)}"
    elif integration.candidate:
        text += f", candidate {str(integration.candidate)[:12]}"
    if (integration.attempts or 0) > 1:
        text += f" (attempt {integration.attempts})"
    return text


def header_line(frame: Frame) -> str:
    doc = frame.doc
    reason = f" ({clean(doc['statusReason'], 160)})" if doc.get("statusReason") else ""
    return f"run {doc['runId']}: {doc['status']}{reason}"


@dataclass(frozen=True, slots=True)
class TaskRow:
    """A task in the tree: its guide prefix, what it is and needs, and its worker."""

    prefix: str
    title: str
    status: str
    needs: tuple[str, ...]
    worker: str | None


def task_rows(doc: StatusDoc) -> list[TaskRow]:
    """The tasks as a tree by parent (the plan order kept), each with the titles of the tasks it depends on."""
    tasks = list(doc["tasks"])
    ids = {t["taskId"] for t in tasks}
    titles = {t["taskId"]: clean(t["title"], 120) for t in tasks}
    workers = {w["taskId"]: w["workerId"] for w in doc["workers"] if w["taskId"]}
    children: dict[str | None, list[TaskRowDoc]] = {}
    for task in tasks:
        parent = task["parent"] if task["parent"] in ids else None
        children.setdefault(parent, []).append(task)
    rows: list[TaskRow] = []
    seen: set[str] = set()

    def walk(parent: str | None, indent: str, depth: int) -> None:
        kids = [k for k in children.get(parent, []) if k["taskId"] not in seen]
        for i, task in enumerate(kids):
            seen.add(task["taskId"])
            last = i == len(kids) - 1
            guide = "" if depth == 0 else indent + ("└─ " if last else "├─ ")
            needs = tuple(titles.get(d, str(d)[:13]) for d in task["dependencies"])
            rows.append(TaskRow(guide, titles[task["taskId"]], str(task["status"]), needs, workers.get(task["taskId"])))
            walk(task["taskId"], "" if depth == 0 else indent + ("   " if last else "│  "), depth + 1)

    walk(None, "", 0)
    return rows


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """A worker in the table; ``event`` and ``age`` are its latest journal event and how long ago it was."""

    worker: str
    role: str
    status: str
    generation: int
    event: str
    age: str


def _unnamed(summary: str, worker_id: str) -> str:
    """An event summary without the worker's id in front (the table's first column says it)."""
    for prefix in (f"{worker_id}: ", f"{worker_id} "):
        if summary.startswith(prefix):
            return summary[len(prefix) :]
    return summary


def worker_rows(frame: Frame, now: float) -> list[WorkerRow]:
    rows = []
    for w in frame.doc["workers"]:
        last = frame.events.get(w["workerId"])
        event = f"{last.code}: {_unnamed(clean(last.summary, 200), w['workerId'])}" if last else "-"
        rows.append(
            WorkerRow(
                w["workerId"],
                "coord" if w["role"] == "coordinator" else str(w["role"]),
                str(w["status"]),
                int(w["generation"]),
                event,
                age(now - last.time) if last else "-",
            )
        )
    return rows


def pending_questions(doc: StatusDoc) -> list[JsonObject]:
    return [q for q in doc["questions"] if q.get("answer") is None]


def _question_lines(doc: StatusDoc) -> list[str]:
    pending = pending_questions(doc)
    lines = [f"? {q['questionId']} from {q['workerId']}: {clean(q['prompt'])}" for q in pending[:MAX_QUESTIONS]]
    if len(pending) > MAX_QUESTIONS:
        lines.append(f"  ... {len(pending) - MAX_QUESTIONS} more questions ('git agentops-run status' lists them)")
    if pending:
        lines.append(f"  answer: git agentops-run answer {doc['runId']} {pending[0]['questionId']} 'TEXT'")
    return lines


def _needs(row: TaskRow) -> str:
    return f"needs {', '.join(row.needs)}" if row.needs else ""


def plain(frame: Frame, log: LogTail, now: float) -> list[str]:
    """The frame as plain text: one snapshot for a pipe or a file (no escape sequences)."""
    doc = frame.doc
    lines = [f"{header_line(frame)}  [{time.strftime('%H:%M:%S', time.localtime(now))}]"]
    if frame.problem:
        lines.append(f"warning: {frame.problem}")
    lines += [
        f"goal:        {clean(doc['goal'])}",
        f"budget:      {budget_line(frame, now)}",
        f"integration: {integration_line(doc)}",
    ]
    lines += _question_lines(doc)
    lines.append("tasks:")
    tasks = task_rows(doc)
    width = max((len(r.prefix) + len(r.title) for r in tasks), default=0)
    for r in tasks:
        name = f"{r.prefix}{r.title}"
        lines.append(f"  {name:<{width}}  {r.status:<10} {r.worker or '':<16} {_needs(r)}".rstrip())
    lines.append("workers:")
    lines.append(f"  {'WORKER':<18}{'ROLE':<7}{'STATUS':<13}{'GEN':>3}  {'AGE':>4}  LAST EVENT")
    for w in worker_rows(frame, now):
        lines.append(f"  {w.worker:<18}{w.role:<7}{w.status:<13}{w.generation:>3}  {w.age:>4}  {w.event[:PLAIN_EVENT]}")
    lines.append(f"{clean(log.title)}:")
    lines += [f"  {clean(line)}" for line in log.lines[-PLAIN_LOG_LINES:]] or ["  (nothing yet)"]
    return lines


def fit(tasks: int, workers: int, room: int) -> tuple[int, int, int]:
    """Lines for the task tree, the worker rows and the log out of ``room``: the lists whole while the log keeps
    :data:`MIN_LOG_LINES`, else shared between them in proportion; the log gets what is left."""
    room = max(0, room)
    if tasks + workers + MIN_LOG_LINES <= room:
        return tasks, workers, room - tasks - workers
    share = max(0, room - MIN_LOG_LINES)
    t = min(tasks, share * tasks // max(1, tasks + workers))
    w = min(workers, share - t)
    t = min(tasks, share - w)  # what the workers leave unused goes back to the tasks
    return t, w, room - t - w


def _more(rows: Sequence[Any], room: int) -> tuple[list[Any], int]:
    """The rows that fit in ``room`` lines and how many are hidden (a hidden count takes the last line)."""
    if len(rows) <= room:
        return list(rows), 0
    keep = max(0, room - 1)
    return list(rows[:keep]), len(rows) - keep


def screen(frame: Frame, log: LogTail, now: float, *, height: int | None, live: bool = True) -> RenderableType:
    """The frame as a ``rich`` renderable of at most ``height`` lines (None: all of it), as wide as the console;
    ``live`` adds the key hint."""
    from rich.console import Group
    from rich.rule import Rule
    from rich.table import Table
    from rich.text import Text

    doc = frame.doc

    def line(*parts: tuple[str, str] | str) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        for part in parts:
            text.append(*((part, "") if isinstance(part, str) else part))
        return text

    def status(value: str) -> tuple[str, str]:
        return value, STYLES.get(value, "dim")

    title = Table.grid(expand=True)
    title.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
    title.add_column(justify="right", no_wrap=True)
    reason = f" ({clean(doc['statusReason'], 160)})" if doc.get("statusReason") else ""
    clock = time.strftime("%H:%M:%S", time.localtime(now))
    title.add_row(
        line(("run ", "bold"), (f"{doc['runId']}: ", "bold"), status(frame.status), reason),
        line(clock + ("  q quits" if live else "")),
    )
    head: list[RenderableType] = [title]
    if frame.problem:
        head.append(line(("! " + clean(frame.problem), "bold red")))
    head.append(line(("goal ", "bold"), clean(doc["goal"])))
    head.append(line(("budget ", "bold"), budget_line(frame, now)))
    head.append(line(("integration ", "bold"), integration_line(doc)))
    head += [line((q, "bold yellow")) for q in _question_lines(doc)]

    tasks, workers = task_rows(doc), worker_rows(frame, now)
    if height is None:
        t_room, w_room, l_room = len(tasks), len(workers), max(1, len(log.lines))
    else:  # three section rules and the table's header always show
        t_room, w_room, l_room = fit(len(tasks), len(workers), height - len(head) - 4)

    body: list[RenderableType] = [Rule(Text("tasks", "bold"), align="left", style="dim")]
    tree = Table.grid(padding=(0, 2))
    tree.add_column(no_wrap=True, overflow="ellipsis", min_width=12)
    tree.add_column(no_wrap=True)
    tree.add_column(no_wrap=True, style="dim")
    tree.add_column(no_wrap=True, overflow="ellipsis", style="dim")
    shown, hidden = _more(tasks, t_room)
    for r in shown:
        tree.add_row(line((r.prefix, "dim"), r.title), Text(*status(r.status)), Text(r.worker or ""), Text(_needs(r)))
    if hidden:
        tree.add_row(Text(f"... {hidden} more tasks", "dim"))
    body.append(tree)

    body.append(Rule(Text("workers", "bold"), align="left", style="dim"))
    table = Table(box=None, padding=(0, 1), pad_edge=False, show_edge=False, header_style="bold", expand=True)
    table.add_column("WORKER", no_wrap=True, overflow="ellipsis", max_width=20)
    table.add_column("ROLE", no_wrap=True)
    table.add_column("STATUS", no_wrap=True)
    table.add_column("GEN", justify="right", no_wrap=True)
    table.add_column("AGE", justify="right", no_wrap=True)
    table.add_column("LAST EVENT", no_wrap=True, overflow="ellipsis", ratio=1)
    shown_w, hidden_w = _more(workers, w_room)
    for w in shown_w:
        marker = "bold" if w.worker == log.worker else ""
        table.add_row(
            Text(w.worker, marker),
            Text(w.role),
            Text(*status(w.status)),
            Text(str(w.generation)),
            Text(w.age),
            Text(w.event),
        )
    if hidden_w:
        table.add_row(Text(f"... {hidden_w} more", "dim"))
    body.append(table)

    body.append(Rule(Text(clean(log.title), "bold"), align="left", style="dim"))
    tail = list(log.lines[-l_room:]) if l_room else []
    body += [line(clean(entry)) for entry in tail] or ([line(("(nothing yet)", "dim"))] if l_room else [])
    return Group(*head, *body)


# -- the board: every run, one row each (run list --all, watch --all) --------------------------------------------------


def board_lines(rows: Sequence[Mapping[str, Any]], now: float) -> list[str]:
    """The board as text: one line per run (``run list --all``'s JSON rows), oldest first; ``?`` marks a state read
    but not verified (no team key, or not authentic)."""
    lines = [f"{'RUN':<26}{'WHERE':<10}{'STATUS':<16}{'AGE':>6} {'ACTIVE':>7} {'TOKENS':>8}  WAITS FOR / GOAL"]
    for r in rows:
        created = float(r.get("createdAt") or 0)
        status = clean(r["status"], 15) + ("" if r.get("verified", True) else "?")
        waits = r.get("waitsFor")
        lines.append(
            f"{clean(r['runId'], 25):<26}{clean(r['where'], 9):<10}{status:<16}"
            f"{age(now - created) if created else '-':>6} {age(float(r.get('usedSeconds') or 0)):>7} "
            f"{_count(int(r.get('tokens') or 0)) if r.get('tokens') else '-':>8}  "
            + (f"waits for {clean(waits, 200)}" if waits else clean(r.get("goal", ""), 60))
        )
    return lines


def board_screen(
    rows: Sequence[Mapping[str, Any]], now: float, *, height: int | None, problem: str | None = None
) -> RenderableType:
    """The board as a ``rich`` renderable of at most ``height`` lines: the runs waiting for a person first (bold),
    then the others, newest first."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    waiting = [r for r in rows if r.get("waitsFor")]
    title = Table.grid(expand=True)
    title.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
    title.add_column(justify="right", no_wrap=True)
    title.add_row(
        Text(f"{len(rows)} run(s), {len(waiting)} waiting for you", "bold"),
        Text(time.strftime("%H:%M:%S", time.localtime(now)) + "  q quits"),
    )
    head: list[RenderableType] = [title]
    if problem:
        head.append(Text("! " + clean(problem), "bold red", no_wrap=True, overflow="ellipsis"))
    table = Table(box=None, padding=(0, 1), pad_edge=False, show_edge=False, header_style="bold", expand=True)
    for name, justify in (("RUN", "left"), ("WHERE", "left"), ("STATUS", "left"), ("AGE", "right")):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    table.add_column("ACTIVE", justify="right", no_wrap=True)
    table.add_column("TOKENS", justify="right", no_wrap=True)
    table.add_column("WAITS FOR / GOAL", no_wrap=True, overflow="ellipsis", ratio=1)
    ordered = waiting + sorted((r for r in rows if not r.get("waitsFor")), key=lambda r: -float(r.get("createdAt", 0)))
    room = len(ordered) if height is None else max(1, height - len(head) - 2)
    for r in ordered[:room]:
        status = clean(r["status"], 15)
        waits = r.get("waitsFor")
        table.add_row(
            Text(clean(r["runId"], 30), "bold" if waits else ""),
            Text(clean(r["where"], 12), "dim"),
            Text(status + ("" if r.get("verified", True) else "?"), STYLES.get(status, "dim")),
            Text(age(now - float(r["createdAt"])) if r.get("createdAt") else "-"),
            Text(age(float(r.get("usedSeconds") or 0))),
            Text(_count(int(r["tokens"])) if r.get("tokens") else "-"),
            Text(f"waits for {clean(waits)}", "bold yellow") if waits else Text(clean(r.get("goal", "")), "dim"),
        )
    if len(ordered) > room:
        table.add_row(Text(f"... {len(ordered) - room} more", "dim"))
    if not rows:
        table.add_row(Text("no runs", "dim"))
    return Group(*head, table)
