"""A checkout's own Python environment: the project installed from *this* checkout, the dependencies shared.

Verification must test the code of the checkout it runs in. In the common set-up -- the project installed editable
from the main checkout into the person's virtualenv -- ``python -m pytest`` in a worker's worktree imports the
package from the main checkout, and a breaking change passes. So setup makes an environment *inside* each checkout
(``.agentops/venv``) with the project installed editable from that checkout, and the policy's commands run its
interpreter. Two layers keep that cheap:

* **The base** (``$GIT_COMMON_DIR/agentops/envs/python-<key16>/``) is an ordinary virtualenv holding the
  project's dependencies, at the versions its lockfile pins (:mod:`.pydeps` says which file, :mod:`.locks` how
  it is followed), and its build requirements, but not the project (:mod:`.pybase`). Its key is the lockfile
  digest, the interpreter, the extras, groups and ``--with`` packages, and where the pins came from, so every
  checkout on the same lockfile shares one. It is built once, under an exclusive file lock, and a marker written
  last says it is complete: a crash halfway leaves a directory without the marker, which the next caller deletes
  and builds again. pip keeps its normal cache, so a second base (a new lockfile) downloads nothing it had. In a
  supervisor's clean checkout the shared environments are read-only to setup: the supervisor builds a missing
  base before the step (:func:`prepare_base`, the commit's part of the build confined), and the step finds it.
* **The checkout's venv** is made with ``--without-pip`` (a tenth of a second), sees the base's site-packages
  through a ``.pth`` file, and gets the project installed editable, ``--no-deps --no-build-isolation``, by the
  base's pip. pip runs as the venv's own interpreter (``<venv>/bin/python -m pip``: pip is importable through the
  ``.pth``), which installs into the venv exactly as ``base/bin/python -m pip --python <venv>/bin/python`` does
  -- that form works too, but re-executes pip in the target interpreter, one more interpreter start per checkout.
  No isolated build environment is made, so the base carries what the backend asks for an editable build
  (``get_requires_for_build_editable``: hatchling wants ``editables``). The base's console scripts get twins in
  the venv's ``bin/`` that run the venv's interpreter, so ``.agentops/venv/bin/pytest`` means this checkout.

Afterwards every import package of the project must resolve inside the checkout, or setup fails naming the
package and where it resolved; a venv whose marker names the same key is left as it is (re-running is a no-op).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..clock import Clock
from ..errors import AgentOpsError
from .backend import IN_CHECKOUT
from .project import EnvState, is_python_project, lockfiles, python_packages
from .pybase import (
    PIP_ENV,
    Base,
    base_complete,
    base_key,
    check_extras,
    ensure_base,
    find_python,
    inputs_digest,
    interpreter,
)
from .pydeps import declared, pinned_source
from .tools import Runner, run_tool, tool_environment
from .venvs import check_imports, link_scripts, read_json, site_packages, write_json

Progress = Callable[[str], None]
VENV_MARKER: Final = "agentops-env.json"
BASE_PTH: Final = "zz-agentops-base.pth"  # after the editable install's own .pth: the checkout's code comes first


@dataclass(frozen=True, slots=True)
class PythonEnv:
    """What ``git agentops-env python`` did in a checkout."""

    venv: Path
    base: Base
    noop: bool
    seconds: float  # the checkout's own part (venv, editable install, checks), base excluded
    packages: dict[str, str] = field(default_factory=dict)  # import package -> the file it resolved to
    installed: bool = True  # the project itself was installed (False for a pyproject used only for tool config)

    def to_json(self) -> dict[str, Any]:
        return {
            "ecosystem": "python",
            "venv": str(self.venv),
            "base": self.base.to_json(),
            "noop": self.noop,
            "checkoutSeconds": round(self.seconds, 3),
            "seconds": round(self.seconds + self.base.seconds, 3),
            "packages": self.packages,
            "projectInstalled": self.installed,
        }

    def summary(self) -> str:
        name = self.base.path.name
        if self.noop:
            return f"python env {self.venv}: already set up on base {name} (nothing to do)"
        how = f"reused ({self.base.seconds:.1f}s)" if self.base.reused else f"built ({self.base.seconds:.1f}s)"
        return (
            f"python env {self.venv}: base {name} from {self.base.source} {how}, checkout {self.seconds:.1f}s, "
            f"total {self.seconds + self.base.seconds:.1f}s"
        )


@dataclass(frozen=True, slots=True)
class PythonStep:
    """The options of a setup step that runs ``git agentops-env python`` (what decides its base)."""

    extras: tuple[str, ...]
    groups: tuple[str, ...]
    with_: tuple[str, ...]
    python: str | None
    venv: str


def python_step(argv: Sequence[str] | str) -> PythonStep | None:
    """The options of ``argv`` when it runs ``git agentops-env python`` (as a shell line too, alone or first), else
    None -- also for options this version does not read, which the step then refuses itself when it runs."""
    try:
        words = shlex.split(argv, comments=True) if isinstance(argv, str) else list(argv)
    except ValueError:
        return None
    if tuple(words[:2]) == ("git", "agentops-env"):
        words = words[2:]
    elif words and os.path.basename(words[0]) == "git-agentops-env":
        words = words[1:]
    else:
        return None
    if words[:1] != ["python"]:
        return None
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False, allow_abbrev=False)
    parser.add_argument("--extra", action="append", default=[])
    parser.add_argument("--group", action="append", default=[])
    parser.add_argument("--with", dest="with_", action="append", default=[])
    parser.add_argument("--venv", default=".agentops/venv")
    parser.add_argument("--python", default=None)
    try:
        args, _rest = parser.parse_known_args(words[1:])
    except (argparse.ArgumentError, SystemExit):
        return None
    return PythonStep(tuple(args.extra), tuple(args.group), tuple(args.with_), args.python, args.venv)


def default_python(env: Mapping[str, str]) -> str:
    """``python3`` on PATH -- the interpreter the person uses for the project -- else the toolkit's own."""
    return shutil.which("python3", path=env.get("PATH", os.defpath)) or sys.executable


