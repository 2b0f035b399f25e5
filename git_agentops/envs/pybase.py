"""The shared base of a checkout's Python environment: the project's dependencies, installed once per lockfile.

:mod:`.python` says why a checkout's environment has two layers; this is the lower one. A base lives in
``$GIT_COMMON_DIR/agentops/envs/python-<key16>/``, keyed by what decides its contents (:func:`base_key`: the
lockfile and ``pyproject.toml``'s dependency tables, the pinned source, the extras, groups and ``--with``
packages, the interpreter), built once under an exclusive file lock and marked complete last, so a crash halfway
leaves a directory the next caller deletes and builds again. What it installs is what the project's lock pins
(:mod:`.locks`, :mod:`.uv`), checked after the install; pip keeps its normal cache, so a second base downloads
nothing it had.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..canonical import digest, sha256_hex
from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.private import file_lock
from .locks import (
    Pins,
    check_declared,
    check_installed,
    lock_names,
    pins_of_pipfile,
    pins_of_requirements,
    pins_of_table,
)
from .project import lock_digest, pyproject
from .pydeps import (
    Declared,
    Source,
    declared,
    filtered_requirements,
    normalize,
    pinned_source,
    requirement_name,
    selection_requirements,
    split_selection,
)
from .tools import run_tool, shared_dir, tool_environment
from .venvs import read_json, site_packages, write_json

Progress = Callable[[str], None]
RECIPE: Final = 2
"""Bumped when the way a base is built changes, so old bases are not taken for new ones."""

COMPLETE: Final = "agentops-complete.json"
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


def find_python(python: str, environ: Mapping[str, str]) -> str | None:
    """Where ``python`` (a name looked up on PATH, or a path) is, resolved to the real file; None when absent."""
    found = python if os.sep in python else shutil.which(python, path=environ.get("PATH", os.defpath))
    return os.path.realpath(found) if found is not None and os.path.exists(found) else None


def interpreter(python: str, *, cwd: Path, environ: Mapping[str, str], clock: Clock) -> Interpreter:
    """Ask ``python`` what it is, in one short subprocess.

    Raises ``ENV_PYTHON_MISSING`` when there is no such interpreter, ``ENV_SETUP_FAILED`` when it does not run.
    """
    if find_python(python, environ) is None:
        where = "does not exist" if os.sep in python else f"is not on PATH ({environ.get('PATH', '')})"
        raise AgentOpsError(
            "ENV_PYTHON_MISSING",
            f"the interpreter {python} {where}: install it, or name one that is there with --python in the setup "
            "step ('git agentops-env python --python python3.12')",
            details={"python": python},
        )
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
    locked: Mapping[str, str] = field(default_factory=dict)  # what the lock pinned, as installed (built now only)

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


def check_extras(root: Path, decl: Declared, extras: Sequence[str], groups: Sequence[str] = ()) -> None:
    unknown = [e for e in extras if normalize(e) not in decl.names()]
    if unknown:
        have = ", ".join(sorted(decl.names())) or "none"
        raise AgentOpsError(
            "USAGE",
            f"{root / 'pyproject.toml'} defines no extra or dependency group {', '.join(map(repr, unknown))} "
            f"(it has: {have})",
        )
    no_group = [g for g in groups if normalize(g) not in set(decl.groups) | set(decl.poetry)]
    if no_group:
        have = ", ".join(sorted(set(decl.groups) | set(decl.poetry))) or "none"
        raise AgentOpsError(
            "USAGE",
            f"{root / 'pyproject.toml'} defines no dependency group {', '.join(map(repr, no_group))} "
            f"([dependency-groups] has: {have})",
        )


def inputs_digest(
    root: Path, extras: Sequence[str], with_: Sequence[str], source: Source | None, groups: Sequence[str] = ()
) -> str:
    """What decides a base's contents apart from the interpreter: read from files alone, so that deciding whether
    a checkout's environment is current costs no subprocess (:func:`python_env_state`)."""
    pinned = None
    if source is not None and source.file.is_file():
        pinned = {"kind": source.kind, "file": source.file.name, "sha256": sha256_hex(source.file.read_bytes())}
    return digest(
        {
            "recipe": RECIPE,
            "lock": lock_digest(root),
            "extras": sorted({normalize(e) for e in extras}),
            "groups": sorted({normalize(g) for g in groups}),
            "with": sorted(set(with_)),
            "pinned": pinned,
        }
    )


