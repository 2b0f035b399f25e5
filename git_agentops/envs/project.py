"""What a project declares about the environment its code and tests run in: import packages, lockfiles.

Verification must test the commit's own code. In the most common set-up there is -- a Python package installed
editable from the main checkout into the user's virtual environment -- ``python -m pytest`` run in a worker's
worktree imports the package from the *main checkout*, so the evidence describes other code. These functions say
which import packages a project has (so a pre-flight can check where they resolve) and which files pin its
dependencies (so evidence can name the environment it ran in, and setup can be cached by them). Pure reads of
the checkout; no subprocess.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..canonical import digest, sha256_hex

LOCKFILES: Final = (
    "uv.lock",
    "poetry.lock",
    "pdm.lock",
    "Pipfile.lock",
    "requirements.txt",
    "requirements-dev.txt",
    "requirements-test.txt",
    "requirements/dev.txt",
    "requirements/test.txt",
    "requirements/tests.txt",
    "package-lock.json",
    "npm-shrinkwrap.json",
    "pnpm-lock.yaml",
    "yarn.lock",
    "bun.lock",
    "bun.lockb",
    "Cargo.lock",
    "go.sum",
)
"""Files that pin a project's dependencies, in the order they are looked for."""

_SKIP_DIRS: Final = frozenset(
    {"tests", "test", "docs", "doc", "examples", "scripts", "benchmarks", "bench", "build", "dist"}
)


def pyproject(root: Path) -> dict[str, Any]:
    """The checkout's ``pyproject.toml`` as a dict (empty when there is none or it does not parse)."""
    path = root / "pyproject.toml"
    try:
        if not path.is_file() or path.is_symlink():
            return {}
        text = path.read_text("utf-8", errors="replace")
    except OSError:
        return {}
    import tomllib  # a project that is not Python's (and a person's verify of it) never pays for the parser

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {}


def _packages_in(directory: Path) -> list[str]:
    found = []
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return []
    for entry in entries:
        name = entry.name
        if entry.is_symlink() or name.startswith((".", "_")) or name in _SKIP_DIRS or not name.isidentifier():
            continue
        if entry.is_dir() and (entry / "__init__.py").is_file():
            found.append(name)
    return found


def python_packages(root: Path) -> list[str]:
    """The top-level import packages the project ships: its ``src/`` packages, else its top-level ones.

    ``[tool.setuptools] packages`` and ``[tool.hatch.build.targets.wheel] packages`` are honoured when a project
    names them; test, docs and example directories are never taken for the project's code.
    """
    config = pyproject(root)
    tool = config.get("tool", {}) if isinstance(config.get("tool"), dict) else {}
    named: list[str] = []
    setuptools = tool.get("setuptools", {}) if isinstance(tool.get("setuptools"), dict) else {}
    if isinstance(setuptools.get("packages"), list):
        named += [p for p in setuptools["packages"] if isinstance(p, str)]
    hatch = tool.get("hatch", {}) if isinstance(tool.get("hatch"), dict) else {}
    wheel = hatch.get("build", {}).get("targets", {}).get("wheel", {}) if isinstance(hatch.get("build"), dict) else {}
    if isinstance(wheel, dict) and isinstance(wheel.get("packages"), list):
        named += [Path(p).name for p in wheel["packages"] if isinstance(p, str)]
    top = sorted({name.split(".", 1)[0] for name in named if name.split(".", 1)[0].isidentifier()})
    if top:
        return top
    src = _packages_in(root / "src")
    return src or _packages_in(root)


def is_python_project(root: Path) -> bool:
    """Whether the checkout is an installable Python project (pyproject.toml, setup.py or setup.cfg)."""
    return any((root / name).is_file() for name in ("pyproject.toml", "setup.py", "setup.cfg"))


def lockfiles(root: Path) -> list[str]:
    """The dependency-pinning files the checkout has (relative paths, in :data:`LOCKFILES` order)."""
    return [name for name in LOCKFILES if (root / name).is_file() and not (root / name).is_symlink()]


def lock_digest(root: Path) -> str:
    """One digest over every lockfile's bytes and the dependency tables of ``pyproject.toml``.

    Two checkouts with the same digest need the same dependencies installed: the key of a shared setup cache, and
    part of the environment evidence records.
    """
    parts: dict[str, str] = {}
    for name in lockfiles(root):
        try:
            parts[name] = sha256_hex((root / name).read_bytes())
        except OSError:
            continue
    config = pyproject(root)
    project = config.get("project", {}) if isinstance(config.get("project"), dict) else {}
    parts["pyproject"] = digest(
        {
            "dependencies": project.get("dependencies", []),
            "optional": project.get("optional-dependencies", {}),
            "groups": config.get("dependency-groups", {}),
            "build": config.get("build-system", {}),
        }
    )
    return digest(parts)


@dataclass(frozen=True, slots=True)
class EnvState:
    """Whether a checkout's environment is what its setup would leave now, and if not, why (for a person)."""

    ready: bool
    why: str = ""
