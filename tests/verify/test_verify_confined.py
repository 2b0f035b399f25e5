"""The supervisor's clean-checkout verification runs the agent's code confined: its tests write the checkout, their
own TMPDIR and the slot's cache, and nothing else -- never the repository's shared dependency base, the
supervisor's private dir, refs, trust store, the person's HOME or the checkout's own ``.git``. Real proofs
(:func:`git_agentops.verify.proof.prove`) of real repositories, the commands real processes under the real launcher.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from git_agentops.clock import FixedClock
from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.repo import Store, open_store
from git_agentops.sandbox.plan import kernel_abi, namespace_problem
from git_agentops.verify.core import Outcome

from ..conftest import git, make_repo

pytestmark = pytest.mark.skipif(
    kernel_abi() < 6 or namespace_problem() is not None,
    reason="needs Landlock ABI 6+ and user namespaces (this machine and CI have both)",
)

PROJECT = {
    "tests/__init__.py": "",
    "calc.py": "def add(a, b):\n    return a + b\n",
    "tests/test_calc.py": (
        "import unittest\n\nfrom calc import add\n\n\nclass TestAdd(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
    ),
}


class Proof:
    """A small project, its store and a run context whose proofs the tests drive."""

    def __init__(self, tmp_path: Path, *, files: dict[str, str] | None = None) -> None:
        self.tmp = tmp_path
        self.repo = make_repo(tmp_path / "repo", files={**PROJECT, **(files or {})})
        self.store: Store = open_store(self.repo, clock=FixedClock())
        self.logged: list[str] = []

    @property
    def shared(self) -> Path:
        return self.repo / ".git" / "agentops" / "envs"

    def base(self) -> Path:
        """A complete base in the shared environments, as the env tool leaves one (its marker written last)."""
        base = self.shared / "python-0123456789abcdef"
        site = base / "lib" / "site-packages"
        site.mkdir(parents=True, exist_ok=True)
        (site / "pytest.py").write_text("# the real pytest\n")
        (base / "agentops-complete.json").write_text('{"key": "0123456789abcdef"}\n')
        return base

    def prove(
        self,
        commands: list[dict[str, Any]],
        *,
        setup: list[list[str]] = (),  # type: ignore[assignment]
        sandbox: dict[str, Any] | None = None,
        slot: str = "w1",
    ) -> Outcome:
        from git_agentops.model.policy import Policy, effective
        from git_agentops.policy.trust import RepoIdentity, TrustStatus, Verdict
        from git_agentops.runs.jobs import JobContext
        from git_agentops.verify.proof import prove

        doc: dict[str, Any] = {
            "verify": {"commands": [{"timeout": 120, **c} for c in commands]},
            "worktree": {"setup": [{"argv": argv, "timeout": 120} for argv in setup]},
        }
        if sandbox is not None:
            doc["sandbox"] = sandbox
        policy = Policy.from_effective(effective(doc))
        trust = Verdict(TrustStatus.TRUSTED, RepoIdentity(str(self.repo), f"local:{self.repo}"), policy.config_hash)
        ctx = JobContext(
            "run-confined", policy, trust, dict(os.environ), FixedClock(), self.tmp / "run", self.logged.append, print
        )
        return prove(ctx, self.store, slot=slot, commit=git(self.repo, "rev-parse", "HEAD"), task=None)

    def checkout(self, slot: str = "w1") -> Path:
        from git_agentops.verify.proof import slots_dir

        return slots_dir(dict(os.environ), self.store, "run-confined") / slot


@pytest.fixture
def proof(tmp_path: Path) -> Iterator[Proof]:
    yield Proof(tmp_path)


def _py(code: str, cid: str = "check") -> dict[str, Any]:
    return {"id": cid, "argv": [sys.executable, "-c", code]}


def _digest(root: Path) -> dict[str, str]:
    """Every file under ``root`` and its content digest."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


ALLOWED = (
    "import os\n"
    "open(os.path.join(os.environ['TMPDIR'], 'scratch.txt'), 'w').write('ok')\n"
    "os.makedirs(os.path.join(os.environ['XDG_CACHE_HOME'], 'tool'), exist_ok=True)\n"
    "open(os.path.join(os.environ['XDG_CACHE_HOME'], 'tool', 'entry'), 'w').write('ok')\n"
    "os.makedirs('build', exist_ok=True)\n"
    "open('build/out.txt', 'w').write('ok')\n"
    "print('ALLOWED-WRITES-DONE', flush=True)\n"
)
"""What every confined command may write: its TMPDIR, the slot's cache, the checkout (build output)."""


