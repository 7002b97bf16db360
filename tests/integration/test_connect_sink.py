"""Debezium's own consumer over pgbridge's topics: Kafka Connect 4.1 (standalone, the stack's
Kafka version) with Debezium's JDBC sink connector and Apicurio's Avro converter reading
Confluent framing from the stack's registry, every part from Maven Central.

pgbridge streams a table through a mixed workload (upserts, deletes, a truncate, a key change,
an added column; date, numeric, timestamptz, text) and the sink writes it into a second
database, which must equal the source. Nothing is mocked: if the worker or a connector cannot
start, the test fails.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from bridge.devstack.connect import (
    APICURIO_CONVERTER,
    JDBC_SINK_CONNECTOR,
    ConnectWorker,
    apicurio_converter,
)
from bridge.devstack.stack import StackInfo
from bridge.errors import StackError
from tests.integration.bridge_harness import RunningBridge, bridge_config, mark, scratch_database

pytestmark = pytest.mark.integration

#: What a Debezium consumer needs from pgbridge (docs/debezium-consumers.md).
CONNECT_SETTINGS = {"schema.logical.types": "connect", "timestamptz.handling.mode": "string"}

SCHEMA = """
CREATE TABLE items (id bigint PRIMARY KEY, name text, born date, price numeric(12,2),
                    seen_at timestamptz, note text)