def prepare_base(
    root: Path,
    step: PythonStep,
    *,
    common_dir: Path,
    environ: Mapping[str, str],
    clock: Clock,
    confine: Runner,
    timeout: float = 1800.0,
    progress: Progress | None = None,
) -> Base:
    """The base ``step`` run in the clean checkout ``root`` will stand on, found or built now -- by the
    supervisor, before the step, since the step itself sees the shared environments read-only. What the commit's
    files steer runs through ``confine`` (:func:`~.pybase.ensure_base`). Raises what :func:`ensure_python_env`
    raises for the base."""
    root = root.resolve()
    _check_root(root, Path(step.venv))
    info = interpreter(step.python or default_python(environ), cwd=root, environ=environ, clock=clock)
    return ensure_base(
        root,
        common_dir=common_dir,
        python=info,
        extras=step.extras,
        groups=step.groups,
        with_=step.with_,
        environ=environ,
        clock=clock,
        timeout=timeout,
        progress=progress,
        confine=confine,
    )


def _check_root(root: Path, venv: Path) -> Path:
    if not is_python_project(root) and not [
        f for f in lockfiles(root) if f.endswith((".txt", "uv.lock", "poetry.lock", "pdm.lock", "Pipfile.lock"))
    ]:
        raise AgentOpsError(
            "ENV_SETUP_FAILED",
            f"{root} is not a Python project (no pyproject.toml, setup.py, setup.cfg, lockfile or requirements)",
        )
    venv = (venv if venv.is_absolute() else root / venv).resolve()
    if root.is_relative_to(venv):  # the venv is remade from scratch: never the checkout or a directory above it
        raise AgentOpsError("USAGE", f"--venv {venv} would contain the checkout {root}; name a directory inside it")
    return venv


