"""Moving run state between a repository and a remote with compare-and-swap: the Git server is the shared store.

What moves (:data:`NAMESPACES`): every run's refs (``refs/agentops/runs/*``: state, policy, journals, deliveries,
candidate), the workers' branches (``refs/heads/agentops/*``) and the agentops notes (``refs/notes/agentops/*``).

* :func:`fetch` copies the remote's values into a mirror namespace, ``refs/agentops-sync/<remote>/...`` (never into
  the refs themselves), then brings each local ref up to date: a missing one is created, one the remote is ahead
  of is fast-forwarded -- both by CAS on the value read -- and one that diverged is **reported, never forced**
  (:class:`Outcome`). Notes refs that diverged are **merged**: notes are per object, so the union of the two
  fan-out trees is conflict-free, except for one object with two different notes -- for an append-only ref
  (evidence, deliveries) a note that extends the other is taken whole, otherwise it is a real conflict: the local
  note stays, the remote one is kept aside under ``refs/agentops-sync/<remote>/conflicts/...`` and reported.
  **A fetch never drops a local note**: when the remote is ahead but its notes lack one of ours, or hold another
  value for it (a receipt rewritten, an append-only note cut short), the two are merged instead of
  fast-forwarded -- the local note stays -- and the objects are reported (:attr:`Outcome.kept`). A server running
  our ``pre-receive`` refuses such a push (:mod:`git_agentops.hooks.history`); this holds against one that was
  written some other way.
* **Run state this repository cannot authenticate is quarantined, never adopted.** The journals of a run (state,
  policy binding, transition journals) carry a MAC made with the key the team's machines share
  (:mod:`.events`); a server has no key and cannot tell a forged state commit from a supervisor's. So when the
  local journal is authentic and the remote's tip is not, the remote's tip is kept under
  ``refs/agentops-quarantine/<remote>/runs/<run>/<journal>/<commit>`` and reported (:attr:`Outcome.quarantined`;
  the ref is ``quarantined``), and the local ref stays where it was -- whether the forged commit sits on top of it
  or not: a push never forces over it either.
  The supervisor then goes on from its own state (:func:`git_agentops.runs.tamper.supersede`). A repository
  without a key (one that never ran anything) cannot judge, and a journal that is new here is taken as it is.
* :func:`push` sends every local ref the remote does not have or is behind on (and a rebuilt candidate,
  :data:`CAS_ONLY`) in **one atomic push** with the expected old value of each
  (``--force-with-lease=<ref>:<expected>``; never a plain force). When the remote moved meanwhile the push is
  refused as a whole: fetch (merging the notes), push again -- a bounded number of times.

Remote operations run the person's own git (their SSH and credential configuration), with no fsmonitor, in its
own process group: past the timeout, **nothing git started is left alive** (a hung ``ssh`` transport, git's ``-G``
probe of it). An unreachable remote is ``SYNC_REMOTE_UNREACHABLE``, a server hook's refusal ``SYNC_PUSH_REFUSED``
with the server's own message; both leave every ref as it was.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pygit2

from ..errors import AgentOpsError, RemoteMoved
from ..process.command import run_command
from .events import is_authentic
from .keys import has_key
from .refnames import RefConflict, check_component
from .refs import RefUpdate, list_refs, read_ref, try_update_refs, update_ref
from .repo import Store

NAMESPACES: Final = ("refs/agentops/runs/", "refs/heads/agentops/", "refs/notes/agentops/")
APPEND_ONLY: Final = frozenset({"refs/notes/agentops/evidence", "refs/notes/agentops/deliveries"})
NOTES_KEPT: Final = APPEND_ONLY | {"refs/notes/agentops/receipts"}
"""Notes a fetch never drops nor lets the remote rewrite: receipts (create-only), evidence and deliveries."""
MIRROR: Final = "refs/agentops-sync/"
QUARANTINE: Final = "refs/agentops-quarantine/"
JOURNALS: Final = re.compile(r"refs/agentops/runs/[^/]+/(state|policy|journal/[^/]+)")
"""The run refs that are journals: commit chains whose every commit carries the toolkit's MAC."""
CAS_ONLY: Final = ("/candidate",)
"""Refs that move by compare-and-swap but not only forward (an integration candidate rebuilt on a moved target):
pushed over the value last seen on the remote, with that value as the lease -- never blindly."""
TIMEOUT: Final = 300.0
_UNREACHABLE: Final = re.compile(
    r"could not read from remote|does not appear to be a git repository|unable to access|could not resolve|"
    r"connection (refused|timed out)|no such file or directory|repository .* not found|host key verification",
    re.IGNORECASE,
)


