"""``[worktree] include``: the person's untracked local files, checked before anything is made, copied without ever
following a link, and refused in a delivery."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.repo import Store
from git_agentops.integrate.secrets import path_rule
from git_agentops.policy.load import policy_from_bytes
from git_agentops.workspace import localfiles

from ..helpers import simple_child
from ..runkit import command, project, recipe


def test_sources_are_checked_and_copied_with_their_mode(store: Store, tmp_path: Path) -> None:
    root = store.workdir
    assert root is not None
    (root / ".env.local").write_text("SECRET=1\n")
    (root / ".env.local").chmod(0o600)
    (root / "config").mkdir()
    (root / "config" / "dev.json").write_text("{}\n")
    files = localfiles.sources(store, root, [".env.local", "config/dev.json"])
    target = tmp_path / "worktree"
    target.mkdir()
    assert localfiles.copy_into(files, target) == [".env.local", "config/dev.json"]
    assert (target / ".env.local").read_text() == "SECRET=1\n"
    assert (target / ".env.local").stat().st_mode & 0o777 == 0o600
    assert (target / "config" / "dev.json").read_text() == "{}\n"


@pytest.mark.parametrize(
    ("make", "rel", "code"),
    [
        (lambda root, out: (root / "link.env").symlink_to(out), "link.env", "WORKSPACE_INCLUDE_ESCAPE"),
        (lambda root, out: (root / "sub").symlink_to(out.parent), "sub/outside.env", "WORKSPACE_INCLUDE_ESCAPE"),
        (lambda root, out: (root / "dir.env").mkdir(), "dir.env", "WORKSPACE_INCLUDE_ESCAPE"),
        (lambda root, out: os.mkfifo(root / "pipe.env"), "pipe.env", "WORKSPACE_INCLUDE_ESCAPE"),
        (lambda root, out: None, "README.md", "WORKSPACE_INCLUDE_ESCAPE"),  # tracked
        (lambda root, out: None, "absent.env", "WORKSPACE_INCLUDE_MISSING"),
    ],
)
def test_a_bad_include_is_a_coded_error(store: Store, tmp_path: Path, make: object, rel: str, code: str) -> None:
    root = store.workdir
    assert root is not None
    outside = tmp_path / "elsewhere" / "outside.env"
    outside.parent.mkdir()
    outside.write_text("the person's other file\n")
    make(root, outside)  # type: ignore[operator]
    with pytest.raises(AgentOpsError) as caught:
        localfiles.sources(store, root, [rel])
    assert caught.value.code == code
    assert outside.read_text() == "the person's other file\n"


def test_copy_never_follows_a_link_nor_overwrites(store: Store, tmp_path: Path) -> None:
    root = store.workdir
    assert root is not None
    (root / ".env.local").write_text("mine\n")
    files = localfiles.sources(store, root, [".env.local"])
    target = tmp_path / "worktree"
    target.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    (target / ".env.local").symlink_to(victim)
    with pytest.raises(AgentOpsError) as caught:
        localfiles.copy_into(files, target)
    assert caught.value.code == "PATH_ESCAPE"
    assert victim.read_text() == "untouched\n"
    (target / ".env.local").unlink()
    (target / ".env.local").write_text("the agent's own\n")
    assert localfiles.copy_into(files, target) == []  # an adopted worktree's file is never overwritten
    assert (target / ".env.local").read_text() == "the agent's own\n"


def test_include_paths_are_refused_in_a_delivery_as_written() -> None:
    patterns = localfiles.refusal_patterns([".env.local", "config/dev.json", "!odd[1].env"])
    assert path_rule(".env.local", patterns) and path_rule("app/.env.local", patterns)
    assert path_rule("config/dev.json", patterns) and not path_rule("other/dev.json", patterns)
    assert path_rule("!odd[1].env", patterns) and not path_rule("odd1.env", patterns)
    assert not path_rule(".env.local.example", patterns)


def test_an_include_path_out_of_the_checkout_is_refused_by_the_policy() -> None:
    text = b'version = 1\n[worktree]\ninclude = ["../outside.env"]\n[[verify.commands]]\nid = "t"\nargv = ["true"]\n'
    with pytest.raises(AgentOpsError) as caught:
        policy_from_bytes(text)
    assert caught.value.code.startswith("POLICY_")


def test_run_start_refuses_a_symlink_out_before_anything_is_made(tmp_path: Path) -> None:
    repo = project(tmp_path, extra_policy='\n[worktree]\ninclude = [".env.local"]\n')
    (tmp_path / "secret").write_text("not the project's\n")
    (repo / ".env.local").symlink_to(tmp_path / "secret")
    path = recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True)
    done = command(repo, "agentops-run", "start", "--goal", "x", "--recipe", str(path), "--detach")
    assert done.returncode == 3 and "error[WORKSPACE_INCLUDE_ESCAPE]" in done.stderr, done.stderr
    listed = command(repo, "agentops-run", "list", "--json")
    assert json.loads(listed.stdout)["runs"] == []
    assert not (repo / ".agentops" / "worktrees").exists()
