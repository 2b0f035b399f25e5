"""Proof: the supervisor verifies a commit in a clean checkout of its own, never in an agent's worktree.

Every handoff and the final gate call :func:`prove`. It keeps one clean checkout per *slot* -- one per worker, one
for the integration candidate -- under ``$XDG_CACHE_HOME/git-agentops/verify/<repository>/<run>/<slot>/``
(:func:`slots_dir`, :mod:`git_agentops.gitstore.clean`), so a worker's second handoff rewrites only the files that
changed. Each proof first takes one of the repository's ``[run] max_verifications`` *verification slots*
(:mod:`git_agentops.verify.slots`: lock files every process shares) and holds it through setup and the commands, so
handoffs, final gates and a person's ``git agentops-verify`` never run more suites at once than the policy allows:

1. **populate** the slot with exactly the commit (``read-tree -u``, ``clean -ffdx``), then **inspect** it by
   content: a tracked file that differs, or any file the commit does not have, is rewritten once and, if it is
   still there, refused (``VERIFY_CHECKOUT_CHANGED``: something is writing into the supervisor's checkout);
2. **setup**, cached: the policy's setup steps run in the slot when they, a manifest or lockfile of the commit
   (:data:`MANIFESTS`, :data:`~git_agentops.envs.project.LOCKFILES`) or the set of its top-level Python packages
   changed since the slot was last set up -- otherwise what setup made (the venv, ``*.egg-info``, ``node_modules``:
   the paths it created, recorded right after it ran) is kept -- unless the last commands changed any of it
   (:func:`kept_state`: the commit's tests could edit the venv the next commit runs in). What setup leaves is
   refused, not kept (``VERIFY_CHECKOUT_CHANGED``, naming the paths): a tracked file changed (the checkout re-hashed
   against the commit's tree, as after the commands), or a file that changes how the tests run created -- a
   ``conftest.py`` anywhere, ``pytest.ini``, ``tox.ini``, ``setup.cfg``, ``pyproject.toml``, ``sitecustomize.py``, a
   ``.pth``, ``package.json``, ``jest.config.*``... (:func:`~git_agentops.gitstore.clean.is_discovered`) -- outside
   the environments setup makes (:data:`ENV_DIRS`, :func:`env_dirs`). A step that writes a ``conftest.py`` marking
   every test passed would otherwise weaken every required command at once;
3. **guard above**: no file that tools discover by walking up from where they run (a ``conftest.py``,
   ``pytest.ini``, ``node_modules``...) was planted in the directories above the checkout (:func:`_guard_above`);
4. **verify** (:func:`git_agentops.verify.core.verify_clean`): the commands, then the tracked files re-hashed.

Setup (2) and the commands (4) run the commit's own code -- its tests, ``conftest.py``, build backend, npm
scripts -- so both run **confined** (:func:`confinement`, :mod:`git_agentops.sandbox.checkout`: the agents'
launcher at the level the policy's ``[sandbox]`` gives agents): they write the checkout, a TMPDIR emptied per
verification and the slot's cache (``<run>/.sandbox/<slot>/``), never the supervisor's private dir, refs, trust
store or the person's HOME; the checkout's own ``.git`` is read-only to them (its alternates and the setup record
decide what the next proof checks out). The repository's shared environments (the Python bases, the toolkit's uv)
are read-only to both -- a test replacing ``pytest`` in a base, or a setup step planting a base of another key
with its completion marker, would pass every later verification on those dependencies -- but for npm's cache.
So a base a setup step needs is built *before* the steps, by the supervisor
(:func:`.confined_setup.build_bases`, for each ``git agentops-env python`` step): pip, installing the lock's
registry packages, runs confined with that one base writable; the project's build backend, asked what an editable
build needs, runs confined with nothing of it writable, and what it asks for is installed only into a base made
for that answer (:func:`git_agentops.envs.pybase.ensure_base`). The marker saying a base is complete is written
last, by the supervisor, where no commit's code can write. Setup in a worker's worktree is confined the same way
(:func:`git_agentops.verify.workspaces.ensure_setup`).

Why the cache is safe: what setup installs depends on the setup steps and on the files that declare dependencies,
which are all in the key; the project's own code is installed editable, so its changes need no new setup. A
change the key cannot see (a ``setup.py`` that reads another file, say) is what ``git agentops-run resume``
after deleting the slot fixes; the slot is only a cache, deleting it is always safe.

And it goes when the run ends: integration removes a complete run's checkouts, ``run stop`` a stopped run's (under
the run's supervisor lock, so no proof is running), and every supervisor that exits sweeps what ended runs, gone
runs and interrupted removals left (:func:`sweep_slots`) -- a removal renames the directory aside first, so a crash
halfway never leaves a checkout that looks whole.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from ..canonical import canonical_bytes, digest
from ..envs.project import LOCKFILES, python_packages
from ..envs.tools import setup_venvs, shared_dir
from ..errors import AgentOpsError, CheckoutChanged
from ..gitstore.clean import CleanCheckout, collapse, discoverable_above, is_discovered, remove_tree
from ..gitstore.private import file_lock, read_private, write_private
from ..gitstore.repo import Store
from ..model.policy import CommandSpec
from ..model.run import RunStatus
from ..model.sandbox import Level
from ..model.task import Task
from ..runs import state as runstate
from ..runs.jobs import JobContext
from ..sandbox.checkout import Wall, scratch_for, wall
from ..sandbox.plan import choose_mode
from ..schema import documents
from ..workspace.live import Workspace
from .confined_setup import build_bases, slots_dir
from .core import Outcome, verify_clean
from .evidence import EvidenceStore
from .slots import verification_slot
from .workspaces import run_setup_steps, setup_hash

MANIFESTS: Final = (
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "package.json",
    "Cargo.toml",
    "go.mod",
    "Gemfile",
    "Gemfile.lock",
    "composer.json",
    "composer.lock",
)
SETUP_RECORD: Final = "agentops-setup.json"
ABOVE_RECORD: Final = "above.json"


def slot_checkout(ctx: JobContext, store: Store, slot: str) -> CleanCheckout:
    """The clean checkout of ``slot`` (a worker id, or ``candidate``)."""
    return CleanCheckout(
        slots_dir(ctx.environ, store, ctx.run_id) / slot,
        store.common_dir / "objects",
        identity=(store.identity.name, store.identity.email),
    )


def prove(ctx: JobContext, store: Store, *, slot: str, commit: str, task: Task | None) -> Outcome:
    """Verify ``commit`` in the clean checkout of ``slot``, holding a verification slot (see the module docstring).

    Raises ``VERIFY_CHECKOUT_CHANGED``, ``RUN_SETUP_FAILED``, ``GIT_FAILED`` and what verification raises.
    """
    limit = ctx.policy.max_verifications
    with verification_slot(store.private_dir(), limit, what=f"run {ctx.run_id}, {slot}", waiting=ctx.log):
        return _prove(ctx, store, slot=slot, commit=commit, task=task)


def _prove(ctx: JobContext, store: Store, *, slot: str, commit: str, task: Task | None) -> Outcome:
    checkout = slot_checkout(ctx, store, slot)
    workspaces = ctx.workspaces if ctx.workspaces is not None and not ctx.workspaces.empty else None
    name = f"verify-{slot}"  # ports and services of its own: never the worker's, which the agent can reach
    try:
        workspace = workspaces.acquire(name, worker_id=slot) if workspaces is not None else None
        return _prove_in(ctx, store, checkout, slot=slot, commit=commit, task=task, workspace=workspace)
    except AgentOpsError as error:
        if isinstance(error, CheckoutChanged) and "written" in error.details:
            checkout.wipe()  # its own repository was written: the next proof starts from nothing
        raise
    finally:
        if workspaces is not None:
            workspaces.release(name)


def _prove_in(
    ctx: JobContext,
    store: Store,
    checkout: CleanCheckout,
    *,
    slot: str,
    commit: str,
    task: Task | None,
    workspace: Workspace | None = None,
) -> Outcome:
    tree = str(store.resolve_commit(commit).tree_id)
    record = _setup_record(checkout)
    checkout.kept = tuple(record["kept"]) if record else ()
    checkout.populate(commit)
    key = setup_key(ctx, checkout, commit) if ctx.policy.setup else None
    if record is not None and record["key"] != key:  # what setup made belongs to another key: gone
        checkout.kept = ()
        checkout.populate(commit)
        _forget_setup(checkout)
    _require_exact(checkout, commit, when="before the commands")
    _guard_above(ctx, store, checkout)
    if key is not None and (record is None or record["key"] != key):
        _forget_setup(checkout)
        wall = confinement(ctx, store, checkout, slot, setup=True)
        git_env = checkout.command_git_env()
        build_bases(
            checkout.root,
            ctx.policy.setup,
            common_dir=store.common_dir,
            confined=wall,
            environ=ctx.environ,
            extra_env=git_env,
            clock=ctx.clock,
            log=ctx.log,
        )
        guarded = wall.snapshot()
        run_setup_steps(
            checkout.root,
            ctx.policy.setup,
            environ=ctx.environ,
            clock=ctx.clock,
            extra_env=git_env,
            wall=wall,
            workspace=workspace,
        )
        if written := wall.written(guarded):  # before inspect, which reads the checkout's .git
            raise AgentOpsError(
                "VERIFY_CHECKOUT_CHANGED",
                f"a setup step wrote what it may only read ({', '.join(written[:8])}): the checkout's own repository "
                "or the shared environments",
                details={"written": written},
            )
        drift = checkout.inspect(commit)
        if drift.changed:
            raise AgentOpsError(
                "VERIFY_CHECKOUT_CHANGED",
                f"a setup step changed the commit's files in {checkout.root} ({drift.describe()}); setup may add "
                "files but not change tracked ones",
                details={"changed": list(drift.changed)},
            )
        made = config_made_by_setup(checkout, commit, ctx.policy.setup)
        if made:
            raise AgentOpsError(
                "VERIFY_CHECKOUT_CHANGED",
                f"a setup step created files that change how the tests run in {checkout.root}: "
                f"{', '.join(made[:10])}{' ...' if len(made) > 10 else ''}; setup may make environments "
                "(a venv, node_modules), not test configuration",
                details={"extra": made},
            )
        checkout.kept = tuple(collapse(drift.extra, _tracked_dirs(checkout, commit)))
        ctx.log(f"set up the verification checkout {slot} ({len(checkout.kept)} path(s) made by setup kept)")
    _include(ctx, store, checkout)
    kept_before = kept_state(checkout) if key is not None else ""
    if key is not None:  # saved below only if the commands left it whole: a crash before or during them leaves none
        _forget_setup(checkout)
    outcome = verify_clean(
        EvidenceStore(store, store.private_dir()),
        checkout,
        commit=commit,
        tree=tree,
        policy=ctx.policy,
        trust=ctx.trust,
        environ=ctx.environ,
        clock=ctx.clock,
        task=task,
        wall=confinement(ctx, store, checkout, slot, setup=False),
        workspace=workspace,
    )
    if key is not None:
        if kept_state(checkout) == kept_before:
            _save_setup(checkout, key)
        else:
            ctx.log(f"the commands changed what setup made in the verification checkout {slot}: it is made again")
    return outcome


def _include(ctx: JobContext, store: Store, checkout: CleanCheckout) -> None:
    """The person's local files, where ``[worktree] include_in_verify`` says the commands need them too."""
    spec = ctx.policy.workspace
    if spec.include and spec.include_in_verify and store.workdir is not None:
        from ..workspace.localfiles import copy_into, sources

        copy_into(sources(store, store.workdir, spec.include), checkout.root)


