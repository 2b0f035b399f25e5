"""Start a detached supervisor for a run and wait until it serves it (``run start --detach``, ``resume``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from ..errors import AgentOpsError
from .common import Context


def child_error(output: str, returncode: int) -> AgentOpsError:
    """Why a supervisor that was just spawned exited at once: its own ``error[CODE]: message`` where it printed one."""
    from ..errors import CODES

    at = output.rfind("error[")
    head, _, message = output[at:].partition("]: ")
    code = head.removeprefix("error[")
    if at >= 0 and (at == 0 or output[at - 1] == "\n") and code in CODES:
        return AgentOpsError(code, message.strip())
    return AgentOpsError("RUN_NOT_ACTIVE", f"the supervisor exited at once ({returncode}):\n{output[-2000:]}")


def spawn_supervisor(ctx: Context, run_id: str) -> int:
    """Start a detached supervisor and wait until it serves the run (its ``RUN_SUPERVISOR_START`` is recorded).

    Holding the lock is not enough: a supervisor refusing the run holds it too, while it stops what a dead one left
    running. A refusal is raised as the supervisor's own error.
    """
    from ..gitstore.private import file_lock
    from ..runs.state import journal, run_dir

    directory = run_dir(ctx.store(), run_id)
    directory.mkdir(parents=True, exist_ok=True)
    try:
        with file_lock(directory, "supervisor.lock", blocking=False):
            pass
    except AgentOpsError as exc:
        if exc.code == "LOCK_HELD":
            raise AgentOpsError("RUN_SUPERVISOR_ACTIVE", f"a supervisor already serves {run_id}") from exc
        raise
    events = journal(ctx.store(), run_id)
    before = next((entry.commit for entry in events.log(limit=1)), None)
    out = os.open(directory / "supervisor.out", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    offset = os.fstat(out).st_size
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "git_agentops.cli.run", "supervise", run_id],
            cwd=ctx.cwd,
            env=dict(ctx.env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    finally:
        os.close(out)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if child.poll() is not None:
            if child.returncode in (0, 1):  # it served the run and the run ended (complete, or blocked...) already
                return child.pid
            with (directory / "supervisor.out").open("rb") as handle:
                handle.seek(offset)
                raise child_error(handle.read().decode("utf-8", "replace"), child.returncode)
        for entry in events.log(limit=256):
            if entry.commit == before:
                break
            if entry.code == "RUN_SUPERVISOR_START" and entry.data.get("pid") == child.pid:
                return child.pid
        time.sleep(0.05)
    raise AgentOpsError("RUN_NOT_ACTIVE", f"the supervisor of {run_id} did not start within 30 s")
