"""Install and uninstall the hook shims without ever losing somebody else's hook.

A hooks directory is shared ground: pre-commit, husky, lefthook, a team's own scripts may already live there, and
``core.hooksPath`` may point it anywhere. So installing is a plan first and an action second:

* every hook path is classified -- absent, our shim (it carries :data:`~git_agentops.hooks.MARKER`), somebody
  else's regular file (or a symlink to one), or something odd (a directory, a FIFO, a dangling symlink), which is
  ``HOOKS_CONFLICT`` before anything is touched;
* a foreign hook is *renamed* to ``<hook>.legacy`` -- a rename keeps its bytes, mode and even its inode -- and the
  shim runs it first and respects its failure; uninstalling renames it back over the shim in one atomic step;
* an installed shim is only ever rewritten in place (never moved to ``.legacy``: that would chain us to ourselves),
  through a temporary file and a rename, so git never runs a half-written hook; identical files are left alone,
  which makes reinstalling a no-op;
* the pre-commit framework uses the same ``.legacy`` convention, so when it was installed after us our shim lives
  on as *its* ``<hook>.legacy``; that is a working chain, left alone (and removed on uninstall).

The shim text is ``hooks/shim.sh`` from the toolkit's data directory, with the hook name, the interpreter and the
module path filled in (``python -m git_agentops.cli.hook`` is its fallback when ``git-agentops-hook`` is not on
``PATH``, as in GUI git clients that do not load the user's shell profile).
"""

from __future__ import annotations

import enum
import os
import shlex
import stat
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Final

from ..errors import AgentOpsError
from ..resources import data_dir
from . import HOOK_NAMES, MARKER

SERVER_HOOKS: Final = ("pre-receive",)
ALL_HOOKS: Final = HOOK_NAMES + SERVER_HOOKS
LEGACY: Final = ".legacy"
SHIM_MODE: Final = 0o755
_HEAD = 4096  # the marker sits on line 2


class Kind(enum.StrEnum):
    """What is at a hook path: nothing, our shim, or somebody else's hook."""

    MISSING = "missing"
    OURS = "ours"
    FOREIGN = "foreign"


class HookState(enum.StrEnum):
    """A hook as doctor reports it (``--json`` writes these strings)."""

    INSTALLED = "installed"
    FOREIGN = "foreign"
    MISSING = "missing"
    CONFLICT = "conflict"


def hook_module() -> Path:
    """The file ``python -m git_agentops.cli.hook`` runs (its path only: the hook itself is not imported)."""
    return Path(__file__).parent.parent / "cli" / "hook.py"


@cache
def _template() -> str:
    return (data_dir("hooks") / "shim.sh").read_text("utf-8")


def render_shim(name: str, *, python: str, module: str) -> bytes:
    """The shim for hook ``name``: the template with the hook name, interpreter and module path shell-quoted."""
    values = {"@HOOK@": shlex.quote(name), "@PYTHON@": shlex.quote(python), "@MODULE@": shlex.quote(module)}
    text = _template()
    for placeholder, value in values.items():
        text = text.replace(placeholder, value)
    return text.encode("utf-8")


@dataclass(frozen=True, slots=True)
class Target:
    """Where git looks for this repository's hooks, and why there."""

    directory: Path
    common_dir: Path
    bare: bool
    top: Path | None  # the top of the worktree init ran in (None in a bare repository)
    hooks_path: str | None  # core.hooksPath as configured ('~' expanded by git); None when unset

    @property
    def relative(self) -> bool:
        return self.hooks_path is not None and not Path(self.hooks_path).is_absolute()

    def describe(self) -> str:
        if self.hooks_path is None:
            return f"{self.directory} ($GIT_COMMON_DIR/hooks)"
        if not self.relative:
            return f"{self.directory} (core.hooksPath)"
        base = "the git directory" if self.bare else f"the top of the worktree {self.top}"
        note = f"{self.directory} (core.hooksPath {self.hooks_path!r} is relative: resolved against {base} as git does"
        return note + (")" if self.bare else "; each other worktree resolves it against its own top)")

    def to_json(self) -> dict[str, Any]:
        return {
            "dir": str(self.directory),
            "source": "core.hooksPath" if self.hooks_path is not None else "common-dir",
            "hooksPath": self.hooks_path,
            "relative": self.relative,
            "bare": self.bare,
        }


