"""Errors of the type mapping layer.

Each error names where it happened (table, column, type) so a user can act without a debugger;
the context is kept as attributes, not only in the message text.
"""

from __future__ import annotations

from bridge.errors import PgBridgeError


class TypeMappingError(PgBridgeError):
    """Base class: a PostgreSQL type or value could not be mapped to Avro."""


class UnknownTypeError(TypeMappingError):
    """A column has a type pgbridge does not know and ``unknown_types="fail"`` was configured."""

    def __init__(self, table: str, column: str, type_oid: int, type_name: str | None) -> None:
        shown = type_name or f"oid {type_oid}"
        super().__init__(
            f"column {table}.{column}: unknown type {shown} (oid {type_oid}); "
            "configure unknown_types='text' to send its text form"
        )
        self.table = table
        self.column = column
        self.type_oid = type_oid
        self.type_name = type_name


class ConversionError(TypeMappingError):
    """A value could not be converted from its PostgreSQL wire form.

    ``column`` and ``table`` are filled in by the row encoder, which knows them; the converter
    itself only knows the type.
    """

    def __init__(
        self,
        type_name: str,
        message: str,
        *,
        table: str | None = None,
        column: str | None = None,
        raw: bytes | None = None,
    ) -> None:
        where = f"column {table}.{column}: " if column is not None else ""
        shown = "" if raw is None else f" (value {raw[:40]!r}{'...' if len(raw) > 40 else ''})"
        super().__init__(f"{where}{type_name}: {message}{shown}")
        self.type_name = type_name
        self.table = table
        self.column = column
        self.raw = raw
        self.detail = message
