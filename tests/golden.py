"""Golden state and invariants of runs, read straight from the repository.

ghstack's tests render everything a command leaves behind as text and compare it inline, and check global
invariants after every command; this is the same for a run kept in Git.

* :func:`render_run` is the whole stored outcome of one run as stable text: its refs, its state tree, its policy
  binding and transition journals, its notes and its events. Whatever differs between two identical runs -- object
  ids (the supervisor's commits carry wall-clock times), times, process ids, temporary paths, random ids -- is
  replaced by a placeholder (``<oid:3>``, ``<sha256:5>``, ``<time>``, ``<run>``, ``<task:2>``, ``<worker:1>``)
  numbered in an order the run fixes, so equal ids stay visibly equal. Workers run at once, so the state journal's
  order of events from different workers is a race; the events are rendered per lane (the run's own, then each
  worker's), each lane in journal order, which is what one worker's life or the integration fixes. Notes are the
  records of this run on the repository's notes refs (a delivery note names its run, evidence its task).
  :func:`expect` compares such a text with one written inline in the test (``AGENTOPS_ACCEPT_GOLDEN=1`` rewrites
  it).
* :func:`check_invariants` checks what must hold of any repository at any moment, whatever a test did to it
  before: the state chain is linear and only moves forward, every record the toolkit wrote is schema-valid,
  deliveries are frozen, and request records and mailbox responses agree. :mod:`tests.runkit` calls it after
  every wait on a run, so every end-to-end test checks the invariants at each step it waits for.

Both read the repository directly (pygit2 and files), not through the toolkit's readers: a test of the toolkit
should not trust the code it tests to tell it what the store holds. Only the schemas, the canonical JSON and the
journal MAC check -- what decides whether the toolkit wrote a commit -- are shared.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Concatenate, Final, ParamSpec, TypeVar

import pygit2

from git_agentops.canonical import sha256_hex
from git_agentops.schema.documents import schema_errors

P = ParamSpec("P")
R = TypeVar("R")

# -- placeholders ------------------------------------------------------------------------------------------------------

_HEX: Final = re.compile(r"(?<![0-9A-Za-z])[0-9a-f]{7,64}(?![0-9A-Za-z])")
_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_ISO_TIME: Final = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?")
_SSH_FINGERPRINT: Final = re.compile(r"SHA256:[A-Za-z0-9+/]{43}")
_MARK: Final = ("\u27e6", "\u27e7")
"""Brackets around a short hex prefix until :meth:`Namer.finish` resolves it (JSON leaves them as they are)."""
_PID: Final = re.compile(r"\b(pid|process|pgid|supervisor) \d+")
TIME_KEYS: Final = frozenset({"at", "time", "since", "lastUserResume", "heartbeat"})
"""JSON keys whose values are times, besides every key ending in ``At``."""
DURATION_KEYS: Final = frozenset({"durationMs", "usedSeconds", "seconds", "elapsed", "elapsedMs", "wallSeconds"})
"""JSON keys whose values are measured durations."""
PROCESS_KEYS: Final = frozenset({"pid", "pgid", "startTicks", "bootId", "startTime"})
MEASURED_KEYS: Final = frozenset({"diskBytes"})
"""JSON keys of sizes measured on this machine's filesystem (a workspace's new blocks)."""
"""JSON keys of a process's identity (a ``process`` object of a worker record)."""
SECRET_KEYS: Final = frozenset({"mac", "sig"})
"""JSON keys holding a MAC or a signature made with a key created for this repository (random each time)."""
TIME_DRIVEN: Final = frozenset({"RUN_LEASE_RENEWED"})
"""Events the supervisor writes because time passed (a lease is renewed every third of its time to live): how
many there are says how long a run took on that machine, not what it did, so the rendered events leave them out."""
WIDTH: Final = 120
"""Columns of a rendered line before a JSON value is spread over lines of its own."""
VERSION_KEYS: Final = frozenset({"toolkitVersion"})
"""JSON keys holding the toolkit's version: a release must not change every golden text."""


def _is_time(key: str) -> bool:
    return key in TIME_KEYS or (key.endswith("At") and key[:1].islower())


