"""Property tests: whatever the (independent) test encoder writes, the decoder reads back."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.pgoutput import Decoder, StreamStart, StreamStop
from bridge.pgoutput.messages import LogicalMessage, TupleData

from . import strategies as S
from .encoder import encode, tuple_columns


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
