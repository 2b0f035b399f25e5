"""Deliveries cannot change the guards: the policy, the signer list, CI configuration and hooks.

Real commits in real repositories, judged by :func:`protected_changes` (and its refusals), plus the pattern
language on its own and the policy key that configures it -- whose defaults are not in the effective policy, so no
config hash and no trust record changes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from git_agentops.errors import CODES
from git_agentops.gitstore.repo import Store
from git_agentops.integrate.guards import (
    Breach,
    ProtectedChange,
    candidate_breach,
    in_repo_hooks,
    protected_changes,
    protected_refusal,
)
from git_agentops.model.globs import PathRules, compile_pattern, literal
from git_agentops.model.policy import ALWAYS_PROTECTED, DEFAULT_PROTECTED_PATHS, Policy, effective
from git_agentops.policy.load import check_text
from git_agentops.runs.jobs import Request

from ..conftest import commit_files, git

POLICY = 'version = 1\n[[verify.commands]]\nid = "tests"\nargv = ["python3", "-m", "pytest", "-q"]\n'
WEAKENED = 'version = 1\n[[verify.commands]]\nid = "tests"\nargv = ["python3", "-c", "print(1)"]\n'
REQUEST = Request({"requestId": "r1", "workerId": "w1", "action": "handoff"}, "0" * 64, "0" * 64)


def _policy(doc: dict[str, Any] | None = None) -> Policy:
    return Policy.from_effective(effective({"version": 1, **(doc or {})}))


def _changes(store: Store, base: str, head: str, policy: Policy | None = None, **kwargs: Any) -> list[tuple[str, str]]:
    return [tuple(c) for c in protected_changes(store, policy or _policy(), base, head, **kwargs)]  # type: ignore[misc]


# -- the pattern language --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "matched", "unmatched"),
    [
        (".agentops/**", [".agentops/policy.toml", ".agentops/a/b", ".agentops", ".AgentOps/P.toml"], [".agentopsx"]),
        ("Jenkinsfile", ["Jenkinsfile", "ci/Jenkinsfile", "jenkinsfile"], ["Jenkinsfile.bak", "x/Jenkinsfile2"]),
        (".github/workflows/**", [".github/workflows/ci.yml", ".github/workflows/a/b.yml"], ["x/.github/workflows/c"]),
        ("/.gitlab-ci.yml", [".gitlab-ci.yml"], ["sub/.gitlab-ci.yml"]),
        ("**/secrets.yml", ["secrets.yml", "a/b/secrets.yml"], ["a/secrets.yml.bak"]),
        ("a/**/b", ["a/b", "a/x/b", "a/x/y/b", "a/b/c"], ["b", "xa/b"]),
        ("build/", ["build/out.o", "src/build/x"], ["build", "builds/x"]),
        ("*.pem", ["k.pem", "certs/k.PEM"], ["k.pem.txt"]),
        ("docs/*.md", ["docs/a.md"], ["docs/a/b.txt", "a.md"]),
        ("ci-?.yml", ["ci-1.yml"], ["ci-10.yml", "ci-/.yml"]),
        ("[!a-c]z", ["dz", "q/dz"], ["az", "cz"]),
        ("[/]x", [], ["/x", "a/x"]),
        (literal("keys/allowed*signers"), ["keys/allowed*signers"], ["keys/allowed_signers"]),
        (r"\!important", ["!important"], ["important"]),
    ],
)
def test_patterns_match_as_gitignore_writes_them_ignoring_case(
    pattern: str, matched: list[str], unmatched: list[str]
) -> None:
    rules = PathRules([pattern])
    assert [p for p in matched if rules.decide(p) != pattern] == []
    assert [p for p in unmatched if rules.decide(p) is not None] == []


def test_the_last_matching_pattern_decides_and_a_negation_unprotects() -> None:
    rules = PathRules([".github/**", "!.github/dependabot.yml", "!.github/workflows/**", ".github/workflows/ci.yml"])
    assert rules.decide(".github/dependabot.yml") is None
    assert rules.decide(".github/workflows/lint.yml") is None
    assert rules.decide(".github/workflows/ci.yml") == ".github/workflows/ci.yml"
    assert rules.decide(".github/CODEOWNERS") == ".github/**"


@pytest.mark.parametrize("pattern", ["/", "!/", "a\\", "//"])
def test_a_pattern_that_names_no_path_is_refused(pattern: str) -> None:
    with pytest.raises(ValueError):
        compile_pattern(pattern)


# -- the policy key --------------------------------------------------------------------------------------------------

# Computed with the code before [guardrails] protected_paths existed: a policy without the key hashes as it did.
UNCHANGED_TEXT = (
    'version = 1\n[[verify.commands]]\nid = "tests"\nargv = ["python3", "-m", "pytest", "-q"]\n'
    '[receipts]\nallowed_signers = "keys/allowed_signers"\n[guardrails]\ndeny_patterns = ["internal-[0-9]{6}"]\n'
)
UNCHANGED_HASH = "853b6a8eb675c9f8f17fd6e5399712701786bfba73ea2b11af675a0591953c9d"


def test_default_protected_paths_are_not_in_the_effective_policy_so_no_config_hash_changes(
    run_cli: Any, repo_path: Path
) -> None:
    doc, problems = check_text(UNCHANGED_TEXT)
    assert problems == [] and doc is not None
    assert "protected_paths" not in doc["guardrails"]
    policy = Policy.from_effective(doc)
    assert policy.config_hash == UNCHANGED_HASH
    assert policy.protected_paths == (*DEFAULT_PROTECTED_PATHS, *ALWAYS_PROTECTED, "/keys/allowed_signers")
    commit_files(repo_path, {".agentops/policy.toml": UNCHANGED_TEXT})
    shown = run_cli("git", "agentops-policy", "show", "--json", cwd=repo_path)
    assert shown.returncode == 0, shown.stderr
    out = json.loads(shown.stdout)
    assert out["configHash"] == UNCHANGED_HASH and "protected_paths" not in out["policy"]["guardrails"]
    assert out["protectedPaths"][-2:] == [".agentops/**", "/keys/allowed_signers"]
    human = run_cli("git", "agentops-policy", "show", cwd=repo_path).stdout
    assert f"# config hash: {UNCHANGED_HASH}" in human and "# protected paths" in human


def test_a_written_protected_paths_list_replaces_the_defaults_is_hashed_and_cannot_drop_the_always_protected() -> None:
    text = UNCHANGED_TEXT + 'protected_paths = ["deploy/**", "!.agentops/**", "!keys/allowed_signers"]\n'
    doc, problems = check_text(text)
    assert problems == [] and doc is not None
    policy = Policy.from_effective(doc)
    assert policy.config_hash != UNCHANGED_HASH
    assert policy.protected_paths == (
        "deploy/**",
        "!.agentops/**",
        "!keys/allowed_signers",
        ".agentops/**",
        "/keys/allowed_signers",
    )
    rules = PathRules(policy.protected_paths)
    assert rules.decide(".agentops/policy.toml") == ".agentops/**"
    assert rules.decide("keys/allowed_signers") == "/keys/allowed_signers"
    assert rules.decide(".github/workflows/ci.yml") is None  # the list replaced the defaults


@pytest.mark.parametrize(
    ("value", "code"),
    [('["/"]', "POLICY_VALUE_INVALID"), ('["!"]', "POLICY_VALUE_INVALID"), ('"x"', "POLICY_WRONG_TYPE")],
)
def test_a_protected_pattern_that_names_nothing_is_a_coded_policy_problem(value: str, code: str) -> None:
    _doc, problems = check_text(f"version = 1\n[guardrails]\nprotected_paths = {value}\n")
    assert [(p.code, p.json_path.split("[")[0], p.line) for p in problems] == [
        (code, "$.guardrails.protected_paths", 3)
    ]


# -- what a delivery changes -----------------------------------------------------------------------------------------


def test_a_weakened_policy_is_a_protected_change(repo_path: Path, store: Store) -> None:
    base = commit_files(repo_path, {".agentops/policy.toml": POLICY + "[receipts]\nrequire_signature = true\n"})
    head = commit_files(repo_path, {".agentops/policy.toml": WEAKENED + "[receipts]\nrequire_signature = false\n"})
    assert _changes(store, base, head) == [(".agentops/policy.toml", ".agentops/**")]


def test_the_allowed_signers_file_is_protected_wherever_a_policy_names_it(repo_path: Path, store: Store) -> None:
    base = commit_files(
        repo_path,
        {
            ".agentops/policy.toml": POLICY + '[receipts]\nallowed_signers = "trust/signers"\n',
            "trust/signers": "old\n",
            "keys/allowed_signers": "old\n",
        },
    )
    head = commit_files(repo_path, {"trust/signers": "mallory\n", "keys/allowed_signers": "mallory\n"})
    bound = _policy({"receipts": {"allowed_signers": "./keys//allowed_signers"}})
    # the bound policy names one, the policy committed at the base (and head) the other: both are guarded
    assert _changes(store, base, head, bound) == [
        ("keys/allowed_signers", "/keys/allowed_signers"),
        ("trust/signers", "/trust/signers"),
    ]
    assert _changes(store, base, head, _policy()) == [("trust/signers", "/trust/signers")]


def test_added_ci_configuration_is_a_protected_change(repo_path: Path, store: Store) -> None:
    base = git(repo_path, "rev-parse", "HEAD")
    head = commit_files(
        repo_path,
        {
            ".github/workflows/ci.yml": "on: push\n",
            ".github/actions/setup/action.yml": "runs: {}\n",
            ".gitlab-ci.yml": "test: {}\n",
            "services/api/Jenkinsfile": "pipeline {}\n",
            ".circleci/config.yml": "version: 2\n",
            ".github/CODEOWNERS": "* @me\n",
            "src/app.py": "print('ok')\n",
        },
    )
    assert _changes(store, base, head) == [
        (".circleci/config.yml", ".circleci/**"),
        (".github/actions/setup/action.yml", ".github/actions/**"),
        (".github/workflows/ci.yml", ".github/workflows/**"),
        (".gitlab-ci.yml", ".gitlab-ci.yml"),
        ("services/api/Jenkinsfile", "Jenkinsfile"),
    ]


def test_hook_directories_and_the_in_repo_hooks_path_are_protected(repo_path: Path, store: Store) -> None:
    base = git(repo_path, "rev-parse", "HEAD")
    head = commit_files(
        repo_path,
        {
            ".githooks/pre-commit": "#!/bin/sh\nexit 0\n",
            ".husky/pre-push": "#!/bin/sh\n",
            ".pre-commit-config.yaml": "repos: []\n",
            "tools/hooks/pre-commit": "#!/bin/sh\n",
        },
    )
    without = _changes(store, base, head)
    assert ("tools/hooks/pre-commit", "/tools/hooks/**") not in without and len(without) == 3
    git(repo_path, "config", "core.hooksPath", "./tools/hooks/")
    assert in_repo_hooks(store) == "tools/hooks"
    assert in_repo_hooks(store, str(repo_path / "tools" / "hooks")) == "tools/hooks"  # absolute, inside the tree
    assert in_repo_hooks(store, "../elsewhere") is None and in_repo_hooks(store, "~/hooks") is None
    assert in_repo_hooks(store, "/usr/share/hooks") is None and in_repo_hooks(store, ".git/hooks") is None
    assert _changes(store, base, head, hooks_path=in_repo_hooks(store)) == [
        (".githooks/pre-commit", ".githooks/**"),
        (".husky/pre-push", ".husky/**"),
        (".pre-commit-config.yaml", ".pre-commit-config.yaml"),
        ("tools/hooks/pre-commit", "/tools/hooks/**"),
    ]


def test_a_rename_counts_on_both_sides(repo_path: Path, store: Store) -> None:
    base = commit_files(repo_path, {".agentops/policy.toml": POLICY, "lint.yml": "on: push\n", "a.txt": "a\n"})
    for old, new in ((".agentops/policy.toml", "docs/policy.toml"), ("lint.yml", ".github/workflows/lint.yml")):
        (repo_path / new).parent.mkdir(parents=True, exist_ok=True)
        git(repo_path, "mv", old, new)
    git(repo_path, "mv", "a.txt", "b.txt")
    git(repo_path, "commit", "-q", "--no-verify", "-m", "renames")
    head = git(repo_path, "rev-parse", "HEAD")
    assert _changes(store, base, head) == [
        (".agentops/policy.toml", ".agentops/**"),  # moved out: the policy is gone from where it is read
        (".github/workflows/lint.yml", ".github/workflows/**"),  # moved in: a new workflow
    ]


def test_a_binary_file_is_judged_by_its_path(repo_path: Path, store: Store) -> None:
    base = commit_files(repo_path, {".gitattributes": "*.bin binary\n"})
    head = commit_files(repo_path, {".github/actions/tool.bin": os.urandom(4096) + b"\0", "assets/logo.bin": b"\0\1"})
    assert _changes(store, base, head) == [(".github/actions/tool.bin", ".github/actions/**")]


def test_a_mode_change_a_deletion_and_a_symlink_in_place_of_a_directory_are_changes(
    repo_path: Path, store: Store
) -> None:
    base = commit_files(repo_path, {".githooks/pre-push": "#!/bin/sh\n", ".ci/run.sh": "make\n", ".drone.yml": "x\n"})
    (repo_path / ".ci" / "run.sh").chmod(0o755)
    commit_files(repo_path, {".drone.yml": None})
    git(repo_path, "rm", "-q", "-r", ".githooks")
    (repo_path / "tools").mkdir()
    (repo_path / "tools" / "pre-push").write_text("#!/bin/sh\n")
    (repo_path / ".githooks").symlink_to("tools")
    head = commit_files(repo_path, {})
    assert _changes(store, base, head) == [
        (".ci/run.sh", ".ci/**"),
        (".drone.yml", ".drone.yml"),
        (".githooks", ".githooks/**"),  # the symlink: hooks would now be read from tools/
        (".githooks/pre-push", ".githooks/**"),
    ]


def test_a_negation_unprotects_a_path_but_never_the_always_protected_ones(repo_path: Path, store: Store) -> None:
    base = git(repo_path, "rev-parse", "HEAD")
    head = commit_files(
        repo_path,
        {".github/dependabot.yml": "version: 2\n", ".github/workflows/ci.yml": "x\n", ".agentops/notes.md": "n\n"},
    )
    policy = _policy({"guardrails": {"protected_paths": [".github/**", "!.github/dependabot.yml", "!.agentops/**"]}})
    assert _changes(store, base, head, policy) == [
        (".agentops/notes.md", ".agentops/**"),
        (".github/workflows/ci.yml", ".github/**"),
    ]


def test_a_change_that_came_from_the_target_is_not_counted(repo_path: Path, store: Store) -> None:
    base = commit_files(repo_path, {".agentops/policy.toml": POLICY, ".drone.yml": "old\n"})
    git(repo_path, "switch", "-q", "-c", "worker")
    commit_files(repo_path, {"src/work.py": "x = 1\n"}, "work")
    git(repo_path, "switch", "-q", "main")
    tip = commit_files(repo_path, {".agentops/policy.toml": POLICY + "# reviewed by a person\n", ".drone.yml": None})
    git(repo_path, "switch", "-q", "worker")
    git(repo_path, "merge", "-q", "--no-edit", "main")
    head = git(repo_path, "rev-parse", "HEAD")
    changed = [(".agentops/policy.toml", ".agentops/**"), (".drone.yml", ".drone.yml")]
    assert _changes(store, base, head) == changed  # against the base alone, the person's change shows
    assert _changes(store, base, head, also_unchanged_from=tip) == []  # but the target has exactly it
    edited = commit_files(repo_path, {".agentops/policy.toml": WEAKENED})
    assert _changes(store, base, edited, also_unchanged_from=tip) == [(".agentops/policy.toml", ".agentops/**")]


def test_every_changed_path_is_found_as_git_diff_finds_it(repo_path: Path, store: Store) -> None:
    base = commit_files(repo_path, {"a/b/c.txt": "1\n", "a/d.txt": "2\n", "e": "3\n", "f/g": "4\n", "h/i/j": "5\n"})
    (repo_path / "e").unlink()
    (repo_path / "e").mkdir()
    head = commit_files(
        repo_path,
        {"a/b/c.txt": "changed\n", "e/inside": "6\n", "f/g": None, "h/i/k": "7\n", "new/deep/file.bin": b"\0\1"},
    )
    everything = _policy({"guardrails": {"protected_paths": ["**"]}})
    found = [path for path, _pattern in _changes(store, base, head, everything)]
    assert found == sorted(git(repo_path, "diff", "--name-only", "--no-renames", base, head).splitlines())


# -- refusals --------------------------------------------------------------------------------------------------------


def test_a_delivery_that_changes_protected_paths_is_refused_naming_each_path_and_pattern(
    repo_path: Path, store: Store
) -> None:
    assert "RUN_DELIVERY_PROTECTED_PATH" in CODES
    base = commit_files(repo_path, {".agentops/policy.toml": POLICY})
    tip = git(repo_path, "rev-parse", "HEAD")
    head = commit_files(repo_path, {".agentops/policy.toml": WEAKENED, ".github/workflows/ci.yml": "on: push\n"})
    refusal = protected_refusal(store, _policy(), REQUEST, base=base, head=head, target_tip=tip)
    assert refusal is not None and refusal.code == "RUN_DELIVERY_PROTECTED_PATH" and refusal.head == head
    assert refusal.request is REQUEST
    assert ".agentops/policy.toml (matches '.agentops/**')" in refusal.message
    assert ".github/workflows/ci.yml (matches '.github/workflows/**')" in refusal.message
    assert "person" in refusal.message and "policy change" in refusal.message
    assert refusal.detail == {
        "paths": [[".agentops/policy.toml", ".agentops/**"], [".github/workflows/ci.yml", ".github/workflows/**"]]
    }
    honest = commit_files(repo_path, {".agentops/policy.toml": POLICY, ".github/workflows/ci.yml": None, "x.py": "1\n"})
    assert protected_refusal(store, _policy(), REQUEST, base=base, head=honest, target_tip=tip) is None


def test_the_refusal_reads_the_in_repo_hooks_path_itself(repo_path: Path, store: Store) -> None:
    base = git(repo_path, "rev-parse", "HEAD")
    head = commit_files(repo_path, {"scripts/git-hooks/pre-commit": "#!/bin/sh\n"})
    assert protected_refusal(store, _policy(), REQUEST, base=base, head=head, target_tip=base) is None
    git(repo_path, "config", "core.hooksPath", "scripts/git-hooks")
    refused = protected_refusal(store, _policy(), REQUEST, base=base, head=head, target_tip=base)
    assert refused is not None
    assert refused.detail["paths"] == [["scripts/git-hooks/pre-commit", "/scripts/git-hooks/**"]]


def test_a_candidate_that_changes_protected_paths_against_its_target_fails_the_gate(
    repo_path: Path, store: Store
) -> None:
    tip = commit_files(repo_path, {".agentops/policy.toml": POLICY})
    candidate = commit_files(repo_path, {".agentops/policy.toml": WEAKENED, "src/x.py": "1\n"})
    breach = candidate_breach(store, _policy(), base=tip, candidate=candidate)
    assert isinstance(breach, Breach) and breach.code == "RUN_DELIVERY_PROTECTED_PATH"
    assert breach.detail == {"paths": [[".agentops/policy.toml", ".agentops/**"]]}
    assert "nothing was published" in breach.message and "person" in breach.message
    clean = commit_files(repo_path, {".agentops/policy.toml": POLICY})
    assert candidate_breach(store, _policy(), base=tip, candidate=clean) is None


def test_protected_changes_are_named_tuples_of_path_and_pattern() -> None:
    change = ProtectedChange(".agentops/policy.toml", ".agentops/**")
    assert change == (".agentops/policy.toml", ".agentops/**") and change.pattern == ".agentops/**"


def test_after_a_transition_only_the_bound_policy_file_may_ride_along(store: Store, repo_path: Path) -> None:
    """Invariant: a transition lets ``.agentops/policy.toml`` change to exactly the file it bound (the supervisor
    committed it in the workers' checkouts); any other content there -- or the bound bytes made executable, or
    anything else under ``.agentops/`` -- is still a protected change."""
    from git_agentops.transition.journal import blob_id

    bound = POLICY + '[[verify.runners]]\nid = "acceptance"\nargv = ["true"]\n'
    base = commit_files(repo_path, {".agentops/policy.toml": POLICY, "a.txt": "a\n"})
    synced = commit_files(repo_path, {".agentops/policy.toml": bound}, "Synchronize the run's policy")
    blob = blob_id(bound.encode())
    assert _changes(store, base, synced, bound_policy=blob) == []
    assert _changes(store, base, synced) == [(".agentops/policy.toml", ".agentops/**")]  # before any transition
    other = commit_files(repo_path, {".agentops/policy.toml": WEAKENED}, "weaken")
    assert _changes(store, base, other, bound_policy=blob) == [(".agentops/policy.toml", ".agentops/**")]
    git(repo_path, "checkout", "-q", synced)
    os.chmod(repo_path / ".agentops/policy.toml", 0o755)
    git(repo_path, "add", ".agentops/policy.toml")
    git(repo_path, "commit", "-q", "-m", "mode")
    executable = git(repo_path, "rev-parse", "HEAD")
    assert _changes(store, base, executable, bound_policy=blob) == [(".agentops/policy.toml", ".agentops/**")]
    git(repo_path, "checkout", "-q", synced)
    more = commit_files(repo_path, {".agentops/extra.toml": "x"}, "more")
    assert _changes(store, base, more, bound_policy=blob) == [(".agentops/extra.toml", ".agentops/**")]
    breach = candidate_breach(store, _policy(), base=base, candidate=synced, bound_policy=blob)
    assert breach is None
