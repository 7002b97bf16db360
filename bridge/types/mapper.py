"""Resolve a column's type OID (and typmod) to a :class:`ColumnType`, without I/O.

Built-in types resolve by OID. Every other OID is resolved from the Type message pgoutput sends
before the first Relation that uses it: the mapper caches those (:meth:`TypeMapper.observe`).
A Type message carries the *base* type's namespace and name for a domain (``logicalrep_write_typ``
looks through domains), so a domain over ``integer`` resolves to ``integer`` by name. Arrays of
non-built-in types are named ``_<element>``. Enum labels are not in any message; they come from
:attr:`TypeOptions.enum_labels` when the caller has them. A domain's modifier is not in any
message either (a column of a domain has typmod -1): the caller that reads the catalog hands
it over with :meth:`TypeMapper.observe_resolved` (bridge.source.type_catalog), which also
resolves arrays of domains, so ``numeric(12,3)`` under a domain stays a decimal of scale 3.

A type that still does not resolve falls back to its text form (an Avro string) with one
warning per type, or raises :class:`UnknownTypeError` when ``unknown_types="fail"``. An array
of such a type (an enum without labels, a composite, a domain: ``_<element>``) is an Avro array
of the elements' text forms, with the same warning; as the text fallback, it needs the text
wire format for elements whose binary form is not text (composites).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Final

from bridge.pgoutput.messages import Type
from bridge.types.base import (
    DEBEZIUM_UNAVAILABLE,
    ColumnType,
    Factory,
    TypeOptions,
    TypeRegistry,
    TypeRequest,
    connect,
    connect_form,
)
from bridge.types.errors import ConversionError, UnknownTypeError

logger = logging.getLogger(__name__)

_CATALOG_NAMESPACES: Final = ("", "pg_catalog")


_CONTROL: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _text_fallback(type_name: str) -> ColumnType:
    def from_binary(raw: bytes) -> str:
        # Without knowing the type we cannot read an arbitrary binary form. Enums and most
        # text-like extension types send their text; other forms (a composite's record_send
        # starts with a big-endian column count) contain control bytes and are refused rather
        # than passed on as garbage.
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = "\x00"
        if _CONTROL.search(text):
            raise ConversionError(
                type_name,
                "unknown type sent in binary form; publish it as text (binary 'false') "
                "or map the type",
                raw=raw,
            )
        return text

    return ColumnType(
        type_name, "string", lambda raw: raw.decode("utf-8"), from_binary, DEBEZIUM_UNAVAILABLE
    )


def enum_column(type_name: str, labels: tuple[str, ...]) -> ColumnType:
    """Debezium's ``io.debezium.data.Enum``: a string with the allowed labels as a parameter."""
    schema = connect("string", "io.debezium.data.Enum", parameters={"allowed": ",".join(labels)})

    def convert(raw: bytes) -> str:
        return raw.decode("utf-8")  # enum_send sends the label text, as enum_out does

    return ColumnType(type_name, schema, convert, convert)


