"""Arrays of any mapped element type: an Avro ``array`` whose items are nullable element values.

Text arrays are split by psycopg's array parser (quotes, escapes, ``NULL``, the ``[l:u]=``
bounds prefix, ``;`` for box), with a loader that hands each element back as its raw text so
the element's own pgbridge converter reads it. Binary arrays are split here (the format is a
fixed header and length-prefixed elements).

Relation messages do not say how many dimensions a column has (``attndims`` is not sent), so
arrays are one-dimensional unless the caller declares more (``TableHints.array_dimensions``,
from ``pg_attribute.attndims``); then the schema nests Avro arrays. PostgreSQL does not enforce
the declared count, so a value with a different number of dimensions raises
:class:`~bridge.types.errors.ConversionError` naming the column instead of being flattened or
padded silently. Empty arrays fit any declaration. Array lower bounds are not carried.
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


def split_binary(raw: bytes) -> tuple[list[int], list[bytes | None]]:
    """(dimension lengths, elements in row-major order) of a binary array."""
    ndim = int.from_bytes(raw[0:4], "big", signed=True)
    if ndim == 0:
        return [], []
    dims = [int.from_bytes(raw[12 + 8 * d : 16 + 8 * d], "big", signed=True) for d in range(ndim)]
    pos = 12 + 8 * ndim  # ndim, flags, element oid, then (length, lower bound) per dimension
    count = 1
    for length in dims:
        count *= length
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
    return dims, out


def _nest(flat: list[Any], dims: list[int]) -> list[Any]:
    for length in reversed(dims[1:]):
        flat = [flat[i : i + length] for i in range(0, len(flat), length)]
    return flat


def _wrong_dimensions(type_name: str, declared: int, raw: bytes) -> ConversionError:
    return ConversionError(
        type_name,
        f"array value does not have the {declared} dimension(s) declared for the column "
        "(Relation messages carry no dimensions; declare them with TableHints.array_dimensions)",
        raw=raw,
    )


def _convert_nested(
    items: Sequence[Any], convert: Converter, depth: int, type_name: str, raw: bytes
) -> list[Any]:
    out: list[Any] = []
    if depth == 1:
        for item in items:
            if item is None:
                out.append(None)
            elif isinstance(item, list):
                raise _wrong_dimensions(type_name, depth, raw)
            else:
                out.append(convert(item))
        return out
    for item in items:
        if not isinstance(item, list):
            raise _wrong_dimensions(type_name, depth, raw)
        out.append(_convert_nested(item, convert, depth - 1, type_name, raw))
    return out


def array_column(element: ColumnType, delimiter: bytes = b",", dimensions: int = 1) -> ColumnType:
    """An array of ``element`` with ``dimensions`` levels of nesting (Avro arrays of arrays;
    only the innermost items are nullable: PostgreSQL has no NULL sub-arrays)."""
    split_text = _SPLITTERS[delimiter]
    name = f"{element.pg_name}{'[]' * dimensions}"
    from_text_elem, from_binary_elem = element.from_text, element.from_binary
    schema: dict[str, Any] = {"type": "array", "items": ["null", element.avro]}
    for _ in range(dimensions - 1):
        schema = {"type": "array", "items": schema}

    def from_text(raw: bytes) -> list[Any]:
        return _convert_nested(split_text(raw), from_text_elem, dimensions, name, raw)

    def from_binary(raw: bytes) -> list[Any]:
        dims, items = split_binary(raw)
        if not dims:
            return []
        if len(dims) != dimensions:
            raise _wrong_dimensions(name, dimensions, raw)
        if dimensions == 1:  # the common case, without the nesting machinery
            return [None if item is None else from_binary_elem(item) for item in items]
        return _convert_nested(_nest(items, dims), from_binary_elem, dimensions, name, raw)

    return ColumnType(name, schema, from_text, from_binary)


def array_factory(element_factory: Factory, delimiter: bytes = b",") -> Factory:
    def factory(request: TypeRequest) -> ColumnType:
        # An array column's typmod is its element's (numeric(10,2)[] has numeric's typmod).
        return array_column(element_factory(request), delimiter, request.dimensions)

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
