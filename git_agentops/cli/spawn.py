"""``run start --detach``, ``resume`` and a transition's approval: a detached supervisor for the run, said in the
command's output. Starting it and waiting until it serves the run is :mod:`git_agentops.supervisor.spawn`.
"""

from __future__ import annotations

from typing import Any

from ..errors import SupervisorActive
from ..supervisor.spawn import spawn_supervisor
from .common import Context


def supervise_in_background(
    ctx: Context, run_id: str, doc: dict[str, Any], lines: list[str], *, restart: bool = False
) -> None:
    """After a control that lets the run go on: a detached supervisor, unless one serves it already (said in
    ``doc`` and ``lines``; ``restart``: the run was resumed from a stop, and that one starts it again)."""
    try:
        spawned = spawn_supervisor(ctx.store(), run_id, cwd=ctx.cwd, env=ctx.env, restart=restart)
        doc.update(spawned.to_json())
        lines.append(f"supervising in the background ({spawned.describe()})")
    except SupervisorActive as exc:
        if exc.details.get("stopping"):  # it will not serve the run, and none could be started: say so, fail
            raise
        lines.append("its supervisor is already running")
