"""The coordinator without a database: positions and markers of ``r`` events as the serializer
writes them, and chunks recorded only once Kafka acknowledged all their records."""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import fastavro
import pytest

from bridge import native
from bridge.events import ChangeEvent, EventBuilder, TxContext
from bridge.failures import FailurePolicy
from bridge.pgoutput.lsn import Lsn
from bridge.sink.registry import RegisteredSchemas
from bridge.sink.serializer import EnvelopeSerializer, SourceSettings
from bridge.snapshot.copier import SnapshotCopier, SnapshotSink
from bridge.snapshot.copy_binary import CopyBinaryParser, encode_copy_binary
from bridge.snapshot.plan import TablePlan, key_chunks, position
from bridge.snapshot.reader import ChunkEnd, RowBatch
from bridge.snapshot.state import SnapshotState, TableProgress, load_state
from tests.rows import pack_records, relation

INT4, TEXT = 23, 25


class FakeRegistrar:
    def register_relation(self, schemas: Any) -> RegisteredSchemas:
        return RegisteredSchemas(1, 2)


class FakePublisher:
    """Holds records until ``deliver`` (or flush) runs their callbacks, like librdkafka."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None, bytes | None]] = []
        self.pending: list[Callable[[], None]] = []
        self.hold = False

    def publish(self, topic: str, key: bytes | None, value: bytes | None,
                on_delivered: Callable[[], None]) -> None:  # fmt: skip
        self.records.append((topic, key, value))
        self.pending.append(on_delivered)

    def publish_records(self, topic: str, records: Sequence[tuple[bytes | None, bytes | None]],
                        on_delivered: Callable[[], None]) -> None:  # fmt: skip
        for key, value in records:
            self.publish(topic, key, value, on_delivered)

    def publish_packed(self, topic: str, pack: bytearray, count: int,
                       on_delivered: Callable[[], None]) -> None:  # fmt: skip
        assert native.unpack_records is not None
        self.publish_records(topic, native.unpack_records(pack, 0, count), on_delivered)

    @property
    def outstanding(self) -> int:
        return len(self.pending)

    def poll(self, timeout: float = 0.0) -> int:
        if not self.hold:
            self.flush(0)
        return 0

    def flush(self, timeout: float) -> int:
        pending, self.pending = self.pending, []
        for callback in pending:
            callback()
        return 0


def _copier(tmp_path: Path) -> tuple[SnapshotCopier, FakePublisher, Any]:
    builder = EventBuilder("app")
    rel = relation(columns=(("id", INT4, True), ("body", TEXT, False)))
    builder.feed(rel)
    schemas = builder.relations[rel.relation_oid]
    serializer = EnvelopeSerializer(SourceSettings("app", "shop"))
    publisher = FakePublisher()
    sink = SnapshotSink(FakeRegistrar(), serializer, publisher, FailurePolicy("fail"))  # type: ignore[arg-type]
    plan = TablePlan(
        table="public.items", schema="public", name="items", oid=rel.relation_oid,
        method="key", columns=("id", "body"), chunks=key_chunks([("3",)]),
        order_columns=("id",), order_types=("integer",),
    )  # fmt: skip
    state = SnapshotState("s", "0/ABC", run=0, tables=[TableProgress(plan)])
    copier = SnapshotCopier(sink, state, tmp_path / "state.json", {"public.items": schemas})
    copier._tasks()
    copier._register(schemas)
    copier._tx = TxContext(5, Lsn.parse("0/ABC"), 0, None, "true")
    return copier, publisher, schemas


def _batch(schemas: Any, tx: TxContext, chunk: int, ids: list[int]) -> RowBatch:
    stream = encode_copy_binary([(struct.pack("!i", i), f"row {i}".encode()) for i in ids])
    parser = CopyBinaryParser(2)
    events = [
        ChangeEvent("r", schemas, tx, position(0, chunk, n), None, schemas.encoder.encode(d)[0])
        for n, d in enumerate(parser.feed(stream))
    ]
    return RowBatch("public.items", chunk, events, len(stream))  # type: ignore[arg-type]


def _read(schemas: Any, value: bytes) -> dict[str, Any]:
    assert value[0] == 0
    record = fastavro.schemaless_reader(
        io.BytesIO(value[5:]), fastavro.parse_schema(schemas.value_schema)
    )
    assert isinstance(record, dict)
    return record


def test_copier_r_events_positions_and_first_true_last(tmp_path: Path) -> None:
    copier, publisher, schemas = _copier(tmp_path)
    tx = copier._tx
    assert tx is not None
    copier._publish_batch(_batch(schemas, tx, 0, [1, 2]))
    copier._publish_batch(_batch(schemas, tx, 1, [3, 4]))
    copier._drain(final=True)
    values = [_read(schemas, v) for _, _, v in publisher.records if v is not None]
    assert [v["op"] for v in values] == ["r"] * 4
    assert [v["source"]["snapshot"] for v in values] == ["first", "true", "true", "last"]
    assert {v["source"]["commit_lsn"] for v in values} == {int(Lsn.parse("0/ABC"))}
    assert [v["source"]["seq"] for v in values] == [0, 1, 2**32, 2**32 + 1]
    assert [v["after"]["id"] for v in values] == [1, 2, 3, 4]
    assert all(v["before"] is None for v in values)


def _lane_batch(
    copier: SnapshotCopier,
    schemas: Any,
    tx: TxContext,
    chunk: int,
    ids: list[int],
    lane_rows: set[int],
) -> RowBatch:
    """A batch as a worker hands it over: rows in ``lane_rows`` as the C lane's records, the
    others as events."""
    lane = copier._lanes["public.items"]
    kinds = copier._kinds["public.items"]
    stream = encode_copy_binary([(struct.pack("!i", i), f"row {i}".encode()) for i in ids])
    messages = []
    pos = 19
    for i in ids:
        size = 2 + 4 + 4 + 4 + len(f"row {i}")
        messages.append(stream[pos : pos + size])
        pos += size
    parser = CopyBinaryParser(2)
    parsed = parser.feed(stream)
    items: list[Any] = []
    head = None
    for n, (i, message, data) in enumerate(zip(ids, messages, parsed, strict=True)):
        seq = position(0, chunk, n)
        if i in lane_rows:
            record = lane.encode(message, kinds, seq)
            assert record is not None
            head = head or (n, message)
            items.append(record)
        else:
            items.append(ChangeEvent("r", schemas, tx, seq, None, schemas.encoder.encode(data)[0]))
    last = messages[-1] if ids[-1] in lane_rows else None
    return RowBatch("public.items", chunk, items, len(stream), position(0, chunk, 0), head, last)


@pytest.mark.skipif(native.encode_copy_row is None, reason="needs the C accelerator")
@pytest.mark.parametrize(
    "lane_rows", [{1, 2, 3, 4}, {2, 3}, {1, 4}, {1}, {4}], ids=["all", "middle", "ends", "1", "4"]
)
def test_copier_lane_records_keep_positions_and_first_true_last(
    tmp_path: Path, lane_rows: set[int]
) -> None:
    """Rows the C lane encoded in the worker are published as they are, but the snapshot's
    first and last row get their own marker, whichever path made them."""
    copier, publisher, schemas = _copier(tmp_path)
    tx = copier._tx
    assert tx is not None
    copier._lanes.clear()
    copier._tasks()  # now with the transaction: lanes
    copier._publish_batch(_lane_batch(copier, schemas, tx, 0, [1, 2], lane_rows))
    copier._publish_batch(_lane_batch(copier, schemas, tx, 1, [3, 4], lane_rows))
    copier._drain(final=True)
    values = [_read(schemas, v) for _, _, v in publisher.records if v is not None]
    assert [v["source"]["snapshot"] for v in values] == ["first", "true", "true", "last"]
    assert [v["source"]["seq"] for v in values] == [0, 1, 2**32, 2**32 + 1]
    assert [v["after"]["id"] for v in values] == [1, 2, 3, 4]
    assert {v["source"]["commit_lsn"] for v in values} == {int(Lsn.parse("0/ABC"))}
    keys = [k for _, k, _ in publisher.records]
    assert all(k is not None and k[0] == 0 for k in keys)


def _packed(batch: RowBatch) -> RowBatch:
    """The same batch as a worker hands it over when every row is a lane's record: packed."""
    pack = pack_records(batch.events)  # type: ignore[arg-type]
    return replace(batch, events=[], packed=pack, packed_rows=len(batch.events))


