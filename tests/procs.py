"""Worker processes for the race tests: real, separate Python processes started with subprocess.

Usage: ``python procs.py MODE REPO WORKER_ID COUNT [ARG]``. Each worker waits until the file ``REPO/.go`` exists
(so all workers start together), does its part, and prints one JSON line describing what it did.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from git_agentops.clock import SystemClock
from git_agentops.eventkinds import EventCode
from git_agentops.gitstore.identity import Identity
from git_agentops.gitstore.journal import Journal
from git_agentops.gitstore.notes import Notes
from git_agentops.gitstore.refs import create_ref
from git_agentops.gitstore.repo import open_store

IDENTITY = Identity("Race Worker", "race@example.invalid")


def _wait_for_go(repo: Path) -> None:
    deadline = time.monotonic() + 60
    while not (repo / ".go").exists():
        if time.monotonic() > deadline:
            raise SystemExit("no go signal")
        time.sleep(0.005)


def journal_increment(repo: Path, worker: int, count: int, ref: str) -> dict[str, object]:
    store = open_store(repo, clock=SystemClock(), identity=IDENTITY)
    journal = Journal(store, ref)
    attempts = 0

    def bump(change):  # type: ignore[no-untyped-def]
        value = int(change.get("counter") or b"0")
        change.put("counter", str(value + 1).encode())
        change.put(f"by/{worker}", str(int(change.get(f"by/{worker}") or b"0") + 1).encode())

    from git_agentops.eventkinds import allow_scratch
    from git_agentops.gitstore.journal import Event

    allow_scratch(frozenset({"COUNTER_INCREMENTED"}))  # a made-up kind: this tests the journal, not the vocabulary

    _wait_for_go(repo)
    for i in range(count):
        result = journal.mutate(bump, Event(EventCode("COUNTER_INCREMENTED"), f"worker {worker} increment {i}"))
        attempts += result.attempts
    return {"worker": worker, "done": count, "attempts": attempts}


def claim_refs(repo: Path, worker: int, count: int, prefix: str) -> dict[str, object]:
    store = open_store(repo, clock=SystemClock(), identity=IDENTITY)
    repo_obj = store.repo
    sig = store.signature()
    tree = repo_obj.TreeBuilder().write()
    mine = str(repo_obj.create_commit(None, sig, sig, f"claims of worker {worker}\n", tree, []))
    _wait_for_go(repo)
    claimed = [f"{prefix}{i:04d}" for i in range(count) if create_ref(store, f"{prefix}{i:04d}", mine, "claim")]
    return {"worker": worker, "commit": mine, "claimed": claimed}


def add_notes(repo: Path, worker: int, count: int, ref: str) -> dict[str, object]:
    store = open_store(repo, clock=SystemClock(), identity=IDENTITY)
    repo_obj = store.repo
    targets = [str(repo_obj.create_blob(f"object {worker}-{i}\n".encode())) for i in range(count)]
    notes = Notes(store, ref)
    _wait_for_go(repo)
    for i, target in enumerate(targets):
        notes.add(target, f"note {worker}-{i}\n".encode())
    return {"worker": worker, "targets": targets}


MODES = {"journal": journal_increment, "claim": claim_refs, "notes": add_notes}

if __name__ == "__main__":
    mode, repo_arg, worker_arg, count_arg, extra = sys.argv[1:6]
    out = MODES[mode](Path(repo_arg), int(worker_arg), int(count_arg), extra)
    print(json.dumps(out))
