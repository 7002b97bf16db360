"""The binary COPY parser: rows, NULLs, large values, any slicing of the stream, malformed
input as a typed error; a copied row encodes exactly like the same values streamed in binary."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.events import EventBuilder
from bridge.pgoutput.messages import TupleData
from bridge.pgoutput.rows import read_tuple_checked
from bridge.snapshot.copy_binary import (
    COPY_SIGNATURE,
    CopyBinaryParser,
    CopyFormatError,
    encode_copy_binary,
)
from tests.rows import relation

INT4, TEXT, NUMERIC, TIMESTAMPTZ, BYTEA = 23, 25, 1700, 1184, 17


def _parse(stream: bytes, columns: int, step: int | None = None) -> list[TupleData]:
    parser = CopyBinaryParser(columns, "public.t")
    rows: list[TupleData] = []
    if step is None:
        rows += parser.feed(stream)
    else:
        for i in range(0, len(stream), step):
            rows += parser.feed(stream[i : i + step])
    parser.finish()
    return rows


def test_copy_binary_rows_with_nulls_are_binary_tuples() -> None:
    stream = encode_copy_binary([(b"\x00\x00\x00\x07", b"hello"), (b"\x00\x00\x00\x08", None)])
    rows = _parse(stream, 2)
    assert [r.kinds for r in rows] == [b"bb", b"bn"]
    assert [r.values() for r in rows] == [
        (b"\x00\x00\x00\x07", b"hello"),
        (b"\x00\x00\x00\x08", None),
    ]


def test_copy_binary_empty_value_is_not_null() -> None:
    (row,) = _parse(encode_copy_binary([(b"",)]), 1)
    assert row.kinds == b"b" and row.values() == (b"",)


def test_copy_binary_large_value_split_across_feeds() -> None:
    big = bytes(range(256)) * 8192  # 2 MiB
    stream = encode_copy_binary([(big, b"x"), (None, big)])
    rows = _parse(stream, 2, step=65536)
    assert rows[0].values() == (big, b"x")
    assert rows[1].values() == (None, big)


def test_copy_binary_zero_columns_and_no_rows() -> None:
    assert [r.kinds for r in _parse(encode_copy_binary([(), ()]), 0)] == [b"", b""]
    assert _parse(encode_copy_binary([]), 3) == []


def test_copy_binary_header_extension_is_skipped() -> None:
    header = COPY_SIGNATURE + struct.pack("!ii", 0, 3) + b"abc"
    stream = header + b"\x00\x01\x00\x00\x00\x01z\xff\xff"
    assert [r.values() for r in _parse(stream, 1, step=1)] == [(b"z",)]


@given(
    st.lists(
        st.lists(st.one_of(st.none(), st.binary(max_size=40)), min_size=3, max_size=3),
        max_size=20,
    ),
    st.integers(min_value=1, max_value=50),
)
def test_copy_binary_any_slicing_gives_the_same_rows(
    rows: list[list[bytes | None]], step: int
) -> None:
    stream = encode_copy_binary([tuple(r) for r in rows])
    parsed = _parse(stream, 3, step=step)
    assert [list(r.values()) for r in parsed] == rows


@pytest.mark.parametrize(
    ("stream", "message"),
    [
        (b"PGCOPX\n\xff\r\n\x00" + bytes(8), "signature"),
        (b"NOTCOPY", "signature"),
        (COPY_SIGNATURE + struct.pack("!ii", 1 << 16, 0), "OIDs"),
        (COPY_SIGNATURE + struct.pack("!ii", 0, -4), "negative header extension"),
        (encode_copy_binary([(b"a", b"b")])[:-2] + b"\x00\x03", "3 fields"),
        (COPY_SIGNATURE + bytes(8) + b"\x00\x02\xff\xff\xff\xfe", "negative field length"),
        (encode_copy_binary([(b"a", b"b")]) + b"\x00", "after the trailer"),
    ],
)
def test_copy_binary_malformed_is_a_typed_error_naming_the_table(
    stream: bytes, message: str
) -> None:
    parser = CopyBinaryParser(2, "public.t")
    with pytest.raises(CopyFormatError, match=message) as info:
        parser.feed(stream)
        parser.finish()
    assert info.value.table == "public.t"


@pytest.mark.parametrize(
    ("stream", "message"),
    [
        (b"", "before its header"),
        (COPY_SIGNATURE[:5], "before its header"),
        (encode_copy_binary([(b"abc", b"d")])[:-5], "inside a row"),
        (encode_copy_binary([(b"abc", b"d")])[:-2], "without its trailer"),
    ],
)
def test_copy_binary_truncated_stream_fails_at_finish(stream: bytes, message: str) -> None:
    parser = CopyBinaryParser(2, "public.t")
    parser.feed(stream)
    with pytest.raises(CopyFormatError, match=message):
        parser.finish()


def _pgoutput_tuple(values: tuple[bytes | None, ...]) -> TupleData:
    """The same values as pgoutput's binary TupleData ('b' + length + bytes, or 'n')."""
    buf = bytearray(struct.pack("!H", len(values)))
    for v in values:
        buf += b"n" if v is None else b"b" + struct.pack("!I", len(v)) + v
    return read_tuple_checked(bytes(buf), 0, len(buf), "test")[0]


def test_copy_binary_row_encodes_identically_to_a_streamed_binary_row() -> None:
    rel = relation(
        columns=(
            ("id", INT4, True),
            ("body", TEXT, False),
            ("amount", NUMERIC, False),
            ("at", TIMESTAMPTZ, False),
            ("raw", BYTEA, False),
        )
    )
    builder = EventBuilder("app")
    builder.feed(rel)
    encoder = builder.relations[rel.relation_oid].encoder
    # numeric 12.50 in send format: ndigits 2, weight 0, sign +, dscale 2, digits 12 5000
    numeric = struct.pack("!hhHhhh", 2, 0, 0, 2, 12, 5000)
    values = (
        struct.pack("!i", 7),
        "ü".encode() * 3000,  # a large, multi-byte value
        numeric,
        struct.pack("!q", 789_000_000_123),
        None,
    )
    (copied,) = _parse(encode_copy_binary([values]), 5)
    streamed = _pgoutput_tuple(values)
    row_copied, _ = encoder.encode(copied)
    row_streamed, _ = encoder.encode(streamed)
    assert dict(row_copied) == dict(row_streamed)
    assert getattr(row_copied, "avro", None) == getattr(row_streamed, "avro", None)
    assert row_copied["id"] == 7 and row_copied["raw"] is None


def test_copy_binary_one_row_per_message_fast_path_agrees_with_feed() -> None:
    rows = [(b"\x00\x00\x00\x01", None), (b"", b"x" * 300), (None, None)]
    stream = encode_copy_binary(rows)
    header = 19
    parser = CopyBinaryParser(2, "public.t")
    assert parser.row(stream[:header]) is None  # the header is not a row
    assert parser.feed(stream[:header]) == []
    got = []
    pos = header
    for values in rows:
        size = 2 + sum(4 + (len(v) if v is not None else 0) for v in values)
        message = stream[pos : pos + size]
        row = parser.row(message)
        assert row is not None
        got.append(row.values())
        assert parser.row(message + b"\x00") is None  # more than one row: feed's business
        assert parser.row(message[:-1]) is None  # incomplete
        pos += size
    assert got == rows
    assert parser.row(stream[pos:]) is None  # the trailer
    assert parser.feed(stream[pos:]) == []
    parser.finish()
    assert parser.rows == 3
