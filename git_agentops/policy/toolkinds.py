"""The tools init knows, and what one shell command line starts: test runners and lint, format and type tools,
looked for behind the launchers that only change how a tool is started.

:func:`simple_commands` splits a shell snippet (a CI step, a Makefile recipe line, a package script) into simple
commands the way the shell would, without running anything; :func:`unwrap` looks through ``uv run``, ``poetry
run``, ``coverage run -m``, ``npx``, ``timeout`` and the like (remembering the ``--group`` a ``uv run`` names);
:func:`classify` says which :class:`Tool` a command runs and with what arguments.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Final

MAX_DEPTH: Final = 8


@dataclass(frozen=True, slots=True)
class Tool:
    """A test runner or a lint/format/type tool init knows how to run and what installs it.

    ``ecosystem`` says where it comes from: ``python`` (``package`` is the distribution setup installs, empty for
    the standard library), ``node`` (``package`` is the npm package, the executable is ``program``), or ``path``
    (a program found on PATH, like ``cargo`` or ``gofmt``).
    """

    kind: str
    role: str  # tests | lint | format | types
    ecosystem: str
    program: str
    package: str = ""
    parser: str = "none"


TOOLS: Final = {
    t.kind: t
    for t in (
        Tool("pytest", "tests", "python", "pytest", "pytest", "pytest"),
        Tool("unittest", "tests", "python", "unittest", "", "unittest"),
        Tool("ruff-check", "lint", "python", "ruff", "ruff"),
        Tool("ruff-format", "format", "python", "ruff", "ruff"),
        Tool("flake8", "lint", "python", "flake8", "flake8"),
        Tool("pylint", "lint", "python", "pylint", "pylint"),
        Tool("codespell", "lint", "python", "codespell", "codespell"),
        Tool("black", "format", "python", "black", "black"),
        Tool("isort", "format", "python", "isort", "isort"),
        Tool("mypy", "types", "python", "mypy", "mypy"),
        Tool("stubtest", "types", "python", "stubtest", "mypy"),
        Tool("pyright", "types", "python", "pyright", "pyright"),
        Tool("node-test", "tests", "node", "node", "", "tap"),
        Tool("jest", "tests", "node", "jest", "jest"),
        Tool("vitest", "tests", "node", "vitest", "vitest"),
        Tool("mocha", "tests", "node", "mocha", "mocha"),
        Tool("eslint", "lint", "node", "eslint", "eslint"),
        Tool("prettier", "format", "node", "prettier", "prettier"),
        Tool("tsc", "types", "node", "tsc", "typescript"),
        Tool("cargo-test", "tests", "path", "cargo"),
        Tool("cargo-clippy", "lint", "path", "cargo-clippy"),
        Tool("cargo-fmt", "format", "path", "cargo-fmt"),
        Tool("go-test", "tests", "path", "go"),
        Tool("go-vet", "lint", "path", "go"),
        Tool("gofmt", "format", "path", "gofmt"),
        Tool("golangci-lint", "lint", "path", "golangci-lint"),
    )
}

_PYTHON: Final = re.compile(r"python|python3|python3\.\d+|pypy3?|py")
_MODULES: Final = {
    "pytest": "pytest",
    "unittest": "unittest",
    "mypy": "mypy",
    "mypy.stubtest": "stubtest",
    "flake8": "flake8",
    "pylint": "pylint",
    "black": "black",
    "isort": "isort",
    "pyright": "pyright",
    "codespell_lib": "codespell",
}
_DIRECT: Final = {
    "pytest": "pytest",
    "py.test": "pytest",
    "mypy": "mypy",
    "stubtest": "stubtest",
    "flake8": "flake8",
    "pylint": "pylint",
    "black": "black",
    "isort": "isort",
    "pyright": "pyright",
    "basedpyright": "pyright",
    "codespell": "codespell",
    "jest": "jest",
    "mocha": "mocha",
    "eslint": "eslint",
    "prettier": "prettier",
    "tsc": "tsc",
    "gofmt": "gofmt",
}
# uv run's options that take a value (everything else starting with '-' is a flag)
_UV_VALUED: Final = frozenset(
    {
        "--group",
        "--extra",
        "--with",
        "--with-requirements",
        "--python",
        "-p",
        "--package",
        "--env-file",
        "--index",
        "--default-index",
        "--index-url",
        "--extra-index-url",
        "--directory",
        "--project",
        "--only-group",
        "--no-group",
        "--with-editable",
        "--script",
        "--module",
        "-m",
        "--from",
    }
)
_COVERAGE_VALUED: Final = frozenset({"--source", "--rcfile", "--context", "--include", "--omit", "--data-file"})


def simple_commands(text: str) -> list[tuple[str, ...]]:
    """The simple commands of a shell snippet: lines (``\\`` continuations joined) split at ``;``, ``&&``, ``||``,
    ``|`` and ``&``; redirections, ``VAR=value`` prefixes and comments dropped; ``$(...)`` bodies added after the
    command that holds them. A line the shell lexer cannot read is skipped."""
    out: list[tuple[str, ...]] = []
    pending = ""
    for raw in text.splitlines():
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        line, pending = (pending + raw).strip(), ""
        if not line or line.startswith("#"):
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            tokens = list(lexer)
        except ValueError:
            continue
        current: list[str] = []
        skip = False
        for token in tokens:
            if skip:
                skip = False
                continue
            if token in (";", "&&", "||", "|", "&", "(", ")", ";;", "|&"):
                out.extend(_flush(current))
                current = []
            elif set(token) <= set("<>&") and token:
                if current and current[-1].isdigit():
                    current.pop()
                skip = True
            else:
                current.append(token)
        out.extend(_flush(current))
    return out


def _flush(words: list[str]) -> list[tuple[str, ...]]:
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words = words[1:]
    found: list[tuple[str, ...]] = [tuple(words)] if words else []
    for word in words:
        for body in re.findall(r"\$\(([^()]*)\)", word):
            found.extend(simple_commands(body))
    return found


def unwrap(words: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Look through launchers that do not change what runs; return the words, any ``--group``/``--extra`` a
    ``uv run`` names (where the tool it starts is installed), and the launchers looked through."""
    groups: list[str] = []
    wrappers: list[str] = []
    for _ in range(MAX_DEPTH):
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]
        if not words:
            break
        program = Path(words[0]).name
        before = words
        if program in ("env", "time", "nice", "exec", "command", "xvfb-run"):
            words = words[1:]
        elif program == "timeout":
            rest = [w for w in words[1:]]
            while rest and rest[0].startswith("-"):
                rest = rest[1:]
            words = tuple(rest[1:])
        elif (program == "uv" and len(words) > 1 and words[1] == "run") or program == "uvx":
            index = 2 if program == "uv" else 1
            while index < len(words) and words[index].startswith("-") and words[index] != "--":
                option = words[index].split("=", 1)[0]
                value = words[index].split("=", 1)[1] if "=" in words[index] else None
                if option in _UV_VALUED and value is None:
                    value = words[index + 1] if index + 1 < len(words) else None
                    index += 1
                if option in ("--group", "--extra", "--only-group") and value:
                    groups.append(value)
                index += 1
            if index < len(words) and words[index] == "--":
                index += 1
            words = words[index:]
        elif program in ("poetry", "pdm", "pipenv", "rye", "hatch") and len(words) > 1 and words[1] == "run":
            words = words[2:]
        elif program == "coverage" and len(words) > 1 and words[1] == "run":
            words = _after_coverage(words[2:])
        elif _PYTHON.fullmatch(program) and len(words) > 2 and words[1] == "-m" and words[2] == "coverage":
            words = _after_coverage(words[4:]) if len(words) > 3 and words[3] == "run" else ()
        elif program in ("c8", "nyc"):
            rest = list(words[1:])
            while rest and rest[0].startswith("-"):
                rest = rest[1:]
            words = tuple(rest)
        elif program in ("npx", "pnpx", "bunx") or (
            program in ("npm", "pnpm", "yarn") and len(words) > 1 and words[1] in ("exec", "x", "dlx")
        ):
            rest = list(words[1:] if program in ("npx", "pnpx", "bunx") else words[2:])
            while rest and rest[0].startswith("-"):
                rest = rest[1:]
            words = tuple(rest)
        elif (
            _PYTHON.fullmatch(program)
            and len(words) > 2
            and words[1] == "-m"
            and words[2] in ("tox", "nox", "pre_commit")
        ):
            words = (words[2].replace("_", "-"), *words[3:])
        else:
            break
        if words is not before and program not in wrappers:
            wrappers.append("coverage" if "coverage" in before[:3] else program)
    return words, tuple(groups), tuple(wrappers)


