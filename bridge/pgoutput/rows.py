"""TupleData and row messages, read and built on the decoder's hot path.

Split from :mod:`bridge.pgoutput.decoder` because it is written for speed rather than for
reading: one struct call per column, slots written through their descriptors, and a fully
checked fallback (:func:`read_tuple_checked`) that every fast path defers to on anything
unusual, so that the fast code never has to produce an error message itself.
"""

from __future__ import annotations

import struct
from itertools import repeat

from bridge.native import scan_tuple
from bridge.pgoutput.errors import DecodeError
from bridge.pgoutput.messages import Delete, Insert, TupleData, Update

_u32 = struct.Struct("!I").unpack_from
_i32 = struct.Struct("!i").unpack_from
_ZERO_SPAN = (0, 0)


def truncated(name: str, offset: int) -> DecodeError:
    return DecodeError(name, offset, "truncated message")


# Hot-path constructors. The messages are frozen dataclasses, whose generated __init__ goes
# through object.__setattr__ once per field; writing the slots through their descriptors builds
# the identical object (no __post_init__ is skipped: there is none) in about two thirds of the
# time, and rows are built hundreds of thousands of times a second.
new_object = object.__new__
set_kinds = vars(TupleData)["kinds"].__set__
set_buffer = vars(TupleData)["buffer"].__set__
set_spans = vars(TupleData)["spans"].__set__
set_insert_xid = vars(Insert)["xid"].__set__
set_insert_oid = vars(Insert)["relation_oid"].__set__
set_insert_new = vars(Insert)["new_tuple"].__set__
UNIFORM_KIND = {0x74: b"t", 0x62: b"b"}
kind_length = struct.Struct("!BI").unpack_from  # kind byte and (unsigned) value length
row_header = struct.Struct("!IBHB").unpack_from  # oid, 'N', column count, first kind
row_header_xid = struct.Struct("!IIBHB").unpack_from  # xid, then as above


def make_tuple(kinds: bytes, buf: bytes, spans: tuple[int, ...]) -> TupleData:
    t: TupleData = new_object(TupleData)
    set_kinds(t, kinds)
    set_buffer(t, buf)
    set_spans(t, spans)
    return t


def make_insert(xid: int | None, oid: int, new: TupleData) -> Insert:
    m: Insert = new_object(Insert)
    set_insert_xid(m, xid)
    set_insert_oid(m, oid)
    set_insert_new(m, new)
    return m


_set_update_xid = vars(Update)["xid"].__set__
_set_update_oid = vars(Update)["relation_oid"].__set__
_set_update_old_kind = vars(Update)["old_kind"].__set__
_set_update_old = vars(Update)["old_tuple"].__set__
_set_update_new = vars(Update)["new_tuple"].__set__


def make_update(
    xid: int | None, oid: int, old_kind: str | None, old: TupleData | None, new: TupleData
) -> Update:
    m: Update = new_object(Update)
    _set_update_xid(m, xid)
    _set_update_oid(m, oid)
    _set_update_old_kind(m, old_kind)
    _set_update_old(m, old)
    _set_update_new(m, new)
    return m


_set_delete_xid = vars(Delete)["xid"].__set__
_set_delete_oid = vars(Delete)["relation_oid"].__set__
_set_delete_old_kind = vars(Delete)["old_kind"].__set__
_set_delete_old = vars(Delete)["old_tuple"].__set__


def make_delete(xid: int | None, oid: int, old_kind: str, old: TupleData) -> Delete:
    m: Delete = new_object(Delete)
    _set_delete_xid(m, xid)
    _set_delete_oid(m, oid)
    _set_delete_old_kind(m, old_kind)
    _set_delete_old(m, old)
    return m


