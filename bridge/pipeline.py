"""The one place that wires source -> change events -> Avro + registry -> Kafka -> acknowledgements.

At-least-once, never lose a change: every transaction is registered with the
:class:`~bridge.ack.AckTracker` at Begin (so a five-million-row transaction streams through without
being held in memory), each record it produces is counted as sent and, in its delivery callback, as
delivered, and the transaction is completed at Commit with its end LSN. The counts are kept per
transaction (:class:`bridge.ack.TransactionCounts`) and handed to the tracker in bulk after each
``poll()`` and before each completion (the tracker takes a lock per call; per record that was a
measurable share of the loop), so the tracker sees sends before their deliveries and every send
before the completion, as it requires. The position confirmed to PostgreSQL is the tracker's flush
LSN, which never passes a transaction with an undelivered record. A failure anywhere stops the loop
with a typed error and nothing past the last fully delivered transaction is confirmed; a restart
resends from there.

Delivery callbacks run inside ``publisher.poll()``/``flush()`` on this thread (see
:mod:`bridge.sink.publisher`), so the loop is single-threaded apart from librdkafka's own I/O
and the source's WAL reader (:mod:`bridge.source.frame_reader`), which only hands frames over.
The flush LSN therefore moves only when the counts are reported after a poll (or the final
flush) and when a transaction completes, and it is handed to the source right after each.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from bridge import native
from bridge.ack import AckTracker, TransactionCounts
from bridge.errors import PgBridgeError
from bridge.events import (
    ChangeEvent,
    DeadLetterEvent,
    EventBuilder,
    LogicalMessageEvent,
    Output,
    TransactionEnd,
    TxContext,
)
from bridge.failures import dead_letter_record
from bridge.pgoutput.copyboth import insert_relation_oid
from bridge.pgoutput.lsn import Lsn, pg_timestamp_to_unix_micros
from bridge.pgoutput.messages import (
    Begin,
    Insert,
    LogicalMessage,
    Message,
    Relation,
    Type,
    Update,
)
from bridge.pipeline_ports import (
    NoObserver,
    PipelineObserver,
    PipelineOptions,
    Publisher,
)
from bridge.schema import EncodedRow, RelationSchemas, static_schema
from bridge.signal_messages import PREFIX as SIGNAL_PREFIX
from bridge.sink.avro_writer import AvroWriteError
from bridge.sink.metadata import MetadataRecords, heartbeat_topic, transaction_topic
from bridge.sink.registry import RegisteredSchemas, SchemaRegistrar
from bridge.sink.serializer import EnvelopeSerializer, InsertLane, message_value_schema
from bridge.sink.transactions import ExactlyOnce
from bridge.snapshot.incremental import IncrementalSnapshotter
from bridge.source.api import ChangeSource
from bridge.source.type_catalog import ResolvedType
from bridge.types.errors import ConversionError

__all__ = ["Pipeline", "PipelineObserver", "PipelineOptions", "Publisher"]

logger = logging.getLogger(__name__)

#: Serve delivery callbacks at least every this many source messages or seconds, whichever comes
#: first (they also run whenever the producer's queue is full and whenever the source is idle).
#: Acknowledgement latency is bounded by this, so it is short; a poll(0) costs microseconds.
_POLL_EVERY = 256
_POLL_INTERVAL_S = 0.005

#: The fewest inserts of one table in a row that the source hands over as one run (one C call
#: and one packed batch, :meth:`Pipeline._insert_run`); fewer go message by message, where the
#: publisher batches them anyway (a run's fixed cost is a batch report and a poll tick).
_MIN_RUN = 16

#: The cyclic garbage collector's generation-0 threshold while the loop runs (CPython's default
#: is 700). Every change allocates a few dozen short-lived objects that reference counting
#: frees anyway; at the default, a collection every ~20 changes cost about 1.5 us per change
#: (8% of the loop, measured with bench/pipeline_bench.py).
_GC_GEN0_THRESHOLD = 100_000


def _ignore() -> None:
    pass


#: The transaction of a row whose key alone is wanted (Pipeline.snapshot_key).
_NO_TX = TxContext(0, Lsn(0), 0)


class Pipeline:
    def __init__(
        self,
        source: ChangeSource,
        builder: EventBuilder,
        registrar: SchemaRegistrar,
        serializer: EnvelopeSerializer,
        publisher: Publisher,
        options: PipelineOptions,
        observer: PipelineObserver | None = None,
        incremental: IncrementalSnapshotter | None = None,
        housekeeping: Callable[[], None] | None = None,
        describe_type: Callable[[int], ResolvedType | None] | None = None,
        exactly_once: ExactlyOnce | None = None,
    ) -> None:
        """``describe_type``: what the catalog says of a type a Type message names (a domain's
        modifier: bridge.source.type_catalog), asked before the mapper sees the message.
        ``exactly_once``: the Kafka transactions whole source transactions go out in
        (bridge.sink.transactions), started; the slot is confirmed only as far as they
        committed."""
        self.source = source
        self.builder = builder
        self.registrar = registrar
        self.serializer = serializer
        self.publisher = publisher
        self.options = options
        self.observer: PipelineObserver = observer or NoObserver()
        self.tracker = AckTracker(source.start_lsn)
        # id(RelationSchemas) -> (that object, its ids). Holding the object keeps its id from
        # being reused by a later table version while the entry exists.
        self._ids: dict[int, tuple[RelationSchemas, RegisteredSchemas]] = {}
        # id(RelationSchemas) -> (that object, its ids or None when the table filter leaves
        # it out), decided once per table version rather than per event.
        self._routes: dict[int, tuple[RelationSchemas, RegisteredSchemas | None]] = {}
        # id(RelationSchemas) -> (that object, its InsertLane or None), decided once per
        # table version: inserts of a captured table the C encoder covers skip the events.
        self._lanes: dict[int, tuple[RelationSchemas, InsertLane | None]] = {}
        self._message_ids: tuple[int, int] | None = None
        # The current transaction's counts; all transactions with something to report.
        self._counts: TransactionCounts | None = None
        self._unreported: list[TransactionCounts] = []
        self.events_published = 0
        # Transaction metadata: BEGIN goes out with a transaction's first published change,
        # END (with per-table counts) at its Commit, only for transactions that had a BEGIN.
        self._tx_meta = options.transaction_metadata and options.metadata is not None
        builder.count_tables = self._tx_meta  # only END records read the per-table counts
        self._tx_begun = False
        self._tx_tables: Counter[str] = Counter()
        self._next_heartbeat = time.monotonic() + options.heartbeat_interval
        # While a dependency is retried (bridge.retry), deliveries keep being acknowledged and
        # the replication connection kept alive; nothing new is read.
        registrar.on_wait = self._while_waiting
        publisher.on_wait = self._while_waiting
        # Incremental snapshots (bridge.snapshot.incremental): signals are inserts into the
        # signal table, whose relation OID is learnt from its Relation message; while a
        # chunk's window is open, the watched topic's published keys are reported to it.
        self.incremental = incremental
        #: Called between messages at every poll tick (bridge.source.table_watch).
        self.housekeeping = housekeeping
        self.describe_type = describe_type
        self.exactly_once = exactly_once
        self._signal_oid: int | None = None
        self._watched: str | None = None
        if incremental is not None:
            incremental.attach(self)
        # Runs of inserts straight from the source's frames (see _insert_run), where the C
        # accelerator and the source can.
        take_runs = getattr(source, "take_insert_runs", None)  # optional part of ChangeSource
        if take_runs is not None and native.encode_insert_frames is not None:
            take_runs(self._insert_run, _MIN_RUN)

    # -- the loop -------------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None) -> None:
        """Stream until ``stop`` is set (then drain and confirm what was delivered) or an error."""
        stop = stop or threading.Event()
        since_poll = 0
        monotonic = time.monotonic
        next_poll = monotonic() + _POLL_INTERVAL_S
        on_message, poll = self._on_message, self.publisher.poll
        thresholds = gc.get_threshold()
        gc.set_threshold(max(thresholds[0], _GC_GEN0_THRESHOLD), *thresholds[1:])
        failed = False
        try:
            for message in self.source.messages():
                if message is not None:
                    on_message(message)
                    since_poll += 1
                    if since_poll < _POLL_EVERY and monotonic() < next_poll:
                        continue
                # Idle, or a poll is due: serve delivery callbacks, report their counts (that
                # moves the flush LSN), hand the flush LSN to the source and look at the stop
                # flag. Between two of these the flush LSN moves only at a Commit (_on_output).
                poll(0)
                since_poll = 0
                next_poll = monotonic() + _POLL_INTERVAL_S
                if message is None and self.exactly_once is not None and self._counts is None:
                    self.exactly_once.idle()  # between source transactions: commit what waits
                self._report()
                self._acknowledge()
                if self.housekeeping is not None:
                    self.housekeeping()
                if self.incremental is not None:
                    position = self.builder.next_position()  # None between transactions
                    self.incremental.tick(None if position is None else position[0].xid)
                    self._watched = self.incremental.watched_topic
                if self.options.heartbeat_interval and monotonic() >= self._next_heartbeat:
                    self._publish_heartbeat()
                if stop.is_set():
                    break
        except BaseException:
            failed = True
            raise
        finally:
            gc.set_threshold(*thresholds)
            self._shutdown(failed)

    def _on_message(self, message: LogicalMessage) -> None:
        self.builder.message_lsn = self.source.message_lsn
        if type(message) is Insert:
            if message.relation_oid == self._signal_oid:
                assert self.incremental is not None
                self.incremental.on_signal_row(message.new_tuple)
                self._watched = self.incremental.watched_topic
                return
            if self._lane(message, "c"):
                return
        elif type(message) is Update:
            if message.old_tuple is None and self._lane(message, "u"):
                return
        elif type(message) is Begin:
            # Registered before its records are produced; the end LSN comes with the Commit.
            self._counts = self._register(message.final_lsn)
        elif (
            type(message) is Message
            and message.prefix == SIGNAL_PREFIX
            and self.incremental is not None
        ):
            # A signal (watermark, snapshot request) sent as a logical message: for the
            # snapshotter only, not the messages topic, and it takes no seq.
            self.incremental.on_signal_message(message)
            self._watched = self.incremental.watched_topic
            return
        elif type(message) is Type and self.describe_type is not None:
            resolved = self.describe_type(message.type_oid)
            if resolved is not None:
                resolved.tell(self.builder.mapper)
        for output in self.builder.feed(message):
            if type(output) is ChangeEvent:  # the common case, without the dispatch call
                self._publish_change(output)
            else:
                self._on_output(output)
        if type(message) is Relation and self.incremental is not None:
            self._learn_signal_table(message)

    def _lane(self, message: Insert | Update, op: str) -> bool:
        """Publish an insert (or an update without old row) through the table's
        :class:`InsertLane`: True if done, False if the builder and serializer must (no lane for
        the table, or a row the C encoder hands back). The record, its ``seq`` and its counts
        are those the general path gives it."""
        builder = self.builder
        table = builder.relations.get(message.relation_oid)
        if table is None:
            return False
        entry = self._lanes.get(id(table))
        lane = entry[1] if entry is not None else self._new_lane(table)
        if lane is None:
            return False
        position = builder.next_position()
        if position is None:
            return False
        tx, seq = position
        record = lane.encode(message.new_tuple, op, tx, seq, builder.message_lsn)
        if record is None:
            return False
        builder.took_change(table)
        key, value = record
        if self._watched is not None and table.topic == self._watched:
            self._incremental_saw(key, tx.xid)
        counts = self._counts or self._require_counts()
        counts.sent += 1
        self.publisher.publish(table.topic, key, value, counts.on_delivered)
        self.events_published += 1
        self.observer.on_events(table.table, op, 1)
        return True

    def _insert_run(self, frames: list[bytes], start: int) -> int:
        """Publish the inserts of one table leading ``frames[start:]`` (XLogData frames, the
        first an Insert outside a streamed transaction) through its :class:`InsertLane` as one
        packed batch: the number of frames taken, 0 if none (no lane for the table, a run
        shorter than ``_MIN_RUN``, a row the C encoder hands back first: the frames then go
        through the source's messages one by one). Each record, its ``seq`` and the counts are
        those :meth:`_lane` gives it; no Python object is made per row."""
        frame = frames[start]
        oid = insert_relation_oid(frame)
        builder = self.builder
        table = builder.relations.get(oid)
        if table is None or oid == self._signal_oid:
            return 0
        entry = self._lanes.get(id(table))
        lane = entry[1] if entry is not None else self._new_lane(table)
        if lane is None or (self._watched is not None and table.topic == self._watched):
            return 0
        position = builder.next_position()
        if position is None:
            return 0
        pack = bytearray()
        rows, lsn = lane.encode_frames(frames, start, _MIN_RUN, pack, oid, *position)
        if not rows:
            return 0
        builder.took_change(table, rows)
        builder.message_lsn = lsn
        counts = self._counts or self._require_counts()
        counts.sent += rows
        self.publisher.publish_packed(table.topic, pack, rows, counts.on_delivered)
        self.events_published += rows
        self.observer.on_events(table.table, "c", rows)
        return rows

    def _new_lane(self, table: RelationSchemas) -> InsertLane | None:
        lane = None
        if not self._tx_meta:
            route = self._routes.get(id(table))
            ids = route[1] if route is not None else self._route(table)
            if ids is not None:
                lane = self.serializer.insert_lane(table, ids)
        self._lanes[id(table)] = (table, lane)
        return lane

    def _on_output(self, output: Output) -> None:
        if type(output) is ChangeEvent:
            self._publish_change(output)
        elif type(output) is TransactionEnd:
            counts = self._require_counts()
            if self._tx_begun:
                self._publish_transaction_end(output)
            if self.incremental is not None:
                # Before the completion, which may commit the Kafka transaction: a chunk's
                # progress made in this transaction is committed with its rows.
                self.incremental.transaction_end(output.end_lsn, output.tx.xid)
            self._complete(counts, output.end_lsn)
            self._counts = None
            # The publisher batches records; the transaction's last ones go out now, not at
            # the next poll tick (commit-to-acknowledgement latency).
            self.publisher.send_pending()
            self.observer.on_transaction(
                pg_timestamp_to_unix_micros(output.tx.commit_ts), output.end_lsn
            )
            # An empty or fully delivered transaction moves the flush LSN right here.
            self._acknowledge()
        elif type(output) is LogicalMessageEvent:
            self._publish_message(output)
        elif type(output) is DeadLetterEvent and self._captured(output.table):
            self._publish_dead_letter(output, output.before, output.after, output.error)

    def _while_waiting(self) -> None:
        self.publisher.poll(0)
        self._report()
        self._acknowledge()
        keepalive = getattr(self.source, "keepalive", None)  # optional part of ChangeSource
        if keepalive is not None:
            keepalive()

    def _register(self, lsn: Lsn) -> TransactionCounts:
        counts = TransactionCounts(self.tracker.begin_transaction(lsn))
        self._unreported.append(counts)
        return counts

    def _complete(self, counts: TransactionCounts, end_lsn: Lsn | None) -> None:
        counts.report(self.tracker)  # every send reported before the completion
        counts.complete = True
        self.tracker.transaction_complete(counts.token, end_lsn)
        if self.exactly_once is not None:
            self.exactly_once.transaction_done(end_lsn)

    def _report(self) -> None:
        """Hand the counts gathered since the last call to the tracker."""
        tracker = self.tracker
        unreported = self._unreported
        for counts in unreported:
            counts.report(tracker)
        if unreported and unreported[0].finished:
            self._unreported = [c for c in unreported if not c.finished]

    def _acknowledge(self) -> None:
        flush = self.tracker.flush_lsn
        if self.exactly_once is not None:
            flush = self.exactly_once.acknowledgeable(flush)
        self.source.acknowledge(flush)
        self.observer.on_acknowledged(flush, self.tracker.in_flight)
        if self.incremental is not None:
            self.incremental.acknowledged(flush)
        memory = self.builder.memory
        if memory is not None:
            memory.acknowledged(int(flush))

    # -- records --------------------------------------------------------------------------------

    def _publish_change(self, event: ChangeEvent) -> None:
        table = event.table
        op = event.op
        if op == "t" and self._watched is not None and table.topic == self._watched:
            assert self.incremental is not None
            self.incremental.saw_truncate(event.tx.xid)
        if op == "t" and not self.options.truncate_events:
            return
        route = self._routes.get(id(table))
        ids = route[1] if route is not None else self._route(table)
        if ids is None:
            return  # not captured
        if self._tx_meta:
            self._count_for_metadata(event)
        serializer = self.serializer
        try:
            key = serializer.key(event, ids)
            value = serializer.value(event, ids)
        except (AvroWriteError, ConversionError) as exc:
            # A value the converters accepted but the Avro schema cannot hold.
            if self.builder.failures.stops:
                raise
            self._publish_dead_letter(event, event.before, event.after, exc)
            return
        if self._watched is not None and table.topic == self._watched:
            self._incremental_saw(key, event.tx.xid)
        tombstone = op == "d" and key is not None and self.options.tombstones_on_delete
        # _send, inlined for the hot path; a delete counts its tombstone along with it.
        counts = self._counts or self._require_counts()
        counts.sent += 2 if tombstone else 1
        self.publisher.publish(table.topic, key, value, counts.on_delivered)
        self.events_published += 1
        self.observer.on_events(table.table, op, 1)
        if tombstone:
            # Lets a compacted topic forget the key; already counted as sent above.
            self._send(table.topic, key, None, count=0)

    # -- incremental snapshots (bridge.snapshot.incremental) -----------------------------------

    def _learn_signal_table(self, relation: Relation) -> None:
        assert self.incremental is not None
        table = self.builder.relations.get(relation.relation_oid)
        if table is not None and self.incremental.is_signal_table(table):
            self._signal_oid = relation.relation_oid

    def _incremental_saw(self, key: bytes | None, xid: int) -> None:
        assert self.incremental is not None
        self.incremental.saw(key, xid)

    def snapshot_key(self, table: RelationSchemas, row: Mapping[str, Any]) -> bytes | None:
        """The Kafka key the stream would give ``row`` of ``table`` (registering the version)."""
        ids = self._registered(table)
        event = ChangeEvent("r", table, _NO_TX, 0, None, row)
        return self.serializer.key(event, ids)

    def publish_snapshot_rows(
        self, table: RelationSchemas, rows: list[Mapping[str, Any]], *, deleted: bool = False
    ) -> None:
        """Incremental snapshot rows as ``r`` events (``deleted``: ``d`` events, the rows of a
        partition that left the table) of the current transaction, at the next positions of
        its ``seq``."""
        builder = self.builder
        position = builder.next_position()
        if position is None:
            raise RuntimeError("snapshot rows outside a transaction")
        tx = position[0]
        snapshot_tx = replace(tx, snapshot="incremental")
        lsn = builder.message_lsn  # the high watermark's
        for row in rows:
            position = builder.next_position()
            assert position is not None
            builder.took_change(table)
            self._publish_change(
                ChangeEvent("d", table, snapshot_tx, position[1], row, None, (), lsn)
                if deleted
                else ChangeEvent("r", table, snapshot_tx, position[1], None, row, (), lsn)
            )

    def _route(self, table: RelationSchemas) -> RegisteredSchemas | None:
        """The table version's schema ids, or ``None`` if the table filter leaves it out;
        decided (and registered) once per table version."""
        ids = self._registered(table) if self._captured(table) else None
        self._routes[id(table)] = (table, ids)
        return ids

    def _publish_dead_letter(
        self,
        event: ChangeEvent | DeadLetterEvent,
        before: Any,
        after: Any,
        error: Exception,
    ) -> None:
        """Set a change aside on the dead-letter topic (bridge.failures), acknowledged like
        any record of its transaction."""
        failures = self.builder.failures
        topic = failures.dead_letter_topic
        assert topic is not None  # FailurePolicy requires one unless the mode is fail
        table = event.table
        position = f"LSN {event.tx.commit_lsn} seq {event.seq}"
        failures.report(table.table, position, error)
        key, value = dead_letter_record(
            table=table.table,
            topic=table.topic,
            op=event.op,
            commit_lsn=int(event.tx.commit_lsn),
            seq=event.seq,
            xid=event.tx.xid,
            columns=tuple(c.name for c in table.relation.columns),
            before=before.tuple_data if isinstance(before, EncodedRow) else before,
            after=after.tuple_data if isinstance(after, EncodedRow) else after,
            error=error,
            withheld=table.withheld,
        )
        self._send(topic, key, value)
        self.observer.on_events(table.table, "dead_letter", 1)

    def _captured(self, table: RelationSchemas) -> bool:
        table_filter = self.options.table_filter
        relation = table.relation
        return table_filter is None or table_filter(
            relation.namespace or "pg_catalog", relation.relation_name
        )

    # -- transaction metadata and heartbeats (bridge.sink.metadata) -----------------------------

    def _metadata_ids(self) -> MetadataRecords:
        metadata = self.options.metadata
        assert metadata is not None
        if not metadata.ids:
            for name, subject in metadata.subjects().items():
                metadata.ids[name] = self.registrar.register(
                    subject, metadata.schemas[name], table="<metadata>"
                )
        return metadata

    def _count_for_metadata(self, event: ChangeEvent) -> None:
        if not self._tx_begun:
            self._tx_begun = True
            self._tx_tables = Counter()
            key, value = self._metadata_ids().begin(event.tx, time.time_ns() // 1_000_000)
            self._send(transaction_topic(self._metadata_ids().topic_prefix), key, value)
        self._tx_tables[event.table.table] += 1

    def _publish_transaction_end(self, end: TransactionEnd) -> None:
        metadata = self._metadata_ids()
        published = TransactionEnd(
            end.tx, end.end_lsn, sum(self._tx_tables.values()), dict(self._tx_tables)
        )
        key, value = metadata.end(published, time.time_ns() // 1_000_000)
        self._send(transaction_topic(metadata.topic_prefix), key, value)
        self._tx_begun = False

    def _publish_heartbeat(self) -> None:
        """A liveness record; not data, so no acknowledgement depends on it."""
        metadata = self._metadata_ids()
        key, value = metadata.heartbeat(int(self.tracker.flush_lsn), time.time_ns() // 1_000_000)
        self.publisher.publish(heartbeat_topic(metadata.topic_prefix), key, value, _ignore)
        self._next_heartbeat = time.monotonic() + self.options.heartbeat_interval

    def _publish_message(self, event: LogicalMessageEvent) -> None:
        key_id, value_id = self._message_schema_ids()
        key, value = self.serializer.message(event, key_id, value_id)
        if event.tx is None:
            # Outside any transaction: its own unit of acknowledgement at the message's LSN.
            counts = self._register(event.message.lsn)
            self._send(self.options.messages_topic, key, value, counts=counts)
            self._complete(counts, None)
        else:
            self._send(self.options.messages_topic, key, value)
        self.observer.on_events("<messages>", "m", 1)

    def _send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        *,
        count: int = 1,
        counts: TransactionCounts | None = None,
    ) -> None:
        """Publish one record of the current transaction (or of ``counts``'s).

        ``count`` records are counted as sent first (publish() may serve callbacks, when the
        queue is full, before it returns): a delete counts its tombstone along with it, and the
        tombstone is then sent with ``count=0``.
        """
        if counts is None:
            counts = self._require_counts()
        counts.sent += count
        self.publisher.publish(topic, key, value, counts.on_delivered)
        self.events_published += 1

    def _registered(self, table: RelationSchemas) -> RegisteredSchemas:
        cached = self._ids.get(id(table))
        if cached is not None:
            return cached[1]
        # A new table version: register (an incompatible change raises here, before any
        # record of it is produced, so nothing after it can be acknowledged).
        ids = self.registrar.register_relation(table)
        if ids.key_id is not None and table.key_schema is not None:
            self.serializer.register_parsed(ids.key_id, table.key_schema)
        self.serializer.register_parsed(ids.value_id, table.value_schema)
        self._ids[id(table)] = (table, ids)
        return ids

    def _message_schema_ids(self) -> tuple[int, int]:
        if self._message_ids is None:
            topic = self.options.messages_topic
            key_schema: dict[str, Any] = static_schema("message_key")
            value_schema = message_value_schema()
            key_id = self.registrar.register(f"{topic}-key", key_schema, table="<messages>")
            value_id = self.registrar.register(f"{topic}-value", value_schema, table="<messages>")
            self.serializer.register_parsed(key_id, key_schema)
            self.serializer.register_parsed(value_id, value_schema)
            self._message_ids = (key_id, value_id)
        return self._message_ids

    def _require_counts(self) -> TransactionCounts:
        if self._counts is None:
            raise RuntimeError("a record was produced outside a registered transaction")
        return self._counts

    # -- shutdown -------------------------------------------------------------------------------

    def _end_kafka_transaction(self, flush: Lsn, failed: bool) -> Lsn:
        """At shutdown: commit the open Kafka transaction when it holds whole source
        transactions only and nothing ``failed``, else abort it (a part of one must not become
        visible); what the slot may then be confirmed to."""
        eos = self.exactly_once
        assert eos is not None
        try:
            # A failed delivery fails the transaction too: it can only be aborted.
            if self._counts is None and not failed:
                eos.commit()
            else:
                eos.abort()
        except PgBridgeError as exc:
            logger.warning("ending the Kafka transaction at shutdown failed: %s", exc)
            eos.abort()
        return eos.acknowledgeable(flush)

    def _shutdown(self, failed: bool) -> None:
        """Deliver what was handed to Kafka, confirm what is complete, disconnect.

        Runs on a clean stop and after an error (``failed``) alike: confirming the delivered
        prefix is always safe, and it spares a restart from resending it.
        """
        started = time.monotonic()
        try:
            remaining = self.publisher.flush(self.options.shutdown_flush_timeout)
            if remaining:
                logger.warning(
                    "%d record(s) not delivered at shutdown; they will be resent", remaining
                )
        except PgBridgeError as exc:  # the failure that stopped the pipeline, typed: no trace
            failed = True
            logger.warning("flushing the producer at shutdown failed: %s", exc)
        except Exception:
            failed = True
            logger.exception("flushing the producer at shutdown failed")
        finally:
            flush = self.tracker.flush_lsn
            try:
                self._report()
                flush = self.tracker.flush_lsn
            except Exception:
                logger.exception("reporting deliveries at shutdown failed")
            if self.exactly_once is not None:
                flush = self._end_kafka_transaction(flush, failed)
            self.source.acknowledge(flush)
            self.source.close()
            if self.incremental is not None:
                self.incremental.close()
            logger.info(
                "stopped: confirmed %s, %d record(s) published, %.1f s to drain",
                flush,
                self.events_published,
                time.monotonic() - started,
            )
