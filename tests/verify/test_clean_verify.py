"""Clean checkouts, neutralised git and authenticated evidence: the pieces that keep an agent's files, config and
notes out of the supervisor's proof. (The attacks themselves, as whole runs, are in ``test_attacks.py``.)"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from git_agentops.clock import FixedClock
from git_agentops.gitstore.checkout import (
    dirty_and_untracked,
    dirty_paths,
    head_and_changes,
    head_changes_and_untracked,
    is_artifact,
)
from git_agentops.gitstore.clean import CleanCheckout, collapse, discoverable_above
from git_agentops.gitstore.keys import KEY_PATH, keyring
from git_agentops.gitstore.objects import git_merge_tree
from git_agentops.gitstore.repo import open_store
from git_agentops.gitstore.worktree import add_detached_worktree, remove_detached_worktree
from git_agentops.verify.core import Outcome
from git_agentops.verify.evidence import FOR_RUNS, EvidenceRecord, EvidenceStore, authentic, seal_record
from git_agentops.verify.made import untracked_files

from ..conftest import git, make_repo


def _slot(tmp_path: Path, repo: Path) -> CleanCheckout:
    return CleanCheckout(tmp_path / "slot", repo / ".git" / "objects")


def _head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD")


def test_clean_checkout_has_no_file_the_commit_lacks_whatever_the_shared_excludes_say(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", files={"calc.py": "x = 1\n", "tests/test_calc.py": "def test(): pass\n"})
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("conftest.py\n*.ini\n")  # an agent's doing: shared by all
    slot = _slot(tmp_path, repo)
    slot.populate(_head(repo))
    assert slot.inspect().clean
    (slot.root / "conftest.py").write_text("import calc; calc.x = 2\n")
    (slot.root / "pytest.ini").write_text("[pytest]\n")
    (slot.root / "tests" / "__pycache__").mkdir()
    (slot.root / "tests" / "__pycache__" / "test_calc.pyc").write_bytes(b"stale")
    assert slot.inspect().extra == ("conftest.py", "pytest.ini", "tests/__pycache__/")
    slot.populate(_head(repo))
    assert slot.inspect().clean and not (slot.root / "conftest.py").exists()


def test_a_swap_with_the_same_size_and_mtime_is_found_by_content(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", files={"calc.py": "def add(a, b):\n    return a + b\n"})
    slot = _slot(tmp_path, repo)
    slot.populate(_head(repo))
    target = slot.root / "calc.py"
    before = target.stat()
    target.write_text("def add(a, b):\n    return a - b\n")
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert slot.inspect().changed == ("M calc.py",)
    assert slot.inspect(extras=False).changed == ("M calc.py",)
    slot.rewrite()
    assert slot.inspect().clean and "a + b" in target.read_text()


def test_type_and_mode_changes_are_drift_and_line_ending_attributes_are_not(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "repo",
        files={
            ".gitattributes": "*.bat text eol=crlf\nraw.txt -text\n",
            "run.bat": "echo hi\n",
            "raw.txt": "a\r\nb\r\n",
            "tool.sh": "#!/bin/sh\n",
            "data.txt": "data\n",
        },
    )
    slot = _slot(tmp_path, repo)
    slot.populate(_head(repo))
    assert (slot.root / "run.bat").read_bytes() == b"echo hi\r\n"  # converted on the way out: not drift
    assert slot.inspect().clean
    (slot.root / "tool.sh").chmod(0o755)
    (slot.root / "data.txt").unlink()
    (slot.root / "data.txt").symlink_to("/etc/hostname")
    changed = set(slot.inspect().changed)
    assert changed == {"M tool.sh", "T data.txt"}


def test_no_program_an_agent_configured_in_the_shared_config_runs_in_the_toolkits_git(tmp_path: Path) -> None:
    """Invariant: fsmonitor, hooks, filter and merge drivers set in the repository's config (where a worker can write)
    never run inside the toolkit's status, checkouts, worktree bookkeeping or merges."""
    repo = make_repo(tmp_path / "repo", files={".gitattributes": "* filter=evil merge=evil\n", "a.txt": "base\n"})
    ran = tmp_path / "ran"
    script = tmp_path / "evil.sh"
    script.write_text(f'#!/bin/sh\necho "$0 $*" >> {ran}\ncat\n')
    script.chmod(0o755)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "post-checkout").write_text(f"#!/bin/sh\necho post-checkout >> {ran}\n")
    (hooks / "post-checkout").chmod(0o755)
    for key, value in {
        "core.fsmonitor": str(script),
        "core.hooksPath": str(hooks),
        "filter.evil.clean": str(script),
        "filter.evil.smudge": str(script),
        "merge.evil.driver": f"{script} %O %A %B",
    }.items():
        git(repo, "config", key, value)
    git(repo, "checkout", "-q", "-b", "side")
    (repo / "a.txt").write_text("side\n")
    git(repo, "-c", "core.hooksPath=/dev/null", "-c", "filter.evil.clean=cat", "commit", "-qam", "side")
    git(repo, "-c", "core.hooksPath=/dev/null", "checkout", "-q", "main")
    (repo / "a.txt").write_text("main\n")
    git(repo, "-c", "core.hooksPath=/dev/null", "-c", "filter.evil.clean=cat", "commit", "-qam", "main")
    ran.unlink(missing_ok=True)
    store = open_store(repo, clock=FixedClock())
    (repo / "a.txt").touch()
    dirty_paths(repo)
    add_detached_worktree(store, tmp_path / "detached", _head(repo))
    remove_detached_worktree(store, tmp_path / "detached")
    git_merge_tree(store, "main", "side")
    slot = _slot(tmp_path, repo)
    slot.populate(_head(repo))
    slot.inspect()
    assert not ran.exists(), ran.read_text()


