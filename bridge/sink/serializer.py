"""Change events -> Kafka record bytes: the Debezium envelope in Avro, Confluent-framed.

Confluent wire format: magic byte 0, the 4-byte big-endian schema id, then the Avro binary
encoding (no container header). Each registered schema is compiled once by
:mod:`bridge.sink.avro_writer` (byte-for-byte fastavro's encoding, several times faster); the
envelope of a change is assembled from parts so that what is constant is encoded once: the
source block per table and transaction (:class:`SourceParts`: only ``sequence``, ``lsn`` and
``seq`` are written per change) and the processing timestamps per millisecond.
"""

from __future__ import annotations

import struct
import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Final, NamedTuple

from bridge import __version__, native
from bridge.events import ChangeEvent, LogicalMessageEvent, TxContext
from bridge.pgoutput.lsn import pg_timestamp_to_unix_micros
from bridge.pgoutput.messages import TupleData
from bridge.schema import (
    ENVELOPE_FIELDS,
    UNCHANGED_TOAST_FIELD,
    EncodedRow,
    RelationSchemas,
    static_schema,
)
from bridge.sink.avro_writer import Writer, compile_writer, encode_long, write_long
from bridge.sink.registry import RegisteredSchemas

_MAGIC = struct.Struct(">bI")


def _string_bytes(text: str) -> bytes:
    buf = bytearray()
    write_long(buf, len(text.encode()))
    return bytes(buf) + text.encode()


#: Avro encodings of the longs 0 .. 0x1FFF (one or two bytes), by value.
SMALL_LONGS: Final = tuple(encode_long(n) for n in range(0x2000))

#: Avro encodings of the op codes.
_OPS: Final = {op: _string_bytes(op) for op in "cudtrm"}


