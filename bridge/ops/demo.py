"""``pgbridge demo``: the whole product on the local stack, in about a minute.

1. starts the stack (real PostgreSQL, Kafka, Apicurio Registry; Spark's jars),
2. creates a sample shop database that already has customers and orders, and runs
   ``pgbridge run`` against it: the initial snapshot copies the existing rows (op ``r``), then
   the pipeline streams,
3. changes the data (inserts, updates, a key change, deletes, a truncate, one large
   transaction) and waits until Kafka acknowledged every change,
4. shows the topics, their registered schemas and one change event as a consumer decodes it,
5. applies the topics to Delta Lake with the Spark job and compares every table with PostgreSQL.

Re-running starts from scratch: the demo database, slot and topics are recreated.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import tempfile
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from bridge.config import load_config
from bridge.devstack.stack import LocalStack, StackInfo
from bridge.pgoutput.lsn import Lsn
from bridge.runner import (
    build_parts,
    build_pipeline,
    snapshot_sink,
    source_config,
    streaming_parts_after_snapshot,
    with_resolved_delivery,
)
from bridge.sink.registry import DESERIALIZER_CONF, registry_client
from bridge.snapshot.run import run_snapshot

logger = logging.getLogger(__name__)

DATABASE = "pgbridge_demo"
PREFIX = "demo"
SLOT = "pgbridge_demo"
TABLES = ("public.customers", "public.orders", "public.cart_items")

SCHEMA = """
CREATE TABLE customers (
    id bigint PRIMARY KEY,
    name text NOT NULL,
    email text,
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON COLUMN customers.email IS 'NULL when the customer opted out';
CREATE TABLE orders (
    id bigint PRIMARY KEY,
    customer_id bigint NOT NULL,
    amount numeric(12, 2) NOT NULL,
    status text NOT NULL,
    placed_at timestamptz NOT NULL DEFAULT now(),
    details jsonb
);
CREATE TABLE cart_items (id bigint PRIMARY KEY, customer_id bigint, sku text, qty int);
"""


def say(text: str = "") -> None:
    print(text, flush=True)


def prepare(stack: StackInfo) -> str:
    with psycopg.connect(stack.postgres_dsn(), autocommit=True) as admin:
        row = admin.execute(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (SLOT,)
        ).fetchone()
        if row is not None:
            if row[0]:
                admin.execute("SELECT pg_terminate_backend(%s)", (row[0],))
                time.sleep(1)
            admin.execute("SELECT pg_drop_replication_slot(%s)", (SLOT,))
        admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{DATABASE}"')
    dsn = stack.postgres_dsn(DATABASE)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    admin_client = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    old = [t for t in admin_client.list_topics(timeout=10).topics if t.startswith(PREFIX + ".")]
    if old:
        for future in admin_client.delete_topics(old).values():
            future.result(30)
        time.sleep(2)  # deletion is asynchronous on the broker
    return dsn


def seed(dsn: str) -> None:
    """The rows the shop has before pgbridge starts: the initial snapshot copies them."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(
            "INSERT INTO customers (id, name, email) SELECT i, 'Customer ' || i, "
            "'customer' || i || '@example.com' FROM generate_series(1, 200) i"
        )
        conn.execute(
            "INSERT INTO orders (id, customer_id, amount, status, details) "
            "SELECT i, 1 + i % 200, round((random() * 500)::numeric, 2), 'new', "
            "jsonb_build_object('items', i % 5 + 1, 'gift', i % 7 = 0) "
            "FROM generate_series(1, 1000) i"
        )


