"""Test helpers written once: SSH signing keys, scripted-agent recipes (rendered with tomli_w), document mutations.

Recipes are data: the helpers build dictionaries (recipe :class:`Part` values) and :func:`toml` renders them,
so a title or a file content with quotes, backslashes or characters outside the BMP reaches the recipe exactly
(``json.dumps`` would turn a non-BMP character into a surrogate pair that ``tomllib`` refuses). A step may also be
given as a TOML inline table in a string (``'{ request = "handoff" }'``); it is parsed, not pasted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

Step = Mapping[str, Any] | str
"""A recipe step: a mapping, or a TOML inline table as text."""

HANDOFF: Step = {"request": "handoff"}


# -- keys --------------------------------------------------------------------------------------------------------------


def ssh_key(path: Path, *, comment: str = "test", passphrase: str = "") -> Path:
    """A new Ed25519 key pair at ``path`` / ``path.pub`` made by the real ``ssh-keygen``; returns ``path``."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", comment, "-f", str(path)], check=True)
    return path


def public_key(key: Path) -> str:
    """``<type> <base64>`` of the key pair at ``key`` (its comment dropped)."""
    return " ".join(key.with_suffix(".pub").read_text().split()[:2])


def allowed_signer(principal: str, key: Path, options: str = "") -> str:
    """One ``allowed_signers`` line trusting ``key`` as ``principal`` for receipts (namespace git-agentops)."""
    return f'{principal} namespaces="git-agentops"{options} {public_key(key)}\n'


# -- recipes -----------------------------------------------------------------------------------------------------------


def toml(doc: Mapping[str, Any]) -> str:
    """``doc`` as TOML text."""
    return tomli_w.dumps(dict(doc))


def step(value: Step) -> dict[str, Any]:
    """A step as a mapping (a TOML inline table given as text is parsed)."""
    if isinstance(value, str):
        parsed: dict[str, Any] = tomllib.loads(f"step = {value}")["step"]
        return parsed
    return dict(value)


def write_step(path: str, content: str) -> dict[str, Any]:
    return {"write": path, "content": content}


def commit_step(message: str) -> dict[str, Any]:
    return {"commit": message}


@dataclass(frozen=True)
class Part:
    """Tasks and reviewers of a recipe; parts add up (``child(...) + child(...) + reviewers(...)``)."""

    tasks: tuple[dict[str, Any], ...] = ()
    reviewers: tuple[dict[str, Any], ...] = ()

    def __add__(self, other: Part) -> Part:
        return Part(self.tasks + other.tasks, self.reviewers + other.reviewers)


def child(
    name: str,
    title: str,
    attempts: Sequence[Sequence[Step]],
    depends_on: Iterable[str] | None = None,
    *,
    repair: Sequence[Sequence[Step]] = (),
) -> Part:
    """One recipe task with one attempt per list of steps (and ``repair`` attempts for its repair task's worker)."""
    task = {
        "name": name,
        "title": title,
        "intent": title,
        "criteria": ["done"],
        "depends_on": list(depends_on or []),
        "attempts": [{"steps": [step(s) for s in steps]} for steps in attempts],
    }
    if repair:
        task["repair"] = [{"steps": [step(s) for s in steps]} for steps in repair]
    return Part(tasks=(task,))


def simple_child(name: str, path: str, depends_on: Iterable[str] | None = None, *, title: str | None = None) -> Part:
    """A task that writes ``path``, commits and hands off, first time right (title ``Part <NAME>`` by default)."""
    return child(
        name,
        title or f"Part {name.upper()}",
        [[write_step(path, f"{name}\n"), commit_step(f"Add {name}"), HANDOFF]],
        depends_on,
    )


def reviewers(*names: str, verdict: str = "approve") -> Part:
    """Scripted reviewers, one per name."""
    return Part(reviewers=tuple({"name": name, "verdict": verdict} for name in names))


def recipe_text(part: Part, *, finalize: bool, one_shot: bool = False) -> str:
    """A whole recipe: the plan, the coordinator, and the tasks and reviewers of ``part``."""
    doc: dict[str, Any] = {
        "plan": {"title": "Build it", "intent": "Build the parts", "criteria": ["parts exist", "check passes"]},
        "coordinator": {"finalize": finalize, "one_shot": one_shot},
        "tasks": list(part.tasks),
    }
    if part.reviewers:
        doc["reviewers"] = list(part.reviewers)
    return toml(doc)


# -- documents ---------------------------------------------------------------------------------------------------------

REPLACEMENTS: tuple[Any, ...] = (None, "x", -1, 1.5, [], {}, True)


def mutations(doc: Any, *, replacements: Sequence[Any] = REPLACEMENTS, every_item: bool = True) -> list[Any]:
    """Single-step mutations of a valid document: drop, retype or extend one value somewhere in it.

    ``every_item=False`` descends only into the first item of each list (large documents stay tractable).
    """
    out: list[Any] = []
    if isinstance(doc, dict):
        for key in doc:
            out.append({k: v for k, v in doc.items() if k != key})
            out += [{**doc, key: replacement} for replacement in replacements]
            out += [{**doc, key: sub} for sub in mutations(doc[key], replacements=replacements, every_item=every_item)]
        out.append({**doc, "unexpectedKey": 1})
    elif isinstance(doc, list) and doc:
        out += [doc + doc[:1], []]
        for i, item in enumerate(doc if every_item else doc[:1]):
            subs = mutations(item, replacements=replacements, every_item=every_item)
            out += [[*doc[:i], sub, *doc[i + 1 :]] for sub in subs]
    return out


def missing_tool(message: str) -> None:
    """A system tool a test needs is missing: fail where ``.ci/run`` promised to install it
    (``AGENTOPS_REQUIRE_SYSTEM_TOOLS``, set there; or any ``CI``), skip with ``message`` elsewhere."""
    import pytest

    if os.environ.get("AGENTOPS_REQUIRE_SYSTEM_TOOLS") or os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def require_tool(name: str, install: str) -> str:
    """The path of system tool ``name`` (see :func:`missing_tool` when it is not installed)."""
    found = shutil.which(name)
    if found is None:
        missing_tool(f"{name} is not installed: {install}")
        raise AssertionError("unreachable")
    return found