class Namer:
    """Placeholders for everything that differs between two identical runs, numbered in order of first use.

    Ids that name things of the run (the run, its tasks, workers, requests, transitions, questions, machines) are
    named up front in an order the run's own records fix (:func:`_name_run`); object ids and digests are named as
    the text first mentions them, so the caller must ask in a stable order (:meth:`peek` gives sort keys that name
    nothing). A short hex prefix of an id gets that id's placeholder, wherever in the text the id itself is
    (:meth:`finish`).
    """

    def __init__(self, repo: Path) -> None:
        self.fixed: dict[str, str] = {}
        self.hexes: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        self.paths: list[tuple[str, str]] = []
        self.naming = True  # False while a sort key is made: hex ids then read <hex> and are not named
        for path, name in (
            (repo.parent, "<tmp>"),
            (Path(os.environ.get("HOME", "/nonexistent-home")), "<home>"),
            (Path(sys.executable), "<python>"),
            (Path(sys.prefix), "<venv>"),
            (Path(__file__).resolve().parent.parent, "<toolkit>"),
        ):
            for spelling in {str(path), os.path.realpath(path)}:
                if len(spelling) > 1:
                    self.paths.append((spelling, name))
        self.paths.sort(key=lambda pair: -len(pair[0]))  # the longest (most specific) prefix first

    def fix(self, value: str, kind: str) -> str:
        """Name ``value`` (a random id) ``<kind:N>``, or ``<kind>`` for the run; idempotent."""
        if value not in self.fixed:
            if kind == "run":
                self.fixed[value] = "<run>"
            else:
                self.counts[kind] = self.counts.get(kind, 0) + 1
                self.fixed[value] = f"<{kind}:{self.counts[kind]}>"
        return self.fixed[value]

    def hex_id(self, value: str) -> str:
        """The placeholder of a full object id (40 hex) or digest (64 hex), named on first use."""
        if value not in self.hexes:
            kind = "oid" if len(value) == 40 else "sha256"
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.hexes[value] = f"<{kind}:{self.counts[kind]}>"
        return self.hexes[value]

    def _plain(self, value: str) -> str:
        """``value`` with the run's ids, paths, times and process ids replaced (hex ids left as they are)."""
        for fixed, name in sorted(self.fixed.items(), key=lambda pair: -len(pair[0])):
            if fixed in value:
                value = value.replace(fixed, name)
        for path, name in self.paths:
            value = value.replace(path, name)
        value = _ISO_TIME.sub("<time>", value)
        value = _SSH_FINGERPRINT.sub("<key-fingerprint>", value)
        value = _PID.sub(lambda m: f"{m.group(1)} <pid>", value)
        return _UUID.sub("<uuid>", value)

    def text(self, value: str) -> str:
        """``value`` with every id, path, time and process id in it replaced, naming the hex ids it holds."""
        return _HEX.sub(self._hex_token, self._plain(value))

    def peek(self, value: str) -> str:
        """What :meth:`text` would make of ``value`` with every hex id as ``<hex>``: a sort key that names nothing."""
        return _HEX.sub(lambda m: m.group(0) if _is_word(m.group(0)) else "<hex>", self._plain(value))

    def _hex_token(self, match: re.Match[str]) -> str:
        token = match.group(0)
        if not self.naming:
            return token if _is_word(token) else "<hex>"
        if len(token) in (40, 64):
            return self.hex_id(token)
        if _is_word(token):
            return token
        return f"{_MARK[0]}{token}{_MARK[1]}"  # a prefix: resolved by finish(), once every full id is known

    def finish(self, text: str) -> str:
        """``text`` with each short hex prefix replaced by the placeholder of the id it abbreviates (``<hex>``
        when it abbreviates none)."""

        def resolve(match: re.Match[str]) -> str:
            token = match.group(1)
            found = [name for full, name in self.hexes.items() if full.startswith(token)]
            return found[0] if len(found) == 1 else "<hex>"

        return re.sub(f"{_MARK[0]}([0-9a-f]+){_MARK[1]}", resolve, text)

    def doc(self, value: Any, key: str = "") -> Any:
        """A JSON value with its volatile parts replaced (times and durations by key, strings by :meth:`text`);
        objects are walked in the order of their keys as :meth:`peek` shows them."""
        if isinstance(value, dict):
            items = sorted(value.items(), key=lambda kv: self.peek(str(kv[0])))
            return {self.text(str(k)): self.doc(v, str(k)) for k, v in items}
        if isinstance(value, list):
            if value and all(isinstance(v, dict) and v.get("id") in self.fixed for v in value):
                value = sorted(value, key=lambda v: _rank(self.fixed[v["id"]]))  # records of tasks: by task
            return [self.doc(v, key) for v in value]
        if value is None or isinstance(value, bool):
            return value
        if key in SECRET_KEYS:
            return f"<{key}>"
        if key in VERSION_KEYS:
            return "<version>"
        if isinstance(value, (int, float)):
            if _is_time(key) or (isinstance(value, float) and 1e9 < value < 1e11):
                return "<time>"
            if key in DURATION_KEYS:
                return "<duration>"
            if key in PROCESS_KEYS or key in MEASURED_KEYS:
                return f"<{key}>"
            return value
        if isinstance(value, str):
            if _is_time(key) and value:
                return "<time>"
            return self.text(value)
        return value

    def json(self, value: Any, key: str = "") -> str:
        """:meth:`doc` of ``value`` as one line of JSON (keys in :meth:`doc`'s order, compact)."""
        return json.dumps(self.doc(value, key), separators=(",", ":"), ensure_ascii=False)

    def peek_json(self, value: Any) -> str:
        """:meth:`json` as a sort key: the same normalisation, naming nothing."""
        self.naming = False
        try:
            return self.json(value)
        finally:
            self.naming = True

    def lines(self, value: Any, indent: str) -> list[str]:
        """A document normalised (:meth:`doc`) and laid out one key a line, a value that does not fit in
        :data:`WIDTH` columns spread over lines below its key, so a diff shows which field changed."""
        return _layout(self.doc(value), indent)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _layout(value: Any, indent: str) -> list[str]:
    """``value`` (normalised already) as YAML-like lines: ``key: <json>``, ``- <json>``, nested where too wide."""
    if isinstance(value, dict) and value:
        out = []
        for key, item in value.items():
            line = f"{indent}{key}: {_compact(item)}"
            if len(line) <= WIDTH or not isinstance(item, (dict, list)) or not item:
                out.append(line)
            else:
                out.append(f"{indent}{key}:")
                out.extend(_layout(item, indent + "  "))
        return out
    if isinstance(value, list) and value:
        out = []
        for item in value:
            line = f"{indent}- {_compact(item)}"
            if len(line) <= WIDTH or not isinstance(item, (dict, list)) or not item:
                out.append(line)
            else:
                out.append(f"{indent}-")
                out.extend(_layout(item, indent + "  "))
        return out
    return [f"{indent}{_compact(value)}"]


