"""Arrays: nullable items of the element's Avro type, from text (psycopg's parser) and binary."""

from __future__ import annotations

import struct
from datetime import date
from decimal import Decimal

import pytest

from bridge.types import ConversionError, TypeMapper
from bridge.types.temporal import INT32_MAX
from tests.types.vectors import find, roundtrip, schema_of

UUID = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"


@pytest.mark.parametrize(
    ("type_sql", "literal", "expected"),
    [
        ("integer[]", "'{}'", []),
        ("integer[]", "'{1,NULL,-3}'", [1, None, -3]),
        ("integer[]", "'[0:1]={7,8}'", [7, 8]),
        (
            "text[]",
            "ARRAY['a b', NULL, '', 'NULL', 'q\"uo\\\\te', 'ü,{}']",
            ["a b", None, "", "NULL", 'q"uo\\\\te', "ü,{}"],  # two backslashes
        ),
        ("numeric(6,2)[]", "'{1.5,NULL,-2}'", [Decimal("1.50"), None, Decimal("-2.00")]),
        ("boolean[]", "'{t,f,NULL}'", [True, False, None]),
        ("bytea[]", "ARRAY['\\x00ff'::bytea, NULL]", [b"\x00\xff", None]),
        ("jsonb[]", "ARRAY['{\"a\":1}'::jsonb]", ['{"a": 1}']),
        ("box[]", "ARRAY['(1,1),(0,0)'::box, '(3,3),(2,2)'::box]", ["(1,1),(0,0)", "(3,3),(2,2)"]),
        ("interval[]", "ARRAY['1 day'::interval]", [86_400_000_000]),
        ("int4range[]", "ARRAY['[1,2)'::int4range]", ["[1,2)"]),
        ("date[]", "'{2024-01-01,infinity}'", [(date(2024, 1, 1) - date(1970, 1, 1)).days,
                                                INT32_MAX]),
        ("uuid[]", f"ARRAY['{UUID}'::uuid]", [UUID]),
    ],
)  # fmt: skip
def test_array_from_text_and_binary(type_sql: str, literal: str, expected: list[object]) -> None:
    vector = find(type_sql, literal)
    assert vector.both() == (expected, expected)


def test_array_schema_has_nullable_items_of_element_schema() -> None:
    ct = find("numeric(6,2)[]", "'{1.5,NULL,-2}'").column_type()
    assert schema_of(ct)["type"] == "array"
    assert schema_of(ct)["items"][0] == "null"
    assert schema_of(ct)["items"][1]["logicalType"] == "decimal"
    assert roundtrip(ct.avro, [Decimal("1.50"), None]) == [Decimal("1.50"), None]


def test_array_of_unconstrained_numeric_keeps_nan_as_null() -> None:
    text, binary = find("numeric[]", "'{1.5,NaN}'").both()
    assert text == binary == [{"scale": 1, "value": b"\x0f"}, None]


def test_array_of_points_roundtrips() -> None:
    vector = find("point[]", "ARRAY[point(1,2)]")
    text, binary = vector.both()
    assert text == binary
    assert roundtrip(vector.column_type().avro, binary) == binary


def test_array_multidimensional_value_in_one_dimensional_column_names_the_type() -> None:
    vector = find("integer[]", "'{{1,2},{3,4}}'")
    with pytest.raises(ConversionError) as info:
        vector.column_type().from_text(vector.text)
    assert info.value.type_name == "integer[]"


def test_array_declared_two_dimensions_nests_avro_arrays() -> None:
    ct = TypeMapper().column_type(1009, dimensions=2)  # text[][]
    assert ct.pg_name == "text[][]"
    assert ct.avro == {"type": "array", "items": {"type": "array", "items": ["null", "string"]}}
    value = ct.from_text(b'{{a,NULL},{"b c",d}}')
    assert value == [["a", None], ["b c", "d"]]
    assert roundtrip(ct.avro, value) == value
    assert (
        ct.from_text(b"{}")
        == ct.from_binary(b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x19")
        == []
    )


def test_array_declared_two_dimensions_refuses_one_dimensional_value() -> None:
    ct = TypeMapper().column_type(1007, dimensions=2)
    vector = find("integer[]", "'{1,NULL,-3}'")
    with pytest.raises(ConversionError, match="2 dimension"):
        ct.from_text(vector.text)
    with pytest.raises(ConversionError, match="2 dimension"):
        ct.from_binary(vector.binary)


def test_array_three_dimensions_from_binary() -> None:
    ct = TypeMapper().column_type(1007, dimensions=3)
    text = b"{{{1,2}},{{3,NULL}}}"
    head = struct.pack(">iiI", 3, 1, 23) + struct.pack(">ii", 2, 1) * 1
    head += struct.pack(">ii", 1, 1) + struct.pack(">ii", 2, 1)
    body = b"".join(struct.pack(">ii", 4, v) for v in (1, 2, 3)) + struct.pack(">i", -1)
    assert ct.from_text(text) == ct.from_binary(head + body) == [[[1, 2]], [[3, None]]]


def test_array_typmod_applies_to_elements() -> None:
    ct = TypeMapper().column_type(1231, ((6 << 16) | 2) + 4)  # numeric(6,2)[]
    assert schema_of(ct)["items"][1]["precision"] == 6
