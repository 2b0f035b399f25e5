"""What a project's command lines run: through tox, nox, make, package scripts, pre-commit and ``uv run`` down to
the test runners and lint, format and type tools themselves.

A project names one test suite in many places -- ``[tool.pytest]``, ``make test``, tox's ``[testenv]``, a CI step
``uv run tox -e py312`` -- and a starter policy that takes each place for a suite of its own runs the suite twice.
:class:`Resolver` follows every command line to its *leaves*: the invocations of a known :class:`Tool` (pytest,
unittest, ``node --test``, ruff, mypy, eslint, ``cargo test``...), each with where it came from and what that
place installs (a tox environment's ``dependency_groups``, ``uv run --group``, a pre-commit hook's repository), so
:mod:`git_agentops.policy.starter` can keep one command per tool and name the group that holds a missing one.
Wrappers that only change how a tool is started (``coverage run -m``, ``uv run``, ``poetry run``, ``npx``,
``timeout``) are looked through; anything else (``pip install``, ``echo``, ``sphinx-build``) is an *other*
command, which makes a Makefile target or script that contains it something init will not run as a whole.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

from .projectfiles import (
    Makefile,
    Nox,
    Package,
    Tox,
    read_makefile,
    read_nox,
    read_package,
    read_tox,
)
from .toolkinds import MAX_DEPTH, Tool, classify, simple_commands, unwrap
from .workflows import Hook, read_precommit


@dataclass(frozen=True, slots=True)
class Leaf:
    """One invocation of a known tool: the words after the tool's own name, where it was found, and what the
    place it was found in installs (dependency groups or extras, requirements)."""

    tool: Tool
    args: tuple[str, ...]
    origin: str
    groups: tuple[str, ...] = ()
    deps: tuple[str, ...] = ()
    via_ci: bool = False
    wrapped: tuple[str, ...] = ()  # the launchers looked through (``uv``, ``coverage``...)


@dataclass(frozen=True, slots=True)
class Entry:
    """Something the project names that init could run as one command: a package script, a Makefile target, or a
    single tool invocation (``name`` empty); with every leaf it runs and the commands that are no tool."""

    kind: str  # script | make | leaf
    name: str
    leaves: tuple[Leaf, ...]
    others: tuple[tuple[str, ...], ...] = ()
    via_ci: bool = False
    origin: str = ""

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(leaf.tool.kind for leaf in self.leaves)


class Resolver:
    """Follows a project's command lines to their leaves, reading its files once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.make: Makefile | None = read_makefile(root)
        self.tox: Tox | None = read_tox(root)
        self.nox: Nox | None = read_nox(root)
        self.package: Package | None = read_package(root)
        self.hooks: list[Hook] = read_precommit(root)

    # -- entries: what could run as one command --------------------------------------------------------------

    def script(self, name: str, *, via_ci: bool = False) -> Entry | None:
        """A package.json script (with its ``pre``/``post`` scripts, as npm runs them) as one entry."""
        if self.package is None or name not in self.package.scripts:
            return None
        leaves: list[Leaf] = []
        others: list[tuple[str, ...]] = []
        for part in (f"pre{name}", name, f"post{name}"):
            if part in self.package.scripts:
                self._text(self.package.scripts[part], f"package.json script '{part}'", leaves, others, via_ci=via_ci)
        return Entry("script", name, tuple(leaves), tuple(others), via_ci, f"package.json script '{name}'")

    def target(self, name: str, *, via_ci: bool = False) -> Entry | None:
        """A Makefile target (prerequisites first, as make runs them) as one entry."""
        if self.make is None or name not in self.make.targets:
            return None
        leaves: list[Leaf] = []
        others: list[tuple[str, ...]] = []
        self._target(name, leaves, others, via_ci=via_ci, depth=0, seen=set())
        return Entry("make", name, tuple(leaves), tuple(others), via_ci, f"{self.make.file} target '{name}'")

    def entries(self, text: str, origin: str, *, via_ci: bool = False) -> list[Entry]:
        """The entries a command line names: a script or target it runs, else each leaf it reaches."""
        found: list[Entry] = []
        for words in simple_commands(text):
            named = self._named(words, via_ci=via_ci)
            if named is not None:
                found.append(replace(named, origin=f"{named.origin}, run by {origin}"))
                continue
            leaves: list[Leaf] = []
            self._words(words, origin, leaves, [], groups=(), deps=(), via_ci=via_ci, depth=0)
            for leaf in leaves:
                where = leaf.origin if leaf.origin == origin else f"{leaf.origin}, run by {origin}"
                found.append(Entry("leaf", "", (replace(leaf, origin=where),), (), via_ci, where))
        return found

    def hook_leaves(self, *, via_ci: bool = False, only: str | None = None, groups: tuple[str, ...] = ()) -> list[Leaf]:
        """The tools the pre-commit hooks run (each hook's own arguments; fixers like trailing-whitespace have no
        tool and are left out)."""
        leaves: list[Leaf] = []
        for hook in self.hooks:
            if only is not None and hook.id != only:
                continue
            origin = f".pre-commit-config.yaml hook '{hook.id}'"
            words = _hook_words(hook)
            if words is not None:
                self._words(words, origin, leaves, [], groups=groups, deps=hook.additional, via_ci=via_ci, depth=1)
        return leaves

    def tox_leaves(self, envs: list[str] | None, *, via_ci: bool = False) -> list[Leaf]:
        leaves: list[Leaf] = []
        self._tox(envs, leaves, [], via_ci=via_ci, depth=0)
        return leaves

    def nox_leaves(self, sessions: list[str] | None, *, via_ci: bool = False) -> list[Leaf]:
        leaves: list[Leaf] = []
        self._nox(sessions, leaves, [], via_ci=via_ci, depth=0)
        return leaves

    # -- following words -------------------------------------------------------------------------------------

    def _named(self, words: tuple[str, ...], *, via_ci: bool) -> Entry | None:
        """A ``make TARGET`` or package-script invocation, as the entry it names (None for anything else)."""
        words, _, _ = unwrap(words)
        if not words:
            return None
        targets = _make_targets(words)
        if targets is not None and len(targets) <= 1 and self.make is not None:
            name = targets[0] if targets else self.make.default
            return self.target(name, via_ci=via_ci) if name else None
        script = self._script_name(words)
        if script is not None:
            return self.script(script, via_ci=via_ci)
        return None

    def _script_name(self, words: tuple[str, ...]) -> str | None:
        if self.package is None or Path(words[0]).name not in ("npm", "pnpm", "yarn", "bun"):
            return None
        rest = [w for w in words[1:] if not w.startswith("-")]
        if not rest:
            return None
        if rest[0] in ("test", "t", "tst") and Path(words[0]).name != "bun":
            return "test"
        if rest[0] in ("run", "run-script", "rum", "urn") and len(rest) > 1:
            return rest[1]
        if Path(words[0]).name in ("pnpm", "yarn") and rest[0] in self.package.scripts:
            return rest[0]
        return None

    def _text(
        self, text: str, origin: str, leaves: list[Leaf], others: list[tuple[str, ...]], *, via_ci: bool, depth: int = 0
    ) -> None:
        for words in simple_commands(text):
            self._words(words, origin, leaves, others, groups=(), deps=(), via_ci=via_ci, depth=depth + 1)

    def _target(
        self, name: str, leaves: list[Leaf], others: list[tuple[str, ...]], *, via_ci: bool, depth: int, seen: set[str]
    ) -> None:
        if self.make is None or name in seen or depth > MAX_DEPTH or name not in self.make.targets:
            return
        seen.add(name)
        target = self.make.targets[name]
        for prerequisite in target.prerequisites:
            self._target(prerequisite, leaves, others, via_ci=via_ci, depth=depth + 1, seen=seen)
        for line in target.recipe:
            for words in simple_commands(line):
                origin = f"{self.make.file} target '{name}'"
                self._words(words, origin, leaves, others, groups=(), deps=(), via_ci=via_ci, depth=depth + 1)

    def _words(
        self,
        words: tuple[str, ...],
        origin: str,
        leaves: list[Leaf],
        others: list[tuple[str, ...]],
        *,
        groups: tuple[str, ...],
        deps: tuple[str, ...],
        via_ci: bool,
        depth: int,
    ) -> None:
        if depth > MAX_DEPTH:
            return
        words, more, wrapped = unwrap(words)
        groups = groups + more
        if not words:
            return
        program = Path(words[0]).name
        nested = depth + 1
        targets = _make_targets(words)
        if targets is not None:
            names = targets or ([self.make.default] if self.make and self.make.default else [])
            for name in names:
                self._target(name, leaves, others, via_ci=via_ci, depth=nested, seen=set())
            return
        script = self._script_name(words)
        if script is not None and self.package is not None:
            for part in (f"pre{script}", script, f"post{script}"):
                if part in self.package.scripts:
                    self._text(
                        self.package.scripts[part],
                        f"package.json script '{part}'",
                        leaves,
                        others,
                        via_ci=via_ci,
                        depth=nested,
                    )
            return
        if program in ("tox", "nox", "pre-commit"):
            others.append(words)  # each makes environments of its own: what runs it cannot run whole
        if program == "tox":
            self._tox(_tox_envs(words), leaves, others, via_ci=via_ci, depth=nested)
            return
        if program == "nox":
            self._nox(_nox_sessions(words), leaves, others, via_ci=via_ci, depth=nested)
            return
        if program == "pre-commit" and len(words) > 1 and words[1] == "run":
            ids = [w for w in words[2:] if not w.startswith("-")]
            for leaf in self.hook_leaves(via_ci=via_ci, only=ids[0] if ids else None, groups=groups):
                leaves.append(leaf)
            return
        found = classify(words)
        if found is None:
            others.append(words)
            return
        tool, args = found
        leaves.append(Leaf(tool, args, origin, groups, deps, via_ci, wrapped))

    def _tox(
        self, envs: list[str] | None, leaves: list[Leaf], others: list[tuple[str, ...]], *, via_ci: bool, depth: int
    ) -> None:
        if self.tox is None:
            return
        names = envs if envs is not None else (list(self.tox.envlist) or ["py"])
        for name in names:
            env = self.tox.env(name)
            if env is None:
                continue
            origin = f"tox env '{name}' in {self.tox.file}"
            for command in env.commands:
                words = _tox_substitute(command)
                self._words(
                    words,
                    origin,
                    leaves,
                    others,
                    groups=env.groups + env.extras,
                    deps=env.deps,
                    via_ci=via_ci,
                    depth=depth,
                )

    def _nox(
        self, sessions: list[str] | None, leaves: list[Leaf], others: list[tuple[str, ...]], *, via_ci: bool, depth: int
    ) -> None:
        if self.nox is None:
            return
        for name in sessions if sessions is not None else list(self.nox.default):
            session = self.nox.sessions.get(name)
            if session is None:
                continue
            origin = f"noxfile.py session '{name}'"
            for command in session.commands:
                self._words(
                    command,
                    origin,
                    leaves,
                    others,
                    groups=session.groups,
                    deps=session.installs,
                    via_ci=via_ci,
                    depth=depth,
                )