def _rank(placeholder: str) -> tuple[str, int]:
    """``<task:3>`` -> ("task", 3): placeholders in the order they were given."""
    kind, _, number = placeholder.strip("<>").partition(":")
    return kind, int(number or 0)


def _is_word(token: str) -> bool:
    """A hex-looking token that is a word (``defaced``, ``added``), not an id: it has no digit."""
    return not any(c.isdigit() for c in token)


# -- reading the repository --------------------------------------------------------------------------------------------


def _open(repo: Path) -> pygit2.Repository:
    return pygit2.Repository(str(repo))


def _refs(repository: pygit2.Repository) -> dict[str, str]:
    """Every ref and the object it points at (symbolic refs resolved; ``HEAD`` left out)."""
    out = {}
    for name in repository.references:
        try:
            target = repository.references[name].resolve().target
        except (KeyError, pygit2.GitError):
            continue
        out[name] = str(target)
    return out


def _files(repository: pygit2.Repository, tree: pygit2.Tree, prefix: str = "") -> Iterator[tuple[str, pygit2.Blob]]:
    """Every blob under ``tree``, by path, in tree order."""
    for entry in tree:
        path = f"{prefix}{entry.name}"
        obj = repository[entry.id]
        if isinstance(obj, pygit2.Tree):
            yield from _files(repository, obj, path + "/")
        elif isinstance(obj, pygit2.Blob):
            yield path, obj


def _changed(
    repository: pygit2.Repository, tree: pygit2.Tree, before: pygit2.Tree | None, prefix: str = ""
) -> Iterator[tuple[str, pygit2.Blob]]:
    """The blobs under ``tree`` that ``before`` does not hold at the same path (all of them without ``before``):
    a subtree whose id did not change is not opened."""
    for entry in tree:
        name = str(entry.name)
        path = f"{prefix}{name}"
        old = before[name] if before is not None and name in before else None
        if old is not None and old.id == entry.id:
            continue
        obj = repository[entry.id]
        if isinstance(obj, pygit2.Tree):
            previous = repository[old.id] if old is not None else None
            yield from _changed(repository, obj, previous if isinstance(previous, pygit2.Tree) else None, path + "/")
        elif isinstance(obj, pygit2.Blob):
            yield path, obj


def _under(repository: pygit2.Repository, tree: pygit2.Tree, name: str) -> Iterator[tuple[str, pygit2.Blob]]:
    """The blobs of the subtree ``name`` of ``tree`` (none when there is none), with paths from ``tree``."""
    if name in tree and isinstance(sub := repository[tree[name].id], pygit2.Tree):
        yield from _files(repository, sub, name + "/")


def _chain(repository: pygit2.Repository, tip: str) -> list[pygit2.Commit]:
    """The first-parent chain ending at ``tip``, oldest first."""
    out = []
    commit: pygit2.Commit | None = repository[tip].peel(pygit2.Commit)
    while commit is not None:
        out.append(commit)
        commit = commit.parents[0] if commit.parents else None
    out.reverse()
    return out


def _event(commit: pygit2.Commit) -> dict[str, Any] | None:
    """The ``Agentops-Event`` trailer of a journal commit, parsed; None when it has none."""
    for line in reversed(commit.message.splitlines()):
        if line.startswith("Agentops-Event: "):
            found = json.loads(line[len("Agentops-Event: ") :])
            return found if isinstance(found, dict) else None
    return None


def _json(blob: pygit2.Blob) -> Any:
    """A blob's JSON (None when it is not JSON), parsed once per process: objects never change."""
    key = str(blob.id)
    if key not in _PARSED:
        try:
            _PARSED[key] = json.loads(blob.data)
        except ValueError:  # UnicodeDecodeError too
            _PARSED[key] = None
    return _PARSED[key]


_PARSED: dict[str, Any] = {}


def _notes(repository: pygit2.Repository, ref: str) -> dict[str, bytes]:
    """Every note of a notes ref: annotated object id -> note bytes (any fan-out layout)."""
    target = _refs(repository).get(ref)
    if target is None:
        return {}
    tree = repository[target].peel(pygit2.Tree)
    return {path.replace("/", ""): blob.data for path, blob in _files(repository, tree)}


# -- render_run --------------------------------------------------------------------------------------------------------


@dataclass
class _Run:
    """What :func:`render_run` reads of one run, before rendering."""

    run_id: str
    repository: pygit2.Repository
    refs: dict[str, str]
    docs: dict[str, Any] = field(default_factory=dict)


