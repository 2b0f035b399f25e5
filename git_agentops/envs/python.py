"""A checkout's own Python environment: the project installed from *this* checkout, the dependencies shared.

Verification must test the code of the checkout it runs in. In the common set-up -- the project installed editable
from the main checkout into the person's virtualenv -- ``python -m pytest`` in a worker's worktree imports the
package from the main checkout, and a breaking change passes. So setup makes an environment *inside* each checkout
(``.agentops/venv``) with the project installed editable from that checkout, and the policy's commands run its
interpreter. Two layers keep that cheap:

* **The base** (``$GIT_COMMON_DIR/agentops/envs/python-<key16>/``) is an ordinary virtualenv holding the
  project's dependencies and build requirements (:mod:`.pydeps` says which) but not the project. Its key is the
  lockfile digest, the interpreter, the extras and ``--with`` packages, and where the pins came from, so every
  checkout on the same lockfile shares one. It is built once, under an exclusive file lock, and a marker written
  last says it is complete: a crash halfway leaves a directory without the marker, which the next caller deletes
  and builds again. pip keeps its normal cache, so a second base (a new lockfile) downloads nothing it had.
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

import json
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..canonical import digest, sha256_hex
from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.private import file_lock
from .project import is_python_project, lock_digest, lockfiles, pyproject, python_packages
from .pydeps import Declared, Source, declared, filtered_requirements, normalize, pinned_source, requirements_for
from .tools import run_tool, shared_dir, tool_environment
from .venvs import check_imports, link_scripts, read_json, site_packages, write_json

RECIPE: Final = 1
"""Bumped when the way a base is built changes, so old bases are not taken for new ones."""

COMPLETE: Final = "agentops-complete.json"
VENV_MARKER: Final = "agentops-env.json"
BASE_PTH: Final = "zz-agentops-base.pth"  # after the editable install's own .pth: the checkout's code comes first
PIP_ENV: Final = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1", "PIP_NO_WARN_SCRIPT_LOCATION": "1"}
IN_CHECKOUT: Final = {**PIP_ENV, "PYTHONDONTWRITEBYTECODE": "1"}
"""For commands that import from the checkout (an in-tree build backend, ``setup.py``): no ``__pycache__`` left
behind in it, which would make the checkout's first verification refuse it as dirty."""

_INFO: Final = (
    "import json, os, platform, sys\n"
    "print(json.dumps({'version': platform.python_version(), 'implementation': sys.implementation.name,\n"
    "    'base': os.path.realpath(getattr(sys, '_base_executable', None) or sys.executable)}))\n"
)
_BUILD_REQUIRES: Final = r"""
import importlib, importlib.metadata as md, json, os, sys
root, out, table = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
for entry in reversed(table.get("backend-path", [])):
    sys.path.insert(0, os.path.join(root, entry))
module, _, attr = (table.get("build-backend") or "setuptools.build_meta:__legacy__").partition(":")
backend = importlib.import_module(module)
for part in attr.split(".") if attr else []:
    backend = getattr(backend, part)
hook = getattr(backend, "get_requires_for_build_editable", None)
wanted = list(hook(None)) if hook is not None else []
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
missing = []
for spec in wanted:
    req = Requirement(spec)
    if req.marker is not None and not req.marker.evaluate():
        continue
    try:
        have = md.version(req.name)
    except md.PackageNotFoundError:
        missing.append(spec)
        continue
    if req.specifier and not req.specifier.contains(have, prereleases=True):
        missing.append(spec)
with open(out, "w") as handle:
    json.dump(missing, handle)
"""


@dataclass(frozen=True, slots=True)
class Interpreter:
    """The Python a base is made from: what was asked for, and the real interpreter behind it (venvs resolved)."""

    executable: str
    version: str
    implementation: str
    base: str


def interpreter(python: str, *, cwd: Path, environ: Mapping[str, str], clock: Clock) -> Interpreter:
    """Ask ``python`` what it is, in one short subprocess (``ENV_SETUP_FAILED`` when it does not run)."""
    done = run_tool(
        [python, "-I", "-c", _INFO],
        cwd=cwd,
        env=tool_environment(environ),
        clock=clock,
        timeout=60,
        what="asking the interpreter its version",
    )
    info = json.loads(done.output.decode("utf-8", errors="replace").strip().splitlines()[-1])
    return Interpreter(python, info["version"], info["implementation"], info["base"])


