"""Snapshot workers: each one a thread with its own connection inside the shared snapshot.

:func:`open_connections` prepares them before anything is copied or planned: the first
connection opens ``BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`` and imports the slot's
exported snapshot (``SET TRANSACTION SNAPSHOT``; a resumed snapshot takes its own and exports it
with ``pg_export_snapshot()``), then locks every table of the snapshot ``IN ACCESS SHARE MODE``,
as pg_dump does: DDL, TRUNCATE, VACUUM FULL and CLUSTER wait until the snapshot is over, because
a table rewritten after a snapshot was taken appears empty to it. The other connections import
the same snapshot and take the same locks with ``NOWAIT``: one that would have to queue behind a
waiting ``ACCESS EXCLUSIVE`` request (itself waiting for the first connection) is closed rather
than risk a deadlock the server cannot see, and the snapshot runs with fewer workers. Each
connection then checks that no table was rewritten between the snapshot and its lock.

Workers take chunks from the shared task queue until it is empty. Each chunk is one
``COPY (SELECT …) TO STDOUT (FORMAT binary)`` (read by :mod:`bridge.snapshot.copy_out`),
parsed by :mod:`bridge.snapshot.copy_binary` and encoded by the table's
:class:`~bridge.schema.RowEncoder` (or the C lane, whose records of a batch are packed into one
buffer while every row of the batch is the lane's) on the worker's thread; the events go
to the coordinator in batches over a bounded queue (memory stays bounded whatever the table
size: at most ``queue size * batch`` rows are in flight in this process).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors as pgerrors

from bridge import native
from bridge.events import CHANGE_SETTERS, ChangeEvent, TxContext
from bridge.pgoutput.messages import TupleData
from bridge.schema import RelationSchemas
from bridge.sink.serializer import CopyLane
from bridge.snapshot.copy_binary import CopyBinaryParser
from bridge.snapshot.copy_out import copy_out
from bridge.snapshot.errors import (
    SnapshotImportError,
    SnapshotPermissionError,
    SnapshotTableChangedError,
    SnapshotTableError,
    SnapshotTimeoutError,
)
from bridge.snapshot.plan import (
    MAX_ROWS_PER_CHUNK,
    Chunk,
    TablePlan,
    position,
    select_statement,
)
from bridge.source.protocol import quote_literal
from bridge.types.errors import ConversionError

logger = logging.getLogger(__name__)

__all__ = ["BATCH_ROWS", "ChunkEnd", "RowBatch", "SnapshotConnection", "Task", "WorkerFailed"]

#: A batch handed to the coordinator closes at this many rows or COPY bytes, whichever comes
#: first: with the coordinator's bounded queue, the rows held in this process stay under
#: about ``queue size * BATCH_BYTES`` (plus one row) however wide the rows are.
BATCH_ROWS = 2048
BATCH_BYTES = 1 << 20

#: Session settings of every snapshot connection. Text forms (key bounds, ``col::text``
#: columns) are rendered as the walsender renders them (bridge.runner.WALSENDER_SETTINGS).
#: As pg_dump does: no statement or idle-in-transaction timeout (a chunk may take long, a
#: worker may wait for Kafka), and ``row_security = off``, so that a table with row-level
#: security the role does not bypass is an error naming it rather than a silently partial copy.
SESSION_SETTINGS: tuple[tuple[str, str], ...] = (
    ("TimeZone", "UTC"),
    ("DateStyle", "ISO, MDY"),
    ("IntervalStyle", "postgres"),
    ("extra_float_digits", "3"),
    ("bytea_output", "hex"),
    ("synchronize_seqscans", "off"),
    ("statement_timeout", "0"),
    ("idle_in_transaction_session_timeout", "0"),
    ("row_security", "off"),
)

Conn = psycopg.Connection[tuple[Any, ...]]


#: A snapshot row already encoded by a :class:`~bridge.sink.serializer.CopyLane`: (key, value).
Record = tuple[bytes | None, bytes]


@dataclass(frozen=True, slots=True)
class Task:
    plan: TablePlan
    chunk: Chunk
    schemas: RelationSchemas
    kinds: bytes  # per column: b (binary) or t (text form), see plan.wire_kinds
    lane: CopyLane | None = None  # rows straight to records, where the C encoder can


@dataclass(frozen=True, slots=True)
class Failed:
    """A row the converters refused (the failure policy decides what happens to it)."""

    seq: int
    data: TupleData
    error: Exception  # ConversionError, or AvroWriteError from the serializer


@dataclass(frozen=True, slots=True)
class RowBatch:
    """Rows of one chunk in order: records the lane encoded, the others as events (or the
    failures the policy decides on). ``head``: the index and COPY row of the first record,
    ``last``: the COPY row of the last item when it is a record (the coordinator encodes such a
    row again when it is the snapshot's first or last, whose ``source.snapshot`` differs)."""

    table: str
    chunk: int
    events: list[Record | ChangeEvent | Failed]
    nbytes: int  # COPY bytes read
    first_seq: int = 0
    head: tuple[int, bytes] | None = None
    last: bytes | None = None
    records_only: bool = False  # every item a record the lane encoded
    #: The usual batch, every row a record the lane encoded: the records packed in one
    #: buffer (``events`` empty), ``packed_rows`` of them (see CopiedBatch).
    packed: bytearray | None = None
    packed_rows: int = 0

    @property
    def rows(self) -> int:
        return len(self.events) if self.packed is None else self.packed_rows


@dataclass(frozen=True, slots=True)
class ChunkEnd:
    table: str
    chunk: int
    rows: int


@dataclass(frozen=True, slots=True)
class WorkerFailed:
    error: BaseException


@dataclass(frozen=True, slots=True)
class WorkerDone:
    name: str


def classify(table: str, exc: psycopg.Error, chunk: int | None = None) -> SnapshotTableError:
    """A server error met while reading ``table`` as the typed error naming it."""
    sqlstate = exc.sqlstate
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, pgerrors.InsufficientPrivilege):
        return SnapshotPermissionError(table, f"permission denied: {text}", chunk=chunk,
                                       sqlstate=sqlstate)  # fmt: skip
    if isinstance(exc, (pgerrors.QueryCanceled, pgerrors.LockNotAvailable)):
        return SnapshotTimeoutError(table, f"cancelled: {text}", chunk=chunk, sqlstate=sqlstate)
    if isinstance(exc, (pgerrors.UndefinedTable, pgerrors.UndefinedColumn)):
        return SnapshotTableChangedError(
            table, f"dropped, renamed or altered during the snapshot: {text}", chunk=chunk,
            sqlstate=sqlstate,
        )  # fmt: skip
    return SnapshotTableError(table, text, chunk=chunk, sqlstate=sqlstate)


