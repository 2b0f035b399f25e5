"""``git agentops-run watch [RUN]``: a live view of a run that only reads; ``watch --all [--remote NAME]``: a board.

It shows what ``run status`` shows -- status, goal, budget, the task tree, the workers with their latest event and
its age, pending questions, the integration stage -- and the tail of one worker's host log (``--worker``, by default
the most recently active one). It never writes a ref, a note or a file of the run: the state comes from
:func:`~git_agentops.runs.controls.summary` and the journal, the log is read from the worktree's admin dir.

Why it costs nothing while a run idles: the state is re-read only when the run's state ref moves. Checking the ref
is one ``references.get`` (about 7 us for a loose ref, 4 us packed, against 10 us to read the loose file ourselves),
done four times a second; the host log is re-read only when its size or mtime changes; ages and the budget tick
once a second from the last read, without reading anything.

On a terminal (stdout a TTY, ``TERM`` not ``dumb``) it draws a ``rich`` screen in the alternate screen buffer, in
the 8 standard colours (only bold and dim under ``NO_COLOR``), sized to the terminal; stdin goes into cbreak mode
so ``q`` quits, restored on every way out (``q``, the run ending, an exception, Ctrl-C, SIGTERM, SIGHUP) and while
stopped by Ctrl-Z. Anywhere else it prints a plain-text snapshot whenever the state changed, at most every
``--interval`` seconds. When the run ends it shows the final state and exits 0 for ``complete``, 1 otherwise,
unless ``--follow``.
"""

from __future__ import annotations

import argparse
import os
import re
import select
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING, Any, Final

from ..errors import AgentOpsError
from ..model.run import RunStatus
from .common import Context, Parser, seconds

if TYPE_CHECKING:
    from rich.live import Live

    from ..clock import Clock
    from ..gitstore.repo import Store
    from ..model.statusdoc import WorkerRowDoc
    from ..watch.view import Frame, LastEvent, LogTail

POLL: Final = 0.25  # how often the state ref is looked at (and keys, when no key arrives sooner)
TICK: Final = 1.0  # how often the screen is redrawn when nothing changed (ages, the budget clock)
SCAN_LIMIT: Final = 1000  # journal commits walked for each worker's latest event
LOG_BYTES: Final = 64 * 1024
LOG_LINES: Final = 200
REMOTE_EVERY: Final = 3.0  # watch --all --remote: seconds between fetches of the remote's runs
ALIVE: Final = ("starting", "running", "handing-off")
REVIEWER: Final = re.compile(r"reviewer-([A-Za-z0-9][A-Za-z0-9_-]{0,63})")


def configure(parser: Parser) -> None:
    """The arguments of ``watch`` (the parser is built without importing anything heavy)."""
    parser.add_argument("run_id", metavar="RUN", nargs="?", help="the run to watch (default: the newest)")
    parser.add_argument(
        "--worker",
        metavar="WORKER",
        help="whose host log to show (default: the most recently active worker; reviewer-NAME for a reviewer)",
    )
    parser.add_argument(
        "--interval",
        type=seconds(),
        default=2.0,
        metavar="SECONDS",
        help="without a terminal: at most one snapshot every SECONDS (default 2)",
    )
    parser.add_argument("--follow", action="store_true", help="keep watching after the run ends (q or Ctrl-C quits)")
    parser.add_argument(
        "--all", action="store_true", help="every run as one live board (what each waits for, its spend, its age)"
    )
    parser.add_argument(
        "--remote", metavar="NAME", help="with --all: add the runs on this remote (fetched every few seconds)"
    )


def exit_for(status: str) -> int:
    """0 for a complete run, 1 for any other ending (as ``run start`` and ``run supervise``)."""
    return 0 if status == RunStatus.COMPLETE else 1


