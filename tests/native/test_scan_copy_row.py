"""The C row scanner of binary COPY (:func:`bridge.native.scan_copy_row`) against the Python
reader of :class:`bridge.snapshot.copy_binary.CopyBinaryParser`.

What users rely on: a copied row is the same TupleData (kinds, buffer, spans) whichever path
read it; anything that is not exactly one well-formed row (short, long, a bad length, the
trailer) the C scanner declines, and the parser then says what the Python reader says: ``None``
from :meth:`~CopyBinaryParser.row`, then :meth:`~CopyBinaryParser.feed`'s typed error.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge import native
from bridge.pgoutput.messages import TupleData
from bridge.snapshot.copy_binary import COPY_SIGNATURE, CopyBinaryParser, CopyFormatError
from tests.examples import examples
from tests.native.test_rowavro import native_only

HEADER = COPY_SIGNATURE + bytes(8)


def encode_row(values: list[bytes | None]) -> bytes:
    out = bytearray(struct.pack("!h", len(values)))
    for v in values:
        out += b"\xff\xff\xff\xff" if v is None else struct.pack("!i", len(v)) + v
    return bytes(out)


@contextmanager
def python_only() -> Iterator[None]:
    saved = native.scan_copy_row
    native.scan_copy_row = None
    try:
        yield
    finally:
        native.scan_copy_row = saved


def parser(columns: int, kinds: bytes | None = None) -> CopyBinaryParser:
    p = CopyBinaryParser(columns, "public.t", kinds)
    assert p.feed(HEADER) == []
    return p


def as_tuple(row: TupleData | None) -> tuple[bytes, bytes, tuple[int, ...]] | None:
    return None if row is None else (row.kinds, row.buffer, tuple(row.spans))


def both(columns: int, data: bytes, kinds: bytes | None = None) -> tuple[object, object]:
    """(C path, Python path) answers of row(), with the parser state each leaves."""
    fast = parser(columns, kinds)
    c = as_tuple(fast.row(data)), fast.rows, fast._consumed
    slow = parser(columns, kinds)
    with python_only():
        py = as_tuple(slow.row(data)), slow.rows, slow._consumed
    return c, py


values = st.lists(st.none() | st.binary(max_size=70), max_size=40)


@native_only
@settings(max_examples=examples(600), deadline=None)
@given(row=values, text_columns=st.data())
def test_scan_copy_row_equals_python_reader(
    row: list[bytes | None], text_columns: st.DataObject
) -> None:
    kinds = bytes(
        text_columns.draw(st.lists(st.sampled_from(b"bt"), min_size=len(row), max_size=len(row)))
    )
    data = encode_row(row)
    c, py = both(len(row), data, kinds)
    assert c == py
    assert c[0] is not None  # type: ignore[index]


@native_only
@settings(max_examples=examples(1500), deadline=None)
@given(
    row=values,
    columns_delta=st.sampled_from([0, 0, 0, -1, 1]),
    cut=st.integers(-8, 8),
    flips=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=3),
)
def test_scan_copy_row_malformed_input_equals_python_reader(
    row: list[bytes | None], columns_delta: int, cut: int, flips: list[tuple[int, int]]
) -> None:
    """Truncated, extended, mis-counted and corrupted rows (lengths too long, negative, -2 ...):
    the same answer as the Python reader, and never a read outside the bytes."""
    data = bytearray(encode_row(row))
    for at, byte in flips:
        if at < len(data):
            data[at] = byte
    if cut < 0:
        del data[cut:]
    else:
        data += bytes(cut)
    columns = max(0, len(row) + columns_delta)
    c, py = both(columns, bytes(data))
    assert c == py


@native_only
@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x00\x02\xff\xff\xff\xfe" + bytes(8), "negative field length"),
        (b"\x00\x03" + bytes(12), "row has 3 fields"),
        (b"\xff\xff\x00", "after the trailer"),
    ],
)
def test_malformed_row_gets_the_python_readers_typed_error(data: bytes, message: str) -> None:
    fast = parser(2)
    assert native.scan_copy_row is not None
    assert native.scan_copy_row(data, 2, b"bb") is None
    assert fast.row(data) is None
    with pytest.raises(CopyFormatError, match=message):
        fast.feed(data)


@native_only
def test_scan_copy_row_edges() -> None:
    scan = native.scan_copy_row
    assert scan is not None
    assert scan(b"\x00\x00", 0, b"") == (b"", ())
    assert scan(b"", 0, b"") is None
    assert scan(b"\x00", 0, b"") is None
    assert scan(b"\x00\x01\x00\x00\x00\x00", 1, b"b") == (b"b", (6, 6))
    assert scan(b"\x00\x01\xff\xff\xff\xff", 1, b"t") == (b"n", (0, 0))
    # kinds of another length than the columns: declined, the parser's own checks decide.
    assert scan(b"\x00\x01\x00\x00\x00\x00", 1, b"bb") is None
    # a length past the end, and 2**31 - 1
    assert scan(b"\x00\x01\x00\x00\x00\x05abcd", 1, b"b") is None
    assert scan(b"\x00\x01\x7f\xff\xff\xffabcd", 1, b"b") is None
    kinds = b"bb"
    got = scan(b"\x00\x02\xff\xff\xff\xff\x00\x00\x00\x01x", 2, kinds)
    assert got == (b"nb", (0, 0, 10, 11))
    assert kinds == b"bb"  # a NULL makes a new kinds, never changes the caller's
    # One column: the NULL's kinds is a new object, never CPython's shared b"b" (writing
    # into that one turned every b"b" of the interpreter into b"n").
    assert scan(b"\x00\x01\xff\xff\xff\xff", 1, b"b") == (b"n", (0, 0))
    assert bytes([0x62]) == b"b" and bytes([0x74]) == b"t"
    with pytest.raises(TypeError):
        scan(bytearray(b"\x00\x00"), 0, b"")  # type: ignore[arg-type]
