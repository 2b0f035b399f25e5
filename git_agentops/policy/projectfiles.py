"""What a project's own files say it runs: Makefile recipes, tox environments, nox sessions and package.json
scripts -- read, never executed (the YAML ones, CI workflows and pre-commit, are :mod:`.workflows`).

``git agentops-init`` runs before anything in the checkout is trusted, so it must not run the project's code to
learn what the project runs: no ``make -n`` (a Makefile's ``$(shell ...)`` runs during it), no ``tox config``, no
importing ``noxfile.py``. Each reader parses its file with the format's own rules as far as a static reader can
-- ``configparser`` for tox.ini, ``tomllib`` for ``[tool.tox]``, ``ast`` for noxfile.py, JSON for package.json --
and gives back the command lines, each with where it was written, for :mod:`git_agentops.policy.commands` to
resolve. What a static reader cannot know (a Makefile variable set by ``$(shell ...)``) is left as written, so
the command that holds it is not recognised rather than guessed at.

Every file is size-limited and read without following a final symlink; a file that does not parse is treated as
absent (init proposes less, and says what it found).
"""

from __future__ import annotations

import ast
import configparser
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..envs.project import pyproject
from ..files import MAX_BYTES, read_text

# -- Makefile --------------------------------------------------------------------------------------------------

_MAKE_ASSIGN: Final = re.compile(r"(?:override\s+|export\s+)?([A-Za-z_][A-Za-z0-9_.-]*)\s*(\?=|:=|::=|\+=|=)\s*(.*)")
_MAKE_RULE: Final = re.compile(r"([^\s:=#][^:=#]*?)\s*::?(?!=)\s*([^;=#]*)(?:;\s*(.*))?")
_MAKE_REF: Final = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\{([A-Za-z_][A-Za-z0-9_.-]*)\}")


@dataclass(frozen=True, slots=True)
class MakeTarget:
    """A Makefile rule: its prerequisites and recipe lines (``@``/``-``/``+`` prefixes and variables resolved)."""

    name: str
    prerequisites: tuple[str, ...]
    recipe: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Makefile:
    file: str
    targets: dict[str, MakeTarget]
    default: str | None  # the first target that is not special (.PHONY...)


def _logical_lines(text: str) -> list[str]:
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        if raw.endswith("\\"):
            pending += raw[:-1] + " "
            continue
        out.append(pending + raw)
        pending = ""
    if pending:
        out.append(pending)
    return out


def _expand_make(text: str, variables: dict[str, str], depth: int = 0) -> str:
    """``$(VAR)``/``${VAR}`` from the file's own plain assignments; ``$(MAKE)`` is ``make``; others stay."""
    if depth > 8:
        return text

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name == "MAKE":
            return "make"
        if name in variables:
            return _expand_make(variables[name], variables, depth + 1)
        return match.group(0)

    return _MAKE_REF.sub(one, text).replace("$$", "$")


def read_makefile(root: Path) -> Makefile | None:
    """The rules of ``GNUmakefile``, ``makefile`` or ``Makefile`` (make's own order), variables expanded."""
    for file_name in ("GNUmakefile", "makefile", "Makefile"):
        text = read_text(root / file_name)
        if text is not None:
            break
    else:
        return None
    variables: dict[str, str] = {}
    rules: dict[str, tuple[list[str], list[str]]] = {}
    order: list[str] = []
    current: list[str] | None = None
    for line in _logical_lines(text):
        if line.startswith("\t"):
            if current is not None:
                command = line[1:].strip().lstrip("@-+").strip()
                if command and not command.startswith("#"):
                    current.append(command)
            continue
        current = None
        stripped = line.split("#", 1)[0].rstrip()
        if not stripped.strip():
            continue
        assign = _MAKE_ASSIGN.fullmatch(stripped.strip())
        if assign is not None:
            name, op, value = assign.groups()
            if op == "+=":
                variables[name] = f"{variables.get(name, '')} {value.strip()}".strip()
            elif op != "?=" or name not in variables:
                variables[name] = value.strip()
            continue
        rule = _MAKE_RULE.fullmatch(stripped)
        if rule is None:
            continue
        recipe: list[str] = []
        if rule.group(3):
            recipe.append(rule.group(3).strip().lstrip("@-+").strip())
        for target in rule.group(1).split():
            prereqs, lines = rules.setdefault(target, ([], []))
            prereqs.extend(rule.group(2).split())
            lines.extend(recipe)
            if target not in order:
                order.append(target)
        current = rules[rule.group(1).split()[0]][1] if rule.group(1).split() else None
    targets = {
        name: MakeTarget(
            name,
            tuple(_expand_make(p, variables) for p in prereqs),
            tuple(_expand_make(c, variables) for c in lines),
        )
        for name, (prereqs, lines) in rules.items()
        if "%" not in name and "$" not in name
    }
    default = next((t for t in order if not t.startswith(".") and t in targets), None)
    return Makefile(file_name, targets, default)