@dataclass(frozen=True, slots=True)
class Base:
    """A shared base environment: where, its key, whether this call reused it, and what building it cost."""

    path: Path
    key: str
    reused: bool
    seconds: float
    source: str  # where the pins came from, for the summary

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "key": self.key,
            "reused": self.reused,
            "seconds": round(self.seconds, 3),
            "source": self.source,
        }


def _check_extras(root: Path, decl: Declared, extras: Sequence[str]) -> None:
    unknown = [e for e in extras if normalize(e) not in decl.names()]
    if unknown:
        have = ", ".join(sorted(decl.names())) or "none"
        raise AgentOpsError(
            "USAGE",
            f"{root / 'pyproject.toml'} defines no extra or dependency group {', '.join(map(repr, unknown))} "
            f"(it has: {have})",
        )


def base_key(
    root: Path, python: Interpreter, extras: Sequence[str], with_: Sequence[str], source: Source | None
) -> str:
    """The base's key: everything that changes what it holds (a changed lockfile, interpreter or option)."""
    pinned = None
    if source is not None and source.file is not None and source.file.is_file():
        pinned = {"kind": source.kind, "file": source.file.name, "sha256": sha256_hex(source.file.read_bytes())}
    return digest(
        {
            "recipe": RECIPE,
            "lock": lock_digest(root),
            "python": [python.implementation, python.version, python.base],
            "extras": sorted({normalize(e) for e in extras}),
            "with": sorted(set(with_)),
            "pinned": pinned,
        }
    )


def base_complete(path: Path, key: str) -> bool:
    doc = read_json(path / COMPLETE)
    return doc is not None and doc.get("key") == key and (path / "bin" / "python").exists()


def ensure_base(
    root: Path,
    *,
    common_dir: Path,
    python: Interpreter,
    extras: Sequence[str],
    with_: Sequence[str],
    environ: Mapping[str, str],
    clock: Clock,
    timeout: float = 1800.0,
) -> Base:
    """The shared base for this checkout's lockfile: reused when complete, else built (once, under the lock)."""
    start = time.monotonic()
    decl = declared(root)
    _check_extras(root, decl, extras)
    have = [tool for tool in ("uv", "poetry") if shutil.which(tool, path=environ.get("PATH", os.defpath))]
    source = pinned_source(root, extras, have=have)
    key = base_key(root, python, extras, with_, source)
    shared = shared_dir(common_dir)
    path = shared / f"python-{key[:16]}"
    described = source.describe() if source is not None else "pyproject.toml"
    if base_complete(path, key):
        return Base(path, key, True, time.monotonic() - start, described)
    with file_lock(shared, f"python-{key[:16]}.lock", timeout=timeout):
        if base_complete(path, key):  # another checkout built it while we waited
            return Base(path, key, True, time.monotonic() - start, described)
        if path.exists():  # an interrupted build: no marker, so nothing in it is trusted
            shutil.rmtree(path)
        _build_base(root, path, decl, python, extras, with_, source, environ, clock, timeout)
        write_json(
            path / COMPLETE,
            {"key": key, "python": python.version, "source": described, "builtAt": clock.now(), "root": str(root)},
        )
    return Base(path, key, False, time.monotonic() - start, described)


