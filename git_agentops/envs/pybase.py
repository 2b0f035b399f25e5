"""The shared base of a checkout's Python environment: the project's dependencies, installed once per lockfile.

:mod:`.python` says why a checkout's environment has two layers; this is the lower one. A base lives in
``$GIT_COMMON_DIR/agentops/envs/python-<key16>/``, keyed by what decides its contents (:func:`base_key`: the
lockfile and ``pyproject.toml``'s dependency tables, the pinned source and the files it includes, the extras,
groups and ``--with`` packages, the interpreter), built once under an exclusive file lock and marked complete last,
so a crash halfway leaves a directory the next caller deletes and builds again. What it installs is what the
project's lock pins (:mod:`.locks`, :mod:`.uv`), checked after the install; pip keeps its normal cache, so a second
base downloads nothing it had.

Every checkout on those dependency files gets the same base, so nothing a commit can change *outside* them may
decide what is in it -- the commit's code least of all. Three rules hold that:

* **Only the toolkit writes the shared environments.** Agents, the verification commands and the setup steps of a
  supervisor's clean checkout see them read-only (:mod:`git_agentops.sandbox.checkout`); a base such a step needs
  is built by the supervisor before the step (:func:`git_agentops.envs.python.prepare_base`), and a setup step
  inside a clean checkout never builds one (``ENV_SETUP_FAILED``, naming the fix). So the completion marker, written
  last, is the toolkit's word; nothing else can forge it, for this key or another.
* **The commit's code never runs with a base writable.** Built for a clean checkout (``confine``), a base takes
  only registry packages, installed by pip confined with that one base writable (a path or ``file:`` line is
  refused: :mod:`.pyreqs`); interpreters run with ``-I`` from the base's own directory, never importing the
  checkout's ``venv.py`` or ``pip/``. The project's build backend -- ``setup.py``, an in-tree backend -- is asked
  what an editable build needs afterwards, confined with nothing of the base writable (:mod:`.backend`).
* **What the backend asked for goes only to who asks for it.** That answer is the commit's to give and the key does
  not cover it, so the marker records it: a base whose extra requirements a person's own checkout vouched for, or
  that has none (the common case), is reused without a question; any other is reused only by a checkout whose own
  backend asks for all of it, and the others get a base made for their own answer (``python-<digest of key and
  answer>``).

In a person's own checkout (``git agentops-env`` by hand, ``git agentops-verify`` on first use) the code is theirs:
the same build runs unconfined, as fast as before, and vouches for its backend's answer.
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

from ..canonical import JsonObject, JsonValue, digest, sha256_hex
from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.checkout import admin_dir
from ..gitstore.clean import clean_source
from ..gitstore.private import file_lock
from .backend import BuildAnswer, ask_backend
from .locks import (
    Pins,
    check_declared,
    check_installed,
    lock_names,
    pins_of_pipfile,
    pins_of_requirements,
    pins_of_table,
)
from .pipseed import make_venv, seed_key, seeds_dir
from .project import lock_digest
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
from .pyreqs import includes, local_references, requirements_of
from .tools import Runner, run_tool, shared_dir, tool_environment, unconfined
from .venvs import read_json, site_packages, write_json

Progress = Callable[[str], None]
RECIPE: Final = 3
"""Bumped when the way a base is built changes, so old bases are not taken for new ones."""

COMPLETE: Final = "agentops-complete.json"
PIP_ENV: Final = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1", "PIP_NO_WARN_SCRIPT_LOCATION": "1"}

_INFO: Final = (
    "import json, os, platform, sys\n"
    "print(json.dumps({'version': platform.python_version(), 'implementation': sys.implementation.name,\n"
    "    'base': os.path.realpath(getattr(sys, '_base_executable', None) or sys.executable)}))\n"
)


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

    def to_json(self) -> JsonObject:
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
    pinned: JsonObject | None = None
    if source is not None and source.file.is_file():
        pinned = {"kind": source.kind, "file": source.file.name, "sha256": sha256_hex(source.file.read_bytes())}
        if source.kind == "requirements":  # what its -r/-c includes say is installed too
            pinned["includes"] = includes(source.file, root.resolve())
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


def base_marker(path: Path, key: str) -> JsonObject | None:
    """The completion marker of the base at ``path`` when it is a complete base of ``key``, else None."""
    if os.path.islink(path):
        return None
    doc = read_json(path / COMPLETE)
    if doc is None or doc.get("key") != key or not (path / "bin" / "python").exists():
        return None
    return doc


def base_complete(path: Path, key: str) -> bool:
    return base_marker(path, key) is not None


def _vouched(marker: Mapping[str, JsonValue]) -> bool:
    """Whether a base holds nothing a commit's code chose: its builder's backend wanted nothing more than the
    dependencies, or the builder was a person's own checkout (``vouched``)."""
    return not marker.get("editable") or marker.get("vouched") is True


