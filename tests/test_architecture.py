"""Layering rules of STYLE.md, enforced by walking the AST of every module.

* only ``cli/`` prints, prompts, reads the environment or exits;
* only ``gitstore/`` writes refs or objects (pygit2 write calls, ``git update-ref``...);
* ``model/`` does no I/O and imports nothing that does;
* layers import downward only (nothing below ``cli`` imports ``cli``; ``gitstore`` and ``model`` import no upper
  layer);
* every error code raised anywhere is registered in ``errors.CODES``;
* the hook fast path and ``--help`` do not import pygit2 or jsonschema.
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from git_agentops import eventkinds as event_kinds
from git_agentops import layers
from git_agentops.errors import CODES

PACKAGE = Path(__file__).resolve().parents[1] / "git_agentops"
MODULES = sorted(PACKAGE.rglob("*.py"))

OBJECT_WRITES = {
    "create_commit",
    "create_blob",
    "create_blob_fromworkdir",
    "create_blob_fromdisk",
    "create_blob_fromiobase",
    "create_note",
    "TreeBuilder",
    "set_target",
    "transaction",
    "create_reference",
    "create_reference_direct",
    "create_reference_symbolic",
    "create_tag",
    "write",
    "rename",
    "delete",
    "set_head",
    "add_worktree",
}
# ``write``/``rename``/``delete`` are also ordinary file methods; they count only on pygit2-looking receivers.
AMBIGUOUS = {"write", "rename", "delete"}
IO_MODULES = {"os", "subprocess", "pygit2", "dulwich", "shutil", "socket", "pathlib", "io", "tempfile", "fcntl"}


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _layer(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0].removesuffix(".py") if parts else ""


@functools.cache
def _parsed() -> tuple[tuple[Path, ast.AST], ...]:
    """Every module's syntax tree, parsed once per process: the checks only read them (about 1 s of CPU per parse
    of the whole package, and a dozen checks walk it)."""
    return tuple((path, ast.parse(path.read_text("utf-8"), filename=str(path))) for path in MODULES)


def _trees() -> Iterator[tuple[Path, ast.AST]]:
    yield from _parsed()


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "?"


PROGRAMS = {"sandbox/launcher.py", "sandbox/namespace.py"}
"""Standalone programs outside ``cli``: the sandbox launcher runs as ``python3 -I -S launcher.py SPEC`` between the
supervisor and an agent, and must exit with the agent's status (``os._exit``, after a fork too)."""


def test_only_cli_prints_prompts_exits_or_reads_the_environment() -> None:
    offences = []
    for path, tree in _trees():
        if _layer(path) == "cli" or _rel(path) in PROGRAMS:
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("print", "input", "exit", "quit", "breakpoint")
            ):
                offences.append(f"{_rel(path)}:{node.lineno} calls {node.func.id}()")
            if isinstance(node, ast.Attribute) and _dotted(node) in (
                "os.environ",
                "os.getenv",
                "os.putenv",
                "os.environb",
                "sys.exit",
                "os._exit",
                "sys.stdout",
                "sys.stderr",
                "sys.stdin",
                "os.unsetenv",
            ):
                offences.append(f"{_rel(path)}:{node.lineno} uses {_dotted(node)}")
            if (
                isinstance(node, ast.ImportFrom)
                and node.module == "os"
                and any(alias.name in ("environ", "getenv", "_exit") for alias in node.names)
            ):
                offences.append(f"{_rel(path)}:{node.lineno} imports os.environ/getenv")
    assert offences == []


