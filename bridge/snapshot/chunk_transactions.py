"""Exactly once for the initial snapshot (``exactly.once.support = required``): each chunk's
records in a Kafka transaction, committed with the chunk's progress record.

At least once, the snapshot records a chunk (:mod:`bridge.snapshot.state`) only after Kafka
acknowledged all of its rows, and a restart copies every chunk not recorded again: the rows of
a chunk a crash cut short are in Kafka twice. Here they are not, for a read_committed reader:

* A chunk's records (rows and dead letters) go into a Kafka transaction that commits only once
  the chunk was read to its end, together with a **progress record** in the offsets topic (key
  ``<slot>/snapshot/<table>``, value: the snapshot's id and the table's chunks committed so
  far). A crash before the commit leaves the transaction open; the restart's producers, with
  the same transactional.ids, fence it and Kafka aborts it: its rows are never visible.
* A crash after the commit, before the state file recorded the chunk, is covered by the
  progress records: a resumed snapshot reads them (read_committed, :func:`committed_chunks`)
  and adds their chunks to the state file's before it plans what is left.

A producer has one open transaction at a time and the workers copy chunks in parallel, so
chunks go to **lanes**, transactional producers ``<transactional.id>-snapshot-<n>``, each
carrying one chunk until its commit. A worker hands its batches over in chunk order, so at
most one chunk per worker is in flight, plus the one whose last row the copier holds back (it
may be the snapshot's ``last``), plus the chunks read to their end whose commit the copier has
not started yet: workers + 1 lanes, all started (fencing what a crashed run left open) before
the first row, hold when every chunk read to its end is committing. The copier starts those
commits on its service tick; a chunk that finds every lane taken first has it start them now
(``settle_ready``): small chunks read quickly end several between two ticks. The commits are
the coordinator's, one chunk at a time: the records of the committed set always precede the
progress record that lists them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

from bridge.sink.topic_reader import TopicReadError, read_topic
from bridge.sink.transactions import (
    KafkaTransactionError,
    call_transactional,
    ensure_offsets_topic,
)
from bridge.snapshot.epochs import DrainablePublisher

logger = logging.getLogger(__name__)

__all__ = [
    "SNAPSHOT_TRANSACTION_TIMEOUT_MS",
    "ChunkTransactions",
    "LanePublisher",
    "SnapshotTransactions",
    "chunk_ranges",
    "committed_chunks",
    "progress_record",
]

ChunkKey = tuple[str, int]  # (table, chunk index)

_COMMIT_THREADS = 8  # at most this many lanes' commits under way at once

#: A lane's transaction.timeout.ms: a chunk's transaction stays open while it is copied (at
#: most the broker's transaction.max.timeout.ms, 15 minutes by default). A crashed run's open
#: transactions are aborted sooner, when the next run's lanes start.
SNAPSHOT_TRANSACTION_TIMEOUT_MS = 600_000


class LanePublisher(DrainablePublisher, Protocol):
    """A lane's publisher (:class:`~bridge.sink.publisher.KafkaPublisher` with a
    transactional.id)."""

    @property
    def producer(self) -> Any: ...

    def produce_offsets(self, topic: str, key: bytes, value: bytes) -> None: ...

    def fatal_error(self) -> str | None: ...

    def send_pending(self) -> None: ...

    def close(self, timeout: float = 30.0) -> int: ...

    def abandon(self, timeout: float) -> int: ...


class ChunkCount(Protocol):
    """The copier's count of a chunk in flight: which chunk, and its lane."""

    key: ChunkKey
    lane: int | None


_Count = TypeVar("_Count", bound=ChunkCount)


def chunk_ranges(indices: Iterable[int]) -> list[list[int]]:
    """``{0, 1, 2, 5}`` -> ``[[0, 2], [5, 5]]``: a table's chunks, compact in its record."""
    ranges: list[list[int]] = []
    for index in sorted(set(indices)):
        if ranges and ranges[-1][1] == index - 1:
            ranges[-1][1] = index
        else:
            ranges.append([index, index])
    return ranges


def progress_key(slot: str, table: str, lane: int) -> bytes:
    # A slot name is [a-z0-9_]: no streaming offsets record (key: the slot) has a "/".
    return f"{slot}/snapshot/{lane}/{table}".encode()


def progress_record(
    slot: str, snapshot_id: str, table: str, lane: int, chunks: Iterable[int]
) -> tuple[bytes, bytes]:
    """The offsets topic's record of ``table``'s ``chunks`` committed in snapshot
    ``snapshot_id`` of ``slot``, written by ``lane``. A key per lane: lanes commit
    concurrently, and each lane's newest record holds every chunk it committed (those it
    committed before were recorded done when it took this one), so the union of the lanes'
    newest records is complete whatever the compaction kept."""
    value = {"slot": slot, "snapshot": snapshot_id, "table": table, "chunks": chunk_ranges(chunks)}
    return progress_key(slot, table, lane), json.dumps(value, separators=(",", ":")).encode()