class TypeMapper:
    """Type OID + typmod -> :class:`ColumnType`, caching Type messages and resolved mappings.

    Not thread-safe; one per replication stream, like the decoder's relation cache.
    """

    def __init__(
        self, options: TypeOptions | None = None, registry: TypeRegistry | None = None
    ) -> None:
        from bridge.types import default_registry

        self.options = options or TypeOptions()
        self.registry = registry or default_registry()
        self._types: dict[int, Type] = {}
        # Domains and arrays of domains: the named type and modifier they stand for.
        self._resolved: dict[int, tuple[Type, int]] = {}
        self._cache: dict[tuple[int, int, int], ColumnType] = {}
        self._warned: set[int] = set()

    def observe(self, message: Type) -> None:
        """Remember a Type message. A changed definition for a known OID drops cached mappings."""
        if self._types.get(message.type_oid) != message:
            self._types[message.type_oid] = message
            self._cache = {k: v for k, v in self._cache.items() if k[0] != message.type_oid}

    def observe_resolved(self, oid: int, namespace: str, name: str, typmod: int) -> None:
        """Type ``oid`` (a domain, or an array of one) stands for ``namespace.name`` with
        modifier ``typmod``: its columns map as columns of that type (their own modifier, where
        one is set, still wins), whatever Type message names it."""
        resolved = (Type(None, oid, namespace, name), typmod)
        if self._resolved.get(oid) != resolved:
            self._resolved[oid] = resolved
            self._cache = {k: v for k, v in self._cache.items() if k[0] != oid}

    def observe_enum(self, namespace: str, name: str, labels: tuple[str, ...]) -> None:
        """The enum ``namespace.name`` has ``labels`` (from the catalog: pgoutput's Type message
        does not carry them); a change (``ALTER TYPE ... ADD VALUE``) drops cached mappings,
        so the next Relation gets the new ``allowed`` list."""
        qualified = name if namespace in _CATALOG_NAMESPACES else f"{namespace}.{name}"
        if self.options.enum_labels.get(qualified) != labels:
            self.set_enum_labels({**self.options.enum_labels, qualified: labels})

    def set_enum_labels(self, labels: Mapping[str, tuple[str, ...]]) -> None:
        """Replace the enum labels (after ``ALTER TYPE ... ADD VALUE``, say): mappings built
        from the old labels are dropped, so the next Relation gets the new ``allowed`` list."""
        self.options = replace(self.options, enum_labels=dict(labels))
        self._cache.clear()

    def type_name(self, oid: int) -> str | None:
        known = self._types.get(oid)
        if known is not None:
            return (
                known.type_name
                if known.namespace in _CATALOG_NAMESPACES
                else f"{known.namespace}.{known.type_name}"
            )
        return None

    def column_type(
        self,
        oid: int,
        typmod: int = -1,
        *,
        dimensions: int = 1,
        table: str = "?",
        column: str = "?",
    ) -> ColumnType:
        """The mapping of one column type; ``dimensions`` applies to array types only;
        ``table`` and ``column`` only name the place in errors."""
        resolved = self._resolved.get(oid)
        if resolved is not None and typmod == -1:
            typmod = resolved[1]
        key = (oid, typmod, dimensions)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        factory, name = self._factory(oid)
        if factory is None:
            result = self._unknown(oid, name, table, column)
        else:
            request = TypeRequest(oid, typmod, name or str(oid), self.options, dimensions)
            result = factory(request)
        if self.options.logical_types == "connect":
            result = replace(result, avro=connect_form(result.avro))
        self._cache[key] = result
        return result

    def _factory(self, oid: int) -> tuple[Factory | None, str | None]:
        registry = self.registry
        factory = registry.by_oid.get(oid)
        if factory is not None:
            return factory, None
        resolved = self._resolved.get(oid)
        message = resolved[0] if resolved is not None else self._types.get(oid)
        if message is None:
            return None, None
        name, namespace = message.type_name, message.namespace
        qualified = name if namespace in _CATALOG_NAMESPACES else f"{namespace}.{name}"
        labels = self.options.enum_labels
        enum = labels.get(qualified, labels.get(name))
        if enum is not None:
            column = enum_column(qualified, tuple(enum))
            return (lambda request: column), qualified
        # Built-in base types of domains are in pg_catalog; extension types live in whichever
        # schema the extension was installed into, so they match by bare name.
        factory = registry.by_name.get(name)
        if factory is not None:
            return factory, qualified
        if name.startswith("_"):
            element_name = name[1:]
            element_qualified = (
                element_name if namespace in _CATALOG_NAMESPACES else f"{namespace}.{element_name}"
            )
            enum = labels.get(element_qualified, labels.get(element_name))
            element: Factory | None
            if enum is not None:
                element_column = enum_column(element_qualified, tuple(enum))
                element = lambda request: element_column  # noqa: E731
            else:
                element = registry.by_name.get(element_name)
            if element is None and self.options.unknown_types == "text":
                element_column = _text_fallback(element_qualified)
                element = lambda request: element_column  # noqa: E731
                if oid not in self._warned:
                    self._warned.add(oid)
                    logger.warning(
                        "type %s (oid %d) is an array of a type not known to pgbridge; "
                        "sending its elements' text form",
                        qualified,
                        oid,
                    )
            if element is not None and registry.array_of is not None:
                return registry.array_of(element_name, element), qualified
        return None, qualified

    def _unknown(self, oid: int, name: str | None, table: str, column: str) -> ColumnType:
        if self.options.unknown_types == "fail":
            raise UnknownTypeError(table, column, oid, name)
        if oid not in self._warned:
            self._warned.add(oid)
            logger.warning(
                "column %s.%s: type %s (oid %d) is not known to pgbridge; sending its text form",
                table,
                column,
                name or "without a Type message",
                oid,
            )
        return _text_fallback(name or f"oid {oid}")
