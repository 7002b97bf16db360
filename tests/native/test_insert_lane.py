"""The C insert lane (:func:`bridge.native.encode_insert`,
:class:`bridge.sink.serializer.InsertLane`) against the general path.

What users rely on: an insert (or an update without old row) that takes the lane is published
as exactly the key and value bytes :meth:`EnvelopeSerializer.key` and
:meth:`EnvelopeSerializer.value` write for the event the builder makes of the same message, with
the same ``seq``; whatever the lane declines (unchanged TOAST, NULL keys, values without a native
form) takes that general path, and the stream of records is the same either way.
"""

from __future__ import annotations

import io
import json
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge import native
from bridge.events import ChangeEvent, EventBuilder
from bridge.pgoutput.lsn import Lsn
from bridge.pgoutput.messages import (
    Begin,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    TupleData,
    Update,
)
from bridge.pipeline import Pipeline, PipelineOptions
from bridge.schema import RelationSchemas, TableHints
from bridge.sink.avro_writer import encode_long
from bridge.sink.registry import RegisteredSchemas
from bridge.sink.serializer import (
    EnvelopeSerializer,
    SourceParts,
    SourceSettings,
    debezium_sequence_head,
)
from tests.examples import examples
from tests.native.test_rowavro import TABLES, Table, native_only, rows, tuple_data
from tests.pgoutput.encoder import encode
from tests.rows import pack_records

IDS = RegisteredSchemas(key_id=21, value_id=22)
HINTS = {"hinted_key": TableHints(key_columns=("d", "i8", "f8"))}
FIXED_NS = 1_763_900_000_123_456_789


@contextmanager
def fixed_clock() -> Iterator[None]:
    """The envelope's processing timestamps read a fixed clock (both paths take the same)."""
    saved = time.time_ns
    time.time_ns = lambda: FIXED_NS
    try:
        yield
    finally:
        time.time_ns = saved


def builder_for(table_name: str) -> EventBuilder:
    hints = HINTS.get(table_name)
    builder = EventBuilder("pg", hints={"public.zoo": hints} if hints else None)
    builder.feed(TABLES[table_name].schemas.relation)
    return builder


def serializer_for(schemas: RelationSchemas, ids: RegisteredSchemas = IDS) -> EnvelopeSerializer:
    serializer = EnvelopeSerializer(SourceSettings(topic_prefix="pg", database="zoo"))
    if ids.key_id is not None and schemas.key_schema is not None:
        serializer.register_parsed(ids.key_id, schemas.key_schema)
    serializer.register_parsed(ids.value_id, schemas.value_schema)
    return serializer


def general(
    serializer: EnvelopeSerializer, event: ChangeEvent, ids: RegisteredSchemas = IDS
) -> tuple[bytes | None, bytes]:
    return serializer.key(event, ids), serializer.value(event, ids)


