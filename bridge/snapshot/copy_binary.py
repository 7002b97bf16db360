"""``COPY … TO STDOUT (FORMAT binary)`` bytes -> :class:`~bridge.pgoutput.messages.TupleData`.

Pure: bytes in, rows out, no I/O (like :mod:`bridge.pgoutput.decoder`). The binary COPY format
(PostgreSQL's "COPY" reference page, "Binary Format"):

- a header: the 11-byte signature ``PGCOPY\\n\\377\\r\\n\\0``, a 32-bit flags field (bit 16 set
  means OIDs are included, which pgbridge never asks for), a 32-bit header extension length and
  that many bytes of extension;
- per row, a 16-bit field count, then per field a 32-bit length (``-1`` for NULL) and that many
  bytes: the value as the type's *send* function writes it, which is also what pgoutput sends in
  binary mode. A row therefore becomes a TupleData whose kinds are all ``b`` (or ``n``), and
  :class:`~bridge.schema.RowEncoder` (with its C accelerator) encodes a copied row exactly as it
  encodes a streamed one;
- a trailer: a field count of ``-1``.

The server sends one CopyData message per row (the header rides with the first), which
:meth:`CopyBinaryParser.row` takes whole (with the C accelerator,
:func:`bridge.native.scan_copy_row`, where it is built), but nothing here relies on that:
:meth:`CopyBinaryParser.feed` takes any slicing of the stream and keeps an incomplete row for
the next call. Each row's TupleData points into the block it came in, so a
row costs no copy of its values.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

from bridge import native
from bridge.errors import PgBridgeError
from bridge.pgoutput.messages import TupleData
from bridge.pgoutput.rows import make_tuple

__all__ = ["COPY_SIGNATURE", "CopyBinaryParser", "CopyFormatError", "encode_copy_binary"]

#: The first 11 bytes of every binary COPY stream.
COPY_SIGNATURE: Final = b"PGCOPY\n\xff\r\n\x00"
_HEADER_FIXED: Final = len(COPY_SIGNATURE) + 8  # signature, flags, extension length
_FLAG_OIDS: Final = 1 << 16
_i16 = struct.Struct("!h").unpack_from
_i32 = struct.Struct("!i").unpack_from
_ii = struct.Struct("!ii").unpack_from


class CopyFormatError(PgBridgeError):
    """The COPY stream is not what the binary format allows (the server sent garbage, or the
    row does not have the table's columns); ``table`` names the table, ``offset`` is the
    position in the stream."""

    def __init__(self, table: str, offset: int, message: str) -> None:
        super().__init__(f"table {table}: COPY binary stream at byte {offset}: {message}")
        self.table = table
        self.offset = offset


class CopyBinaryParser:
    """Incremental parser of one binary COPY stream of rows with ``columns`` fields."""

    __slots__ = (
        "_consumed",
        "_done",
        "_header_done",
        "_pending",
        "columns",
        "kinds",
        "rows",
        "table",
    )

    def __init__(self, columns: int, table: str = "?", kinds: bytes | None = None) -> None:
        """``kinds``: the TupleData kind of each column's non-NULL values, ``b`` (default) or
        ``t`` for columns selected as their text form (``col::text``)."""
        if kinds is not None and len(kinds) != columns:
            raise ValueError(f"{len(kinds)} kinds for {columns} columns")
        self.columns = columns
        self.table = table
        self.kinds = kinds if kinds is not None else b"b" * columns
        self.rows = 0  # rows returned so far
        self._pending = b""  # an incomplete row (or header) carried to the next feed
        self._consumed = 0  # stream offset of _pending's first byte, for error messages
        self._header_done = False
        self._done = False

    @property
    def done(self) -> bool:
        """Whether the trailer was read."""
        return self._done

    def feed(self, data: bytes | bytearray | memoryview) -> list[TupleData]:
        """The complete rows in ``data`` (plus what was left over from earlier calls)."""
        if self._done:
            if data:
                raise CopyFormatError(self.table, self._consumed, "data after the trailer")
            return []
        buf = self._pending + bytes(data) if self._pending else bytes(data)
        end = len(buf)
        pos = 0
        if not self._header_done:
            header_end = self._header(buf)
            if header_end is None:
                self._pending = buf
                return []
            pos = header_end
            self._header_done = True
        rows: list[TupleData] = []
        add_row = rows.append
        ncols = self.columns
        default_kinds = self.kinds
        i32 = _i32
        columns = range(ncols)
        # Optimistic per row: read every length, then check the row fits. A read past the end
        # (struct.error) or a row longer than the data means the row is incomplete: it is kept
        # for the next feed.
        while pos + 2 <= end:
            start = pos
            count = _i16(buf, pos)[0]
            if count == -1:
                self._done = True
                if pos + 2 != end:
                    raise CopyFormatError(
                        self.table, self._consumed + pos + 2, "data after the trailer"
                    )
                pos = end
                break
            if count != ncols:
                raise CopyFormatError(
                    self.table,
                    self._consumed + pos,
                    f"row has {count} fields, the table's published columns are {ncols}",
                )
            pos += 2
            spans: list[int] = []
            append = spans.append
            nulls: bytearray | None = None  # the row's kinds, once it has a NULL
            try:
                for i in columns:
                    length = i32(buf, pos)[0]
                    pos += 4
                    if length >= 0:
                        append(pos)
                        pos += length
                        append(pos)
                    elif length == -1:
                        if nulls is None:
                            nulls = bytearray(default_kinds)
                        nulls[i] = 0x6E  # 'n'
                        append(0)
                        append(0)
                    else:
                        raise CopyFormatError(
                            self.table,
                            self._consumed + pos - 4,
                            f"negative field length {length}",
                        )
            except struct.error:
                pos = start
                break
            if pos > end:
                pos = start
                break
            add_row(make_tuple(default_kinds if nulls is None else bytes(nulls), buf, tuple(spans)))
        self._pending = buf[pos:] if pos < end else b""
        self._consumed += pos
        self.rows += len(rows)
        return rows

    def _header(self, buf: bytes) -> int | None:
        """Where the rows start after the file header at the start of ``buf``, or None while
        ``buf`` holds only part of it; what is there is checked already."""
        end = len(buf)
        if end < _HEADER_FIXED:
            n = min(end, len(COPY_SIGNATURE))
            if buf[:n] != COPY_SIGNATURE[:n]:
                self._signature_error(buf)
            return None
        if buf[: len(COPY_SIGNATURE)] != COPY_SIGNATURE:
            self._signature_error(buf)
        flags, extension = _ii(buf, len(COPY_SIGNATURE))
        if flags & _FLAG_OIDS:
            raise CopyFormatError(self.table, self._consumed + 11, "rows carry OIDs")
        if extension < 0:
            raise CopyFormatError(
                self.table, self._consumed + 15, f"negative header extension {extension}"
            )
        if end < _HEADER_FIXED + extension:
            return None
        return _HEADER_FIXED + int(extension)

    @property
    def at_row(self) -> bool:
        """Whether the next message can only be a whole row or the trailer (the header was
        read, nothing is left over, the trailer not yet seen): what :meth:`row` and a caller
        that scans rows itself (:meth:`took_rows`) need."""
        return self._header_done and not self._pending and not self._done

    def took_rows(self, rows: int, nbytes: int) -> None:
        """The caller handled ``rows`` whole rows of ``nbytes`` in all itself (while
        :attr:`at_row`): counted, so that offsets in later errors stay right."""
        self._consumed += nbytes
        self.rows += rows

    def row(self, data: bytes) -> TupleData | None:
        """The row that ``data`` is when it is exactly one complete row (the server sends one
        CopyData message per row after the first), else ``None``, changing nothing: then
        :meth:`feed` takes it (and says what is wrong with it, if anything)."""
        if not self.at_row:
            return None
        scan = native.scan_copy_row
        if scan is not None and type(data) is bytes:
            scanned = scan(data, self.columns, self.kinds)
            if scanned is not None:
                self._consumed += len(data)
                self.rows += 1
                return make_tuple(scanned[0], data, scanned[1])
            # Not exactly one well-formed row: the checks below say so (None) the same way.
        end = len(data)
        ncols = self.columns
        try:
            if _i16(data, 0)[0] != ncols:
                return None
            pos = 2
            spans: list[int] = []
            append = spans.append
            nulls: bytearray | None = None
            i32 = _i32
            for i in range(ncols):
                length = i32(data, pos)[0]
                pos += 4
                if length >= 0:
                    append(pos)
                    pos += length
                    append(pos)
                elif length == -1:
                    if nulls is None:
                        nulls = bytearray(self.kinds)
                    nulls[i] = 0x6E  # 'n'
                    append(0)
                    append(0)
                else:
                    return None
        except struct.error:
            return None
        if pos != end:
            return None
        self._consumed += end
        self.rows += 1
        return make_tuple(self.kinds if nulls is None else bytes(nulls), data, tuple(spans))

    def finish(self) -> None:
        """Check that the stream ended with its trailer and nothing incomplete is left."""
        if not self._header_done:
            raise CopyFormatError(self.table, self._consumed, "stream ended before its header")
        if self._pending:
            raise CopyFormatError(
                self.table,
                self._consumed,
                f"stream ended inside a row ({len(self._pending)} bytes of it)",
            )
        if not self._done:
            raise CopyFormatError(self.table, self._consumed, "stream ended without its trailer")

    def _signature_error(self, buf: bytes) -> None:
        raise CopyFormatError(
            self.table, self._consumed, f"not a binary COPY signature: {buf[:11]!r}"
        )


def encode_copy_binary(rows: Sequence[Sequence[bytes | None]]) -> bytes:
    """A binary COPY stream of ``rows`` (each a tuple of field bytes, ``None`` for NULL): for
    tests and benchmarks, the exact format the server writes."""
    out = bytearray(COPY_SIGNATURE + b"\x00\x00\x00\x00\x00\x00\x00\x00")
    for row in rows:
        out += struct.pack("!h", len(row))
        for value in row:
            if value is None:
                out += b"\xff\xff\xff\xff"
            else:
                out += struct.pack("!i", len(value)) + value
    out += b"\xff\xff"
    return bytes(out)
