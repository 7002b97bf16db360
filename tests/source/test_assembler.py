"""Unit tests for the streamed-transaction assembler (bridge.source.assembler).

Payloads are real pgoutput bytes from the independent test encoder, and the assembler decodes
them again with a real decoder, as it does on a live stream.
"""

from __future__ import annotations

import errno
import io
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.pgoutput.lsn import Lsn
from bridge.pgoutput.messages import (
    Begin,
    Commit,
    CommitPrepared,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    Relation,
    ReplicaIdentity,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
)
from bridge.source.assembler import (
    RECORD_OVERHEAD,
    StreamAssembler,
    in_stream_decoder,
)
from bridge.source.errors import SpillError, StreamProtocolError, TwoPhaseNotSupportedError
from tests.examples import examples
from tests.pgoutput.encoder import encode, make_tuple

PROTO = 4


def insert(xid: int | None, value: int, size: int = 1) -> Insert:
    return Insert(xid, 16384, make_tuple([("t", str(value).encode() * size)]))


def values(messages: list[LogicalMessage]) -> list[bytes | None]:
    return [m.new_tuple.raw(0) for m in messages if isinstance(m, Insert)]


class Feeder:
    """Feeds messages the way the source does: each with its encoded payload."""

    def __init__(self, threshold: int = 1 << 20, spill_dir: Path | None = None) -> None:
        self.assembler = StreamAssembler(
            in_stream_decoder(PROTO), spill_threshold=threshold, spill_dir=spill_dir
        )
        self.out: list[LogicalMessage] = []

    def __call__(self, *messages: LogicalMessage) -> list[LogicalMessage]:
        emitted: list[LogicalMessage] = []
        for message in messages:
            emitted += list(self.assembler.feed(message, encode(message)))
        self.out += emitted
        return emitted


def commit(xid: int, lsn: int) -> StreamCommit:
    return StreamCommit(xid, 0, Lsn(lsn), Lsn(lsn + 8), 777)


def test_assembler_passes_ordinary_transaction_through() -> None:
    feed = Feeder()
    txn: list[LogicalMessage] = [
        Begin(Lsn(100), 5, 9),
        insert(None, 1),
        Commit(0, Lsn(100), Lsn(108), 5),
    ]
    assert feed(*txn) == txn


def test_assembler_replays_stream_at_commit_as_begin_commit() -> None:
    feed = Feeder()
    rel = Relation(700, 16384, "public", "t", ReplicaIdentity.DEFAULT, ())
    assert feed(StreamStart(700, True), Origin(Lsn(1), "o"), rel, insert(700, 1)) == []
    assert feed(StreamStop(), StreamStart(700, False), insert(700, 2), StreamStop()) == []
    out = feed(commit(700, 5000))
    assert out[0] == Begin(Lsn(5000), 777, 700)
    assert out[1] == Origin(Lsn(1), "o")
    assert out[2] == rel
    assert values(out) == [b"1", b"2"]
    assert out[-1] == Commit(0, Lsn(5000), Lsn(5008), 777)
    assert feed.assembler.open_transactions == 0
    assert feed.assembler.stats.memory_bytes == 0
    assert feed.assembler.stats.streams_committed == 1


def test_assembler_emits_ordinary_transaction_between_stream_blocks_at_once() -> None:
    feed = Feeder()
    feed(StreamStart(700, True), insert(700, 1), StreamStop())
    ordinary = feed(Begin(Lsn(200), 5, 701), insert(None, 9), Commit(0, Lsn(200), Lsn(208), 5))
    assert values(ordinary) == [b"9"]
    assert values(feed(commit(700, 300))) == [b"1"]


def test_assembler_interleaved_streams_commit_in_commit_order() -> None:
    feed = Feeder()
    feed(StreamStart(1, True), insert(1, 1), StreamStop())
    feed(StreamStart(2, True), insert(2, 2), StreamStop())
    feed(StreamStart(1, False), insert(1, 11), StreamStop())
    assert values(feed(commit(2, 400))) == [b"2"]
    assert values(feed(commit(1, 500))) == [b"1", b"11"]


def test_assembler_stream_abort_emits_nothing_and_frees_memory() -> None:
    feed = Feeder()
    feed(StreamStart(5, True), insert(5, 1), insert(5, 2), StreamStop())
    assert feed.assembler.stats.memory_bytes > 0
    assert feed(StreamAbort(5, 5)) == []
    assert feed.out == []
    assert feed.assembler.open_transactions == 0
    assert feed.assembler.stats.memory_bytes == 0
    assert feed.assembler.stats.streams_aborted == 1