def _attempt(path: Path | str) -> str:
    """A command that writes where it may, then tries ``path`` (append; created if missing) and says what happened."""
    return ALLOWED + f"open({str(path)!r}, 'a').write('planted\\n')\nprint('WROTE-THE-FORBIDDEN-FILE')\n"


def _refused(outcome: Outcome) -> str:
    """The failing record's output, checked to show the allowed writes worked and the forbidden one was refused."""
    (record,) = outcome.records
    tail = str(record.tail)
    assert not outcome.passed, tail
    assert "ALLOWED-WRITES-DONE" in tail, tail
    assert "WROTE-THE-FORBIDDEN-FILE" not in tail, tail
    assert "PermissionError" in tail or "Read-only file system" in tail, tail
    return tail


def test_a_verify_command_cannot_change_the_shared_base_and_the_base_is_unchanged(proof: Proof) -> None:
    """Before: a test could replace ``pytest`` in ``$GIT_COMMON_DIR/agentops/envs/python-*`` and every later
    verification of the repository would pass. Now the write is refused and not a byte of the base changes."""
    base = proof.base()
    before = _digest(proof.shared)
    pytest_py = base / "lib" / "site-packages" / "pytest.py"
    outcome = proof.prove([_py(_attempt(pytest_py))])
    _refused(outcome)
    outcome = proof.prove([_py(_attempt(base / "lib" / "site-packages" / "zz-evil.pth"))])
    _refused(outcome)
    outcome = proof.prove([_py(_attempt(proof.shared / "python-fedcba9876543210" / "agentops-complete.json"))])
    assert not outcome.passed
    assert _digest(proof.shared) == before
    assert pytest_py.read_text() == "# the real pytest\n"


def _forbidden(proof: Proof) -> dict[str, Path]:
    home = Path(os.environ["HOME"])
    state = Path(os.environ["XDG_STATE_HOME"]) / "git-agentops"
    state.mkdir(parents=True, exist_ok=True)
    (state / "trust.json").write_text("{}\n")
    return {
        "the supervisor's private dir": proof.store.private_dir() / "planted.json",
        "a branch ref": proof.repo / ".git" / "refs" / "heads" / "planted",
        "packed-refs": proof.repo / ".git" / "packed-refs",
        "the repository's config": proof.repo / ".git" / "config",
        "the person's HOME": home / "planted.txt",
        "the person's shell profile": home / ".bashrc",
        "the trust store": state / "trust.json",
        "the main checkout": proof.repo / "calc.py",
        "another slot's checkout": proof.checkout("w2") / "calc.py",
    }


@pytest.mark.parametrize(
    "what",
    [
        "the supervisor's private dir",
        "a branch ref",
        "packed-refs",
        "the repository's config",
        "the person's HOME",
        "the person's shell profile",
        "the trust store",
        "the main checkout",
        "another slot's checkout",
    ],
)
def test_a_verify_command_cannot_write_outside_its_checkout_tmpdir_and_cache(proof: Proof, what: str) -> None:
    """Invariant: the supervisor's state, the repository's refs and config, the person's HOME and trust store, other
    checkouts are the kernel's to refuse; the file is exactly as it was."""
    proof.prove([_py("pass")], slot="w2")  # another slot's checkout exists
    target = _forbidden(proof)[what]
    before = target.read_bytes() if target.exists() else None
    outcome = proof.prove([_py(_attempt(target))])
    _refused(outcome)
    assert (target.read_bytes() if target.exists() else None) == before


@pytest.mark.parametrize(
    "inside", [".git/objects/info/alternates", ".git/config", ".git/agentops-setup.json", ".git/objects/ab/cdef"]
)
def test_a_verify_command_cannot_change_its_checkouts_own_repository(proof: Proof, inside: str) -> None:
    """Before: a test could point ``.git/objects/info/alternates`` elsewhere, plant a loose object or a setup record
    that keeps a ``conftest.py``, and decide what the slot's next verification checks out. The checkout's ``.git`` is
    read-only to what runs there."""
    proof.prove([_py("pass")])
    git_dir = proof.checkout() / ".git"
    before = _digest(git_dir)
    code = (
        ALLOWED
        + f"import os\nos.makedirs(os.path.dirname({inside!r}), exist_ok=True)\n"
        + _attempt(inside)[len(ALLOWED) :]
    )
    outcome = proof.prove([_py(code)])
    tail = _refused(outcome)
    assert "Read-only file system" in tail, tail
    after = _digest(git_dir)
    assert {k: v for k, v in after.items() if k != "agentops-inspect.index"} == {
        k: v for k, v in before.items() if k != "agentops-inspect.index"
    }


