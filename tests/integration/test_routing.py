"""Tables routed into one topic (Debezium's ByLogicalTableRouter, #35): two shards whose ids
overlap stream into ``<prefix>.public.customers_all`` keyed by (id, the shard's table), an
unrouted table keeps its own topic, and the Spark job applies the shared topic to one Delta
table, keyed the same way, equal to the union of the shards."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bridge.devstack.stack import StackInfo
from bridge.routing import DEFAULT_KEY_FIELD
from bridge.sink.registry import registry_client
from bridge.spark.job import run_apply
from tests.integration.bridge_harness import (
    RunningBridge,
    bridge_config,
    mark,
    read_topic,
    scratch_database,
)
from tests.integration.test_delta_e2e import apply_config, comparable

pytestmark = pytest.mark.integration

WORKLOAD = """
INSERT INTO customers_shard1 SELECT g, 'one ' || g, g * 1.5 FROM generate_series(1, 30) g;
INSERT INTO customers_shard2 SELECT g, 'two ' || g, g * 2.5 FROM generate_series(1, 20) g;
INSERT INTO orders SELECT g, g % 7 FROM generate_series(1, 10) g;
UPDATE customers_shard1 SET name = 'renamed' WHERE id IN (3, 4);
UPDATE customers_shard2 SET balance = 0 WHERE id = 3;
DELETE FROM customers_shard2 WHERE id IN (5, 6);
UPDATE customers_shard1 SET id = 100 WHERE id = 7;
DELETE FROM customers_shard1 WHERE id = 8
"""


def _union(dsn: str, prefix: str) -> dict[tuple[int, str], dict[str, Any]]:
    """The shards' rows by (id, the key field's value: the shard's own topic)."""
    rows: dict[tuple[int, str], dict[str, Any]] = {}
    with psycopg.connect(dsn) as conn:
        for shard in ("customers_shard1", "customers_shard2"):
            for id_, name, balance in conn.execute(f"SELECT id, name, balance FROM {shard}"):
                own = f"{prefix}.public.{shard}"
                rows[(id_, own)] = {"id": id_, "name": name, "balance": balance}
    return rows


def test_sharded_tables_share_a_topic_with_unique_keys_and_one_delta_table(
    local_stack: StackInfo, spark: Any, tmp_path: Path
) -> None:
    prefix = f"route{uuid.uuid4().hex[:8]}"
    routed = f"{prefix}.public.customers_all"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for shard in ("customers_shard1", "customers_shard2"):
                conn.execute(
                    f"CREATE TABLE {shard} (id int PRIMARY KEY, name text, balance numeric(10,2))"
                )
            conn.execute("CREATE TABLE orders (id int PRIMARY KEY, customer int)")
        config = bridge_config(
            local_stack,
            dsn,
            prefix,
            **{"topic.regex": r"(.*)\.customers_shard\d+", "topic.replacement": "$1.customers_all"},
        )
        bridge = RunningBridge(config)
        try:
            bridge.wait_confirmed(mark(dsn))  # streaming
            with psycopg.connect(dsn, autocommit=True) as conn:
                for statement in WORKLOAD.split(";"):
                    conn.execute(statement)
            bridge.wait_confirmed(mark(dsn))
        finally:
            bridge.stop()
        expected = _union(dsn, prefix)

    # Kafka: one topic for both shards, every key naming its shard; rebuilt, their union.
    records = read_topic(local_stack.bootstrap_servers, local_stack.registry_url, routed)
    rebuilt: dict[tuple[int, str], dict[str, Any]] = {}
    for key, value in records:
        identity = (key["id"], key[DEFAULT_KEY_FIELD])
        if value is None or value["op"] == "d":
            rebuilt.pop(identity, None)
        else:
            rebuilt[identity] = value["after"]
    assert {k[1] for k in rebuilt} == {f"{prefix}.public.customers_shard{n}" for n in (1, 2)}
    assert rebuilt == expected  # the overlapping ids 1..20 kept apart by the key field
    assert {value["source"]["table"] for _, value in records if value} == {
        "customers_shard1",
        "customers_shard2",
    }
    client = registry_client(local_stack.registry_url)
    key_schema = client.get_latest_version(f"{routed}-key").schema.schema_str or ""
    assert f'"{DEFAULT_KEY_FIELD}"' in key_schema and f'"{routed}.Key"' in key_schema
    orders = read_topic(
        local_stack.bootstrap_servers, local_stack.registry_url, f"{prefix}.public.orders"
    )
    assert len(orders) == 10 and all(DEFAULT_KEY_FIELD not in k for k, _ in orders)

    # Delta: one table for the topic, keyed by (id, the key field), equal to the union.
    apply = apply_config(local_stack, prefix, tmp_path)
    run_apply(apply, spark=spark)
    delta = spark.read.format("delta").load(apply.table_path("public", "customers_all"))
    got = {
        (row["id"], row[DEFAULT_KEY_FIELD]): {
            c: comparable(row[c]) for c in ("id", "name", "balance")
        }
        for row in delta.collect()
    }
    assert got == {k: {c: comparable(v) for c, v in row.items()} for k, row in expected.items()}
    assert delta.count() == len(expected)