def _compared_constants(tree: ast.AST) -> set[int]:
    """Ids of the constants a comparison reads (``sub == "notes"``, ``sub in ("update-ref", ...)``): naming a git
    subcommand to recognise it -- as the agent guard does to refuse it -- is not running it."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                found.update(id(sub) for sub in ast.walk(operand) if isinstance(sub, ast.Constant))
    return found


def test_only_gitstore_writes_refs_and_objects() -> None:
    offences = []
    for path, tree in _trees():
        if _layer(path) == "gitstore":
            continue
        compared = _compared_constants(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                name = node.func.attr
                receiver = _dotted(node.func.value)
                if name in OBJECT_WRITES and (name not in AMBIGUOUS or re.search(r"repo|ref|tx|index", receiver)):
                    offences.append(f"{_rel(path)}:{node.lineno} calls {receiver}.{name}()")
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value
                in ("update-ref", "symbolic-ref", "notes", "hash-object", "mktree", "commit-tree", "pack-refs")
                and id(node) not in compared
            ):
                offences.append(f"{_rel(path)}:{node.lineno} runs git {node.value}")
    assert offences == []


PURE = {"git_agentops.errors", "git_agentops.canonical", "git_agentops.clock", "git_agentops.eventkinds"}
"""The foundations a value may import: they do no I/O either."""


def _is_value_module(module: str) -> bool:
    """``model`` and a feature's modules ranked with it: values, which do no I/O."""
    below = module.partition(".")[2]
    top = below.partition(".")[0]
    return top == "model" or (top in layers.FEATURES and layers.rank(below) <= LAYERS["model"])


def test_model_does_no_io() -> None:
    offences = []
    for path, tree in _trees():
        if _layer(path) != "model":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                offences += [f"{_rel(path)} imports {a.name}" for a in node.names if a.name.split(".")[0] in IO_MODULES]
            elif isinstance(node, ast.ImportFrom):
                root = (node.module or "").split(".")[0]
                if node.level == 0 and root in IO_MODULES:
                    offences.append(f"{_rel(path)} imports from {node.module}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
                offences.append(f"{_rel(path)}:{node.lineno} calls open()")
    for module, targets in _import_graph().items():
        if module.startswith("git_agentops.model"):
            offences += [f"{module} imports {t}" for t in targets if not _is_value_module(t) and t not in PURE]
    assert offences == []


LAYERS = layers.LAYERS  # the ranking README's architecture table is generated from


def test_layers_import_downward_only() -> None:
    """Invariant: every import (module level, in a function or under TYPE_CHECKING) goes to the importer's own
    package or to a package of a lower layer; in particular ``gitstore`` and ``model`` import no upper layer,
    ``model`` no ``gitstore``, and nothing below ``cli`` imports ``cli``."""
    graph = _import_graph()
    offences = []
    assert {_layer(path) for path in MODULES} == set(LAYERS), "every top-level package needs a layer"
    for module, targets in graph.items():
        mine = module.partition(".")[2] or "__init__"
        for target in targets:
            theirs = target.partition(".")[2] or "__init__"
            if not layers.may_import(mine, theirs):
                offences.append(f"{module} (layer {layers.rank(mine)}) imports {target} (layer {layers.rank(theirs)})")
    assert sorted(offences) == []


def test_every_module_of_a_feature_package_is_ranked() -> None:
    """Invariant: a feature package (``layers.FEATURES``) ranks each of its modules, no more and no fewer."""
    for feature, ranks in layers.FEATURES.items():
        modules = {p.stem for p in (PACKAGE / feature).glob("*.py")}
        assert set(ranks) == modules, feature


def test_a_feature_module_at_the_values_layer_does_no_io() -> None:
    """Invariant: a feature's module ranked with the values (layer 3 or lower) keeps ``model``'s rule -- it imports
    no I/O module and only values (``model``, the pure foundations, value modules of features) -- so a record kept
    in a feature room stays a pure value."""
    offences = []
    for module, targets in _import_graph().items():
        if _is_value_module(module):
            offences += [f"{module} imports {t}" for t in targets if not _is_value_module(t) and t not in PURE]
    for feature, ranks in layers.FEATURES.items():
        for stem, at in ranks.items():
            if at > LAYERS["model"]:
                continue
            tree = ast.parse((PACKAGE / feature / f"{stem}.py").read_text("utf-8"))
            for node in ast.walk(tree):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module or ""]
                offences += [f"{feature}/{stem}.py imports {n}" for n in names if n.split(".")[0] in IO_MODULES]
    assert offences == []


