"""How a snapshot worker reads a key range from a real server: every row of the range once,
by a bitmap heap scan rather than an index scan (no sort is asked for, see
:mod:`bridge.snapshot.plan`), and a user's source query keeps the planner's index scans."""

from __future__ import annotations

import psycopg
import pytest

from bridge.devstack.stack import StackInfo
from bridge.snapshot.plan import Chunk, TablePlan
from bridge.snapshot.reader import SnapshotConnection
from tests.integration.bridge_harness import scratch_database

pytestmark = pytest.mark.integration

RANGE = "SELECT id, v FROM ranged WHERE id >= 5000 AND id < 9000"


def _ids(connection: SnapshotConnection, plan: TablePlan, chunk: Chunk) -> list[int]:
    ids: list[int] = []
    for batch in connection.copy(plan, chunk):
        for row in batch.items:
            assert not isinstance(row, tuple)  # no lane: parsed rows
            start, end = row.spans[0], row.spans[1]
            ids.append(int.from_bytes(row.buffer[start:end], "big", signed=True))
    return ids


def _plan_of(connection: SnapshotConnection) -> str:
    return "\n".join(r[0] for r in connection.conn.execute(f"EXPLAIN {RANGE}").fetchall())


def test_key_range_is_read_whole_by_a_bitmap_heap_scan(local_stack: StackInfo) -> None:
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE ranged (id bigint PRIMARY KEY, v text)")
            conn.execute("INSERT INTO ranged SELECT g, 'v' || g FROM generate_series(1, 50000) g")
            conn.execute("VACUUM ANALYZE ranged")
            oid = conn.execute("SELECT 'ranged'::regclass::oid::int").fetchone()[0]  # type: ignore[index]
        connection = SnapshotConnection(dsn, None)
        try:
            assert "Index Scan using ranged_pkey" in _plan_of(connection)  # the planner's own
            plan = TablePlan(
                table="public.ranged", schema="public", name="ranged", oid=oid, method="key",
                columns=("id",), chunks=(Chunk(0, None, ("5000",)), Chunk(1, ("5000",), ("9000",))),
                order_columns=("id",), order_types=("bigint",),
            )  # fmt: skip
            ids = _ids(connection, plan, plan.chunks[1])
            assert sorted(ids) == list(range(5000, 9000))
            plan_text = _plan_of(connection)
            assert "Bitmap Heap Scan" in plan_text and "Index Scan using" not in plan_text
            # A user's query (snapshot.select.statement.overrides) plans as it would alone.
            custom = TablePlan(
                table="public.ranged", schema="public", name="ranged", oid=oid, method="key",
                columns=("id",), chunks=plan.chunks, order_columns=("id",),
                order_types=("bigint",), source_query="SELECT * FROM ranged WHERE v <> ''",
            )  # fmt: skip
            assert sorted(_ids(connection, custom, custom.chunks[0])) == list(range(1, 5000))
            assert "Index Scan using ranged_pkey" in _plan_of(connection)
        finally:
            connection.close()
