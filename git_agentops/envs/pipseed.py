"""pip for a new base, copied from a seed made once per interpreter instead of bootstrapped each time.

``python -m venv`` gets pip by running ``ensurepip``: pip installs its own bundled wheel into the new environment and
byte-compiles it, ~3 s of CPU (2.9 s per base measured on this suite's 20 bases; most of a base that has no
dependencies). Every base made from one interpreter gets the same files, so the first build makes a **seed** (a
plain ``python -I -m venv``, its marker written last, under a lock) and each base is ``python -I -m venv
--without-pip`` plus a copy of the seed's site-packages and ``bin/pip*``, whose interpreter line and ``RECORD`` rows
are written for the base as pip writes them (distlib's rule: a ``#!`` line, or ``/bin/sh`` and an ``exec`` line when
the path is long or has a space). That is what ``ensurepip`` would have written, the way virtualenv's app-data
seeder works; its byte code stays valid (copies keep the sources' mtimes, and Python fixes a module's file name at
import).

Copies, never links: pip later writes the base, and a dependency's build code runs with that base writable -- a
hard link would let it write the seed, and with it every later base. The key covers the interpreter's real path,
version and implementation and the size and mtime of its executable, so an interpreter upgraded in place gets a new
seed. Seeds live in the person's cache, ``$XDG_CACHE_HOME/git-agentops/pip-seeds/pip-seed-<key16>/`` (shared by all
their repositories; no agent sandbox grants it), or, when that cannot be made, beside the bases in the repository's
shared dir, which agents see read-only. Only the toolkit writes a seed, and no agent or checkout ever runs from one.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from ..canonical import digest
from ..clock import Clock
from ..gitstore.private import file_lock
from .tools import run_tool
from .venvs import read_json, site_packages, write_json

SEED_COMPLETE: Final = "agentops-seed.json"
MAX_SHEBANG: Final = 127
"""Longest ``#!`` line (with ``#!`` and the newline) distlib writes as such on Linux; longer ones go through sh."""


def seed_key(executable: str, version: str, implementation: str) -> str:
    """What decides the seed's files: the real interpreter, and its executable's size and mtime."""
    info = os.stat(executable)
    return digest(
        {"python": [implementation, version, os.path.realpath(executable)], "stat": [info.st_size, info.st_mtime_ns]}
    )


def seeds_dir(environ: Mapping[str, str]) -> Path | None:
    """``$XDG_CACHE_HOME/git-agentops/pip-seeds`` (``~/.cache`` without it); None without an absolute HOME."""
    cache = environ.get("XDG_CACHE_HOME") or ""
    if not os.path.isabs(cache):
        home = environ.get("HOME") or ""
        cache = os.path.join(home, ".cache") if os.path.isabs(home) else ""
    return Path(cache) / "git-agentops" / "pip-seeds" if cache else None


def make_venv(
    executable: str,
    key: str,
    path: Path,
    *,
    seeds: Path | None,
    env: dict[str, str],
    clock: Clock,
    timeout: float,
) -> None:
    """A new virtual environment at ``path`` made by ``executable``, with pip: the copy of a seed in ``seeds`` (or,
    without one that can be made, beside ``path``).

    Raises ``ENV_SETUP_FAILED`` (from :func:`~.tools.run_tool`) when the interpreter cannot make an environment.
    """
    if seeds is not None:
        try:
            seeds.mkdir(parents=True, exist_ok=True)
        except OSError:  # a read-only HOME, a file in the way
            seeds = None
    seed = _ensure_seed(executable, key, shared=seeds or path.parent, env=env, clock=clock, timeout=timeout)
    _venv(executable, path, ["--without-pip"], env=env, clock=clock, timeout=timeout)
    _copy_pip(seed, path)


