"""A worker agent playing the attacker with plain git and shell commands in its own worktree: each way it once got a
commit whose tests fail delivered (and then published under a valid receipt) is now refused, and the honest task of
the same run still delivers.

Every attacker here commits ``calc_<x>.py`` with ``add`` returning ``a - b`` -- the same size as the correct file --
and then arranges its worktree, its git config or the notes so that a verification which trusted any of them would
pass. The supervisor verifies each handoff in a clean checkout of its own (``verify/proof.py``), with git config the
agents cannot touch, re-hashing the files, and reuses only evidence it can authenticate.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import git, make_repo
from .helpers import HANDOFF, Part, child, commit_step, write_step
from .runkit import UNCONFINED, children_settled, cli, events, recipe, start, stop, task_by_title, trust, wait_for

GOOD = "def add(a, b):\n    return a + b\n"
BROKEN = "def add(a, b):\n    return a - b\n"
POLICY = """version = 1
[run]
target = "main"
max_workers = 5
[[verify.commands]]
id = "tests"
argv = ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
parser = "pytest"
timeout = 120
"""
NAMES = ("a", "b", "c", "d", "e", "f", "g", "h")


def _project(root: Path, extra_policy: str = "") -> Path:
    files = {".agentops/policy.toml": POLICY + extra_policy, ".gitignore": "__pycache__/\n"}
    for name in NAMES:
        files[f"calc_{name}.py"] = GOOD
        files[f"tests/test_calc_{name}.py"] = (
            f"from calc_{name} import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
        )
    repo = make_repo(root / "repo", files=files)
    trust(repo)
    return repo


def _sh(script: str) -> dict[str, Any]:
    return {"run": ["sh", "-c", script]}


def _daemon(loop: str, started: Path, *, scrub: bool = False) -> dict[str, Any]:
    """A step that leaves ``loop`` running in a new session (``setsid``), and waits until it did: a background job
    killed with the step's process group before it reached ``setsid`` would prove nothing."""
    prefix = "env -i /usr/bin/setsid /bin/sh" if scrub else "setsid sh"
    return _sh(
        f"{prefix} -c 'touch {started}; {loop}' >/dev/null 2>&1 < /dev/null & "
        f"i=0; while [ ! -e {started} ] && [ $i -lt 500 ]; do i=$((i+1)); sleep 0.01; done; [ -e {started} ]"
    )


def _attacker(name: str, *steps: dict[str, Any]) -> Part:
    """Commit the broken module, play the attack, hand off -- the same on every generation."""
    return child(
        name,
        f"Attack {name.upper()}",
        [[write_step(f"calc_{name}.py", BROKEN), commit_step(f"break calc_{name}"), *steps, HANDOFF]],
    )


def _honest() -> Part:
    return child("ok", "Honest", [[write_step("notes/ok.txt", "fine\n"), commit_step("an honest change"), HANDOFF]])


def _settle(repo: Path, tmp_path: Path, part: Part) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    base = git(repo, "rev-parse", "main")
    run_id = start(repo, recipe(tmp_path, part))
    try:
        doc = wait_for(repo, run_id, children_settled, timeout=240)
    finally:
        stop(repo, run_id)
    log = events(repo, run_id)
    assert git(repo, "rev-parse", "main") == base  # nothing was published
    return run_id, doc, log


def _refused(log: list[dict[str, Any]], doc: dict[str, Any], title: str) -> set[str]:
    worker = next(w["workerId"] for w in doc["workers"] if w["taskId"] == task_by_title(doc, title)["taskId"])
    return {e["data"]["code"] for e in log if e["code"] == "REQUEST_REFUSED" and e["data"].get("workerId") == worker}


def _never_delivered(repo: Path, run_id: str, doc: dict[str, Any], title: str) -> None:
    task = task_by_title(doc, title)
    assert task["status"] == "blocked", task
    assert git(repo, "for-each-ref", f"refs/agentops/runs/{run_id}/deliveries/{task['taskId']}") == ""


