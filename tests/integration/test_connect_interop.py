"""pgbridge beside Kafka Connect 4.1 (standalone, the stack's Kafka version; one worker for the
module), every part from Maven Central, Avro through the stack's registry with Apicurio's
converter in Confluent framing. Nothing is mocked: if the worker or a connector cannot start,
the test fails.

Debezium's own consumer over pgbridge's topics: pgbridge streams a table through a mixed
workload (upserts, deletes, a truncate, a key change, an added column; date, numeric,
timestamptz, text) and Debezium's JDBC sink connector writes it into a second database, which
must equal the source.

The same row changes captured by Debezium's PostgreSQL connector (3.3) and by pgbridge with its
default settings (Debezium's wire form: ``schema.logical.types=connect``,
``timestamptz.handling.mode=string``), both decoded from Kafka with the registry's schemas,
compared field by field: envelope and ``source`` fields, record names, each column's Avro
type, ``connect.name``/``connect.parameters`` and logical type, and the decoded values. Where
the two differ, the difference is listed in :data:`EXTENSIONS` (fields pgbridge adds,
documented in docs/debezium-consumers.md); anything else fails the test, values included
(``source.lsn`` and ``source.sequence`` too).
"""

from __future__ import annotations

import io
import json
import logging
import math
import threading
import time
import uuid
from datetime import UTC, datetime
from datetime import time as dt_time
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import psycopg
import pytest
from confluent_kafka import Consumer

from bridge.devstack.connect import (
    APICURIO_CONVERTER,
    JDBC_SINK_CONNECTOR,
    POSTGRES_SOURCE_CONNECTOR,
    ConnectWorker,
    apicurio_converter,
)
from bridge.devstack.stack import StackInfo
from bridge.errors import StackError
from bridge.spark.job import run_apply
from tests.integration.bridge_harness import (
    RunningBridge,
    bridge_config,
    mark,
    read_topic,
    scratch_database,
    table_differences,
)
from tests.integration.test_delta_e2e import apply_config, assert_delta_equals_source

pytestmark = pytest.mark.integration


#: pgbridge's form for plain Avro readers, which Kafka Connect refuses (docs/debezium-consumers.md).
AVRO_FORM = {"schema.logical.types": "avro"}

