"""How init reads what a project runs (``policy/projectfiles.py``, ``policy/commands.py``), how it keeps one command
per suite and tool (``policy/proposal.py``), and the parsers it picks (unittest, node's TAP) on real runner output.

The whole flow on full fixture projects is ``tests/policy/test_starter_projects.py``; these pin the rules one by one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from git_agentops.policy.commands import Resolver, simple_commands
from git_agentops.policy.projectfiles import read_makefile, read_tox
from git_agentops.policy.proposal import propose
from git_agentops.policy.workflows import read_workflows
from git_agentops.verify.parsers import parse_tap, parse_unittest


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_shell_lines_split_into_simple_commands_with_substitutions_and_no_redirections() -> None:
    text = 'set -e\nFOO=1 pytest -q tests \\\n  -x 2>&1 | tee log && test -z "$(gofmt -l .)"\n# comment\nmake check;'
    assert simple_commands(text) == [
        ("set", "-e"),
        ("pytest", "-q", "tests", "-x"),
        ("tee", "log"),
        ("test", "-z", "$(gofmt -l .)"),
        ("gofmt", "-l", "."),
        ("make", "check"),
    ]


def test_tox_ini_factor_lines_generative_envs_and_substitutions(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "tox.ini": "[tox]\nenvlist = py{311,312}-{unit,lowest}, lint\n\n[testenv]\ndeps =\n    pytest\n"
            "    lowest: six==1.0\ncommands =\n    unit: pytest {posargs:-x tests} --basetemp={envtmpdir}\n"
            "    lowest: pytest --lowest\n\n[testenv:lint]\ndeps = ruff\ncommands = -ruff check {toxinidir}/src\n"
        },
    )
    tox = read_tox(tmp_path)
    assert tox is not None
    assert tox.envlist == ("py311-unit", "py311-lowest", "py312-unit", "py312-lowest", "lint")
    lowest = tox.env("py311-lowest")
    assert lowest is not None and lowest.commands == (("pytest", "--lowest"),) and lowest.deps == ("pytest", "six==1.0")
    leaves = Resolver(tmp_path).tox_leaves(["py312-unit", "lint"])
    assert [(leaf.tool.kind, leaf.args) for leaf in leaves] == [
        ("pytest", ("-x", "tests")),  # {posargs:default} is its default; --basetemp={envtmpdir} is tox's own
        ("ruff-check", ("src",)),  # the "ignore the exit code" dash and {toxinidir}/ are gone
    ]
    assert leaves[1].deps == ("ruff",)


def test_makefile_variables_prerequisites_and_sub_makes(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "Makefile": "PY ?= python3\nPY ?= python2\nSRC := src\n.PHONY: check\ncheck: lint types\n"
            "lint:\n\t@$(PY) -m ruff check $(SRC)\ntypes:\n\t-$(MAKE) mypy\nmypy:\n\tmypy ${SRC}\n"
            "other:\n\tmake -C docs html\n"
        },
    )
    make = read_makefile(tmp_path)
    assert make is not None and make.default == "check"
    assert make.targets["lint"].recipe == ("python3 -m ruff check src",)
    entry = Resolver(tmp_path).target("check")
    assert entry is not None
    assert [(leaf.tool.kind, leaf.args) for leaf in entry.leaves] == [("ruff-check", ("src",)), ("mypy", ("src",))]
    assert Resolver(tmp_path).target("other") == Resolver(tmp_path).target("other")  # -C: another project, not read
    other = Resolver(tmp_path).target("other")
    assert other is not None and other.leaves == () and other.others == (("make", "-C", "docs", "html"),)


def test_ci_matrix_values_expand_and_launchers_are_looked_through(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            ".github/workflows/ci.yml": "jobs:\n  t:\n    strategy:\n      matrix:\n        env: [a, b]\n"
            "        include: [{env: c}]\n    steps:\n      - run: tox -e ${{ matrix.env }}\n"
            "      - run: uv run --locked --group typing mypy src\n      - run: npx --yes eslint .\n"
            "      - run: coverage run --source=x -m pytest tests\n"
            "      - run: pytest\n        working-directory: sub\n",
        },
    )
    steps = read_workflows(tmp_path)
    assert [s.script for s in steps] == ["tox -e a", "tox -e b", "tox -e c", *[s.script for s in steps[3:]]]
    assert len(steps) == 6  # the step in another working directory belongs to another project
    resolver = Resolver(tmp_path)
    leaves = [e.leaves[0] for s in steps[3:] for e in resolver.entries(s.script, s.origin, via_ci=True)]
    assert [(leaf.tool.kind, leaf.args, leaf.groups, leaf.wrapped) for leaf in leaves] == [
        ("mypy", ("src",), ("typing",), ("uv",)),
        ("eslint", (".",), (), ("npx",)),
        ("pytest", ("tests",), (), ("coverage",)),
    ]


def test_one_suite_once_and_a_missing_tool_commented_out_with_the_group_that_holds_it(tmp_path: Path) -> None:
    """The issue's project: pytest configured, `make test` running pytest again, `make check` needing stubtest
    that setup does not install, and a typing group holding mypy."""
    _write(
        tmp_path,
        {
            "pyproject.toml": "[project]\nname = 'p'\nversion = '1'\n[project.optional-dependencies]\n"
            "test = ['pytest']\n[dependency-groups]\ndev = ['ruff']\ntyping = ['mypy']\n"
            "[tool.pytest.ini_options]\n[tool.mypy]\nfiles = ['src']\n",
            "src/p/__init__.py": "",
            "Makefile": "test:\n\tpytest\ncheck:\n\truff check src\n\tstubtest p\n",
            ".pre-commit-config.yaml": "repos:\n- repo: https://github.com/astral-sh/ruff-pre-commit\n  rev: v1\n"
            "  hooks:\n  - id: ruff\n    args: [--fix]\n",
        },
    )
    proposal = propose(tmp_path, path="")
    assert proposal.setup == (("git", "agentops-env", "python", "--extra", "test", "--group", "dev"),)
    enabled = {c.id: c.argv for c in proposal.commands}
    assert enabled == {
        "tests": (".agentops/venv/bin/python", "-m", "pytest", "-q"),  # once: not `make test` as well
        "lint": (".agentops/venv/bin/python", "-m", "ruff", "check", "--no-fix"),  # the hook's --fix is not kept
    }
    off = {d.command.id: d.reason for d in proposal.disabled}
    assert off == {
        "types": 'mypy is not installed in .agentops/venv: add "--group typing" to the setup step (the dependency '
        "group that holds mypy)",
        "types-stubtest": 'stubtest (from mypy) is not installed in .agentops/venv: add "--group typing" to the setup '
        "step (the dependency group that holds mypy)",
    }


def test_a_fixing_script_is_never_run_whole_and_a_check_script_is(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "package.json": '{"scripts": {"test": "node --test", "lint": "eslint --fix . && prettier --write .",'
            ' "check": "tsc"}, "devDependencies": {"eslint": "9", "prettier": "3", "typescript": "5"}}',
        },
    )
    proposal = propose(tmp_path, path="/usr/bin:/bin")
    commands = {c.id: (c.argv, c.parser, c.env) for c in proposal.commands}
    assert commands["tests"] == (("npm", "run", "--silent", "test"), "tap", {"NODE_OPTIONS": "--test-reporter=tap"})
    assert commands["check"][0] == ("npm", "run", "--silent", "check")
    assert commands["lint"][0] == ("npm", "exec", "--no", "--", "eslint", ".")
    assert commands["format"][0] == ("npm", "exec", "--no", "--", "prettier", "--check", ".")


def test_a_suite_no_known_tool_runs_is_proposed_whole_never_dropped(tmp_path: Path) -> None:
    (tmp_path / "make").mkdir()
    _write(tmp_path / "make", {"Makefile": "test:\n\tpython3 check.py\n", "check.py": "print('ok')\n"})
    proposal = propose(tmp_path / "make", path="/usr/bin:/bin")
    assert [(c.id, c.argv, c.parser) for c in proposal.commands] == [("tests", ("make", "test"), "none")]
    (tmp_path / "node").mkdir()
    _write(tmp_path / "node", {"package.json": '{"scripts": {"test": "node run-tests.js"}}'})
    proposal = propose(tmp_path / "node", path="/usr/bin:/bin")
    assert [(c.id, c.argv) for c in proposal.commands] == [("tests", ("npm", "run", "--silent", "test"))]


def _run(argv: list[str], cwd: Path) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    return done.stdout + done.stderr


def test_unittest_counts_from_a_real_run(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "test_x.py": "import unittest\nclass T(unittest.TestCase):\n    def test_ok(self): pass\n"
            "    def test_ok2(self): pass\n    def test_fail(self): self.assertEqual(1, 2)\n"
            "    def test_err(self): raise RuntimeError('x')\n    @unittest.skip('no')\n    def test_skip(self): pass\n"
            "    @unittest.expectedFailure\n    def test_xf(self): self.assertEqual(1, 2)\n"
            "    @unittest.expectedFailure\n    def test_xp(self): pass\n",
            "empty/README": "",
        },
    )
    counts = parse_unittest(_run([sys.executable, "-m", "unittest", "-v", "test_x"], tmp_path))
    assert counts is not None and counts.to_json() == {
        "passed": 2,
        "failed": 2,  # a failure and an unexpected success: unittest fails the run for both
        "skipped": 2,  # a skip and an expected failure
        "errors": 1,
        "total": 7,
    }
    ok = parse_unittest(_run([sys.executable, "-m", "unittest", "discover", "-s", "empty"], tmp_path))
    assert ok is not None and ok.total == 0
    assert parse_unittest("Ran 3 tests in 0.1s\n") is None  # no verdict: not a finished unittest run
    faked = "Ran 9 tests in 0.1s\n\nOK\n...\nRan 2 tests in 0.002s\n\nFAILED (failures=1)\n"
    last = parse_unittest(faked)
    assert last is not None and (last.passed, last.failed) == (1, 1)  # the last summary wins


def test_node_test_tap_totals_count_the_tests_inside_suites(tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node is not None, "node is needed (the CI installs it)"
    _write(
        tmp_path,
        {
            "a.test.mjs": "import {test, describe} from 'node:test';\nimport assert from 'node:assert';\n"
            "describe('s', () => { test('a', () => {}); test('b', () => assert.equal(1, 2)); });\n"
            "test('c', {skip: true}, () => {});\ntest('d', {todo: true}, () => {});\n",
        },
    )
    output = _run([node, "--test", "--test-reporter=tap", "a.test.mjs"], tmp_path)
    counts = parse_tap(output)
    assert counts is not None and (counts.passed, counts.failed, counts.skipped) == (1, 1, 2), output
