"""Helpers to build pgoutput messages for unit tests without a server."""

from __future__ import annotations

import struct

from bridge.pgoutput.lsn import Lsn
from bridge.pgoutput.messages import (
    COLUMN_FLAG_KEY,
    Relation,
    RelationColumn,
    ReplicaIdentity,
    TupleData,
)

INT4, TEXT = 23, 25


def tuple_data(*values: str | None, unchanged: tuple[int, ...] = ()) -> TupleData:
    """TupleData in text format; ``None`` is NULL, indexes in ``unchanged`` are unchanged TOAST."""
    kinds, buffer, spans = bytearray(), bytearray(), []
    for i, value in enumerate(values):
        if i in unchanged:
            kinds += b"u"
            spans += [0, 0]
        elif value is None:
            kinds += b"n"
            spans += [0, 0]
        else:
            kinds += b"t"
            start = len(buffer)
            buffer += value.encode()
            spans += [start, len(buffer)]
    return TupleData(bytes(kinds), bytes(buffer), tuple(spans))


def relation(
    oid: int = 16384,
    name: str = "items",
    identity: ReplicaIdentity = ReplicaIdentity.DEFAULT,
    columns: tuple[tuple[str, int, bool], ...] = (("id", INT4, True), ("body", TEXT, False)),
) -> Relation:
    return Relation(
        xid=None,
        relation_oid=oid,
        namespace="public",
        relation_name=name,
        replica_identity=identity,
        columns=tuple(
            RelationColumn(COLUMN_FLAG_KEY if key else 0, col, type_oid, -1)
            for col, type_oid, key in columns
        ),
    )


def lsn(text: str) -> Lsn:
    return Lsn.parse(text)


def pack_records(records: list[tuple[bytes | None, bytes]]) -> bytearray:
    """Records in the packed form of bridge/native/packed.h, written independently of the C
    code: int32 big-endian key length (-1: none), key, int32 big-endian value length, value."""
    out = bytearray()
    for key, value in records:
        out += struct.pack("!i", -1 if key is None else len(key)) + (key or b"")
        out += struct.pack("!i", len(value)) + value
    return out
