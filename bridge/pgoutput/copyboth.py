"""Framing of the streaming replication protocol inside COPY BOTH.

The walsender sends CopyData messages whose first byte says what they are: ``w`` (XLogData,
carrying one pgoutput message) or ``k`` (primary keepalive). The client answers with ``r``
(standby status update). Pure code: bytes in, typed values out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from bridge.pgoutput.errors import DecodeError
from bridge.pgoutput.lsn import Lsn

_XLOGDATA_HEADER = struct.Struct("!QQq")  # wal_start, wal_end, send_time
_KEEPALIVE = struct.Struct("!QqB")  # wal_end, send_time, reply_requested
_STATUS = struct.Struct("!cQQQqB")
_xlogdata_header = _XLOGDATA_HEADER.unpack_from

# Every row arrives in one XLogData, so building it is on the hot path. An unsigned 64-bit value
# from struct is always a valid LSN, so Lsn's range check is skipped; and the frozen dataclass's
# __init__ (object.__setattr__ per field) is replaced by writing the slots directly, which builds
# the identical object.
_new = object.__new__
_int_new = int.__new__


@dataclass(frozen=True, slots=True)
class XLogData:
    wal_start: Lsn  # the position of the record this payload starts at
    wal_end: Lsn  # the current end of WAL on the server
    send_time: int  # microseconds since 2000-01-01 UTC
    payload: bytes  # one pgoutput message


@dataclass(frozen=True, slots=True)
class PrimaryKeepalive:
    wal_end: Lsn
    send_time: int
    reply_requested: bool


_set_start = vars(XLogData)["wal_start"].__set__
_set_end = vars(XLogData)["wal_end"].__set__
_set_time = vars(XLogData)["send_time"].__set__
_set_payload = vars(XLogData)["payload"].__set__


def split_xlogdata(buf: bytes) -> tuple[int, int, bytes] | None:
    """(wal_start, wal_end, payload) of an XLogData frame, without building an
    :class:`XLogData` (the per-row hot path); ``None`` for anything else, which
    :func:`parse_copy_data` then reads or rejects."""
    if len(buf) >= 25 and buf[0] == 0x77:  # 'w' + _XLOGDATA_HEADER
        start, end, _ = _xlogdata_header(buf, 1)
        return start, end, buf[25:]
    return None


def insert_relation_oid(frame: bytes) -> int:
    """The relation OID of an XLogData frame whose message is an Insert outside a streamed
    transaction ('w', the 24-byte header, 'I', then the Int32 OID), read where it lies: for a
    run of inserts the pipeline encodes without decoding each message."""
    return int.from_bytes(frame[26:30], "big")


def parse_copy_data(buf: bytes) -> XLogData | PrimaryKeepalive:
    """Parse one CopyData message of the replication stream."""
    if not buf:
        raise DecodeError("CopyData", 0, "empty message")
    tag = buf[0]
    if tag == 0x77:  # 'w'
        if len(buf) < 1 + _XLOGDATA_HEADER.size:
            raise DecodeError("XLogData", len(buf), "truncated header")
        start, end, ts = _xlogdata_header(buf, 1)
        msg: XLogData = _new(XLogData)
        _set_start(msg, _int_new(Lsn, start))
        _set_end(msg, _int_new(Lsn, end))
        _set_time(msg, ts)
        _set_payload(msg, bytes(buf[25:]))  # 1 + _XLOGDATA_HEADER.size
        return msg
    if tag == 0x6B:  # 'k'
        if len(buf) != 1 + _KEEPALIVE.size:
            raise DecodeError("PrimaryKeepalive", len(buf), f"expected {1 + _KEEPALIVE.size} bytes")
        end, ts, reply = _KEEPALIVE.unpack_from(buf, 1)
        return PrimaryKeepalive(Lsn(end), ts, bool(reply))
    raise DecodeError("CopyData", 0, f"unknown message byte {bytes([tag])!r}")


def standby_status_update(
    write: Lsn, flush: Lsn, apply: Lsn, send_time: int, reply_requested: bool = False
) -> bytes:
    """Build the ``r`` message that reports positions to the walsender.

    ``flush`` is what the server may discard WAL up to and where a restart resumes: it must only
    ever cover changes delivered downstream.
    """
    return _STATUS.pack(b"r", write, flush, apply, send_time, 1 if reply_requested else 0)