@pytest.mark.slow
def test_files_git_ignores_or_hides_in_the_worktree_never_reach_the_verification(tmp_path: Path) -> None:
    """A root conftest.py and a pytest.ini with a shadow module (both ignored through the shared info/exclude),
    ``--skip-worktree`` over the good file, and a stale ``.pyc`` with the source's size and mtime. Unconfined:
    the sandbox refuses the write to info/exclude at the kernel; this is what stops it where there is none."""
    repo = _project(tmp_path, UNCONFINED)
    exclude = '"$(git rev-parse --git-common-dir)/info/exclude"'
    conftest = _attacker(
        "a",
        write_step("conftest.py", "import calc_a\ncalc_a.add = lambda a, b: a + b\n"),
        _sh(f'mkdir -p "$(dirname {exclude})" && echo conftest.py >> {exclude}'),
    )
    shadow = _attacker(
        "b",
        write_step("shadow/calc_b.py", GOOD),
        write_step("pytest.ini", "[pytest]\npythonpath = shadow\n"),
        _sh(f"mkdir -p \"$(dirname {exclude})\" && printf 'pytest.ini\\nshadow/\\n' >> {exclude}"),
    )
    skip = _attacker(
        "c",
        _sh(
            f"git update-index --skip-worktree calc_c.py && printf '{GOOD.replace(chr(10), chr(92) + 'n')}' > calc_c.py"
        ),
    )
    stale_pyc = child(
        "d",
        "Attack D",
        [
            [
                write_step("calc_d.py", GOOD),
                _sh(
                    "python3 -c \"import os, py_compile; py_compile.compile('calc_d.py'); "
                    "st = os.stat('calc_d.py'); "
                    f"open('calc_d.py', 'w').write({BROKEN!r}); "
                    "os.utime('calc_d.py', ns=(st.st_atime_ns, st.st_mtime_ns))\""
                ),
                commit_step("break calc_d"),
                HANDOFF,
            ]
        ],
    )
    run_id, doc, log = _settle(repo, tmp_path, conftest + shadow + skip + stale_pyc + _honest())
    assert task_by_title(doc, "Honest")["status"] == "delivered"
    for title in ("Attack A", "Attack B", "Attack C", "Attack D"):
        _never_delivered(repo, run_id, doc, title)
        assert "RUN_VERIFICATION_FAILED" in _refused(log, doc, title), (title, _refused(log, doc, title))


