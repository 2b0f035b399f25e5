"""Start one agent in a Landlock sandbox and stay behind it as the reaper of everything it starts.

Run as a standalone script, ``python3 -I -S launcher.py SPEC``: no site, no ``git_agentops`` import, so it costs
little more than the interpreter's start. ``SPEC`` names a JSON file (read, never deleted)::

    {"version": 1, "argv": ["claude", "-p", "..."], "cwd": "/abs/worktree",
     "rules": [{"path": "/abs/worktree", "access": ["read", "write"]}, ...],
     "scope_signals": true, "scope_abstract_unix": true, "grace": 0.5, "mode": "landlock"}

``rules``, the scopes, ``grace`` (seconds, default 0.5), ``mode`` (``"landlock"``, the default, or ``"none"``: no
sandbox, still a reaper) and ``namespace`` (null, the default, or ``{"hide": [...], "keep": [...], "own": [...],
"network": true}``, optionally with ``"readonly": [...]``: the agent's own user, mount and IPC namespaces, entered
before Landlock -- see :mod:`.namespace`) may be left out; any other key is refused. The launcher makes itself a
child subreaper, forks the agent -- which applies the sandbox, enters ``cwd`` and ``exec``s ``argv`` with the
launcher's environment and stdio -- and then, unsandboxed, reaps every child it gets (:mod:`.reaper`). When the
agent's main process exits, what is left of the tree gets SIGTERM, ``grace`` seconds, SIGKILL, and the launcher
exits with the agent's status (128 + signal when a signal ended it). SIGTERM, SIGINT or SIGHUP to the launcher stops
the tree the same way and exits 128 + that signal; a second one skips the rest of the grace.

When the sandbox cannot be applied or ``argv`` cannot be executed, the child says why through a close-on-exec pipe
and the launcher exits 126 (127: no such program) with ``sandbox: <reason>`` on stderr; a bad spec is 126 too.
The agent stays in the launcher's process group, so a supervisor's SIGKILL to the group still reaches it.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from os import _exit as _child_exit  # a forked child must not run the parent's cleanup nor flush its buffers

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

    from git_agentops.sandbox import landlock, reaper


def _load(name: str) -> Any:
    """Import a sibling module by path: ``-I`` keeps this directory off ``sys.path``; appended, it shadows no
    standard module."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.append(here)
    try:
        return __import__(name)
    finally:
        sys.path.remove(here)


if not TYPE_CHECKING:
    landlock = _load("landlock")
    reaper = _load("reaper")

SPEC_KEYS = frozenset(
    {"version", "argv", "cwd", "rules", "scope_signals", "scope_abstract_unix", "grace", "mode", "namespace"}
)
NAMESPACE_KEYS = frozenset({"hide", "keep", "own", "network"})
NAMESPACE_OPTIONAL = frozenset({"readonly"})
MODES = ("landlock", "none")
EXIT_CANNOT_RUN = 126
EXIT_NOT_FOUND = 127


class SpecError(ValueError):
    """The spec file is unreadable or not of the documented form."""


def _err(message: str) -> None:
    os.write(2, f"sandbox: {message}\n".encode(errors="replace"))


