"""inet, cidr, macaddr, macaddr8; bit and bit varying."""

from __future__ import annotations

import ipaddress

import pytest

from bridge.types import TypeMapper
from bridge.types.bits import bits_from_text
from tests.types.vectors import find, roundtrip


@pytest.mark.parametrize(
    ("type_sql", "literal", "expected"),
    [
        ("inet", "'192.168.0.1'", "192.168.0.1"),
        ("inet", "'192.168.0.1/24'", "192.168.0.1/24"),
        ("inet", "'::1'", "::1"),
        ("inet", "'2001:db8::1/64'", "2001:db8::1/64"),
        ("cidr", "'10.0.0.0/8'", "10.0.0.0/8"),
        ("cidr", "'2001:db8::/32'", "2001:db8::/32"),
        ("macaddr", "'08:00:2b:01:02:03'", "08:00:2b:01:02:03"),
        ("macaddr8", "'08:00:2b:01:02:03:04:05'", "08:00:2b:01:02:03:04:05"),
    ],
)
def test_network_types_print_like_the_server(type_sql: str, literal: str, expected: str) -> None:
    assert find(type_sql, literal).both() == (expected, expected)


def test_bit_1_is_boolean() -> None:
    assert find("bit(1)", "B'1'").both() == (True, True)
    assert find("bit(1)", "B'0'").both() == (False, False)
    assert find("bit(1)", "B'0'").column_type().avro == "boolean"


@pytest.mark.parametrize(
    ("type_sql", "literal", "expected"),
    [
        ("bit(16)", "B'0000000100000010'", b"\x02\x01"),
        ("bit(10)", "B'1000000001'", b"\x01\x02"),
        ("varbit", "B''", b""),
        ("varbit(20)", "B'101'", b"\x05"),
    ],
)
def test_bits_are_little_endian_debezium_bits(type_sql: str, literal: str, expected: bytes) -> None:
    vector = find(type_sql, literal)
    assert vector.both() == (expected, expected)
    assert roundtrip(vector.column_type().avro, expected) == expected


def test_bits_schema_has_length_parameter() -> None:
    assert find("bit(10)", "B'1000000001'").column_type().avro == {
        "type": "bytes",
        "connect.version": 1,
        "connect.parameters": {"length": "10"},
        "connect.name": "io.debezium.data.Bits",
    }
    # An unbounded varbit: Debezium's length, Java's Integer.MAX_VALUE (compared with Debezium
    # 3.3 itself in tests/integration/test_connect_interop.py).
    assert TypeMapper().column_type(1562, -1).avro["connect.parameters"] == {"length": "2147483647"}


def test_bits_from_text_large() -> None:
    assert bits_from_text(b"1" + b"0" * 99) == (1 << 99).to_bytes(13, "little")


def test_varbit_1_is_boolean_like_debezium() -> None:
    ct = TypeMapper().column_type(1562, 1)  # varbit(1)
    assert ct.avro == "boolean"
    assert (ct.from_text(b"1"), ct.from_text(b""), ct.from_binary(b"\x00\x00\x00\x01\x80")) == (
        True,
        False,
        True,
    )
    assert ct.from_binary(b"\x00\x00\x00\x00") is False


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("::ffff:1.2.3.4", "::ffff:1.2.3.4"),  # IPv4-mapped: a dotted quad, as inet_out
        ("::1.2.3.4", "::1.2.3.4"),  # IPv4-compatible
        ("::0.0.1.2", "::0.0.1.2"),
        ("::1", "::1"),
        ("::", "::"),
        ("::ffff:0:0", "::ffff:0.0.0.0"),
        ("1::ffff:1.2.3.4", "1::ffff:102:304"),
    ],
)
def test_inet_binary_ipv6_prints_embedded_ipv4_like_the_server(address: str, expected: str) -> None:
    raw = bytes([3, 128, 0, 16]) + ipaddress.IPv6Address(address).packed
    assert TypeMapper().column_type(869).from_binary(raw) == expected
