"""``git agentops-sync``: refs and notes between two machines and a bare server, by compare-and-swap.

Two clones of one bare repository play two machines; everything is real git over the file transport."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from git_agentops.clock import SystemClock
from git_agentops.errors import AgentOpsError
from git_agentops.gitstore import sync
from git_agentops.gitstore.notes import EVIDENCE_REF, RECEIPTS_REF, Notes
from git_agentops.gitstore.repo import Store, open_store

from ..conftest import commit_files, git, make_repo


def machines(tmp: Path) -> tuple[Path, Path, Path]:
    """A bare server with one commit on main, and two clones of it."""
    seed = make_repo(tmp / "seed", files={"a.txt": "a\n"})
    server = tmp / "server.git"
    git(tmp, "clone", "-q", "--bare", str(seed), str(server))
    a, b = tmp / "a", tmp / "b"
    for where in (a, b):
        git(tmp, "clone", "-q", str(server), str(where))
    return server, a, b


def store(path: Path) -> Store:
    return open_store(path, clock=SystemClock())


def cli_sync(cwd: Path, *args: str) -> tuple[int, dict[str, object], str]:
    done = subprocess.run(
        ["git", "agentops-sync", *args, "--json"], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}, done.stderr


def commits(repo: Path, count: int, name: str) -> list[str]:
    return [commit_files(repo, {f"{name}{i}.txt": f"{i}\n"}, f"{name} {i}") for i in range(count)]


def test_notes_written_on_both_machines_merge_with_nothing_lost(tmp_path: Path) -> None:
    """Invariant: notes are per object, so two machines' notes on different commits union on sync -- on the
    server and on both machines -- and nothing is forced."""
    server, a, b = machines(tmp_path)
    ours, theirs = commits(a, 5, "a"), commits(b, 5, "b")
    for repo, targets in ((a, ours), (b, theirs)):
        notes = Notes(store(repo), RECEIPTS_REF)
        for commit in targets:
            notes.add(commit, f"receipt of {commit}\n".encode())
    code, doc, err = cli_sync(a, "push")
    assert code == 0, err
    assert doc["refs"][RECEIPTS_REF] == "pushed"  # type: ignore[index]
    code, doc, err = cli_sync(b, "push")  # b's notes diverged from the server's: merged, then pushed
    assert code == 0, err
    assert doc["refs"][RECEIPTS_REF] == "pushed"  # type: ignore[index]
    code, _, err = cli_sync(a, "fetch")
    assert code == 0, err
    for repo in (server, a, b):
        notes = Notes(store(repo), RECEIPTS_REF)
        for commit in (*ours, *theirs):
            assert notes.read(commit) == f"receipt of {commit}\n".encode(), (repo, commit)
    assert git(server, "notes", "--ref=agentops/receipts", "show", theirs[0]) == f"receipt of {theirs[0]}"
    git(server, "fsck", "--strict")


def test_two_different_notes_for_one_object_are_a_conflict_with_both_kept(tmp_path: Path) -> None:
    _server, a, b = machines(tmp_path)
    target = git(a, "rev-parse", "HEAD")
    Notes(store(a), RECEIPTS_REF).add(target, b"receipt from a\n")
    Notes(store(b), RECEIPTS_REF).add(target, b"receipt from b\n")
    assert cli_sync(a, "push")[0] == 0
    code, doc, err = cli_sync(b, "fetch")
    assert code == 1 and "SYNC_DIVERGED" in err, err
    assert doc["conflicts"] == {RECEIPTS_REF: [target]}
    assert Notes(store(b), RECEIPTS_REF).read(target) == b"receipt from b\n"  # the local note stays
    kept = git(b, "show", f"refs/agentops-sync/origin/conflicts/agentops/receipts:{target[:2]}/{target[2:]}")
    assert kept == "receipt from a"


def test_an_append_only_note_extended_on_one_machine_is_taken_whole(tmp_path: Path) -> None:
    server, a, b = machines(tmp_path)
    target = git(a, "rev-parse", "HEAD")
    Notes(store(a), EVIDENCE_REF).append({target: b'{"record": 1}\n'})
    assert cli_sync(a, "push")[0] == 0
    assert cli_sync(b, "fetch")[0] == 0
    Notes(store(b), EVIDENCE_REF).append({target: b'{"record": 2}\n'})
    commit_files(a, {"more.txt": "x\n"}, "more")
    Notes(store(a), EVIDENCE_REF).append({git(a, "rev-parse", "HEAD"): b'{"record": 3}\n'})
    assert cli_sync(a, "push")[0] == 0
    code, doc, err = cli_sync(b, "push")
    assert code == 0, err
    assert doc["conflicts"] == {}
    assert Notes(store(server), EVIDENCE_REF).read(target) == b'{"record": 1}\n{"record": 2}\n'


def test_a_run_ref_that_diverged_is_reported_not_forced(tmp_path: Path) -> None:
    server, a, b = machines(tmp_path)
    base = git(a, "rev-parse", "HEAD")
    one = commit_files(a, {"x.txt": "1\n"}, "one")
    git(a, "update-ref", "refs/agentops/runs/r1/state", one)
    assert cli_sync(a, "push")[0] == 0
    git(b, "checkout", "-q", base)
    other = commit_files(b, {"x.txt": "2\n"}, "two")
    git(b, "update-ref", "refs/agentops/runs/r1/state", other)
    code, doc, err = cli_sync(b, "push")
    assert code == 1 and "diverged" in err, err
    assert doc["refs"]["refs/agentops/runs/r1/state"] == "diverged"  # type: ignore[index]
    assert git(server, "rev-parse", "refs/agentops/runs/r1/state") == one  # the server kept its value
    assert git(b, "rev-parse", "refs/agentops/runs/r1/state") == other  # and so did b


def test_a_push_that_loses_the_race_is_fetched_merged_and_retried_never_forced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Invariant: between a's fetch and its push, b pushes a note; a's atomic push is refused by its lease, a
    fetches again (merging b's note) and pushes -- b's note is on the server afterwards."""
    server, a, b = machines(tmp_path)
    mine, raced = commits(a, 1, "a")[0], commits(b, 1, "b")[0]
    Notes(store(a), RECEIPTS_REF).add(mine, b"a's\n")
    Notes(store(b), RECEIPTS_REF).add(raced, b"b's\n")
    real = sync.push_atomic
    calls: list[int] = []

    def racing(st: Store, remote: str, sends: object, **kw: float) -> dict[str, str]:
        calls.append(1)
        if len(calls) == 1:
            assert cli_sync(b, "push")[0] == 0  # b wins the race
        return real(st, remote, sends, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(sync, "push_atomic", racing)
    outcome = sync.push(store(a), "origin")
    assert outcome.attempts == 2 and len(calls) == 2
    notes = Notes(store(server), RECEIPTS_REF)
    assert notes.read(mine) == b"a's\n" and notes.read(raced) == b"b's\n"


def test_an_unreachable_remote_and_a_server_refusal_change_nothing(tmp_path: Path) -> None:
    server, a, _ = machines(tmp_path)
    Notes(store(a), RECEIPTS_REF).add(git(a, "rev-parse", "HEAD"), b"r\n")
    git(a, "remote", "add", "gone", str(tmp_path / "nowhere.git"))
    code, _, err = cli_sync(a, "push", "--remote", "gone")
    assert code == 3 and "SYNC_REMOTE_UNREACHABLE" in err and "is configured" not in err, err
    code, _, err = cli_sync(a, "push", "--remote", "nameless")  # a name no remote has: said first, with the fix
    assert code == 3 and "SYNC_REMOTE_UNREACHABLE" in err and "no remote 'nameless' is configured" in err, err
    hook = server / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'policy: agentops notes are frozen this week' >&2\nexit 1\n")
    hook.chmod(0o755)
    code, _, err = cli_sync(a, "push")
    assert code == 3 and "SYNC_PUSH_REFUSED" in err and "frozen this week" in err, err
    assert git(server, "for-each-ref", "refs/notes/") == ""


def test_sync_of_one_run_moves_only_its_refs(tmp_path: Path) -> None:
    server, a, _ = machines(tmp_path)
    head = git(a, "rev-parse", "HEAD")
    git(a, "update-ref", "refs/agentops/runs/r1/state", head)
    git(a, "update-ref", "refs/agentops/runs/r2/state", head)
    code, _, err = cli_sync(a, "push", "r1")
    assert code == 0, err
    assert git(server, "for-each-ref", "--format=%(refname)", "refs/agentops/") == "refs/agentops/runs/r1/state"
    with pytest.raises(AgentOpsError) as caught:
        sync.mirror_prefix("a/b")
    assert caught.value.code == "REF_NAME_INVALID"


def test_a_rebuilt_candidate_is_pushed_over_the_value_last_seen_never_blindly(tmp_path: Path) -> None:
    """The candidate ref moves by CAS, not only forward (rebuilt on a moved target): pushed with the remote's last
    seen value as its lease, while a state ref that diverged is still reported."""
    server, a, _ = machines(tmp_path)
    base = git(a, "rev-parse", "HEAD")
    first = commit_files(a, {"c.txt": "1\n"}, "candidate 1")
    git(a, "update-ref", "refs/agentops/runs/r1/candidate", first)
    assert cli_sync(a, "push")[0] == 0
    git(a, "checkout", "-q", base)
    rebuilt = commit_files(a, {"c.txt": "2\n"}, "candidate 2")
    git(a, "update-ref", "refs/agentops/runs/r1/candidate", rebuilt)
    code, doc, err = cli_sync(a, "push")
    assert code == 0, err
    assert doc["refs"]["refs/agentops/runs/r1/candidate"] == "pushed"  # type: ignore[index]
    assert git(server, "rev-parse", "refs/agentops/runs/r1/candidate") == rebuilt


def _transports_alive(pids_file: Path) -> tuple[list[int], list[int]]:
    """The pids the fake SSH transport recorded, and those of them still running it (``sleep 97``, not a zombie)."""
    pids = [int(word) for word in pids_file.read_text().split()] if pids_file.exists() else []
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[0]
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X") and cmdline.startswith(b"sleep\x0097\x00"):
            alive.append(pid)
    return pids, alive


@pytest.mark.parametrize("variant", ["auto", "simple"])
def test_a_remote_that_hangs_is_given_up_on_in_time_with_everything_it_started(tmp_path: Path, variant: str) -> None:
    """Invariant: an SSH transport that never answers is given up on past the timeout, and when the fetch
    raises SYNC_REMOTE_UNREACHABLE nothing the transport started is still alive -- checked at once, not after a
    while: the kill waits until the group is empty. ``auto``: git's ``-G`` probe of the ssh variant hangs (its
    output is /dev/null, so no pipe tells when it is gone); ``simple``: the connection itself hangs, holding git's
    pipes."""
    import time

    _, a, _ = machines(tmp_path)
    pids = tmp_path / "transport-pids"
    git(a, "remote", "add", "hung", "ssh://example.invalid/project.git")
    git(a, "config", "ssh.variant", variant)
    # each transport git starts records its pid, then becomes a `sleep 97` (a number no other test sleeps)
    git(a, "config", "core.sshCommand", f"echo $$ >>'{pids}'; exec sleep 97 #")
    start = time.monotonic()
    with pytest.raises(AgentOpsError) as caught:
        sync.fetch(store(a), "hung", timeout=2)
    elapsed = time.monotonic() - start
    started, alive = _transports_alive(pids)
    assert caught.value.code == "SYNC_REMOTE_UNREACHABLE" and "timed out" in caught.value.message
    assert started, "the fake transport never started: nothing was tested"
    assert alive == [], f"transports alive after the timeout: {alive} of {started}"
    assert elapsed < 10


def test_a_remote_named_by_a_relative_path_means_what_it_means_to_the_person(tmp_path: Path) -> None:
    """Invariant: ``git remote add origin ../server.git`` (relative to the work tree, as the person's git reads it)
    is the same remote to the toolkit: sync pushes there, and the mirror fetches from there."""
    server, a, _ = machines(tmp_path)
    git(a, "remote", "set-url", "origin", "../server.git")
    head = git(a, "rev-parse", "HEAD")
    git(a, "update-ref", "refs/agentops/runs/r1/state", head)
    code, _, err = cli_sync(a, "push", "r1")
    assert code == 0, err
    assert git(server, "rev-parse", "refs/agentops/runs/r1/state") == head
    assert sync.mirror(store(a), "origin", ("refs/agentops/runs/",)) == {"refs/agentops/runs/r1/state": head}