def mirror_prefix(remote: str) -> str:
    """Where the remote's values are mirrored: ``refs/agentops-sync/<remote>/``."""
    return f"{MIRROR}{check_component(remote, 'remote name')}/"


def quarantine_ref(remote: str, ref: str, commit: str) -> str:
    """Where a journal tip of ``remote`` that this repository cannot authenticate is kept:
    ``refs/agentops-quarantine/<remote>/runs/<run>/state/<commit>`` for ``refs/agentops/runs/<run>/state``."""
    return f"{QUARANTINE}{check_component(remote, 'remote name')}/{ref.removeprefix('refs/agentops/')}/{commit}"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one sync did to each ref: ``created``, ``fast-forwarded``, ``merged`` (notes), ``pushed``, ``up to
    date``, ``diverged`` (reported, not forced) or ``conflict`` (two different notes for one object; both kept)."""

    refs: Mapping[str, str] = field(default_factory=dict)
    conflicts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # notes ref -> annotated objects
    attempts: int = 1
    quarantined: Mapping[str, str] = field(default_factory=dict)
    """Journal ref -> the remote's tip, which this repository cannot authenticate (kept under
    :func:`quarantine_ref`, not adopted)."""
    kept: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Notes ref -> annotated objects whose local note the remote, though ahead, dropped or rewrote (kept)."""

    def to_json(self) -> dict[str, object]:
        """The ``sync --json`` document's body."""
        return {
            "refs": dict(sorted(self.refs.items())),
            "conflicts": {ref: list(objects) for ref, objects in sorted(self.conflicts.items())},
            "quarantined": dict(sorted(self.quarantined.items())),
            "kept": {ref: list(objects) for ref, objects in sorted(self.kept.items())},
            "attempts": self.attempts,
        }


