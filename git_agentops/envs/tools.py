"""Running the package managers that make a checkout's environment, and finding the programs a policy names.

Every ecosystem's setup is a few runs of the project's own tools (``pip``, ``npm ci``, ``cargo fetch``...). They
run through :func:`~git_agentops.process.command.run_command`, so a hung registry cannot hang a worker's setup,
and a failure becomes one coded error, ``ENV_SETUP_FAILED``, carrying the command and the tail of what it wrote:
the person reading it needs pip's or npm's own words, not ours. A tool that is not installed is said in so many
words ("npm is not on PATH") instead of as an ``ENOENT``.

Shared state lives in the repository's common git dir (``$GIT_COMMON_DIR/agentops/envs/``), the one directory
every linked worktree of the repository agrees on and none of them commits: the base Python environments and
npm's cache. :func:`program_status` answers, for ``git agentops-policy check``, whether a verification command's
program will exist when the command runs -- on ``PATH``, or made by a setup step.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.clean import clean_source
from ..process.command import CommandResult, run_command

TAIL_CHARS: Final = 3000
"""How much of a failing tool's output the error carries: enough for pip's resolver report, not a whole log."""

VENV: Final = ".agentops/venv"
"""Where ``git agentops-env python`` makes a checkout's virtual environment unless told otherwise."""

ENV_COMMAND: Final = ("git", "agentops-env")


class Runner(Protocol):
    """How a setup command the project's own files can steer is run: :func:`run_command`'s arguments, plus the paths
    it may write besides the checkout. Unconfined in a person's checkout (their own code); in a supervisor's clean
    checkout, under the checkout's sandbox with only ``writable`` added
    (:meth:`git_agentops.sandbox.checkout.Wall.granting`)."""

    def __call__(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        timeout: float,
        clock: Clock,
        tail_bytes: int,
        writable: Sequence[Path],
    ) -> CommandResult: ...


def unconfined(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
    clock: Clock,
    tail_bytes: int,
    writable: Sequence[Path],
) -> CommandResult:
    """The :class:`Runner` of a person's checkout: the command as it is (``writable`` means nothing here)."""
    del writable
    return run_command(list(argv), cwd=cwd, env=env, timeout=timeout, clock=clock, tail_bytes=tail_bytes)


def shared_dir(common_dir: Path) -> Path:
    """``$GIT_COMMON_DIR/agentops/envs``: what all checkouts of the repository share (bases, caches).

    A supervisor's clean verification checkout is a repository of its own (:mod:`git_agentops.gitstore.clean`),
    so ``git rev-parse --git-common-dir`` there names its private ``.git``; setup run in it would build a base of
    its own in every checkout (123 MB and half a minute each). For such a git dir the answer is the shared dir of
    the repository its objects come from (:func:`~git_agentops.gitstore.clean.clean_source`): the toolkit wrote
    its marker, config and alternates, in a directory no agent can write, so no variable or file an agent controls
    redirects it. Agents read the shared dir and never write it (their sandbox grants ``agentops/envs`` read
    only), nor do the verification commands and setup steps of a clean checkout (:mod:`git_agentops.sandbox.checkout`):
    what writes there is the person's own setup and the supervisor itself, which builds a missing base before a
    clean checkout's setup runs (:func:`git_agentops.envs.pybase.ensure_base`, its ``confine``).
    """
    return (clean_source(common_dir) or common_dir) / "agentops" / "envs"


def git_common_dir(cwd: Path, environ: Mapping[str, str]) -> Path:
    """The repository's common git dir (``git rev-parse --git-common-dir``), the same from every linked worktree.

    Raises ``REPO_NOT_FOUND`` outside a repository: the shared environments need a repository to belong to.
    """
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
            cwd=cwd,
            env=dict(environ),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise AgentOpsError("REPO_NOT_FOUND", f"cannot run git in {cwd}: {exc}") from exc
    if done.returncode != 0 or not done.stdout.strip():
        raise AgentOpsError("REPO_NOT_FOUND", f"{cwd} is not inside a Git repository: {done.stderr.strip()}")
    return Path(done.stdout.strip()).resolve()