SINK_SCHEMA = """
CREATE EXTENSION IF NOT EXISTS hstore;
CREATE TABLE items (id bigint PRIMARY KEY, name text, born date, price numeric(12,2),
                    seen_at timestamptz, note text, at_time time, tags text[], nums integer[],
                    attrs hstore)
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
        conn.execute(
            "UPDATE items SET at_time = time '00:00:00.000001' + id * interval '37 min 1.5 s', "
            "tags = ARRAY['t' || id, NULL, 'ü'], nums = ARRAY[id, -id, NULL] WHERE id % 2 = 1"
        )
        conn.execute("UPDATE items SET tags = '{}', nums = '{}' WHERE id = 52")
        conn.execute("UPDATE items SET attrs = hstore(ARRAY['k', 'n'], ARRAY[id::text, NULL])")
        conn.execute("UPDATE items SET id = 1003, name = 'moved' WHERE id = 3")  # key change
        conn.execute("DELETE FROM items WHERE id % 10 = 0")
        conn.execute("ALTER TABLE items ADD COLUMN extra text")
        conn.execute("UPDATE items SET extra = 'x' || id WHERE id % 4 = 0")
        conn.execute(
            "INSERT INTO items (id, name, born, price, seen_at, note, extra) "
            "VALUES (2000, 'late', date '2030-06-15', 99999.99, now(), 'n', 'e')"
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
            conn.execute(SINK_SCHEMA)
        bridge = RunningBridge(bridge_config(local_stack, source, prefix))  # the defaults
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
            columns = "id, name, born, price, seen_at, note, extra, at_time, tags, nums"
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
        assert got[1][7:] == (dt_time(0, 37, 1, 500001), ["t1", None, "ü"], [1, -1, None])
        assert got[52][8:] == ([], [])
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
        assert types["at_time"] == "time without time zone"
        assert types["tags"] == types["nums"] == "ARRAY"
        # hstore as Debezium's json mode sends it (the default): a json column, NULL values
        # kept (an Avro map, hstore.handling.mode = "map", lands in hstore with NULL as "null").
        assert types["attrs"] == "json"
        with psycopg.connect(source) as conn:
            expected_attrs = dict(conn.execute("SELECT id, hstore_to_json(attrs) FROM items"))
        with psycopg.connect(sink) as conn:
            assert dict(conn.execute("SELECT id, attrs FROM items")) == expected_attrs
        assert expected_attrs[1] == {"k": "1", "n": None}


def test_connect_refuses_the_avro_forms_logical_types_on_a_date_column(
    local_stack: StackInfo, connect_worker: ConnectWorker
) -> None:
    """Why the default is ``schema.logical.types=connect``: with ``avro`` (``logicalType:
    date`` beside ``connect.name: io.debezium.time.Date``) Kafka Connect's Avro data mapping
    refuses the record and the sink task fails."""
    prefix = f"cd{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as source, scratch_database(local_stack) as sink:
        with psycopg.connect(source, autocommit=True) as conn:
            conn.execute("CREATE TABLE items (id int PRIMARY KEY, born date)")
            conn.execute("INSERT INTO items VALUES (1, '2024-01-01')")
        bridge = RunningBridge(bridge_config(local_stack, source, prefix, **AVRO_FORM))
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


COMPARED_SCHEMA = """
CREATE TABLE cmp (
    id bigint PRIMARY KEY, name text, born date, price numeric(12,2), seen_at timestamptz,
    local_at timestamp, flag bool, doc jsonb, small smallint, ratio double precision,
    u uuid, raw bytea, at_time time
)
"""

CHANGES = (
    "INSERT INTO cmp VALUES (1, 'ada', '1815-12-10', 12.50, '2024-05-06 07:08:09.123456+02', "
    "'2024-05-06 07:08:09.5', true, '{\"a\": [1, 2]}', -3, 0.25, "
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\\x00ff', '13:14:15.000001')",
    "UPDATE cmp SET name = 'ada l.', price = 99.99 WHERE id = 1",
    "DELETE FROM cmp WHERE id = 1",
)

#: Fields pgbridge adds (documented extensions).
EXTENSIONS = {"source.commit_lsn", "source.seq", "unchanged_toast_columns"}


def _schema(registry_url: str, schema_id: int) -> Any:
    """The schema of ``schema_id``, read as pgbridge reads it (bridge.sink.registry's client:
    it retries a connection the registry drops; a bare request once failed CI on one)."""
    from bridge.sink.registry import registry_client

    return json.loads(registry_client(registry_url).get_schema(schema_id).schema_str)


def _records(stack: StackInfo, topic: str, count: int) -> list[tuple[Any, Any, Any, Any]]:
    """``count`` records of ``topic``: (key schema, key, value schema, value), decoded."""
    consumer = Consumer(
        {
            "bootstrap.servers": stack.bootstrap_servers,
            "group.id": f"cmp-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    out: list[tuple[Any, Any, Any, Any]] = []
    try:
        deadline = time.monotonic() + 120
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            value = msg.value()
            if value is None:
                continue  # tombstones: compared by count below
            decoded: list[Any] = []
            for data in (msg.key(), value):
                assert data is not None and data[0] == 0, f"{topic}: not Confluent-framed"
                schema = _schema(stack.registry_url, int.from_bytes(data[1:5], "big"))
                parsed = fastavro.parse_schema(schema)
                decoded += [schema, fastavro.schemaless_reader(io.BytesIO(data[5:]), parsed)]
            out.append((decoded[0], decoded[1], decoded[2], decoded[3]))
    finally:
        consumer.close()
    assert len(out) == count, f"{topic}: {len(out)} of {count} change records"
    return out


def _fields(schema: Any) -> dict[str, Any]:
    return {f["name"]: f for f in schema["fields"]}


def _branch(field_type: Any) -> Any:
    """A field's type without its null branch."""
    if isinstance(field_type, list):
        rest = [t for t in field_type if t != "null"]
        return rest[0] if len(rest) == 1 else rest
    return field_type


