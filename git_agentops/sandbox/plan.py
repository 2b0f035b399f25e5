"""The sandbox of one agent launch: whether there is one, its rules, and the launcher command that applies them.

Every agent starts under the launcher (:mod:`.launcher`, a standalone script run as ``python3 -I -S``): a per-agent
reaper (``PR_SET_CHILD_SUBREAPER``) that forks the agent, applies Landlock to the child when the mode is
``landlock``, and stops every descendant -- ``setsid`` and double-forked daemons included -- when the agent ends or
the worker is stopped. With ``[sandbox] mode = "none"``, or on a kernel without Landlock, the launcher still reaps;
only the wall is missing, and every run start and ``run status`` say so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from ..errors import AgentOpsError
from .rules import Places, agent_rules, expand
from .spec import LAUNCHER, Mode, Rule, SandboxSpec, launcher_command, write_spec

__all__ = ["GRACE", "LAUNCHER", "Sandbox", "choose_mode", "for_reviewer", "for_worker", "kernel_abi"]

GRACE: Final = 0.5
"""Seconds the launcher gives the agent's descendants between SIGTERM and SIGKILL (the supervisor gives it 3)."""


def kernel_abi() -> int:
    """The Landlock ABI of this kernel (0: none)."""
    from .landlock import abi

    return abi()


@dataclass(frozen=True, slots=True)
class Sandbox:
    """What one launch runs under: ``mode`` (``landlock`` or ``none``), why when it is ``none``, and the rules."""

    mode: str
    reason: str | None = None
    rules: tuple[Rule, ...] = ()
    tmpdir: Path | None = None
    grace: float = GRACE

    def spec(self, argv: Sequence[str], cwd: Path) -> SandboxSpec:
        """The launcher's spec of running ``argv`` in ``cwd`` under this sandbox."""
        return SandboxSpec(tuple(argv), str(cwd), self.rules, mode=Mode(self.mode), grace=self.grace)

    def wrap(self, argv: Sequence[str], cwd: Path, spec_path: Path) -> list[str]:
        """Write the spec to ``spec_path`` (0600) and return the argv that starts the agent under the launcher."""
        write_spec(spec_path, self.spec(argv, cwd))
        return launcher_command(spec_path)


def choose_mode(mode: str, required: bool) -> tuple[str, str | None]:
    """(``landlock`` or ``none``, why ``none``). ``RUN_SANDBOX_UNAVAILABLE`` when required but impossible."""
    if mode == "none":
        if required:
            raise AgentOpsError(
                "RUN_SANDBOX_UNAVAILABLE", 'the policy says [sandbox] required = true but also mode = "none"'
            )
        return "none", 'the policy says [sandbox] mode = "none"'
    abi = kernel_abi()
    if abi >= 1:
        return "landlock", None
    why = "this kernel has no Landlock (needs Linux 5.13+ with landlock in the LSM list)"
    if required:
        raise AgentOpsError("RUN_SANDBOX_UNAVAILABLE", f"the policy requires the sandbox, but {why}")
    return "none", why


def for_worker(
    *,
    mode: str,
    reason: str | None,
    worktree: Path,
    admin_dir: Path,
    common_dir: Path,
    environ: Mapping[str, str],
    signing_key: str | None,
    host_writable: Sequence[str],
    policy_writable: Sequence[str],
    deny_read: Sequence[str],
    recipe: Path | None,
) -> Sandbox:
    """The sandbox of one worker generation: it writes its worktree, its admin dir, the object database and its
    TMPDIR (in the admin dir); its rules are computed from where its things are (:mod:`.rules`)."""
    tmpdir = admin_dir / "agentops-tmp"
    own = (worktree, admin_dir, common_dir / "objects", tmpdir)
    return _sandbox(
        mode,
        reason,
        Places(worktree, admin_dir, common_dir, tmpdir, *_private(common_dir, environ, signing_key)),
        own=own,
        environ=environ,
        writable=(*host_writable, *policy_writable),
        deny_read=deny_read,
        recipe=recipe,
    )


def for_reviewer(
    *,
    mode: str,
    reason: str | None,
    checkout: Path,
    scratch: Path,
    common_dir: Path,
    environ: Mapping[str, str],
    signing_key: str | None,
    host_writable: Sequence[str],
    policy_writable: Sequence[str],
    deny_read: Sequence[str],
    recipe: Path | None,
) -> Sandbox:
    """The sandbox of one reviewer: it reads the candidate ``checkout`` but writes only its ``scratch`` dir (its
    input, prompt and report) and a TMPDIR in it -- a reviewer cannot change what it reviews."""
    tmpdir = scratch / "tmp"
    return _sandbox(
        mode,
        reason,
        Places(checkout, scratch, common_dir, tmpdir, *_private(common_dir, environ, signing_key)),
        own=(scratch, tmpdir),
        environ=environ,
        writable=(*host_writable, *policy_writable),
        deny_read=deny_read,
        recipe=recipe,
    )


def _private(
    common_dir: Path, environ: Mapping[str, str], signing_key: str | None
) -> tuple[Path, Path, Path, Path | None, tuple[Path, ...]]:
    """The supervisor's places an agent must not touch: private dir, clean checkouts, trust store, signing key --
    and the parts of the private dir it may read (the shared environments, the hooks' policy cache)."""
    home = environ.get("HOME") or os.path.expanduser("~")
    state = environ.get("XDG_STATE_HOME") or os.path.join(home, ".local", "state")
    cache = environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    private = common_dir / "agentops"
    return (
        private,
        Path(cache) / "git-agentops",
        Path(state) / "git-agentops",
        expand(signing_key, environ) if signing_key else None,
        (private / "envs", private / "cache"),
    )


def _sandbox(
    mode: str,
    reason: str | None,
    places: Places,
    *,
    own: Sequence[Path],
    environ: Mapping[str, str],
    writable: Sequence[str],
    deny_read: Sequence[str],
    recipe: Path | None,
) -> Sandbox:
    places.tmpdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if mode != "landlock":
        return Sandbox("none", reason, (), places.tmpdir)
    if recipe is not None:
        places = replace(places, readable_files=(recipe,))
    extra = []
    for text in writable:
        path = expand(text, environ)
        if not path.exists() and not path.suffix:  # a directory the host will want: make it, or it cannot
            path.mkdir(parents=True, exist_ok=True)
        extra.append(path)
    rules = agent_rules(places, own=own, writable=extra, deny_read=[expand(p, environ) for p in deny_read])
    return Sandbox("landlock", None, tuple(rules), places.tmpdir)