@dataclass(frozen=True, slots=True)
class _Job:
    """One :func:`ensure_base`: its inputs, how it runs what the commit can steer, and what it may write."""

    root: Path
    decl: Declared
    python: Interpreter
    extras: tuple[str, ...]
    groups: tuple[str, ...]
    with_: tuple[str, ...]
    source: Source | None
    key: str
    described: str
    environ: Mapping[str, str]
    clock: Clock
    timeout: float
    progress: Progress | None
    run: Runner
    trusted: bool  # a person's checkout: its backend's answer is vouched for
    writes: bool  # may build (not inside a supervisor's clean checkout, whose setup sees the shared dir read-only)
    start: float


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
    confine: Runner | None = None,
) -> Base:
    """The shared base for this checkout's lockfile: reused when complete, else built (once, under the lock).

    ``confine``: the checkout is a commit nobody vouched for (a supervisor's clean checkout): every command its
    files steer runs through it -- pip (with the base being built as its one extra writable path) and the build
    backend's question (with none). Without it the checkout is the person's own and they run as they are. Inside a
    supervisor's clean checkout (its setup step) nothing is built: the supervisor built the base before the step.

    Raises ``ENV_LOCK_UNUSABLE`` (the lock cannot be followed: see :mod:`.locks`) and ``ENV_SETUP_FAILED``.
    """
    start = time.monotonic()
    decl = declared(root)
    check_extras(root, decl, extras, groups)
    source = pinned_source(root)
    inside = clean_source(common_dir) is not None
    job = _Job(
        root=root,
        decl=decl,
        python=python,
        extras=tuple(extras),
        groups=tuple(groups),
        with_=tuple(with_),
        source=source,
        key=base_key(root, python, extras, with_, source, groups),
        described=source.describe() if source is not None else "pyproject.toml",
        environ=environ,
        clock=clock,
        timeout=timeout,
        progress=progress,
        run=confine or unconfined,
        # a worker's worktree holds the agent's code: its backend's answer vouches for nothing (and there, in the
        # setup step's sandbox, the shared environments are read-only: a vouch could not be written anyway)
        trusted=confine is None and not inside and not _run_worktree(root),
        writes=not inside,
        start=start,
    )
    shared = shared_dir(common_dir)
    for _attempt in range(3):
        found = _find(job, shared)
        if isinstance(found, Base):
            return found
        built = _build(job, *found)
        if built is not None:
            return built
    raise AgentOpsError("ENV_SETUP_FAILED", f"the shared base for {root} kept changing while it was set up: retry")


def _run_worktree(root: Path) -> bool:
    """Whether ``root`` is a run's worker worktree (its admin dir holds the toolkit's ownership record)."""
    admin = admin_dir(root)
    return admin is not None and (admin / "agentops" / "worktree.json").is_file()


def _reused(job: _Job, path: Path) -> Base:
    return Base(path, job.key, True, time.monotonic() - job.start, job.described)


