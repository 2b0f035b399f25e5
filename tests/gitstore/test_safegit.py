"""The neutralised git's driver overrides: asked of git once per place while the config they came from is unchanged."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from git_agentops.gitstore import safegit
from git_agentops.gitstore.safegit import driver_overrides, neutral_environment

from ..conftest import git, make_repo

EVIL = ["-c", "filter.evil.clean=", "-c", "filter.evil.smudge=", "-c", "filter.evil.process="]


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every ``git config`` the overrides ran, from a clean slate of kept answers."""
    monkeypatch.setattr(safegit, "_DRIVERS", {})
    calls: list[list[str]] = []
    real = subprocess.run

    def counting(argv: list[str], **kwargs: Any) -> Any:
        if "--show-origin" in argv:  # the overrides' question, not the test's own git
            calls.append(list(argv))
        return real(argv, **kwargs)

    monkeypatch.setattr(subprocess, "run", counting)
    return calls


def test_an_unchanged_config_is_not_asked_again_and_a_changed_one_is(tmp_path: Path, asked: list[list[str]]) -> None:
    """Invariant: the overrides are what the config says at each call -- kept while its file reads the same bytes,
    so a driver a command adds between two calls is blanked in the second."""
    repo = make_repo(tmp_path / "repo")
    env = neutral_environment()
    assert driver_overrides(repo, env) == driver_overrides(repo, env) == []
    assert len(asked) == 1
    git(repo, "config", "filter.evil.clean", "touch pwned")
    assert driver_overrides(repo, env) == EVIL
    assert driver_overrides(repo, env) == EVIL
    assert len(asked) == 2
    sub = repo / "sub"
    sub.mkdir()
    assert driver_overrides(sub, env) == EVIL  # relative to the top, not to ``sub``: never kept
    assert driver_overrides(sub, env) == EVIL
    assert len(asked) == 4


@pytest.mark.parametrize("setting", ["include.path", "extensions.worktreeConfig"])
def test_a_config_that_reads_other_files_is_asked_every_time(
    tmp_path: Path, asked: list[list[str]], setting: str
) -> None:
    """Invariant: what the kept answer could not see change -- an included file, a per-worktree config -- makes
    every call ask git; a driver added there is blanked at once."""
    repo = make_repo(tmp_path / "repo")
    env = neutral_environment()
    extra = tmp_path / "extra.config" if setting == "include.path" else repo / ".git" / "config.worktree"
    extra.write_text("")
    git(repo, "config", setting, str(extra) if setting == "include.path" else "true")
    assert driver_overrides(repo, env) == []
    extra.write_text('[filter "evil"]\n\tclean = touch pwned\n')
    assert driver_overrides(repo, env) == EVIL
    assert len(asked) == 2


def test_a_long_lived_process_keeps_answers_for_a_bounded_number_of_places(
    tmp_path: Path, asked: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Invariant: a supervisor asks in ever new worktrees and slots; the kept answers never outgrow the bound, the
    oldest place going first (asked of git again when it comes back)."""
    monkeypatch.setattr(safegit, "_DRIVERS_KEPT", 2)
    env = neutral_environment()
    repos = [make_repo(tmp_path / f"repo{i}") for i in range(3)]
    for repo in repos:
        driver_overrides(repo, env)
    assert len(safegit._DRIVERS) == 2 and len(asked) == 3
    driver_overrides(repos[2], env)
    assert len(asked) == 3
    driver_overrides(repos[0], env)
    assert len(asked) == 4 and len(safegit._DRIVERS) == 2
