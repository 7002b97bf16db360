"""EnvelopeSerializer: Confluent framing and the Debezium envelope, read back with fastavro."""

from __future__ import annotations

import io
import json
import struct
from dataclasses import replace

import fastavro

from bridge.events import ChangeEvent, EventBuilder, LogicalMessageEvent
from bridge.pgoutput.messages import Begin, Commit, Insert, Message, Update
from bridge.schema import static_schema
from bridge.sink.registry import RegisteredSchemas
from bridge.sink.serializer import EnvelopeSerializer, SourceSettings, frame, message_value_schema
from tests.rows import lsn, relation, tuple_data

IDS = RegisteredSchemas(key_id=11, value_id=12)


def _events() -> list[ChangeEvent]:
    b = EventBuilder("app")
    b.last_commit_lsn = lsn("1/1F30")  # the commit before this transaction ended there
    out = []
    for position, m in (
        (0, relation()),
        (0x1_0000_1F40, Begin(lsn("1/2000"), 1_000_000, 42)),
        (0x1_0000_1F48, Insert(None, 16384, tuple_data("7", "hello"))),
        (0x1_0000_1F90, Update(None, 16384, None, None, tuple_data("7", None, unchanged=(1,)))),
        (0x1_0000_2030, Commit(0, lsn("1/2000"), lsn("1/2030"), 1_000_000)),
    ):
        b.message_lsn = position
        out += b.feed(m)
    return [e for e in out if isinstance(e, ChangeEvent)]


def _read(data: bytes, schema: dict) -> tuple[int, dict]:
    magic, schema_id = struct.unpack(">bI", data[:5])
    assert magic == 0
    return schema_id, fastavro.schemaless_reader(
        io.BytesIO(data[5:]), fastavro.parse_schema(schema)
    )


def test_frame_is_magic_zero_and_big_endian_id() -> None:
    assert frame(258, b"x") == b"\x00\x00\x00\x01\x02x"


def test_serializer_change_envelope_reads_back_with_debezium_fields() -> None:
    events = _events()
    table = events[0].table
    ser = EnvelopeSerializer(SourceSettings(topic_prefix="app", database="shop"))
    ser.register_parsed(IDS.key_id, table.key_schema)  # type: ignore[arg-type]
    ser.register_parsed(IDS.value_id, table.value_schema)

    key_id, key = _read(ser.key(events[0], IDS) or b"", table.key_schema)  # type: ignore[arg-type]
    assert (key_id, key) == (11, {"id": 7})

    value_id, value = _read(ser.value(events[0], IDS), table.value_schema)
    assert value_id == 12
    assert value["op"] == "c" and value["before"] is None
    assert value["after"] == {"id": 7, "body": "hello"}
    src = value["source"]
    assert (src["connector"], src["name"], src["db"], src["schema"], src["table"]) == (
        "postgresql",
        "app",
        "shop",
        "public",
        "items",
    )
    assert src["txId"] == 42 and src["commit_lsn"] == int(lsn("1/2000")) and src["seq"] == 0
    # commit_ts 1 s after 2000-01-01 UTC
    assert src["ts_ms"] == 946_684_801_000
    # Debezium's: the change's own LSN, and [last commit's end LSN, change LSN] as strings.
    assert src["lsn"] == 0x1_0000_1F48
    assert src["sequence"] == f'["{0x1_0000_1F30}","{0x1_0000_1F48}"]'
    assert json.loads(src["sequence"]) == [str(int(lsn("1/1F30"))), str(0x1_0000_1F48)]
    assert value["unchanged_toast_columns"] == []

    _, update = _read(ser.value(events[1], IDS), table.value_schema)
    assert update["op"] == "u" and update["source"]["seq"] == 1
    assert update["source"]["lsn"] == 0x1_0000_1F90
    assert update["unchanged_toast_columns"] == ["body"]


def test_serializer_transaction_block_counts_per_table() -> None:
    events = _events()
    table = events[0].table
    ser = EnvelopeSerializer(SourceSettings("app", "shop", provide_transaction_metadata=True))
    ser.register_parsed(IDS.value_id, table.value_schema)
    blocks = [_read(ser.value(e, IDS), table.value_schema)[1]["transaction"] for e in events]
    assert blocks == [
        {"id": f"42:{int(lsn('1/2000'))}", "total_order": 1, "data_collection_order": 1},
        {"id": f"42:{int(lsn('1/2000'))}", "total_order": 2, "data_collection_order": 2},
    ]


def test_serializer_logical_message_event() -> None:
    ser = EnvelopeSerializer(SourceSettings("app", "shop"))
    value_schema = message_value_schema()
    ser.register_parsed(1, static_schema("message_key"))
    ser.register_parsed(2, value_schema)
    event = LogicalMessageEvent(Message(None, False, lsn("0/900"), "audit", b"\x00\x01"), None, 0)
    key, value = ser.message(event, 1, 2)
    assert _read(key, static_schema("message_key"))[1] == {"prefix": "audit"}
    decoded = _read(value, value_schema)[1]
    assert decoded["op"] == "m" and decoded["message"] == {
        "prefix": "audit",
        "content": b"\x00\x01",
    }
    assert decoded["source"]["txId"] is None and decoded["source"]["commit_lsn"] == int(
        lsn("0/900")
    )


def test_serializer_encodes_accelerated_rows_like_dict_rows() -> None:
    """An insert whose row the C accelerator encoded (EncodedRow, joined from cached parts)
    reads back exactly like the same insert with a plain dict row (the general path)."""
    event = _events()[0]
    table = event.table
    ser = EnvelopeSerializer(SourceSettings(topic_prefix="app", database="shop"))
    ser.register_parsed(IDS.key_id, table.key_schema)  # type: ignore[arg-type]
    ser.register_parsed(IDS.value_id, table.value_schema)
    assert event.after is not None
    for seq in (0, 0x3F, 0x40, 0x1FFF, 0x2000, 10**9):
        encoded = replace(event, seq=seq)
        plain = replace(event, seq=seq, after=dict(event.after))
        read = [_read(ser.value(e, IDS), table.value_schema)[1] for e in (encoded, plain)]
        for value in read:
            for ts in ("ts_ms", "ts_us", "ts_ns"):
                assert value.pop(ts) > 0
        assert read[0] == read[1]
        assert read[0]["source"]["seq"] == seq
        assert ser.key(encoded, IDS) == ser.key(plain, IDS)
