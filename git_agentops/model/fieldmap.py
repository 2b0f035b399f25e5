"""Records whose JSON forms are generated from one declared field map.

A record that travels -- the delivery from its note to the task state to the receipt, the integration's merge steps
from the pipeline to ``run.json`` to the receipt -- used to be a dict whose keys were renamed at every hop, each
hop with its own idiom for absent keys. Instead each record declares its fields once, as a :class:`FieldMap` of
(Python name, JSON key) pairs, and every JSON form is derived from that declaration: :meth:`FieldMap.renamed` for a
form that spells some keys differently (the note's ``sourceCommit`` for the state's ``commit``),
:meth:`FieldMap.only` for a form that carries a subset (the receipt's delivery entry). ``to_json`` and
``from_json`` are :meth:`FieldMap.dump` and :meth:`FieldMap.load`; nothing else spells a key.

Loading does not validate: a document read from disk is checked by its JSON Schema at that edge (the store reads
through :mod:`git_agentops.schema.documents`), once, and the record is trusted after that.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, Generic, TypeVar

R = TypeVar("R")
ALWAYS: Final = object()
"""A :class:`Field`'s ``absent`` when no value is written as an absent key: the key is always there."""


@dataclass(frozen=True, slots=True)
class Field:
    """One field: its Python attribute, its JSON key, and how absence and sequences are spelled.

    ``absent``: the value written as an absent key rather than spelled out (``None`` for an optional field,
    ``False`` for a flag written only when set); an absent key is read back as the record's default, so ``absent``
    must be that default. ``sequence``: a JSON array read into a tuple (each item converted). ``decode`` and
    ``encode`` convert a value (or each item) between its JSON form and its Python one: a nested record's
    ``from_json`` and ``to_json``, an enum's class and ``str``; None: the value is the same in both.
    """

    name: str
    key: str
    absent: object = ALWAYS
    sequence: bool = False
    decode: Callable[..., object] | None = None
    encode: Callable[..., object] | None = None


@dataclass(frozen=True, slots=True)
class FieldMap(Generic[R]):
    """The declared fields of one record type and the JSON form they generate."""

    make: Callable[..., R]
    fields: tuple[Field, ...]

    def dump(self, record: R) -> dict[str, object]:
        """The JSON form of ``record``: every field under its key, except those whose value is their ``absent``."""
        doc: dict[str, object] = {}
        for field in self.fields:
            value = getattr(record, field.name)
            if field.absent is not ALWAYS and value is field.absent:
                continue
            doc[field.key] = _dump_value(value, field)
        return doc

    def encode(self, name: str, value: object) -> tuple[str, object]:
        """The JSON key and form of one value of field ``name`` (``None`` stays ``None``): for a document that
        names some fields of the record, as an event's data does."""
        for field in self.fields:
            if field.name == name:
                return field.key, _dump_value(value, field)
        raise ValueError(f"no field {name!r}")

    def load(self, doc: Mapping[str, object], **given: object) -> R:
        """The record a (schema-checked) JSON form describes; ``given`` supplies fields this form does not carry.

        A field absent from ``doc`` keeps the record's default.
        """
        values = dict(given)
        for field in self.fields:
            if field.key in doc:
                values[field.name] = _load_value(doc[field.key], field)
        return self.make(**values)

    def renamed(self, **keys: str) -> FieldMap[R]:
        """The same fields with the JSON keys named in ``keys`` (Python name -> key) spelled differently."""
        unknown = set(keys) - {f.name for f in self.fields}
        if unknown:
            raise ValueError(f"no fields {sorted(unknown)}")
        return replace(self, fields=tuple(replace(f, key=keys.get(f.name, f.key)) for f in self.fields))

    def only(self, *names: str) -> FieldMap[R]:
        """The subset of fields ``names`` (in the declared order)."""
        unknown = set(names) - {f.name for f in self.fields}
        if unknown:
            raise ValueError(f"no fields {sorted(unknown)}")
        return replace(self, fields=tuple(f for f in self.fields if f.name in names))

    def keys(self) -> tuple[str, ...]:
        """The JSON keys of this form, in the declared order."""
        return tuple(f.key for f in self.fields)


def _dump_value(value: object, field: Field) -> object:
    if field.sequence and isinstance(value, Sequence) and not isinstance(value, str):
        return [_convert(item, field.encode) for item in value]
    return _convert(value, field.encode)


def _load_value(value: object, field: Field) -> object:
    if field.sequence and isinstance(value, Sequence) and not isinstance(value, str):
        return tuple(_convert(item, field.decode) for item in value)
    return _convert(value, field.decode)


def _convert(value: object, how: Callable[..., object] | None) -> object:
    return value if how is None or value is None else how(value)


def field_map(make: Callable[..., R], *fields: Field | tuple[str, str]) -> FieldMap[R]:
    """A :class:`FieldMap`; a plain ``(name, key)`` pair is a field always written, scalar.

    ``ValueError`` (at import: a declaration is code) when ``make`` is a dataclass without one of the fields, or
    two fields share a name or a key."""
    declared = tuple(f if isinstance(f, Field) else Field(*f) for f in fields)
    names, keys = [f.name for f in declared], [f.key for f in declared]
    if len(set(names)) != len(names) or len(set(keys)) != len(keys):
        raise ValueError(f"a field map names a field or a key twice: {names} {keys}")
    if dataclasses.is_dataclass(make):
        missing = set(names) - {f.name for f in dataclasses.fields(make)}
        if missing:
            raise ValueError(f"{make.__name__} has no fields {sorted(missing)}")
    return FieldMap(make, declared)
