"""Integers, floats, numeric, money, boolean."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest

from bridge.errors import ConfigError
from bridge.types import TypeMapper, TypeOptions
from bridge.types.lossy import LOSSY_VALUES
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


# numeric[] '{1,NaN,Infinity,-Infinity}' as PostgreSQL 18 sends it.
SPECIAL_ARRAY_TEXT = b"{1,NaN,Infinity,-Infinity}"
SPECIAL_ARRAY_BINARY = bytes.fromhex(
    "0000000100000000000006a400000004000000010000000a000100000000000000010000000800000000"
    "c00000000000000800000000d00000200000000800000000f0000020"
)


def test_numeric_nan_and_infinity_as_null_are_counted_never_silent() -> None:
    """precise mode: NaN/±Infinity have no decimal form; null, but counted and warned about."""
    nan, inf = ("numeric", "nan_as_null"), ("numeric", "infinity_as_null")
    before_nan, before_inf = LOSSY_VALUES[nan], LOSSY_VALUES[inf]
    assert find("numeric(10,2)", "'NaN'").both() == (None, None)
    assert find("numeric", "'Infinity'").both() == (None, None)
    assert find("numeric", "'-Infinity'").both() == (None, None)
    assert LOSSY_VALUES[nan] == before_nan + 2
    assert LOSSY_VALUES[inf] == before_inf + 4


def test_numeric_array_special_elements_by_mode() -> None:
    mapper = TypeMapper()
    ct = mapper.column_type(1231)  # numeric[]
    one = {"scale": 0, "value": b"\x01"}
    assert ct.from_text(SPECIAL_ARRAY_TEXT) == [one, None, None, None]
    assert ct.from_binary(SPECIAL_ARRAY_BINARY) == [one, None, None, None]
    assert roundtrip(ct.avro, [one, None]) == [one, None]
    as_string = TypeMapper(TypeOptions(decimal_handling="string")).column_type(1231)
    expected = ["1", "NaN", "Infinity", "-Infinity"]
    assert as_string.from_text(SPECIAL_ARRAY_TEXT) == expected
    assert as_string.from_binary(SPECIAL_ARRAY_BINARY) == expected
    as_double = TypeMapper(TypeOptions(decimal_handling="double")).column_type(1231)
    for value in (
        as_double.from_text(SPECIAL_ARRAY_TEXT),
        as_double.from_binary(SPECIAL_ARRAY_BINARY),
    ):
        assert value[0] == 1.0 and math.isnan(value[1])
        assert value[2:] == [math.inf, -math.inf]


@pytest.mark.parametrize("mode", ["string", "double"])
def test_numeric_fixed_scale_keeps_nan_in_string_and_double_modes(mode: str) -> None:
    options = TypeOptions(decimal_handling=mode)  # type: ignore[arg-type]
    text, binary = find("numeric(10,2)", "'NaN'").both(options)
    if mode == "string":
        assert text == binary == "NaN"
    else:
        assert math.isnan(text) and math.isnan(binary)
    assert find("numeric(10,2)", "12.5").both(options) == (
        ("12.50", "12.50") if mode == "string" else (12.5, 12.5)
    )


def test_money_extremes_in_every_mode() -> None:
    top_text, top_binary = b"$92,233,720,368,547,758.07", (2**63 - 1).to_bytes(8, "big")
    ct = TypeMapper().column_type(790)
    top = Decimal("92233720368547758.07")
    assert (ct.from_text(top_text), ct.from_binary(top_binary)) == (top, top)
    assert roundtrip(ct.avro, top) == top
    as_string = TypeMapper(TypeOptions(decimal_handling="string")).column_type(790)
    assert as_string.from_text(top_text) == as_string.from_binary(top_binary) == str(top)
    bottom = find("money", "-92233720368547758.08")
    assert bottom.both(TypeOptions(decimal_handling="string")) == ("-92233720368547758.08",) * 2
    as_double = bottom.both(TypeOptions(decimal_handling="double"))
    assert as_double == (-92233720368547758.08, -92233720368547758.08)


def test_xid8_beyond_avro_long_is_clamped_and_counted() -> None:
    ct = TypeMapper().column_type(5069)  # xid8
    before = LOSSY_VALUES[("xid8", "clamped")]
    top = 2**64 - 1
    assert ct.from_text(str(top).encode()) == ct.from_binary(top.to_bytes(8, "big")) == 2**63 - 1
    assert ct.from_text(b"9223372036854775807") == 2**63 - 1
    assert LOSSY_VALUES[("xid8", "clamped")] == before + 2


def test_numeric_beyond_python_int_string_limit_is_variable_scale() -> None:
    """numeric holds 131,072 digits before the point; int('...') refuses over 4,300."""
    ct = TypeMapper().column_type(1700)
    text = b"1" + b"0" * 131_071
    value = ct.from_text(text)
    assert value["scale"] == 0
    assert int.from_bytes(value["value"], "big", signed=True) == 10**131_071


def test_variable_scale_refuses_spellings_beyond_numeric_range_quickly() -> None:
    """The server never prints an exponent, but garbage may carry one: a typed error at once,
    not seconds of building 10**10000000."""
    from bridge.types.errors import ConversionError
    from bridge.types.numeric import variable_scale

    for text in ("1e10000000", "-1e131073", "1e-20000"):
        with pytest.raises(ConversionError, match="outside PostgreSQL's numeric range"):
            variable_scale(Decimal(text))
    assert variable_scale(Decimal("1e131071")) is not None  # 131,072 digits: the largest
    assert variable_scale(Decimal("1e-16383")) == {"scale": 16383, "value": b"\x01"}
