#!/usr/bin/env python3
"""Figures of the package's large structure, counted over its source (AST, no import of the code under count).

Issue 26 measured how far the code is from the models it is read against (pre-commit, git-revise, ghstack); these
are those measures, made repeatable, so that a change of structure shows as a change of a number:

* ``any_per_kloc`` -- ``dict[str, Any]`` and ``Mapping[str, Any]`` (also ``MutableMapping``, ``typing.Dict``)
  written in the code, per 1,000 lines, outside the **edges** where a document is JSON by nature. The edges are
  :data:`EDGE_MODULES`: ``git_agentops/schema/`` (the validator and :func:`git_agentops.schema.documents.load` /
  ``dump``, which read and write every stored document: their input and output *is* an untyped JSON object) and
  ``git_agentops/canonical.py`` (canonical JSON and digests of any JSON value). Everywhere else a record has a shape
  the code knows, and an untyped mapping is a shape left unsaid. Lines of the edges are left out of the
  denominator too. (pre-commit: 4.9; git-revise and ghstack: 0.)
* ``events_registered`` -- ``<registered>/<kinds>``: the distinct event kinds the code writes (a string literal, a
  module constant holding one, or an ``EventKind`` member, as the first argument or ``code=`` of ``Event(...)`` or
  as the ``event=`` of a call that builds one, like ``loop.set_worker(..., event="...")``) and how many of them
  the registry ``git_agentops.eventkinds`` holds; ``0/<kinds>`` while there is no registry.
* ``host_branches`` -- comparisons of a host kind against a host name literal (``kind == "claude"``,
  ``host.kind in ("codex", "opencode")``, a ``case "aider":``; :data:`HOST_NAMES`) outside
  ``git_agentops/model/hosts/``, where each kind is one module: a branch elsewhere is a kind's behaviour kept
  outside its module.
* ``response_writers`` -- call sites of :func:`git_agentops.protocol.mailbox.write_response`: the places that
  write a worker's ``response.json``.
* ``modules`` and ``kloc`` -- Python files and thousands of lines of ``git_agentops/``.

Last line: ``architecture any_per_kloc=<n> events_registered=<a>/<b> host_branches=<n> response_writers=<n>
modules=<n> kloc=<n>``.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
PACKAGE: Final = "git_agentops"
EDGE_MODULES: Final = ("git_agentops/schema/", "git_agentops/canonical.py")
"""Where documents are untyped JSON by nature (see the module docstring): not counted for ``any_per_kloc``."""
HOST_PLUGINS: Final = "git_agentops/model/hosts/"
HOST_NAMES: Final = frozenset({"claude", "codex", "opencode", "gemini", "aider", "scripted"})
MAPPINGS: Final = frozenset({"dict", "Dict", "Mapping", "MutableMapping"})
EVENT_REGISTRY: Final = "git_agentops.eventkinds"


@dataclass(frozen=True, slots=True)
class Figures:
    """The figures of one source tree (see the module docstring)."""

    any_mappings: int
    counted_lines: int
    event_kinds: frozenset[str]
    registered: frozenset[str]
    host_branches: int
    response_writers: int
    modules: int
    lines: int

    @property
    def any_per_kloc(self) -> float:
        return 1000 * self.any_mappings / self.counted_lines if self.counted_lines else 0.0

    def line(self) -> str:
        registered = len(self.event_kinds & self.registered)
        return (
            f"architecture any_per_kloc={self.any_per_kloc:.1f} events_registered={registered}/{len(self.event_kinds)}"
            f" host_branches={self.host_branches} response_writers={self.response_writers}"
            f" modules={self.modules} kloc={self.lines / 1000:.1f}"
        )


def sources(root: Path) -> Iterator[tuple[str, str]]:
    """(path relative to ``root``, text) of every module of the package, in path order."""
    for path in sorted((root / PACKAGE).rglob("*.py")):
        yield path.relative_to(root).as_posix(), path.read_text("utf-8")


def _name(node: ast.expr) -> str:
    """The last name of ``x`` or ``a.b.x``; empty for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def any_mappings(tree: ast.AST) -> int:
    """How many ``dict[str, Any]``-like subscripts (see :data:`MAPPINGS`) ``tree`` writes."""
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _name(node.value) in MAPPINGS:
            args = node.slice.elts if isinstance(node.slice, ast.Tuple) else []
            if len(args) == 2 and _name(args[0]) == "str" and _name(args[1]) == "Any":
                count += 1
    return count


