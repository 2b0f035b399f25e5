"""A worker's own check: ``git agentops-verify`` run by an agent inside its run worktree.

Every child agent is told to check its commit with ``git agentops-verify`` before it hands off. Inside the agent's
sandbox the person's trust store and the repository's private dir (the key that MACs evidence) are hidden on
purpose, so the person's verification -- trust check, then MAC'd evidence notes -- cannot run there, and must not:
nothing an agent produces is proof. So in a worker worktree the command is an **advisory check**:

* **The run's bound policy**, not the worktree's policy file and not the trust store: ``config.json`` of the
  binding commit at ``refs/agentops/runs/<run>/policy``, which is what the supervisor verifies the handoff with.
  The person trusted it when the run started (or approved it through a transition); agents cannot write refs,
  and ``git agentops-sync`` never fetches into that namespace. ``binding.json`` there must name the run and the
  hash of ``config.json`` (``VERIFY_BOUND_POLICY_UNREADABLE`` otherwise). When ``instructions.json`` names another
  hash -- instructions not yet rewritten after a transition -- the binding wins, and the result says so.
* **The handoff's commands**: the policy's verification commands and the acceptance runners the worker's *own*
  task names (``--task`` for another task is ``VERIFY_WORKER_REFUSED``), on the worktree's clean HEAD, exactly as
  the person's verification runs them (:func:`.core.check_in_place`). Setup steps are not run again: the
  supervisor ran them in this worktree when it made it, and runs them in its own clean checkout at handoff.
* **Nothing recorded, nothing reused**: no evidence note is read or written. The supervisor would not believe one
  anyway -- it reuses only MAC'd records it made in a clean checkout (:data:`.evidence.FOR_RUNS`) -- and inside
  the sandbox the notes refs are not writable.

The refs and objects are read through neutralised git plumbing (no pygit2: this is on the command's fast path).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

from ..canonical import JsonValue
from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.refnames import check_component
from ..gitstore.safegit import run_git
from ..model.policy import Policy
from ..model.task import Task
from ..schema import documents
from .core import AGENT, Outcome, Progress, check_in_place

if TYPE_CHECKING:
    from ..model.policydoc import PolicyDoc

RUNS_PREFIX: Final = "refs/agentops/runs/"
"""Where runs keep their refs (:data:`git_agentops.runs.state.RUNS_PREFIX`: that layer is above this one)."""
MAX_BINDING_BYTES: Final = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class WorkerCheck:
    """What a worker's check runs: whose it is, the run's bound policy and where it was read, the worker's task."""

    run_id: str
    worker_id: str
    worktree: Path
    policy: Policy
    ref: str
    binding_commit: str
    instructed_hash: str | None  # what instructions.json names as the policy in force
    task: Task | None

    @property
    def policy_moved(self) -> bool:
        """Whether instructions.json names another policy than the run is bound to now."""
        return self.instructed_hash is not None and self.instructed_hash != self.policy.config_hash


def binding_ref(run_id: str) -> str:
    return f"{RUNS_PREFIX}{check_component(run_id, 'run id')}/policy"


def prepare(
    worktree: Path, instructions: Mapping[str, Any], env_ids: Mapping[str, str], *, task_id: str | None
) -> WorkerCheck:
    """The check of the worker whose (schema-checked) ``instructions`` are in ``worktree``.

    ``env_ids`` are the ``AGENTOPS_RUN_ID``/``AGENTOPS_WORKER_ID`` the supervisor started the caller with (absent:
    not checked); they must be the instructions' (``VERIFY_WORKER_REFUSED``). ``task_id`` (``--task``) may only
    name the worker's own task. Raises ``VERIFY_BOUND_POLICY_UNREADABLE`` when the binding cannot be read.
    """
    run_id, worker_id = str(instructions["runId"]), str(instructions["workerId"])
    for name, mine in (("AGENTOPS_RUN_ID", run_id), ("AGENTOPS_WORKER_ID", worker_id)):
        given = env_ids.get(name)
        if given and given != mine:
            raise AgentOpsError(
                "VERIFY_WORKER_REFUSED",
                f"the instructions in {worktree} are for worker {worker_id} of run {run_id}, but {name} is {given}: "
                "check your commit in your own worktree, then hand off -- the supervisor verifies it itself",
                details={"runId": run_id, "workerId": worker_id, name: given},
            )
    own = Task.from_json(instructions["task"]) if instructions.get("task") else None
    if task_id is not None and (own is None or task_id != own.id):
        raise AgentOpsError(
            "VERIFY_WORKER_REFUSED",
            f"--task {task_id}: in a run's worker, git agentops-verify checks the worker's own task "
            f"({own.id if own else 'none'}) -- the runners the supervisor will run at your handoff; "
            "run it without --task",
            details={"task": task_id, "ownTask": own.id if own else None},
        )
    ref = binding_ref(run_id)
    commit, policy = read_bound_policy(worktree, run_id)
    policy_doc = instructions.get("policy")
    instructed = policy_doc.get("configHash") if isinstance(policy_doc, Mapping) else None
    return WorkerCheck(run_id, worker_id, worktree, policy, ref, commit, instructed, own)


