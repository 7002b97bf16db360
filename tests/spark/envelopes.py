"""Test helper: Debezium-style change envelopes as pgbridge's producer writes them.

Builds key and value schemas in the wire contract's shape (``<prefix>.<schema>.<table>.Envelope``
with before/after/source/op/ts_ms/transaction and ``unchanged_toast_columns``), and serializes
changes to Confluent-framed Avro, either registry-backed (``RegistryProducer``, real stack) or
with a fixed schema id (``frame_avro``, for pure transform tests).
"""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fastavro

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def source_schema() -> dict[str, Any]:
    return dict(json.loads((SCHEMAS / "source.avsc").read_text()))


def transaction_schema() -> dict[str, Any]:
    return dict(json.loads((SCHEMAS / "transaction_block.avsc").read_text()))


def value_schema(
    prefix: str, schema: str, table: str, columns: list[dict[str, Any]], toast_field: bool = True
) -> dict[str, Any]:
    namespace = f"{prefix}.{schema}.{table}"
    row = {"type": "record", "name": "Value", "namespace": namespace, "fields": columns}
    fields: list[dict[str, Any]] = [
        {"name": "before", "type": ["null", row], "default": None},
        {"name": "after", "type": ["null", f"{namespace}.Value"], "default": None},
        {"name": "source", "type": source_schema()},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
        {"name": "transaction", "type": ["null", transaction_schema()], "default": None},
    ]
    if toast_field:
        fields.append(
            {
                "name": "unchanged_toast_columns",
                "type": {"type": "array", "items": "string"},
                "default": [],
            }
        )
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": namespace,
        "fields": fields,
        "connect.name": f"{namespace}.Envelope",
    }


def key_schema(
    prefix: str, schema: str, table: str, columns: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "type": "record",
        "name": "Key",
        "namespace": f"{prefix}.{schema}.{table}",
        "fields": columns,
    }


def source_block(
    prefix: str, schema: str, table: str, commit_lsn: int, seq: int, ts_ms: int = 1_700_000_000_000
) -> dict[str, Any]:
    return {
        "version": "0.1.0",
        "connector": "postgresql",
        "name": prefix,
        "ts_ms": ts_ms,
        "snapshot": "false",
        "db": "postgres",
        "sequence": None,
        "ts_us": ts_ms * 1000,
        "ts_ns": None,
        "schema": schema,
        "table": table,
        "txId": 1000 + commit_lsn,
        "lsn": commit_lsn,
        "xmin": None,
        "commit_lsn": commit_lsn,
        "seq": seq,
    }


def frame_avro(schema: dict[str, Any], record: Any, schema_id: int) -> bytes:
    """Confluent framing by hand: magic 0, big-endian schema id, Avro binary."""
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), record)
    return b"\x00" + struct.pack(">I", schema_id) + buffer.getvalue()


@dataclass
class TableVersion:
    """One schema version of a test table: key columns and all columns."""

    prefix: str
    schema: str
    table: str
    columns: list[dict[str, Any]]
    key: list[str]
    toast_field: bool = True

    @property
    def topic(self) -> str:
        return f"{self.prefix}.{self.schema}.{self.table}"

    def value_schema(self) -> dict[str, Any]:
        return value_schema(self.prefix, self.schema, self.table, self.columns, self.toast_field)

    def key_schema(self) -> dict[str, Any]:
        cols = [c for c in self.columns if c["name"] in self.key]
        # Key fields are the row's non-null columns.
        cols = [
            {"name": c["name"], "type": next(t for t in c["type"] if t != "null")}
            if isinstance(c["type"], list)
            else c
            for c in cols
        ]
        return key_schema(self.prefix, self.schema, self.table, cols)

    def envelope(
        self,
        op: str,
        commit_lsn: int,
        seq: int,
        before: dict[str, Any] | None = None,
        after: dict[str, Any] | None = None,
        unchanged: list[str] | None = None,
        ts_ms: int | None = None,
    ) -> dict[str, Any]:
        """``ts_ms`` (commit time) defaults to 1,700,000,000 s + commit_lsn seconds."""
        if ts_ms is None:
            ts_ms = 1_700_000_000_000 + commit_lsn * 1000
        record: dict[str, Any] = {
            "before": before,
            "after": after,
            "source": source_block(self.prefix, self.schema, self.table, commit_lsn, seq, ts_ms),
            "op": op,
            "ts_ms": ts_ms,
            "transaction": None,
        }
        if self.toast_field:
            record["unchanged_toast_columns"] = unchanged or []
        return record


@dataclass
class RegistryProducer:
    """Produces change records through the real registry (AvroSerializer auto-registers)."""

    bootstrap: str
    registry_url: str
    _producer: Any = None
    _client: Any = None
    _serializers: dict[tuple[str, str], Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from confluent_kafka import Producer

        from bridge.sink.registry import registry_client

        self._client = registry_client(self.registry_url)
        self._producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 20,
                "batch.num.messages": 10000,
                "queue.buffering.max.messages": 1_000_000,
            }
        )

    @property
    def client(self) -> Any:
        return self._client

    def _serializer(self, schema: dict[str, Any], field_: str) -> Any:
        from confluent_kafka.schema_registry.avro import AvroSerializer

        text = json.dumps(schema)
        if (text, field_) not in self._serializers:
            self._serializers[(text, field_)] = AvroSerializer(self._client, text)
        return self._serializers[(text, field_)]

    def serialize(self, version: TableVersion, record: Any, is_key: bool) -> bytes:
        from confluent_kafka.serialization import MessageField, SerializationContext

        schema = version.key_schema() if is_key else version.value_schema()
        ctx = SerializationContext(
            version.topic, MessageField.KEY if is_key else MessageField.VALUE
        )
        data = self._serializer(schema, "key" if is_key else "value")(record, ctx)
        assert data is not None
        return bytes(data)

    def change(
        self, version: TableVersion, envelope: dict[str, Any] | None, key: dict[str, Any] | None
    ) -> None:
        """One record; ``envelope=None`` is a tombstone, ``key=None`` a null key (truncate)."""
        key_bytes = self.serialize(version, key, True) if key is not None else None
        value_bytes = self.serialize(version, envelope, False) if envelope is not None else None
        self.raw(version.topic, key_bytes, value_bytes)

    def raw(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        while True:
            try:
                self._producer.produce(topic, key=key, value=value)
                return
            except BufferError:
                self._producer.poll(0.1)

    def flush(self) -> None:
        assert self._producer.flush(60) == 0


def create_topics(bootstrap: str, names: list[str], partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).values():
        future.result(timeout=30)


class KafkaMessage:
    """What the task lane reads of a confluent-kafka ``Message``: key, value, offset."""

    def __init__(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        self._key, self._value, self._offset = key, value, offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def offset(self) -> int:
        return self._offset
