"""Arrays: nullable items of the element's Avro type, from text (psycopg's parser) and binary."""

from __future__ import annotations

import struct
from datetime import date
from decimal import Decimal
from typing import Any

import pytest

from bridge.pgoutput.messages import Type
from bridge.types import ColumnType, ConversionError, TypeMapper, TypeOptions, UnknownTypeError
from bridge.types.lossy import LOSSY_VALUES
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


# integer[] values as PostgreSQL 18 sends them: (text, binary hex).
INT_ARRAYS = {
    "{}": (b"{}", "000000000000000000000017"),
    "{{1,2},{3,4}}": (
        b"{{1,2},{3,4}}",
        "0000000200000000000000170000000200000001000000020000000100000004000000010000000400000002"
        "00000004000000030000000400000004",
    ),
    "[2:3]={1,2}": (
        b"[2:3]={1,2}",
        "000000010000000000000017000000020000000200000004000000010000000400000002",
    ),
    "[0:1][1:2]={{1,2},{3,4}}": (
        b"[0:1][1:2]={{1,2},{3,4}}",
        "0000000200000000000000170000000200000000000000020000000100000004000000010000000400000002"
        "00000004000000030000000400000004",
    ),
    "{{{1,2},{3,4}},{{5,NULL},{7,8}}}": (
        b"{{{1,2},{3,4}},{{5,NULL},{7,8}}}",
        "00000003000000010000001700000002000000010000000200000001000000020000000100000004000000"
        "010000000400000002000000040000000300000004000000040000000400000005ffffffff000000040000"
        "00070000000400000008",
    ),
}


def _both(ct: ColumnType, key: str) -> tuple[Any, Any]:
    text, binary = INT_ARRAYS[key]
    return ct.from_text(text), ct.from_binary(bytes.fromhex(binary))


@pytest.mark.parametrize(
    ("value", "depth", "expected"),
    [
        ("{}", 1, []),
        ("{}", 2, []),
        ("{}", 3, []),
        ("{{1,2},{3,4}}", 1, [1, 2, 3, 4]),
        ("{{1,2},{3,4}}", 2, [[1, 2], [3, 4]]),
        ("{{1,2},{3,4}}", 3, [[[1, 2], [3, 4]]]),
        ("[2:3]={1,2}", 1, [1, 2]),
        ("[2:3]={1,2}", 2, [[1, 2]]),
        ("[0:1][1:2]={{1,2},{3,4}}", 1, [1, 2, 3, 4]),
        ("[0:1][1:2]={{1,2},{3,4}}", 2, [[1, 2], [3, 4]]),
        ("{{{1,2},{3,4}},{{5,NULL},{7,8}}}", 1, [1, 2, 3, 4, 5, None, 7, 8]),
        ("{{{1,2},{3,4}},{{5,NULL},{7,8}}}", 2, [[1, 2, 3, 4], [5, None, 7, 8]]),
        ("{{{1,2},{3,4}},{{5,NULL},{7,8}}}", 3, [[[1, 2], [3, 4]], [[5, None], [7, 8]]]),
    ],
)
def test_array_any_shape_fits_the_declared_depth(value: str, depth: int, expected: Any) -> None:
    """More dimensions than declared: flattened in row-major order (outer ones kept); fewer:
    wrapped; empty: []; lower bounds dropped. Text and binary agree; Avro accepts it."""
    ct = TypeMapper().column_type(1007, dimensions=depth)
    assert _both(ct, value) == (expected, expected)
    assert roundtrip(ct.avro, expected) == expected


def test_array_reshape_is_counted_per_type() -> None:
    flat, wrapped = ("integer[]", "array_flattened"), ("integer[][]", "array_wrapped")
    before = LOSSY_VALUES[flat], LOSSY_VALUES[wrapped]
    _both(TypeMapper().column_type(1007), "{{1,2},{3,4}}")
    _both(TypeMapper().column_type(1007, dimensions=2), "[2:3]={1,2}")
    _both(TypeMapper().column_type(1007), "[2:3]={1,2}")  # same shape: not counted
    assert (LOSSY_VALUES[flat], LOSSY_VALUES[wrapped]) == (before[0] + 2, before[1] + 2)


