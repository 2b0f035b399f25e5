"""Install the real agent CLIs the tests drive: exactly the versions ``package-lock.json`` pins, once per machine.

Why a cache keyed by the lockfile: the CLIs are hundreds of megabytes of native binaries. ``npm ci`` of the lock
goes into ``$AGENTOPS_CLI_CACHE`` (default ``~/.cache/git-agentops-test-clis``), in a directory named by the first
16 hex digits of the lockfile's sha256, so a changed lock installs afresh and an unchanged one never again. Every
pytest-xdist worker asks; one installs under a file lock while the others wait, and an install is renamed into place
only once it is complete -- a killed ``npm ci`` leaves nothing that looks usable.

The tests replace ``HOME`` with a temporary one (``tests/conftest.py``), so :func:`ensure_clis` must run before
that: from a session-scoped fixture (which pytest sets up before the function-scoped ``hermetic`` one), or with
``AGENTOPS_CLI_CACHE`` set. CI installs ahead of pytest with ``python -m tests.realcli.install``.

Against the newest published versions instead -- what a person installing today gets -- the same suite::

    python -m tests.realcli.install --latest
    AGENTOPS_REALCLI_LATEST=1 python -m pytest tests/hosts/test_realcli.py

``--latest`` installs into the cache's ``latest/`` directory (replacing what an earlier ``--latest`` put there);
``AGENTOPS_REALCLI_LATEST=1`` makes :func:`ensure_clis` return that one, installing it first when it is missing.

To move the pins: edit ``package.json``, then ``python -m tests.realcli.install --relock`` writes the lockfile with
npm (``npm install --package-lock-only``) and completes it for ``npm ci``. Why completing: a platform package the
registry does not carry at that version (the registry this project's CI reaches mirrors only some of opencode's)
is left out of the lock by npm, and ``npm ci`` then refuses the lock as out of sync with ``package.json``. Each one
gets an entry with only its version and platform (``os``, ``cpu``, ``libc`` read from its name), which ``npm ci``
skips on every other platform -- and on its own platform fetches unverified, as it would with no lock.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

HERE: Final = Path(__file__).resolve().parent
PACKAGE_JSON: Final = HERE / "package.json"
LOCKFILE: Final = HERE / "package-lock.json"

CLIS: Final = {
    "claude": "@anthropic-ai/claude-code",
    "codex": "@openai/codex",
    "opencode": "opencode-ai",
    "gemini": "@google/gemini-cli",
}
"""Each CLI's command and the npm package that provides it (aider comes from PyPI, not from here)."""

LATEST_ENV: Final = "AGENTOPS_REALCLI_LATEST"
CACHE_ENV: Final = "AGENTOPS_CLI_CACHE"
INSTALL_TIMEOUT: Final = 1800.0
"""Seconds an ``npm`` install may take: a first download is ~1 GB of binaries."""


class InstallError(RuntimeError):
    """The CLIs could not be installed; the message says what npm printed and how to retry by hand."""


def cache_root() -> Path:
    """``$AGENTOPS_CLI_CACHE``, or ``~/.cache/git-agentops-test-clis`` of the HOME this process sees now."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path(os.environ.get("HOME") or Path.home()) / ".cache" / "git-agentops-test-clis"


def lock_key() -> str:
    """The first 16 hex digits of the lockfile's sha256: the name of its install directory."""
    return hashlib.sha256(LOCKFILE.read_bytes()).hexdigest()[:16]


def want_latest() -> bool:
    """Whether ``AGENTOPS_REALCLI_LATEST`` asks for the newest published versions instead of the pinned ones."""
    return os.environ.get(LATEST_ENV, "") not in ("", "0")


def ensure_clis(*, latest: bool | None = None) -> Path:
    """The ``node_modules/.bin`` directory holding ``claude``, ``codex``, ``opencode`` and ``gemini``.

    The pinned install (``npm ci`` of the lockfile), or with ``latest`` (default: ``AGENTOPS_REALCLI_LATEST``) the
    newest published versions; either is installed first when missing, at most once across processes. Raises
    :class:`InstallError` when npm fails.
    """
    latest = want_latest() if latest is None else latest
    root = cache_root()
    final = root / ("latest" if latest else lock_key())
    if _complete(final):
        return final / "node_modules" / ".bin"
    with locked(root / f"{final.name}.lock"):
        if not _complete(final):  # another process may have finished it while this one waited
            _install(final, latest=latest)
    return final / "node_modules" / ".bin"


def refresh_latest() -> Path:
    """Install the newest published versions into ``latest/`` afresh; returns its ``node_modules/.bin``."""
    root = cache_root()
    final = root / "latest"
    with locked(root / "latest.lock"):
        _install(final, latest=True)
    return final / "node_modules" / ".bin"


def versions(bin_dir: Path) -> dict[str, str]:
    """The installed version of each CLI's package (from its ``package.json``; "missing" when not installed)."""
    modules = bin_dir.parent
    found = {}
    for cli, package in CLIS.items():
        try:
            found[cli] = str(json.loads((modules / package / "package.json").read_text("utf-8"))["version"])
        except (OSError, ValueError, KeyError):
            found[cli] = "missing"
    return found


