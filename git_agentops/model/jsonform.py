"""One declared field map per record, from which its JSON form is generated both ways.

A record that is written to disk (an evidence line, a transition's journal record) has a JSON form that is a format:
its bytes are hashed, MAC'd, named by digest. Writing ``to_json`` and ``from_json`` by hand for each record gives
every key two places to drift apart in, and every record its own idea of nulls and absent keys. Here a dataclass
field declares, once, its key on disk (:func:`on_disk`), whether the key is left out when the value is None
(keys added after records were first written, and the MAC), and how a JSON value becomes the field's value
(``decode``: a nested record's ``from_json``, a tuple, an enum). :func:`to_json` and :func:`from_json` walk that
map.

``from_json`` trusts its document's shape: the schema validates once, at the edge that reads the document.
(:func:`on_disk` returns a ``dataclasses.Field``, as ``field()`` does; ruff's RUF009 cannot tell, hence its
``noqa`` where a field's decode or default is itself a call.)
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Self, TypeVar

from ..canonical import JsonObject, JsonValue

_KEY: Final = "json-key"
_OMITTED_WHEN_NONE: Final = "json-omitted-when-none"
_DECODE: Final = "json-decode"

Decode = Callable[[Any], Any]


if TYPE_CHECKING:
    from _typeshed import DataclassInstance as Record  # a dataclass whose fields were declared with on_disk

R = TypeVar("R", bound="Record")
T = TypeVar("T")


def on_disk(
    key: str, *, omitted_when_none: bool = False, decode: Decode | None = None, default: object = dataclasses.MISSING
) -> Any:
    """A dataclass field whose JSON key is ``key``.

    ``omitted_when_none``: the key is absent from the JSON (not null) when the value is None, and the field
    defaults to None. ``decode``: how the JSON value becomes the field's value (default: arrays become tuples,
    objects dicts, anything else is taken as it is). ``default``: the value of a field not given (immutable).
    """
    metadata = {_KEY: key, _OMITTED_WHEN_NONE: omitted_when_none, _DECODE: decode or plain}
    if omitted_when_none:
        default = None
    return dataclasses.field(default=default, metadata=metadata)


def field_map(cls: type[Record]) -> tuple[tuple[str, str, bool], ...]:
    """``(attribute, JSON key, omitted when None)`` of every field of ``cls``, in declaration order."""
    return tuple((f.name, f.metadata[_KEY], f.metadata[_OMITTED_WHEN_NONE]) for f in dataclasses.fields(cls))


def to_json(record: Record) -> JsonObject:
    """The record's JSON form, generated from its field map."""
    return _encode(record)


def from_json(cls: type[R], doc: Mapping[str, JsonValue]) -> R:
    """A record of ``cls`` from its (schema-valid) JSON form; an absent key takes the field's default."""
    return _decode(cls, doc)  # type: ignore[no-any-return]


class JsonRecord:
    """A frozen dataclass whose fields are declared with :func:`on_disk`: its ``to_json`` and ``from_json`` are
    generated from them. (A mixin without state: subclasses stay slotted.)"""

    __slots__ = ()

    def to_json(self) -> JsonObject:
        """The record's JSON form (its field map, in declaration order)."""
        return _encode(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, JsonValue]) -> Self:
        """The record of a schema-valid JSON document (validated at the edge that read it; trusted here)."""
        return _decode(cls, doc)  # type: ignore[no-any-return]


def _encode(record: Any) -> JsonObject:
    doc: JsonObject = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if value is None and f.metadata[_OMITTED_WHEN_NONE]:
            continue
        doc[f.metadata[_KEY]] = json_value(value)
    return doc


def _decode(cls: Any, doc: Mapping[str, JsonValue]) -> Any:
    fields = dataclasses.fields(cls)
    return cls(**{f.name: f.metadata[_DECODE](doc[f.metadata[_KEY]]) for f in fields if f.metadata[_KEY] in doc})


def json_value(value: object) -> JsonValue:
    """A field's value as JSON: a nested record by its own ``to_json``, tuples as arrays, enums as their value."""
    if isinstance(value, enum.Enum):
        return json_value(value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        own = getattr(value, "to_json", None)
        return own() if callable(own) else to_json(value)
    if isinstance(value, tuple | list):
        return [json_value(item) for item in value]
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    assert value is None or isinstance(value, str | int | float)  # bool is an int
    return value


def plain(value: JsonValue) -> Any:
    """A JSON value as a frozen record holds it: arrays as tuples, objects as (unshared) dicts."""
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def records_of(decode: Callable[[Any], T]) -> Callable[[Any], tuple[T, ...]]:
    """``decode`` for an array of nested records (``decode``: the nested record's ``from_json``)."""
    return lambda items: tuple(decode(item) for item in items)


def record_of(decode: Callable[[Any], T]) -> Callable[[Any], T | None]:
    """``decode`` for a nested record, or null."""
    return lambda item: decode(item) if item is not None else None
