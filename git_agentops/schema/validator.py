"""A small, fast validator for the JSON Schema 2020-12 keywords our schemas use.

Why not just ``jsonschema``: importing it costs about 110 ms (it pulls in ``referencing``, ``attrs``, ``rpds`` and
its format checkers), which alone would blow the latency budgets of ``git agentops-verify`` and of the hooks.
Our schemas are ours: they use a known subset of the vocabulary, listed in :data:`KEYWORDS`. This module
interprets exactly that subset with jsonschema's semantics, and refuses (at load time) a schema that uses any
other keyword, so a schema can never be silently half-checked. ``jsonschema`` remains the reference: the doctor
meta-validates every schema with it, and a differential test checks that both validators agree.

Errors carry the JSON path of the offending value, the keyword that failed and a message. For
``additionalProperties`` the path names the unexpected key itself (so a policy typo can be located on its line).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

ANNOTATIONS: Final = frozenset(
    {
        "$schema",
        "$id",
        "$comment",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$defs",
    }
)
KEYWORDS: Final = (
    frozenset(
        {
            "type",
            "enum",
            "const",
            "properties",
            "required",
            "additionalProperties",
            "patternProperties",
            "propertyNames",
            "minProperties",
            "maxProperties",
            "items",
            "prefixItems",
            "minItems",
            "maxItems",
            "uniqueItems",
            "minLength",
            "maxLength",
            "pattern",
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "multipleOf",
            "$ref",
            "allOf",
            "anyOf",
            "oneOf",
            "not",
            "if",
            "then",
            "else",
            "dependentRequired",
        }
    )
    | ANNOTATIONS
)

Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class SchemaError:
    path: Path
    keyword: str
    message: str

    @property
    def json_path(self) -> str:
        return json_path(self.path)


def json_path(parts: Path) -> str:
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


class UnsupportedSchema(ValueError):
    """A schema uses a keyword this validator does not implement (a programming error, caught by tests)."""


def _type_ok(value: Any, expected: str) -> bool:
    if expected == "object":
        return isinstance(value, dict)
    if expected == "array":
        return isinstance(value, list)
    if expected == "string":
        return isinstance(value, str)
    if expected == "boolean":
        return isinstance(value, bool)
    if expected == "null":
        return value is None
    if isinstance(value, bool):
        return False
    if expected == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if expected == "number":
        return isinstance(value, int | float)
    raise UnsupportedSchema(f"unknown type {expected!r}")


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but true != 1; deep for arrays and objects."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, str) and isinstance(b, str):  # a StrEnum member is the string JSON writes (as jsonschema has it)
        return a == b
    return type(a) is type(b) and a == b


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    """A schema ``pattern`` with ECMA-262 semantics, which JSON Schema prescribes: ``$`` outside a character class
    is the end of the input. Python's ``$`` also matches before a final newline, so ``"abc\\n"`` would pass
    ``^[a-z]+$``; it is rewritten to ``\\Z``."""
    return re.compile(ecma_anchors(pattern))


def ecma_anchors(pattern: str) -> str:
    """``pattern`` with every unescaped ``$`` outside a character class replaced by ``\\Z``."""
    out: list[str] = []
    in_class = escaped = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "$":
            out.append(r"\Z")
            continue
        out.append(char)
    return "".join(out)


class Validator:
    """Validates documents against a set of schemas that may ``$ref`` each other by ``$id``."""

    def __init__(self, schemas: Mapping[str, Mapping[str, Any]]) -> None:
        self.by_id: dict[str, Mapping[str, Any]] = {}
        self._refs: dict[tuple[str, int], tuple[Any, Mapping[str, Any]]] = {}  # resolved $refs (schemas never change)
        for name, schema in schemas.items():
            self.add(name, schema)

    def add(self, name: str, schema: Mapping[str, Any]) -> None:
        """Admit one more schema (its vocabulary checked now), so a process loads only the schemas it uses."""
        self._check_vocabulary(schema, name)
        self.by_id[str(schema.get("$id", name))] = schema

    def _check_vocabulary(self, schema: Any, where: str) -> None:
        if isinstance(schema, bool):
            return
        if not isinstance(schema, Mapping):
            raise UnsupportedSchema(f"{where}: a schema is an object or a boolean")
        unknown = set(schema) - KEYWORDS
        if unknown:
            raise UnsupportedSchema(f"{where}: unsupported keyword(s) {sorted(unknown)}")
        for key in ("properties", "patternProperties", "$defs"):
            for name, sub in schema.get(key, {}).items():
                self._check_vocabulary(sub, f"{where}/{key}/{name}")
        for key in ("additionalProperties", "propertyNames", "items", "not", "if", "then", "else"):
            if key in schema:
                self._check_vocabulary(schema[key], f"{where}/{key}")
        for key in ("allOf", "anyOf", "oneOf", "prefixItems"):
            for index, sub in enumerate(schema.get(key, [])):
                self._check_vocabulary(sub, f"{where}/{key}/{index}")

    def _resolve(self, ref: str, root: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        key = (ref, id(root))
        found = self._refs.get(key)
        if found is None:
            found = self._refs[key] = self._lookup(ref, root)
        return found

    def _lookup(self, ref: str, root: Mapping[str, Any]) -> tuple[Any, Mapping[str, Any]]:
        base, _, fragment = ref.partition("#")
        document = self.by_id[base] if base else root
        node: Any = document
        for part in [p for p in fragment.split("/") if p]:
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node, document

    def errors(self, value: Any, schema_id: str) -> list[SchemaError]:
        """Every error, ordered by path then message (deterministic)."""
        root = self.by_id[schema_id]
        found = list(self._errors(value, root, root, ()))
        return sorted(found, key=lambda e: ([str(p) for p in e.path], e.message))

    def is_valid(self, value: Any, schema: Any, root: Mapping[str, Any]) -> bool:
        return next(self._errors(value, schema, root, ()), None) is None

    def _errors(self, value: Any, schema: Any, root: Mapping[str, Any], path: Path) -> Iterator[SchemaError]:
        if schema is True:
            return
        if schema is False:
            yield SchemaError(path, "false", "no value is allowed here")
            return
        if "$ref" in schema:
            target, document = self._resolve(schema["$ref"], root)
            yield from self._errors(value, target, document, path)
        if "type" in schema:
            types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            if not any(_type_ok(value, t) for t in types):
                yield SchemaError(path, "type", f"{_show(value)} is not of type {' or '.join(map(repr, types))}")
                return
        if "enum" in schema and not any(_equal(value, option) for option in schema["enum"]):
            yield SchemaError(path, "enum", f"{_show(value)} is not one of {schema['enum']!r}")
        if "const" in schema and not _equal(value, schema["const"]):
            yield SchemaError(path, "const", f"{schema['const']!r} was expected")
        if isinstance(value, str):
            yield from self._string(value, schema, path)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            yield from self._number(value, schema, path)
        elif isinstance(value, dict):
            yield from self._object(value, schema, root, path)
        elif isinstance(value, list):
            yield from self._array(value, schema, root, path)
        for sub in schema.get("allOf", ()):
            yield from self._errors(value, sub, root, path)
        if "anyOf" in schema and not any(self.is_valid(value, s, root) for s in schema["anyOf"]):
            yield SchemaError(path, "anyOf", f"{_show(value)} is not valid under any of the given schemas")
        if "oneOf" in schema:
            matches = sum(1 for s in schema["oneOf"] if self.is_valid(value, s, root))
            if matches != 1:
                why = "any" if matches == 0 else "more than one"
                yield SchemaError(path, "oneOf", f"{_show(value)} is not valid under {why} of the given schemas")
        if "not" in schema and self.is_valid(value, schema["not"], root):
            yield SchemaError(path, "not", f"{_show(value)} should not be valid under {schema['not']!r}")
        if "if" in schema:
            branch = "then" if self.is_valid(value, schema["if"], root) else "else"
            if branch in schema:
                yield from self._errors(value, schema[branch], root, path)

    def _string(self, value: str, schema: Mapping[str, Any], path: Path) -> Iterator[SchemaError]:
        if "minLength" in schema and len(value) < schema["minLength"]:
            yield SchemaError(path, "minLength", f"{_show(value)} is too short")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            yield SchemaError(path, "maxLength", f"{_show(value)} is too long")
        if "pattern" in schema and not _regex(schema["pattern"]).search(value):
            yield SchemaError(path, "pattern", f"{_show(value)} does not match {schema['pattern']!r}")

    def _number(self, value: float, schema: Mapping[str, Any], path: Path) -> Iterator[SchemaError]:
        if "minimum" in schema and value < schema["minimum"]:
            yield SchemaError(path, "minimum", f"{value!r} is less than the minimum of {schema['minimum']!r}")
        if "maximum" in schema and value > schema["maximum"]:
            yield SchemaError(path, "maximum", f"{value!r} is greater than the maximum of {schema['maximum']!r}")
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            yield SchemaError(
                path, "exclusiveMinimum", f"{value!r} must be greater than {schema['exclusiveMinimum']!r}"
            )
        if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
            yield SchemaError(path, "exclusiveMaximum", f"{value!r} must be less than {schema['exclusiveMaximum']!r}")
        if "multipleOf" in schema:
            quotient = value / schema["multipleOf"]
            if not (math.isfinite(quotient) and quotient == int(quotient)):
                yield SchemaError(path, "multipleOf", f"{value!r} is not a multiple of {schema['multipleOf']!r}")

    def _object(
        self, value: dict[str, Any], schema: Mapping[str, Any], root: Mapping[str, Any], path: Path
    ) -> Iterator[SchemaError]:
        for name in schema.get("required", ()):
            if name not in value:
                yield SchemaError(path, "required", f"{name!r} is a required property")
        for name, needed in schema.get("dependentRequired", {}).items():
            if name in value:
                for other in needed:
                    if other not in value:
                        yield SchemaError(path, "dependentRequired", f"{other!r} is required when {name!r} is set")
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            yield SchemaError(path, "minProperties", f"{_show(value)} does not have enough properties")
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            yield SchemaError(path, "maxProperties", f"{_show(value)} has too many properties")
        properties = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        for name, item in value.items():
            if "propertyNames" in schema:
                yield from self._errors(name, schema["propertyNames"], root, (*path, name))
            matched = False
            if name in properties:
                matched = True
                yield from self._errors(item, properties[name], root, (*path, name))
            for pattern, sub in patterns.items():
                if _regex(pattern).search(name):
                    matched = True
                    yield from self._errors(item, sub, root, (*path, name))
            if not matched and "additionalProperties" in schema:
                extra = schema["additionalProperties"]
                if extra is False:
                    yield SchemaError((*path, name), "additionalProperties", f"unknown key {name!r}")
                else:
                    yield from self._errors(item, extra, root, (*path, name))

    def _array(
        self, value: list[Any], schema: Mapping[str, Any], root: Mapping[str, Any], path: Path
    ) -> Iterator[SchemaError]:
        if "minItems" in schema and len(value) < schema["minItems"]:
            yield SchemaError(path, "minItems", f"{_show(value)} should have at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            yield SchemaError(path, "maxItems", f"{_show(value)} should have at most {schema['maxItems']} items")
        if schema.get("uniqueItems"):
            for i, item in enumerate(value):
                if any(_equal(item, other) for other in value[:i]):
                    yield SchemaError((*path, i), "uniqueItems", f"{_show(item)} is a duplicate")
                    break
        prefix = schema.get("prefixItems", [])
        for index, item in enumerate(value):
            if index < len(prefix):
                yield from self._errors(item, prefix[index], root, (*path, index))
            elif "items" in schema:
                yield from self._errors(item, schema["items"], root, (*path, index))


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
