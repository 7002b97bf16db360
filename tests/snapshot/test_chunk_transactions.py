"""Exactly once for the initial snapshot (bridge.snapshot.chunk_transactions): a chunk's records
are committed in one Kafka transaction with its progress record, never with another chunk's
partial rows, and what is in flight at a stop is aborted. The real thing, through SIGKILLs
and a read_committed consumer, is tests/integration/test_snapshot_exactly_once.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from bridge.sink.transactions import ProducerFencedError
from bridge.snapshot.chunk_transactions import ChunkTransactions, chunk_ranges, progress_record


@dataclass
class Producer:
    """The transactional calls of confluent-kafka's Producer, logged; ``fence`` makes the next
    commit fail as a fenced producer's does."""

    log: list[str]
    name: str
    fence: bool = False
    aborted: bool = False
    #: When set, a commit waits for it: the test decides when a commit under way ends.
    release: threading.Event | None = None

    def init_transactions(self, timeout: float) -> None:
        self.log.append(f"{self.name} init")

    def begin_transaction(self) -> None:
        self.log.append(f"{self.name} begin")

    def commit_transaction(self, timeout: float) -> None:
        if self.release is not None:
            assert self.release.wait(timeout), "the test never released this commit"
        if self.fence:
            raise KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
        self.log.append(f"{self.name} commit")

    def abort_transaction(self, timeout: float) -> None:
        self.log.append(f"{self.name} abort")
        self.aborted = True


@dataclass
class Lane:
    log: list[str]
    name: str
    records: list[tuple[str, bytes | None]] = field(default_factory=list)
    closed: bool = False
    abandoned: bool = False

    def __post_init__(self) -> None:
        self.producer = Producer(self.log, self.name)

    @property
    def outstanding(self) -> int:
        return 0

    def publish(self, topic: str, key: bytes | None, value: bytes | None,
                on_delivered: Callable[[], None]) -> None:  # fmt: skip
        self.log.append(f"{self.name} record {topic}")
        self.records.append((topic, key))

    def publish_records(self, topic: str, records: Sequence[tuple[bytes | None, bytes | None]],
                        on_delivered: Callable[[], None]) -> None:  # fmt: skip
        for key, value in records:
            self.publish(topic, key, value, on_delivered)

    def publish_packed(self, topic: str, pack: bytearray, count: int,
                       on_delivered: Callable[[], None]) -> None:  # fmt: skip
        raise AssertionError("not used here")

    def produce_offsets(self, topic: str, key: bytes, value: bytes) -> None:
        self.log.append(f"{self.name} progress {key.decode()} {json.loads(value)['chunks']}")

    def fatal_error(self) -> str | None:
        return None

    def send_pending(self) -> None:
        pass

    def poll(self, timeout: float = 0.0) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        self.log.append(f"{self.name} flush")
        return 0

    def close(self, timeout: float = 30.0) -> int:
        if self.producer.aborted and self.records:
            # As KafkaPublisher.close(): the aborted records' failed deliveries are raised.
            raise RuntimeError(f"delivery to {self.records[0][0]} failed: _STATE")
        self.closed = True
        return 0

    def abandon(self, timeout: float) -> int:
        self.closed = self.abandoned = True
        return 0


@dataclass
class Count:
    key: tuple[str, int]
    lane: int | None = None


def _lanes(count: int) -> tuple[ChunkTransactions, list[Lane], list[str]]:
    log: list[str] = []
    lanes: list[Lane] = []

    def make(index: int) -> Any:
        lanes.append(Lane(log, f"lane{index}"))
        return lanes[-1]

    transactions = ChunkTransactions(make, slot="s", offsets_topic="offsets")
    transactions.start(count)
    return transactions, lanes, log


def _progress(count: Count) -> list[tuple[bytes, bytes]]:
    assert count.lane is not None
    return [progress_record("s", "snap1", count.key[0], count.lane, {count.key[1]})]


def _commit(transactions: ChunkTransactions, ready: list[Count]) -> list[Count]:
    """Start the commits, wait for them, reap them: the chunks committed."""
    done: list[Count] = []
    transactions.commit(ready, _progress, done.append)
    transactions.drain()
    # As the copier does: what was reaped is not ready again.
    transactions.commit([c for c in ready if c not in done], _progress, done.append)
    return done


def test_each_chunk_commits_alone_with_its_progress_record_after_its_rows() -> None:
    transactions, lanes, log = _lanes(2)
    assert log == ["lane0 init", "lane1 init"]  # both fenced before the first row
    a, b = Count(("public.t", 0)), Count(("public.t", 1))
    transactions.publisher_for(a).publish("t", b"1", b"", lambda: None)
    transactions.publisher_for(b).publish("t", b"2", b"", lambda: None)
    transactions.publisher_for(a).publish("t", b"3", b"", lambda: None)
    assert (a.lane, b.lane) == (0, 1)  # two chunks in flight: two transactions
    log.clear()
    committed = _commit(transactions, [a])
    # a's transaction: its rows, then its progress record, committed; b's still open.
    assert log == ["lane0 progress s/snapshot/0/public.t [[0, 0]]", "lane0 commit"]
    assert committed == [a] and a.lane is None
    assert lanes[0].records == [("t", b"1"), ("t", b"3")] and lanes[1].records == [("t", b"2")]
    # The next chunk takes the free lane and begins a new transaction there.
    c = Count(("public.u", 0))
    log.clear()
    transactions.publisher_for(c)
    assert c.lane == 0 and log == ["lane0 begin"]


