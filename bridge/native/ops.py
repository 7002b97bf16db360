"""Wire-form codes of the C row encoder (:mod:`bridge.native._speedups`); keep in step with its
``enum``. A column type names, per wire format, the code whose C parser reproduces its Python
converter exactly (:class:`bridge.types.base.ColumnType` ``native``); 0 means the Python path."""

from __future__ import annotations

from typing import Final

NONE: Final = 0
INT: Final = 1  # int8 -> Avro long
STRING: Final = 2  # UTF-8 text -> Avro string
BOOL: Final = 3  # bool -> Avro boolean
DECIMAL: Final = 4  # numeric(p, s) -> Avro bytes decimal
TIMESTAMPTZ: Final = 5  # timestamptz -> microseconds since 1970 UTC
TIMESTAMP: Final = 6  # timestamp -> microseconds since 1970, wall clock
DATE: Final = 7  # date -> days since 1970
DOUBLE: Final = 8  # float8 -> Avro double
INT32: Final = 9  # int2/int4 -> Avro int (declines values beyond int32, as the writer refuses)
UUID: Final = 10  # uuid -> Avro string (text: ASCII; binary: 16 bytes, formatted)
BYTEA: Final = 11  # bytea -> Avro bytes (text: the hex format only)
TIME: Final = 12  # time -> microseconds since midnight
INTERVAL: Final = 13  # interval -> MicroDuration long (declines what Python clamps)
VARIABLE_DECIMAL: Final = 14  # numeric without typmod -> VariableScaleDecimal record
ARRAY: Final = 15  # one-dimensional array -> Avro array of ["null", item]; item ops in the plan
JSONB: Final = 16  # jsonb -> Avro string (binary: the text after the version byte 1)
ZONED: Final = 17  # timestamptz -> Debezium's ZonedTimestamp string (years 0..9999)
#: ... with the fraction always ``scale`` digits (the plan's; Debezium's array items)
ZONED_PADDED: Final = 18
