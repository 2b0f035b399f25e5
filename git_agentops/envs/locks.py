"""What a Python project's lockfile pins, in the two shapes pip takes: requirements to install, constraints to obey.

A base environment must hold what the project's lock says, not the newest releases: a suite written against pytest
9.0 may not even collect under 9.2. Each lock is turned into :class:`Pins`:

* ``uv.lock`` -- :func:`~.uv.export_uv_lock` writes the selection's pinned requirements (the whole closure, markers
  kept); they are installed as they are, and ``complete``: the declared dependencies add nothing.
* ``poetry.lock`` and ``pdm.lock`` -- read here, directly: every ``[[package]]`` becomes a constraint
  ``name==version ; marker``, and pip installs what ``pyproject.toml`` declares for the selection under those
  constraints. Reading the versions beats running ``poetry export``: the export is a plugin poetry 2 no longer
  bundles, its version must match poetry's, and an old poetry cannot read a newer lock; the versions and markers,
  on the other hand, are spelled the same in every lock format since poetry 1.0 (pdm: since lock version 4), and
  the graph walk and marker evaluation -- the hard part of an export -- are pip's own job under constraints. A
  package locked from git or a URL is installed from exactly that revision when the selection names it.
* ``Pipfile.lock`` -- every pinned entry of ``default`` and ``develop``, installed as it is (``complete``).
* a pinned requirements file -- installed as it is; its ``==`` lines also bound the rest.

Two checks make "the lock was followed" a fact rather than a hope: before building, every dependency the
selection declares must be in the lock (:func:`check_declared`: a lock older than ``pyproject.toml`` would leave
it to pip's newest); after building, every installed distribution the lock names must have a version the lock
allows (:func:`check_installed`: a build requirement or ``--with`` package cannot silently move a pin). Either
failure is ``ENV_LOCK_UNUSABLE`` naming the lock and the command that fixes it.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time
from pathlib import Path
from typing import Final, TypeAlias

from ..errors import AgentOpsError
from .pydeps import normalize, requirement_lines, requirement_name

TomlValue: TypeAlias = "str | int | float | bool | datetime | date | time | list[TomlValue] | dict[str, TomlValue]"
"""Any TOML value, as :mod:`tomllib` reads it: what a lock file of another tool holds before it is checked."""

RELOCK: Final = {
    "uv": "uv lock",
    "poetry": "poetry lock",
    "pdm": "pdm lock",
    "pipenv": "pipenv lock",
    "requirements": "regenerate the requirements file",
}
_PIN: Final = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*===?\s*([^\s;,]+)\s*(;.*)?")


@dataclass(frozen=True, slots=True)
class Pins:
    """What a lock pins for one selection of extras and groups (see the module docstring)."""

    kind: str  # "uv" | "poetry" | "pdm" | "pipenv" | "requirements"
    file: Path
    requirements: tuple[str, ...] = ()  # installed as they are (pip -r)
    constraints: tuple[str, ...] = ()  # name==version[ ; marker] (pip -c): nothing installed may leave them
    locked: Mapping[str, frozenset[str]] = field(default_factory=dict)  # normalized name -> the versions it allows
    complete: bool = False  # the requirements are the whole selection: the declared dependencies add nothing

    def fix(self) -> str:
        return RELOCK.get(self.kind, "regenerate the lock")


def _versions(pairs: Iterable[tuple[str, str]]) -> dict[str, frozenset[str]]:
    found: dict[str, set[str]] = {}
    for name, version in pairs:
        found.setdefault(normalize(name), set()).add(version)
    return {name: frozenset(versions) for name, versions in found.items()}


def pins_of_requirements(kind: str, file: Path, lines: list[str], *, complete: bool = False) -> Pins:
    """A requirements-file lock (an export, or the project's own pinned file): installed as it is; each ``==`` line
    is also a constraint (without its extras or hashes, which constraints may not carry)."""
    constraints, pairs = [], []
    for line in lines:
        found = _PIN.fullmatch(line.split(" --hash", 1)[0].strip())
        if found is None:
            continue
        name, version, marker = found.group(1), found.group(2), (found.group(3) or "").strip()
        constraints.append(f"{name}=={version}{' ' + marker if marker else ''}")
        pairs.append((name, version))
    return Pins(kind, file, tuple(lines), tuple(constraints), _versions(pairs), complete)


def _load_toml(path: Path) -> dict[str, TomlValue]:
    try:
        return tomllib.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise AgentOpsError(
            "ENV_LOCK_UNUSABLE", f"{path} cannot be read as TOML ({exc}): regenerate it and commit it"
        ) from exc


def _packages(path: Path) -> list[dict[str, TomlValue]]:
    """The ``[[package]]`` tables of a TOML lock that name their package (a lock written by another tool is read
    defensively: every value is checked before it is used)."""
    packages = _load_toml(path).get("package", [])
    return (
        [p for p in packages if isinstance(p, dict) and isinstance(p.get("name"), str)]
        if isinstance(packages, list)
        else []
    )


def lock_names(path: Path) -> set[str]:
    """The normalized names of every ``[[package]]`` of a TOML lock (``uv.lock``, ``poetry.lock``, ``pdm.lock``)."""
    return {normalize(str(p["name"])) for p in _packages(path)}


def _marker(package: Mapping[str, TomlValue]) -> str:
    """A package's environment marker: poetry's ``markers`` (a string, or one per group) or pdm's ``marker``."""
    value = package.get("markers", package.get("marker"))
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        parts = [v for v in value.values() if isinstance(v, str)]
        if len(parts) == len(value) and parts:
            return " or ".join(f"({part})" for part in dict.fromkeys(parts))
    return ""


def _direct(package: Mapping[str, TomlValue]) -> str | None:
    """``name @ url`` for a package locked from git or a URL; "" for a local path (never installed into a base,
    like the project itself); None for an index package."""
    name = package["name"]
    source = package.get("source")
    if isinstance(source, dict):  # poetry
        kind, url = source.get("type"), source.get("url")
        if kind == "git" and isinstance(url, str):
            rev = source.get("resolved_reference") or source.get("reference") or ""
            sub = f"#subdirectory={source['subdirectory']}" if source.get("subdirectory") else ""
            return f"{name} @ git+{url}{f'@{rev}' if rev else ''}{sub}"
        if kind == "url" and isinstance(url, str):
            return f"{name} @ {url}"
        if kind in ("directory", "file"):
            return ""
        return None
    if isinstance(package.get("git"), str):  # pdm
        rev = package.get("revision") or package.get("ref") or ""
        return f"{name} @ git+{package['git']}{f'@{rev}' if rev else ''}"
    if isinstance(package.get("url"), str):
        return f"{name} @ {package['url']}"
    if isinstance(package.get("path"), str):
        return ""
    return None


def pins_of_table(kind: str, file: Path, wanted: Iterable[str]) -> Pins:
    """``poetry.lock`` or ``pdm.lock``: a constraint per index package, a requirement per git/URL package that the
    selection names (``wanted``: normalized names the declared dependencies install)."""
    names = set(wanted)
    constraints, requirements, pairs = [], [], []
    for package in _packages(file):
        version = package.get("version")
        if not isinstance(version, str):
            continue
        direct = _direct(package)
        if direct is None:
            marker = _marker(package)
            marker = "" if "extra" in marker else marker  # a constraint has no extras to evaluate one against
            constraints.append(f"{package['name']}=={version}{' ; ' + marker if marker else ''}")
            pairs.append((str(package["name"]), version))
        elif direct and normalize(str(package["name"])) in names:
            requirements.append(direct)
    return Pins(kind, file, tuple(requirements), tuple(constraints), _versions(pairs))


def pins_of_pipfile(file: Path) -> Pins:
    """``Pipfile.lock``: every entry of ``default`` and ``develop``, pinned as the lock says (local paths skipped)."""
    try:
        doc = json.loads(file.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise AgentOpsError(
            "ENV_LOCK_UNUSABLE", f"{file} is not JSON ({exc}): run 'pipenv lock' and commit it"
        ) from exc
    lines: list[str] = []
    for section in ("default", "develop"):
        for name, entry in (doc.get(section) or {}).items() if isinstance(doc, dict) else []:
            if not isinstance(entry, dict) or name in (n.split(" ", 1)[0] for n in lines):
                continue
            marker = f" ; {entry['markers']}" if isinstance(entry.get("markers"), str) else ""
            if isinstance(entry.get("version"), str):
                lines.append(f"{name}{entry['version']}{marker}")
            elif isinstance(entry.get("git"), str):
                ref = f"@{entry['ref']}" if isinstance(entry.get("ref"), str) else ""
                lines.append(f"{name} @ git+{entry['git']}{ref}{marker}")
    return pins_of_requirements("pipenv", file, lines, complete=True)


def check_declared(pins: Pins, declared: Iterable[str], *, in_lock: set[str] | None = None) -> None:
    """``ENV_LOCK_UNUSABLE`` when a dependency the selection declares is not in the lock (the lock is older than
    ``pyproject.toml``; pip would pick the newest release). ``in_lock``: every name the lock has, when the pins
    hold only the selection's part of it."""
    have = in_lock if in_lock is not None else set(pins.locked)
    missing = sorted({normalize(name) for name in declared} - have)
    if missing:
        raise AgentOpsError(
            "ENV_LOCK_UNUSABLE",
            f"{pins.file.name} does not pin {', '.join(missing)}, which pyproject.toml declares: the lock is older "
            f"than pyproject.toml. Run '{pins.fix()}' and commit {pins.file.name}; nothing was installed",
            details={"lock": str(pins.file), "missing": missing},
        )


def _canonical(version: str) -> str:
    """A version compared as PEP 440 does for what locks write (``1.0`` is ``1.0.0``; case and ``v`` ignored)."""
    text = version.strip().lower().removeprefix("v")
    found = re.match(r"(\d+(?:\.\d+)*)(.*)$", text)
    if found is None:
        return text
    release = found.group(1).split(".")
    while len(release) > 1 and release[-1] == "0":
        release.pop()
    return ".".join(str(int(part)) for part in release) + found.group(2)


def installed(site: Path) -> dict[str, str]:
    """The distributions under a ``site-packages`` directory, by normalized name (read from ``*.dist-info``)."""
    found = {}
    for info in site.glob("*.dist-info"):
        try:
            head = (info / "METADATA").read_text("utf-8", errors="replace").split("\n\n", 1)[0]
        except OSError:
            continue
        name = re.search(r"^Name:\s*(\S+)", head, re.MULTILINE)
        version = re.search(r"^Version:\s*(\S+)", head, re.MULTILINE)
        if name and version:
            found[normalize(name.group(1))] = version.group(1)
    return found


def check_installed(pins: Pins, site: Path) -> dict[str, str]:
    """``ENV_LOCK_UNUSABLE`` unless every installed distribution the lock names has a version the lock allows.
    Returns the locked distributions as installed (name -> version)."""
    have = installed(site)
    wrong, followed = [], {}
    for name, version in sorted(have.items()):
        allowed = pins.locked.get(name)
        if allowed is None:
            continue
        if _canonical(version) in {_canonical(v) for v in allowed}:
            followed[name] = version
        else:
            wrong.append(f"{name} {version} (the lock pins {', '.join(sorted(allowed))})")
    if wrong:
        raise AgentOpsError(
            "ENV_LOCK_UNUSABLE",
            f"the environment does not follow {pins.file.name}: {'; '.join(wrong)} -- a build requirement or a "
            f"--with package needs other versions than the lock. Align them with the lock ('{pins.fix()}' after "
            "changing pyproject.toml), or drop the --with package",
            details={"lock": str(pins.file), "mismatched": wrong},
        )
    return followed


def lock_requirement_names(lines: Iterable[str]) -> set[str]:
    """The normalized names of requirement lines (options, paths and URLs without a name skipped)."""
    return {parsed[0] for line in lines if (parsed := requirement_name(line))}


def pinned_lines(path: Path) -> list[str]:
    """A requirements file's logical lines (see :func:`~.pydeps.requirement_lines`)."""
    return requirement_lines(path)
