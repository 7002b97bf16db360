"""Pure pgoutput decoder: bytes in, typed messages out. Standard library only, no I/O.

``Decoder`` turns one XLogData payload into one message of :mod:`bridge.pgoutput.messages`;
``parse_copy_data`` and ``standby_status_update`` handle the COPY BOTH framing around it.
"""

from bridge.pgoutput.copyboth import (
    PrimaryKeepalive,
    XLogData,
    parse_copy_data,
    standby_status_update,
)
from bridge.pgoutput.decoder import MAX_PROTOCOL_VERSION, Decoder
from bridge.pgoutput.errors import DecodeError
from bridge.pgoutput.lsn import INVALID_LSN, Lsn
from bridge.pgoutput.messages import (
    COLUMN_FLAG_KEY,
    TRUNCATE_CASCADE,
    TRUNCATE_RESTART_IDENTITY,
    Begin,
    BeginPrepare,
    ColumnKind,
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

__all__ = [
    "COLUMN_FLAG_KEY",
    "INVALID_LSN",
    "MAX_PROTOCOL_VERSION",
    "TRUNCATE_CASCADE",
    "TRUNCATE_RESTART_IDENTITY",
    "Begin",
    "BeginPrepare",
    "ColumnKind",
    "Commit",
    "CommitPrepared",
    "DecodeError",
    "Decoder",
    "Delete",
    "Insert",
    "LogicalMessage",
    "Lsn",
    "Message",
    "Origin",
    "Prepare",
    "PrimaryKeepalive",
    "Relation",
    "RelationColumn",
    "ReplicaIdentity",
    "RollbackPrepared",
    "StreamAbort",
    "StreamCommit",
    "StreamPrepare",
    "StreamStart",
    "StreamStop",
    "Truncate",
    "TupleData",
    "Type",
    "Update",
    "XLogData",
    "parse_copy_data",
    "standby_status_update",
]
