"""Decoder for pgoutput, PostgreSQL's logical replication protocol, versions 1 to 4.

One XLogData payload in, one typed message (:mod:`bridge.pgoutput.messages`) out. No I/O: like
h11, the caller feeds bytes from wherever they came (a replication connection, a file of captured
vectors) and gets values back.

The decoder keeps exactly one piece of state: whether it is between a Stream Start and a Stream
Stop. Inside a streamed transaction (protocol 2 and later) the server prefixes Relation, Type,
Insert, Update, Delete, Truncate and Message with the transaction's Xid, so the layout of those
messages depends on it.

Malformed input raises :class:`~bridge.pgoutput.errors.DecodeError` and nothing else. Every
length and count is checked against the bytes actually received before it is used, so a lying
length field can neither allocate nor loop beyond the payload; on an error the decoder's state is
left as it was before the call.

Speed matters here (every row of every table passes through ``decode``): fixed parts are read with
precompiled :class:`struct.Struct` objects, dispatch is one list lookup on the first byte, rows
take the fast paths of :mod:`bridge.pgoutput.rows`, and row data stays in the payload —
:class:`~bridge.pgoutput.messages.TupleData` only records kind bytes and offsets, the values are
sliced out when a later stage asks for them.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from itertools import repeat

from bridge.native import configure_messages, decode_insert, scan_tuple
from bridge.pgoutput.errors import DecodeError
from bridge.pgoutput.lsn import Lsn
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
    RelationColumn,
    ReplicaIdentity,
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
from bridge.pgoutput.rows import (
    UNIFORM_KIND,
    kind_length,
    make_delete,
    make_insert,
    make_tuple,
    make_update,
    new_object,
    read_tuple,
    row_header,
    row_header_xid,
    set_buffer,
    set_insert_new,
    set_insert_oid,
    set_insert_xid,
    set_kinds,
    set_spans,
    truncated,
)

if configure_messages is not None:
    configure_messages(TupleData, Insert)  # the classes decode_insert builds

logger = logging.getLogger(__name__)

__all__ = ["MAX_PROTOCOL_VERSION", "MESSAGE_NAMES", "Decoder"]

#: The newest protocol version this decoder understands (PostgreSQL 16 and later).
MAX_PROTOCOL_VERSION = 4

# Precompiled readers; network byte order throughout. Xids and OIDs are unsigned 32-bit, LSNs
# unsigned 64-bit, timestamps signed 64-bit (microseconds since 2000-01-01).
_u32 = struct.Struct("!I").unpack_from
_i32 = struct.Struct("!i").unpack_from
_u32u32 = struct.Struct("!II").unpack_from
_u32i32 = struct.Struct("!Ii").unpack_from
_BEGIN = struct.Struct("!QqI")  # final_lsn, commit_ts, xid
_COMMIT = struct.Struct("!BQQq")  # flags, commit_lsn, end_lsn, commit_ts
_LSN = struct.Struct("!Q")
_MESSAGE = struct.Struct("!BQ")  # flags, lsn
_STREAM_START = struct.Struct("!IB")  # xid, first_segment
_STREAM_COMMIT = struct.Struct("!IBQQq")  # xid, flags, commit_lsn, end_lsn, commit_ts
_STREAM_ABORT = struct.Struct("!II")  # xid, subxid
_STREAM_ABORT_PARALLEL = struct.Struct("!IIQq")  # ... abort_lsn, abort_ts (protocol 4, parallel)
_BEGIN_PREPARE = struct.Struct("!QQqI")  # prepare_lsn, end_lsn, prepare_ts, xid; then gid
_PREPARE = struct.Struct("!BQQqI")  # flags, lsn, end_lsn, ts, xid; then gid
_ROLLBACK_PREPARED = struct.Struct("!BQQqqI")  # flags, prep_end, rb_end, prep_ts, rb_ts, xid

_K, _O, _N = 0x4B, 0x4F, 0x4E  # tuple markers in Update/Delete/Insert

_REPLICA_IDENTITY = {ord(r.value): r for r in ReplicaIdentity}

#: The message name for each first byte, as PostgreSQL's documentation names them.
MESSAGE_NAMES: dict[int, str] = {
    ord("B"): "Begin",
    ord("C"): "Commit",
    ord("O"): "Origin",
    ord("R"): "Relation",
    ord("Y"): "Type",
    ord("I"): "Insert",
    ord("U"): "Update",
    ord("D"): "Delete",
    ord("T"): "Truncate",
    ord("M"): "Message",
    ord("S"): "StreamStart",
    ord("E"): "StreamStop",
    ord("c"): "StreamCommit",
    ord("A"): "StreamAbort",
    ord("b"): "BeginPrepare",
    ord("P"): "Prepare",
    ord("K"): "CommitPrepared",
    ord("r"): "RollbackPrepared",
    ord("p"): "StreamPrepare",
}

# The first protocol version in which each message can appear. A server never sends a message
# newer than the negotiated version, so seeing one means the caller's version is wrong or the
# bytes are not what they claim; either way, decoding it with the wrong layout would be worse.
_MIN_VERSION: dict[int, int] = {
    ord("S"): 2,
    ord("E"): 2,
    ord("c"): 2,
    ord("A"): 2,
    ord("b"): 3,
    ord("P"): 3,
    ord("K"): 3,
    ord("r"): 3,
    ord("p"): 3,
}


def _cstring(buf: bytes, pos: int, name: str) -> tuple[str, int]:
    """A NUL-terminated string at ``pos`` and the offset just past its terminator."""
    z = buf.find(0, pos)
    if z < 0:
        raise DecodeError(name, pos, "unterminated string")
    try:
        # The replication connection runs with client_encoding UTF8, so names arrive in UTF-8.
        return buf[pos:z].decode(), z + 1
    except UnicodeDecodeError as exc:
        raise DecodeError(name, pos + exc.start, "string is not valid UTF-8") from None


class Decoder:
    """Decodes one pgoutput message per call, tracking whether a streamed transaction is open.

    ``protocol_version`` is the ``proto_version`` given to START_REPLICATION (1 to 4).
    ``streaming_parallel`` says that ``streaming = parallel`` was requested (protocol 4 only), in
    which case Stream Abort carries the abort LSN and timestamp.

    Use one decoder per replication connection: the in-stream state belongs to that stream.
    """

    __slots__ = ("_dispatch", "_in_stream", "_protocol_version", "_streaming_parallel")

    def __init__(self, protocol_version: int = 1, *, streaming_parallel: bool = False) -> None:
        if not 1 <= protocol_version <= MAX_PROTOCOL_VERSION:
            raise ValueError(
                f"protocol_version must be between 1 and {MAX_PROTOCOL_VERSION}, "
                f"got {protocol_version}"
            )
        if streaming_parallel and protocol_version < 4:
            raise ValueError("streaming_parallel needs protocol_version 4")
        self._protocol_version = protocol_version
        self._streaming_parallel = streaming_parallel
        self._in_stream = False
        handlers: dict[str, Callable[[bytes], LogicalMessage]] = {
            "B": self._begin,
            "C": self._commit,
            "O": self._origin,
            "R": self._relation,
            "Y": self._type,
            "I": self._insert,
            "U": self._update,
            "D": self._delete,
            "T": self._truncate,
            "M": self._message,
            "S": self._stream_start,
            "E": self._stream_stop,
            "c": self._stream_commit,
            "A": self._stream_abort,
            "b": self._begin_prepare,
            "P": self._prepare,
            "K": self._commit_prepared,
            "r": self._rollback_prepared,
            "p": self._stream_prepare,
        }
        dispatch: list[Callable[[bytes], LogicalMessage] | None] = [None] * 256
        for tag, handler in handlers.items():
            if _MIN_VERSION.get(ord(tag), 1) <= protocol_version:
                dispatch[ord(tag)] = handler
        self._dispatch = dispatch

    @property
    def protocol_version(self) -> int:
        return self._protocol_version

    @property
    def streaming_parallel(self) -> bool:
        return self._streaming_parallel

    @property
    def in_stream(self) -> bool:
        """True between a Stream Start and its Stream Stop."""
        return self._in_stream

    def decode(self, payload: bytes) -> LogicalMessage:
        """Decode one pgoutput message (the payload of one XLogData)."""
        if type(payload) is not bytes:
            # TupleData keeps a reference to the buffer, which must not change under it.
            payload = bytes(payload)
        if not payload:
            raise DecodeError("message", 0, "empty message")
        handler = self._dispatch[payload[0]]
        if handler is None:
            tag = payload[0]
            if tag in MESSAGE_NAMES:
                raise DecodeError(
                    MESSAGE_NAMES[tag],
                    0,
                    f"message needs protocol version {_MIN_VERSION[tag]}, "
                    f"decoder is at version {self._protocol_version}",
                )
            raise DecodeError("message", 0, f"unknown message byte {bytes([tag])!r}")
        return handler(payload)

    # --- transaction framing -------------------------------------------------------------------

    def _begin(self, buf: bytes) -> Begin:
        _exact(buf, 1 + _BEGIN.size, "Begin")
        final_lsn, ts, xid = _BEGIN.unpack_from(buf, 1)
        return Begin(Lsn(final_lsn), ts, xid)

    def _commit(self, buf: bytes) -> Commit:
        _exact(buf, 1 + _COMMIT.size, "Commit")
        flags, commit_lsn, end_lsn, ts = _COMMIT.unpack_from(buf, 1)
        return Commit(flags, Lsn(commit_lsn), Lsn(end_lsn), ts)

    def _origin(self, buf: bytes) -> Origin:
        if len(buf) < 9:
            raise truncated("Origin", len(buf))
        (lsn,) = _LSN.unpack_from(buf, 1)
        name, pos = _cstring(buf, 9, "Origin")
        _end(buf, pos, "Origin")
        return Origin(Lsn(lsn), name)

    # --- catalog -------------------------------------------------------------------------------

    def _xid_prefix(self, buf: bytes, name: str) -> tuple[int | None, int]:
        """The streamed-transaction Xid (or None outside a stream) and the offset after it."""
        if self._in_stream:
            if len(buf) < 5:
                raise truncated(name, len(buf))
            return _u32(buf, 1)[0], 5
        return None, 1

    def _relation(self, buf: bytes) -> Relation:
        name = "Relation"
        xid, pos = self._xid_prefix(buf, name)
        end = len(buf)
        if pos + 4 > end:
            raise truncated(name, end)
        (oid,) = _u32(buf, pos)
        namespace, pos = _cstring(buf, pos + 4, name)
        relname, pos = _cstring(buf, pos, name)
        if pos + 3 > end:
            raise truncated(name, end)
        ident = _REPLICA_IDENTITY.get(buf[pos])
        if ident is None:
            raise DecodeError(name, pos, f"unknown replica identity {bytes([buf[pos]])!r}")
        ncols = (buf[pos + 1] << 8) | buf[pos + 2]
        pos += 3
        columns = []
        for _ in range(ncols):
            if pos >= end:
                raise truncated(name, pos)
            flags = buf[pos]
            colname, pos = _cstring(buf, pos + 1, name)
            if pos + 8 > end:
                raise truncated(name, end)
            type_oid, typmod = _u32i32(buf, pos)
            pos += 8
            columns.append(RelationColumn(flags, colname, type_oid, typmod))
        _end(buf, pos, name)
        return Relation(xid, oid, namespace, relname, ident, tuple(columns))

    def _type(self, buf: bytes) -> Type:
        name = "Type"
        xid, pos = self._xid_prefix(buf, name)
        if pos + 4 > len(buf):
            raise truncated(name, len(buf))
        (oid,) = _u32(buf, pos)
        namespace, pos = _cstring(buf, pos + 4, name)
        typname, pos = _cstring(buf, pos, name)
        _end(buf, pos, name)
        return Type(xid, oid, namespace, typname)

    # --- data ----------------------------------------------------------------------------------

    def _insert(self, buf: bytes) -> Insert:
        # The hottest message, so the common row (all text or all binary columns) is decoded
        # right here with the header read in one call; see read_tuple for why the checks suffice.
        # Anything else goes to _insert_checked.
        if decode_insert is not None:  # the whole message in C, the same objects
            message = decode_insert(buf, self._in_stream)
            return message if message is not None else self._insert_checked(buf)
        if scan_tuple is not None:
            # The C scanner reads any well-formed tuple; the header is 'I', [xid,] oid, 'N'.
            start = 10 if self._in_stream else 6
            end = len(buf)
            scanned = scan_tuple(buf, start, end) if end > start and buf[start - 1] == _N else None
            if scanned is None or scanned[2] != end:
                return self._insert_checked(buf)
            xid, oid = _u32u32(buf, 1) if start == 10 else (None, _u32(buf, 1)[0])
            return make_insert(xid, oid, make_tuple(scanned[0], buf, scanned[1]))
        try:
            if self._in_stream:
                xid, oid, marker, ncols, k0 = row_header_xid(buf, 1)
                pos = 12
            else:
                xid = None
                oid, marker, ncols, k0 = row_header(buf, 1)
                pos = 8
        except struct.error:
            return self._insert_checked(buf)
        if marker == _N and k0 in (0x74, 0x62):
            spans: list[int] = []
            append = spans.append
            try:
                for _ in repeat(None, ncols):
                    k, length = kind_length(buf, pos)
                    if k != k0:
                        break
                    pos += 5
                    append(pos)
                    pos += length
                    append(pos)
                else:
                    if pos == len(buf):
                        # make_tuple and make_insert, inlined.
                        tup: TupleData = new_object(TupleData)
                        set_kinds(tup, UNIFORM_KIND[k0] * ncols)
                        set_buffer(tup, buf)
                        set_spans(tup, tuple(spans))
                        m: Insert = new_object(Insert)
                        set_insert_xid(m, xid)
                        set_insert_oid(m, oid)
                        set_insert_new(m, tup)
                        return m
            except struct.error:
                pass
        return self._insert_checked(buf)

    def _insert_checked(self, buf: bytes) -> Insert:
        end = len(buf)
        if self._in_stream:
            if end < 10:
                raise truncated("Insert", end)
            xid, oid = _u32u32(buf, 1)
            pos = 9
        else:
            if end < 6:
                raise truncated("Insert", end)
            xid = None
            (oid,) = _u32(buf, 1)
            pos = 5
        if buf[pos] != _N:
            raise DecodeError("Insert", pos, f"expected 'N', got {bytes([buf[pos]])!r}")
        new, pos = read_tuple(buf, pos + 1, end, "Insert")
        if pos != end:
            raise _trailing("Insert", pos, end)
        return make_insert(xid, oid, new)

    def _update(self, buf: bytes) -> Update:
        end = len(buf)
        if self._in_stream:
            if end < 10:
                raise truncated("Update", end)
            xid, oid = _u32u32(buf, 1)
            pos = 9
        else:
            if end < 6:
                raise truncated("Update", end)
            xid = None
            (oid,) = _u32(buf, 1)
            pos = 5
        marker = buf[pos]
        old_kind: str | None = None
        old: TupleData | None = None
        if marker in (0x4B, 0x4F):  # 'K', 'O'
            old_kind = "K" if marker == _K else "O"
            old, pos = read_tuple(buf, pos + 1, end, "Update")
            if pos >= end:
                raise truncated("Update", pos)
            marker = buf[pos]
        if marker != _N:
            raise DecodeError("Update", pos, f"expected 'K', 'O' or 'N', got {bytes([marker])!r}")
        new, pos = read_tuple(buf, pos + 1, end, "Update")
        if pos != end:
            raise _trailing("Update", pos, end)
        return make_update(xid, oid, old_kind, old, new)

    def _delete(self, buf: bytes) -> Delete:
        end = len(buf)
        if self._in_stream:
            if end < 10:
                raise truncated("Delete", end)
            xid, oid = _u32u32(buf, 1)
            pos = 9
        else:
            if end < 6:
                raise truncated("Delete", end)
            xid = None
            (oid,) = _u32(buf, 1)
            pos = 5
        marker = buf[pos]
        if marker != _K and marker != _O:
            raise DecodeError("Delete", pos, f"expected 'K' or 'O', got {bytes([marker])!r}")
        old, pos = read_tuple(buf, pos + 1, end, "Delete")
        if pos != end:
            raise _trailing("Delete", pos, end)
        return make_delete(xid, oid, "K" if marker == _K else "O", old)

    def _truncate(self, buf: bytes) -> Truncate:
        name = "Truncate"
        xid, pos = self._xid_prefix(buf, name)
        end = len(buf)
        if pos + 5 > end:
            raise truncated(name, end)
        (nrels,) = _i32(buf, pos)
        options = buf[pos + 4]
        pos += 5
        if nrels < 0:
            raise DecodeError(name, pos - 5, f"negative relation count {nrels}")
        # Checked before unpacking so that a lying count cannot build a huge format or tuple.
        if pos + 4 * nrels != end:
            if pos + 4 * nrels > end:
                raise DecodeError(
                    name, pos - 5, f"relation count {nrels} exceeds the {end - pos} bytes left"
                )
            raise _trailing(name, pos + 4 * nrels, end)
        oids = struct.unpack_from(f"!{nrels}I", buf, pos)
        return Truncate(xid, options, oids)

    def _message(self, buf: bytes) -> Message:
        name = "Message"
        xid, pos = self._xid_prefix(buf, name)
        end = len(buf)
        if pos + _MESSAGE.size > end:
            raise truncated(name, end)
        flags, lsn = _MESSAGE.unpack_from(buf, pos)
        prefix, pos = _cstring(buf, pos + _MESSAGE.size, name)
        if pos + 4 > end:
            raise truncated(name, end)
        (length,) = _i32(buf, pos)
        if length < 0:
            raise DecodeError(name, pos, f"negative content length {length}")
        if pos + 4 + length > end:
            raise DecodeError(
                name, pos, f"content length {length} exceeds the {end - pos - 4} bytes left"
            )
        _end(buf, pos + 4 + length, name)
        return Message(xid, bool(flags & 1), Lsn(lsn), prefix, buf[pos + 4 : end])

    # --- streamed transactions (protocol 2+) ---------------------------------------------------

    def _stream_start(self, buf: bytes) -> StreamStart:
        _exact(buf, 1 + _STREAM_START.size, "StreamStart")
        if self._in_stream:
            raise DecodeError("StreamStart", 0, "Stream Start inside an open stream")
        xid, first = _STREAM_START.unpack_from(buf, 1)
        self._in_stream = True
        return StreamStart(xid, first == 1)

    def _stream_stop(self, buf: bytes) -> StreamStop:
        _exact(buf, 1, "StreamStop")
        if not self._in_stream:
            raise DecodeError("StreamStop", 0, "Stream Stop without a Stream Start")
        self._in_stream = False
        return StreamStop()

    def _stream_commit(self, buf: bytes) -> StreamCommit:
        _exact(buf, 1 + _STREAM_COMMIT.size, "StreamCommit")
        xid, flags, commit_lsn, end_lsn, ts = _STREAM_COMMIT.unpack_from(buf, 1)
        return StreamCommit(xid, flags, Lsn(commit_lsn), Lsn(end_lsn), ts)

    def _stream_abort(self, buf: bytes) -> StreamAbort:
        if self._streaming_parallel:
            _exact(buf, 1 + _STREAM_ABORT_PARALLEL.size, "StreamAbort")
            xid, subxid, lsn, ts = _STREAM_ABORT_PARALLEL.unpack_from(buf, 1)
            return StreamAbort(xid, subxid, Lsn(lsn), ts)
        _exact(buf, 1 + _STREAM_ABORT.size, "StreamAbort")
        xid, subxid = _STREAM_ABORT.unpack_from(buf, 1)
        return StreamAbort(xid, subxid)

    # --- two-phase commit (protocol 3+) --------------------------------------------------------

    def _begin_prepare(self, buf: bytes) -> BeginPrepare:
        name = "BeginPrepare"
        if len(buf) < 1 + _BEGIN_PREPARE.size:
            raise truncated(name, len(buf))
        lsn, end_lsn, ts, xid = _BEGIN_PREPARE.unpack_from(buf, 1)
        gid, pos = _cstring(buf, 1 + _BEGIN_PREPARE.size, name)
        _end(buf, pos, name)
        return BeginPrepare(Lsn(lsn), Lsn(end_lsn), ts, xid, gid)

    def _prepare_like(self, buf: bytes, name: str) -> tuple[int, Lsn, Lsn, int, int, str]:
        # Prepare, Commit Prepared and Stream Prepare share one layout.
        if len(buf) < 1 + _PREPARE.size:
            raise truncated(name, len(buf))
        flags, lsn, end_lsn, ts, xid = _PREPARE.unpack_from(buf, 1)
        gid, pos = _cstring(buf, 1 + _PREPARE.size, name)
        _end(buf, pos, name)
        return flags, Lsn(lsn), Lsn(end_lsn), ts, xid, gid

    def _prepare(self, buf: bytes) -> Prepare:
        return Prepare(*self._prepare_like(buf, "Prepare"))

    def _commit_prepared(self, buf: bytes) -> CommitPrepared:
        return CommitPrepared(*self._prepare_like(buf, "CommitPrepared"))

    def _stream_prepare(self, buf: bytes) -> StreamPrepare:
        return StreamPrepare(*self._prepare_like(buf, "StreamPrepare"))

    def _rollback_prepared(self, buf: bytes) -> RollbackPrepared:
        name = "RollbackPrepared"
        if len(buf) < 1 + _ROLLBACK_PREPARED.size:
            raise truncated(name, len(buf))
        flags, prep_end, rb_end, prep_ts, rb_ts, xid = _ROLLBACK_PREPARED.unpack_from(buf, 1)
        gid, pos = _cstring(buf, 1 + _ROLLBACK_PREPARED.size, name)
        _end(buf, pos, name)
        return RollbackPrepared(flags, Lsn(prep_end), Lsn(rb_end), prep_ts, rb_ts, xid, gid)


def _trailing(name: str, pos: int, end: int) -> DecodeError:
    return DecodeError(name, pos, f"{end - pos} trailing bytes")


def _exact(buf: bytes, size: int, name: str) -> None:
    """Fixed-size messages: anything shorter is truncated, anything longer has trailing bytes."""
    if len(buf) != size:
        if len(buf) < size:
            raise truncated(name, len(buf))
        raise _trailing(name, size, len(buf))


def _end(buf: bytes, pos: int, name: str) -> None:
    if pos != len(buf):
        raise _trailing(name, pos, len(buf))
