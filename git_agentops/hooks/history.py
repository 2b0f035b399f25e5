"""History a push must never lose: the integration target, and the notes that say what was integrated.

A receipt is a note on an integrated commit of the target, so the target and the receipts, delivery and evidence
notes are the history a push can lose. ``pre-receive`` on a shared server (and ``pre-push`` on the pusher's side,
where it can tell) refuses, whatever ``--force`` says:

* a **protected target** -- the integration target the policy names, committed at the old or the new tip -- that
  does not move forward: an update whose old tip is not an ancestor of the new one is ``HOOK_TARGET_REWOUND``.
  Refusing every non-fast-forward is simpler than asking which dropped commit carried a receipt, and it is sound:
  the toolkit only ever publishes a candidate built on the tip it replaces. Deleting the target is
  ``HOOK_REF_DELETE`` (git's own ``receive.denyDeleteCurrent`` guards only the branch the server's HEAD names);
* a notes ref of receipts, delivery records or evidence whose new tree **drops or rewrites a note** the old one
  had: ``HOOK_NOTES_REWRITTEN``. A fast-forward proves nothing about content -- a commit may delete a note -- so
  the old and new trees are compared as sets of (annotated object -> note blob), the fan-out flattened first (git
  lays the same notes out flat, ``ab/cdef...`` or ``ab/cd/ef...`` as their number grows). A receipt is
  create-only: its blob never changes. A delivery or evidence note is append-only: the new one starts with the
  old one's bytes.

Deleting agentops refs, moving a delivery, moving state, journals or notes backwards are
:func:`~git_agentops.gitstore.refnames.namespace_rule`'s, which ``pre-receive`` runs too. What no server hook can
judge is whether a run-state commit is a supervisor's: the server has no MAC key. A supervisor that fetches a state
it cannot authenticate quarantines it instead (:mod:`git_agentops.gitstore.sync`, :mod:`git_agentops.runs.tamper`).

Only git plumbing here (``ls-tree``, ``cat-file``, ``merge-base``), through :func:`.where.git`: no pygit2.
"""

from __future__ import annotations

from ..gitstore.refnames import ZERO_OID as ZERO
from .where import Where, blobs, git

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Final

CREATE_ONLY: Final = frozenset({"refs/notes/agentops/receipts"})
APPEND_ONLY: Final = frozenset({"refs/notes/agentops/deliveries", "refs/notes/agentops/evidence"})
SHOWN: Final = 5


def _is_ancestor(where: Where, old: str, new: str) -> bool:
    return git(where, ["merge-base", "--is-ancestor", old, new])[0] == 0


def target_refusals(where: Where, ref: str, old: str, new: str) -> list[tuple[str, str]]:
    """The rules of a protected target's update from ``old`` to ``new`` (all zeros: absent): never deleted, only
    moved forward. ``old`` must be an object the repository has."""
    if new == ZERO:
        return [
            (
                "HOOK_REF_DELETE",
                f"{ref} is the integration target: it is never deleted (its commits carry the receipts); "
                "push a new branch for other work",
            )
        ]
    if old not in (ZERO, new) and not _is_ancestor(where, old, new):
        return [
            (
                "HOOK_TARGET_REWOUND",
                f"{ref} only moves forward: {old[:12]} is not an ancestor of {new[:12]}, so this push would drop "
                "commits of the integration target (and the receipted integrations among them), --force or not; "
                f"fetch, build on {old[:12]} and push again",
            )
        ]
    return []


def note_map(where: Where, commit: str) -> dict[str, frozenset[str]] | None:
    """The notes of a notes commit as {annotated object: its note blob ids}, whatever the fan-out (``ab/cdef...``
    and ``abcdef...`` are one key; two entries for one object give two ids). None when it cannot be read."""
    status, out = git(where, ["ls-tree", "-r", "-z", "--full-tree", commit])
    if status != 0:
        return None
    found: dict[str, set[str]] = {}
    for record in out.split(b"\0"):
        meta, tab, path = record.partition(b"\t")
        parts = meta.split()
        if not tab or len(parts) != 3:
            continue
        key = path.decode("utf-8", errors="replace").replace("/", "")
        found.setdefault(key, set()).add(parts[2].decode("ascii", errors="replace"))
    return {key: frozenset(ids) for key, ids in found.items()}


def lost_notes(
    where: Where, before: dict[str, frozenset[str]], after: dict[str, frozenset[str]], *, append_only: bool
) -> tuple[list[str], list[str]]:
    """(objects whose note ``after`` drops, objects whose note it rewrites). An append-only note may grow: a new
    note that starts with the old one's bytes is no rewrite."""
    dropped = sorted(key for key in before if key not in after)
    changed = sorted(key for key, ids in before.items() if key in after and after[key] != ids)
    if not append_only or not changed:
        return dropped, changed
    single = [k for k in changed if len(before[k]) == 1 and len(after[k]) == 1]
    contents = blobs(where, [oid for k in single for oid in (*before[k], *after[k])])
    grown = {
        key
        for key, old, new in zip(single, contents[0::2], contents[1::2], strict=True)
        if old is not None and new is not None and new.startswith(old)
    }
    return dropped, [key for key in changed if key not in grown]


def notes_refusals(where: Where, updates: Sequence[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """``HOOK_NOTES_REWRITTEN`` for each (ref, old, new) update of a receipts, deliveries or evidence notes ref
    whose new tree drops or rewrites a note of the old one; ``HOOK_FAILED`` when a tree cannot be read (fail
    closed). Creation and deletion are not judged here (:func:`~git_agentops.gitstore.refnames.namespace_rule`)."""
    refusals: list[tuple[str, str]] = []
    for ref, old, new in updates:
        if ref not in CREATE_ONLY | APPEND_ONLY or ZERO in (old, new) or old == new:
            continue
        before, after = note_map(where, old), note_map(where, new)
        if before is None or after is None:
            refusals.append(("HOOK_FAILED", f"cannot read the notes of {ref} at {old[:12]} or {new[:12]}; refusing"))
            continue
        dropped, rewritten = lost_notes(where, before, after, append_only=ref in APPEND_ONLY)
        if not dropped and not rewritten:
            continue
        what = []
        if dropped:
            what.append(f"drops the note of {len(dropped)} object(s) ({', '.join(k[:12] for k in dropped[:SHOWN])})")
        if rewritten:
            what.append(f"rewrites the note of {len(rewritten)} ({', '.join(k[:12] for k in rewritten[:SHOWN])})")
        rule = "delivery and evidence notes only grow" if ref in APPEND_ONLY else "a receipt never changes"
        refusals.append(
            (
                "HOOK_NOTES_REWRITTEN",
                f"{ref} at {new[:12]} {' and '.join(what)} that the server's {old[:12]} holds: {rule} and no note "
                "is ever removed. Fetch first ('git agentops-sync fetch' merges the notes, keeping every one); a "
                "note the server holds is never replaced through a push, not even by a value it had before",
            )
        )
    return refusals
