"""Each worker generation's confinement: the sandbox mode of the run, the rules of one launch, the guard hook.

The mode is decided once per supervisor (:func:`git_agentops.sandbox.plan.choose_mode`: the policy's ``[sandbox]``
and what the kernel offers); each generation then gets its rules from where its worktree, admin dir and host
paths are (:func:`git_agentops.sandbox.plan.for_worker`), and its launcher spec is written to the run's private
dir, which the agent can neither read nor write. Before each start the host's own pre-tool hook configuration is
(re)written into the worktree, so the host asks ``git agentops-hook agent-command`` before every shell command.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pygit2

from ..errors import AgentOpsError
from ..gitstore.checkout import admin_dir
from ..gitstore.repo import Store
from ..gitstore.worktree import head_of
from ..hooks.hostconfig import hook_entry
from ..hosts.launch import HostSpec
from ..model.hosts import kind_of
from ..model.policy import Policy
from ..model.run import Worker
from ..model.sandbox import Level
from ..sandbox.plan import Sandbox, choose_mode, for_worker
from ..verify.credentials import HeldSecrets


class Confinement:
    """The sandbox of this supervisor's launches."""

    def __init__(
        self, store: Store, policy: Policy, environ: Mapping[str, str], run_dir: Path, log: Callable[[str], None]
    ) -> None:
        self.store = store
        self.policy = policy
        self.environ = environ
        self.run_dir = run_dir
        self.log = log
        self.held = HeldSecrets.from_environ(environ)  # what agents never get, nor write into the run's state
        self._mode: tuple[str, str | None] | None = None

    @property
    def mode(self) -> tuple[str, str | None]:
        """(the level: ``namespace``, ``landlock`` or ``none``; which walls are missing and why);
        ``RUN_SANDBOX_UNAVAILABLE`` when the policy asks for more than this machine gives."""
        if self._mode is None:
            self._mode = choose_mode(self.policy.sandbox_mode, self.policy.sandbox_required, self.policy.sandbox_level)
            if self._mode[0] == Level.NONE:
                self.log(f"warning: agents run without the sandbox: {self._mode[1]}")
            elif self._mode[1]:
                self.log(f"warning: agents run at sandbox level {self._mode[0]}: {self._mode[1]}")
        return self._mode

    def sandbox(self, worker: Worker, spec: HostSpec, recipe: Path | None) -> Sandbox:
        """The sandbox of ``worker``'s next generation, with its host's guard hook written into its worktree."""
        mode, reason = self.mode
        worktree = Path(worker.worktree)
        self.guard(worktree, spec.kind, base=worker.base)  # what the project tracks: never the worker's HEAD
        admin = admin_dir(worktree) or self.run_dir / "admin" / worker.worker_id
        return for_worker(
            mode=mode,
            reason=reason,
            worktree=worktree,
            admin_dir=admin,
            common_dir=self.store.common_dir,
            environ=self.environ,
            signing_key=self.store.config_value("agentops.signingKey"),
            host_writable=spec.writable,
            policy_writable=self.policy.sandbox_writable,
            deny_read=self.policy.sandbox_deny_read,
            recipe=recipe,
            home_files=spec.home_files,
            network=spec.network,
            kind=spec.kind,
            hook_command=hook_entry(sys.executable),
        )

    def guard(self, worktree: Path, kind: str, *, base: str | None = None) -> None:
        """Write host ``kind``'s pre-tool hook configuration (:mod:`git_agentops.hooks.hostconfig`) into
        ``worktree`` whole, removing what the agent left where that host reads its settings (logged), unless the
        project tracks the guard file itself (ours would then reach a commit): logged, nothing written.

        What the project tracks is read from ``base``, the commit the supervisor made the worktree from, when
        given; else from the worktree's HEAD -- which the agent moves, so a guard file it committed would count as
        the project's: pass ``base``."""
        from ..hooks.hostconfig import guard_file, write_guard

        rel = guard_file(kind)
        if rel is None:
            return
        commit = base or head_of(self.store, worktree)

        def tracked(path: str) -> bool:
            return commit is not None and self._tracks(commit, path)

        if tracked(rel):
            if kind_of(kind).guard_in_home:
                self.log(
                    f"{worktree.name}: the project tracks {rel}, left as it is; the {kind} guard is in the agent's HOME"
                )
            else:
                self.log(f"warning: {worktree.name}: the project tracks {rel}; the {kind} guard hook is not installed")
            return
        try:
            installed = write_guard(worktree, kind, hook_command=hook_entry(sys.executable), tracked=tracked)
        except AgentOpsError as error:
            self.log(f"warning: {worktree.name}: the {kind} guard hook is not installed: {error.message}")
            return
        if installed.removed:
            shown = ", ".join(installed.removed[:10]) + (", ..." if len(installed.removed) > 10 else "")
            self.log(
                f"{worktree.name}: removed {len(installed.removed)} untracked file(s) where {kind} reads its "
                f"settings or plugins (the guard's configuration is the supervisor's): {shown}"
            )

    def _tracks(self, commit: str, rel: str) -> bool:
        """Whether ``commit``'s tree has ``rel`` (a file, or a directory holding tracked files)."""
        try:
            self.store.repo[commit].peel(pygit2.Tree)[rel]
        except (KeyError, ValueError, pygit2.GitError):
            return False
        return True

    def spec_path(self, worker: Worker) -> Path:
        """Where the launcher spec of ``worker``'s next generation goes (private, outside its reach)."""
        where = self.run_dir / "sandbox"
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        return where / f"{worker.worker_id}-{worker.generation}.json"
