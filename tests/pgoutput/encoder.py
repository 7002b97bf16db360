"""A pgoutput encoder for tests: typed message in, protocol bytes out.

Written from PostgreSQL's "Logical Replication Message Formats" chapter (and proto.c), not from
the decoder, so round-trip tests check the decoder against an independent reading of the spec.
It also produces the forms no captured vector can carry, like Stream Abort with the abort LSN and
timestamp of protocol 4's ``streaming = parallel``.

An ``xid`` that is not ``None`` on Relation, Type, Insert, Update, Delete, Truncate and Message is
written, as the server does inside a streamed transaction.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from bridge.pgoutput.messages import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    Prepare,
    Relation,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    TupleData,
    Type,
    Update,
)

Column = tuple[str, bytes | None]  # (kind "n"/"u"/"t"/"b", value for t and b)


def cstring(text: str) -> bytes:
    return text.encode() + b"\x00"


def encode_tuple(columns: Sequence[Column]) -> bytes:
    out = bytearray(struct.pack("!H", len(columns)))
    for kind, value in columns:
        out += kind.encode()
        if kind in ("t", "b"):
            assert value is not None
            out += struct.pack("!i", len(value)) + value
    return bytes(out)


def tuple_columns(t: TupleData) -> list[Column]:
    """The (kind, value) pairs of a decoded TupleData, for re-encoding or comparing."""
    return [(chr(t.kinds[i]), t.raw(i)) for i in range(len(t))]


def make_tuple(columns: Sequence[Column]) -> TupleData:
    """A TupleData as the decoder would build it from ``encode_tuple(columns)``."""
    buf = encode_tuple(columns)
    spans: list[int] = []
    pos = 2
    for kind, value in columns:
        pos += 1
        if kind in ("t", "b"):
            assert value is not None
            spans += [pos + 4, pos + 4 + len(value)]
            pos += 4 + len(value)
        else:
            spans += [0, 0]
    return TupleData("".join(k for k, _ in columns).encode(), buf, tuple(spans))


def _xid(xid: int | None) -> bytes:
    return b"" if xid is None else struct.pack("!I", xid)


def encode(msg: LogicalMessage) -> bytes:
    """The bytes the server would send for ``msg``."""
    match msg:
        case Begin():
            return b"B" + struct.pack("!QqI", msg.final_lsn, msg.commit_ts, msg.xid)
        case Commit():
            return b"C" + struct.pack(
                "!BQQq", msg.flags, msg.commit_lsn, msg.end_lsn, msg.commit_ts
            )
        case Origin():
            return b"O" + struct.pack("!Q", msg.commit_lsn) + cstring(msg.name)
        case Relation():
            out = bytearray(b"R" + _xid(msg.xid) + struct.pack("!I", msg.relation_oid))
            out += cstring(msg.namespace) + cstring(msg.relation_name)
            out += msg.replica_identity.value.encode() + struct.pack("!H", len(msg.columns))
            for c in msg.columns:
                out += struct.pack("!B", c.flags) + cstring(c.name)
                out += struct.pack("!Ii", c.type_oid, c.type_modifier)
            return bytes(out)
        case Type():
            return (
                b"Y"
                + _xid(msg.xid)
                + struct.pack("!I", msg.type_oid)
                + cstring(msg.namespace)
                + cstring(msg.type_name)
            )
        case Insert():
            return (
                b"I"
                + _xid(msg.xid)
                + struct.pack("!I", msg.relation_oid)
                + b"N"
                + encode_tuple(tuple_columns(msg.new_tuple))
            )
        case Update():
            out = bytearray(b"U" + _xid(msg.xid) + struct.pack("!I", msg.relation_oid))
            if msg.old_tuple is not None:
                assert msg.old_kind in ("K", "O")
                out += msg.old_kind.encode() + encode_tuple(tuple_columns(msg.old_tuple))
            out += b"N" + encode_tuple(tuple_columns(msg.new_tuple))
            return bytes(out)
        case Delete():
            return (
                b"D"
                + _xid(msg.xid)
                + struct.pack("!I", msg.relation_oid)
                + msg.old_kind.encode()
                + encode_tuple(tuple_columns(msg.old_tuple))
            )
        case Truncate():
            return (
                b"T"
                + _xid(msg.xid)
                + struct.pack("!iB", len(msg.relation_oids), msg.options)
                + b"".join(struct.pack("!I", oid) for oid in msg.relation_oids)
            )
        case Message():
            return (
                b"M"
                + _xid(msg.xid)
                + struct.pack("!BQ", 1 if msg.transactional else 0, msg.lsn)
                + cstring(msg.prefix)
                + struct.pack("!i", len(msg.content))
                + msg.content
            )
        case StreamStart():
            return b"S" + struct.pack("!IB", msg.xid, 1 if msg.first_segment else 0)
        case StreamStop():
            return b"E"
        case StreamCommit():
            return b"c" + struct.pack(
                "!IBQQq", msg.xid, msg.flags, msg.commit_lsn, msg.end_lsn, msg.commit_ts
            )
        case StreamAbort():
            out = bytearray(b"A" + struct.pack("!II", msg.xid, msg.subxid))
            if msg.abort_lsn is not None:
                assert msg.abort_ts is not None
                out += struct.pack("!Qq", msg.abort_lsn, msg.abort_ts)
            return bytes(out)
        case BeginPrepare():
            return (
                b"b"
                + struct.pack("!QQqI", msg.prepare_lsn, msg.end_lsn, msg.prepare_ts, msg.xid)
                + cstring(msg.gid)
            )
        case Prepare() | StreamPrepare():
            tag = b"P" if isinstance(msg, Prepare) else b"p"
            return (
                tag
                + struct.pack(
                    "!BQQqI", msg.flags, msg.prepare_lsn, msg.end_lsn, msg.prepare_ts, msg.xid
                )
                + cstring(msg.gid)
            )
        case CommitPrepared():
            return (
                b"K"
                + struct.pack(
                    "!BQQqI", msg.flags, msg.commit_lsn, msg.end_lsn, msg.commit_ts, msg.xid
                )
                + cstring(msg.gid)
            )
        case RollbackPrepared():
            return (
                b"r"
                + struct.pack(
                    "!BQQqqI",
                    msg.flags,
                    msg.prepare_end_lsn,
                    msg.rollback_end_lsn,
                    msg.prepare_ts,
                    msg.rollback_ts,
                    msg.xid,
                )
                + cstring(msg.gid)
            )
    raise TypeError(f"not a pgoutput message: {msg!r}")
