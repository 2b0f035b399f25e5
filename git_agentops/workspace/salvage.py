"""Nothing removes a worker's worktree without saving its unhanded-off work first (:func:`remove_with_salvage`).

The salvage itself -- the commit of the work tree as the agent left it, its ref, listing and restoring -- is the
store's (:mod:`git_agentops.gitstore.salvage`); this is the rule of when it is taken, for every caller that removes
a worktree: the run's own clean-up at its end, and ``git agentops-run clean``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..errors import AgentOpsError
from ..gitstore.refs import list_refs
from ..gitstore.repo import Store
from ..gitstore.salvage import Salvaged, save
from ..model.run import Worker


def handed_commits(store: Store, run_id: str, base: str | None) -> list[str]:
    """What a worker's HEAD may already be kept by: the run's delivery refs and the worker's base."""
    return [*list_refs(store, f"refs/agentops/runs/{run_id}/deliveries/").values(), *([base] if base else [])]


def remove_with_salvage(
    store: Store, run_id: str, worker: Worker, *, now: int, log: Callable[[str], None]
) -> Salvaged | None:
    """The one way the toolkit removes a worker's worktree: :func:`save` first, then remove -- or, when the work could
    not be saved (``SALVAGE_EXISTS``, ``GIT_FAILED``), keep the worktree and say so. Returns the salvage made."""
    from ..gitstore.worktree import remove_worktree

    path = Path(worker.worktree)
    name = f"agentops-{run_id}-{worker.worker_id}"[:200]
    try:
        saved = save(
            store,
            path,
            admin_name=name,
            run_id=run_id,
            worker_id=worker.worker_id,
            generation=worker.generation,
            handed=handed_commits(store, run_id, worker.base),
            now=now,
        )
    except AgentOpsError as exc:
        log(f"{worker.worker_id}: its worktree {path} is kept: {exc.message}")
        raise
    if saved is not None:
        log(
            f"{worker.worker_id}: {len(saved.paths)} path(s) and commits never handed off saved to {saved.ref} "
            f"('git agentops-run salvage {run_id} --restore {worker.worker_id}/{worker.generation}' brings them back)"
        )
    remove_worktree(store, path, name)
    return saved
