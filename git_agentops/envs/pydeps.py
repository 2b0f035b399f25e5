"""What a Python project's environment must hold, read from the files the project already has.

The base environment of ``git agentops-env python`` holds the project's dependencies and none of the project;
:func:`pinned_source` says which file pins them, in this order -- a lock before anything else, since a lock is the
project's own full resolution and what its CI installs:

1. ``uv.lock`` (read through ``uv export --frozen``: :mod:`.uv`);
2. ``poetry.lock``, then ``pdm.lock`` (their pinned versions read directly: :mod:`.locks` says why);
3. ``Pipfile.lock``;
4. a pinned requirements file for tests (``requirements/test*.txt``, ``requirements-test.txt``,
   ``requirements-dev.txt``, ``requirements/dev.txt``) -- what a contributing guide says to install;
5. ``requirements.txt`` (an application's pins);

and next to that pinned part, unless the lock already holds the whole selection, what ``pyproject.toml``
declares: ``[project] dependencies``, the named ``optional-dependencies`` extras, the ``[dependency-groups]`` of
PEP 735 (named with ``--group``, or ``--extra`` when no extra has the name), ``[build-system] requires`` and the
``--with`` packages. A pinned test file usually lists only the test tools (the runtime dependencies come with the
project, which is installed ``--no-deps``), so the declared part is what makes the project importable; pip
resolves both in one run, so the pins win where they apply. An extra that names the project itself
(``dev = ["myproj[test]"]``) is expanded here: left to pip, it would install the project from the index into the
base, the very thing the base must not hold.

Which file is used depends on the checkout alone, never on the tools on PATH: the same commit gets the same base on
every machine.

:func:`installed_names` is the static view of the same: which distributions a setup will install, so that
``git agentops-init`` writes ``ruff`` as a command only when ``ruff`` will be there. Pure reads; no subprocess.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .project import pyproject

SETUP_EXTRAS: Final = ("test", "tests", "testing", "dev")
"""The extras and dependency groups ``git agentops-init`` asks setup to install when the project has them."""

TEST_REQUIREMENTS: Final = (
    "requirements/test*.txt",
    "requirements-test.txt",
    "requirements-dev.txt",
    "requirements/dev.txt",
)

_NAME: Final = re.compile(r"\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(\[[^\]]*\])?")
_LOCAL: Final = re.compile(r"(-e|--editable)(\s|=)|\.{1,2}(/|\[|$)|/|file:", re.ASCII)


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares it (``Foo_Bar`` and ``foo-bar`` are one)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(spec: str) -> tuple[str, list[str]] | None:
    """The normalized name and extras of a PEP 508 requirement (None for a URL, a path or an option line)."""
    if not spec or spec.lstrip().startswith(("-", "#", ".", "/")) or "://" in spec.split(";", 1)[0].split("@", 1)[0]:
        return None
    found = _NAME.match(spec)
    if found is None:
        return None
    extras = [normalize(e.strip()) for e in (found.group(2) or "[]")[1:-1].split(",") if e.strip()]
    return normalize(found.group(1)), extras


def _table(doc: Any, *keys: str) -> dict[str, Any]:
    for key in keys:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc if isinstance(doc, dict) else {}


def _strings(value: Any) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


@dataclass(frozen=True, slots=True)
class Declared:
    """What ``pyproject.toml`` says, in the shapes setup needs."""

    name: str | None  # normalized project name
    dependencies: tuple[str, ...]
    optional: dict[str, list[str]]  # extra name (normalized) -> requirements
    groups: dict[str, list[Any]]  # PEP 735 group name (normalized) -> requirements or include-group tables
    poetry: dict[str, list[str]]  # poetry group / extras name -> distribution names (poetry's syntax is not PEP 508)
    build_requires: tuple[str, ...]
    installable: bool  # pip can install the project itself (a [project] table, poetry, or setup.py/setup.cfg)

    def names(self) -> set[str]:
        """Every extra and group name the project defines, for checking ``--extra`` names."""
        return set(self.optional) | set(self.groups) | set(self.poetry)


def declared(root: Path) -> Declared:
    """Read the dependency tables of ``root/pyproject.toml`` (empty ones when there is none)."""
    config = pyproject(root)
    project = _table(config, "project")
    name = project.get("name") if isinstance(project.get("name"), str) else None
    poetry = _table(config, "tool", "poetry")
    if name is None and isinstance(poetry.get("name"), str):
        name = poetry["name"]
    optional = {normalize(k): _strings(v) for k, v in _table(project, "optional-dependencies").items()}
    groups = {normalize(k): list(v) for k, v in _table(config, "dependency-groups").items() if isinstance(v, list)}
    for group, specs in _table(config, "tool", "pdm", "dev-dependencies").items():  # pdm's groups before PEP 735
        if isinstance(specs, list):
            groups.setdefault(normalize(group), []).extend(_strings(specs))
    poetry_sets: dict[str, list[str]] = {}
    for group, table in _table(poetry, "group").items():
        poetry_sets[normalize(group)] = [normalize(n) for n in _table(table, "dependencies") if n != "python"]
    if _table(poetry, "dev-dependencies"):
        poetry_sets.setdefault("dev", []).extend(normalize(n) for n in _table(poetry, "dev-dependencies"))
    for extra, names in _table(poetry, "extras").items():
        poetry_sets.setdefault(normalize(extra), []).extend(normalize(n) for n in _strings(names))
    dependencies = _strings(project.get("dependencies"))
    dependencies += [n for n in _table(poetry, "dependencies") if n != "python" and not project]
    build = _table(config, "build-system")
    setup_py = (root / "setup.py").is_file() or (root / "setup.cfg").is_file()
    if "requires" in build:
        build_requires = _strings(build.get("requires"))
    else:  # pip's own default for a project without [build-system] (PEP 517)
        build_requires = ["setuptools>=40.8.0", "wheel"] if setup_py or project else []
    return Declared(
        name=normalize(name) if name else None,
        dependencies=tuple(dependencies),
        optional=optional,
        groups=groups,
        poetry=poetry_sets,
        build_requires=tuple(build_requires),
        installable=bool(project) or bool(poetry) or setup_py,
    )


def setup_extras(root: Path) -> list[str]:
    """Which of :data:`SETUP_EXTRAS` the project defines (as an extra, a dependency group or a poetry group)."""
    names = declared(root).names()
    return [extra for extra in SETUP_EXTRAS if extra in names]


def requirements_for(decl: Declared, extras: Iterable[str], groups: Iterable[str] = ()) -> list[str]:
    """The PEP 508 requirements of the project's dependencies plus the named extras and groups.

    ``extras`` names an extra, or a dependency group of that name (what ``--extra`` has always accepted);
    ``groups`` names dependency groups only (``--group``, PEP 735).

    Self-references (``myproj[test]`` inside an extra of ``myproj``) are expanded into those extras' own
    requirements instead of being kept, and ``include-group`` tables are followed, each group or extra once.
    """
    out: list[str] = []
    seen: set[tuple[str, str]] = set()

    def add(spec: str) -> None:
        parsed = requirement_name(spec)
        if parsed is not None and decl.name is not None and parsed[0] == decl.name:
            for extra in parsed[1]:
                visit("extra", extra)
        elif spec not in out:
            out.append(spec)

    def visit(kind: str, name: str) -> None:
        if (kind, name) in seen:
            return
        seen.add((kind, name))
        if kind == "extra":
            for spec in decl.optional.get(name, []):
                add(spec)
        for item in decl.groups.get(name, []) if kind in ("extra", "group") else []:
            if isinstance(item, str):
                add(item)
            elif isinstance(item, dict) and isinstance(item.get("include-group"), str):
                visit("group", normalize(item["include-group"]))

    for spec in decl.dependencies:
        add(spec)
    for extra in extras:
        visit("extra", normalize(extra))
    for group in groups:
        visit("group", normalize(group))
    return out


def selection_requirements(decl: Declared, extras: Sequence[str], groups: Sequence[str] = ()) -> list[str]:
    """What the selection declares: :func:`requirements_for`, plus the names a poetry group or extra lists
    (poetry's own syntax is not PEP 508, so only the names are taken: the lock gives the versions)."""
    out = requirements_for(decl, extras, groups)
    for name in [*extras, *groups]:
        out += [n for n in decl.poetry.get(normalize(name), []) if n not in out]
    return out


def test_requirements_file(root: Path) -> Path | None:
    """The first pinned requirements file for tests the project has (:data:`TEST_REQUIREMENTS` order)."""
    for pattern in TEST_REQUIREMENTS:
        for path in sorted(root.glob(pattern)):
            if path.is_file() and not path.is_symlink():
                return path
    return None


def requirement_lines(path: Path) -> list[str]:
    """A requirements file's logical lines: continuations joined, comments and blank lines dropped."""
    try:
        text = path.read_text("utf-8", errors="replace")
    except OSError:
        return []
    lines, pending = [], ""
    for raw in text.splitlines():
        line = pending + raw
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        line = re.sub(r"\s+", " ", re.sub(r"(^|\s)#.*", "", line)).strip()
        if line:
            lines.append(line)
    return lines


def filtered_requirements(path: Path) -> list[str]:
    """The lines of a requirements file that belong in a base: no editable or local-path installs (the project
    itself, most often), and ``-r``/``-c`` includes made absolute, since the copy is read from elsewhere."""
    out = []
    for line in requirement_lines(path):
        option = re.match(r"(-r|--requirement|-c|--constraint)(?:\s+|=)(\S+)(.*)", line)
        if option is not None:
            target = Path(option.group(2))
            target = target if target.is_absolute() else (path.parent / target).resolve()
            out.append(f"{option.group(1)} {target}{option.group(3)}")
        elif not _LOCAL.match(line):
            out.append(line)
    return out


@dataclass(frozen=True, slots=True)
class Source:
    """Which file pins a base (:func:`pinned_source`)."""

    kind: str  # "uv" | "poetry" | "pdm" | "pipenv" | "requirements"
    file: Path

    def describe(self) -> str:
        return self.file.name if self.kind == "requirements" else f"{self.file.name} ({self.kind})"


LOCKS: Final = (("uv", "uv.lock"), ("poetry", "poetry.lock"), ("pdm", "pdm.lock"), ("pipenv", "Pipfile.lock"))
"""The Python lockfiles setup follows, in the order they are looked for."""


def pinned_source(
    root: Path, extras: Sequence[str] = (), groups: Sequence[str] = (), *, have: Iterable[str] = ()
) -> Source | None:
    """The file that pins a base (the module docstring's order), or None when nothing pins it.

    ``extras``, ``groups`` and ``have`` (the tools on PATH) are accepted for callers that pass them and change
    nothing: the choice depends on the checkout's files alone.
    """
    del extras, groups, have
    for kind, name in LOCKS:
        path = root / name
        if path.is_file() and not path.is_symlink():
            return Source(kind, path)
    found = test_requirements_file(root)
    if found is not None:
        return Source("requirements", found)
    if (root / "requirements.txt").is_file():
        return Source("requirements", root / "requirements.txt")
    return None


def split_selection(decl: Declared, extras: Sequence[str], groups: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """The normalized extras and dependency groups a selection names, as a lock tool wants them apart: an
    ``--extra`` name is an extra, or a group when no extra has it; a ``--group`` name is a group."""
    wanted_extras, wanted_groups = [], []
    for name in map(normalize, extras):
        if name in decl.optional:
            wanted_extras.append(name)
        if name in decl.groups or name in decl.poetry:
            wanted_groups.append(name)
    for name in map(normalize, groups):
        if name not in wanted_groups:
            wanted_groups.append(name)
    return wanted_extras, wanted_groups


def installed_names(
    root: Path,
    extras: Sequence[str],
    with_: Sequence[str] = (),
    *,
    have: Iterable[str] = (),
    groups: Sequence[str] = (),
) -> set[str]:
    """The distributions a setup with these extras and groups will install, as far as the files say (no
    resolver: direct requirements only, which is where a project names its lint and type tools). ``have`` is
    accepted and changes nothing (see :func:`pinned_source`)."""
    del have
    decl = declared(root)
    specs = [*selection_requirements(decl, extras, groups), *with_]
    source = pinned_source(root)
    if source is not None and source.kind == "requirements":
        specs += requirement_lines(source.file)
    elif source is not None and source.kind == "pipenv":
        specs += _pipfile_names(source.file)
    return {p[0] for spec in specs if (p := requirement_name(spec))}


def _pipfile_names(path: Path) -> list[str]:
    """The names ``Pipfile.lock`` installs (its ``default`` and ``develop`` sections)."""
    try:
        doc = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return []
    sections = [doc.get(name) for name in ("default", "develop")] if isinstance(doc, dict) else []
    return [name for section in sections if isinstance(section, dict) for name in section]