def _find(job: _Job, shared: Path) -> Base | tuple[Path, tuple[str, ...] | None]:
    """The complete base this checkout may use, or where to build one and for which backend answer (None: the
    plain base of the key, which records its builder's answer).

    A base whose builder's backend asked for more than the dependencies, and that no person vouched for, is used
    only by a checkout whose own backend asks for all of it; any other gets the base made for its own answer
    (``python-<digest of key and answer>``). So what one commit's code asked for never reaches a commit that did
    not ask for it -- and the common case (the answer vouched for, or empty) asks the backend nothing.
    """
    path = shared / f"python-{job.key[:16]}"
    marker = base_marker(path, job.key)
    if marker is None:
        return path, None
    if _vouched(marker):
        return _reused(job, path)
    answer = ask_backend(job.root, path, environ=job.environ, clock=job.clock, run=job.run)
    if set(_strings(marker.get("editable"))) <= set(answer.wanted):
        if job.trusted:  # the person's backend asks for it too: from now on nobody needs to ask
            write_json(path / COMPLETE, {**marker, "vouched": True})
        return _reused(job, path)
    variant = shared / f"python-{digest({'key': job.key, 'wanted': list(answer.wanted)})[:16]}"
    found = base_marker(variant, job.key)
    if found is not None and tuple(_strings(found.get("wanted"))) == answer.wanted:
        return _reused(job, variant)
    return variant, answer.wanted


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _build(job: _Job, path: Path, wanted: tuple[str, ...] | None) -> Base | None:
    """Build the base at ``path`` under its lock; None when another process completed it meanwhile."""
    if not job.writes:
        raise AgentOpsError(
            "ENV_SETUP_FAILED",
            f"the shared base {path.name} for {job.root} is not built, and setup in a supervisor's clean checkout "
            f"may not write the shared environments ({path.parent}): the supervisor builds it before the setup "
            "steps, for each step that runs 'git agentops-env python' as a command of its own. Write the step as "
            "that command alone (its argv, or a shell line holding only it), or run the step once in your own "
            "checkout, which builds the base, and resume",
            details={"base": str(path)},
        )
    with file_lock(path.parent, f"{path.name}.lock", timeout=job.timeout):
        if base_marker(path, job.key) is not None:  # another checkout built it while we waited
            return None
        if os.path.islink(path):
            path.unlink()
        elif path.exists():  # an interrupted build: no marker, so nothing in it is trusted
            shutil.rmtree(path)
        if job.progress:
            job.progress(f"building the shared base environment {path.name} from {job.described} (once per lockfile)")
        locked, answer = _build_base(job, path)
        if wanted is not None and answer.wanted != wanted:
            raise AgentOpsError(
                "ENV_SETUP_FAILED",
                f"the build backend of {job.root} asked for {list(wanted)} and then for {list(answer.wanted)}: a base "
                "is made for one answer, and this backend's changes from one question to the next",
                details={"first": list(wanted), "second": list(answer.wanted)},
            )
        write_json(
            path / COMPLETE,
            {
                "key": job.key,
                "python": job.python.version,
                "source": job.described,
                "locked": locked,
                "builtAt": job.clock.now(),
                "root": str(job.root),
                "wanted": list(answer.wanted),
                "editable": list(answer.missing),
                "vouched": job.trusted,
            },
        )
    return Base(path, job.key, False, time.monotonic() - job.start, job.described, locked)