def _clock_bytes(now_ns: int) -> bytes:
    """ts_ms, ts_us, ts_ns of the envelope at ``now_ns``, each a ["null", "long"] union."""
    now_us = now_ns // 1000
    buf = bytearray()
    for ts in (now_us // 1000, now_us, now_us * 1000):
        buf.append(2)
        write_long(buf, ts)
    return bytes(buf)


def _tail(op: str, clock: bytes) -> bytes:
    """What follows ``seq`` in a record without transaction block or unchanged TOAST columns:
    transaction null, op, the timestamps, an empty array."""
    return b"\x00" + _OPS[op] + clock + b"\x00"


def frame(schema_id: int, payload: bytes) -> bytes:
    """Confluent framing of an Avro payload."""
    return _MAGIC.pack(0, schema_id) + payload


@dataclass(frozen=True, slots=True)
class SourceSettings:
    topic_prefix: str  # Debezium's connector "name" field
    database: str
    provide_transaction_metadata: bool = False


def message_value_schema() -> dict[str, Any]:
    """The value schema of the messages topic, with the source block inlined."""
    value = static_schema("message_value")
    value["fields"][2]["type"] = static_schema("source")
    return value


#: Processing timestamps (the envelope's ts_ms/ts_us/ts_ns) are taken at most once per this
#: many nanoseconds and their encoding reused: three 9-byte varints per record cost more than
#: the rest of the envelope's fixed part, and a 1 ms resolution is what Debezium's ts_ms has.
_CLOCK_TICK_NS: Final = 1_000_000


@dataclass(frozen=True, slots=True)
class _EnvelopeWriters:
    """The compiled pieces of one table version's value schema."""

    header: bytes  # Confluent framing
    no_before: bytes  # framing, then before = null and the branch byte of a present after
    row: Writer  # the Value record (before/after)
    source_head: Writer  # the source block's fields before sequence
    source_mid: Writer  # ... between sequence and lsn
    source_end: Writer  # ... between lsn and seq
    transaction: Writer  # the transaction block record
    toast: Writer  # array of strings


#: The source block's fields (schemas/source.avsc); the envelope is assembled from parts only
#: for exactly this layout: three constant runs around the per-change sequence and lsn.
SOURCE_FIELDS: Final = (
    ("version", "connector", "name", "ts_ms", "snapshot", "db"),
    "sequence",
    ("ts_us", "ts_ns", "schema", "table", "txId"),
    "lsn",
    ("xmin", "commit_lsn"),
    "seq",
)


class SourceParts(NamedTuple):
    """The source block of one table in one transaction, encoded but for its per-change fields:
    ``head`` + ``sequence`` + ``mid`` + ``lsn`` + ``end`` + ``seq``. ``head`` ends with the
    union branch of a present ``sequence`` and ``mid`` with that of a present ``lsn``;
    ``sequence_head`` is the text of ``sequence`` up to the change's LSN (``["<last commit>","``),
    which ends with ``"]``. A tuple, for :func:`bridge.native.encode_insert` to read."""

    head: bytes
    sequence_head: bytes
    mid: bytes
    end: bytes

    def through_lsn(self, lsn: int) -> bytes:
        """The source block up to ``seq`` for the change at ``lsn``."""
        encode_source = native.encode_source
        if encode_source is not None:
            return encode_source(self, lsn)  # the same bytes, a tenth of the time
        text = b'%b%d"]' % (self.sequence_head, lsn)
        n = len(text)
        return b"".join(
            (
                self.head,
                SMALL_LONGS[n] if n < 0x2000 else encode_long(n),
                text,
                self.mid,
                encode_long(lsn),
                self.end,
            )
        )


def debezium_sequence_head(last_commit_lsn: int | None) -> bytes:
    """Debezium's ``sequence`` (Jackson's compact JSON of [last commit LSN, LSN] as strings) up
    to the LSN."""
    return b'[null,"' if last_commit_lsn is None else b'["%d","' % last_commit_lsn


def _envelope_writers(schema_id: int, schema: dict[str, Any]) -> _EnvelopeWriters | None:
    """Split a value schema into the writers of its parts, or ``None`` if it is not the
    envelope built by :mod:`bridge.schema` (then the generic writer encodes a dict)."""
    fields = schema.get("fields") if isinstance(schema, dict) else None
    if not fields or tuple(f["name"] for f in fields) != ENVELOPE_FIELDS:
        return None
    by_name = {f["name"]: f["type"] for f in fields}
    before, after, source = by_name["before"], by_name["after"], by_name["source"]
    transaction = by_name["transaction"]
    source_types = (
        {f["name"]: f["type"] for f in source["fields"]} if isinstance(source, dict) else {}
    )
    head, _, mid, _, end, _ = SOURCE_FIELDS
    if not (
        isinstance(before, list)
        and before[0] == "null"
        and isinstance(before[1], dict)
        and isinstance(after, list)
        and after[0] == "null"
        and isinstance(source, dict)
        and tuple(f["name"] for f in source["fields"])
        == (*head, "sequence", *mid, "lsn", *end, "seq")
        and source_types["sequence"] == ["null", "string"]
        and source_types["lsn"] == ["null", "long"]
        and source_types["seq"] == "long"
        and isinstance(transaction, list)
        and transaction[0] == "null"
        and by_name["op"] == "string"
        and all(by_name[ts] == ["null", "long"] for ts in ("ts_ms", "ts_us", "ts_ns"))
    ):
        return None

    def run(names: tuple[str, ...]) -> Writer:
        return compile_writer(
            {**source, "fields": [f for f in source["fields"] if f["name"] in names]}
        )

    return _EnvelopeWriters(
        header=_MAGIC.pack(0, schema_id),
        no_before=_MAGIC.pack(0, schema_id) + b"\x00\x02",
        row=compile_writer(before[1]),
        source_head=run(head),
        source_mid=run(mid),
        source_end=run(end),
        transaction=compile_writer(transaction[1]),
        toast=compile_writer(by_name[UNCHANGED_TOAST_FIELD]),
    )


class InsertLane:
    """The Kafka record of an insert (or an update without old row) of one table version in one
    C call (:func:`bridge.native.encode_insert`): the framed key and the framed envelope value,
    byte for byte what :meth:`EnvelopeSerializer.key` and :meth:`EnvelopeSerializer.value`
    write for the :class:`~bridge.events.ChangeEvent` the builder would have made of it.

    Prepared once per table version and schema ids (:meth:`EnvelopeSerializer.insert_lane`);
    the constant pieces (framings, the source block of the transaction, the tail after
    ``seq``) come from the serializer's caches. :meth:`encode` answers ``None`` whenever the
    C encoder does (a NULL key, unchanged TOAST, a value it does not reproduce exactly): the
    caller then takes the ordinary path, which makes the same record or raises the typed error.
    """

    __slots__ = ("_key_header", "_key_plan", "_parts", "_row_plan", "_serializer", "_table")

    def __init__(
        self,
        serializer: EnvelopeSerializer,
        table: str,
        parts: _EnvelopeWriters,
        row_plan: bytes,
        key_plan: bytes | None,
        key_header: bytes | None,
    ) -> None:
        self._serializer = serializer
        self._table = table
        self._parts = parts
        self._row_plan = row_plan
        self._key_plan = key_plan
        self._key_header = key_header

    def encode(
        self, data: TupleData, op: str, tx: TxContext, seq: int, lsn: int
    ) -> tuple[bytes | None, bytes] | None:
        """(key, value) of the change ``op`` (``c`` or ``u``) at ``seq`` of ``tx``, whose WAL
        record is at ``lsn``, or ``None``."""
        encode_insert = native.encode_insert
        assert encode_insert is not None  # no lane is made without it
        source = self._source(tx)
        return encode_insert(
            data.buffer,
            data.kinds,
            data.spans,
            self._row_plan,
            self._key_plan,
            self._key_header,
            self._parts.no_before,
            source,
            lsn,
            seq,
            self._serializer._tails[op],
        )

    def encode_frames(
        self,
        frames: list[bytes],
        start: int,
        min_rows: int,
        pack: bytearray,
        oid: int,
        tx: TxContext,
        seq: int,
    ) -> tuple[int, int]:
        """The inserts of this table (relation ``oid``) leading ``frames[start:]`` (XLogData
        frames of the replication stream) packed into ``pack``, at ``seq``, ``seq + 1``, ... of
        ``tx``, each with its frame's WAL start as ``lsn``: ``(rows, last lsn)``; ``(0, 0)``
        when fewer than ``min_rows`` lead. The run stops before a frame that is anything else
        or that :meth:`encode` would answer ``None`` for (the ordinary path's)."""
        encode_frames = native.encode_insert_frames
        assert encode_frames is not None  # no run is offered without it
        source = self._source(tx)
        return encode_frames(
            frames,
            start,
            min_rows,
            len(frames),
            pack,
            oid,
            self._row_plan,
            self._key_plan,
            self._key_header,
            self._parts.no_before,
            source,
            seq,
            self._serializer._tails["c"],
        )

    def _source(self, tx: TxContext) -> SourceParts:
        """The transaction's source block parts for this table, with the clock (the tail's
        timestamps) brought up to date."""
        s = self._serializer
        table = self._table
        source = s._source_parts.get(table) if tx is s._source_tx else None
        if source is None:
            source = s._parts_of_source(tx, table, self._parts)
        if time.time_ns() >= s._clock_until_ns:
            s._timestamps()
        return source


@dataclass(frozen=True, slots=True)
class CopyLane:
    """The Kafka record of a snapshot row (op ``r``) straight from one binary COPY row, in one
    C call (:func:`bridge.native.encode_copy_row`): byte for byte what
    :meth:`EnvelopeSerializer.key` and :meth:`EnvelopeSerializer.value` write for the
    :class:`~bridge.events.ChangeEvent` the snapshot would have built of that row.

    Made on the serializer's thread (:meth:`EnvelopeSerializer.copy_lane`) with every constant
    part already encoded, then only read: safe to use from the snapshot's worker threads. The
    source block up to ``seq`` is kept for each ``source.snapshot`` marker: every row of a
    snapshot has the same ``lsn``, its consistent point. A ``None`` answer (a row
    that is not one whole COPY row, a NULL key, a value the C encoder does not reproduce) sends
    the row to the ordinary path, which makes the same record or raises the typed error.
    """

    row_plan: bytes
    key_plan: bytes | None
    key_header: bytes | None
    value_head: bytes
    prefixes: dict[str, bytes]  # source.snapshot marker -> source block up to seq

    @staticmethod
    def tail() -> bytes:
        """What follows ``seq``, with the processing timestamps of now (take it per batch)."""
        return _tail("r", _clock_bytes(time.time_ns()))

    def encode(
        self, data: bytes, kinds: bytes, seq: int, marker: str = "true", tail: bytes | None = None
    ) -> tuple[bytes | None, bytes] | None:
        """(key, value) of the COPY row ``data`` (``kinds``: ``b``/``t`` per selected column)."""
        encode_copy_row = native.encode_copy_row
        assert encode_copy_row is not None  # no lane is made without it
        return encode_copy_row(
            data,
            kinds,
            self.row_plan,
            self.key_plan,
            self.key_header,
            self.value_head,
            self.prefixes[marker],
            seq,
            self.tail() if tail is None else tail,
        )


class EnvelopeSerializer:
    """Encodes keys and envelopes of one bridge; caches compiled schemas by registry id.

    Not thread-safe (the pipeline calls it from its one thread): it caches the encoded source
    block of the current transaction and the encoded processing timestamps.
    """

    def __init__(self, settings: SourceSettings) -> None:
        self.settings = settings
        self._writers: dict[int, tuple[bytes, Writer]] = {}  # id -> (framing, writer)
        self._envelopes: dict[int, _EnvelopeWriters | None] = {}
        self._table_order: Counter[str] = Counter()
        self._order_tx: tuple[int, int] | None = None
        # The source block is the same for every change of one table in one transaction but
        # for sequence, lsn and seq: its parts are kept per table for the current transaction.
        self._source_tx: TxContext | None = None
        self._source_parts: dict[str, SourceParts] = {}
        self._clock_until_ns = 0
        self._clock: bytes = b""
        # What follows seq in a record without transaction block or unchanged TOAST columns,
        # per op (transaction null, op, timestamps, empty array); renewed with the clock.
        self._tails: dict[str, bytes] = {}
        self._tx_metadata = settings.provide_transaction_metadata

    def register_parsed(self, schema_id: int, schema: dict[str, Any]) -> None:
        if schema_id not in self._writers:
            self._writers[schema_id] = (_MAGIC.pack(0, schema_id), compile_writer(schema))
            self._envelopes[schema_id] = _envelope_writers(schema_id, schema)

    def insert_lane(self, table: RelationSchemas, ids: RegisteredSchemas) -> InsertLane | None:
        """The :class:`InsertLane` of a table version whose schemas are registered (and given to
        :meth:`register_parsed`), or ``None`` where its records need the general path: no C
        encoder, a column without a native form, transaction metadata in the envelope, a value
        schema not shaped like bridge.schema's."""
        if native.encode_insert is None or self._tx_metadata or table.routed_key is not None:
            return None  # (the lanes write the row's key fields only)
        parts = self._envelopes.get(ids.value_id)
        row_plan, key_plan = table.encoder.plans
        if parts is None or row_plan is None:
            return None
        key_header: bytes | None = None
        if ids.key_id is not None and table.key_schema is not None:
            if key_plan is None:
                return None  # the key is encoded from the row dict
            key_header = self._writers[ids.key_id][0]
        else:
            key_plan = None
        return InsertLane(self, table.table, parts, row_plan, key_plan, key_header)

    def copy_lane(
        self, table: RelationSchemas, ids: RegisteredSchemas, tx: TxContext
    ) -> CopyLane | None:
        """The :class:`CopyLane` of a table's snapshot rows in the snapshot ``tx`` (whose
        ``snapshot`` marker each row's own replaces), or ``None`` where the rows need the
        general path (see :meth:`insert_lane`)."""
        lane = self.insert_lane(table, ids)
        if lane is None or native.encode_copy_row is None:
            return None
        prefixes = {
            marker: self._parts_of_source(
                replace(tx, snapshot=marker), table.table, lane._parts
            ).through_lsn(int(tx.commit_lsn))
            for marker in ("first", "true", "last")
        }
        return CopyLane(
            lane._row_plan, lane._key_plan, lane._key_header, lane._parts.no_before, prefixes
        )

    def _encode(self, schema_id: int, record: Any) -> bytes:
        header, writer = self._writers[schema_id]
        buf = bytearray(header)
        writer(buf, record)
        return bytes(buf)

    def key(self, event: ChangeEvent, ids: RegisteredSchemas) -> bytes | None:
        if ids.key_id is None or event.table.key_schema is None:
            return None
        row = event.after if event.after is not None else event.before
        if row is None:
            return None
        table = event.table
        if type(row) is EncodedRow and row.key_avro is not None:
            # Encoded by the C accelerator from the same schema (bridge.native.plan); a routed
            # table's identifier field is last, so its encoding follows.
            return self._writers[ids.key_id][0] + row.key_avro + table.key_suffix
        if table.routed_key is not None:
            return self._encode(ids.key_id, table.key_of(row))
        # The Key record's fields are named like the row's (RelationSchemas.key_of), and a
        # record writer reads only its own fields: the row is encoded as the key directly.
        return self._encode(ids.key_id, row)

    def value(self, event: ChangeEvent, ids: RegisteredSchemas) -> bytes:
        parts = self._envelopes[ids.value_id]
        if parts is None:
            return self._encode(ids.value_id, self._envelope_record(event))
        after = event.after
        if (
            type(after) is EncodedRow
            and event.before is None
            and not event.unchanged_toast
            and not self._tx_metadata
        ):
            # The bulk of a load (inserts, and updates without old row): the C-encoded row
            # between cached parts, joined once.
            tx, table, seq = event.tx, event.table.table, event.seq
            source = self._source_parts.get(table) if tx is self._source_tx else None
            if time.time_ns() >= self._clock_until_ns:
                self._timestamps()
            tail = self._tails.get(event.op)
            if tail is not None:
                return b"".join(
                    (
                        parts.no_before,
                        after.avro,
                        (source or self._parts_of_source(tx, table, parts)).through_lsn(event.lsn),
                        # Snapshot rows' seq are large (bridge.snapshot.plan.position).
                        SMALL_LONGS[seq] if seq < 0x2000 else encode_long(seq),
                        tail,
                    )
                )
        buf = bytearray(parts.header)
        before, after = event.before, event.after
        if before is None:
            buf.append(0)
        elif type(before) is EncodedRow:
            buf.append(2)
            buf += before.avro
        else:
            buf.append(2)
            parts.row(buf, before)
        if after is None:
            buf.append(0)
        elif type(after) is EncodedRow:
            buf.append(2)
            buf += after.avro
        else:
            buf.append(2)
            parts.row(buf, after)
        tx, table = event.tx, event.table.table
        source = self._source_parts.get(table) if tx is self._source_tx else None
        buf += (source or self._parts_of_source(tx, table, parts)).through_lsn(event.lsn)
        seq = event.seq
        if seq < 0x2000:
            buf += SMALL_LONGS[seq]  # most transactions' sequence numbers
        else:
            write_long(buf, seq)
        if self._tx_metadata:
            buf.append(2)
            parts.transaction(buf, self._transaction(event))
        else:
            buf.append(0)
        op = event.op
        buf += _OPS.get(op) or _string_bytes(op)
        if time.time_ns() >= self._clock_until_ns:
            self._timestamps()
        buf += self._clock
        if event.unchanged_toast:
            parts.toast(buf, event.unchanged_toast)
        else:
            buf.append(0)
        return bytes(buf)

    def _parts_of_source(self, tx: TxContext, table: str, parts: _EnvelopeWriters) -> SourceParts:
        """The :class:`SourceParts` of ``table`` in ``tx``, cached for the current one."""
        if tx is not self._source_tx:
            self._source_tx, self._source_parts = tx, {}
        source = self._source_parts.get(table)
        if source is None:
            schema_name, _, table_name = table.partition(".")
            record = self._source(tx, 0, schema_name, table_name, 0)
            head, mid, end = bytearray(), bytearray(), bytearray()
            parts.source_head(head, record)
            parts.source_mid(mid, record)
            parts.source_end(end, record)
            source = self._source_parts[table] = SourceParts(
                bytes(head) + b"\x02",  # sequence: the string branch
                debezium_sequence_head(tx.last_commit_lsn),
                bytes(mid) + b"\x02",  # lsn: the long branch
                bytes(end),
            )
        return source

    def _timestamps(self) -> bytes:
        """ts_ms, ts_us, ts_ns of the envelope (each a ["null", "long"] union), re-read from the
        clock at most every millisecond (see _CLOCK_TICK_NS)."""
        now_ns = time.time_ns()
        if now_ns >= self._clock_until_ns:
            self._clock, self._clock_until_ns = _clock_bytes(now_ns), now_ns + _CLOCK_TICK_NS
            self._tails = {op: _tail(op, self._clock) for op in "cur"}
        return self._clock

    def _envelope_record(self, event: ChangeEvent) -> dict[str, Any]:
        """The envelope as a dict, for value schemas not shaped like bridge.schema's."""
        now_us = time.time_ns() // 1000
        schema_name, _, table_name = event.table.table.partition(".")
        return {
            "before": event.before,
            "after": event.after,
            "source": self._source(event.tx, event.seq, schema_name, table_name, event.lsn),
            "transaction": self._transaction(event)
            if self.settings.provide_transaction_metadata
            else None,
            "op": event.op,
            "ts_ms": now_us // 1000,
            "ts_us": now_us,
            "ts_ns": now_us * 1000,
            UNCHANGED_TOAST_FIELD: list(event.unchanged_toast),
        }

    def message(
        self, event: LogicalMessageEvent, key_id: int, value_id: int
    ) -> tuple[bytes, bytes]:
        msg = event.message
        tx = event.tx or TxContext(xid=0, commit_lsn=msg.lsn, commit_ts=0)
        source = self._source(tx, event.seq, "", "", int(msg.lsn))
        if event.tx is None:
            source["txId"] = None
        value = {
            "op": "m",
            "ts_ms": time.time_ns() // 1_000_000,
            "source": source,
            "message": {"prefix": msg.prefix, "content": msg.content},
        }
        return self._encode(key_id, {"prefix": msg.prefix}), self._encode(value_id, value)

    def _source(self, tx: TxContext, seq: int, schema: str, table: str, lsn: int) -> dict[str, Any]:
        """The source block of the change at ``lsn`` (its WAL record's position)."""
        commit_us = pg_timestamp_to_unix_micros(tx.commit_ts) if tx.commit_ts else 0
        return {
            "version": __version__,
            "connector": "postgresql",
            "name": self.settings.topic_prefix,
            "ts_ms": commit_us // 1000,
            "snapshot": tx.snapshot,
            "db": self.settings.database,
            "sequence": (debezium_sequence_head(tx.last_commit_lsn) + b'%d"]' % lsn).decode(),
            "ts_us": commit_us,
            "ts_ns": commit_us * 1000,
            "schema": schema,
            "table": table,
            "txId": tx.xid,
            "lsn": lsn,
            "xmin": None,
            "commit_lsn": int(tx.commit_lsn),
            "seq": seq,
        }

    def _transaction(self, event: ChangeEvent) -> dict[str, Any]:
        tx_id = (event.tx.xid, int(event.tx.commit_lsn))
        if tx_id != self._order_tx:
            self._order_tx, self._table_order = tx_id, Counter()
        self._table_order[event.table.table] += 1
        return {
            "id": f"{event.tx.xid}:{int(event.tx.commit_lsn)}",
            "total_order": event.seq + 1,
            "data_collection_order": self._table_order[event.table.table],
        }