def _name_run(namer: Namer, run: _Run) -> None:
    """Name the run's random ids in an order its records fix: tasks as planned (the root first), workers by their
    task (the coordinator first), requests by worker and time, questions by time, transitions and machines by what
    they hold."""
    namer.fix(run.run_id, "run")
    record = run.docs.get("run.json") or {}
    tasks: dict[str, dict[str, Any]] = {}
    for path, doc in run.docs.items():
        if path.startswith("tasks/") and isinstance(doc, dict):
            tasks.setdefault(str(doc.get("id")), doc)
    order = [record.get("rootTaskId"), *(record.get("planOrder") or [])]
    order += sorted((t for t in tasks if t not in order), key=lambda t: json.dumps(tasks[t].get("title")))
    for task_id in order:
        if isinstance(task_id, str):
            namer.fix(task_id, "task")
    workers = [doc for path, doc in run.docs.items() if path.startswith("workers/") and isinstance(doc, dict)]
    rank = {task_id: i for i, task_id in enumerate(namer.fixed)}
    workers.sort(key=lambda w: (w.get("role") != "coordinator", rank.get(str(w.get("taskId")), 1 << 30)))
    for worker in workers:
        if worker.get("role") != "coordinator":  # the coordinator's id is fixed ("coordinator")
            namer.fix(str(worker["workerId"]), "worker")
    worker_rank = {w["workerId"]: i for i, w in enumerate(workers)}
    requests = [doc for path, doc in run.docs.items() if path.startswith("requests/") and isinstance(doc, dict)]
    requests.sort(key=lambda r: (worker_rank.get(r.get("workerId"), 1 << 30), r.get("at", 0)))
    for request in requests:
        namer.fix(str(request["requestId"]), "request")
    questions = [doc for path, doc in run.docs.items() if path.startswith("questions/") and isinstance(doc, dict)]
    for question in sorted(questions, key=lambda q: q.get("askedAt") or 0):
        namer.fix(str(question["questionId"]), "question")
    prefix = f"refs/agentops/runs/{run.run_id}/journal/"
    for ref in sorted(r for r in run.refs if r.startswith(prefix)):
        namer.fix(ref[len(prefix) :], "transition")
    lease = run.docs.get("lease.json")
    if isinstance(lease, dict):
        for key in ("machine", "holder", "machineId"):
            if isinstance(lease.get(key), str):
                namer.fix(lease[key], "machine")


def _state_path(path: str, doc: Any, namer: Namer) -> str:
    """A tree path as :meth:`Namer.peek` shows it, its hashed parts named after what they hash: a request's or a
    question's id; an artifact (content-addressed) by its digest alone."""
    if path.startswith("requests/") and isinstance(doc, dict) and "requestId" in doc:
        return f"requests/{namer.peek(str(doc['requestId']))}.json"
    if path.startswith("questions/") and isinstance(doc, dict) and "questionId" in doc:
        return f"questions/{namer.peek(str(doc['questionId']))}.json"
    if path.startswith("artifacts/"):
        return "artifacts/<hex>"
    return namer.peek(path)


def _render_tree(out: list[str], repository: pygit2.Repository, tree: pygit2.Tree, namer: Namer) -> None:
    """Each file by its path (in the order of the paths as shown): a JSON document one key a line, a text file
    (TOML) line by line, a content-addressed blob (an artifact) as its size."""
    rows = []
    for path, blob in _files(repository, tree):
        doc = _json(blob) if path.endswith(".json") else None
        shown = _state_path(path, doc, namer)
        content = doc if doc is not None else _json(blob)
        key = namer.peek_json(content) if content is not None else namer.peek(blob.data.decode("utf-8", "replace"))
        rows.append((shown, key, path, blob, doc))
    rows.sort(key=lambda row: (row[0], row[1]))
    for shown, _key, path, blob, doc in rows:
        name = namer.text("artifacts/" + path.rsplit("/", 1)[-1] if path.startswith("artifacts/") else shown)
        if path.startswith("artifacts/"):
            out.append(f"  {name} ({blob.size} bytes)")
        elif doc is not None:
            out.append(f"  {name}")
            out.extend(namer.lines(doc, "    "))
        else:
            out.append(f"  {name}")
            out.extend(f"    | {line}" for line in namer.text(blob.data.decode("utf-8", "replace")).splitlines())


def _lane(event: Mapping[str, Any], workers: Mapping[str, str]) -> str:
    """Whose life an event belongs to: the worker it names (directly or through its task), else the run."""
    data = event.get("data")
    if isinstance(data, dict):
        worker = data.get("workerId")
        if isinstance(worker, str):
            return worker
        task = data.get("taskId")
        if isinstance(task, str) and task in workers:
            return workers[task]
    return ""


def _event_lines(event: Mapping[str, Any] | None, commit: pygit2.Commit, namer: Namer) -> list[str]:
    if event is None:
        return [f"    (no event) {namer.text(commit.message.splitlines()[0] if commit.message else '')}"]
    line = [f"    {event.get('code')}: {namer.text(str(event.get('summary')))}"]
    if event.get("data"):
        data = namer.doc(event["data"])
        compact = f"      {_compact(data)}"
        line.extend([compact] if len(compact) <= WIDTH else _layout(data, "      "))
    return line


