"""Numbers and booleans: smallint, integer, bigint, oid, real, double precision, numeric, money,
boolean.

``numeric(p,s)`` is an Avro ``decimal`` annotated as Kafka Connect's ``Decimal``; an unconstrained
``numeric`` has no fixed scale, which Avro's ``decimal`` cannot express, so it follows
:attr:`TypeOptions.unconstrained_numeric` (Debezium's ``VariableScaleDecimal`` by default).
``numeric(p,s)`` with a precision above 38 or a negative scale (PostgreSQL 15+) is treated as
unconstrained too: Spark, the main reader, cannot hold a decimal wider than 38 digits, and Avro
forbids negative scales.

NaN and ±Infinity (numeric since PostgreSQL 14 stores infinities) have no decimal form. In
``precise`` mode (the fixed-scale decimal and the ``VariableScaleDecimal`` record alike, also
as array elements) they become ``null``, as in Debezium; every value field and array item is
nullable, so this is always encodable. It is never silent: each is counted in
:data:`bridge.types.lossy.LOSSY_VALUES` and the first one of a kind logged as a warning.
``decimal_handling="string"`` keeps them as ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` and
``"double"`` as the IEEE values. ``real`` and ``double`` carry NaN and infinities natively.
``money`` is an int64 of cents: no NaN, and decimal(19, digits) holds all of it.
"""

from __future__ import annotations

import struct
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from psycopg.pq import Format

from bridge.native import ops
from bridge.types.base import (
    ColumnType,
    Converter,
    TypeRegistry,
    TypeRequest,
    connect,
    psycopg_loader,
    simple,
)
from bridge.types.errors import ConversionError
from bridge.types.lossy import CLAMPED, INFINITY_AS_NULL, NAN_AS_NULL, record_lossy

#: Spark's DecimalType maximum precision.
MAX_DECIMAL_PRECISION: Final = 38

VARIABLE_SCALE_DECIMAL: Final[dict[str, Any]] = {
    "type": "record",
    "name": "VariableScaleDecimal",
    "namespace": "io.debezium.data",
    "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
    "connect.doc": "Variable scaled decimal",
    "connect.version": 1,
    "connect.name": "io.debezium.data.VariableScaleDecimal",
}


def decimal_schema(precision: int, scale: int) -> dict[str, Any]:
    """Avro ``decimal`` on ``bytes``, annotated as Connect's ``Decimal`` the way Confluent's
    AvroConverter writes it (``scale`` and ``connect.decimal.precision`` parameters)."""
    return connect(
        {"type": "bytes", "scale": scale, "precision": precision},
        "org.apache.kafka.connect.data.Decimal",
        parameters={"scale": str(scale), "connect.decimal.precision": str(precision)},
        logical="decimal",
    )


def numeric_typmod(typmod: int) -> tuple[int, int] | None:
    """(precision, scale) from a numeric atttypmod, or None when unconstrained.

    The scale is an 11-bit two's-complement field since PostgreSQL 15 (negative scales).
    """
    if typmod < 4:
        return None
    t = typmod - 4
    return (t >> 16) & 0xFFFF, ((t & 0x7FF) ^ 1024) - 1024


def _int_text(raw: bytes) -> int:
    return int(raw)


def _int_binary(raw: bytes) -> int:
    return int.from_bytes(raw, "big", signed=True)


def _uint_binary(raw: bytes) -> int:
    return int.from_bytes(raw, "big", signed=False)


#: Avro's long is signed 64-bit.
_INT64_MAX: Final = 2**63 - 1


def _checked_xid8(value: int, raw: bytes) -> int:
    # xid8 is unsigned 64-bit. Real transaction ids stay far below 2**63 (that would take 2**31
    # epochs), but any value can be stored in a column; one above a long is clamped to the
    # largest long and recorded as lossy, rather than wrapped around or refused.
    if value > _INT64_MAX:
        record_lossy("xid8", CLAMPED)
        return _INT64_MAX
    return value


def _xid8_text(raw: bytes) -> int:
    return _checked_xid8(int(raw), raw)