def _plain(schema: Any) -> Any:
    """``schema`` without logical types (the drawn rows hold values such as 24:00:00 that
    fastavro's readers refuse; only the source block is read here)."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_plain(item) for item in schema]
    return schema


def decode_source(schemas: RelationSchemas, value: bytes) -> dict[str, Any]:
    """The source block of a framed envelope, decoded by fastavro."""
    schema = fastavro.parse_schema(_plain(schemas.value_schema))
    envelope = fastavro.schemaless_reader(io.BytesIO(value[5:]), schema, None)
    assert isinstance(envelope, dict)
    source: dict[str, Any] = envelope["source"]
    return source


# --- 1. one record: lane bytes == serializer bytes ---------------------------------------------


@native_only
@pytest.mark.parametrize("table_name", sorted(TABLES))
@pytest.mark.parametrize("op", ["c", "u"])
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_lane_record_equals_serializer_record(table_name: str, op: str, data: Any) -> None:
    table: Table = TABLES[table_name]
    row, expect_native = data.draw(rows(table))
    seq = data.draw(st.sampled_from([0, 1, 0x1FFF, 0x2000, 123_456_789]))
    # The change's own LSN (source.lsn, and the end of source.sequence's text) and the last
    # commit before its transaction (None: not known, a JSON null in source.sequence).
    lsn = data.draw(st.sampled_from([0, 9, 0x1_0000_1FF0, 2**63 - 1]))
    last_commit = data.draw(st.sampled_from([None, Lsn(0), Lsn(0x1_0000_1000)]))
    builder = builder_for(table_name)
    builder.last_commit_lsn = last_commit
    builder.feed(Begin(Lsn(0x1_0000_2000), 800_000_000_000_000, 4242))
    builder._seq = seq  # a position deep in a transaction (snapshot rows' seq are large)
    schemas = builder.relations[16384]
    serializer = serializer_for(schemas)
    lane = serializer.insert_lane(schemas, IDS)
    assert lane is not None
    position = builder.next_position()
    assert position is not None and position[1] == seq
    message: Insert | Update = (
        Insert(None, 16384, row) if op == "c" else Update(None, 16384, None, None, row)
    )
    with fixed_clock():
        record = lane.encode(row, op, *position, lsn)
        builder.message_lsn = lsn
        (event,) = builder.feed(message)
        assert event.lsn == lsn and event.tx.last_commit_lsn == last_commit
        assert isinstance(event, ChangeEvent) and (event.op, event.seq) == (op, seq)
        expected = general(serializer, event)
    if expect_native:
        assert record is not None, "the lane declined a row the C encoder takes"
    if record is not None:
        assert record == expected


@native_only
def test_lane_source_block_follows_the_transaction() -> None:
    """The cached source block is the current transaction's: a second transaction (other xid,
    LSN, commit time) gets its own, in the lane as in the serializer."""
    table_name = "composite_pk"
    builder = builder_for(table_name)
    schemas = builder.relations[16384]
    serializer = serializer_for(schemas)
    lane = serializer.insert_lane(schemas, IDS)
    assert lane is not None
    row = tuple_data(*VALUES)
    with fixed_clock():
        for xid, lsn in ((10, 0x100), (11, 0x200), (12, 0x300)):
            builder.feed(Begin(Lsn(lsn), 700_000_000_000_000 + xid, xid))
            for change in range(3):
                position = builder.next_position()
                assert position is not None
                builder.message_lsn = lsn - 0x60 + 0x20 * change
                record = lane.encode(row, "c", *position, builder.message_lsn)
                (event,) = builder.feed(Insert(None, 16384, row))
                assert isinstance(event, ChangeEvent)
                assert record == general(serializer, event)
                source = decode_source(schemas, record[1])
                assert source["lsn"] == builder.message_lsn
                # Debezium's sequence: [the previous commit's end LSN, this change's LSN].
                previous = None if xid == 10 else lsn - 0x100 + 0x30
                assert json.loads(source["sequence"]) == [
                    None if previous is None else str(previous),
                    str(builder.message_lsn),
                ]
            builder.feed(Commit(0, Lsn(lsn), Lsn(lsn + 0x30), 0))


# A row of every column of TABLES in text form (the i4, txt, tstz, n12_2, d key columns set).
VALUES = (
    ("t", b"-9000000000"),
    ("t", b"12"),
    ("t", b"34"),
    ("t", b"caf\xc3\xa9"),
    ("t", b"vc"),
    ("t", b"bp       "),
    ("t", b"nm"),
    ("t", b'{"a": 1}'),
    ("t", b'{"b": 2}'),
    ("t", b"t"),
    ("t", b"1.5"),
    ("t", b"1234.56"),
    ("t", b"-7"),
    ("t", b"0.000001"),
    ("t", b"0.12345"),
    ("t", b"2024-02-29 12:34:56.789+05:30"),
    ("t", b"1999-12-31 23:59:59"),
    ("t", b"2024-02-29"),
    ("t", b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    ("t", b"\\xdeadbeef"),
    ("t", b"12:00:00.5"),
    ("t", b"1 day 02:03:04.5"),
    ("t", b"0.14285728571428571429"),
    ("t", b"{1,NULL,-3}"),
    ("t", b"{-9223372036854775808}"),
    ("t", b"{}"),
    ("t", b'{"a b","c\\"d",NULL}'),
    ("t", b"{x}"),
    ("t", b"{1.50,NULL}"),
    ("t", b"10.1.2.3"),
)


@native_only
@pytest.mark.parametrize(
    ("why", "change"),
    [
        ("unchanged TOAST", lambda v: (*v[:3], "u", *v[4:])),
        ("NULL in a non-null key column", lambda v: (*v[:2], None, *v[3:])),
        ("binary numeric (no native form)", lambda v: (*v[:11], ("b", b"\x00"), *v[12:])),
        ("NaN numeric", lambda v: (*v[:11], ("t", b"NaN"), *v[12:])),
        ("invalid UTF-8", lambda v: (*v[:3], ("t", b"\xff"), *v[4:])),
        ("infinite date", lambda v: (*v[:17], ("t", b"infinity"), *v[18:])),
        ("fewer columns than the Relation", lambda v: v[:-1]),
    ],
)
def test_lane_declines_what_the_general_path_handles(
    why: str, change: Callable[[tuple[Any, ...]], tuple[Any, ...]]
) -> None:
    builder = builder_for("composite_pk")
    builder.feed(Begin(Lsn(0x500), 700_000_000_000_000, 7))
    schemas = builder.relations[16384]
    lane = serializer_for(schemas).insert_lane(schemas, IDS)
    assert lane is not None
    position = builder.next_position()
    assert position is not None
    assert lane.encode(tuple_data(*VALUES), "c", *position, 0x4F0) is not None
    assert lane.encode(tuple_data(*change(VALUES)), "c", *position, 0x4F0) is None, why


def test_no_lane_without_the_c_encoder_or_with_transaction_metadata(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schemas = builder_for("full").relations[16384]
    with_metadata = EnvelopeSerializer(
        SourceSettings(topic_prefix="pg", database="zoo", provide_transaction_metadata=True)
    )
    with_metadata.register_parsed(IDS.value_id, schemas.value_schema)
    assert with_metadata.insert_lane(schemas, IDS) is None
    monkeypatch.setattr(native, "encode_insert", None)
    assert serializer_for(schemas).insert_lane(schemas, IDS) is None


@native_only
def test_no_lane_for_a_table_with_a_column_without_native_form() -> None:
    table = Table.build([("id", 23, -1), ("price", 790, -1)], keys=["id"])  # money
    schemas = table.schemas
    assert serializer_for(schemas).insert_lane(schemas, IDS) is None


# --- 2. the pipeline: the same records, in the same order, with or without the lane ------------


class _Source:
    def __init__(self, messages: list[LogicalMessage]) -> None:
        self._messages = messages
        self.acknowledged: list[Lsn] = []
        self.message_lsn = 0

    @property
    def start_lsn(self) -> Lsn:
        return Lsn(0)

    def messages(self) -> Iterator[LogicalMessage | None]:
        for n, message in enumerate(self._messages):
            self.message_lsn = 0x10000 + 0x28 * n  # each change its own WAL position
            yield message

    def acknowledge(self, flush_lsn: Lsn) -> None:
        self.acknowledged.append(flush_lsn)

    def close(self) -> None:
        pass


class _Registrar:
    on_wait: Callable[[], None] | None = None

    def register_relation(self, schemas: RelationSchemas) -> RegisteredSchemas:
        return RegisteredSchemas(IDS.key_id if schemas.key_schema else None, IDS.value_id)

    def register(self, subject: str, schema: Any, *, table: str = "?") -> int:
        return 99


class _Publisher:
    on_wait: Callable[[], None] | None = None

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None, bytes | None]] = []
        self._callbacks: list[Callable[[], None]] = []
        self.packed_batches: list[int] = []  # the record count of each packed batch

    def publish(
        self, topic: str, key: bytes | None, value: bytes | None, on_delivered: Callable[[], None]
    ) -> None:
        self.records.append((topic, key, value))
        self._callbacks.append(on_delivered)

    def publish_packed(
        self, topic: str, pack: bytearray, count: int, on_delivered: Callable[[], None]
    ) -> None:
        assert native.unpack_records is not None
        self.packed_batches.append(count)
        for key, value in native.unpack_records(bytes(pack), 0, count):
            self.publish(topic, key, value, on_delivered)

    def send_pending(self) -> None:
        pass

    def poll(self, timeout: float = 0.0) -> int:
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()
        return len(callbacks)

    def flush(self, timeout: float) -> int:
        self.poll()
        return 0

    def close(self, timeout: float = 30.0) -> int:
        return 0


def _stream(table_name: str, tuples: list[TupleData]) -> list[LogicalMessage]:
    relation = TABLES[table_name].schemas.relation
    out: list[LogicalMessage] = [relation]
    for n, group in enumerate((tuples[: len(tuples) // 2], tuples[len(tuples) // 2 :])):
        lsn = Lsn(0x1000 * (n + 1))
        out.append(Begin(lsn, 700_000_000_000_000 + n, 100 + n))
        for i, row in enumerate(group):
            if i % 5 == 3:
                out.append(Update(None, 16384, None, None, row))
            elif i % 5 == 4:
                out.append(Update(None, 16384, "O", row, row))  # FULL: the general path
            else:
                out.append(Insert(None, 16384, row))
        out.append(Delete(None, 16384, "O", group[0]))
        out.append(Commit(0, lsn, Lsn(lsn + 0x30), 700_000_000_000_000 + n))
    return out


def _run(messages: list[LogicalMessage], table_name: str) -> tuple[list[Any], list[Lsn], int]:
    hints = HINTS.get(table_name)
    builder = EventBuilder("pg", hints={"public.zoo": hints} if hints else None)
    serializer = EnvelopeSerializer(SourceSettings(topic_prefix="pg", database="zoo"))
    source, publisher = _Source(messages), _Publisher()
    pipeline = Pipeline(
        source,
        builder,
        _Registrar(),  # type: ignore[arg-type]
        serializer,
        publisher,
        PipelineOptions(messages_topic="pg.messages"),
    )
    with fixed_clock():
        pipeline.run()
    return publisher.records, source.acknowledged, len(pipeline._lanes)


@native_only
@pytest.mark.parametrize("table_name", sorted(TABLES))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_pipeline_publishes_the_same_records_with_and_without_lane(
    table_name: str, data: Any
) -> None:
    table = TABLES[table_name]
    tuples = [data.draw(rows(table))[0] for _ in range(data.draw(st.integers(2, 14)))]
    # Mixed in: rows the lane declines (unchanged TOAST in a non-key column).
    tuples += [tuple_data(*((*VALUES[:6], "u", *VALUES[7:])))]
    messages = _stream(table_name, tuples)
    with_lane, acks, lanes = _run(messages, table_name)
    assert lanes == 1
    saved = native.encode_insert
    native.encode_insert = None
    try:
        without_lane, acks_without, _lanes_without = _run(messages, table_name)
    finally:
        native.encode_insert = saved
    assert with_lane == without_lane
    # Each record carries its own message's WAL position, and Debezium's sequence begins with
    # the end of the commit before its transaction (null for the first after a start).
    change_positions = {
        0x10000 + 0x28 * n: m
        for n, m in enumerate(messages)
        if isinstance(m, Insert | Update | Delete)
    }
    sources = [decode_source(table.schemas, value) for _, _, value in with_lane if value]
    assert len(sources) == len(tuples) + 2  # every row, a delete per transaction
    for source in sources:
        assert source["lsn"] in change_positions
        first_tx = source["commit_lsn"] == 0x1000
        assert json.loads(source["sequence"]) == [
            None if first_tx else str(0x1030),
            str(source["lsn"]),
        ]
    assert [s["lsn"] for s in sources] == sorted(s["lsn"] for s in sources)
    # When polls happen depends on the clock; the confirmed position at the end does not.
    assert acks[-1] == acks_without[-1] == Lsn(0x2030)
    assert acks == sorted(acks)


@native_only
@settings(max_examples=examples(300), deadline=None)
@given(
    last_commit=st.none() | st.integers(0, 2**63 - 1),
    lsn=st.integers(0, 2**63 - 1),
    head=st.binary(max_size=200),
    mid=st.binary(max_size=40),
    end=st.binary(max_size=20),
)
def test_source_block_in_c_equals_python(
    last_commit: int | None, lsn: int, head: bytes, mid: bytes, end: bytes
) -> None:
    """SourceParts.through_lsn's two implementations write the same bytes, and they decode to
    Debezium's sequence text and the LSN."""
    parts = SourceParts(head, debezium_sequence_head(last_commit), mid, end)
    native_bytes = parts.through_lsn(lsn)
    saved = native.encode_source
    native.encode_source = None
    try:
        python_bytes = parts.through_lsn(lsn)
    finally:
        native.encode_source = saved
    assert native_bytes == python_bytes
    text = json.dumps([None if last_commit is None else str(last_commit), str(lsn)])
    sequence = text.replace(", ", ",").encode()
    assert python_bytes == b"".join(
        (head, encode_long(len(sequence)), sequence, mid, encode_long(lsn), end)
    )


