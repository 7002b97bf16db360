"""Hypothesis strategies for pgoutput messages, shared by the round-trip and fuzz tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

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
    Truncate,
    TupleData,
    Type,
    Update,
)

from .encoder import make_tuple

u8 = st.integers(0, 0xFF)
u32 = st.integers(0, 0xFFFF_FFFF)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
lsns = st.integers(0, 2**64 - 1).map(Lsn)
# Names as PostgreSQL allows them: any text without NUL (a NUL would end the C string).
names = st.text(st.characters(blacklist_characters="\x00", codec="utf-8"), max_size=70)

column = st.one_of(
    st.tuples(st.sampled_from(["n", "u"]), st.none()),
    st.tuples(st.sampled_from(["t", "b"]), st.binary(max_size=64)),
)
tuples: st.SearchStrategy[TupleData] = st.lists(column, max_size=12).map(make_tuple)


def _xid_carrying(in_stream: bool) -> st.SearchStrategy[LogicalMessage]:
    """Messages whose layout depends on being inside a stream; xid set iff ``in_stream``."""
    xid: st.SearchStrategy[Any] = u32 if in_stream else st.none()
    rel_cols = st.lists(st.builds(RelationColumn, u8, names, u32, i32), max_size=10).map(tuple)
    return st.one_of(
        st.builds(Relation, xid, u32, names, names, st.sampled_from(ReplicaIdentity), rel_cols),
        st.builds(Type, xid, u32, names, names),
        st.builds(Insert, xid, u32, tuples),
        st.one_of(
            st.builds(Update, xid, u32, st.none(), st.none(), tuples),
            st.builds(Update, xid, u32, st.sampled_from(["K", "O"]), tuples, tuples),
        ),
        st.builds(Delete, xid, u32, st.sampled_from(["K", "O"]), tuples),
        st.builds(Truncate, xid, st.integers(0, 3), st.lists(u32, max_size=8).map(tuple)),
        st.builds(Message, xid, st.booleans(), lsns, names, st.binary(max_size=64)),
    )


def framing(version: int, parallel: bool = False) -> st.SearchStrategy[LogicalMessage]:
    """Messages whose layout does not depend on the stream state, valid at ``version``."""
    options: list[st.SearchStrategy[Any]] = [
        st.builds(Begin, lsns, i64, u32),
        st.builds(Commit, u8, lsns, lsns, i64),
        st.builds(Origin, lsns, names),
    ]
    if version >= 2:
        options.append(st.builds(StreamCommit, u32, u8, lsns, lsns, i64))
        if parallel:
            options.append(st.builds(StreamAbort, u32, u32, lsns, i64))
        else:
            options.append(st.builds(StreamAbort, u32, u32))
    if version >= 3:
        options += [
            st.builds(BeginPrepare, lsns, lsns, i64, u32, names),
            st.builds(Prepare, u8, lsns, lsns, i64, u32, names),
            st.builds(CommitPrepared, u8, lsns, lsns, i64, u32, names),
            st.builds(RollbackPrepared, u8, lsns, lsns, i64, i64, u32, names),
            st.builds(StreamPrepare, u8, lsns, lsns, i64, u32, names),
        ]
    return st.one_of(*options)


outside_stream = _xid_carrying(False)
inside_stream = _xid_carrying(True)
