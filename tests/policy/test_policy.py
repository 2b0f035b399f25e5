"""Policy: every schema/rule problem coded and located; effective policy and config hash; init."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from git_agentops.errors import AgentOpsError
from git_agentops.model.policy import Policy, diff_paths, duration_seconds, effective
from git_agentops.policy.load import check_text, load_policy, locate, policy_from_bytes

from ..conftest import git

GOOD = """version = 1

[run]
target = "main"
budget = "1h30m"

[[verify.commands]]
id = "tests"
argv = ["python3", "-m", "pytest", "-q"]
timeout = 300
parser = "pytest"

[[verify.commands]]
id = "lint"
argv = "ruff check . && echo ok"
shell = true
required = false

[[verify.runners]]
id = "acceptance"
argv = ["python3", "acceptance.py"]

[hosts.claude]
kind = "claude"
argv = ["claude", "-p"]

[review]
required = 1
reviewers = ["claude"]
"""


def _problems(text: str) -> list[tuple[str, str, int | None]]:
    doc, problems = check_text(text)
    assert (doc is None) == bool(problems)
    return [(p.code, p.json_path, p.line) for p in problems]


def test_good_policy_has_no_problems_and_defaults_are_explicit() -> None:
    doc, problems = check_text(GOOD)
    assert problems == [] and doc is not None
    assert doc["verify"]["commands"][0]["required"] is True and doc["verify"]["commands"][1]["required"] is False
    assert doc["run"]["max_workers"] == 3 and doc["run"]["worktree_root"] == ".agentops/worktrees"
    assert doc["guardrails"] == {"secret_scanning": True, "deny_patterns": []}
    policy = Policy.from_effective(doc)
    assert policy.budget_seconds == 5400 and [c.id for c in policy.commands] == ["tests", "lint"]
    assert policy.runner("acceptance") is not None and policy.runner("nope") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("version = 1\n[run]\nbudgett = '90m'\n", [("POLICY_UNKNOWN_KEY", "$.run.budgett", 3)]),
        ("version = 1\nverfy = {}\n", [("POLICY_UNKNOWN_KEY", "$.verfy", 2)]),
        ("version = 1\n[run]\nmax_workers = 'three'\n", [("POLICY_WRONG_TYPE", "$.run.max_workers", 3)]),
        (
            "version = 1\n[[verify.commands]]\nid = 't'\nargv = 'make test'\n",
            [("POLICY_SHELL_REQUIRED", "$.verify.commands[0].argv", 4)],
        ),
        (
            "version = 1\n[[verify.commands]]\nid = 't'\nargv = ['a']\n[[verify.commands]]\nid = 't'\nargv = ['b']\n",
            [("POLICY_DUPLICATE_ID", "$.verify.commands[1].id", 6)],
        ),
        (
            "version = 1\n[[verify.commands]]\nid = 't'\nargv = ['a']\ntimeout = -5\n",
            [("POLICY_VALUE_INVALID", "$.verify.commands[0].timeout", 5)],
        ),
        (
            "version = 1\n[[verify.commands]]\nid = 't'\nargv = ['a']\ntimeout = 0\n",
            [("POLICY_VALUE_INVALID", "$.verify.commands[0].timeout", 5)],
        ),
        ("version = 1\n[[verify.commands]]\nargv = ['a']\n", [("POLICY_INVALID", "$.verify.commands[0]", 2)]),
        ("version = 2\n", [("POLICY_VALUE_INVALID", "$.version", 1)]),
        ("[run]\ntarget='main'\n", [("POLICY_INVALID", "$", None)]),
        ("version = 1\n[run]\ntarget = 'a..b'\n", [("POLICY_VALUE_INVALID", "$.run.target", 3)]),
        ("version = 1\n[run]\nbudget = 'ninety minutes'\n", [("POLICY_VALUE_INVALID", "$.run.budget", 3)]),
        ("version = 1\n[run]\nworktree_root = '../outside'\n", [("POLICY_VALUE_INVALID", "$.run.worktree_root", 3)]),
        (
            "version = 1\n[[verify.commands]]\nid = 't'\nargv = ['a']\nparser = 'nunit'\n",
            [("POLICY_VALUE_INVALID", "$.verify.commands[0].parser", 5)],
        ),
        (
            "version = 1\n[[verify.commands]]\nid = 't'\nargv = ['a']\n[verify.commands.env]\nX = 1\n",
            [("POLICY_WRONG_TYPE", "$.verify.commands[0].env.X", 6)],
        ),
        ("version = 1\n[hosts.x]\nkind = 'robot'\n", [("POLICY_VALUE_INVALID", "$.hosts.x.kind", 3)]),
        (
            "version = 1\n[review]\nrequired = 2\nreviewers = ['nobody']\n",
            [("POLICY_VALUE_INVALID", "$.review.required", 3), ("POLICY_VALUE_INVALID", "$.review.reviewers[0]", 4)],
        ),
        (
            "version = 1\n[guardrails]\ndeny_patterns = ['([a-z']\n",
            [("POLICY_VALUE_INVALID", "$.guardrails.deny_patterns[0]", 3)],
        ),
        ("version = 1\n[run\n", [("POLICY_TOML_INVALID", "$", 2)]),
        ("version = 1\nwhen = 1979-05-27\n", [("POLICY_UNKNOWN_KEY", "$.when", 2)]),
    ],
)
def test_each_problem_has_its_code_path_and_line(text: str, expected: list[tuple[str, str, int | None]]) -> None:
    assert _problems(text) == expected


def test_check_reports_every_problem_not_just_the_first() -> None:
    text = GOOD.replace('budget = "1h30m"', 'budget = "1h30m"\nbudgett = "x"').replace("timeout = 300", "timeout = -1")
    text += '\n[[verify.commands]]\nid = "tests"\nargv = "make"\n'
    codes = [code for code, _, _ in _problems(text)]
    assert codes == ["POLICY_UNKNOWN_KEY", "POLICY_VALUE_INVALID", "POLICY_DUPLICATE_ID", "POLICY_SHELL_REQUIRED"]


def test_load_raises_the_first_problem_with_location(tmp_path: Path) -> None:
    (tmp_path / ".agentops").mkdir()
    (tmp_path / ".agentops" / "policy.toml").write_text("version = 1\n[run]\ntypo = 1\n")
    with pytest.raises(AgentOpsError) as caught:
        load_policy(tmp_path)
    assert caught.value.code == "POLICY_UNKNOWN_KEY"
    assert ".agentops/policy.toml:3: $.run.typo" in caught.value.message
    assert len(caught.value.details["problems"]) == 1


def test_missing_symlinked_and_oversized_policies(tmp_path: Path) -> None:
    with pytest.raises(AgentOpsError) as missing:
        load_policy(tmp_path)
    assert missing.value.code == "POLICY_MISSING"
    (tmp_path / ".agentops").mkdir()
    outside = tmp_path.parent / "outside-policy.toml"
    outside.write_text("version = 1\n")
    (tmp_path / ".agentops" / "policy.toml").symlink_to(outside)
    with pytest.raises(AgentOpsError) as escape:
        load_policy(tmp_path)
    assert escape.value.code == "PATH_ESCAPE"
    (tmp_path / ".agentops" / "policy.toml").unlink()
    (tmp_path / ".agentops" / "policy.toml").write_text("version = 1\n" + "# pad\n" * 60_000)
    with pytest.raises(AgentOpsError) as big:
        load_policy(tmp_path)
    assert big.value.code == "DOC_TOO_LARGE"
    with pytest.raises(AgentOpsError) as binary:
        policy_from_bytes(b"version = 1\n\xff\xfe")
    assert binary.value.code == "POLICY_TOML_INVALID"


def test_config_hash_is_stable_under_formatting_and_defaults_and_changes_with_meaning() -> None:
    base = Policy.from_effective(check_text("version = 1\n[run]\ntarget = 'main'\n")[0])  # type: ignore[arg-type]
    same = Policy.from_effective(check_text("# comment\nversion=1\n")[0])  # type: ignore[arg-type]  # defaults
    changed = Policy.from_effective(check_text("version = 1\n[run]\ntarget = 'dev'\n")[0])  # type: ignore[arg-type]
    assert base.config_hash == same.config_hash != changed.config_hash
    assert list(diff_paths(dict(base.doc), dict(changed.doc))) == ["$.run.target"]


def test_validated_policy_is_cached_by_content(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = policy_from_bytes(GOOD.encode(), cache_dir=cache)
    entries = list(cache.iterdir())
    assert len(entries) == 1 and (entries[0].stat().st_mode & 0o777) == 0o600
    again = policy_from_bytes(GOOD.encode(), cache_dir=cache)
    assert again.config_hash == first.config_hash
    entries[0].write_bytes(b"{damaged")  # a damaged entry is recomputed, never trusted
    assert policy_from_bytes(GOOD.encode(), cache_dir=cache).config_hash == first.config_hash
    with pytest.raises(AgentOpsError):
        policy_from_bytes(b"version = 1\nbad = 1\n", cache_dir=cache)  # invalid bytes are never cached
    assert len(list(cache.iterdir())) == 1


def test_locate_handles_dotted_keys_subtables_and_array_tables() -> None:
    text = (
        "version = 1\n[[verify.commands]]\nid = 'a'\n[[verify.commands]]\nid = 'b'\nenv.X = '1'\n"
        "[run]\n  target = 'x'\n"
    )
    assert locate(text, ("verify", "commands", 1, "id")) == 5
    assert locate(text, ("verify", "commands", 1, "env", "X")) == 6
    assert locate(text, ("run", "target")) == 8
    assert locate(text, ("verify", "commands", 0)) == 2
    assert locate(text, ("nowhere",)) is None


def test_durations() -> None:
    assert duration_seconds("90m") == 5400 and duration_seconds("1h30m") == 5400 and duration_seconds("2d") == 172800
    assert effective({"version": 1})["run"]["budget"] == "90m"


# -- the CLI ------------------------------------------------------------------------------------------------------


def _write_policy(repo: Path, text: str, *, commit: bool = True) -> None:
    (repo / ".agentops").mkdir(exist_ok=True)
    (repo / ".agentops" / "policy.toml").write_text(text)
    if commit:
        git(repo, "add", ".agentops/policy.toml")
        git(repo, "commit", "-q", "-m", "policy")


def test_policy_check_cli(run_cli: Any, repo_path: Path) -> None:
    _write_policy(repo_path, "version = 1\n[run]\nbudgett = '1h'\n[[verify.commands]]\nid='t'\nargv='x'\n")
    done = run_cli("git", "agentops-policy", "check", cwd=repo_path)
    assert done.returncode == 1
    assert done.stdout.splitlines()[:2] == [
        "error[POLICY_UNKNOWN_KEY]: .agentops/policy.toml:3: $.run.budgett: unknown key 'budgett'",
        "error[POLICY_SHELL_REQUIRED]: .agentops/policy.toml:6: $.verify.commands[0].argv: argv is a single string, "
        "which only a shell can split: write a list, or say shell = true",
    ]
    as_json = json.loads(run_cli("git", "agentops-policy", "check", "--json", cwd=repo_path).stdout)
    assert [p["code"] for p in as_json["problems"]] == ["POLICY_UNKNOWN_KEY", "POLICY_SHELL_REQUIRED"]
    _write_policy(repo_path, GOOD)
    ok = run_cli("git", "agentops-policy", "check", cwd=repo_path)
    assert ok.returncode == 0 and "OK (config hash" in ok.stdout
    (repo_path / "other.toml").write_text("version = 'one'\n")
    other = run_cli("git", "agentops-policy", "check", "other.toml", cwd=repo_path)
    assert other.returncode == 1 and "error[POLICY_VALUE_INVALID]: other.toml:1: $.version" in other.stdout


def test_policy_show_prints_effective_policy_and_hash(run_cli: Any, repo_path: Path) -> None:
    _write_policy(repo_path, GOOD)
    shown = json.loads(run_cli("git", "agentops-policy", "show", "--json", cwd=repo_path).stdout)
    doc, _ = check_text(GOOD)
    assert shown["policy"] == doc and shown["configHash"] == Policy.from_effective(doc).config_hash  # type: ignore[arg-type]
    assert shown["trust"]["status"] == "UNTRUSTED"
    human = run_cli("git", "agentops-policy", "show", cwd=repo_path).stdout
    assert "config hash: " + shown["configHash"] in human and "max_workers = 3" in human


def test_init_detects_project_and_writes_a_valid_policy(run_cli: Any, tmp_path: Path) -> None:
    from ..conftest import make_repo

    repo = make_repo(
        tmp_path / "proj",
        files={
            "pyproject.toml": "[project]\nname='x'\n[tool.pytest.ini_options]\n[tool.ruff]\n",
            "package.json": json.dumps(
                {"scripts": {"test": "jest", "lint": "eslint ."}, "devDependencies": {"jest": "29", "eslint": "9"}}
            ),
            "yarn.lock": "",
            "go.mod": "module x\n",
            "Makefile": "check:\n\tflake8 .\nCC := cc\n",
        },
    )
    dry = run_cli("git", "agentops-init", "--dry-run", "--json", cwd=repo)
    plan = json.loads(dry.stdout)
    assert dry.returncode == 0 and not (repo / ".agentops" / "policy.toml").exists()
    # two test suites, each once: the package's test script and pytest
    assert [d["id"] for d in plan["detected"]] == ["tests", "tests-pytest", "go-test", "lint"]
    # ruff is configured but not installed by setup: commented out, so the yarn lint (installed by setup) gets the id
    assert plan["detected"][0]["argv"] == ["yarn", "run", "test"]
    assert plan["detected"][1]["argv"] == [".agentops/venv/bin/python", "-m", "pytest", "-q"]
    assert plan["detected"][3]["argv"] == ["yarn", "run", "lint"]
    assert [(d["id"], d["argv"] if isinstance(d["argv"], str) else d["argv"][2]) for d in plan["disabled"]] == [
        ("lint-ruff-check", "ruff"),
        ("make-check", 'PATH="$PWD/.agentops/venv/bin:$PATH" make check'),  # flake8 is not installed
    ]
    assert 'add "--with flake8" to the setup step' in plan["disabled"][1]["reason"]
    assert plan["setup"] == [
        ["git", "agentops-env", "python", "--with", "pytest"],
        ["git", "agentops-env", "node"],
        ["git", "agentops-env", "go"],
    ]
    no_tty = run_cli("git", "agentops-init", cwd=repo)
    assert no_tty.returncode == 3 and "CONFIRMATION_REQUIRED" in no_tty.stderr
    # what it stops at is after the policy and the setup it will need, not before
    assert "[[verify.commands]]" in no_tty.stdout
    assert (
        "Its setup ('git agentops-verify' runs it here on first use; workers' worktrees too): git agentops-env python "
        in (no_tty.stdout)
    )
    assert not (repo / ".agentops" / "policy.toml").exists()
    done = run_cli("git", "agentops-init", "--yes", cwd=repo)
    assert done.returncode == 0, done.stderr
    text = (repo / ".agentops" / "policy.toml").read_text()
    assert text.startswith("# git-agentops policy") and check_text(text)[1] == []
    exclude = (repo / ".git" / "info" / "exclude").read_text()
    assert ".agentops/worktrees/" in exclude and ".agentops/mailbox/" in exclude and ".agentops/venv/" in exclude
    again = run_cli("git", "agentops-init", "--yes", cwd=repo)
    assert again.returncode == 3 and "POLICY_EXISTS" in again.stderr
    forced = run_cli("git", "agentops-init", "--yes", "--force", cwd=repo)
    assert forced.returncode == 0
    assert (repo / ".git" / "info" / "exclude").read_text().count(".agentops/worktrees/") == 1


def test_the_readme_policy_example_is_valid() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    example = readme.split("```toml\n", 1)[1].split("```", 1)[0]
    assert check_text(example)[1] == []


# -- init: setup steps and commands in the checkout's own environment ---------------------------------------------


def _init_plan(run_cli: Any, tmp_path: Path, files: dict[str, str], *, bare_path: bool = False) -> dict[str, Any]:
    """init's plan for a project; ``bare_path``: with nothing on PATH but git and the toolkit."""
    import shutil

    from ..conftest import make_repo

    repo = make_repo(tmp_path / "proj", files=files)
    env = None
    if bare_path:
        bin_dir = tmp_path / "bare-bin"
        bin_dir.mkdir()
        for program in ("git", "git-agentops-init"):
            (bin_dir / program).symlink_to(shutil.which(program) or program)
        env = {"PATH": str(bin_dir)}
    done = run_cli("git", "agentops-init", "--dry-run", "--json", cwd=repo, env=env)
    assert done.returncode == 0, done.stderr
    plan: dict[str, Any] = json.loads(done.stdout)
    return plan


