"""The git CLI with every command-executing setting neutralised: how the toolkit runs git near agents.

Agents can write the repository's shared config (``$GIT_COMMON_DIR/config``) and ``~/.gitconfig``. Several
settings there make git *run a program*: ``core.fsmonitor`` (on every status, checkout, reset), hooks
(``core.hooksPath``, ``worktree add`` fires post-checkout), filter drivers (``filter.<name>.clean``/``smudge``/
``process`` with a ``.gitattributes`` line the agent commits), merge drivers, diff drivers and external diffs, the
ssh command, the editor, auto-gc's hook. One of them set by a worker ran its script inside the supervisor's own
``git reset --hard`` after the worker was stopped.

So every git the toolkit runs on a repository an agent can write goes through :func:`run_git`:

* the global and system config are not read at all (``GIT_CONFIG_GLOBAL=/dev/null``, ``GIT_CONFIG_NOSYSTEM=1``);
* every inherited ``GIT_*`` variable is dropped (``GIT_CONFIG_PARAMETERS``, ``GIT_EXTERNAL_DIFF``, ``GIT_DIR``...),
  except the ones a caller passes on purpose;
* ``-c`` overrides switch off the fixed settings (:data:`NEUTRAL`), and, for every filter, merge or diff driver
  the repository's own config names, its commands (found by :func:`driver_overrides`; an empty value disables a
  filter or diff command in git, a merge driver becomes ``git merge-file``).

libgit2 (pygit2) runs none of these programs, which is why the toolkit's own reads and writes of objects and refs
go through it; this module is for what only the git CLI does well (status with every ignore source, read-tree,
merge-tree, worktree bookkeeping).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from ..errors import AgentOpsError

NEUTRAL: Final[tuple[str, ...]] = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.untrackedCache=false",
    "core.sshCommand=false",
    "core.editor=false",
    "sequence.editor=false",
    "core.pager=cat",
    "core.askPass=",
    "core.alternateRefsCommand=",
    "credential.helper=",
    "diff.external=",
    "gc.auto=0",
    "maintenance.auto=false",
    "protocol.ext.allow=never",
)
"""Settings that run a program, switched off on every call (empty values disable a command in git)."""

DRIVER_KEYS: Final = {
    "filter": ("clean", "smudge", "process"),
    "merge": ("driver",),
    "diff": ("command", "textconv"),
}
"""Per-driver sections and the keys of each that name a command."""

REPLACEMENTS: Final = {"merge": "git merge-file --quiet %A %O %B"}
"""What a driver's command becomes. An empty filter or diff command means "none" to git; an empty merge driver
fails the merge, so a merge driver becomes git's own three-way text merge (exit status: conflicts)."""

KEPT_ENV: Final = ("GIT_INDEX_FILE", "GIT_DIR", "GIT_WORK_TREE", "GIT_ALTERNATE_OBJECT_DIRECTORIES")
"""``GIT_*`` variables a caller may pass deliberately through ``env``."""


_CALLER: dict[str, str] = {"PATH": os.defpath}


def set_base_environment(environ: Mapping[str, str]) -> None:
    """The caller's environment, given once by the CLI boundary (core code never reads ``os.environ``):
    neutralised git calls start from it without its ``GIT_*`` variables. Until then only ``PATH=os.defpath``."""
    _CALLER.clear()
    _CALLER.update(environ)
    _global_excludes.cache_clear()


