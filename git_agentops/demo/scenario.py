"""``git agentops-run demo``: the whole loop on a scratch repository, with the built-in scripted agent.

It builds a small Python project (a calculator with a TAP-speaking test runner, so no test framework needs to be
installed), a policy that verifies it, a throwaway SSH signing key and its allowed-signers file, and a recipe in
which the coordinator plans three tasks -- the evaluator depends on the parser; the evaluator's first attempt fails
verification and its second repairs it -- and two scripted reviewers approve. Then it trusts the policy, runs the
run to completion, and verifies the receipt the way CI would.

Everything happens under one scratch directory (its own git config and trust store included); without ``--keep``
nothing is left behind. ``--print-recipe`` prints the recipe (:func:`recipe`) and builds nothing: a complete,
working example of the format the README documents.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import AgentOpsError

RUN_TESTS = '''"""Run the unit tests and report them as TAP (so the demo needs no test framework)."""
import sys
import unittest

suite = unittest.defaultTestLoader.discover("tests")
tests = []
def flatten(s):
    for item in s:
        if isinstance(item, unittest.TestSuite):
            flatten(item)
        else:
            tests.append(item)
flatten(suite)
print(f"1..{len(tests)}")
failed = 0
for number, test in enumerate(tests, start=1):
    result = unittest.TestResult()
    test.run(result)
    ok = result.wasSuccessful()
    failed += not ok
    print(f"{'ok' if ok else 'not ok'} {number} - {test.id()}")
    for _, trace in result.failures + result.errors:
        print("# " + trace.strip().splitlines()[-1])
sys.exit(1 if failed else 0)
'''

CALC_INIT = '''"""A tiny calculator, built by agents."""
'''

BASE_TEST = """import unittest
import calc


class PackageTest(unittest.TestCase):
    def test_imports(self):
        self.assertTrue(calc.__doc__)
"""

PARSER = '''def tokenize(text):
    """'1 + 2*3' -> ['1', '+', '2', '*', '3']"""
    tokens, number = [], ""
    for char in text:
        if char.isdigit():
            number += char
            continue
        if number:
            tokens.append(number)
            number = ""
        if char in "+-*/":
            tokens.append(char)
    if number:
        tokens.append(number)
    return tokens
'''

PARSER_TEST = """import unittest
from calc.parser import tokenize


class TokenizeTest(unittest.TestCase):
    def test_numbers_and_operators(self):
        self.assertEqual(tokenize("1 + 22*3"), ["1", "+", "22", "*", "3"])
"""

EVALUATOR_BUGGY = '''from calc.parser import tokenize


def evaluate(text):
    """Left to right, no precedence -- and an off-by-one."""
    tokens = tokenize(text)
    total = int(tokens[0])
    for operator, value in zip(tokens[1::2], tokens[2::2]):
        total = total + int(value) if operator == "+" else total * int(value)
    return total + 1
'''

EVALUATOR = '''from calc.parser import tokenize


def evaluate(text):
    """+ and * with the usual precedence."""
    tokens = tokenize(text)
    terms, product = [], int(tokens[0])
    for operator, value in zip(tokens[1::2], tokens[2::2]):
        if operator == "*":
            product *= int(value)
        else:
            terms.append(product)
            product = int(value)
    return sum(terms) + product
'''

EVALUATOR_TEST = """import unittest
from calc.evaluator import evaluate


class EvaluateTest(unittest.TestCase):
    def test_precedence(self):
        self.assertEqual(evaluate("1 + 2*3"), 7)
"""

DOCS = """# calc

