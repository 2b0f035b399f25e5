"""``[run] max_verifications``: at most that many clean verifications run at once, across threads and processes.

Each verification's command writes when it starts and ends (from inside the command itself, with the system-wide
monotonic clock), so the tests read the overlap from what really ran, not from the toolkit's own account."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from git_agentops.clock import FixedClock
from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.repo import open_store
from git_agentops.model.policy import Policy, effective
from git_agentops.policy.trust import RepoIdentity, TrustStatus, Verdict
from git_agentops.runs.jobs import JobContext
from git_agentops.verify.core import Outcome
from git_agentops.verify.proof import prove
from git_agentops.verify.slots import verification_slot

from ..conftest import commit_files, git, make_repo

RECORD = """
import os, sys, time
log, hold = sys.argv[1], float(sys.argv[2])
name = os.path.basename(os.getcwd())
with open(log, "a") as out:
    out.write(f"{name} start {time.monotonic()}\\n")
time.sleep(hold)  # the work itself: a suite that takes a while
with open(log, "a") as out:
    out.write(f"{name} end {time.monotonic()}\\n")
"""

BARRIER = """
import os, sys, time
where = sys.argv[1]
name = os.path.basename(os.getcwd())
open(os.path.join(where, name), "w").close()
deadline = time.monotonic() + 60
while time.monotonic() < deadline:  # the other verification must be running too
    if len(os.listdir(where)) == 2:
        sys.exit(0)
    time.sleep(0.01)
sys.exit(1)
"""


def _context(repo: Path, tmp_path: Path, argv: list[str], limit: int) -> JobContext:
    doc = effective(
        {
            "run": {"max_verifications": limit},
            "verify": {"commands": [{"id": "suite", "argv": argv, "timeout": 120}]},
            "sandbox": {"writable": [str(tmp_path / "out")]},  # the commands run confined: where they record times
        }
    )
    policy = Policy.from_effective(doc)
    trust = Verdict(TrustStatus.TRUSTED, RepoIdentity(str(repo), f"local:{repo}"), policy.config_hash)
    return JobContext("run-slots", policy, trust, dict(os.environ), FixedClock(), tmp_path / "run", print, print)


def _two_commits(tmp_path: Path) -> tuple[Path, list[str]]:
    """A repository and two commits of different trees (so neither verification reuses the other's evidence)."""
    repo = make_repo(tmp_path / "repo", files={"calc.py": "x = 1\n"})
    first = git(repo, "rev-parse", "HEAD")
    second = commit_files(repo, {"more.py": "y = 2\n"})
    return repo, [first, second]


def _prove_at_once(repo: Path, ctx: JobContext, commits: list[str]) -> list[Outcome]:
    """Prove each commit in its own job thread (its own checkout ``w<n>`` and repository handle), all at once."""
    start = threading.Barrier(len(commits))
    outcomes: dict[int, Outcome] = {}
    errors: list[BaseException] = []

    def job(index: int, commit: str) -> None:
        store = open_store(repo, clock=FixedClock())
        start.wait(timeout=60)
        try:
            outcomes[index] = prove(ctx, store, slot=f"w{index}", commit=commit, task=None)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=job, args=(i, c)) for i, c in enumerate(commits)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), "a verification did not end"
    return [outcomes[i] for i in range(len(commits))]


def _intervals(log: Path) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    for line in log.read_text().splitlines():
        name, _what, at = line.split()
        found.setdefault(name, []).append(float(at))
    return found


def test_with_max_verifications_1_two_verifications_never_overlap(tmp_path: Path) -> None:
    repo, commits = _two_commits(tmp_path)
    (tmp_path / "out").mkdir()
    log = tmp_path / "out" / "times.log"
    ctx = _context(repo, tmp_path, [sys.executable, "-c", RECORD, str(log), "0.4"], limit=1)
    outcomes = _prove_at_once(repo, ctx, commits)
    assert all(o.passed and not o.records[0].cached for o in outcomes)
    spans = sorted(_intervals(log).values())
    assert len(spans) == 2 and all(len(span) == 2 for span in spans), spans
    (_first_start, first_end), (second_start, _second_end) = spans
    assert first_end <= second_start, f"the verifications overlapped: {spans}"


