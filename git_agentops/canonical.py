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

**JCS** (RFC 8785, :func:`jcs_bytes`): what receipts from version 2 on are serialised and sealed with, so that a
verifier outside this toolkit can recompute every digest with a published scheme (implementations exist for most
languages). It agrees with the form above on everything but numbers (ECMAScript formatting: ``1e-7``, not
``1e-07``; integers beyond 2**53 refused) and the order of keys holding characters beyond U+FFFF (UTF-16 code
units); values go through the same refusals first (NaN, bytes, lone surrogates, depth).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeAlias

from .errors import AgentOpsError

JsonValue: TypeAlias = "bool | int | float | str | Sequence[JsonValue] | Mapping[str, JsonValue] | None"
"""Any JSON value, read side: what a document holds before a typed record is made of it (a mapping or sequence
of any kind is accepted, so a record's parts need no copy to be passed as JSON)."""
JsonObject: TypeAlias = "dict[str, JsonValue]"
"""A JSON object a record writes (its ``to_json``): a plain dict, ready for :func:`canonical_bytes`."""

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


def jcs_bytes(value: Any) -> bytes:
    """The RFC 8785 (JCS) serialisation of ``value`` (``rfc8785``, imported here: only receipts need it).
    Raises ``CANONICAL_UNSUPPORTED`` for what has no such form (an integer beyond 2**53, NaN, bytes...)."""
    normal = _normalise(value, 0)
    if _same_in_both(normal):  # most receipts: json's C encoder writes exactly the RFC 8785 bytes, 10x faster
        return json.dumps(normal, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    import rfc8785

    try:
        return rfc8785.dumps(normal)
    except rfc8785.CanonicalizationError as exc:
        raise AgentOpsError("CANONICAL_UNSUPPORTED", f"no RFC 8785 form: {exc}") from exc


_SAFE_INT: Final = 2**53 - 1


def _same_in_both(value: Any) -> bool:
    """Whether the canonical form above and RFC 8785 write ``value`` identically: no floats, integers within
    +/-(2**53 - 1), object keys within the BMP (so code-point and UTF-16 order agree). Strings are escaped alike
    (``\\"``, ``\\\\``, ``\\b\\f\\n\\r\\t``, other controls as lowercase ``\\u00xx``, nothing else)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return True
    if isinstance(value, int):
        return -_SAFE_INT <= value <= _SAFE_INT
    if isinstance(value, dict):
        return all(max(map(ord, k), default=0) <= 0xFFFF and _same_in_both(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_same_in_both(v) for v in value)
    return False  # a float: ECMAScript formatting differs from Python's repr


def sha256_hex(data: bytes | str) -> str:
    """SHA-256 of bytes, or of a string's UTF-8 encoding, as 64 lowercase hex digits."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def digest(value: Any, *, jcs: bool = False) -> str:
    """SHA-256 of the canonical JSON of ``value`` (``jcs``: of its RFC 8785 form)."""
    return sha256_hex(jcs_bytes(value) if jcs else canonical_bytes(value))


def seal(value: Any, *, jcs: bool = False) -> dict[str, Any]:
    """``{"value": value, "digest": digest(value)}``."""
    return {"value": value, "digest": digest(value, jcs=jcs)}


def check_seal(sealed: Any, *, jcs: bool = False) -> Any:
    """Return the sealed value if its digest (canonical, or ``jcs``) recomputes; raise ``SEAL_INVALID`` otherwise."""
    if not isinstance(sealed, Mapping) or set(sealed) != {"value", "digest"}:
        raise AgentOpsError("SEAL_INVALID", "a seal is an object with exactly 'value' and 'digest'")
    claimed = sealed["digest"]
    if not isinstance(claimed, str) or len(claimed) != 64:
        raise AgentOpsError("SEAL_INVALID", "a seal's digest is 64 hex digits")
    actual = digest(sealed["value"], jcs=jcs)
    if actual != claimed:
        raise AgentOpsError(
            "SEAL_INVALID",
            f"seal digest {claimed[:12]}... does not match its value ({actual[:12]}...)",
            details={"expected": claimed, "actual": actual},
        )
    return sealed["value"]
