"""Journal: a commit chain appended by compare-and-swap, readable by git and dulwich, losing nothing under races."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pygit2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from git_agentops import canonical
from git_agentops.clock import FixedClock
from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.events import mac_input, split_mac
from git_agentops.gitstore.journal import Change, Event, Journal, artifact_path
from git_agentops.gitstore.keys import keyring
from git_agentops.gitstore.repo import Store, open_store
from git_agentops.gitstore.retry import RetryPolicy

from ..conftest import IDENTITY, git

REF = "refs/agentops/runs/r1/state"
PROCS = Path(__file__).parents[1] / "procs.py"


def _put(path: str, data: bytes):  # type: ignore[no-untyped-def]
    def fn(change: Change) -> None:
        change.put(path, data)

    return fn


@pytest.mark.event_data_free
def test_first_mutation_creates_the_ref_and_event_is_the_commit_message(store: Store, repo_path: Path) -> None:
    journal = Journal(store, REF)
    assert not journal.exists()
    assert journal.read().get("run.json") is None
    result = journal.mutate(_put("run.json", b'{"a":1}\n'), Event("RUN_CREATED", "run created", {"goal": "x"}))
    assert result.commit is not None and result.attempts == 1
    assert git(repo_path, "rev-parse", REF) == result.commit
    assert git(repo_path, "show", f"{REF}:run.json") == '{"a":1}'
    message = git(repo_path, "log", "-1", "--format=%B", REF)
    assert message.splitlines()[0] == "RUN_CREATED: run created"
    trailer = git(repo_path, "log", "-1", "--format=%(trailers:key=Agentops-Event,valueonly)", REF)
    assert json.loads(trailer)["data"] == {"goal": "x"}
    [entry] = list(journal.log())
    assert (entry.code, entry.summary, entry.data, entry.parent) == ("RUN_CREATED", "run created", {"goal": "x"}, None)


def test_log_is_newest_first_and_chain_is_linear(store: Store, repo_path: Path) -> None:
    journal = Journal(store, REF)
    commits = [journal.mutate(_put("n", str(i).encode()), Event("STEP", f"step {i}")).commit for i in range(5)]
    entries = list(journal.log())
    assert [e.summary for e in entries] == [f"step {i}" for i in reversed(range(5))]
    assert [e.commit for e in entries] == list(reversed(commits))
    assert [e.parent for e in entries] == [*list(reversed(commits))[1:], None]
    assert [e.summary for e in journal.log(limit=2)] == ["step 4", "step 3"]
    assert journal.read_at(commits[1]).get("n") == b"1"  # read_at sees the past


def test_reads_see_own_writes_and_deletes(store: Store) -> None:
    journal = Journal(store, REF)
    journal.mutate(_put("dir/a", b"A"), Event("SEED", "seed"))
    journal.mutate(_put("dir/b", b"B"), Event("SEED", "seed"))

    def fn(change: Change) -> list[str]:
        assert change.list("dir") == ["a", "b"]
        change.delete("dir/a")
        change.put("dir/c", b"C")
        assert change.get("dir/a") is None and change.get("dir/c") == b"C"
        assert change.list("dir") == ["b", "c"]
        change.delete("dir")
        assert change.list("dir") == [] and not change.exists("dir") and change.get("dir/b") is None
        change.put("dir/d", b"D")  # re-created from empty: b and c are gone
        assert change.list("dir") == ["d"] and change.get("dir/b") is None
        return change.list()

    assert journal.mutate(fn, Event("EDIT", "edit")).value == ["dir"]
    snapshot = journal.read()
    assert snapshot.list("dir") == ["d"]
    assert snapshot.get("dir/d") == b"D" and snapshot.get("dir/b") is None


def test_deleting_everything_leaves_an_empty_tree(store: Store, repo_path: Path) -> None:
    journal = Journal(store, REF)
    journal.mutate(_put("a/b/c", b"x"), Event("SEED", "seed"))
    journal.mutate(lambda change: change.delete("a"), Event("WIPE", "wipe"))
    assert journal.read().list() == []
    assert git(repo_path, "rev-parse", f"{REF}^{{tree}}") == "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def test_no_change_and_no_event_writes_nothing(store: Store) -> None:
    journal = Journal(store, REF)
    first = journal.mutate(_put("x", b"1"), Event("SEED", "seed")).commit
    result = journal.mutate(lambda change: change.get("x"))
    assert result.value == b"1" and result.commit is None
    assert journal.read().commit == first
    event_only = journal.mutate(lambda change: None, Event("NOTED", "a diagnostic with no state change"))
    assert event_only.commit is not None and journal.read().tree_id == journal.read_at(first).tree_id


def test_function_error_aborts_without_writing(store: Store) -> None:
    journal = Journal(store, REF)
    journal.mutate(_put("x", b"1"), Event("SEED", "seed"))
    before = journal.read().commit

    def fn(change: Change) -> None:
        change.put("x", b"2")
        raise AgentOpsError("REF_CONFLICT", "refused by the function")

    with pytest.raises(AgentOpsError):
        journal.mutate(fn, Event("EDIT", "edit"))
    assert journal.read().commit == before and journal.read().get("x") == b"1"


def test_file_and_directory_cannot_share_a_path(store: Store) -> None:
    journal = Journal(store, REF)
    journal.mutate(_put("a", b"file"), Event("SEED", "seed"))
    with pytest.raises(AgentOpsError) as caught:
        journal.mutate(_put("a/b", b"x"), Event("EDIT", "edit"))
    assert caught.value.code == "JOURNAL_PATH_INVALID"


@pytest.mark.parametrize("path", ["", "/abs", "a//b", "a/../b", "./a", "a/.", "a\x00b", "a\nb", ".git/x", "a\\b"])
def test_invalid_journal_paths_are_refused(store: Store, path: str) -> None:
    journal = Journal(store, REF)
    with pytest.raises(AgentOpsError) as caught:
        journal.mutate(_put(path, b"x"), Event("EDIT", "edit"))
    assert caught.value.code == "JOURNAL_PATH_INVALID"
    assert not journal.exists()


def test_mutation_rewrites_only_touched_subtrees(store: Store) -> None:
    journal = Journal(store, REF)

    def seed(change: Change) -> None:
        for i in range(300):
            change.put(f"items/{i % 16:02x}/{i}", b"v")
        change.put("other/keep", b"k")

    journal.mutate(seed, Event("SEED", "seed"))
    before = journal.read()
    journal.mutate(_put("items/03/new", b"n"), Event("EDIT", "edit"))
    after = journal.read()
    repo = store.repo
    old_tree, new_tree = repo[before.tree_id], repo[after.tree_id]  # type: ignore[index]
    assert old_tree["other"].id == new_tree["other"].id  # untouched subtree reused as is
    old_items, new_items = repo[old_tree["items"].id], repo[new_tree["items"].id]
    changed = [e.name for e in new_items if e.name not in old_items or old_items[e.name].id != e.id]
    assert changed == ["03"]


def test_artifacts_are_content_addressed_and_checked_on_read(store: Store, repo_path: Path) -> None:
    journal = Journal(store, REF)
    digest = journal.mutate(lambda change: change.put_artifact(b"evidence bytes"), Event("ART", "artifact")).value
    assert digest == canonical.sha256_hex(b"evidence bytes")
    assert artifact_path(digest) == f"artifacts/{digest[:2]}/{digest}"
    assert journal.read().artifact(digest) == b"evidence bytes"
    # tamper: store different bytes under the digest's name
    journal.mutate(_put(artifact_path(digest), b"forged"), Event("TAMPER", "tamper"))
    with pytest.raises(AgentOpsError) as caught:
        journal.read().artifact(digest)
    assert caught.value.code == "ARTIFACT_CORRUPT"
    with pytest.raises(AgentOpsError) as missing:
        journal.read().artifact("0" * 64)
    assert missing.value.code == "ARTIFACT_MISSING"
    with pytest.raises(AgentOpsError) as bad:
        journal.read().artifact("../../etc/passwd")
    assert bad.value.code == "JOURNAL_PATH_INVALID"


def test_json_documents_are_schema_checked_both_ways(store: Store) -> None:
    journal = Journal(store, REF)
    good = {"code": "X_Y", "summary": "s", "data": {}, "time": 1}
    journal.mutate(lambda change: change.put_json("e.json", good, schema="event"), Event("SEED", "seed"))
    assert journal.read().json("e.json", schema="event") == good
    with pytest.raises(AgentOpsError) as caught:
        journal.mutate(lambda c: c.put_json("e.json", {**good, "time": "noon"}, schema="event"), Event("E", "e"))
    assert caught.value.code == "SCHEMA_INVALID" and "$.time" in caught.value.message
    journal.mutate(_put("e.json", b'{"code": "X_Y"}'), Event("RAW", "raw write bypassing the schema"))
    with pytest.raises(AgentOpsError) as read_error:
        journal.read().json("e.json", schema="event")
    assert read_error.value.code == "SCHEMA_INVALID"
    journal.mutate(_put("big.json", b"[" + b"1," * 600 + b"1]"), Event("RAW", "raw"))
    with pytest.raises(AgentOpsError) as too_big:
        journal.read().json("big.json", schema="event", max_bytes=1000)
    assert too_big.value.code == "DOC_TOO_LARGE"


def test_a_ref_moved_by_another_writer_between_read_and_write_causes_retry_not_overwrite(
    store: Store, repo_path: Path
) -> None:
    journal = Journal(store, REF)
    journal.mutate(_put("counter", b"0"), Event("SEED", "seed"))
    other = Journal(open_store(repo_path, clock=FixedClock(start=5000.0), identity=IDENTITY), REF)
    calls: list[bytes | None] = []

    def bump(change: Change) -> None:
        value = change.get("counter")
        calls.append(value)
        if len(calls) == 1:  # another toolkit process appends a commit after our read, before our write
            other.mutate(_put("counter", b"41"), Event("OTHER", "another writer"))
        change.put("counter", str(int(value or b"0") + 1).encode())

    result = journal.mutate(bump, Event("BUMP", "bump"))
    assert result.attempts == 2 and calls == [b"0", b"41"]
    assert journal.read().get("counter") == b"42"  # the other write survived: we built on top of it
    assert [e.code for e in journal.log()] == ["BUMP", "OTHER", "SEED"]


def test_a_commit_appended_with_the_git_cli_between_read_and_write_is_never_built_on(
    store: Store, repo_path: Path
) -> None:
    """Invariant: mutate re-reads after a lost race, and a foreign tip ends it: RUN_STATE_TAMPERED, no write."""
    journal = Journal(store, REF)
    journal.mutate(_put("counter", b"0"), Event("SEED", "seed"))
    appended: list[str] = []

    def bump(change: Change) -> None:
        if not appended:
            tip = git(repo_path, "rev-parse", REF)
            blob = git(repo_path, "hash-object", "-w", "--stdin", input="41")
            tree = git(repo_path, "mktree", input=f"100644 blob {blob}\tcounter\n")
            message = git(repo_path, "log", "-1", "--format=%B", REF)  # a copied event and a copied MAC
            appended.append(git(repo_path, "commit-tree", tree, "-p", tip, "-m", message))
            git(repo_path, "update-ref", REF, appended[0], tip)
        change.put("counter", b"1")

    with pytest.raises(AgentOpsError) as caught:
        journal.mutate(bump, Event("BUMP", "bump"))
    assert caught.value.code == "RUN_STATE_TAMPERED"
    assert caught.value.details == {"ref": REF, "commit": appended[0]}
    assert git(repo_path, "rev-parse", REF) == appended[0]  # nothing on top of it
    assert [(e.code, e.foreign) for e in journal.log()] == [("SEED", True), ("SEED", False)]


def test_every_commit_carries_a_mac_bound_to_ref_tree_parents_and_message(store: Store, repo_path: Path) -> None:
    journal = Journal(store, REF)
    first = journal.mutate(_put("a", b"1"), Event("ONE", "one", {"x": 1})).commit
    second = journal.mutate(_put("a", b"2"), Event("TWO", "two")).commit
    assert first is not None and second is not None
    raw = store.repo[second].raw_message
    message, mac = split_mac(raw) or (b"", "")
    assert raw == message + f"Agentops-Mac: {mac}\n".encode()
    assert message.decode().startswith("TWO: two\n\nAgentops-Event: ")
    signed = mac_input(REF, git(repo_path, "rev-parse", f"{second}^{{tree}}"), [first], message.decode())
    assert keyring(store.private_dir()).check("journal", signed, mac)
    assert not keyring(store.private_dir()).check("journal", mac_input(REF.replace("r1", "r2"), *_rest(signed)), mac)
    trailers = git(repo_path, "log", "-1", "--format=%(trailers:only,unfold)", REF).splitlines()
    assert [t.split(":", 1)[0] for t in trailers] == ["Agentops-Event", "Agentops-Mac"]  # git reads both trailers
    assert all(journal.is_authentic(store.repo[c]) for c in (first, second))


@given(
    message=st.text(alphabet=st.characters(blacklist_categories=["Cs"])),
    parents=st.lists(st.text(alphabet="0123456789abcdef", min_size=40, max_size=40), max_size=2),
)
def test_the_mac_input_is_the_canonical_json_of_ref_tree_parents_and_message(message: str, parents: list[str]) -> None:
    doc = {"message": message, "parents": parents, "ref": REF, "tree": "a" * 40}
    assert mac_input(REF, "a" * 40, parents, message) == canonical.canonical_bytes(doc)


def _rest(signed: bytes) -> tuple[str, list[str], str]:
    doc = json.loads(signed)
    return doc["tree"], doc["parents"], doc["message"]


def test_contention_past_the_deadline_is_journal_contended(store: Store, repo_path: Path) -> None:
    journal = Journal(store, REF, retry=RetryPolicy(deadline=0.3))
    journal.mutate(_put("x", b"0"), Event("SEED", "seed"))
    lock = store.common_dir / (REF + ".lock")
    lock.write_text("held by someone else\n")  # git's own lock file: every attempt finds the ref locked
    try:
        with pytest.raises(AgentOpsError) as caught:
            journal.mutate(_put("x", b"1"), Event("EDIT", "edit"))
        assert caught.value.code == "JOURNAL_CONTENDED"
        assert caught.value.details["attempts"] > 1
    finally:
        lock.unlink()
    assert journal.read().get("x") == b"0"


def test_a_commit_without_an_event_is_foreign_in_the_log_and_a_tree_tip_is_corrupt(
    store: Store, repo_path: Path
) -> None:
    journal = Journal(store, REF)
    journal.mutate(_put("x", b"0"), Event("SEED", "seed"))
    tip = git(repo_path, "rev-parse", REF)
    bad = git(repo_path, "commit-tree", f"{tip}^{{tree}}", "-p", tip, "-m", "no trailer here")
    git(repo_path, "update-ref", REF, bad, tip)
    [foreign, seed] = list(journal.log())
    assert (foreign.commit, foreign.code, foreign.summary, foreign.foreign) == (bad, "UNKNOWN", "no trailer here", True)
    assert (seed.code, seed.foreign) == ("SEED", False)
    with pytest.raises(AgentOpsError) as refused:
        journal.read()
    assert refused.value.code == "RUN_STATE_TAMPERED"
    assert journal.read(verify=False).commit == bad  # forensics may look
    git(repo_path, "update-ref", REF, git(repo_path, "rev-parse", f"{tip}^{{tree}}"), bad)
    with pytest.raises(AgentOpsError) as not_commit:
        journal.read()
    assert not_commit.value.code == "JOURNAL_CORRUPT"


def test_store_output_is_readable_by_git_and_dulwich(store: Store, repo_path: Path) -> None:
    journal = Journal(store, REF)
    journal.mutate(_put("workers/w1.json", b'{"id":"w1"}\n'), Event("WORKER_ADDED", "worker w1 added", {"w": 1}))
    tip = journal.read().commit
    assert git(repo_path, "cat-file", "-t", tip) == "commit"
    assert git(repo_path, "cat-file", "-p", f"{tip}:workers/w1.json") == '{"id":"w1"}'
    assert "WORKER_ADDED: worker w1 added" in git(repo_path, "log", "--oneline", REF)
    assert git(repo_path, "ls-tree", "-r", "--name-only", REF) == "workers/w1.json"
    from dulwich.repo import Repo

    with Repo(str(repo_path)) as dulwich_repo:
        commit = dulwich_repo[REF.encode()]
        assert commit.id.decode() == tip
        _, blob_id = commit.tree and dulwich_repo[commit.tree].lookup_path(dulwich_repo.__getitem__, b"workers/w1.json")
        assert dulwich_repo[blob_id].data == b'{"id":"w1"}\n'
        assert commit.message.decode().startswith("WORKER_ADDED: worker w1 added\n\nAgentops-Event: ")
    git(repo_path, "fsck", "--strict", "--no-dangling")


def _start_workers(mode: str, repo: Path, workers: int, count: int, extra: str) -> list[dict[str, object]]:
    (repo / ".go").unlink(missing_ok=True)
    procs = [
        subprocess.Popen(
            [sys.executable, str(PROCS), mode, str(repo), str(w), str(count), extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(workers)
    ]
    (repo / ".go").touch()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    (repo / ".go").unlink()
    return results


@pytest.mark.slow
def test_four_processes_times_250_increments_lose_nothing_and_stay_linear(store: Store, repo_path: Path) -> None:
    """Invariant: concurrent Journal.mutate calls are serialised by CAS: no lost update, a linear chain."""
    _start_workers("journal", repo_path, 4, 250, REF)
    journal = Journal(store, REF)
    snapshot = journal.read()
    assert snapshot.get("counter") == b"1000"
    assert sorted(int(snapshot.get(f"by/{w}") or b"0") for w in range(4)) == [250] * 4
    commits = list(store.repo.walk(pygit2.Oid(hex=snapshot.commit), pygit2.enums.SortMode.TOPOLOGICAL))
    assert len(commits) == 1000
    assert all(len(c.parents) == 1 for c in commits[:-1]) and len(commits[-1].parents) == 0
    first_parent_chain = list(journal.log())
    assert len(first_parent_chain) == 1000  # each commit's only parent is the previous tip
    git(repo_path, "fsck", "--strict")
