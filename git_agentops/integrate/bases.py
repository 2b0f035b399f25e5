"""Merge bases: found in process when the answer is near, asked of git when it is not.

Integration merges a delivery (branched from the target a few commits back) into the target's tip, where the one
merge base is found in a few steps: doing that in process saves a ``git merge-base`` process (~3 ms) per merge.
Far bases and criss-crosses are git's (``git merge-base --all``, which uses the commit-graph's generation numbers):
``bench/integrate.py`` measures both against git on a 12,000-commit history.
"""

from __future__ import annotations

import heapq
from typing import Final

import pygit2

from ..errors import AgentOpsError
from ..gitstore import objects
from ..gitstore.repo import Store

_PARENT1, _PARENT2, _STALE, _RESULT = 1, 2, 4, 8


class Graph:
    """Merge bases, found in process when the answer is near and asked of git when it is not.

    pygit2 has no ``git_merge_bases`` (all of them). In process this is git's ``paint_down_to_common`` (newest
    commit date first, ties in insertion order) over a cache of commit dates and parents, each commit read once
    per chain -- what a delivery needs: one base, a few commits back, or a criss-cross's several where commit dates
    fall strictly along the edges walked (:meth:`nearby`). It stops at :data:`WALK_LIMIT` commits, and several
    candidates under clock skew would need git's ``remove_redundant`` (thousands of ``descendant_of`` calls and
    seconds on long histories in process): there ``git merge-base --all`` answers, in milliseconds, with the
    commit-graph's generation numbers when the repository has one.
    """

    WALK_LIMIT: Final = 256
    """Commits walked in process before git is asked: a walk in Python costs ~13 us a commit, and past this a merge
    goes to git's long-lived ``merge-tree --stdin`` (:mod:`git_agentops.gitstore.mergeserver`), which finds far
    bases faster (on git/git's own merges, 256 rather than 1,024 took the replay from 0.84x to 1.18x git's
    ``merge-tree`` with a commit-graph, from 2.86x to 3.36x without)."""

    def __init__(self, repo: pygit2.Repository, store: Store) -> None:
        self.repo = repo
        self.store = store
        self._commits: dict[pygit2.Oid, tuple[int, list[pygit2.Oid]]] = {}
        self._flat: dict[pygit2.Oid, list[pygit2.Oid]] = {}

    def chained(self, commit: pygit2.Oid, first: pygit2.Oid, second: pygit2.Oid) -> None:
        """``commit`` is a merge this chain just wrote on ``first`` (the chain so far) and ``second`` (a delivery).

        No commit that existed before can descend from it, so neither it nor the chain's earlier merges can be a
        common ancestor of anything merged later: the walk may step from it straight to the chain's start and
        every delivery merged so far, skipping the merges between -- the same common ancestors, the same bases,
        found in a walk that no longer grows with the chain."""
        self._flat[commit] = [*self._flat.get(first, [first]), second]

    def _commit(self, oid: pygit2.Oid) -> tuple[int, list[pygit2.Oid]]:
        known = self._commits.get(oid)
        if known is None:
            commit: object = self.repo[oid]
            if not isinstance(commit, pygit2.Commit):
                raise AgentOpsError("OBJECT_MISSING", f"{oid} is not a commit")
            known = (commit.commit_time, self._flat.get(oid) or commit.parent_ids)
            if len(self._commits) > 200_000:
                self._commits.clear()
            self._commits[oid] = known
        return known

    def nearby(self, one: pygit2.Oid, two: pygit2.Oid) -> list[pygit2.Oid] | None:
        """The merge bases when the walk settles them in process, else None: a walk past :data:`WALK_LIMIT`
        commits, or several candidates where a commit date did not fall strictly along every parent edge walked.

        git's walk goes newest commit first, so a candidate that is an ancestor of another is painted stale before
        it is reached -- unless clock skew (a parent not older than its child) lets it be reached first, which is
        why git then runs ``remove_redundant``. Where every edge walked goes strictly back in time that cannot
        happen, and the candidates left are exactly git's: a criss-cross's bases are found here too. Otherwise,
        with more than one candidate, git decides."""
        if one == two:
            return [one]
        flags: dict[pygit2.Oid, int] = {one: _PARENT1, two: _PARENT2}
        queue: list[tuple[int, int, pygit2.Oid]] = []
        counter = 0
        for oid in (one, two):
            heapq.heappush(queue, (-self._commit(oid)[0], counter, oid))
            counter += 1
        found: list[pygit2.Oid] = []
        steps = 0
        monotonic = True  # every parent walked strictly older than its child: no candidate can be redundant
        while queue:
            # git stops once every queued commit is stale; looking only every 8th step (the look is O(queue)) walks
            # a few stale commits more, which can only paint stale a candidate that is an ancestor of another --
            # a redundant one, dropped below as git's remove_redundant drops it -- and never finds a new one
            if steps % 8 == 0 and not any(not flags[oid] & _STALE for _, _, oid in queue):
                break
            steps += 1
            if counter > self.WALK_LIMIT:
                return None
            _, _, oid = heapq.heappop(queue)
            paint = flags[oid] & (_PARENT1 | _PARENT2 | _STALE)
            if paint == _PARENT1 | _PARENT2:
                if not flags[oid] & _RESULT:
                    flags[oid] |= _RESULT
                    found.append(oid)
                paint |= _STALE
            date, parents = self._commit(oid)
            for parent in parents:
                monotonic = monotonic and self._commit(parent)[0] < date
                if flags.get(parent, 0) & paint == paint:
                    continue
                flags[parent] = flags.get(parent, 0) | paint
                heapq.heappush(queue, (-self._commit(parent)[0], counter, parent))
                counter += 1
        bases = [oid for oid in found if not flags[oid] & _STALE]
        return bases if len(bases) <= 1 or monotonic else None  # several, maybe one redundant: git's to say

    def merge_bases(self, one: pygit2.Oid, two: pygit2.Oid) -> list[pygit2.Oid]:
        """The best common ancestors of ``one`` and ``two`` (none for unrelated histories), as git finds them."""
        near = self.nearby(one, two)
        if near is not None:
            return near
        return [pygit2.Oid(hex=oid) for oid in objects.git_merge_bases(self.store, str(one), str(two))]
