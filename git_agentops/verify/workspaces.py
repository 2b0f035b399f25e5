"""Worker worktrees: where each worker writes, who owns it, and its one-time setup.

Every worker gets ``<repo>/<worktree_root>/<run>/<worker>``, a real linked worktree (``git worktree list`` shows
it) with its HEAD *detached* at its start commit: the agent's commits move only that HEAD, in the worktree's admin
dir, which is all a sandboxed agent may write; the supervisor keeps ``refs/heads/agentops/<run>/<worker>`` at the
worktree's HEAD itself (:func:`mirror_branch`). Ownership is recorded in that worktree's own git dir
(``$GIT_DIR/agentops/worktree.json``, 0600) -- never inside the work tree, where the agent could edit it. An
existing checkout at the path is adopted only when its record names the same run and worker
(``RUN_WORKTREE_OWNERSHIP`` otherwise), so a restarted supervisor reuses a worker's checkout and nobody else's.

**Setup** steps from the policy run once per worktree, with markers next to the ownership record: an *attempt*
marker before the first step, a *complete* marker after the last. A crash between the two leaves an attempt
without completion, and such a setup is not replayed until the user resumes the run after it
(``RUN_SETUP_RECOVERY_REQUIRED``): setup steps install things, and running them twice is the user's call.

Setup runs the worktree's code -- its ``setup.py`` or build backend, a ``.pth`` or ``sitecustomize`` it plants --
and after a policy transition, a resume or a takeover that is what the agent wrote. So it runs **confined**, as the
supervisor's clean checkouts do (:func:`~git_agentops.verify.confined_setup.setup_wall`, at the level the policy's
``[sandbox]`` gives agents): it writes the worktree, a TMPDIR and cache of its own and npm's cache, never the refs,
the supervisor's private dir, the trust store, the person's HOME or a shared dependency base. The base a
``git agentops-env python`` step stands on is built first, by the supervisor, with only pip and the build backend
confined (:func:`~git_agentops.verify.confined_setup.build_bases`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from .. import __version__
from ..canonical import digest
from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.checkout import admin_dir
from ..gitstore.private import read_private_json, resolve_contained, write_private_json
from ..gitstore.refnames import RefConflict
from ..gitstore.refs import read_ref, update_ref
from ..gitstore.repo import Store
from ..gitstore.worktree import add_worktree, detach_head, head_of
from ..model.policy import CommandSpec, Policy
from ..model.workspace import expand
from ..process.command import run_command, scrub_environment
from .confined_setup import build_bases, setup_wall

if TYPE_CHECKING:
    from ..sandbox.checkout import Wall
    from ..workspace.live import Workspace

RECORD: Final = "agentops/worktree.json"
SAFE_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
SETUP_ATTEMPT: Final = "agentops/setup-attempt.json"
SETUP_COMPLETE: Final = "agentops/setup-complete.json"


@dataclass(frozen=True, slots=True)
class Placement:
    path: Path
    branch: str
    name: str  # the admin directory name under $GIT_COMMON_DIR/worktrees/


def placement(repo_root: Path, worktree_root: str, run_id: str, worker_id: str, branch: str) -> Placement:
    path = resolve_contained(repo_root, f"{worktree_root}/{run_id}/{worker_id}")
    return Placement(path, branch, f"agentops-{run_id}-{worker_id}"[:200])


def read_record(path: Path) -> dict[str, Any] | None:
    admin = admin_dir(path)
    if admin is None:
        return None
    doc = read_private_json(admin, RECORD, schema="worktree-record")
    return dict(doc) if doc is not None else None


def ensure_worktree(
    store: Store, where: Placement, *, start_commit: str, run_id: str, worker_id: str, clock: Clock
) -> bool:
    """Create the worker's branch and worktree, or adopt them if they are already this worker's.

    Returns True when it created the worktree. Raises ``RUN_WORKTREE_OWNERSHIP``.
    """
    if where.path.exists():
        record = read_record(where.path)
        if record is None or record["runId"] != run_id or record["workerId"] != worker_id:
            owner = f"{record['runId']}/{record['workerId']}" if record else "no git-agentops worker"
            raise AgentOpsError(
                "RUN_WORKTREE_OWNERSHIP",
                f"{where.path} exists and belongs to {owner}, not {run_id}/{worker_id}; move it away to continue",
            )
        return False
    if read_ref(store, where.branch) is None:
        update_ref(store, where.branch, start_commit, None, f"agentops: branch for {run_id}/{worker_id}")
    admin = add_worktree(store, name=where.name, path=where.path, branch=where.branch)
    detach_head(admin, read_ref(store, where.branch) or start_commit)  # the agent commits on HEAD alone
    write_private_json(
        admin,
        RECORD,
        {
            "runId": run_id,
            "workerId": worker_id,
            "path": str(where.path),
            "branch": where.branch,
            "createdAt": clock.now(),
            "toolkitVersion": __version__,
        },
        schema="worktree-record",
    )
    return True


def mirror_branch(store: Store, worktree: Path, branch: str) -> str | None:
    """Bring the worker's branch to its worktree's HEAD and return that commit (None when HEAD names none).

    Workers commit on a detached HEAD -- in the sandbox they cannot write a shared ref -- so the supervisor keeps
    ``refs/heads/agentops/<run>/<worker>`` where the work is, for people and tools that look for it there.
    """
    head = head_of(store, worktree)
    if head is None:
        return None
    current = read_ref(store, branch)
    if current != head:
        try:
            update_ref(store, branch, head, current, "agentops: the worker's HEAD")
        except RefConflict:
            pass  # someone else moved it meanwhile: the next mirror catches up
    return head


def setup_hash(steps: tuple[CommandSpec, ...]) -> str:
    return digest([s.to_json() for s in steps])


def ensure_setup(
    store: Store,
    path: Path,
    policy: Policy,
    *,
    environ: Mapping[str, str],
    clock: Clock,
    last_user_resume: float | None,
    log: Callable[[str], None] | None = None,
    workspace: Workspace | None = None,
) -> str:
    """Run the policy's setup steps once in this worktree, confined (:func:`setup_wall`). Returns "none", "done"
    or "ran".

    Raises ``RUN_SETUP_RECOVERY_REQUIRED`` (an interrupted attempt and no user resume since),
    ``RUN_SANDBOX_UNAVAILABLE`` (the policy requires more confinement than the machine gives) and
    ``RUN_SETUP_FAILED`` (a step failed, its shared base could not be made, or -- with no wall at all -- it wrote
    the worktree's git link or the shared environments; the attempt marker stays, so a retry also needs a user
    resume).
    """
    steps = policy.setup
    if not steps:
        return "none"
    admin = admin_dir(path)
    record = read_record(path)
    if admin is None or record is None or not SAFE_ID.fullmatch(record["runId"]):  # the id names its scratch
        raise AgentOpsError("RUN_WORKTREE_OWNERSHIP", f"{path} is not a git-agentops worker's linked worktree")
    wanted = setup_hash(steps)
    complete = read_private_json(admin, SETUP_COMPLETE, schema="setup-marker")
    if complete is not None and complete["setupHash"] == wanted:
        return "done"
    attempt = read_private_json(admin, SETUP_ATTEMPT, schema="setup-marker")
    if attempt is not None and attempt["setupHash"] == wanted and (last_user_resume or 0) <= attempt["at"]:
        raise AgentOpsError(
            "RUN_SETUP_RECOVERY_REQUIRED",
            f"setup of {path} started at {attempt['at']:.0f} and never completed; inspect the worktree, then "
            "'git agentops-run resume' to run it again",
        )
    confined = setup_wall(store, path, policy, environ=environ, run_id=record["runId"], worker_id=record["workerId"])
    write_private_json(admin, SETUP_ATTEMPT, {"setupHash": wanted, "at": clock.now()}, schema="setup-marker")
    say = log or (lambda _message: None)
    build_bases(
        path, steps, common_dir=store.common_dir, confined=confined, environ=environ, extra_env={}, clock=clock, log=say
    )
    guarded = confined.snapshot()
    run_setup_steps(path, steps, environ=environ, clock=clock, wall=confined, workspace=workspace)
    if written := confined.written(guarded):
        raise AgentOpsError(
            "RUN_SETUP_FAILED",
            f"a setup step in {path} wrote what it may only read ({', '.join(written[:8])}): the worktree's git "
            "link or the shared environments",
            details={"written": written},
        )
    write_private_json(admin, SETUP_COMPLETE, {"setupHash": wanted, "at": clock.now()}, schema="setup-marker")
    return "ran"


def run_setup_steps(
    path: Path,
    steps: tuple[CommandSpec, ...],
    *,
    environ: Mapping[str, str],
    clock: Clock,
    extra_env: Mapping[str, str] | None = None,
    wall: Wall | None = None,
    workspace: Workspace | None = None,
) -> None:
    """Run each setup step in ``path``, in order -- under ``wall`` when given (a supervisor's clean checkout:
    :mod:`git_agentops.sandbox.checkout`); ``RUN_SETUP_FAILED`` naming the first that failed. A ``workspace`` fills
    ``{port}`` and the other workspace placeholders in each argv and adds its variables (``AGENTOPS_PORT``...)."""
    values = workspace.values if workspace is not None else {}
    for index, step in enumerate(steps):
        env = {**scrub_environment(environ, step.env), **(extra_env or {}), **(workspace.env if workspace else {})}
        argv = expand(step.argv, values) if values else step.argv
        if wall is not None:
            result = wall.run(argv, cwd=path, env=env, timeout=step.timeout, shell=step.shell, clock=clock)
        else:
            result = run_command(argv, cwd=path, env=env, timeout=step.timeout, shell=step.shell, clock=clock)
        if not result.ok:
            why = "timed out" if result.timed_out else (result.spawn_error or f"exited {result.exit_code}")
            tail = result.tail.decode(errors="replace")[-1500:]
            raise AgentOpsError("RUN_SETUP_FAILED", f"setup step {index} in {path} {why}\n{tail}")