def _git(cwd: Path, git: str, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([git, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise AgentOpsError("GIT_FAILED", f"git {args[0]} could not run in {cwd}: {exc}") from exc


def locate(cwd: Path, *, git: str = "git") -> Target:
    """The hooks directory of the repository around ``cwd``: ``core.hooksPath`` when set, else the common one.

    A relative ``core.hooksPath`` resolves against the top of the worktree (the git directory when bare), which is
    where git runs hooks. Raises ``REPO_NOT_FOUND``, ``GIT_FAILED``, ``USAGE`` (a relative ``core.hooksPath`` asked
    from inside the git directory), ``HOOKS_CONFLICT`` (an empty ``core.hooksPath``).
    """
    found = _git(cwd, git, "rev-parse", "--path-format=absolute", "--git-common-dir", "--is-bare-repository")
    lines = found.stdout.splitlines()
    if found.returncode != 0 or len(lines) != 2:
        raise AgentOpsError("REPO_NOT_FOUND", f"{cwd} is not inside a Git repository: {found.stderr.strip()}")
    common_dir, bare = Path(lines[0]), lines[1] == "true"
    top = None
    if not bare:
        shown = _git(cwd, git, "rev-parse", "--show-toplevel")
        top = Path(shown.stdout.strip()) if shown.returncode == 0 and shown.stdout.strip() else None
    configured = _git(cwd, git, "config", "--type=path", "--get", "core.hooksPath")
    if configured.returncode not in (0, 1):
        raise AgentOpsError("GIT_FAILED", f"git config core.hooksPath failed: {configured.stderr.strip()}")
    value = configured.stdout.rstrip("\n") if configured.returncode == 0 else None
    if value is None:
        return Target(common_dir / "hooks", common_dir, bare, top, None)
    if not value:
        raise AgentOpsError("HOOKS_CONFLICT", "core.hooksPath is set but empty: unset it or name a directory")
    directory = Path(value)
    if not directory.is_absolute():
        base = common_dir if bare else top
        if base is None:
            raise AgentOpsError(
                "USAGE", f"core.hooksPath {value!r} is relative to the top of the worktree: run this inside it"
            )
        directory = base / directory
    return Target(directory, common_dir, bare, top, value)


def _has_marker(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return MARKER.encode() in handle.read(_HEAD)
    except OSError as exc:
        raise AgentOpsError("HOOKS_CONFLICT", f"{path} cannot be read: {exc}") from exc


def classify(path: Path) -> Kind:
    """What is at a hook path. Raises ``HOOKS_CONFLICT`` for what can be neither replaced nor chained."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return Kind.MISSING
    except OSError as exc:
        raise AgentOpsError("HOOKS_CONFLICT", f"{path} cannot be examined: {exc}") from exc
    if stat.S_ISLNK(info.st_mode):
        try:
            pointed = path.stat()
        except OSError as exc:
            raise AgentOpsError("HOOKS_CONFLICT", f"{path} is a symlink to nothing usable ({exc})") from exc
        if not stat.S_ISREG(pointed.st_mode):
            raise AgentOpsError("HOOKS_CONFLICT", f"{path} is a symlink to something that is not a file")
        if _has_marker(path):
            raise AgentOpsError(
                "HOOKS_CONFLICT", f"{path} is a symlink to a git-agentops shim ({path.resolve()}); remove the link"
            )
        return Kind.FOREIGN
    if not stat.S_ISREG(info.st_mode):
        what = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise AgentOpsError("HOOKS_CONFLICT", f"{path} is {what}: move it away, then install again")
    return Kind.OURS if _has_marker(path) else Kind.FOREIGN


class Action(enum.StrEnum):
    WRITE = "write"  # nothing there: write the shim
    CHAIN = "chain"  # a foreign hook: keep it as <hook>.legacy (run first), write the shim
    UPDATE = "update"  # our shim with other text or mode: rewrite it
    UNCHANGED = "unchanged"  # our shim, byte-identical and 0755
    BEHIND = "behind"  # another tool's hook runs our shim as its <hook>.legacy: a working chain
    REMOVE = "remove"  # delete our shim
    RESTORE = "restore"  # put <hook>.legacy back over our shim
    UNCHAIN = "unchain"  # delete our shim kept as <hook>.legacy behind another tool's hook
    ABSENT = "absent"  # nothing of ours
    FOREIGN = "foreign"  # somebody else's hook, left alone


_CHANGES = frozenset({Action.WRITE, Action.CHAIN, Action.UPDATE, Action.REMOVE, Action.RESTORE, Action.UNCHAIN})


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    action: Action
    path: Path
    content: bytes | None = None  # the shim to write
    legacy_runs: bool = False  # an executable <hook>.legacy will run first (chained now, or already there)
    drop_legacy: bool = False  # <hook>.legacy is a stale copy of our shim: delete it

    @property
    def legacy(self) -> Path:
        return self.path.with_name(self.path.name + LEGACY)

    @property
    def changes(self) -> bool:
        return self.action in _CHANGES

    def describe(self) -> str:
        legacy = self.legacy.name
        first = f"; {legacy} runs first" if self.legacy_runs else ""
        first += f"; remove the stale copy of our shim kept as {legacy}" if self.drop_legacy else ""
        return {
            Action.WRITE: f"write the shim{first}",
            Action.CHAIN: f"keep the existing hook as {legacy} (it runs first, its failure stops git), write the shim"
            if self.legacy_runs
            else f"keep the existing hook as {legacy} (not executable: git did not run it, nor will the shim), "
            "write the shim",
            Action.UPDATE: f"rewrite the shim (its text or mode changed){first}",
            Action.UNCHANGED: f"installed, unchanged{first}",
            Action.BEHIND: f"another tool's hook runs our shim as its {legacy}: left as it is",
            Action.REMOVE: f"remove the shim{first}",
            Action.RESTORE: f"remove the shim, put {legacy} back as {self.name}",
            Action.UNCHAIN: f"another tool's hook stays; remove our shim kept as {legacy}",
            Action.ABSENT: "not installed",
            Action.FOREIGN: "another tool's hook: left alone",
        }[self.action]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "action": str(self.action), "path": str(self.path), "legacyRuns": self.legacy_runs}


def _check_directory(directory: Path) -> None:
    if directory.exists() and not directory.is_dir():
        raise AgentOpsError("HOOKS_CONFLICT", f"the hooks directory {directory} is not a directory")
    if not directory.exists() and os.path.lexists(directory):
        raise AgentOpsError("HOOKS_CONFLICT", f"the hooks directory {directory} is a dangling symlink")


def plan_install(directory: Path, names: Sequence[str], *, python: str, module: str) -> list[Step]:
    """What installing ``names`` into ``directory`` would do; changes nothing. Raises ``HOOKS_CONFLICT``."""
    _check_directory(directory)
    steps = []
    for name in names:
        path = directory / name
        shim = render_shim(name, python=python, module=module)
        kind = classify(path)
        legacy = classify(path.with_name(name + LEGACY))
        stale = legacy is Kind.OURS  # a copy of our shim as <hook>.legacy with no foreign hook in front: drop it
        runs = legacy is Kind.FOREIGN and os.access(path.with_name(name + LEGACY), os.X_OK)
        if kind is Kind.MISSING:
            steps.append(Step(name, Action.WRITE, path, shim, legacy_runs=runs, drop_legacy=stale))
        elif kind is Kind.OURS:
            same = path.read_bytes() == shim and stat.S_IMODE(path.stat().st_mode) == SHIM_MODE
            action = Action.UNCHANGED if same and not stale else Action.UPDATE
            steps.append(Step(name, action, path, shim, legacy_runs=runs, drop_legacy=stale))
        elif legacy is Kind.OURS:
            steps.append(Step(name, Action.BEHIND, path))
        elif legacy is Kind.FOREIGN:
            raise AgentOpsError(
                "HOOKS_CONFLICT",
                f"{path} is another tool's hook and {path.name}{LEGACY} exists too: nothing can be chained; "
                "merge or remove one of them, then install again",
            )
        else:
            steps.append(Step(name, Action.CHAIN, path, shim, legacy_runs=os.access(path, os.X_OK)))
    return steps


def plan_uninstall(directory: Path, names: Sequence[str]) -> list[Step]:
    """What uninstalling would do: our shims go, chained hooks come back. Raises ``HOOKS_CONFLICT``."""
    _check_directory(directory)
    steps = []
    for name in names:
        path = directory / name
        kind = classify(path)
        legacy = classify(path.with_name(name + LEGACY))
        if kind is Kind.OURS:
            if legacy is Kind.FOREIGN:
                steps.append(Step(name, Action.RESTORE, path))
            else:
                steps.append(Step(name, Action.REMOVE, path, drop_legacy=legacy is Kind.OURS))
        elif legacy is Kind.OURS:
            steps.append(Step(name, Action.UNCHAIN, path))
        else:
            steps.append(Step(name, Action.FOREIGN if kind is Kind.FOREIGN else Action.ABSENT, path))
    return steps


def _write_shim(path: Path, content: bytes) -> None:
    tmp = path.with_name(f".{path.name}.agentops-{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, SHIM_MODE)
    try:
        try:
            os.write(fd, content)
            os.fchmod(fd, SHIM_MODE)  # whatever the umask
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def apply(directory: Path, steps: Sequence[Step]) -> None:
    """Carry out a plan from :func:`plan_install` or :func:`plan_uninstall`.

    Each step is safe to interrupt: a chained hook is renamed before the shim is written, so a crash in between
    leaves ``<hook>.legacy`` and no shim, which the next install chains. Raises ``HOOKS_CONFLICT`` when a
    ``<hook>.legacy`` appeared since the plan was made, or the directory cannot be written (the steps before the
    failing one are done; running the same command again finishes the job).
    """
    current = directory
    try:
        if any(step.changes for step in steps):
            directory.mkdir(parents=True, exist_ok=True)
        for step in steps:
            current = step.path
            _apply(step)
    except OSError as exc:
        raise AgentOpsError(
            "HOOKS_CONFLICT", f"{current}: {exc.strerror or exc}; fix that and run the same command again"
        ) from exc


def _apply(step: Step) -> None:
    if step.action is Action.CHAIN:
        if os.path.lexists(step.legacy):
            raise AgentOpsError("HOOKS_CONFLICT", f"{step.legacy} appeared meanwhile; nothing more was changed")
        os.rename(step.path, step.legacy)
    if step.action in (Action.WRITE, Action.CHAIN, Action.UPDATE):
        assert step.content is not None
        _write_shim(step.path, step.content)
    elif step.action is Action.RESTORE:
        os.replace(step.legacy, step.path)  # one rename: git sees the old hook or the shim, never neither
    elif step.action is Action.REMOVE:
        step.path.unlink()
    if step.action is Action.UNCHAIN or step.drop_legacy:
        step.legacy.unlink()


@dataclass(frozen=True, slots=True)
class HookStatus:
    """One hook as doctor sees it."""

    name: str
    state: HookState
    chained: bool = False  # installed, and a foreign <hook>.legacy runs first
    behind: bool = False  # foreign, and it runs our shim as its <hook>.legacy
    outdated: bool = False  # installed, but not what 'git agentops-init --hooks' would write now
    problem: str | None = None


def _current(path: Path, name: str) -> bool:
    """Whether an installed shim is what this toolkit's template gives for the interpreter it names."""
    try:
        text = path.read_bytes()
        mode = stat.S_IMODE(path.stat().st_mode)
        values = {}
        for line in text.decode("utf-8").splitlines()[:12]:
            key, sep, value = line.partition("=")
            if sep and key in ("python", "module"):
                values[key] = " ".join(shlex.split(value))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    if set(values) != {"python", "module"}:
        return False
    return mode == SHIM_MODE and text == render_shim(name, python=values["python"], module=values["module"])


def inspect(directory: Path, names: Sequence[str]) -> list[HookStatus]:
    """The state of each hook in ``names``; never raises for what it finds (an odd file is ``conflict``)."""
    out = []
    for name in names:
        path = directory / name
        try:
            kind = classify(path)
            legacy = classify(path.with_name(name + LEGACY))
        except AgentOpsError as exc:
            out.append(HookStatus(name, HookState.CONFLICT, problem=exc.message))
            continue
        if kind is Kind.OURS:
            out.append(
                HookStatus(name, HookState.INSTALLED, chained=legacy is Kind.FOREIGN, outdated=not _current(path, name))
            )
        elif kind is Kind.FOREIGN:
            out.append(HookStatus(name, HookState.FOREIGN, behind=legacy is Kind.OURS))
        else:
            out.append(HookStatus(name, HookState.MISSING))
    return out