`calc.evaluator.evaluate("1 + 2*3")` returns 7. Built by a git-agentops demo run: every line of it was delivered
as a frozen commit that passed `python run_tests.py`, merged in dependency order and receipted.
"""


def _task(
    name: str, title: str, intent: str, attempts: list[list[dict[str, str]]], depends: list[str]
) -> dict[str, Any]:
    return {
        "name": name,
        "title": title,
        "intent": intent,
        "criteria": [f"{title} works", "the tests pass"],
        "depends_on": depends,
        "attempts": [{"steps": steps} for steps in attempts],
    }


RECIPE_HEADER = """\
# The recipe `git agentops-run demo` plays (`git agentops-run demo --print-recipe` prints it): the scripted agent
# plans three tasks; the evaluator's first attempt fails verification and its second repairs it; two scripted
# reviewers approve. The format is in the README ("Recipes for the scripted agent") and schemas/recipe.schema.json.
"""


def recipe() -> str:
    """The scripted agent's recipe: three tasks (one repaired after failing verification) and two reviewers.

    Written with multi-line strings, so that ``--print-recipe`` shows the files the agent writes as they are.
    """
    import tomli_w

    def write(path: str, content: str) -> dict[str, str]:
        return {"write": path, "content": content}

    def commit(message: str) -> dict[str, str]:
        return {"commit": message}

    handoff = {"request": "handoff"}
    doc = {
        "plan": {
            "title": "A calculator",
            "intent": "Tokenize and evaluate arithmetic, with docs",
            "criteria": ['evaluate("1 + 2*3") is 7', "every test passes"],
        },
        "coordinator": {"finalize": True},
        "tasks": [
            _task(
                "parser",
                "Tokenizer",
                "Split arithmetic text into tokens",
                [
                    [
                        write("calc/parser.py", PARSER),
                        write("tests/test_parser.py", PARSER_TEST),
                        commit("Add the tokenizer"),
                        handoff,
                    ]
                ],
                [],
            ),
            _task(
                "evaluator",
                "Evaluator",
                "Evaluate tokens with precedence",
                [
                    [
                        write("calc/evaluator.py", EVALUATOR_BUGGY),
                        write("tests/test_evaluator.py", EVALUATOR_TEST),
                        commit("Add the evaluator"),
                        handoff,
                    ],
                    [write("calc/evaluator.py", EVALUATOR), commit("Fix precedence and the off-by-one"), handoff],
                ],
                ["parser"],
            ),
            _task(
                "docs",
                "Docs",
                "Document the calculator",
                [[write("README.md", DOCS), commit("Document calc"), handoff]],
                [],
            ),
        ],
        "reviewers": [
            {"name": "reviewer-a", "verdict": "approve"},
            {
                "name": "reviewer-b",
                "verdict": "approve",
                "findings": [
                    {"severity": "low", "message": "evaluate() could reject malformed input", "blocking": False}
                ],
            },
        ],
    }
    return RECIPE_HEADER + "\n" + tomli_w.dumps(doc, multiline_strings=True)


def policy(python: str) -> str:
    """The demo's policy: the TAP test runner, two scripted reviewers, signatures required."""
    import tomli_w

    doc = {
        "version": 1,
        "run": {"target": "main", "budget": "10m", "max_workers": 3},
        "verify": {"commands": [{"id": "tests", "argv": [python, "run_tests.py"], "timeout": 120, "parser": "tap"}]},
        "hosts": {"reviewer-a": {"kind": "scripted"}, "reviewer-b": {"kind": "scripted"}},
        "review": {"required": 2, "reviewers": ["reviewer-a", "reviewer-b"]},
        "receipts": {"allowed_signers": ".agentops/allowed_signers", "require_signature": True},
    }
    return tomli_w.dumps(doc)