def _render_events(out: list[str], repository: pygit2.Repository, tip: str, namer: Namer, run: _Run) -> None:
    """The state journal's events by lane (the run's own, then each worker's in the order workers are named),
    each lane in journal order: workers run at once, so only the order within a lane is the run's to fix."""
    by_task = {
        str(doc.get("taskId")): str(doc.get("workerId"))
        for path, doc in run.docs.items()
        if path.startswith("workers/") and isinstance(doc, dict) and doc.get("role") != "coordinator"
    }
    lanes: dict[str, list[tuple[dict[str, Any] | None, pygit2.Commit]]] = {}
    for commit in _chain(repository, tip):
        event = _event(commit)
        if event is not None and event.get("code") in TIME_DRIVEN:
            continue
        lanes.setdefault(_lane(event or {}, by_task), []).append((event, commit))

    def order(lane: str) -> tuple[bool, bool, tuple[str, int], str]:  # the run, the coordinator, then by worker
        return lane != "", lane in by_task.values(), _rank(namer.fixed.get(lane, "<:0>")), namer.peek(lane)

    for lane in sorted(lanes, key=order):
        out.append(f"  {namer.text(lane) if lane else 'run'}:")
        for event, commit in lanes[lane]:
            out.extend(_event_lines(event, commit, namer))


def _note_lines(data: bytes, namer: Namer, run: _Run, tasks: set[str]) -> list[str]:
    """The records of one note that belong to this run (a delivery note names its run, evidence its task), each
    one key a line; a receipt (a DSSE envelope) with its payload decoded."""
    rows = []
    for raw in data.decode("utf-8", "replace").splitlines():
        if not raw.strip():
            continue
        try:
            doc = json.loads(raw)
        except ValueError:
            rows.append(f"      {namer.text(raw)}")
            continue
        if isinstance(doc, dict):
            if "runId" in doc and doc["runId"] != run.run_id:
                continue
            if isinstance(doc.get("taskId"), str) and doc["taskId"] not in tasks:
                continue
            if "payload" in doc and "payloadType" in doc:
                doc = {**doc, "payload": _decoded(doc["payload"])}
        rows.append("      -")
        rows.extend(namer.lines(doc, "        "))
    return rows


def _decoded(payload: Any) -> Any:
    try:
        return json.loads(base64.b64decode(str(payload), validate=True))
    except (binascii.Error, ValueError):
        return payload


def _render_notes(
    out: list[str], repository: pygit2.Repository, refs: Mapping[str, str], namer: Namer, run: _Run
) -> None:
    """Each notes ref, its notes on objects the text named already first (in that order), then the rest."""
    tasks = {
        str(doc.get("id")) for path, doc in run.docs.items() if path.startswith("tasks/") and isinstance(doc, dict)
    }
    for ref in sorted(r for r in refs if r.startswith("refs/notes/")):
        notes = _notes(repository, ref)
        named = sorted((t for t in notes if t in namer.hexes), key=lambda t: int(namer.hexes[t].split(":")[1][:-1]))
        rest = sorted((t for t in notes if t not in namer.hexes), key=lambda t: _note_key(namer, notes[t]))
        out.append(f"  {ref.removeprefix('refs/notes/')}:")
        for target in [*named, *rest]:
            lines = _note_lines(notes[target], namer, run, tasks)
            if lines:
                out.append(f"    {namer.hex_id(target)}")
                out.extend(lines)


def _note_key(namer: Namer, data: bytes) -> str:
    """A note's records as a sort key (normalised, naming nothing)."""
    text = data.decode("utf-8", "replace")
    try:
        return "\n".join(namer.peek_json(json.loads(line)) for line in text.splitlines() if line.strip())
    except ValueError:
        return namer.peek(text)


def render_run(repo: Path, run_id: str) -> str:
    """The stored outcome of run ``run_id`` in the repository at ``repo``, as normalised text (see the module).

    Sections, each in an order that does not depend on random ids or on which worker was faster: the refs of the
    run (and the repository's other refs but other runs'), the state tree at the tip, the policy binding and each
    transition journal (tree and events), the notes on the run's objects, and the state journal's events by lane.
    """
    repository = _open(repo)
    refs = _refs(repository)
    mine = (f"refs/agentops/runs/{run_id}/", f"refs/heads/agentops/{run_id}/")
    theirs = ("refs/agentops/runs/", "refs/heads/agentops/")
    shown = {r: v for r, v in refs.items() if r.startswith(mine) or not r.startswith(theirs)}
    run = _Run(run_id, repository, shown)
    state_tip = shown.get(f"refs/agentops/runs/{run_id}/state")
    if state_tip is None:
        raise AssertionError(f"no run {run_id} in {repo}")
    for path, blob in _files(repository, repository[state_tip].peel(pygit2.Tree)):
        if path.endswith(".json"):
            run.docs[path] = _json(blob)
    namer = Namer(repo)
    _name_run(namer, run)
    out = ["refs:"]
    out += [f"  {namer.text(name)} {namer.hex_id(shown[name])}" for name in sorted(shown, key=namer.peek)]
    out.append("state:")
    _render_tree(out, repository, repository[state_tip].peel(pygit2.Tree), namer)
    for name in sorted(shown, key=namer.peek):
        if name == f"refs/agentops/runs/{run_id}/policy" or name.startswith(f"refs/agentops/runs/{run_id}/journal/"):
            out.append(f"{namer.text(name.removeprefix(f'refs/agentops/runs/{run_id}/'))}:")
            _render_tree(out, repository, repository[shown[name]].peel(pygit2.Tree), namer)
            out.append("  events:")
            for commit in _chain(repository, shown[name]):
                out.extend(_event_lines(_event(commit), commit, namer))
    out.append("notes:")
    _render_notes(out, repository, shown, namer, run)
    out.append("events:")
    _render_events(out, repository, state_tip, namer, run)
    return namer.finish("\n".join(out) + "\n")