@pytest.mark.skipif(native.encode_copy_row is None, reason="needs the C accelerator")
def test_copier_packed_batches_publish_the_same_records_as_tuples(tmp_path: Path) -> None:
    """Packed batches (the usual ones) go out as the same records, the snapshot's first
    and last row with their markers, in order."""
    published = []
    for packed in (False, True):
        copier, publisher, schemas = _copier(tmp_path / str(packed))
        tx = copier._tx
        assert tx is not None
        copier._lanes.clear()
        copier._tasks()
        for chunk, ids in ((0, [1, 2, 3]), (0, [4]), (1, [5, 6])):
            batch = _lane_batch(copier, schemas, tx, chunk, ids, set(ids))
            copier._publish_batch(_packed(batch) if packed else batch)
        copier._drain(final=True)
        published.append(publisher.records)

    def content(records: list[Any]) -> list[Any]:  # all but the times of publishing
        values = [_read(schemas, v) for _, _, v in records]
        timeless = [{k: v for k, v in d.items() if not k.startswith("ts_")} for d in values]
        return [(t, k) for t, k, _ in records] + timeless

    assert content(published[0]) == content(published[1])
    values = [_read(schemas, v) for _, _, v in published[1] if v is not None]
    assert [v["source"]["snapshot"] for v in values] == ["first"] + ["true"] * 4 + ["last"]
    assert [v["after"]["id"] for v in values] == [1, 2, 3, 4, 5, 6]


