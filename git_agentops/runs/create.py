"""Creating a run and binding its policy.

``create_run`` refuses unless the policy is trusted; then, in order: records the run and its coordinator (with
the worktree path it *will* use) in a new journal, binds the policy (effective config, its hash, the toolkit
version and the trust record) under ``refs/agentops/runs/<run>/policy``, stores the scripted agent's recipe as
an artifact, makes sure worker worktrees and mailboxes are excluded from commits, and creates the coordinator's
worktree on ``refs/heads/agentops/<run>/coordinator`` at the target's tip. The supervisor then starts its first
generation. The user's controls over a run afterwards are in :mod:`.controls`.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path

from .. import __version__
from .. import eventkinds as kinds
from ..canonical import canonical_bytes
from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.journal import Change, Event, Journal, JournalTampered
from ..gitstore.private import write_private
from ..gitstore.refs import read_ref
from ..gitstore.repo import Store
from ..hosts.launch import check_available, host_spec
from ..model.hosts import kind_of
from ..model.policy import Policy, duration_seconds
from ..model.run import Role, Run, Worker
from ..model.task import contract_hash
from ..policy.trust import Verdict, require_trusted
from ..verify.workspaces import ensure_setup, ensure_worktree, placement
from ..workspace import localfiles
from ..workspace.live import Workspace
from ..workspace.ports import allocate
from . import state as runstate


def repo_root(store: Store) -> Path:
    if store.common_dir.name != ".git" or store.is_bare:
        raise AgentOpsError("REPO_BARE", "runs need a repository with a main working tree (not a bare repository)")
    return store.common_dir.parent


def new_run_id(clock: Clock) -> str:
    return f"run-{time.strftime('%Y%m%d', time.gmtime(clock.now()))}-{uuid.uuid4().hex[:6]}"


def bind_policy(store: Store, run_id: str, policy: Policy, trust: Verdict, clock: Clock) -> None:
    journal = Journal(store, runstate.policy_ref(run_id))

    def bind(change: Change) -> None:
        if change.exists("binding.json"):
            raise AgentOpsError("RUN_NOT_ACTIVE", f"{run_id} already has a policy binding")
        change.put("config.json", canonical_bytes(dict(policy.doc)) + b"\n")
        change.put_json(
            "binding.json",
            {
                "runId": run_id,
                "configHash": policy.config_hash,
                "toolkitVersion": __version__,
                "trust": {
                    "repository": trust.identity.repository,
                    "remote": trust.identity.remote,
                    "grantedAt": trust.record.granted_at if trust.record is not None else "",
                },
                "boundAt": clock.now(),
            },
            schema="binding",
        )
        change.put("approvals.json", b"[]\n")

    journal.mutate(
        bind,
        Event(
            kinds.POLICY_BOUND,
            f"policy {policy.config_hash[:12]} bound to {run_id}",
            {"configHash": policy.config_hash},
        ),
    )


def bound_policy(store: Store, run_id: str) -> Policy:
    """The policy a run was started with (not whatever the worktree holds now)."""
    from ..schema import documents

    try:
        snapshot = Journal(store, runstate.policy_ref(run_id)).read()
    except JournalTampered as exc:
        raise runstate.tampered(exc, run_id) from exc
    data = snapshot.get("config.json")
    if data is None:
        raise AgentOpsError("RUN_NOT_FOUND", f"{run_id} has no policy binding")
    return Policy.from_effective(documents.parse_json(data, what="bound policy"))


def create_run(
    store: Store,
    *,
    goal: str,
    policy: Policy,
    trust: Verdict,
    host: str | None,
    recipe: Path | None,
    target: str | None,
    budget: str | None,
    environ: dict[str, str],
    clock: Clock,
) -> str:
    """Create and bind a run, and its coordinator's worktree; returns the run id. See the module docstring."""
    require_trusted(trust)
    goal = goal.strip()
    if not goal or len(goal) > 8000:
        raise AgentOpsError("USAGE", "--goal must be 1-8000 characters")
    root = repo_root(store)
    target = target or policy.target
    base = read_ref(store, f"refs/heads/{target}")
    if policy.remote is not None:  # the run builds on the remote's target: the local one may be behind
        from ..gitstore.sync import mirror

        base = mirror(store, policy.remote, (f"refs/heads/{target}",)).get(f"refs/heads/{target}") or base
    if base is None:
        raise AgentOpsError(
            "OBJECT_MISSING",
            f"the target branch {target!r} does not exist"
            + (f" (here or on {policy.remote})" if policy.remote else "")
            + ": set [run] target in the policy, or pass --target BRANCH",
        )
    budget_seconds = duration_seconds(budget) if budget else policy.budget_seconds
    if budget and budget_seconds <= 0:
        raise AgentOpsError("USAGE", f"--budget {budget!r} is not a duration like 90m or 1h30m")
    host = host or policy.doc["run"]["default_host"]
    spec = host_spec(policy, host)
    check_available(spec, environ)
    for reviewer in list(policy.doc["review"]["reviewers"])[: int(policy.doc["review"]["required"])]:
        check_available(host_spec(policy, reviewer), environ)
    recipe_bytes = None
    if recipe is not None:
        from ..hosts.recipe import load_recipe

        load_recipe(recipe)
        recipe_bytes = recipe.read_bytes()
    elif kind_of(spec.kind).follows_recipe:
        raise AgentOpsError("RUN_RECIPE_INVALID", "the scripted host follows a recipe: pass --recipe FILE")
    run_id = new_run_id(clock)
    where = placement(root, policy.worktree_root, run_id, "coordinator", runstate.branch_ref(run_id, "coordinator"))
    now = clock.now()
    run = Run(
        run_id=run_id,
        goal=goal,
        target=target,
        base_commit=base,
        host=host,
        repository=str(root),
        policy_config_hash=policy.config_hash,
        budget_seconds=budget_seconds,
        cost_limit_usd=policy.doc["run"].get("max_cost_usd"),
        token_limit=policy.doc["run"].get("max_tokens"),
        created_at=now,
        contract_hash=contract_hash([]),
    )
    # the person's local files: checked before anything of the run exists (a bad include path creates nothing)
    includes = localfiles.sources(store, root, policy.workspace.include) if policy.workspace.include else []
    # ports for the coordinator's setup, taken before anything of the run exists: none free creates nothing
    with _setup_workspace(policy, run_id, environ) as workspace:
        coordinator = Worker(
            worker_id="coordinator",
            role=Role.COORDINATOR,
            host=host,
            worktree=str(where.path),
            branch=where.branch,
            base=base,
        )

        def create(change: Change) -> None:
            if change.exists("run.json"):
                raise AgentOpsError("RUN_NOT_ACTIVE", f"run {run_id} already exists")
            digest = change.put_artifact(recipe_bytes) if recipe_bytes is not None else None
            runstate.put_run(change, replace(run, recipe_digest=digest))
            runstate.put_worker(change, coordinator)

        runstate.journal(store, run_id).mutate(
            create,
            Event(
                kinds.RUN_CREATED,
                f"run {run_id} created: {goal[:120]}",
                {"goal": goal, "target": target, "base": base, "host": host, "budgetSeconds": budget_seconds},
            ),
        )
        bind_policy(store, run_id, policy, trust, clock)
        if recipe_bytes is not None:
            write_private(runstate.run_dir(store, run_id), "recipe.toml", recipe_bytes)
        from ..policy.excludes import add_excludes, missing_excludes

        exclude = store.common_dir / "info" / "exclude"
        add_excludes(exclude, [line for line in missing_excludes(exclude)])
        worktree_excludes = f"/{policy.worktree_root.strip('/')}/"
        if worktree_excludes not in (exclude.read_text("utf-8") if exclude.exists() else ""):
            add_excludes(exclude, [worktree_excludes])
        if ensure_worktree(store, where, start_commit=base, run_id=run_id, worker_id="coordinator", clock=clock):
            localfiles.copy_into(includes, where.path)
        ensure_setup(
            store, where.path, policy, environ=environ, clock=clock, last_user_resume=None, workspace=workspace
        )
    return run_id