# -- check_invariants --------------------------------------------------------------------------------------------------

INTERIM_CODES: Final = frozenset({"RUN_HANDOFF_ACCEPTED", "RUN_FINALIZE_ACCEPTED"})
"""Responses that only say a job took the request: the job's own answer -- the recorded one -- replaces them."""
UNRECORDED_REFUSALS: Final = frozenset(
    {
        "RUN_REQUEST_INVALID",
        "RUN_REQUEST_TOO_LARGE",
        "RUN_REQUEST_ID_CONFLICT",
        "RUN_REQUEST_STALE",
        "RUN_POLICY_TRANSITION_PENDING",
        "RUN_CONTRACT_CHANGED",
        "RUN_ACTION_UNAVAILABLE",
    }
)
"""Refusals given before a request reaches its action (``supervisor/requests.py``): no record is kept of them."""
SCHEMA_OF: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    (re.compile(r"run\.json"), "run"),
    (re.compile(r"workers/[^/]+\.json"), "worker"),
    (re.compile(r"tasks/[^/]+/r\d{4}\.json"), "task"),
    (re.compile(r"requests/[0-9a-f]{2}/[0-9a-f]{64}\.json"), "request-record"),
    (re.compile(r"questions/[^/]+\.json"), "question"),
    (re.compile(r"lease\.json"), "lease"),
    (re.compile(r"binding\.json"), "binding"),
    (re.compile(r"transition\.json"), "transition"),
)
"""The schema of each JSON document a run's journals hold, by path."""

_SEEN_TIPS: dict[tuple[str, str], str] = {}
"""(common dir, journal ref) -> the authentic tip the last check saw: the next must be it or a descendant."""
_VALID: set[tuple[str, str]] = set()
"""(blob id, schema) already found valid: objects never change, so each is validated once per process."""
_CHECKED_COMMITS: set[tuple[str, str]] = set()
"""(repository, commit) whose event and records were found valid: a wait checks only what is new since the last."""
_DELIVERIES: dict[tuple[str, str], dict[str, tuple[str, str] | None]] = {}
"""(repository, ``tasks`` tree id) -> each current task's delivery (commit, digest) in that tree."""


class InvariantError(AssertionError):
    """A stored state no sequence of the toolkit's own writes can produce."""


@dataclass(frozen=True, slots=True)
class _Journal:
    """The authentic first-parent chain of one journal ref, oldest first."""

    ref: str
    commits: tuple[pygit2.Commit, ...]


def _authentic_chain(repo: Path, repository: pygit2.Repository, ref: str, tip: str) -> _Journal:
    """The commits of ``ref``'s first-parent chain the toolkit wrote, oldest first.

    A foreign commit -- one a test wrote to play an attacker, on top or, once the supervisor restored the state
    above it, in the middle, where it stays as evidence -- is the toolkit's tamper checks' business: it is left
    out, and the invariants hold of what the toolkit wrote.
    """
    from git_agentops.clock import SystemClock
    from git_agentops.gitstore.events import is_authentic
    from git_agentops.gitstore.repo import open_store

    store = open_store(repo, clock=SystemClock())
    return _Journal(ref, tuple(c for c in _chain(repository, tip) if is_authentic(store, ref, c)))


def _validate(blob: pygit2.Blob, schema: str, where: str) -> None:
    key = (str(blob.id), schema)
    if key not in _VALID:
        errors = schema_errors(_json(blob), schema)
        if errors:
            raise InvariantError(f"{where} is not a valid {schema} document: {errors[0]}")
        _VALID.add(key)


def _check_chain(repo: Path, repository: pygit2.Repository, ref: str, tip: str) -> _Journal:
    """Linear and forward-only; every event and record of every authentic commit schema-valid."""
    journal = _authentic_chain(repo, repository, ref, tip)
    key = (str(repository.path), ref)
    if journal.commits:
        newest = str(journal.commits[-1].id)
        seen = _SEEN_TIPS.get(key)
        if seen is not None and seen != newest and not repository.descendant_of(newest, seen):
            raise InvariantError(f"{ref} moved from {seen} to {newest}, which does not descend from it")
        _SEEN_TIPS[key] = newest
    before: pygit2.Commit | None = None
    for commit in journal.commits:
        previous, before = before, commit
        if (key[0], str(commit.id)) in _CHECKED_COMMITS:
            continue
        if len(commit.parents) > 1 and (_event(commit) or {}).get("code") != "RUN_STATE_QUARANTINED":
            raise InvariantError(f"{ref}: {commit.id} is a merge; journals are linear (first-parent)")
        event = _event(commit)
        if event is None or schema_errors(event, "event"):
            raise InvariantError(f"{ref}: {commit.id} carries no valid event")
        for path, blob in _changed(repository, commit.tree, previous.tree if previous is not None else None):
            for pattern, schema in SCHEMA_OF:  # what the previous (checked) commit holds was checked with it
                if pattern.fullmatch(path):
                    _validate(blob, schema, f"{ref}:{path} at {commit.id}")
        _CHECKED_COMMITS.add((key[0], str(commit.id)))
    return journal


