"""The clean-checkout figures of ``bench/verify.py``: what the supervisor-owned checkout costs against verifying in
place, on a repository of many files, and the final gate's overhead on a small one.

The library is called in this process, as the supervisor calls it (it is already running when a handoff or the
final gate is proved, so no interpreter start-up is in these figures). Each clean verification is the sequence of
:func:`git_agentops.verify.proof.prove` without setup: ``populate``, ``inspect`` (must be clean), the guard above
(:func:`~git_agentops.gitstore.clean.discoverable_above`), then :func:`~git_agentops.verify.core.verify_clean`,
which runs the commands and re-inspects the tracked files after them. Every clean verification is of a commit
whose tree nobody verified before (one file changed), so evidence is never reused.

Everything runs under a private HOME and XDG dirs with a fixed identity, as the tests' hermetic fixture does:
``set_base_environment`` gets that environment, and libgit2's config search path points into it.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pygit2

from git_agentops.clock import SystemClock
from git_agentops.gitstore.clean import CleanCheckout, Drift, discoverable_above, remove_tree
from git_agentops.gitstore.identity import Identity
from git_agentops.gitstore.repo import open_store
from git_agentops.gitstore.safegit import set_base_environment
from git_agentops.policy.load import cache_dir_for, load_policy
from git_agentops.policy.trust import TrustStore, Verdict, repo_identity
from git_agentops.verify.confined_setup import slots_dir
from git_agentops.verify.core import verify_checkout, verify_clean
from git_agentops.verify.evidence import EvidenceStore

NAME, EMAIL = "bench", "bench@example.invalid"
POLICY = 'version = 1\n[[verify.commands]]\nid = "noop"\nargv = ["true"]\n'
DIRS_OF = 100  # files per directory of the big repository
IDENTITY_VARS = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")
FILLER = "".join(f"line {i:03d} of a small file in a benchmark repository\n" for i in range(6))  # ~300 bytes


def hermetic_env(home: Path, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` without its ``GIT_*`` variables, with a private HOME and XDG dirs, git config and identity."""
    env = {k: v for k, v in base.items() if not k.startswith("GIT_")}
    xdg = {
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_STATE_HOME": home / ".local" / "state",
        "XDG_CACHE_HOME": home / ".cache",
        "XDG_DATA_HOME": home / ".local" / "share",
    }
    for var, path in xdg.items():
        path.mkdir(parents=True, exist_ok=True)
        env[var] = str(path)
    gitconfig = home / ".gitconfig"
    gitconfig.write_text(
        f"[user]\n\tname = {NAME}\n\temail = {EMAIL}\n[init]\n\tdefaultBranch = main\n[commit]\n\tgpgsign = false\n"
        "[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n",
        encoding="utf-8",
    )
    env.update(
        {
            "HOME": str(home),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": str(gitconfig),
            "GIT_TERMINAL_PROMPT": "0",
            **dict(zip(IDENTITY_VARS, (NAME, EMAIL) * 2, strict=True)),
        }
    )
    return env


def seal(home: Path, env: Mapping[str, str]) -> None:
    """Point the toolkit's git calls and libgit2 at ``env``'s private home (what the CLI boundary and the tests'
    hermetic fixture do); the process keeps it for the rest of the benchmark."""
    set_base_environment(env)
    empty = home / "empty-system-config"
    empty.mkdir(exist_ok=True)
    levels = pygit2.enums.ConfigLevel
    pygit2.settings.search_path[levels.SYSTEM] = str(empty)
    pygit2.settings.search_path[levels.XDG] = str(home / ".config")
    pygit2.settings.search_path[levels.GLOBAL] = str(home)


