"""The pre-flight of a verification: is the code under test the checkout's own, and which environment is it?

Before any command runs, the interpreter the commands will use is asked, in one short subprocess, where each of
the project's import packages resolves and which distributions it has installed:

* a package that resolves **outside** the checkout -- an editable install from the main checkout, a copy in
  site-packages -- makes the evidence describe other code: ``VERIFY_ENV_OUTSIDE`` names the package and where it
  resolved (a package that does not import at all is the tests' business, not a lie);
* the installed set (names and versions) and the lockfile digest are the **environment** the evidence records,
  and reuse of a passing result by tree requires the same environment.

The interpreter is the checkout's own ``.agentops/venv/bin/python`` when setup made one, else the first
verification command's own Python (``argv[0]`` named ``python``/``python3.x``), else ``python3`` on the commands'
``PATH``. Projects without Python packages are not probed; their environment is their lockfile digest.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..canonical import digest
from ..clock import Clock
from ..errors import AgentOpsError
from ..process.command import CommandResult, run_command
from .project import lock_digest, python_packages

VENV: Final = ".agentops/venv"
_PYTHON: Final = re.compile(r"python(?:[0-9]+(?:\.[0-9]+)?)?")

_SCRIPT: Final = r"""
import importlib.metadata, importlib.util, json, os, sys
found = {}
for name in sys.argv[1:]:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        found[name] = None
    elif spec.origin and spec.origin not in ("namespace", "built-in", "frozen"):
        found[name] = os.path.realpath(spec.origin)
    elif spec.submodule_search_locations:
        found[name] = os.path.realpath(list(spec.submodule_search_locations)[0])
    else:
        found[name] = None
dists = importlib.metadata.distributions()
installed = sorted({(d.metadata["Name"] or "?").lower() + "==" + (d.version or "?") for d in dists})
print(json.dumps({"packages": found, "installed": installed, "prefix": sys.prefix, "version": sys.version.split()[0]}))
"""


@dataclass(frozen=True, slots=True)
class Environment:
    """What a verification ran in: the interpreter, the lockfile digest, the installed set's digest."""

    lock_digest: str
    python: str | None = None  # the interpreter's version (its path depends on where the checkout is)
    installed_digest: str | None = None
    packages: Mapping[str, str | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The evidence record's ``environment``."""
        return {"lockDigest": self.lock_digest, "python": self.python, "installedDigest": self.installed_digest}

    @property
    def digest(self) -> str:
        """What must be equal for a passing result to be reused (with the environment variables)."""
        return digest(self.to_json())


def interpreter(checkout: Path, argvs: Sequence[Sequence[str] | str], env: Mapping[str, str]) -> str | None:
    """The Python the verification commands will use (see the module docstring), or None when there is none."""
    own = checkout / VENV / "bin" / "python"
    if own.exists():
        return str(own)
    for argv in argvs:
        if isinstance(argv, str) or not argv:
            continue
        program = argv[0]
        if _PYTHON.fullmatch(os.path.basename(program)):
            if os.sep in program:
                return str((checkout / program).resolve()) if not os.path.isabs(program) else program
            return shutil.which(program, path=env.get("PATH"))
    return shutil.which("python3", path=env.get("PATH"))


def probe(
    checkout: Path,
    argvs: Sequence[Sequence[str] | str],
    env: Mapping[str, str],
    *,
    clock: Clock,
    run: Callable[..., CommandResult] = run_command,
) -> Environment:
    """The environment of ``checkout``; ``VERIFY_ENV_OUTSIDE`` when a project package resolves outside it. ``run``
    starts the interpreter (whose ``.pth`` files are the checkout's code): a supervisor's confines it."""
    locks = lock_digest(checkout)
    packages = python_packages(checkout)
    if not packages:
        return Environment(locks)
    python = interpreter(checkout, argvs, env)
    if python is None:
        return Environment(locks)
    if not os.path.exists(python):
        raise _missing(checkout, python)
    # -c, like -m, puts the checkout first on sys.path: "python -m pytest" sees a flat-layout package there too
    result = run([python, "-c", _SCRIPT, *packages], cwd=checkout, env=env, timeout=60, shell=False, clock=clock)
    try:
        answer = json.loads(result.output.decode("utf-8", errors="replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = result.tail.decode("utf-8", errors="replace")[-400:].strip()
        if result.spawn_error:
            why = f"it could not start: {result.spawn_error}"
        elif result.timed_out:
            why = "it did not answer within 60 s"
        else:
            ended = f"exit {result.exit_code}" if result.exit_code is not None else f"signal {result.signal}"
            why = f"{ended}, " + (f"saying:\n{tail}" if tail else "printing nothing")
        raise AgentOpsError(
            "VERIFY_ENV_OUTSIDE",
            f"cannot ask {python} where the project's packages are ({why})",
            details={"python": python, "exitCode": result.exit_code},
        ) from None
    root = checkout.resolve()
    outside = []
    for name, origin in answer["packages"].items():
        if origin is not None and not Path(origin).is_relative_to(root):
            outside.append((name, origin))
    if outside:
        shown = "; ".join(f"{name} resolves to {origin}" for name, origin in outside)
        raise AgentOpsError(
            "VERIFY_ENV_OUTSIDE",
            f"the code under test is not this checkout's ({root}): {shown} (interpreter {python}). Install the "
            f"checkout's own environment -- a setup step such as 'git agentops-env python' and commands that use "
            f"{VENV}/bin/python -- so verification tests the commit, not another copy",
            details={"packages": dict(outside), "python": python},
        )
    # the interpreter's path depends on where the checkout is, the installed set does not: digest the set
    installed = [line for line in answer["installed"] if not line.startswith(tuple(f"{p.lower()}==" for p in packages))]
    return Environment(locks, answer.get("version"), digest(installed), answer["packages"])


def _missing(checkout: Path, python: str) -> AgentOpsError:
    """``VERIFY_ENV_MISSING``: the commands name an interpreter that is not there, and nothing made it."""
    path = Path(python)
    venv = path.parent.parent if path.parent.name == "bin" else path.parent
    shown = str(venv)
    for root in (checkout, checkout.resolve()):
        if venv.is_relative_to(root):
            shown = venv.relative_to(root).as_posix()
            break
    own = shown == VENV
    fix = (
        'give the policy the setup step that makes it -- [[worktree.setup]] argv = ["git", "agentops-env", '
        + ('"python"' if own else f'"python", "--venv", "{shown}"')
        + "] -- which git agentops-verify and every run then run themselves, or run 'git agentops-env python"
        + ("" if own else f" --venv {shown}")
        + "' here once"
    )
    return AgentOpsError(
        "VERIFY_ENV_MISSING",
        f"the verification commands run {python}, which does not exist: the environment {shown} has not been made "
        f"in {checkout}. Fix: {fix}",
        details={"python": python, "venv": str(venv)},
    )