def environment(root: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The demo's own world: a git config and trust store under ``root``, so nothing of the user's changes."""
    config = root / "gitconfig"
    config.write_text(
        "[user]\n\tname = git-agentops demo\n\temail = demo@git-agentops.invalid\n"
        "[init]\n\tdefaultBranch = main\n[commit]\n\tgpgsign = false\n[tag]\n\tgpgsign = false\n"
    )
    env = {k: v for k, v in environ.items() if not k.startswith(("GIT_", "AGENTOPS_"))}
    env.update(
        {
            "GIT_CONFIG_GLOBAL": str(config),
            "GIT_CONFIG_NOSYSTEM": "1",
            "XDG_STATE_HOME": str(root / "state"),
            "GIT_TERMINAL_PROMPT": "0",
        }
    )
    return env


def _run(
    argv: list[str], *, cwd: Path, env: Mapping[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode not in (0, 1):
        raise AgentOpsError("GIT_FAILED", f"{' '.join(argv[:3])} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def build(root: Path, env: Mapping[str, str]) -> Path:
    """The scratch project: code, tests, policy, signing key, allowed signers, recipe."""
    repo = root / "calc"
    for path, text in {
        "calc/__init__.py": CALC_INIT,
        "tests/__init__.py": "",
        "tests/test_package.py": BASE_TEST,
        "run_tests.py": RUN_TESTS,
        ".gitignore": "__pycache__/\n",
        ".agentops/policy.toml": policy(sys.executable),
    }.items():
        target = repo / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    key = root / "signing-key"
    keygen = subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "demo", "-f", str(key)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if keygen.returncode != 0:
        raise AgentOpsError("RECEIPT_SIGNING_FAILED", f"ssh-keygen could not make a demo key: {keygen.stderr.strip()}")
    public = " ".join(key.with_suffix(".pub").read_text().split()[:2])
    (repo / ".agentops" / "allowed_signers").write_text(f'demo@git-agentops namespaces="git-agentops" {public}\n')
    (root / "recipe.toml").write_text(recipe())
    for argv in (
        ["git", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "commit", "-q", "-m", "A calculator skeleton"],
        ["git", "config", "agentops.signingKey", str(key)],
    ):
        _run(argv, cwd=repo, env=env)
    return repo


def run_demo(root: Path, *, environ: Mapping[str, str], say: Callable[[str], None]) -> dict[str, Any]:
    """Build, trust, run and verify; returns the summary document."""
    started = time.monotonic()
    env = environment(root, environ)
    repo = build(root, env)
    say(f"scratch project: {repo}")
    trusted = _run(["git", "agentops-policy", "trust", "--yes"], cwd=repo, env=env)
    if trusted.returncode != 0:
        raise AgentOpsError("POLICY_UNTRUSTED", trusted.stderr.strip())
    say("policy trusted; starting a run with the scripted agent (3 tasks, 2 reviewers)")
    done = _run(
        [
            "git",
            "agentops-run",
            "start",
            "--goal",
            "A calculator that evaluates 1 + 2*3",
            "--recipe",
            str(root / "recipe.toml"),
            "--json",
        ],
        cwd=repo,
        env=env,
        timeout=300,
    )
    result = json.loads(done.stdout or "{}")
    run_id = result.get("runId")
    if not run_id:
        raise AgentOpsError("RUN_NOT_ACTIVE", f"the demo run did not start: {done.stderr.strip()}")
    status = json.loads(_run(["git", "agentops-run", "status", run_id, "--json"], cwd=repo, env=env).stdout)
    log = json.loads(_run(["git", "agentops-run", "log", run_id, "--json"], cwd=repo, env=env).stdout)["events"]
    verified = _run(
        [
            "git",
            "agentops-receipt",
            "verify",
            "main",
            "--allowed-signers",
            str(repo / ".agentops" / "allowed_signers"),
            "--require-signature",
            "--json",
        ],
        cwd=repo,
        env=env,
    )
    verdicts = json.loads(verified.stdout or "{}")
    workers = {w["taskId"]: w for w in status["workers"]}
    integration = status.get("integration") or {}
    tasks = [
        {
            "title": t["title"],
            "status": t["status"],
            "generation": workers.get(t["taskId"], {}).get("generation"),
            "delivery": t["delivery"],
        }
        for t in status["tasks"]
        if t["parent"]
    ]
    titles = {t["taskId"]: t["title"] for t in status["tasks"]}
    failures = [e for e in log if e["code"] == "REQUEST_REFUSED" and e["data"].get("code") == "RUN_VERIFICATION_FAILED"]
    return {
        "runId": run_id,
        "status": status["status"],
        "repository": str(repo),
        "tasks": tasks,
        "repairs": len(failures),
        "mergeOrder": [titles.get(t, t) for t in integration.get("order", [])],
        "candidate": integration.get("candidate"),
        "reviews": integration.get("reviews", []),
        "receipt": {"ok": bool(verdicts.get("ok")), "verdicts": verdicts.get("verdicts", [])},
        "seconds": round(time.monotonic() - started, 1),
    }