_FORM = ("type", "logicalType", "precision", "scale", "connect.name", "connect.parameters")


def _form(field_type: Any) -> Any:
    """What a consumer reads about a type, array items included."""
    t = _branch(field_type)
    if isinstance(t, dict):
        form = {k: t.get(k) for k in _FORM if k in t}
        if t.get("type") == "array":
            form["items"] = _form(t["items"])
        if t.get("type") == "map":
            form["values"] = _form(t["values"])
        return form
    return {"type": t}


def _record_name(schema: Any, prefix: str) -> str:
    return str(schema.get("name", "")).replace(prefix, "<prefix>", 1)


def debezium_source(
    stack: StackInfo, dsn: str, prefix: str, table: str, **extra: str
) -> dict[str, str]:
    """Debezium's PostgreSQL connector on ``table`` of ``dsn``: topic prefix ``prefix``, slot
    ``<prefix>_slot``, a filtered publication ``<prefix>_pub``, Avro through the registry."""
    return {
        "connector.class": POSTGRES_SOURCE_CONNECTOR,
        "tasks.max": "1",
        "plugin.name": "pgoutput",
        "database.hostname": stack.postgres_host,
        "database.port": str(stack.postgres_port),
        "database.user": "postgres",
        "database.password": stack.postgres_password or "unused-trust-auth",
        "database.dbname": str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]),
        "topic.prefix": prefix,
        "slot.name": f"{prefix}_slot",
        "publication.name": f"{prefix}_pub",
        "publication.autocreate.mode": "filtered",
        "table.include.list": table,
        # The stack's broker creates no topics on its own: Connect does.
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": "1",
        **apicurio_converter(stack.registry_url, "key.converter", register=True),
        **apicurio_converter(stack.registry_url, "value.converter", register=True),
        **extra,
    }


Records = list[tuple[Any, Any, Any, Any]]


def _beside_debezium(
    stack: StackInfo, connect: ConnectWorker, dsn: str, table: str, statements: list[str]
) -> tuple[str, Records, str, Records]:
    """Debezium's connector (no snapshot) and ``pgbridge run`` (its defaults) on ``dsn`` at once,
    ``statements`` run, each one's records of ``public.<table>``: (Debezium's topic prefix, its
    records, pgbridge's prefix, its records)."""
    ours, theirs = f"pgb{uuid.uuid4().hex[:6]}", f"dbz{uuid.uuid4().hex[:6]}"
    name = f"dbz-{theirs}"
    connect.put_connector(
        name,
        debezium_source(stack, dsn, theirs, f"public.{table}", **{"snapshot.mode": "no_data"}),
    )
    try:
        connect.wait_running(name)
        _wait_slot_active(dsn, f"{theirs}_slot")
        bridge = RunningBridge(bridge_config(stack, dsn, ours))  # the defaults
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                for statement in statements:
                    conn.execute(statement)
            bridge.wait_confirmed(mark(dsn))
        finally:
            bridge.stop()
        debezium = _records(stack, f"{theirs}.public.{table}", len(statements))
    finally:
        connect.delete_connector(name)
    return theirs, debezium, ours, _records(stack, f"{ours}.public.{table}", len(statements))