def read_bound_policy(worktree: Path, run_id: str) -> tuple[str, Policy]:
    """(binding commit, policy) of ``run_id``'s policy binding, read with git plumbing from ``worktree``.

    ``VERIFY_BOUND_POLICY_UNREADABLE`` when the ref is missing, a file is missing or malformed, or ``binding.json``
    does not name this run and the hash of ``config.json``.
    """
    ref = binding_ref(run_id)
    found = run_git(worktree, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    commit = found.stdout.decode("ascii", "replace").strip()
    if found.returncode != 0 or not commit:
        raise _unreadable(run_id, f"{ref} does not exist")
    blobs = _blobs(worktree, commit, ("config.json", "binding.json"))
    docs: dict[str, JsonValue] = {}
    for name, data in blobs.items():
        if data is None:
            raise _unreadable(run_id, f"{ref} has no {name}")
        try:
            docs[name] = documents.parse_json(data, what=f"{ref}:{name}", max_bytes=MAX_BINDING_BYTES)
        except AgentOpsError as exc:
            raise _unreadable(run_id, exc.message) from exc
    config, binding = docs["config.json"], docs["binding.json"]
    if not isinstance(config, dict) or not isinstance(binding, dict):
        raise _unreadable(run_id, f"{ref}: config.json or binding.json is not a JSON object")
    policy = Policy.from_effective(cast("PolicyDoc", config), source=f"{ref}:config.json")  # checked just below
    try:  # the supervisor wrote an effective, valid document; a damaged one is refused here, not a crash later
        _ = (policy.commands, policy.runners, policy.setup, policy.deny_patterns)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        why = f"{ref}:config.json is not an effective policy ({type(exc).__name__}: {exc})"
        raise _unreadable(run_id, why) from exc
    if binding.get("runId") != run_id or binding.get("configHash") != policy.config_hash:
        raise _unreadable(run_id, f"{ref}:binding.json does not bind this run to the config.json beside it")
    return commit, policy


def _blobs(worktree: Path, commit: str, names: tuple[str, ...]) -> dict[str, bytes | None]:
    """The blobs at ``names`` in ``commit`` (None: not there), from one ``git cat-file --batch``."""
    spec = "".join(f"{commit}:{name}\n" for name in names).encode()
    done = run_git(worktree, "cat-file", "--batch", input=spec)
    out, at = done.stdout, 0
    found: dict[str, bytes | None] = {}
    for name in names:
        end = out.find(b"\n", at)
        if done.returncode != 0 or end < 0:
            problem = done.stderr.decode(errors="replace").strip()
            raise AgentOpsError("GIT_FAILED", f"git cat-file failed in {worktree}: {problem}")
        header = out[at:end].split()
        at = end + 1
        if len(header) != 3 or header[1] != b"blob" or not header[2].isdigit():
            found[name] = None  # "<name> missing", or not a file
            if len(header) == 3 and header[2].isdigit():
                at += int(header[2]) + 1
            continue
        size = int(header[2])
        found[name] = out[at : at + size]
        at += size + 1
    return found


def _unreadable(run_id: str, why: str) -> AgentOpsError:
    return AgentOpsError(
        "VERIFY_BOUND_POLICY_UNREADABLE",
        f"the policy run {run_id} is bound to cannot be read ({why}), so there is nothing to check your commit "
        "against here; hand off anyway -- the supervisor verifies your commit itself with the run's policy",
        details={"runId": run_id},
    )


def check_worker_commit(
    check: WorkerCheck,
    *,
    environ: Mapping[str, str],
    clock: Clock,
    progress: Progress | None = None,
    grace: float = 3.0,
) -> Outcome:
    """Run the bound policy's commands (and the worker's task's runners) on the worktree's clean HEAD; record
    nothing (``notes_commit`` stays None). Raises what :func:`.core.check_in_place` raises."""
    return check_in_place(
        None,
        worktree=check.worktree,
        policy=check.policy,
        environ=environ,
        clock=clock,
        task=check.task,
        progress=progress,
        grace=grace,
        provenance=AGENT,
    )
