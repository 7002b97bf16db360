"""The snapshot's coordinator: workers copy, this thread publishes, acknowledges and records.

One thread (the caller's) owns the serializer and the publisher, as the streaming pipeline
does: it takes the workers' batches from a bounded queue, serializes each ``r`` event with the
same :class:`~bridge.sink.serializer.EnvelopeSerializer` and publishes it with the same kind
of publisher, on the same topics, under the same registered schemas as streaming.
Acknowledgements are counted in bulk, not per record (:mod:`bridge.snapshot.epochs`: a ring
of producers that report failures only); a chunk whose rows were all read and whose last
record's epoch was acknowledged is recorded in the state file (:mod:`bridge.snapshot.state`).
A failure anywhere (a worker's typed error, a delivery error) stops the workers and
propagates; nothing unacknowledged was recorded.

``source.snapshot`` is ``first`` on the first row of a snapshot's first attempt, ``last`` on the
last row of the attempt that completes it, ``true`` otherwise (one row is held back so that the
last one can be marked).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bridge import native
from bridge.events import ChangeEvent, TxContext
from bridge.failures import FailurePolicy, dead_letter_record
from bridge.pgoutput.lsn import Lsn
from bridge.schema import RelationSchemas
from bridge.sink.avro_writer import AvroWriteError
from bridge.sink.registry import RegisteredSchemas, SchemaRegistrar
from bridge.sink.serializer import CopyLane, EnvelopeSerializer
from bridge.snapshot import progress as progress_module
from bridge.snapshot.chunk_acks import ChunkAcks, EpochAcks, TransactionAcks
from bridge.snapshot.chunk_transactions import (
    ChunkTransactions,
    SnapshotTransactions,
    progress_record,
)
from bridge.snapshot.plan import wire_kinds
from bridge.snapshot.progress import SnapshotProgress
from bridge.snapshot.reader import (
    ChunkEnd,
    Failed,
    Record,
    RowBatch,
    SnapshotConnection,
    Task,
    WorkerDone,
    WorkerFailed,
    run_worker,
)
from bridge.snapshot.state import SnapshotState, TableProgress, save_state
from bridge.snapshot.terminal import REDRAW_INTERVAL, terminal_for
from bridge.types.errors import ConversionError

logger = logging.getLogger(__name__)

__all__ = ["SnapshotCopier", "SnapshotSink"]

_QUEUE_BATCHES = 16  # batches of reader.BATCH_ROWS rows in flight between workers and here
_POLL_INTERVAL_S = 0.005
_RING = 2  # producers of the acknowledgement ring (bridge.snapshot.epochs)


def _ignore() -> None:
    """Every snapshot record's success callback: acknowledgements are counted by epochs."""


@dataclass(frozen=True, slots=True)
class SnapshotSink:
    """The streaming pipeline's own registrar, serializer and publisher, and its policy.

    ``publisher_factory`` makes the snapshot's own producers (``KafkaPublisher`` with
    ``report_successes=False``), closed at its end; without it the snapshot publishes
    through ``publisher`` and acknowledges by its queue running empty. ``transactions``
    (exactly once): each chunk in a Kafka transaction of its own instead
    (:mod:`bridge.snapshot.chunk_transactions`).
    """

    registrar: SchemaRegistrar
    serializer: EnvelopeSerializer
    publisher: Any  # bridge.pipeline.Publisher
    failures: FailurePolicy
    publisher_factory: Callable[[], Any] | None = None
    transactions: SnapshotTransactions | None = None


class _ChunkCount:
    """One chunk's figures, the epoch of its last record published (-1: none yet) and its lane
    (exactly once: the Kafka transaction it is in)."""

    __slots__ = ("epoch", "key", "lane", "nbytes", "read_done", "rows", "table")

    def __init__(self, table: TableProgress, index: int) -> None:
        self.table = table
        self.key = (table.plan.table, index)
        self.lane: int | None = None
        self.epoch = -1
        self.rows = 0
        self.nbytes = 0
        self.read_done = False