@pytest.mark.slow
def test_config_notes_and_daemons_of_an_agent_cannot_make_a_failing_commit_pass(tmp_path: Path) -> None:
    """A forged passing evidence note on the broken tree; a smudge filter in the shared config that turns the broken
    blob into the good file on checkout; a ``setsid`` daemon writing the good file into the supervisor's checkouts;
    and an fsmonitor hook in the shared config (it must never run inside the supervisor's own git)."""
    repo = _project(tmp_path)
    done = subprocess.run(["git", "agentops-verify", "--json"], cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr  # a real record to copy the digests from
    forge = (
        "import json, subprocess\n"
        "run = lambda *a: subprocess.run(['git', *a], capture_output=True, text=True, check=True).stdout.strip()\n"
        "record = json.loads(run('notes', '--ref=agentops/evidence', 'show', 'main').splitlines()[0])\n"
        "tree, commit = run('rev-parse', 'HEAD^{tree}'), run('rev-parse', 'HEAD')\n"
        "record.update(tree=tree, commit=commit, outputDigest='0' * 64, producer='supervisor', checkout='clean')\n"
        "run('notes', '--ref=agentops/evidence', 'add', '-f', '-m', json.dumps(record), tree)\n"
    )
    forged = _attacker("e", write_step(".attack/forge.py", forge), _sh("python3 .attack/forge.py && rm -r .attack"))
    marker = tmp_path / "daemon-alive"
    daemon_script = (
        f"touch {marker}; i=0; while [ $i -lt 1200 ] && [ -e {marker} ]; do i=$((i+1)); "
        f'for f in "$HOME"/.cache/git-agentops/verify/*/*/*/calc_f.py; do [ -f "$f" ] && '
        f"printf '{GOOD.replace(chr(10), chr(92) + 'n')}' > \"$f\"; done; sleep 0.05; done"
    )
    daemon = _attacker("f", _daemon(daemon_script, tmp_path / "f-started"))
    ran = tmp_path / "fsmonitor-ran"
    monitor = tmp_path / "monitor.sh"
    monitor.write_text(f'#!/bin/sh\n[ -n "$AGENTOPS_WORKER_ID" ] || echo "$PWD" >> {ran}\nexit 1\n')
    monitor.chmod(0o755)
    fsmonitor = child(
        "g",
        "Fsmonitor",
        [[_sh(f"git config core.fsmonitor {monitor}"), write_step("notes/g.txt", "g\n"), commit_step("g"), HANDOFF]],
    )
    smudge = tmp_path / "smudge.sh"
    smudge.write_text(f"#!/bin/sh\ncat > /dev/null\nprintf '{GOOD.replace(chr(10), chr(92) + 'n')}'\n")
    smudge.chmod(0o755)
    filtered = child(
        "h",
        "Attack H",
        [
            [
                write_step(".gitattributes", "calc_h.py filter=good\n"),
                _sh(f"git config filter.good.smudge {smudge} && git config filter.good.clean cat"),
                write_step("calc_h.py", BROKEN),
                commit_step("break calc_h"),
                HANDOFF,
            ]
        ],
    )
    try:
        run_id, doc, log = _settle(repo, tmp_path, forged + daemon + fsmonitor + filtered + _honest())
        supervisor_ran = ran.read_text() if ran.exists() else ""
    finally:
        marker.unlink(missing_ok=True)  # ends the daemon
        git(repo, "config", "--unset", "core.fsmonitor", check=False)
    assert supervisor_ran == "", supervisor_ran
    assert task_by_title(doc, "Honest")["status"] == "delivered"
    assert task_by_title(doc, "Fsmonitor")["status"] == "delivered"
    for title in ("Attack E", "Attack H"):
        _never_delivered(repo, run_id, doc, title)
        assert "RUN_VERIFICATION_FAILED" in _refused(log, doc, title), (title, _refused(log, doc, title))
    _never_delivered(repo, run_id, doc, "Attack F")
    assert _refused(log, doc, "Attack F") & {"VERIFY_CHECKOUT_CHANGED", "RUN_VERIFICATION_FAILED"}


def test_a_project_without_gitignore_completes_a_run_whose_tests_leave_caches_and_build_output(tmp_path: Path) -> None:
    """Invariant: what verification commands create is theirs, not the agent's dirt -- before, a child in a project
    without ``__pycache__/`` in ``.gitignore`` failed its handoff ``VERIFY_DIRTY`` on every generation. The worker
    here runs the tests itself too, leaving ``__pycache__/``, ``.pytest_cache/`` and ``build/`` in its worktree."""
    policy = POLICY.replace(', "-p", "no:cacheprovider"', "") + (
        '[[verify.commands]]\nid = "build"\n'
        'argv = ["python3", "-c", "import os; os.makedirs(\'build\', exist_ok=True); '
        "open('build/x', 'w').write('1')\"]\n"
        "timeout = 60\n"
    )
    repo = make_repo(
        tmp_path / "repo",
        files={
            ".agentops/policy.toml": policy,
            "calc.py": GOOD,
            "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
        },
    )
    trust(repo)
    double = "def double(x):\n    return 2 * x\n"
    work = child(
        "x",
        "Add double",
        [
            [
                write_step("double.py", double),
                write_step(
                    "tests/test_double.py", "from double import double\n\n\ndef test():\n    assert double(2) == 4\n"
                ),
                commit_step("add double"),
                _sh("python3 -m pytest -q && mkdir -p build && echo 1 > build/x"),  # after the commit: untracked
                HANDOFF,
            ]
        ],
    )
    run_id = start(repo, recipe(tmp_path, work, finalize=True))
    try:
        doc = wait_for(repo, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=180)
    finally:
        stop(repo, run_id)
    assert doc["status"] == "complete", doc
    assert not [e for e in events(repo, run_id) if e["code"] == "REQUEST_REFUSED"]
    assert git(repo, "show", "main:double.py") == double.rstrip("\n")
    receipt = json.loads(git(repo, "notes", "--ref=agentops/receipts", "show", "main"))
    statement = json.loads(base64.b64decode(receipt["payload"]))
    verification = statement["predicate"]["verification"]["value"]
    delivered = task_by_title(doc, "Add double")
    assert {(r["producer"], r["checkout"]) for r in verification} == {("supervisor", "clean")}
    # one delivery onto an unchanged target: the candidate's tree is the delivery's, its result reused -- and said so
    assert all(r["cached"] is True for r in verification), verification
    delivery_commit = git(repo, "rev-parse", f"refs/agentops/runs/{run_id}/deliveries/{delivered['taskId']}")
    assert {r["cachedFrom"] for r in verification} == {delivery_commit}
    slots = list((Path(os.environ["XDG_CACHE_HOME"]) / "git-agentops" / "verify").glob(f"*/{run_id}"))
    assert slots == []  # the run's clean checkouts are removed with the run


@pytest.mark.slow
def test_a_daemon_dropping_files_into_the_candidate_checkout_is_refused_never_trusted(tmp_path: Path) -> None:
    """A worker leaves a daemon (its environment scrubbed, so nothing ties it to the worker) that keeps writing a
    ``conftest.py`` into the supervisor's candidate checkout -- one that makes every test fail. Invariant: the gate
    never runs with it: the candidate is refused ``VERIFY_CHECKOUT_CHANGED`` (or, when the daemon misses the gate's
    window, passes without it), never ``RUN_VERIFICATION_FAILED``; with the daemon gone the run completes.
    Unconfined: in the sandbox the daemon could neither write there nor outlive the worker."""
    repo = _project(tmp_path, UNCONFINED)
    marker = tmp_path / "dropper-alive"
    slots = Path(os.environ["XDG_CACHE_HOME"]) / "git-agentops" / "verify"
    planted = "import pytest\\n@pytest.fixture(autouse=True)\\ndef planted():\\n    raise RuntimeError(1)\\n"
    loop = (
        f"touch {marker}; i=0; while [ $i -lt 3000 ] && [ -e {marker} ]; do i=$((i+1)); "
        f'for d in {slots}/*/*/candidate; do [ -d "$d" ] && printf "{planted}" > "$d/conftest.py"; done; '
        "sleep 0.01; done"
    )
    dropper = child(
        "d",
        "Dropper",
        [
            [
                write_step("notes/d.txt", "d\n"),
                commit_step("d"),
                _daemon(loop, tmp_path / "dropper-started", scrub=True),
                HANDOFF,
            ]
        ],
    )
    run_id = start(repo, recipe(tmp_path, dropper + _honest(), finalize=True))
    try:
        doc = wait_for(
            repo,
            run_id,
            lambda d: d["status"] != "active" or any(e["code"] == "INTEGRATION_FAILED" for e in events(repo, run_id)),
            timeout=180,
        )
        marker.unlink(missing_ok=True)  # the daemon ends
        time.sleep(0.5)
        failures = [e["data"]["failure"] for e in events(repo, run_id) if e["code"] == "INTEGRATION_FAILED"]
        assert set(failures) <= {"VERIFY_CHECKOUT_CHANGED"}, failures
        if doc["status"] != "complete":
            doc = wait_for(repo, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=180)
            if doc["status"] == "blocked":
                assert cli(repo, "agentops-run", "resume", run_id).returncode == 0
                doc = wait_for(repo, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=180)
    finally:
        marker.unlink(missing_ok=True)
        stop(repo, run_id)
    assert doc["status"] == "complete", doc
    failures = [e["data"]["failure"] for e in events(repo, run_id) if e["code"] == "INTEGRATION_FAILED"]
    assert set(failures) <= {"VERIFY_CHECKOUT_CHANGED"}, failures
    assert "conftest.py" not in git(repo, "ls-tree", "-r", "--name-only", "main")


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["landlock", "none"])
def test_a_setsid_daemon_of_a_worker_is_dead_once_its_handoff_is_verified(tmp_path: Path, sandbox: str) -> None:
    """What a worker leaves running outside its process group, still carrying its environment, is stopped with
    the worker before its handoff is verified: by the launcher (its subreaper) in the sandbox, by the environment
    scan without it."""
    out = tmp_path / "out"
    out.mkdir()
    repo = _project(tmp_path, f'[sandbox]\nmode = "{sandbox}"\nwritable = ["{out}"]\n')
    beat = out / "heartbeat"
    loop = f"i=0; while [ $i -lt 3000 ]; do i=$((i+1)); touch {beat}; sleep 0.01; done"
    worker = child(
        "s",
        "Spawner",
        [
            [
                write_step("notes/s.txt", "s\n"),
                commit_step("s"),
                _daemon(loop, out / "spawner-started"),
                HANDOFF,
            ]
        ],
    )
    run_id = start(repo, recipe(tmp_path, worker))
    try:
        wait_for(repo, run_id, lambda d: task_by_title(d, "Spawner")["status"] == "delivered", timeout=120)
        first = beat.stat().st_mtime
        time.sleep(1.0)
        assert beat.stat().st_mtime == first  # nothing touches it any more: the daemon is gone
    finally:
        stop(repo, run_id)