# -- tox -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToxEnv:
    """One tox environment: its commands (already split into words) and what it installs."""

    name: str
    commands: tuple[tuple[str, ...], ...]
    deps: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Tox:
    file: str
    envlist: tuple[str, ...]
    envs: dict[str, ToxEnv]

    def env(self, name: str) -> ToxEnv | None:
        """An environment by name; a generated name (``py312``, ``py3.13-lint``) falls back to ``[testenv]``."""
        if name in self.envs:
            return self.envs[name]
        base = self.envs.get("")
        return None if base is None else ToxEnv(name, base.commands, base.deps, base.extras, base.groups)


def _braces(name: str) -> list[str]:
    """tox's generative names: ``py{311,312}-lint`` -> ``py311-lint``, ``py312-lint``."""
    found = re.search(r"\{([^{}]*)\}", name)
    if found is None:
        return [name]
    out = []
    for choice in found.group(1).split(","):
        out.extend(_braces(name[: found.start()] + choice.strip() + name[found.end() :]))
    return out


def _factors_match(condition: str, env: str) -> bool:
    """Whether a tox factor condition (``py311,lint:``, ``!lowest:``) selects the environment ``env``."""
    factors = set(re.split(r"[-]", env))
    for alternative in condition.split(","):
        parts = alternative.strip().split("-")
        if all((p[1:] not in factors) if p.startswith("!") else (p in factors) for p in parts if p):
            return True
    return False


def _tox_lines(value: str, env: str) -> list[str]:
    """A tox.ini multi-line value's lines for ``env``: factor-conditional lines only when they select it."""
    out = []
    for raw in _logical_lines(value):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        conditional = re.match(r"^([!A-Za-z0-9_.,{}-]+):\s+(.*)$", line)
        if conditional is not None and not re.match(r"^[A-Za-z]+://", line):
            if not _factors_match(conditional.group(1), env):
                continue
            line = conditional.group(2)
        out.append(line)
    return out


def _split(line: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(line, comments=True))
    except ValueError:
        return ()


def _tox_ini(text: str, file: str, *, setup_cfg: bool = False) -> Tox | None:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    main = "tox:tox" if setup_cfg else "tox"
    if setup_cfg and not parser.has_section(main):
        return None
    envlist: list[str] = []
    if parser.has_section(main):
        raw = parser.get(main, "envlist", fallback=parser.get(main, "env_list", fallback=""))
        for item in re.split(r"[\n,](?![^{]*\})", raw):
            envlist.extend(_braces(item.strip()) if item.strip() else [])

    def section(env: str) -> str:
        return "testenv" if env == "" else f"testenv:{env}"

    envs: dict[str, ToxEnv] = {}
    names = [""] + [s.split(":", 1)[1] for s in parser.sections() if s.startswith("testenv:")]
    names += [e for e in envlist if e not in names]  # generated names: [testenv] with their own factors
    for name in names:
        own = section(name) if parser.has_section(section(name)) else "testenv"
        if not parser.has_section(own) and name:
            continue

        def get(key: str, own: str = own) -> str:
            if parser.has_option(own, key):
                return parser.get(own, key)
            return parser.get("testenv", key, fallback="") if parser.has_section("testenv") else ""

        env_name = name or "py"  # the factors conditional lines are matched against
        lines = [
            re.sub(r"\{posargs(?::([^}]*))?\}", lambda m: m.group(1) or "", c)
            for c in _tox_lines(get("commands"), env_name)
        ]
        commands = tuple(w for w in (_split(c) for c in lines) if w)
        envs[name] = ToxEnv(
            name or "testenv",
            commands,
            tuple(_tox_lines(get("deps"), env_name)),
            tuple(re.split(r"[\s,]+", " ".join(_tox_lines(get("extras"), env_name))) if get("extras") else ()),
            tuple(g for g in re.split(r"[\s,]+", " ".join(_tox_lines(get("dependency_groups"), env_name))) if g),
        )
    if not envs or (not parser.has_section(main) and not parser.has_section("testenv")):
        return None
    return Tox(file, tuple(e for e in envlist if e), envs)