def _make_targets(words: tuple[str, ...]) -> list[str] | None:
    """The targets of a ``make`` command line (empty: the default target); None when it is not make, or runs in
    another directory (``-C``, ``-f``)."""
    if Path(words[0]).name not in ("make", "gmake"):
        return None
    targets: list[str] = []
    skip = False
    for word in words[1:]:
        if skip:
            skip = False
        elif word in ("-C", "-f", "--directory", "--file", "--makefile") or word.startswith(
            ("-C", "-f", "--directory=", "--file=")
        ):
            return None
        elif word in ("-j", "-l", "-o", "-W"):
            skip = True
        elif word.startswith("-") or "=" in word:
            continue
        else:
            targets.append(word)
    return targets


def _tox_envs(words: tuple[str, ...]) -> list[str] | None:
    envs: list[str] = []
    for index, word in enumerate(words):
        if word in ("-e", "--env", "--envlist") and index + 1 < len(words):
            envs.extend(e for e in words[index + 1].split(",") if e)
        elif word.startswith(("-e", "--env=")) and len(word) > 2 and not word.startswith("--env-"):
            envs.extend(e for e in word.split("=", 1)[-1].removeprefix("-e").split(",") if e)
        elif word == "--":
            break
    return envs or None


def _nox_sessions(words: tuple[str, ...]) -> list[str] | None:
    sessions: list[str] = []
    taking = False
    for word in words[1:]:
        if word in ("-s", "-e", "--session", "--sessions"):
            taking = True
        elif word.startswith("-"):
            taking = False
        elif taking:
            sessions.append(word)
    return sessions or None