def _pins(job: _Job, path: Path, selection: tuple[list[str], list[str]], source: Source) -> Pins:
    """What ``source`` pins for the selection, and the check that it pins everything the selection declares."""
    decl, root = job.decl, job.root
    # a requirement under a marker may be left out of a lock made for fewer platforms: only unconditional ones
    specs = [spec for spec in selection_requirements(decl, *selection) if ";" not in spec]
    declared_names = [p[0] for spec in specs if (p := requirement_name(spec)) and p[0] != decl.name]
    if source.kind == "uv":
        from .uv import ensure_uv, export_uv_lock

        pins = Pins("uv", source.file)
        check_declared(pins, declared_names, in_lock=lock_names(source.file))
        tools = path.parent / "tools"  # beside the bases: read-only to agents and clean checkouts (:mod:`.uv`)
        # run from the shared dir, never the checkout: `python -m venv`/`-m pip` would import its venv.py or pip/
        uv = ensure_uv(
            tools, python=job.python.executable, environ=job.environ, cwd=path.parent, clock=job.clock,
            progress=job.progress,
        )  # fmt: skip
        exported = path / "agentops-uv-export.txt"
        groups = [g for g in selection[1] if g in decl.groups]  # a poetry group of the same name is not uv's
        export_uv_lock(
            uv, root, extras=selection[0], groups=groups, output=exported, environ=job.environ, clock=job.clock,
            run=job.run,
        )  # fmt: skip
        return pins_of_requirements("uv", source.file, filtered_requirements(exported), complete=True)
    if source.kind in ("poetry", "pdm"):
        pins = pins_of_table(source.kind, source.file, declared_names)
        check_declared(pins, declared_names, in_lock=lock_names(source.file))
        return pins
    if source.kind == "pipenv":
        return pins_of_pipfile(source.file)
    return pins_of_requirements("requirements", source.file, requirements_of(source.file, root))


def _build_base(job: _Job, path: Path) -> tuple[dict[str, str], BuildAnswer]:
    """Make the base at ``path``: what the lock pinned, as installed (empty without a lock), and what the build
    backend said an editable build needs (installed too).

    Only registry packages go in, by pip, which writes only this base (with ``confine``); the project's own code --
    the backend asked ``get_requires_for_build_editable`` -- runs after, writing nothing here. Interpreters run with
    ``-I`` from the base's directory: ``-m venv`` or ``-m pip`` run from the checkout would import its own
    ``venv.py`` or ``pip/``.
    """
    env = tool_environment(job.environ, PIP_ENV)
    path.mkdir(parents=True)
    selection = split_selection(job.decl, job.extras, job.groups)
    pins = None
    if job.source is not None:  # first: a lock that cannot be followed is refused before anything is made
        pins = _pins(job, path, selection, job.source)
    declared_part = [] if pins is not None and pins.complete else selection_requirements(job.decl, *selection)
    wanted = [*declared_part, *job.decl.build_requires, *job.with_]
    if not job.trusted and (local := local_references([*(pins.requirements if pins else ()), *wanted])):
        raise AgentOpsError(
            "ENV_SETUP_FAILED",
            f"the dependencies of {job.root} install code from a path ({', '.join(local[:3])}): the shared base is "
            "never built from a checkout nobody vouched for when its build would run code its key does not cover. "
            "Run the setup step once in your own checkout (it builds the base from your files), then resume",
            details={"local": local},
        )
    python = job.python
    key = seed_key(python.base, python.version, python.implementation)
    make_venv(python.executable, key, path, seeds=seeds_dir(job.environ), env=env, clock=job.clock, timeout=600)
    pip = [str(path / "bin" / "python"), "-I", "-m", "pip", "install"]
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
            if job.progress:
                job.progress(f"installing the dependencies ({pins.file.name if pins else 'pyproject.toml'}) with pip")
            _pip(job, path, [*pip, *batch], env, "installing the dependencies into the base environment")
    answer = (
        ask_backend(job.root, path, environ=job.environ, clock=job.clock, run=job.run)
        if job.decl.installable
        else BuildAnswer((), ())
    )
    if answer.missing:
        _pip(job, path, [*pip, *answer.missing, *bound], env, "installing the editable build's requirements")
    return (check_installed(pins, site_packages(path)) if pins is not None else {}), answer


def _pip(job: _Job, path: Path, argv: list[str], env: Mapping[str, str], what: str) -> None:
    """pip, writing the base at ``path`` and nothing else of ours (run from it: a relative path means nothing)."""
    run_tool(
        argv,
        cwd=path if not job.trusted else job.root,
        env=env,
        clock=job.clock,
        timeout=job.timeout,
        what=f"{what} ({path.name})",
        run=job.run,
        writable=[path],
    )
