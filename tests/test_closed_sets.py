"""The closed sets that were compared as strings are enums whose values are the strings the formats hold."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Any

import pytest

from git_agentops.canonical import canonical_json
from git_agentops.diagnose.checks import CheckStatus
from git_agentops.hooks.install import HookState, Kind
from git_agentops.model.policy import Finalize, effective
from git_agentops.model.sandbox import LEVELS, Level
from git_agentops.model.status import RunStatus, WorkerStatus
from git_agentops.sandbox.spec import Mode
from git_agentops.schema import documents
from git_agentops.transition.record import POLICY_CHANGES, ChangeMode, policy_changes

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"


def _enum_at(schema: str, *path: str) -> list[Any]:
    node: Any = json.loads((SCHEMAS / f"{schema}.schema.json").read_text("utf-8"))
    for key in path:
        node = node[key]
    return list(node["enum"])


@pytest.mark.parametrize(
    ("members", "schema", "path"),
    [
        (ChangeMode, "policy", ("properties", "run", "properties", "policy_changes")),
        (Finalize, "policy", ("properties", "run", "properties", "finalize")),
        (Mode, "policy", ("properties", "sandbox", "properties", "mode")),
        (Level, "worker", ("properties", "sandbox")),
        (CheckStatus, "doctor-report", ("properties", "checks", "items", "properties", "status")),
        (RunStatus, "run", ("properties", "status")),
        (WorkerStatus, "worker", ("properties", "status")),
    ],
)
def test_each_enum_is_exactly_the_set_its_schema_allows(
    members: type[enum.StrEnum], schema: str, path: tuple[str, ...]
) -> None:
    assert sorted(str(m) for m in members) == sorted(v for v in _enum_at(schema, *path) if v is not None)


def test_an_enum_member_validates_and_serialises_as_its_string() -> None:
    """A record may hold a member where it held the string: the schema accepts it and the bytes are the same."""
    worker = {"sandbox": Level.NONE}
    assert canonical_json(worker) == canonical_json({"sandbox": "none"}) == '{"sandbox":"none"}'
    assert [e for e in documents.schema_errors(worker, "worker") if e.keyword == "enum"] == []
    refused = [e.path for e in documents.schema_errors({"sandbox": "nowhere"}, "worker") if e.keyword == "enum"]
    assert refused == [("sandbox",)]


def test_the_effective_policy_and_its_hash_hold_the_same_strings() -> None:
    doc = effective({})
    assert doc["run"]["finalize"] == Finalize.COORDINATOR
    assert '"finalize":"coordinator"' in canonical_json(doc)
    assert policy_changes(doc) is ChangeMode.USER
    assert policy_changes({"run": {"policy_changes": "never"}}) is ChangeMode.NEVER


def test_levels_keep_their_order_strongest_first() -> None:
    assert LEVELS == ("namespace", "landlock", "none")
    assert POLICY_CHANGES == ("user", "coordinator", "never")


def test_hook_kinds_and_states_are_the_strings_doctor_reports() -> None:
    assert [str(k) for k in Kind] == ["missing", "ours", "foreign"]
    assert [str(s) for s in HookState] == ["installed", "foreign", "missing", "conflict"]
    assert json.dumps({"state": HookState.INSTALLED}) == '{"state": "installed"}'


def test_the_service_manager_switch_says_auto_or_a_manager() -> None:
    """``AGENTOPS_SUPERVISOR_MANAGER``'s words are ``auto`` and every manager's name, and nothing else is taken."""
    from git_agentops.errors import AgentOpsError
    from git_agentops.service.manager import Manager, Wanted, detect

    assert sorted(Wanted) == sorted(["auto", *Manager])
    assert detect({"AGENTOPS_SUPERVISOR_MANAGER": " Process "}, system="Linux").manager is Manager.PROCESS
    with pytest.raises(AgentOpsError) as unknown:
        detect({"AGENTOPS_SUPERVISOR_MANAGER": "upstart"}, system="Linux")
    assert unknown.value.message == "AGENTOPS_SUPERVISOR_MANAGER='upstart': say auto, systemd, launchd or process"
    with pytest.raises(AgentOpsError) as foreign:
        detect({"AGENTOPS_SUPERVISOR_MANAGER": "launchd"}, system="Linux")
    assert foreign.value.message == "AGENTOPS_SUPERVISOR_MANAGER=launchd: not available on Linux"
