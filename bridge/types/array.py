"""Arrays of any mapped element type: an Avro ``array`` whose items are nullable element values.

Text arrays are split by psycopg's array parser (quotes, escapes, ``NULL``, the ``[l:u]=``
bounds prefix, ``;`` for box), with a loader that hands each element back as its raw text so
the element's own pgbridge converter reads it. Binary arrays are split here (the format is a
fixed header and length-prefixed elements).

Relation messages do not say how many dimensions a column has (``attndims`` is not sent), so
the schema nests Avro arrays as deep as the caller declares (``TableHints.array_dimensions``,
from ``pg_attribute.attndims``; 1 by default). PostgreSQL does not enforce the declared count,
so any value must still fit that schema, and does (never an error):

- a value with MORE dimensions than the schema is flattened in row-major order to its depth:
  the outer ``depth - 1`` dimensions are kept and the remaining ones merged into the innermost
  array (``{{1,2},{3,4}}`` in a 1-D schema is ``[1,2,3,4]``; a 3-D value in a 2-D schema keeps
  its first dimension);
- a value with FEWER dimensions is wrapped in outer arrays of one element (``{1,2}`` in a 2-D
  schema is ``[[1,2]]``);
- an empty array (no dimensions) is ``[]`` at any depth.

Both reshapes are counted and warned about once per type (:mod:`bridge.types.lossy`): the
elements and their order are kept, the original shape is not. Lower bounds (``[2:3]={1,2}``)
are not carried, as in Debezium.
"""

from __future__ import annotations

from collections.abc import Iterator
from math import prod
from typing import Any, Final

import psycopg
from psycopg.adapt import AdaptersMap, Loader
from psycopg.pq import Format
from psycopg.types.array import ArrayLoader

from bridge.native import ops
from bridge.types.base import (
    ColumnType,
    Converter,
    Factory,
    TypeRegistry,
    TypeRequest,
    simple,
    utf8,
)
from bridge.types.errors import ConversionError
from bridge.types.lossy import ARRAY_FLATTENED, ARRAY_WRAPPED, record_lossy
from bridge.types.temporal import timestamptz_array_element


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
    """(dimension lengths, elements in row-major order) of a binary array; lower bounds are
    skipped."""
    ndim = int.from_bytes(raw[0:4], "big", signed=True)
    if ndim == 0:
        return [], []
    dims = [int.from_bytes(raw[12 + 8 * d : 16 + 8 * d], "big", signed=True) for d in range(ndim)]
    pos = 12 + 8 * ndim  # ndim, flags, element oid, then (length, lower bound) per dimension
    out: list[bytes | None] = []
    append = out.append
    for _ in range(prod(dims)):
        size = int.from_bytes(raw[pos : pos + 4], "big", signed=True)
        pos += 4
        if size < 0:
            append(None)
        else:
            append(raw[pos : pos + size])
            pos += size
    if pos != len(raw):
        raise ConversionError("array", "malformed binary array", raw=raw)
    return dims, out


def _leaves(items: list[Any]) -> Iterator[Any]:
    for item in items:
        if isinstance(item, list):
            yield from _leaves(item)
        else:
            yield item


def split_text(nested: list[Any], name: str, raw: bytes) -> tuple[list[int], list[Any]]:
    """(dimension lengths, elements in row-major order) of psycopg's nested lists."""
    if not nested:
        return [], []
    dims: list[int] = []
    level: Any = nested
    while isinstance(level, list):
        dims.append(len(level))
        level = level[0] if level else None
    flat = list(_leaves(nested))
    if len(flat) != prod(dims):  # PostgreSQL's arrays are rectangular
        raise ConversionError(name, "array is not rectangular", raw=raw)
    return dims, flat


def _nest(flat: list[Any], dims: list[int]) -> list[Any]:
    for length in reversed(dims[1:]):
        flat = [flat[i : i + length] for i in range(0, len(flat), length)]
    return flat


