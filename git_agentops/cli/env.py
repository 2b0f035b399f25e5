"""``git agentops-env``: make the current checkout's own environment, the one its verification commands run in.

python [--extra NAME]... [--with PKG]... [--venv PATH] [--python PYTHON]
        a virtualenv inside the checkout (default .agentops/venv) with the project installed editable from THIS
        checkout; its dependencies live in a base shared by every checkout on the same lockfile
        ($GIT_COMMON_DIR/agentops/envs/python-<key>/), built once and reused
node    node_modules by the lockfile's package manager, ci-style (npm ci, pnpm/yarn/bun frozen), shared caches
cargo   cargo fetch --locked into the shared cargo registry
go      go mod download into the shared module cache

Run it in the checkout (policy setup steps run it in each worker worktree; run it once yourself in the checkout
where you run 'git agentops-verify'). Re-running is a no-op when nothing changed. Exit 0 when the environment is
ready; ENV_SETUP_FAILED (exit 3) with the failing tool's output otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from ..errors import AgentOpsError
from .common import Context, Parser, build, run, subcommands


def build_parser() -> Parser:
    parser = build("git-agentops-env", __doc__ or "")
    add = subcommands(parser)
    python = add("python", "a virtualenv in this checkout with the project installed from it")
    python.add_argument(
        "--extra", action="append", default=[], metavar="NAME", help="an extra or dependency group to install"
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


def _default_python(ctx: Context) -> str:
    """``python3`` on PATH -- the interpreter the person uses for the project -- else the toolkit's own."""
    return shutil.which("python3", path=ctx.env.get("PATH", os.defpath)) or sys.executable


def _exclude(root: Path, venv: Path, common_dir: Path) -> str | None:
    """Keep a venv inside the work tree out of commits (and out of verification's dirty check)."""
    from ..policy.starter import add_excludes

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


def _python(args: argparse.Namespace, ctx: Context) -> int:
    from ..envs.python import ensure_python_env
    from ..envs.tools import git_common_dir

    root = ctx.cwd
    common = git_common_dir(root, ctx.env)
    done = ensure_python_env(
        root,
        venv=Path(args.venv),
        common_dir=common,
        python=args.python or _default_python(ctx),
        extras=args.extra,
        with_=args.with_,
        environ=ctx.env,
        clock=ctx.clock,
    )
    excluded = _exclude(root, done.venv, common)
    summary = done.summary() + (f"; added {excluded} to info/exclude" if excluded else "")
    ctx.emit({**done.to_json(), "excludeAdded": excluded}, summary)
    return 0


def _tool(args: argparse.Namespace, ctx: Context) -> int:
    from ..envs.native import ensure_cargo_env, ensure_go_env
    from ..envs.node import ensure_node_env
    from ..envs.tools import git_common_dir

    root = ctx.cwd
    if args.command == "node":
        done = ensure_node_env(root, common_dir=git_common_dir(root, ctx.env), environ=ctx.env, clock=ctx.clock)
    elif args.command == "cargo":
        done = ensure_cargo_env(root, environ=ctx.env, clock=ctx.clock)
    else:
        done = ensure_go_env(root, environ=ctx.env, clock=ctx.clock)
    ctx.emit(done.to_json(), done.summary())
    return 0


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    if not args.command:
        raise AgentOpsError("USAGE", "say which environment: python, node, cargo or go")
    return _python(args, ctx) if args.command == "python" else _tool(args, ctx)


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), _handle, argv)
