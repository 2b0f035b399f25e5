"""Strict JSON documents and schema validation (JSON Schema 2020-12), schemas loaded once per process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from git_agentops.errors import AgentOpsError
from git_agentops.resources import data_dir
from git_agentops.schema import documents

GOOD = {"code": "RUN_CREATED", "summary": "x", "data": {}, "time": 1.5}


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"{not json", "JSON_INVALID"),
        (b'{"a": 1, "a": 2}', "JSON_INVALID"),  # duplicate keys: the last would silently win
        (b'{"a": NaN}', "JSON_INVALID"),
        (b'{"a": Infinity}', "JSON_INVALID"),
        (b"\xff\xfe{}", "JSON_INVALID"),
        (b"[" * 100_000 + b"]" * 100_000, "JSON_INVALID"),
        (b" " * (documents.DEFAULT_MAX_BYTES + 1), "DOC_TOO_LARGE"),
    ],
)
def test_malformed_input_gets_its_code(raw: bytes, code: str) -> None:
    with pytest.raises(AgentOpsError) as caught:
        documents.load(raw, schema="event")
    assert caught.value.code == code


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ({**GOOD, "extra": 1}, "$.extra"),  # an unknown key is located at the key itself
        ({**GOOD, "code": "lower"}, "$.code"),
        ({**GOOD, "time": -1}, "$.time"),
        ({k: v for k, v in GOOD.items() if k != "summary"}, "$"),
        ([GOOD], "$"),
    ],
)
def test_schema_errors_name_the_json_path(doc: object, path: str) -> None:
    with pytest.raises(AgentOpsError) as caught:
        documents.load(json.dumps(doc).encode(), schema="event")
    assert caught.value.code == "SCHEMA_INVALID"
    assert caught.value.details["path"] == path
    assert f"at {path}:" in caught.value.message


def test_dump_validates_and_is_canonical() -> None:
    assert documents.dump(GOOD, schema="event") == b'{"code":"RUN_CREATED","data":{},"summary":"x","time":1.5}\n'
    with pytest.raises(AgentOpsError):
        documents.dump({"code": "X"}, schema="event")


def test_every_shipped_schema_is_valid_and_identified() -> None:
    assert documents.check_schemas() == len(documents.schema_names())
    names = documents.schema_names()
    files = sorted(p.name.removesuffix(".schema.json") for p in data_dir("schemas").glob("*.schema.json"))
    assert names == files and "event" in names


def test_schemas_load_once_per_process() -> None:
    code = (
        "from git_agentops.schema import documents\n"
        "import sys\n"
        "for _ in range(50): documents.validate({'code':'A_B','summary':'s','data':{},'time':0}, 'event')\n"
        "assert 'jsonschema' not in sys.modules  # validation does not pay for jsonschema's import\n"
        "print(documents.SCHEMAS.load_count)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "1"


def test_a_schema_is_read_when_first_used_with_the_schemas_it_refers_to() -> None:
    """Invariant: validating one kind of document reads its schema and those it ``$ref``-s, once, and checks the
    referred parts as before (a task inside worker instructions); the whole set is still there for who asks."""
    code = (
        "from git_agentops.schema import documents\n"
        "S = documents.SCHEMAS\n"
        "print(documents.schema_errors({}, 'instructions') != [], sorted(S.raw), S.load_count)\n"
        "errors = documents.schema_errors({'task': {'id': 7}}, 'instructions')\n"
        "print(any(e.json_path.startswith('$.task') for e in errors), sorted(S.raw), S.load_count)\n"
        "print(len(documents.schema_names()), S.load_count)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    shipped = len(list(data_dir("schemas").glob("*.schema.json")))
    assert out == [
        "True ['instructions', 'task'] 1",
        "True ['instructions', 'task'] 1",
        f"{shipped} 2",
    ]