def _xid8_binary(raw: bytes) -> int:
    return _checked_xid8(int.from_bytes(raw, "big", signed=False), raw)


def _float4_binary(raw: bytes) -> float:
    return float(_F4.unpack(raw)[0])


def _float8_binary(raw: bytes) -> float:
    return float(_F8.unpack(raw)[0])


def _float_text(raw: bytes) -> float:
    # PostgreSQL spells NaN/Infinity/-Infinity, all of which float() accepts.
    return float(raw)


def _float4_text(raw: bytes) -> float:
    # float4out prints the shortest text that reads back as the same float32; rounding through
    # float32 gives exactly the value the binary form carries.
    return float(_F4.unpack(_F4.pack(float(raw)))[0])


def _bool_text(raw: bytes) -> bool:
    return raw == b"t"


def _bool_binary(raw: bytes) -> bool:
    return raw != b"\x00"


_F4: Final = struct.Struct(">f")
_F8: Final = struct.Struct(">d")

_numeric_text: Final = psycopg_loader("numeric", Format.TEXT)
_numeric_binary: Final = psycopg_loader("numeric", Format.BINARY)


def _not_finite(d: Decimal) -> None:
    """NaN or ±Infinity in a decimal field: null, recorded as a lossy value."""
    record_lossy("numeric", NAN_AS_NULL if d.is_nan() else INFINITY_AS_NULL)


def _finite_or_none(load: Converter) -> Converter:
    def convert(raw: bytes) -> Decimal | None:
        d: Decimal = load(raw)
        if d.is_finite():
            return d
        _not_finite(d)
        return None

    return convert


_NUMERIC_MAX_INTEGER_DIGITS = 131_072
_NUMERIC_MAX_SCALE = 16_383


def variable_scale(d: Decimal) -> dict[str, Any] | None:
    """A Decimal as Debezium's VariableScaleDecimal struct (None for NaN/±Infinity, recorded
    as lossy)."""
    if not d.is_finite():
        _not_finite(d)
        return None
    sign, digits, exp = d.as_tuple()
    assert isinstance(exp, int)
    # PostgreSQL's numeric holds at most 131,072 digits before the point and 16,383 after it;
    # a spelling beyond that (an exponent, which the server never prints) is refused before
    # 10**exp is built, which would take seconds of CPU for 1e10000000.
    if len(digits) + exp > _NUMERIC_MAX_INTEGER_DIGITS or -exp > _NUMERIC_MAX_SCALE + len(digits):
        raise ConversionError("numeric", f"{d:.6e} is outside PostgreSQL's numeric range")
    # Through Decimal, not str: int() of a string refuses more than 4,300 digits, and
    # numeric holds up to 131,072 digits before the point.
    unscaled = int(Decimal((0, digits, 0)))
    if exp > 0:  # e.g. Decimal('1E+3'): the scale is never negative
        unscaled *= 10**exp
        exp = 0
    # Debezium strips trailing zeros (BigDecimal.stripTrailingZeros, then a scale of at least
    # 0), so 3.1400 is (scale 2, 314). Done on the integer: Decimal.normalize would round to
    # the context's 28 digits.
    while exp < 0 and unscaled and unscaled % 10 == 0:
        unscaled //= 10
        exp += 1
    if not unscaled:
        exp = 0
    if sign:
        unscaled = -unscaled
    length = (unscaled.bit_length() + 8) // 8  # two's complement, minimal, like BigInteger
    return {"scale": -exp, "value": unscaled.to_bytes(length, "big", signed=True)}


def decimal_to_string(d: Decimal) -> str:
    if d.is_nan():
        return "NaN"
    if d.is_infinite():
        return "Infinity" if d > 0 else "-Infinity"
    return format(d, "f")