class _Strict:
    """What CPython's C JSON scanner reads of a decoder (``json.JSONDecoder()`` with its defaults)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    memo: dict[str, str] = {}


def parse_json(text: str) -> Any:
    """``json.loads`` without importing :mod:`json` (its import of :mod:`re` is a tenth of the launcher's start):
    CPython's own C scanner, with surrounding whitespace allowed and anything else after the value refused."""
    try:
        from _json import make_scanner
    except ImportError:  # not CPython
        import json

        return json.loads(text)
    start = len(text) - len(text.lstrip(" \t\n\r"))
    try:
        value, end = make_scanner(_Strict())(text, start)  # type: ignore[arg-type]  # it reads only these
    except StopIteration as exc:
        raise ValueError(f"not JSON at character {exc.value}") from None
    if text[end:].strip(" \t\n\r"):
        raise ValueError(f"extra data at character {end}")
    return value


def load_spec(path: str) -> dict[str, Any]:
    """Read and check a spec, filling the defaults; SpecError says what is wrong."""
    try:
        with open(path, "rb") as handle:
            spec = parse_json(handle.read().decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise SpecError(f"cannot read spec {path}: {exc}") from exc
    if not isinstance(spec, dict):
        raise SpecError("the spec must be a JSON object")
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise SpecError(f"unknown spec keys {unknown}")
    spec = {"rules": [], "scope_signals": True, "scope_abstract_unix": True, "grace": 0.5, "mode": "landlock", **spec}
    if spec.get("version") != 1:
        raise SpecError(f"spec version must be 1, not {spec.get('version')!r}")
    argv = spec.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and "\0" not in a for a in argv):
        raise SpecError("argv must be a non-empty list of strings without NUL")
    cwd = spec.get("cwd")
    if not isinstance(cwd, str) or not cwd.startswith("/") or "\0" in cwd:
        raise SpecError(f"cwd must be an absolute path, not {cwd!r}")
    if not isinstance(spec["rules"], list):
        raise SpecError("rules must be a list")
    try:
        landlock.check_rules(spec["rules"])
    except ValueError as exc:
        raise SpecError(str(exc)) from exc
    for key in ("scope_signals", "scope_abstract_unix"):
        if not isinstance(spec[key], bool):
            raise SpecError(f"{key} must be true or false")
    grace = spec["grace"]
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace <= 60:
        raise SpecError(f"grace must be a number of seconds from 0 to 60, not {grace!r}")
    if spec["mode"] not in MODES:
        raise SpecError(f"mode must be one of {list(MODES)}, not {spec['mode']!r}")
    _check_namespace(spec.setdefault("namespace", None))
    return spec


def _check_namespace(ns: Any) -> None:
    """``namespace``: null, or ``{"hide": [dir...], "keep": [path...], "own": [dir...], "network": bool}`` and
    optionally ``"readonly": [path...]`` (filled in as empty)."""
    if ns is None:
        return
    if not isinstance(ns, dict) or not NAMESPACE_KEYS <= set(ns) <= NAMESPACE_KEYS | NAMESPACE_OPTIONAL:
        raise SpecError(
            f"namespace must be null or an object with the keys {sorted(NAMESPACE_KEYS)} "
            f"(and optionally {sorted(NAMESPACE_OPTIONAL)})"
        )
    ns.setdefault("readonly", [])
    for key in ("hide", "keep", "own", "readonly"):
        paths = ns[key]
        if not isinstance(paths, list) or not all(
            isinstance(p, str) and p.startswith("/") and "\0" not in p for p in paths
        ):
            raise SpecError(f"namespace.{key} must be a list of absolute paths")
    if not isinstance(ns["network"], bool):
        raise SpecError("namespace.network must be true or false")


def _agent(spec: dict[str, Any], report: int, mask: set[int | signal.Signals]) -> NoReturn:
    """The forked child: sandbox, ``exec``; on failure write ``CODE reason`` to ``report`` and exit CODE."""
    code, reason = EXIT_CANNOT_RUN, "unknown failure"
    try:
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these; the agent must get them as usual
            signal.signal(sig, signal.SIG_DFL)
        search = os.get_exec_path()  # now: it imports a module, which the sandbox may forbid
        ns = spec["namespace"]
        if ns is not None:  # first: the directories it covers and binds back are then the ones cwd names
            _load("namespace").enter(
                hide=ns["hide"], keep=ns["keep"], own=ns["own"], network=ns["network"], readonly=ns["readonly"]
            )
        try:
            os.chdir(spec["cwd"])
        except OSError as exc:
            raise OSError(exc.errno, f"cannot enter cwd {spec['cwd']}: {exc.strerror}") from exc
        if spec["mode"] == "landlock":
            hidden = ns["hide"] if ns is not None else []
            version = landlock.apply(
                spec["rules"],
                scope_signals=spec["scope_signals"],
                scope_abstract_unix=spec["scope_abstract_unix"],
                on_missing=lambda path: (
                    None if _hidden(path, hidden) else _err(f"rule path {path} does not exist; skipped")
                ),
            )
            if version < 6 and (spec["scope_signals"] or spec["scope_abstract_unix"]):
                _err(f"warning: Landlock ABI {version} cannot scope signals or abstract sockets")
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        argv = spec["argv"]
        try:
            _execvp(argv, search)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                code = EXIT_NOT_FOUND
            raise OSError(exc.errno, f"cannot run {argv[0]!r}: {exc.strerror}") from exc
    except landlock.LandlockError as exc:
        reason = f"landlock: {exc.strerror}" + (f" ({exc.filename})" if exc.filename else "")
    except OSError as exc:
        reason = f"namespace: {exc.strerror}" if type(exc).__name__ == "NamespaceError" else str(exc.strerror)
    except BaseException as exc:  # noqa: BLE001 -- the child must always reach _exit, whatever went wrong
        reason = f"{type(exc).__name__}: {exc}"
    try:
        os.write(report, f"{code} {reason}".encode(errors="replace"))
    finally:
        _child_exit(code)


def _hidden(path: str, hidden: list[str]) -> bool:
    """Whether ``path`` lies under a directory the namespace covered with a tmpfs (its rule is moot there)."""
    return any(path == h or path.startswith(h.rstrip("/") + "/") for h in hidden)


def _execvp(argv: list[str], search: list[str]) -> NoReturn:
    """``os.execvp`` without its lazy import: execute the first ``argv[0]`` found in ``search`` (PATH).

    As in C, a directory where the program is missing is skipped; the first other error (EACCES...) is raised if
    no directory has it runnable.
    """
    if "/" in argv[0]:
        os.execv(argv[0], argv)  # noqa: S606 -- the agent is the argv, no shell between
    first: OSError | None = None
    last: OSError = FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv[0])
    for directory in search:
        try:
            os.execv(os.path.join(directory, argv[0]), argv)  # noqa: S606
        except (FileNotFoundError, NotADirectoryError) as exc:
            last = exc
        except OSError as exc:
            first = first or exc
    raise first or last


def _read_report(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):  # EOF at the agent's exec (close-on-exec) or its exit
        chunks.append(chunk)
    return b"".join(chunks)


def main(args: list[str]) -> int:
    """Launch the agent a spec describes and reap its tree; the exit status (see the module docstring)."""
    if len(args) != 1:
        _err("usage: launcher.py SPEC")
        return EXIT_CANNOT_RUN
    try:
        spec = load_spec(args[0])
        reaper.set_child_subreaper()
    except (SpecError, OSError) as exc:
        _err(f"bad spec: {exc}" if isinstance(exc, SpecError) else str(exc))
        return EXIT_CANNOT_RUN
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, reaper.WAITED)
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        _agent(spec, write_end, mask)
    os.close(write_end)
    if spec["namespace"] is not None:  # the agent (another user namespace) may not read this process's /proc files
        _load("namespace").set_dumpable(False)
    report = _read_report(read_end)
    os.close(read_end)
    if report:
        os.waitpid(pid, 0)
        code, _, reason = report.decode(errors="replace").partition(" ")
        _err(reason)
        return int(code) if code.isdigit() else EXIT_CANNOT_RUN
    return int(reaper.Reaper(pid, grace=float(spec["grace"])).run())


if __name__ == "__main__":
    status = main(sys.argv[1:])
    os._exit(status)  # nothing left to flush (stderr is written with os.write); skips ~5 ms of interpreter teardown
