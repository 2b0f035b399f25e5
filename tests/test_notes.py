"""Notes: add-if-absent with CAS, 2/38 fan-out that git reads, no note lost to a concurrent writer."""

from __future__ import annotations

from pathlib import Path

import pytest

from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.notes import RECEIPTS_REF, Notes
from git_agentops.gitstore.repo import Store

from .conftest import git
from .test_journal import _start_workers


def test_note_is_readable_by_git_notes_show(store: Store, repo_path: Path) -> None:
    head = git(repo_path, "rev-parse", "HEAD")
    notes = Notes(store, RECEIPTS_REF)
    assert notes.read(head) is None
    notes.add(head, b'{"receipt": 1}\n')
    assert notes.read(head) == b'{"receipt": 1}\n'
    assert git(repo_path, "notes", "--ref=agentops/receipts", "show", head) == '{"receipt": 1}'
    assert git(repo_path, "ls-tree", "-r", "--name-only", RECEIPTS_REF) == f"{head[:2]}/{head[2:]}"
    git(repo_path, "fsck", "--strict")


def test_second_note_on_same_object_is_note_exists_and_first_survives(store: Store, repo_path: Path) -> None:
    head = git(repo_path, "rev-parse", "HEAD")
    notes = Notes(store, RECEIPTS_REF)
    notes.add(head, b"first")
    tip = git(repo_path, "rev-parse", RECEIPTS_REF)
    with pytest.raises(AgentOpsError) as caught:
        notes.add(head, b"second")
    assert caught.value.code == "NOTE_EXISTS"
    assert notes.read(head) == b"first" and git(repo_path, "rev-parse", RECEIPTS_REF) == tip


def test_notes_written_by_git_in_any_layout_are_read_and_respected(store: Store, repo_path: Path) -> None:
    head = git(repo_path, "rev-parse", "HEAD")
    git(repo_path, "notes", "--ref=agentops/receipts", "add", "-m", "from git", head)  # flat layout
    notes = Notes(store, RECEIPTS_REF)
    assert notes.read(head) == b"from git\n"
    with pytest.raises(AgentOpsError) as caught:
        notes.add(head, b"ours")
    assert caught.value.code == "NOTE_EXISTS"
    blob = str(store.repo.create_blob(b"another object"))
    notes.add(blob, b"ours")  # appended on top of git's commit
    assert git(repo_path, "notes", "--ref=agentops/receipts", "show", blob) == "ours"
    assert git(repo_path, "notes", "--ref=agentops/receipts", "show", head) == "from git"
    assert dict(notes.items()) == {head: b"from git\n", blob: b"ours"}


def test_note_on_missing_object_or_bad_ref_is_refused(store: Store) -> None:
    notes = Notes(store, RECEIPTS_REF)
    with pytest.raises(AgentOpsError) as missing:
        notes.add("1" * 40, b"x")
    assert missing.value.code == "OBJECT_MISSING"
    with pytest.raises(AgentOpsError) as bad:
        notes.add("not-an-id", b"x")
    assert bad.value.code == "OBJECT_MISSING"
    with pytest.raises(AgentOpsError) as outside:
        Notes(store, "refs/heads/main")
    assert outside.value.code == "REF_NAME_INVALID"


@pytest.mark.slow
def test_two_processes_adding_notes_concurrently_lose_none(store: Store, repo_path: Path) -> None:
    """Invariant: concurrent note writers on one notes ref never lose a note (pygit2's create_note does)."""
    results = _start_workers("notes", repo_path, 2, 150, RECEIPTS_REF)
    notes = Notes(store, RECEIPTS_REF)
    stored = dict(notes.items())
    expected = {t: f"note {r['worker']}-{i}\n".encode() for r in results for i, t in enumerate(r["targets"])}  # type: ignore[arg-type]
    assert stored == expected and len(stored) == 300
    listed = git(repo_path, "notes", "--ref=agentops/receipts", "list").splitlines()
    assert len(listed) == 300
    sample = results[1]["targets"][-1]  # type: ignore[index]
    assert git(repo_path, "notes", "--ref=agentops/receipts", "show", sample) == "note 1-149"
    git(repo_path, "fsck", "--strict")


def test_append_adds_records_to_several_objects_in_one_commit_and_never_drops_any(
    store: Store, repo_path: Path
) -> None:
    head = git(repo_path, "rev-parse", "HEAD")
    tree = git(repo_path, "rev-parse", "HEAD^{tree}")
    git(repo_path, "notes", "--ref=agentops/evidence", "add", "-m", "written by git", head)  # flat, no newline
    notes = Notes(store, "refs/notes/agentops/evidence")
    before = git(repo_path, "rev-parse", "refs/notes/agentops/evidence")
    notes.append({head: b'{"n":1}\n', tree: b'{"n":1}\n'})
    assert git(repo_path, "rev-list", "--count", f"{before}..refs/notes/agentops/evidence") == "1"  # one commit
    notes.append({head: b'{"n":2}\n'})
    assert notes.read(head) == b'written by git\n{"n":1}\n{"n":2}\n'
    assert notes.read(tree) == b'{"n":1}\n'
    shown = git(repo_path, "notes", "--ref=agentops/evidence", "show", head).splitlines()
    assert shown == ["written by git", '{"n":1}', '{"n":2}']
    assert head not in git(repo_path, "ls-tree", "--name-only", "refs/notes/agentops/evidence")  # moved to fan-out
    with pytest.raises(ValueError):
        notes.append({head: b"no newline"})
    git(repo_path, "fsck", "--strict")
