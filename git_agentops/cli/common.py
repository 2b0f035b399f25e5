"""The CLI boundary: the one place that turns outcomes into output and exit statuses.

Every ``git-agentops-<name>`` command is ``cli/<name>.py`` with ``build_parser()`` and ``main(argv=None) -> int``
that calls :func:`run`. :func:`run` parses arguments, captures the environment once into a :class:`Context`, calls
the command's handler, and maps what comes back:

* an int from the handler -> that exit status (0 ok, 1 a negative answer);
* :class:`~git_agentops.errors.AgentOpsError` -> ``error[CODE]: message`` on stderr (a JSON error object under
  ``--json``) and the code's exit status (usage 2, refused 3...);
* ``KeyboardInterrupt`` -> ``error[INTERRUPTED]`` and 130;
* anything else -> exit 4, the traceback written to ``$GIT_COMMON_DIR/agentops/log/`` (or the user state dir
  outside a repository) and one line on stderr saying where.

Only this package prints, reads ``os.environ`` or exits; the core below takes what it needs as arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

from .. import __version__
from ..errors import EXIT_INTERNAL, EXIT_INTERRUPTED, AgentOpsError
from ..gitstore.safegit import set_base_environment

if TYPE_CHECKING:
    from ..clock import Clock
    from ..gitstore.repo import Store
    from ..policy.trust import RepoIdentity


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors become ``error[USAGE]`` instead of argparse's own exit."""

    def error(self, message: str) -> NoReturn:
        raise AgentOpsError("USAGE", f"{message} (see '{self.prog} --help')")


def build(prog: str, description: str, *, json_flag: bool = True) -> Parser:
    parser = Parser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    if json_flag:
        parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    return parser


def seconds(*, zero: bool = False, most: float = 7 * 86400) -> Callable[[str], float]:
    """An argparse type for a duration: a number of seconds above 0 (from 0 with ``zero``), at most ``most``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if not ((value >= 0) if zero else (value > 0)) or not value <= most:  # NaN fails both
            low = "0 or more" if zero else "more than 0"
            raise argparse.ArgumentTypeError(f"must be {low} and at most {most:g} seconds, not {text}")
        return value

    return parse


def subcommands(parser: Parser) -> Callable[..., Parser]:
    """``add(name, help)`` for subcommands; each also accepts ``--json`` after its name."""
    action = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    def add(name: str, help: str, description: str | None = None) -> Parser:
        sub: Parser = action.add_parser(
            name, help=help, description=description or help, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        # SUPPRESS: an absent --json here must not reset one given before the subcommand
        sub.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON document")
        return sub

    return add


def user_state_dir(env: Mapping[str, str]) -> Path:
    """``$XDG_STATE_HOME/git-agentops`` (default ``~/.local/state/git-agentops``)."""
    base = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local" / "state")
    return Path(base) / "git-agentops"


def _system_clock() -> Clock:
    from ..clock import SystemClock

    return SystemClock()


@dataclass
class Context:
    """What a command handler may use from the outside world: environment, cwd, streams, clock."""

    env: Mapping[str, str]
    cwd: Path
    stdout: IO[str]
    stderr: IO[str]
    json: bool = False
    clock: Clock = field(default_factory=_system_clock)
    _store: Store | None = None

    def out(self, text: str = "") -> None:
        print(text, file=self.stdout)

    def emit(self, doc: Any, human: str | Sequence[str] | None = None) -> None:
        """Print ``doc`` as JSON under ``--json``; otherwise the human text."""
        if self.json:
            self.stdout.write(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        elif human is not None:
            self.out(human if isinstance(human, str) else "\n".join(human))

    @property
    def interactive(self) -> bool:
        return not self.json and self.stderr.isatty()

    def warn(self, code: str, message: str) -> None:
        """A ``warning[CODE]: message`` line on stderr, in human and ``--json`` mode alike (stdout stays clean)."""
        print(f"warning[{code}]: {message}", file=self.stderr, flush=True)

    def progress(self, text: str) -> None:
        """A progress line on a TTY; silent otherwise."""
        if self.interactive:
            print(text, file=self.stderr, flush=True)

    def worktree(self) -> Path:
        """The top of the working tree around the current directory (``REPO_BARE`` in a bare repository)."""
        from ..gitstore.checkout import toplevel

        return toplevel(self.cwd)

    def repo_identity(self) -> RepoIdentity:
        """The trust identity of this repository (shared by all its worktrees)."""
        from ..policy.trust import repo_identity

        store = self.store()
        return repo_identity(store.common_dir, store.config_value("remote.origin.url"))

    def state_dir(self) -> Path:
        return user_state_dir(self.env)

    def confirm(self, question: str, *, yes: bool) -> None:
        """Ask on a terminal; without one, require ``--yes`` (``CONFIRMATION_REQUIRED``)."""
        if yes:
            return
        if not (sys.stdin.isatty() and self.stderr.isatty()) or self.json:
            raise AgentOpsError("CONFIRMATION_REQUIRED", f"{question} -- not a terminal: pass --yes to confirm")
        self.stderr.write(f"{question} [y/N] ")
        self.stderr.flush()
        answer = sys.stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            raise AgentOpsError("CONFIRMATION_REQUIRED", "not confirmed; nothing was changed")

    def store(self) -> Store:
        """The repository around the current directory (opened once)."""
        if self._store is None:
            from ..gitstore.repo import open_store

            self._store = open_store(self.cwd, clock=self.clock)
        return self._store


def _log_dir(cwd: Path, env: Mapping[str, str]) -> Path:
    try:
        found = subprocess.run(
            ["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if found.returncode == 0 and found.stdout.strip():
            return Path(found.stdout.strip()) / "agentops" / "log"
    except (OSError, subprocess.SubprocessError):
        pass
    return user_state_dir(env) / "log"


def write_crash_log(prog: str, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> Path | None:
    """Write the current exception's traceback to a private log file; None if even that fails."""
    import traceback

    from ..gitstore.private import write_private

    text = (
        f"{prog} {__version__} crashed at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n"
        f"argv: {list(argv)!r}\ncwd: {cwd}\npython: {sys.version.split()[0]}\n\n{traceback.format_exc()}"
    )
    directory = _log_dir(cwd, env)
    name = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{prog}-{os.getpid()}.log"
    try:
        return write_private(directory, name, text.encode("utf-8"))
    except (OSError, AgentOpsError):
        return None