def ensure_python_env(
    root: Path,
    *,
    venv: Path,
    common_dir: Path,
    python: str,
    extras: Sequence[str] = (),
    with_: Sequence[str] = (),
    environ: Mapping[str, str],
    clock: Clock,
    groups: Sequence[str] = (),
    progress: Progress | None = None,
) -> PythonEnv:
    """Make (or confirm) ``venv`` for the checkout at ``root``; see the module docstring.

    Raises ``ENV_SETUP_FAILED`` (a tool failed, or a package resolves outside the checkout), ``ENV_PYTHON_MISSING``
    (no such interpreter), ``ENV_LOCK_UNUSABLE`` (the lockfile cannot be followed) and ``USAGE`` (an extra or
    group the project does not define).
    """
    root = root.resolve()
    venv = _check_root(root, venv)
    info = interpreter(python, cwd=root, environ=environ, clock=clock)
    marker = read_json(venv / VENV_MARKER)
    decl = declared(root)
    check_extras(root, decl, extras, groups)
    source = pinned_source(root)
    inputs = inputs_digest(root, extras, with_, source, groups)
    key = base_key(root, info, extras, with_, source, groups)
    asked = find_python(python, environ)
    if marker is not None and marker.get("key") == key and (venv / "bin" / "python").exists():
        base_path = Path(str(marker.get("base", "")))
        if base_complete(base_path, key):
            if marker.get("inputs") != inputs or marker.get("python") != asked:  # a marker from before they were kept
                write_json(venv / VENV_MARKER, {**marker, "inputs": inputs, "python": asked})
            base = Base(base_path, key, True, 0.0, str(marker.get("source", "")))
            return PythonEnv(venv, base, True, 0.0, dict(marker.get("packages", {})), bool(marker.get("installed")))
    base = ensure_base(
        root,
        common_dir=common_dir,
        python=info,
        extras=extras,
        groups=groups,
        with_=with_,
        environ=environ,
        clock=clock,
        progress=progress,
    )
    start = time.monotonic()
    if progress:
        progress(f"making {venv} on base {base.path.name}, with the project installed from this checkout")
    env = tool_environment(environ, PIP_ENV)
    if venv.exists():
        if not (venv / "pyvenv.cfg").is_file() and any(venv.iterdir()):
            raise AgentOpsError("ENV_SETUP_FAILED", f"{venv} exists and is not a virtual environment; move it away")
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    run_tool(
        [str(base.python), "-m", "venv", "--without-pip", str(venv)],
        cwd=root,
        env=env,
        clock=clock,
        timeout=300,
        what="creating the checkout's virtual environment",
    )
    site = site_packages(venv)
    (site / BASE_PTH).write_text(f"import site; site.addsitedir({str(site_packages(base.path))!r})\n", "utf-8")
    if decl.installable:
        argv = [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-e",
            str(root),
        ]
        run_tool(
            argv,
            cwd=root,
            env=tool_environment(environ, IN_CHECKOUT),
            clock=clock,
            timeout=900,
            what="installing the project editable from this checkout",
        )
    link_scripts(base.path / "bin", venv / "bin")
    packages = check_imports(root, venv, python_packages(root) if decl.installable else [], env=env, clock=clock)
    write_json(
        venv / VENV_MARKER,
        {
            "key": key,
            "inputs": inputs,
            "python": asked,
            "base": str(base.path),
            "source": base.source,
            "packages": packages,
            "installed": decl.installable,
            "at": clock.now(),
        },
    )
    return PythonEnv(venv, base, False, time.monotonic() - start, packages, decl.installable)


def python_env_state(
    root: Path,
    *,
    venv: Path,
    python: str,
    extras: Sequence[str] = (),
    with_: Sequence[str] = (),
    groups: Sequence[str] = (),
    environ: Mapping[str, str],
) -> EnvState:
    """Is ``venv`` what :func:`ensure_python_env` would leave now? File reads only, no subprocess: verification asks
    before every run. Stale when the lockfile, the pins, the extras/groups/``--with`` or the interpreter changed, or
    the shared base it stands on is gone."""
    root = root.resolve()
    venv = (venv if venv.is_absolute() else root / venv).resolve()
    if not (venv / "bin" / "python").exists():
        return EnvState(False, f"{venv} does not exist")
    marker = read_json(venv / VENV_MARKER)
    if marker is None:
        return EnvState(False, f"{venv} was not made by git agentops-env (no {VENV_MARKER})")
    if marker.get("inputs") != inputs_digest(root, extras, with_, pinned_source(root), groups):
        return EnvState(
            False, f"{venv} is stale: the lockfile, pyproject.toml's dependencies or the setup's options changed"
        )
    if marker.get("python") != find_python(python, environ):
        return EnvState(False, f"{venv} is stale: {python} is another interpreter now")
    if not base_complete(Path(str(marker.get("base", ""))), str(marker.get("key", ""))):
        return EnvState(False, f"{venv} is stale: its shared base environment is gone")
    return EnvState(True, "")