def test_files_tools_find_by_walking_up_are_listed_with_their_content(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (tmp_path / "a" / "conftest.py").write_text("evil\n")
    (tmp_path / "a" / "b" / "node_modules").mkdir()
    found = discoverable_above(deep / "slot")
    assert str(tmp_path / "a" / "conftest.py") in found and found[str(tmp_path / "a" / "conftest.py")].startswith(
        "sha256:"
    )
    assert found[str(tmp_path / "a" / "b" / "node_modules")] == "present"


def test_setup_products_collapse_to_their_first_untracked_directory() -> None:
    made = ["src/pkg.egg-info/PKG-INFO", "src/pkg.egg-info/SOURCES.txt", "node_modules/a/index.js", ".agentops/venv/"]
    assert collapse(made, {"src", ".agentops"}) == [".agentops/venv", "node_modules", "src/pkg.egg-info"]


@pytest.mark.parametrize(
    ("path", "artifact"),
    [
        ("tests/__pycache__/test_a.cpython-311.pyc", True),
        (".pytest_cache/v/cache/nodeids", True),
        ("build/lib/x.py", True),
        ("src/pkg.egg-info/PKG-INFO", True),
        ("notes.txt", False),
        ("src/new_module.py", False),
        ("conftest.py", False),
    ],
)
def test_only_tool_artifacts_are_untracked_files_a_handoff_may_leave(path: str, artifact: bool) -> None:
    assert is_artifact(path) is artifact


def test_one_status_answers_what_dirty_paths_and_untracked_files_answer(tmp_path: Path) -> None:
    """Invariant: a person's verification asks one ``git status`` what it asked ``status`` and ``ls-files --others``
    before (and, after its commands, ``status`` and ``ls-files`` again) -- the same dirt (renames, staged, modified,
    untracked), HEAD and tracked changes, and the same untracked files, ignored ones left out, in the same order."""
    repo = make_repo(tmp_path / "repo", files={"a.txt": "a\n", "b.txt": "b\n", ".gitignore": "*.log\n"})
    git(repo, "mv", "a.txt", "renamed.txt")
    (repo / "b.txt").write_text("changed\n")
    (repo / "deep" / "er").mkdir(parents=True)
    (repo / "deep" / "er" / "new.txt").write_text("x")
    (repo / "with space.txt").write_text("x")
    (repo / "caf\u00e9.txt").write_text("x")
    (repo / "noise.log").write_text("ignored")
    git(repo / "deep", "init", "-q", "nested")
    dirty, untracked = dirty_and_untracked(repo)
    assert (dirty, untracked) == (dirty_paths(repo), untracked_files(repo))
    assert "noise.log" not in untracked and "with space.txt" in untracked and len(dirty) == 6, dirty
    assert dirty_and_untracked(repo, limit=2)[0] == dirty_paths(repo, limit=2) == dirty[:2]
    assert dirty_and_untracked(repo, limit=2)[1] == untracked  # the limit is the dirt's, never the untracked files'
    head, changed = head_and_changes(repo, untracked=False)
    assert head_changes_and_untracked(repo) == (head, changed, untracked)  # after the commands: one status too
    assert head_changes_and_untracked(repo, limit=1) == (head, changed[:1], untracked)


# -- evidence --------------------------------------------------------------------------------------------------------


def _record(tree: str, commit: str, producer: str = "supervisor", checkout: str = "clean") -> EvidenceRecord:
    return EvidenceRecord.from_json(
        {
            "commandId": "tests",
            "kind": "command",
            "argvDigest": "a" * 64,
            "required": True,
            "exitCode": 0,
            "signal": None,
            "timedOut": False,
            "spawnError": None,
            "passed": True,
            "durationMs": 1,
            "outputDigest": "0" * 64,
            "outputSize": 0,
            "truncated": False,
            "tail": "",
            "tests": None,
            "parseError": None,
            "tree": tree,
            "commit": commit,
            "policyConfigHash": "b" * 64,
            "envDigest": "c" * 64,
            "startedAt": "2026-12-01T00:00:00Z",
            "cached": False,
            "cachedFrom": None,
            "taskId": None,
            "criteria": [],
            "toolkitVersion": "0.1.0",
            "producer": producer,
            "checkout": checkout,
        }
    )


def test_a_forged_evidence_note_is_never_reused_and_a_persons_is_not_reused_by_runs(tmp_path: Path) -> None:
    """Invariant: the cache answers only with records this repository's toolkit MAC'd; runs take only records the
    supervisor produced in a clean checkout."""
    repo = make_repo(tmp_path / "repo", files={"a.txt": "a\n"})
    commit, tree = _head(repo), git(repo, "rev-parse", "HEAD^{tree}")
    forged = _record(tree, commit)
    forged_line = json.dumps(forged.to_json())
    git(repo, "notes", "--ref=agentops/evidence", "add", "-f", "-m", forged_line, tree)  # the attacker's way
    store = open_store(repo, clock=FixedClock())
    evidence = EvidenceStore(store, store.private_dir())
    key = {"argv_digest": "a" * 64, "policy_hash": "b" * 64, "env_digest": "c" * 64}
    assert evidence.cached(tree, **key) is None
    assert evidence.cached(tree, **key, accept=FOR_RUNS) is None
    git(repo, "notes", "--ref=agentops/evidence", "remove", tree)
    evidence.record(commit, tree, [_record(tree, commit, "person", "worktree")])
    assert evidence.cached(tree, **key) is not None  # a person's verification reuses it
    assert evidence.cached(tree, **key, accept=FOR_RUNS) is None  # a run does not
    evidence.record(commit, tree, [_record(tree, commit)])
    hit = evidence.cached(tree, **key, accept=FOR_RUNS)
    assert hit is not None and authentic(hit, evidence.keys)
    tampered = replace(hit, exit_code=1)
    assert not authentic(tampered, evidence.keys)
    assert authentic(seal_record(tampered, evidence.keys), evidence.keys)


def test_a_damaged_key_is_key_invalid_and_a_missing_one_is_made_once(tmp_path: Path) -> None:
    private = tmp_path / "private"
    first = keyring(private).mac("x", b"data")
    assert (private / KEY_PATH).stat().st_mode & 0o777 == 0o600
    assert keyring(private).mac("x", b"data") == first
    assert keyring(private).mac("y", b"data") != first  # the purpose is part of the MAC
    other = tmp_path / "other"
    (other / "keys").mkdir(parents=True)
    (other / KEY_PATH).write_bytes(b"short")
    from git_agentops.errors import AgentOpsError

    with pytest.raises(AgentOpsError) as caught:
        keyring(other).mac("x", b"data")
    assert caught.value.code == "KEY_INVALID"


# -- a person's verification in place --------------------------------------------------------------------------------


POLICY = """version = 1
[run]
target = "main"
[[verify.commands]]
id = "tests"
argv = ["python3", "-m", "pytest", "-q"]
parser = "pytest"
timeout = 120
[[verify.commands]]
id = "build"
argv = ["python3", "-c", "import os; os.makedirs('build', exist_ok=True); open('build/out.txt', 'w').write('1')"]
timeout = 60
"""


def test_verifying_the_same_commit_twice_without_a_gitignore_works(tmp_path: Path, run_cli: object) -> None:
    """Before: the first verification's ``tests/__pycache__/`` made the second one refuse ``VERIFY_DIRTY``."""
    repo = make_repo(
        tmp_path / "repo",
        files={
            "calc.py": "def add(a, b):\n    return a + b\n",
            "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
            ".agentops/policy.toml": POLICY,
        },
    )
    assert run_cli("git", "agentops-policy", "trust", "--yes", cwd=repo).returncode == 0  # type: ignore[operator]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    first = subprocess.run(["git", "agentops-verify", "--json"], cwd=repo, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stdout + first.stderr
    assert (repo / "tests" / "__pycache__").is_dir() and (repo / ".pytest_cache").is_dir()
    assert (repo / "build" / "out.txt").is_file()
    doc = json.loads(first.stdout)
    assert doc["producer"] == "person" and doc["checkout"] == "worktree"
    assert {r["producer"] for r in doc["results"]} == {"person"}
    second = subprocess.run(
        ["git", "agentops-verify", "--fresh", "--json"], cwd=repo, env=env, capture_output=True, text=True
    )
    assert second.returncode == 0, second.stdout + second.stderr
    (repo / "build" / "out.txt").write_text("edited by hand\n")  # a made file changed since: dirt again
    third = subprocess.run(["git", "agentops-verify", "--json"], cwd=repo, env=env, capture_output=True, text=True)
    assert third.returncode == 3 and json.loads(third.stdout or third.stderr)["error"]["code"] == "VERIFY_DIRTY"
    agent = subprocess.run(
        ["git", "agentops-verify", "--json"],
        cwd=repo,
        env={**env, "AGENTOPS_WORKER_ID": "w1"},
        capture_output=True,
        text=True,
    )
    assert json.loads(agent.stdout or agent.stderr)["error"]["code"] == "VERIFY_DIRTY"
    (repo / "build" / "out.txt").write_text("1")
    agent = subprocess.run(
        ["git", "agentops-verify", "--fresh", "--json"],
        cwd=repo,
        env={**env, "AGENTOPS_WORKER_ID": "w1"},
        capture_output=True,
        text=True,
    )
    assert json.loads(agent.stdout)["producer"] == "agent", agent.stdout


def test_a_scratch_index_someone_else_rewrote_is_never_trusted(tmp_path: Path) -> None:
    """Invariant: stat data is reused only from the scratch index this process left (its digest is held in
    memory); a rewritten one means every file is hashed again."""
    repo = make_repo(tmp_path / "repo", files={"calc.py": "def add(a, b):\n    return a + b\n"})
    slot = _slot(tmp_path, repo)
    slot.populate(_head(repo))
    assert slot.inspect().clean
    target = slot.root / "calc.py"
    target.write_text("def add(a, b):\n    return a - b\n")
    scratch = slot.git_dir / "agentops-inspect.index"
    scratch.write_bytes(scratch.read_bytes() + b"\0")  # tampered with: its digest no longer matches
    assert slot.inspect().changed == ("M calc.py",)
    (slot.git_dir / "config").write_text("[core]\n\tfsmonitor = /bin/false\n")  # and the config is ours again
    slot.populate(_head(repo))
    assert (slot.git_dir / "config").read_text().startswith("[core]\n\trepositoryformatversion")
    assert slot.inspect().clean


# -- what setup leaves in the supervisor's checkout -------------------------------------------------------------------


def _prove(tmp_path: Path, setup: list[list[str]], *, files: dict[str, str] | None = None) -> Outcome:
    """Prove HEAD of a small project whose policy has ``setup`` steps, in a fresh clean checkout (slot ``w1``)."""
    from git_agentops.model.policy import Policy, effective
    from git_agentops.policy.trust import RepoIdentity, TrustStatus, Verdict
    from git_agentops.runs.jobs import JobContext
    from git_agentops.verify.proof import prove

    repo = make_repo(
        tmp_path / "repo",
        files={
            "calc.py": "def add(a, b):\n    return a - b\n",
            "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
            **(files or {}),
        },
    )
    doc = effective(
        {
            "verify": {"commands": [{"id": "check", "argv": ["python3", "-c", "import calc"], "timeout": 60}]},
            "worktree": {"setup": [{"argv": argv, "timeout": 60} for argv in setup]},
        }
    )
    policy = Policy.from_effective(doc)
    store = open_store(repo, clock=FixedClock())
    trust = Verdict(TrustStatus.TRUSTED, RepoIdentity(str(repo), f"local:{repo}"), policy.config_hash)
    ctx = JobContext("run-setup", policy, trust, dict(os.environ), FixedClock(), tmp_path / "run", print, print)
    return prove(ctx, store, slot="w1", commit=_head(repo), task=None)


def _py(code: str) -> list[str]:
    return ["python3", "-c", code]


@pytest.mark.parametrize(
    ("what", "step", "named"),
    [
        ("a tracked test changed", _py("open('tests/test_calc.py', 'w').write('def test_add(): pass\\n')"), "tests/"),
        ("a root conftest.py", _py("open('conftest.py', 'w').write('collect_ignore_glob = [\"*\"]\\n')"), "conftest"),
        (
            "a conftest.py deep in a new directory, after more files than a drift lists",
            _py(
                "import os\n"
                "for i in range(80): open(f'a{i:03}.txt', 'w').write('x')\n"
                "os.makedirs('zz/deep')\n"
                "open('zz/deep/conftest.py', 'w').write('')"
            ),
            "zz/deep/conftest.py",
        ),
        ("a pytest.ini beside the tests", _py("open('tests/pytest.ini', 'w').write('[pytest]\\n')"), "pytest.ini"),
        ("a .pth outside any venv", _py("open('evil.pth', 'w').write('import os\\n')"), "evil.pth"),
        ("a sitecustomize.py", _py("open('sitecustomize.py', 'w').write('')"), "sitecustomize.py"),
        ("a jest config", _py("open('jest.config.js', 'w').write('')"), "jest.config.js"),
    ],
)
def test_setup_that_changes_tracked_files_or_test_configuration_is_refused(
    tmp_path: Path, what: str, step: list[str], named: str
) -> None:
    """Before: a setup step's output was kept in the verification checkout -- a tracked test rewritten, a
    ``conftest.py`` that makes every test pass. Setup may make environments, not test configuration."""
    from git_agentops.errors import AgentOpsError

    with pytest.raises(AgentOpsError) as caught:
        _prove(tmp_path, [step])
    assert caught.value.code == "VERIFY_CHECKOUT_CHANGED", what
    assert named in caught.value.message, (what, caught.value.message)


def test_setup_may_make_environments_and_build_products(tmp_path: Path) -> None:
    """Invariant: what environments hold (a venv's ``.pth`` and ``sitecustomize.py``, ``node_modules`` with its
    ``package.json`` files, nested ones of workspaces too) and build products are setup's to make; a tracked
    ``conftest.py`` is the commit's own."""
    make = _py(
        "import os\n"
        "for d in ('.venv/lib/site-packages', 'node_modules/left-pad', 'pkg/node_modules/x', 'calc.egg-info', 'build'):"
        "\n    os.makedirs(d)\n"
        "open('.venv/pyvenv.cfg', 'w').write('home = /usr/bin\\n')\n"
        "open('.venv/lib/site-packages/_calc.pth', 'w').write('.\\n')\n"
        "open('.venv/lib/site-packages/sitecustomize.py', 'w').write('')\n"
        "open('node_modules/left-pad/package.json', 'w').write('{}')\n"
        "open('pkg/node_modules/x/package.json', 'w').write('{}')\n"
        "open('calc.egg-info/PKG-INFO', 'w').write('')\n"
        "open('build/out.txt', 'w').write('')\n"
    )
    outcome = _prove(tmp_path, [make], files={"tests/conftest.py": "", "pkg/index.js": ""})
    assert outcome.passed


def test_the_cache_answers_with_the_newest_record_that_fits_and_skips_lines_that_are_not_records(
    tmp_path: Path,
) -> None:
    """Invariant: read newest first and stopping at the first fit, the cache answers what reading every line did --
    the newest authentic, fitting record; a newer one for another environment and a damaged line are passed over."""
    repo = make_repo(tmp_path / "repo", files={"a.txt": "a\n"})
    commit, tree = _head(repo), git(repo, "rev-parse", "HEAD^{tree}")
    store = open_store(repo, clock=FixedClock())
    evidence = EvidenceStore(store, store.private_dir())
    key = {"argv_digest": "a" * 64, "policy_hash": "b" * 64, "env_digest": "c" * 64}
    older, newer = (replace(_record(tree, commit), started_at=f"2026-12-01T00:00:0{i}Z") for i in (1, 2))
    elsewhere = replace(_record(tree, commit), env_digest="d" * 64, started_at="2026-12-01T00:00:03Z")
    evidence.record(commit, tree, [older, newer, elsewhere])
    git(repo, "notes", "--ref=agentops/evidence", "append", "-m", '{"not": "a record"}', tree)
    hit = evidence.cached(tree, **key)
    assert hit is not None and hit.started_at == newer.started_at and authentic(hit, evidence.keys)
    other = evidence.cached(tree, **{**key, "env_digest": "d" * 64})
    assert other is not None and other.started_at == elsewhere.started_at
    assert evidence.cached(tree, **{**key, "env_digest": "e" * 64}) is None
