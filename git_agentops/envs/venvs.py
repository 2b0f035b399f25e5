"""Helpers of a checkout's virtual environment: its site-packages, its markers, its scripts, its imports.

Split from :mod:`.python`, which says why the checkout's venv looks the way it does; these are the mechanical
parts, each small enough to read on its own.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from ..clock import Clock
from ..errors import AgentOpsError
from .tools import run_tool

SENTINEL: Final = "@@agentops-env@@"
_IMPORTS: Final = r"""
import importlib, importlib.util, json, os, sys
found = {}
for name in sys.argv[1:]:
    try:
        module = importlib.import_module(name)
        where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", None) or []), None)
        found[name] = {"file": os.path.realpath(where) if where else None}
    except BaseException as exc:  # not importable as it is (settings, a service...): where would it come from?
        try:
            spec = importlib.util.find_spec(name)
        except BaseException:
            spec = None
        where = spec.origin if spec is not None and spec.origin not in (None, "namespace") else None
        found[name] = {"file": os.path.realpath(where) if where else None, "error": f"{type(exc).__name__}: {exc}"}
print("\n@@agentops-env@@" + json.dumps(found))
"""


def site_packages(prefix: Path) -> Path:
    found = sorted(prefix.glob("lib/python*/site-packages"))
    if len(found) != 1:
        raise AgentOpsError("ENV_SETUP_FAILED", f"{prefix} has {len(found)} site-packages directories, not one")
    return found[0]


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def write_json(path: Path, doc: Mapping[str, Any]) -> None:
    """Write ``doc`` whole or not at all (a marker that exists is always complete)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def link_scripts(base_bin: Path, venv_bin: Path) -> list[str]:
    """Give the venv a twin of each console script of the base, running the venv's interpreter.

    A pip-made script names its interpreter in its first lines (a ``#!`` line, or ``/bin/sh`` and an ``exec``
    line for long paths); the twin names the venv's instead. Anything else (ruff's binary) is symlinked.
    """
    made = []
    old, new = str(base_bin).encode(), str(venv_bin).encode()
    for entry in sorted(base_bin.iterdir()):
        name = entry.name
        target = venv_bin / name
        if name.startswith(("python", "pip", "activate", "Activate")) or os.path.lexists(target):
            continue
        if not entry.is_file() or not os.access(entry, os.X_OK):
            continue
        with entry.open("rb") as handle:
            head = handle.read(2048)
        lines = head.split(b"\n", 3)
        if head.startswith(b"#!") and any(old in line for line in lines[:3]):
            body = entry.read_bytes()
            split = body.split(b"\n", 3)
            rewritten = [line.replace(old, new) for line in split[:3]] + split[3:]
            target.write_bytes(b"\n".join(rewritten))
            target.chmod(0o755)
        else:
            target.symlink_to(entry)
        made.append(name)
    return made


def check_imports(
    root: Path, venv: Path, packages: Sequence[str], *, env: Mapping[str, str], clock: Clock
) -> dict[str, str]:
    """Import each package with the venv's interpreter; ``ENV_SETUP_FAILED`` unless each is this checkout's.

    Run isolated (``-I``: no ``PYTHONPATH``, no current directory on ``sys.path``) from inside the venv, so only
    the install itself can make a package resolve; a copy under ``.agentops/`` (the venv's site-packages, a
    nested worker worktree) is not the checkout's code either. ``-B``: importing must not leave ``__pycache__``
    in the checkout, which would make its first verification refuse it as dirty.
    """
    if not packages:
        return {}
    done = run_tool(
        [str(venv / "bin" / "python"), "-I", "-B", "-c", _IMPORTS, *packages],
        cwd=venv,
        env=env,
        clock=clock,
        timeout=300,
        what="importing the project's packages from the checkout's venv",
    )
    text = done.output.decode("utf-8", errors="replace")
    found = json.loads(text.rsplit(SENTINEL, 1)[-1].strip().splitlines()[0])
    checkout, private, own = root.resolve(), (root / ".agentops").resolve(), venv.resolve()
    resolved = {}
    for name in packages:
        answer = found.get(name, {})
        where = answer.get("file")
        if where is None:
            raise AgentOpsError(
                "ENV_SETUP_FAILED",
                f"{name} does not import from {venv}: {answer.get('error', 'no file')}",
                details={"package": name},
            )
        path = Path(where)
        inside = path.is_relative_to(checkout) and not path.is_relative_to(private) and not path.is_relative_to(own)
        if not inside:
            raise AgentOpsError(
                "ENV_SETUP_FAILED",
                f"{name} resolves to {where}, outside the checkout {checkout}: the editable install did not take "
                "(is the package shadowed by a copy in the base environment?)",
                details={"package": name, "resolved": where},
            )
        resolved[name] = where
    return resolved