def test_debezium_and_pgbridge_publish_the_same_change_events(
    local_stack: StackInfo, connect_worker: ConnectWorker
) -> None:
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(COMPARED_SCHEMA)
        theirs, debezium, ours, pgbridge = _beside_debezium(
            local_stack, connect_worker, dsn, "cmp", list(CHANGES)
        )

    for (dk_schema, dkey, dv_schema, dvalue), (pk_schema, pkey, pv_schema, pvalue) in zip(
        debezium, pgbridge, strict=True
    ):
        # Keys: the same record, the same fields and values.
        assert _record_name(pk_schema, ours) == _record_name(dk_schema, theirs)
        assert pkey == dkey
        assert {n: _form(f["type"]) for n, f in _fields(pk_schema).items()} == {
            n: _form(f["type"]) for n, f in _fields(dk_schema).items()
        }
        # Envelope: Debezium's fields, pgbridge's extensions beside them.
        assert _record_name(pv_schema, ours) == _record_name(dv_schema, theirs)
        d_env, p_env = _fields(dv_schema), _fields(pv_schema)
        assert set(d_env) <= set(p_env), f"missing envelope fields {set(d_env) - set(p_env)}"
        assert set(p_env) - set(d_env) <= EXTENSIONS
        # Columns: type, logical type, Connect name and parameters, one by one.
        # "before" defines the row record, "after" names it (Avro's named types).
        d_row = _branch(d_env["before"]["type"])
        p_row = _branch(p_env["before"]["type"])
        assert _record_name(p_row, ours) == _record_name(d_row, theirs)
        d_cols, p_cols = _fields(d_row), _fields(p_row)
        assert list(p_cols) == list(d_cols)
        for column in d_cols:
            assert _form(p_cols[column]["type"]) == _form(d_cols[column]["type"]), column
        # source: Debezium's fields, in Debezium's forms.
        d_src, p_src = (
            _fields(_branch(d_env["source"]["type"])),
            _fields(_branch(p_env["source"]["type"])),
        )
        assert set(d_src) <= set(p_src), f"missing source fields {set(d_src) - set(p_src)}"
        assert {f"source.{n}" for n in set(p_src) - set(d_src)} <= EXTENSIONS
        for field in d_src:
            assert _form(p_src[field]["type"]) == _form(d_src[field]["type"]), f"source.{field}"
        # Values.
        assert pvalue["op"] == dvalue["op"]
        assert pvalue["before"] == dvalue["before"]
        assert pvalue["after"] == dvalue["after"]
        ds, ps = dvalue["source"], pvalue["source"]
        for field in ("connector", "db", "schema", "table", "txId", "snapshot", "ts_ms"):
            assert ps[field] == ds[field], f"source.{field}: {ps[field]!r} != {ds[field]!r}"
        # The change's own LSN, and Debezium's sequence [last commit's end LSN, change LSN].
        assert ps["lsn"] == ds["lsn"]
        assert ps["sequence"] == ds["sequence"], (ps["sequence"], ds["sequence"])
        assert ps["xmin"] is None and ds["xmin"] is None


def _wait_slot_active(dsn: str, slot: str) -> None:
    deadline = time.monotonic() + 120
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
            ).fetchone()
            if row is not None and row[0]:
                return
            time.sleep(0.5)
    raise AssertionError(f"Debezium's slot {slot} never became active")


def _topic_size(stack: StackInfo, topic: str) -> int:
    from confluent_kafka import TopicPartition

    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": "size"})
    try:
        md = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None:
            return 0
        return sum(
            high - low
            for low, high in (
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                for p in md.partitions
            )
        )
    finally:
        consumer.close()