class Source:
    """One run read for the view: the state only when its ref moved, the host log only when it changed."""

    def __init__(self, store: Store, run_id: str, clock: Clock, worker: str | None) -> None:
        from ..runs.state import state_ref

        self.store, self.run_id, self.clock, self.worker = store, run_id, clock, worker
        self.ref = state_ref(run_id)  # RUN_NOT_FOUND for a name that cannot be a run
        self._scanned: str | None = None
        self._events: dict[str, LastEvent] = {}
        self._newest: LastEvent | None = None
        self._log_key: tuple[Any, ...] | None = None
        self._log: LogTail | None = None

    def tip(self) -> str | None:
        from ..gitstore.refs import read_ref

        return read_ref(self.store, self.ref)

    def load(self, previous: Frame | None) -> Frame:
        """The run now. A read that fails after the first keeps the previous state and says why."""
        from dataclasses import replace

        from ..runs import state as runstate
        from ..runs.controls import summary
        from ..watch.view import Frame

        tip = self.tip()
        try:
            doc = summary(self.store, self.run_id, self.clock)
            read_at = self.clock.now()
            running = any(i.end is None for i in runstate.read(self.store, self.run_id).run().intervals)
            self._scan()
        except AgentOpsError as exc:
            if previous is None:
                raise
            return replace(previous, tip=tip, problem=f"{exc.code}: {exc.message}")
        return Frame(doc, tip, read_at, running, dict(self._events), self._newest)

    def _scan(self) -> None:
        """Each worker's latest event: the journal walked from its tip down to the commit the last scan began at."""
        from ..runs import state as runstate
        from ..watch.view import LastEvent

        fresh: dict[str, LastEvent] = {}
        first: str | None = None
        newest: LastEvent | None = None
        for n, entry in enumerate(runstate.journal(self.store, self.run_id).log()):
            if entry.commit == self._scanned or n >= SCAN_LIMIT:
                break
            first = first or entry.commit
            if entry.foreign:  # not the supervisor's word: nothing it claims is shown
                continue
            event = LastEvent(entry.code, entry.summary, entry.time)
            newest = newest or event
            worker = entry.data.get("workerId")
            if isinstance(worker, str):
                fresh.setdefault(worker, event)
        self._events.update(fresh)
        self._newest = newest or self._newest
        self._scanned = first or self._scanned

    def check_worker(self, frame: Frame) -> None:
        """``RUN_WORKER_UNKNOWN`` for a ``--worker`` that is neither a worker of the run nor ``reviewer-NAME``."""
        known = {w["workerId"] for w in frame.doc["workers"]}
        if self.worker is not None and self.worker not in known and not REVIEWER.fullmatch(self.worker):
            shown = ", ".join(sorted(known)) or "none yet"
            raise AgentOpsError("RUN_WORKER_UNKNOWN", f"no worker {self.worker!r} in run {self.run_id} ({shown})")

    def selected(self, frame: Frame) -> str | None:
        """``--worker``, else the worker that is alive and did something last (or just did something last)."""
        if self.worker is not None:
            return self.worker
        workers = frame.doc["workers"]
        if not workers:
            return None

        def rank(w: WorkerRowDoc) -> tuple[bool, float]:
            last = frame.events.get(w["workerId"])
            return w["status"] in ALIVE, last.time if last else 0.0

        return str(max(workers, key=rank)["workerId"])

    def _log_file(self, frame: Frame, worker_id: str) -> Path:
        """Where a worker's host output goes (as ``supervisor.workers``): its worktree's admin dir, else the run
        dir; a reviewer's under the run dir's ``reviews``."""
        from ..gitstore.checkout import admin_dir
        from ..runs.state import run_dir

        base = run_dir(self.store, self.run_id)
        worker = next((w for w in frame.doc["workers"] if w["workerId"] == worker_id), None)
        if worker is None:
            found = REVIEWER.fullmatch(worker_id)
            return base / "reviews" / f"review-{found.group(1) if found else 'unknown'}.log"
        admin = admin_dir(Path(worker["worktree"]))
        return (admin or base) / "agentops" / f"host-{worker_id}.log"

    def log_tail(self, frame: Frame) -> LogTail:
        """The selected worker's log: the lines of its last generation, re-read only when the file changed."""
        from ..watch.view import LogTail

        worker_id = self.selected(frame)
        if worker_id is None:
            return LogTail(None, "log", ("(no worker yet)",))
        path = self._log_file(frame, worker_id)
        try:
            info = path.stat()
            key: tuple[Any, ...] = (path, info.st_size, info.st_mtime_ns, info.st_ino)
        except OSError:
            key = (path, None)
        if key == self._log_key and self._log is not None:
            return self._log
        self._log_key = key
        header, lines = read_tail(path)
        if header is None and not lines:
            self._log = LogTail(
                worker_id, f"log of {worker_id}", ("(no host log: not started, or its worktree is gone)",)
            )
        else:
            self._log = LogTail(worker_id, f"log of {worker_id}" + (f", {header}" if header else ""), lines)
        return self._log


