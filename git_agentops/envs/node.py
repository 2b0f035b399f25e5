"""A checkout's own ``node_modules``, installed ci-style by the package manager its lockfile names.

Node already keeps the environment inside the checkout (``node_modules``), so the only rules are the ones a CI job
follows: install exactly what the lockfile pins, never rewrite the lockfile (a rewritten lockfile is a dirty
checkout, which verification refuses), and do not download twice what this machine already has:

* ``package-lock.json``/``npm-shrinkwrap.json``: ``npm ci --prefer-offline`` with ``npm_config_cache`` pointing at
  ``$GIT_COMMON_DIR/agentops/envs/npm-cache``, one cache for every checkout of the repository;
* ``pnpm-lock.yaml``: ``pnpm install --frozen-lockfile`` (pnpm's content-addressed store is shared already);
* ``yarn.lock``: ``yarn install --frozen-lockfile`` for yarn 1, ``--immutable`` for yarn 2+ (berry), told apart by
  ``packageManager`` in ``package.json``, a ``.yarnrc.yml``, or ``yarn --version``;
* ``bun.lock``/``bun.lockb``: ``bun install --frozen-lockfile``;
* no lockfile: ``npm install --no-package-lock`` (nothing pins the versions, so say so; nothing is written back).

The lockfiles are looked for in the order ``git agentops-init`` picks the runner of the ``package.json`` scripts,
so setup and the verification commands always agree on the package manager. A marker in ``node_modules`` with
the lockfile digest makes re-running a no-op.

A lockfile that does not match ``package.json`` is refused by every frozen install -- which is the point: setup
never falls back to ``npm install``, which would resolve the newest matching versions and rewrite the lock. That
refusal is ``ENV_LOCK_UNUSABLE``, naming the lock and the command that brings it up to date.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from ..canonical import digest
from ..clock import Clock
from ..errors import AgentOpsError
from ..process.command import run_command
from .project import EnvState, lock_digest
from .tools import TAIL_CHARS, ToolSetup, missing_tool, run_tool, shared_dir, tool_environment

MARKER: Final = ".agentops-env.json"
_NPM_QUIET: Final = ("--no-audit", "--no-fund")
_OUT_OF_DATE: Final = (
    "are in sync",  # npm ci: package.json and package-lock.json ... are in sync
    "ERR_PNPM_OUTDATED_LOCKFILE",
    "Your lockfile needs to be updated",  # yarn 1
    "lockfile would have been modified",  # yarn 2+ (YN0028)
    "lockfile had changes, but lockfile is frozen",  # bun
)
"""What each package manager's frozen install says when the lockfile does not match ``package.json``."""
_LOCKS: Final = {
    "npm": "package-lock.json",
    "pnpm": "pnpm-lock.yaml",
    "yarn": "yarn.lock",
    "bun": "bun.lock",
}


def _yarn_berry(root: Path, *, environ: Mapping[str, str], clock: Clock) -> bool:
    """Whether the checkout uses yarn 2 or later, whose frozen install is ``--immutable``."""
    try:
        manager = json.loads((root / "package.json").read_text("utf-8")).get("packageManager", "")
    except (OSError, ValueError, AttributeError):
        manager = ""
    found = re.match(r"yarn@(\d+)", manager) if isinstance(manager, str) else None
    if found is not None:
        return int(found.group(1)) >= 2
    if (root / ".yarnrc.yml").is_file():
        return True
    done = run_tool(
        ["yarn", "--version"],
        cwd=root,
        env=tool_environment(environ),
        clock=clock,
        timeout=60,
        what="asking yarn its version",
    )
    version = done.output.decode("utf-8", errors="replace").strip().splitlines()
    return bool(version) and not version[-1].startswith("1.")


def node_command(
    root: Path, *, common_dir: Path, environ: Mapping[str, str], clock: Clock
) -> tuple[tuple[str, ...], dict[str, str], str]:
    """The install command for this checkout, the variables it gets on top of the caller's, and a note."""
    if not (root / "package.json").is_file():
        raise AgentOpsError("ENV_SETUP_FAILED", f"{root} has no package.json: there is no Node project to set up")
    if (root / "pnpm-lock.yaml").is_file():
        return ("pnpm", "install", "--frozen-lockfile", "--prefer-offline"), {}, ""
    if (root / "yarn.lock").is_file():
        if _yarn_berry(root, environ=environ, clock=clock):
            return ("yarn", "install", "--immutable"), {}, ""
        return ("yarn", "install", "--frozen-lockfile"), {}, ""
    if (root / "bun.lock").is_file() or (root / "bun.lockb").is_file():
        return ("bun", "install", "--frozen-lockfile"), {}, ""
    cache = {"npm_config_cache": str(shared_dir(common_dir) / "npm-cache")}
    if (root / "package-lock.json").is_file() or (root / "npm-shrinkwrap.json").is_file():
        return ("npm", "ci", "--prefer-offline", *_NPM_QUIET), cache, ""
    note = "no lockfile: versions are not pinned; commit a package-lock.json"
    return ("npm", "install", "--prefer-offline", "--no-package-lock", *_NPM_QUIET), cache, note


