"""The figure line of ``bench/architecture.py`` (issue 26, "Must show"), and what each of its counters counts.

The line is printed (``pytest -s``) and its thresholds are asserted on the real tree (``any_per_kloc <= 4``, every
event kind registered, no host branch outside the plugins, one response writer); its counters are held to what
their docstrings say on small sources.
"""

from __future__ import annotations

import enum
import importlib.util
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(
    r"architecture any_per_kloc=(\d+\.\d) events_registered=(\d+)/(\d+) host_branches=(\d+) response_writers=(\d+)"
    r" modules=(\d+) kloc=\d+\.\d"
)


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_architecture", ROOT / "bench" / "architecture.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


arch = _bench()


def _figures(files: dict[str, str], registered: frozenset[str] = frozenset()) -> object:
    return arch.figures(((path, textwrap.dedent(text)) for path, text in files.items()), registered)


def test_the_script_prints_one_figure_line_over_the_whole_package() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "architecture.py")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip().splitlines()[-1]
    print(f"\n{line}")
    match = LINE.fullmatch(line)
    assert match is not None, line
    any_per_kloc = float(match.group(1))
    registered, kinds, host_branches, response_writers, modules = (int(g) for g in match.groups()[1:])
    assert registered <= kinds and kinds > 0
    assert modules == len(list((ROOT / "git_agentops").rglob("*.py")))
    assert any_per_kloc <= 4  # the thresholds of issue 26
    assert registered == kinds
    assert host_branches == 0
    assert response_writers == 1


def test_any_mappings_are_counted_per_kloc_outside_the_json_edges() -> None:
    code = """
        from typing import Any, Dict, Mapping
        import typing
        def f(a: dict[str, Any], b: Mapping[str, Any], c: typing.Dict[str, Any]) -> list[dict[str, Any]]:
            d: dict[str, int] = {}
            e: Mapping[str, str] = {}
            return [a]
    """
    found = _figures({"git_agentops/x.py": code, "git_agentops/schema/y.py": code, "git_agentops/canonical.py": code})
    assert found.any_mappings == 4  # the edges' own are not counted, nor mappings of a known value type
    assert found.counted_lines == len(textwrap.dedent(code).splitlines())
    assert found.lines == 3 * found.counted_lines and found.modules == 3
    assert found.any_per_kloc == 1000 * 4 / found.counted_lines


def test_event_kinds_are_read_from_event_calls_and_checked_against_the_registry() -> None:
    code = """
        CODE: Final = "RUN_STATE_TAMPERED"
        Event("TASK_DELIVERED", "x", {})
        Event(code="RUN_CREATED", summary="x")
        Event(CODE, "x")
        Event("A_KIND" if done else "B_KIND", "x")
        Event(EventKind.WORKER_STARTED, "x")
        loop.set_worker(worker, event="WORKER_IDLE", summary="x")
        Event(variable, "x")
        threading.Event()
        other("NOT_AN_EVENT")
    """
    found = _figures({"git_agentops/x.py": code}, frozenset({"TASK_DELIVERED", "WORKER_IDLE", "UNUSED"}))
    assert found.event_kinds == {
        "TASK_DELIVERED",
        "RUN_CREATED",
        "RUN_STATE_TAMPERED",
        "A_KIND",
        "B_KIND",
        "WORKER_STARTED",
        "WORKER_IDLE",
    }
    assert "events_registered=2/7" in found.line()
    assert "events_registered=0/7" in _figures({"git_agentops/x.py": code}).line()


def test_the_registry_is_read_from_its_enum_or_its_mapping_and_is_empty_while_absent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert arch.registered_kinds("git_agentops.no_such_module_here") == frozenset()
    registry = ModuleType("fake_event_registry")

    class EventKind(enum.StrEnum):
        TASK_DELIVERED = "TASK_DELIVERED"

    registry.EventKind = EventKind  # type: ignore[attr-defined]
    registry.SCHEMAS = {"RUN_CREATED": {"type": "object"}}  # type: ignore[attr-defined]
    registry.unrelated = {"lower": 1}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_event_registry", registry)
    assert arch.registered_kinds("fake_event_registry") == {"TASK_DELIVERED", "RUN_CREATED"}


def test_host_branches_are_comparisons_with_host_names_outside_the_host_plugins() -> None:
    code = """
        if kind == "claude": pass
        if spec.kind in ("codex", "opencode"): pass
        if host["kind"] != "scripted": pass
        if name not in {"aider"}: pass
        match kind:
            case "gemini": pass
            case _: pass
        if kind == "command": pass
        if kind < "claude": pass
        x = "claude"
    """
    found = _figures({"git_agentops/a.py": code, "git_agentops/model/hosts/claude.py": code})
    assert found.host_branches == 5


def test_response_writers_are_the_call_sites_of_write_response() -> None:
    code = """
        def write_response(worktree, doc): pass
        mailbox.write_response(path, response)
        write_response(path, response)
        mailbox.response(None, "0" * 64, "OK", "x")
    """
    assert _figures({"git_agentops/a.py": code}).response_writers == 2