def read_tail(path: Path) -> tuple[str | None, tuple[str, ...]]:
    """The last generation in a host log: ``generation N`` from its header line, and its last non-empty lines."""
    from ..hosts.launch import HEADER
    from ..watch.view import clean

    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - LOG_BYTES))
            data = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return None, ()
    if size > LOG_BYTES:
        data = data.partition("\n")[2]  # the first line was cut
    text = "\n" + data
    at = text.rfind(HEADER)
    header: str | None = None
    if at >= 0:
        first, _, data = text[at + 1 :].partition("\n")
        header = first.removeprefix(HEADER.strip("\n")).partition(" of ")[0]
        header = f"generation {clean(header, 20)}"
    lines = [clean(line, 400) for line in data.splitlines() if line.strip()]
    return header, tuple(lines[-LOG_LINES:])


class Terminated(Exception):
    """SIGTERM or SIGHUP arrived: unwind (restoring the terminal) and exit 128 + the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _signals() -> Iterator[None]:
    def stop(signum: int, frame: FrameType | None) -> None:
        signal.signal(signum, signal.SIG_IGN)  # a second one must not interrupt the unwinding
        raise Terminated(signum)

    saved = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


class Keys:
    """Key presses from stdin when it is a terminal, in cbreak mode (no echo, no line buffering; Ctrl-C still
    interrupts); otherwise :meth:`wait` only waits. The terminal's settings are restored on leaving."""

    def __init__(self, stdin: IO[str]) -> None:
        self.fd: int | None = stdin.fileno() if stdin.isatty() else None
        self.saved: list[Any] | None = None

    def grab(self) -> None:
        import termios
        import tty

        if self.fd is not None:
            self.saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd, termios.TCSANOW)

    def release(self) -> None:
        import termios

        if self.fd is not None and self.saved is not None:
            with suppress(termios.error, OSError):  # a terminal that hung up has no settings left to restore
                termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)
            self.saved = None

    def __enter__(self) -> Keys:
        self.grab()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def wait(self, timeout: float) -> str:
        """What was typed within ``timeout`` seconds ("" if nothing)."""
        if self.fd is None:
            time.sleep(timeout)
            return ""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return ""
        data = os.read(self.fd, 64)
        if not data:  # end of input: nothing more to read, only to wait
            self.release()
            self.fd = None
            return ""
        return data.decode("latin-1")