def _writer(dsn: str, stop: threading.Event, first: int) -> None:
    """One small transaction after another: inserts, updates of an earlier row, deletes."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        i = first
        while not stop.is_set():
            with conn.transaction():
                conn.execute("INSERT INTO moved VALUES (%s, %s, 0)", (i, f"row {i}"))
                if i % 3 == 0:
                    conn.execute("UPDATE moved SET n = n + 1, v = v || '+' WHERE id = %s", (i - 1,))
            if i % 7 == 0:
                conn.execute("DELETE FROM moved WHERE id = %s", (i - 5,))
            i += 1
            time.sleep(0.005)


def test_pgbridge_takes_over_a_stopped_debezium_connector_without_a_gap(
    local_stack: StackInfo,
    connect_worker: ConnectWorker,
    spark: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Debezium snapshots a table and streams a steady writer; it is stopped mid-load while
    the writer goes on; pgbridge starts on its slot, publication and topic prefix from its
    stored offsets (the standalone worker's file). The topic, read in order, rebuilds the table
    equal to the source (nothing missed), and at most one transaction is in it from both."""
    prefix = f"mv{uuid.uuid4().hex[:8]}"
    slot, publication, topic = f"{prefix}_slot", f"{prefix}_pub", f"{prefix}.public.moved"
    stop = threading.Event()
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE moved (id int PRIMARY KEY, v text, n int)")
            conn.execute(
                "INSERT INTO moved SELECT i, 'row ' || i, 0 FROM generate_series(1, 100) i"
            )
        name = f"dbz-{prefix}"
        connect_worker.put_connector(
            name, debezium_source(local_stack, dsn, prefix, "public.moved")
        )
        writer = threading.Thread(target=_writer, args=(dsn, stop, 101), daemon=True)
        try:
            connect_worker.wait_running(name)
            deadline = time.monotonic() + 120
            while _topic_size(local_stack, topic) < 100:  # its snapshot
                assert time.monotonic() < deadline, "Debezium's snapshot did not arrive"
                time.sleep(0.5)
            writer.start()
            while _topic_size(local_stack, topic) < 250:  # and some of the stream
                assert time.monotonic() < deadline, "Debezium's stream did not arrive"
                connect_worker.raise_if_failed(name)
                time.sleep(0.2)
        finally:
            connect_worker.delete_connector(name)  # stopped mid-load; the writer goes on
        try:
            time.sleep(2)
            caplog.set_level(logging.INFO, logger="bridge")
            bridge = RunningBridge(
                bridge_config(
                    local_stack,
                    dsn,
                    prefix,
                    **{
                        "slot.name": slot,
                        "publication.name": publication,
                        "publication.autocreate.mode": "disabled",
                        "debezium.offsets.file": str(connect_worker.base_dir / "offsets"),
                        "state.dir": str(tmp_path),
                    },
                )
            )
            try:
                time.sleep(2)
                stop.set()
                writer.join(30)
                bridge.wait_confirmed(mark(dsn))
            finally:
                bridge.stop()
        finally:
            stop.set()
        with psycopg.connect(dsn) as conn:
            expected = {
                r[0]: {"id": r[0], "v": r[1], "n": r[2]}
                for r in conn.execute("SELECT id, v, n FROM moved").fetchall()
            }
        # The apply job applies the topic as it is, Debezium's records and pgbridge's.
        config = apply_config(local_stack, prefix, tmp_path / "apply")
        run_apply(config, spark=spark)
        assert_delta_equals_source(spark, config, dsn, {"public.moved": ("id",)})
    records = read_topic(local_stack.bootstrap_servers, local_stack.registry_url, topic)
    rebuilt: dict[int, Any] = {}
    for key, value in records:  # one partition: Debezium's records, then pgbridge's
        if value is None:
            continue
        if value["op"] == "d":
            rebuilt.pop(key["id"], None)
        else:
            rebuilt[key["id"]] = value["after"]
    assert rebuilt == expected, table_differences(
        {(k,): v for k, v in rebuilt.items()}, {(k,): v for k, v in expected.items()}
    )
    theirs = {v["source"]["txId"] for _, v in records if v and "seq" not in v["source"]}
    ours = {v["source"]["txId"] for _, v in records if v and "seq" in v["source"]}
    assert len(theirs) > 50 and len(ours) > 50  # each streamed part of the load
    assert len(theirs & ours) <= 1, f"transactions sent by both: {sorted(theirs & ours)}"
    assert f"taking over from Debezium connector 'dbz-{prefix}'" in caplog.text
    # pgbridge's schema is a BACKWARD-compatible next version of Debezium's (its additions
    # have defaults): the registry took it without a forced registration.
    assert "incompatible change" not in caplog.text, caplog.text


