"""Snapshot faults on the real server: typed errors naming the table, nothing recorded as done."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bridge.devstack.stack import StackInfo
from bridge.runner import run
from bridge.snapshot import SnapshotImportError, SnapshotPermissionError, SnapshotTimeoutError
from bridge.snapshot.plan import Chunk, TablePlan
from bridge.snapshot.reader import SnapshotConnection
from bridge.snapshot.state import load_state
from tests.integration.bridge_harness import bridge_config, scratch_database

pytestmark = pytest.mark.integration


def test_snapshot_permission_denied_on_one_table_names_it(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    prefix = f"snapp{uuid.uuid4().hex[:8]}"
    role = f"r_{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE open_t (id int PRIMARY KEY); INSERT INTO open_t VALUES (1)")
            conn.execute("CREATE TABLE secret_t (id int PRIMARY KEY)")
            conn.execute(f"CREATE PUBLICATION {prefix}_pub FOR ALL TABLES")
            conn.execute(f"CREATE ROLE {role} LOGIN REPLICATION")
            conn.execute(f"GRANT SELECT ON open_t TO {role}")
        params = conninfo_to_dict(dsn)
        params["user"] = role
        config = bridge_config(
            local_stack,
            make_conninfo(**params),  # type: ignore[arg-type]
            prefix,
            **{"publication.autocreate.mode": "disabled", "state.dir": str(tmp_path)},
        )
        try:
            with pytest.raises(SnapshotPermissionError) as info:
                run(config, threading.Event())
            assert info.value.table == "public.secret_t"
            assert info.value.sqlstate == "42501"
            path = tmp_path / f"snapshot-{config.replication.slot_name}.json"
            state = load_state(path)
            # The slot exists now: the state says its snapshot is owed, nothing done.
            assert state is not None and state.status == "copying" and not state.planned
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f"GRANT SELECT ON secret_t TO {role}")
                conn.execute("INSERT INTO secret_t VALUES (7)")
            stop = threading.Event()
            thread = threading.Thread(target=run, args=(config, stop))
            thread.start()
            deadline = time.monotonic() + 60
            while (done := load_state(path)) is None or done.status != "done":
                assert time.monotonic() < deadline and thread.is_alive()
                time.sleep(0.1)
            stop.set()
            thread.join(60)
            assert {t.plan.table: t.rows_done for t in done.tables} == {
                "public.open_t": 1,
                "public.secret_t": 1,
            }
        finally:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE slot_name = %s",
                    (config.replication.slot_name,),
                )
                conn.execute(f"DROP OWNED BY {role}")
                conn.execute(f"DROP ROLE {role}")


def test_snapshot_import_of_an_unknown_snapshot_is_typed(local_stack: StackInfo) -> None:
    with scratch_database(local_stack) as dsn:
        with pytest.raises(SnapshotImportError) as info:
            SnapshotConnection(dsn, "00000003-0000001B-1")
        assert info.value.snapshot == "00000003-0000001B-1"


def test_snapshot_statement_timeout_names_table_and_chunk(local_stack: StackInfo) -> None:
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE slow (id int PRIMARY KEY)")
            conn.execute("INSERT INTO slow SELECT generate_series(1, 10)")
            oid = conn.execute("SELECT 'slow'::regclass::oid::int").fetchone()[0]  # type: ignore[index]
        connection = SnapshotConnection(dsn, None)
        try:
            connection.conn.execute("SET statement_timeout = '50ms'")
            plan = TablePlan(
                table="public.slow", schema="public", name="slow", oid=oid, method="whole",
                columns=("id",), chunks=(Chunk(0),),
                row_filter="pg_sleep(0.2) IS NOT NULL",  # every row takes 0.2 s
            )  # fmt: skip
            with pytest.raises(SnapshotTimeoutError) as info:
                list(connection.copy(plan, Chunk(3)))
            assert (info.value.table, info.value.chunk, info.value.sqlstate) == (
                "public.slow",
                3,
                "57014",
            )
        finally:
            connection.close()


def test_snapshot_row_level_security_is_an_error_not_a_partial_copy(
    local_stack: StackInfo,
) -> None:
    role = f"r_{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE guarded (id int PRIMARY KEY, owner text)")
            conn.execute("INSERT INTO guarded VALUES (1, 'a'), (2, 'b')")
            conn.execute("ALTER TABLE guarded ENABLE ROW LEVEL SECURITY")
            conn.execute("CREATE POLICY only_a ON guarded USING (owner = 'a')")
            conn.execute(f"CREATE ROLE {role} LOGIN REPLICATION")
            conn.execute(f"GRANT SELECT ON guarded TO {role}")
            oid = conn.execute("SELECT 'guarded'::regclass::oid::int").fetchone()[0]  # type: ignore[index]
        params = conninfo_to_dict(dsn)
        params["user"] = role
        connection = SnapshotConnection(make_conninfo(**params), None)  # type: ignore[arg-type]
        try:
            plan = TablePlan(
                table="public.guarded", schema="public", name="guarded", oid=oid,
                method="whole", columns=("id", "owner"), chunks=(Chunk(0),),
            )  # fmt: skip
            with pytest.raises(SnapshotPermissionError) as info:
                list(connection.copy(plan, Chunk(0)))
            assert info.value.table == "public.guarded"
        finally:
            connection.close()
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f"DROP OWNED BY {role}")
                conn.execute(f"DROP ROLE {role}")