def _toml_command(command: Any) -> tuple[str, ...]:
    """One command of a native TOML tox config: strings, and ``{replace = "posargs", default = [...]}``."""
    words: list[str] = []
    for item in command if isinstance(command, list) else []:
        if isinstance(item, str):
            words.append(item)
        elif isinstance(item, dict) and item.get("replace") == "posargs":
            words.extend(w for w in item.get("default", []) if isinstance(w, str))
    return tuple(words)


def _tox_toml(table: dict[str, Any], file: str) -> Tox | None:
    base = table.get("env_run_base", {}) if isinstance(table.get("env_run_base"), dict) else {}

    def env(name: str, own: dict[str, Any]) -> ToxEnv:
        def get(key: str) -> list[Any]:
            value = own.get(key, base.get(key, []))
            return value if isinstance(value, list) else []

        commands = tuple(c for c in (_toml_command(c) for c in get("commands")) if c)
        strings = [d for d in get("deps") if isinstance(d, str)]
        return ToxEnv(
            name,
            commands,
            tuple(strings),
            tuple(e for e in get("extras") if isinstance(e, str)),
            tuple(g for g in get("dependency_groups") if isinstance(g, str)),
        )

    envs = {"": env("testenv", {})}
    for name, own in (table.get("env", {}) if isinstance(table.get("env"), dict) else {}).items():
        if isinstance(own, dict):
            envs[name] = env(name, own)
    raw = table.get("env_list", table.get("envlist", []))
    envlist = tuple(e for e in raw if isinstance(e, str)) if isinstance(raw, list) else ()
    return Tox(file, envlist, envs)


def read_tox(root: Path) -> Tox | None:
    """tox's configuration, where tox itself looks: tox.ini, setup.cfg ``[tox:tox]``, pyproject ``[tool.tox]``
    (native TOML, or its ``legacy_tox_ini`` string)."""
    text = read_text(root / "tox.ini")
    if text is not None:
        return _tox_ini(text, "tox.ini")
    text = read_text(root / "setup.cfg")
    if text is not None and "[tox:tox]" in text:
        return _tox_ini(text, "setup.cfg", setup_cfg=True)
    table = pyproject(root).get("tool", {}).get("tox")
    if isinstance(table, dict):
        legacy = table.get("legacy_tox_ini")
        if isinstance(legacy, str):
            return _tox_ini(legacy, "pyproject.toml")
        return _tox_toml(table, "pyproject.toml")
    return None


# -- nox -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NoxSession:
    name: str
    commands: tuple[tuple[str, ...], ...]
    installs: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Nox:
    sessions: dict[str, NoxSession]
    default: tuple[str, ...]  # nox.options.sessions, else every session


def _is_session_decorator(node: ast.expr) -> tuple[bool, str | None]:
    call = node if isinstance(node, ast.Call) else None
    target = call.func if call is not None else node
    dotted = ast.unparse(target)
    if dotted not in ("nox.session", "session"):
        return False, None
    name = None
    for keyword in call.keywords if call is not None else []:
        if keyword.arg == "name" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
            name = keyword.value.value
    return True, name