def test_array_of_quoted_text_elements() -> None:
    ct = TypeMapper().column_type(1009)
    binary = bytes.fromhex(
        "000000010000000100000019000000040000000100000003612c6200000003632264ffffffff"
        "000000044e554c4c"
    )
    expected = ["a,b", 'c"d', None, "NULL"]
    assert ct.from_text(b'{"a,b","c\\"d",NULL,"NULL"}') == ct.from_binary(binary) == expected


def _user_type(mapper: TypeMapper, oid: int, name: str) -> None:
    mapper.observe(Type(None, oid, "public", name))


def test_array_of_enum_without_labels_is_array_of_strings() -> None:
    mapper = TypeMapper()
    _user_type(mapper, 17385, "_mood")
    ct = mapper.column_type(17385)
    assert ct.avro == {"type": "array", "items": ["null", "string"]}
    binary = bytes.fromhex(
        "0000000100000001000043e9000000030000000100000003736164ffffffff000000056861707079"
    )
    assert ct.from_text(b"{sad,NULL,happy}") == ct.from_binary(binary) == ["sad", None, "happy"]
    two_d = bytes.fromhex(
        "0000000200000001000043e90000000200000001000000020000000100000003736164000000026f6b"
        "000000056861707079ffffffff"
    )
    flat = ["sad", "ok", "happy", None]
    assert ct.from_text(b"{{sad,ok},{happy,NULL}}") == ct.from_binary(two_d) == flat


def test_array_of_enum_with_labels_is_array_of_debezium_enums() -> None:
    mapper = TypeMapper(TypeOptions(enum_labels={"mood": ("sad", "ok", "happy")}))
    _user_type(mapper, 17385, "_mood")
    ct = mapper.column_type(17385, dimensions=2)
    assert schema_of(ct)["items"]["items"][1]["connect.name"] == "io.debezium.data.Enum"
    assert ct.from_text(b"{sad,ok}") == [["sad", "ok"]]


def test_array_of_composite_is_array_of_text_forms() -> None:
    mapper = TypeMapper()
    _user_type(mapper, 17393, "_pair")
    ct = mapper.column_type(17393)
    text = b'{"(1,a)","(2,\\"b c\\"\\"d\\")",NULL}'
    assert ct.from_text(text) == ["(1,a)", '(2,"b c""d")', None]
    # record_send is not text: the binary form is refused with a typed error (publish as text).
    binary = bytes.fromhex(
        "0000000100000001000043f100000003000000010000001900000002000000170000000400000001"
        "0000001900000001610000001d0000000200000017000000040000000200000019000000056220632264"
        "ffffffff"
    )
    with pytest.raises(ConversionError):
        ct.from_binary(binary)


def test_array_of_unknown_type_fails_when_configured() -> None:
    mapper = TypeMapper(TypeOptions(unknown_types="fail"))
    _user_type(mapper, 17393, "_pair")
    with pytest.raises(UnknownTypeError):
        mapper.column_type(17393)


def test_array_malformed_binary_is_a_conversion_error() -> None:
    ct = TypeMapper().column_type(1007)
    with pytest.raises(ConversionError):
        ct.from_binary(bytes.fromhex(INT_ARRAYS["[2:3]={1,2}"][1])[:-2])


def test_int2vector_and_oidvector_are_their_text_form() -> None:
    mapper = TypeMapper()
    int2vector, oidvector = mapper.column_type(22), mapper.column_type(30)
    binary = bytes.fromhex(
        "00000001000000000000001500000003000000000000000200010000000200020000000200ff"
    )
    assert int2vector.from_text(b"1 2 255") == int2vector.from_binary(binary) == "1 2 255"
    binary = bytes.fromhex(
        "00000001000000000000001a0000000200000000000000040000000100000004ffffffff"
    )
    assert oidvector.from_text(b"1 4294967295") == oidvector.from_binary(binary) == "1 4294967295"