def _numeric(request: TypeRequest) -> ColumnType:
    opts = request.options
    pm = numeric_typmod(request.typmod)
    shown = "numeric" if pm is None else f"numeric({pm[0]},{pm[1]})"
    mode: str = opts.decimal_handling
    if mode == "precise":
        if pm is not None and 0 <= pm[1] <= pm[0] <= MAX_DECIMAL_PRECISION:
            return ColumnType(
                shown,
                decimal_schema(*pm),
                _finite_or_none(_numeric_text),
                _finite_or_none(_numeric_binary),
                native=(ops.DECIMAL, ops.DECIMAL),
            )
        mode = {"variable_scale": "variable", "string": "string", "double": "double"}[
            opts.unconstrained_numeric
        ]
    if mode == "variable":
        return ColumnType(
            shown,
            VARIABLE_SCALE_DECIMAL,
            lambda raw: variable_scale(_numeric_text(raw)),
            lambda raw: variable_scale(_numeric_binary(raw)),
            native=(ops.VARIABLE_DECIMAL, ops.VARIABLE_DECIMAL),
        )
    if mode == "string":
        # The text form is already PostgreSQL's canonical spelling (NaN, Infinity included).
        return ColumnType(
            shown,
            "string",
            lambda raw: raw.decode("ascii"),
            lambda raw: decimal_to_string(_numeric_binary(raw)),
        )
    return ColumnType(
        shown,
        "double",
        lambda raw: float(_numeric_text(raw)),
        lambda raw: float(_numeric_binary(raw)),
    )


def parse_money_text(raw: bytes) -> Decimal:
    """Parse ``cash_out`` output ("$1,234.56", "-$1,234.56", "($1.00)") in a locale using "." as
    the decimal point. The text form depends on ``lc_monetary``; the binary form does not, so
    prefer binary mode for money in other locales."""
    text = raw.decode("utf-8")
    negative = "-" in text or "(" in text
    cleaned = "".join(ch for ch in text if ch.isdigit() or ch == ".")
    try:
        value = Decimal(cleaned)
    except InvalidOperation as exc:
        raise ConversionError("money", "unparseable money value", raw=raw) from exc
    return -value if negative else value


def _money(request: TypeRequest) -> ColumnType:
    digits = request.options.money_fraction_digits
    quantum = Decimal(1).scaleb(-digits)
    mode = request.options.decimal_handling

    def from_text(raw: bytes) -> Decimal:
        return parse_money_text(raw).quantize(quantum)

    def from_binary(raw: bytes) -> Decimal:
        # int64 in the smallest currency unit; the unit's digits are lc_monetary's, which the
        # caller states through money_fraction_digits.
        return Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-digits)

    if mode == "precise":
        # 19 digits hold any int64 amount.
        return ColumnType("money", decimal_schema(19, digits), from_text, from_binary)
    if mode == "string":
        return ColumnType(
            "money",
            "string",
            lambda raw: format(from_text(raw), "f"),
            lambda raw: format(from_binary(raw), "f"),
        )
    return ColumnType(
        "money", "double", lambda raw: float(from_text(raw)), lambda raw: float(from_binary(raw))
    )


INT16: Final[dict[str, Any]] = {"type": "int", "connect.type": "int16"}


def register_types(registry: TypeRegistry) -> None:
    ints, longs = (ops.INT32, ops.INT32), (ops.INT, ops.INT)
    registry.add_builtin("int2", simple("smallint", INT16, _int_text, _int_binary, native=ints))
    registry.add_builtin("int4", simple("integer", "int", _int_text, _int_binary, native=ints))
    registry.add_builtin("int8", simple("bigint", "long", _int_text, _int_binary, native=longs))
    # Object identifiers are unsigned 32-bit: they need a long (Debezium does the same).
    for name in ("oid", "xid", "cid"):
        registry.add_builtin(name, simple(name, "long", _int_text, _uint_binary))
    registry.add_builtin("xid8", simple("xid8", "long", _xid8_text, _xid8_binary))
    registry.add_builtin("float4", simple("real", "float", _float4_text, _float4_binary))
    registry.add_builtin(
        "float8",
        simple(
            "double precision",
            "double",
            _float_text,
            _float8_binary,
            native=(ops.DOUBLE, ops.DOUBLE),
        ),
    )
    registry.add_builtin("numeric", _numeric)
    registry.add_builtin("money", _money)
    registry.add_builtin(
        "bool",
        simple("boolean", "boolean", _bool_text, _bool_binary, native=(ops.BOOL, ops.BOOL)),
    )