def fit_dimensions(dims: list[int], depth: int, name: str) -> list[int]:
    """The shape a value of dimension lengths ``dims`` takes in a schema ``depth`` deep
    (``dims`` non-empty): merged inner dimensions (flattened) or leading 1s (wrapped)."""
    have = len(dims)
    if have == depth:
        return dims
    if have > depth:
        record_lossy(name, ARRAY_FLATTENED)
        return [*dims[: depth - 1], prod(dims[depth - 1 :])]
    record_lossy(name, ARRAY_WRAPPED)
    return [1] * (depth - have) + dims


def array_column(element: ColumnType, delimiter: bytes = b",", dimensions: int = 1) -> ColumnType:
    """An array of ``element`` with ``dimensions`` levels of nesting (Avro arrays of arrays;
    only the innermost items are nullable: PostgreSQL has no NULL sub-arrays)."""
    split = _SPLITTERS[delimiter]
    name = f"{element.pg_name}{'[]' * dimensions}"
    from_text_elem, from_binary_elem = element.from_text, element.from_binary
    schema: dict[str, Any] = {"type": "array", "items": ["null", element.avro]}
    for _ in range(dimensions - 1):
        schema = {"type": "array", "items": schema}

    def shaped(dims: list[int], flat: list[Any], convert: Converter) -> list[Any]:
        values = [None if item is None else convert(item) for item in flat]
        if len(dims) == 1 and dimensions == 1:  # the common case, without the nesting
            return values
        return _nest(values, fit_dimensions(dims, dimensions, name))

    def from_text(raw: bytes) -> list[Any]:
        nested = split(raw)
        if nested and not isinstance(nested[0], list) and dimensions == 1:
            return [None if item is None else from_text_elem(item) for item in nested]
        dims, flat = split_text(nested, name, raw)
        return shaped(dims, flat, from_text_elem) if dims else []

    def from_binary(raw: bytes) -> list[Any]:
        dims, flat = split_binary(raw)
        return shaped(dims, flat, from_binary_elem) if dims else []

    # The C encoder reads one-dimensional arrays of an element type it reads (text: the
    # comma-delimited form; box's ';' is not among its types), for a schema one level deep.
    text_op = binary_op = ops.NONE
    if dimensions == 1:
        if delimiter == b"," and element.native[0] != ops.NONE:
            text_op = ops.ARRAY
        if element.native[1] != ops.NONE:
            binary_op = ops.ARRAY
    return ColumnType(
        name, schema, from_text, from_binary, native=(text_op, binary_op), element=element
    )


def array_factory(element_factory: Factory, delimiter: bytes = b",") -> Factory:
    def factory(request: TypeRequest) -> ColumnType:
        # An array column's typmod is its element's (numeric(10,2)[] has numeric's typmod).
        return array_column(element_factory(request), delimiter, request.dimensions)

    return factory


def _int_vector(signed: bool) -> Converter:
    def from_binary(raw: bytes) -> str:
        # int2vector/oidvector send as a 1-D array; their text form is space-separated.
        _, items = split_binary(raw)
        return " ".join(str(int.from_bytes(i or b"", "big", signed=signed)) for i in items)

    return from_binary


def register_types(registry: TypeRegistry) -> None:
    """Register the array type of every built-in element type registered so far; call last."""
    # The catalog's vector types (pg_index.indkey, pg_proc.proargtypes copied into a table):
    # a string of their text form, as Debezium sends unknown types.
    registry.add_builtin("int2vector", simple("int2vector", "string", utf8, _int_vector(True)))
    registry.add_builtin("oidvector", simple("oidvector", "string", utf8, _int_vector(False)))
    for info in psycopg.postgres.types:
        element = registry.by_name.get(info.name)
        if element is None or not info.array_oid:
            continue
        if info.name == "timestamptz":  # Debezium pads an array's items (not a scalar)
            element = timestamptz_array_element
        factory = array_factory(element, info.delimiter.encode())
        registry.by_oid[info.array_oid] = factory
        registry.by_name["_" + info.name] = factory
    registry.array_of = lambda name, element: array_factory(element)
