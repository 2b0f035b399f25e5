"""Answers and approvals from anywhere: a person on another clone sends signed controls through the shared remote;
the supervising machine applies each one it may, exactly once and in order, and refuses and records the rest."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..conftest import git
from ..helpers import HANDOFF, child, commit_step, public_key, ssh_key, write_step
from ..runkit import command, events, project, recipe, start, status, stop, supervisor_log, trust, wait_for
from ..transition.test_policy_transition import scenario, transitions_of

SIGNERS = ".agentops/allowed_signers"
CONTROLS = (
    f'[receipts]\nallowed_signers = "{SIGNERS}"\n'
    '[controls]\nremote = "origin"\ninterval = 1\napprove = ["alice@example.com"]\n'
)


def control_signer(principal: str, key: Path) -> str:
    """An allowed_signers line trusting ``key`` as ``principal`` for controls only."""
    return f'{principal} namespaces="git-agentops-control" {public_key(key)}\n'


@dataclass(frozen=True)
class Team:
    server: Path
    a: Path  # supervises the run
    b: Path  # a person's other machine: a clone of the server, no key of the team's runs
    keys: dict[str, Path]
    home_b: Path  # machine B's own HOME: its git configuration names the person and their key

    def as_person(self, name: str) -> None:
        """Machine B signs as ``name`` from now on: their git identity and SSH key in B's own global git config."""
        (self.home_b / ".gitconfig").write_text(
            f"[user]\n\tname = {name.title()}\n\temail = {name}@example.com\n"
            f"[agentops]\n\tsigningKey = {self.keys[name]}\n"
        )

    def on_b(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``git agentops-run ARGS --json`` on machine B: a process of its own, with B's HOME and configuration."""
        env = {
            **os.environ,
            "HOME": str(self.home_b),
            "GIT_CONFIG_GLOBAL": str(self.home_b / ".gitconfig"),
            "XDG_CONFIG_HOME": str(self.home_b / ".config"),
            "XDG_STATE_HOME": str(self.home_b / ".state"),
        }
        argv = ["git", "agentops-run", *args, "--json"]
        return subprocess.run(argv, cwd=self.b, env=env, capture_output=True, text=True, timeout=180, check=False)


def team(tmp: Path, policy: str = CONTROLS) -> Team:
    (tmp / "keys").mkdir()
    keys = {name: ssh_key(tmp / "keys" / name, comment=name) for name in ("alice", "bob", "mallory")}
    a = project(tmp / "a", extra_policy=policy)
    (a / SIGNERS).write_text(
        control_signer("alice@example.com", keys["alice"]) + control_signer("bob@example.com", keys["bob"])
    )
    git(a, "add", SIGNERS)
    git(a, "commit", "-q", "-m", "The team's signers")
    server = tmp / "server.git"
    git(tmp, "init", "-q", "--bare", str(server))
    git(a, "remote", "add", "origin", str(server))
    git(a, "push", "-q", "origin", "main")
    trust(a)  # the trust names the clone's remote
    b = tmp / "b"
    git(tmp, "clone", "-q", str(server), str(b))
    home_b = tmp / "home-b"
    home_b.mkdir()
    return Team(server, a, b, keys, home_b)


def send(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return command(where, "agentops-run", *args, "--json")


def forge(where: Path, run_id: str, control_id: str, doc: dict[str, Any] | None, sig: bytes | None) -> None:
    """Push a control made by hand (git plumbing) to the server, as anyone with push access could."""
    entries = []
    for name, data in (("control.json", json.dumps(doc).encode() if doc is not None else None), ("control.sig", sig)):
        if data is not None:
            blob = (
                subprocess.run(
                    ["git", "hash-object", "-w", "--stdin"], cwd=where, input=data, capture_output=True, check=True
                )
                .stdout.decode()
                .strip()
            )
            entries.append(f"100644 blob {blob}\t{name}\n")
    tree = subprocess.run(
        ["git", "mktree"], cwd=where, input="".join(entries), text=True, capture_output=True, check=True
    ).stdout.strip()
    commit = git(where, "commit-tree", tree, "-m", "forged")
    git(where, "push", "-q", "origin", f"{commit}:refs/agentops/runs/{run_id}/controls/{control_id}")


def recorded(repo: Path, run_id: str) -> list[dict[str, Any]]:
    names = git(repo, "ls-tree", "--name-only", f"refs/agentops/runs/{run_id}/state", "controls/").split()
    return [json.loads(git(repo, "show", f"refs/agentops/runs/{run_id}/state:{name}")) for name in sorted(names)]


def test_a_question_asked_on_a_is_answered_from_b_and_the_run_resumes(tmp_path: Path) -> None:
    """Invariant: of the controls pushed while a question waits -- one with no signature, one signed by a key the
    team does not list, one naming another run, and the team member's answer -- only the answer is applied, once,
    and the run on A resumes with it; every other one is refused with its code and recorded, in id order; sending
    the same control again changes nothing."""
    t = team(tmp_path)
    asking = child(
        "q", "Asker", [['{ question = "Which name?" }', write_step("src/q.txt", "q\n"), commit_step("q"), HANDOFF]]
    )
    run_id = start(t.a, recipe(tmp_path, asking))
    try:
        doc = wait_for(t.a, run_id, lambda d: any(q["answer"] is None for q in d["questions"]), timeout=180)
        question = next(q for q in doc["questions"] if q["answer"] is None)
        qid = question["questionId"]
        # B has no copy of the run: the answer goes through the remote, once the supervisor pushed the question
        wait_for_remote_question(t, run_id, qid)
        t.as_person("alice")
        unknown = t.on_b("answer", run_id, "q-nope", "x")
        assert unknown.returncode == 3 and "RUN_QUESTION_UNKNOWN" in unknown.stderr, unknown.stderr
        forge(
            t.b,
            run_id,
            "20260101T000000.000001Z-000000000001",
            _answer(run_id, "20260101T000000.000001Z-000000000001", qid),
            None,
        )
        forge(
            t.b,
            run_id,
            "20260101T000000.000002Z-000000000002",
            _answer("run-other", "20260101T000000.000002Z-000000000002", qid),
            b"x",
        )
        t.as_person("mallory")
        refused = t.on_b("answer", run_id, qid, "Call it mallory", "--wait", "60")
        assert refused.returncode == 3 and "CONTROL_NOT_ALLOWED" in refused.stderr, refused.stderr
        assert status(t.a, run_id)["questions"][0]["answer"] is None
        t.as_person("alice")
        sent = t.on_b("answer", run_id, qid, "Call it q", "--wait", "60")
        assert sent.returncode == 0, sent.stderr + supervisor_log(t.a, run_id)
        out = json.loads(sent.stdout)
        assert out["outcome"]["outcome"] == "applied" and out["outcome"]["signer"] == "alice@example.com"
        doc = wait_for(
            t.a,
            run_id,
            lambda d: any(t["status"] == "delivered" for t in d["tasks"] if t["title"] == "Asker"),
            timeout=180,
        )
        assert [q["answer"] for q in doc["questions"]] == ["Call it q"]
        records = recorded(t.a, run_id)
        assert [(r["outcome"], r["code"]) for r in records] == [
            ("refused", "CONTROL_UNSIGNED"),
            ("refused", "CONTROL_INVALID"),
            ("refused", "CONTROL_NOT_ALLOWED"),
            ("applied", None),
        ]
        kinds = [e["code"] for e in events(t.a, run_id) if e["code"] in ("RUN_CONTROL_REFUSED", "RUN_ANSWERED")]
        assert kinds == ["RUN_CONTROL_REFUSED"] * 3 + ["RUN_ANSWERED"]
        # the applied control's ref, pushed again under its own name, is create-only on A and counted once
        again = t.on_b("answer", run_id, qid, "Call it q2")
        assert again.returncode == 3 and "RUN_QUESTION_UNKNOWN" in again.stderr  # the remote says it is answered
        assert len(recorded(t.a, run_id)) == 4
    finally:
        stop(t.a, run_id)


def _answer(run_id: str, control_id: str, qid: str) -> dict[str, Any]:
    return {
        "type": "git-agentops/control/v1",
        "controlId": control_id,
        "runId": run_id,
        "kind": "answer",
        "at": 1.0,
        "by": "someone",
        "questionId": qid,
        "text": "forged",
    }


def wait_for_remote_question(t: Team, run_id: str, qid: str) -> None:
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        shown = subprocess.run(
            ["git", "--git-dir", str(t.server), "show", f"refs/agentops/runs/{run_id}/state:run.json"],
            capture_output=True,
            check=False,
        )
        if shown.returncode == 0 and b"awaiting-input" in shown.stdout:
            return
        time.sleep(0.5)
    raise AssertionError(f"the supervisor never pushed {run_id}'s question {qid} to the server")


def test_a_policy_change_approved_from_b_takes_effect_on_a(tmp_path: Path) -> None:
    """Invariant: an approval signed by a listed team member whom ``[controls] approve`` does not name is refused
    (``CONTROL_NOT_ALLOWED``) and the transition still waits; the allowed person's approval from B is applied on A,
    the transition completes and names them and their control, and the run completes."""
    t = team(tmp_path)
    run_id = start(t.a, scenario(tmp_path, "", extra_policy=CONTROLS))
    doc = wait_for(t.a, run_id, lambda d: d["status"] == "awaiting-input" and bool(transitions_of(d)), timeout=180)
    tid = transitions_of(doc)[0]["transitionId"]
    wait_for_remote_question(t, run_id, tid)
    t.as_person("bob")
    refused = t.on_b("approve", run_id, tid[:12], "--remote", "origin", "--wait", "60")
    assert refused.returncode == 3 and "CONTROL_NOT_ALLOWED" in refused.stderr, refused.stderr
    assert transitions_of(status(t.a, run_id))[0]["approvedBy"] is None
    t.as_person("alice")
    approved = t.on_b("approve", run_id, tid, "--wait", "60")
    assert approved.returncode == 0, approved.stderr + supervisor_log(t.a, run_id)
    doc = wait_for(t.a, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=300)
    assert doc["status"] == "complete", supervisor_log(t.a, run_id)
    done = transitions_of(doc)[0]
    assert done["stage"] == "complete" and done["approvedBy"]["by"] == "user"
    assert "alice@example.com" in done["approvedBy"]["name"] and "signed control" in done["approvedBy"]["name"]


def test_without_a_controls_remote_a_sync_fetch_on_a_brings_the_answer_in_at_once(tmp_path: Path) -> None:
    """Invariant: with no remote for the supervisor to fetch from, a control adopted by ``git agentops-sync fetch``
    on the supervising machine is applied on the supervisor's next look (well under a second), once."""
    t = team(tmp_path, f'[receipts]\nallowed_signers = "{SIGNERS}"\n')
    asking = child("q", "Asker", [['{ question = "Which name?" }', write_step("src/q.txt", "q\n"), HANDOFF]])
    run_id = start(t.a, recipe(tmp_path, asking))
    try:
        doc = wait_for(t.a, run_id, lambda d: any(q["answer"] is None for q in d["questions"]), timeout=180)
        qid = doc["questions"][0]["questionId"]
        assert command(t.a, "agentops-sync", "push", run_id).returncode in (0, 1)
        t.as_person("alice")
        sent = t.on_b("answer", run_id, qid, "Call it q", "--remote", "origin")
        assert sent.returncode == 0, sent.stderr
        assert json.loads(sent.stdout)["outcome"] is None  # no --wait: sent, not yet applied
        fetched = command(t.a, "agentops-sync", "fetch", run_id)
        assert fetched.returncode in (0, 1), fetched.stderr
        doc = wait_for(t.a, run_id, lambda d: d["questions"][0]["answer"] is not None, timeout=10)
        assert doc["questions"][0]["answer"] == "Call it q"
        assert [r["outcome"] for r in recorded(t.a, run_id)] == ["applied"]
    finally:
        stop(t.a, run_id)


def _pane(sock: Path) -> str:
    done = subprocess.run(
        ["tmux", "-S", str(sock), "capture-pane", "-p", "-t", "board"], capture_output=True, text=True
    )
    return done.stdout


def _until(sock: Path, predicate: Any, timeout: float) -> str:
    import time

    deadline = time.monotonic() + timeout
    while not predicate(text := _pane(sock)):
        if time.monotonic() > deadline:
            raise AssertionError(f"the board never showed it; the pane:\n{text}")
        time.sleep(0.3)
    return text


def test_one_board_shows_both_machines_runs_live_in_tmux_and_b_is_answered_from_a(tmp_path: Path) -> None:
    """Invariant: with a run on each machine, ``run list --all --remote origin`` on A lists A's run here and B's
    from the remote; ``watch --all --remote origin`` in a real tmux pane shows both, B's waiting for an answer; an
    answer sent from A as a signed control is applied on B, whose pushed state the board then shows, live."""
    import shutil

    t = team(tmp_path)
    trust(t.b)
    asking = child(
        "q", "Asker", [['{ question = "Which name?" }', write_step("src/q.txt", "q\n"), commit_step("q"), HANDOFF]]
    )
    sleeper = child("s", "Sleeper", [[{"sleep": 600}, write_step("src/s.txt", "s\n"), HANDOFF]])
    run_a = start(t.a, recipe(tmp_path, sleeper, name="a.toml"))
    run_b = start(t.b, recipe(tmp_path, asking, finalize=True, name="b.toml"))
    sock = tmp_path / "tmux.sock"
    try:
        doc = wait_for(t.b, run_b, lambda d: any(q["answer"] is None for q in d["questions"]), timeout=180)
        qid = doc["questions"][0]["questionId"]
        wait_for_remote_question(t, run_b, qid)
        listed = json.loads(command(t.a, "agentops-run", "list", "--all", "--remote", "origin", "--json").stdout)
        rows = {r["runId"]: r for r in listed["runs"]}
        assert rows[run_a]["where"] == "here" and rows[run_b]["where"] == "origin", rows
        assert rows[run_b]["waitsFor"] == "an answer to 1 question(s)"
        page = tmp_path / "all.html"
        written = command(t.a, "agentops-run", "report", "--all", "--remote", "origin", "--html", str(page))
        assert written.returncode == 0, written.stderr
        html = page.read_text()
        assert f'id="run-{run_a}"' in html and f'href="#run-{run_a}"' in html  # A's run in brief, linked
        assert run_b in html and "waits for an answer to 1 question(s)" in html and "<script" not in html
        bad = command(t.a, "agentops-run", "report", "--all")
        assert bad.returncode == 2 and "error[USAGE]" in bad.stderr
        exe = shutil.which("git-agentops-run")
        assert exe is not None
        argv = ["tmux", "-S", str(sock), "new-session", "-d", "-s", "board", "-x", "200", "-y", "30", "-c", str(t.a)]
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
        subprocess.run([*argv, f"{exe} watch --all --remote origin"], check=True, env={**env, "TERM": "xterm"})
        _until(sock, lambda text: run_a in text and run_b in text and "waits for an answer" in text, 60)
        git(t.a, "config", "user.email", "alice@example.com")
        git(t.a, "config", "agentops.signingKey", str(t.keys["alice"]))
        sent = send(t.a, "answer", run_b, qid, "Call it q", "--remote", "origin")
        assert sent.returncode == 0, sent.stderr
        done = wait_for(t.b, run_b, lambda d: d["status"] in ("complete", "blocked"), timeout=240)
        assert done["status"] == "complete", supervisor_log(t.b, run_b)
        text = _until(sock, lambda text: "complete" in text and "waits for an answer" not in text, 60)
        assert run_a in text  # A's own run stays on the board
        subprocess.run(["tmux", "-S", str(sock), "send-keys", "-t", "board", "q"], check=True)
    finally:
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True, check=False)
        stop(t.a, run_a)
        stop(t.b, run_b)


REVIEWED = CONTROLS.replace('approve = ["alice@example.com"]', 'review = ["alice@example.com"]') + (
    '[hosts.reviewer-a]\nkind = "scripted"\n[review]\nrequired = 1\nreviewers = ["reviewer-a"]\npeople = 1\n'
)


def test_a_run_waits_for_a_person_whose_review_from_b_publishes_it_and_reviewer_precision_follows(
    tmp_path: Path,
) -> None:
    """Invariant: with ``[review] people = 1`` the model-reviewed candidate waits (the board says for what);
    ``run review`` on B lists it with its findings; a review by someone ``[controls] review`` does not name is
    refused; the allowed person's approval from B publishes it, the receipt names them as a reviewer, and the
    model reviewer's precision is what the person accepted of its findings."""
    from ..helpers import Part
    from ..runkit import verify_receipts

    t = team(tmp_path, REVIEWED)
    base = git(t.a, "rev-parse", "main")
    findings = [
        {"severity": "low", "message": "a name could be clearer"},
        {"severity": "medium", "message": "no test"},
    ]
    work = child("s", "Part S", [[write_step("src/s.txt", "s\n"), commit_step("Add s"), HANDOFF]])
    part = work + Part(reviewers=({"name": "reviewer-a", "verdict": "approve", "findings": findings},))
    run_id = start(t.a, recipe(tmp_path, part, finalize=True))
    try:
        doc = wait_for(t.a, run_id, lambda d: (d["statusReason"] or "").startswith("RUN_REVIEW_PENDING"), timeout=240)
        assert doc["status"] == "awaiting-input", doc["statusReason"]
        board = json.loads(command(t.a, "agentops-run", "list", "--all", "--json").stdout)["runs"]
        assert board[0]["waitsFor"].startswith("a review by people")
        wait_for_remote_question(t, run_id, "review")
        t.as_person("bob")
        listed = t.on_b("review", "--remote", "origin")
        assert listed.returncode == 0, listed.stderr
        pending = json.loads(listed.stdout)["pending"]
        assert [p["runId"] for p in pending] == [run_id]
        assert [f["id"] for f in pending[0]["findings"]] == ["reviewer-a#1", "reviewer-a#2"]
        assert pending[0]["candidate"] == doc["integration"]["candidate"]
        refused = t.on_b("review", run_id, "--approve", "--remote", "origin", "--wait", "60")
        assert refused.returncode == 3 and "CONTROL_NOT_ALLOWED" in refused.stderr, refused.stderr
        t.as_person("alice")
        approved = t.on_b(
            "review", run_id, "--approve", "--reason", "reads well", "--accept", "reviewer-a#2", "--wait", "60"
        )
        assert approved.returncode == 0, approved.stderr + supervisor_log(t.a, run_id)
        doc = wait_for(t.a, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=240)
        assert doc["status"] == "complete", supervisor_log(t.a, run_id)
        names = [r["reviewer"] for r in doc["integration"]["reviews"]]
        assert names == ["reviewer-a", "person:alice@example.com"], names
        note = json.loads(git(t.a, "notes", "--ref=agentops/receipts", "show", "main"))
        import base64

        predicate = json.loads(base64.b64decode(note["payload"]))["predicate"]
        assert "person:alice@example.com" in [r["reviewer"] for r in predicate["reviews"]["value"]]
        verified = verify_receipts(t.a, f"{base}..main")
        assert verified.returncode == 0, verified.stdout + verified.stderr
        precision = json.loads(command(t.a, "agentops-run", "reviewers", "--json").stdout)["reviewers"]
        assert precision == [{"reviewer": "reviewer-a", "raised": 2, "accepted": 1, "precision": 0.5}]
    finally:
        stop(t.a, run_id)


def _walk(repo: Path, *typed: bytes) -> str:
    """``git-agentops-run review`` on a pseudo-terminal, answering its prompts with ``typed``; what it showed."""
    import select
    import shutil
    import time

    exe = shutil.which("git-agentops-run")
    assert exe is not None
    master, slave = os.openpty()
    env = {**os.environ, "TERM": "dumb"}
    proc = subprocess.Popen([exe, "review"], cwd=repo, stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out = b""
    try:
        for prompt, answer in zip((b"[q]uit? ", b"reason: "), typed, strict=False):
            deadline = time.monotonic() + 60
            while prompt not in out:
                assert time.monotonic() < deadline, out.decode(errors="replace")
                if select.select([master], [], [], 0.2)[0]:
                    out += os.read(master, 65536)
            os.write(master, answer)
        assert proc.wait(timeout=60) == 0, out.decode(errors="replace")
        while select.select([master], [], [], 0.2)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the other side is closed
                break
            if not chunk:
                break
            out += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return out.decode(errors="replace").replace("\r", "")


def test_a_person_refuses_the_candidate_here_and_it_never_publishes(tmp_path: Path) -> None:
    """Invariant: on the supervising machine ``run review`` on a terminal walks the waiting candidate and the
    person's refusal fails the integration (``RUN_REVIEW_REFUSED``) and the target does not move; an agent's
    environment cannot review; bad usage is ``USAGE``; a decision on a candidate no longer waiting is
    ``CONTROL_STALE``."""
    policy = '[hosts.reviewer-a]\nkind = "scripted"\n[review]\nrequired = 1\nreviewers = ["reviewer-a"]\npeople = 1\n'
    repo = project(tmp_path, extra_policy=policy)
    base = git(repo, "rev-parse", "main")
    from ..helpers import reviewers

    part = child("s", "Part S", [[write_step("src/s.txt", "s\n"), commit_step("Add s"), HANDOFF]])
    run_id = start(repo, recipe(tmp_path, part + reviewers("reviewer-a"), finalize=True, one_shot=True))
    try:
        wait_for(repo, run_id, lambda d: (d["statusReason"] or "").startswith("RUN_REVIEW_PENDING"), timeout=240)
        for args, code in (((run_id,), "USAGE"), (("--approve",), "USAGE")):
            bad = command(repo, "agentops-run", "review", *args)
            assert bad.returncode == 2 and f"error[{code}]" in bad.stderr, bad.stderr
        agent = command(repo, "agentops-run", "review", run_id, "--approve", env={"AGENTOPS_RUN_ID": run_id})
        assert agent.returncode == 3 and "RUN_APPROVAL_AGENT" in agent.stderr, agent.stderr
        listed = json.loads(command(repo, "agentops-run", "review", "--json").stdout)["pending"]
        assert [p["runId"] for p in listed] == [run_id] and listed[0]["where"] == "here"
        walked = _walk(repo, b"r\n", b"not this\n")  # on a terminal: one candidate at a time, refused
        assert run_id in walked and "risk" in walked and "refused candidate" in walked, walked
        wait_for(repo, run_id, lambda d: (d["integration"] or {}).get("failure") == "RUN_REVIEW_REFUSED", timeout=120)
        assert git(repo, "rev-parse", "main") == base
        codes = [e["code"] for e in events(repo, run_id)]
        assert "RUN_REVIEW_DECIDED" in codes and "INTEGRATION_APPROVED" not in codes
        precision = json.loads(command(repo, "agentops-run", "reviewers", "--json").stdout)["reviewers"]
        assert precision == []  # the scripted reviewer raised no finding: nothing to judge
        stale = command(repo, "agentops-run", "review", run_id, "--approve")
        assert stale.returncode == 3 and "CONTROL_STALE" in stale.stderr
    finally:
        stop(repo, run_id)
