"""Arrays of any mapped element type: an Avro ``array`` whose items are nullable element values.

Text arrays are split by psycopg's array parser (quotes, escapes, ``NULL``, the ``[l:u]=``
bounds prefix, ``;`` for box), with a loader that hands each element back as its raw text so
the element's own pgbridge converter reads it. Binary arrays are split here (the format is a
fixed header and length-prefixed elements).

Relation messages do not say how many dimensions a column has (``attndims`` is not sent, and
PostgreSQL does not enforce it), so the schema cannot describe nesting. One-dimensional arrays,
the overwhelming majority, map exactly; a multi-dimensional value raises
:class:`~bridge.types.errors.ConversionError` naming the column instead of being flattened
silently. Array lower bounds other than 1 are not carried.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import psycopg
from psycopg.adapt import AdaptersMap, Loader
from psycopg.pq import Format
from psycopg.types.array import ArrayLoader

from bridge.types.base import ColumnType, Converter, Factory, TypeRegistry, TypeRequest
from bridge.types.errors import ConversionError


class _RawTextLoader(Loader):
    """Hands an array element back as bytes, for the element type's own converter."""

    format = Format.TEXT

    def load(self, data: Any) -> bytes:
        return bytes(data)


class _Context:
    """An adapt context whose only loader is the raw one (psycopg needs ``connection`` too)."""

    def __init__(self) -> None:
        self.adapters = AdaptersMap(psycopg.adapters)
        self.adapters.register_loader(0, _RawTextLoader)
        self.connection = None


_CONTEXT: Final = _Context()


def _text_splitter(delimiter: bytes) -> Converter:
    cls = type("RawArrayLoader", (ArrayLoader,), {"base_oid": 0, "delimiter": delimiter})
    loader = cls(0, _CONTEXT)
    load: Converter = loader.load
    return load


_SPLITTERS: Final = {b",": _text_splitter(b","), b";": _text_splitter(b";")}


def split_binary(raw: bytes) -> list[bytes | None] | None:
    """Elements of a one-dimensional binary array; None when it has more dimensions."""
    ndim = int.from_bytes(raw[0:4], "big", signed=True)
    if ndim == 0:
        return []
    if ndim != 1:
        return None
    count = int.from_bytes(raw[12:16], "big", signed=True)
    pos = 20  # ndim, flags, element oid, then (length, lower bound) for the one dimension
    out: list[bytes | None] = []
    append = out.append
    for _ in range(count):
        size = int.from_bytes(raw[pos : pos + 4], "big", signed=True)
        pos += 4
        if size < 0:
            append(None)
        else:
            append(raw[pos : pos + size])
            pos += size
    return out


def _convert_items(
    items: Sequence[Any], convert: Converter, type_name: str, raw: bytes
) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if item is None:
            out.append(None)
        elif isinstance(item, list):
            raise ConversionError(
                type_name,
                "multi-dimensional arrays are not supported (the Relation message does not "
                "carry dimensions, so the Avro schema is one-dimensional)",
                raw=raw,
            )
        else:
            out.append(convert(item))
    return out


def array_column(element: ColumnType, delimiter: bytes = b",") -> ColumnType:
    split_text = _SPLITTERS[delimiter]
    name = f"{element.pg_name}[]"
    from_text_elem, from_binary_elem = element.from_text, element.from_binary

    def from_text(raw: bytes) -> list[Any]:
        return _convert_items(split_text(raw), from_text_elem, name, raw)

    def from_binary(raw: bytes) -> list[Any]:
        items = split_binary(raw)
        if items is None:
            return _convert_items([[]], from_binary_elem, name, raw)  # raises
        return [None if item is None else from_binary_elem(item) for item in items]

    return ColumnType(
        name, {"type": "array", "items": ["null", element.avro]}, from_text, from_binary
    )


def array_factory(element_factory: Factory, delimiter: bytes = b",") -> Factory:
    def factory(request: TypeRequest) -> ColumnType:
        # An array column's typmod is its element's (numeric(10,2)[] has numeric's typmod).
        return array_column(element_factory(request), delimiter)

    return factory


def register_types(registry: TypeRegistry) -> None:
    """Register the array type of every built-in element type registered so far; call last."""
    for info in psycopg.postgres.types:
        element = registry.by_name.get(info.name)
        if element is None or not info.array_oid:
            continue
        factory = array_factory(element, info.delimiter.encode())
        registry.by_oid[info.array_oid] = factory
        registry.by_name["_" + info.name] = factory
    registry.array_of = lambda name, element: array_factory(element)