class SnapshotConnection:
    """One connection in the snapshot: imported (or its own), tables locked, ready to copy."""

    def __init__(
        self, dsn: str, snapshot_name: str | None, name: str = "pgbridge-snapshot"
    ) -> None:
        self.conn: Conn = psycopg.connect(dsn, autocommit=True, application_name=name)
        try:
            for setting, value in SESSION_SETTINGS:
                self.conn.execute(f"SET {setting} = {quote_literal(value)}")
            self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            if snapshot_name is not None:
                try:
                    self.conn.execute(f"SET TRANSACTION SNAPSHOT {quote_literal(snapshot_name)}")
                except psycopg.Error as exc:
                    raise SnapshotImportError(snapshot_name, str(exc).strip()) from exc
        except BaseException:
            self.conn.close()
            raise

    def close(self) -> None:
        self.conn.close()

    def snapshot_xmin(self) -> int:
        """The xmin of this transaction's snapshot (the source block's txId of snapshot rows)."""
        row = self.conn.execute(
            "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
        ).fetchone()
        return int(row[0]) if row else 0

    def export(self) -> str:
        """Export this transaction's snapshot for the workers (``pg_export_snapshot``); valid
        while this connection's transaction lasts."""
        row = self.conn.execute("SELECT pg_export_snapshot()").fetchone()
        assert row is not None
        return str(row[0])

    def lock(self, tables: list[tuple[str, str, int]], *, nowait: bool = False) -> bool:
        """ACCESS SHARE on every table (``(schema.table, quoted name, oid)``), then: was any
        rewritten since the snapshot? With ``nowait``, ``False`` when a lock is not free."""
        suffix = " NOWAIT" if nowait else ""
        for table, qualified, oid in tables:
            try:
                self.conn.execute(f"LOCK TABLE {qualified} IN ACCESS SHARE MODE{suffix}")
                # pg_class as of the snapshot vs. the current catalog (the lock made this
                # session read the invalidations of whatever committed before it).
                row = self.conn.execute(
                    "SELECT c.relfilenode::bigint, pg_relation_filenode(c.oid)::bigint, "
                    "c.relkind::text FROM pg_class c WHERE c.oid = %s",
                    (oid,),
                ).fetchone()
            except pgerrors.LockNotAvailable:
                if nowait:
                    return False
                raise
            except psycopg.Error as exc:
                raise classify(table, exc) from exc
            if row is None:
                raise SnapshotTableChangedError(table, "dropped during the snapshot")
            if row[2] != "p" and row[0] != row[1]:
                raise SnapshotTableChangedError(
                    table,
                    "rewritten after the snapshot was taken (TRUNCATE, ALTER TABLE, VACUUM FULL "
                    "or CLUSTER); the snapshot would see it empty, so it resumes in a new "
                    "transaction",
                )
        return True

    def copy(
        self,
        plan: TablePlan,
        chunk: Chunk,
        kinds: bytes | None = None,
        lane: CopyLane | None = None,
        first_seq: int = 0,
    ) -> Iterator[CopiedBatch]:
        """The chunk's rows in batches: each row a :data:`Record` where ``lane`` encodes it
        (row ``i`` of the chunk at ``seq`` ``first_seq + i``), else its TupleData."""
        statement = select_statement(plan, chunk, kinds)
        parser = CopyBinaryParser(len(plan.columns), plan.table, kinds)
        row_kinds = parser.kinds
        items: list[TupleData | Record] = []
        # A batch's records are packed into one buffer (no Python object per row) until a row
        # needs the Python path; from then on that batch's rows are items, in order.
        pack = bytearray()
        packed = 0
        one_row, feed, took_rows = parser.row, parser.feed, parser.took_rows
        encode = native.encode_copy_rows if lane is not None else None
        if lane is not None:
            row_plan, key_plan, key_header = lane.row_plan, lane.key_plan, lane.key_header
            value_head, prefix, tail = lane.value_head, lane.prefixes["true"], lane.tail()
        nbytes = encoded = 0
        seq = batch_seq = first_seq
        head: tuple[int, bytes] | None = None
        last = b""
        try:
            for block in copy_out(self.conn, statement):
                i, end = 0, len(block)
                while i < end:
                    taken = 0
                    if encode is not None and parser.at_row:
                        # As many rows as the lane encodes, up to the batch's bounds, in C.
                        taken, taken_bytes = encode(
                            block, i, items if items else pack,
                            BATCH_ROWS - len(items) - packed, BATCH_BYTES - nbytes,
                            row_kinds, row_plan, key_plan, key_header, value_head, prefix,
                            seq, tail,
                        )  # fmt: skip
                        if not items:
                            packed += taken
                    if taken:
                        took_rows(taken, taken_bytes)
                        if head is None:
                            head = (len(items) + packed - taken, block[i])
                        i += taken
                        last = block[i - 1]
                        nbytes += taken_bytes
                        seq += taken
                        encoded += taken
                    else:  # a row the lane leaves to Python, or not a whole row
                        data = block[i]
                        i += 1
                        nbytes += len(data)
                        row = one_row(data)  # the usual case: one message, one row
                        rows = feed(data) if row is None else None
                        if packed and (row is not None or rows):
                            # The batch's records so far become its first items (in order).
                            assert native.unpack_records is not None
                            items = native.unpack_records(pack, 0, packed)  # type: ignore[assignment]
                            pack, packed = bytearray(), 0
                        if row is not None:
                            items.append(row)
                            seq += 1
                        elif rows:
                            items += rows
                            seq += len(rows)
                    if len(items) + packed >= BATCH_ROWS or nbytes >= BATCH_BYTES:
                        yield _batch(items, nbytes, batch_seq, head, last, encoded, pack, packed)
                        items, nbytes, batch_seq, head, encoded = [], 0, seq, None, 0
                        pack, packed = bytearray(), 0
                        if lane is not None:
                            tail = lane.tail()
            parser.finish()
        except psycopg.Error as exc:
            raise classify(plan.table, exc, chunk.index) from exc
        if items or packed or nbytes:
            yield _batch(items, nbytes, batch_seq, head, last, encoded, pack, packed)