"""


def sink_config(stack: StackInfo, topic: str, sink_dsn_db: str, table: str) -> dict[str, str]:
    return {
        "connector.class": JDBC_SINK_CONNECTOR,
        "tasks.max": "1",
        "topics": topic,
        "connection.url": f"jdbc:postgresql://{stack.postgres_host}:{stack.postgres_port}/"
        f"{sink_dsn_db}",
        "connection.username": "postgres",
        "connection.password": stack.postgres_password or "unused-trust-auth",
        "insert.mode": "upsert",
        "delete.enabled": "true",
        "truncate.enabled": "true",
        "primary.key.mode": "record_key",
        "schema.evolution": "basic",
        "collection.name.format": table,
        **apicurio_converter(stack.registry_url, "key.converter"),
        **apicurio_converter(stack.registry_url, "value.converter"),
    }


def workload(dsn: str, truncate: bool = True) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        if truncate:
            conn.execute(
                "INSERT INTO items SELECT i, 'first ' || i, date '2024-01-01' + i, i * 1.5, "
                "timestamptz '2024-05-01 12:00:00.123456+02' + i * interval '1 hour', NULL "
                "FROM generate_series(1, 30) i"
            )
            conn.execute("TRUNCATE items")
        with conn.transaction():
            conn.execute(
                "INSERT INTO items SELECT i, 'item ' || i, date '1999-12-31' + i * 17, "
                "(i * 12.34 - 300)::numeric(12,2), "
                "timestamptz '2024-02-29 23:59:59.999999+00' - i * interval '13 days 1 second', "
                "repeat('ü', i % 4) FROM generate_series(1, 50) i"
            )
            conn.execute(
                "INSERT INTO items VALUES (51, NULL, NULL, NULL, NULL, NULL), "
                "(52, '', date '1970-01-01', 0, timestamptz '1970-01-01 00:00:00+00', '')"
            )
        conn.execute("UPDATE items SET price = price + 1, note = 'upd' WHERE id % 3 = 0")
        conn.execute("UPDATE items SET id = 1003, name = 'moved' WHERE id = 3")  # key change
        conn.execute("DELETE FROM items WHERE id % 10 = 0")
        conn.execute("ALTER TABLE items ADD COLUMN extra text")
        conn.execute("UPDATE items SET extra = 'x' || id WHERE id % 4 = 0")
        conn.execute(
            "INSERT INTO items VALUES (2000, 'late', date '2030-06-15', 99999.99, now(), 'n', 'e')"
        )


def rows(dsn: str, columns: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(f"SELECT {columns} FROM items ORDER BY id").fetchall()


def wait_equal(worker: ConnectWorker, name: str, source: str, sink: str, columns: str) -> None:
    expected = rows(source, columns)
    deadline = time.monotonic() + 180
    got: list[tuple[Any, ...]] | str = "no table yet"
    while time.monotonic() < deadline:
        worker.raise_if_failed(name)
        try:
            got = rows(sink, columns)
        except psycopg.errors.UndefinedTable:
            got = "no table yet"
        except psycopg.errors.UndefinedColumn:
            got = "column not added yet"
        if got == expected:
            return
        time.sleep(1)
    assert got == expected


def test_connect_worker_loads_debezium_jdbc_sink_and_apicurio_converter(
    connect_worker: ConnectWorker,
) -> None:
    plugins = connect_worker.plugins()
    assert JDBC_SINK_CONNECTOR in plugins
    # Converters are not listed as connector plugins by default; ask for every type.
    every = connect_worker._request("GET", "/connector-plugins?connectorsOnly=false")
    assert APICURIO_CONVERTER in {p["class"] for p in every}


def test_connect_jdbc_sink_applies_pgbridge_topic_equal_to_source(
    local_stack: StackInfo, connect_worker: ConnectWorker
) -> None:
    _sink_equals_source(local_stack, connect_worker, unwrap=False)


def test_connect_extract_new_record_state_then_jdbc_sink_equal_to_source(
    local_stack: StackInfo, connect_worker: ConnectWorker
) -> None:
    """Debezium's ExtractNewRecordState transform flattens pgbridge's envelope (deletes become
    tombstones) and the JDBC sink applies the flat rows."""
    _sink_equals_source(local_stack, connect_worker, unwrap=True)


def _sink_equals_source(
    local_stack: StackInfo, connect_worker: ConnectWorker, unwrap: bool
) -> None:
    prefix = f"cx{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as source, scratch_database(local_stack) as sink:
        with psycopg.connect(source, autocommit=True) as conn:
            conn.execute(SCHEMA)
        bridge = RunningBridge(bridge_config(local_stack, source, prefix, **CONNECT_SETTINGS))
        try:
            # ExtractNewRecordState has no flat form of a truncate: that case is the envelope's.
            workload(source, truncate=not unwrap)
            bridge.wait_confirmed(mark(source))
        finally:
            bridge.stop()
        sink_db = psycopg.conninfo.conninfo_to_dict(sink)["dbname"]
        name = f"jdbc-{prefix}"
        config = sink_config(local_stack, f"{prefix}.public.items", str(sink_db), "items")
        if unwrap:
            config |= {
                "transforms": "unwrap",
                "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
                "transforms.unwrap.delete.tombstone.handling.mode": "tombstone",
            }
        connect_worker.put_connector(name, config)
        try:
            connect_worker.wait_running(name)
            columns = "id, name, born, price, seen_at, note, extra"
            wait_equal(connect_worker, name, source, sink, columns)
        finally:
            connect_worker.delete_connector(name)
        got = {r[0]: r for r in rows(sink, columns)}
        # Spot checks that the comparison is not vacuous.
        assert 3 not in got and got[1003][1] == "moved" and 10 not in got
        assert got[52][2:5] == (
            datetime(1970, 1, 1).date(),
            Decimal("0.00"),
            datetime(1970, 1, 1, tzinfo=UTC),
        )
        assert got[8][6] == "x8" and got[2000][6] == "e"
        with psycopg.connect(sink) as conn:
            types = dict(
                conn.execute(
                    "SELECT column_name, data_type FROM information_schema.columns "
                    "WHERE table_name = 'items'"
                ).fetchall()
            )
        assert types["born"] == "date"
        assert types["seen_at"] == "timestamp with time zone"
        assert types["price"] == "numeric"


def test_connect_refuses_default_avro_logical_types_on_a_date_column(
    local_stack: StackInfo, connect_worker: ConnectWorker
) -> None:
    """Why a Debezium consumer needs ``schema.logical.types=connect``: with the default
    (``logicalType: date`` beside ``connect.name: io.debezium.time.Date``) Kafka Connect's Avro
    data mapping refuses the record and the sink task fails."""
    prefix = f"cd{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as source, scratch_database(local_stack) as sink:
        with psycopg.connect(source, autocommit=True) as conn:
            conn.execute("CREATE TABLE items (id int PRIMARY KEY, born date)")
            conn.execute("INSERT INTO items VALUES (1, '2024-01-01')")
        bridge = RunningBridge(bridge_config(local_stack, source, prefix))
        try:
            with psycopg.connect(source, autocommit=True) as conn:
                conn.execute("INSERT INTO items VALUES (2, '2024-01-02')")
            bridge.wait_confirmed(mark(source))
        finally:
            bridge.stop()
        sink_db = psycopg.conninfo.conninfo_to_dict(sink)["dbname"]
        name = f"jdbc-{prefix}"
        connect_worker.put_connector(
            name, sink_config(local_stack, f"{prefix}.public.items", str(sink_db), "items")
        )
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    connect_worker.raise_if_failed(name)
                except StackError as exc:
                    assert "Mismatched names" in str(exc), str(exc)
                    break
                assert time.monotonic() < deadline, "the sink task did not fail"
                time.sleep(0.5)
        finally:
            connect_worker.delete_connector(name)
