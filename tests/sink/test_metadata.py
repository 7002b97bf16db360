"""Transaction metadata and heartbeat records read back with fastavro."""

from __future__ import annotations

import io
import struct
from typing import Any

import fastavro

from bridge.events import TransactionEnd, TxContext
from bridge.sink.metadata import MetadataRecords, heartbeat_topic, transaction_topic
from tests.rows import lsn

TX = TxContext(xid=77, commit_lsn=lsn("0/2000"), commit_ts=0)


def _records() -> MetadataRecords:
    records = MetadataRecords("shop")
    records.ids = {name: i for i, name in enumerate(records.schemas, start=1)}
    return records


def _read(records: MetadataRecords, name: str, data: bytes) -> dict[str, Any]:
    magic, schema_id = struct.unpack(">bI", data[:5])
    assert (magic, schema_id) == (0, records.ids[name])
    parsed = fastavro.parse_schema(records.schemas[name])
    result: dict[str, Any] = fastavro.schemaless_reader(io.BytesIO(data[5:]), parsed)
    return result


def test_metadata_topics_follow_debezium_names() -> None:
    assert transaction_topic("shop") == "shop.transaction"
    assert heartbeat_topic("shop") == "__debezium-heartbeat.shop"
    assert _records().subjects()["transaction-value"] == "shop.transaction-value"


def test_metadata_begin_and_end_records_carry_the_events_transaction_id() -> None:
    records = _records()
    key, value = records.begin(TX, now_ms=5)
    assert _read(records, "transaction-key", key) == {"id": f"77:{0x2000}"}
    assert _read(records, "transaction-value", value) == {
        "status": "BEGIN",
        "id": f"77:{0x2000}",
        "event_count": None,
        "data_collections": None,
        "ts_ms": 5,
    }
    end = TransactionEnd(TX, lsn("0/2030"), 3, {"public.b": 1, "public.a": 2})
    _, value = records.end(end, now_ms=6)
    assert _read(records, "transaction-value", value) == {
        "status": "END",
        "id": f"77:{0x2000}",
        "event_count": 3,
        "data_collections": [
            {"data_collection": "public.a", "event_count": 2},
            {"data_collection": "public.b", "event_count": 1},
        ],
        "ts_ms": 6,
    }


def test_metadata_heartbeat_reports_prefix_time_and_flushed_lsn() -> None:
    records = _records()
    key, value = records.heartbeat(flushed_lsn=0x2030, now_ms=9)
    assert _read(records, "heartbeat-key", key) == {"serverName": "shop"}
    assert _read(records, "heartbeat-value", value) == {"ts_ms": 9, "flushed_lsn": 0x2030}
