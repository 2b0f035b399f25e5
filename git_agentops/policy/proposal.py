"""The verification commands and setup steps ``git agentops-init`` proposes: one command per test suite and per
tool, each enabled only when setup installs what it needs.

Where the commands come from, most trusted first (:func:`propose`):

1. what the project's CI runs (``.github/workflows``): a package script or Makefile target it calls, then every
   tool it reaches, through tox, nox, pre-commit or ``uv run``;
2. package.json scripts named like checks (``test``, ``check``, ``lint``, ``typecheck``...);
3. tox environments, nox sessions and pre-commit hooks CI does not run;
4. configuration alone: ``[tool.pytest]``, a ``tests/`` of unittest cases, ``[tool.ruff]``, ``[tool.mypy]``,
   ``Cargo.toml``, ``go.mod``...;
5. Makefile targets named like checks.

A candidate whose tools are all covered already is the same suite again and is dropped; a package script or
Makefile target that would repeat *some* of them gives only its other tools, one command each. A script or target
that does more than run tools (``pip install``, ``tox``, ``coverage report``) or rewrites files (``--fix``,
``--write``) is not run whole either: its tools are. A tool runs where setup puts it -- a Python tool as
``.agentops/venv/bin/python -m TOOL``, a Node tool through the package manager, a native one from PATH -- and
in check mode (``ruff check --no-fix``, ``ruff format --check``, ``prettier --check``, ``cargo fmt --check``).

A command whose tool setup will not install is written commented out with the exact fix: the dependency group or
extra that holds it (``add "--group typing" to the setup step``), the package to add to devDependencies, or the
toolchain component to install.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from ..canonical import JsonObject
from ..envs.project import is_python_project, pyproject
from ..envs.pydeps import (
    SETUP_EXTRAS,
    Declared,
    declared,
    installed_names,
    normalize,
    requirement_name,
    requirements_for,
)
from ..envs.tools import ENV_COMMAND, VENV
from ..files import read_text
from .checkmode import RunEnv, check_argv, junit_spec, label
from .commands import Entry, Leaf, Resolver
from .projectfiles import KNOWN_BINS
from .toolkinds import TOOLS
from .workflows import read_workflows

TAP_OPTIONS: Final = {"NODE_OPTIONS": "--test-reporter=tap"}
"""``node --test`` prints TAP only when told to on Node 23 and later (and on a terminal before that)."""

_CHECK_SCRIPT: Final = re.compile(
    r"test|tests|check|lint|typecheck|type-check|types|tsc|format:check|fmt:check|(check|lint|test|types?)[:-].+"
)
_CHECK_TARGET: Final = re.compile(r"test|tests|check|lint|typecheck|type-check|types|mypy|format-check|fmt-check")
_HARMLESS: Final = frozenset({"echo", "printf", "true", ":", "test", "[", "mkdir"})
_INSTALLING_WRAPPERS: Final = frozenset(
    {"uv", "uvx", "coverage", "poetry", "pdm", "pipenv", "rye", "hatch", "c8", "nyc"}
)
_ROLE_ORDER: Final = {"tests": 0, "lint": 1, "format": 2, "types": 3}
_PATH_FIX: Final = {
    "cargo-clippy": "rustup component add clippy",
    "cargo-fmt": "rustup component add rustfmt",
    "golangci-lint": "https://golangci-lint.run/welcome/install/",
}


@dataclass(frozen=True, slots=True)
class Detected:
    """A verification command init proposes, as the policy entry it becomes."""

    id: str
    argv: tuple[str, ...] | str
    parser: str
    why: str
    timeout: int = 1800
    shell: bool = False
    env: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        doc: JsonObject = {
            "id": self.id,
            "argv": self.argv if isinstance(self.argv, str) else list(self.argv),
            "parser": self.parser,
            "timeout": self.timeout,
            "description": self.why,
        }
        if self.shell:
            doc["shell"] = True
        if self.env:
            doc["env"] = dict(self.env)
        return doc


@dataclass(frozen=True, slots=True)
class Disabled:
    """A command the project's configuration asks for but whose tool will not be there: written commented out."""

    command: Detected
    reason: str

    def to_json(self) -> JsonObject:
        return {**self.command.to_json(), "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Proposal:
    """What init proposes: setup steps, commands, and the commands left commented out (with their reasons)."""

    setup: tuple[tuple[str, ...], ...] = ()
    commands: tuple[Detected, ...] = ()
    disabled: tuple[Disabled, ...] = ()

    def setup_commands(self) -> list[str]:
        """The setup steps as a person types them in their own checkout (where ``git agentops-verify`` runs)."""
        return [shlex.join(step) for step in self.setup]


def which(program: str, path: str | None) -> str | None:
    """``program`` on the PATH given (None: the OS default, never this process's environment)."""
    return shutil.which(program, path=os.defpath if path is None else path)


# -- candidates ----------------------------------------------------------------------------------------------


def _has_pytest(root: Path, tool: Collection[str]) -> bool:
    """Whether the project runs pytest; ``tool``: the names of ``pyproject.toml``'s ``[tool]`` tables."""
    text = read_text(root / "pyproject.toml")
    return (
        "pytest" in tool
        or (root / "pytest.ini").is_file()
        or "[tool:pytest]" in (read_text(root / "setup.cfg") or "")
        or "[pytest]" in (read_text(root / "tox.ini") or "")
        or (text is not None and re.search(r"\bpytest\b", text) is not None)
        or (root / "conftest.py").is_file()
        or (root / "tests" / "conftest.py").is_file()
    )


def _unittest_dir(root: Path) -> str | None:
    """A ``tests``/``test`` directory of ``unittest.TestCase`` modules (when nothing configures pytest)."""
    for name in ("tests", "test"):
        folder = root / name
        try:
            files = sorted(folder.glob("test*.py"))[:50] if folder.is_dir() else []
        except OSError:
            continue
        if any("unittest" in (read_text(f, 256 * 1024) or "") for f in files):
            return name
    return None


def _config_leaves(root: Path) -> list[Leaf]:
    """What configuration alone says the project runs."""
    config = pyproject(root)
    tool = config.get("tool", {}) if isinstance(config.get("tool"), dict) else {}
    setup_cfg = read_text(root / "setup.cfg") or ""
    found: list[tuple[str, tuple[str, ...], str]] = []
    if _has_pytest(root, tool):
        found.append(("pytest", (), "pytest configuration"))
    elif (unit := _unittest_dir(root)) is not None:
        found.append(("unittest", ("discover", "-s", unit, "-t", "."), f"unittest cases in {unit}/"))
    if "ruff" in tool or (root / "ruff.toml").is_file() or (root / ".ruff.toml").is_file():
        found.append(("ruff-check", (), "ruff configuration"))
    if "mypy" in tool or (root / "mypy.ini").is_file() or (root / ".mypy.ini").is_file() or "[mypy]" in setup_cfg:
        found.append(("mypy", (), "mypy configuration"))
    if "pyright" in tool or (root / "pyrightconfig.json").is_file():
        found.append(("pyright", (), "pyright configuration"))
    if (root / ".flake8").is_file() or "[flake8]" in setup_cfg or "[flake8]" in (read_text(root / "tox.ini") or ""):
        found.append(("flake8", (), "flake8 configuration"))
    if (root / "Cargo.toml").is_file():
        found.append(("cargo-test", (), "Cargo.toml"))
    if (root / "go.mod").is_file():
        found.append(("go-test", ("./...",), "go.mod"))
    if any((root / f".golangci.{ext}").is_file() for ext in ("yml", "yaml", "toml", "json")):
        found.append(("golangci-lint", (), ".golangci configuration"))
    return [Leaf(TOOLS[kind], args, origin) for kind, args, origin in found]


def _candidates(root: Path, resolver: Resolver) -> list[Entry]:
    """Every entry, in the order of the module docstring."""
    ci: list[Entry] = []
    for step in read_workflows(root):
        ci.extend(resolver.entries(step.script, step.origin, via_ci=True))
    named = [e for e in ci if e.kind != "leaf"]
    leaves = [e for e in ci if e.kind == "leaf"]
    scripts: list[Entry] = []
    if resolver.package is not None:
        names = sorted(
            (n for n in resolver.package.scripts if _CHECK_SCRIPT.fullmatch(n)), key=lambda n: (n != "test", n)
        )
        found = [s for s in (resolver.script(n) for n in names) if s is not None and s.leaves]
        scripts = sorted(found, key=lambda e: (e.name != "test", -len(e.kinds), e.name))
    configured: list[Leaf] = resolver.tox_leaves(None) + resolver.nox_leaves(None) + resolver.hook_leaves()
    if resolver.tox is not None:
        for name in resolver.tox.envs:
            if name and name not in resolver.tox.envlist:
                configured += resolver.tox_leaves([name])
    targets: list[Entry] = []
    if resolver.make is not None:
        for name in resolver.make.targets:
            entry = resolver.target(name) if _CHECK_TARGET.fullmatch(name) else None
            if entry is not None and entry.leaves:
                targets.append(entry)
    rest = [Entry("leaf", "", (leaf,), (), False, leaf.origin) for leaf in configured + _config_leaves(root)]
    return named + leaves + scripts + rest + targets


def _mutates(leaf: Leaf) -> bool:
    """Whether the invocation rewrites files (a fixer) rather than checks them."""
    args = set(leaf.args)
    kind = leaf.tool.kind
    if args & {"--fix", "--write", "-w", "--fix-only", "--unsafe-fixes"}:
        return True
    if kind in ("ruff-format", "black"):
        return not args & {"--check", "--diff"}
    if kind == "isort":
        return not args & {"--check", "--check-only", "-c", "--diff"}
    if kind == "cargo-fmt":
        return "--check" not in args
    if kind == "prettier":
        return not args & {"--check", "-c", "--list-different", "-l"}
    return False


def _whole(entry: Entry) -> bool:
    """Whether a script or target can run as written: only tools, started directly, checking and not fixing."""
    if entry.kind == "leaf":
        return True
    if any(Path(words[0]).name not in _HARMLESS for words in entry.others):
        return False
    return not any(_mutates(leaf) or set(leaf.wrapped) & _INSTALLING_WRAPPERS for leaf in entry.leaves)


def _part(leaf: Leaf, whole: Entry) -> Entry:
    """One tool of a script or target, as an entry of its own that says where it was taken from."""
    where = leaf.origin if leaf.origin == whole.origin else f"{leaf.origin}, from {whole.origin}"
    return Entry("leaf", "", (replace(leaf, origin=where),), (), whole.via_ci, where)


def select(candidates: Iterable[Entry]) -> list[Entry]:
    """One entry per tool: each candidate in order, dropped when it repeats a tool already chosen, taken apart
    (its new tools one by one) when it repeats some or cannot run whole."""
    chosen: list[Entry] = []
    covered: set[str] = set()
    queue = list(candidates)
    while queue:
        entry = queue.pop(0)
        kinds = entry.kinds
        if not kinds or kinds <= covered:
            continue
        if entry.kind != "leaf" and (kinds & covered or not _whole(entry)):
            parts = [_part(leaf, entry) for leaf in entry.leaves]
            queue[0:0] = [p for p in parts if p.kinds - covered]
            continue
        chosen.append(entry)
        covered |= kinds
    return chosen


def _missing(leaf: Leaf, env: RunEnv) -> str | None:
    """What a tool needs that setup will not provide (None: it will be there)."""
    tool = leaf.tool
    if tool.ecosystem == "python":
        if not tool.package:
            return None
        if env.python_env:
            return None if normalize(tool.package) in env.installs else tool.package
        return None if which(tool.program, env.path) else tool.program
    if tool.ecosystem == "node":
        if tool.kind == "node-test":
            return None if which("node", env.path) else "node"
        return None if tool.program in env.bins or which(tool.program, env.path) else tool.program
    if tool.role == "tests":
        return None  # the suite itself: setup's own step says when its toolchain is missing
    return None if which(tool.program, env.path) else tool.program


def _python_fix(packages: list[str], leaves: list[Leaf], env: RunEnv) -> str:
    """The setup change that installs ``packages``: the group or extra that holds them, else ``--with``."""
    hints = [g for leaf in leaves for g in leaf.groups]
    holders: list[tuple[str, str]] = []
    for name in [*hints, *env.decl.groups, *env.decl.optional, *env.decl.poetry]:
        normal = normalize(name)
        flag = "--extra" if normal in env.decl.optional else "--group"
        held = {p[0] for spec in requirements_for(env.decl, [normal]) if (p := requirement_name(spec))}
        held |= set(env.decl.poetry.get(normal, []))
        if all(normalize(p) in held for p in packages) and (flag, normal) not in holders:
            holders.append((flag, normal))
    if holders:
        flag, name = holders[0]
        kind = "extra" if flag == "--extra" else "dependency group"
        return f'add "{flag} {name}" to the setup step (the {kind} that holds {", ".join(packages)})'
    withs = " ".join(f"--with {p}" for p in packages)
    return f'add "{withs}" to the setup step, or {" and ".join(packages)} to a dependency group'


def _reason(missing: list[tuple[Leaf, str]], env: RunEnv) -> str:
    """Why a command is commented out, and the exact fix."""
    python = sorted({m for leaf, m in missing if leaf.tool.ecosystem == "python"})
    node = sorted({m for leaf, m in missing if leaf.tool.ecosystem == "node"})
    other = sorted({m for leaf, m in missing if leaf.tool.ecosystem == "path"})
    parts = []
    if python and env.python_env:
        pairs = [(leaf, m) for leaf, m in missing if leaf.tool.ecosystem == "python"]
        leaves = [leaf for leaf, _ in pairs]
        shown = sorted(
            {leaf.tool.program if leaf.tool.program == m else f"{leaf.tool.program} (from {m})" for leaf, m in pairs}
        )
        parts.append(f"{_names(shown)} {_verb(shown)} not installed in {VENV}: {_python_fix(python, leaves, env)}")
    elif python:
        parts.append(f"{_names(python)} {_verb(python)} not on PATH")
    if node:
        packages = " ".join(sorted({env.bins.get(b) or KNOWN_BINS.get(b, b) for b in node}))
        add = {"pnpm": "pnpm add -D", "yarn": "yarn add --dev", "bun": "bun add -d"}.get(
            env.runner[0], "npm install -D"
        )
        parts.append(
            f"{_names(node)} {_verb(node)} not installed by setup (not in the package's dependencies): {add} {packages}"
        )
    if other:
        fixes = [f"{p}: {_PATH_FIX[p]}" for p in other if p in _PATH_FIX]
        parts.append(f"{_names(other)} {_verb(other)} not on PATH" + (f" ({'; '.join(fixes)})" if fixes else ""))
    return "; ".join(parts)


def _names(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _verb(items: list[str]) -> str:
    return "is" if len(items) == 1 else "are"


def _command(entry: Entry, env: RunEnv) -> tuple[tuple[str, ...] | str, bool, str, dict[str, str]]:
    """(argv, shell, parser, env) for an entry."""
    kinds = entry.kinds
    tests = [leaf.tool for leaf in entry.leaves if leaf.tool.role == "tests"]
    parser = tests[0].parser if len({t.parser for t in tests}) == 1 else "none"
    if parser == "pytest":
        parser = junit_spec(env.root) or parser
    extra = dict(TAP_OPTIONS) if "node-test" in kinds else {}
    if entry.kind == "script":
        return (*env.runner, entry.name), False, parser, extra
    if entry.kind == "make":
        if env.python_env:
            return f'PATH="$PWD/{VENV}/bin:$PATH" make {shlex.quote(entry.name)}', True, parser, extra
        return ("make", entry.name), False, parser, extra
    argv = check_argv(entry.leaves[0], env)
    return argv, isinstance(argv, str), parser, extra


def _id(entry: Entry, taken: set[str]) -> str:
    """A unique policy id: ``tests`` for the first test suite, the role of a tool (``lint``, ``types``...), a
    script's name, ``make-<target>``; the tool's kind when that is taken."""
    if not entry.leaves:  # the project's own suite (_own_suite)
        return "tests" if "tests" not in taken else "tests-own"
    leaf = entry.leaves[0]
    fixed = {"cargo-test", "cargo-clippy", "cargo-fmt", "go-test", "go-vet", "gofmt"}
    if entry.kind == "script":
        wanted = ["tests"] if entry.name == "test" else []
        wanted.append(re.sub(r"[^a-z0-9]+", "-", entry.name.lower()).strip("-") or "script")
    elif entry.kind == "make":
        wanted = ["tests"] if any(leaf.tool.role == "tests" for leaf in entry.leaves) else []
        wanted.append(f"make-{re.sub(r'[^a-z0-9]+', '-', entry.name.lower()).strip('-')}")
    elif leaf.tool.kind in fixed:
        wanted = [leaf.tool.kind]
    elif leaf.tool.kind == "golangci-lint":
        wanted = ["go-lint"]
    else:
        wanted = [leaf.tool.role, f"{leaf.tool.role}-{leaf.tool.kind}"]
    for candidate in wanted:
        name = candidate if re.match(r"^[a-z]", candidate) else f"x-{candidate}"
        if name not in taken:
            return name[:64]
    base, number = wanted[-1], 2
    while f"{base}-{number}" in taken:
        number += 1
    return f"{base}-{number}"[:64]


def _why(entry: Entry, env: RunEnv) -> str:
    kinds = ", ".join(dict.fromkeys(label(leaf.tool) for leaf in entry.leaves)) or "the project's own test suite"
    where = entry.origin if entry.kind != "leaf" else entry.leaves[0].origin
    place = f" in {VENV}" if env.python_env and any(leaf.tool.ecosystem == "python" for leaf in entry.leaves) else ""
    return f"{kinds}{place} ({where})"


# -- the proposal --------------------------------------------------------------------------------------------


def _setup_python(root: Path, decl: Declared, chosen: list[Entry]) -> tuple[list[str], list[str], list[str]]:
    """(extras, groups, --with packages) of the ``git agentops-env python`` step."""
    names = decl.names()
    wanted: list[str] = [n for n in SETUP_EXTRAS if n in names]
    for entry in chosen:
        for leaf in entry.leaves:
            if leaf.tool.role == "tests":
                wanted += [normalize(g) for g in leaf.groups if normalize(g) in names and normalize(g) not in wanted]
    extras = [n for n in wanted if n in decl.optional]
    groups = [n for n in wanted if n not in decl.optional]
    return extras, groups, []


def propose(root: Path, *, path: str | None = None) -> Proposal:
    """Setup steps and verification commands for the project at ``root``; ``path`` is the PATH tools are found on
    (None: the OS default). Enabled commands come first and take ids first, so uncommenting a disabled one never
    makes a duplicate id."""
    resolver = Resolver(root)
    chosen = select(_candidates(root, resolver))
    if not any(leaf.tool.role == "tests" for entry in chosen for leaf in entry.leaves):
        chosen += _own_suite(resolver)
    decl = declared(root)
    python_used = any(leaf.tool.ecosystem == "python" for entry in chosen for leaf in entry.leaves)
    python_env = is_python_project(root) and decl.installable and python_used
    setup: list[tuple[str, ...]] = []
    installs: frozenset[str] = frozenset()
    if python_env:
        extras, groups, with_ = _setup_python(root, decl, chosen)
        have = [t for t in ("uv", "poetry") if which(t, path)]
        installs = frozenset(installed_names(root, extras + groups, have=have))
        if any(leaf.tool.kind == "pytest" for e in chosen for leaf in e.leaves) and "pytest" not in installs:
            with_.append("pytest")
            installs |= {"pytest"}
        options = [a for e in extras for a in ("--extra", e)] + [a for g in groups for a in ("--group", g)]
        setup.append((*ENV_COMMAND, "python", *options, *(a for w in with_ for a in ("--with", w))))
    package = resolver.package
    node_used = any(leaf.tool.ecosystem == "node" for entry in chosen for leaf in entry.leaves) or any(
        e.kind == "script" for e in chosen
    )
    if package is not None and node_used:
        setup.append((*ENV_COMMAND, "node"))
    if (root / "Cargo.toml").is_file():
        setup.append((*ENV_COMMAND, "cargo"))
    if (root / "go.mod").is_file():
        setup.append((*ENV_COMMAND, "go"))
    env = RunEnv(
        root,
        path,
        python_env,
        decl,
        installs,
        dict(package.bins) if package else {},
        package.runner if package else ("npm", "run", "--silent"),
    )
    enabled: list[Entry] = []
    off: list[tuple[Entry, str]] = []
    for entry in _split_partial(chosen, env):
        missing = [(leaf, m) for leaf in entry.leaves if (m := _missing(leaf, env)) is not None]
        if missing:
            off.append((entry, _reason(missing, env)))
        else:
            enabled.append(entry)
    taken: set[str] = set()
    commands = [_detected(entry, env, taken) for entry in enabled]
    disabled = [Disabled(_detected(entry, env, taken), reason) for entry, reason in off]
    return Proposal(tuple(setup), tuple(commands), tuple(disabled))


def _own_suite(resolver: Resolver) -> list[Entry]:
    """A project whose tests no known tool runs (``test: python3 check.py``, ``"test": "node run.js"``): its own
    ``test`` package script or Makefile target, run whole -- the suite it says it has, never none at all."""
    for entry in (resolver.script("test"), resolver.target("test")):
        if entry is not None and not entry.leaves and entry.others:
            return [entry]
    return []


def _split_partial(chosen: list[Entry], env: RunEnv) -> list[Entry]:
    """The chosen entries by role (tests first); a script or target whose tools setup installs only in part is
    taken apart, so what can run now does, and each missing tool gets its own commented-out command and fix."""
    out: list[Entry] = []
    for entry in chosen:
        missing = [leaf for leaf in entry.leaves if _missing(leaf, env) is not None]
        if entry.kind != "leaf" and missing and len(missing) < len(entry.leaves):
            out.extend(_part(leaf, entry) for leaf in entry.leaves)
        else:
            out.append(entry)
    return sorted(out, key=lambda e: min((_ROLE_ORDER[leaf.tool.role] for leaf in e.leaves), default=0))


def _detected(entry: Entry, env: RunEnv, taken: set[str]) -> Detected:
    ident = _id(entry, taken)
    taken.add(ident)
    argv, shell, parser, extra = _command(entry, env)
    timeout = 1800 if any(leaf.tool.role == "tests" for leaf in entry.leaves) else 900
    return Detected(ident, argv, parser, _why(entry, env), timeout, shell, extra)
