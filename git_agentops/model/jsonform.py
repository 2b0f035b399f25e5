"""One declared field map per record, from which every JSON form of it is generated both ways.

A record written to disk (an evidence line, a transition's journal record, a delivery, the integration record) has a
JSON form that is a format: its bytes are hashed, MAC'd, named by digest. Writing ``to_json`` and ``from_json`` by
hand for each record gives every key two places to drift apart in, and every record its own idea of nulls and
absent keys. Here a dataclass field declares, once and on the field itself, its key on disk (:func:`on_disk`), the
value written as an absent key rather than spelled out (``absent``: None for an optional field or a key added after
records were first written, False for a flag written only when set), and how a JSON value becomes the field's value
(``decode``: a nested record's ``from_json``, an enum). :func:`field_map` reads those declarations into a
:class:`FieldMap`, whose :meth:`~FieldMap.dump` and :meth:`~FieldMap.load` are the record's ``to_json`` and
``from_json`` (:class:`JsonRecord` wires them).

A record that travels is spelled differently at some edges -- the delivery note says ``sourceCommit`` where the run
state says ``commit``, the receipt carries a subset -- and those forms are derived from the one declaration, never
declared again: :meth:`FieldMap.renamed` and :meth:`FieldMap.only`.

Loading does not validate: a document read from disk is checked by its JSON Schema at the edge that reads it, once,
and the record is trusted after that. (:func:`on_disk` returns a ``dataclasses.Field``, as ``field()`` does; ruff is
told so in ``pyproject.toml``.)
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Generic, Self, TypeVar

from ..canonical import JsonObject, JsonValue

R = TypeVar("R")
T = TypeVar("T")
Decode = Callable[[Any], Any]

ALWAYS: Final = object()
"""A :class:`Field`'s ``absent`` when no value is written as an absent key: the key is always there."""
_FIELD: Final = "json-field"


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a JSON form: its Python attribute, its JSON key, and how absence and values are spelled.

    ``absent``: the value written as an absent key (:data:`ALWAYS`: none is); an absent key is read back as the
    record's default, so ``absent`` is that default. ``decode``: how a (non-null) JSON value becomes the field's
    value; the value is written back by :func:`json_value`.
    """

    name: str
    key: str
    absent: object = ALWAYS
    decode: Decode | None = None

    def omits(self, value: object) -> bool:
        """Whether ``value`` is written as an absent key."""
        absent = self.absent
        return absent is not ALWAYS and (value is absent or (type(value) is type(absent) and value == absent))


def on_disk(
    key: str, *, absent: object = ALWAYS, decode: Decode | None = None, default: object = dataclasses.MISSING
) -> Any:
    """A dataclass field whose JSON key is ``key``.

    ``absent``: the value written as an absent key rather than spelled out; it is also the field's default.
    ``decode``: how the JSON value becomes the field's value (default :func:`plain`: arrays become tuples, objects
    dicts). ``default``: the value of a field not given (immutable), for a field whose key is always written.
    """
    if absent is not ALWAYS:
        default = absent
    return dataclasses.field(default=default, metadata={_FIELD: (key, absent, decode or plain)})


@dataclass(frozen=True, slots=True)
class FieldMap(Generic[R]):
    """The fields of one JSON form of a record type, in order, and the form they generate.

    ``ValueError`` (at import: a declaration is code) when ``make`` is a dataclass without one of the fields, or
    two fields share a name or a key."""

    make: Callable[..., R]
    fields: tuple[Field, ...]

    def __post_init__(self) -> None:
        names, keys = [f.name for f in self.fields], [f.key for f in self.fields]
        if len(set(names)) != len(names) or len(set(keys)) != len(keys):
            raise ValueError(f"a field map names a field or a key twice: {names} {keys}")
        if dataclasses.is_dataclass(self.make):
            missing = set(names) - {f.name for f in dataclasses.fields(self.make)}
            if missing:
                raise ValueError(f"{getattr(self.make, '__name__', self.make)} has no fields {sorted(missing)}")

    def dump(self, record: R) -> JsonObject:
        """The JSON form of ``record``: every field under its key, except those whose value is their ``absent``."""
        doc: JsonObject = {}
        for field in self.fields:
            value = getattr(record, field.name)
            if not field.omits(value):
                doc[field.key] = json_value(value)
        return doc

    def encode(self, name: str, value: object) -> tuple[str, JsonValue]:
        """The JSON key and form of one value of field ``name`` (``None`` stays ``None``): for a document that
        names some fields of the record, as an event's data does."""
        for field in self.fields:
            if field.name == name:
                return field.key, json_value(value)
        raise ValueError(f"no field {name!r}")

    def load(self, doc: Mapping[str, Any], **given: object) -> R:
        """The record a (schema-checked) JSON form describes; ``given`` supplies fields this form does not carry.
        A field absent from ``doc`` keeps the record's default; a null stays None."""
        values = dict(given)
        for field in self.fields:
            if field.key in doc:
                value = doc[field.key]
                values[field.name] = value if value is None or field.decode is None else field.decode(value)
        return self.make(**values)

    def renamed(self, **keys: str) -> FieldMap[R]:
        """The same fields with the JSON keys named in ``keys`` (Python name -> key) spelled differently."""
        self._known(set(keys))
        return replace(self, fields=tuple(replace(f, key=keys.get(f.name, f.key)) for f in self.fields))

    def only(self, *names: str) -> FieldMap[R]:
        """The subset of fields ``names`` (in the declared order)."""
        self._known(set(names))
        return replace(self, fields=tuple(f for f in self.fields if f.name in names))

    def keys(self) -> tuple[str, ...]:
        """The JSON keys of this form, in the declared order."""
        return tuple(f.key for f in self.fields)

    def _known(self, names: set[str]) -> None:
        unknown = names - {f.name for f in self.fields}
        if unknown:
            raise ValueError(f"no fields {sorted(unknown)}")