def _git(store: Store, *args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    """``git <args>`` in its own process group, with the person's environment: past ``timeout``, once nothing of
    it is alive, ``SYNC_REMOTE_UNREACHABLE`` (``PROCESS_SURVIVED_KILL`` if SIGKILL cannot end it; ``GIT_FAILED``)."""
    argv = ["git", "-c", "core.fsmonitor=false", *args]
    done = run_command(
        argv,
        cwd=store_root(store),
        env=None,
        timeout=timeout,
        grace=1.0,  # from SIGTERM to SIGKILL: git and ssh obey SIGTERM at once
        output_cap=64 << 20,  # bytes of stdout and of stderr kept: far beyond any porcelain
        clock=store.clock,
        merge_stderr=False,
    )
    if done.spawn_error is not None:
        raise AgentOpsError("GIT_FAILED", f"cannot run git: {done.spawn_error}")
    if done.timed_out:
        raise AgentOpsError("SYNC_REMOTE_UNREACHABLE", f"git {args[0]} timed out after {timeout:g}s")
    code = done.exit_code if done.exit_code is not None else -(done.signal or 0)
    out, err = (data.decode("utf-8", "replace") for data in (done.output, done.error_output))
    return subprocess.CompletedProcess(argv, code, out, err)


def _remote_error(done: subprocess.CompletedProcess[str], what: str) -> AgentOpsError:
    text = (done.stderr or done.stdout).strip()
    code = "SYNC_REMOTE_UNREACHABLE" if _UNREACHABLE.search(text) else "GIT_FAILED"
    return AgentOpsError(code, f"{what} failed: {text[-2000:] or f'exit status {done.returncode}'}")


def store_root(store: Store) -> Path:
    """Where remote git commands run: the work tree's top, where the person's own ``git fetch`` runs -- so a remote
    whose URL is a relative path (``git remote add origin ../server.git``) means what it means to them -- or the git
    dir of a bare repository."""
    return store.workdir if store.workdir is not None else store.git_dir


def mirror(
    store: Store, remote: str, namespaces: Sequence[str] = NAMESPACES, *, timeout: float = TIMEOUT
) -> dict[str, str]:
    """Fetch the remote's values of ``namespaces`` into the mirror; returns them, by the remote's ref names."""
    prefix = mirror_prefix(remote)
    specs = [f"+{n}*:{prefix}{n[len('refs/') :]}*" for n in namespaces]
    argv = ["fetch", "--no-tags", "--no-write-fetch-head", "--prune", remote, *specs]
    done = _git(store, *argv, timeout=timeout)
    if done.returncode != 0:
        error = _remote_error(done, f"git fetch {remote}")
        if store.config_value(f"remote.{remote}.url") is None:  # the likeliest cause, said first
            error = AgentOpsError(
                error.code,
                f"no remote {remote!r} is configured in this repository ('git remote add {remote} URL', or name "
                f"another with --remote / [run] remote); {error.message}",
            )
        raise error
    found = list_refs(store, prefix)
    # only what was asked for: the mirror also holds what earlier fetches of other namespaces left there (the
    # target's tip a run fetched), and a caller adopting everything returned would move a branch it never asked
    # about -- a checked-out target, whose checkout would then show the move reversed
    asked = tuple(n[len("refs/") :] for n in namespaces)
    return {
        "refs/" + name[len(prefix) :]: oid
        for name, oid in found.items()
        if name[len(prefix) :].startswith(asked) and not name[len(prefix) :].startswith("conflicts/")
    }


def _ancestor(repo: pygit2.Repository, old: str, new: str) -> bool:
    """Whether ``old`` is ``new`` or one of its ancestors."""
    try:
        return old == new or bool(repo.descendant_of(new, old))
    except (pygit2.GitError, KeyError, ValueError):
        return False


def fetch(store: Store, remote: str, namespaces: Sequence[str] = NAMESPACES, *, timeout: float = TIMEOUT) -> Outcome:
    """Bring the local refs up to date with the remote (see the module docstring); ``timeout`` bounds each git
    process (``SYNC_REMOTE_UNREACHABLE`` past it)."""
    return adopt(store, remote, mirror(store, remote, namespaces, timeout=timeout))


def adopt(store: Store, remote: str, theirs: Mapping[str, str]) -> Outcome:
    """Bring the local refs named in ``theirs`` (the remote's values, as :func:`mirror` returned them) up to date:
    created, fast-forwarded, notes merged, a forged journal tip quarantined, or reported diverged. No network.
    ``KEY_INVALID`` for a damaged key file."""
    outcome: dict[str, str] = {}
    conflicts: dict[str, tuple[str, ...]] = {}
    quarantined: dict[str, str] = {}
    kept: dict[str, tuple[str, ...]] = {}
    repo = store.repo
    for name, tip in sorted(theirs.items()):
        mine = read_ref(store, name)
        if mine == tip or (mine is not None and _ancestor(repo, tip, mine)):
            outcome[name] = "up to date"
            continue
        if mine is not None and JOURNALS.fullmatch(name) and _forged(store, name, mine, tip):
            _keep_aside(store, quarantine_ref(remote, name, tip), tip, f"agentops-sync: quarantined from {remote}")
            outcome[name], quarantined[name] = "quarantined", tip
            continue
        ahead = mine is None or _ancestor(repo, mine, tip)
        lost = _lost_notes(store, name, mine, tip) if ahead and mine is not None and name in NOTES_KEPT else ()
        if ahead and not lost:
            if name.startswith("refs/agentops/runs/") and "/deliveries/" in name and mine is not None:
                outcome[name] = "diverged"  # a frozen delivery never moves
                continue
            try:
                try_update_refs(store, [RefUpdate(name, tip, mine)], f"agentops-sync: from {remote}")
            except RefConflict:
                outcome[name] = "diverged"  # moved under us: the next sync judges again
                continue
            outcome[name] = "created" if mine is None else "fast-forwarded"
        elif name.startswith("refs/notes/agentops/"):
            assert mine is not None
            merged, clashes = merge_notes(store, name, mine, tip, remote)
            outcome[name] = "merged" if merged else "diverged"
            if clashes:
                conflicts[name] = clashes
            if lost:
                kept[name] = lost
        else:
            outcome[name] = "diverged"
    return Outcome(outcome, conflicts, quarantined=quarantined, kept=kept)


def _forged(store: Store, ref: str, mine: str, theirs: str) -> bool:
    """Whether the local journal tip ``mine`` is authentic and the remote's ``theirs`` is not."""
    if not has_key(store.private_dir()):
        return False  # never wrote a journal here: nothing to judge with (and no key is made for it)
    local: object = store.repo.get(mine)
    remote: object = store.repo.get(theirs)
    if not isinstance(local, pygit2.Commit) or not isinstance(remote, pygit2.Commit):
        return False
    return is_authentic(store, ref, local) and not is_authentic(store, ref, remote)


def _keep_aside(store: Store, ref: str, commit: str, message: str) -> None:
    """Create ``ref`` at ``commit`` unless it exists (it then holds the same commit: the name ends with it)."""
    try:
        update_ref(store, ref, commit, None, message)
    except RefConflict:
        pass


# -- notes ------------------------------------------------------------------------------------------------------------


def _note_map(repo: pygit2.Repository, tree: pygit2.Tree, prefix: str = "") -> dict[str, pygit2.Oid]:
    """Annotated object hex -> note blob id, at any fan-out depth."""
    out: dict[str, pygit2.Oid] = {}
    for entry in tree:
        name = entry.name or ""
        if entry.type_str == "tree":
            sub = repo.get(entry.id)
            assert isinstance(sub, pygit2.Tree)
            out.update(_note_map(repo, sub, prefix + name))
        else:
            out[prefix + name] = entry.id
    return out


def _subtrees(tree: pygit2.Tree) -> dict[str, pygit2.Object]:
    return {entry.name or "": entry for entry in tree}


def _differing(
    repo: pygit2.Repository, mine: str, theirs: str
) -> tuple[dict[str, pygit2.Oid], dict[str, pygit2.Oid], dict[str, pygit2.Oid]]:
    """The notes of two notes commits as (the notes under the top-level entries both share, the local notes under
    the others, the remote's under the others). Only the fan-out directories that differ are opened past the
    root (or flattened: a note may sit flat on one side and in the fan-out on the other -- both are compared)."""
    local: object = repo.get(mine)
    other: object = repo.get(theirs)
    assert isinstance(local, pygit2.Commit) and isinstance(other, pygit2.Commit)
    ours, remote_tree = _subtrees(local.tree), _subtrees(other.tree)
    same: dict[str, pygit2.Oid] = {}
    mine_notes: dict[str, pygit2.Oid] = {}
    their_notes: dict[str, pygit2.Oid] = {}
    for name in sorted(set(ours) | set(remote_tree)):
        a, b = ours.get(name), remote_tree.get(name)
        if a is not None and b is not None and a.id == b.id:
            same.update(_flatten(repo, a, name))
            continue
        if a is not None:
            mine_notes.update(_flatten(repo, a, name))
        if b is not None:
            their_notes.update(_flatten(repo, b, name))
    return same, mine_notes, their_notes


def _lost_notes(store: Store, ref: str, mine: str, theirs: str) -> tuple[str, ...]:
    """The objects whose note in ``mine`` the notes commit ``theirs`` lacks or holds another value for (for an
    append-only ref, a note that extends the local one is no loss)."""
    repo = store.repo
    _, mine_notes, their_notes = _differing(repo, mine, theirs)
    lost = []
    for hexid, x in sorted(mine_notes.items()):
        y = their_notes.get(hexid)
        if y is None or (y != x and not (ref in APPEND_ONLY and _extension(repo, x, y) == y)):
            lost.append(hexid)
    return tuple(lost)


def merge_notes(store: Store, ref: str, mine: str, theirs: str, remote: str) -> tuple[bool, tuple[str, ...]]:
    """Merge the remote's notes commit ``theirs`` into the local notes ref at ``mine``: a two-parent notes commit
    whose tree is the union (see the module docstring), by CAS. Returns (merged, objects in conflict).

    Only the fan-out directories that differ are opened: two sides with 10,000 notes each that share most of them
    cost one read of each differing directory. A local note is never dropped: one the remote lacks stays, and one
    it holds another value for stays too (the remote's kept aside), unless an append-only remote note extends it.
    """
    repo = store.repo
    append_only = ref in APPEND_ONLY
    clashes: list[str] = []
    kept_aside: dict[str, pygit2.Oid] = {}
    notes, mine_notes, their_notes = _differing(repo, mine, theirs)
    for hexid in sorted(set(mine_notes) | set(their_notes)):
        x, y = mine_notes.get(hexid), their_notes.get(hexid)
        if x is None or y is None or x == y:
            found = x if x is not None else y
            assert found is not None
            notes[hexid] = found
            continue
        taken = _extension(repo, x, y) if append_only else None
        if taken is not None:
            notes[hexid] = taken
        else:
            notes[hexid] = x
            kept_aside[hexid] = y
            clashes.append(hexid)
    tree = _fanout_tree(repo, notes)
    signature = store.signature()
    message = f"Notes merged from {remote} by git-agentops sync" + (
        f"\n\n{len(clashes)} conflicting note(s) kept aside under {mirror_prefix(remote)}conflicts/\n"
        if clashes
        else "\n"
    )
    parents = [pygit2.Oid(hex=mine), pygit2.Oid(hex=theirs)]
    commit = repo.create_commit(None, signature, signature, message, tree, parents)
    if kept_aside:
        aside_tree = _fanout_tree(repo, kept_aside)
        aside_ref = f"{mirror_prefix(remote)}conflicts/{ref[len('refs/notes/') :]}"
        parent = read_ref(store, aside_ref)
        aside = repo.create_commit(
            None,
            signature,
            signature,
            f"Conflicting notes of {ref} from {remote}\n",
            aside_tree,
            [parent] if parent else [],
        )
        try_update_refs(store, [RefUpdate(aside_ref, aside, parent)], "agentops-sync: conflicting notes kept aside")
    try:
        try_update_refs(store, [RefUpdate(ref, commit, mine)], f"agentops-sync: notes merged from {remote}")
    except RefConflict:
        return False, tuple(clashes)
    return True, tuple(clashes)


def _flatten(repo: pygit2.Repository, entry: pygit2.Object, name: str) -> dict[str, pygit2.Oid]:
    if entry.type_str == "tree":
        sub = repo.get(entry.id)
        assert isinstance(sub, pygit2.Tree)
        return _note_map(repo, sub, name)
    return {name: entry.id}


def _extension(repo: pygit2.Repository, x: pygit2.Oid, y: pygit2.Oid) -> pygit2.Oid | None:
    """For append-only notes: the one of two notes that extends the other (records are only ever appended)."""
    a: object = repo.get(x)
    b: object = repo.get(y)
    assert isinstance(a, pygit2.Blob) and isinstance(b, pygit2.Blob)
    if b.data.startswith(a.data):
        return y
    if a.data.startswith(b.data):
        return x
    return None


def _fanout_tree(repo: pygit2.Repository, notes: Mapping[str, pygit2.Oid]) -> pygit2.Oid:
    """A notes tree with git's 2/38 fan-out."""
    groups: dict[str, dict[str, pygit2.Oid]] = {}
    for hexid, blob in notes.items():
        groups.setdefault(hexid[:2], {})[hexid[2:]] = blob
    root = repo.TreeBuilder()
    for prefix, entries in sorted(groups.items()):
        sub = repo.TreeBuilder()
        for name, blob in sorted(entries.items()):
            sub.insert(name, blob, pygit2.enums.FileMode.BLOB)
        root.insert(prefix, sub.write(), pygit2.enums.FileMode.TREE)
    return root.write()


# -- push -------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    """One ref to push: the local value, and the value the remote must still hold (None: it must not exist)."""

    ref: str
    new: str
    expected: str | None


def push_atomic(store: Store, remote: str, sends: Iterable[Send], *, timeout: float = TIMEOUT) -> dict[str, str]:
    """One atomic push of ``sends``, each with its lease; {ref: status} (``ok``). ``SYNC_REMOTE_MOVED`` when a
    lease failed -- here, or in the server's own compare-and-swap of a ref another push moved an instant before --
    (nothing was pushed), ``SYNC_PUSH_REFUSED`` with the server's message when a hook refused it,
    ``SYNC_REMOTE_UNREACHABLE``."""
    sends = list(sends)
    if not sends:
        return {}
    leases = [f"--force-with-lease={s.ref}:{s.expected or ''}" for s in sends]
    specs = [f"{s.new}:{s.ref}" for s in sends]
    argv = ["push", "--atomic", "--porcelain", "--no-verify", *leases, remote, *specs]
    done = _git(store, *argv, timeout=timeout)
    statuses = _porcelain(done.stdout)
    if done.returncode == 0:
        return {ref: "ok" for ref in statuses} or {s.ref: "ok" for s in sends}
    text = (done.stderr + done.stdout).strip()
    lost = ("stale info", "fetch first", "non-fast-forward", "failed to lock", "failed to update ref")
    if any(any(m in why for m in lost) for why in statuses.values()) or "cannot lock ref" in done.stderr:
        raise AgentOpsError(
            "SYNC_REMOTE_MOVED",
            f"{remote} moved meanwhile; nothing was pushed: "
            + "; ".join(f"{ref} {why}" for ref, why in statuses.items() if why != "ok"),
            details={"refs": statuses},
        )
    server = [line[len("remote: ") :] for line in done.stderr.splitlines() if line.startswith("remote: ")]
    if server or any("hook declined" in why for why in statuses.values()):
        raise AgentOpsError(
            "SYNC_PUSH_REFUSED",
            f"{remote} refused the push; nothing was changed there: " + (" / ".join(server) or text[-2000:]),
            details={"server": server, "refs": statuses},
        )
    raise _remote_error(done, f"git push {remote}")


def _porcelain(stdout: str) -> dict[str, str]:
    """``git push --porcelain``: ref -> ``ok`` or the reason in parentheses."""
    out = {}
    for line in stdout.splitlines():
        parts = line.split("\t")
        if len(parts) >= 2 and len(parts[0]) == 1 and ":" in parts[1]:
            ref = parts[1].split(":", 1)[1]
            reason = parts[2] if len(parts) > 2 else ""
            out[ref] = "ok" if parts[0] in "*+-= " else reason.strip("()") or "rejected"
    return out


def push(
    store: Store,
    remote: str,
    namespaces: Sequence[str] = NAMESPACES,
    *,
    attempts: int = 5,
    timeout: float = TIMEOUT,
) -> Outcome:
    """Send what the remote lacks (see the module docstring); a remote that moved is fetched and merged first."""
    outcome: dict[str, str] = {}
    conflicts: dict[str, tuple[str, ...]] = {}
    quarantined: dict[str, str] = {}
    kept: dict[str, tuple[str, ...]] = {}
    for attempt in range(1, attempts + 1):
        fetched = fetch(store, remote, namespaces, timeout=timeout)
        conflicts.update(fetched.conflicts)
        quarantined.update(fetched.quarantined)
        kept.update(fetched.kept)
        theirs = {
            "refs/" + k[len(mirror_prefix(remote)) :]: v for k, v in list_refs(store, mirror_prefix(remote)).items()
        }
        sends, outcome = [], {}
        for name, mine in sorted(_local(store, namespaces).items()):
            remote_value = theirs.get(name)
            if remote_value == mine:
                outcome[name] = "up to date"
            elif remote_value is None or _ancestor(store.repo, remote_value, mine) or name.endswith(CAS_ONLY):
                sends.append(Send(name, mine, remote_value))
            else:
                outcome[name] = fetched.refs.get(name, "diverged")
        try:
            for ref in push_atomic(store, remote, sends, timeout=timeout):
                outcome[ref] = "pushed"
        except RemoteMoved:
            if attempt < attempts:
                continue
            raise
        return Outcome(outcome, conflicts, attempt, quarantined, kept)
    raise AgentOpsError("SYNC_REMOTE_MOVED", f"{remote} kept moving: {attempts} pushes refused")


def _local(store: Store, namespaces: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for namespace in namespaces:
        out.update(list_refs(store, namespace))
    return out
