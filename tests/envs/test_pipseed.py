"""A base gets pip by copying a seed made once per interpreter (:mod:`git_agentops.envs.pipseed`), and holds then
exactly what ``python -m venv`` (``ensurepip``) would have written there.

Invariants: the copy is the seed's files with the base's path where the seed's was (every ``RECORD`` row's hash
matching the file on disk, the scripts' interpreter line as pip writes it, short or long); pip runs from the base
and names it; a seed is made once and reused (no second ``ensurepip``); a seed without its marker is made again;
without a usable cache directory the seed goes beside the base.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_agentops.clock import FixedClock
from git_agentops.envs import pipseed
from git_agentops.envs.pipseed import SEED_COMPLETE, make_venv, seed_key, seeds_dir

PYTHON = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
KEY = seed_key(PYTHON, ".".join(map(str, sys.version_info[:3])), sys.implementation.name)
CLOCK = FixedClock()


def _make(path: Path, seeds: Path | None) -> None:
    make_venv(PYTHON, KEY, path, seeds=seeds, env=dict(os.environ), clock=CLOCK, timeout=600)


def _files(root: Path) -> dict[str, bytes]:
    found = {}
    for entry in root.rglob("*"):
        if entry.is_symlink():
            found[str(entry.relative_to(root))] = b"-> " + os.readlink(entry).encode()
        elif entry.is_file():
            found[str(entry.relative_to(root))] = entry.read_bytes()
    return found


def _record_rows(site: Path) -> Iterator[tuple[Path, str, str]]:
    for record in site.glob("*.dist-info/RECORD"):
        for row in csv.reader(io.StringIO(record.read_text("utf-8"))):
            name, hashed, _size = row
            if hashed:
                yield Path(os.path.normpath(site / name)), hashed, _size


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One seed and one base made from it; the seeds and bases directories have names of one length, and the base's
    name is as long as the seed's, so each path in the seed has a twin of the same length in the base."""
    root = tmp_path_factory.mktemp("pipseed")
    seeds = root / "seeds"
    base = root / "bases" / ("b" * len(f"pip-seed-{KEY[:16]}"))
    base.parent.mkdir()
    _make(base, seeds)
    return seeds / f"pip-seed-{KEY[:16]}", base


def test_a_base_made_from_the_seed_holds_what_ensurepip_wrote_with_its_own_path(made: tuple[Path, Path]) -> None:
    seed, base = made
    ours, theirs = _files(base), _files(seed)
    assert set(theirs) - set(ours) == {SEED_COMPLETE}
    assert set(ours) <= set(theirs)
    assert any(name.startswith("bin/pip") for name in ours) and any("/pip/" in name for name in ours)

    def as_made_here(name: str) -> bytes:
        """The seed's file as ``python -m venv`` would have written it in the base: byte code is copied as it is
        (Python takes a module's file name from where it imports it, not from the byte code)."""
        if name.endswith(".pyc"):
            return theirs[name]
        return (
            theirs[name].replace(str(seed).encode(), str(base).encode()).replace(seed.name.encode(), base.name.encode())
        )

    differing = sorted(name for name in ours if name != "pyvenv.cfg" and ours[name] != as_made_here(name))
    assert all(name.endswith(".dist-info/RECORD") for name in differing), differing
    # pyvenv.cfg: only the command that made it differs (--without-pip)
    cfg = [line for line in ours["pyvenv.cfg"].splitlines() if not line.startswith(b"command")]
    assert cfg == [line for line in theirs["pyvenv.cfg"].splitlines() if not line.startswith(b"command")]
    # every RECORD row names a file of the base with its hash and size -- the rewritten scripts' included
    rows = list(_record_rows(base / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"))
    assert any(path.parent == base / "bin" for path, _h, _s in rows)
    for path, hashed, size in rows:
        body = path.read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
        assert (hashed, size) == (f"sha256={digest}", str(len(body))), path
    done = subprocess.run([base / "bin" / "pip", "--version"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and f"from {base}/lib/" in done.stdout, done


def test_a_seed_is_made_once_and_a_long_path_gets_pip_s_sh_form(
    made: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed, _base = made
    marker = (seed / SEED_COMPLETE).read_bytes()
    ran: list[list[str]] = []
    real = pipseed.run_tool
    monkeypatch.setattr(pipseed, "run_tool", lambda argv, **kw: ran.append(list(argv)) or real(argv, **kw))
    long = tmp_path / ("x" * 100) / "base"
    long.parent.mkdir()
    _make(long, seed.parent)
    assert [argv[-2:] for argv in ran] == [["--without-pip", str(long)]]  # no ensurepip: the seed was reused
    assert (seed / SEED_COMPLETE).read_bytes() == marker
    head = (long / "bin" / "pip").read_bytes().split(b"\n")[:3]
    python = str(long / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}").encode()
    assert head == [b"#!/bin/sh", b"'''exec' " + python + b' "$0" "$@"', b"' '''"]  # too long for a #! line
    done = subprocess.run([long / "bin" / "pip", "--version"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and f"from {long}/lib/" in done.stdout, done


def test_without_a_cache_directory_an_interrupted_seed_beside_the_base_is_made_again(tmp_path: Path) -> None:
    bases = tmp_path / "bases"
    interrupted = bases / f"pip-seed-{KEY[:16]}"
    (interrupted / "lib").mkdir(parents=True)
    (interrupted / "lib" / "half-written").write_text("no marker: nothing here is trusted\n")
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    _make(bases / "python-0123456789abcdef", not_a_dir / "seeds")
    assert not (interrupted / "lib" / "half-written").exists()
    assert (interrupted / SEED_COMPLETE).is_file() and (bases / "python-0123456789abcdef" / "bin" / "pip").is_file()


def test_seeds_live_in_the_person_s_cache() -> None:
    assert seeds_dir({"XDG_CACHE_HOME": "/c", "HOME": "/h"}) == Path("/c/git-agentops/pip-seeds")
    assert seeds_dir({"XDG_CACHE_HOME": "relative", "HOME": "/h"}) == Path("/h/.cache/git-agentops/pip-seeds")
    assert seeds_dir({"HOME": "relative"}) is None and seeds_dir({}) is None