def committed_chunks(
    client: dict[str, str], topic: str, slot: str, snapshot_id: str
) -> dict[str, set[int]]:
    """Per table, the chunks Kafka transactions of snapshot ``snapshot_id`` committed (read
    read_committed from the offsets topic to its end; a missing topic: none)."""
    settings = dict(client)
    bootstrap = settings.pop("bootstrap.servers")
    settings["isolation.level"] = "read_committed"
    prefix = f"{slot}/snapshot/".encode()
    found: dict[str, set[int]] = {}
    try:
        for message in read_topic(bootstrap, topic, settings, timeout=30.0):
            key, value = message.key(), message.value()
            if not key or not key.startswith(prefix) or not value:
                continue
            record = json.loads(value)
            if record.get("snapshot") != snapshot_id:
                continue  # an earlier snapshot of the slot
            chunks = found.setdefault(str(record["table"]), set())
            for low, high in record["chunks"]:
                chunks.update(range(int(low), int(high) + 1))
    except TopicReadError as exc:
        if exc.reason == "no such topic":
            return {}
        raise KafkaTransactionError(f"reading offsets topic {topic}: {exc.reason}") from None
    return found


class _Lane:
    __slots__ = ("chunk", "commit", "open", "publisher")

    def __init__(self, publisher: LanePublisher) -> None:
        self.publisher = publisher
        self.chunk: ChunkCount | None = None  # the chunk it carries, until its commit ended
        self.open = False  # a transaction is begun
        self.commit: Future[None] | None = None  # its commit, under way on the pool