def base_key(
    root: Path,
    python: Interpreter,
    extras: Sequence[str],
    with_: Sequence[str],
    source: Source | None,
    groups: Sequence[str] = (),
) -> str:
    """The base's key: everything that changes what it holds (a changed lockfile, interpreter or option)."""
    inputs = inputs_digest(root, extras, with_, source, groups)
    return digest({"inputs": inputs, "python": [python.implementation, python.version, python.base]})


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
    groups: Sequence[str] = (),
    timeout: float = 1800.0,
    progress: Progress | None = None,
) -> Base:
    """The shared base for this checkout's lockfile: reused when complete, else built (once, under the lock).

    Raises ``ENV_LOCK_UNUSABLE`` (the lock cannot be followed: see :mod:`.locks`) and ``ENV_SETUP_FAILED``.
    """
    start = time.monotonic()
    decl = declared(root)
    check_extras(root, decl, extras, groups)
    source = pinned_source(root)
    key = base_key(root, python, extras, with_, source, groups)
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
        if progress:
            progress(f"building the shared base environment {path.name} from {described} (once per lockfile)")
        locked = _build_base(root, path, decl, python, extras, groups, with_, source, environ, clock, timeout, progress)
        write_json(
            path / COMPLETE,
            {
                "key": key,
                "python": python.version,
                "source": described,
                "locked": locked,
                "builtAt": clock.now(),
                "root": str(root),
            },
        )
    return Base(path, key, False, time.monotonic() - start, described, locked)


def _pins(
    root: Path,
    path: Path,
    decl: Declared,
    python: Interpreter,
    selection: tuple[list[str], list[str]],
    source: Source,
    environ: Mapping[str, str],
    clock: Clock,
    progress: Progress | None,
) -> Pins:
    """What ``source`` pins for the selection, and the check that it pins everything the selection declares."""
    # a requirement under a marker may be left out of a lock made for fewer platforms: only unconditional ones
    specs = [spec for spec in selection_requirements(decl, *selection) if ";" not in spec]
    declared_names = [p[0] for spec in specs if (p := requirement_name(spec)) and p[0] != decl.name]
    if source.kind == "uv":
        from .uv import ensure_uv, export_uv_lock

        pins = Pins("uv", source.file)
        check_declared(pins, declared_names, in_lock=lock_names(source.file))
        tools = path.parent / "tools"  # beside the bases: read-only to agents (:mod:`.uv` says why)
        uv = ensure_uv(tools, python=python.executable, environ=environ, cwd=root, clock=clock, progress=progress)
        exported = path / "agentops-uv-export.txt"
        groups = [g for g in selection[1] if g in decl.groups]  # a poetry group of the same name is not uv's
        export_uv_lock(uv, root, extras=selection[0], groups=groups, output=exported, environ=environ, clock=clock)
        return pins_of_requirements("uv", source.file, filtered_requirements(exported), complete=True)
    if source.kind in ("poetry", "pdm"):
        pins = pins_of_table(source.kind, source.file, declared_names)
        check_declared(pins, declared_names, in_lock=lock_names(source.file))
        return pins
    if source.kind == "pipenv":
        return pins_of_pipfile(source.file)
    return pins_of_requirements("requirements", source.file, filtered_requirements(source.file))


def _build_base(
    root: Path,
    path: Path,
    decl: Declared,
    python: Interpreter,
    extras: Sequence[str],
    groups: Sequence[str],
    with_: Sequence[str],
    source: Source | None,
    environ: Mapping[str, str],
    clock: Clock,
    timeout: float,
    progress: Progress | None,
) -> dict[str, str]:
    """Make the base at ``path``; returns what the lock pinned, as installed (empty without a lock)."""
    env = tool_environment(environ, PIP_ENV)
    path.mkdir(parents=True)
    selection = split_selection(decl, extras, groups)
    pins = None
    if source is not None:  # first: a lock that cannot be followed is refused before anything is made
        pins = _pins(root, path, decl, python, selection, source, environ, clock, progress)
    run_tool(
        [python.executable, "-m", "venv", str(path)],
        cwd=root,
        env=env,
        clock=clock,
        timeout=600,
        what="creating the base environment",
    )
    pip = [str(path / "bin" / "python"), "-m", "pip", "install"]
    declared_part = [] if pins is not None and pins.complete else selection_requirements(decl, *selection)
    wanted = [*declared_part, *decl.build_requires, *with_]
    files: dict[str, Path] = {}
    for name, lines in (
        ("pinned", pins.requirements if pins else ()),
        ("declared", wanted),
        ("constraints", pins.constraints if pins else ()),
    ):
        if lines:
            files[name] = path / f"agentops-{name}.txt"
            files[name].write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    bound = ["-c", str(files["constraints"])] if "constraints" in files else []
    hashed = pins is not None and any("--hash" in line for line in pins.requirements)
    if hashed:  # pip's hash-checking mode refuses unhashed neighbours: the hashed file goes alone
        batches = [["-r", str(files["pinned"])], ["-r", str(files["declared"]), *bound] if "declared" in files else []]
    else:
        batches = [[arg for name in ("pinned", "declared") if name in files for arg in ("-r", str(files[name]))]]
        batches[0] += bound if batches[0] else []
    for batch in batches:
        if batch:
            if progress:
                progress(f"installing the dependencies ({pins.file.name if pins else 'pyproject.toml'}) with pip")
            run_tool(
                [*pip, *batch],
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
                [*pip, *missing, *bound],
                cwd=root,
                env=env,
                clock=clock,
                timeout=timeout,
                what="installing the editable build's requirements into the base environment",
            )
    return check_installed(pins, site_packages(path)) if pins is not None else {}