def test_copier_records_a_chunk_only_after_every_record_is_acknowledged(
    tmp_path: Path,
) -> None:
    copier, publisher, schemas = _copier(tmp_path)
    tx = copier._tx
    assert tx is not None
    publisher.hold = True
    copier._publish_batch(_batch(schemas, tx, 0, [1, 2]))
    copier._counts[("public.items", 0)].read_done = True
    copier._counts[("public.items", 0)].rows = 2
    copier._publish_batch(_batch(schemas, tx, 1, [3]))  # publishes chunk 0's held last row
    copier._service(0.0)
    state = load_state(tmp_path / "state.json")
    assert state is not None and state.tables[0].done == set()  # published, not acknowledged
    publisher.hold = False
    copier._service(0.0)
    state = load_state(tmp_path / "state.json")
    assert state is not None and state.tables[0].done == {0}
    assert state.tables[0].rows_done == 2
    # Chunk 1's row is held back (it may be the last): not done until published and acked.
    end = ChunkEnd("public.items", 1, 1)
    copier._counts[(end.table, end.chunk)].read_done = True
    copier._counts[(end.table, end.chunk)].rows = 1
    copier._service(0.0)
    assert copier.state.tables[0].done == {0}
    copier._drain(final=True)
    assert copier.state.tables[0].done == {0, 1}


def test_copier_unconvertible_row_goes_to_the_dead_letter_topic_and_counts(
    tmp_path: Path,
) -> None:
    import json

    from bridge.snapshot.reader import Failed
    from bridge.types.errors import ConversionError

    copier, publisher, schemas = _copier(tmp_path)
    tx = copier._tx
    assert tx is not None
    bad = CopyBinaryParser(2).feed(encode_copy_binary([(b"\x00\x01", b"short int4")]))[0]
    error = ConversionError("int4", "2 bytes", table="public.items", column="id")
    batch = _batch(schemas, tx, 0, [1])
    batch.events.append(Failed(position(0, 0, 1), bad, error))
    with pytest.raises(ConversionError):  # the "fail" policy stops
        copier._publish_batch(batch)
    copier.sink = SnapshotSink(
        copier.sink.registrar, copier.sink.serializer, publisher,
        FailurePolicy("warn", "app.dead_letter"),
    )  # fmt: skip
    copier._publish_batch(batch)
    copier._counts[("public.items", 0)].read_done = True
    copier._counts[("public.items", 0)].rows = 2
    copier._drain(final=True)
    dead = [json.loads(v) for t, _, v in publisher.records if t == "app.dead_letter" and v]
    assert [(d["op"], d["table"], d["column"], d["seq"]) for d in dead] == [
        ("r", "public.items", "id", 1)
    ]
    assert copier.state.tables[0].done == {0}