SRC_LAYOUT = {
    "pyproject.toml": (
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        '[project]\nname = "flaskish"\nversion = "1"\ndependencies = ["werkzeug>=3"]\n'
        '[project.optional-dependencies]\ntest = ["pytest", "asgiref"]\n'
        '[dependency-groups]\ndev = ["ruff", {include-group = "typing"}]\ntyping = ["pyright"]\n'
        "[tool.pytest.ini_options]\n[tool.ruff]\n[tool.mypy]\n"
    ),
    "src/flaskish/__init__.py": "",
}


def test_init_python_project_uses_the_checkouts_venv_and_comments_out_tools_setup_will_not_install(
    run_cli: Any, tmp_path: Path
) -> None:
    from git_agentops.policy.starter import propose, render, starter_policy

    plan = _init_plan(run_cli, tmp_path, SRC_LAYOUT)
    assert plan["setup"] == [["git", "agentops-env", "python", "--extra", "test", "--group", "dev"]]
    assert plan["runHere"] == ["git agentops-env python --extra test --group dev"]
    assert [(d["id"], d["argv"]) for d in plan["detected"]] == [
        ("tests", [".agentops/venv/bin/python", "-m", "pytest", "-q"]),
        ("lint", [".agentops/venv/bin/python", "-m", "ruff", "check", "--no-fix"]),  # ruff is in the dev group
    ]
    assert [(d["id"], d["reason"]) for d in plan["disabled"]] == [
        (
            "types",
            'mypy is not installed in .agentops/venv: add "--with mypy" to the setup step, or mypy to a dependency '
            "group",
        )
    ]
    root = tmp_path / "proj"
    proposal = propose(root, path="")
    text = render(starter_policy(root, target="main", proposal=proposal), proposal.disabled)
    doc, problems = check_text(text)
    assert problems == [] and doc is not None
    assert [(s["argv"], s["timeout"]) for s in doc["worktree"]["setup"]] == [(plan["setup"][0], 1800)]
    assert [c["id"] for c in doc["verify"]["commands"]] == ["tests", "lint"]
    block = text.split("# [[verify.commands]]  # not enabled: mypy is not installed", 1)[1]
    assert '# id = "types"' in block
    policy, disabled = text.split("\n# [[verify.commands]]", 1)
    uncommented = policy + ("\n# [[verify.commands]]" + disabled).replace("\n# ", "\n")  # enabling = uncommenting
    enabled, problems = check_text(uncommented)
    assert problems == [] and enabled is not None
    assert [c["id"] for c in enabled["verify"]["commands"]] == ["tests", "lint", "types"]


