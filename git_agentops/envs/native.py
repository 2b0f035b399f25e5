"""Cargo and Go checkouts: fetch what the lockfile pins into the machine's shared, content-addressed caches.

Neither ecosystem has the Python problem -- ``cargo test`` and ``go test`` always build the checkout they run in --
so setup only has to make the first verification in a fresh worktree not start with a download, and not change
the lockfile on the way:

* ``cargo fetch --locked``: the crates land in ``$CARGO_HOME/registry``, shared by every checkout; ``--locked``
  refuses to rewrite ``Cargo.lock``. A crate without a committed ``Cargo.lock`` (a library) gets plain
  ``cargo fetch``, which writes one -- usually ignored by such projects, and said in the summary.
* ``go mod download``: modules land in ``GOMODCACHE``, builds in ``GOCACHE``, both shared and content-addressed;
  ``go.sum`` is checked, not rewritten.

The build output stays per checkout (``target/`` inside it; Go's cache is keyed by content), which is what makes
each checkout's tests its own.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from ..clock import Clock
from ..errors import AgentOpsError
from .tools import ToolSetup, run_tool, tool_environment


def ensure_cargo_env(root: Path, *, environ: Mapping[str, str], clock: Clock) -> ToolSetup:
    """``cargo fetch --locked`` in the checkout (``ENV_SETUP_FAILED`` without cargo or on its failure)."""
    if not (root / "Cargo.toml").is_file():
        raise AgentOpsError("ENV_SETUP_FAILED", f"{root} has no Cargo.toml: there is no Cargo project to set up")
    locked = (root / "Cargo.lock").is_file()
    argv = ("cargo", "fetch", "--locked") if locked else ("cargo", "fetch")
    start = time.monotonic()
    run_tool(argv, cwd=root, env=tool_environment(environ), clock=clock, what="fetching the crates")
    note = "" if locked else "no Cargo.lock was committed: cargo wrote one"
    return ToolSetup("cargo", argv, time.monotonic() - start, note=note)


def ensure_go_env(root: Path, *, environ: Mapping[str, str], clock: Clock) -> ToolSetup:
    """``go mod download`` in the checkout (``ENV_SETUP_FAILED`` without go or on its failure)."""
    if not (root / "go.mod").is_file():
        raise AgentOpsError("ENV_SETUP_FAILED", f"{root} has no go.mod: there is no Go module to set up")
    argv = ("go", "mod", "download")
    start = time.monotonic()
    run_tool(argv, cwd=root, env=tool_environment(environ), clock=clock, what="downloading the modules")
    return ToolSetup("go", argv, time.monotonic() - start)
