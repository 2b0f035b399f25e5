"""Journal commits: the event a commit message carries, and the MAC that says the toolkit wrote it.

A journal commit's message is ``<CODE>: <summary>``, a blank line, and two trailer lines::

    Agentops-Event: {"code":...,"data":{...},"summary":...,"time":...}
    Agentops-Mac: <64 hex>

The event is canonical JSON (:func:`parse_event` reads it back). The MAC is an HMAC-SHA256 made with the
repository's key (:mod:`.keys`, purpose ``journal``) over the canonical JSON of ``{ref, tree, parents, message}``,
where the message is everything before the Mac line. Worker agents run as the same OS user and can append to any
ref with plain git, so this is how a journal tells the supervisor's commits from theirs: binding the **ref** means
a commit of one run's journal is never authentic on another's; binding the **tree and parents** means a copied
trailer authenticates nothing else. A commit without a valid MAC is *foreign*.

Checking costs one HMAC; a commit this process checked or wrote is remembered (the supervisor re-reads its state
after every commit it makes, and then pays nothing). No pygit2 object is created here: commits are passed in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import pygit2

from .. import eventkinds as kinds
from ..canonical import canonical_json
from ..errors import AgentOpsError, StateTampered
from ..schema import documents
from .keys import Keyring, keyring
from .repo import Store

EVENT_TRAILER: Final = "Agentops-Event: "
MAC_TRAILER: Final = "Agentops-Mac: "
MAC_PURPOSE: Final = "journal"
QUARANTINED: Final = kinds.RUN_STATE_QUARANTINED
"""The one event whose commit has two parents: the journal's own tip first, and second a foreign commit a remote
holds on the same ref, kept as evidence so that pushing the journal there is a fast-forward
(:meth:`~git_agentops.gitstore.journal.Journal.supersede`). The first-parent chain -- the state and the log --
stays linear."""
FOREIGN_LISTED: Final = 20
"""How many foreign commit ids a :class:`Foreign` names (the newest); its ``count`` says how many there were."""
FOREIGN_WALK: Final = 10_000
"""How far down the first-parent chain :func:`find_foreign` looks for an authentic commit."""
_CODE_RE: Final = re.compile(r"[A-Z][A-Z0-9_]{1,63}")
_MAC_LINE: Final = re.compile(rb"Agentops-Mac: ([0-9a-f]{64})")
_AUTHENTIC: set[tuple[str, str, str]] = set()  # (private dir, ref, commit) checked or written by this process
_AUTHENTIC_MAX: Final = 65536
_KEYRINGS: dict[str, Keyring] = {}  # private dir as the store names it -> its (shared) keyring


@dataclass(frozen=True, slots=True)
class Event:
    """What a mutation did: a registered code (:mod:`git_agentops.eventkinds`), a one-line summary, and JSON data.

    ``ValueError`` for a code nobody registered, at construction: an unregistered kind never reaches a journal.
    """

    code: kinds.EventCode
    summary: str
    data: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        kinds.kind(self.code)

    def message(self, time: float) -> str:
        """The commit message of this event at ``time``: ``<code>: <summary>``, a blank line, the event trailer.

        :func:`parse_event` reads the trailer back; :func:`seal` adds the Mac line. The summary is
        whitespace-collapsed and cut to 200 characters; ``ValueError`` unless ``code`` is UPPER_SNAKE_CASE, or --
        when the data check is on (:func:`~git_agentops.eventkinds.check_data`) -- unless ``data`` fits its kind.
        """
        if not _CODE_RE.fullmatch(self.code):
            raise ValueError(f"event code {self.code!r} must be UPPER_SNAKE_CASE")
        kinds.check(self.code, self.data)
        summary = " ".join(self.summary.split())[:200] or self.code
        body = canonical_json({"code": self.code, "summary": summary, "data": dict(self.data), "time": time})
        return f"{self.code}: {summary}\n\n{EVENT_TRAILER}{body}\n"


@dataclass(frozen=True, slots=True)
class Entry:
    """One commit of a journal, read back: the event and where it sits in the chain."""

    commit: str
    parent: str | None
    code: str
    summary: str
    data: Mapping[str, Any]
    time: float
    foreign: bool = False
    """True for a commit the toolkit did not write (its ``Agentops-Mac`` is missing or does not check)."""


class JournalTampered(StateTampered):
    """A journal's tip is a commit the toolkit did not write: ``RUN_STATE_TAMPERED``, naming the ref and commit."""

    def __init__(self, ref: str, commit: str, message: str | None = None) -> None:
        super().__init__(
            "RUN_STATE_TAMPERED",
            message
            or f"{ref} is at {commit[:12]}, a commit this repository's toolkit did not write (its Agentops-Mac "
            "is missing or does not check); nothing is read from it or built on it",
            details={"ref": ref, "commit": commit},
        )
        self.ref = ref
        self.commit = commit


@dataclass(frozen=True, slots=True)
class Foreign:
    """A journal whose tip is foreign: the foreign commits on its first-parent chain, and what is authentic below."""

    ref: str
    tip: str
    commits: tuple[str, ...]
    """The foreign commits, newest first: at most :data:`FOREIGN_LISTED` of them."""
    count: int
    """How many foreign commits there are above ``authentic`` (counted up to :data:`FOREIGN_WALK`)."""
    authentic: str | None
    """The newest authentic commit below them; None when the chain holds none (a ref a foreigner made)."""