def test_feature_ranks_are_enforced() -> None:
    """The rule itself, on names that need not exist: a feature's module may import its own feature's lower or
    equal ranks and lower layers, never a higher rank of its own feature nor a layer package of its own rank."""
    saved = dict(layers.FEATURES)
    layers.FEATURES["room"] = {"__init__": 3, "record": 3, "journal": 8, "drive": 10}
    layers.LAYERS["room"] = 10
    try:
        layers.FEATURES["other"] = {"__init__": 8, "journal": 8}
        layers.LAYERS["other"] = 8
        assert layers.may_import("room.drive", "room.journal")
        assert layers.may_import("room.journal", "room.record")
        assert layers.may_import("room.drive", "runs.state")
        assert not layers.may_import("room.record", "room.journal")  # upward inside the room
        assert layers.may_import("room.journal", "runs.state")  # a member of layer 8 and a layer-8 package
        assert layers.may_import("runs.state", "room.journal")
        assert layers.may_import("supervisor.loop", "room.drive")
        assert not layers.may_import("room.journal", "supervisor.loop")
        assert layers.may_import("room.journal", "other.journal")  # two rooms' members of one layer
        assert not layers.may_import("runs.state", "room.drive")
        assert not layers.may_import("receipts.check", "protocol.client")  # layer packages: strictly lower, as before
        assert layers.may_import("runs.state", "room.record")
    finally:
        layers.FEATURES.clear()
        layers.FEATURES.update(saved)
        del layers.LAYERS["room"], layers.LAYERS["other"]


def test_every_raised_code_is_registered() -> None:
    used: dict[str, str] = {}
    for path, tree in _trees():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = _dotted(node.func).rsplit(".", 1)[-1]
            first = node.args[0]
            if (
                func.endswith("Error")
                and isinstance(first, ast.Constant)
                and (isinstance(first.value, str) and re.fullmatch(r"[A-Z][A-Z0-9_]+", first.value))
            ):
                used.setdefault(first.value, f"{_rel(path)}:{node.lineno}")
            if func == "run_with_retry":
                for keyword in node.keywords:
                    if keyword.arg == "code" and isinstance(keyword.value, ast.Constant):
                        used.setdefault(str(keyword.value.value), f"{_rel(path)}:{node.lineno}")
    unregistered = {code: where for code, where in used.items() if code not in CODES}
    assert unregistered == {}
    assert len(used) > 20


def test_readme_lists_every_error_code() -> None:
    readme = (PACKAGE.parent / "README.md").read_text("utf-8")
    missing = [code for code in CODES if f"| `{code}` |" not in readme]
    assert missing == []


@pytest.mark.parametrize(
    "statement",
    [
        "import git_agentops.cli.hook",
        "import git_agentops.errors, git_agentops.canonical, git_agentops.gitstore.refnames",
        "import git_agentops.gitstore.private",
        "from git_agentops.cli import doctor; doctor.build_parser().format_help()",
        "import git_agentops.cli.verify, git_agentops.verify.core, git_agentops.policy.load, git_agentops.policy.trust",
        "import git_agentops.gitstore.notes, git_agentops.gitstore.backend, git_agentops.verify.evidence",
        # the agent guard's whole path, the secret rules included (the line holds a token-shaped string)
        "from git_agentops.hooks.agent import agent_command; agent_command(['--host', 'claude'], cwd='/', env={}, "
        'stdin=b\'{"tool_name": "Bash", "tool_input": {"command": "git status && echo ghp_\' + b\'a\' * 36 + b\'"}}\')',
    ],
)
def test_light_imports_do_not_pull_pygit2_or_jsonschema(statement: str) -> None:
    code = f"{statement}\nimport sys\nprint(sorted(m for m in ('pygit2', 'jsonschema', 'dulwich') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


