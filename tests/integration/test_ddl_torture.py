"""DDL mid-stream, as migrations make it, never stops the capture (#33), on the stack's
PostgreSQL (18) and on PostgreSQL 13, with the default settings.

Between changes of every kind: an enum gains a value, a domain a constraint, columns are
added (with constant defaults too, which a later rewrite of the table takes away from the
catalog), renamed, dropped, widened, made NOT NULL and nullable again, changed to a type the
registry's BACKWARD level refuses; a replica identity moves to another unique index and back;
a partitioned table gains partitions (attached and created); a table is created mid-stream and
altered; hostile names are renamed. The bridge runs throughout and must never stop (stop()
raises whatever stopped it). Then each row is touched once more, so its
last change event is written with its table's newest schema, and an independent consumer's
rebuild from Kafka equals every table, with hostile names, domains and enums.

The Spark job applies the same topics to Delta, which must equal the source table by table
(columns, types, values): in make test once at the end, on PostgreSQL 18 (one batch that holds
every schema version); in make test-long after every step, on both majors.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from typing import Any

import psycopg
import pytest

from bridge.devstack.stack import StackInfo
from bridge.runner import prepare_signal_table
from bridge.schema import avro_name
from bridge.schema_versions import column_changes
from bridge.sink.registry import registry_client
from bridge.spark.job import run_apply
from tests.integration.bridge_harness import (
    RunningBridge,
    bridge_config,
    mark,
    normalized,
    postgres,
    read_topic,
    rebuild_tables,
    scratch_database,
    source_rows,
)
from tests.integration.test_delta_e2e import apply_config, comparable

pytestmark = pytest.mark.integration

SETUP = """
CREATE TYPE mood AS ENUM ('sad', 'ok');
CREATE DOMAIN amount AS numeric(12,3);
CREATE DOMAIN label AS text;
CREATE TABLE items (id int PRIMARY KEY, m mood, a amount, l label, note text, n int);
CREATE TABLE pairs (id int PRIMARY KEY, u int NOT NULL, v text);
CREATE UNIQUE INDEX pairs_u ON pairs (u);
CREATE TABLE meas (id int, region text, v int, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE meas_eu PARTITION OF meas FOR VALUES IN ('eu');
CREATE TABLE "Odd ""Name"" x" ("Key" int PRIMARY KEY, "väl ue" text);
"""

# The first rows, written once the bridge streams (its pipeline here has no initial snapshot).
SEED = """
INSERT INTO items SELECT g, 'ok', g * 1.125, 'l' || g, 'n' || g, g FROM generate_series(1, 20) g;
INSERT INTO pairs SELECT g, 1000 + g, 'p' || g FROM generate_series(1, 10) g;
INSERT INTO meas SELECT g, 'eu', g FROM generate_series(1, 10) g;
INSERT INTO "Odd ""Name"" x" VALUES (1, 'x'), (2, NULL);
"""

# Each step: DDL with the changes that follow it, as a migration and its traffic would.
STEPS = [
    # Enums and domains: values and constraints change, the columns' types do not.
    """ALTER TYPE mood ADD VALUE 'glad';
    INSERT INTO items VALUES (21, 'glad', 21.5, 'l21', 'n21', 21);
    ALTER DOMAIN label ADD CONSTRAINT nonempty CHECK (VALUE <> '');
    UPDATE items SET m = 'glad', a = a * 2 WHERE id <= 3;""",
    # Columns: added, NOT NULL, renamed, widened, nullable again, dropped.
    """ALTER TABLE items ADD COLUMN extra text;
    INSERT INTO items VALUES (22, 'sad', 0.001, 'l22', 'n22', 22, 'e22');
    ALTER TABLE items ALTER COLUMN note SET NOT NULL;
    UPDATE items SET extra = 'e' || id WHERE id BETWEEN 4 AND 6;
    ALTER TABLE items RENAME COLUMN note TO remark;
    UPDATE items SET remark = 'renamed ' || id WHERE id IN (7, 8);
    ALTER TABLE items ALTER COLUMN n TYPE bigint;
    INSERT INTO items VALUES (23, 'ok', 23, 'l23', 'r23', 9000000000, NULL);
    ALTER TABLE items ALTER COLUMN remark DROP NOT NULL;
    INSERT INTO items VALUES (24, NULL, NULL, NULL, NULL, NULL, NULL);
    ALTER TABLE items DROP COLUMN l;
    DELETE FROM items WHERE id IN (9, 10);""",
    # Replica identity: another unique index, then the primary key again.
    """ALTER TABLE pairs REPLICA IDENTITY USING INDEX pairs_u;
    UPDATE pairs SET v = 'by u' WHERE id <= 3;
    DELETE FROM pairs WHERE id = 4;
    ALTER TABLE pairs REPLICA IDENTITY DEFAULT;
    UPDATE pairs SET v = 'by id' WHERE id = 5;""",
    # Partitions: one attached (created apart, empty), one created in place.
    """CREATE TABLE meas_us (id int NOT NULL, region text NOT NULL, v int);
    ALTER TABLE meas ATTACH PARTITION meas_us FOR VALUES IN ('us');
    INSERT INTO meas SELECT g, 'us', g FROM generate_series(1, 5) g;
    CREATE TABLE meas_apac PARTITION OF meas FOR VALUES IN ('apac');
    INSERT INTO meas SELECT g, 'apac', g FROM generate_series(1, 5) g;
    UPDATE meas SET v = v + 100 WHERE id = 1;
    DELETE FROM meas WHERE id = 2 AND region = 'eu';""",
    # A partition with rows attached, one detached: pgoutput sends none of their rows; the
    # bridge copies the first's into meas's topic and deletes the second's from it.
    """CREATE TABLE meas_sa (id int NOT NULL, region text NOT NULL, v int);
    INSERT INTO meas_sa SELECT g, 'sa', g * 3 FROM generate_series(1, 4) g;
    ALTER TABLE meas ATTACH PARTITION meas_sa FOR VALUES IN ('sa');
    ALTER TABLE meas DETACH PARTITION meas_us;""",
    # A table created mid-stream, altered at once; hostile names renamed.
    """CREATE TABLE late (id int PRIMARY KEY, v text);
    INSERT INTO late SELECT g, 'v' || g FROM generate_series(1, 5) g;
    ALTER TABLE late ADD COLUMN w int DEFAULT 7, ADD COLUMN z numeric(6,2) DEFAULT 1.25;
    UPDATE late SET w = id * 10 WHERE id <= 2;
    ALTER TABLE "Odd ""Name"" x" RENAME COLUMN "väl ue" TO "new Väl ue";
    INSERT INTO "Odd ""Name"" x" VALUES (3, 'y');""",
    # Type changes the registry's BACKWARD level refuses: registered anyway, capture goes on.
    """ALTER TABLE late ALTER COLUMN v TYPE integer USING length(v);
    INSERT INTO late VALUES (6, 66, 60, NULL);
    ALTER TABLE items ALTER COLUMN m TYPE text;
    UPDATE items SET m = 'free text' WHERE id = 11;""",
]

# Touch every row once more: each row's last event carries its table's newest schema.
TOUCH = """UPDATE items SET id = id;
UPDATE pairs SET v = v;
UPDATE meas SET v = v WHERE region <> 'sa';
UPDATE late SET v = v;
UPDATE "Odd ""Name"" x" SET "Key" = "Key";"""

# Rebuilt name -> (SQL name, key columns). Not pairs: a consumer keyed by the Kafka key cannot
# follow a replica identity change (the key of a row changes with it), here as with Debezium;
# what pairs shows is that its key follows the identity.
TABLES = {
    "public.items": ("items", ("id",)),
    "public.meas": ("meas", ("id", "region")),
    "public.late": ("late", ("id",)),
    'public.Odd "Name" x': ('"Odd ""Name"" x"', ("Key",)),
}


#: Delta's tables by the source's SQL name -> (schema, table) and key (pairs by its primary key,
#: which the Delta table keeps whatever the replica identity).
DELTA_TABLES = {
    **{sql: ("public", sql, key) for sql, key in (("items", ("id",)), ("meas", ("id", "region")),
                                                  ("pairs", ("id",)), ("late", ("id",)))},
    '"Odd ""Name"" x"': ("public", 'Odd "Name" x', ("Key",)),
}  # fmt: skip
#: Columns Delta keeps after PostgreSQL dropped them (DROP COLUMN keeps them by default).
KEPT_IN_DELTA = {"items": {"l"}}
#: After ALTER ... TYPE ... USING, Delta holds the old values cast (try_cast), not what USING
#: computed, until the rows change (the TOUCH step) or an incremental snapshot reads them.
#: Steps that attach (False) or detach (True) partitions holding rows: the bridge copies or
#: deletes their rows (a partition created empty is copied too: nothing to send).
PARTITION_STEPS = {
    3: {("public.meas_us", False), ("public.meas_apac", False)},
    4: {("public.meas_sa", False), ("public.meas_us", True)},
}
USING_STEP = 6
RECOMPUTED = {"late": {"v"}}


def _assert_delta_equals_source(
    spark: Any, config: Any, dsn: str, differ: dict[str, set[str]]
) -> None:
    with psycopg.connect(dsn) as conn:
        for sql, (schema, table, key) in DELTA_TABLES.items():
            if conn.execute("SELECT to_regclass(%s) IS NULL", [sql]).fetchone() == (True,):
                continue  # created by a later step
            cur = conn.cursor(row_factory=psycopg.rows.dict_row)
            source = cur.execute(f"SELECT * FROM {sql}").fetchall()
            delta = spark.read.format("delta").load(config.table_path(schema, table))
            columns = [d.name for d in cur.description or []]
            extra = {c for c in delta.columns if not c.startswith("_pgbridge_")} - set(columns)
            kept = KEPT_IN_DELTA.get(sql, set()) - set(columns)  # once PostgreSQL dropped them
            assert extra == kept, f"{sql}: Delta's columns {extra}"
            compared = [c for c in columns if c not in differ.get(sql, set())]
            got = _by_key([r.asDict() for r in delta.collect()], key, compared)
            assert got == _by_key(source, key, compared), sql


def _wait_partitions_applied(
    bridge: RunningBridge, dsn: str, wanted: set[tuple[str, bool]]
) -> None:
    """Until the attached partitions' rows are copied and the detached ones' deleted, in
    Kafka (the watch looks every 300 ms; each is a chunk between two watermarks). A partition
    attached and detached again between two looks is never seen (docs/wire-format.md): the
    steps wait for the look."""
    incremental = bridge.pipeline.incremental
    assert incremental is not None
    deadline = time.monotonic() + 60
    while True:
        tasks = [t for t in incremental.state.tables if t.partition is not None]
        kinds = {(t.partition, t.detached) for t in tasks}
        if wanted <= kinds and all(t.status == "done" for t in tasks):
            break
        assert time.monotonic() < deadline, kinds
        time.sleep(0.2)
    bridge.wait_confirmed(mark(dsn))


def _by_key(rows: list[dict[str, Any]], key: tuple[str, ...], columns: list[str]) -> Any:
    return {tuple(r[k] for k in key): {c: comparable(r[c]) for c in columns} for r in rows}


def _run(conn: psycopg.Connection[Any], script: str) -> None:
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


@pytest.mark.parametrize(
    ("version", "delta_each_step"),
    [
        ("stack", False),
        ("13", False),
        pytest.param("stack", True, marks=pytest.mark.long),
        pytest.param("13", True, marks=pytest.mark.long),
    ],
)
def test_ddl_mid_stream_never_stops_the_capture_and_kafka_and_delta_equal_the_source(
    local_stack: StackInfo, spark: Any, tmp_path: Any, version: str, delta_each_step: bool
) -> None:
    prefix = f"tort{uuid.uuid4().hex[:8]}"
    with postgres(local_stack, version) as server, scratch_database(server) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            _run(conn, SETUP)
        # The defaults, but for how often partitions are looked at (10 s), and on 13 (whose
        # pgoutput carries no logical messages) the signal table incremental snapshots need.
        settings = {"publication.refresh.interval.ms": "300"}
        if version == "13":
            settings["signal.data.collection"] = "public.pgbridge_signal"
        config = bridge_config(server, dsn, prefix, **settings)
        prepare_signal_table(config)  # as pgbridge run does
        bridge = RunningBridge(config)
        apply = apply_config(server, prefix, tmp_path)

        def delta_equals_source(differ: dict[str, set[str]]) -> None:
            run_apply(apply, spark=spark)
            _assert_delta_equals_source(spark, apply, dsn, differ)

        try:
            bridge.wait_confirmed(mark(dsn))  # streaming
            with psycopg.connect(dsn, autocommit=True) as conn:
                _run(conn, SEED)
            for number, step in enumerate(STEPS):
                with psycopg.connect(dsn, autocommit=True) as conn:
                    _run(conn, step)
                bridge.wait_confirmed(mark(dsn))
                if number in PARTITION_STEPS:
                    _wait_partitions_applied(bridge, dsn, PARTITION_STEPS[number])
                if delta_each_step:
                    delta_equals_source(RECOMPUTED if number >= USING_STEP else {})
            with psycopg.connect(dsn, autocommit=True) as conn:
                _run(conn, TOUCH)
            bridge.wait_confirmed(mark(dsn))
        finally:
            bridge.stop()  # raises what stopped the pipeline, if anything did
        if delta_each_step or version == "stack":
            delta_equals_source({})

        rebuilt = rebuild_tables(server.bootstrap_servers, server.registry_url, prefix)
        for name, (table, key) in TABLES.items():
            source = {  # under their Avro names, as the events carry them
                k: {avro_name(c): v for c, v in row.items()}
                for k, row in source_rows(dsn, table, key).items()
            }
            assert normalized(rebuilt[name]) == source, name

        # One subject version per real change: each version changes a column (added, removed,
        # its type, nullability, enum labels), never only how the same columns are written.
        client = registry_client(server.registry_url)
        compared = 0
        for subject in (
            f"{prefix}.public.{table}-{part}"
            for table in ("items", "pairs", "meas", "late")
            for part in ("key", "value")
        ):
            schemas = [
                json.loads(client.get_version(subject, v).schema.schema_str or "{}")
                for v in client.get_versions(subject)
            ]
            for number, (old, new) in enumerate(itertools.pairwise(schemas), start=2):
                assert column_changes(old, new), f"{subject} version {number}: no change"
                compared += 1
        assert compared >= 8, compared  # the steps made that many versions at least

        # The key follows the replica identity: the primary key, the unique index, the key.
        pairs = read_topic(server.bootstrap_servers, server.registry_url, f"{prefix}.public.pairs")
        keys = [tuple(k) for k, v in pairs if v is not None]
        firsts = [keys[0], *(b for a, b in itertools.pairwise(keys) if a != b)]
        assert firsts == [("id",), ("u",), ("id",)], keys
