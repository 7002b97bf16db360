"""Unit tests of the COPY BOTH framing: XLogData, primary keepalive, standby status update."""

from __future__ import annotations

import struct

import pytest

from bridge.pgoutput import (
    DecodeError,
    Lsn,
    PrimaryKeepalive,
    XLogData,
    parse_copy_data,
    standby_status_update,
)

START, END, TS = 0x1_0000_0010, 0x1_0000_0800, 785_000_000_000_000


def test_parse_copy_data_reads_xlogdata_header_and_payload() -> None:
    frame = b"w" + struct.pack("!QQq", START, END, TS) + b"B\x01\x02"
    msg = parse_copy_data(frame)
    assert msg == XLogData(Lsn(START), Lsn(END), TS, b"B\x01\x02")
    assert isinstance(msg, XLogData) and type(msg.payload) is bytes
    assert type(msg.wal_start) is Lsn and str(msg.wal_start) == "1/10"
    assert repr(msg.wal_end) == "Lsn('1/800')"


def test_parse_copy_data_copies_payload_out_of_mutable_buffer() -> None:
    frame = bytearray(b"w" + struct.pack("!QQq", START, END, TS) + b"E")
    msg = parse_copy_data(frame)  # type: ignore[arg-type]
    frame[-1] = 0
    assert isinstance(msg, XLogData) and msg.payload == b"E"


def test_parse_copy_data_accepts_empty_xlogdata_payload() -> None:
    msg = parse_copy_data(b"w" + struct.pack("!QQq", START, END, TS))
    assert isinstance(msg, XLogData) and msg.payload == b""


@pytest.mark.parametrize("reply", [0, 1])
def test_parse_copy_data_reads_keepalive(reply: int) -> None:
    msg = parse_copy_data(b"k" + struct.pack("!QqB", END, TS, reply))
    assert msg == PrimaryKeepalive(Lsn(END), TS, bool(reply))


@pytest.mark.parametrize(
    ("frame", "message_type", "reason"),
    [
        (b"", "CopyData", "empty message"),
        (b"x123", "CopyData", "unknown message byte b'x'"),
        (b"w" + bytes(23), "XLogData", "truncated header"),
        (b"k" + bytes(16), "PrimaryKeepalive", "expected 18 bytes"),
        (b"k" + bytes(18), "PrimaryKeepalive", "expected 18 bytes"),
    ],
)
def test_parse_copy_data_rejects_malformed_frames(
    frame: bytes, message_type: str, reason: str
) -> None:
    with pytest.raises(DecodeError) as info:
        parse_copy_data(frame)
    assert info.value.message_type == message_type
    assert reason in info.value.reason


def test_standby_status_update_layout() -> None:
    out = standby_status_update(Lsn(30), Lsn(20), Lsn(10), TS, reply_requested=True)
    assert out == b"r" + struct.pack("!QQQqB", 30, 20, 10, TS, 1)
    assert len(out) == 34  # what the walsender insists on


def test_standby_status_update_defaults_to_no_reply() -> None:
    assert standby_status_update(Lsn(1), Lsn(1), Lsn(1), 0)[-1] == 0


def test_insert_relation_oid_reads_the_oid_the_decoder_reads() -> None:
    from bridge.pgoutput import Decoder, Insert
    from bridge.pgoutput.copyboth import insert_relation_oid

    # Insert into relation 3,000,000,123 (an OID above 2^31): 'I', OID, 'N', one text column.
    payload = b"I" + struct.pack("!I", 3_000_000_123) + b"N" + struct.pack("!H", 1) + b"t"
    payload += struct.pack("!I", 2) + b"42"
    frame = b"w" + struct.pack("!QQq", START, END, TS) + payload
    decoded = Decoder(1).decode(payload)
    assert isinstance(decoded, Insert)
    assert insert_relation_oid(frame) == decoded.relation_oid == 3_000_000_123