MODULE_CAP = 800
"""Lines a module may have. A module is split where a concept ends, never to get under this number (issue 26)."""


TOP_LEVEL_TESTS = frozenset(
    {"architecture", "architecture_figures", "canonical", "closed_sets", "error_classes", "event_kinds"}
    | {"attacks", "golden_runs", "runkit"}
)
"""The test files that stay in ``tests/``: those of the top-level modules (layers, canonical JSON, errors, event
kinds, the closed sets they share), the attacker's end-to-end play across every package, and the harness's own."""


def test_tests_mirror_the_source_tree() -> None:
    """Invariant: a package's tests are in the test directory of its name (``git_agentops/verify/`` ->
    ``tests/verify/``); only :data:`TOP_LEVEL_TESTS` stay at the top."""
    tests = PACKAGE.parent / "tests"
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert {p.parent.name for p in tests.glob("*/test_*.py")} - packages == set()
    assert {p.stem.removeprefix("test_") for p in tests.glob("test_*.py")} - TOP_LEVEL_TESTS == set()


def test_modules_stay_small() -> None:
    too_big = {_rel(p): n for p in MODULES if (n := len(p.read_text("utf-8").splitlines())) > MODULE_CAP}
    assert too_big == {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the modules of this package it imports, counting every import statement: at module level, inside
    functions and under ``if TYPE_CHECKING`` alike (a cycle hidden in a function is still a cycle of design)."""
    names = {_module_name(path): path for path in MODULES}
    graph: dict[str, set[str]] = {name: set() for name in names}
    for path, tree in _trees():
        name = _module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base_parts = package.split(".")
                    base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in names else base for alias in node.names]
            for target in targets:
                while target and target not in names:  # "import a.b.c" of an attribute: its module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_cycles_anywhere() -> None:
    """Invariant: the package's import graph is acyclic, counting imports in functions and under TYPE_CHECKING."""
    cycles = _cycles(_import_graph())
    assert cycles == [], "\n".join(" <-> ".join(c) for c in cycles)


def test_module_level_regexes_are_anchored_by_the_call() -> None:
    """Invariant: no module-level regex is anchored with ``^...$``. Python's ``$`` also matches before a final
    newline, so ``re.compile(r"^[a-z]+$").match("abc\\n")`` passes: validators call ``fullmatch`` (or anchor with
    ``\\Z``), prefix parsers call ``match``; neither needs ``^`` or ``$`` in the pattern."""
    offences = []
    for path, tree in _trees():
        for node in tree.body:
            if not isinstance(node, ast.Assign | ast.AnnAssign) or not isinstance(node.value, ast.Call):
                continue
            call = node.value
            if _dotted(call.func) != "re.compile" or not call.args or not isinstance(call.args[0], ast.Constant):
                continue
            pattern = call.args[0].value
            text = pattern.decode("latin-1") if isinstance(pattern, bytes) else str(pattern)
            multiline = any("MULTILINE" in ast.unparse(arg) or "re.M" in ast.unparse(arg) for arg in call.args[1:])
            if text.startswith("^") or (text.endswith("$") and not text.endswith("\\$") and not multiline):
                offences.append(f"{_rel(path)}:{node.lineno} compiles {text!r}")
    assert offences == []


EXTRA_OF_OTHER_RECORDS = {
    ("integrate/reviews.py", "launch"),  # a host launch's own extra values, not a task's or a worker's
    ("gitstore/clean.py", "self"),  # a checkout drift's untracked paths
}
"""The ``.extra`` attributes that are not a task's or a worker's: (module, receiver)."""


def test_tasks_and_workers_are_read_through_their_fields_not_an_extra_dict() -> None:
    """Invariant: no ``x.extra[...]`` or ``x.extra.get(...)`` on a task or a worker. Their run-level bookkeeping
    (worker id, delivery; wake, resumed session, interruption, provisioning) are typed fields whose stored
    ``extra`` object is generated from one field map (``TASK_EXTRA``, ``WORKER_EXTRA``), and neither record has an
    ``extra`` attribute for a reader to reach into."""
    from dataclasses import fields

    from git_agentops.model.run import Worker
    from git_agentops.model.task import Task

    assert [f.name for f in (*fields(Task), *fields(Worker)) if f.name == "extra"] == []
    offences = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            attribute = None
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute):
                attribute = node.value
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and isinstance(node.func.value, ast.Attribute)
            ):
                attribute = node.func.value
            if attribute is None or attribute.attr != "extra":
                continue
            receiver = ast.unparse(attribute.value)
            if (_rel(path), receiver) not in EXTRA_OF_OTHER_RECORDS:
                offences.append(f"{_rel(path)}:{node.lineno} reads {receiver}.extra")
    assert offences == []


