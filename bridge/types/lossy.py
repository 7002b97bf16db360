"""Legal PostgreSQL values that Avro cannot hold exactly: counted, warned about once, delivered.

A converter that meets such a value (a timestamp past Avro's long microseconds, a numeric
``NaN`` in an Avro ``decimal`` column, a 2-D value in a 1-D array column) does not raise: one
odd value must not halt the capture of a whole database. It delivers the documented nearest
form (clamped, ``null``, flattened; see ``docs/types.md``) and calls :func:`record_lossy`, so the
loss is never silent: the first time per (type, reason) a warning is logged, and every
occurrence is counted in :data:`LOSSY_VALUES`, which the metrics endpoint exports.

Converters do not know their column (they are shared by every column of a type), so the
warning names the type; the count tells how often it happened. The lossless alternatives are
the handling modes (``decimal.handling.mode=string``, ``interval.handling.mode=string``,
``timestamptz.handling.mode=string``).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Final

logger = logging.getLogger(__name__)

#: Values delivered in a lossy form since start, by (PostgreSQL type name, reason).
LOSSY_VALUES: Counter[tuple[str, str]] = Counter()

# Reasons: short, stable strings (they become metric labels).
CLAMPED: Final = "clamped"  # out of the Avro type's range: the nearest finite value
NAN_AS_NULL: Final = "nan_as_null"  # numeric NaN in a decimal field: null
INFINITY_AS_NULL: Final = "infinity_as_null"  # numeric ±Infinity in a decimal field: null
ARRAY_FLATTENED: Final = "array_flattened"  # more dimensions than the schema: row-major
ARRAY_WRAPPED: Final = "array_wrapped"  # fewer dimensions than the schema: outer levels of 1

_HINTS: Final = {
    CLAMPED: "the value is out of range of its Avro type and was clamped to the nearest "
    "representable value",
    NAN_AS_NULL: "NaN has no Avro decimal form and was sent as null "
    "(decimal.handling.mode=string or double keeps it)",
    INFINITY_AS_NULL: "Infinity has no Avro decimal form and was sent as null "
    "(decimal.handling.mode=string or double keeps it)",
    ARRAY_FLATTENED: "an array value has more dimensions than the column's schema and was "
    "flattened in row-major order",
    ARRAY_WRAPPED: "an array value has fewer dimensions than the column's schema and was "
    "wrapped in outer arrays of one element",
}

_warned: set[tuple[str, str]] = set()


def record_lossy(type_name: str, reason: str) -> None:
    """Count one lossy value; the first of each (type, reason) is logged as a warning."""
    key = (type_name, reason)
    LOSSY_VALUES[key] += 1
    if key not in _warned:
        _warned.add(key)
        logger.warning(
            "%s: %s; further such values are only counted (pgbridge_lossy_values_total)",
            type_name,
            _HINTS.get(reason, reason),
        )