def test_init_adds_pytest_when_the_project_configures_it_but_installs_it_nowhere(run_cli: Any, tmp_path: Path) -> None:
    plan = _init_plan(
        run_cli,
        tmp_path,
        {"pyproject.toml": "[project]\nname = 'p'\nversion = '1'\n[tool.pytest.ini_options]\n", "p/__init__.py": ""},
    )
    assert plan["setup"] == [["git", "agentops-env", "python", "--with", "pytest"]]
    pinned = _init_plan(
        run_cli,
        tmp_path / "pinned",
        {
            "pyproject.toml": "[project]\nname = 'p'\nversion = '1'\n[tool.ruff]\n",
            "requirements/tests.txt": "pytest==8.3.0\nruff==0.6.0\n",
            "tests/conftest.py": "",
        },
    )
    assert pinned["setup"] == [["git", "agentops-env", "python"]]  # the pinned test requirements have both
    assert [d["id"] for d in pinned["detected"]] == ["tests", "lint"]


def test_init_node_cargo_and_go_setups(run_cli: Any, tmp_path: Path) -> None:
    plan = _init_plan(
        run_cli,
        tmp_path,
        {
            "package.json": json.dumps(
                {
                    "scripts": {"test": "vitest", "typecheck": "tsc"},
                    "devDependencies": {"vitest": "1", "typescript": "5"},
                }
            ),
            "pnpm-lock.yaml": "",
            "Cargo.toml": "[package]\nname = 'x'\n",
            "Cargo.lock": "",
            "go.mod": "module x\n",
            ".golangci.yml": "",
        },
        bare_path=True,
    )
    assert plan["setup"] == [
        ["git", "agentops-env", "node"],
        ["git", "agentops-env", "cargo"],
        ["git", "agentops-env", "go"],
    ]
    assert [(d["id"], d["argv"]) for d in plan["detected"]] == [
        ("tests", ["pnpm", "run", "test"]),
        ("cargo-test", ["cargo", "test", "--locked"]),
        ("go-test", ["go", "test", "./..."]),
        ("typecheck", ["pnpm", "run", "typecheck"]),
    ]
    assert [(d["id"], d["reason"]) for d in plan["disabled"]] == [
        ("go-lint", "golangci-lint is not on PATH (golangci-lint: https://golangci-lint.run/welcome/install/)")
    ]
    library = _init_plan(run_cli, tmp_path / "lib", {"Cargo.toml": "[package]\nname = 'x'\n"})
    assert library["detected"][0]["argv"] == ["cargo", "test"]  # no Cargo.lock: --locked would fail
