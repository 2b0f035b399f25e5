"""uv, for reading a project's ``uv.lock``: the one on PATH when it is recent enough, else the toolkit's own copy.

``uv.lock`` is uv's own format, revised as uv grows (forks by marker, workspace members, dependency groups), and
only uv reads it right -- so setup does not parse it for what to install: it asks ``uv export --frozen`` for the
pinned requirements of exactly the extras and groups it was given (no resolution, no network, the lock as
committed) and pip installs those. pip stays the installer: it is what the base environment already holds, and it
reads the person's ``pip.conf`` (a mirror, ``find-links``), which uv does not.

When no uv is on PATH, or the one there predates what the export needs, the toolkit installs its own: uv is a
wheel on PyPI, so ``pip install uv==<UV_VERSION>`` into a virtualenv of the repository's shared environments
(``$GIT_COMMON_DIR/agentops/envs/tools/uv-<version>/``, next to the bases), made once under a file lock and
marked complete last -- a killed install leaves no marker, and the next caller starts over. Not in ``~/.cache``:
the supervisor runs this uv when it sets up a clean checkout, and an agent may write ``~/.cache`` (a host's own
cache) -- whereas the shared environments are read-only to agents, like the bases the supervisor also runs.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.private import file_lock
from .tools import Runner, run_tool, tool_environment
from .venvs import read_json, write_json

UV_VERSION: Final = "0.13.9"
"""The uv the toolkit installs for itself when PATH has none (tested with it)."""
UV_MINIMUM: Final = (0, 5, 0)
"""The oldest uv on PATH that is used as it is: ``uv export --no-default-groups`` and ``--group`` need it."""
COMPLETE: Final = "agentops-complete.json"
INSTALL_TIMEOUT: Final = 900.0

Progress = Callable[[str], None]


def _version(text: str) -> tuple[int, ...] | None:
    found = re.search(r"\buv (\d+)\.(\d+)\.(\d+)", text)
    return tuple(int(part) for part in found.groups()) if found else None


def uv_on_path(environ: Mapping[str, str], *, cwd: Path, clock: Clock) -> str | None:
    """The ``uv`` on PATH when it is at least :data:`UV_MINIMUM`, else None."""
    found = shutil.which("uv", path=environ.get("PATH", os.defpath))
    if found is None:
        return None
    done = run_tool(
        [found, "--version"],
        cwd=cwd,
        env=tool_environment(environ),
        clock=clock,
        timeout=60,
        what="asking uv its version",
    )
    version = _version(done.output.decode("utf-8", errors="replace"))
    return found if version is not None and version >= UV_MINIMUM else None


def ensure_uv(
    tools: Path,
    *,
    python: str,
    environ: Mapping[str, str],
    cwd: Path,
    clock: Clock,
    progress: Progress | None = None,
) -> Path:
    """A usable ``uv``: the one on PATH (:func:`uv_on_path`), else the toolkit's own in ``tools``, installed when
    missing. ``python`` makes its virtualenv (any Python 3 will do: uv is one binary).
    Raises ``ENV_LOCK_UNUSABLE`` when it cannot be installed (no index reachable...), naming both fixes.
    """
    found = uv_on_path(environ, cwd=cwd, clock=clock)
    if found is not None:
        return Path(found)
    home = tools / f"uv-{UV_VERSION}"
    program = home / "bin" / "uv"
    if _complete(home):
        return program
    with file_lock(home.parent, f"uv-{UV_VERSION}.lock", timeout=INSTALL_TIMEOUT):
        if _complete(home):  # another process installed it while this one waited
            return program
        if home.exists():  # a killed install: nothing in it is trusted
            shutil.rmtree(home)
        if progress:
            progress(f"installing uv {UV_VERSION} into {home} (uv.lock needs it; once per repository)")
        env = tool_environment(environ, {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"})
        try:
            run_tool(
                [python, "-m", "venv", str(home)],
                cwd=cwd,
                env=env,
                clock=clock,
                timeout=600,
                what="making the virtualenv of the toolkit's uv",
            )
            run_tool(
                [str(home / "bin" / "python"), "-m", "pip", "install", f"uv=={UV_VERSION}"],
                cwd=cwd,
                env=env,
                clock=clock,
                timeout=INSTALL_TIMEOUT,
                what=f"installing uv {UV_VERSION} from the package index",
            )
        except AgentOpsError as exc:
            raise AgentOpsError(
                "ENV_LOCK_UNUSABLE",
                f"the project pins its dependencies in uv.lock, which only uv reads; uv is not on PATH (or older "
                f"than {'.'.join(map(str, UV_MINIMUM))}) and installing uv {UV_VERSION} failed. Put uv on PATH "
                f"(https://docs.astral.sh/uv/getting-started/installation/) or let pip reach PyPI, then run setup "
                f"again.\n{exc.message}",
                details={"lock": "uv.lock", "cause": exc.code},
            ) from exc
        write_json(home / COMPLETE, {"version": UV_VERSION, "at": clock.now()})
    return program


def _complete(home: Path) -> bool:
    doc = read_json(home / COMPLETE)
    return doc is not None and doc.get("version") == UV_VERSION and (home / "bin" / "uv").is_file()


def export_uv_lock(
    uv: Path,
    root: Path,
    *,
    extras: list[str],
    groups: list[str],
    output: Path,
    environ: Mapping[str, str],
    clock: Clock,
    run: Runner | None = None,
) -> list[str]:
    """``uv export --frozen`` of exactly these extras and groups (no default groups) into ``output``; its argv.

    ``run``: how the commit-steered part runs -- uv parses the commit's ``uv.lock`` and ``pyproject.toml``, so in a
    supervisor's clean checkout it runs confined like pip, with only ``output``'s directory writable and no cache.
    Raises ``ENV_LOCK_UNUSABLE`` with uv's own words when uv cannot read the lock (a newer schema, a damaged file).
    """
    argv = [str(uv), "export", "--frozen", "--no-hashes", "--no-emit-project", "--no-default-groups"]
    argv += ["--format", "requirements-txt", "--no-header", f"--output-file={output}"]
    argv += [f"--extra={e}" for e in extras] + [f"--group={g}" for g in groups]
    try:
        run_tool(
            argv,
            cwd=root,
            env=tool_environment(environ, {"UV_NO_CACHE": "1"}),
            clock=clock,
            timeout=600,
            what="exporting uv.lock",
            run=run,
            writable=(output.parent,),
        )
    except AgentOpsError as exc:
        raise AgentOpsError(
            "ENV_LOCK_UNUSABLE",
            f"uv cannot export {root / 'uv.lock'}: regenerate it with 'uv lock' (and commit it), or put a uv on "
            f"PATH that reads it (a lock written by a newer uv needs that uv).\n{exc.message}",
            details={"lock": str(root / "uv.lock"), "argv": argv},
        ) from exc
    return argv