def read_nox(root: Path) -> Nox | None:
    """The sessions of ``noxfile.py``: each ``session.run(...)`` whose arguments are string literals (starred
    ``session.posargs`` dropped), ``session.install`` requirements and ``dependency_groups(..., "name")`` groups."""
    text = read_text(root / "noxfile.py")
    if text is None:
        return None
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    sessions: dict[str, NoxSession] = {}
    default: tuple[str, ...] = ()
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(ast.unparse(t) == "nox.options.sessions" for t in node.targets)
            and isinstance(node.value, ast.List | ast.Tuple)
        ):
            default = tuple(
                e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
            )
        if not isinstance(node, ast.FunctionDef):
            continue
        marks = [_is_session_decorator(d) for d in node.decorator_list]
        if not any(is_session for is_session, _ in marks):
            continue
        name = next((n for is_session, n in marks if is_session and n), node.name)
        commands: list[tuple[str, ...]] = []
        installs: list[str] = []
        groups: list[str] = []
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
            method = ast.unparse(call.func)
            literal = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            plain = all(isinstance(a, ast.Constant | ast.Starred) for a in call.args)
            if method.endswith(".run") and plain and literal:
                commands.append(tuple(literal))
            elif method.endswith(".install"):
                installs.extend(literal)
            if method.endswith("dependency_groups"):
                groups.extend(literal)
        sessions[name] = NoxSession(name, tuple(commands), tuple(installs), tuple(groups))
    return Nox(sessions, default or tuple(sessions))


# -- package.json ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Package:
    """A Node package: its scripts, the runner its lockfile names, and the executables setup will install."""

    scripts: dict[str, str]
    runner: tuple[str, ...]  # e.g. ("npm", "run", "--silent")
    declared: frozenset[str]  # dependencies and devDependencies
    bins: dict[str, str]  # executable -> package, from the lockfile (npm) or the declared names
    locked: bool


def _lock_bins(root: Path) -> dict[str, str] | None:
    """Executables ``npm ci`` puts in ``node_modules/.bin``, from package-lock.json (v2/v3) ``packages``."""
    text = read_text(root / "package-lock.json", 64 * MAX_BYTES) or read_text(
        root / "npm-shrinkwrap.json", 64 * MAX_BYTES
    )
    if text is None:
        return None
    try:
        packages = json.loads(text).get("packages", {})
    except (ValueError, AttributeError):
        return None
    bins: dict[str, str] = {}
    for path, meta in packages.items() if isinstance(packages, dict) else []:
        if not isinstance(meta, dict) or not path.startswith("node_modules/") or "/node_modules/" in path:
            continue
        name = path.removeprefix("node_modules/")
        found = meta.get("bin")
        if isinstance(found, dict):
            bins.update({str(b): name for b in found})
        elif isinstance(found, str):
            bins[name.rsplit("/", 1)[-1]] = name
    return bins


KNOWN_BINS: Final = {"tsc": "typescript", "tsserver": "typescript", "eslint": "eslint", "prettier": "prettier"}
"""Executables whose package has another name, for a package without a lockfile to read them from."""


def read_package(root: Path) -> Package | None:
    text = read_text(root / "package.json")
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    scripts = (
        {k: v for k, v in doc.get("scripts", {}).items() if isinstance(v, str)}
        if isinstance(doc.get("scripts"), dict)
        else {}
    )
    declared: set[str] = set()
    for key in ("dependencies", "devDependencies", "optionalDependencies"):
        if isinstance(doc.get(key), dict):
            declared |= set(doc[key])
    if (root / "pnpm-lock.yaml").is_file():
        runner: tuple[str, ...] = ("pnpm", "run")
    elif (root / "yarn.lock").is_file():
        runner = ("yarn", "run")
    elif (root / "bun.lockb").is_file() or (root / "bun.lock").is_file():
        runner = ("bun", "run")
    else:
        runner = ("npm", "run", "--silent")
    locked = _lock_bins(root)
    if locked is not None:
        bins = locked
    else:
        bins = {b: p for b, p in KNOWN_BINS.items() if p in declared} | {n.rsplit("/", 1)[-1]: n for n in declared}
    return Package(scripts, runner, frozenset(declared), bins, locked is not None)
