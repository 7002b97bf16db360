"""Plans for the C row encoder: which column, which parser, which Avro shape, per field.

A plan is built once per table version (:class:`bridge.schema.RowEncoder`) from the same
column types the Python path uses, so both encode the same schema. A table gets a plan only if
every column has a native form for at least one wire format; a row whose values need the
Python converters anyway (NULL in a non-null key field, unchanged TOAST, ``NaN``…) is answered
``None`` by the encoder at run time.
"""

from __future__ import annotations

import struct
from collections.abc import Collection, Sequence
from typing import Any, Protocol

from bridge.native import ops


class ColumnType(Protocol):
    """What a plan reads of a column type (:class:`bridge.types.base.ColumnType` has it): its
    Avro schema, its native ops per wire format, an array's element type, a padded
    ZonedTimestamp's fraction width."""

    @property
    def avro(self) -> Any: ...

    @property
    def native(self) -> tuple[int, int]: ...

    @property
    def element(self) -> ColumnType | None: ...

    @property
    def fraction_digits(self) -> int: ...


#: Must match PLAN_STRIDE and the layout described at the top of _speedups.c: column index,
#: text op, binary op, nullable, decimal scale, decimal precision, an array's item ops (text,
#: binary), one unused byte.
_FIELD = struct.Struct(">HBBBBBBBx")


def _decimal_params(avro: Any) -> tuple[int, int] | None:
    if isinstance(avro, dict) and avro.get("logicalType") == "decimal":
        return int(avro.get("scale", 0)), int(avro["precision"])
    return None


def _decimal_fits(column: ColumnType) -> tuple[int, int] | None:
    """(scale, precision) of a decimal column the C encoder can hold (unscaled values are int64
    in C: at most 18 digits), else ``None``."""
    params = _decimal_params(column.avro)
    if params is None or not 0 <= params[0] <= params[1] <= 18:
        return None
    return params


#: Byte [4] of a field's plan: not a union, ["null", T], or [T, "null"].
NOT_NULLABLE, NULL_FIRST, NULL_SECOND = 0, 1, 2


def field_plan(index: int, column: ColumnType, nullable: int) -> bytes | None:
    """The plan entry of one field, or ``None`` if the column type has no native form;
    ``nullable`` is one of ``NOT_NULLABLE``, ``NULL_FIRST``, ``NULL_SECOND``."""
    text_op, binary_op = column.native
    if text_op == ops.NONE and binary_op == ops.NONE:
        return None
    scale = precision = 0
    item_text = item_binary = ops.NONE
    if ops.ARRAY in (text_op, binary_op):
        # An array's items are its element type's values; the element's ops parse them.
        element = column.element
        if element is None:
            return None
        item_text, item_binary = element.native
        if ops.ARRAY in (item_text, item_binary):  # pragma: no cover - no arrays of arrays
            return None
        if ops.DECIMAL in (item_text, item_binary):
            params = _decimal_fits(element)
            if params is None:
                return None
            scale, precision = params
        if ops.ZONED_PADDED in (item_text, item_binary):
            scale = element.fraction_digits
    elif ops.DECIMAL in (text_op, binary_op):
        params = _decimal_fits(column)
        if params is None:
            return None
        scale, precision = params
    return _FIELD.pack(
        index, text_op, binary_op, nullable, scale, precision, item_text, item_binary
    )


def record_plan(
    columns: Sequence[ColumnType],
    indexes: Sequence[int],
    nullable: bool,
    null_second: Collection[int] = (),
) -> bytes | None:
    """The plan of a record made of ``columns[i]`` for ``i`` in ``indexes``, in that order;
    with ``nullable``, each field is ``["null", T]``, or ``[T, "null"]`` for ``null_second``."""

    def union(i: int) -> int:
        if not nullable:
            return NOT_NULLABLE
        return NULL_SECOND if i in null_second else NULL_FIRST

    parts = [field_plan(i, columns[i], union(i)) for i in indexes]
    if any(p is None for p in parts):
        return None
    return b"".join(p for p in parts if p is not None)
