"""A column's value in Avro's JSON form for a field ``default``.

Used for a column added by ``ALTER TABLE ... ADD COLUMN ... DEFAULT``, whose older rows hold the
value PostgreSQL computed at the ALTER (bridge.schema). Pure: text in, JSON value out.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from bridge.types.base import ColumnType
from bridge.types.errors import ConversionError

__all__ = ["avro_default"]


def avro_default(column_type: ColumnType, text: str) -> Any:
    """The JSON default of the value whose PostgreSQL text (as the walsender renders it) is
    ``text``; ``ValueError`` where Avro has no portable default form for it (NaN, records,
    arrays of nullable items) or the text is not a value of the type."""
    try:
        value = column_type.from_text(text.encode())
    except (ConversionError, TypeError) as exc:
        raise ValueError(str(exc)) from exc
    return _json_default(column_type.avro, value)


def _json_default(avro: Any, value: Any) -> Any:
    kind = avro.get("type") if isinstance(avro, dict) else avro
    if value is None:
        raise ValueError("a null default")
    if kind in ("float", "double"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{value!r} is not a number")
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is no JSON number")
        return float(value)
    if kind in ("int", "long") and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind in ("string", "enum") and isinstance(value, str):
        return value
    if kind == "bytes" and isinstance(value, Decimal):  # the decimal logical type
        unscaled = int(value.scaleb(int(avro.get("scale", 0))))
        value = unscaled.to_bytes(unscaled.bit_length() // 8 + 1, "big", signed=True)
    if kind == "bytes" and isinstance(value, bytes | bytearray):
        return bytes(value).decode("latin-1")  # Avro's JSON bytes: one code point per byte
    if kind == "array" and isinstance(value, list) and not isinstance(avro["items"], list):
        # Items that are unions (["null", T]: PostgreSQL arrays may hold NULLs) have no
        # portable JSON form: Avro readers disagree on which branch a union default names.
        return [_json_default(avro["items"], item) for item in value]
    raise ValueError(f"no default form for Avro type {kind!r}")