def _complete(install: Path) -> bool:
    """Whether ``install`` is a finished install: the marker written last, and every CLI's command present."""
    bin_dir = install / "node_modules" / ".bin"
    return (install / ".complete").is_file() and all(os.access(bin_dir / cli, os.X_OK) for cli in CLIS)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created as needed): one installer at a time, on this machine."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _latest_manifest() -> str:
    """``package.json`` asking for every CLI at its ``latest`` tag."""
    doc = json.loads(PACKAGE_JSON.read_text("utf-8"))
    doc["dependencies"] = {package: "latest" for package in sorted(doc["dependencies"])}
    return json.dumps(doc, indent=2) + "\n"


def _install(final: Path, *, latest: bool) -> None:
    """Install into a fresh directory beside ``final``, then swap it in with one rename (the caller holds the lock)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{final.name}.installing-", dir=final.parent))
    try:
        if latest:
            (work / "package.json").write_text(_latest_manifest(), "utf-8")
            argv = ["npm", "install", "--no-audit", "--no-fund", "--no-update-notifier"]
        else:
            shutil.copyfile(PACKAGE_JSON, work / "package.json")
            shutil.copyfile(LOCKFILE, work / "package-lock.json")
            argv = ["npm", "ci", "--no-audit", "--no-fund", "--no-update-notifier"]
        _npm(argv, work)
        missing = [cli for cli in CLIS if not os.access(work / "node_modules" / ".bin" / cli, os.X_OK)]
        if missing:
            raise InstallError(f"{' '.join(argv)} in {work} installed no {', '.join(missing)}")
        (work / ".complete").write_text(json.dumps(versions(work / "node_modules" / ".bin")) + "\n", "utf-8")
        work.chmod(0o755)  # mkdtemp made it private; the install is shared by whoever runs the tests here
        old = final.with_name(f"{final.name}.old-{os.getpid()}")
        if final.exists():
            final.rename(old)
        work.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _npm(argv: list[str], cwd: Path) -> None:
    """Run npm in ``cwd``; on failure raise :class:`InstallError` with the tail of its output."""
    if shutil.which("npm") is None:
        raise InstallError("npm is not on PATH: install Node.js and npm (Debian: apt-get install npm)")
    try:
        done = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, errors="replace", timeout=INSTALL_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise InstallError(f"{' '.join(argv)} took longer than {INSTALL_TIMEOUT:.0f} s") from exc
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-4000:]
        raise InstallError(
            f"{' '.join(argv)} failed (exit {done.returncode}) in {cwd}:\n{tail}\n"
            "retry with: python -m tests.realcli.install"
        )


_OS_WORDS: Final = {"darwin": "darwin", "linux": "linux", "windows": "win32", "win32": "win32"}
_CPU_WORDS: Final = ("x64", "arm64")


def relock() -> list[str]:
    """Write ``package-lock.json`` for ``package.json`` with npm, completed for ``npm ci``; returns what was added.

    Raises :class:`InstallError` when npm fails, or when a missing optional dependency's name does not say its
    platform (then the lock needs a person's judgement).
    """
    with tempfile.TemporaryDirectory(prefix="relock-") as tmp:
        work = Path(tmp)
        shutil.copyfile(PACKAGE_JSON, work / "package.json")
        _npm(["npm", "install", "--package-lock-only", "--ignore-scripts", "--no-audit", "--no-fund"], work)
        doc = json.loads((work / "package-lock.json").read_text("utf-8"))
    packages: dict[str, dict[str, object]] = doc["packages"]
    added: list[str] = []
    for entry in list(packages.values()):
        optional = entry.get("optionalDependencies")
        for dep, version in (optional if isinstance(optional, dict) else {}).items():
            if f"node_modules/{dep}" in packages:
                continue
            parts = dep.rsplit("/", 1)[-1].split("-")
            systems = [_OS_WORDS[p] for p in parts if p in _OS_WORDS]
            cpus = [p for p in parts if p in _CPU_WORDS]
            if len(systems) != 1 or len(cpus) != 1:
                raise InstallError(f"the registry has no {dep}@{version}, and its name does not say its platform")
            placeholder: dict[str, object] = {"version": version, "optional": True, "os": systems, "cpu": cpus}
            if "musl" in parts:
                placeholder["libc"] = ["musl"]
            packages[f"node_modules/{dep}"] = placeholder
            added.append(f"{dep}@{version}")
    doc["packages"] = dict(sorted(packages.items()))
    LOCKFILE.write_text(json.dumps(doc, indent=2) + "\n", "utf-8")
    return added


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.realcli.install [--relock] [--latest]``: install if needed, print where, which versions."""
    parser = argparse.ArgumentParser(prog="python -m tests.realcli.install", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--latest", action="store_true", help="install the newest published versions afresh, into the cache's latest/"
    )
    parser.add_argument(
        "--relock", action="store_true", help="write package-lock.json for package.json (then install from it)"
    )
    args = parser.parse_args(argv)
    try:
        if args.relock:
            for added in relock():
                print(f"not in the registry, added for npm ci to skip elsewhere: {added}")
        bin_dir = refresh_latest() if args.latest else ensure_clis(latest=False)
    except InstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(bin_dir)
    for cli, version in versions(bin_dir).items():
        print(f"  {cli} {version}")
    if args.latest:
        print(f"run the suite against them with: {LATEST_ENV}=1 python -m pytest tests/hosts/test_realcli.py")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
