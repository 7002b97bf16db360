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
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import psycopg
import pytest

from bridge.devstack.stack import StackInfo
from bridge.schema import avro_name
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
UPDATE meas SET v = v;
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


def _run(conn: psycopg.Connection[Any], script: str) -> None:
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


@pytest.mark.parametrize("version", ["stack", "13"])
def test_ddl_mid_stream_never_stops_the_capture_and_kafka_equals_the_source(
    local_stack: StackInfo, version: str
) -> None:
    prefix = f"tort{uuid.uuid4().hex[:8]}"
    with postgres(local_stack, version) as server, scratch_database(server) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            _run(conn, SETUP)
        bridge = RunningBridge(bridge_config(server, dsn, prefix))  # the defaults
        try:
            bridge.wait_confirmed(mark(dsn))  # the snapshot, and the stream after it
            for step in STEPS:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    _run(conn, step)
                bridge.wait_confirmed(mark(dsn))
            with psycopg.connect(dsn, autocommit=True) as conn:
                _run(conn, TOUCH)
            bridge.wait_confirmed(mark(dsn))
        finally:
            bridge.stop()  # raises what stopped the pipeline, if anything did

        rebuilt = rebuild_tables(server.bootstrap_servers, server.registry_url, prefix)
        for name, (table, key) in TABLES.items():
            source = {  # under their Avro names, as the events carry them
                k: {avro_name(c): v for c, v in row.items()}
                for k, row in source_rows(dsn, table, key).items()
            }
            assert normalized(rebuilt[name]) == source, name

        # The key follows the replica identity: the primary key, the unique index, the key.
        pairs = read_topic(server.bootstrap_servers, server.registry_url, f"{prefix}.public.pairs")
        keys = [tuple(k) for k, v in pairs if v is not None and v["op"] != "r"]
        firsts = [keys[0], *(b for a, b in itertools.pairwise(keys) if a != b)]
        assert firsts == [("u",), ("id",)], keys