class Session:
    """The watch loop over one :class:`Source`, on a terminal or as plain snapshots."""

    def __init__(self, ctx: Context, source: Source, frame: Frame, *, follow: bool) -> None:
        self.ctx, self.source, self.frame, self.follow = ctx, source, frame, follow
        self.log = source.log_tail(frame)
        self.redraw = True  # the screen is out of date (the state moved, the terminal was resized or continued)

    @property
    def done(self) -> bool:
        """The run ended and we do not follow it further."""
        from ..model.run import ENDED

        return self.frame.status in ENDED and not self.follow

    def _refresh(self) -> bool:
        """Re-read the state if its ref moved; whether it did."""
        if self.source.tip() == self.frame.tip:
            return False
        self.frame = self.source.load(self.frame)
        return True

    def plain(self, interval: float) -> int:
        from ..watch.view import plain

        def snapshot() -> None:
            self.log = self.source.log_tail(self.frame)
            self.ctx.out("\n".join(plain(self.frame, self.log, self.ctx.clock.now())) + "\n")
            self.ctx.stdout.flush()

        snapshot()
        shown = self.frame.tip
        last = time.monotonic()
        while not self.done:
            time.sleep(POLL)
            if self.source.tip() != shown and time.monotonic() - last >= interval:
                self._refresh()
                snapshot()
                shown, last = self.frame.tip, time.monotonic()
        return exit_for(self.frame.status)

    def terminal(self) -> int:
        from rich.console import Console
        from rich.live import Live

        no_color = bool(self.ctx.env.get("NO_COLOR"))
        console = Console(
            file=self.ctx.stdout,
            force_terminal=True,
            color_system="standard",  # 8 colours: no true-colour or 256-colour assumption
            no_color=no_color,
            highlight=False,
            emoji=False,
            markup=False,
            _environ=dict(self.ctx.env),
        )
        if not self.done:  # a run that has ended already is only printed
            live = Live(console=console, screen=True, auto_refresh=False, redirect_stdout=False, redirect_stderr=False)
            with Keys(sys.stdin) as keys, self._screen_signals(live, keys):
                live.start()
                try:
                    if self._loop(live, keys):
                        return 0
                finally:
                    with suppress(OSError):  # a terminal that hung up cannot leave the alternate screen
                        live.stop()
        from ..watch.view import screen

        console.print(
            screen(self.frame, self.source.log_tail(self.frame), self.ctx.clock.now(), height=None, live=False)
        )
        return exit_for(self.frame.status)

    @contextmanager
    def _screen_signals(self, live: Live, keys: Keys) -> Iterator[None]:
        """SIGWINCH redraws at once; Ctrl-Z (SIGTSTP) gives the terminal back before stopping, takes it on SIGCONT."""

        def resized(signum: int, frame: FrameType | None) -> None:
            self.redraw = True

        def suspend(signum: int, frame: FrameType | None) -> None:
            live.stop()
            keys.release()
            os.kill(os.getpid(), signal.SIGSTOP)  # not SIGTSTP: an orphaned process group would ignore that
            keys.grab()
            live.start()
            self.redraw = True

        saved = {signal.SIGWINCH: signal.signal(signal.SIGWINCH, resized)}
        saved[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, suspend)
        try:
            yield
        finally:
            for number, handler in saved.items():
                signal.signal(number, handler)

    def _loop(self, live: Live, keys: Keys) -> bool:
        """Draw until the run ends (False) or ``q`` is pressed (True)."""
        from ..watch.view import screen

        due = 0.0
        self.redraw = True
        while not self.done:
            if self.redraw or time.monotonic() >= due:
                self.log = self.source.log_tail(self.frame)
                view = screen(self.frame, self.log, self.ctx.clock.now(), height=live.console.height)
                live.update(view, refresh=True)
                due, self.redraw = time.monotonic() + TICK, False
            typed = keys.wait(max(0.0, min(POLL, due - time.monotonic())))
            if "q" in typed.lower():
                return True
            self.redraw = self._refresh() or self.redraw
        return False


class Board:
    """Every run on one board: this repository's, re-read when a run's state ref moves, and (``--remote``) the
    remote's, fetched into the sync mirror every :data:`REMOTE_EVERY` seconds by a thread of its own, so a slow
    remote never holds the screen or ``q``."""

    def __init__(self, store: Store, clock: Clock, remote: str | None) -> None:
        import threading

        self.store, self.clock, self.remote = store, clock, remote
        self.problem: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if remote is not None:
            from ..gitstore.sync import mirror

            mirror(store, remote, ("refs/agentops/runs/",))  # the first one here: an unknown remote is an error
            self._thread = threading.Thread(target=self._fetch, name="agentops-board", daemon=True)
            self._thread.start()

    def _fetch(self) -> None:
        from ..gitstore.sync import mirror

        assert self.remote is not None
        store = self.store.reopen()
        while not self._stop.wait(REMOTE_EVERY):
            try:
                mirror(store, self.remote, ("refs/agentops/runs/",), timeout=60)
                self.problem = None
            except AgentOpsError as exc:
                self.problem = f"{self.remote}: {exc.code}: {exc.message}"

    def close(self) -> None:
        """Stop fetching."""
        self._stop.set()

    def key(self) -> tuple[tuple[str, str], ...]:
        """The tips of every run's state, here and mirrored: the board changes only when one of them moves."""
        from ..gitstore.refs import list_refs
        from ..gitstore.sync import MIRROR

        tips = list_refs(self.store, "refs/agentops/runs/")
        if self.remote is not None:
            tips.update(list_refs(self.store, f"{MIRROR}{self.remote}/agentops/runs/"))
        return tuple(sorted((k, v) for k, v in tips.items() if k.endswith("/state") or "/journal/" in k))

    def rows(self) -> list[dict[str, Any]]:
        """The board's rows, oldest first, as ``run list --all --json`` prints them."""
        from ..runs import board

        return [r.to_json() for r in board.every(self.store, self.clock, self.remote, fetch=False)]


