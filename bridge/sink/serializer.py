"""Change events -> Kafka record bytes: the Debezium envelope in Avro, Confluent-framed.

Confluent wire format: magic byte 0, the 4-byte big-endian schema id, then the Avro binary
encoding (no container header). Schemas are parsed by fastavro once per registered id.
"""

from __future__ import annotations

import io
import json
import struct
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import fastavro

from bridge import __version__
from bridge.events import ChangeEvent, LogicalMessageEvent, TxContext
from bridge.pgoutput.lsn import pg_timestamp_to_unix_micros
from bridge.schema import UNCHANGED_TOAST_FIELD, static_schema
from bridge.sink.registry import RegisteredSchemas

_MAGIC = struct.Struct(">bI")


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


class EnvelopeSerializer:
    """Encodes keys and envelopes of one bridge; caches parsed schemas by registry id."""

    def __init__(self, settings: SourceSettings) -> None:
        self.settings = settings
        self._parsed: dict[int, Any] = {}
        self._table_order: Counter[str] = Counter()
        self._order_tx: tuple[int, int] | None = None

    def register_parsed(self, schema_id: int, schema: dict[str, Any]) -> None:
        if schema_id not in self._parsed:
            self._parsed[schema_id] = fastavro.parse_schema(schema)

    def _encode(self, schema_id: int, record: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, self._parsed[schema_id], record)
        return frame(schema_id, buf.getvalue())

    def key(self, event: ChangeEvent, ids: RegisteredSchemas) -> bytes | None:
        key = event.key
        if key is None or ids.key_id is None:
            return None
        return self._encode(ids.key_id, key)

    def value(self, event: ChangeEvent, ids: RegisteredSchemas) -> bytes:
        now_us = time.time_ns() // 1000
        table = event.table
        schema_name, _, table_name = table.table.partition(".")
        record = {
            "before": event.before,
            "after": event.after,
            "source": self._source(event.tx, event.seq, schema_name, table_name),
            "transaction": self._transaction(event)
            if self.settings.provide_transaction_metadata
            else None,
            "op": event.op,
            "ts_ms": now_us // 1000,
            "ts_us": now_us,
            "ts_ns": now_us * 1000,
            UNCHANGED_TOAST_FIELD: list(event.unchanged_toast),
        }
        return self._encode(ids.value_id, record)

    def message(
        self, event: LogicalMessageEvent, key_id: int, value_id: int
    ) -> tuple[bytes, bytes]:
        msg = event.message
        tx = event.tx or TxContext(xid=0, commit_lsn=msg.lsn, commit_ts=0)
        source = self._source(tx, event.seq, "", "")
        if event.tx is None:
            source["txId"] = None
        value = {
            "op": "m",
            "ts_ms": time.time_ns() // 1_000_000,
            "source": source,
            "message": {"prefix": msg.prefix, "content": msg.content},
        }
        return self._encode(key_id, {"prefix": msg.prefix}), self._encode(value_id, value)

    def _source(self, tx: TxContext, seq: int, schema: str, table: str) -> dict[str, Any]:
        commit_us = pg_timestamp_to_unix_micros(tx.commit_ts) if tx.commit_ts else 0
        return {
            "version": __version__,
            "connector": "postgresql",
            "name": self.settings.topic_prefix,
            "ts_ms": commit_us // 1000,
            "snapshot": "false",
            "db": self.settings.database,
            "sequence": json.dumps([str(int(tx.commit_lsn)), None]),
            "ts_us": commit_us,
            "ts_ns": commit_us * 1000,
            "schema": schema,
            "table": table,
            "txId": tx.xid,
            "lsn": None,
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