def tool_environment(environ: Mapping[str, str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment for a package manager, minus what would point it at another environment.

    Unlike verification, setup keeps the caller's variables (an index URL, a proxy, a registry token are how the
    person reaches their registry); it drops only those that would make Python or pip install into, or import
    from, somewhere else than the environment being made.
    """
    dropped = {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "__PYVENV_LAUNCHER__", "CONDA_PREFIX"}
    dropped |= {"PIP_USER", "PIP_TARGET", "PIP_PREFIX", "PIP_ROOT", "PIP_PYTHON", "PIP_EDITABLE", "PIP_REQUIREMENT"}
    env = {name: value for name, value in environ.items() if name not in dropped}
    env.update(extra or {})
    return env


def missing_tool(program: str, environ: Mapping[str, str]) -> AgentOpsError | None:
    """``ENV_SETUP_FAILED`` when ``program`` (no slash) is not on the environment's ``PATH``, else None."""
    if "/" in program or shutil.which(program, path=environ.get("PATH", os.defpath)) is not None:
        return None
    return AgentOpsError(
        "ENV_SETUP_FAILED",
        f"{program} is not on PATH ({environ.get('PATH', '')}): install it, or set up this checkout another way",
        details={"program": program},
    )


def run_tool(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    clock: Clock,
    timeout: float = 1800.0,
    what: str,
    run: Runner | None = None,
    writable: Sequence[Path] = (),
) -> CommandResult:
    """Run one setup command; ``ENV_SETUP_FAILED`` with its output tail unless it exits 0 in time.

    ``what`` says in the error what the command was for ("installing the dependencies into the base"). ``run``
    (default: as it is) runs it, with ``writable`` the paths it may write besides the checkout when confined.
    """
    if (absent := missing_tool(argv[0], env)) is not None:
        raise absent
    runner = run or unconfined
    result = runner(argv, cwd=cwd, env=env, timeout=timeout, clock=clock, tail_bytes=TAIL_CHARS * 4, writable=writable)
    if not result.ok:
        why = (
            f"timed out after {timeout:.0f}s"
            if result.timed_out
            else result.spawn_error or f"exited {result.exit_code if result.exit_code is not None else 'on a signal'}"
        )
        tail = result.tail.decode("utf-8", errors="replace")[-TAIL_CHARS:].rstrip()
        raise AgentOpsError(
            "ENV_SETUP_FAILED",
            f"{what}: {shlex.join(argv)} {why} (in {cwd})\n{tail}",
            details={"argv": list(argv), "cwd": str(cwd), "exitCode": result.exit_code, "timedOut": result.timed_out},
        )
    return result


# -- whether a policy's programs will exist ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProgramStatus:
    """Whether a command's ``argv[0]`` will be found when it runs: ``found``, ``made by setup`` or ``missing``."""

    program: str
    status: str
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"program": self.program, "status": self.status, "detail": self.detail}


def setup_venvs(setup_argvs: Sequence[Sequence[str] | str]) -> list[str]:
    """The virtual environments setup steps make: the ``--venv`` (default ``.agentops/venv``) of each
    ``git agentops-env python`` step, relative to the checkout, without a trailing slash."""
    found = []
    for argv in setup_argvs:
        words = shlex.split(argv, comments=True) if isinstance(argv, str) else list(argv)
        if tuple(words[:3]) != (*ENV_COMMAND, "python") and tuple(words[:2]) != ("git-agentops-env", "python"):
            continue
        venv = VENV
        for index, word in enumerate(words):
            if word == "--venv" and index + 1 < len(words):
                venv = words[index + 1]
            elif word.startswith("--venv="):
                venv = word.split("=", 1)[1]
        found.append(os.path.normpath(venv))
    return found


def program_status(
    argv: Sequence[str], *, root: Path, path: str | None, setup_argvs: Sequence[Sequence[str] | str]
) -> ProgramStatus:
    """Will ``argv[0]`` exist when a checkout of ``root``'s repository runs this command?

    A bare name must be on ``path`` (the ``PATH`` the commands get). A relative path under a virtual environment a
    setup step makes (``.agentops/venv/bin/python`` with a ``git agentops-env python`` step) is *made by setup*:
    a fresh worker worktree does not have it yet, and that is fine. Any other path must exist, relative to the
    checkout; a venv path that exists here but that no setup step makes is still missing in every worker worktree.
    """
    program = argv[0]
    if "/" not in program:
        where = shutil.which(program, path=path if path is not None else os.defpath)
        if where is None:
            return ProgramStatus(program, "missing", f"{program} is not on PATH")
        return ProgramStatus(program, "found", where)
    relative = os.path.normpath(program)
    for venv in setup_venvs(setup_argvs):
        if not os.path.isabs(relative) and (relative == venv or relative.startswith(venv + os.sep)):
            return ProgramStatus(program, "made by setup", f"made by the setup step 'git agentops-env python' ({venv})")
    target = Path(program) if os.path.isabs(program) else root / program
    if relative.startswith(VENV + os.sep):
        return ProgramStatus(
            program,
            "missing",
            f"{program} is made by 'git agentops-env python', but no [[worktree.setup]] step runs it, so worker "
            "worktrees will not have it",
        )
    if not target.exists():
        return ProgramStatus(program, "missing", f"{program} does not exist in {root}")
    return ProgramStatus(program, "found", str(target))


@dataclass(frozen=True, slots=True)
class ToolSetup:
    """What a package-manager setup (node, cargo, go) did: the command it ran, and what that cost."""

    ecosystem: str
    argv: tuple[str, ...]
    seconds: float
    noop: bool = False
    note: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "ecosystem": self.ecosystem,
            "argv": list(self.argv),
            "seconds": round(self.seconds, 3),
            "noop": self.noop,
            "note": self.note,
        }

    def summary(self) -> str:
        if self.noop:
            return f"{self.ecosystem} env: already set up by {shlex.join(self.argv)} (nothing to do)"
        note = f" ({self.note})" if self.note else ""
        return f"{self.ecosystem} env: {shlex.join(self.argv)} in {self.seconds:.1f}s{note}"