def _tox_substitute(command: tuple[str, ...]) -> tuple[str, ...]:
    """A tox command with its substitutions resolved as far as they name the project: ``{toxinidir}`` and
    ``{tox_root}`` are the checkout, ``{posargs:default}`` its default; a word naming tox's own directories
    (``{envtmpdir}``...) is dropped, with the option it is the value of."""
    out: list[str] = []
    words = list(command)
    if words and words[0].startswith("-"):
        words[0] = words[0][1:]  # tox's "ignore the exit code" prefix
    for raw in words:
        if raw in ("{posargs}", "[]"):
            continue
        posargs = re.fullmatch(r"\{posargs:(.*)\}", raw)
        if posargs is not None:
            out.extend(shlex.split(posargs.group(1)))
            continue
        word = re.sub(r"\{(toxinidir|tox_root)\}/?", "./", raw)
        word = word[2:] if word.startswith("./") and len(word) > 2 else ("." if word == "./" else word)
        if re.search(r"\{[a-z_]+\}", word):
            if out and out[-1].startswith("-") and "=" not in out[-1] and not word.startswith("-"):
                out.pop()
            continue
        out.append(word)
    return tuple(out)


def _hook_words(hook: Hook) -> tuple[str, ...] | None:
    """The command a pre-commit hook stands for, in the checkout (None for a hook with no tool of its own)."""
    ident = hook.id
    if hook.entry is not None and "ruff-pre-commit" not in hook.repo:
        words = tuple(shlex.split(hook.entry))
        return (*words, *hook.args) if words else None
    if ident in ("ruff", "ruff-check"):
        return ("ruff", "check", *hook.args)
    if ident == "ruff-format":
        return ("ruff", "format", *hook.args)
    if ident in ("mypy", "flake8", "black", "isort", "pyright", "codespell", "pylint", "eslint", "prettier"):
        return (ident, *hook.args)
    return None
