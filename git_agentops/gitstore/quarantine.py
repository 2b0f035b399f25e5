"""Each agent's object quarantine: agents append objects; only the supervisor puts them in the shared store.

A Landlock write grant includes delete, so an agent that may write ``$GIT_COMMON_DIR/objects`` may also empty it --
``rm -rf objects/pack``, ``git gc --prune=now``, ``git repack -ad`` in a worktree -- and every ref of the repository
then names an object that is gone. So agents never write the shared store. As git's own receive-pack does with a
push (``tmp_objdir``, the "quarantine environment"), each worker gets a private object directory in its admin dir,
``$GIT_COMMON_DIR/worktrees/<name>/agentops-objects``, and its processes run with::

    GIT_OBJECT_DIRECTORY=<that dir>
    GIT_ALTERNATE_OBJECT_DIRECTORIES=$GIT_COMMON_DIR/objects

Its git writes new objects (commits, trees, blobs, merge results) into the quarantine and reads everything else
through the alternate, which the sandbox grants read-only. An agent that unsets the variables, gcs, repacks or
deletes files can only break its own later commands: the shared store is never its to change.

The supervisor moves objects across when it takes the agent's work (:func:`ingest`, called wherever it reads a
worker's HEAD: :func:`~git_agentops.gitstore.worktree.head_of`). It copies exactly the objects reachable from the
commit that the shared store lacks, each **re-hashed on the way** (``odb.write`` computes the id from the content),
so an object file the agent forged under another name is refused (``OBJECT_MISSING``), never stored. Objects are
written dependencies first -- blobs and subtrees before their tree, parents before their commit -- so an object
present in the shared store always has everything it refers to there too, and a copy cut short by ``kill -9``
leaves only unreferenced objects that the next ingest reuses. The supervisor's own git in a worker worktree (status,
rev-parse) reads the quarantine as an extra alternate (:func:`reader_alternates`): reading, never trusting.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ..errors import AgentOpsError

if TYPE_CHECKING:  # pygit2 only where objects are copied: the supervisor's git status in a worktree needs none of it
    import pygit2

    from .repo import Store

DIRNAME: Final = "agentops-objects"
"""The quarantine's name inside a worktree's admin dir."""

MAX_OBJECTS: Final = 2_000_000
"""More objects than this in one delivery is refused rather than copied without end."""
COMMIT, TREE, TAG = 1, 2, 4
"""Git's object type numbers (libgit2's ``git_object_t``, what ``Odb.read`` returns)."""


def quarantine_dir(admin: Path) -> Path:
    """Where the agent of the worktree whose admin dir is ``admin`` writes its objects."""
    return admin / DIRNAME


def prepare(admin: Path) -> Path:
    """Create the quarantine (an object directory: ``info/`` and ``pack/``) if needed; returns it.

    A symlink or a non-directory the agent put in its place is removed first (never followed).
    """
    path = quarantine_dir(admin)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    for sub in ("info", "pack"):
        (path / sub).mkdir(mode=0o755, parents=True, exist_ok=True)
    return path


def agent_environment(admin: Path, common_dir: Path) -> dict[str, str]:
    """The variables that make an agent's git write into its quarantine and read the shared store."""
    return {
        "GIT_OBJECT_DIRECTORY": str(quarantine_dir(admin)),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(common_dir / "objects"),
    }


def reader_alternates(admin: Path | None) -> dict[str, str]:
    """For the supervisor's git in a worker worktree: the quarantine as an alternate to read from (empty when the
    worktree has none)."""
    if admin is None:
        return {}
    path = quarantine_dir(admin)
    return {"GIT_ALTERNATE_OBJECT_DIRECTORIES": str(path)} if path.is_dir() and not path.is_symlink() else {}


def _children(obj_type: int, data: bytes) -> list[str]:
    """The ids an object refers to (tree entries, a commit's tree and parents, a tag's target)."""
    if obj_type == TREE:
        return _tree_entries(data)
    if obj_type in (COMMIT, TAG):
        found = []
        for line in data.split(b"\n\n", 1)[0].split(b"\n"):
            key, _, value = line.partition(b" ")
            if key in (b"tree", b"parent", b"object"):
                found.append(value.decode("ascii", errors="replace").strip())
        return found
    return []


def _tree_entries(data: bytes) -> list[str]:
    """The ids a raw tree names, gitlinks (mode 160000: another repository's commit) left out."""
    out, at, size = [], 0, len(data)
    while at < size:
        space = data.index(b" ", at)
        nul = data.index(b"\0", space)
        mode = data[at:space]
        raw = data[nul + 1 : nul + 21]
        if mode != b"160000":
            out.append(raw.hex())
        at = nul + 21
    return out


def ingest(store: Store, admin: Path, oid: str) -> bool:
    """Copy ``oid`` and everything it reaches that the shared store lacks from the quarantine of ``admin`` into the
    shared store, re-hashed. True when the store holds ``oid`` afterwards; False when the quarantine has no such
    object (or no quarantine exists). ``OBJECT_MISSING`` when an object file does not hash to its name or the
    delivery is incomplete -- nothing is stored for it.
    """
    import pygit2

    if store.has_object(oid):
        return True
    path = quarantine_dir(admin)
    if not path.is_dir() or path.is_symlink():
        return False
    try:
        source = pygit2.Odb(str(path))
    except pygit2.GitError:
        return False
    try:
        if pygit2.Oid(hex=oid) not in source:
            return False
    except ValueError:
        return False
    _copy(store, source, oid)
    return True


def _copy(store: Store, source: pygit2.Odb, root: str) -> None:
    """Post-order copy (dependencies first) of what ``root`` reaches and the store lacks."""
    import pygit2

    target = store.repo.odb
    stack: list[tuple[str, bool]] = [(root, False)]
    pending: dict[str, tuple[int, bytes]] = {}
    seen: set[str] = set()
    while stack:
        oid, expanded = stack.pop()
        if expanded:
            obj_type, data = pending.pop(oid)
            written = target.write(obj_type, data)
            if str(written) != oid:
                raise AgentOpsError("OBJECT_MISSING", f"object {oid} in the agent's quarantine is not what it names")
            continue
        if oid in seen or store.has_object(oid):
            continue
        seen.add(oid)
        if len(seen) > MAX_OBJECTS:
            raise AgentOpsError("OBJECT_MISSING", f"more than {MAX_OBJECTS} new objects under {root}")
        try:
            obj_type, data = source.read(oid)
        except (KeyError, ValueError, pygit2.GitError) as exc:
            raise AgentOpsError("OBJECT_MISSING", f"object {oid} (reached from {root}) is in no store") from exc
        pending[oid] = (int(obj_type), bytes(data))
        stack.append((oid, True))
        stack.extend((child, False) for child in _children(int(obj_type), bytes(data)) if child not in seen)


def size_on_disk(admin: Path) -> int:
    """Bytes under the quarantine (for status and cleanup decisions)."""
    total = 0
    for dirpath, _dirs, files in os.walk(quarantine_dir(admin)):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total
