"""The README's first command, as a newcomer runs it: ``git agentops-run demo`` completes and its receipt verifies.

Why: the demo is the main job a person tries first. With agents in their own namespaces, the git config the demo
names (``GIT_CONFIG_GLOBAL``, in its scratch dir under ``/tmp``) was hidden from them with the rest of ``/tmp``,
and every commit of the demo failed; no other test saw it, because the test environment hands git an identity
through ``GIT_AUTHOR_*``. Here the environment is a newcomer's.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest


@pytest.mark.slow
def test_the_demo_completes_for_a_newcomer_whose_identity_is_only_in_a_git_config_file(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_AUTHOR_", "GIT_COMMITTER_", "GIT_CONFIG"))}
    home = Path(env["HOME"])
    (home / ".gitconfig").write_text("[user]\n\tname = New Comer\n\temail = new@example.invalid\n")
    done = subprocess.run(
        ["git", "agentops-run", "demo", "--keep", "--dir", str(tmp_path / "kept")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "complete in" in done.stdout and "valid, signed by" in done.stdout, done.stdout
    # what --print-recipe shows is the recipe this run played: the copy the run keeps (and resumes with)
    printed = subprocess.run(
        ["git", "agentops-run", "demo", "--print-recipe"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    run_id = re.search(r"^run (\S+): complete", done.stdout, flags=re.M)
    (repo,) = (tmp_path / "kept").glob("agentops-demo-*/calc")
    assert run_id is not None and printed.returncode == 0
    played = repo / ".git" / "agentops" / "runs" / run_id.group(1) / "recipe.toml"
    assert played.read_text() == printed.stdout
