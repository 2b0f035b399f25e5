"""A pinned requirements file as a shared base installs it, and the lines a base never takes from a commit.

A base is keyed by the files that declare dependencies (:func:`~.pybase.inputs_digest`); what it installs must
follow from those alone, or one commit could decide what another gets. So the files a requirements file includes
(``-r``/``-c``) inside the checkout are part of the key, ``-r`` files are read in and filtered like the top one (no
editable or local-path line at any depth: the project itself, most often), and a line that takes code from a path
or a ``file:`` index (:func:`local_references`) -- code no part of the key covers, built with the base writable --
is refused when the base is built for a checkout nobody vouched for.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ..canonical import sha256_hex
from .pydeps import filtered_requirements, requirement_lines

_INCLUDE: Final = re.compile(r"(-r|--requirement|-c|--constraint)(?:\s+|=)(\S+)(.*)")
_LOCAL_REFERENCE: Final = re.compile(r"@\s*(file:|\.{0,2}/|~)|^\s*(file:|\.{0,2}/|~|-e\b|--editable\b)")
_SOURCE_OPTION: Final = re.compile(r"(-f|--find-links|-i|--index-url|--extra-index-url)(?:\s+|=)(\S+)")
MAX_INCLUDES: Final = 64


def _included(path: Path, root: Path) -> list[tuple[str, Path]]:
    """The ``-r``/``-c`` files a requirements file includes, each once, recursively: only those inside ``root``
    (regular files; a link is followed to where it points, which must be inside too) are read, as
    ``(option, path)``; one outside is pip's to read, confined (:func:`ensure_base`)."""
    found: list[tuple[str, Path]] = []
    todo, seen = [path.resolve()], {path.resolve()}
    while todo and len(found) < MAX_INCLUDES:
        current = todo.pop()
        for line in requirement_lines(current):
            match = _INCLUDE.match(line)
            if match is None:
                continue
            target = Path(match.group(2))
            target = (target if target.is_absolute() else current.parent / target).resolve()
            if target in seen or not target.is_relative_to(root) or not target.is_file():
                continue
            seen.add(target)
            found.append((match.group(1).lstrip("-")[0], target))
            todo.append(target)
    return found


def includes(path: Path, root: Path) -> dict[str, str]:
    """Each file inside the checkout a requirements file includes, by its content: part of the base's key, so two
    commits whose top file is the same but whose included files differ never share a base."""
    return {str(p.relative_to(root)): sha256_hex(p.read_bytes()) for _kind, p in _included(path, root)}


def requirements_of(path: Path, root: Path) -> list[str]:
    """The lines a base installs from a pinned requirements file: :func:`filtered_requirements`, with each ``-r``
    file inside the checkout read in and filtered the same way (no editable or local-path installs at any depth:
    the project itself, most often, which the base never holds). ``-c`` and files outside stay includes."""
    root = root.resolve()
    lines: list[str] = []
    todo, seen = [path.resolve()], {path.resolve()}
    while todo and len(seen) <= MAX_INCLUDES:
        for line in filtered_requirements(todo.pop(0)):
            match = _INCLUDE.match(line)
            target = Path(match.group(2)) if match is not None and match.group(1) in ("-r", "--requirement") else None
            if target is not None and target.is_relative_to(root) and target.is_file():
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
                continue
            lines.append(line)
    return lines


def local_references(lines: Sequence[str]) -> list[str]:
    """The requirement lines that take code from a path or ``file:`` URL rather than an index -- a path or
    ``name @ file:...`` requirement, an editable one, ``--find-links``/``--index-url`` naming a directory: what
    they install is in no part of the base's key."""
    found = []
    for line in lines:
        option = _SOURCE_OPTION.match(line)
        if option is not None:
            if "://" not in option.group(2) or option.group(2).startswith("file:"):
                found.append(line)
        elif _LOCAL_REFERENCE.search(line.split(";", 1)[0]):
            found.append(line)
    return found