def _ensure_seed(executable: str, key: str, *, shared: Path, env: dict[str, str], clock: Clock, timeout: float) -> Path:
    """The complete seed for ``key`` in ``shared`` (which exists): reused, or made by ``python -I -m venv`` (once,
    under its lock)."""
    seed = shared / f"pip-seed-{key[:16]}"
    if _complete(seed, key):
        return seed
    with file_lock(shared, f"{seed.name}.lock", timeout=timeout):
        if _complete(seed, key):  # another build made it while we waited
            return seed
        if os.path.islink(seed):
            seed.unlink()
        elif seed.exists():  # an interrupted seed: no marker, nothing in it is trusted
            shutil.rmtree(seed)
        _venv(executable, seed, [], env=env, clock=clock, timeout=timeout)
        write_json(seed / SEED_COMPLETE, {"key": key, "python": executable, "madeAt": clock.now()})
    return seed


def _complete(seed: Path, key: str) -> bool:
    if os.path.islink(seed):
        return False
    doc = read_json(seed / SEED_COMPLETE)
    return doc is not None and doc.get("key") == key


def _venv(
    executable: str, path: Path, options: list[str], *, env: dict[str, str], clock: Clock, timeout: float
) -> None:
    """``python -I -m venv``, run from the new environment's parent (``-I``: no ``venv.py`` of a checkout)."""
    run_tool(
        [executable, "-I", "-m", "venv", *options, str(path)],
        cwd=path.parent,
        env=env,
        clock=clock,
        timeout=timeout,
        what="creating the base environment",
    )


def _copy_pip(seed: Path, venv: Path) -> None:
    """Copy the seed's site-packages, and the scripts its ``bin/`` has that ``venv``'s lacks, retargeted."""
    source, target = site_packages(seed), site_packages(venv)
    for entry in sorted(source.iterdir()):
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, target / entry.name, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(entry, target / entry.name, follow_symlinks=False)
    scripts = {}
    for entry in sorted((seed / "bin").iterdir()):
        made = venv / "bin" / entry.name
        if os.path.lexists(made) or not entry.is_file() or entry.is_symlink():
            continue
        body = _retarget(entry.read_bytes(), str(seed / "bin"), str(venv / "bin"))
        made.write_bytes(body)
        shutil.copystat(entry, made)
        scripts[entry.name] = body
    _fix_records(target, venv / "bin", scripts)


def _retarget(body: bytes, old_bin: str, new_bin: str) -> bytes:
    """A pip-made script of ``old_bin`` as pip makes it for ``new_bin``: the same code after a new interpreter line."""
    lines = body.split(b"\n")
    if lines[0] == b"#!/bin/sh" and len(lines) > 2 and lines[1].startswith(b"'''exec' ") and lines[2] == b"' '''":
        executable, rest = lines[1][len(b"'''exec' ") :].rsplit(b' "$0" "$@"', 1)[0], lines[3:]
    elif lines[0].startswith(b"#!"):
        executable, rest = lines[0][2:], lines[1:]
    else:
        return body
    executable = executable.replace(old_bin.encode(), new_bin.encode())
    if b" " not in executable and len(executable) + 3 <= MAX_SHEBANG:
        head = [b"#!" + executable]
    else:
        quoted = executable if executable.startswith(b'"') or b" " not in executable else b'"' + executable + b'"'
        head = [b"#!/bin/sh", b"'''exec' " + quoted + b' "$0" "$@"', b"' '''"]
    return b"\n".join([*head, *rest])


def _fix_records(site: Path, bin_dir: Path, scripts: dict[str, bytes]) -> None:
    """Rewrite the ``RECORD`` rows of the retargeted scripts with their new hash and size, as pip records them."""
    if not scripts:
        return
    for record in site.glob("*.dist-info/RECORD"):
        rows = record.read_bytes().splitlines(keepends=True)  # pip's csv rows end in CRLF: kept as they are
        changed = False
        for index, row in enumerate(rows):
            name = row.split(b",", 1)[0].decode("utf-8", errors="replace")
            script = Path(os.path.normpath(site / name))
            if script.parent == bin_dir and script.name in scripts:
                body = scripts[script.name]
                hashed = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
                ending = row[len(row.rstrip(b"\r\n")) :]
                rows[index] = f"{name},sha256={hashed},{len(body)}".encode() + ending
                changed = True
        if changed:
            record.write_bytes(b"".join(rows))
