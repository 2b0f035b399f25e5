"""DSSE (Dead Simple Signing Envelope) v1: the signed wrapper of a receipt.

Why DSSE: it is what in-toto attestations travel in, and it signs the *pre-authentication encoding* (PAE) of the
payload type and the exact payload bytes, never a re-serialisation of parsed JSON -- so what was signed is
unambiguous and a payload cannot be re-typed (the type is signed too)::

    PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body

where LEN is the byte length as ASCII decimal without leading zeros.

The envelope is JSON ``{"payload", "payloadType", "signatures": [{"keyid", "sig"}]}`` with payload and sig in
standard base64 with padding. The toolkit writes the statement's canonical JSON as the payload and reads
strictly: a size limit, strict JSON, the ``dsse-envelope`` schema (no extra field), base64 that decodes exactly.
Anything else is ``RECEIPT_MALFORMED``. Signatures may be absent: whether an unsigned receipt is acceptable is the
verifier's policy, not the envelope's.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

from ..canonical import JsonValue, canonical_bytes, jcs_bytes
from ..errors import AgentOpsError
from ..schema import documents
from .shape import EnvelopeDoc, SignatureDoc, StatementDoc
from .statement import PAYLOAD_TYPE, PREDICATE_TYPE, PREDICATE_TYPES, STATEMENT_TYPE

MAX_ENVELOPE_BYTES: Final = 4 * 1024 * 1024
"""A receipt note larger than this is refused before it is parsed."""


@dataclass(frozen=True, slots=True)
class Signature:
    """One DSSE signature: ``keyid`` (an unauthenticated hint: the SSH key's SHA256 fingerprint) and raw bytes."""

    keyid: str
    sig: bytes

    def to_json(self) -> SignatureDoc:
        """The envelope's ``{keyid, sig}`` entry, ``sig`` in standard base64 with padding."""
        return {"keyid": self.keyid, "sig": base64.b64encode(self.sig).decode("ascii")}


@dataclass(frozen=True, slots=True)
class Envelope:
    """A parsed envelope: the payload is the exact bytes that were signed (inside the PAE)."""

    payload_type: str
    payload: bytes
    signatures: tuple[Signature, ...]

    def signing_input(self) -> bytes:
        """The bytes every signature signs: :func:`pae` of the payload type and payload."""
        return pae(self.payload_type, self.payload)

    def statement(self) -> StatementDoc:
        """The payload as a receipt statement.

        Raises ``RECEIPT_MALFORMED`` when the payload type is not in-toto's, the payload is not strict JSON, or
        the statement is not a receipt statement (type, predicate type, then the ``in-toto-statement`` schema).
        """
        if self.payload_type != PAYLOAD_TYPE:
            raise _malformed(f"payloadType is {self.payload_type!r}, not {PAYLOAD_TYPE!r}")
        try:
            doc = documents.parse_json(self.payload, what="receipt statement", max_bytes=MAX_ENVELOPE_BYTES)
        except AgentOpsError as exc:
            raise _malformed(exc.message) from exc
        if not isinstance(doc, dict):
            raise _malformed("the receipt statement is not a JSON object")
        if doc.get("_type") != STATEMENT_TYPE:
            raise _malformed(f"the statement's _type is {_show(doc.get('_type'))}, not {STATEMENT_TYPE!r}")
        if doc.get("predicateType") not in PREDICATE_TYPES:
            raise _malformed(f"the predicateType is {_show(doc.get('predicateType'))}, not {PREDICATE_TYPE!r}")
        _validate(doc, "in-toto-statement", "receipt statement")
        return cast(StatementDoc, doc)  # the schema checked the shape the type declares

    def to_json(self) -> EnvelopeDoc:
        """The envelope JSON, the payload in standard base64 with padding (what :func:`dump_envelope` writes)."""
        return {
            "payload": base64.b64encode(self.payload).decode("ascii"),
            "payloadType": self.payload_type,
            "signatures": [s.to_json() for s in self.signatures],
        }


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding (see the module docstring)."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def statement_payload(statement: StatementDoc) -> bytes:
    """The payload bytes of a statement: its RFC 8785 form for a version 2 receipt, its canonical JSON for a
    version 1 one (no trailing newline)."""
    jcs = PREDICATE_TYPES.get(str(statement.get("predicateType")), False)
    return jcs_bytes(statement) if jcs else canonical_bytes(statement)


def envelope(statement: StatementDoc, signatures: Sequence[Signature]) -> EnvelopeDoc:
    """The envelope JSON around ``statement`` with ``signatures`` (made over ``pae(PAYLOAD_TYPE, payload)``)."""
    return Envelope(PAYLOAD_TYPE, statement_payload(statement), tuple(signatures)).to_json()


def sign_envelope(statement: StatementDoc, signers: Sequence[Callable[[bytes], Signature]]) -> EnvelopeDoc:
    """The envelope around ``statement``, signed by each signer over the PAE (none: an unsigned envelope)."""
    data = pae(PAYLOAD_TYPE, statement_payload(statement))
    return envelope(statement, [signer(data) for signer in signers])


def dump_envelope(doc: EnvelopeDoc) -> bytes:
    """The note text of an envelope: schema-checked canonical JSON plus a newline."""
    return documents.dump(doc, schema="dsse-envelope", what="receipt envelope")


def parse_envelope(data: bytes) -> Envelope:
    """Parse a receipt note strictly (module docstring). Raises ``RECEIPT_MALFORMED``."""
    try:
        doc = documents.parse_json(data, what="receipt envelope", max_bytes=MAX_ENVELOPE_BYTES)
    except AgentOpsError as exc:
        raise _malformed(exc.message) from exc
    _validate(doc, "dsse-envelope", "receipt envelope")
    signatures = tuple(
        Signature(item["keyid"], _b64(item["sig"], f"signature {index + 1}"))
        for index, item in enumerate(doc["signatures"])
    )
    return Envelope(doc["payloadType"], _b64(doc["payload"], "payload"), signatures)


def _b64(text: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _malformed(f"the {what} is not valid base64: {exc}") from exc
    if base64.b64encode(raw).decode("ascii") != text:  # non-zero padding bits: two encodings of the same bytes
        raise _malformed(f"the {what} is not in canonical base64")
    return raw


def _validate(doc: Any, schema: str, what: str) -> None:
    try:
        documents.validate(doc, schema, what=what)
    except AgentOpsError as exc:
        raise _malformed(exc.message, details=exc.details) from exc


def _malformed(message: str, *, details: Mapping[str, JsonValue] | None = None) -> AgentOpsError:
    return AgentOpsError("RECEIPT_MALFORMED", message, details=details)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
