"""Strict JSON documents validated against the toolkit's JSON Schemas (draft 2020-12).

Every JSON document the toolkit stores or exchanges -- run state, requests, receipts, ownership records -- is read
with :func:`load` and written with :func:`dump`. Reading is strict: a size limit checked before parsing, UTF-8
only, duplicate keys refused (the last one would silently win otherwise), NaN/Infinity refused. Both directions
validate against ``schemas/<name>.schema.json`` and report the JSON path of the first error.

Each schema is loaded at most once per process, on first use, and interpreted by :mod:`.schemacheck` (the subset
of 2020-12 our schemas use); the reference ``jsonschema`` costs ~110 ms to import, so only the doctor and the tests
use it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any, Final

from ..canonical import canonical_bytes
from ..errors import AgentOpsError
from ..resources import data_dir
from .validator import SchemaError, Validator

DEFAULT_MAX_BYTES: Final = 1024 * 1024
SCHEMA_ID_PREFIX: Final = "urn:git-agentops:schema:"


class _SchemaSet:
    """The shipped schemas, each read from disk at most once per process, and only when used: validating one kind of
    document reads that schema and those it refers to (a person's ``git agentops-verify`` needs a few of the two
    dozen, and reading and checking all of them was a tenth of its time); :meth:`get` reads every one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.raw: dict[str, dict[str, Any]] = {}
        self.validator = Validator({})
        self.complete = False
        self.load_count = 0  # passes that read schemas from disk: tests assert repeated use reads nothing again

    def get(self) -> tuple[dict[str, dict[str, Any]], Validator]:
        """Every shipped schema, and the validator that holds them."""
        with self.lock:
            if not self.complete:
                names = [p.name.removesuffix(".schema.json") for p in data_dir("schemas").glob("*.schema.json")]
                self._read(sorted(names))
                self.complete = True
            return self.raw, self.validator

    def using(self, name: str) -> Validator | None:
        """The validator, holding ``name`` and every schema it refers to; None when no schema has that name."""
        with self.lock:
            if name not in self.raw:
                if self.complete or not (data_dir("schemas") / f"{name}.schema.json").is_file():
                    return None
                self._read([name])
            return self.validator

    def _read(self, names: list[str]) -> None:
        """Read the named schemas not read yet, and then the ones they refer to (called with the lock held)."""
        pending = [n for n in names if n not in self.raw]
        if not pending:
            return
        while pending:
            name = pending.pop(0)
            if name in self.raw:
                continue
            path = data_dir("schemas") / f"{name}.schema.json"
            doc = json.loads(path.read_text("utf-8"))
            if doc.get("$id") != SCHEMA_ID_PREFIX + name:
                raise RuntimeError(f"schema {path.name} must have $id {SCHEMA_ID_PREFIX + name!r}")
            self.validator.add(name, doc)
            self.raw[name] = doc
            pending += [n for n in _referenced(doc) if n not in self.raw]
        self.raw = dict(sorted(self.raw.items()))
        self.load_count += 1


def _referenced(node: Any) -> set[str]:
    """The names of the other shipped schemas ``node`` refers to (``$ref`` to ``urn:git-agentops:schema:<name>``)."""
    found: set[str] = set()
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(SCHEMA_ID_PREFIX):
            found.add(ref[len(SCHEMA_ID_PREFIX) :].partition("#")[0])
        for value in node.values():
            found |= _referenced(value)
    elif isinstance(node, list):
        for value in node:
            found |= _referenced(value)
    return found


SCHEMAS = _SchemaSet()


def schema_names() -> list[str]:
    return sorted(SCHEMAS.get()[0])


def check_schemas() -> int:
    """Meta-validate every shipped schema with the reference implementation (``jsonschema``); returns the count.

    Slow to import, so only the doctor and the tests call it.
    """
    from jsonschema import Draft202012Validator

    raw, _ = SCHEMAS.get()
    for doc in raw.values():
        Draft202012Validator.check_schema(doc)
    return len(raw)


def schema_errors(doc: Any, schema: str) -> list[SchemaError]:
    """Every error of ``doc`` against ``schema`` (ordered by path); empty when valid."""
    validator = SCHEMAS.using(schema)
    if validator is None:
        raise KeyError(f"no schema named {schema!r}")  # a programming error, not a user error
    return validator.errors(doc, SCHEMA_ID_PREFIX + schema)


def validate(doc: Any, schema: str, *, what: str = "document") -> None:
    """Raise ``SCHEMA_INVALID`` naming the JSON path of the first error (errors ordered by path)."""
    errors = schema_errors(doc, schema)
    if errors:
        first = errors[0]
        raise AgentOpsError(
            "SCHEMA_INVALID",
            f"{what} does not match schema {schema!r} at {first.json_path}: {first.message}",
            details={"schema": schema, "path": first.json_path, "errors": len(errors)},
        )


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(data: bytes, *, what: str = "document", max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
    """Parse strict JSON from bytes: size-limited, UTF-8, no duplicate keys, no NaN/Infinity."""
    if len(data) > max_bytes:
        raise AgentOpsError(
            "DOC_TOO_LARGE",
            f"{what} is {len(data)} bytes, over its limit of {max_bytes}",
            details={"size": len(data), "limit": max_bytes},
        )
    try:
        text = data.decode("utf-8")
        return json.loads(text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise AgentOpsError("JSON_INVALID", f"{what} is not UTF-8: {exc.reason} at byte {exc.start}") from exc
    except json.JSONDecodeError as exc:
        raise AgentOpsError("JSON_INVALID", f"{what} is not valid JSON: {exc.msg} (line {exc.lineno})") from exc
    except (ValueError, RecursionError) as exc:
        raise AgentOpsError("JSON_INVALID", f"{what} is not acceptable JSON: {exc}") from exc


def load(data: bytes, *, schema: str, what: str = "document", max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
    """Parse strictly and validate against ``schema``."""
    doc = parse_json(data, what=what, max_bytes=max_bytes)
    validate(doc, schema, what=what)
    return doc


def dump(doc: Mapping[str, Any] | list[Any], *, schema: str, what: str = "document") -> bytes:
    """Validate against ``schema`` and return canonical JSON bytes with a trailing newline."""
    validate(doc, schema, what=what)
    return canonical_bytes(doc) + b"\n"