def _build_base(
    root: Path,
    path: Path,
    decl: Declared,
    python: Interpreter,
    extras: Sequence[str],
    with_: Sequence[str],
    source: Source | None,
    environ: Mapping[str, str],
    clock: Clock,
    timeout: float,
) -> None:
    env = tool_environment(environ, PIP_ENV)
    path.parent.mkdir(parents=True, exist_ok=True)
    run_tool(
        [python.executable, "-m", "venv", str(path)],
        cwd=root,
        env=env,
        clock=clock,
        timeout=600,
        what="creating the base environment",
    )
    pip = [str(path / "bin" / "python"), "-m", "pip", "install"]
    pinned: list[str] = []
    if source is not None and source.export:
        exported = path / f"agentops-{source.kind}-export.txt"
        output = "--output-file" if source.kind == "uv" else "--output"
        run_tool(
            [*source.export, f"{output}={exported}"],
            cwd=root,
            env=env,
            clock=clock,
            timeout=600,
            what=f"exporting {source.file} ({source.kind})",
        )
        pinned = filtered_requirements(exported)
    elif source is not None and source.file is not None:
        pinned = filtered_requirements(source.file)
    wanted = [*requirements_for(decl, extras), *decl.build_requires, *with_]
    files = []
    for name, lines in (("pinned", pinned), ("declared", wanted)):
        if lines:
            file = path / f"agentops-{name}.txt"
            file.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
            files.append(file)
    hashed = any("--hash" in line for line in pinned)  # pip's hash-checking mode refuses unhashed neighbours
    batches = [[files[0]], files[1:]] if hashed and len(files) > 1 else [files]
    for batch in batches:
        if batch:
            args = [arg for file in batch for arg in ("-r", str(file))]
            run_tool(
                [*pip, *args],
                cwd=root,
                env=env,
                clock=clock,
                timeout=timeout,
                what="installing the dependencies into the base environment",
            )
    if decl.installable:  # without a [build-system] table, pip's default backend: setuptools' legacy one
        table = pyproject(root).get("build-system", {})
        answer = path / "agentops-build-editable.json"
        run_tool(
            [str(path / "bin" / "python"), "-c", _BUILD_REQUIRES, str(root), str(answer), json.dumps(table)],
            cwd=root,
            env=tool_environment(environ, IN_CHECKOUT),
            clock=clock,
            timeout=600,
            what="asking the build backend what an editable build needs",
        )
        missing = json.loads(answer.read_text("utf-8"))
        if missing:
            run_tool(
                [*pip, *missing],
                cwd=root,
                env=env,
                clock=clock,
                timeout=timeout,
                what="installing the editable build's requirements into the base environment",
            )


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
            f"python env {self.venv}: base {name} {how}, checkout {self.seconds:.1f}s, "
            f"total {self.seconds + self.base.seconds:.1f}s"
        )


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
) -> PythonEnv:
    """Make (or confirm) ``venv`` for the checkout at ``root``; see the module docstring.

    Raises ``ENV_SETUP_FAILED`` (a tool failed, or a package resolves outside the checkout) and ``USAGE`` (an
    extra the project does not define).
    """
    root = root.resolve()
    if not is_python_project(root) and not [
        f for f in lockfiles(root) if f.endswith((".txt", "uv.lock", "poetry.lock"))
    ]:
        raise AgentOpsError(
            "ENV_SETUP_FAILED",
            f"{root} is not a Python project (no pyproject.toml, setup.py, setup.cfg or requirements)",
        )
    venv = (venv if venv.is_absolute() else root / venv).resolve()
    if root.is_relative_to(venv):  # the venv is remade from scratch: never the checkout or a directory above it
        raise AgentOpsError("USAGE", f"--venv {venv} would contain the checkout {root}; name a directory inside it")
    info = interpreter(python, cwd=root, environ=environ, clock=clock)
    marker = read_json(venv / VENV_MARKER)
    decl = declared(root)
    _check_extras(root, decl, extras)
    have = [tool for tool in ("uv", "poetry") if shutil.which(tool, path=environ.get("PATH", os.defpath))]
    key = base_key(root, info, extras, with_, pinned_source(root, extras, have=have))
    if marker is not None and marker.get("key") == key and (venv / "bin" / "python").exists():
        base_path = Path(str(marker.get("base", "")))
        if base_complete(base_path, key):
            base = Base(base_path, key, True, 0.0, str(marker.get("source", "")))
            return PythonEnv(venv, base, True, 0.0, dict(marker.get("packages", {})), bool(marker.get("installed")))
    base = ensure_base(
        root, common_dir=common_dir, python=info, extras=extras, with_=with_, environ=environ, clock=clock
    )
    start = time.monotonic()
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
            "base": str(base.path),
            "source": base.source,
            "packages": packages,
            "installed": decl.installable,
            "at": clock.now(),
        },
    )
    return PythonEnv(venv, base, False, time.monotonic() - start, packages, decl.installable)
