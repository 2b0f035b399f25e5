"""What an agent may touch: the Landlock rules of one worker, computed from where its things are.

Landlock only *allows* (a rule grants access to a file or directory and everything beneath it; what no rule grants
is denied), so a set of paths that must stay unreadable -- the receipt signing key's directory, the trust store,
the supervisor's private dir -- is carved out of ``/`` by :func:`cover`: every directory on the way from ``/`` to a
denied path is *split* into its entries (each granted on its own, the denied one left out). A split directory
itself gets no rule -- it can be passed through but not listed: a right granted on a directory is inherited by
everything beneath it, so even "list" on ``~`` would list the key's directory. The same carving keeps writable
roots such as ``~/.cache`` from reaching the supervisor's verification checkouts in ``~/.cache/git-agentops/``.

An agent may:

* **read and execute** everything but the denied paths (plus, inside the private dir, the shared environments and
  the hooks' policy cache, and the scripted agent's recipe);
* **write** its worktree, its worktree's admin dir (``$GIT_COMMON_DIR/worktrees/<name>/``: ``HEAD``, ``index``,
  logs), the object database (``$GIT_COMMON_DIR/objects/``), its own ``TMPDIR``, its host's own paths
  (``[hosts.<name>] writable``: ``~/.claude``...), ``[sandbox] writable``, and the terminal and null devices.

Everything else -- refs and ``packed-refs``, ``config``, ``hooks/``, ``info/``, other worktrees and their admin dirs,
``$GIT_COMMON_DIR/agentops/``, the clean checkouts, the trust store -- is the kernel's to refuse (``EACCES``). Names
created later inside a split directory are not covered (a new file in ``~`` is neither readable nor writable by
the agent); that is the price of carving, and the reason host paths are listed explicitly.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .spec import AccessWord, Rule

RW_DEVICES: Final = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx", "/dev/pts", "/dev/shm")  # noqa: S108
READ: Final[tuple[AccessWord, ...]] = ("read", "execute")
WRITE: Final[tuple[AccessWord, ...]] = ("read", "write", "execute")


def _real(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.realpath(path))


def _under(path: Path, root: Path) -> bool:
    return _within(str(path), str(root))


def _within(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or beneath it (both absolute and normalised: plain string work, no Path)."""
    return path == root or path.startswith(root if root.endswith("/") else root + "/")


def cover(
    roots: Iterable[str | os.PathLike[str]], denied: Iterable[str | os.PathLike[str]]
) -> tuple[list[Path], list[Path]]:
    """(granted, split): paths whose subtrees together hold everything under ``roots`` but nothing under
    ``denied``, and the directories that had to be split to leave the denied ones out (symlinks in a split
    directory are skipped: what they point at is granted, or not, where it lives)."""
    refused = sorted({str(_real(d)) for d in denied})
    granted: list[Path] = []
    split: list[Path] = []

    def walk(path: str) -> None:
        if any(_within(path, d) for d in refused):
            return
        if not any(_within(d, path) for d in refused):
            granted.append(Path(path))
            return
        split.append(Path(path))
        try:
            with os.scandir(path) as found:
                entries = sorted((e.name, e.path) for e in found if not e.is_symlink())
        except OSError:
            return
        for _name, child in entries:
            walk(child)

    for root in sorted({str(_real(r)) for r in roots}):
        if os.path.lexists(root):
            walk(root)
    return granted, split


def expand(path: str, environ: Mapping[str, str]) -> Path:
    """``~`` and ``$VAR`` of a policy path, against the given environment (never this process's)."""
    home = environ.get("HOME") or "/"
    text = home + path[1:] if path == "~" or path.startswith("~/") else path
    for name, value in sorted(environ.items(), key=lambda item: -len(item[0])):
        text = text.replace("${" + name + "}", value).replace("$" + name, value)
    return Path(text)


@dataclass(frozen=True, slots=True)
class Places:
    """Where one worker's things are (absolute paths)."""

    worktree: Path
    admin_dir: Path
    common_dir: Path
    tmpdir: Path
    private_dir: Path  # $GIT_COMMON_DIR/agentops
    verify_root: Path  # the supervisor's clean checkouts (and their cache root): never writable
    trust_dir: Path  # $XDG_STATE_HOME/git-agentops
    signing_key: Path | None  # agentops.signingKey, when set
    readable_private: tuple[Path, ...] = ()  # inside private_dir: shared environments, the hooks' policy cache
    readable_files: tuple[Path, ...] = ()  # single files to grant reading (the scripted agent's recipe)


def denied_reads(places: Places, extra: Sequence[Path] = ()) -> list[Path]:
    """What no agent may read: the signing key's directory, the trust store, the private dir, ``extra``."""
    denied = [places.private_dir, places.trust_dir, *extra]
    if places.signing_key is not None:
        key = _real(places.signing_key)
        needed = (_real(places.worktree), _real(places.common_dir))
        # its directory, unless the agent's own work lives there (then only the key: doctor warns)
        denied.append(key if any(_under(path, key.parent) for path in needed) else key.parent)
    return denied


def agent_rules(
    places: Places, *, own: Sequence[Path], writable: Sequence[Path] = (), deny_read: Sequence[Path] = ()
) -> list[Rule]:
    """The rules of one agent (see the module docstring): it reads all but what is denied, and writes its ``own``
    paths (a worker: its worktree, admin dir, the object database, its TMPDIR; a reviewer: its scratch dir) and
    ``writable`` but for what lies in a denied or supervisor's place."""
    denied = denied_reads(places, deny_read)
    readable, _split = cover(["/"], denied)  # a split directory gets no rule: "list" would be inherited
    rules = [Rule(str(p), READ) for p in readable]
    rules += [Rule(str(p), READ) for p in (*places.readable_private, *places.readable_files) if os.path.lexists(p)]
    not_writable = [*denied, places.verify_root, places.private_dir, places.trust_dir]
    granted, _ = cover(writable, not_writable)  # a policy's ~/.cache must not reach the clean checkouts in it
    rules += [Rule(str(p), WRITE) for p in (*own, *granted)]  # own: chosen by the supervisor (a reviewer's is
    # its scratch dir inside a clean checkout)
    rules += [Rule(device, ("read", "write")) for device in RW_DEVICES if os.path.exists(device)]
    return rules