def kept_state(checkout: CleanCheckout) -> str:
    """A digest of every file and directory setup made and the slot keeps (:attr:`CleanCheckout.kept`), by its stat
    -- change time included, which no process can set back. The commands run the commit's code with the checkout
    writable: a test that edits the kept venv or ``node_modules`` would otherwise hand the next commit verified in
    the slot an environment it poisoned, so setup is made again when this changed."""
    found: list[tuple[str, int, int, int, int, int]] = []
    for rel in checkout.kept:
        top = checkout.root / rel
        paths = [str(top)]
        if top.is_dir() and not top.is_symlink():
            for directory, dirnames, filenames in os.walk(top):
                paths.extend(os.path.join(directory, name) for name in (*dirnames, *filenames))
        for path in paths:
            try:
                st = os.lstat(path)
            except OSError:
                continue
            found.append((path, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    return digest(sorted(found))


def confinement(ctx: JobContext, store: Store, checkout: CleanCheckout, slot: str, *, setup: bool) -> Wall:
    """The sandbox of the setup steps (``setup``) or the verification commands in ``slot``'s clean checkout
    (:mod:`git_agentops.sandbox.checkout`), at the level the policy's ``[sandbox]`` gives agents on this machine;
    ``RUN_SANDBOX_UNAVAILABLE`` when the policy requires more than the machine gives. The shared environments are
    read-only to both; setup may write npm's cache there (and, with no wall at all, is checked by stat after)."""
    mode, reason = choose_mode(ctx.policy.sandbox_mode, ctx.policy.sandbox_required, ctx.policy.sandbox_level)
    shared = shared_dir(store.common_dir)
    npm_cache = shared / "npm-cache"
    if setup:
        npm_cache.mkdir(parents=True, exist_ok=True)
    confined = wall(
        mode=mode,
        reason=reason,
        checkout=checkout.root,
        scratch=scratch_for(slots_dir(ctx.environ, store, ctx.run_id), slot),
        common_dir=store.common_dir,
        environ=ctx.environ,
        signing_key=store.config_value("agentops.signingKey"),
        policy_writable=ctx.policy.sandbox_writable,
        deny_read=ctx.policy.sandbox_deny_read,
        writable=[npm_cache] if setup else [],
        guard=[shared] if setup else [],
    )
    _say_level(ctx, confined)
    return confined


_SAID: set[tuple[str, str]] = set()


def _say_level(ctx: JobContext, confined: Wall) -> None:
    """Log, once per run and process, a level below ``namespace`` and what it leaves open."""
    said = (str(ctx.run_dir), confined.level)
    if confined.level == Level.NAMESPACE or said in _SAID:
        return
    _SAID.add(said)
    why = f": {confined.sandbox.reason}" if confined.sandbox.reason else ""
    gaps = f"; {'; '.join(confined.gaps)}" if confined.gaps else ""
    ctx.log(f"warning: verification commands and setup run at sandbox level {confined.level}{why}{gaps}")


ENV_DIRS: Final = frozenset({"node_modules", ".git"})
"""Directories at any depth whose files are never the commit's test configuration: what ``git agentops-env node``
(npm, pnpm, yarn, bun: workspaces get their own) fills, and a nested repository's own."""


def env_dirs(root: Path, steps: tuple[CommandSpec, ...]) -> set[str]:
    """The virtual environments setup made in the checkout, where files tools pick up by name belong (a ``.pth`` in
    site-packages is what a venv is made of): the ``--venv`` of each ``git agentops-env python`` step (default
    ``.agentops/venv``), and ``.venv``, each only if it is one (has ``pyvenv.cfg``). With :data:`ENV_DIRS`, the
    places setup may make such files."""
    venvs = {*setup_venvs([step.argv for step in steps]), ".venv"}
    return {v for v in venvs if not os.path.isabs(v) and (root / v / "pyvenv.cfg").is_file()}


def config_made_by_setup(checkout: CleanCheckout, commit: str, steps: tuple[CommandSpec, ...]) -> list[str]:
    """Every path in the checkout that tools pick up by name (:func:`is_discovered`) and that ``commit`` lacks,
    outside :data:`ENV_DIRS` and :func:`env_dirs`. The whole checkout is walked, never following a link: an
    untracked directory is one entry of :meth:`CleanCheckout.inspect`, whose list is cut short besides."""
    root = checkout.root
    venvs = env_dirs(root, steps)
    found: list[str] = []
    for directory, dirnames, filenames in os.walk(root):
        relative = os.path.relpath(directory, root)
        prefix = "" if relative == "." else relative.replace(os.sep, "/") + "/"
        dirnames[:] = [d for d in dirnames if d not in ENV_DIRS and prefix + d not in venvs]
        found += [prefix + name for name in (*dirnames, *filenames) if is_discovered(name)]
    if not found:
        return []
    tracked = set(checkout.tree_dirs(commit))
    for start in range(0, len(found), 512):
        tracked |= set(checkout.blob_ids(commit, found[start : start + 512]))
    return sorted(path for path in found if path not in tracked)


def _require_exact(checkout: CleanCheckout, commit: str, *, when: str) -> None:
    drift = checkout.inspect(commit)
    if drift.clean:
        return
    checkout.rewrite()
    drift = checkout.inspect(commit)
    if not drift.clean:
        raise AgentOpsError(
            "VERIFY_CHECKOUT_CHANGED",
            f"the verification checkout {checkout.root} does not hold exactly {commit[:12]} {when} "
            f"({drift.describe()}), even after rewriting it: something is writing into it",
            details={"changed": list(drift.changed), "extra": list(drift.extra)},
        )


def _guard_above(ctx: JobContext, store: Store, checkout: CleanCheckout) -> None:
    """``VERIFY_CHECKOUT_CHANGED`` when a file tools discover by walking up (:data:`DISCOVERED`) is in one of the
    toolkit's own directories above the checkout (it never makes one), or appeared or changed in a directory
    further up since the run's first verification."""
    found = discoverable_above(checkout.root)
    ours = str(slots_dir(ctx.environ, store, ctx.run_id).parent.parent) + os.sep
    planted = sorted(p for p in found if p.startswith(ours))
    snapshot = checkout.root.parent / ABOVE_RECORD
    others = {p: f for p, f in found.items() if not p.startswith(ours)}
    known = _read_json(snapshot)
    if known is None:
        write_private(snapshot.parent, snapshot.name, canonical_bytes(others) + b"\n")
        known = others
    moved = sorted(p for p, f in others.items() if known.get(p) != f)
    if planted or moved:
        raise AgentOpsError(
            "VERIFY_CHECKOUT_CHANGED",
            f"files that tools find by walking up from {checkout.root} were planted above it: "
            f"{', '.join((planted + moved)[:8])}; remove them (they are not the commit's) and resume the run",
            details={"paths": planted + moved},
        )


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = read_private(path.parent, path.name) if path.parent.is_dir() else None
        doc = documents.parse_json(data, what=str(path)) if data else None
    except AgentOpsError:
        return None
    return doc if isinstance(doc, dict) else None


def setup_key(ctx: JobContext, checkout: CleanCheckout, commit: str) -> str:
    """What setup's result depends on: the steps, the commit's manifests and lockfiles, its Python packages."""
    listing = checkout.blob_ids(commit, (*MANIFESTS, *LOCKFILES))
    return digest({"steps": setup_hash(ctx.policy.setup), "files": listing, "packages": python_packages(checkout.root)})


def _tracked_dirs(checkout: CleanCheckout, commit: str) -> set[str]:
    return set(checkout.tree_dirs(commit))


def _setup_record(checkout: CleanCheckout) -> dict[str, Any] | None:
    doc = _read_json(checkout.git_dir / SETUP_RECORD)
    if doc is None or not isinstance(doc.get("key"), str) or not isinstance(doc.get("kept"), list):
        return None
    if not all(isinstance(p, str) and p and ".." not in p.split("/") for p in doc["kept"]):
        return None
    return doc


def _save_setup(checkout: CleanCheckout, key: str) -> None:
    doc = {"key": key, "kept": list(checkout.kept)}
    write_private(checkout.git_dir, SETUP_RECORD, canonical_bytes(doc) + b"\n")


def _forget_setup(checkout: CleanCheckout) -> None:
    (checkout.git_dir / SETUP_RECORD).unlink(missing_ok=True)


# -- removing a run's checkouts ----------------------------------------------------------------------------------------

GONE: Final = frozenset({RunStatus.COMPLETE, RunStatus.STOPPING})
"""Run statuses whose clean checkouts are removed: a complete run never verifies again, a stopped one only after a
resume (which makes them again). A paused, blocked or budget-limited run keeps them: it is likely to go on."""
TRASH: Final = ".removing-"


def remove_slots(environ: Mapping[str, str], store: Store, run_id: str) -> None:
    """Delete every clean checkout of a run (they are caches). The run's directory is first renamed aside
    (``.removing-<run>-<pid>``, one atomic step), so a removal cut short leaves no half checkout a later proof could
    take for a whole one -- only a leftover :func:`sweep_slots` finishes."""
    _discard(slots_dir(environ, store, run_id))


def remove_ended_slots(environ: Mapping[str, str], store: Store, run_id: str) -> bool:
    """Delete the run's clean checkouts if the run has ended (:data:`GONE`); whether it did. The caller makes sure
    no job of the run is proving (it holds the run's supervisor lock, or its supervisor's jobs have all ended)."""
    try:
        status = runstate.read(store, run_id).run().status
    except AgentOpsError:
        return False
    if status not in GONE:
        return False
    try:
        remove_slots(environ, store, run_id)
    except OSError:  # a cache: what cannot go now, sweep_slots removes later
        return False
    return True


def sweep_slots(environ: Mapping[str, str], store: Store) -> list[str]:
    """Delete what runs of this repository left in the verification cache and no longer need: the checkouts of
    every run that ended (:data:`GONE`) or no longer exists and that no supervisor serves, and every removal a crash
    cut short. A run whose supervisor lock is held is left alone (it may be proving right now). Returns the run ids
    whose checkouts were removed. Best effort: an entry that cannot be looked at or removed is left for next time."""
    repository = slots_dir(environ, store, "sweep").parent
    try:
        entries = sorted(os.scandir(repository), key=lambda entry: entry.name)
    except OSError:
        return []
    try:
        known = set(runstate.list_runs(store))
    except AgentOpsError:
        return []
    removed = []
    for entry in entries:
        path = Path(entry.path)
        try:
            if entry.name.startswith(TRASH):
                remove_tree(path)
            elif entry.name not in known:  # no such run (deleted, or never one): nothing can be proving there
                _discard(path)
                removed.append(entry.name)
            elif runstate.read(store, entry.name).run().status in GONE:
                with file_lock(runstate.run_dir(store, entry.name), "supervisor.lock", blocking=False):
                    if runstate.read(store, entry.name).run().status in GONE:  # a resume may have come between
                        _discard(path)
                        removed.append(entry.name)
        except (AgentOpsError, OSError):
            continue
    return removed


def _discard(directory: Path) -> None:
    if not os.path.lexists(directory):
        return
    trash = directory.with_name(f"{TRASH}{directory.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(directory, trash)
    except FileNotFoundError:  # another process removed it first
        return
    remove_tree(trash)