# -- registered vocabularies (issue 26 item 5) -------------------------------------------------------------------------

EVENTS_MODULE = "git_agentops.eventkinds"
EVENT_TABLES = {"POLICY_STAGE"}
"""The registry's tables of kinds (``kinds.POLICY_STAGE[stage]``): a code looked up in one is one of its values."""


class _Kinds:
    """Resolves an ``Event(...)``'s code argument, statically, to the kind names it can be.

    A code is a literal, a registry constant (``kinds.X``, or ``X`` imported from the registry), a module constant
    or local variable bound to one of those, either branch of a conditional, a lookup in one of the registry's
    :data:`EVENT_TABLES`, or a parameter annotated ``EventCode`` -- whose callers mypy holds to registry constants
    (and :func:`test_event_codes_are_made_only_by_the_registry` keeps anyone else from making one).
    """

    TYPED = "<a parameter typed EventCode>"

    def __init__(self) -> None:
        self.modules = {_module_name(path): tree for path, tree in _trees()}

    def _imports(self, module: str) -> dict[str, str]:
        """Local name -> the dotted name it was imported as (``kinds`` -> ``git_agentops.eventkinds``)."""
        found: dict[str, str] = {}
        package = module.split(".") if module in self.modules and self._is_package(module) else module.split(".")[:-1]
        for node in ast.walk(self.modules[module]):
            if isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                source = ".".join([*base, *(node.module.split(".") if node.module else [])])
                for alias in node.names:
                    found[alias.asname or alias.name] = f"{source}.{alias.name}"
        return found

    def _is_package(self, module: str) -> bool:
        return (PACKAGE.parent / module.replace(".", "/") / "__init__.py").exists()

    def _module_value(self, module: str, name: str) -> ast.expr | None:
        for node in self.modules[module].body if module in self.modules else []:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return node.value
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                return node.value
        return None

    def _dotted_kind(self, dotted: str) -> set[str] | None:
        """``git_agentops.eventkinds.X`` -> {X}; a module constant elsewhere -> what it is bound to."""
        module, _, name = dotted.rpartition(".")
        if module == EVENTS_MODULE:
            return {name}
        value = self._module_value(module, name)
        return None if value is None else self.resolve(value, module, None)

    def resolve(self, node: ast.expr, module: str, function: ast.FunctionDef | None) -> set[str] | None:
        """The kind names ``node`` can be (:data:`TYPED` for a parameter typed ``EventCode``); None: unresolvable."""
        imports = self._imports(module)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, ast.IfExp):
            body, orelse = self.resolve(node.body, module, function), self.resolve(node.orelse, module, function)
            return None if body is None or orelse is None else body | orelse
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in imports:
            return self._dotted_kind(f"{imports[node.value.id]}.{node.attr}")
        if isinstance(node, ast.Subscript):
            table = _dotted(node.value).rsplit(".", 1)
            if len(table) == 2 and imports.get(table[0]) == EVENTS_MODULE and table[1] in EVENT_TABLES:
                return {str(code) for code in getattr(event_kinds, table[1]).values()}
            return None
        if not isinstance(node, ast.Name):
            return None
        if function is not None:
            arguments = [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]
            for argument in arguments:
                if argument.arg == node.id:
                    typed = argument.annotation is not None and ast.unparse(argument.annotation).endswith("EventCode")
                    return {self.TYPED} if typed else None
            bound = [
                n.value
                for n in ast.walk(function)
                if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == node.id for t in n.targets)
            ]
            if bound:
                found = [self.resolve(value, module, function) for value in bound]
                return None if any(f is None for f in found) else set().union(*(f for f in found if f))
        if node.id in imports:
            return self._dotted_kind(imports[node.id])
        value = self._module_value(module, node.id)
        return None if value is None else self.resolve(value, module, None)

    def event_calls(self) -> Iterator[tuple[str, int, set[str] | None]]:
        """Each ``Event(...)`` construction in the package: module, line, the kinds its code can be."""
        for module, tree in self.modules.items():
            if module == EVENTS_MODULE:
                continue
            functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call) or _dotted(node.func).rsplit(".", 1)[-1] != "Event":
                    continue
                if _dotted(node.func) == "threading.Event":
                    continue
                code = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "code"), None)
                if code is None:
                    yield module, node.lineno, None
                    continue
                around = [f for f in functions if f.lineno <= node.lineno <= (f.end_lineno or f.lineno)]
                innermost = max(around, key=lambda f: f.lineno) if around else None
                function = innermost if isinstance(innermost, ast.FunctionDef) else None
                yield module, node.lineno, self.resolve(code, module, function)

    def referenced(self) -> set[str]:
        """Every registry constant the package names outside the registry (``kinds.X``, ``from ... import X``),
        with the values of the tables it looks kinds up in."""
        names: set[str] = set()
        for module in self.modules:
            if module == EVENTS_MODULE:
                continue
            imports = self._imports(module)
            for node in ast.walk(self.modules[module]):
                dotted = None
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in imports:
                    dotted = f"{imports[node.value.id]}.{node.attr}"
                elif isinstance(node, ast.Name) and node.id in imports:
                    dotted = imports[node.id]
                if dotted is None or dotted.rpartition(".")[0] != EVENTS_MODULE:
                    continue
                name = dotted.rpartition(".")[2]
                if name in EVENT_TABLES:
                    names |= {str(code) for code in getattr(event_kinds, name).values()}
                elif re.fullmatch(r"[A-Z][A-Z0-9_]+", name) and name not in {"EVENTS"}:
                    names.add(name)
        return names


