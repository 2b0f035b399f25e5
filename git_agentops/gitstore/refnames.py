"""Ref-name validation, the rules of ``git check-ref-format``, without pygit2.

A name that git would refuse must never reach libgit2 (which refuses most, but not all, of the same names) or a
file path. Hooks call this on their fast path, so it imports nothing heavy.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from ..errors import AgentOpsError

_FORBIDDEN_CHARS: Final = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
_SAFE_COMPONENT: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


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
    if not _SAFE_COMPONENT.fullmatch(value) or ".." in value or value.endswith((".lock", ".")):
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


ZERO_OID: Final = "0" * 40
_DELIVERY: Final = re.compile(r"refs/agentops/runs/[^/]+/deliveries/[^/]+")
_CONTROL: Final = re.compile(r"refs/agentops/runs/[^/]+/controls/[^/]+")
_LINEAR: Final = re.compile(
    r"refs/agentops/runs/[^/]+/(state|policy|journal/[^/]+)|refs/agentops/queue/.+|refs/notes/agentops/.+"
)


def namespace_rule(
    ref: str, old: str | None, new: str | None, is_ancestor: Callable[[str, str], bool]
) -> tuple[str, str] | None:
    """The rule a change of an agentops ref breaks, as (code, message), or None.

    Frozen deliveries and signed controls are create-only; run state, policy and journal refs and the agentops
    notes only move forward (the old tip must be an ancestor of the new one) and are never deleted; so does a
    target's merge queue. Every other ref is not ours to judge. ``old``/``new`` are object ids, None or all zeros
    for "absent".
    The same rule runs in the store's own ref writes, in the ``reference-transaction`` and ``pre-push`` hooks and
    in ``pre-receive``.
    """
    old = None if old in (None, ZERO_OID) else old
    new = None if new in (None, ZERO_OID) else new
    if old == new:
        return None
    if ref.startswith(("refs/agentops/", "refs/notes/agentops/")) and ref_name_problem(ref) is not None:
        return ("HOOK_FAILED", f"{ref!r} is not a valid ref name ({ref_name_problem(ref)}); refusing it")
    if _DELIVERY.fullmatch(ref):
        if old is not None:
            verb = "delete" if new is None else "move"
            return (
                "HOOK_REF_CREATE_ONLY",
                f"{ref} is a frozen delivery: it is never moved or deleted (refusing to "
                f"{verb} it); start a new run to deliver something else",
            )
        return None
    if _CONTROL.fullmatch(ref):
        if old is not None:
            return (
                "HOOK_REF_CREATE_ONLY",
                f"{ref} is a person's signed control: it is never moved or deleted (the run's supervisor records "
                "what it did with it); send a new one instead",
            )
        return None
    if _LINEAR.fullmatch(ref):
        if new is None:
            return ("HOOK_REF_DELETE", f"{ref} is agentops history and is never deleted; 'git agentops-run' manages it")
        if old is not None and not is_ancestor(old, new):
            return (
                "HOOK_REF_FAST_FORWARD_ONLY",
                f"{ref} only moves forward: {old[:12]} is not an ancestor of "
                f"{new[:12]}; fetch and append instead of rewriting",
            )
    return None
