"""Install aider, which comes from PyPI (not npm): ``aider-chat`` at the pinned version, in a virtualenv of its own.

The virtualenv goes into the same cache as the npm CLIs (:func:`tests.realcli.install.cache_root`), in
``aider-<version>/`` (``aider-latest/`` for the newest published version, with ``AGENTOPS_REALCLI_LATEST``). Every
pytest-xdist worker asks; one installs under a file lock while the others wait. A virtualenv cannot be renamed into
place (its scripts name their interpreter by absolute path), so it is built where it stays and marked complete
last: a killed install leaves no marker, and the next one starts over.

Like :func:`tests.realcli.install.ensure_clis`, call :func:`ensure_aider` before ``tests/conftest.py`` replaces
``HOME`` (a session-scoped fixture), or set ``AGENTOPS_CLI_CACHE``. CI installs ahead of pytest with
``python -m tests.realcli.aider_install``.

Its own virtualenv, never the test environment: aider pins hundreds of packages (litellm, tree-sitter...), and the
agent's commands must not find them. Only the ``aider`` program is handed out, never the virtualenv's ``bin/`` for
PATH (its ``python3`` would shadow the system's).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final

from .install import InstallError, cache_root, locked, want_latest

PACKAGE: Final = "aider-chat"
VERSION: Final = "0.86.2"
PYTHON_ENV: Final = "AGENTOPS_AIDER_PYTHON"
"""The interpreter the virtualenv is made from (default: this one); aider 0.86 wants Python 3.10 to 3.12."""
INSTALL_TIMEOUT: Final = 1800.0


def install_dir(*, latest: bool = False) -> Path:
    """Where the virtualenv of the pinned (or newest) aider is."""
    return cache_root() / ("aider-latest" if latest else f"aider-{VERSION}")


def ensure_aider(*, latest: bool | None = None) -> Path:
    """The ``aider`` program of the pinned ``aider-chat`` (with ``latest``, default ``AGENTOPS_REALCLI_LATEST``: the
    newest published), installed first when missing, at most once across processes. Raises
    :class:`tests.realcli.install.InstallError` when pip fails."""
    latest = want_latest() if latest is None else latest
    venv = install_dir(latest=latest)
    if _complete(venv):
        return venv / "bin" / "aider"
    with locked(venv.with_name(f"{venv.name}.lock")):
        if not _complete(venv):  # another process may have finished it while this one waited
            _install(venv, latest=latest)
    return venv / "bin" / "aider"


def installed_version(aider: Path) -> str:
    """What the install's marker says it installed ("missing" when it is not complete)."""
    try:
        return str(json.loads((aider.parent.parent / ".complete").read_text("utf-8"))["version"])
    except (OSError, ValueError, KeyError):
        return "missing"


def _complete(venv: Path) -> bool:
    return (venv / ".complete").is_file() and os.access(venv / "bin" / "aider", os.X_OK)


def _run(argv: list[str]) -> str:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, errors="replace", timeout=INSTALL_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise InstallError(f"{' '.join(argv)} took longer than {INSTALL_TIMEOUT:.0f} s") from exc
    except OSError as exc:
        raise InstallError(f"cannot run {argv[0]}: {exc}") from exc
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-4000:]
        raise InstallError(
            f"{' '.join(argv)} failed (exit {done.returncode}):\n{tail}\n"
            "retry with: python -m tests.realcli.aider_install"
        )
    return done.stdout


def _install(venv: Path, *, latest: bool) -> None:
    """Build the virtualenv at ``venv`` afresh (the caller holds the lock) and mark it complete last."""
    shutil.rmtree(venv, ignore_errors=True)  # what a killed install left
    python = os.environ.get(PYTHON_ENV) or sys.executable
    _run([python, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "--no-input", "install"]
    _run([*pip, "--upgrade", PACKAGE] if latest else [*pip, f"{PACKAGE}=={VERSION}"])
    aider = venv / "bin" / "aider"
    if not os.access(aider, os.X_OK):
        raise InstallError(f"pip installed no {aider}")
    version = _run([str(aider), "--version"]).strip().rsplit(" ", 1)[-1] or "unknown"
    (venv / ".complete").write_text(json.dumps({"package": PACKAGE, "version": version}) + "\n", "utf-8")


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.realcli.aider_install [--latest]``: install if needed, print where and which version."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.realcli.aider_install", description=__doc__.split("\n\n")[0])
    parser.add_argument("--latest", action="store_true", help="the newest published aider-chat, in aider-latest/")
    args = parser.parse_args(argv)
    try:
        if args.latest:  # afresh, like install --latest
            with locked(install_dir(latest=True).with_name("aider-latest.lock")):
                _install(install_dir(latest=True), latest=True)
        aider = ensure_aider(latest=args.latest)
    except InstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(aider)
    print(f"  aider {installed_version(aider)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
