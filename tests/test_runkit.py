"""The run helpers' in-process commands print what the commands print as processes.

Why: ``tests/runkit.py`` runs ``status``, ``log``, ``stop`` and ``policy trust`` through the commands' own ``main``
in the test's process (a process each was a third of a second of CPU, thousands of times per suite). The tests that
use them trust that the document is the command's; these compare the two on the same repository.
"""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import make_repo
from .helpers import simple_child
from .runkit import POLICY, cli, events, in_process, project, recipe, start, status, stop, trust, wait_for


def test_in_process_status_and_log_are_the_documents_the_commands_print(tmp_path: Path) -> None:
    repo = project(tmp_path)
    run_id = start(repo, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True))
    try:
        doc = wait_for(repo, run_id, lambda d: d["status"] == "complete")
    finally:
        stop(repo, run_id)
    shown = cli(repo, "agentops-run", "status", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    assert status(repo, run_id) == json.loads(shown.stdout) and doc["status"] == "complete"
    logged = cli(repo, "agentops-run", "log", run_id, "--json")
    assert logged.returncode == 0, logged.stderr
    assert events(repo, run_id) == json.loads(logged.stdout)["events"]


def test_in_process_trust_grants_what_the_command_grants(tmp_path: Path) -> None:
    policy = POLICY.format(max_workers=1, run_options="")
    mine, theirs = (make_repo(tmp_path / name, files={".agentops/policy.toml": policy}) for name in ("a", "b"))
    trust(mine)
    done = cli(theirs, "agentops-policy", "trust", "--yes")
    assert done.returncode == 0, done.stderr
    verdicts = []
    for repo in (mine, theirs):
        shown = cli(repo, "agentops-policy", "status", "--json")
        assert shown.returncode == 0, shown.stderr
        verdict = json.loads(shown.stdout)
        assert verdict["repository"] == str(repo.resolve())
        verdicts.append({k: v for k, v in verdict.items() if k not in ("repository", "remote", "trustedAt")})
    assert verdicts[0] == verdicts[1] and verdicts[0]["status"] == "TRUSTED"
    assert verdicts[0]["trustedBy"]["yes"] is True and verdicts[0]["trustedBy"]["tty"] is None


def test_in_process_refusal_has_the_commands_exit_status_and_message(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    done = in_process(repo, "git_agentops.cli.run", "status", "run-20260101-000000", "--json")
    shown = cli(repo, "agentops-run", "status", "run-20260101-000000", "--json")
    assert done.returncode == shown.returncode != 0
    assert (done.stdout, done.stderr) == (shown.stdout, shown.stderr)