def test_a_chunk_without_rows_still_commits_its_progress() -> None:
    transactions, _, log = _lanes(1)
    empty = Count(("public.t", 3))
    log.clear()
    assert _commit(transactions, [empty]) == [empty]
    assert log == ["lane0 begin", "lane0 progress s/snapshot/0/public.t [[3, 3]]", "lane0 commit"]


def test_a_chunk_finding_every_lane_busy_takes_the_lane_of_a_commit_that_ended() -> None:
    """The chunk whose commit it reaped is still on the copier's ready list (commit() reports
    it): it must not be committed again (seen on a fresh 3-broker cluster: the copier's
    KeyError)."""
    transactions, lanes, _ = _lanes(2)
    first, second, third = Count(("t", 0)), Count(("t", 1)), Count(("t", 2))
    transactions.publisher_for(first)
    transactions.publisher_for(second)
    reported: list[Count] = []
    # The test ends the commit, not the pool: one ending before commit() returns would be
    # reported at once, and this would test nothing (CI saw that race).
    lanes[0].producer.release = threading.Event()
    transactions.commit([first], _progress, reported.append)  # started on the pool
    assert reported == []
    lanes[0].producer.release.set()
    transactions.publisher_for(third)  # waits for that commit, reaps it, takes its lane
    assert third.lane == 0 and len(lanes) == 2  # no lane beyond those started (and fenced)
    commits = transactions.commits
    transactions.commit([first], _progress, reported.append)  # still ready for the copier
    assert reported == [first] and transactions.commits == commits  # not committed twice
    with pytest.raises(RuntimeError, match="all 2 snapshot lanes carry chunks being read"):
        transactions.publisher_for(Count(("t", 3)))  # the copier starts enough lanes


def test_chunks_read_to_their_end_between_two_ticks_are_committed_to_free_a_lane() -> None:
    """Small chunks: a worker ends several between two of the copier's service ticks, each
    keeping its lane until the copier starts its commit. The chunk finding every lane taken
    has the copier settle them now, instead of ending the snapshot."""
    transactions, lanes, _ = _lanes(2)
    read, reading = Count(("t", 0)), Count(("t", 1))
    transactions.publisher_for(read)
    transactions.publisher_for(reading)  # every lane taken, no commit under way
    reported: list[Count] = []
    settled: list[str] = []

    def settle_ready() -> None:  # the copier's _record_finished: the chunk read to its end
        settled.append("settle")
        transactions.commit([c for c in (read,) if c not in reported], _progress,
                            reported.append)  # fmt: skip

    new = Count(("t", 2))
    transactions.publisher_for(new, settle_ready)
    assert settled == ["settle"] and new.lane == 0 and len(lanes) == 2
    transactions.commit([], _progress, reported.append)
    assert reported == [read]  # committed once, reported once
    with pytest.raises(RuntimeError, match="all 2 snapshot lanes carry chunks being read"):
        transactions.publisher_for(Count(("t", 3)), settle_ready)  # nothing left to settle


def test_a_stop_aborts_the_chunks_in_flight_and_closes_the_lanes() -> None:
    transactions, lanes, log = _lanes(2)
    a = Count(("t", 0))
    transactions.publisher_for(a).publish("t", b"1", b"", lambda: None)
    log.clear()
    transactions.close()  # the aborted records' failed deliveries are not an error here
    assert log == ["lane0 abort"]  # lane1 has no transaction open
    assert all(lane.closed for lane in lanes)
    assert lanes[0].abandoned and not lanes[1].abandoned  # lane1 closed (flushed) as usual


def test_a_fenced_commit_is_a_typed_error_and_records_nothing() -> None:
    transactions, lanes, _ = _lanes(1)
    a = Count(("t", 0))
    transactions.publisher_for(a)
    lanes[0].producer.fence = True
    with pytest.raises(ProducerFencedError, match="another pgbridge instance took over slot s"):
        _commit(transactions, [a])


def test_chunk_ranges_are_compact() -> None:
    assert chunk_ranges({5, 0, 1, 2, 7, 6}) == [[0, 2], [5, 7]]
    assert chunk_ranges([]) == []
    key, value = progress_record("s", "id1", "public.t", 2, {0, 1, 3})
    assert key == b"s/snapshot/2/public.t"
    assert json.loads(value) == {
        "slot": "s",
        "snapshot": "id1",
        "table": "public.t",
        "chunks": [[0, 1], [3, 3]],
    }
