"""How each tool runs in a starter policy: where setup puts it, and in check mode.

A Python tool runs as ``.agentops/venv/bin/python -m TOOL`` when setup makes that environment (``python3 -m TOOL``
otherwise), a Node tool through the package manager (``npm exec --no --``), a native one from PATH. Whatever the
project's own invocation, the command never rewrites the checkout: ``ruff check --no-fix`` (a ``fix = true`` in
``[tool.ruff]`` would otherwise apply), ``ruff format --check``, ``black --check``, ``isort --check-only``,
``prettier --check``, ``tsc --noEmit``, ``cargo fmt -- --check``, and gofmt as ``test -z "$(gofmt -l .)"``.
pytest keeps only the paths and ``-m``/``-k`` selections it was given: its other options often need plugins
(``--cov``, ``-n``) setup may not install.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from ..envs.project import pyproject, python_packages
from ..envs.pydeps import Declared
from ..envs.tools import VENV
from ..files import read_text
from .commands import Leaf
from .toolkinds import Tool

VENV_PYTHON = f"{VENV}/bin/python"
FIXING = frozenset({"--fix", "--write", "-w", "--write-changes", "--unsafe-fixes"})
"""Options that make a tool rewrite the checkout (ruff, prettier, codespell): a verification only checks."""


@dataclass(frozen=True, slots=True)
class RunEnv:
    """Where the proposed commands run, and what setup installs there."""

    root: Path
    path: str | None
    python_env: bool
    decl: Declared
    installs: frozenset[str]  # Python distributions setup installs (normalized)
    bins: dict[str, str]  # Node executables setup installs -> their package
    runner: tuple[str, ...]  # the package manager's "run"

    def python(self, tool: Tool, args: tuple[str, ...]) -> tuple[str, ...]:
        if tool.kind in ("pyright", "codespell"):
            program = f"{VENV}/bin/{tool.program}" if self.python_env else tool.program
            return (program, *args)
        module = {"ruff-check": "ruff", "ruff-format": "ruff", "stubtest": "mypy.stubtest"}.get(tool.kind, tool.program)
        return (VENV_PYTHON if self.python_env else "python3", "-m", module, *args)


def _positional(args: tuple[str, ...]) -> list[str]:
    return [a for a in args if not a.startswith("-")]


def check_argv(leaf: Leaf, env: RunEnv) -> tuple[str, ...] | str:
    """The check-mode command line for one tool invocation, where setup installs the tool."""
    kind, args = leaf.tool.kind, tuple(a for a in leaf.args if a not in FIXING)
    if kind == "pytest":
        kept: list[str] = []
        for index, arg in enumerate(args):
            if arg in ("-m", "-k") and index + 1 < len(args):
                kept += [arg, args[index + 1]]
            elif (
                not arg.startswith("-")
                and (index == 0 or args[index - 1] not in ("-m", "-k"))
                and (env.root / arg.split("::", 1)[0]).exists()
            ):
                kept.append(arg)
        return env.python(leaf.tool, ("-q", *kept))
    if kind == "ruff-check":
        return env.python(
            leaf.tool, ("check", "--no-fix", *(a for a in args if a not in ("--exit-non-zero-on-fix", "--show-fixes")))
        )
    if kind == "ruff-format":
        return env.python(leaf.tool, ("format", "--check", *(a for a in args if a not in ("--check", "--diff"))))
    if kind in ("black", "isort"):
        flag = "--check" if kind == "black" else "--check-only"
        rest = [a for a in args if a not in ("--check", "--check-only", "-c", "--diff", "-q")]
        return env.python(leaf.tool, (flag, *rest, *(() if _positional(tuple(rest)) else (".",))))
    if kind == "mypy" and not args and not _mypy_has_files(env.root):
        return env.python(leaf.tool, tuple(_python_targets(env.root)))
    if kind == "pylint" and not _positional(args):
        return env.python(leaf.tool, (*args, *_python_targets(env.root)))
    if leaf.tool.ecosystem == "python":
        return env.python(leaf.tool, args)
    if kind == "node-test":
        return ("node", "--test", *args)
    if leaf.tool.ecosystem == "node":
        if kind == "prettier":
            args = ("--check", *(a for a in args if a not in ("--check", "-c")))
        if kind == "tsc" and "--noEmit" not in args:
            args = ("--noEmit", *(a for a in args if a not in ("--watch", "-w")))
        launcher = {"npm": ("npm", "exec", "--no", "--"), "pnpm": ("pnpm", "exec"), "yarn": ("yarn", "run")}
        return (*launcher.get(env.runner[0], ("npm", "exec", "--no", "--")), leaf.tool.program, *args)
    if kind == "cargo-test":
        locked = (env.root / "Cargo.lock").is_file() and "--locked" not in args
        return ("cargo", "test", *(("--locked",) if locked else ()), *args)
    if kind == "cargo-clippy":
        return ("cargo", "clippy", *args)
    if kind == "cargo-fmt":
        if "--check" in args:
            return ("cargo", "fmt", *args)
        return ("cargo", "fmt", *args, *(("--",) if "--" not in args else ()), "--check")
    if kind in ("go-test", "go-vet"):
        return ("go", "test" if kind == "go-test" else "vet", *(args or ("./...",)))
    if kind == "gofmt":
        paths = " ".join(shlex.quote(a) for a in _positional(args)) or "."
        return f'test -z "$(gofmt -l {paths})"'
    return (leaf.tool.program, *(("run",) if kind == "golangci-lint" else ()), *args)


def _mypy_has_files(root: Path) -> bool:
    """Whether mypy's configuration names what to check (``files``, ``packages``, ``modules``)."""
    mypy = pyproject(root).get("tool", {}).get("mypy", {})
    if isinstance(mypy, dict) and {"files", "packages", "modules"} & set(mypy):
        return True
    texts = [read_text(root / name) or "" for name in ("mypy.ini", ".mypy.ini", "setup.cfg")]
    return any(re.search(r"^(files|packages|modules)\s*=", text, re.MULTILINE) for text in texts)


def _python_targets(root: Path) -> list[str]:
    if (root / "src").is_dir():
        return ["src"]
    return python_packages(root) or ["."]


def junit_spec(root: Path) -> str | None:
    """``junit:<path>`` when pytest's own configuration writes a JUnit report (``--junitxml`` in addopts)."""
    ini = pyproject(root).get("tool", {}).get("pytest", {}).get("ini_options", {})
    addopts = ini.get("addopts", "") if isinstance(ini, dict) else ""
    text = " ".join(addopts) if isinstance(addopts, list) else str(addopts)
    found = re.search(r"--junit-?xml[= ](\S+)", text)
    return f"junit:{found.group(1)}" if found and not os.path.isabs(found.group(1)) else None


def label(tool: Tool) -> str:
    """How a person names the tool: ``ruff check``, ``node --test``, ``cargo clippy``, ``mypy``."""
    special = {"node-test": "node --test", "stubtest": "stubtest", "golangci-lint": "golangci-lint"}
    return special.get(tool.kind, tool.kind.replace("-", " "))
