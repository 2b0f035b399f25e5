"""``git agentops-init --hooks/--server/--uninstall-hooks``, with the real git CLI firing the installed shims.

What our hook *decides* is tested elsewhere (tests/hooks/test_hook_rules.py). Here a fake ``git-agentops-hook`` comes
first on PATH and records every call (argv, stdin bytes, AGENTOPS_HOOK) in a directory, exiting with a status the
test controls; foreign hooks record the same way, so the order of calls shows who ran first.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from git_agentops.errors import AgentOpsError
from git_agentops.hooks import HOOK_NAMES, MARKER
from git_agentops.hooks.install import apply, hook_module, plan_install

from ..conftest import git

ROOT = Path(__file__).resolve().parents[2]
ZERO = "0" * 40

RECORDER = """#!/bin/sh
dir={dir}
i=0
while [ -e "$dir/$i.args" ]; do i=$((i + 1)); done
cat >"$dir/$i.stdin"
printf '%s' "${{AGENTOPS_HOOK-unset}}" >"$dir/$i.env"
printf '%s\\n' {tag} "$@" >"$dir/$i.args"
exit "$(cat {status} 2>/dev/null || echo 0)"
"""


@dataclass(frozen=True)
class Call:
    who: str  # "ours" or the foreign hook's tag
    args: list[str]
    stdin: bytes
    agentops_hook: str


class Log:
    """The calls recorded by the fake git-agentops-hook and the foreign hooks, in order."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "calls"
        self.dir.mkdir()
        self.status_file = root / "ours.status"

    def recorder(self, path: Path, tag: str, *, status_file: Path | None = None, mode: int = 0o755) -> Path:
        status = status_file or path.with_name(path.name + ".status")
        path.write_text(RECORDER.format(dir=self.dir, tag=tag, status=status))
        path.chmod(mode)
        return path

    def calls(self) -> list[Call]:
        out = []
        i = 0
        while (self.dir / f"{i}.args").exists():
            who, *args = (self.dir / f"{i}.args").read_text().splitlines()
            out.append(Call(who, args, (self.dir / f"{i}.stdin").read_bytes(), (self.dir / f"{i}.env").read_text()))
            i += 1
        return out

    def ours(self) -> list[Call]:
        return [c for c in self.calls() if c.who == "ours"]

    def clear(self) -> None:
        shutil.rmtree(self.dir)
        self.dir.mkdir()


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Log:
    """A fake git-agentops-hook first on PATH, recording into ``log.dir``; its exit status is in ``status_file``."""
    recorder = Log(tmp_path)
    fakebin = tmp_path / "fakebin"
    fakebin.mkdir()
    recorder.recorder(fakebin / "git-agentops-hook", "ours", status_file=recorder.status_file)
    monkeypatch.setenv("PATH", f"{fakebin}{os.pathsep}{os.environ['PATH']}")
    return recorder


def init(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "agentops-init", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        timeout=60,
        check=False,
    )