_DECLARED: Final[dict[tuple[type[Any], bool], FieldMap[Any]]] = {}
"""The field maps read so far (a declaration is code: it does not change)."""


def _declared(cls: type[Any], partial: bool) -> FieldMap[Any]:
    known = _DECLARED.get((cls, partial))
    if known is not None:
        return known
    fields = []
    for f in dataclasses.fields(cls):
        if _FIELD in f.metadata:
            key, absent, decode = f.metadata[_FIELD]
            fields.append(Field(f.name, key, absent, decode))
        elif not partial:
            raise ValueError(f"{cls.__name__}.{f.name} is not declared on_disk")
    declared = _DECLARED[cls, partial] = FieldMap(cls, tuple(fields))
    return declared


def field_map(cls: type[R], *, partial: bool = False) -> FieldMap[R]:
    """The field map ``cls`` declares with :func:`on_disk`, in declaration order.

    ``ValueError`` when a field is not declared: a field the map forgot would silently vanish from the stored form.
    ``partial``: the map is of the declared fields only, for a record whose document holds them in a part of its
    own (a task's ``extra``) and writes the rest itself."""
    return _declared(cls, partial)


class JsonRecord:
    """A frozen dataclass whose fields are all declared with :func:`on_disk`: its ``to_json`` and ``from_json`` are
    generated from them. (A mixin without state: subclasses stay slotted.)"""

    __slots__ = ()

    def to_json(self) -> JsonObject:
        """The record's JSON form (its field map, in declaration order)."""
        return field_map(type(self)).dump(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Self:
        """The record of a schema-valid JSON document (validated at the edge that read it; trusted here)."""
        return field_map(cls).load(doc)


def json_value(value: object) -> JsonValue:
    """A field's value as JSON: a nested record by its own ``to_json``, tuples as arrays, enums as their value."""
    if isinstance(value, enum.Enum):
        return json_value(value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        own = getattr(value, "to_json", None)
        return own() if callable(own) else field_map(type(value)).dump(value)
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