# --- 3. runs of inserts straight from XLogData frames (encode_frames) ---------------------------


def xlogdata(wal_start: int, payload: bytes) -> bytes:
    """An XLogData frame of the replication stream (the server's WAL end a bit further on)."""
    return b"w" + struct.pack("!QQq", wal_start, wal_start + 0x1000, 0) + payload


def insert_frame(wal_start: int, data: TupleData, oid: int = 16384) -> bytes:
    return xlogdata(wal_start, encode(Insert(None, oid, data)))


COMMIT_FRAME = xlogdata(0x9000, encode(Commit(0, Lsn(0x8F00), Lsn(0x9000), 0)))


def _lane_in_transaction(
    table_name: str, seq: int = 0
) -> tuple[EventBuilder, Any, tuple[Any, int]]:
    builder = builder_for(table_name)
    builder.feed(Begin(Lsn(0x1_0000_2000), 800_000_000_000_000, 4242))
    builder._seq = seq
    schemas = builder.relations[16384]
    lane = serializer_for(schemas).insert_lane(schemas, IDS)
    assert lane is not None
    position = builder.next_position()
    assert position is not None
    return builder, lane, position


@native_only
@pytest.mark.parametrize("table_name", sorted(TABLES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_frames_run_packs_the_records_encode_makes_row_by_row(table_name: str, data: Any) -> None:
    """A run is the lane's record of each Insert frame in turn (seq after seq, each with its
    own frame's WAL start), up to the first row the lane declines, packed."""
    table = TABLES[table_name]
    tuples = [data.draw(rows(table))[0] for _ in range(data.draw(st.integers(1, 20)))]
    seq = data.draw(st.sampled_from([0, 7, 0x1FFF, 123_456_789]))
    _, lane, (tx, first_seq) = _lane_in_transaction(table_name, seq)
    lsns = [0x2_0000_0000 + 0x58 * i for i in range(len(tuples))]
    # A frame of another kind before the run: start points past it.
    frames = [COMMIT_FRAME] + [
        insert_frame(lsn, row) for lsn, row in zip(lsns, tuples, strict=True)
    ]
    with fixed_clock():
        expected = []
        for i, row in enumerate(tuples):
            record = lane.encode(row, "c", tx, first_seq + i, lsns[i])
            if record is None:
                break
            expected.append(record)
        pack = bytearray()
        taken, last_lsn = lane.encode_frames(frames, 1, 1, pack, 16384, tx, first_seq)
    assert taken == len(expected)
    assert pack == pack_records(expected)
    assert last_lsn == (lsns[taken - 1] if taken else 0)


@native_only
def test_frames_run_stops_at_anything_but_an_insert_of_its_table() -> None:
    _, lane, position = _lane_in_transaction("composite_pk")
    row = tuple_data(*VALUES)
    inserts = [insert_frame(0x100 * (i + 1), row) for i in range(3)]
    malformed = inserts[0][:-1]  # a tuple cut short: the decoder's to report
    for stop_frame, why in [
        (COMMIT_FRAME, "a Commit"),
        (insert_frame(0x900, row, oid=16385), "another table's Insert"),
        (b"k" + struct.pack("!QqB", 0x900, 0, 0), "a keepalive"),
        (malformed, "a malformed Insert"),
        (insert_frame(0x900, tuple_data(*VALUES[:3], "u", *VALUES[4:])), "a declined row"),
    ]:
        pack = bytearray()
        frames = [*inserts, stop_frame, *inserts]
        with fixed_clock():
            taken, last_lsn = lane.encode_frames(frames, 0, 1, pack, 16384, *position)
        assert (taken, last_lsn) == (3, 0x300), why
        assert len(native_unpack(pack)) == 3, why


@native_only
def test_frames_run_shorter_than_min_rows_is_left_whole() -> None:
    """Fewer leading Inserts than min_rows: nothing is encoded, the pack is untouched."""
    _, lane, position = _lane_in_transaction("composite_pk")
    frames = [insert_frame(0x100 * (i + 1), tuple_data(*VALUES)) for i in range(3)]
    frames.append(COMMIT_FRAME)
    pack = bytearray(b"kept")
    assert lane.encode_frames(frames, 0, 4, pack, 16384, *position) == (0, 0)
    assert pack == b"kept"
    assert lane.encode_frames(frames, 0, 3, pack, 16384, *position)[0] == 3
    assert lane.encode_frames(frames, 4, 1, pack, 16384, *position) == (0, 0)  # past the end


def native_unpack(pack: bytearray) -> list[tuple[bytes | None, bytes]]:
    assert native.unpack_records is not None
    count = 0
    pos = 0
    while pos < len(pack):
        (key_len,) = struct.unpack_from("!i", pack, pos)
        pos += 4 + max(key_len, 0)
        (value_len,) = struct.unpack_from("!i", pack, pos)
        pos += 4 + value_len
        count += 1
    return native.unpack_records(pack, 0, count)
