"""Schema changes under the default settings: PostgreSQL has made them, the capture follows.

The case of issue #33: a table with a column of a domain over ``numeric(12,3)``, copied by the
initial snapshot, then an ordinary ``ADD COLUMN``. The domain was once mapped as text by the
snapshot and as a variable-scale decimal by the stream, so the ``ALTER`` registered a "type
changed" version the subject's BACKWARD level refused, and the whole capture stopped. Now the
column maps the same on both paths (a decimal of scale 3, the domain's modifier), and a change
the registry does refuse (a column's type changed) is registered anyway by default.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import psycopg
import pytest

from bridge.devstack.stack import StackInfo
from bridge.sink.registry import registry_client
from tests.integration.bridge_harness import (
    RunningBridge,
    bridge_config,
    mark,
    normalize,
    normalized,
    rebuild_tables,
    scratch_database,
)

pytestmark = pytest.mark.integration


def _field_types(stack: StackInfo, subject: str, version: int) -> dict[str, Any]:
    client = registry_client(stack.registry_url)
    schema = client.get_version(subject, version).schema
    value = json.loads(schema.schema_str)["fields"][0]["type"][1]
    return {f["name"]: f["type"] for f in value["fields"]}


@pytest.mark.pure_python_slice  # also run with PGBRIDGE_NATIVE=0 (make test)
def test_schema_changes_domain_column_then_alters_never_stop_the_capture(
    local_stack: StackInfo,
) -> None:
    prefix = f"ddl{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE DOMAIN amount AS numeric(12,3)")
            conn.execute(
                "CREATE TABLE zoo (id integer PRIMARY KEY, dom amount, doms amount[], note text)"
            )
            conn.execute("INSERT INTO zoo VALUES (1, 1.5, '{2.25}', 'a'), (2, NULL, NULL, 'bb')")
        bridge = RunningBridge(bridge_config(local_stack, dsn, prefix))  # the defaults
        try:
            bridge.wait_confirmed(mark(dsn))  # the snapshot's rows and the stream after it
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("INSERT INTO zoo VALUES (3, 3.125, '{1}', 'ccc')")
                conn.execute("ALTER TABLE zoo ADD COLUMN added_later text")
                conn.execute("INSERT INTO zoo VALUES (4, 4, '{}', 'dddd', 'x')")
                conn.execute("UPDATE zoo SET added_later = 'y', dom = 7.5 WHERE id = 1")
            bridge.wait_confirmed(mark(dsn))
            with psycopg.connect(dsn, autocommit=True) as conn:
                # Refused by BACKWARD (string -> int): registered anyway, the capture goes on.
                conn.execute("ALTER TABLE zoo ALTER COLUMN note TYPE integer USING length(note)")
                conn.execute("INSERT INTO zoo VALUES (5, 5, NULL, 5, 'z')")
                conn.execute("DELETE FROM zoo WHERE id = 2")
            bridge.wait_confirmed(mark(dsn))
        finally:
            bridge.stop()  # raises what stopped the pipeline, if anything did

        subject = f"{prefix}.public.zoo-value"
        client = registry_client(local_stack.registry_url)
        # One version per real change: the table, the added column, the changed type.
        assert client.get_versions(subject) == [1, 2, 3]
        first, last = _field_types(local_stack, subject, 1), _field_types(local_stack, subject, 3)
        decimal = first["dom"][1]
        assert decimal["logicalType"] == "decimal" and decimal["scale"] == 3
        assert last["dom"] == first["dom"] and last["doms"] == first["doms"]
        assert last["note"] == ["null", "int"]

        # The independent consumer's rebuild equals the table, but for what no change event
        # carries: ALTER COLUMN ... TYPE rewrote note in rows it did not send again.
        rebuilt = normalized(
            rebuild_tables(local_stack.bootstrap_servers, local_stack.registry_url, prefix)[
                "public.zoo"
            ]
        )
        with psycopg.connect(dsn) as conn:
            source = {
                (row[0],): row
                for row in conn.execute(
                    "SELECT id, dom, doms::numeric[], note, added_later FROM zoo"
                ).fetchall()
            }
        assert rebuilt.keys() == source.keys() == {(1,), (3,), (4,), (5,)}
        for key, (_, dom, doms, _note, added_later) in source.items():
            row = rebuilt[key]
            assert (row["dom"], row["doms"], row.get("added_later")) == (
                normalize(dom),
                doms if doms is None else [normalize(d) for d in doms],
                added_later,
            ), key
        assert rebuilt[(5,)]["note"] == 5


def test_schema_changes_renamed_columns_are_compatible_and_read_under_their_new_names(
    local_stack: StackInfo,
) -> None:
    prefix = f"ren{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE ren (id integer PRIMARY KEY, vc text, n integer)")
            conn.execute("INSERT INTO ren VALUES (1, 'a', 1), (2, 'b', 2)")  # not streamed
        # Debezium's behaviour on refusals: a rename the registry refused would stop the run.
        # No re-copy of the table when n is dropped and added again (the default would copy it,
        # test_incremental_snapshot covers that): here the records the stream wrote are read.
        config = bridge_config(
            local_stack,
            dsn,
            prefix,
            **{
                "schema.incompatible.change.handling.mode": "fail",
                "snapshot.rewritten.tables": "off",
            },
        )
        bridge = RunningBridge(config)
        try:
            bridge.wait_confirmed(mark(dsn))
            # Each step is decoded before the next DDL (the numbers are read from the catalog,
            # which must still describe the table as the Relation message does).
            steps = [
                ["INSERT INTO ren VALUES (3, 'c', 3)"],
                [
                    "ALTER TABLE ren RENAME COLUMN vc TO vc_renamed",
                    "INSERT INTO ren VALUES (4, 'd', 4)",
                    "UPDATE ren SET vc_renamed = 'b2' WHERE id = 2",
                ],
                [
                    "ALTER TABLE ren RENAME COLUMN id TO item_id",  # the key
                    "INSERT INTO ren VALUES (5, 'e', 5)",
                ],
                [  # dropped and added under the same name: a new column, no rename
                    "ALTER TABLE ren DROP COLUMN n",
                    "ALTER TABLE ren ADD COLUMN n bigint",
                    "INSERT INTO ren VALUES (6, 'f', 6)",
                ],
                [  # added with defaults: older rows hold them (attmissingval)
                    "ALTER TABLE ren ADD COLUMN tier text DEFAULT 'basic, \"plus\"', "
                    "ADD COLUMN since date DEFAULT '2020-02-29', ADD COLUMN plain int",
                    "INSERT INTO ren VALUES (7, 'g', 7, NULL, NULL, 1)",
                ],
            ]
            for step in steps:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    for statement in step:
                        conn.execute(statement)
                bridge.wait_confirmed(mark(dsn))
        finally:
            bridge.stop()  # raises IncompatibleSchemaError had any version been refused

    topic = f"{prefix}.public.ren"
    client = registry_client(local_stack.registry_url)
    versions = {
        v: [
            (f["name"], f.get("aliases"), f.get("pgbridge.attnum"))
            for f in json.loads(client.get_version(f"{topic}-value", v).schema.schema_str)[
                "fields"
            ][0]["type"][1]["fields"]
        ]
        for v in client.get_versions(f"{topic}-value")
    }
    assert list(versions) == [1, 2, 3, 4, 5], versions
    assert client.get_versions(f"{topic}-key") == [1, 2]
    latest = client.get_latest_version(f"{topic}-value").schema.schema_str
    fields = {f["name"]: f for f in json.loads(latest)["fields"][0]["type"][1]["fields"]}
    assert fields["vc_renamed"]["aliases"] == ["vc"]
    assert fields["vc_renamed"]["pgbridge.renamed_from"] == ["vc"]
    assert fields["item_id"]["aliases"] == ["id"]
    assert "aliases" not in fields["n"]
    assert [fields[name]["pgbridge.attnum"] for name in ("item_id", "vc_renamed", "n")] == [1, 2, 4]
    assert fields["tier"]["type"] == ["string", "null"]
    assert fields["tier"]["default"] == 'basic, "plus"'
    assert fields["tier"]["pgbridge.missing"] == 'basic, "plus"'
    assert fields["since"]["pgbridge.missing"] == "2020-02-29"
    assert fields["plain"]["type"] == ["null", "int"] and "pgbridge.missing" not in fields["plain"]

    # A consumer reading every record with the newest schema (Avro schema resolution, as
    # Confluent's deserializer does with a reader schema) gets old records' values under the
    # new names (n: Avro resolves by name, so records written before the drop give their n),
    # and the columns added with a default hold it in records written before they existed.
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from bridge.sink.registry import DESERIALIZER_CONF
    from tests.integration.bridge_harness import raw_records

    reader = AvroDeserializer(client, schema_str=latest, conf=DESERIALIZER_CONF)
    context = SerializationContext(topic, MessageField.VALUE)
    rows: dict[int, dict[str, Any]] = {}
    for _key, value in raw_records(local_stack.bootstrap_servers, topic):
        envelope = reader(value, context)
        if envelope is not None and envelope["after"] is not None:
            rows[envelope["after"]["item_id"]] = envelope["after"]
    assert {k: (r["vc_renamed"], r["n"]) for k, r in rows.items()} == {
        2: ("b2", 2),
        3: ("c", 3),
        4: ("d", 4),
        5: ("e", 5),
        6: ("f", 6),
        7: ("g", 7),
    }
    leap_day = dt.date(2020, 2, 29)

    def day(value: Any) -> Any:  # fastavro hands a default back without its logical type
        return dt.date(1970, 1, 1) + dt.timedelta(days=value) if isinstance(value, int) else value

    assert {k: (r["tier"], day(r["since"]), r["plain"]) for k, r in rows.items()} == {
        **{k: ('basic, "plus"', leap_day, None) for k in range(2, 7)},
        7: (None, None, 1),
    }