def neutral_environment(
    environ: Mapping[str, str] | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``environ`` (default: the caller's) without any ``GIT_*`` variable, plus the no-global-config settings,
    plus ``extra``."""
    source = _CALLER if environ is None else environ
    env = {k: v for k, v in source.items() if not k.startswith("GIT_")}
    env.update({"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"})
    env.setdefault("LC_ALL", "C")
    for key, value in (extra or {}).items():
        if key.startswith("GIT_") and key not in KEPT_ENV:
            raise ValueError(f"{key} cannot be passed to a neutralised git")
        env[key] = value
    return env


_DRIVER_NAME: Final = (  # a pattern (compiled by ``re`` on first use: the hook fast path never asks)
    r"^(" + "|".join(DRIVER_KEYS) + r")\..+\.(" + "|".join(k for v in DRIVER_KEYS.values() for k in v) + ")$"
)
_DRIVERS: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[tuple[tuple[Path, bytes], ...], tuple[str, ...]]] = {}
"""The last answer of :func:`driver_overrides` in each place: the config files it came from (and their bytes), and
the arguments; at most :data:`_DRIVERS_KEPT` places (a supervisor's job threads share them: :data:`_DRIVERS_LOCK`)."""
_DRIVERS_KEPT: Final = 64
_DRIVERS_LOCK: Final = threading.Lock()


def driver_overrides(cwd: Path, env: Mapping[str, str]) -> list[str]:
    """``-c`` arguments that blank the command of every driver the repository's config defines.

    One ``git config --list`` per call, unless the previous answer in the same place (``cwd``, ``env``) still holds:
    it is kept when the config it came from is files only, none including another (``include.*``,
    ``includeIf.*``) and no per-worktree config enabled, and it is reused while each of those files reads the same
    bytes -- so a config a command rewrote between two calls (a driver added) is asked of git again. A person's
    verification runs four neutralised git calls in one checkout.
    """
    key = (str(cwd), tuple(sorted(env.items())))
    with _DRIVERS_LOCK:
        known = _DRIVERS.get(key)
    if known is not None and all(_contents(path) == data for path, data in known[0]):
        return list(known[1])
    try:
        done = subprocess.run(
            ["git", "config", "-z", "--show-origin", "--list"],
            cwd=cwd,
            env=dict(env),
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise AgentOpsError("GIT_FAILED", f"git config could not run in {cwd}: {exc}") from exc
    fields = done.stdout.decode("utf-8", "surrogateescape").split("\0")
    origins = set(fields[0::2][: len(fields) // 2])
    names = {item.partition("\n")[0] for item in fields[1::2]}
    args: list[str] = []
    for name in sorted(n for n in names if n and re.search(_DRIVER_NAME, n)):
        section, _, rest = name.partition(".")
        driver = rest.rpartition(".")[0]
        if section in DRIVER_KEYS and driver and "=" not in driver:
            for config_key in DRIVER_KEYS[section]:
                args += ["-c", f"{section}.{driver}.{config_key}={REPLACEMENTS.get(section, '')}"]
    sources = _sources(cwd, origins, names) if done.returncode == 0 else None
    if sources:
        with _DRIVERS_LOCK:
            if key not in _DRIVERS and len(_DRIVERS) >= _DRIVERS_KEPT:
                del _DRIVERS[next(iter(_DRIVERS))]  # the oldest place
            _DRIVERS[key] = (sources, tuple(args))
    return args


def _sources(cwd: Path, origins: set[str], names: set[str]) -> tuple[tuple[Path, bytes], ...] | None:
    """The config files and their bytes an answer may be kept by (see :func:`driver_overrides`), or None."""
    if any(n.startswith(("include.", "includeif.")) or n == "extensions.worktreeconfig" for n in names):
        return None
    found = []
    for origin in sorted(origins):
        if not origin.startswith("file:") or origin == "file:":
            return None
        path = Path(origin[len("file:") :])
        if not path.is_absolute():  # relative to where git settled: ``cwd`` only when it is the top or the git dir
            top = path.parts[0] == ".git"
            if not _is_git_dir(cwd / ".git" if top else cwd):
                return None
            path = cwd / path
        data = _contents(path)
        if data is None:
            return None
        found.append((path, data))
    return tuple(found) or None


def _is_git_dir(path: Path) -> bool:
    """What git asks of a directory before it takes it for a git dir (so it did not walk on past ``path``)."""
    return (path / "HEAD").is_file() and (path / "objects").is_dir() and (path / "refs").is_dir()


def _contents(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


@functools.cache
def _global_excludes() -> str | None:
    """The person's ``core.excludesFile`` from their global config (reading config runs nothing)."""
    try:
        done = subprocess.run(
            ["git", "config", "--global", "--path", "--get", "core.excludesFile"],
            capture_output=True,
            timeout=60,
            check=False,
            env={k: v for k, v in _CALLER.items() if k not in ("GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT")},
        )
    except (OSError, subprocess.SubprocessError):
        return None
    value = done.stdout.decode("utf-8", "surrogateescape").strip()
    return value if done.returncode == 0 and value and "\n" not in value else None


def git_argv(cwd: Path, args: Sequence[str], env: Mapping[str, str], *, scan_drivers: bool = True) -> list[str]:
    """The full argv of a neutralised git call (``git -c ... <args>``).

    The person's global ignore file is the one global setting kept: it only decides what ``status`` shows.
    """
    argv = ["git"]
    for setting in NEUTRAL:
        argv += ["-c", setting]
    excludes = _global_excludes()
    if excludes is not None:
        argv += ["-c", f"core.excludesFile={excludes}"]
    return argv + (driver_overrides(cwd, env) if scan_drivers else []) + list(args)


def run_git(
    cwd: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    timeout: float = 120,
    scan_drivers: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``git <args>`` in ``cwd`` neutralised (see the module docstring); ``GIT_FAILED`` if it cannot start.

    ``env`` adds variables (only :data:`KEPT_ENV` among ``GIT_*``: a worker's object quarantine comes in as an
    alternate to read from).
    ``scan_drivers=False`` skips asking for the repository's drivers: only for a repository whose config the
    caller knows holds none. The exit status is the caller's to judge.
    """
    environment = neutral_environment(extra=env)
    try:
        return subprocess.run(
            git_argv(cwd, args, environment, scan_drivers=scan_drivers),
            cwd=cwd,
            env=environment,
            input=input,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise AgentOpsError("GIT_FAILED", f"git {args[0] if args else ''} could not run in {cwd}: {exc}") from exc