def _watch_board(args: argparse.Namespace, ctx: Context) -> int:
    """``watch --all``: the board, live on a terminal, as a text snapshot on every change elsewhere. It ends with
    ``q``/Ctrl-C; without a terminal also once every run on it has ended (unless ``--follow``)."""
    from ..model.run import ENDED

    if args.run_id or args.worker:
        raise AgentOpsError("USAGE", "watch --all shows every run: it takes no RUN and no --worker")
    source = Board(ctx.store(), ctx.clock, args.remote)
    terminal = ctx.stdout.isatty() and ctx.env.get("TERM") != "dumb"

    def ended(rows: list[dict[str, Any]]) -> bool:
        return not args.follow and all(r["status"] in ENDED for r in rows)

    try:
        with _signals():
            if terminal:
                return _board_terminal(ctx, source)
            from ..watch.view import board_lines

            shown: tuple[tuple[str, str], ...] | None = None
            last = 0.0
            while True:
                key = source.key()
                if key != shown and time.monotonic() - last >= args.interval:
                    rows = source.rows()
                    problem = [f"! {source.problem}"] if source.problem else []
                    ctx.out("\n".join([*problem, *board_lines(rows, ctx.clock.now())]) + "\n")
                    ctx.stdout.flush()
                    shown, last = key, time.monotonic()
                    if ended(rows):
                        return 0
                time.sleep(POLL)
    except Terminated as stop:
        return 128 + stop.signum
    finally:
        source.close()


def _board_terminal(ctx: Context, source: Board) -> int:
    from rich.console import Console
    from rich.live import Live

    from ..watch.view import board_screen

    console = Console(
        file=ctx.stdout,
        force_terminal=True,
        color_system="standard",
        no_color=bool(ctx.env.get("NO_COLOR")),
        highlight=False,
        emoji=False,
        markup=False,
        _environ=dict(ctx.env),
    )
    live = Live(console=console, screen=True, auto_refresh=False, redirect_stdout=False, redirect_stderr=False)
    with Keys(sys.stdin) as keys:
        live.start()
        try:
            key: tuple[tuple[str, str], ...] | None = None
            rows: list[dict[str, Any]] = []
            due = 0.0
            while True:
                now_key = source.key()
                if now_key != key:
                    key, rows, due = now_key, source.rows(), 0.0
                if time.monotonic() >= due:
                    view = board_screen(rows, ctx.clock.now(), height=live.console.height, problem=source.problem)
                    live.update(view, refresh=True)
                    due = time.monotonic() + TICK
                if "q" in keys.wait(POLL).lower():
                    return 0
        finally:
            with suppress(OSError):
                live.stop()


def watch(args: argparse.Namespace, ctx: Context) -> int:
    """``git agentops-run watch``. ``USAGE`` under ``--json`` or for a bad ``--interval``, ``RUN_NOT_FOUND``,
    ``RUN_WORKER_UNKNOWN``; exit 0 when the run completes or on ``q``, 1 when it ends otherwise."""
    if ctx.json:
        raise AgentOpsError(
            "USAGE", "watch has no --json output; 'git agentops-run status RUN --json' prints one snapshot"
        )
    if args.all:
        return _watch_board(args, ctx)
    if args.remote:
        raise AgentOpsError("USAGE", "--remote goes with --all (a board of every run)")
    from .runinfo import latest

    run_id = args.run_id or latest(ctx)
    source = Source(ctx.store(), run_id, ctx.clock, args.worker)
    frame = source.load(None)
    source.check_worker(frame)
    session = Session(ctx, source, frame, follow=args.follow)
    terminal = ctx.stdout.isatty() and ctx.env.get("TERM") != "dumb"
    try:
        with _signals():
            return session.terminal() if terminal else session.plain(args.interval)
    except Terminated as stop:
        if stop.signum == signal.SIGHUP:  # the terminal is gone: what is still buffered for it goes nowhere
            os.dup2(os.open(os.devnull, os.O_WRONLY), ctx.stdout.fileno())
        return 128 + stop.signum
