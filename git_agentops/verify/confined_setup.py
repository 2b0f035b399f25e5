"""Setup steps run confined: where the supervisor keeps what runs in its checkouts, the shared Python bases built
before the steps, and the sandbox of a worker worktree's setup (:func:`setup_wall`).

Setup steps -- in a clean verification checkout (:mod:`git_agentops.verify.proof`) or a worker's worktree
(:func:`git_agentops.verify.workspaces.ensure_setup`) -- run the commit's code under a :class:`Wall` that keeps the
repository's shared environments read-only: a step that planted a base of another key, with its completion marker,
would hand every later run on those dependencies what it put there. So :func:`build_bases` finds or builds the base
of each ``git agentops-env python`` step first, as the supervisor, with only what the commit's files steer run under
the wall (:func:`runner`): pip may write the one base it builds, the build backend nothing of them.

The clean checkouts and the scratch of every confined run live below :func:`verify_root`, which no agent may
write: the launcher's specs there decide what the next command may do.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ..canonical import sha256_hex
from ..clock import Clock
from ..envs.tools import Runner, shared_dir
from ..errors import AgentOpsError
from ..gitstore.repo import Store
from ..model.policy import CommandSpec, Policy
from ..process.command import CommandResult, scrub_environment
from ..sandbox.checkout import Wall, scratch_for, wall
from ..sandbox.plan import choose_mode


def build_bases(
    root: Path,
    steps: tuple[CommandSpec, ...],
    *,
    common_dir: Path,
    confined: Wall,
    environ: Mapping[str, str],
    extra_env: Mapping[str, str],
    clock: Clock,
    log: Callable[[str], None],
) -> None:
    """Find or build the shared base of each ``git agentops-env python`` step of ``steps`` run in ``root``, before
    the steps run (they see the shared environments read-only): the supervisor writes the base and its marker, and
    what the commit's files steer -- pip, the build backend -- runs under ``confined`` (:func:`runner`).
    ``RUN_SETUP_FAILED`` naming the step when its base cannot be made, with the env tool's own coded error."""
    if not steps:
        return  # no setup: the env tool (a large import) stays out of the supervisor
    from ..envs.python import prepare_base, python_step

    run = runner(confined)
    for index, step in enumerate(steps):
        wanted = python_step(step.argv)
        if wanted is None:
            continue
        env = {**scrub_environment(environ, step.env), **extra_env}
        try:
            base = prepare_base(
                root,
                wanted,
                common_dir=common_dir,
                environ=env,
                clock=clock,
                confine=run,
                timeout=step.timeout,
                progress=log,
            )
        except AgentOpsError as error:
            raise AgentOpsError(
                "RUN_SETUP_FAILED",
                f"setup step {index} in {root}: its shared base could not be made\n"
                f"error[{error.code}]: {error.message}",
                details={"step": index, "cause": error.code},
            ) from error
        if not base.reused:
            log(f"built the shared base {base.path.name} for setup step {index} in {base.seconds:.1f}s")


def runner(confined: Wall) -> Runner:
    """How :func:`build_bases` runs what the commit steers: under ``confined``, with the paths it names writable
    too (pip: the base it builds; the build backend: none)."""

    def run(
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout: float,
        clock: Clock,
        tail_bytes: int,
        writable: Sequence[Path],
    ) -> CommandResult:
        return confined.granting(writable).run(
            list(argv), cwd=cwd, env=env, timeout=timeout, shell=False, clock=clock, tail_bytes=tail_bytes
        )

    return run


def verify_root(environ: Mapping[str, str]) -> Path:
    """``$XDG_CACHE_HOME/git-agentops/verify``: every repository's and run's clean checkouts are below it."""
    cache = environ.get("XDG_CACHE_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".cache")
    return Path(cache) / "git-agentops" / "verify"


def slots_dir(environ: Mapping[str, str], store: Store, run_id: str) -> Path:
    """Where a run's clean checkouts live: ``$XDG_CACHE_HOME/git-agentops/verify/<repository>/<run>/``.

    Not under the repository: a checkout inside the main checkout has the main checkout above it, and tools that
    walk up from where they run (pytest's rootdir and ``conftest.py`` search, node's ``node_modules``, Cargo
    workspaces) would find the person's files there -- or files an agent planted there.
    """
    repository = sha256_hex(os.path.realpath(store.common_dir))[:16]
    return verify_root(environ) / repository / run_id


def setup_wall(
    store: Store, path: Path, policy: Policy, *, environ: Mapping[str, str], run_id: str, worker_id: str
) -> Wall:
    """The sandbox of setup in a worker's worktree: the clean checkouts' (:mod:`git_agentops.sandbox.checkout`), at
    the level the policy's ``[sandbox]`` gives agents (``RUN_SANDBOX_UNAVAILABLE`` when it requires more than the
    machine gives). It writes the worktree, a scratch TMPDIR and cache of its own beside the run's clean checkouts
    (``<run>/.worktrees/.sandbox/<worker>/``), npm's cache and ``[sandbox] writable`` -- never the refs, the
    supervisor's private dir, the trust store, a shared base or the person's HOME: after a policy transition, a
    resume or a takeover the worktree holds what the agent wrote, its ``setup.py`` included."""
    mode, reason = choose_mode(policy.sandbox_mode, policy.sandbox_required, policy.sandbox_level)
    shared = shared_dir(store.common_dir)
    npm_cache = shared / "npm-cache"
    npm_cache.mkdir(parents=True, exist_ok=True)
    return wall(
        mode=mode,
        reason=reason,
        checkout=path,
        scratch=scratch_for(slots_dir(environ, store, run_id) / ".worktrees", worker_id),
        common_dir=store.common_dir,
        environ=environ,
        signing_key=store.config_value("agentops.signingKey"),
        policy_writable=policy.sandbox_writable,
        deny_read=policy.sandbox_deny_read,
        writable=[npm_cache],
        guard=[shared],
    )
