"""Path patterns as ``.gitignore`` writes them, for the paths a delivery may not change.

``[guardrails] protected_paths`` names files by the rules people already know from ``.gitignore``:

* a pattern without a ``/`` (but for a trailing one) matches a name at any depth: ``Jenkinsfile`` is the root's
  and ``ci/Jenkinsfile`` alike; one with a ``/`` anywhere is anchored at the top of the tree (a leading ``/``
  only anchors);
* ``*`` matches within one name, ``?`` one character of a name, ``[a-z]`` (``[!a-z]``) a class; ``\\`` escapes;
* ``**/`` at the start matches in every directory, ``/**/`` any number of directories (none included), and
  ``/**`` at the end everything inside -- and, unlike ``.gitignore``, the name before it as well, so a symlink or
  a file put where ``.githooks/`` was is as protected as the directory's contents;
* a trailing ``/`` matches only a directory, which means everything under it;
* a pattern that matches a directory matches every path under it;
* ``!`` negates, and the last pattern that matches a path decides.

Unlike ``.gitignore``, matching ignores case: a checkout on a case-insensitive file system (macOS, Windows)
writes ``.GitHub/Workflows/x.yml`` where ``.github/workflows/x.yml`` would be, so a guard that only knew one
spelling would be walked around. And a negation may re-include a path below a matched directory, because here
every path is judged on its own, not found by walking directories.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

_MAGIC: Final = re.compile(r"([*?\[\\!])")


@dataclass(frozen=True, slots=True)
class PathPattern:
    """One compiled pattern: the ``text`` as written, whether it negates, whether it matches directories only."""

    text: str
    regex: re.Pattern[str]
    negated: bool
    directory_only: bool

    def matches(self, path: str) -> bool:
        """Whether this pattern (ignoring its ``!``) matches ``path`` or a directory above it."""
        parts = path.split("/")
        for depth in range(1, len(parts) + 1):
            is_directory = depth < len(parts)
            if self.directory_only and not is_directory:
                continue
            if self.regex.fullmatch("/".join(parts[:depth])):
                return True
        return False


def literal(path: str) -> str:
    """A pattern that matches exactly the file ``path`` (relative to the top; ``./`` and ``//`` removed)."""
    return "/" + _MAGIC.sub(r"\\\1", normalise(path))


def normalise(path: str) -> str:
    """``./a//b/`` -> ``a/b``: a relative path as a tree spells it."""
    return "/".join(part for part in path.split("/") if part not in ("", "."))


def compile_pattern(text: str) -> PathPattern:
    """The pattern ``text`` compiled; ValueError when it can match nothing (empty, ``/``, a trailing ``\\``)."""
    negated = text.startswith("!")
    body = text[1:] if negated else text
    directory_only = body.endswith("/")
    body = body.rstrip("/") if directory_only else body
    if not body or body == "/":
        raise ValueError("the pattern names no path")
    if body.endswith("\\") and not body.endswith("\\\\"):
        raise ValueError("the pattern ends with an escaping backslash")
    anchored = "/" in body
    body = body.removeprefix("/")
    if not body:
        raise ValueError("the pattern names no path")
    prefix = "" if anchored or body.startswith("**/") else "(?:.*/)?"
    return PathPattern(text, re.compile(prefix + _translate(body), re.IGNORECASE | re.DOTALL), negated, directory_only)


def _translate(body: str) -> str:
    out: list[str] = []
    index, size = 0, len(body)
    while index < size:
        char = body[index]
        if char == "\\" and index + 1 < size:
            out.append(re.escape(body[index + 1]))
            index += 2
        elif body.startswith("**", index) and (index == 0 or body[index - 1] == "/"):
            rest = index + 2
            if rest == size and index == 0:  # "**" alone: everything
                out.append(".*")
                index = rest
            elif rest == size:  # "a/**": everything inside -- and "a" itself, should it be a file or a symlink
                out[-1] = "(?:/.*)?"  # replaces the "/" before the "**"
                index = rest
            elif body[rest] == "/":  # "**/" at the start or "/**/" within: any number of directories
                out.append("(?:.*/)?")
                index = rest + 1
            else:  # "**x" is "*x"
                out.append("[^/]*")
                index = rest
        elif char == "*":
            while index < size and body[index] == "*":
                index += 1
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
            index += 1
        elif char == "[" and (end := _class_end(body, index)) is not None:
            out.append(_class(body[index + 1 : end]))
            index = end + 1
        else:
            out.append(re.escape(char))
            index += 1
    return "".join(out)


def _class_end(body: str, start: int) -> int | None:
    """The index of the ``]`` closing the class opened at ``start``, or None (then ``[`` is an ordinary char)."""
    index = start + 1
    if index < len(body) and body[index] in "!^":
        index += 1
    if index < len(body) and body[index] == "]":
        index += 1  # "[]a]": a leading "]" is a member
    while index < len(body):
        if body[index] == "\\":
            index += 2
            continue
        if body[index] == "]":
            return index
        index += 1
    return None


def _class(inner: str) -> str:
    negate = inner[:1] in ("!", "^")
    inner = inner[1:] if negate else inner
    members = []
    index = 0
    while index < len(inner):
        char = inner[index]
        if char == "\\" and index + 1 < len(inner):
            members.append(re.escape(inner[index + 1]))
            index += 2
            continue
        members.append("-" if char == "-" else re.escape(char))
        index += 1
    listed = "".join(members)
    return f"[^/{listed}]" if negate else f"(?!/)[{listed}]"  # a class never matches the "/" between names


class PathRules:
    """An ordered list of patterns; :meth:`decide` gives the pattern that decides a path, if it is matched."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns: Sequence[PathPattern] = tuple(compile_pattern(p) for p in patterns)

    def decide(self, path: str) -> str | None:
        """The text of the last pattern that matches ``path`` when it does not negate; None otherwise."""
        for pattern in reversed(self.patterns):
            if pattern.matches(path):
                return None if pattern.negated else pattern.text
        return None