def read_tuple(buf: bytes, pos: int, end: int, name: str) -> tuple[TupleData, int]:
    """The TupleData at ``pos`` and the offset just past it.

    The hot loop of the decoder, in two fast stages and a checked fallback:

    1. while every column has the first column's kind (all text, or all binary: the usual
       row), one struct call per column reads kind and length, and the kinds bytes are built at
       the end in one go;
    2. from the first column of another kind on (NULLs, unchanged TOAST), the kinds are
       recorded one by one;
    3. anything unexpected goes to :func:`read_tuple_checked`, which decodes the tuple again from
       its start, checking every step, and raises the precise DecodeError.

    The fast stages need only one bounds check, at the end: lengths are read unsigned, so a
    negative or oversized one moves ``pos`` past the end, where the next read fails (IndexError,
    struct.error: caught, fallback) or the final ``pos <= end`` does.

    With the C accelerator built, its :func:`~bridge.native.scan_tuple` does stages 1 and 2.
    """
    if scan_tuple is not None:
        scanned = scan_tuple(buf, pos, end)
        if scanned is not None:
            return make_tuple(scanned[0], buf, scanned[1]), scanned[2]
        return read_tuple_checked(buf, pos, end, name)
    start = pos
    try:
        ncols = (buf[pos] << 8) | buf[pos + 1]
        pos += 2
        spans: list[int] = []
        append = spans.append
        k0 = buf[pos] if ncols else 0
        done = 0
        if k0 in (0x74, 0x62):  # 't', 'b'
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
                    if pos <= end:
                        return make_tuple(UNIFORM_KIND[k0] * ncols, buf, tuple(spans)), pos
                    return read_tuple_checked(buf, start, end, name)
            except struct.error:
                pass  # a one-byte 'n' or 'u' column at the very end: stage 2 reads it
            done = len(spans) >> 1
            kinds = bytearray(UNIFORM_KIND[k0] * done)
        else:
            kinds = bytearray()
        add_kind = kinds.append
        for _ in repeat(None, ncols - done):
            k = buf[pos]
            add_kind(k)
            if k in (0x74, 0x62):  # 't', 'b': a length and the value follow
                pos += 5
                append(pos)
                pos += _u32(buf, pos - 4)[0]
                append(pos)
            elif k in (0x6E, 0x75):  # 'n', 'u': nothing follows
                pos += 1
                append(0)
                append(0)
            else:
                break
        else:
            if pos <= end:
                return make_tuple(bytes(kinds), buf, tuple(spans)), pos
    except (IndexError, struct.error):
        pass
    return read_tuple_checked(buf, start, end, name)


def read_tuple_checked(buf: bytes, pos: int, end: int, name: str) -> tuple[TupleData, int]:
    """The TupleData at ``pos``, every column of any kind, every bound checked."""
    if pos + 2 > end:
        raise truncated(name, pos)
    ncols = (buf[pos] << 8) | buf[pos + 1]
    pos += 2
    # Every column takes at least its kind byte: a count beyond the bytes left is a lie, and
    # refusing it here keeps the allocation below bounded by the payload.
    if ncols > end - pos:
        raise DecodeError(name, pos - 2, f"column count {ncols} exceeds the {end - pos} bytes left")
    kinds = bytearray(ncols)
    spans: list[int] = []
    append = spans.append
    for i in range(ncols):
        if pos >= end:
            raise truncated(name, pos)
        k = buf[pos]
        kinds[i] = k
        if k in (0x74, 0x62):  # 't', 'b': a length and the value follow
            if pos + 5 > end:
                raise truncated(name, pos + 1)
            length = _i32(buf, pos + 1)[0]
            if length < 0:
                raise DecodeError(name, pos + 1, f"negative column length {length}")
            start = pos + 5
            pos = start + length
            if pos > end:
                raise DecodeError(
                    name, start - 4, f"column length {length} exceeds the {end - start} bytes left"
                )
            append(start)
            append(pos)
        elif k in (0x6E, 0x75):  # 'n', 'u': nothing follows
            pos += 1
            spans += _ZERO_SPAN
        else:
            raise DecodeError(name, pos, f"unknown tuple column kind {bytes([k])!r}")
    return make_tuple(bytes(kinds), buf, tuple(spans)), pos
