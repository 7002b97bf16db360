"""`pgbridge run` end to end on the real stack: PostgreSQL -> pgbridge -> Kafka + registry, and
an independent consumer that rebuilds every table from the topics equals the source tables."""

from __future__ import annotations

import functools
import json
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest

from bridge.devstack.stack import StackInfo
from tests.integration.bridge_harness import (
    BridgeProcess,
    RunningBridge,
    bridge_config,
    bridge_settings,
    mark,
    normalized,
    read_topic,
    rebuild_tables,
    scratch_database,
    slot_confirmed,
    source_rows,
    table_differences,
    wait_slot_confirmed,
)

pytestmark = pytest.mark.integration

SCHEMA = """
CREATE TABLE customers (id bigint PRIMARY KEY, name text NOT NULL, email text,
                        updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint NOT NULL, amount numeric(12,2),
                     status text, placed_at timestamptz DEFAULT now(), note jsonb);
CREATE TABLE audit (id int, msg text);
ALTER TABLE audit REPLICA IDENTITY FULL;  -- identical rows must stay two rows
CREATE TABLE docs (id int PRIMARY KEY, title text, body text);
ALTER TABLE docs REPLICA IDENTITY FULL;   -- whole old rows; keyed by the primary key (Debezium)
"""

KEYS = {
    "public.customers": ("id",),
    "public.orders": ("id",),
    "public.audit": (),  # REPLICA IDENTITY FULL without a key: null keys, a multiset
    "public.docs": ("id",),  # REPLICA IDENTITY FULL with a primary key: keyed by it
}


def workload(dsn: str, big_rows: int = 20_000) -> None:
    """Inserts, updates, a key change, deletes, a truncate, multi-table and streamed
    transactions, a rolled-back one."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.transaction():
            conn.execute(
                "INSERT INTO customers (id, name, email) SELECT i, 'customer ' || i, "
                "'c' || i || '@example.com' FROM generate_series(1, 50) i"
            )
            conn.execute(
                "INSERT INTO orders (id, customer_id, amount, status, note) "
                "SELECT i, 1 + i % 50, (i * 1.25)::numeric(12,2), 'new', "
                "jsonb_build_object('n', i, 'tags', jsonb_build_array('a', 'ü')) "
                "FROM generate_series(1, 100) i"
            )
        conn.execute("UPDATE orders SET status = 'paid', amount = amount + 1 WHERE id % 3 = 0")
        conn.execute("UPDATE customers SET email = NULL WHERE id = 7")
        conn.execute("UPDATE customers SET id = 1003 WHERE id = 3")  # key change
        conn.execute("DELETE FROM orders WHERE id % 10 = 0")
        conn.execute("INSERT INTO audit SELECT i, 'event ' || i FROM generate_series(1, 20) i")
        conn.execute("UPDATE audit SET msg = 'changed' WHERE id = 5")
        conn.execute("DELETE FROM audit WHERE id = 6")
        conn.execute("TRUNCATE audit")
        conn.execute(
            "INSERT INTO audit VALUES (100, 'after truncate'), (101, NULL), (101, NULL), "
            "(102, 'twice'), (102, 'twice')"
        )
        conn.execute("UPDATE audit SET msg = 'was null' WHERE id = 101 AND ctid = "
                     "(SELECT min(ctid) FROM audit WHERE id = 101)")  # fmt: skip
        conn.execute("DELETE FROM audit WHERE ctid = (SELECT min(ctid) FROM audit WHERE id = 102)")
        conn.execute(
            # Random hex does not compress to inline size: the body is TOASTed out of line.
            "INSERT INTO docs SELECT i, 'doc ' || i, "
            "(SELECT string_agg(md5(random()::text || j), '') FROM generate_series(1, 1000) j) "
            "FROM generate_series(1, 5) i"
        )
        conn.execute("UPDATE docs SET title = 'retitled' WHERE id <= 2")  # body: unchanged TOAST
        with conn.transaction():  # over logical_decoding_work_mem: streamed in progress
            conn.execute(
                "INSERT INTO orders (id, customer_id, amount, status) "
                "SELECT i, 1 + i %% 50, i %% 1000, 'bulk' "
                "FROM generate_series(1000, 1000 + %s - 1) i",
                (big_rows,),
            )
            conn.execute("UPDATE customers SET name = name || ' (bulk)' WHERE id = 1")
        with conn.transaction():  # rolled back: must leave no trace
            conn.execute("INSERT INTO customers (id, name) VALUES (9999, 'rolled back')")
            raise psycopg.Rollback()


def prepare_database(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        # Make large transactions stream in progress (protocol 2+), on this database only.
        dbname = conn.info.dbname
        conn.execute(f"ALTER DATABASE \"{dbname}\" SET logical_decoding_work_mem = '64kB'")


def rebuild_with_toast(stack: StackInfo, prefix: str) -> dict[str, Any]:
    return rebuild_tables(stack.bootstrap_servers, stack.registry_url, prefix)


def assert_tables_equal(stack: StackInfo, dsn: str, prefix: str) -> None:
    rebuilt = rebuild_with_toast(stack, prefix)
    for table, key in KEYS.items():
        expected = source_rows(dsn, table, key)
        got = normalized(rebuilt.get(table, {}))
        for row in got.values():
            if isinstance(row.get("note"), str):
                row["note"] = json.loads(row["note"])
        assert got == expected, f"{table}: {table_differences(got, expected)}"


def assert_change_positions(values: list[dict[str, Any]]) -> None:
    """source.lsn is each change's own WAL position (the streamed transaction's too, though it
    is replayed at its commit): rising with seq inside a transaction, below its commit record;
    source.sequence is Debezium's [last commit's end LSN, change LSN]. For a topic without key
    changes (the delete and insert of one share their WAL record's LSN)."""
    by_tx: dict[int, list[dict[str, Any]]] = {}
    for value in values:
        by_tx.setdefault(value["source"]["commit_lsn"], []).append(value["source"])
    assert max(len(changes) for changes in by_tx.values()) >= 20_000  # the streamed one
    last_commits = []
    for commit_lsn, changes in sorted(by_tx.items()):
        changes.sort(key=lambda s: s["seq"])
        lsns = [s["lsn"] for s in changes]
        assert lsns == sorted(set(lsns)) and lsns[-1] < commit_lsn
        sequences = [json.loads(s["sequence"]) for s in changes]
        assert [int(seq[1]) for seq in sequences] == lsns
        assert len({seq[0] for seq in sequences}) == 1  # one per transaction
        last_commits.append(int(sequences[0][0] or 0))
    assert last_commits == sorted(last_commits)


@pytest.mark.pure_python_slice  # also run with PGBRIDGE_NATIVE=0 (make test)
def test_pipeline_end_to_end_tables_rebuilt_from_topics_equal_source(
    local_stack: StackInfo,
) -> None:
    prefix = f"e2e{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        prepare_database(dsn)
        bridge = RunningBridge(bridge_config(local_stack, dsn, prefix))
        try:
            workload(dsn)
            bridge.wait_confirmed(mark(dsn))
        finally:
            bridge.stop()
        assert_tables_equal(local_stack, dsn, prefix)
        # The delete was followed by a tombstone, the truncate by an op 't' event.
        records = read_topic(
            local_stack.bootstrap_servers, local_stack.registry_url, f"{prefix}.public.orders"
        )
        deletes = [i for i, (_, v) in enumerate(records) if v is not None and v["op"] == "d"]
        assert deletes and all(records[i + 1][1] is None for i in deletes)
        assert_change_positions([v for _, v in records if v is not None])
        audit = read_topic(
            local_stack.bootstrap_servers, local_stack.registry_url, f"{prefix}.public.audit"
        )
        assert any(v is not None and v["op"] == "t" for _, v in audit)
        # Unchanged TOAST is marked, not sent as NULL.
        docs = read_topic(
            local_stack.bootstrap_servers, local_stack.registry_url, f"{prefix}.public.docs"
        )
        updates = [v for _, v in docs if v is not None and v["op"] == "u"]
        assert updates and all(v["unchanged_toast_columns"] == ["body"] for v in updates)


def test_pipeline_kill_9_mid_workload_and_restart_loses_nothing(
    local_stack: StackInfo, tmp_path: Any
) -> None:
    prefix = f"kill{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        prepare_database(dsn)
        settings = bridge_settings(local_stack, dsn, prefix)
        slot = settings["slot.name"]
        log = str(tmp_path / "bridge.log")
        first = BridgeProcess(settings, log)
        wait_slot_exists(dsn, slot, first)
        worker = threading.Thread(target=workload, args=(dsn, 60_000))
        worker.start()
        time.sleep(1.5)  # mid-workload: some transactions delivered, others in flight
        first.kill()
        confirmed_at_kill = slot_confirmed(dsn, slot)
        second = BridgeProcess(settings, log)
        worker.join(300)
        target = mark(dsn)
        wait_slot_confirmed(dsn, slot, target, second)
        assert second.terminate() == 0, second.log()[-3000:]  # SIGTERM: graceful, exit 0
        assert slot_confirmed(dsn, slot) >= confirmed_at_kill
        assert_tables_equal(local_stack, dsn, prefix)


def wait_slot_exists(dsn: str, slot: str, process: BridgeProcess, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
            ).fetchone()
        if row is not None and row[0]:
            return
        if process.proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"pgbridge run did not start streaming:\n{process.log()[-3000:]}")
        time.sleep(0.2)


