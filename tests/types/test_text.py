"""Character types, bytea, uuid, json/jsonb, xml."""

from __future__ import annotations

import uuid

import pytest

from bridge.types import (
    DEBEZIUM_UNAVAILABLE,
    DEBEZIUM_UNAVAILABLE_BYTES,
    ConversionError,
    TypeMapper,
    TypeOptions,
)
from tests.types.vectors import find, roundtrip, schema_of


@pytest.mark.parametrize(
    ("type_sql", "literal", "expected"),
    [
        ("text", "''", ""),
        ("text", "'héllo wörld ✓ 😀'", "héllo wörld ✓ 😀"),
        ("text", "E'tab\\there\\nnewline \\\\ \"q\"'", 'tab\there\nnewline \\ "q"'),
        ("varchar(5)", "'abc'", "abc"),
        ("char(5)", "'ab'", "ab   "),
        ("name", "'pg_class'", "pg_class"),
        ('"char"', "'x'", "x"),
        ("xml", "'<a x=\"1\">t&amp;</a>'", '<a x="1">t&amp;</a>'),
    ],
)
def test_text_types_from_text_and_binary(type_sql: str, literal: str, expected: str) -> None:
    vector = find(type_sql, literal)
    assert vector.both() == (expected, expected)
    assert roundtrip(vector.column_type().avro, expected) == expected


@pytest.mark.parametrize(
    ("literal", "expected"),
    [
        ("'\\x'", b""),
        ("'\\x00ff10'", b"\x00\xff\x10"),
        ("convert_to('ünï', 'UTF8')", "ünï".encode()),
    ],
)
def test_bytea_from_text_and_binary(literal: str, expected: bytes) -> None:
    vector = find("bytea", literal)
    assert vector.both() == (expected, expected)
    assert roundtrip("bytes", expected) == expected


def test_bytea_reads_escape_output_format() -> None:
    assert TypeMapper().column_type(17).from_text(b"a\\000\\377\\\\") == b"a\x00\xff\\"


def test_uuid_is_debezium_uuid_with_avro_uuid() -> None:
    vector = find("uuid", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'")
    ct = vector.column_type()
    assert ct.avro == {
        "type": "string",
        "connect.version": 1,
        "connect.name": "io.debezium.data.Uuid",
        "logicalType": "uuid",
    }
    assert vector.both() == ("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",) * 2
    assert roundtrip(ct.avro, vector.both()[1]) == uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")


@pytest.mark.parametrize("type_sql", ["json", "jsonb"])
def test_json_text_is_passed_through_as_debezium_json(type_sql: str) -> None:
    vector = find(type_sql, '\'{"a": [1, 2.5, null], "é": "x"}\'')
    assert schema_of(vector.column_type())["connect.name"] == "io.debezium.data.Json"
    text, binary = vector.both()
    assert text == binary == '{"a": [1, 2.5, null], "é": "x"}'


def test_jsonb_scalars_and_empty() -> None:
    assert find("jsonb", "'[]'").both() == ("[]", "[]")
    assert find("jsonb", "'\"just a string\"'").both() == ('"just a string"',) * 2


def test_jsonb_unknown_binary_version_is_a_conversion_error() -> None:
    with pytest.raises(ConversionError, match="version"):
        TypeMapper().column_type(3802).from_binary(b"\x02{}")


def test_toastable_types_carry_the_debezium_placeholder() -> None:
    mapper = TypeMapper()
    for oid in (25, 1043, 114, 3802, 142):  # text, varchar, json, jsonb, xml
        assert mapper.column_type(oid).toast_placeholder == DEBEZIUM_UNAVAILABLE
    assert mapper.column_type(17).toast_placeholder == DEBEZIUM_UNAVAILABLE_BYTES
    assert mapper.column_type(23).toast_placeholder is None


@pytest.mark.parametrize(
    ("mode", "expected", "placeholder"),
    [
        ("bytes", b"\x00\xff\x10", DEBEZIUM_UNAVAILABLE_BYTES),
        ("base64", "AP8Q", "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="),
        ("base64-url-safe", "AP8Q", "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="),
        ("hex", "00ff10", DEBEZIUM_UNAVAILABLE_BYTES.hex()),
    ],
)
def test_bytea_binary_handling_modes(mode: str, expected: object, placeholder: object) -> None:
    """Debezium's binary.handling.mode: bytes, or the bytes encoded in an Avro string."""
    options = TypeOptions(binary_handling=mode)  # type: ignore[arg-type]
    vector = find("bytea", "'\\x00ff10'")
    ct = vector.column_type(options)
    assert ct.avro == ("bytes" if mode == "bytes" else "string")
    assert vector.both(options) == (expected, expected)
    assert ct.toast_placeholder == placeholder
    assert ct.native == ((11, 11) if mode == "bytes" else (0, 0))
    as_array = TypeMapper(options).column_type(1001)  # bytea[]
    assert as_array.from_text(b'{"\\\\x00ff10",NULL}') == [expected, None]


def test_bytea_base64_url_safe_differs_from_base64() -> None:
    raw = b"\\xfbff"  # 0xfb 0xff: '+' and '/' in base64
    url = TypeMapper(TypeOptions(binary_handling="base64-url-safe")).column_type(17)
    std = TypeMapper(TypeOptions(binary_handling="base64")).column_type(17)
    assert (std.from_text(raw), url.from_text(raw)) == ("+/8=", "-_8=")