def git(cwd: Path, env: Mapping[str, str], *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env=dict(env), capture_output=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout.decode(errors="replace").strip()


def make_repo(path: Path, env: Mapping[str, str], files: int, *, gc: bool) -> None:
    """A repository of ``files`` small files in directories of :data:`DIRS_OF` plus the policy, committed."""
    path.mkdir(parents=True)
    git(path.parent, env, "init", "-q", str(path))
    for i in range(files):
        directory = path / f"d{i // DIRS_OF:03d}"
        if i % DIRS_OF == 0:
            directory.mkdir()
        (directory / f"f{i % DIRS_OF:03d}.txt").write_text(f"file {i}\n{FILLER}", encoding="utf-8")
    (path / ".agentops").mkdir()
    (path / ".agentops" / "policy.toml").write_text(POLICY, encoding="utf-8")
    git(path, env, "add", "-A")
    git(path, env, "commit", "-qm", f"{files} files")
    if gc:
        git(path, env, "gc", "-q")


class Bench:
    """One scratch repository, its store, trusted policy and a supply of new commits."""

    def __init__(self, repo: Path, env: dict[str, str]) -> None:
        self.repo, self.env, self.clock = repo, env, SystemClock()
        self.store = open_store(repo, clock=self.clock, identity=Identity(NAME, EMAIL))
        self.evidence = EvidenceStore(self.store, self.store.private_dir())
        common = self.store.common_dir
        self.policy = load_policy(repo, cache_dir=cache_dir_for(common))
        trust = TrustStore(Path(env["XDG_STATE_HOME"]) / "git-agentops", self.clock)
        identity = repo_identity(common, None)
        trust.grant(identity, self.policy)
        self.verdict: Verdict = trust.status(identity, self.policy)
        self.git = pygit2.Repository(str(repo))
        self.tip = self.git.head.peel(pygit2.Commit)
        self.directory = next((e.name for e in self.tip.tree if e.type_str == "tree" and e.name != ".agentops"), None)
        self.count = 0

    def next_commit(self) -> tuple[str, str]:
        """(commit, tree) of a new commit on the last one with one file changed (a tree nobody verified yet):
        a file of the first directory, or a top-level file in a repository without directories."""
        self.count += 1
        root = self.tip.tree
        blob = self.git.create_blob(f"change {self.count} at {time.time_ns()}\n{FILLER}".encode())
        top = self.git.TreeBuilder(root)
        if self.directory is None:
            top.insert("changed.txt", blob, pygit2.GIT_FILEMODE_BLOB)
        else:
            sub = self.git.TreeBuilder(self.git[root[self.directory].id].peel(pygit2.Tree))
            sub.insert(f"f{self.count % DIRS_OF:03d}.txt", blob, pygit2.GIT_FILEMODE_BLOB)
            top.insert(self.directory, sub.write(), pygit2.GIT_FILEMODE_TREE)
        sig = pygit2.Signature(NAME, EMAIL)
        oid = self.git.create_commit(None, sig, sig, f"change {self.count}", top.write(), [self.tip.id])
        self.tip = self.git[oid].peel(pygit2.Commit)
        return str(self.tip.id), str(self.tip.tree_id)

    def slot(self, name: str) -> TimedCheckout:
        return TimedCheckout(
            slots_dir(self.env, self.store, "bench") / name, self.store.common_dir / "objects", identity=(NAME, EMAIL)
        )

    def inplace(self) -> None:
        """``verify_checkout(fresh=True)`` in the repository's own checkout: the person's verification."""
        outcome = verify_checkout(
            self.evidence,
            worktree=self.repo,
            policy=self.policy,
            trust=self.verdict,
            environ=self.env,
            clock=self.clock,
            fresh=True,
        )
        assert outcome.passed and not outcome.records[0].cached

    def clean(self, checkout: TimedCheckout) -> dict[str, float]:
        """One clean verification of a new commit in ``checkout`` (see the module docstring): seconds per phase."""
        commit, tree = self.next_commit()
        checkout.inspected.clear()
        start = time.perf_counter()
        checkout.populate(commit)
        populated = time.perf_counter()
        drift = checkout.inspect(commit)
        inspected = time.perf_counter()
        assert drift.clean, drift.describe()
        discoverable_above(checkout.root)  # prove() compares it with the run's first snapshot
        guarded = time.perf_counter()
        outcome = verify_clean(
            self.evidence,
            checkout,
            commit=commit,
            tree=tree,
            policy=self.policy,
            trust=self.verdict,
            environ=self.env,
            clock=self.clock,
        )
        end = time.perf_counter()
        assert outcome.passed and not outcome.records[0].cached, "evidence must not be reused here"
        assert len(checkout.inspected) == 2, "verify_clean must re-inspect after the commands"
        after = checkout.inspected[-1]
        return {
            "total": end - start,
            "populate": populated - start,
            "inspect": inspected - populated,
            "guard": guarded - inspected,
            "commands": end - guarded - after,
            "after": after,
        }


class TimedCheckout(CleanCheckout):
    """A :class:`CleanCheckout` that remembers how long each :meth:`inspect` took."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.inspected: list[float] = []

    def inspect(self, commit: str | None = None, *, extras: bool = True) -> Drift:
        start = time.perf_counter()
        try:
            return super().inspect(commit, extras=extras)
        finally:
            self.inspected.append(time.perf_counter() - start)


def _true() -> float:
    start = time.perf_counter()
    subprocess.run(["true"], check=True)
    return time.perf_counter() - start


def _p50(values: list[float]) -> float:
    return statistics.median(values) * 1000


def big_figures(root: Path, env: dict[str, str], *, files: int, runs: int, gc: bool) -> dict[str, Any]:
    """In place, clean cold and clean warm on a repository of ``files`` files, interleaved round by round so a
    neighbour's load falls on all three alike: p50 ms of each, and of each phase of the warm case."""
    repo = root / "big"
    start = time.perf_counter()
    make_repo(repo, env, files, gc=gc)
    built = time.perf_counter() - start
    bench = Bench(repo, env)
    warm = bench.slot("warm")
    bench.inplace()  # first status rewrites the racily clean index; not measured
    bench.clean(warm)  # the slot's first population (a worker's first handoff); not measured
    samples: dict[str, list[float]] = {"true": [], "inplace": [], "cold": [], "warm": []}
    phases: dict[str, list[float]] = {}
    for i in range(runs):
        samples["true"].append(_true())
        start = time.perf_counter()
        bench.inplace()
        samples["inplace"].append(time.perf_counter() - start)
        split = bench.clean(warm)
        samples["warm"].append(split["total"])
        for phase, seconds in split.items():
            phases.setdefault(phase, []).append(seconds)
        cold = bench.slot(f"cold{i}")
        samples["cold"].append(bench.clean(cold)["total"])
        remove_tree(cold.root)
    return {
        "files": files,
        "gc": gc,
        "build_s": built,
        **{name: _p50(values) for name, values in samples.items()},
        "phases": {phase: _p50(values) for phase, values in phases.items()},
    }


def gate_figures(repo: Path, env: dict[str, str], *, runs: int) -> dict[str, float]:
    """The final gate on the small scratch repository ``repo``: a warm slot verifying a new commit each time, and
    the bare command, interleaved: p50 ms of each."""
    bench = Bench(repo, env)
    slot = bench.slot("candidate")
    bench.clean(slot)  # the candidate slot already exists at the final gate
    gate, bare = [], []
    for _ in range(runs):
        bare.append(_true())
        gate.append(bench.clean(slot)["total"])
    return {"gate": _p50(gate), "true": _p50(bare)}
