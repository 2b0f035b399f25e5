"""Squashed deliveries (``[run] squash = true``): a task lands as one commit on its base, never as its attempts.

A repaired task's history holds the attempt that failed verification: merged as it is, that broken commit is an
ancestor of the target, and ``git bisect`` walks into it. With ``squash`` the supervisor delivers instead one
commit whose parent is the task's base (where its worker was provisioned: the run's start plus the frozen
deliveries of its dependencies) and whose tree is the handed-off commit's tree. It keeps the agent's authorship
(the last commit's author and date), takes the last commit's message and names in a closing paragraph every commit
it replaces and the commit handed off (``Agentops-Squashed-From:``); the supervisor is its committer. A task that
is already one commit on its base, and a no-change delivery, are delivered as they are.

**Why squash before verifying**, not verify the handed-off commit and then carry its evidence over to the squash by
tree equality: the clean checkout verification runs in has ``HEAD`` at the commit, so the commands can see its
history -- a version from ``git describe`` or setuptools-scm, a test reading ``git log`` -- and that history is what
squashing changes. Equal trees are not equal inputs. So :func:`squash` runs first and the squash is what is
verified, noted and frozen: every evidence record, the delivery note, the frozen ref, the receipt's source commit
name the exact commit that lands, and nothing else has to be argued. The records are also appended to the
handed-off commit's evidence note (:func:`mirror_evidence`), so whoever looks up the verification of what the worker
handed off -- the report, the failing lines of a refusal -- finds it there, each record still naming the commit it
verified.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import pygit2

from ..errors import AgentOpsError
from ..gitstore import objects
from ..gitstore.notes import EVIDENCE_REF, Notes
from ..gitstore.repo import Store
from ..verify.evidence import EvidenceRecord, note_line

TRAILER: Final = "Agentops-Squashed-From"
LISTED: Final = 50
"""At most this many replaced commits are listed in the squash's message (the rest are counted)."""


@dataclass(frozen=True, slots=True)
class Squashed:
    """The squash of ``head`` onto ``base``: ``commit``, replacing ``replaced`` commits (newest first)."""

    commit: str
    head: str
    base: str
    replaced: tuple[str, ...]


def squash(store: Store, *, base: str, head: str, task_id: str) -> Squashed | None:
    """One commit on ``base`` with ``head``'s tree (see the module docstring); None when ``head`` is already one
    commit on ``base``, or is ``base`` (a no-change delivery). ``OBJECT_MISSING``."""
    repo = store.repo
    last = _commit(repo, head)
    if head == base or [str(p) for p in last.parent_ids] == [base]:
        return None
    replaced = _since(repo, base, head)
    message = _message(last.message, replaced, repo, task_id=task_id, base=base, head=head)
    author = last.author
    commit = objects.write_commit(
        store,
        str(last.tree_id),
        [base],
        message,
        author=pygit2.Signature(author.name, author.email, author.time, author.offset),
    )
    return Squashed(commit, head, base, replaced)


def mirror_evidence(store: Store, squashed: Squashed, records: Iterable[EvidenceRecord]) -> None:
    """Append the squash's evidence ``records`` (sealed, as its note holds them) to the handed-off commit's note."""
    lines = b"".join(note_line(r) for r in records)
    if lines:
        Notes(store, EVIDENCE_REF).append(
            {squashed.head: lines},
            message=f"Evidence for {squashed.head[:12]}: its verification as the squash {squashed.commit[:12]}",
        )


def _commit(repo: pygit2.Repository, rev: str) -> pygit2.Commit:
    try:
        found: object = repo[rev]
    except (KeyError, ValueError) as exc:
        raise AgentOpsError("OBJECT_MISSING", f"{rev} is not in the repository") from exc
    if not isinstance(found, pygit2.Commit):
        raise AgentOpsError("OBJECT_MISSING", f"{rev} is not a commit")
    return found


def _since(repo: pygit2.Repository, base: str, head: str) -> tuple[str, ...]:
    """The commits reachable from ``head`` and not from ``base``, newest first (what the squash replaces)."""
    walker = repo.walk(pygit2.Oid(hex=head), pygit2.enums.SortMode.TOPOLOGICAL)
    walker.hide(pygit2.Oid(hex=base))
    return tuple(str(c.id) for c in walker)


def _message(
    last: str, replaced: tuple[str, ...], repo: pygit2.Repository, *, task_id: str, base: str, head: str
) -> str:
    """The last commit's message, then a paragraph naming what the squash replaces, then the trailer."""
    lines = [
        f"  {commit[:12]} {(_commit(repo, commit).message.strip().splitlines() or [''])[0][:100]}"
        for commit in replaced[:LISTED]
    ]
    if len(replaced) > LISTED:
        lines.append(f"  ... and {len(replaced) - LISTED} more")
    return (
        f"{last.rstrip()}\n\n"
        f"Squashed by git-agentops ([run] squash) from {len(replaced)} commits of {task_id} on {base[:12]}:\n"
        + "\n".join(lines)
        + f"\n\n{TRAILER}: {head}\n"
    )
