"""The server refuses what would lose history, and a machine never loses it either (issue 23, item 7).

A bare server with the toolkit's ``pre-receive`` (``git agentops-init --server``), pushed to with the real git CLI:
the integration target only moves forward and is never deleted; receipts, delivery and evidence notes keep every
note by content, whatever the fan-out; agentops refs are never deleted. What the server cannot judge -- whether a
state commit is a supervisor's -- a live supervisor judges when it fetches it: a forged one is quarantined, and the
run goes on. Where a test writes the bare repository directly, it plays an attacker (or a server without the hook).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from git_agentops.clock import SystemClock
from git_agentops.gitstore.notes import DELIVERIES_REF, EVIDENCE_REF, RECEIPTS_REF, Notes
from git_agentops.gitstore.repo import Store, open_store

from ..conftest import commit_files, git, make_repo
from ..helpers import HANDOFF, child, write_step
from ..runkit import (
    CHECK_PY,
    POLICY,
    command,
    events,
    recipe,
    start,
    status,
    supervisor_log,
    trust,
    wait_for,
    wait_supervisor_gone,
)

PLAIN = POLICY.format(max_workers=3, run_options="") + '[receipts]\nplain_commits = "allow"\n'


def store(path: Path) -> Store:
    return open_store(path, clock=SystemClock())


def push(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "push", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=120)


def codes(stderr: str) -> list[str]:
    return re.findall(r"error\[([A-Z_]+)\]", stderr)


def server_and_clone(tmp: Path, policy: str = PLAIN) -> tuple[Path, Path]:
    """A bare server with our ``pre-receive``, seeded with a project whose policy names ``main`` as the target,
    and one clone of it."""
    seed = make_repo(
        tmp / "seed", files={"check.py": CHECK_PY, "src/base.txt": "hello\n", ".agentops/policy.toml": policy}
    )
    server = tmp / "server.git"
    git(tmp, "clone", "-q", "--bare", str(seed), str(server))
    installed = command(server, "agentops-init", "--server", "--yes")
    assert installed.returncode == 0, installed.stderr
    clone = tmp / "a"
    git(tmp, "clone", "-q", str(server), str(clone))
    return server, clone


def notes_commit(repo: Path, ref: str, notes: dict[str, str], *, flat: bool = False) -> str:
    """A notes commit on top of ``ref`` whose tree holds exactly ``notes`` (object -> note text), laid out flat or
    2/38 -- written with plumbing, as anyone with push access could."""
    blobs = {obj: git(repo, "hash-object", "-w", "--stdin", input=text) for obj, text in notes.items()}
    if flat:
        tree = git(repo, "mktree", input="".join(f"100644 blob {b}\t{o}\n" for o, b in sorted(blobs.items())))
    else:
        fans: dict[str, list[str]] = {}
        for obj, blob in sorted(blobs.items()):
            fans.setdefault(obj[:2], []).append(f"100644 blob {blob}\t{obj[2:]}\n")
        lines = [f"040000 tree {git(repo, 'mktree', input=''.join(rows))}\t{fan}\n" for fan, rows in fans.items()]
        tree = git(repo, "mktree", input="".join(lines))
    return git(repo, "commit-tree", tree, "-p", git(repo, "rev-parse", ref), "-m", "notes, rewritten by hand")


# -- the target ----------------------------------------------------------------------------------------------


def test_the_target_only_moves_forward_and_is_never_deleted_whatever_force_says(tmp_path: Path) -> None:
    server, a = server_and_clone(tmp_path)
    base = git(a, "rev-parse", "HEAD")
    first = commit_files(a, {"src/one.txt": "1\n"}, "one")
    assert push(a, "origin", "main").returncode == 0  # plain commits are allowed here: a fast-forward lands
    rewound = push(a, "-f", "origin", f"{base}:main")  # the attack: an empty range had nothing to refuse
    assert rewound.returncode != 0 and codes(rewound.stderr) == ["HOOK_TARGET_REWOUND"], rewound.stderr
    git(a, "reset", "-q", "--hard", base)
    other = commit_files(a, {"src/other.txt": "2\n"}, "a rewrite of one")
    rewritten = push(a, "--force-with-lease", "origin", "main")  # a lease is no licence to rewrite the target
    assert rewritten.returncode != 0 and codes(rewritten.stderr) == ["HOOK_TARGET_REWOUND"], rewritten.stderr
    assert git(server, "rev-parse", "main") == first

    git(server, "symbolic-ref", "HEAD", "refs/heads/elsewhere")  # git itself guards only the server's HEAD
    deleted = push(a, "origin", ":main")
    assert deleted.returncode != 0 and codes(deleted.stderr) == ["HOOK_REF_DELETE"], deleted.stderr
    assert git(server, "rev-parse", "main") == first

    assert push(a, "origin", f"{other}:refs/heads/topic").returncode == 0  # a branch that is no target: not ours
    assert push(a, "-f", "origin", f"{base}:refs/heads/topic").returncode == 0
    assert push(a, "origin", ":refs/heads/topic").returncode == 0

    installed = command(a, "agentops-init", "--hooks", "--yes")  # the pusher's own pre-push says it first
    assert installed.returncode == 0, installed.stderr
    git(a, "fetch", "-q", "origin")
    refused = push(a, "-f", "origin", f"{base}:main")
    assert refused.returncode != 0 and "HOOK_TARGET_REWOUND" in refused.stderr, refused.stderr
    assert "remote:" not in refused.stderr  # refused before anything was sent
    git(server, "fsck", "--strict")


# -- notes -----------------------------------------------------------------------------------------------------


def test_notes_keep_every_note_by_content_whatever_the_fan_out(tmp_path: Path) -> None:
    server, a = server_and_clone(tmp_path)
    one, two = (commit_files(a, {f"src/{n}.txt": n}, n) for n in ("x", "y"))
    receipts = Notes(store(a), RECEIPTS_REF)
    receipts.add(one, b"receipt one\n")
    receipts.add(two, b"receipt two\n")
    evidence = Notes(store(a), EVIDENCE_REF)
    evidence.append({one: b'{"record": 1}\n'})
    evidence.append({one: b'{"record": 2}\n'})  # a note that grew: append-only
    assert push(a, "origin", f"{two}:refs/heads/work", RECEIPTS_REF, EVIDENCE_REF).returncode == 0

    tip = git(a, "rev-parse", RECEIPTS_REF)
    git(a, "notes", "--ref=agentops/receipts", "remove", one)  # a fast-forward that drops a receipt
    dropped = push(a, "origin", RECEIPTS_REF)
    assert dropped.returncode != 0 and codes(dropped.stderr) == ["HOOK_NOTES_REWRITTEN"], dropped.stderr
    assert one[:12] in dropped.stderr
    git(a, "update-ref", RECEIPTS_REF, tip)
    git(a, "notes", "--ref=agentops/receipts", "add", "-f", "-m", "a forged receipt", two)  # one rewritten
    rewritten = push(a, "origin", RECEIPTS_REF)
    assert rewritten.returncode != 0 and codes(rewritten.stderr) == ["HOOK_NOTES_REWRITTEN"], rewritten.stderr
    git(a, "update-ref", RECEIPTS_REF, tip)
    shadow = notes_commit(a, RECEIPTS_REF, {one: "receipt one\n", two: "receipt two\n"}, flat=True)
    git(a, "update-ref", RECEIPTS_REF, shadow)  # the same notes, laid out flat, plus nothing: no loss
    relaid = push(a, "origin", RECEIPTS_REF)
    assert relaid.returncode == 0, relaid.stderr
    assert git(server, "notes", "--ref=agentops/receipts", "show", one) == "receipt one"
    git(a, "update-ref", RECEIPTS_REF, tip)  # and back to the 2/38 fan-out, which is no loss either
    back = push(a, "-f", "origin", RECEIPTS_REF)  # ...but not backwards: that is history too
    assert back.returncode != 0 and codes(back.stderr) == ["HOOK_REF_FAST_FORWARD_ONLY"], back.stderr
    git(a, "update-ref", RECEIPTS_REF, shadow)
    relaid_again = notes_commit(a, RECEIPTS_REF, {one: "receipt one\n", two: "receipt two\n"})
    git(a, "update-ref", RECEIPTS_REF, relaid_again)
    assert push(a, "origin", RECEIPTS_REF).returncode == 0

    cut = notes_commit(a, EVIDENCE_REF, {one: '{"record": 1}\n'})  # an append-only note cut short
    git(a, "update-ref", EVIDENCE_REF, cut)
    shortened = push(a, "origin", EVIDENCE_REF)
    assert shortened.returncode != 0 and codes(shortened.stderr) == ["HOOK_NOTES_REWRITTEN"], shortened.stderr
    grown = notes_commit(a, EVIDENCE_REF, {one: '{"record": 1}\n{"record": 2}\n{"record": 3}\n'})
    git(a, "update-ref", EVIDENCE_REF, grown)
    assert push(a, "origin", EVIDENCE_REF).returncode == 0  # growing is what append-only allows
    git(server, "fsck", "--strict")


def test_agentops_history_refs_are_never_deleted(tmp_path: Path) -> None:
    server, a = server_and_clone(tmp_path)
    head = git(a, "rev-parse", "HEAD")
    Notes(store(a), DELIVERIES_REF).append({head: b'{"delivery": 1}\n'})
    history = [
        "refs/agentops/runs/r1/state",
        "refs/agentops/runs/r1/policy",
        "refs/agentops/runs/r1/journal/t1",
        "refs/agentops/runs/r1/deliveries/t1",
    ]
    for ref in history:
        git(a, "update-ref", ref, head)
    assert push(a, "origin", DELIVERIES_REF, *history).returncode == 0
    for ref, code in [*((r, "HOOK_REF_DELETE") for r in history[:3]), (history[3], "HOOK_REF_CREATE_ONLY")]:
        gone = push(a, "origin", f":{ref}")
        assert gone.returncode != 0 and codes(gone.stderr) == [code], (ref, gone.stderr)
    gone = push(a, "origin", f":{DELIVERIES_REF}")
    assert gone.returncode != 0 and codes(gone.stderr) == ["HOOK_REF_DELETE"], gone.stderr
    listed = git(server, "for-each-ref", "--format=%(refname)", "refs/agentops/", "refs/notes/").split()
    assert sorted(listed) == sorted([*history, DELIVERIES_REF])


def test_a_fetch_never_drops_a_local_note_the_remote_lost(tmp_path: Path) -> None:
    """The server lost a receipt and had an evidence note cut short, written directly (no hook): the fetch keeps
    the local notes (merged, not fast-forwarded; SYNC_NOTES_KEPT), and the next push gives them back. A receipt the
    server had rewritten stays as it is here too (the server's kept aside), and the server refuses to have it
    rewritten back through a push: a receipt it holds is never replaced."""
    server, a = server_and_clone(tmp_path)
    one, two = (commit_files(a, {f"src/{n}.txt": n}, n) for n in ("x", "y"))
    Notes(store(a), RECEIPTS_REF).add(one, b"receipt one\n")
    Notes(store(a), RECEIPTS_REF).add(two, b"receipt two\n")
    Notes(store(a), EVIDENCE_REF).append({one: b'{"record": 1}\n{"record": 2}\n'})
    synced = command(a, "agentops-sync", "push", "--json")
    assert synced.returncode == 0, synced.stderr
    git(server, "notes", "--ref=agentops/receipts", "remove", one)  # behind the hook's back
    cut = notes_commit(server, EVIDENCE_REF, {one: '{"record": 1}\n'})
    git(server, "update-ref", EVIDENCE_REF, cut)

    fetched = command(a, "agentops-sync", "fetch", "--json")
    assert fetched.returncode == 1 and "warning[SYNC_NOTES_KEPT]" in fetched.stderr, fetched.stderr
    doc = json.loads(fetched.stdout)
    assert doc["kept"] == {EVIDENCE_REF: [one], RECEIPTS_REF: [one]} and doc["conflicts"] == {}
    assert doc["refs"][RECEIPTS_REF] == doc["refs"][EVIDENCE_REF] == "merged"
    assert Notes(store(a), RECEIPTS_REF).read(one) == b"receipt one\n"
    assert Notes(store(a), EVIDENCE_REF).read(one) == b'{"record": 1}\n{"record": 2}\n'
    assert git(a, "merge-base", "--is-ancestor", git(server, "rev-parse", RECEIPTS_REF), RECEIPTS_REF) == ""
    pushed = command(a, "agentops-sync", "push", "--json")  # the server takes the notes back (a fast-forward)
    assert pushed.returncode == 0, pushed.stderr
    assert git(server, "notes", "--ref=agentops/receipts", "show", one) == "receipt one"
    assert git(server, "notes", "--ref=agentops/evidence", "show", one) == '{"record": 1}\n{"record": 2}'

    git(server, "notes", "--ref=agentops/receipts", "add", "-f", "-m", "forged", two)  # rewritten, directly
    fetched = command(a, "agentops-sync", "fetch", "--json")
    assert fetched.returncode == 1 and "SYNC_NOTES_KEPT" in fetched.stderr, fetched.stderr
    doc = json.loads(fetched.stdout)
    assert doc["kept"] == {RECEIPTS_REF: [two]} and doc["conflicts"] == {RECEIPTS_REF: [two]}
    assert Notes(store(a), RECEIPTS_REF).read(two) == b"receipt two\n"
    kept_aside = git(a, "show", f"refs/agentops-sync/origin/conflicts/agentops/receipts:{two[:2]}/{two[2:]}")
    assert kept_aside == "forged"
    refused = command(a, "agentops-sync", "push")
    assert refused.returncode == 3 and "HOOK_NOTES_REWRITTEN" in refused.stderr, refused.stderr
    assert git(server, "notes", "--ref=agentops/receipts", "show", two) == "forged"


# -- a forged state on the remote --------------------------------------------------------------------------------


def _forge_with_plumbing(repo: Path, ref: str, path: str, content: str) -> str:
    """A commit on ``ref`` in ``repo`` (a bare server) changing one file, with the tip's event trailer and MAC
    copied: what anyone with write access can make."""
    tip = git(repo, "rev-parse", ref)
    index = repo / "forger-index"
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}
    blob = git(repo, "hash-object", "-w", "--stdin", input=content)
    for args in (["read-tree", tip], ["update-index", "--add", "--cacheinfo", f"100644,{blob},{path}"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    tree = subprocess.run(["git", "write-tree"], cwd=repo, env=env, check=True, capture_output=True, text=True)
    message = git(repo, "log", "-1", "--format=%B", tip)
    forged = git(repo, "commit-tree", tree.stdout.strip(), "-p", tip, input=message + "\n")
    git(repo, "update-ref", ref, forged, tip)
    return forged


@pytest.mark.event_data_free
def test_a_forged_remote_state_is_quarantined_and_gone_past_by_a_fast_forward(tmp_path: Path) -> None:
    """In process: a fetch never adopts a remote journal tip this repository cannot authenticate -- whether the
    forged commit sits on the local tip or on an older one -- and :func:`tamper.supersede` goes on past it with a
    two-parent RUN_STATE_QUARANTINED commit that the hooked server takes as a fast-forward. A remote whose state
    went on on another machine before it was forged is not gone past."""
    from git_agentops.gitstore import sync
    from git_agentops.gitstore.journal import Event, Journal
    from git_agentops.runs import tamper

    server, a = server_and_clone(tmp_path)
    ref = "refs/agentops/runs/r1/state"
    mine = store(a)
    journal = Journal(mine, ref)
    journal.mutate(lambda change: change.put("run.json", b'{"n": 1}\n'), Event("RUN_CREATED", "created"))
    assert sync.push(mine, "origin").refs[ref] == "pushed"
    pushed = git(a, "rev-parse", ref)
    journal.mutate(lambda change: change.put("run.json", b'{"n": 2}\n'), Event("NOTE", "local work not pushed"))
    local = git(a, "rev-parse", ref)
    forged = _forge_with_plumbing(server, ref, "run.json", '{"n": 666}\n')  # on the older, pushed tip

    fetched = sync.fetch(mine, "origin")
    assert fetched.refs[ref] == "quarantined" and fetched.quarantined == {ref: forged}
    kept = sync.quarantine_ref("origin", ref, forged)
    assert kept == f"refs/agentops-quarantine/origin/runs/r1/state/{forged}"
    assert git(a, "rev-parse", kept) == forged and git(a, "rev-parse", ref) == local  # not adopted
    assert sync.push(mine, "origin").refs[ref] == "quarantined"  # nor forced over

    [done] = tamper.supersede(mine, "r1", "origin", fetched.quarantined)
    assert (done.commit, done.authentic, done.kept) == (forged, pushed, kept) and done.superseded is not None
    assert git(a, "rev-parse", ref) == done.superseded
    assert git(a, "rev-parse", f"{ref}^1", f"{ref}^2").split() == [local, forged]
    assert journal.read().get("run.json") == b'{"n": 2}\n'  # the run's own state, nothing of the forgery
    [latest, previous, *_] = list(journal.log())
    assert latest.code == "RUN_STATE_QUARANTINED" and not latest.foreign and latest.data["commit"] == forged
    assert previous.commit == local
    assert tamper.supersede(mine, "r1", "origin", fetched.quarantined)[0].superseded == done.superseded  # once
    assert sync.push(mine, "origin").refs[ref] == "pushed"  # a fast-forward over the forged commit
    assert git(server, "rev-parse", ref) == done.superseded

    b = tmp_path / "b"  # another machine with the team's key continues the run; then the server is forged
    git(tmp_path, "clone", "-q", str(server), str(b))
    key = tmp_path / "team.key"
    assert command(a, "agentops-sync", "--export-key", str(key)).returncode == 0
    assert command(b, "agentops-sync", "--import-key", str(key)).returncode == 0
    theirs = store(b)
    sync.fetch(theirs, "origin")
    Journal(theirs, ref).mutate(lambda change: change.put("run.json", b'{"n": 3}\n'), Event("NOTE", "b goes on"))
    assert sync.push(theirs, "origin").refs[ref] == "pushed"
    journal.mutate(lambda change: change.put("run.json", b'{"n": 4}\n'), Event("NOTE", "a goes on too"))
    again = _forge_with_plumbing(server, ref, "run.json", '{"n": 667}\n')
    fetched = sync.fetch(mine, "origin")
    assert fetched.quarantined == {ref: again}
    [lost] = tamper.supersede(mine, "r1", "origin", fetched.quarantined)
    assert lost.superseded is None and lost.authentic == git(b, "rev-parse", ref)  # b's: not this machine's
    git(server, "fsck", "--strict")


def _forge_on_server(server: Path, ref: str) -> str:
    """A commit on the server's state ref that hands the lease to 'mallory', written straight into the bare
    repository (no hook runs), retried while the live supervisor's pushes move the ref."""
    for _ in range(50):
        lease = json.loads(git(server, "show", f"{ref}:lease.json"))
        lease["holder"] = "mallory"
        try:
            return _forge_with_plumbing(server, ref, "lease.json", json.dumps(lease))
        except AssertionError:  # the supervisor pushed meanwhile: forge on its new tip
            time.sleep(0.1)
    raise AssertionError("could not forge the server's state")


@pytest.mark.slow
def test_a_forged_state_on_the_remote_is_quarantined_and_the_live_run_goes_on(tmp_path: Path) -> None:
    """Invariant: one forged state commit pushed to the server stops no run. The live supervisor that fetches it
    cannot authenticate it: it keeps it under refs/agentops-quarantine/, never adopts it (the lease it forges is
    never believed), goes on past it (RUN_STATE_QUARANTINED on the run's log) and completes; the server's state
    descends from the forged commit, so every push stayed a fast-forward. Then the server loses the run's receipt:
    a fetch keeps it here, and 'receipt verify' still passes."""
    from ..integrate.test_remote import team

    server, a, _ = team(tmp_path)
    git(a, "config", "agentops.machineId", "machine-a")
    base = git(server, "rev-parse", "main")
    slow = child("a", "Part A", [[{"sleep": 8}, write_step("src/a.txt", "a\n"), {"commit": "Add a"}, HANDOFF]])
    run_id = start(a, recipe(tmp_path, slow, finalize=True), env={"AGENTOPS_LEASE_TTL": "3"})
    state = f"refs/agentops/runs/{run_id}/state"
    wait_for(a, run_id, lambda d: any(w["role"] == "child" and w["status"] == "running" for w in d["workers"]))
    deadline = time.monotonic() + 60
    while git(server, "rev-parse", "--verify", "--quiet", state, check=False) == "":
        assert time.monotonic() < deadline, supervisor_log(a, run_id)
        time.sleep(0.2)
    forged = _forge_on_server(server, state)

    doc = wait_for(a, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=240)
    assert doc["status"] == "complete", json.dumps(doc, indent=1) + supervisor_log(a, run_id)
    wait_supervisor_gone(a, run_id)  # its last push of the state may follow the state that says complete
    kept = f"refs/agentops-quarantine/origin/runs/{run_id}/state/{forged}"
    assert git(a, "rev-parse", kept) == forged
    quarantined = [e for e in events(a, run_id) if e["code"] == "RUN_STATE_QUARANTINED"]
    assert quarantined and quarantined[0]["data"]["commit"] == forged, events(a, run_id)
    assert quarantined[0]["data"]["quarantine"] == kept
    assert not [e for e in events(a, run_id) if e["code"] == "RUN_STATE_TAMPERED"]
    assert "RUN_STATE_QUARANTINED" in supervisor_log(a, run_id)
    assert git(server, "merge-base", "--is-ancestor", forged, state, check=False) == ""  # fast-forwards only
    assert json.loads(git(server, "show", f"{state}:lease.json"))["holder"] == "machine-a"  # never believed
    assert git(a, "rev-parse", state) == git(server, "rev-parse", state)
    assert status(a, run_id)["status"] == "complete"

    candidate = doc["integration"]["candidate"]
    assert git(server, "rev-list", "--first-parent", f"{base}..main").split() == [candidate]
    git(server, "notes", "--ref=agentops/receipts", "remove", candidate)  # the server loses the receipt
    fetched = command(a, "agentops-sync", "fetch", "--json")
    assert fetched.returncode == 1 and "SYNC_NOTES_KEPT" in fetched.stderr, fetched.stderr
    assert json.loads(fetched.stdout)["kept"] == {RECEIPTS_REF: [candidate]}
    verified = command(a, "agentops-receipt", "verify", candidate, "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr


# -- the bootstrap, and a person's policy commit ------------------------------------------------------------------

REMOTE_SIGNED = (
    POLICY.format(max_workers=3, run_options='remote = "origin"\nremote_patience = "3s"')
    + '[receipts]\nallowed_signers = ".agentops/allowed_signers"\n'
)


def commit_as(repo: Path, files: dict[str, str], message: str, key: Path | None) -> str:
    """Commit ``files`` as a person would: SSH-signed with ``key`` (git commit -S, gpg.format=ssh), or unsigned."""
    for name, content in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(content)
    git(repo, "add", *files)
    signing = ["-c", "gpg.format=ssh", "-c", f"user.signingKey={key}", "commit", "-S"] if key else ["commit"]
    git(repo, *signing, "-q", "--no-verify", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def test_an_empty_server_with_the_hook_takes_its_first_push_as_the_baseline_and_guards_the_target_after(
    tmp_path: Path,
) -> None:
    """Invariant (the README's order): 'init --server' in an empty bare repository says how it is set up; the first
    push of main (a project nobody integrated, with its notes) lands; after it a plain commit is refused
    RECEIPT_MISSING and a rewind HOOK_TARGET_REWOUND. Before, that first push was refused and could never land."""
    server = tmp_path / "server.git"
    git(tmp_path, "init", "-q", "--bare", str(server))
    installed = command(server, "agentops-init", "--server", "--yes")
    assert installed.returncode == 0, installed.stderr
    assert "This repository is empty" in installed.stdout and "git push origin main" in installed.stdout
    policy = POLICY.format(max_workers=3, run_options="")
    a = make_repo(
        tmp_path / "a", files={"check.py": CHECK_PY, "src/base.txt": "hello\n", ".agentops/policy.toml": policy}
    )
    base = git(a, "rev-parse", "HEAD")
    Notes(store(a), DELIVERIES_REF).append({base: b'{"delivery": 1}\n'})  # notes made before the server existed
    git(a, "remote", "add", "origin", str(server))
    first = push(a, "origin", "main", DELIVERIES_REF)
    assert first.returncode == 0, first.stderr
    assert git(server, "rev-parse", "main") == base and git(server, "rev-parse", DELIVERIES_REF)

    described = json.loads(command(server, "agentops-init", "--server", "--json").stdout)
    assert described["branches"] == [
        {
            "branch": "main",
            "tip": base,
            "protected": True,
            "target": "main",
            "allowedSigners": None,
            "plainCommits": False,
        }
    ]
    plain = commit_files(a, {"src/plain.txt": "nobody integrated this\n"}, "a plain commit")
    refused = push(a, "origin", "main")
    assert refused.returncode != 0 and codes(refused.stderr) == ["HOOK_RECEIPT_INVALID"], refused.stderr
    assert "RECEIPT_MISSING" in refused.stderr and plain[:12] in refused.stderr
    git(a, "reset", "-q", "--hard", base)
    unrelated = git(a, "commit-tree", git(a, "rev-parse", "HEAD^{tree}"), "-m", "history from elsewhere")
    assert push(a, "origin", f"{unrelated}:refs/heads/topic").returncode == 0  # another branch's first push
    rewound = push(a, "-f", "origin", f"{unrelated}:refs/heads/main")  # a baseline is no licence to replace it
    assert rewound.returncode != 0 and codes(rewound.stderr) == ["HOOK_TARGET_REWOUND"], rewound.stderr
    assert git(server, "rev-parse", "main") == base
    git(server, "fsck", "--strict")


def test_a_branch_is_guarded_from_the_push_that_first_gives_it_a_policy(tmp_path: Path) -> None:
    """Invariant: a project pushed before it had a policy is not judged; the push that adds a policy naming it
    the target is its baseline (there is no policy before it to judge it by), and from then on it is guarded."""
    server = tmp_path / "server.git"
    git(tmp_path, "init", "-q", "--bare", str(server))
    assert command(server, "agentops-init", "--server", "--yes").returncode == 0
    a = make_repo(tmp_path / "a", files={"check.py": CHECK_PY, "src/base.txt": "hello\n"})
    git(a, "remote", "add", "origin", str(server))
    assert push(a, "origin", "main").returncode == 0
    commit_files(a, {"src/more.txt": "more\n"}, "no policy yet: nothing to judge")
    assert push(a, "origin", "main").returncode == 0
    described = json.loads(command(server, "agentops-init", "--server", "--json").stdout)["branches"]
    assert [(b["branch"], b["protected"], b["target"]) for b in described] == [("main", False, None)]
    adopted = commit_files(a, {".agentops/policy.toml": POLICY.format(max_workers=3, run_options="")}, "adopt")
    landed = push(a, "origin", "main")
    assert landed.returncode == 0, landed.stderr
    assert git(server, "rev-parse", "main") == adopted
    commit_files(a, {"src/after.txt": "after\n"}, "a plain commit on a guarded target")
    refused = push(a, "origin", "main")
    assert refused.returncode != 0 and "RECEIPT_MISSING" in refused.stderr, refused.stderr
    assert git(server, "rev-parse", "main") == adopted


@pytest.mark.slow
def test_a_guarded_server_set_up_in_the_readme_order_takes_a_run_and_a_person_s_signed_policy_commit(
    tmp_path: Path,
) -> None:
    """Invariant, end to end: an empty bare server with the hook, the project pushed to it first, a run on the
    person's machine publishes there and leaves 'git status --porcelain' empty; the person's own policy commit lands
    when SSH-signed by a key the allowed signers list for 'git' -- and is refused, with a code, unsigned
    (RECEIPT_POLICY_UNSIGNED), signed by a stranger or by the runs' receipt key (RECEIPT_UNTRUSTED_SIGNER), by a key
    it adds itself, with a forged signature (RECEIPT_SIGNATURE_INVALID), or carrying more than policy
    (RECEIPT_MISSING). CI's 'receipt verify' over the whole history agrees, and git's own verify-commit too."""
    from ..helpers import allowed_signer, public_key, ssh_key

    person, runs, stranger, newcomer = (ssh_key(tmp_path / n, comment=n) for n in ("person", "runs", "x", "new"))
    signers = f'person@example.com namespaces="git" {public_key(person)}\n' + allowed_signer("runs@example.com", runs)
    server = tmp_path / "server.git"
    git(tmp_path, "init", "-q", "--bare", str(server))
    assert command(server, "agentops-init", "--server", "--yes").returncode == 0
    a = make_repo(
        tmp_path / "a",
        files={
            "check.py": CHECK_PY,
            "src/base.txt": "hello\n",
            ".agentops/policy.toml": REMOTE_SIGNED,
            ".agentops/allowed_signers": signers,
            ".gitignore": "__pycache__/\n",
        },
    )
    git(a, "remote", "add", "origin", str(server))
    first = push(a, "origin", "main")
    assert first.returncode == 0, first.stderr
    base = git(server, "rev-parse", "main")
    trust(a)

    run_id = start(
        a,
        recipe(
            tmp_path,
            child("a", "Part A", [[write_step("src/a.txt", "a\n"), {"commit": "Add a"}, HANDOFF]]),
            finalize=True,
        ),
    )
    doc = wait_for(a, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=180)
    assert doc["status"] == "complete", json.dumps(doc, indent=1) + supervisor_log(a, run_id)
    candidate = doc["integration"]["candidate"]
    assert git(server, "rev-parse", "main") == candidate == git(a, "rev-parse", "HEAD")
    porcelain = subprocess.run(["git", "status", "--porcelain"], cwd=a, capture_output=True, text=True, check=True)
    assert porcelain.stdout == ""  # the person's checkout followed, index and files

    policy = (a / ".agentops" / "policy.toml").read_text()
    changed = {".agentops/policy.toml": policy.replace('remote_patience = "3s"', 'remote_patience = "5s"')}
    for key, code in [
        (None, "RECEIPT_POLICY_UNSIGNED"),
        (stranger, "RECEIPT_UNTRUSTED_SIGNER"),
        (runs, "RECEIPT_UNTRUSTED_SIGNER"),
    ]:
        commit_as(a, changed, "a policy change", key)
        refused = push(a, "origin", "main")
        assert refused.returncode != 0 and codes(refused.stderr) == ["HOOK_RECEIPT_INVALID"], refused.stderr
        assert code in refused.stderr, (key, refused.stderr)
        assert git(server, "rev-parse", "main") == candidate
        git(a, "reset", "-q", "--hard", candidate)
    more = signers + f'x@example.com namespaces="git" {public_key(stranger)}\n'
    commit_as(a, {".agentops/allowed_signers": more}, "the stranger lets itself in", stranger)
    refused = push(a, "origin", "main")
    assert refused.returncode != 0 and "RECEIPT_UNTRUSTED_SIGNER" in refused.stderr, refused.stderr
    git(a, "reset", "-q", "--hard", candidate)
    commit_as(a, {**changed, "src/base.txt": "and a source change\n"}, "policy and more", person)
    refused = push(a, "origin", "main")
    assert refused.returncode != 0 and "RECEIPT_MISSING" in refused.stderr, refused.stderr
    git(a, "reset", "-q", "--hard", candidate)

    signed = commit_as(a, changed, "a policy change, signed", person)
    raw = git(a, "cat-file", "commit", signed)
    head, _, message = raw.partition("\n\n")  # the same signature over another message
    forged = git(a, "hash-object", "-t", "commit", "-w", "--stdin", input=f"{head}\n\n{message} (forged)\n")
    refused = push(a, "origin", f"{forged}:refs/heads/main")
    assert refused.returncode != 0 and "RECEIPT_SIGNATURE_INVALID" in refused.stderr, refused.stderr
    landed = push(a, "origin", "main")
    assert landed.returncode == 0, landed.stderr
    assert git(server, "rev-parse", "main") == signed

    trusted = tmp_path / "allowed_signers"
    trusted.write_text(signers)
    verified = subprocess.run(  # git's own check of the same signature agrees
        ["git", "-c", f"gpg.ssh.allowedSignersFile={trusted}", "verify-commit", signed], cwd=a, capture_output=True
    )
    assert verified.returncode == 0, verified.stderr
    welcomed = signers + f'new@example.com namespaces="git" {public_key(newcomer)}\n'
    commit_as(a, {".agentops/allowed_signers": welcomed}, "the person adds a signer", person)
    after = commit_as(
        a, {".agentops/policy.toml": changed[".agentops/policy.toml"] + "# by the newcomer\n"}, "n", newcomer
    )
    landed = push(a, "origin", "main")  # one push: the new signer counts from the commit that added it
    assert landed.returncode == 0, landed.stderr
    assert git(server, "rev-parse", "main") == after

    ci = command(server, "agentops-receipt", "verify", f"{base}..main", "--json")
    assert ci.returncode == 0, ci.stdout + ci.stderr
    verdicts = json.loads(ci.stdout)["verdicts"]
    assert [v["code"] for v in verdicts if v["code"]] == ["RECEIPT_POLICY_SIGNED"] * 3
    assert git(server, "fsck", "--strict") == ""


def test_where_plain_commits_may_land_an_unsigned_policy_commit_lands_too(tmp_path: Path) -> None:
    """Invariant: signed policy commits add a way in, never a refusal: under plain_commits = "allow" an unsigned
    policy change is a plain commit as before (RECEIPT_NOT_COVERED), not RECEIPT_POLICY_UNSIGNED."""
    server, a = server_and_clone(tmp_path)
    base = git(a, "rev-parse", "HEAD")
    changed = commit_as(a, {".agentops/policy.toml": PLAIN + "# a person's note\n"}, "an unsigned policy change", None)
    landed = push(a, "origin", "main")
    assert landed.returncode == 0, landed.stderr
    assert git(server, "rev-parse", "main") == changed
    verified = json.loads(command(a, "agentops-receipt", "verify", f"{base}..main", "--json").stdout)
    assert [v["code"] for v in verified["verdicts"]][:1] == ["RECEIPT_NOT_COVERED"]


@pytest.mark.parametrize("object_format", ["sha1", "sha256"])
def test_a_policy_commit_signature_is_read_as_git_reads_it_in_either_object_format(
    tmp_path: Path, object_format: str
) -> None:
    """Invariant (differential, against 'git verify-commit'): the signed payload is the commit without its
    signature header -- gpgsig, or gpgsig-sha256 in a SHA-256 repository -- and a signature git accepts is
    accepted, while the same commit re-signed into other bytes is not."""
    from git_agentops.receipts.signed import judge_policy_commit, split_signature

    from ..helpers import public_key, ssh_key

    key = ssh_key(tmp_path / "person")
    signers = tmp_path / "allowed_signers"
    signers.write_text(f'person@example.com namespaces="git" {public_key(key)}\n')
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", f"--object-format={object_format}", str(repo))
    commit_files(repo, {"src/a.txt": "a\n"}, "initial")
    signed = commit_as(repo, {".agentops/policy.toml": "version = 1\n"}, "policy, signed", key)
    raw = subprocess.run(["git", "cat-file", "commit", signed], cwd=repo, capture_output=True, check=True).stdout
    header = b"gpgsig-sha256 " if object_format == "sha256" else b"gpgsig "
    assert header in raw and split_signature(raw, signed).signature is not None
    by_git = subprocess.run(
        ["git", "-c", f"gpg.ssh.allowedSignersFile={signers}", "verify-commit", signed], cwd=repo, capture_output=True
    )
    assert by_git.returncode == 0, by_git.stderr

    def judged(commit: str) -> tuple[bool, str | None]:
        parents = tuple(git(repo, "rev-parse", f"{commit}^@").split())
        verdict = judge_policy_commit(
            repo,
            commit,
            parents,
            paths=None,
            signer_files=lambda rev: (),
            allowed_signers=signers,
            source="the test's signers",
            when=None,
        )
        assert verdict is not None
        return verdict.ok, verdict.code

    assert judged(signed) == (True, "RECEIPT_POLICY_SIGNED")
    head, _, message = raw.decode().partition("\n\n")  # the same signature over another message
    moved = git(repo, "hash-object", "-t", "commit", "-w", "--stdin", input=f"{head}\n\n{message}(moved)\n")
    assert judged(moved) == (False, "RECEIPT_SIGNATURE_INVALID")
    forged = subprocess.run(
        ["git", "-c", f"gpg.ssh.allowedSignersFile={signers}", "verify-commit", moved], cwd=repo, capture_output=True
    )
    assert forged.returncode != 0  # git agrees