def test_assembler_subtransaction_abort_drops_only_that_subxid() -> None:
    feed = Feeder()
    feed(StreamStart(5, True), insert(5, 1), insert(6, 2), insert(7, 3), insert(5, 4))
    feed(StreamStop(), StreamAbort(5, 6))
    # A late change of an aborted subxid (the server never sends one) stays dropped too.
    feed(StreamStart(5, False), insert(6, 99), StreamStop())
    out = feed(commit(5, 900))
    assert values(out) == [b"1", b"3", b"4"]
    assert feed.assembler.stats.subtransactions_aborted == 1


def test_assembler_spills_past_threshold_and_replays_in_order(tmp_path: Path) -> None:
    threshold = 4096
    feed = Feeder(threshold=threshold, spill_dir=tmp_path)
    feed(StreamStart(42, True))
    for i in range(200):
        feed(insert(42 if i % 3 else 43, i, size=20))
        assert feed.assembler.stats.memory_bytes <= threshold
    feed(StreamStop(), StreamAbort(42, 43))
    out = feed(commit(42, 10_000))
    expected = [str(i).encode() * 20 for i in range(200) if i % 3]
    assert values(out) == expected
    stats = feed.assembler.stats
    assert stats.transactions_spilled == 1
    assert stats.bytes_spilled > threshold
    assert 0 < stats.peak_memory_bytes <= threshold
    assert stats.memory_bytes == 0


def test_assembler_spills_largest_open_transaction_first() -> None:
    record = len(encode(insert(1, 1, 100))) + RECORD_OVERHEAD
    feed = Feeder(threshold=4 * record)
    feed(StreamStart(1, True), *[insert(1, 1, 100)] * 3, StreamStop())
    feed(StreamStart(2, True), insert(2, 2, 100), StreamStop())
    stats = feed.assembler.stats
    assert stats.transactions_spilled == 0
    feed(StreamStart(2, False), insert(2, 2, 100), StreamStop())
    # Five records over a limit of four: transaction 1 (three records) moves to disk, 2 stays.
    assert stats.transactions_spilled == 1
    assert stats.memory_bytes == 2 * record
    assert values(feed(commit(1, 100))) == [b"1" * 100] * 3
    assert values(feed(commit(2, 200))) == [b"2" * 100] * 2


def test_assembler_aborted_spilled_stream_closes_its_file(tmp_path: Path) -> None:
    feed = Feeder(threshold=0, spill_dir=tmp_path)
    feed(StreamStart(3, True), insert(3, 1), StreamStop())
    assert feed.assembler.stats.transactions_spilled == 1
    feed(StreamAbort(3, 3))
    assert list(tmp_path.iterdir()) == []  # anonymous files: never visible, nothing left
    assert feed.out == []


def test_assembler_non_transactional_message_inside_stream_passes_through() -> None:
    feed = Feeder()
    note = Message(None, False, Lsn(50), "p", b"x")
    feed(StreamStart(3, True))
    assert feed(note) == [note]


def test_assembler_reset_forgets_open_streams() -> None:
    feed = Feeder()
    feed(StreamStart(3, True), insert(3, 1))
    feed.assembler.reset()
    assert not feed.assembler.in_stream
    assert feed.assembler.open_transactions == 0
    assert feed.assembler.stats.memory_bytes == 0


@pytest.mark.parametrize(
    "messages",
    [
        [StreamStop()],
        [StreamStart(1, False)],
        [StreamStart(1, True), StreamStart(2, True)],
        [StreamStart(1, True), StreamStop(), StreamStart(1, True)],
        [StreamStart(1, True), commit(1, 10)],
        [commit(1, 10)],
        [StreamStart(1, True), StreamAbort(1, 1)],
    ],
    ids=[
        "stop-without-start",
        "continuation-unseen",
        "nested-start",
        "first-segment-twice",
        "commit-inside-stream",
        "commit-unknown",
        "abort-inside-stream",
    ],
)
def test_assembler_rejects_out_of_order_stream_messages(messages: list[LogicalMessage]) -> None:
    feed = Feeder()
    with pytest.raises(StreamProtocolError):
        feed(*messages)
    assert feed.out == []


def test_assembler_rejects_two_phase_messages() -> None:
    feed = Feeder()
    with pytest.raises(TwoPhaseNotSupportedError) as info:
        feed(CommitPrepared(0, Lsn(1), Lsn(2), 3, 44, "gid"))
    assert info.value.xid == 44