def _kinds_of(node: ast.expr, constants: dict[str, str]) -> set[str]:
    """The event kinds an expression names: a literal (``"TASK_DELIVERED"``), a module constant holding one
    (``CODE``), an enum member (``EventKind.TASK_DELIVERED``), or either branch of a conditional of those."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Name) and node.id in constants:
        return {constants[node.id]}
    if isinstance(node, ast.Attribute) and _name(node.value) in ("EventKind", "kinds"):
        return {node.attr}  # an enum member, or a registry constant (``kinds.TASK_DELIVERED``)
    if isinstance(node, ast.IfExp):
        return _kinds_of(node.body, constants) | _kinds_of(node.orelse, constants)
    return set()


def _constants(tree: ast.AST) -> dict[str, str]:
    """Module-level ``NAME = "TEXT"`` (or ``NAME: Final = "TEXT"``) assignments."""
    found = {}
    for node in getattr(tree, "body", []):
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(node, ast.AnnAssign):
            target = node.target
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant) and isinstance(value.value, str):
            found[target.id] = value.value
    return found


def event_kinds(tree: ast.AST) -> set[str]:
    """The event kinds ``tree`` writes: the first argument or ``code=`` of ``Event(...)``, and the ``event=`` of
    any call (the helpers that build an event for their caller). A kind passed in a variable is counted where the
    variable's value is written as a literal, when that is an ``event=`` or ``Event(...)`` too."""
    constants = _constants(tree)
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if _name(node.func) == "Event":
            candidates = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "code")]
        else:
            candidates = [k.value for k in node.keywords if k.arg == "event"]
        for candidate in candidates:
            found |= {kind for kind in _kinds_of(candidate, constants) if kind.isupper()}
    # a registry constant named anywhere (``Answer(worker, request, kinds.RUN_PLAN_CREATED, ...)``, a parameter typed
    # ``EventCode``) is a kind the code writes through whatever builds the event from it
    found |= {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and _name(node.value) == "kinds"
        and node.attr.isupper()
        and node.attr not in ("POLICY_STAGE", "EVENTS")
    }
    return found


def _host_literals(node: ast.expr) -> bool:
    """``node`` is a host name literal, or a tuple/list/set of literals at least one of which is."""
    if isinstance(node, ast.Constant):
        return node.value in HOST_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(isinstance(e, ast.Constant) and e.value in HOST_NAMES for e in node.elts)
    return False


def host_branches(tree: ast.AST) -> int:
    """Comparisons (``==``, ``!=``, ``in``, ``not in``) with host name literals, and ``case`` arms matching one.

    Whatever the other side is called (``kind``, ``spec.kind``, ``host["kind"]``, ``name``), outside the plugins a
    comparison with ``"claude"`` is a branch on a host kind."""
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            ops_ok = all(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops)
            if ops_ok and any(_host_literals(side) for side in sides):
                count += 1
        elif isinstance(node, ast.match_case):
            values = [p for p in ast.walk(node.pattern) if isinstance(p, ast.MatchValue)]
            if any(_host_literals(v.value) for v in values):
                count += 1
    return count


def response_writers(tree: ast.AST) -> int:
    """Calls of ``write_response`` (as ``mailbox.write_response(...)`` or imported by name)."""
    return sum(1 for node in ast.walk(tree) if isinstance(node, ast.Call) and _name(node.func) == "write_response")


def registered_kinds(module: str = EVENT_REGISTRY) -> frozenset[str]:
    """The kinds the event registry holds: the members of an ``EventKind`` enum (names and values), or the keys of
    a mapping of kinds it exports (``EVENTS``); empty while the module does not exist."""
    try:
        registry = importlib.import_module(module)
    except ModuleNotFoundError:
        return frozenset()
    found: set[str] = set()
    kinds = getattr(registry, "EventKind", None)
    if isinstance(kinds, type) and issubclass(kinds, Enum):
        for member in kinds:
            found.add(member.name)
            if isinstance(member.value, str):
                found.add(member.value)
    for value in vars(registry).values():
        if isinstance(value, Mapping) and value and all(isinstance(k, str) and k.isupper() for k in value):
            found.update(value)
    return frozenset(found)


def figures(files: Iterable[tuple[str, str]], registered: frozenset[str]) -> Figures:
    """Count over ``files`` ((path, text) pairs; paths as :func:`sources` gives them)."""
    mappings = counted = lines = modules = branches = writers = 0
    kinds: set[str] = set()
    for path, text in files:
        tree = ast.parse(text, filename=path)
        length = len(text.splitlines())
        modules += 1
        lines += length
        if not path.startswith(EDGE_MODULES):
            mappings += any_mappings(tree)
            counted += length
        kinds |= event_kinds(tree)
        if not path.startswith(HOST_PLUGINS):
            branches += host_branches(tree)
        writers += response_writers(tree)
    return Figures(mappings, counted, frozenset(kinds), registered, branches, writers, modules, lines)


def main() -> int:
    sys.path.insert(0, str(ROOT))
    result = figures(sources(ROOT), registered_kinds())
    print(result.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
