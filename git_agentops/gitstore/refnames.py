"""Ref-name validation, the rules of ``git check-ref-format``, without pygit2.

A name that git would refuse must never reach libgit2 (which refuses most, but not all, of the same names) or a
file path. Hooks call this on their fast path, so it imports nothing heavy.
"""

from __future__ import annotations

import re
from typing import Final

from ..errors import AgentOpsError

_FORBIDDEN_CHARS: Final = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
_SAFE_COMPONENT: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def ref_name_problem(name: str) -> str | None:
    """Why git would refuse ``name`` as a full ref name, or None if it is acceptable."""
    if not name:
        return "the name is empty"
    if not name.startswith("refs/"):
        return "a full ref name starts with 'refs/'"
    if _FORBIDDEN_CHARS.search(name):
        return "it contains a control character, space, or one of ~ ^ : ? * [ \\"
    if ".." in name:
        return "it contains '..'"
    if "@{" in name:
        return "it contains '@{'"
    if name.endswith("/") or "//" in name:
        return "it has an empty path component"
    if name.endswith("."):
        return "it ends with '.'"
    for component in name.split("/"):
        if component.startswith("."):
            return f"component {component!r} starts with '.'"
        if component.endswith(".lock"):
            return f"component {component!r} ends with '.lock'"
    return None


def check_ref_name(name: str) -> str:
    """Return ``name`` if it is a valid full ref name; raise ``REF_NAME_INVALID`` otherwise."""
    problem = ref_name_problem(name)
    if problem is not None:
        raise AgentOpsError("REF_NAME_INVALID", f"invalid ref name {name!r}: {problem}")
    return name


def check_component(value: str, what: str) -> str:
    """A single ref component the toolkit builds names from (run ids, worker ids, task ids)."""
    if not _SAFE_COMPONENT.match(value) or ".." in value or value.endswith((".lock", ".")):
        raise AgentOpsError(
            "REF_NAME_INVALID",
            f"invalid {what} {value!r}: use 1-128 of A-Z a-z 0-9 . _ - starting with a letter or digit",
        )
    return value


class RefConflict(AgentOpsError):
    """The ref did not hold the value the caller expected."""

    def __init__(self, name: str, expected: str | None, actual: str | None) -> None:
        want = expected or "absent"
        got = actual or "absent"
        super().__init__(
            "REF_CONFLICT",
            f"{name} moved: expected {want}, found {got}",
            details={"ref": name, "expected": expected, "actual": actual},
        )
        self.name = name
        self.expected = expected
        self.actual = actual