class ChunkTransactions:
    """The lanes of one snapshot run. The copier's thread calls everything; a lane's commit
    (which waits for its records' acknowledgements) runs on a pool thread meanwhile, so the
    other lanes keep being fed."""

    def __init__(
        self,
        make_lane: Callable[[int], LanePublisher],
        *,
        slot: str,
        offsets_topic: str,
        timeout_s: float = 60.0,
    ) -> None:
        """``make_lane(n)``: lane ``n``'s transactional publisher."""
        self._make_lane = make_lane
        self._slot = slot
        self._offsets_topic = offsets_topic
        self._timeout = timeout_s
        self._lanes: list[_Lane] = []
        self._pool = ThreadPoolExecutor(max_workers=_COMMIT_THREADS, thread_name_prefix="commit")
        self._committed: list[ChunkCount] = []  # commits ended, not yet told to the copier
        self.commits = 0

    @property
    def lanes(self) -> int:
        return len(self._lanes)

    def start(self, lanes: int) -> None:
        """Start ``lanes`` lanes: each fences an older producer of its transactional.id, and
        Kafka aborts what that one left open (or completes its commit), all at once: each
        waits for round trips. Every lane a crashed run used must be started before the
        offsets topic is read: a transaction left open there hides what was committed after
        it from a read_committed reader."""
        added = [_Lane(self._make_lane(i)) for i in range(len(self._lanes), lanes)]
        self._lanes.extend(added)
        started = [
            self._pool.submit(
                self._call, lane, lane.publisher.producer.init_transactions, self._timeout
            )
            for lane in added
        ]
        for future in started:
            future.result()

    # -- what the copier calls ------------------------------------------------------------------

    def publisher_for(
        self, count: ChunkCount, settle_ready: Callable[[], None] | None = None
    ) -> DrainablePublisher:
        """The publisher of the chunk's lane (for a chunk that has none yet, a free lane, its
        transaction begun; when every lane is busy, once a commit under way ends: when none is
        under way, ``settle_ready()`` starts the commits of the chunks read to their end)."""
        if count.lane is None:
            index = self._free_lane(settle_ready)
            lane = self._lanes[index]
            lane.chunk = count
            count.lane = index
            if not lane.open:
                self._call(lane, lane.publisher.producer.begin_transaction)
                lane.open = True
        return self._lanes[count.lane].publisher

    def _free_lane(self, settle_ready: Callable[[], None] | None) -> int:
        self._collect()
        while True:
            index = next((i for i, lane in enumerate(self._lanes) if lane.chunk is None), None)
            if index is not None:
                return index
            under_way = [lane.commit for lane in self._lanes if lane.commit is not None]
            if not under_way and settle_ready is not None:
                settle_ready()  # its commit() takes no lane for a chunk that has one
                settle_ready = None  # once: what it started is waited for below
                self._collect()
                continue
            if not under_way:
                raise RuntimeError(
                    f"all {len(self._lanes)} snapshot lanes carry chunks being read"
                )  # the copier starts one more lane than chunks can be in flight
            wait(under_way, return_when=FIRST_COMPLETED)
            self._collect()

    def _collect(self) -> None:
        """Free the lanes whose commit ended (raising a failed one); their chunks wait for
        :meth:`commit` to report them."""
        for lane in self._lanes:
            future = lane.commit
            if future is None or not future.done():
                continue
            lane.commit = None
            lane.open = False  # committed, or aborted by the failed commit raised here
            future.result()
            self.commits += 1
            count, lane.chunk = lane.chunk, None
            assert count is not None
            count.lane = None
            self._committed.append(count)

    def service(self) -> None:
        """Serve the deliveries of every lane not committing (raises a failed one)."""
        for lane in self._lanes:
            if lane.commit is None:
                lane.publisher.poll(0)

    def commit(
        self,
        ready: Sequence[_Count],
        progress: Callable[[_Count], Sequence[tuple[bytes, bytes]]],
        committed: Callable[[_Count], None],
    ) -> None:
        """Start the commit of each ``ready`` chunk (read to its end, nothing held back) in its
        lane, with the records ``progress(count)`` returns (its progress record), and call
        ``committed(count)`` for each chunk whose commit ended (raising a failed one)."""
        # Chunks holding a lane first: a chunk without one (no records) may have to wait for
        # a lane, and those commits are what frees one.
        for count in sorted(ready, key=lambda c: c.lane is None):
            # Looked up for each chunk, not once before the loop: an earlier chunk's wait for
            # a lane (publisher_for) may reap this one's commit (its lane freed): committing
            # it again would report it twice (seen on a fresh 3-broker cluster: the copier's
            # KeyError ended the snapshot).
            if any(reaped is count for reaped in self._committed):
                continue  # committed (its lane taken by another chunk since), to be reported
            if count.lane is not None and self._lanes[count.lane].commit is not None:
                continue  # under way
            self.publisher_for(count)  # a chunk without records still commits its progress
            assert count.lane is not None
            lane = self._lanes[count.lane]
            for record_key, value in progress(count):
                lane.publisher.produce_offsets(self._offsets_topic, record_key, value)
            lane.publisher.send_pending()
            lane.commit = self._pool.submit(
                self._call, lane, lane.publisher.producer.commit_transaction, self._timeout
            )
        self._collect()
        done, self._committed = self._committed, []
        for ended in done:
            committed(cast(_Count, ended))  # one of the counts given to publisher_for

    def drain(self) -> None:
        """Wait for the commits under way (their chunks are reported by the next
        :meth:`commit`)."""
        wait([lane.commit for lane in self._lanes if lane.commit is not None])

    def close(self) -> None:
        """At the end or a stop: chunks still in flight are aborted (never visible; the next
        run copies them again), then the lanes close."""
        self._pool.shutdown(wait=True)
        for lane in self._lanes:
            if lane.open:
                self._abort(lane)
                # The abort failed its records' deliveries (librdkafka reports them as
                # errors): wanted here, so not raised as a close() would.
                lane.publisher.abandon(5)
            else:
                lane.publisher.close()

    def abandon(self) -> None:
        """After a failure: the lanes are dropped; their open transactions are aborted by
        Kafka when the next run's lanes start (or at the transaction timeout)."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        for lane in self._lanes:
            if lane.open:
                self._abort(lane)
            lane.publisher.abandon(5)

    def _abort(self, lane: _Lane) -> None:
        try:
            lane.publisher.producer.abort_transaction(self._timeout)
        except Exception as exc:  # Kafka aborts it anyway when the next lanes start
            logger.debug("aborting a snapshot chunk's Kafka transaction: %s", exc)
        lane.open = False

    def _call(self, lane: _Lane, method: Any, *args: Any) -> None:
        call_transactional(
            method,
            *args,
            slot=self._slot,
            abort=lambda: self._abort(lane),
            resent_from="the chunk's start at the next snapshot run",
            fatal_error=lane.publisher.fatal_error,
        )


@dataclass(frozen=True, slots=True)
class SnapshotTransactions:
    """How a snapshot of ``slot`` runs exactly once: its lanes, and the progress Kafka holds."""

    make_lane: Callable[[int], LanePublisher]
    client: dict[str, str]  # bootstrap.servers and the security settings
    offsets_topic: str
    slot: str
    replication_factor: int  # of the offsets topic, when this creates it (-1: the broker's)

    def lanes(self, count: int) -> ChunkTransactions:
        """``count`` lanes, started (the offsets topic created if it is missing)."""
        ensure_offsets_topic(self.client, self.offsets_topic, self.replication_factor)
        transactions = ChunkTransactions(
            self.make_lane, slot=self.slot, offsets_topic=self.offsets_topic
        )
        try:
            transactions.start(count)
        except BaseException:
            transactions.abandon()
            raise
        return transactions

    def committed(self, snapshot_id: str) -> dict[str, set[int]]:
        return committed_chunks(self.client, self.offsets_topic, self.slot, snapshot_id)