def _deliveries_in(repository: pygit2.Repository, tree_id: str) -> dict[str, tuple[str, str] | None]:
    """Each current task of a ``tasks`` tree and its delivery (commit, digest), or None while it has none."""
    key = (str(repository.path), tree_id)
    found = _DELIVERIES.get(key)
    if found is None:
        found = {}
        for _path, blob in _files(repository, repository[tree_id].peel(pygit2.Tree)):
            doc = _json(blob)
            if not isinstance(doc, dict) or doc.get("supersededBy"):
                continue
            delivery = (doc.get("extra") or {}).get("delivery")
            found[str(doc["id"])] = (
                (str(delivery.get("commit")), str(delivery.get("digest"))) if isinstance(delivery, dict) else None
            )
        _DELIVERIES[key] = found
    return found


def _deliveries_frozen(repository: pygit2.Repository, journal: _Journal) -> None:
    """Along the state chain, a task's delivery (commit and digest), once recorded, never changes nor goes away."""
    delivered: dict[str, tuple[tuple[str, str], str]] = {}  # task -> (delivery, the commit that recorded it)
    last = ""
    for commit in journal.commits:
        try:
            tasks = str(commit.tree["tasks"].id)
        except KeyError:
            continue
        if tasks == last:
            continue
        last = tasks
        for task_id, now in _deliveries_in(repository, tasks).items():
            before = delivered.get(task_id)
            if before is not None and now != before[0]:
                raise InvariantError(
                    f"{journal.ref}: the delivery of {task_id} was {before[0]} (recorded at {before[1]}) and is "
                    f"{now} at {commit.id}: deliveries are frozen"
                )
            if before is None and now is not None:
                delivered[task_id] = (now, str(commit.id))
        for task_id, (was, where) in delivered.items():
            if task_id not in _deliveries_in(repository, tasks):
                raise InvariantError(
                    f"{journal.ref}: {task_id}, delivered as {was} at {where}, is gone at {commit.id}: deliveries "
                    "are frozen"
                )


def _within(worktree: str, repo: Path) -> bool:
    return Path(worktree).resolve().is_relative_to(Path(repo).resolve())


def _mailbox_response(worktree: str) -> dict[str, Any] | None:
    """A worker's ``response.json`` when it is a regular file that parses (a test may have put anything there)."""
    path = Path(worktree) / ".agentops" / "mailbox" / "response.json"
    try:
        if path.is_symlink() or not path.is_file():
            return None
        found = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _requests_answered(
    repository: pygit2.Repository, journal: _Journal, responses: Mapping[str, dict[str, Any]]
) -> None:
    """Every request record is the answer to its request, and every final answer in a mailbox has its record.

    A record sits where its id hashes to and names its id in its response, and a worker (at or below the worker's
    generation) that exists. A mailbox answer that is not interim (``RUN_HANDOFF_ACCEPTED``...) and not one of the
    refusals given before the action (:data:`UNRECORDED_REFUSALS`) has a record with the same response (but its
    ``requestDigest``: a replay answers with the digest of the bytes it was sent).
    """
    if not journal.commits:
        return
    tree = journal.commits[-1].tree
    workers = {}
    records: dict[str, dict[str, Any]] = {}
    for path, blob in [*_under(repository, tree, "workers"), *_under(repository, tree, "requests")]:
        doc = _json(blob)
        if path.startswith("workers/") and isinstance(doc, dict):
            workers[str(doc["workerId"])] = doc
        elif path.startswith("requests/") and isinstance(doc, dict):
            key = sha256_hex(str(doc["requestId"]))
            if path != f"requests/{key[:2]}/{key}.json":
                raise InvariantError(f"{journal.ref}:{path} holds the record of {doc['requestId']}, kept elsewhere")
            if doc["response"]["requestId"] != doc["requestId"]:
                raise InvariantError(f"{journal.ref}:{path}: the record answers another request")
            worker = workers.get(str(doc["workerId"])) or _worker(repository, tree, str(doc["workerId"]))
            if worker is None or int(worker["generation"]) < int(doc["generation"]):
                raise InvariantError(f"{journal.ref}:{path}: a record of a worker generation that never was")
            records[str(doc["requestId"])] = doc
    for worker_id, response in responses.items():
        request_id = response.get("requestId")
        if not isinstance(request_id, str) or response.get("code") in INTERIM_CODES:
            continue
        record = records.get(request_id)
        if record is None:
            if response.get("ok") is False and response.get("code") in UNRECORDED_REFUSALS:
                continue
            raise InvariantError(
                f"{worker_id}'s mailbox answers {request_id} with {response.get('code')}, and the run's state has no "
                "record of that request"
            )
        ignore = {"requestDigest"}
        if {k: v for k, v in record["response"].items() if k not in ignore} != {
            k: v for k, v in response.items() if k not in ignore
        }:
            raise InvariantError(f"{worker_id}'s mailbox answer to {request_id} is not the one its record holds")


def _worker(repository: pygit2.Repository, tree: pygit2.Tree, worker_id: str) -> dict[str, Any] | None:
    try:
        blob = repository[tree[f"workers/{worker_id}.json"].id]
    except KeyError:
        return None
    found = _json(blob) if isinstance(blob, pygit2.Blob) else None
    return found if isinstance(found, dict) else None


