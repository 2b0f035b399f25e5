"""One board for every run: ``run list --all`` here, ``--remote`` adds the runs other machines pushed, read only."""

from __future__ import annotations

import json
from pathlib import Path

from ..conftest import git
from ..helpers import child, write_step
from ..runkit import command, project, recipe, start, stop, trust, wait_for


def _board(repo: Path, *args: str) -> list[dict[str, object]]:
    done = command(repo, "agentops-run", "list", "--all", *args, "--json")
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout)["runs"])


def test_the_board_shows_runs_here_and_on_the_remote_with_what_each_waits_for(tmp_path: Path) -> None:
    server = tmp_path / "server.git"
    git(tmp_path, "init", "-q", "--bare", str(server))
    a = project(tmp_path / "a")
    git(a, "remote", "add", "origin", str(server))
    git(a, "push", "-q", "origin", "main")
    trust(a)  # the trust names the clone's remote
    waiting = child(
        "q", "Part Q", [[write_step("src/q.txt", "q\n"), {"question": "which database?"}, "{ sleep = 600 }"]]
    )
    run_id = start(a, recipe(tmp_path, waiting, finalize=True))
    wait_for(a, run_id, lambda d: any(q["answer"] is None for q in d["questions"]), timeout=180)
    mine = _board(a)
    assert [(r["runId"], r["where"], r["waitsFor"]) for r in mine] == [(run_id, "here", "an answer to 1 question(s)")]
    pushed = command(a, "agentops-sync", "push", run_id, "--remote", "origin")
    assert pushed.returncode in (0, 1), pushed.stderr

    b = tmp_path / "b"
    git(tmp_path, "clone", "-q", str(server), str(b))
    assert _board(b) == []  # nothing of a's is in b's own refs
    theirs = _board(b, "--remote", "origin")
    assert [(r["runId"], r["where"], r["status"]) for r in theirs] == [(run_id, "origin", "awaiting-input")]
    assert theirs[0]["waitsFor"] == "an answer to 1 question(s)"
    assert theirs[0]["verified"] is False  # b has no key of the team: shown, marked, never acted on
    assert git(b, "for-each-ref", "refs/agentops/runs/") == ""  # the board only read: no run ref was made
    text = command(b, "agentops-run", "list", "--all", "--remote", "origin")
    assert run_id in text.stdout and "origin" in text.stdout and "waits for an answer" in text.stdout
    stop(a, run_id)


def test_an_unknown_remote_is_a_coded_error(tmp_path: Path) -> None:
    repo = project(tmp_path)
    done = command(repo, "agentops-run", "list", "--all", "--remote", "nowhere")
    assert done.returncode == 3 and "error[SYNC_REMOTE_UNREACHABLE]" in done.stderr, done.stderr