def _event_kinds_used() -> tuple[set[str], list[str]]:
    """The kind names the package's events can carry, and the constructions whose code resolves to nothing known."""
    resolver = _Kinds()
    used = resolver.referenced()
    unresolved = []
    for module, line, kinds in resolver.event_calls():
        if kinds is None:
            unresolved.append(f"{module}:{line}")
        else:
            used |= kinds - {_Kinds.TYPED}
    return used, unresolved


def test_every_event_names_a_registered_kind() -> None:
    """Invariant: every ``Event(...)`` in the package carries a registered kind: its code resolves statically to
    registry constants (or literals), or comes through a parameter typed ``EventCode``; nothing else."""
    used, unresolved = _event_kinds_used()
    assert unresolved == []
    assert sorted(used - set(event_kinds.EVENTS)) == []
    assert len(used) > 40


def test_every_registered_event_kind_is_used() -> None:
    """Invariant: the registry (and so README's table) lists no kind the code never writes."""
    used, _ = _event_kinds_used()
    assert sorted(set(event_kinds.EVENTS) - used) == []


def test_event_codes_are_made_only_by_the_registry() -> None:
    """Invariant: ``EventCode(...)`` is called only in ``eventkinds.py``, so a value typed ``EventCode`` is a
    registry constant: what makes a parameter typed ``EventCode`` as good as a literal kind."""
    offences = [
        f"{_rel(path)}:{node.lineno}"
        for path, tree in _trees()
        if _rel(path) != "eventkinds.py"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _dotted(node.func).rsplit(".", 1)[-1] == "EventCode"
    ]
    assert offences == []