def check_invariants(repo: Path) -> None:
    """What holds of every run in the repository at any moment (``InvariantError``, an AssertionError, if not).

    * each journal (state, policy, every transition) is linear along its first parents -- the one merge a
      journal may hold is a quarantine's -- and only moves forward: the tip a previous check saw is an ancestor
      of the tip now;
    * every event and every record (run, workers, tasks, request records, questions, lease, binding,
      transition) the toolkit wrote, in every commit of those journals, is valid against its schema;
    * deliveries are frozen: along the state chain, a task's delivery (commit and digest) once recorded never
      changes nor goes away;
    * request records and mailbox responses agree (:func:`_requests_answered`).

    Mailboxes are read before the state: the supervisor commits a record before it writes the answer, so an
    answer seen here has its record in the state read after it. Only commits the toolkit wrote (their journal MAC
    checks) are judged: a foreign commit a test put on a journal is the toolkit's tamper checks' business.
    """
    repository = _open(repo)
    responses: dict[str, dict[str, dict[str, Any]]] = {}  # state ref -> worker -> its mailbox's answer
    for ref, tip in _refs(repository).items():  # the mailboxes first (see above)
        if ref.startswith("refs/agentops/runs/") and ref.endswith("/state") and ref.count("/") == 4:
            for _path, blob in _under(repository, repository[tip].peel(pygit2.Tree), "workers"):
                doc = _json(blob)
                # only this clone's own workers: a run fetched from another machine's clone names that clone's
                # worktrees (the same filesystem in a test), whose mailboxes are newer than the copy of its state here
                if isinstance(doc, dict) and isinstance(doc.get("worktree"), str) and _within(doc["worktree"], repo):
                    found = _mailbox_response(doc["worktree"])
                    if found is not None:
                        responses.setdefault(ref, {})[str(doc["workerId"])] = found
    repository = _open(repo)  # a fresh handle: the refs as they are now, after the mailboxes were read
    for ref, tip in sorted(_refs(repository).items()):
        if not ref.startswith("refs/agentops/runs/"):
            continue
        rest = ref.split("/")[4:]
        if rest == ["state"]:
            journal = _check_chain(repo, repository, ref, tip)
            _deliveries_frozen(repository, journal)
            _requests_answered(repository, journal, responses.get(ref, {}))
        elif rest == ["policy"] or (len(rest) == 2 and rest[0] == "journal"):
            _check_chain(repo, repository, ref, tip)


def checked(wait: Callable[Concatenate[Path, P], R]) -> Callable[Concatenate[Path, P], R]:
    """A run helper's wait (``wait(repo, ...)``) that ends with :func:`check_invariants` of ``repo``: every
    end-to-end test then checks the invariants at each step it waits for."""

    @functools.wraps(wait)
    def waited(repo: Path, /, *args: P.args, **kwargs: P.kwargs) -> R:
        result = wait(repo, *args, **kwargs)
        check_invariants(repo)
        return result

    return waited


# -- inline expectations -----------------------------------------------------------------------------------------------

ACCEPT: Final = "AGENTOPS_ACCEPT_GOLDEN"
"""Set to 1 to rewrite the failing inline expectations with what was rendered (then read the diff and commit it)."""


def expect(actual: str, expected: str) -> None:
    """Assert ``actual == expected`` for an expectation written inline (ghstack's and expecttest's way): the text
    is a raw triple-quoted string starting with a newline, right in the test, so a change of behaviour shows in
    the test's own diff.

    With ``AGENTOPS_ACCEPT_GOLDEN=1`` a mismatch rewrites the literal -- the second argument of the one
    ``expect(...)`` call in the calling test function -- instead of failing.
    """
    if actual == expected.removeprefix("\n"):
        return
    if os.environ.get(ACCEPT) == "1":
        caller = sys._getframe(1)
        _rewrite(Path(caller.f_code.co_filename), caller.f_code.co_name, actual)
        return
    import difflib

    diff = "".join(
        difflib.unified_diff(
            expected.removeprefix("\n").splitlines(keepends=True),
            actual.splitlines(keepends=True),
            "expected",
            "rendered",
        )
    )
    raise AssertionError(f"the rendered state differs ({ACCEPT}=1 rewrites the expectation):\n{diff}")


def _rewrite(path: Path, function: str, text: str) -> None:
    """Replace the expectation of the ``expect`` call in ``function`` of ``path`` (under a lock: tests running
    at once in other workers rewrite other functions of the same file)."""
    import ast
    import fcntl

    if '"""' in text or text.endswith("\\"):
        raise AssertionError("this text cannot be written as a raw triple-quoted string; update it by hand")
    with open(path, "r+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        source = handle.read()
        calls = [
            node
            for fn in ast.walk(ast.parse(source))
            if isinstance(fn, ast.FunctionDef) and fn.name == function
            for node in ast.walk(fn)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "expect" and len(node.args) == 2
        ]
        if len(calls) != 1:
            raise AssertionError(f"{function} must make exactly one expect(...) call to be rewritten")
        literal = calls[0].args[1]
        lines = source.splitlines(keepends=True)
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line.encode("utf-8")))
        data = source.encode("utf-8")
        start = offsets[literal.lineno - 1] + literal.col_offset
        end = offsets[(literal.end_lineno or literal.lineno) - 1] + (literal.end_col_offset or 0)
        new = data[:start] + f'r"""\n{text}"""'.encode() + data[end:]
        handle.seek(0)
        handle.write(new.decode("utf-8"))
        handle.truncate()