def install(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = init(cwd, "--hooks", "--yes", *args)
    assert done.returncode == 0, done.stderr
    return done


def snapshot(directory: Path) -> dict[str, tuple[int, bytes | str]]:
    """Every entry: its mode and content (a symlink: its target)."""
    out: dict[str, tuple[int, bytes | str]] = {}
    for path in sorted(directory.iterdir()) if directory.exists() else []:
        info = path.lstat()
        if path.is_symlink():
            body: bytes | str = os.readlink(path)
        else:
            body = b"<dir>" if path.is_dir() else path.read_bytes()
        out[path.name] = (info.st_mode, body)
    return out


def commit(repo: Path, name: str = "a.txt", *, check: bool = True, env: dict[str, str] | None = None) -> Any:
    (repo / name).write_text(f"{name}\n")
    git(repo, "add", name)
    return subprocess.run(
        ["git", "commit", "-q", "-m", f"add {name}"],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=check,
    )


# --- install, reinstall, uninstall -------------------------------------------------------------------------------


def test_install_writes_marked_0755_shims_and_reinstalling_changes_nothing(repo_path: Path) -> None:
    hooks = repo_path / ".git" / "hooks"
    first = install(repo_path)
    assert "Will install:" in first.stdout and "$GIT_COMMON_DIR/hooks" in first.stdout
    for name in HOOK_NAMES:
        path = hooks / name
        assert stat.S_IMODE(path.stat().st_mode) == 0o755
        lines = path.read_text().splitlines()
        assert lines[0] == "#!/bin/sh" and lines[1] == f"{MARKER}: {name}"
        assert 'git-agentops-hook "$hook" "$@"' in path.read_text()
    before = {p.name: (p.read_bytes(), p.stat().st_ino, p.stat().st_mtime_ns) for p in hooks.iterdir()}
    again = init(repo_path, "--hooks", "--json")  # nothing to change: no --yes needed
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert doc["changed"] is False and {h["action"] for h in doc["hooks"]} == {"unchanged"}
    after = {p.name: (p.read_bytes(), p.stat().st_ino, p.stat().st_mtime_ns) for p in hooks.iterdir()}
    assert after == before
    assert not [p for p in hooks.iterdir() if p.name.endswith(".legacy")]


def test_dry_run_writes_nothing_and_no_terminal_without_yes_is_refused(repo_path: Path) -> None:
    hooks = repo_path / ".git" / "hooks"
    (hooks / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    before = snapshot(hooks)
    dry = init(repo_path, "--hooks", "--dry-run")
    assert dry.returncode == 0 and "Would install:" in dry.stdout and "pre-commit.legacy" in dry.stdout
    dry_json = json.loads(init(repo_path, "--hooks", "--dry-run", "--json").stdout)
    assert dry_json["dryRun"] is True and dry_json["changed"] is False
    assert {h["name"]: h["action"] for h in dry_json["hooks"]}["pre-commit"] == "chain"
    refused = init(repo_path, "--hooks")
    assert refused.returncode == 3 and refused.stderr.startswith("error[CONFIRMATION_REQUIRED]: ")
    assert "Will install:" in refused.stdout  # the plan is printed before asking
    refused_json = init(repo_path, "--hooks", "--json")
    assert refused_json.returncode == 3 and json.loads(refused_json.stderr)["error"]["code"] == "CONFIRMATION_REQUIRED"
    assert snapshot(hooks) == before
    assert not (repo_path / ".agentops").exists()  # --hooks writes no policy


def test_json_install_and_uninstall(repo_path: Path) -> None:
    doc = json.loads(install(repo_path, "--json").stdout)
    assert doc["changed"] is True and doc["operation"] == "install" and doc["source"] == "common-dir"
    assert doc["dir"] == str(repo_path / ".git" / "hooks")
    assert [h["name"] for h in doc["hooks"]] == list(HOOK_NAMES)
    assert doc["fallback"][1:] == ["-m", "git_agentops.cli.hook"]
    gone = init(repo_path, "--uninstall-hooks", "--yes", "--json")
    assert gone.returncode == 0, gone.stderr
    assert {h["action"] for h in json.loads(gone.stdout)["hooks"]} == {"remove"}
    assert not any((repo_path / ".git" / "hooks" / n).exists() for n in HOOK_NAMES)


def test_uninstall_restores_foreign_hooks_exactly(repo_path: Path, log: Log) -> None:
    hooks = repo_path / ".git" / "hooks"
    foreign = hooks / "pre-commit"
    foreign.write_bytes(b"#!/bin/sh\n# someone else's\nprintf '\\001'\nexit 0")  # no final newline
    foreign.chmod(0o750)
    not_executable = hooks / "reference-transaction"
    not_executable.write_bytes(b"#!/bin/sh\nexit 1\n")
    not_executable.chmod(0o644)  # git does not run it, so neither may the shim: it would refuse every ref update
    scripts = repo_path / "scripts"
    scripts.mkdir()
    (scripts / "pre-push").write_text("#!/bin/sh\nexit 0\n")
    (scripts / "pre-push").chmod(0o755)
    (hooks / "pre-push").symlink_to("../../scripts/pre-push")
    inode = foreign.stat().st_ino
    before = snapshot(hooks)
    out = install(repo_path).stdout
    assert "keep the existing hook as pre-commit.legacy (it runs first" in out
    assert "reference-transaction.legacy (not executable: git did not run it, nor will the shim)" in out
    assert (hooks / "pre-commit.legacy").read_bytes() == before["pre-commit"][1]
    assert (hooks / "pre-commit.legacy").stat().st_ino == inode  # renamed, not copied
    assert os.readlink(hooks / "pre-push.legacy") == "../../scripts/pre-push"
    commit(repo_path)  # the non-executable reference-transaction.legacy would refuse this if the shim ran it
    git(repo_path, "update-ref", "refs/agentops/runs/r/state", "HEAD")
    assert [c.args[0] for c in log.calls()] == ["pre-commit", "reference-transaction"]
    install(repo_path)  # reinstall: no double chaining
    assert not (hooks / "pre-commit.legacy.legacy").exists()
    assert (hooks / "pre-commit.legacy").read_bytes() == before["pre-commit"][1]
    gone = init(repo_path, "--uninstall-hooks", "--yes")
    assert gone.returncode == 0, gone.stderr
    assert "put pre-commit.legacy back as pre-commit" in gone.stdout
    assert snapshot(hooks) == before
    assert foreign.stat().st_ino == inode


def test_hook_paths_in_the_way_are_conflicts_and_nothing_changes(repo_path: Path) -> None:
    hooks = repo_path / ".git" / "hooks"
    (hooks / "pre-push").mkdir()
    before = snapshot(hooks)
    done = init(repo_path, "--hooks", "--yes")
    assert done.returncode == 3 and done.stderr.startswith("error[HOOKS_CONFLICT]: ") and "directory" in done.stderr
    assert snapshot(hooks) == before
    (hooks / "pre-push").rmdir()
    (hooks / "pre-push").symlink_to("nowhere")
    assert init(repo_path, "--hooks", "--yes").stderr.startswith("error[HOOKS_CONFLICT]: ")
    (hooks / "pre-push").unlink()
    (hooks / "pre-push").symlink_to(hooks.parent)  # a symlink to a directory
    assert init(repo_path, "--hooks", "--yes").stderr.startswith("error[HOOKS_CONFLICT]: ")
    (hooks / "pre-push").unlink()
    (hooks / "pre-push").write_text("#!/bin/sh\n")
    (hooks / "pre-push.legacy").write_text("#!/bin/sh\n")  # two foreign hooks: nothing can be chained
    conflict = init(repo_path, "--hooks", "--yes")
    assert conflict.returncode == 3 and "pre-push.legacy exists too" in conflict.stderr
    assert not (hooks / "pre-commit").exists()


def test_mode_flags_are_checked(repo_path: Path, tmp_path: Path) -> None:
    assert init(repo_path, "--hooks", "--uninstall-hooks").returncode == 2
    assert init(repo_path, "--hooks", "--force").returncode == 2
    server = init(repo_path, "--server", "--yes")
    assert server.returncode == 2 and server.stderr.startswith("error[USAGE]: ") and "not bare" in server.stderr
    bare = tmp_path / "bare.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    assert init(bare, "--hooks", "--yes").stderr.startswith("error[USAGE]: ")


def test_an_interrupted_chaining_is_finished_by_the_next_install(repo_path: Path, log: Log) -> None:
    hooks = repo_path / ".git" / "hooks"
    log.recorder(hooks / "pre-commit.legacy", "legacy")  # renamed, then the install died before writing the shim
    out = install(repo_path).stdout
    assert "write the shim; pre-commit.legacy runs first" in out
    commit(repo_path)
    assert [c.who for c in log.calls()] == ["legacy", "ours"]


def test_a_hooks_directory_that_cannot_be_written_is_a_coded_refusal(
    repo_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hooks = repo_path / ".git" / "hooks"
    (hooks / "pre-push").write_text("#!/bin/sh\n")
    steps = plan_install(hooks, HOOK_NAMES, python="/p", module="/m")

    def denied(src: object, dst: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", denied)  # as in a read-only shared core.hooksPath
    with pytest.raises(AgentOpsError) as refused:
        apply(hooks, steps)
    assert refused.value.code == "HOOKS_CONFLICT" and "Permission denied" in refused.value.message
    monkeypatch.undo()
    apply(hooks, plan_install(hooks, HOOK_NAMES, python="/p", module="/m"))  # the same command again finishes
    assert (hooks / "pre-push.legacy").read_text() == "#!/bin/sh\n"
    assert all(MARKER in (hooks / n).read_text() for n in HOOK_NAMES)
    assert not [p for p in hooks.iterdir() if p.name.endswith(".tmp")]


def test_a_missing_hooks_directory_is_created(repo_path: Path, log: Log) -> None:
    shutil.rmtree(repo_path / ".git" / "hooks")
    install(repo_path)
    commit(repo_path)
    assert [c.args for c in log.ours()] == [["pre-commit"]]


# --- the shims, fired by git -------------------------------------------------------------------------------------


def test_shims_call_our_hook_with_type_args_and_env(repo_path: Path, tmp_path: Path, log: Log) -> None:
    install(repo_path)
    commit(repo_path)
    assert [(c.args, c.stdin, c.agentops_hook) for c in log.ours()] == [(["pre-commit"], b"", "1")]
    log.clear()
    git(repo_path, "switch", "-q", "-c", "side")
    commit(repo_path, "b.txt")
    git(repo_path, "switch", "-q", "main")
    commit(repo_path, "c.txt")
    log.clear()
    git(repo_path, "merge", "-q", "--no-edit", "side")
    assert [c.args for c in log.ours()] == [["pre-merge-commit"], ["post-merge", "0"]]
    log.clear()
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(repo_path, "push", "-q", str(remote), "main")
    head = git(repo_path, "rev-parse", "HEAD")
    (push,) = log.ours()
    assert push.args == ["pre-push", str(remote), str(remote)]
    assert push.stdin == f"refs/heads/main {head} refs/heads/main {ZERO}\n".encode()


def test_our_refusal_refuses_the_commit(repo_path: Path, log: Log) -> None:
    install(repo_path)
    log.status_file.write_text("1")
    done = commit(repo_path, check=False)
    assert done.returncode != 0 and len(log.ours()) == 1
    assert git(repo_path, "log", "--format=%s") == "initial"


def test_a_foreign_hook_runs_first_and_its_refusal_stops_git(repo_path: Path, log: Log) -> None:
    hooks = repo_path / ".git" / "hooks"
    log.recorder(hooks / "pre-commit", "legacy")  # its status file stays hooks/pre-commit.status
    install(repo_path)
    commit(repo_path)
    assert [(c.who, c.args, c.agentops_hook) for c in log.calls()] == [
        ("legacy", [], "unset"),
        ("ours", ["pre-commit"], "1"),
    ]
    log.clear()
    (hooks / "pre-commit.status").write_text("7")
    done = commit(repo_path, "b.txt", check=False)
    assert done.returncode != 0 and [c.who for c in log.calls()] == ["legacy"]  # ours never reached
    assert git(repo_path, "log", "-1", "--format=%s") == "add a.txt"


def test_stdin_reaches_both_hooks_intact(repo_path: Path, tmp_path: Path, log: Log) -> None:
    hooks = repo_path / ".git" / "hooks"
    log.recorder(hooks / "pre-push", "legacy")
    log.recorder(hooks / "reference-transaction", "legacy")
    install(repo_path)
    head = git(repo_path, "rev-parse", "HEAD")
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    log.clear()
    git(repo_path, "push", "-q", str(remote), "main", "HEAD:refs/heads/other")
    push = [c for c in log.calls() if c.args[-2:] == [str(remote), str(remote)]]
    expected = f"refs/heads/main {head} refs/heads/main {ZERO}\nHEAD {head} refs/heads/other {ZERO}\n".encode()
    assert [(c.who, c.stdin) for c in push] == [("legacy", expected), ("ours", expected)]
    log.clear()
    git(repo_path, "update-ref", "refs/agentops/runs/r/state", head)
    line = f"{ZERO} {head} refs/agentops/runs/r/state\n".encode()
    assert [(c.who, c.args, c.stdin) for c in log.calls()] == [
        ("legacy", ["prepared"], line),
        ("ours", ["reference-transaction", "prepared"], line),
        ("legacy", ["committed"], line),
    ]


def test_reference_transaction_starts_our_hook_only_for_our_refs_when_prepared(repo_path: Path, log: Log) -> None:
    install(repo_path)
    head = git(repo_path, "rev-parse", "HEAD")
    log.clear()
    git(repo_path, "update-ref", "refs/heads/x", "HEAD")
    git(repo_path, "update-ref", "-d", "refs/heads/x")
    assert log.calls() == []
    git(repo_path, "update-ref", "refs/agentops/runs/r/state", "HEAD")
    (call,) = log.calls()
    assert call.args == ["reference-transaction", "prepared"]
    assert call.stdin == f"{ZERO} {head} refs/agentops/runs/r/state\n".encode()
    log.clear()
    git(repo_path, "update-ref", "refs/notes/agentops/receipts", "HEAD")
    assert [c.args for c in log.calls()] == [["reference-transaction", "prepared"]]
    log.clear()
    log.status_file.write_text("1")  # our refusal aborts the transaction; "aborted" does not start us again
    refused = subprocess.run(["git", "update-ref", "refs/agentops/runs/s/state", "HEAD"], cwd=repo_path, check=False)
    assert refused.returncode != 0 and len(log.calls()) == 1
    assert git(repo_path, "for-each-ref", "refs/agentops/runs/s") == ""


def test_recursion_guard(repo_path: Path, log: Log) -> None:
    hooks = repo_path / ".git" / "hooks"
    log.recorder(hooks / "pre-commit", "legacy")
    install(repo_path)
    commit(repo_path, env={"AGENTOPS_HOOK": "1"})  # as if run by a git command of our own hook
    assert [c.who for c in log.calls()] == ["legacy"]  # the previous hook still runs; ours does not recurse
    log.clear()
    done = subprocess.run(
        [str(hooks / "reference-transaction"), "prepared"],
        cwd=repo_path,
        input=f"{ZERO} {ZERO} refs/agentops/runs/r/state\n",
        text=True,
        env={**os.environ, "AGENTOPS_HOOK": "1"},
        check=False,
    )
    assert done.returncode == 0 and log.ours() == []


def test_fallback_to_python_dash_m_when_not_on_path(repo_path: Path, tmp_path: Path) -> None:
    install(repo_path)
    shim = (repo_path / ".git" / "hooks" / "pre-commit").read_text()
    assert f"module={hook_module()}" in shim
    # PATH without git-agentops-hook; a stand-in package first on PYTHONPATH proves what the shim runs
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if not Path(d, "git-agentops-hook").exists())
    assert shutil.which("git") and shutil.which("git-agentops-hook", path=path) is None
    fake = tmp_path / "fakepkg" / "git_agentops" / "cli"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    record = tmp_path / "fallback.json"
    (fake / "hook.py").write_text(
        "import json, os, sys\n"
        f"open({str(record)!r}, 'a').write(json.dumps([sys.executable, sys.argv, sys.stdin.read(),"
        " os.environ.get('AGENTOPS_HOOK')]) + '\\n')\n"
    )
    env = {"PATH": path, "PYTHONPATH": str(tmp_path / "fakepkg")}
    commit(repo_path, env=env)
    head = git(repo_path, "rev-parse", "HEAD")
    subprocess.run(
        ["git", "update-ref", "refs/agentops/runs/q/state", "HEAD"],
        cwd=repo_path,
        env={**os.environ, **env},
        check=True,
    )
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    python = shlex.split(shim.split("\npython=", 1)[1].split("\n", 1)[0])[0]
    assert [(Path(c[0]).name, c[1][1:], c[3]) for c in calls] == [
        (Path(python).name, ["pre-commit"], "1"),
        (Path(python).name, ["reference-transaction", "prepared"], "1"),
    ]
    assert calls[1][2] == f"{ZERO} {head} refs/agentops/runs/q/state\n"
    assert Path(calls[0][1][0]) == fake / "hook.py"


def test_neither_on_path_nor_installed_warns_once_and_lets_git_go_on(repo_path: Path) -> None:
    hooks = repo_path / ".git" / "hooks"
    apply(hooks, plan_install(hooks, HOOK_NAMES, python="/nonexistent/python", module="/nonexistent/hook.py"))
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if not Path(d, "git-agentops-hook").exists())
    done = commit(repo_path, env={"PATH": path})
    assert done.returncode == 0
    assert done.stderr.splitlines() == [
        "warning: no git-agentops-hook on PATH and no /nonexistent/hook.py: the git-agentops pre-commit hook did "
        "not run"
    ]


# --- where the hooks go ------------------------------------------------------------------------------------------


def test_relative_core_hooks_path_resolves_against_the_top_of_the_worktree(repo_path: Path, log: Log) -> None:
    git(repo_path, "config", "core.hooksPath", ".githooks")
    sub = repo_path / "sub" / "dir"
    sub.mkdir(parents=True)
    out = install(sub).stdout  # from a subdirectory: still the top, as git does
    assert "relative" in out and str(repo_path / ".githooks") in out
    assert all((repo_path / ".githooks" / n).is_file() for n in HOOK_NAMES)
    assert not (sub / ".githooks").exists() and not (repo_path / ".git" / "hooks" / "pre-commit").exists()
    commit(repo_path)
    assert [c.args for c in log.ours()] == [["pre-commit"]]


def test_absolute_and_home_core_hooks_path(repo_path: Path, tmp_path: Path, hermetic: Path, log: Log) -> None:
    shared = tmp_path / "shared-hooks"
    git(repo_path, "config", "core.hooksPath", str(shared))
    doc = json.loads(install(repo_path, "--json").stdout)
    assert doc["dir"] == str(shared) and doc["source"] == "core.hooksPath" and doc["relative"] is False
    commit(repo_path)
    assert [c.args for c in log.ours()] == [["pre-commit"]]
    git(repo_path, "config", "core.hooksPath", "~/hooks")
    assert json.loads(install(repo_path, "--json").stdout)["dir"] == str(hermetic / "hooks")


def test_a_linked_worktree_uses_the_common_hooks(repo_path: Path, tmp_path: Path, log: Log) -> None:
    wt = tmp_path / "wt"
    git(repo_path, "worktree", "add", "-q", str(wt), "-b", "side")
    install(wt)
    assert (repo_path / ".git" / "hooks" / "pre-commit").is_file()
    commit(wt)
    assert [c.args for c in log.ours()] == [["pre-commit"]]


def test_server_hook_in_a_bare_repository_runs_on_push(repo_path: Path, tmp_path: Path, log: Log) -> None:
    bare = tmp_path / "shared.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo_path), str(bare))
    log.recorder(bare / "hooks" / "pre-receive", "legacy")
    done = init(bare, "--server", "--yes")
    assert done.returncode == 0, done.stderr
    assert "pre-receive" in done.stdout and (bare / "hooks" / "pre-receive.legacy").exists()
    assert not (bare / "hooks" / "pre-commit").exists()
    old = git(repo_path, "rev-parse", "HEAD")
    commit(repo_path)
    new = git(repo_path, "rev-parse", "HEAD")
    log.clear()
    git(repo_path, "push", "-q", str(bare), "main")
    line = f"{old} {new} refs/heads/main\n".encode()
    assert [(c.who, c.args, c.stdin) for c in log.calls()] == [("legacy", [], line), ("ours", ["pre-receive"], line)]
    log.status_file.write_text("1")
    commit(repo_path, "b.txt")
    refused = subprocess.run(["git", "push", "-q", str(bare), "main"], cwd=repo_path, capture_output=True, check=False)
    assert refused.returncode != 0 and git(bare, "rev-parse", "main") == new
    gone = init(bare, "--uninstall-hooks", "--yes")
    assert gone.returncode == 0 and (bare / "hooks" / "pre-receive").read_text().startswith("#!/bin/sh\ndir=")


# --- sharing the hooks directory with the pre-commit framework ---------------------------------------------------


def test_our_shim_chained_behind_the_pre_commit_framework_is_left_alone(repo_path: Path, log: Log) -> None:
    hooks = repo_path / ".git" / "hooks"
    install(repo_path)
    # what 'pre-commit install' does: keep the hook as .legacy, run it first, then itself
    os.rename(hooks / "pre-commit", hooks / "pre-commit.legacy")
    log.recorder(hooks / "framework-record", "framework")
    framework = (
        b'#!/bin/sh\nhere=$(dirname "$0")\n"$here/pre-commit.legacy" "$@" || exit\nexec "$here/framework-record"\n'
    )
    (hooks / "pre-commit").write_bytes(framework)
    (hooks / "pre-commit").chmod(0o755)
    again = install(repo_path)
    assert "runs our shim as its pre-commit.legacy" in again.stdout
    commit(repo_path)
    assert [(c.who, c.args) for c in log.calls()] == [("ours", ["pre-commit"]), ("framework", [])]
    hooks_check = _doctor_hooks(repo_path)
    assert hooks_check["value"]["behind"] == ["pre-commit"] and hooks_check["status"] == "ok"
    assert init(repo_path, "--uninstall-hooks", "--yes").returncode == 0
    assert (hooks / "pre-commit").read_bytes() == framework and not (hooks / "pre-commit.legacy").exists()


# --- doctor ------------------------------------------------------------------------------------------------------


def _doctor_hooks(cwd: Path) -> dict[str, Any]:
    done = subprocess.run(["git", "agentops-doctor", "--json"], cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return dict({c["id"]: c for c in json.loads(done.stdout)["checks"]}["hooks"])


def test_doctor_reports_missing_installed_chained_and_foreign(repo_path: Path, tmp_path: Path) -> None:
    hooks = repo_path / ".git" / "hooks"
    (hooks / "pre-push").write_text("#!/bin/sh\nexit 0\n")
    (hooks / "pre-push").chmod(0o755)
    before = _doctor_hooks(repo_path)
    assert before["status"] == "warn" and before["remedy"].startswith("git agentops-init --hooks")
    assert before["value"]["hooks"] == {**dict.fromkeys(HOOK_NAMES, "missing"), "pre-push": "foreign"}
    install(repo_path)
    after = _doctor_hooks(repo_path)
    assert after["status"] == "ok" and after["value"]["hooks"] == dict.fromkeys(HOOK_NAMES, "installed")
    assert after["value"]["chained"] == ["pre-push"] and "chained" in after["detail"]
    with (hooks / "post-merge").open("a") as handle:
        handle.write("# edited\n")
    edited = _doctor_hooks(repo_path)
    assert edited["status"] == "warn" and edited["value"]["outdated"] == ["post-merge"]
    git(repo_path, "config", "core.hooksPath", ".githooks")
    moved = _doctor_hooks(repo_path / ".git")  # asked from inside .git: a relative hooksPath cannot resolve
    assert moved["status"] == "warn"
    elsewhere = _doctor_hooks(repo_path)
    assert elsewhere["value"]["dir"] == str(repo_path / ".githooks") and elsewhere["value"]["relative"] is True
    assert set(elsewhere["value"]["hooks"].values()) == {"missing"}
    bare = tmp_path / "shared.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    assert _doctor_hooks(bare)["value"]["hooks"] == {"pre-receive": "missing"}
    assert init(bare, "--server", "--yes").returncode == 0
    assert _doctor_hooks(bare)["status"] == "ok"


# --- the pre-commit framework manifest ---------------------------------------------------------------------------


def _manifest() -> list[dict[str, Any]]:
    """.pre-commit-hooks.yaml is a flat list of flat mappings; read it without a YAML library."""
    hooks: list[dict[str, Any]] = []
    for raw in (ROOT / ".pre-commit-hooks.yaml").read_text().splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if raw.startswith("- "):
            hooks.append({})
            raw = "  " + raw[2:]
        key, _, value = raw.strip().partition(": ")
        value = value.strip()
        parsed: Any = value
        if value.startswith("["):
            parsed = [v.strip() for v in value.strip("[]").split(",")]
        elif value in ("true", "false"):
            parsed = value == "true"
        elif value.startswith('"'):
            parsed = value.strip('"')
        hooks[-1][key] = parsed
    return hooks


def test_pre_commit_framework_manifest() -> None:
    hooks = {h["id"]: h for h in _manifest()}
    assert set(hooks) == {"agentops-pre-commit", "agentops-pre-push"}
    for hook_id, stage in (("agentops-pre-commit", "pre-commit"), ("agentops-pre-push", "pre-push")):
        hook = hooks[hook_id]
        assert hook["entry"] == f"git-agentops-hook {stage}" and hook["language"] == "python"
        assert hook["pass_filenames"] is False and hook["always_run"] is True and hook["stages"] == [stage]


SHELLS = [s for s in ("dash", "bash", "busybox") if shutil.which(s)]


@pytest.mark.parametrize("shell", SHELLS)
def test_the_shim_under_each_shell_passes_stdin_byte_for_byte(repo_path: Path, log: Log, shell: str) -> None:
    hooks = repo_path / ".git" / "hooks"
    log.recorder(hooks / "reference-transaction", "legacy")
    log.recorder(hooks / "pre-push", "legacy")
    install(repo_path)
    argv = [shutil.which(shell) or shell] + (["sh"] if shell == "busybox" else [])
    assert subprocess.run([*argv, "-n", str(ROOT / "hooks" / "shim.sh")], check=False).returncode == 0
    for hook, args, data in [
        ("reference-transaction", ["prepared"], f"{ZERO} {ZERO} refs/agentops/runs/r/state\n\n\n".encode()),
        ("reference-transaction", ["prepared"], f"{ZERO} {ZERO} refs/notes/agentops/evidence".encode()),
        ("pre-push", ["origin", "url with  spaces"], b"refs/heads/a 1 refs/heads/b 2\n\tx\\n %s\n"),
        ("pre-push", ["origin", "u"], b""),
    ]:
        log.clear()
        done = subprocess.run(
            [*argv, str(hooks / hook), *args], cwd=repo_path, input=data, capture_output=True, check=False
        )
        assert done.returncode == 0, done.stderr
        assert [(c.who, c.args, c.stdin) for c in log.calls()] == [
            ("legacy", args, data),
            ("ours", [hook, *args], data),
        ]
    log.clear()
    line = f"{ZERO} {ZERO} refs/heads/x\n".encode()
    for state in ("prepared", "committed", "aborted"):
        subprocess.run([*argv, str(hooks / "reference-transaction"), state], cwd=repo_path, input=line, check=True)
    assert [(c.who, c.args) for c in log.calls()] == [("legacy", [s]) for s in ("prepared", "committed", "aborted")]


def test_the_hook_names_the_fast_path_compares_with_are_exactly_the_hooks_installed() -> None:
    """Invariant: :class:`~git_agentops.hooks.names.HookName` (what :mod:`git_agentops.hooks.fast` dispatches on)
    is the set of hooks installed -- the client's and the server's -- by Git's own names."""
    from git_agentops.hooks.install import ALL_HOOKS
    from git_agentops.hooks.names import HookName

    assert sorted(ALL_HOOKS) == sorted(HookName) == sorted(h.value for h in HookName)
    assert set(HOOK_NAMES) < set(HookName)
