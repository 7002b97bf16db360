"""Property tests: whatever the (independent) test encoder writes, the decoder reads back."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.pgoutput import DecodeError, Decoder, Insert, StreamStart, StreamStop
from bridge.pgoutput.messages import LogicalMessage, TupleData
from bridge.pgoutput.rows import read_tuple, read_tuple_checked

from . import strategies as S
from .encoder import encode, make_tuple, tuple_columns


def _plain(msg: LogicalMessage) -> dict[str, Any]:
    """Field values with TupleData as (kind, value) pairs: buffers and offsets differ by design."""
    out: dict[str, Any] = {"type": type(msg).__name__}
    for f in dataclasses.fields(msg):
        v = getattr(msg, f.name)
        out[f.name] = tuple_columns(v) if isinstance(v, TupleData) else v
    return out


@given(st.integers(1, 4).flatmap(lambda v: st.tuples(st.just(v), S.framing(v))))
def test_decoder_round_trips_framing_messages(case: tuple[int, LogicalMessage]) -> None:
    version, msg = case
    assert _plain(Decoder(version).decode(encode(msg))) == _plain(msg)


@given(S.framing(4, parallel=True))
def test_decoder_round_trips_parallel_stream_abort(msg: LogicalMessage) -> None:
    assert _plain(Decoder(4, streaming_parallel=True).decode(encode(msg))) == _plain(msg)


@given(st.integers(1, 4), S.outside_stream)
def test_decoder_round_trips_data_outside_stream(version: int, msg: LogicalMessage) -> None:
    decoded = Decoder(version).decode(encode(msg))
    assert _plain(decoded) == _plain(msg)


@given(st.integers(2, 4), st.booleans(), S.inside_stream)
def test_decoder_round_trips_data_inside_stream(
    version: int, first: bool, msg: LogicalMessage
) -> None:
    d = Decoder(version)
    d.decode(encode(StreamStart(1, first)))
    assert _plain(d.decode(encode(msg))) == _plain(msg)
    assert d.in_stream


@settings(max_examples=50)
@given(st.lists(st.tuples(st.lists(S.inside_stream, max_size=5), S.outside_stream), max_size=5))
def test_decoder_tracks_stream_state_across_chunks(
    chunks: list[tuple[list[LogicalMessage], LogicalMessage]],
) -> None:
    # Streamed chunks interleaved with ordinary transactions, as a walsender sends them when a
    # big transaction spills while small ones commit.
    d = Decoder(2)
    for streamed, plain in chunks:
        payloads = [encode(StreamStart(9, True)), *map(encode, streamed), encode(StreamStop())]
        for payload, expected in zip(
            payloads, [StreamStart(9, True), *streamed, StreamStop()], strict=True
        ):
            assert _plain(d.decode(payload)) == _plain(expected)
        assert not d.in_stream
        assert _plain(d.decode(encode(plain))) == _plain(plain)


def _outcome(fn: Any, buf: bytes) -> Any:
    try:
        t, pos = fn(buf, 0, len(buf), "Insert")
    except DecodeError as exc:
        return ("error", exc.offset, exc.reason)
    return (t.kinds, t.spans, pos)


@given(
    st.one_of(
        st.lists(S.column, max_size=8).map(lambda cols: make_tuple(cols).buffer),
        st.lists(st.tuples(st.just("t"), st.binary(max_size=9)), max_size=8).map(
            lambda cols: make_tuple(cols).buffer
        ),
        st.binary(max_size=40),
    ).flatmap(lambda b: st.tuples(st.just(b), st.integers(0, len(b))))
)
def test_tuple_fast_path_agrees_with_checked_path(case: tuple[bytes, int]) -> None:
    # The fast path must give the same tuple, or the same error, as the fully checked one, on
    # valid rows, truncated rows and noise alike.
    buf, cut = case
    for data in (buf, buf[:cut]):
        assert _outcome(read_tuple, data) == _outcome(read_tuple_checked, data)


def _insert_outcome(fn: Any, buf: bytes) -> Any:
    try:
        return _plain(fn(buf))
    except DecodeError as exc:
        return ("error", exc.offset, exc.reason)


@given(
    st.booleans(),
    st.lists(S.column, max_size=6) | st.lists(st.tuples(st.just("b"), st.binary(max_size=5))),
    st.integers(0, 60),
    st.binary(max_size=3),
)
def test_insert_fast_path_agrees_with_checked_path(
    in_stream: bool, cols: list[Any], cut: int, junk: bytes
) -> None:
    d = Decoder(2)
    if in_stream:
        d.decode(encode(StreamStart(1, True)))
    payload = encode(Insert(5 if in_stream else None, 16384, make_tuple(cols)))
    for data in (payload, payload[:cut], payload + junk):
        assert _insert_outcome(d._insert, data) == _insert_outcome(d._insert_checked, data)
