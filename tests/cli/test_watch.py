"""``git agentops-run watch``: a real scripted run watched under a pseudo-terminal and through a pipe.

The screen must reach the run's end (every task delivered, the run complete), ``q`` must quit at once with the
terminal's settings restored (SIGTERM too), a pipe gets plain text without one escape byte, and the watch must
never write: the run's refs are the same before and after. While the run idles the watch costs under 2 % of a core.
"""

from __future__ import annotations

import fcntl
import io
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from git_agentops.watch.view import Frame, LastEvent, LogTail, clean, fit, plain, screen

from ..conftest import git
from ..helpers import HANDOFF, Part, child, commit_step, simple_child, write_step
from ..runkit import cli, project, recipe, start, stop, supervisor_running, wait_for, worker_of

ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78cM]")
LEAVE_ALT_SCREEN = b"\x1b[?1049l"


def _strip(data: bytes) -> str:
    return ANSI.sub("", data.decode("utf-8", errors="replace")).replace("\r", "")


def _agentops_refs(repo: Path) -> str:
    return git(repo, "for-each-ref", "--format=%(objectname) %(refname)", "refs/agentops", "refs/notes")


def _written(repo: Path) -> tuple[str, dict[str, tuple[int, int]]]:
    """The run's refs and notes, and every private file of the toolkit (run dirs, worktree admin dirs, logs)."""
    files = {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns)
        for top in (repo / ".git" / "agentops", repo / ".git" / "worktrees")
        for p in top.rglob("*")
        if p.is_file()
    }
    return _agentops_refs(repo), files