class SnapshotCopier:
    """Copies the chunks the state says are left, one worker per connection given."""

    def __init__(
        self,
        sink: SnapshotSink,
        state: SnapshotState,
        state_path: Path,
        schemas: dict[str, RelationSchemas],
        *,
        progress_interval: float = 5.0,
        lanes: ChunkTransactions | None = None,
    ) -> None:
        """``lanes``: exactly once, the started lanes each chunk is committed in (closed with
        the copy)."""
        self.sink = sink
        self.state = state
        self.state_path = state_path
        self.schemas = schemas
        self.progress = SnapshotProgress(progress_interval)
        # On a terminal, bars redrawn in place (about once a second) instead of log lines.
        self.terminal = terminal_for()
        if self.terminal is not None:
            self.progress.interval = min(progress_interval, REDRAW_INTERVAL)
        self.published = 0
        self._ids: dict[str, RegisteredSchemas] = {}
        self._lanes: dict[str, CopyLane] = {}
        self._kinds: dict[str, bytes] = {}  # per table: b/t per selected column (wire_kinds)
        self._counts: dict[tuple[str, int], _ChunkCount] = {}
        # One row held back (it may be the snapshot's last): an event, or a lane's record with
        # its COPY row and seq (encoded again with marker "last" when it is).
        self._held: tuple[ChangeEvent | _HeldRecord, _ChunkCount] | None = None
        # Exactly once, rows of a run that committed nothing were never visible.
        self._first = not any(t.done if lanes is not None else t.started for t in state.tables)
        self._tx: TxContext | None = None
        self._dirty = False
        self._acks: ChunkAcks = (
            TransactionAcks(lanes, lambda: self._record_finished(time.monotonic()))
            if lanes is not None
            else EpochAcks([sink.publisher], own=False)
        )

    # -- the run --------------------------------------------------------------------------------

    def run(self, stop: threading.Event, connections: list[SnapshotConnection]) -> bool:
        """Copy what is left with the connections of :func:`~bridge.snapshot.reader.
        open_connections` (closed when done); ``True`` when every table is copied (the state
        says ``done``), ``False`` when ``stop`` was set first (what was acknowledged is
        recorded)."""
        progress_module.CURRENT = self.progress
        self.progress.running = True
        factory = self.sink.publisher_factory
        try:
            if factory is not None and not isinstance(self._acks, TransactionAcks):
                self._acks = EpochAcks([factory() for _ in range(_RING)], own=True)
        except BaseException:
            for connection in connections:
                connection.close()
            raise
        try:
            done = self._run(stop, connections)
        except BaseException:
            self._acks.abandon()
            raise
        self._acks.close()
        return done

    def _run(self, stop: threading.Event, connections: list[SnapshotConnection]) -> bool:
        try:
            xmin = connections[0].snapshot_xmin()
            now_pg_us = int((time.time() - 946_684_800) * 1_000_000)
            point = Lsn.parse(self.state.consistent_point)
            self._tx = TxContext(xmin, point, now_pg_us, None, "true", last_commit_lsn=point)
            for table_schemas in self.schemas.values():
                self._register(table_schemas)
            tasks = self._tasks()
        except BaseException:
            for connection in connections:
                connection.close()
            raise
        workers = min(len(connections), tasks.qsize())
        for connection in connections[workers:]:
            connection.close()
        try:
            if workers and not self._copy(tasks, connections[:workers], stop):
                return False
        finally:
            self.progress.running = False
            if self.terminal is not None:
                self.terminal.draw(self.progress, time.monotonic())
                self.terminal.close()
        self.state.status = "done"
        save_state(self.state_path, self.state)
        return True

    def _tasks(self) -> queue.Queue[Task]:
        """The chunks left, as tasks for the workers; their counts and progress figures."""
        tasks: queue.Queue[Task] = queue.Queue()
        for table in self.state.tables:
            self.progress.add(
                table.plan.table,
                table.plan.estimated_rows,
                len(table.plan.chunks),
                table.rows_done,
                table.bytes_done,
                len(table.done),
            )
            schemas = self.schemas[table.plan.table]
            # Text forms only where they make the whole row the C accelerator's.
            kinds = (
                wire_kinds(tuple(c.native for c in schemas.columns))
                if schemas.encoder.native
                else b"b" * len(schemas.columns)
            )
            self._kinds[table.plan.table] = kinds
            lane = self._lane(schemas)
            for chunk in table.remaining():
                tasks.put(Task(table.plan, chunk, schemas, kinds, lane))
                self._counts[(table.plan.table, chunk.index)] = _ChunkCount(table, chunk.index)
        return tasks

    def _copy(
        self, tasks: queue.Queue[Task], connections: list[SnapshotConnection], stop: threading.Event
    ) -> bool:
        out: queue.Queue[Any] = queue.Queue(maxsize=_QUEUE_BATCHES)
        halt = threading.Event()
        threads: list[threading.Thread] = []
        try:
            for i, connection in enumerate(connections):
                thread = threading.Thread(
                    target=run_worker,
                    args=(f"snapshot-{i}", connection, tasks, out, halt, self.state.run, self._tx),
                    name=f"pgbridge-snapshot-{i}",
                    daemon=True,
                )  # fmt: skip
                threads.append(thread)
            connections = []  # the workers own (and close) them now
            for thread in threads:
                thread.start()
            alive = len(threads)
            next_poll = time.monotonic() + _POLL_INTERVAL_S
            while alive:
                try:
                    item = out.get(timeout=_POLL_INTERVAL_S)
                except queue.Empty:
                    item = None
                if type(item) is RowBatch:
                    self._publish_batch(item)
                elif type(item) is ChunkEnd:
                    count = self._counts[(item.table, item.chunk)]
                    count.read_done = True
                    count.rows = item.rows
                elif type(item) is WorkerDone:
                    alive -= 1
                elif type(item) is WorkerFailed:
                    raise item.error
                now = time.monotonic()
                if item is None or now >= next_poll:
                    self._service(now)
                    next_poll = now + _POLL_INTERVAL_S
                if stop.is_set():
                    logger.info("snapshot stopped before its end; it resumes at the next start")
                    self._drain(final=False)
                    return False
            self._drain(final=True)
            return all(t.complete for t in self.state.tables)
        finally:
            halt.set()
            for connection in connections:
                connection.close()
            for thread in threads:
                thread.join(30)

    # -- publishing -----------------------------------------------------------------------------

    def _register(self, schemas: RelationSchemas) -> RegisteredSchemas:
        ids = self._ids.get(schemas.table)
        if ids is None:
            serializer = self.sink.serializer
            ids = self.sink.registrar.register_relation(schemas)
            if ids.key_id is not None and schemas.key_schema is not None:
                serializer.register_parsed(ids.key_id, schemas.key_schema)
            serializer.register_parsed(ids.value_id, schemas.value_schema)
            self._ids[schemas.table] = ids
        return ids

    def _lane(self, schemas: RelationSchemas) -> CopyLane | None:
        """The table's :class:`CopyLane` (registered, in the snapshot's transaction), if any."""
        lane = self._lanes.get(schemas.table)
        ids = self._ids.get(schemas.table)
        if lane is None and ids is not None and self._tx is not None:
            lane = self.sink.serializer.copy_lane(schemas, ids, self._tx)
            if lane is not None:
                self._lanes[schemas.table] = lane
        return lane

    def _publish_batch(self, batch: RowBatch) -> None:
        count = self._counts[(batch.table, batch.chunk)]
        count.nbytes += batch.nbytes
        table = count.table
        if not table.started:
            table.started = True  # recorded: a keyless table's copy was under way (resume)
            save_state(self.state_path, self.state)
        rows = batch.rows
        self.progress.copied(batch.table, rows, batch.nbytes, time.monotonic())
        if not rows:
            return
        if self._held is not None:
            held, self._held = self._held, None
            self._publish_held(*held)
        acks = self._acks
        publisher = acks.publisher_for(count)
        topic = self.schemas[batch.table].topic
        pack = batch.packed
        if pack is not None:
            if not self._first:
                # The usual batch, packed: handed over from its buffer, the last row held.
                publisher.publish_packed(topic, pack, rows - 1, _ignore)
                acks.sent(count, rows - 1)
                self.published += rows - 1
                assert native.unpack_records is not None and batch.last is not None
                (tail,) = native.unpack_records(pack, rows - 1, rows)
                seq = batch.first_seq + rows - 1
                self._held = (_HeldRecord(batch.table, tail, batch.last, seq), count)
                return
            # The snapshot's first batch (its first row is marked): as records.
            assert native.unpack_records is not None
            unpacked = native.unpack_records(pack, 0, rows)
            batch = replace(batch, events=unpacked, packed=None)  # type: ignore[arg-type]
        events = batch.events
        if batch.records_only and not self._first:
            # The usual batch: every row encoded by the lane, handed over in one call.
            records: list[Record] = events[:-1]  # type: ignore[assignment]
            publisher.publish_records(topic, records, _ignore)
            acks.sent(count, len(events) - 1)
            self.published += len(events) - 1
            self._hold(batch, count)
            return
        # Otherwise every item but the last (held back: it may be the snapshot's last), with
        # what is the same for the whole batch (one chunk, one table) looked up once.
        ids = self._ids[batch.table]
        key_of, value_of = self.sink.serializer.key, self.sink.serializer.value
        publish = publisher.publish
        published = 0
        for i in range(len(events) - 1):
            event = events[i]
            if type(event) is tuple:  # a lane's record
                if self._first:  # the snapshot's first row, the batch's first record: its marker
                    assert batch.head is not None and batch.head[0] == i
                    row = _HeldRecord(batch.table, event, batch.head[1], batch.first_seq + i)
                    self._publish_held(row, count)
                    continue
                publish(topic, event[0], event[1], _ignore)
                published += 1
                continue
            if type(event) is not ChangeEvent or self._first:
                self._one(batch.table, event, count)  # type: ignore[arg-type]
                continue
            assert isinstance(event, ChangeEvent)
            try:
                key = key_of(event, ids)
                value = value_of(event, ids)
            except (AvroWriteError, ConversionError):
                self._publish(event, count)  # the slow path decides: raise or dead-letter
                continue
            publish(topic, key, value, _ignore)
            published += 1
        if published:
            acks.sent(count, published)
        self.published += published
        self._hold(batch, count)

    def _hold(self, batch: RowBatch, count: _ChunkCount) -> None:
        events = batch.events
        tail = events[-1]
        if type(tail) is Failed:
            self._dead_letter(batch.table, tail, count)
        elif type(tail) is tuple:
            assert batch.last is not None
            seq = batch.first_seq + len(events) - 1
            self._held = (_HeldRecord(batch.table, tail, batch.last, seq), count)
        else:
            assert isinstance(tail, ChangeEvent)
            self._held = (tail, count)

    def _publish_held(
        self, held: ChangeEvent | _HeldRecord, count: _ChunkCount, marker: str | None = None
    ) -> None:
        if type(held) is not _HeldRecord:
            assert isinstance(held, ChangeEvent)
            self._publish(held, count, marker)
            return
        assert isinstance(held, _HeldRecord)
        if self._first:
            marker, self._first = "first", False
        record = held.record
        if marker is not None and marker != "true":
            # The same row with another source.snapshot: the lane encoded it once already.
            lane = self._lanes[held.table]
            kinds = self._kinds[held.table]
            again = lane.encode(held.data, kinds, held.seq, marker)
            assert again is not None
            record = again
        self._send(self.schemas[held.table].topic, record[0], record[1], count)
        self.published += 1

    def _one(
        self,
        table: str,
        event: ChangeEvent | Failed,
        count: _ChunkCount,
        marker: str | None = None,
    ) -> None:
        if type(event) is Failed:
            self._dead_letter(table, event, count)
        else:
            assert isinstance(event, ChangeEvent)
            self._publish(event, count, marker)

    def _publish(self, event: ChangeEvent, count: _ChunkCount, marker: str | None = None) -> None:
        if self._first:
            marker, self._first = "first", False
        if marker is not None:
            assert self._tx is not None
            event = replace(event, tx=replace(self._tx, snapshot=marker))
        ids = self._ids[event.table.table]
        serializer = self.sink.serializer
        try:
            key = serializer.key(event, ids)
            value = serializer.value(event, ids)
        except (AvroWriteError, ConversionError) as exc:
            if self.sink.failures.stops:
                raise
            self._dead_letter(event.table.table, Failed(event.seq, _tuple_of(event), exc), count)
            return
        self._send(event.table.topic, key, value, count)
        self.published += 1

    def _dead_letter(self, table: str, failed: Failed, count: _ChunkCount) -> None:
        failures = self.sink.failures
        if failures.stops:
            raise failed.error
        schemas = self.schemas[table]
        assert self._tx is not None and failures.dead_letter_topic is not None
        failures.report(table, f"snapshot seq {failed.seq}", failed.error)
        key, value = dead_letter_record(
            table=table,
            topic=schemas.topic,
            op="r",
            commit_lsn=int(self._tx.commit_lsn),
            seq=failed.seq,
            xid=self._tx.xid,
            columns=tuple(c.name for c in schemas.relation.columns),
            before=None,
            after=failed.data,
            error=failed.error,
            withheld=schemas.withheld,
        )
        self._send(failures.dead_letter_topic, key, value, count)

    def _send(self, topic: str, key: bytes | None, value: bytes | None, count: _ChunkCount) -> None:
        self._acks.publisher_for(count).publish(topic, key, value, _ignore)
        self._acks.sent(count, 1)

    # -- acknowledgements and the state file ----------------------------------------------------

    def _service(self, now: float) -> None:
        """Learn what was acknowledged, record finished chunks, log progress when due."""
        self._acks.service(now)
        self._record_finished(now)
        if self.progress.due(now):
            if self.terminal is not None:
                self.terminal.draw(self.progress, now)
            else:
                for line in self.progress.lines(now):
                    logger.info("%s", line)

    def _record_finished(self, now: float) -> None:
        held = self._held[1] if self._held is not None else None
        ready = [c for c in self._counts.values() if c.read_done and c is not held]
        if not ready:
            return
        recorded = len(self._counts)
        self._acks.settle(ready, self._progress_records, self._delivered)  # type: ignore[arg-type]
        if len(self._counts) < recorded:
            save_state(self.state_path, self.state)

    def _delivered(self, count: _ChunkCount) -> None:
        """Kafka holds all of ``count``'s chunk: it is done (saved by the caller)."""
        del self._counts[count.key]
        table = count.table
        table.done.add(count.key[1])
        table.rows_done += count.rows
        table.bytes_done += count.nbytes
        self.progress.chunk_done(table.plan.table, time.monotonic())
        if table.complete:
            logger.info(
                "snapshot of %s complete: %d rows, %.1f MB",
                table.plan.table,
                table.rows_done,
                table.bytes_done / 1e6,
            )

    def _progress_records(self, count: _ChunkCount) -> list[tuple[bytes, bytes]]:
        """Exactly once: the progress record committed with ``count``'s chunk: the table's
        chunks done so far, and it."""
        transactions = self.sink.transactions
        assert transactions is not None
        table, lane = count.table, count.lane
        assert lane is not None
        chunks = table.done | {count.key[1]}
        return [progress_record(transactions.slot, self.state.id, table.plan.table, lane, chunks)]

    def _drain(self, *, final: bool) -> None:
        """Publish the held row (``last`` when ``final``, after every other record was
        acknowledged or committed: it is last in every partition too), wait for every
        acknowledgement and record the chunks that are complete."""
        self._settle_all()
        if self._held is not None:
            held, count = self._held
            self._held = None
            self._publish_held(held, count, "last" if final else None)
            self._settle_all()

    def _settle_all(self) -> None:
        """Every chunk read to its end (but the held row's) delivered and recorded: the
        second round records what the first one's settlement started (commits)."""
        for _ in range(2):
            self._acks.drain()
            self._record_finished(time.monotonic())


@dataclass(frozen=True, slots=True)
class _HeldRecord:
    """A lane's record, with what it takes to encode its row again with another marker."""

    table: str
    record: Record
    data: bytes  # the COPY row
    seq: int


def _tuple_of(event: ChangeEvent) -> Any:
    after = event.after
    return getattr(after, "tuple_data", after)