def parse_event(commit: pygit2.Commit) -> Entry:
    """Read the event of a journal commit; ``JOURNAL_CORRUPT`` if it holds none (a merge -- but the two-parent
    :data:`QUARANTINED` event --, no valid trailer).

    Whether the toolkit wrote it is :func:`is_authentic`'s question, not this one's.
    """
    parents = commit.parent_ids
    if len(parents) > 2:
        raise AgentOpsError("JOURNAL_CORRUPT", f"journal commit {commit.id} is a merge; journals are linear")
    trailer = None
    for line in reversed(commit.message.splitlines()):
        if line.startswith(EVENT_TRAILER):
            trailer = line[len(EVENT_TRAILER) :]
            break
    if trailer is None:
        raise AgentOpsError("JOURNAL_CORRUPT", f"journal commit {commit.id} has no {EVENT_TRAILER.strip()} trailer")
    doc = documents.load(trailer.encode("utf-8"), schema="event", what=f"event of {commit.id}")
    if len(parents) == 2 and doc["code"] != QUARANTINED:
        raise AgentOpsError("JOURNAL_CORRUPT", f"journal commit {commit.id} is a merge; journals are linear")
    return Entry(
        commit=str(commit.id),
        parent=str(parents[0]) if parents else None,
        code=doc["code"],
        summary=doc["summary"],
        data=doc["data"],
        time=doc["time"],
    )


def foreign_entry(commit: pygit2.Commit) -> Entry:
    """A foreign commit as a log entry: its event when it has a readable one, else code ``UNKNOWN`` and its
    subject line; ``foreign`` either way."""
    try:
        return replace(parse_event(commit), foreign=True)
    except AgentOpsError:
        subject = commit.raw_message.split(b"\n", 1)[0].decode("utf-8", "replace")
        return Entry(
            commit=str(commit.id),
            parent=str(commit.parent_ids[0]) if commit.parent_ids else None,
            code="UNKNOWN",
            summary=" ".join(subject.split())[:200],
            data={},
            time=float(commit.commit_time),
            foreign=True,
        )


# -- the MAC -----------------------------------------------------------------------------------------------------------


def mac_input(ref: str, tree: str, parents: Sequence[str], message: str) -> bytes:
    """What a journal commit's ``Agentops-Mac`` authenticates: the canonical JSON of ref, tree, parents and message
    (the message up to, not including, the Mac line).

    Every value is a string that came from UTF-8, so ``json.dumps`` with the canonical settings writes exactly
    :func:`~git_agentops.canonical.canonical_bytes` -- without its per-value checks, on a path taken per commit.
    """
    doc = {"message": message, "parents": list(parents), "ref": ref, "tree": tree}
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _keyring(store: Store) -> Keyring:
    """The store's keyring, without resolving its path again on every commit."""
    where = str(store.private_dir())
    found = _KEYRINGS.get(where)
    if found is None:
        found = _KEYRINGS[where] = keyring(store.private_dir())
    return found


def split_mac(raw: bytes) -> tuple[bytes, str] | None:
    """A raw commit message as (everything before its last line, the MAC that line holds), or None when the last
    line is not an ``Agentops-Mac`` trailer."""
    if not raw.endswith(b"\n"):
        return None
    body = raw[:-1]
    cut = body.rfind(b"\n")
    match = _MAC_LINE.fullmatch(body[cut + 1 :])
    if match is None:
        return None
    return raw[: cut + 1], match.group(1).decode("ascii")


def seal(store: Store, ref: str, tree: str, parents: Sequence[str], message: str) -> str:
    """``message`` with its Mac line, for a commit of ``tree`` with ``parents`` on ``ref`` (``KEY_INVALID``)."""
    mac = _keyring(store).mac(MAC_PURPOSE, mac_input(ref, tree, parents, message))
    return f"{message}{MAC_TRAILER}{mac}\n"


def remember(store: Store, ref: str, commit: str) -> None:
    """Note that this process wrote ``commit`` on ``ref``, so that reading it back costs no HMAC."""
    if len(_AUTHENTIC) >= _AUTHENTIC_MAX:
        _AUTHENTIC.clear()
    _AUTHENTIC.add((str(store.private_dir()), ref, commit))


def is_authentic(store: Store, ref: str, commit: pygit2.Commit) -> bool:
    """Whether the toolkit wrote ``commit`` on ``ref``: its last line is an ``Agentops-Mac`` that checks for this
    ref, its tree, its parents and the message above it. ``KEY_INVALID`` for a damaged key file."""
    if (str(store.private_dir()), ref, str(commit.id)) in _AUTHENTIC:
        return True
    split = split_mac(commit.raw_message)
    if split is None:
        return False
    message, mac = split
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        return False
    data = mac_input(ref, str(commit.tree_id), [str(p) for p in commit.parent_ids], text)
    if not _keyring(store).check(MAC_PURPOSE, data, mac):
        return False
    remember(store, ref, str(commit.id))
    return True


def find_foreign(store: Store, ref: str, tip: pygit2.Commit | None) -> Foreign | None:
    """None when ``tip`` is authentic (or None); else the foreign commits on the first-parent chain from ``tip``
    and the newest authentic commit under them."""
    if tip is None or is_authentic(store, ref, tip):
        return None
    listed: list[str] = []
    count = 0
    commit: pygit2.Commit | None = tip
    while commit is not None and count < FOREIGN_WALK:
        if is_authentic(store, ref, commit):
            return Foreign(ref, str(tip.id), tuple(listed), count, str(commit.id))
        count += 1
        if len(listed) < FOREIGN_LISTED:
            listed.append(str(commit.id))
        commit = first_parent(store, commit)
    return Foreign(ref, str(tip.id), tuple(listed), count, None)


def first_parent(store: Store, commit: pygit2.Commit) -> pygit2.Commit | None:
    """The first parent of ``commit``; None for a root commit or a parent this repository does not have."""
    parent: object = store.repo.get(commit.parent_ids[0]) if commit.parent_ids else None
    return parent if isinstance(parent, pygit2.Commit) else None
