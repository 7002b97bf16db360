"""Incremental snapshots while streaming: DBLog's watermarks, driven by signals.

Why this design (and not the initial snapshot's exported snapshot)
    A table must be copied again while the stream runs (a table added later, a consumer or a
    Delta table to rebuild, a subset of rows to repair) without pausing the stream or holding
    a transaction open for the whole copy. DBLog (Netflix, 2020), which Debezium's incremental
    snapshots implement, copies a table in small chunks and reconciles each chunk with the
    stream; pgbridge does the same, with Debezium's signals, so its tooling carries over.

One chunk (:meth:`IncrementalSnapshotter.tick`, on the pipeline's thread, between messages)
    1. insert ``snapshot-window-open`` into the signal table (committed: the low watermark);
    2. read the next ``incremental.snapshot.chunk.size`` rows by the table's primary key (or a
       unique index on NOT NULL columns) after the last key copied, with the publication's row
       filter and the signal's ``additional-conditions``, each row encoded as the stream
       encodes it and held by its Kafka message key (:class:`~bridge.snapshot.window.ChunkWindow`);
    3. insert ``snapshot-window-close`` (the high watermark).
    The stream then reaches the low watermark: the window opens; every change of that table the
    stream carries until the high watermark (inserts, updates, deletes, both halves of a key
    change) removes its key's row from the chunk, a truncate removes them all; at the high
    watermark the rows left are published, inside the watermark's transaction, as ``op: "r"``
    with ``source.snapshot = "incremental"`` and the position ``(that commit's LSN, next
    seq)``. Every streamed change that is newer than a copied row comes after it in
    ``(commit_lsn, seq)`` order, every older one before it: replaying a topic by that order
    gives the source table, under any concurrent writes. The next chunk starts right away.

    PostgreSQL makes a commit visible just after writing its record, so under load a
    transaction can precede the low watermark in the stream yet be invisible to the read: the
    read takes its snapshot in a REPEATABLE READ transaction together with
    ``pg_current_snapshot()``, and changes of the transactions that snapshot saw in progress
    count as inside the window wherever they arrive (:class:`~bridge.snapshot.window.ChunkWindow`),
    which closes a gap DBLog's algorithm (and Debezium's) leaves open.

Durable, resumable (:mod:`bridge.snapshot.incremental_state`)
    The progress (tables, last key per table, paused or not, signals acted on) is written to
    ``<state.dir>/incremental-<slot>.json`` only once Kafka acknowledged the stream past the
    transaction that produced it, so the file never claims a row that is not in Kafka. After
    a crash (even SIGKILL) the next start resumes after the last recorded chunk; the chunk in
    flight is read again, as a new chunk with new watermarks (the old ones replayed from the
    slot match nothing and are ignored), and its rows come again at a later position: upserts
    of the same rows, never a lost one.

What is copied
    Tables of the publication that pgbridge captures and whose records have a message key (the
    reconciliation is by key): a table without one is skipped with a log line saying why, as
    is a table without a unique key to read it in order. ``execute-snapshot`` names tables by
    exact ``schema.table`` or by regex; a table already being copied is not queued twice.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import psycopg

from bridge import signal_messages
from bridge.events import EventBuilder
from bridge.pgoutput.lsn import Lsn
from bridge.pgoutput.messages import Message, TupleData
from bridge.schema import RelationSchemas
from bridge.signals import (
    CLOSE_WINDOW,
    EXECUTE,
    LOG,
    OPEN_WINDOW,
    PARTITION,
    PARTITION_CHANGE,
    PAUSE,
    RESUME,
    STOP,
    Signal,
    SignalError,
    parse_signal,
    send_signal,
    signal_table_name,
)
from bridge.snapshot import catalog
from bridge.snapshot.incremental_state import (
    IncrementalState,
    TableTask,
    incremental_record,
    load_incremental,
    save_incremental,
)
from bridge.snapshot.reader import SESSION_SETTINGS
from bridge.snapshot.window import ChunkWindow
from bridge.source.protocol import quote_ident, quote_literal
from bridge.source.table_watch import PartitionChange
from bridge.types.errors import ConversionError

if TYPE_CHECKING:
    from bridge.snapshot.kafka_signals import KafkaSignals

logger = logging.getLogger(__name__)

#: How many of the stream's last transactions a chunk's read is checked against. The race it
#: catches spans the milliseconds between a commit record and the commit becoming visible.
_ENDED_REMEMBERED = 4096

__all__ = ["IncrementalSettings", "IncrementalSnapshotter", "SnapshotOutput", "state_file"]

#: After a failed chunk (a lock timeout, the server away), wait this long before the next try.
_RETRY_AFTER_S = 5.0
#: A chunk whose watermarks the stream has not brought back after this long is reported.
_STALL_WARNING_S = 60.0


#: The snapshotter of the running pipeline (read by bridge.snapshot.metrics on each scrape).
CURRENT: IncrementalSnapshotter | None = None


def state_file(state_dir: Path, slot: str) -> Path:
    return state_dir.expanduser() / f"incremental-{slot}.json"


@dataclass(frozen=True, slots=True)
class IncrementalSettings:
    dsn: str
    publication: str
    #: schema.table; ``None``: signals travel as signed logical messages
    #: (:mod:`bridge.signal_messages`), signed with ``signal_key``.
    signal_table: str | None
    chunk_size: int
    state_path: Path
    slot: str
    #: (schema, table) -> captured (the bridge's table filter)
    captured: Callable[[str, str], bool]
    #: Act on signals inserted into the signal table (``source`` channel); its watermarks are
    #: read whatever this says.
    table_signals: bool = True
    signal_key: bytes | None = None


class SnapshotOutput(Protocol):
    """What the snapshotter needs from the pipeline (:class:`bridge.pipeline.Pipeline`)."""

    def snapshot_key(self, table: RelationSchemas, row: Mapping[str, Any]) -> bytes | None:
        """The Kafka key of ``row`` as the stream would publish it (registering the table)."""
        ...

    def publish_snapshot_rows(
        self, table: RelationSchemas, rows: list[Mapping[str, Any]], *, deleted: bool = False
    ) -> None:
        """Publish ``rows`` as ``r`` events in the current transaction."""
        ...


@dataclass(slots=True)
class _Chunk:
    window: ChunkWindow[Mapping[str, Any]]
    table: RelationSchemas
    task: TableTask
    last_key: list[str] | None
    rows_read: int
    full: bool  # as many rows as asked: the table may have more
    started: float


class IncrementalSnapshotter:
    """Signals in, chunks out; see the module docstring. Runs on the pipeline's thread."""

    def __init__(
        self,
        settings: IncrementalSettings,
        builder: EventBuilder,
        committed: IncrementalState | None = None,
    ) -> None:
        """``committed``: exactly once, the newest version Kafka committed (taken when it is
        later than the file's)."""
        self.settings = settings
        self.builder = builder
        recorded = load_incremental(settings.state_path)
        if committed is not None and (recorded is None or committed.lsn > recorded.lsn):
            logger.info(
                "incremental snapshot progress: Kafka's offsets topic holds a later version "
                "than the state file (a crash between the two): taking it"
            )
            save_incremental(settings.state_path, committed)
            recorded = committed
        self.state = recorded or IncrementalState(settings.slot)
        self.signal_schema, self.signal_name = (
            signal_table_name(settings.signal_table) if settings.signal_table else ("", "")
        )
        #: Versions of the state waiting for Kafka: (end LSN of their transaction, state).
        self._pending: list[tuple[Lsn, IncrementalState]] = []
        self._last_end = Lsn(self.state.lsn)  # of the last stream transaction seen
        self._in_kafka = Lsn(self.state.lsn)  # the newest version handed to a Kafka transaction
        self._dirty = False
        self._chunk: _Chunk | None = None
        self._output: SnapshotOutput | None = None
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._not_before = 0.0
        self._stall_reported = False
        #: The topic whose changes the open window reconciles (``None``: no window open).
        self.watched_topic: str | None = None
        #: Transactions the stream ended lately, newest last: a chunk read whose snapshot still
        #: saw one of them in progress raced its commit (see _start_chunk).
        self._ended: deque[int] = deque(maxlen=_ENDED_REMEMBERED)
        #: The Kafka signal channel, when enabled (bridge.snapshot.kafka_signals).
        self.kafka: KafkaSignals | None = None
        if self.state.running:
            logger.info(
                "incremental snapshot under way: %s%s",
                ", ".join(t.table for t in self.state.tables if not t.finished),
                " (paused)" if self.state.paused else "",
            )

        global CURRENT
        CURRENT = self  # for the metrics (bridge.snapshot.metrics)

    def attach(self, output: SnapshotOutput) -> None:
        self._output = output

    def is_signal_table(self, table: RelationSchemas) -> bool:
        if not self.signal_name:
            return False
        relation = table.relation
        return (relation.namespace or "pg_catalog") == self.signal_schema and (
            relation.relation_name == self.signal_name
        )

    # -- from the stream ------------------------------------------------------------------------

    def on_signal_row(self, row: TupleData) -> None:
        """An insert into the signal table, at its place in the stream."""
        values = row.values()
        if len(values) < 2 or values[0] is None or values[1] is None:
            logger.warning("signal table row without id or type: ignored")
            return
        data = values[2] if len(values) > 2 else None
        try:
            signal = parse_signal(
                values[0].decode(), values[1].decode(), None if data is None else data.decode()
            )
        except (SignalError, UnicodeDecodeError) as exc:
            logger.warning("%s: ignored", exc)
            return
        self.on_signal(signal, from_stream=True)

    def on_signal_message(self, message: Message) -> None:
        """A logical message with pgbridge's signal prefix, at its place in the stream."""
        key = self.settings.signal_key
        if key is None or not message.transactional:
            logger.warning("signal message at %s ignored: not one this bridge sent", message.lsn)
            return
        try:
            signal = signal_messages.decode(key, message.content)
        except SignalError as exc:
            logger.warning("signal message at %s: %s", message.lsn, exc)
            return
        self.on_signal(signal, from_stream=True, trusted=True)

    def on_signal(self, signal: Signal, *, from_stream: bool, trusted: bool = False) -> None:
        """Act on a signal; from the stream, inside its transaction (watermarks included)."""
        if signal.type in (OPEN_WINDOW, CLOSE_WINDOW):
            self._watermark(signal)
            return
        if (
            from_stream
            and not trusted
            and not self.settings.table_signals
            and not signal.id.startswith("kafka-")
        ):
            logger.info("signal %s in the signal table ignored: channel 'source' is off", signal.id)
            return
        if signal.id in self.state.handled:
            return  # replayed after a restart: already acted on
        try:
            if signal.type == EXECUTE:
                self._execute(signal)
            elif signal.type == STOP:
                self._stop(signal)
            elif signal.type == PAUSE:
                self.state.paused = True
                logger.info("incremental snapshot paused (signal %s)", signal.id)
            elif signal.type == RESUME:
                self.state.paused = False
                logger.info("incremental snapshot resumed (signal %s)", signal.id)
            elif signal.type == LOG:
                logger.info("signal %s: %s", signal.id, signal.data.get("message", ""))
        except SignalError as exc:
            logger.warning("%s: ignored", exc)
        self.state.remember(signal.id)
        if from_stream:
            self._dirty = True
        else:
            self._changed_between_transactions()

    def forward(self, signal: Signal) -> None:
        """A signal from another channel (Kafka): written into the signal table, whence it
        comes back through the stream and is acted on at its place there, its effect recorded
        as durably as the table's own signals. The row's id is the record's, so a record
        read again after a crash is not inserted twice."""
        self._send(signal.type, signal.data, signal.id, if_absent=True)

    def snapshot_new_tables(self, tables: list[tuple[str, int]]) -> None:
        """Tables published since the bridge started (bridge.source.table_watch): an
        ``execute-snapshot`` signal for each captured one, through the signal table (so it is
        durable), with an id per table OID (so it is sent once)."""
        for table, oid in tables:
            if table == self._self() or not self.settings.captured(*table.split(".", 1)):
                continue
            self._send(
                EXECUTE,
                {"data-collections": [table], "type": "incremental"},
                f"new-table-{oid}",
                if_absent=True,
            )

    def snapshot_partitions(self, changes: list[PartitionChange]) -> None:
        """Partitions attached to or detached from a captured table while running
        (bridge.source.table_watch): pgoutput sent none of their rows, so an attached one's
        rows are copied into the table's topic and a detached one's deleted from it, each by
        an ``execute-snapshot`` through the signal table (durable) reading that partition."""
        for change in changes:
            if change.root == self._self() or not self.settings.captured(
                *change.root.split(".", 1)
            ):
                continue
            kind = "attached" if change.attached else "detached"
            self._send(
                EXECUTE,
                {
                    "data-collections": [change.root],
                    "type": "incremental",
                    PARTITION: change.partition,
                    PARTITION_CHANGE: kind,
                },
                f"partition-{kind}-{change.oid}-{uuid.uuid4().hex[:8]}",
            )

    def snapshot_rewritten(self, table: str, signal_id: str) -> None:
        """A table whose rows DDL rewrote without sending them (bridge.events: on_rewrite):
        an ``execute-snapshot`` signal through the signal table (durable), under ``signal_id``
        (the same when the stream is replayed, so it is sent once)."""
        if table == self._self() or not self.settings.captured(*table.split(".", 1)):
            return
        logger.info("%s: requesting an incremental snapshot (%s)", table, signal_id)
        try:
            self._send(
                EXECUTE,
                {"data-collections": [table], "type": "incremental"},
                signal_id,
                if_absent=True,
            )
        except psycopg.Error as exc:  # the stream goes on; the fix stays a command away
            self._drop_connection()
            logger.warning(
                "%s: could not request its incremental snapshot (%s): run `pgbridge snapshot "
                "%s` once the database answers",
                table,
                str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                table,
            )

    def saw(self, key: bytes | None, xid: int) -> None:
        """The stream published a change of the watched table with this key, in ``xid``."""
        chunk = self._chunk
        if chunk is not None and key is not None:
            chunk.window.saw(key[5:], xid)

    def saw_truncate(self, xid: int) -> None:
        if self._chunk is not None:
            self._chunk.window.truncated(xid)

    def transaction_end(self, end_lsn: Lsn, xid: int | None = None) -> None:
        """The stream's transaction ``xid`` ended: what it changed in the state waits for
        Kafka."""
        if xid is not None:
            self._ended.append(xid)
        self._last_end = end_lsn
        if self._dirty:
            self.state.lsn = int(end_lsn)
            self._pending.append((end_lsn, self.state.copy()))
            self._dirty = False

    def kafka_records(self, up_to: Lsn) -> list[tuple[bytes, bytes]]:
        """Exactly once: the record of the newest version made in a stream transaction up to
        ``up_to`` and not yet given, for the Kafka transaction that commits them (none when
        nothing changed)."""
        newest: tuple[Lsn, IncrementalState] | None = None
        for lsn, version in self._pending:
            if lsn > up_to:
                break
            if lsn > self._in_kafka:
                newest = (lsn, version)
        if newest is None:
            return []
        self._in_kafka = newest[0]
        return [incremental_record(newest[1])]

    def acknowledged(self, flush_lsn: Lsn) -> None:
        """Kafka has everything before ``flush_lsn``: record the newest state covered."""
        pending = self._pending
        if not pending or pending[0][0] > flush_lsn:
            return
        newest = None
        while pending and pending[0][0] <= flush_lsn:
            newest = pending.pop(0)[1]
        assert newest is not None
        save_incremental(self.settings.state_path, newest)

    # -- chunks ---------------------------------------------------------------------------------

    def tick(self, stream_xid: int | None = None) -> None:
        """Between messages: read Kafka signals, start the next chunk if one is due.
        ``stream_xid``: the transaction the stream is in the middle of, if any (its changes
        so far went by before a chunk existed to drop their keys)."""
        if self.kafka is not None:
            self.kafka.poll()
        chunk = self._chunk
        if chunk is not None:
            if not self._stall_reported and time.monotonic() - chunk.started > _STALL_WARNING_S:
                self._stall_reported = True
                logger.warning(
                    "incremental snapshot of %s: the watermarks of chunk %s have not come back "
                    "through the stream for %.0f s; %s",
                    chunk.task.table,
                    chunk.window.chunk_id,
                    _STALL_WARNING_S,
                    f"is {self._self()} in publication {self.settings.publication}?"
                    if self.signal_name
                    else "is the stream far behind?",
                )
            return
        state = self.state
        if state.paused or not state.running or time.monotonic() < self._not_before:
            return
        task = state.current
        assert task is not None
        try:
            self._start_chunk(task, stream_xid)
        except psycopg.Error as exc:
            self._drop_connection()
            self._not_before = time.monotonic() + _RETRY_AFTER_S
            logger.warning(
                "incremental snapshot of %s: reading a chunk failed (%s); trying again in %.0f s",
                task.table,
                str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                _RETRY_AFTER_S,
            )

    def _start_chunk(self, task: TableTask, stream_xid: int | None = None) -> None:
        conn = self._connection()
        published = {t.table: t for t in catalog.published_tables(conn, self.settings.publication)}
        table = published.get(task.table)
        if table is None:
            self._skip(task, "it is no longer in the publication")
            return
        source = table.qualified
        if task.partition is not None:
            schema, name = task.partition.split(".", 1)
            source = f"{quote_ident(schema)}.{quote_ident(name)}"
            if conn.execute("SELECT to_regclass(%s) IS NULL", (source,)).fetchone() != (False,):
                self._skip(task, f"partition {task.partition} no longer exists")
                return
        info = catalog.read_table(conn, table)
        info.describe_to(self.builder.mapper)
        schemas = self.builder.schemas_for(info.relation)
        if schemas.key_schema is None:
            self._skip(
                task,
                "its records have no message key to reconcile the copy with the stream by "
                "(give it a primary key, REPLICA IDENTITY USING INDEX, or message.key.columns)",
            )
            return
        if not info.chunk_key:
            self._skip(task, "it has no primary key or unique index on NOT NULL columns")
            return
        assert self._output is not None
        chunk_id = uuid.uuid4().hex[:20]
        self._send(OPEN_WINDOW, {"table": task.table}, f"{chunk_id}-open")
        rows, last_key, invisible = self._read(conn, info, source, table.row_filter, task)
        raced = invisible.intersection([*self._ended, stream_xid])
        if raced:
            # PostgreSQL makes a commit visible just after writing its record; under load the
            # stream can carry a transaction (all of it, or the part before this tick, before
            # this chunk existed to drop its keys) that the read still saw in progress, so the
            # read holds rows older than what the stream already published. Read the chunk
            # again: by then the commit is visible.
            logger.info(
                "incremental snapshot of %s: the chunk's read raced the commit of transaction(s) "
                "%s, which the stream already carried; reading it again",
                task.table,
                sorted(raced),
            )
            self._forget_watermarks(chunk_id)
            return
        self._send(CLOSE_WINDOW, {"table": task.table}, f"{chunk_id}-close")
        window: ChunkWindow[Mapping[str, Any]] = ChunkWindow(
            chunk_id, schemas.topic, invisible=invisible
        )
        for after in rows:
            key = self._output.snapshot_key(schemas, after)
            assert key is not None  # keyed table
            window.rows[key[5:]] = after
        self._chunk = _Chunk(
            window,
            schemas,
            task,
            last_key,
            len(rows),
            len(rows) >= self.settings.chunk_size,
            time.monotonic(),
        )
        self._stall_reported = False
        # Watched from now on, not only from the low watermark: see ChunkWindow.invisible.
        self.watched_topic = schemas.topic
        if task.status == "pending":
            task.status = "copying"
            logger.info("%s started", task.describe())

    def _read(
        self,
        conn: psycopg.Connection[tuple[Any, ...]],
        info: catalog.TableCatalog,
        source: str,
        row_filter: str | None,
        task: TableTask,
    ) -> tuple[list[Mapping[str, Any]], list[str] | None, frozenset[int]]:
        """The chunk's rows, encoded, the chunk key of its last row (as text), and the
        transactions in progress for the read's snapshot (see ChunkWindow.invisible)."""
        columns = [c.name for c in info.relation.columns]
        keys = [c for c, _ in info.chunk_key]
        types = [t for _, t in info.chunk_key]
        select = ", ".join(quote_ident(c) for c in [*columns, *keys])
        conditions = []
        if task.last_key is not None:
            row = ", ".join(quote_ident(k) for k in keys)
            values = ", ".join(
                f"{quote_literal(v)}::{t}" for v, t in zip(task.last_key, types, strict=True)
            )
            conditions.append(f"({row}) > ({values})" if len(keys) > 1 else f"{row} > {values}")
        if row_filter:
            conditions.append(f"({row_filter})")
        if task.condition:
            conditions.append(f"({task.condition})")
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        order = ", ".join(quote_ident(k) for k in keys)
        query = (
            f"SELECT {select} FROM {source}{where} ORDER BY {order} "
            f"LIMIT {int(self.settings.chunk_size)}"
        )
        encoder = self.builder.schemas_for(info.relation).encoder
        ncols = len(columns)
        rows: list[Mapping[str, Any]] = []
        last: list[str] | None = task.last_key
        with conn.cursor() as cur:
            # One snapshot for both: the rows, and what was in progress when it was taken.
            cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            snapshot = cur.execute("SELECT pg_current_snapshot()::text").fetchone()
            cur.execute(query.encode(), prepare=False)  # text results: the output functions'
            result = cur.pgresult
            assert result is not None and snapshot is not None
            in_progress = str(snapshot[0]).split(":")[2]
            invisible = frozenset(
                int(x) & 0xFFFFFFFF for x in in_progress.split(",") if x
            )  # xid8 -> the 32-bit xid pgoutput sends
            for i in range(result.ntuples):
                raw = [result.get_value(i, j) for j in range(ncols + len(keys))]
                try:
                    after, _ = encoder.encode(_tuple(raw[:ncols]))
                except ConversionError as exc:
                    if self.builder.failures.stops:
                        raise
                    logger.warning("incremental snapshot of %s: row skipped: %s", task.table, exc)
                    continue
                finally:
                    last = [bytes(v or b"").decode() for v in raw[ncols:]]
                rows.append(after)
            cur.execute("COMMIT")
        return rows, last, invisible

    def _watermark(self, signal: Signal) -> None:
        chunk = self._chunk
        if chunk is None or not signal.id.startswith(chunk.window.chunk_id + "-"):
            return  # an earlier attempt's watermark, replayed after a restart
        window = chunk.window
        if signal.type == OPEN_WINDOW:
            window.open()
            self.watched_topic = window.topic
            return
        rows = window.close()
        self.watched_topic = None
        self._chunk = None
        assert self._output is not None
        task = chunk.task
        if rows:
            self._output.publish_snapshot_rows(chunk.table, rows, deleted=task.detached)
        task.last_key = chunk.last_key
        task.rows += len(rows)
        task.chunks += 1
        if not chunk.full:
            task.status = "done"
            logger.info(
                "%s complete: %d rows in %d chunks",
                task.describe(),
                task.rows,
                task.chunks,
            )
        self._dirty = True
        self._forget_watermarks(chunk.window.chunk_id)

    # -- signals --------------------------------------------------------------------------------

    def _execute(self, signal: Signal) -> None:
        request = signal.snapshot_request()
        conn = self._connection()
        published = [t.table for t in catalog.published_tables(conn, self.settings.publication)]
        captured = [
            t for t in published if self.settings.captured(*t.split(".", 1)) and t != self._self()
        ]
        if request.partition is not None:
            self._queue_partition(signal, request.collections[0], request.partition, captured)
            return
        queued = {t.table for t in self.state.tables if not t.finished and t.partition is None}
        for pattern in request.collections:
            matched = [t for t in captured if t == pattern] or [
                t for t in captured if re.fullmatch(pattern, t)
            ]
            if not matched:
                logger.warning(
                    "execute-snapshot %s: no captured table of publication %s matches %r",
                    signal.id,
                    self.settings.publication,
                    pattern,
                )
            for table in matched:
                if table in queued:
                    logger.info("execute-snapshot %s: %s is already queued", signal.id, table)
                    continue
                condition = request.condition_for(pattern) or request.condition_for(table)
                self.state.tables.append(TableTask(table, condition))
                queued.add(table)
                logger.info(
                    "incremental snapshot of %s queued%s (signal %s)",
                    table,
                    f" where {condition}" if condition else "",
                    signal.id,
                )

    def _queue_partition(
        self, signal: Signal, table: str, partition: str, captured: list[str]
    ) -> None:
        detached = signal.snapshot_request().detached
        if table not in captured:
            logger.warning("execute-snapshot %s: %s is not a captured table", signal.id, table)
            return
        task = TableTask(table, partition=partition, detached=detached)
        self.state.tables.append(task)
        logger.info("%s queued (signal %s)", task.describe(), signal.id)

    def _stop(self, signal: Signal) -> None:
        request = signal.snapshot_request()
        for task in self.state.tables:
            if task.finished:
                continue
            if not request.collections or any(
                task.table == p or re.fullmatch(p, task.table) for p in request.collections
            ):
                task.status = "stopped"
                if self._chunk is not None and self._chunk.task is task:
                    self._abandon_chunk()
                logger.info("incremental snapshot of %s stopped (signal %s)", task.table, signal.id)

    def _self(self) -> str:
        return f"{self.signal_schema}.{self.signal_name}" if self.signal_name else ""

    # -- helpers --------------------------------------------------------------------------------

    def _skip(self, task: TableTask, reason: str) -> None:
        task.status = "skipped"
        task.reason = reason
        logger.warning("%s skipped: %s", task.describe(), reason)
        self._changed_between_transactions()

    def _changed_between_transactions(self) -> None:
        """A change made outside any stream transaction and without rows of its own: it goes
        with the current transaction's version, else with the newest version waiting for
        Kafka, else to the file now."""
        if self._dirty:
            return
        if self._pending:
            self._pending[-1] = (self._pending[-1][0], self.state.copy())
        else:
            # After the last stream transaction's version: the later of the two at a start.
            self.state.lsn = int(self._last_end)
            save_incremental(self.settings.state_path, self.state)

    def _abandon_chunk(self) -> None:
        self._chunk = None
        self.watched_topic = None

    def _send(
        self,
        signal_type: str,
        data: dict[str, Any],
        signal_id: str,
        *,
        if_absent: bool = False,
    ) -> None:
        """One signal into the stream: a signal table row, or a signed logical message. A
        message sent twice (``if_absent``) is acted on once: its id is remembered."""
        conn = self._connection()
        table = self.settings.signal_table
        if table is not None:
            send_signal(conn, table, signal_type, data, signal_id, if_absent=if_absent)
            return
        assert self.settings.signal_key is not None
        signal_messages.emit(conn, self.settings.signal_key, signal_type, data, signal_id)

    def _forget_watermarks(self, chunk_id: str) -> None:
        """Delete a finished chunk's watermark rows (the signal table would grow forever)."""
        if self.settings.signal_table is None:
            return  # messages: nothing stored
        try:
            schema, name = self.signal_schema, self.signal_name
            self._connection().execute(
                f"DELETE FROM {quote_ident(schema)}.{quote_ident(name)} WHERE id IN "
                f"({quote_literal(chunk_id + '-open')}, {quote_literal(chunk_id + '-close')})"
            )
        except psycopg.Error as exc:
            self._drop_connection()
            logger.debug("could not delete the watermarks of chunk %s: %s", chunk_id, exc)

    def _connection(self) -> psycopg.Connection[tuple[Any, ...]]:
        if self._conn is None or self._conn.closed:
            conn = psycopg.connect(
                self.settings.dsn, autocommit=True, application_name="pgbridge-incremental"
            )
            for setting, value in SESSION_SETTINGS:
                conn.execute(f"SET {setting} = {quote_literal(value)}")
            # A chunk is read on the streaming thread: never wait long behind a lock.
            conn.execute("SET lock_timeout = '5s'")
            self._conn = conn
        return self._conn

    def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def close(self) -> None:
        self._drop_connection()
        if self.kafka is not None:
            self.kafka.close()
            self.kafka = None


def _tuple(values: list[bytes | None]) -> TupleData:
    """Text values (``None``: NULL) as the TupleData pgoutput sends in text mode."""
    kinds = bytearray()
    buffer = bytearray()
    spans: list[int] = []
    for value in values:
        if value is None:
            kinds.append(0x6E)  # 'n'
            spans += (0, 0)
        else:
            kinds.append(0x74)  # 't'
            spans += (len(buffer), len(buffer) + len(value))
            buffer += value
    return TupleData(bytes(kinds), bytes(buffer), tuple(spans))
