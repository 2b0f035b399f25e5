"""The one question a base build asks the project's own code: what does an editable build need?

A checkout's venv installs the project editable without build isolation (:mod:`.python`), so the shared base must
already hold what the build backend needs for it (``get_requires_for_build_editable``: hatchling wants
``editables``). Only the backend can say, and the backend is the checkout's code -- an in-tree backend, a
``setup.py`` and whatever it imports -- which the base's key does not cover. So the question is asked as little as
possible, confined where the checkout is a commit nobody vouched for, and its answer is data to check, never code
to trust: requirements from the package index, and a base holding what one answer asked for goes only to checkouts
whose backend asks for the same (:func:`~.pybase.ensure_base`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ..clock import Clock
from ..errors import AgentOpsError
from .project import pyproject
from .pydeps import requirement_name
from .pyreqs import local_references
from .tools import Runner, run_tool, tool_environment

IN_CHECKOUT: Final = {
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_NO_INPUT": "1",
    "PIP_NO_WARN_SCRIPT_LOCATION": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}
"""For commands that import from the checkout (an in-tree build backend, ``setup.py``): no ``__pycache__`` left
behind in it, which would make the checkout's first verification refuse it as dirty."""
ANSWER: Final = "@@agentops-build-requires@@"
_BUILD_REQUIRES: Final = r"""
import importlib, importlib.metadata as md, json, os, sys
root, table = sys.argv[1], json.loads(sys.argv[2])
for entry in reversed(table.get("backend-path", [])):
    sys.path.insert(0, os.path.join(root, entry))
module, _, attr = (table.get("build-backend") or "setuptools.build_meta:__legacy__").partition(":")
backend = importlib.import_module(module)
for part in attr.split(".") if attr else []:
    backend = getattr(backend, part)
hook = getattr(backend, "get_requires_for_build_editable", None)
wanted = [str(spec) for spec in hook(None)] if hook is not None else []
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
missing = []
for spec in wanted:
    req = Requirement(spec)
    if req.marker is not None and not req.marker.evaluate():
        continue
    try:
        have = md.version(req.name)
    except md.PackageNotFoundError:
        missing.append(spec)
        continue
    if req.specifier and not req.specifier.contains(have, prereleases=True):
        missing.append(spec)
print("\n@@agentops-build-requires@@" + json.dumps({"wanted": wanted, "missing": missing}), flush=True)
"""


@dataclass(frozen=True, slots=True)
class BuildAnswer:
    """What the project's build backend says an editable build needs (``get_requires_for_build_editable``):
    everything it named (sorted), and what of it the base lacks. The commit's own code answered: a base that holds
    what it asked for is made for that answer alone (:func:`ensure_base`)."""

    wanted: tuple[str, ...]
    missing: tuple[str, ...]


def ask_backend(root: Path, base: Path, *, environ: Mapping[str, str], clock: Clock, run: Runner) -> BuildAnswer:
    """Ask the project's build backend, with ``base``'s interpreter, what an editable build needs. This is the
    checkout's own code (an in-tree backend, ``setup.py``): ``run`` confines it in a clean checkout, where it writes
    nothing but the checkout and its TMPDIR -- the base it reads stays read-only -- and its answer, read from its
    output, is checked: requirements of the package index only (a name, a version range, a marker; no URL, path or
    option), what it calls missing among what it asked for. ``ENV_SETUP_FAILED`` otherwise."""
    table = pyproject(root).get("build-system", {})
    done = run_tool(
        [
            str(base / "bin" / "python"),
            "-c",
            _BUILD_REQUIRES,
            str(root),
            json.dumps(table if isinstance(table, dict) else {}),
        ],
        cwd=root,
        env=tool_environment(environ, IN_CHECKOUT),
        clock=clock,
        timeout=600,
        what="asking the build backend what an editable build needs",
        run=run,
    )
    text = done.output.decode("utf-8", errors="replace")
    try:
        doc = json.loads(text.rsplit(ANSWER, 1)[1].strip().splitlines()[0]) if ANSWER in text else None
    except (ValueError, IndexError):
        doc = None
    wanted = doc.get("wanted") if isinstance(doc, dict) else None
    missing = doc.get("missing") if isinstance(doc, dict) else None
    if not isinstance(wanted, list) or not isinstance(missing, list):
        raise AgentOpsError(
            "ENV_SETUP_FAILED",
            f"the build backend of {root} gave no answer to what an editable build needs:\n{text[-1500:]}",
        )
    bad = [spec for spec in [*wanted, *missing] if not index_requirement(spec)]
    bad += [spec for spec in missing if spec not in wanted and spec not in bad]
    if bad:
        raise AgentOpsError(
            "ENV_SETUP_FAILED",
            f"the build backend of {root} asked for {', '.join(map(repr, bad[:5]))} for an editable build: a "
            "shared base installs only requirements from the package index it also asked for (a name, a version "
            "range, a marker)",
            details={"asked": [str(spec) for spec in bad[:20]]},
        )
    return BuildAnswer(tuple(sorted(set(wanted))), tuple(sorted(set(missing))))


def index_requirement(spec: object) -> bool:
    return (
        isinstance(spec, str)
        and 0 < len(spec) <= 200
        and spec.isprintable()
        and requirement_name(spec) is not None
        and "@" not in spec.split(";", 1)[0]
        and not local_references([spec])
    )