def vocabulary_figures() -> str:
    """``events_registered=<used kinds that are registered>/<kinds used>``, for the issue's one-line figure."""
    used, unresolved = _event_kinds_used()
    registered = len(used & set(event_kinds.EVENTS))
    return f"events_registered={registered}/{len(used) + len(unresolved)}"


def test_vocabulary_figures_say_every_used_kind_is_registered() -> None:
    figures = vocabulary_figures()
    registered, used = figures.removeprefix("events_registered=").split("/")
    assert registered == used, figures


def _exception_names(function: ast.AST) -> set[str]:
    """Names that hold an exception in ``function``: bound by ``except ... as NAME``, or annotated ``...Error``."""
    names = {n.name for n in ast.walk(function) if isinstance(n, ast.ExceptHandler) and n.name}
    if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
        arguments = [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]
        names |= {a.arg for a in arguments if a.annotation is not None and ast.unparse(a.annotation).endswith("Error")}
    return names


def test_no_branching_on_error_code_strings() -> None:
    """Invariant: no caller compares an exception's ``.code`` (``exc.code == "LOCK_HELD"``, ``.code in (...)``,
    ``match exc.code``) outside ``errors.py``: a code a caller branches on has its class (``errors.CodedError``),
    caught by type. Codes of records (an event's, a failure's) are compared with their registered constants."""
    offences = []
    for path, tree in _trees():
        if _rel(path) == "errors.py":
            continue
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            exceptions = _exception_names(function)
            for node in ast.walk(function):
                operands = (
                    [node.left, *node.comparators]
                    if isinstance(node, ast.Compare)
                    else [node.subject]
                    if isinstance(node, ast.Match)
                    else []
                )
                for operand in operands:
                    if (
                        isinstance(operand, ast.Attribute)
                        and operand.attr == "code"
                        and isinstance(operand.value, ast.Name)
                        and operand.value.id in exceptions
                    ):
                        offences.append(f"{_rel(path)}:{node.lineno} {ast.unparse(node)[:80]}")
    assert sorted(set(offences)) == []


def test_every_coded_error_class_is_caught_by_some_caller() -> None:
    """Invariant: a code gets a class because a caller branches on it: each :class:`~git_agentops.errors.CodedError`
    class is named in an ``except`` clause or an ``isinstance`` somewhere in the package."""
    from git_agentops.errors import BY_CODE

    caught: set[str] = set()
    for _, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.ExceptHandler) and node.type is not None:
                caught |= {_dotted(n).rsplit(".", 1)[-1] for n in ast.walk(node.type)}
            if isinstance(node, ast.Call) and _dotted(node.func) == "isinstance" and len(node.args) == 2:
                caught |= {_dotted(n).rsplit(".", 1)[-1] for n in ast.walk(node.args[1])}
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple):  # LOST = (LeaseHeld, LeaseLost)
                caught |= {_dotted(n) for n in node.value.elts if _dotted(n) in {c.__name__ for c in BY_CODE.values()}}
    assert sorted(c.__name__ for c in BY_CODE.values() if c.__name__ not in caught) == []


# -- the request path (issue 26 item 3) -------------------------------------------------------------------------------


def _response_writers() -> list[str]:
    """Every place that writes a worker's ``response.json``: a call of ``write_response``, or a private write naming
    the mailbox's ``RESPONSE`` path outside ``write_response`` itself."""
    sites = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "write_response":
                continue  # its own write is what the one call reaches
            if not isinstance(node, ast.Call):
                continue
            name = _dotted(node.func).rsplit(".", 1)[-1]
            named = {_dotted(arg).rsplit(".", 1)[-1] for arg in node.args}
            if name == "write_response" or (name.startswith("write") and "RESPONSE" in named):
                sites.append(f"{_rel(path)}:{node.lineno}")
    return sorted(set(sites) - _own_write())


