"""Typed logical replication messages, named as in PostgreSQL's "Logical Replication Message
Formats" chapter.

Frozen, slotted dataclasses: cheap to build on the hot path, safe to share between stages.
Fields that the protocol only sends inside a streamed transaction (the ``Xid`` of Relation, Type,
Insert, Update, Delete, Truncate and Message, protocol 2 and later) are ``None`` outside one.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from bridge.pgoutput.lsn import Lsn


class ReplicaIdentity(StrEnum):
    """``pg_class.relreplident`` as the Relation message carries it."""

    DEFAULT = "d"  # primary key columns
    NOTHING = "n"
    FULL = "f"  # every column
    INDEX = "i"  # columns of the chosen unique index


class ColumnKind(StrEnum):
    """The kind byte of one column in TupleData."""

    NULL = "n"
    UNCHANGED_TOAST = "u"  # an unchanged TOASTed value the server did not send
    TEXT = "t"
    BINARY = "b"


#: Relation column flag: the column is part of the replica identity (the key).
COLUMN_FLAG_KEY: Final = 1

#: Truncate option bits.
TRUNCATE_CASCADE: Final = 1
TRUNCATE_RESTART_IDENTITY: Final = 2


@dataclass(frozen=True, slots=True)
class TupleData:
    """The column values of one row, left as slices of the message until asked for.

    ``kinds`` holds one ASCII kind byte per column (``n``, ``u``, ``t``, ``b``); ``spans`` holds
    a ``(start, end)`` pair of offsets into ``buffer`` per column, ``(0, 0)`` for ``n`` and ``u``.
    Nothing is copied until :meth:`raw` or :meth:`values` is called.
    """

    kinds: bytes
    buffer: bytes
    spans: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.kinds)

    def kind(self, index: int) -> ColumnKind:
        return ColumnKind(chr(self.kinds[index]))

    def raw(self, index: int) -> bytes | None:
        """The value's bytes (text or binary form), or ``None`` for NULL and unchanged TOAST."""
        k = self.kinds[index]
        if k == 0x74 or k == 0x62:  # 't' or 'b'
            return self.buffer[self.spans[2 * index] : self.spans[2 * index + 1]]
        return None

    def values(self) -> tuple[bytes | None, ...]:
        # One pass over kinds and (start, end) pairs; called for every row downstream.
        buf = self.buffer
        pairs = iter(self.spans)
        return tuple(
            buf[start:end] if k == 0x74 or k == 0x62 else None
            for k, start, end in zip(self.kinds, pairs, pairs, strict=True)
        )

    def is_unchanged_toast(self, index: int) -> bool:
        return self.kinds[index] == 0x75  # 'u'


# --- transaction framing -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Begin:
    final_lsn: Lsn  # the commit's LSN
    commit_ts: int  # microseconds since 2000-01-01 UTC
    xid: int


@dataclass(frozen=True, slots=True)
class Commit:
    flags: int
    commit_lsn: Lsn
    end_lsn: Lsn  # the position to confirm once this transaction is delivered
    commit_ts: int


@dataclass(frozen=True, slots=True)
class Origin:
    commit_lsn: Lsn
    name: str


# --- catalog -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RelationColumn:
    flags: int  # COLUMN_FLAG_KEY when part of the replica identity
    name: str
    type_oid: int
    type_modifier: int  # atttypmod, -1 when none

    @property
    def is_key(self) -> bool:
        return bool(self.flags & COLUMN_FLAG_KEY)


@dataclass(frozen=True, slots=True)
class Relation:
    xid: int | None
    relation_oid: int
    namespace: str  # "" means pg_catalog, as the protocol says
    relation_name: str
    replica_identity: ReplicaIdentity
    columns: tuple[RelationColumn, ...]


@dataclass(frozen=True, slots=True)
class Type:
    xid: int | None
    type_oid: int
    namespace: str
    type_name: str


# --- data ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Insert:
    xid: int | None
    relation_oid: int
    new_tuple: TupleData


@dataclass(frozen=True, slots=True)
class Update:
    xid: int | None
    relation_oid: int
    # "K": old_tuple holds the old key (the key changed); "O": the whole old row (REPLICA
    # IDENTITY FULL); None: no old tuple was sent.
    old_kind: str | None
    old_tuple: TupleData | None
    new_tuple: TupleData


@dataclass(frozen=True, slots=True)
class Delete:
    xid: int | None
    relation_oid: int
    old_kind: str  # "K" or "O"
    old_tuple: TupleData


@dataclass(frozen=True, slots=True)
class Truncate:
    xid: int | None
    options: int  # TRUNCATE_CASCADE | TRUNCATE_RESTART_IDENTITY
    relation_oids: tuple[int, ...]

    @property
    def cascade(self) -> bool:
        return bool(self.options & TRUNCATE_CASCADE)

    @property
    def restart_identity(self) -> bool:
        return bool(self.options & TRUNCATE_RESTART_IDENTITY)


@dataclass(frozen=True, slots=True)
class Message:
    """A ``pg_logical_emit_message`` record."""

    xid: int | None
    transactional: bool
    lsn: Lsn
    prefix: str
    content: bytes


# --- streamed (in-progress) transactions, protocol 2+ ----------------------------------------


@dataclass(frozen=True, slots=True)
class StreamStart:
    xid: int
    first_segment: bool


@dataclass(frozen=True, slots=True)
class StreamStop:
    pass


@dataclass(frozen=True, slots=True)
class StreamCommit:
    xid: int
    flags: int
    commit_lsn: Lsn
    end_lsn: Lsn
    commit_ts: int


@dataclass(frozen=True, slots=True)
class StreamAbort:
    xid: int  # the top-level transaction
    subxid: int  # equal to xid when the whole transaction aborted
    # Protocol 4 with streaming = parallel only:
    abort_lsn: Lsn | None = None
    abort_ts: int | None = None


# --- two-phase commit, protocol 3+ -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BeginPrepare:
    prepare_lsn: Lsn
    end_lsn: Lsn
    prepare_ts: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class Prepare:
    flags: int
    prepare_lsn: Lsn
    end_lsn: Lsn
    prepare_ts: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class CommitPrepared:
    flags: int
    commit_lsn: Lsn
    end_lsn: Lsn
    commit_ts: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class RollbackPrepared:
    flags: int
    prepare_end_lsn: Lsn
    rollback_end_lsn: Lsn
    prepare_ts: int
    rollback_ts: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class StreamPrepare:
    flags: int
    prepare_lsn: Lsn
    end_lsn: Lsn
    prepare_ts: int
    xid: int
    gid: str


LogicalMessage = (
    Begin
    | Commit
    | Origin
    | Relation
    | Type
    | Insert
    | Update
    | Delete
    | Truncate
    | Message
    | StreamStart
    | StreamStop
    | StreamCommit
    | StreamAbort
    | BeginPrepare
    | Prepare
    | CommitPrepared
    | RollbackPrepared
    | StreamPrepare
)
