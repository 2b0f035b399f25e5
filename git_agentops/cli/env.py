"""``git agentops-env``: make the current checkout's own environment, the one its verification commands run in.

python [--extra NAME]... [--group NAME]... [--with PKG]... [--venv PATH] [--python PYTHON]
        a virtualenv inside the checkout (default .agentops/venv) with the project installed editable from THIS
        checkout; its dependencies live in a base shared by every checkout on the same lockfile
        ($GIT_COMMON_DIR/agentops/envs/python-<key>/), built once and reused. The base installs what the lock
        pins: uv.lock (through 'uv export'; a uv of the toolkit's own is installed into
        $GIT_COMMON_DIR/agentops/envs/tools/ when PATH has none), poetry.lock, pdm.lock, Pipfile.lock, else a
        pinned requirements file -- never the newest releases instead
node    node_modules by the lockfile's package manager, ci-style (npm ci, pnpm/yarn/bun frozen), shared caches
cargo   cargo fetch --locked into the shared cargo registry
go      go mod download into the shared module cache

Policy setup steps run it in each worker worktree and clean checkout, and 'git agentops-verify' runs the
policy's 'git agentops-env' steps itself when their environment is missing or stale. Re-running is a no-op when
nothing changed. Progress goes to stderr on a terminal. Exit 0 when the environment is ready; otherwise exit 3
with ENV_SETUP_FAILED (the failing tool's output), ENV_LOCK_UNUSABLE (the lockfile cannot be followed: it names
the lock and the command that fixes it) or ENV_PYTHON_MISSING (no such interpreter).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import AgentOpsError
from .common import Context, Parser, build, run, subcommands

if TYPE_CHECKING:
    from ..clock import Clock
    from ..envs.project import EnvState

Progress = Callable[[str], None]


def build_parser() -> Parser:
    parser = build("git-agentops-env", __doc__ or "")
    add = subcommands(parser)
    python = add("python", "a virtualenv in this checkout with the project installed from it")
    python.add_argument(
        "--extra", action="append", default=[], metavar="NAME", help="an extra (or dependency group) to install"
    )
    python.add_argument(
        "--group", action="append", default=[], metavar="NAME", help="a dependency group (PEP 735) to install"
    )
    python.add_argument(
        "--with", dest="with_", action="append", default=[], metavar="PKG", help="one more requirement to install"
    )
    python.add_argument(
        "--venv", default=".agentops/venv", help="where (relative to the checkout; default %(default)s)"
    )
    python.add_argument("--python", default=None, help="the interpreter to build from (default: python3 on PATH)")
    add("node", "node_modules by the lockfile's package manager, ci-style")
    add("cargo", "cargo fetch --locked")
    add("go", "go mod download")
    return parser


def _default_python(env: Mapping[str, str]) -> str:
    """``python3`` on PATH -- the interpreter the person uses for the project -- else the toolkit's own."""
    return shutil.which("python3", path=env.get("PATH", os.defpath)) or sys.executable


def parse_step(argv: Sequence[str] | str) -> argparse.Namespace | None:
    """A setup step's arguments when it runs ``git agentops-env python|node|cargo|go`` (None for any other step,
    or one whose arguments this version does not take: the step then fails on its own when it runs)."""
    words = shlex.split(argv, comments=True) if isinstance(argv, str) else list(argv)
    if tuple(words[:2]) == ("git", "agentops-env"):
        words = words[2:]
    elif words[:1] == ["git-agentops-env"]:
        words = words[1:]
    else:
        return None
    try:
        args = build_parser().parse_args(words)
    except AgentOpsError:
        return None
    return args if args.command else None


def env_state(args: argparse.Namespace, root: Path, env: Mapping[str, str]) -> EnvState | None:
    """Whether the environment ``args`` describes is ready in ``root`` (file reads only); None for cargo and go,
    which keep nothing in the checkout that could be missing (their tools fetch what they lack)."""
    from ..envs.node import node_env_state
    from ..envs.python import python_env_state

    if args.command == "python":
        return python_env_state(
            root,
            venv=Path(args.venv),
            python=args.python or _default_python(env),
            extras=args.extra,
            groups=args.group,
            with_=args.with_,
            environ=env,
        )
    if args.command == "node":
        return node_env_state(root)
    return None


def make_env(
    args: argparse.Namespace, root: Path, env: Mapping[str, str], clock: Clock, progress: Progress | None
) -> tuple[dict[str, Any], str]:
    """Make the environment ``args`` describes in the checkout ``root``: its JSON document and summary line."""
    from ..envs.native import ensure_cargo_env, ensure_go_env
    from ..envs.node import ensure_node_env
    from ..envs.python import ensure_python_env
    from ..envs.tools import git_common_dir

    if args.command == "python":
        common = git_common_dir(root, env)
        done = ensure_python_env(
            root,
            venv=Path(args.venv),
            common_dir=common,
            python=args.python or _default_python(env),
            extras=args.extra,
            groups=args.group,
            with_=args.with_,
            environ=env,
            clock=clock,
            progress=progress,
        )
        excluded = _exclude(root, done.venv, common)
        summary = done.summary() + (f"; added {excluded} to info/exclude" if excluded else "")
        return {**done.to_json(), "excludeAdded": excluded}, summary
    if args.command == "node":
        tool = ensure_node_env(root, common_dir=git_common_dir(root, env), environ=env, clock=clock, progress=progress)
    elif args.command == "cargo":
        tool = ensure_cargo_env(root, environ=env, clock=clock)
    else:
        tool = ensure_go_env(root, environ=env, clock=clock)
    return tool.to_json(), tool.summary()


def _exclude(root: Path, venv: Path, common_dir: Path) -> str | None:
    """Keep a venv inside the work tree out of commits (and out of verification's dirty check). Not in a
    supervisor's clean checkout: its repository is read-only to setup, and what setup made is kept by its record."""
    from ..gitstore.clean import clean_source
    from ..policy.excludes import add_excludes

    if clean_source(common_dir) is not None:
        return None

    top = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, text=True, check=False, timeout=30
    ).stdout.strip()
    if not top:
        return None
    try:
        relative = venv.resolve().relative_to(Path(top).resolve())
    except ValueError:
        return None  # outside the work tree: git never sees it
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "--no-index", f"{relative.as_posix()}/"], cwd=top, check=False, timeout=30
    )
    if ignored.returncode == 0:
        return None
    line = f"{relative.as_posix()}/"
    add_excludes(common_dir / "info" / "exclude", [line])
    return line


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    if not args.command:
        raise AgentOpsError("USAGE", "say which environment: python, node, cargo or go")
    doc, summary = make_env(args, ctx.cwd, ctx.env, ctx.clock, ctx.progress if ctx.interactive else None)
    ctx.emit(doc, summary)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