@settings(max_examples=examples(150), deadline=None)
@given(
    ops=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(1, 60)), max_size=60),
    aborted=st.sets(st.integers(0, 8)),
    threshold=st.sampled_from([0, 64, 512, 1 << 20]),
    whole_abort=st.sets(st.integers(0, 2)),
)
def test_assembler_property_replay_equals_surviving_changes_in_order(
    ops: list[tuple[int, int, int]],
    aborted: set[int],
    threshold: int,
    whole_abort: set[int],
) -> None:
    """Three interleaved streams of changes by subtransactions, random subtransaction and whole
    aborts, any spill threshold: each committed stream replays exactly its surviving changes in
    the order received, memory stays within the threshold and ends at zero."""
    feed = Feeder(threshold=threshold)
    started: set[int] = set()
    expected: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    for n, (top, sub, size) in enumerate(ops):
        xid = 100 * (top + 1)
        subxid = xid + sub  # sub 0 is the top-level transaction itself
        feed(StreamStart(xid, top not in started))
        started.add(top)
        feed(insert(subxid, n, size))
        feed(StreamStop())
        assert feed.assembler.stats.memory_bytes <= max(threshold, 0)
        if (3 * top + sub) not in aborted or sub == 0:
            expected[top].append(str(n).encode() * size)
    for top in sorted(started):
        xid = 100 * (top + 1)
        for sub in range(1, 4):
            if 3 * top + sub in aborted:
                feed(StreamAbort(xid, xid + sub))
        if top in whole_abort:
            assert feed(StreamAbort(xid, xid)) == []
        else:
            out = feed(commit(xid, 1000 * (top + 1)))
            assert isinstance(out[0], Begin) and out[0].xid == xid
            assert isinstance(out[-1], Commit)
            assert values(out) == expected[top]
    assert feed.assembler.open_transactions == 0
    assert feed.assembler.stats.memory_bytes == 0


def test_assembler_spill_directory_gone_is_a_spill_error_naming_it(tmp_path: Path) -> None:
    """A directory that cannot take the spill file (gone, full, read-only) is a typed
    SpillError with the directory and the transaction, never a bare OSError."""
    missing = tmp_path / "gone"
    feed = Feeder(threshold=0, spill_dir=missing)
    feed(StreamStart(42, True))
    with pytest.raises(SpillError) as caught:
        feed(insert(42, 1, size=20))
    assert caught.value.directory == str(missing) and caught.value.xid == 42
    assert caught.value.errno == errno.ENOENT
    assert str(missing) in str(caught.value) and "xid 42" in str(caught.value)


def test_assembler_spill_write_failure_is_a_spill_error(tmp_path: Path) -> None:
    """Disk full while appending to an open spill file (the write raises ENOSPC)."""
    feed = Feeder(threshold=0, spill_dir=tmp_path)
    feed(StreamStart(7, True), insert(7, 1, size=20))
    (txn,) = feed.assembler._open.values()
    assert txn.spill is not None

    class Full(io.BytesIO):
        def write(self, data: Any) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

    txn.spill.close()
    txn.spill = Full()
    with pytest.raises(SpillError, match="No space left on device") as caught:
        feed(insert(7, 2, size=20))
    assert caught.value.errno == errno.ENOSPC


@pytest.mark.parametrize("threshold", [1 << 20, 256])  # in memory; spilled part-way
def test_assembler_replay_gives_each_change_the_wal_position_it_was_received_at(
    threshold: int, tmp_path: Path
) -> None:
    """source.lsn of a streamed transaction's change is its own XLogData position, though the
    change is replayed at Stream Commit (from memory or from the spill file)."""
    assembler = StreamAssembler(
        in_stream_decoder(PROTO), spill_threshold=threshold, spill_dir=tmp_path
    )
    received: dict[bytes, int] = {}
    for n, message in enumerate(
        [StreamStart(9, True)]
        + [insert(9, i, size=30) for i in range(12)]
        + [StreamStop(), StreamStart(9, False), insert(10, 99, size=30), StreamStop()]
    ):
        lsn = 0x2_0000_0000 + 0x40 * n
        if isinstance(message, Insert):
            received[message.new_tuple.raw(0) or b""] = lsn
        assert list(assembler.feed(message, encode(message), lsn)) == []
    replayed = []
    for message in assembler.feed(commit(9, 0x3_0000_0000), encode(commit(9, 0)), 0x3_0000_0040):
        replayed.append((message, assembler.message_lsn))
    assert (threshold < 1024) == (assembler.stats.transactions_spilled == 1)
    begin, *changes, end = replayed
    assert isinstance(begin[0], Begin) and begin[1] == 0x3_0000_0040
    assert isinstance(end[0], Commit) and end[1] == 0x3_0000_0040
    assert [lsn for _, lsn in changes] == sorted(received.values())
    for message, lsn in changes:
        assert isinstance(message, Insert)
        assert received[message.new_tuple.raw(0) or b""] == lsn