@dataclass(frozen=True, slots=True)
class CopiedBatch:
    """Rows read from one COPY, in order (see :meth:`SnapshotConnection.copy`)."""

    items: list[TupleData | Record]
    nbytes: int
    first_seq: int
    head: tuple[int, bytes] | None  # index and COPY row of the first record the lane encoded
    last: bytes | None  # the COPY row of the last row, when the lane encoded it
    records_only: bool = False  # every item a record the lane encoded
    #: Every row a record the lane encoded, packed in one buffer (bridge/native/packed.h)
    #: instead of ``items`` (then empty): ``packed_rows`` of them.
    packed: bytearray | None = None
    packed_rows: int = 0

    @property
    def rows(self) -> int:
        return len(self.items) if self.packed is None else self.packed_rows


def _batch(
    items: list[TupleData | Record],
    nbytes: int,
    first_seq: int,
    head: tuple[int, bytes] | None,
    last: bytes,
    encoded: int,
    pack: bytearray,
    packed: int,
) -> CopiedBatch:
    if packed:
        return CopiedBatch([], nbytes, first_seq, head, last, True, pack, packed)
    tail = last if items and type(items[-1]) is tuple else None
    return CopiedBatch(items, nbytes, first_seq, head, tail, bool(items) and encoded == len(items))