def _own_write() -> set[str]:
    """The line inside ``mailbox.write_response`` that writes the file (not a writer of its own)."""
    path = PACKAGE / "protocol" / "mailbox.py"
    tree = ast.parse(path.read_text("utf-8"))
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "write_response")
    return {f"{_rel(path)}:{n.lineno}" for n in ast.walk(function) if isinstance(n, ast.Call)}


def request_figures() -> dict[str, int]:
    """The request path's figure for the issue's one-line summary: ``response_writers`` -- how many places write a
    worker's ``response.json`` (1: the supervisor loop's ``respond``)."""
    return {"response_writers": len(_response_writers())}


def test_only_the_supervisor_loop_writes_response_json() -> None:
    """Invariant: ``response.json`` has one writer, the supervisor loop's ``respond`` (jobs return ``Answered`` or
    ``Refused`` and handlers call ``loop.respond``), so two threads never race to answer one worker."""
    writers = _response_writers()
    assert [site.rsplit(":", 1)[0] for site in writers] == ["supervisor/loop.py"], writers
    assert request_figures() == {"response_writers": 1}
    print(" ".join(f"{key}={value}" for key, value in request_figures().items()))


def test_request_records_have_one_writer() -> None:
    """Invariant: the idempotency record of a request is written by ``runs.state.put_request_record`` alone (from
    :class:`~git_agentops.model.request.RequestRecord`), not by copies of the same dict in each answering module."""
    sites = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _dotted(node.func).endswith("put_json"):
                schemas = [k.value for k in node.keywords if k.arg == "schema" and isinstance(k.value, ast.Constant)]
                if [s.value for s in schemas] == ["request-record"]:
                    sites.append(f"{_rel(path)}:{node.lineno}")
    assert [site.rsplit(":", 1)[0] for site in sites] == ["runs/state.py"], sites


def _bench_architecture() -> ModuleType:
    """``bench/architecture.py``, the script that prints the issue's figure line, loaded as a module."""
    import importlib.util

    path = PACKAGE.parent / "bench" / "architecture.py"
    spec = importlib.util.spec_from_file_location("bench_architecture", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up while the class is made
    spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def test_no_host_kind_branch_outside_the_host_plugins() -> None:
    """Invariant: no module outside ``model/hosts/`` compares anything with a host kind's name (``kind ==
    "scripted"``, ``in ("codex", ...)``, ``case "claude":``): what differs by kind is an attribute or method of the
    kind's plugin (:class:`git_agentops.model.hosts.base.HostKind`), asked through the registry. The figure script
    counts the same rule (``host_branches=0``), over names that are every agent kind the registry holds."""
    from git_agentops.model.hosts import registry

    arch = _bench_architecture()
    assert set(registry()) - {"command"} <= arch.HOST_NAMES  # a new kind's name is counted too
    offences = [
        _rel(path)
        for path, tree in _trees()
        if not _rel(path).startswith("model/hosts/") and arch.host_branches(tree) > 0
    ]
    assert offences == []
    line = arch.figures(arch.sources(PACKAGE.parent), frozenset()).line()
    assert " host_branches=0 " in line, line


def test_the_hook_path_compares_with_its_vocabularies_without_importing_the_records() -> None:
    """Invariant: the hook fast path imports, of this package, only its own small modules (the hook names among
    them), and the hook rules read a run's and a worker's status from :mod:`git_agentops.model.status`, never the
    record machinery of :mod:`git_agentops.model.run`: hooks run on every commit and ref update."""
    code = (
        "import sys\nimport git_agentops.hooks.fast\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('git_agentops'))))\n"
        "import git_agentops.hooks.rules\n"
        "print(' '.join(m for m in ('git_agentops.model.run', 'git_agentops.model.task') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    fast, records = done.stdout.split("\n")[:2]
    hooks = ["git_agentops.hooks", "git_agentops.hooks.fast", "git_agentops.hooks.names", "git_agentops.hooks.where"]
    assert fast.split() == ["git_agentops", *hooks]
    assert records == ""
