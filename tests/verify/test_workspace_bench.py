"""``bench/workspace.py``, the figures of a worker's workspace made by :mod:`git_agentops.verify.workspaces`: they
are produced (a tiny project, nothing downloaded), and its disk count is ``du``'s -- allocated blocks, each inode
once however many hard links name it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ..helpers import require_tool

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def _bench() -> ModuleType:
    """``bench/workspace.py`` loaded as a module (it imports its neighbours in ``bench/`` as a script does)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("bench_workspace", BENCH / "workspace.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up while the class is made
    spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def test_extra_disk_counts_each_inode_once_and_by_where_it_is(tmp_path: Path) -> None:
    bench = _bench()
    (tmp_path / "shared").mkdir()
    before = bench.disk(tmp_path)
    (tmp_path / "shared" / "big").write_bytes(b"x" * 100_000)
    os.link(tmp_path / "shared" / "big", tmp_path / "shared" / "linked")  # a hard link adds no blocks
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "small").write_bytes(b"y" * 10)
    after = bench.disk(tmp_path)
    total, places = bench.added(before, after, [("own", tmp_path / "own"), ("shared", tmp_path / "shared")])
    big = (tmp_path / "shared" / "big").stat().st_blocks * 512
    small = (tmp_path / "own" / "small").stat().st_blocks * 512
    own_dir = (tmp_path / "own").stat().st_blocks * 512
    assert big >= 100_000 and small > 0
    assert total == after.total - before.total == sum(places.values()) == big + small + own_dir
    assert places["own"] == small + own_dir
    assert places["shared"] == big  # once, though two names link it
    assert set(places) == {"own", "shared"}


def test_generated_project_has_the_files_asked_for_and_init_proposes_python_and_node_setup(tmp_path: Path) -> None:
    bench = _bench()
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "b"}
    env["GIT_COMMITTER_EMAIL"] = "b@x"
    tracked = bench.generate(tmp_path / "repo", env, files=200, deps=False)
    assert 195 <= tracked <= 205
    python = list((tmp_path / "repo" / "src" / "benchapp").rglob("*.py"))
    javascript = list((tmp_path / "repo" / "web").rglob("*.js"))
    assert len(python) > len(javascript) > 50
    policy = bench.policy_for(tmp_path / "repo", os.environ)
    assert [step.argv for step in policy.setup] == [("git", "agentops-env", "python"), ("git", "agentops-env", "node")]


@pytest.mark.slow
def test_the_bench_prints_positive_figures_for_a_tiny_project(tmp_path: Path) -> None:
    """Cold and warm, baseline and toolkit: every workspace is ready in a positive time and adds disk (its own
    checkout at least); the warm toolkit workspace adds less than the baseline's, whose venv is its own."""
    require_tool("npm", "apt-get install npm")  # the project has a Node package; .ci/run installs npm
    env = {**os.environ, "PIP_NO_INDEX": "1", "npm_config_offline": "true", "npm_config_update_notifier": "false"}
    done = subprocess.run(
        [sys.executable, str(BENCH / "workspace.py"), "--files", "200", "--no-deps", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert doc["bench"] == "workspace" and doc["files"] >= 195 and doc["backend"] == "in-tree"
    for side in ("baseline", "toolkit"):
        for cache in ("cold", "warm"):
            assert doc[f"{side}_{cache}_ready_s"] > 0
            assert doc[f"{side}_{cache}_extra_mb"] > 0
            assert doc[f"{side}_{cache}_cpu_s"] > 0
    for cache in ("cold", "warm"):
        assert doc[f"ready_ratio_{cache}"] > 0 and doc[f"disk_ratio_{cache}"] > 0
    assert doc["toolkit_warm_extra_mb"] < doc["baseline_warm_extra_mb"]
    assert isinstance(doc["target_ready_met"], bool) and isinstance(doc["target_disk_met"], bool)
    assert "toolkit warm:" in done.stdout
    assert list(tmp_path.iterdir()) == []  # the scratch directory is removed