@contextlib.contextmanager
def _setup_workspace(policy: Policy, run_id: str, environ: Mapping[str, str]) -> Iterator[Workspace | None]:
    """Ports for the coordinator's setup steps, held while they run (its supervisor gives it its workspace when it
    starts it; services are started there, not here)."""
    if not policy.workspace.ports or not policy.setup:
        yield None
        return
    with allocate(policy.workspace.ports, holder=f"run {run_id} coordinator setup", environ=environ) as block:
        values = {"workspace": "coordinator", "worker": "coordinator", "run": run_id, **block.values()}
        yield Workspace("coordinator", block, values, {"AGENTOPS_WORKSPACE": "coordinator", **block.environment()})


def target_warnings(store: Store, target: str, remote: str | None = None) -> list[tuple[str, str]]:
    """(code, message) for each checkout of the target with uncommitted changes: a local run will wait before
    publishing until they are gone; one publishing to ``remote`` publishes there and leaves the local target be."""
    from ..gitstore.checkout import checkouts_of, dirty_paths

    warnings = []
    for worktree in checkouts_of(store.common_dir, f"refs/heads/{target}"):
        paths = dirty_paths(worktree, untracked=False)
        if paths and remote:
            warnings.append(
                (
                    "RUN_TARGET_NOT_FOLLOWED",
                    f"{target} is checked out at {worktree} with uncommitted changes ({', '.join(paths[:5])}); the run "
                    f"will publish to {remote} and leave the local {target} where it is until they are stashed",
                )
            )
        elif paths:
            warnings.append(
                (
                    "RUN_TARGET_CHECKED_OUT_DIRTY",
                    f"{target} is checked out at {worktree} with uncommitted changes ({', '.join(paths[:5])}); the run "
                    "will wait before publishing until they are committed or stashed (RUN_TARGET_CHECKED_OUT_DIRTY)",
                )
            )
    return warnings