def test_a_verify_command_gets_a_fresh_tmpdir_and_keeps_its_slots_cache(proof: Proof) -> None:
    """Invariant: TMPDIR is the verification's own and starts empty each time; the slot's cache survives (pip's and
    go's caches stay warm); neither is inside the checkout, which holds nothing the commit lacks."""
    code = (
        "import os\n"
        "tmp, cache = os.environ['TMPDIR'], os.environ['XDG_CACHE_HOME']\n"
        "print('TMP', sorted(os.listdir(tmp)), 'CACHE', sorted(os.listdir(cache)))\n"
        "open(os.path.join(tmp, 'left.txt'), 'w').write('x')\n"
        "open(os.path.join(cache, 'kept.txt'), 'w').write('x')\n"
    )
    first = proof.prove([_py(code)])
    second = proof.prove([_py(code + "\n# another argv, so the first result is not reused\n")])
    assert first.passed and second.passed
    assert "TMP [] CACHE []" in first.records[0].tail
    assert "TMP [] CACHE ['kept.txt']" in second.records[0].tail
    assert not (proof.checkout() / "left.txt").exists()


def test_normal_unittest_and_pytest_verification_passes_confined(proof: Proof) -> None:
    """Invariant: what a test suite does -- import the checkout, write ``tmp_path`` and ``.pytest_cache``, spawn a
    subprocess, run git on the checkout -- works confined, with the counts parsed as before."""
    pytest_test = (
        "import subprocess, sys\n\nfrom calc import add\n\n\n"
        "def test_add(tmp_path):\n    (tmp_path / 'f').write_text('x')\n    assert add(1, 1) == 2\n\n\n"
        "def test_subprocess_and_git():\n"
        "    out = subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True, text=True).stdout\n"
        "    assert out.strip() == '42'\n"
        "    head = subprocess.run(['git', 'rev-parse', 'HEAD'], capture_output=True, text=True, check=True).stdout\n"
        "    assert len(head.strip()) == 40\n"
    )
    proof.repo.joinpath("tests", "test_more.py").write_text(pytest_test)
    git(proof.repo, "add", "-A")
    git(proof.repo, "commit", "-qm", "more tests")
    outcome = proof.prove(
        [
            {
                "id": "unit",
                "argv": [sys.executable, "-m", "unittest", "discover", "-s", "tests", "-t", ".", "-v"],
                "parser": "unittest",
            },
            {"id": "pytest", "argv": [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly"], "parser": "pytest"},
        ]
    )
    assert outcome.passed, [r.tail for r in outcome.records]
    unit, suite = outcome.records
    assert unit.tests["passed"] == 1  # test_more.py is no unittest.TestCase: pytest's alone
    assert suite.tests["passed"] == 3


def test_a_test_that_binds_loopback_still_works(proof: Proof) -> None:
    """Invariant: the network stays (Landlock does not handle TCP): a test server on 127.0.0.1 answers its test."""
    code = (
        "import socket\n"
        "server = socket.socket(); server.bind(('127.0.0.1', 0)); server.listen()\n"
        "client = socket.create_connection(server.getsockname()); peer, _ = server.accept()\n"
        "client.sendall(b'ping'); assert peer.recv(4) == b'ping'\n"
        "print('LOOPBACK-OK')\n"
    )
    outcome = proof.prove([_py(code)])
    assert outcome.passed and "LOOPBACK-OK" in outcome.records[0].tail


def test_a_verify_command_cannot_reach_the_persons_unix_sockets_nor_signal_the_supervisor(
    proof: Proof, tmp_path: Path
) -> None:
    """Invariant: a pathname socket of the person (an ssh-agent, tmux) is masked in the command's namespace, and a
    signal to a process outside its sandbox is refused (EPERM) -- the supervisor is this test's process."""
    path = tmp_path / "agent.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    server.setblocking(False)
    hits: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: hits.append(1))
    try:
        code = (
            "import os, signal, socket\n"
            f"try:\n    os.kill({os.getpid()}, signal.SIGUSR1)\n    print('SIGNALLED')\n"
            "except PermissionError:\n    print('SIGNAL-REFUSED')\n"
            f"s = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({str(path)!r})\n    print('CONNECTED')\n"
            "except OSError as exc:\n    print('CONNECT-REFUSED', exc.strerror)\n"
        )
        outcome = proof.prove([_py(code)])
    finally:
        signal.signal(signal.SIGUSR1, previous)
    tail = outcome.records[0].tail
    assert "SIGNAL-REFUSED" in tail and "CONNECT-REFUSED" in tail, tail
    with pytest.raises(BlockingIOError):
        server.accept()
    server.close()
    assert hits == []


def test_a_setup_step_can_neither_change_a_complete_base_nor_plant_a_base_in_the_shared_environments(
    proof: Proof,
) -> None:
    """A setup step runs the commit's code (a build backend, npm scripts) and sees the shared environments read-only:
    it cannot change a base another checkout uses, nor make a directory there -- a base of another key with a forged
    completion marker, which a later checkout would trust (the supervisor builds bases itself, before the steps).
    npm's cache there stays writable. The failing step is ``RUN_SETUP_FAILED``; the shared environments are byte
    for byte what they were."""
    base = proof.base()
    forged = proof.shared / "python-fedcba9876543210"
    plant = (
        f"import os\nos.makedirs({str(forged / 'bin')!r})\n"
        f"open({str(forged / 'agentops-complete.json')!r}, 'w').write('{{\"key\": \"x\"}}')\n"
    )
    poison = f"open({str(base / 'lib' / 'site-packages' / 'pytest.py')!r}, 'w').write('')\n"
    npm = f"open({str(proof.shared / 'npm-cache' / 'entry')!r}, 'w').write('cached')\nprint('NPM-CACHE-WRITTEN')\n"
    outcome = proof.prove([_py("pass")], setup=[[sys.executable, "-c", ALLOWED + npm]])
    assert outcome.passed
    assert (proof.shared / "npm-cache" / "entry").read_text() == "cached"
    before = _digest(proof.shared)
    for index, code in enumerate((plant, poison)):
        with pytest.raises(AgentOpsError) as caught:
            proof.prove([_py("pass", f"other{index}")], setup=[[sys.executable, "-c", ALLOWED + code]])
        assert caught.value.code == "RUN_SETUP_FAILED"
        assert "ALLOWED-WRITES-DONE" in caught.value.message
        assert "Permission denied" in caught.value.message or "Read-only file system" in caught.value.message
    assert not forged.exists()
    assert _digest(proof.shared) == before


def test_a_setup_step_cannot_write_the_private_dir_or_home(proof: Proof) -> None:
    """Invariant: setup runs the project's own code (a build backend, ``npm`` lifecycle scripts) confined too: it
    writes the checkout, its TMPDIR and cache and npm's cache in the shared environments, nothing else."""
    target = Path(os.environ["HOME"]) / "planted-by-setup"
    with pytest.raises(AgentOpsError) as caught:
        proof.prove([_py("pass")], setup=[[sys.executable, "-c", _attempt(target)]])
    assert caught.value.code == "RUN_SETUP_FAILED"
    assert "ALLOWED-WRITES-DONE" in caught.value.message and "PermissionError" in caught.value.message
    assert not target.exists()


def test_a_policy_that_requires_the_sandbox_verifies_nothing_where_the_kernel_has_no_landlock(
    proof: Proof, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the kernel has no Landlock the verification follows the agents' rule: ``[sandbox] required = true`` is
    ``RUN_SANDBOX_UNAVAILABLE`` before any command runs; otherwise the commands run (reaped, unconfined) and the
    run's log says so once."""
    from git_agentops.sandbox import plan

    monkeypatch.setattr(plan, "kernel_abi", lambda: 0)
    ran = proof.tmp / "ran"
    with pytest.raises(AgentOpsError) as caught:
        proof.prove([_py(f"open({str(ran)!r}, 'w').write('x')")], sandbox={"required": True})
    assert caught.value.code == "RUN_SANDBOX_UNAVAILABLE"
    assert not ran.exists()
    outcome = proof.prove([_py(f"open({str(ran)!r}, 'w').write('x')", "again")])
    assert outcome.passed and ran.exists()
    assert sum("sandbox level none" in line for line in proof.logged) == 1, proof.logged


def test_a_missing_program_is_still_a_spawn_error_confined(proof: Proof) -> None:
    """Invariant: a command whose program does not exist says so as it does unconfined (``spawnError``), not as the
    launcher's exit status."""
    outcome = proof.prove([{"id": "gone", "argv": ["no-such-program-anywhere"]}])
    (record,) = outcome.records
    assert not record.passed
    assert record.spawn_error and "no-such-program-anywhere" in record.spawn_error


def test_confinement_overhead_on_a_trivial_command_is_small(proof: Proof) -> None:
    """The launcher, namespaces and Landlock cost a trivial command a fraction of a second, never seconds (the
    README's figure is this test's printout: ``-s`` shows it)."""
    from git_agentops.gitstore.clean import CleanCheckout
    from git_agentops.process.command import run_command
    from git_agentops.verify.proof import confinement

    proof.prove([_py("pass")])
    checkout = CleanCheckout(proof.checkout(), proof.repo / ".git" / "objects")
    ctx_policy = _context(proof)
    wall = confinement(ctx_policy, proof.store, checkout, "w1", setup=False)
    env = {"PATH": os.environ["PATH"]}
    clock = FixedClock()

    def timed(run: Any) -> float:
        best = float("inf")
        for _ in range(5):
            start = time.monotonic()
            result = run(["true"], cwd=checkout.root, env=env, timeout=30, shell=False, clock=clock)
            best = min(best, time.monotonic() - start)
            assert result.ok
        return best

    bare, confined = timed(run_command), timed(wall.run)
    print(f"\ntrivial command: bare {bare * 1000:.1f} ms, confined {confined * 1000:.1f} ms")
    assert confined - bare < 2.0


def _context(proof: Proof) -> Any:
    from git_agentops.model.policy import Policy, effective
    from git_agentops.policy.trust import RepoIdentity, TrustStatus, Verdict
    from git_agentops.runs.jobs import JobContext

    policy = Policy.from_effective(effective({"verify": {"commands": [{"id": "x", "argv": ["true"]}]}}))
    trust = Verdict(TrustStatus.TRUSTED, RepoIdentity(str(proof.repo), f"local:{proof.repo}"), policy.config_hash)
    return JobContext("run-confined", policy, trust, dict(os.environ), FixedClock(), proof.tmp / "run", print, print)


@pytest.mark.parametrize("level", ["landlock", "none"])
def test_where_no_namespace_can_make_it_read_only_a_write_to_the_checkouts_repository_is_refused_and_undone(
    proof: Proof, monkeypatch: pytest.MonkeyPatch, level: str
) -> None:
    """At ``level = "landlock"`` (no namespaces on this machine) or without any wall, the checkout's ``.git`` cannot
    be bound read-only: a command that rewrites its alternates is found by stat right after the commands, before
    the checkout is inspected through that ``.git``, refused (``VERIFY_CHECKOUT_CHANGED``, nothing recorded) and the
    checkout wiped, so the next proof starts from the commit again."""
    from git_agentops.sandbox import plan

    monkeypatch.setattr(plan, "namespace_problem", lambda: "Operation not permitted")
    if level == "none":
        monkeypatch.setattr(plan, "kernel_abi", lambda: 0)
    sandbox = {"level": "landlock"}
    proof.prove([_py("pass")], sandbox=sandbox)
    alternates = proof.checkout() / ".git" / "objects" / "info" / "alternates"
    before = alternates.read_text()
    fake = proof.tmp / "fake"
    code = f"open('.git/objects/info/alternates', 'w').write({str(fake) + '/objects'!r} + '\\n')\n"
    with pytest.raises(AgentOpsError) as caught:
        proof.prove([_py(code, "tamper")], sandbox=sandbox)
    assert caught.value.code == "VERIFY_CHECKOUT_CHANGED"
    assert "objects/info/alternates" in caught.value.message
    assert not proof.checkout().exists()
    outcome = proof.prove([_py("pass", "after")], sandbox=sandbox)
    assert outcome.passed and alternates.read_text() == before
    assert any(f"sandbox level {level}" in line for line in proof.logged), proof.logged