def test_with_max_verifications_2_two_verifications_run_at_once(tmp_path: Path) -> None:
    """The bound is a bound, not a global lock: each command waits until the other has started, and passes only
    if it sees it (with one slot, each would wait its whole minute for the other and fail)."""
    repo, commits = _two_commits(tmp_path)
    where = tmp_path / "out" / "started"
    where.mkdir(parents=True)
    ctx = _context(repo, tmp_path, [sys.executable, "-c", BARRIER, str(where)], limit=2)
    outcomes = _prove_at_once(repo, ctx, commits)
    assert [o.passed for o in outcomes] == [True, True]
    assert sorted(os.listdir(where)) == ["w0", "w1"]


HOLDER = """
import sys, time
from pathlib import Path
from git_agentops.verify.slots import verification_slot
with verification_slot(Path(sys.argv[1]), 1, what="the holder process"):
    print("held", flush=True)
    sys.stdin.readline()  # until the test says so, or dies
    print(time.monotonic(), flush=True)
"""


def _holder(private_dir: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(private_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_slot_another_process_holds_is_waited_for_and_its_holder_named(tmp_path: Path) -> None:
    private_dir = tmp_path / "agentops"
    holder = _holder(private_dir)
    told: list[str] = []
    try:
        with (
            pytest.raises(AgentOpsError) as caught,
            verification_slot(private_dir, 1, what="a test", timeout=0.3, waiting=told.append),
        ):
            pass
        assert caught.value.code == "LOCK_TIMEOUT"
        assert len(told) == 1 and f"pid {holder.pid}: the holder process" in told[0], told
        with verification_slot(private_dir, 2, what="a test", timeout=5) as index:
            assert index == 1  # slot 0 is the other process's
    finally:
        holder.kill()
        holder.wait(timeout=30)
    with verification_slot(private_dir, 1, what="after", timeout=5) as index:  # a killed holder frees its slot
        assert index == 0


def _policy_repo(tmp_path: Path, script: Path, log: Path) -> Path:
    policy = textwrap.dedent(
        f"""\
        version = 1
        [run]
        max_verifications = 1
        [[verify.commands]]
        id = "suite"
        argv = ["{sys.executable}", "{script}", "{log}", "0"]
        timeout = 120
        """
    )
    repo = make_repo(tmp_path / "repo", files={".agentops/policy.toml": policy, "calc.py": "x = 1\n"})
    done = subprocess.run(
        ["git", "agentops-policy", "trust", "--yes"], cwd=repo, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return repo


def _read_until(fd: int, wanted: bytes, *, timeout: float) -> bytes:
    """What a terminal shows until ``wanted`` (AssertionError after ``timeout`` seconds, or at its end)."""
    seen = b""
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"never showed {wanted!r}: {seen!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the other end closed (EIO on Linux)
                chunk = b""
            assert chunk, f"ended without showing {wanted!r}: {seen!r}"
            seen += chunk
    return seen


def test_a_persons_verify_waits_for_the_slot_and_a_cache_hit_does_not(tmp_path: Path) -> None:
    """``git agentops-verify`` (on a terminal, so it says that it waits) counts against the same bound as the
    supervisor, from another process: its command starts only after the holder let go."""
    log, script = tmp_path / "times.log", tmp_path / "record.py"
    script.write_text(RECORD)
    repo = _policy_repo(tmp_path, script, log)
    private_dir = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir")) / "agentops"
    holder = _holder(private_dir)
    terminal, side = os.openpty()
    try:
        verify = subprocess.Popen(["git", "agentops-verify"], cwd=repo, stdout=subprocess.PIPE, stderr=side)
        os.close(side)
        shown = _read_until(terminal, b"waiting for a verification slot", timeout=120)
        assert f"pid {holder.pid}: the holder process".encode() in shown, shown
        assert not log.exists(), "the command ran while another process held the only slot"
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        released = float(holder.stdout.readline())
        out, _ = verify.communicate(timeout=120)
    finally:
        os.close(terminal)
        holder.kill()
        holder.wait(timeout=30)
    assert verify.returncode == 0, out
    assert _intervals(log)["repo"][0] >= released
    holder = _holder(private_dir)  # the only slot busy again: a verification with nothing to run does not wait
    try:
        cached = subprocess.run(["git", "agentops-verify"], cwd=repo, capture_output=True, text=True, timeout=60)
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert cached.returncode == 0, cached.stderr
    assert len(_intervals(log)["repo"]) == 2, "the cached verification ran the command again"