#: Type-zoo columns Debezium 3.3 leaves out with its defaults (``include.unknown.datatypes =
#: false``: types it has no mapping for); pgbridge publishes them (docs/debezium-consumers.md).
DEBEZIUM_LEAVES_OUT = {
    "aiv": "interval[]", "amo": "money[]", "bx": "box", "ci": "circle", "ln": "line",
    "lsn": "pg_lsn", "ls": "lseg", "mr": "int4multirange", "pa": "path", "pg": "polygon",
    "tsq": "tsquery", "x8": "xid8",
}  # fmt: skip
#: Columns whose Avro form differs from Debezium's with both defaults, and why (the docs list them).
FORM_DIFFERS = {
    # Debezium: precision 64 and no connect.decimal.precision; Spark reads decimals up to 38.
    "m": "money",
}
#: Columns whose values differ in the ordinary row (row 1), and why.
VALUE_DIFFERS = {
    "grid": "a 2-dimensional array: Debezium sends [null, null]",
    "nm": "name: Debezium sends null",
}
#: ... and in the row of extremes (row 2): infinities Debezium overflows, BC timestamps in arrays
#: it reads in the Julian calendar, bit strings pgbridge pads, arrays Debezium nulls or zeroes.
EDGE_VALUE_DIFFERS = {"ad", "anu", "ats", "atm", "atz", "bt", "d", "nm"}


def _same(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def test_every_type_of_the_zoo_beside_debezium_with_both_defaults(
    local_stack: StackInfo, connect_worker: ConnectWorker
) -> None:
    """Every column type of the type zoo, one row of ordinary values and one of extremes, in a
    REPLICA IDENTITY FULL table with a primary key, from Debezium 3.3's connector and from
    pgbridge, both with their defaults: the same keys (the primary key), the same Avro forms
    (type, logical type, Connect name and parameters, array items) and values, except the
    columns listed above with why (docs/debezium-consumers.md has the same list)."""
    from tests.integration.test_type_zoo import server_columns

    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for extension in ("citext", "hstore", "ltree"):
                conn.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}")
            conn.execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
            conn.execute("CREATE DOMAIN posint AS integer CHECK (VALUE > 0)")
            columns, omitted = server_columns(conn, conn.info.server_version // 10_000)
            assert not omitted, omitted
            typed = ", ".join(f"{c.name} {c.type}" for c in columns)
            conn.execute(f"CREATE TABLE zoo (id integer PRIMARY KEY, {typed})")
            # Whole old rows, and the Relation flags every column: keyed by the primary key.
            conn.execute("ALTER TABLE zoo REPLICA IDENTITY FULL")
        rows = [
            f"INSERT INTO zoo VALUES ({row}, {', '.join(literals)})"
            for row, literals in ((1, [c.normal for c in columns]), (2, [c.edge for c in columns]))
        ]
        theirs, debezium, ours, pgbridge = _beside_debezium(
            local_stack, connect_worker, dsn, "zoo", rows
        )

    for (d_key_schema, d_key, _, _), (p_key_schema, p_key, _, _) in zip(
        debezium, pgbridge, strict=True
    ):
        assert p_key == d_key == {"id": p_key["id"]}
        assert _record_name(p_key_schema, ours) == _record_name(d_key_schema, theirs)
        assert {n: _form(f["type"]) for n, f in _fields(p_key_schema).items()} == {
            n: _form(f["type"]) for n, f in _fields(d_key_schema).items()
        }
    d_cols = _fields(_branch(_fields(debezium[0][2])["before"]["type"]))
    p_cols = _fields(_branch(_fields(pgbridge[0][2])["before"]["type"]))
    assert set(p_cols) == {"id", *(c.name for c in columns)}
    assert set(p_cols) - set(d_cols) == set(DEBEZIUM_LEAVES_OUT)
    compared = [c.name for c in columns if c.name in d_cols]
    forms = {c for c in compared if _form(p_cols[c]["type"]) != _form(d_cols[c]["type"])}
    assert forms == set(FORM_DIFFERS), {
        c: (_form(d_cols[c]["type"]), _form(p_cols[c]["type"])) for c in forms ^ set(FORM_DIFFERS)
    }
    for (_, _, _, d_value), (_, _, _, p_value), expected in zip(
        debezium, pgbridge, (set(VALUE_DIFFERS), EDGE_VALUE_DIFFERS), strict=True
    ):
        values = {c for c in compared if not _same(d_value["after"][c], p_value["after"][c])}
        assert values == expected, {
            c: (d_value["after"][c], p_value["after"][c]) for c in values ^ expected
        }