@dataclass
class Watch:
    """``git-agentops-run watch`` on the slave side of a pseudo-terminal of 80x24."""

    proc: subprocess.Popen[bytes]
    master: int
    slave: int
    output: bytearray

    def pump(self, seconds: float) -> None:
        """Read what the watch wrote for ``seconds`` (it must never block on a full terminal)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self.master], [], [], min(left, 0.1))
            if ready:
                try:
                    self.output += os.read(self.master, 65536)
                except OSError:  # the slave side is gone
                    return

    def until(self, predicate: Callable[[str], bool], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while not predicate(text := _strip(bytes(self.output))):
            if time.monotonic() > deadline:
                raise AssertionError(f"the screen never showed it; last output:\n{text[-3000:]}")
            self.pump(0.2)
        return text

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"watch did not exit; output:\n{_strip(bytes(self.output))[-3000:]}")
            self.pump(0.05)
        self.pump(0.2)
        return self.proc.returncode


@pytest.fixture
def watch_pty() -> Iterator[Callable[..., Watch]]:
    started: list[Watch] = []

    def launch(repo: Path, *args: str, env: dict[str, str] | None = None) -> Watch:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        env = {**{k: v for k, v in os.environ.items() if k != "NO_COLOR"}, "TERM": "xterm", **(env or {})}
        env.update(COLUMNS="80", LINES="24")
        exe = shutil.which("git-agentops-run")
        assert exe is not None
        proc = subprocess.Popen(
            [exe, "watch", *args], cwd=repo, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
        )
        started.append(Watch(proc, master, slave, bytearray()))
        return started[-1]

    yield launch
    for w in started:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()
        if w.master >= 0:
            os.close(w.master)
        os.close(w.slave)


def _sleeper(seconds: float = 120) -> Part:
    """One task whose agent sleeps before doing its work: a run that idles."""
    return child(
        "a",
        "Part A",
        [[{"sleep": seconds}, write_step("src/a.txt", "a\n"), commit_step("Add a"), HANDOFF]],
    )


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime (fields 14 and 15 of the whole line)


# -- a whole run, watched ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_screen_follows_a_run_to_complete_and_the_watch_writes_nothing(
    tmp_path: Path, watch_pty: Callable[..., Watch]
) -> None:
    repo = project(tmp_path)
    path = recipe(
        tmp_path,
        _sleeper(2)  # Part A: the run is still going when the watch starts
        + simple_child("b", "src/b.txt", ["a"], title="Part B")
        + simple_child("c", "src/c.txt", title="Part C"),
        finalize=True,
    )
    run_id = start(repo, path)
    try:
        w = watch_pty(repo, run_id)
        assert w.wait(timeout=180) == 0
    finally:
        stop(repo, run_id)
    raw = bytes(w.output)
    assert b"\x1b[?1049h" in raw and LEAVE_ALT_SCREEN in raw  # the live screen used the alternate buffer
    final = _strip(raw.rsplit(LEAVE_ALT_SCREEN, 1)[1])  # what stays on the terminal: the final state
    assert f"run {run_id}: complete" in final, final
    for title in ("Part A", "Part B", "Part C", "Build it"):
        assert re.search(rf"{title}\s+delivered", final), final
    assert re.search(r"Part B\s+delivered\s+worker-\w+\s+needs Part A", final), final
    assert "integration complete" in final, final
    assert all(len(line) <= 80 for line in final.splitlines()), final

    # afterwards: a pipe gets one plain snapshot of the final state, and nothing of the run changed
    before = _written(repo)
    done = subprocess.run(["git", "agentops-run", "watch", run_id], cwd=repo, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert b"\x1b" not in done.stdout and done.stderr == b""
    text = done.stdout.decode()
    assert text.startswith(f"run {run_id}: complete")
    assert re.search(r"Part B\s+delivered", text) and "integration: complete" in text
    w2 = watch_pty(repo, run_id, "--follow")
    w2.until(lambda t: "q quits" in t, timeout=30)
    os.write(w2.master, b"q")
    assert w2.wait(timeout=10) == 0
    assert _written(repo) == before


# -- an idle run: CPU, q, SIGTERM, pause ---------------------------------------------------------------------------


@pytest.mark.slow
def test_an_idle_run_costs_no_cpu_q_quits_and_the_terminal_is_restored(
    tmp_path: Path, watch_pty: Callable[..., Watch]
) -> None:
    repo = project(tmp_path)
    run_id = start(repo, recipe(tmp_path, _sleeper()))
    try:
        doc = wait_for(repo, run_id, lambda d: worker_of(d, d["tasks"][1]["taskId"])["status"] == "running")
        worker = worker_of(doc, doc["tasks"][1]["taskId"])["workerId"]
        w = watch_pty(repo, run_id)
        saved = termios.tcgetattr(w.slave)
        w.until(lambda t: "q quits" in t and worker in t and "Part A" in t, timeout=30)
        assert not termios.tcgetattr(w.slave)[3] & termios.ICANON  # cbreak while it runs
        w.pump(1.0)
        ticks, wall = _cpu_ticks(w.proc.pid), time.monotonic()
        w.pump(5.0)
        used = (_cpu_ticks(w.proc.pid) - ticks) / os.sysconf("SC_CLK_TCK") / (time.monotonic() - wall)
        print(f"\nwatch CPU while the run idles: {used * 100:.2f}% of one core", file=sys.stderr)
        assert used < 0.02
        assert w.proc.poll() is None  # an active run: it keeps watching
        # the host log of the selected (running) worker is on the screen
        assert f"log of {worker}, generation 1" in _strip(bytes(w.output))
        started = time.monotonic()
        os.write(w.master, b"q")
        assert w.wait(timeout=5) == 0
        assert time.monotonic() - started < 2.0
        assert termios.tcgetattr(w.slave) == saved
        assert LEAVE_ALT_SCREEN in bytes(w.output)  # back on the normal screen, the cursor shown again
        assert b"\x1b[?25h" in bytes(w.output)

        # Ctrl-Z gives the terminal back while stopped and takes it again on SIGCONT; SIGTERM unwinds like q
        w = watch_pty(repo, run_id)
        saved = termios.tcgetattr(w.slave)
        w.until(lambda t: "q quits" in t, timeout=30)
        w.proc.send_signal(signal.SIGTSTP)
        w.until(lambda t: _state(w.proc.pid) == "T", timeout=5)
        assert termios.tcgetattr(w.slave) == saved
        w.output.clear()
        w.proc.send_signal(signal.SIGCONT)
        w.until(lambda t: "q quits" in t, timeout=5)  # drawn again
        assert not termios.tcgetattr(w.slave)[3] & termios.ICANON
        w.proc.send_signal(signal.SIGTERM)
        assert w.wait(timeout=5) == 128 + signal.SIGTERM
        assert termios.tcgetattr(w.slave) == saved
        assert LEAVE_ALT_SCREEN in bytes(w.output)

        # a hang-up (the SSH connection dropped): exit 129 without a crash report, even as the terminal goes away
        w = watch_pty(repo, run_id)
        w.until(lambda t: "q quits" in t, timeout=30)
        w.proc.send_signal(signal.SIGHUP)
        os.close(w.master)
        w.master = -1
        assert w.proc.wait(timeout=5) == 128 + signal.SIGHUP
        assert not list((repo / ".git" / "agentops").glob("log/*"))  # no traceback was written

        # paused: the watch shows it and exits 1; with --follow it stays until q; nothing is written either way
        assert cli(repo, "agentops-run", "pause", run_id).returncode == 0
        deadline = time.monotonic() + 30
        while supervisor_running(repo, run_id):
            assert time.monotonic() < deadline, "the supervisor did not stop"
            time.sleep(0.1)
        before = _written(repo)
        done = subprocess.run(["git", "agentops-run", "watch", run_id], cwd=repo, capture_output=True, timeout=60)
        assert done.returncode == 1 and done.stdout.decode().startswith(f"run {run_id}: paused"), done
        done = subprocess.run(
            ["git", "agentops-run", "watch", run_id, "--worker", "coordinator"], cwd=repo, capture_output=True
        )
        assert done.returncode == 1 and b"log of coordinator, generation 1:" in done.stdout, done
        done = subprocess.run(
            ["git", "agentops-run", "watch", run_id, "--worker", "nobody"], cwd=repo, capture_output=True
        )
        assert done.returncode == 3 and done.stderr.startswith(b"error[RUN_WORKER_UNKNOWN]: "), done
        w = watch_pty(repo, run_id, "--follow", env={"NO_COLOR": "1"})
        w.until(lambda t: "paused" in t and "q quits" in t, timeout=30)
        w.pump(1.5)
        os.write(w.master, b"q")
        assert w.wait(timeout=5) == 0
        assert b"\x1b[1m" in w.output and not re.search(rb"\x1b\[[0-9;]*[34][0-7]m", w.output)  # bold, no colour
        assert _written(repo) == before
    finally:
        stop(repo, run_id)


@pytest.mark.slow
def test_a_pipe_gets_plain_snapshots_when_the_state_changes(tmp_path: Path) -> None:
    repo = project(tmp_path)
    run_id = start(repo, recipe(tmp_path, _sleeper(2) + simple_child("b", "src/b.txt"), finalize=True))
    try:
        done = subprocess.run(
            ["git", "agentops-run", "watch", run_id, "--interval", "0.5"],
            cwd=repo,
            capture_output=True,
            timeout=180,
            env={**os.environ, "TERM": "xterm"},
        )
    finally:
        stop(repo, run_id)
    assert done.returncode == 0, done.stderr
    assert b"\x1b" not in done.stdout
    snapshots = done.stdout.decode().split(f"run {run_id}: ")[1:]
    assert len(snapshots) >= 2  # the run moved while it was watched
    assert snapshots[-1].startswith("complete")
    assert "integration: complete" in snapshots[-1]


# -- refusals --------------------------------------------------------------------------------------------------------


def test_json_is_refused_and_a_bad_run_is_not_found(tmp_path: Path) -> None:
    repo = project(tmp_path)
    done = cli(repo, "agentops-run", "watch", "--json")
    assert done.returncode == 2 and done.stderr.startswith('{"error"') and "USAGE" in done.stderr
    done = cli(repo, "agentops-run", "watch", "some-run", "--json")
    assert done.returncode == 2 and "USAGE" in done.stderr
    for bad in ("nope", "../x"):
        done = cli(repo, "agentops-run", "watch", bad)
        assert done.returncode == 3 and done.stderr.startswith("error[RUN_NOT_FOUND]: "), done.stderr
    done = cli(repo, "agentops-run", "watch")
    assert done.returncode == 3 and done.stderr.startswith("error[RUN_NOT_FOUND]: ")
    done = cli(repo, "agentops-run", "watch", "x", "--interval", "0")
    assert done.returncode == 2 and done.stderr.startswith("error[USAGE]: ")


# -- the layout, without a run ---------------------------------------------------------------------------------------


def _frame(tasks: int, workers: int, *, question: bool = False) -> Frame:
    root = "task-root"
    doc = {
        "runId": "run-1",
        "status": "active",
        "statusReason": None,
        "goal": "Build \x1b[31mthe\x1b[0m parts\nnow",
        "budget": {
            "usedSeconds": 65.0,
            "limitSeconds": 3600,
            "usedTokens": 12345,
            "tokenLimit": 0,
            "usedCostUsd": 0.5,
            "costLimitUsd": 2.0,
        },
        "integration": {"status": "verified", "candidate": "ab" * 20, "attempts": 1},
        "workers": [
            {"workerId": f"worker-{i:08x}", "role": "child", "status": "running", "generation": 1, "taskId": f"t{i}"}
            for i in range(workers)
        ],
        "tasks": [{"taskId": root, "title": "Build it", "status": "running", "parent": None, "dependencies": []}]
        + [
            {
                "taskId": f"t{i}",
                "title": f"Part [bold]{i}[/bold]",
                "status": "delivered",
                "parent": root,
                "dependencies": [f"t{i - 1}"] if i else [],
            }
            for i in range(tasks)
        ],
        "questions": [{"questionId": "q-1", "workerId": "coordinator", "prompt": "Which?", "answer": None}]
        if question
        else [],
    }
    events = {f"worker-{i:08x}": LastEvent("WORKER_STARTED", "started " * 20, 990.0) for i in range(workers)}
    return Frame(doc, "0" * 40, 1000.0, True, events, None)


@pytest.mark.parametrize(("tasks", "workers", "question"), [(3, 3, False), (30, 12, True), (0, 0, False)])
def test_the_screen_fits_80x24(tasks: int, workers: int, question: bool) -> None:
    from rich.console import Console

    frame = _frame(tasks, workers, question=question)
    log = LogTail("worker-00000000", "log of worker-00000000, generation 1", tuple(f"line {i}" for i in range(50)))
    out = io.StringIO()
    console = Console(file=out, width=80, height=24, force_terminal=True, color_system="standard", _environ={})
    console.print(screen(frame, log, 1003.0, height=24), crop=True)
    lines = _strip(out.getvalue().encode()).splitlines()
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines), "\n".join(lines)
    text = "\n".join(lines)
    assert "1m08s of 1h00m active, 12.3k tokens, $0.50 of $2.00" in text  # the budget clock ran on 3 s
    assert "integration verified, candidate abababababab" in text
    assert "\x1b[31m" not in out.getvalue() and "Build the parts now" in text
    if tasks:
        assert "Part [bold]1[/bold]" in text and "line 49" in text  # titles are text, not markup; the log's end
    if tasks > 10:
        assert "more tasks" in text and "more" in text
    if question:
        assert "? q-1 from coordinator: Which?" in text


def test_no_color_and_plain_text_carry_no_escapes() -> None:
    from rich.console import Console

    frame = _frame(3, 2)
    log = LogTail("worker-00000000", "log", ("\x1b]0;title\x07bell\x07 and \x1b[2Jclear",))
    out = io.StringIO()
    console = Console(file=out, width=80, height=24, force_terminal=True, no_color=True, _environ={"NO_COLOR": "1"})
    console.print(screen(frame, log, 1000.0, height=24))
    assert not re.search(r"\x1b\[[0-9;]*3[0-7]m", out.getvalue())  # no colour under NO_COLOR
    text = "\n".join(plain(frame, log, 1000.0))
    assert "\x1b" not in text and "\x07" not in text and "bell and clear" in text
    assert clean("a\x1b[1mb\x9bc\td\r\ne") == "abc d  e"


def test_fit_shares_the_room() -> None:
    assert fit(3, 3, 17) == (3, 3, 11)
    t, w, log = fit(30, 12, 15)
    assert t + w + log == 15 and log >= 3 and t > w > 0
    assert fit(5, 5, 2) == (0, 0, 2)
