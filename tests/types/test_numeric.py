"""Integers, floats, numeric, money, boolean."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest

from bridge.errors import ConfigError
from bridge.types import TypeMapper, TypeOptions
from bridge.types.numeric import numeric_typmod
from tests.types.vectors import find, roundtrip, schema_of


def _from_vs(record: dict[str, object]) -> Decimal:
    value = int.from_bytes(record["value"], "big", signed=True)  # type: ignore[arg-type]
    return Decimal(f"{value}E-{record['scale']}")  # exact; scaleb would round to 28 digits


@pytest.mark.parametrize(
    ("type_sql", "literal", "expected"),
    [
        ("smallint", "-32768", -32768),
        ("smallint", "32767", 32767),
        ("integer", "-2147483648", -(2**31)),
        ("bigint", "9223372036854775807", 2**63 - 1),
        ("bigint", "-9223372036854775808", -(2**63)),
        ("oid", "4294967295", 2**32 - 1),
        ("boolean", "true", True),
        ("boolean", "false", False),
        ("double precision", "0.1", 0.1),
        ("double precision", "'Infinity'", math.inf),
        ("real", "'-Infinity'", -math.inf),
    ],
)
def test_scalar_extremes_from_text_and_binary(
    type_sql: str, literal: str, expected: object
) -> None:
    vector = find(type_sql, literal)
    text, binary = vector.both()
    assert text == expected
    assert binary == expected
    assert roundtrip(vector.column_type().avro, binary) == expected


def test_float_nan_from_both_forms() -> None:
    for type_sql in ("real", "double precision"):
        text, binary = find(type_sql, "'NaN'").both()
        assert math.isnan(text) and math.isnan(binary)


def test_real_text_rounds_to_float32_like_binary() -> None:
    text, binary = find("real", "3.4028235e38").both()
    assert text == binary == 3.4028234663852886e38


def test_smallint_schema_is_connect_int16() -> None:
    assert TypeMapper().column_type(21).avro == {"type": "int", "connect.type": "int16"}


def test_numeric_constrained_is_connect_decimal_with_logical_type() -> None:
    vector = find("numeric(10,2)", "12.5")
    ct = vector.column_type()
    assert ct.avro == {
        "type": "bytes",
        "scale": 2,
        "precision": 10,
        "connect.version": 1,
        "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
        "connect.name": "org.apache.kafka.connect.data.Decimal",
        "logicalType": "decimal",
    }
    text, binary = vector.both()
    assert text == binary == Decimal("12.50")
    assert roundtrip(ct.avro, binary) == Decimal("12.50")


def test_numeric_38_digits_roundtrips_exactly() -> None:
    vector = find("numeric(38,10)", "1234567890123456789012345678.0123456789")
    value = vector.column_type().from_binary(vector.binary)
    assert roundtrip(vector.column_type().avro, value) == Decimal(
        "1234567890123456789012345678.0123456789"
    )


def test_numeric_nan_in_decimal_column_becomes_null() -> None:
    assert find("numeric(10,2)", "'NaN'").both() == (None, None)


@pytest.mark.parametrize(
    "literal",
    [
        "3.14159265358979323846264338327950288419716939937510",
        "-0.000000000000000000001",
        "1e30",
        "0",
    ],
)
def test_numeric_unconstrained_is_variable_scale_decimal(literal: str) -> None:
    vector = find("numeric", literal)
    ct = vector.column_type()
    assert schema_of(ct)["connect.name"] == "io.debezium.data.VariableScaleDecimal"
    text, binary = vector.both()
    assert text == binary
    assert _from_vs(binary) == Decimal(literal)
    assert _from_vs(roundtrip(ct.avro, binary)) == Decimal(literal)


def test_numeric_wider_than_38_digits_is_variable_scale() -> None:
    vector = find("numeric(50,5)", "123456789012345678901234567890123456789012345.12345")
    assert schema_of(vector.column_type())["name"] == "VariableScaleDecimal"
    assert _from_vs(vector.column_type().from_binary(vector.binary)) == Decimal(
        "123456789012345678901234567890123456789012345.12345"
    )


@pytest.mark.parametrize(
    ("literal", "as_string"),
    [
        ("'NaN'", "NaN"),
        ("'Infinity'", "Infinity"),
        ("'-Infinity'", "-Infinity"),
        ("1e30", "1" + "0" * 30),
    ],
)
def test_numeric_special_values_by_mode(literal: str, as_string: str) -> None:
    vector = find("numeric", literal)
    if literal != "1e30":
        assert vector.both() == (None, None)  # variable_scale cannot hold them
    string = TypeOptions(unconstrained_numeric="string")
    assert vector.both(string) == (as_string, as_string)
    double = vector.both(TypeOptions(decimal_handling="double"))
    expected = float(as_string)
    assert all(math.isnan(v) if math.isnan(expected) else v == expected for v in double)


def test_numeric_typmod_decodes_negative_scale() -> None:
    assert numeric_typmod(-1) is None
    assert numeric_typmod(((10 << 16) | 2) + 4) == (10, 2)
    assert numeric_typmod(((5 << 16) | (-2 & 0x7FF)) + 4) == (5, -2)


def test_numeric_negative_scale_is_not_an_avro_decimal() -> None:
    ct = TypeMapper().column_type(1700, ((5 << 16) | (-2 & 0x7FF)) + 4)
    assert schema_of(ct)["name"] == "VariableScaleDecimal"
    assert _from_vs(ct.from_text(b"12300")) == Decimal(12300)


def test_money_from_text_and_binary() -> None:
    vector = find("money", "-92233720368547758.08")
    ct = vector.column_type()
    assert schema_of(ct)["precision"] == 19 and schema_of(ct)["scale"] == 2
    assert vector.both() == (Decimal("-92233720368547758.08"),) * 2
    assert find("money", "1234.56").both() == (Decimal("1234.56"),) * 2
    assert roundtrip(ct.avro, Decimal("1234.56")) == Decimal("1234.56")


def test_money_string_mode() -> None:
    assert find("money", "1234.56").both(TypeOptions(decimal_handling="string")) == ("1234.56",) * 2


def test_type_options_reject_unknown_mode() -> None:
    with pytest.raises(ConfigError) as info:
        TypeOptions(decimal_handling="exact")  # type: ignore[arg-type]
    assert info.value.key == "decimal_handling"


@pytest.mark.parametrize(
    ("text", "scale", "unscaled"),
    [
        (b"3.1400", 2, 314),
        (b"0.000", 0, 0),
        (b"-100.0", 0, -100),
        (b"12345678901234567890.10", 1, 123456789012345678901),
    ],
)
def test_variable_scale_strips_trailing_zeros_like_debezium(
    text: bytes, scale: int, unscaled: int
) -> None:
    record = TypeMapper().column_type(1700).from_text(text)
    assert record["scale"] == scale
    assert int.from_bytes(record["value"], "big", signed=True) == unscaled
