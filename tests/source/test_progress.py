"""Unit tests for stream positions and resend filtering (bridge.source.progress)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.pgoutput.lsn import Lsn
from bridge.pgoutput.messages import (
    Begin,
    Commit,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    Relation,
    ReplicaIdentity,
)
from bridge.source.errors import StreamProtocolError
from bridge.source.progress import Progress
from tests.examples import examples
from tests.pgoutput.encoder import make_tuple

REL = Relation(None, 1, "public", "t", ReplicaIdentity.DEFAULT, ())


def ins(value: int) -> Insert:
    return Insert(None, 1, make_tuple([("t", str(value).encode())]))


def txn(commit: int, *values: int, xid: int = 7) -> list[LogicalMessage]:
    return [
        Begin(Lsn(commit), 0, xid),
        REL,
        *[ins(v) for v in values],
        Commit(0, Lsn(commit), Lsn(commit + 8), 0),
    ]


def admitted(progress: Progress, messages: list[LogicalMessage]) -> list[LogicalMessage]:
    return [m for m in messages if progress.admit(m)]


def test_progress_flush_follows_acknowledgements_and_never_moves_back() -> None:
    progress = Progress(Lsn(100))
    admitted(progress, txn(200, 1))
    assert progress.flush_position(False) == 100
    progress.acknowledge(Lsn(208))
    assert progress.flush_position(False) == 208
    progress.acknowledge(Lsn(150))
    assert progress.flush_position(False) == 208


def test_progress_keepalive_advances_flush_only_when_settled() -> None:
    progress = Progress(Lsn(100))
    progress.admit(Begin(Lsn(200), 0, 7))
    progress.on_keepalive(Lsn(500))
    assert progress.flush_position(False) == 100  # a transaction is half emitted
    admitted(progress, [ins(1), Commit(0, Lsn(200), Lsn(208), 0)])
    assert progress.flush_position(False) == 100  # emitted but not acknowledged
    progress.acknowledge(Lsn(208))
    assert progress.flush_position(True) == 208  # a streamed transaction is buffered
    assert progress.flush_position(False) == 500
    assert progress.received == 500


def test_progress_idle_source_advances_to_keepalive_end() -> None:
    progress = Progress(Lsn(100))
    progress.on_keepalive(Lsn(900))
    assert progress.flush_position(False) == 900
    assert progress.resume_lsn == 900


def test_progress_non_transactional_message_must_be_acknowledged() -> None:
    progress = Progress(Lsn(100))
    assert progress.admit(Message(None, False, Lsn(300), "p", b""))
    progress.on_keepalive(Lsn(400))
    assert progress.flush_position(False) == 100
    progress.acknowledge(Lsn(300))
    assert progress.flush_position(False) == 400


def test_progress_drops_resent_transactions_after_reconnect() -> None:
    progress = Progress(Lsn(0))
    first = admitted(progress, txn(200, 1) + txn(300, 2))
    assert len(first) == 8
    progress.reconnected()
    again = admitted(progress, txn(200, 1) + txn(300, 2) + txn(400, 3))
    assert again == txn(400, 3)
    assert progress.duplicates_dropped == 8


def test_progress_resumes_half_emitted_transaction_after_its_emitted_changes() -> None:
    progress = Progress(Lsn(0))
    full: list[LogicalMessage] = [
        Begin(Lsn(500), 0, 7),
        Origin(Lsn(1), "o"),
        REL,
        ins(1),
        ins(2),
        ins(3),
    ]
    full.append(Commit(0, Lsn(500), Lsn(508), 0))
    assert admitted(progress, full[:4]) == full[:4]  # Begin, Origin, Relation, change 1
    progress.reconnected()
    # Resent from the start: Begin, Origin and change 1 are dropped; the Relation (resent once
    # per connection) passes as a harmless cache update.
    assert admitted(progress, full) == [REL, ins(2), ins(3), full[-1]]


def test_progress_resend_shorter_than_emitted_is_an_error() -> None:
    progress = Progress(Lsn(0))
    admitted(progress, [Begin(Lsn(500), 0, 7), ins(1), ins(2)])
    progress.reconnected()
    with pytest.raises(StreamProtocolError, match="short"):
        admitted(progress, [Begin(Lsn(500), 0, 7), ins(1), Commit(0, Lsn(500), Lsn(508), 0)])


def test_progress_rejects_begin_inside_open_transaction() -> None:
    progress = Progress(Lsn(0))
    progress.admit(Begin(Lsn(500), 0, 7))
    with pytest.raises(StreamProtocolError):
        progress.admit(Begin(Lsn(600), 0, 8))


def test_progress_drops_resent_non_transactional_message() -> None:
    progress = Progress(Lsn(0))
    note = Message(None, False, Lsn(300), "p", b"")
    assert progress.admit(note)
    progress.reconnected()
    assert not progress.admit(note)
    assert admitted(progress, txn(400, 1)) == txn(400, 1)


@settings(max_examples=examples(300), deadline=None)
@given(
    sizes=st.lists(st.integers(0, 4), min_size=1, max_size=8),
    data=st.data(),
)
def test_progress_property_reconnect_anywhere_emits_everything_exactly_once(
    sizes: list[int], data: st.DataObject
) -> None:
    """Cut the stream after any message, confirm any transaction completed before the cut,
    resend from there (as the server does) and possibly cut again: the emitted changes,
    Begins and Commits are the original ones, each exactly once, in order."""
    transactions = [
        txn(1000 * (i + 1), *range(10 * i, 10 * i + n), xid=i) for i, n in enumerate(sizes)
    ]
    stream = [m for t in transactions for m in t]
    progress = Progress(Lsn(0))
    out: list[LogicalMessage] = []
    confirmed_txn = 0  # transactions before this index are confirmed (server skips them)
    position = 0  # how far into `stream` the current connection has sent
    for _ in range(data.draw(st.integers(0, 3))):  # that many broken connections
        cut = data.draw(st.integers(position, len(stream)))
        out += admitted(progress, stream[position:cut])
        done = sum(1 for m in out if isinstance(m, Commit))
        confirmed_txn = data.draw(st.integers(confirmed_txn, max(confirmed_txn, done)))
        progress.reconnected()
        position = sum(len(t) for t in transactions[:confirmed_txn])
    out += admitted(progress, stream[position:])
    without_relations = [m for m in out if not isinstance(m, Relation)]
    assert without_relations == [m for m in stream if not isinstance(m, Relation)]
