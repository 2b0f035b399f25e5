"""Notes: add-if-absent with CAS, 2/38 fan-out that git reads, no note lost to a concurrent writer."""

from __future__ import annotations

from pathlib import Path

import pytest

from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.notes import RECEIPTS_REF, Notes
from git_agentops.gitstore.repo import Store

from ..conftest import git
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


@pytest.mark.parametrize("loose", [False, True])
def test_git_cli_backend_writes_the_same_notes_as_pygit2(repo_path: Path, tmp_path: Path, loose: bool) -> None:
    """Differential: the plumbing backend (and its direct loose-object writer) yields byte-identical objects."""
    import os

    from git_agentops.clock import FixedClock
    from git_agentops.gitstore.backend import GitCliBackend
    from git_agentops.gitstore.repo import open_store

    from ..conftest import IDENTITY, make_repo

    twin = make_repo(tmp_path / "twin")
    assert git(twin, "rev-parse", "HEAD") == git(repo_path, "rev-parse", "HEAD")  # same fixed dates and identity
    head = git(repo_path, "rev-parse", "HEAD")
    tree = git(repo_path, "rev-parse", "HEAD^{tree}")
    ours = Notes(open_store(repo_path, clock=FixedClock(), identity=IDENTITY), "refs/notes/agentops/evidence")
    cli = Notes(
        GitCliBackend(
            twin,
            environ=dict(os.environ),
            identity=IDENTITY,
            clock=FixedClock(),
            loose_objects=(twin / ".git" / "objects") if loose else None,
        ),
        "refs/notes/agentops/evidence",
    )
    for notes in (ours, cli):
        notes.append({head: b'{"n":1}\n', tree: b'{"t":1}\n'})
        notes.append({head: b'{"n":2}\n'})
        with pytest.raises(AgentOpsError) as exists:
            notes.add(head, b"again")
        assert exists.value.code == "NOTE_EXISTS"
    assert git(twin, "rev-parse", "refs/notes/agentops/evidence") == git(
        repo_path, "rev-parse", "refs/notes/agentops/evidence"
    )
    assert cli.read(head) == b'{"n":1}\n{"n":2}\n' and dict(cli.items()) == dict(ours.items())
    assert git(twin, "notes", "--ref=agentops/evidence", "show", tree) == '{"t":1}'
    git(twin, "fsck", "--strict")


def test_git_cli_backend_cas_conflict_and_missing_objects(repo_path: Path) -> None:
    import os

    from git_agentops.clock import FixedClock
    from git_agentops.gitstore.backend import GitCliBackend
    from git_agentops.gitstore.refnames import RefConflict

    from ..conftest import IDENTITY

    backend = GitCliBackend(repo_path, environ=dict(os.environ), identity=IDENTITY, clock=FixedClock())
    head = git(repo_path, "rev-parse", "HEAD")
    assert backend.read_ref("refs/notes/none") is None and not backend.has_object("1" * 40)
    backend.cas_ref("refs/agentops/x", head, None, "create")
    with pytest.raises(RefConflict):
        backend.cas_ref("refs/agentops/x", head, None, "create twice")
    with pytest.raises(RefConflict):
        backend.cas_ref("refs/agentops/x", head, "2" * 40, "stale")
    notes = Notes(backend, RECEIPTS_REF)
    with pytest.raises(AgentOpsError) as missing:
        notes.add("3" * 40, b"x")
    assert missing.value.code == "OBJECT_MISSING"
    backend.close()
