"""Canonical JSON, SHA-256 digests and seals.

Everything the toolkit hashes -- contracts, policies, requests, receipts -- is hashed over its canonical JSON so
that two processes (or two machines) that hold the same value compute the same digest.

The canonical form:

* object keys sorted by Unicode code point, compact separators ``,`` and ``:``, no insignificant whitespace;
* strings as UTF-8 (``ensure_ascii=False``); a string that cannot be encoded (a lone surrogate) is refused;
* ``true``/``false``/``null`` and integers as usual;
* **floats**: NaN and +/-Infinity are refused. A finite float whose value is an integer (``1.0``, ``-0.0``,
  ``3e2``) is written as that integer (``1``, ``0``, ``300``) when its magnitude is below 2**53, so that ``1`` and
  ``1.0`` hash alike. Any other float is written in Python's shortest round-trip form (``repr``), e.g. ``0.5``,
  ``1e-07``, ``1.5e+16``;
* tuples are lists; keys must be strings; any other type (bytes, sets, objects) is refused;
* nesting deeper than :data:`MAX_DEPTH` is refused.

A *seal* is ``{"value": v, "digest": sha256_hex(canonical(v))}``: a value that carries the proof of its own
content, so a receipt can be checked field by field.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any, Final

from .errors import AgentOpsError

MAX_DEPTH: Final = 128
_INT_FLOAT_LIMIT: Final = 2**53


def _normalise(value: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise AgentOpsError("CANONICAL_UNSUPPORTED", f"value nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise AgentOpsError("CANONICAL_UNSUPPORTED", "string is not valid Unicode (lone surrogate)") from exc
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise AgentOpsError("CANONICAL_UNSUPPORTED", f"{value!r} has no JSON form")
        if value.is_integer() and abs(value) < _INT_FLOAT_LIMIT:
            return int(value)
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise AgentOpsError("CANONICAL_UNSUPPORTED", f"object key {key!r} is not a string")
            out[_normalise(key, depth + 1)] = _normalise(item, depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [_normalise(item, depth + 1) for item in value]
    raise AgentOpsError("CANONICAL_UNSUPPORTED", f"{type(value).__name__} has no canonical JSON form")


def canonical_json(value: Any) -> str:
    """The canonical JSON text of ``value`` (see the module docstring). Raises ``CANONICAL_UNSUPPORTED``."""
    return json.dumps(_normalise(value, 0), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_bytes(value: Any) -> bytes:
    return canonical_json(value).encode("utf-8")


def sha256_hex(data: bytes | str) -> str:
    """SHA-256 of bytes, or of a string's UTF-8 encoding, as 64 lowercase hex digits."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def digest(value: Any) -> str:
    """SHA-256 of the canonical JSON of ``value``."""
    return sha256_hex(canonical_bytes(value))


def seal(value: Any) -> dict[str, Any]:
    """``{"value": value, "digest": digest(value)}``."""
    return {"value": value, "digest": digest(value)}


def check_seal(sealed: Any) -> Any:
    """Return the sealed value if its digest recomputes; raise ``SEAL_INVALID`` otherwise."""
    if not isinstance(sealed, Mapping) or set(sealed) != {"value", "digest"}:
        raise AgentOpsError("SEAL_INVALID", "a seal is an object with exactly 'value' and 'digest'")
    claimed = sealed["digest"]
    if not isinstance(claimed, str) or len(claimed) != 64:
        raise AgentOpsError("SEAL_INVALID", "a seal's digest is 64 hex digits")
    actual = digest(sealed["value"])
    if actual != claimed:
        raise AgentOpsError(
            "SEAL_INVALID",
            f"seal digest {claimed[:12]}... does not match its value ({actual[:12]}...)",
            details={"expected": claimed, "actual": actual},
        )
    return sealed["value"]
