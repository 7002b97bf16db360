"""Bit strings: bit(n) and bit varying(n).

Like Debezium: ``bit(1)`` and ``varbit(1)`` are Avro ``boolean``; longer bit strings are
``io.debezium.data.Bits`` ``bytes`` with a ``length`` parameter. The bytes are the bit string
read as a binary number, little-endian (Java's ``BitSet`` order, which Debezium uses):
``B'0000000100000010'`` is ``b"\\x02\\x01"``. pgbridge pads to ``ceil(n / 8)`` bytes where
Debezium drops high zero bytes; ``BitSet.valueOf`` reads both the same, and a fixed width lets
readers without the ``length`` parameter keep leading zero bits.
"""

from __future__ import annotations

from typing import Any

from bridge.types.base import ColumnType, TypeRegistry, TypeRequest, connect

#: The ``length`` Debezium gives an unbounded ``bit varying`` (Java's Integer.MAX_VALUE).
UNBOUNDED_LENGTH = 2_147_483_647


def bits_schema(length: int | None) -> dict[str, Any]:
    params = {"length": str(length if length is not None else UNBOUNDED_LENGTH)}
    return connect("bytes", "io.debezium.data.Bits", parameters=params)


def _to_bits(value: int, nbits: int) -> bytes:
    return value.to_bytes((nbits + 7) // 8, "little")


def bits_from_text(raw: bytes) -> bytes:
    return _to_bits(int(raw, 2) if raw else 0, len(raw))


def bits_from_binary(raw: bytes) -> bytes:
    nbits = int.from_bytes(raw[:4], "big", signed=True)
    data = raw[4:]
    value = int.from_bytes(data, "big") >> (8 * len(data) - nbits)
    return _to_bits(value, nbits)


def _bit1_text(raw: bytes) -> bool:
    return raw == b"1"  # an empty varbit(1) is false, as in Debezium


def _bit1_binary(raw: bytes) -> bool:
    return len(raw) > 4 and bool(raw[4] & 0x80)  # varbit(1) may hold zero bits


def _bits(pg_name: str) -> Any:
    def factory(request: TypeRequest) -> ColumnType:
        # For bit types atttypmod is the length itself (no VARHDRSZ offset); -1 = unbounded.
        length = request.typmod if request.typmod > 0 else None
        shown = pg_name if length is None else f"{pg_name}({length})"
        if length == 1:
            return ColumnType(shown, "boolean", _bit1_text, _bit1_binary)
        return ColumnType(shown, bits_schema(length), bits_from_text, bits_from_binary)

    return factory


def register_types(registry: TypeRegistry) -> None:
    registry.add_builtin("bit", _bits("bit"))
    registry.add_builtin("varbit", _bits("bit varying"))