def _after_coverage(rest: tuple[str, ...]) -> tuple[str, ...]:
    """What ``coverage run [options] -m MOD args`` or ``coverage run [options] script args`` runs."""
    index = 0
    while index < len(rest) and rest[index].startswith("-") and rest[index] != "-m":
        if rest[index] in _COVERAGE_VALUED:
            index += 1
        index += 1
    if index < len(rest) and rest[index] == "-m":
        return ("python", *rest[index:])
    return ("python", *rest[index:])


def classify(words: tuple[str, ...]) -> tuple[Tool, tuple[str, ...]] | None:
    """The tool a simple command (wrappers removed) runs and its arguments, or None for any other command."""
    program = Path(words[0]).name
    args = words[1:]
    if _PYTHON.fullmatch(program):
        if len(args) >= 2 and args[0] == "-m" and args[1] in _MODULES:
            return TOOLS[_MODULES[args[1]]], args[2:]
        if len(args) >= 2 and args[0] == "-m" and args[1] == "ruff":
            program, args = "ruff", args[2:]
        else:
            return None
    if program == "ruff":
        sub = next((a for a in args if not a.startswith("-")), None)
        if sub == "format":
            return TOOLS["ruff-format"], tuple(a for a in args if a != "format")
        if sub == "check":
            return TOOLS["ruff-check"], tuple(a for a in args if a != "check")
        return None
    if program in _DIRECT:
        return TOOLS[_DIRECT[program]], args
    if program == "vitest":
        return TOOLS["vitest"], tuple(a for a in args if a != "run")
    if program == "node" and "--test" in args:
        return TOOLS["node-test"], tuple(a for a in args if a != "--test")
    if program == "cargo":
        rest = [a for a in args if not a.startswith("+")]
        kinds = {"test": "cargo-test", "clippy": "cargo-clippy", "fmt": "cargo-fmt"}
        if rest and rest[0] in kinds:
            return TOOLS[kinds[rest[0]]], tuple(rest[1:])
        return None
    if program == "go" and args and args[0] in ("test", "vet"):
        return TOOLS["go-test" if args[0] == "test" else "go-vet"], args[1:]
    if program == "golangci-lint" and args and args[0] == "run":
        return TOOLS["golangci-lint"], args[1:]
    return None