def test_pipeline_transaction_metadata_and_heartbeats(local_stack: StackInfo) -> None:
    prefix = f"meta{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        prepare_database(dsn)
        config = bridge_config(
            local_stack,
            dsn,
            prefix,
            **{"provide.transaction.metadata": "true", "heartbeat.interval.ms": "300"},
        )
        bridge = RunningBridge(config)
        try:
            workload(dsn, big_rows=2_000)
            bridge.wait_confirmed(mark(dsn))
            time.sleep(1)  # a few heartbeat intervals
        finally:
            bridge.stop()
        read = functools.partial(
            read_topic, local_stack.bootstrap_servers, local_stack.registry_url
        )
        per_tx: dict[str, dict[str, int]] = {}
        for topic in (f"{prefix}.public.{t}" for t in ("customers", "orders", "audit", "docs")):
            for _, value in read(topic):
                if value is not None:
                    tables = per_tx.setdefault(value["transaction"]["id"], {})
                    table = f"{value['source']['schema']}.{value['source']['table']}"
                    tables[table] = tables.get(table, 0) + 1
        records = [v for _, v in read(f"{prefix}.transaction")]
        begins = [r["id"] for r in records if r["status"] == "BEGIN"]
        ends = {r["id"]: r for r in records if r["status"] == "END"}
        assert sorted(begins) == sorted(ends) == sorted(per_tx)  # one BEGIN/END per transaction
        for tx_id, tables in per_tx.items():
            end = ends[tx_id]
            assert end["event_count"] == sum(tables.values())
            assert {
                d["data_collection"]: d["event_count"] for d in end["data_collections"]
            } == tables
        beats = [v for _, v in read(f"__debezium-heartbeat.{prefix}")]
        assert len(beats) >= 2
        assert beats[-1]["flushed_lsn"] >= beats[0]["flushed_lsn"] > 0
