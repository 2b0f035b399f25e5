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
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from ..canonical import digest
from ..clock import Clock
from ..errors import AgentOpsError
from .project import lock_digest
from .tools import ToolSetup, run_tool, shared_dir, tool_environment

MARKER: Final = ".agentops-env.json"
_NPM_QUIET: Final = ("--no-audit", "--no-fund")


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


def ensure_node_env(root: Path, *, common_dir: Path, environ: Mapping[str, str], clock: Clock) -> ToolSetup:
    """Install the checkout's ``node_modules`` (see the module docstring); ``ENV_SETUP_FAILED`` with the tail."""
    argv, extra, note = node_command(root, common_dir=common_dir, environ=environ, clock=clock)
    key = digest({"lock": lock_digest(root), "argv": list(argv)})
    marker = root / "node_modules" / MARKER
    try:
        if json.loads(marker.read_text("utf-8")).get("key") == key:
            return ToolSetup("node", argv, 0.0, noop=True)
    except (OSError, ValueError, AttributeError):
        pass
    start = time.monotonic()
    run_tool(
        argv,
        cwd=root,
        env=tool_environment(environ, extra),
        clock=clock,
        what=f"installing node_modules with {argv[0]}",
    )
    if marker.parent.is_dir():
        marker.write_text(json.dumps({"key": key, "argv": list(argv), "at": clock.now()}) + "\n", "utf-8")
    return ToolSetup("node", argv, time.monotonic() - start, note=note)
