"""Smoke tests: each real part of the local stack does what the pipeline needs from it."""

from __future__ import annotations

import json
import struct
import uuid
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from bridge.devstack.stack import StackInfo
from bridge.sink.registry import registry_client

pytestmark = pytest.mark.integration


def _create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, 1, 1)]).values():
        future.result(timeout=30)


def test_postgres_logical_slot_created_and_read(local_stack: StackInfo) -> None:
    slot = f"smoke_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(local_stack.postgres_dsn(), autocommit=True) as conn:
        assert conn.execute("SHOW wal_level").fetchone() == ("logical",)
        conn.execute("CREATE TABLE IF NOT EXISTS smoke (id int PRIMARY KEY, v text)")
        conn.execute("DROP PUBLICATION IF EXISTS smoke_pub")
        conn.execute("CREATE PUBLICATION smoke_pub FOR TABLE smoke")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        try:
            conn.execute(
                "INSERT INTO smoke VALUES (1, 'héllo') ON CONFLICT (id) DO UPDATE SET v = 'héllo'"
            )
            rows = conn.execute(
                "SELECT data FROM pg_logical_slot_get_binary_changes(%s, NULL, NULL, "
                "'proto_version', '1', 'publication_names', 'smoke_pub')",
                (slot,),
            ).fetchall()
        finally:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    kinds = [bytes(r[0][:1]) for r in rows]
    assert kinds[0] == b"B" and kinds[-1] == b"C"  # Begin ... Commit
    assert b"R" in kinds and (b"I" in kinds or b"U" in kinds)
    assert any("héllo".encode() in bytes(r[0]) for r in rows)


def test_kafka_produce_and_consume(local_stack: StackInfo) -> None:
    topic = f"smoke-{uuid.uuid4().hex[:8]}"
    _create_topic(local_stack.bootstrap_servers, topic)
    producer = Producer(
        {
            "bootstrap.servers": local_stack.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
        }
    )
    delivered: list[Any] = []
    for i in range(10):
        producer.produce(
            topic, key=str(i), value=f"v{i}", on_delivery=lambda e, m: delivered.append((e, m))
        )
    assert producer.flush(30) == 0
    assert [e for e, _ in delivered] == [None] * 10
    consumer = Consumer(
        {
            "bootstrap.servers": local_stack.bootstrap_servers,
            "group.id": topic,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    got: list[tuple[bytes, bytes]] = []
    try:
        for _ in range(60):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got.append((msg.key(), msg.value()))
            if len(got) == 10:
                break
    finally:
        consumer.close()
    assert got == [(str(i).encode(), f"v{i}".encode()) for i in range(10)]


def test_registry_registers_and_fetches_avro_schema_by_id(local_stack: StackInfo) -> None:
    client = registry_client(local_stack.registry_url)
    subject = f"smoke-{uuid.uuid4().hex[:8]}-value"
    schema_str = json.dumps(
        {
            "type": "record",
            "name": "Smoke",
            "namespace": "pgbridge.smoke",
            "fields": [{"name": "id", "type": "int"}, {"name": "v", "type": ["null", "string"]}],
        }
    )
    schema_id = client.register_schema(subject, Schema(schema_str, "AVRO"))
    fetched = client.get_schema(schema_id)
    assert fetched.schema_type == "AVRO"
    assert json.loads(fetched.schema_str) == json.loads(schema_str)
    assert client.get_latest_version(subject).schema_id == schema_id


def test_spark_reads_kafka_and_decodes_confluent_avro(local_stack: StackInfo, spark: Any) -> None:
    from pyspark.sql.avro.functions import from_avro
    from pyspark.sql.functions import col, expr

    topic = f"smoke-avro-{uuid.uuid4().hex[:8]}"
    _create_topic(local_stack.bootstrap_servers, topic)
    schema_str = json.dumps(
        {
            "type": "record",
            "name": "Row",
            "namespace": "pgbridge.smoke",
            "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
        }
    )
    client = registry_client(local_stack.registry_url)
    serializer = AvroSerializer(client, schema_str)
    producer = Producer({"bootstrap.servers": local_stack.bootstrap_servers})
    rows = [{"id": i, "name": f"név-{i}"} for i in range(5)]
    for row in rows:
        value = serializer(row, SerializationContext(topic, MessageField.VALUE))
        assert value is not None and value[0] == 0  # Confluent framing: magic byte 0
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0

    raw = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", local_stack.bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    schema_id = struct.unpack(">I", raw.first()["value"][1:5])[0]
    assert client.get_schema(schema_id).schema_str
    decoded = raw.select(
        from_avro(expr("substring(value, 6, length(value) - 5)"), schema_str).alias("r")
    ).select(col("r.id"), col("r.name"))
    assert sorted((r["id"], r["name"]) for r in decoded.collect()) == [
        (r["id"], r["name"]) for r in rows
    ]
