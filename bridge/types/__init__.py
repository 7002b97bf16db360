"""PostgreSQL types to Avro: one module per type family, like psycopg's ``types`` package.

Each family module has a ``register_types(registry)`` that adds its factories;
:func:`default_registry` assembles them (arrays last, as they wrap the element types).
:class:`TypeMapper` resolves a column's OID and typmod to a :class:`ColumnType` (Avro schema +
converters), using Type messages for the OIDs that are not built in. See ``docs/types.md``.

Converters never raise on a legal value: what Avro cannot hold exactly is delivered in a
documented nearest form and counted (:mod:`bridge.types.lossy`); they raise
:class:`ConversionError` only for input that is not a value of the type at all.
"""

from __future__ import annotations

from functools import cache

from bridge.types import (
    array,
    bits,
    extensions,
    geometric,
    network,
    numeric,
    temporal,
    text,
    textsearch,
)
from bridge.types import json as json_types  # aliases: do not shadow the json module and range()
from bridge.types import range as range_types
from bridge.types.base import (
    DEBEZIUM_UNAVAILABLE,
    DEBEZIUM_UNAVAILABLE_BYTES,
    AvroSchema,
    ColumnType,
    Converter,
    TypeOptions,
    TypeRegistry,
)
from bridge.types.errors import ConversionError, TypeMappingError, UnknownTypeError
from bridge.types.mapper import TypeMapper

_FAMILIES = (
    numeric,
    text,
    json_types,
    temporal,
    network,
    geometric,
    bits,
    textsearch,
    range_types,
    extensions,
)


@cache
def default_registry() -> TypeRegistry:
    """All built-in and extension types; shared (registries are read-only after assembly)."""
    registry = TypeRegistry()
    for family in _FAMILIES:
        family.register_types(registry)
    array.register_types(registry)
    return registry


__all__ = [
    "DEBEZIUM_UNAVAILABLE",
    "DEBEZIUM_UNAVAILABLE_BYTES",
    "AvroSchema",
    "ColumnType",
    "ConversionError",
    "Converter",
    "TypeMapper",
    "TypeMappingError",
    "TypeOptions",
    "TypeRegistry",
    "UnknownTypeError",
    "default_registry",
]
