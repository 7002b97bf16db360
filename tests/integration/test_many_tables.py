"""A database of dozens of tables, not the demo's three: 48 tables cycling through every replica
identity kind and a few column shapes, one transaction touching many of them, updates, deletes,
key changes and truncates spread over all; then an existing table gains a column.

What users rely on: one topic per table with its own key and value subjects, every table
rebuilt from its topic (by an independent consumer, in ``(commit_lsn, seq)`` order) equal to the
source, and nothing set aside.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bridge.devstack.stack import StackInfo
from bridge.spark.job import run_apply
from tests.integration.bridge_harness import (
    RunningBridge,
    bridge_config,
    mark,
    normalized,
    rebuild_tables,
    scratch_database,
    source_rows,
    topics_with_prefix,
)
from tests.integration.test_delta_e2e import apply_config, assert_delta_equals_source

pytestmark = pytest.mark.integration

TABLES = 48

#: (identity kind, DDL after the table name, key columns in table order as the Kafka key has
#: them; () = keyless, compared as a multiset)
SHAPES: list[tuple[str, str, tuple[str, ...]]] = [
    ("pk", "(id int PRIMARY KEY, v text, n numeric(12,2), at timestamptz)", ("id",)),
    ("composite", "(id int, region text, v text, PRIMARY KEY (region, id))", ("id", "region")),
    ("keyless", "(id int, v text)", ()),
    ("full", "(id int, v text)", ()),
    ("index", "(id int NOT NULL, v text, u int NOT NULL)", ("id", "u")),
    ("nothing", "(id int, v text)", ()),
]


def _name(i: int) -> str:
    return f"t{i:02d}_{SHAPES[i % len(SHAPES)][0]}"


def _create(conn: psycopg.Connection, tables: int = TABLES) -> None:
    for i in range(tables):
        kind, ddl, _ = SHAPES[i % len(SHAPES)]
        name = _name(i)
        conn.execute(f"CREATE TABLE {name} {ddl}")
        if kind == "full":
            conn.execute(f"ALTER TABLE {name} REPLICA IDENTITY FULL")
        elif kind == "index":
            conn.execute(f"CREATE UNIQUE INDEX {name}_ui ON {name} (id, u)")
            conn.execute(f"ALTER TABLE {name} REPLICA IDENTITY USING INDEX {name}_ui")
        elif kind == "nothing":
            conn.execute(f"ALTER TABLE {name} REPLICA IDENTITY NOTHING")


def _insert(conn: psycopg.Connection, i: int, ids: range) -> None:
    kind = SHAPES[i % len(SHAPES)][0]
    name = _name(i)
    for j in ids:
        if kind == "pk":
            conn.execute(f"INSERT INTO {name} VALUES (%s, %s, %s, now())", (j, f"v{j}", j * 1.25))
        elif kind == "composite":
            conn.execute(
                f"INSERT INTO {name} VALUES (%s, %s, %s)", (j, "eu" if j % 2 else "us", "x")
            )
        elif kind == "index":
            conn.execute(f"INSERT INTO {name} VALUES (%s, %s, %s)", (j, f"v{j}", j % 3))
        else:
            conn.execute(f"INSERT INTO {name} VALUES (%s, %s)", (j % 5, "dup"))


def _workload(conn: psycopg.Connection, tables: int = TABLES) -> None:
    # One transaction across every table, then one per table.
    with conn.transaction():
        for i in range(tables):
            _insert(conn, i, range(0, 5))
    for i in range(tables):
        with conn.transaction():
            _insert(conn, i, range(5, 20))
    for i in range(tables):
        kind, name = SHAPES[i % len(SHAPES)][0], _name(i)
        if kind in ("keyless", "nothing"):
            continue  # updates and deletes need an identity: PostgreSQL refuses them
        conn.execute(f"UPDATE {name} SET v = 'changed' WHERE id = 3")
        conn.execute(f"DELETE FROM {name} WHERE id = 4")
        if kind in ("pk", "index"):
            conn.execute(f"UPDATE {name} SET id = id + 1000 WHERE id = 6")  # key change
    for i in range(0, tables, 7):
        conn.execute(f"TRUNCATE {_name(i)}")
        _insert(conn, i, range(100, 103))
    conn.execute(f"ALTER TABLE {_name(0)} ADD COLUMN extra text DEFAULT 'd'")
    # The ALTER sends no row changes (as with Debezium); rows touched afterwards carry it.
    conn.execute(f"UPDATE {_name(0)} SET v = v")
    conn.execute(f"INSERT INTO {_name(0)} (id, v, extra) VALUES (500, 'new', 'e')")


def test_many_tables_every_table_rebuilt_from_its_topic_equals_source(
    local_stack: StackInfo,
) -> None:
    prefix = f"many{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            _create(conn)
        bridge = RunningBridge(bridge_config(local_stack, dsn, prefix))
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                _workload(conn)
            bridge.wait_confirmed(mark(dsn), timeout=300)
        finally:
            bridge.stop()
        topics = topics_with_prefix(local_stack.bootstrap_servers, prefix)
        assert {f"{prefix}.public.{_name(i)}" for i in range(TABLES)} <= set(topics)
        assert f"{prefix}.dead_letter" not in topics, "legal data must never be set aside"
        rebuilt = rebuild_tables(local_stack.bootstrap_servers, local_stack.registry_url, prefix)
        for i in range(TABLES):
            table = f"public.{_name(i)}"
            key = SHAPES[i % len(SHAPES)][2]
            expected = source_rows(dsn, table, key)
            got = normalized(rebuilt.get(table, {}))
            if key:
                assert got == expected, table
            else:  # a multiset: same rows, same number of copies
                assert sorted(map(repr, got.values())) == sorted(map(repr, expected.values())), (
                    table
                )


#: Four tables of every identity kind: what makes a table's batch different is its kind, its
#: truncates and schema change, all present four times. How the job's time grows with the
#: number of tables is measured, not asserted: bench/spark_apply_bench.py --tables 60.
DELTA_TABLES = 24


# make test: the same tables rebuilt from their topics (test_many_tables_every_table_...), Delta
# equal to the source for several tables per batch (test_spark_hostile.py, test_delta_e2e.py).
@pytest.mark.long
def test_many_tables_delta_tables_equal_source(
    local_stack: StackInfo, spark: Any, tmp_path: Path
) -> None:
    # The apply job on a database of dozens of tables (every identity kind, truncates, a key
    # change, a schema change): every Delta table equals its source table.
    prefix = f"manyd{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            _create(conn, DELTA_TABLES)
        bridge = RunningBridge(bridge_config(local_stack, dsn, prefix))
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                _workload(conn, DELTA_TABLES)
            bridge.wait_confirmed(mark(dsn), timeout=300)
        finally:
            bridge.stop()
        config = apply_config(local_stack, prefix, tmp_path)
        run_apply(config, spark=spark)
        dead = Path(config.dead_letter_location)
        assert not dead.exists() or spark.read.format("delta").load(str(dead)).count() == 0
        keys = {f"public.{_name(i)}": SHAPES[i % len(SHAPES)][2] for i in range(DELTA_TABLES)}
        assert_delta_equals_source(spark, config, dsn, keys)