def workload(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE orders SET status = 'paid' WHERE id % 2 = 0")
        conn.execute(
            "UPDATE orders SET status = 'shipped', amount = amount + 4.99 WHERE id % 5 = 0"
        )
        conn.execute("UPDATE customers SET email = NULL WHERE id % 50 = 0")
        conn.execute("UPDATE customers SET id = 10000 WHERE id = 1")  # a key change
        conn.execute("DELETE FROM orders WHERE status = 'new' AND id % 3 = 0")
        conn.execute(
            "INSERT INTO cart_items "
            "SELECT i, 1 + i % 200, 'SKU-' || i, 1 FROM generate_series(1, 300) i"
        )
        conn.execute("TRUNCATE cart_items")  # checkout: everything in the carts is gone
        conn.execute("INSERT INTO cart_items VALUES (1, 42, 'SKU-42', 2)")
        with conn.transaction():  # one larger transaction
            conn.execute(
                "INSERT INTO orders (id, customer_id, amount, status) "
                "SELECT i, 1 + i % 200, 9.99, 'bulk' FROM generate_series(100000, 149999) i"
            )


def mark(dsn: str) -> Lsn:
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        row = conn.execute("SELECT pg_logical_emit_message(true, 'demo', 'done')::text").fetchone()
    assert row is not None
    return Lsn.parse(row[0])


def show_topics(stack: StackInfo) -> None:
    registry = registry_client(stack.registry_url)
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": "demo-peek"})
    try:
        topics = sorted(
            t for t in consumer.list_topics(timeout=10).topics if t.startswith(PREFIX + ".")
        )
        for topic in topics:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
            versions = registry.get_versions(f"{topic}-value")
            say(f"  {topic:28} {high - low:7,} records   {topic}-value: {len(versions)} version(s)")
        topic = f"{PREFIX}.public.orders"
        consumer.assign([TopicPartition(topic, 0, 0)])
        msg = consumer.poll(10)
        if msg is not None and msg.value() is not None:
            value = AvroDeserializer(registry, conf=DESERIALIZER_CONF)(
                msg.value(), SerializationContext(topic, MessageField.VALUE)
            )
            say(f"\n  the first event on {topic}, as a consumer decodes it:")
            say("  " + json.dumps(value, default=_json_default, indent=2).replace("\n", "\n  "))
    finally:
        consumer.close()


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(type(value).__name__)


def apply_with_spark(stack: StackInfo, dsn: str) -> bool:
    from bridge.spark.config import ApplyConfig
    from bridge.spark.job import run_apply
    from bridge.spark.session import build_spark_session

    work = Path(stack.stack_dir) / "demo"
    config = ApplyConfig(
        topic_prefix=PREFIX,
        bootstrap_servers=stack.bootstrap_servers,
        registry_url=stack.registry_url,
        delta_base=str(work / f"delta-{int(time.time())}"),
        checkpoint_location=str(work / f"checkpoint-{int(time.time())}"),
        dead_letter_location=str(work / f"dead-letter-{int(time.time())}"),
        available_now=True,
    )
    spark = build_spark_session(
        "pgbridge-demo",
        jars=stack.spark_jars,
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    started = time.monotonic()
    run_apply(config, spark=spark)
    say(f"  applied to Delta in {time.monotonic() - started:.1f} s ({config.delta_base})")
    all_equal = True
    with psycopg.connect(dsn) as conn:
        for table in TABLES:
            schema, name = table.split(".")
            delta = spark.read.format("delta").load(f"{config.delta_base}/{schema}/{name}")
            columns = [c for c in delta.columns if not c.startswith("_")]
            got = {tuple(r) for r in delta.select(*columns).collect()}
            cur = conn.execute(f"SELECT {', '.join(columns)} FROM {table}")
            expected = {tuple(_spark_like(v) for v in row) for row in cur.fetchall()}
            got_norm = {tuple(_spark_like(v) for v in row) for row in got}
            equal = got_norm == expected
            all_equal &= equal
            say(
                f"  {table:20} PostgreSQL {len(expected):6,} rows   Delta {len(got):6,} rows   "
                + ("equal" if equal else "DIFFERENT")
            )
    spark.stop()
    return all_equal


def _spark_like(value: Any) -> Any:
    """PostgreSQL and Spark values in one comparable form."""
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.dumps(json.loads(value), sort_keys=True)
        except ValueError:
            return value
    if isinstance(value, Decimal):
        return value.normalize()
    return value


def run_demo() -> int:
    say("== pgbridge demo ==")
    say("starting the local stack (first run downloads PostgreSQL, Kafka, Apicurio, Spark jars)")
    stack = LocalStack().up()
    say(f"  PostgreSQL {stack.postgres_major}: {stack.postgres_dsn()}")
    say(f"  Kafka:     {stack.bootstrap_servers}")
    say(f"  Registry:  {stack.registry_url}")
    say(f"  ready in {stack.start_seconds.get('total')} s")
    dsn = prepare(stack)
    settings = {
        "database.dsn": dsn,
        "topic.prefix": PREFIX,
        "slot.name": SLOT,
        "publication.name": "pgbridge_demo_pub",
        "kafka.bootstrap.servers": stack.bootstrap_servers,
        "schema.registry.url": stack.registry_url,
        "status.update.interval.ms": "1000",
    }
    seed(dsn)
    state_dir = tempfile.mkdtemp(prefix="pgbridge-demo-")
    # The default delivery, resolved as `pgbridge run` resolves it: exactly once where the
    # cluster grants transactions (the local stack does).
    config = with_resolved_delivery(load_config(None, {}, {**settings, "state.dir": state_dir}))
    delivery = "exactly once" if config.kafka.exactly_once else "at least once"
    say(f"delivery: {delivery} (exactly.once.support = requested, the default)")
    stop = threading.Event()
    parts = build_parts(config)
    started = time.monotonic()
    sink = snapshot_sink(config, parts)
    run_snapshot(config, source_config(config), parts.builder, sink, stop)
    say(
        "\ninitial snapshot: the rows already in the database, as op 'r' events, in "
        f"{time.monotonic() - started:.1f} s"
    )
    pipeline = build_pipeline(config, parts=streaming_parts_after_snapshot(config, parts))
    errors: list[BaseException] = []

    def run() -> None:
        try:
            pipeline.run(stop)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name="pgbridge-run", daemon=True)
    thread.start()
    say(f"\npgbridge run: slot {SLOT} on database {DATABASE} -> topics {PREFIX}.<schema>.<table>")
    started = time.monotonic()
    workload(dsn)
    target = mark(dsn)
    while pipeline.tracker.flush_lsn < target:
        if errors:
            raise errors[0]
        time.sleep(0.1)
    say(
        f"  workload committed and acknowledged by Kafka in {time.monotonic() - started:.1f} s: "
        f"{pipeline.events_published:,} records, slot confirmed up to {pipeline.tracker.flush_lsn}"
    )
    stop.set()
    thread.join(60)
    say("\ntopics and schemas:")
    show_topics(stack)
    say("\nSpark apply job (Structured Streaming, Kafka source -> MERGE into Delta):")
    equal = apply_with_spark(stack, dsn)
    say("\n" + ("every Delta table equals its PostgreSQL table" if equal else "MISMATCH"))
    with psycopg.connect(stack.postgres_dsn(), autocommit=True) as admin:
        # An idle slot nobody reads holds WAL forever; the demo's is not needed once it is done.
        admin.execute("SELECT pg_drop_replication_slot(%s)", (SLOT,))
    say(f"dropped the demo's slot {SLOT}; stop the stack with: .venv/bin/pgbridge dev down")
    return 0 if equal else 1
