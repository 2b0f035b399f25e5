"""The scripted agent's recipe format as the README documents it: the example is complete and works, and
``git agentops-run demo --print-recipe`` prints exactly the recipe the demo plays.

Why: the format was documented only in a module docstring, so a person writing a recipe had to read the source; the
README's example is now the reference, and an example that no longer validates (or no longer runs) would teach the
wrong thing. Everything here reads the README as a person would: the recipe and policy blocks under the heading.
"""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from git_agentops.demo import scenario as demo
from git_agentops.hosts.recipe import parse_recipe
from git_agentops.policy.load import load_policy
from git_agentops.schema import documents

from ..conftest import git, make_repo
from ..runkit import cli, status, trust

ROOT = Path(__file__).resolve().parents[2]
HEADING = "### Recipes for the scripted agent"


def _section() -> str:
    text = (ROOT / "README.md").read_text("utf-8")
    assert text.count(HEADING) == 1, f"the README has no single {HEADING!r} section"
    start = text.index(HEADING)
    end = text.find("\n### ", start + len(HEADING))
    return text[start : end if end != -1 else len(text)]


def _toml_blocks() -> list[str]:
    return re.findall(r"```toml\n(.*?)```", _section(), flags=re.S)


def _readme_recipe() -> str:
    return _toml_blocks()[0]


def _readme_policy() -> str:
    return _toml_blocks()[1]


def test_the_readme_recipe_example_validates_against_the_schema_and_the_loaders_rules() -> None:
    text = _readme_recipe()
    assert documents.schema_errors(tomllib.loads(text), "recipe") == []
    recipe = parse_recipe(text.encode(), path=Path("README.md"))
    greet = recipe.task_titled("Greet")
    assert greet is not None and len(greet.attempts) == 2  # a refused first attempt and its repair
    assert [t.name for t in recipe.planning_order()] == ["greet", "docs"]
    assert [r.name for r in recipe.reviewers] == ["reviewer-a"]


def test_the_readme_documents_every_key_the_recipe_schema_has() -> None:
    """A key the schema gains without a line in the README's tables is a key nobody can learn about."""
    schema = json.loads((ROOT / "schemas" / "recipe.schema.json").read_text("utf-8"))
    keys: set[str] = set()

    def collect(node: object) -> None:
        if isinstance(node, dict):
            keys.update(node.get("properties", {}))
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(schema)
    prose = re.sub(r"```.*?```", "", _section(), flags=re.S)
    code = " ".join(_toml_blocks() + re.findall(r"`([^`]+)`", prose))  # the example, and the tables' code spans
    undocumented = sorted(key for key in keys if not re.search(rf"(?<![\w-]){re.escape(key)}(?![\w-])", code))
    assert undocumented == [], undocumented


def test_the_readme_policy_for_the_example_loads(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", files={".agentops/policy.toml": _readme_policy()})
    policy = load_policy(repo)
    assert [c.id for c in policy.commands] == ["tests"]


def test_print_recipe_prints_exactly_the_recipe_the_demo_writes_and_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        ["git", "agentops-run", "demo", "--print-recipe"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    root = tmp_path / "scratch"
    root.mkdir()
    demo.build(root, demo.environment(root, {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}))
    assert done.stdout == (root / "recipe.toml").read_text() == demo.recipe()  # the file run_demo passes to start
    parsed = parse_recipe(done.stdout.encode(), path=Path("printed"))
    evaluator = parsed.task_titled("Evaluator")
    assert evaluator is not None and len(evaluator.attempts) == 2
    as_json = subprocess.run(
        ["git", "agentops-run", "demo", "--print-recipe", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == {"recipe": done.stdout}
    assert not list(tmp_path.glob("agentops-demo-*"))  # printing builds and runs nothing


@pytest.mark.slow
def test_the_readme_example_runs_to_complete_with_its_policy_repairing_greet_once(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "repo", files={".agentops/policy.toml": _readme_policy(), ".gitignore": "__pycache__/\n"}
    )
    trust(repo)
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(_readme_recipe())
    done = cli(
        repo,
        "agentops-run",
        "start",
        "--goal",
        "Greet people",
        "--host",
        "scripted",
        "--recipe",
        str(recipe),
        "--json",
        timeout=300,
    )
    run_id = re.search(r'"runId": "([^"]+)"', done.stdout)
    assert run_id is not None, done.stdout + done.stderr
    doc = status(repo, run_id.group(1))
    assert doc["status"] == "complete", doc
    workers = {w["taskId"]: w for w in doc["workers"]}
    greet = next(t for t in doc["tasks"] if t["title"] == "Greet")
    assert workers[greet["taskId"]]["generation"] == 2  # refused once, repaired by the second attempt
    assert git(repo, "show", "main:greet.py") == 'def greet(name):\n    return f"Hello, {name}!"'
    assert "Hello, Ada!" in git(repo, "show", "main:README.md")
    assert [r["verdict"] for r in doc["integration"]["reviews"]] == ["approve"]
