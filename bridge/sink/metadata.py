"""The side topics Debezium users know: transaction metadata and heartbeats.

- ``<prefix>.transaction`` (``provide.transaction.metadata``): a BEGIN record when a
  transaction's first change is published and an END record with the event count per table
  after its last, keyed by the transaction id ``<txId>:<commit LSN>`` — the same id as the
  ``transaction.id`` field of the change events, so a consumer can tell when it has every
  change of a transaction.
- ``__debezium-heartbeat.<prefix>`` (``heartbeat.interval.ms`` > 0): a record every interval
  with the time and the flush LSN confirmed to PostgreSQL, so monitoring sees the bridge alive
  even when the captured tables are quiet.

A few records per transaction or interval: plain fastavro is fast enough here.
"""

from __future__ import annotations

import io
from typing import Any

import fastavro

from bridge.events import TransactionEnd, TxContext
from bridge.schema import static_schema
from bridge.sink.serializer import frame


def transaction_topic(prefix: str) -> str:
    return f"{prefix}.transaction"


def heartbeat_topic(prefix: str) -> str:
    return f"__debezium-heartbeat.{prefix}"


def transaction_id(tx: TxContext) -> str:
    """Debezium's transaction id, as in the change events' ``transaction.id``."""
    return f"{tx.xid}:{int(tx.commit_lsn)}"


class MetadataRecords:
    """Encodes BEGIN/END and heartbeat records once their schemas have registry ids."""

    def __init__(self, topic_prefix: str) -> None:
        self.topic_prefix = topic_prefix
        self.schemas: dict[str, dict[str, Any]] = {
            "transaction-key": static_schema("transaction_metadata_key"),
            "transaction-value": static_schema("transaction_metadata_value"),
            "heartbeat-key": static_schema("heartbeat_key"),
            "heartbeat-value": static_schema("heartbeat_value"),
        }
        self._parsed = {name: fastavro.parse_schema(s) for name, s in self.schemas.items()}
        self.ids: dict[str, int] = {}

    def subjects(self) -> dict[str, str]:
        """Schema name -> registry subject (topic-name strategy)."""
        tx, hb = transaction_topic(self.topic_prefix), heartbeat_topic(self.topic_prefix)
        return {
            "transaction-key": f"{tx}-key",
            "transaction-value": f"{tx}-value",
            "heartbeat-key": f"{hb}-key",
            "heartbeat-value": f"{hb}-value",
        }

    def _encode(self, name: str, record: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, self._parsed[name], record)
        return frame(self.ids[name], buf.getvalue())

    def begin(self, tx: TxContext, now_ms: int) -> tuple[bytes, bytes]:
        tid = transaction_id(tx)
        value = {
            "status": "BEGIN",
            "id": tid,
            "event_count": None,
            "data_collections": None,
            "ts_ms": now_ms,
        }
        return self._encode("transaction-key", {"id": tid}), self._encode(
            "transaction-value", value
        )

    def end(self, end: TransactionEnd, now_ms: int) -> tuple[bytes, bytes]:
        tid = transaction_id(end.tx)
        collections = [
            {"data_collection": table, "event_count": count}
            for table, count in sorted(end.per_table.items())
        ]
        value = {
            "status": "END",
            "id": tid,
            "event_count": end.events,
            "data_collections": collections,
            "ts_ms": now_ms,
        }
        return self._encode("transaction-key", {"id": tid}), self._encode(
            "transaction-value", value
        )

    def heartbeat(self, flushed_lsn: int, now_ms: int) -> tuple[bytes, bytes]:
        key = self._encode("heartbeat-key", {"serverName": self.topic_prefix})
        value = self._encode("heartbeat-value", {"ts_ms": now_ms, "flushed_lsn": flushed_lsn})
        return key, value