def _report(ctx_json: bool, stderr: IO[str], error: AgentOpsError, log: Path | None = None) -> None:
    if ctx_json:
        doc = error.to_json()
        if log is not None:
            doc["log"] = str(log)
        stderr.write(json.dumps({"error": doc}, sort_keys=True, ensure_ascii=False) + "\n")
    else:
        stderr.write(f"{error}\n")


Handler = Callable[[argparse.Namespace, Context], int]


def run(parser: Parser, handler: Handler, argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run ``handler``, map the outcome to an exit status (see the module docstring)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    wants_json = "--json" in args_list
    env = dict(os.environ)
    cwd = Path.cwd()
    set_base_environment(env)  # the toolkit's own git calls start from it (gitstore.safegit)
    try:
        try:
            args = parser.parse_args(args_list)
        except SystemExit as done:  # --help / --version
            return done.code if isinstance(done.code, int) else 0
        ctx = Context(env=env, cwd=cwd, stdout=sys.stdout, stderr=sys.stderr, json=bool(getattr(args, "json", False)))
        wants_json = ctx.json
        status = handler(args, ctx)
        sys.stdout.flush()
        return status
    except AgentOpsError as error:
        _report(wants_json, sys.stderr, error)
        return error.exit_status
    except KeyboardInterrupt:
        _report(wants_json, sys.stderr, AgentOpsError("INTERRUPTED", "interrupted"))
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (``| head``); nothing more to say to it
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # keep interpreter shutdown quiet
        return 0
    except Exception as crash:  # noqa: BLE001 -- the one place that catches everything: it is the crash reporter
        log = write_crash_log(parser.prog, args_list, cwd, env)
        where = f"traceback in {log}" if log else "the traceback could not be written"
        internal = AgentOpsError("INTERNAL", f"unexpected {type(crash).__name__}: {crash}; {where}")
        _report(wants_json, sys.stderr, internal, log)
        return EXIT_INTERNAL