def ensure_node_env(
    root: Path,
    *,
    common_dir: Path,
    environ: Mapping[str, str],
    clock: Clock,
    progress: Callable[[str], None] | None = None,
) -> ToolSetup:
    """Install the checkout's ``node_modules`` (see the module docstring).

    Raises ``ENV_SETUP_FAILED`` with the tool's output tail, and ``ENV_LOCK_UNUSABLE`` when the lockfile does not
    match ``package.json``.
    """
    argv, extra, note = node_command(root, common_dir=common_dir, environ=environ, clock=clock)
    locks = lock_digest(root)
    key = digest({"lock": locks, "argv": list(argv)})
    marker = root / "node_modules" / MARKER
    try:
        if json.loads(marker.read_text("utf-8")).get("key") == key:
            return ToolSetup("node", argv, 0.0, noop=True)
    except (OSError, ValueError, AttributeError):
        pass
    start = time.monotonic()
    if progress:
        progress(f"installing node_modules: {' '.join(argv)}")
    _install(root, argv, env=tool_environment(environ, extra), clock=clock, frozen=not note)
    if marker.parent.is_dir():
        doc = {"key": key, "lock": locks, "argv": list(argv), "at": clock.now()}
        marker.write_text(json.dumps(doc) + "\n", "utf-8")
    return ToolSetup("node", argv, time.monotonic() - start, note=note)


def node_env_state(root: Path) -> EnvState:
    """Whether the checkout's ``node_modules`` is what setup would leave now (file reads only), and if not, why."""
    modules = root / "node_modules"
    try:
        marker = json.loads((modules / MARKER).read_text("utf-8"))
    except (OSError, ValueError):
        marker = None
    if not modules.is_dir():
        return EnvState(False, f"{modules} does not exist")
    if not isinstance(marker, dict):
        return EnvState(False, f"{modules} was not made by git agentops-env (no {MARKER})")
    if marker.get("lock") != lock_digest(root):
        return EnvState(False, f"{modules} is stale: the lockfile changed")
    return EnvState(True)


def _install(root: Path, argv: tuple[str, ...], *, env: Mapping[str, str], clock: Clock, frozen: bool) -> None:
    """Run the install; a frozen install's refusal of an out-of-date lockfile is ``ENV_LOCK_UNUSABLE``.

    The whole output is searched, not only the tail an ``ENV_SETUP_FAILED`` carries: npm prints its reason first
    and a page of usage after it.
    """
    if (absent := missing_tool(argv[0], env)) is not None:
        raise absent
    result = run_command(list(argv), cwd=root, env=env, timeout=1800.0, clock=clock, tail_bytes=TAIL_CHARS * 4)
    if result.ok:
        return
    lines = result.output.decode("utf-8", errors="replace").splitlines()
    hit = next((i for i, line in enumerate(lines) if any(words in line for words in _OUT_OF_DATE)), None)
    if frozen and hit is not None:
        lock = next((name for name in ("npm-shrinkwrap.json", "bun.lockb") if (root / name).is_file()), None)
        lock = lock or _LOCKS.get(argv[0], "the lockfile")
        said = "\n".join(line for line in lines[hit : hit + 6] if re.sub(r"^npm (error|ERR!)", "", line).strip())
        raise AgentOpsError(
            "ENV_LOCK_UNUSABLE",
            f"{lock} does not match package.json, and setup installs only what the lock pins (never the newest "
            f"versions): run '{argv[0]} install' and commit {lock}. {shlex.join(argv)} said:\n{said}",
            details={"lock": str(root / lock), "argv": list(argv)},
        )
    why = "timed out" if result.timed_out else result.spawn_error or f"exited {result.exit_code}"
    tail = result.tail.decode("utf-8", errors="replace")[-TAIL_CHARS:].rstrip()
    raise AgentOpsError(
        "ENV_SETUP_FAILED",
        f"installing node_modules with {argv[0]}: {shlex.join(argv)} {why} (in {root})\n{tail}",
        details={"argv": list(argv), "cwd": str(root), "exitCode": result.exit_code, "timedOut": result.timed_out},
    )