def open_connections(
    dsn: str,
    snapshot_name: str | None,
    tables_of: Callable[[Conn], list[tuple[str, str, int]]],
    count: int,
) -> tuple[list[SnapshotConnection], str]:
    """Up to ``count`` connections in one snapshot, every table locked in each (see the module
    doc), and the snapshot's name. ``snapshot_name`` None: the first takes and exports its own.
    ``tables_of(first connection)``: the ``(schema.table, quoted name, oid)`` to lock."""
    first = SnapshotConnection(dsn, snapshot_name, "pgbridge-snapshot-0")
    connections = [first]
    try:
        tables = tables_of(first.conn)
        first.lock(tables)
        name = snapshot_name if snapshot_name is not None else first.export()
        for i in range(1, max(1, count)):
            other = SnapshotConnection(dsn, name, f"pgbridge-snapshot-{i}")
            if other.lock(tables, nowait=True):
                connections.append(other)
            else:
                other.close()
                logger.warning(
                    "snapshot worker %d not started: a lock request is queued on a table "
                    "(DDL or TRUNCATE waiting for the snapshot); continuing with %d worker(s)",
                    i,
                    len(connections),
                )
                break
    except BaseException:
        for connection in connections:
            connection.close()
        raise
    return connections, name


def run_worker(
    name: str,
    connection: SnapshotConnection,
    tasks: queue.Queue[Task],
    out: queue.Queue[Any],
    stop: threading.Event,
    run: int,
    tx: TxContext,
) -> None:
    """The body of one worker thread (its connection imported and locked): copy chunks until
    none is left or ``stop``.

    Everything it produces, including its failure, goes to ``out``; it ends with
    :class:`WorkerDone` or :class:`WorkerFailed`."""

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    try:
        while not stop.is_set():
            try:
                task = tasks.get_nowait()
            except queue.Empty:
                break
            if not _copy_chunk(connection, task, put, run, tx):
                break
        put(WorkerDone(name))
    except BaseException as exc:
        put(WorkerFailed(exc))
        if stop.is_set():
            # The coordinator is gone: make sure the error is not lost.
            logger.debug("%s failed after stop: %s", name, exc)
    finally:
        connection.close()


def _copy_chunk(
    connection: SnapshotConnection, task: Task, put: Any, run: int, tx: TxContext
) -> bool:
    plan, chunk, schemas = task.plan, task.chunk, task.schemas
    encode = schemas.encoder.encode
    new = object.__new__
    s_op, s_table, s_tx, s_seq, s_before, s_after, s_toast, s_lsn = CHANGE_SETTERS
    lsn = int(tx.commit_lsn)  # snapshot rows are at the consistent point
    base = position(run, chunk.index, 0)
    row = 0
    for batch in connection.copy(plan, chunk, task.kinds, task.lane, base):
        if row + batch.rows > MAX_ROWS_PER_CHUNK:  # seq would run into the next chunk's
            raise SnapshotTableError(plan.table, "over 2**32 rows in one chunk", chunk=chunk.index)
        if batch.records_only:  # the usual batch: nothing to build
            row += batch.rows
            item = RowBatch(
                plan.table, chunk.index, batch.items, batch.nbytes,  # type: ignore[arg-type]
                batch.first_seq, batch.head, batch.last, True, batch.packed, batch.packed_rows,
            )  # fmt: skip
            if not put(item):
                return False
            continue
        events: list[Record | ChangeEvent | Failed] = []
        append = events.append
        for data in batch.items:
            seq = base + row
            row += 1
            if type(data) is tuple:  # encoded by the lane
                append(data)
                continue
            assert isinstance(data, TupleData)
            try:
                after, toast = encode(data)
            except ConversionError as exc:
                append(Failed(seq, data, exc))
                continue
            # The frozen event built through its slot descriptors (bridge.events'
            # new_insert_event does the same for inserts): half the time of __init__.
            event: ChangeEvent = new(ChangeEvent)
            s_op(event, "r")
            s_table(event, schemas)
            s_tx(event, tx)
            s_seq(event, seq)
            s_before(event, None)
            s_after(event, after)
            s_toast(event, tuple(toast) if toast else ())
            s_lsn(event, lsn)
            append(event)
        item = RowBatch(
            plan.table, chunk.index, events, batch.nbytes, batch.first_seq, batch.head, batch.last
        )
        if not put(item):
            return False
    return bool(put(ChunkEnd(plan.table, chunk.index, row)))
