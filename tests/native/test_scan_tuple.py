"""The C TupleData scanner (:func:`bridge.native.scan_tuple`) and Insert decoder
(:func:`bridge.native.decode_insert`) against the Python reader.

What users rely on: with the accelerator built, the decoder reads every tuple exactly as the
pure-Python reader does (same kinds, same value spans, same end), and on malformed input the
same :class:`DecodeError` comes out (the scanner declines, the checked reader reports).
"""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge import native
from bridge.pgoutput import rows
from bridge.pgoutput.errors import DecodeError
from tests.examples import examples

pytestmark = pytest.mark.skipif(
    os.environ.get("PGBRIDGE_NATIVE") == "0", reason="PGBRIDGE_NATIVE=0 turns the scanner off"
)

column = st.one_of(
    st.binary(max_size=40).map(lambda v: b"t" + struct.pack("!I", len(v)) + v),
    st.binary(max_size=40).map(lambda v: b"b" + struct.pack("!I", len(v)) + v),
    st.just(b"n"),
    st.just(b"u"),
)


@st.composite
def tuples(draw: st.DrawFn) -> bytes:
    cols = draw(st.lists(column, max_size=12))
    return struct.pack("!H", len(cols)) + b"".join(cols)


def python_read(buf: bytes, pos: int, end: int) -> tuple[object, ...] | str:
    """The pure-Python reader's answer: (kinds, spans, next) or the DecodeError's text."""
    # The decoder's module-level name, patched (it imports the accelerator by that name).
    saved = getattr(rows, "scan_tuple")  # noqa: B009 - not re-exported: mypy refuses rows.scan_tuple
    setattr(rows, "scan_tuple", None)  # noqa: B010
    try:
        data, nxt = rows.read_tuple(buf, pos, end, "Insert")
        return (data.kinds, data.spans, nxt)
    except DecodeError as exc:
        return str(exc)
    finally:
        setattr(rows, "scan_tuple", saved)  # noqa: B010


def native_read(buf: bytes, pos: int, end: int) -> tuple[object, ...] | str:
    try:
        data, nxt = rows.read_tuple(buf, pos, end, "Insert")
        return (data.kinds, data.spans, nxt)
    except DecodeError as exc:
        return str(exc)


def test_scanner_is_in_use() -> None:
    assert native.scan_tuple is not None
    assert getattr(rows, "scan_tuple") is native.scan_tuple  # noqa: B009


@settings(max_examples=examples(1500), deadline=None)
@given(buf=tuples(), prefix=st.binary(max_size=3), suffix=st.binary(max_size=3))
def test_well_formed_tuples_read_the_same(buf: bytes, prefix: bytes, suffix: bytes) -> None:
    data = prefix + buf + suffix
    assert native_read(data, len(prefix), len(prefix) + len(buf)) == python_read(
        data, len(prefix), len(prefix) + len(buf)
    )


@settings(max_examples=examples(3000), deadline=None)
@given(
    buf=tuples(), cut=st.integers(0, 200), flip=st.tuples(st.integers(0, 200), st.integers(0, 255))
)
def test_damaged_tuples_give_the_same_answer(buf: bytes, cut: int, flip: tuple[int, int]) -> None:
    damaged = bytearray(buf[: min(cut, len(buf))] if cut < len(buf) else buf)
    if damaged and flip[0] < len(damaged):
        damaged[flip[0]] = flip[1]
    data = bytes(damaged)
    assert native_read(data, 0, len(data)) == python_read(data, 0, len(data))


def test_column_count_beyond_the_bytes_left_is_refused() -> None:
    data = struct.pack("!H", 5000) + b"n"
    assert native.scan_tuple is not None
    assert native.scan_tuple(data, 0, len(data)) is None
    assert native_read(data, 0, len(data)) == python_read(data, 0, len(data))


# --- decode_insert: a whole Insert message in C, against the pure-Python decoder ------------


def decoded(payload: bytes, in_stream: bool, use_c: bool) -> object:
    """The decoder's answer for an Insert payload: the message, or the DecodeError's text."""
    from bridge.pgoutput import decoder as decoder_module

    saved = (decoder_module.decode_insert, decoder_module.scan_tuple, rows.scan_tuple)
    if not use_c:
        decoder_module.decode_insert = decoder_module.scan_tuple = None
        setattr(rows, "scan_tuple", None)  # noqa: B010
    try:
        decoder = decoder_module.Decoder(2)
        if in_stream:
            decoder.decode(b"S" + struct.pack("!IB", 7, 1))
        return decoder.decode(payload)
    except DecodeError as exc:
        return str(exc)
    finally:
        decoder_module.decode_insert, decoder_module.scan_tuple = saved[:2]
        setattr(rows, "scan_tuple", saved[2])  # noqa: B010


@settings(max_examples=examples(1500), deadline=None)
@given(
    buf=tuples(),
    in_stream=st.booleans(),
    xid=st.integers(0, 2**32 - 1),
    oid=st.integers(0, 2**32 - 1),
    cut=st.integers(0, 300),
    flip=st.tuples(st.integers(0, 300), st.integers(0, 255)),
)
def test_insert_messages_decode_the_same_in_c(
    buf: bytes, in_stream: bool, xid: int, oid: int, cut: int, flip: tuple[int, int]
) -> None:
    """Equal Insert and TupleData objects (the same buffer, spans, xid and oid) for well-formed
    messages; for damaged ones (cut short, a byte changed) the same DecodeError."""
    header = b"I" + (struct.pack("!I", xid) if in_stream else b"") + struct.pack("!I", oid) + b"N"
    payload = header + buf
    assert decoded(payload, in_stream, True) == decoded(payload, in_stream, False)
    damaged = bytearray(payload[: max(1, min(cut, len(payload)))])
    if 0 < flip[0] < len(damaged):
        damaged[flip[0]] = flip[1]
    data = bytes(damaged)
    assert decoded(data, in_stream, True) == decoded(data, in_stream, False)


def test_decode_insert_builds_the_decoders_classes() -> None:
    from bridge.pgoutput.messages import Insert, TupleData

    assert native.decode_insert is not None
    payload = b"I" + struct.pack("!I", 16384) + b"N" + struct.pack("!H", 2) + b"t\0\0\0\x017n"
    message = native.decode_insert(payload, False)
    assert type(message) is Insert and type(message.new_tuple) is TupleData
    assert message.new_tuple.buffer is payload
    assert (message.xid, message.relation_oid, message.new_tuple.raw(0)) == (None, 16384, b"7")
