"""The hostile schema through the whole product: PostgreSQL -> `pgbridge run` -> Kafka -> the
Spark apply job -> Delta tables equal to the source.

The database is tests/integration/test_hostile_schema.py's (every replica identity kind, a
zero-column table, duplicate rows without a key, hostile names, partitions, generated columns,
enums, composites, domains, arrays, extreme values), plus a table of unconstrained numerics;
the tails of two keyless tables' topics are sent again, as a producer restarting after a crash
does.
What users rely on: every table gets its Delta table whatever its name, with PostgreSQL's column
names; tables without a key keep their duplicate rows; unconstrained numerics are Delta
decimals; nothing halts the job, and the only records set aside are the documented ones
(numeric values a ``decimal(38,18)`` cannot hold exactly, applied as null).

Compared value by value: every table of integers and text. ``kinds`` and ``extremes`` (enums,
composites, jsonb, infinities) are checked for presence, names and row counts only; their
values are the type mappings' business (tests/integration/test_type_zoo.py).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bridge.devstack.stack import StackInfo
from bridge.spark.config import ApplyConfig
from bridge.spark.job import run_apply
from tests.integration.bridge_harness import RunningBridge, bridge_config, mark, scratch_database
from tests.integration.test_delta_e2e import apply_config
from tests.integration.test_hostile_schema import SCHEMA, raw_messages, workload

pytestmark = pytest.mark.integration

NUMS = """
CREATE TABLE nums (id int PRIMARY KEY, n numeric, na numeric[]);
"""
FITTING = {
    1: "1.5",
    2: "-2.25",
    3: "12345678901234567890.123456789012345678",
    4: "-0.000000000000000001",
    5: "0",
}
NOT_FITTING = {6: "1e100", 7: "0.1234567890123456789"}

#: (schema, table) as PostgreSQL names them -> how to select it.
TABLES = {
    ("Weird Schema", "Mixed.Case-Table"): '"Weird Schema"."Mixed.Case-Table"',
    ("public", "logs"): "public.logs",
    ("public", "nothing_t"): "public.nothing_t",
    ("public", "empty_t"): "public.empty_t",
    ("public", "full_dups"): "public.full_dups",
    ("public", "full_keyed"): "public.full_keyed",
    ("public", "by_index"): "public.by_index",
    ("public", "measurements"): "public.measurements",
    ("public", "gen"): "public.gen",
}
COUNTED_ONLY = {("public", "kinds"): "public.kinds", ("public", "extremes"): "public.extremes"}


@pytest.fixture(scope="module")
def applied(
    local_stack: StackInfo, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, ApplyConfig]]:
    """(dsn, config) once the workload went through `pgbridge run` and the apply job."""
    prefix = f"shostile{uuid.uuid4().hex[:8]}"
    work = tmp_path_factory.mktemp("spark-hostile")
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SCHEMA + NUMS)
        bridge = RunningBridge(
            bridge_config(
                local_stack, dsn, prefix, **{"message.key.columns": "public.full_keyed:id"}
            )
        )
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                workload(conn)
                values = {**FITTING, **NOT_FITTING}
                for id_, text in values.items():
                    conn.execute(
                        "INSERT INTO nums VALUES (%s, %s::numeric, ARRAY[%s::numeric, NULL])",
                        (id_, text, text),
                    )
                conn.execute("INSERT INTO nums VALUES (8, 'NaN', NULL)")
                conn.execute("UPDATE nums SET n = n * 2 WHERE id = 1")
            bridge.wait_confirmed(mark(dsn))
        finally:
            bridge.stop()
        # What an at-least-once producer does after a crash: the tail of a keyless table's
        # topic sent again (same records, same partition). It must not count twice in Delta.
        _resend_tail(local_stack, f"{prefix}.public.full_dups", 4)
        _resend_tail(local_stack, f"{prefix}.public.logs", 3)
        config = apply_config(local_stack, prefix, work)
        run_apply(config, spark=spark)
        yield dsn, config


def _resend_tail(stack: StackInfo, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    values = [v for v in raw_messages(stack, topic) if v is not None]
    assert len(values) >= count, topic
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "acks": "all"})
    for value in values[-count:]:
        producer.produce(topic, value=value, key=None, partition=0)
    assert producer.flush(30) == 0


def _source(dsn: str, table: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {table}")
        names = [d.name for d in cur.description or []]
        return names, cur.fetchall()


def _delta(spark: Any, config: ApplyConfig, schema: str, table: str) -> Any:
    path = config.table_path(schema, table)
    assert Path(path, "_delta_log").is_dir(), f"no Delta table for {schema}.{table} at {path}"
    return spark.read.format("delta").load(path)


def _data_columns(df: Any) -> list[str]:
    return [c for c in df.columns if not c.startswith("_pgbridge_")]


def test_spark_hostile_every_table_equals_source_with_original_names(
    applied: tuple[str, ApplyConfig], spark: Any
) -> None:
    dsn, config = applied
    for (schema, table), selector in TABLES.items():
        names, rows = _source(dsn, selector)
        df = _delta(spark, config, schema, table)
        # PostgreSQL's names, in PostgreSQL's order (generated columns included on 18).
        assert _data_columns(df) == names, f"{selector}: {_data_columns(df)} != {names}"
        got = Counter(
            tuple(r) for r in df.select(*[f"`{n.replace('`', '``')}`" for n in names]).collect()
        )
        assert got == Counter(rows), f"{selector}: {got} != {Counter(rows)}"
    # Duplicates survived: two identical log lines, two empty rows, and of two (1,'x') and
    # two (2,NULL) rows one each, beside the updated (2,'set').
    assert _delta(spark, config, "public", "logs").count() == 3
    assert _delta(spark, config, "public", "empty_t").count() == 2
    for (schema, table), selector in COUNTED_ONLY.items():
        # Names and counts only (psycopg cannot even hold some of these values in Python).
        names, _ = _source(dsn, f"{selector} LIMIT 0")
        (count,) = _source(dsn, f"(SELECT count(*) FROM {selector}) AS c")[1][0]
        df = _delta(spark, config, schema, table)
        assert _data_columns(df) == names
        assert df.count() == count, selector


def test_spark_hostile_unconstrained_numeric_is_a_decimal(
    applied: tuple[str, ApplyConfig], spark: Any
) -> None:
    _, config = applied
    df = _delta(spark, config, "public", "nums")
    assert (dict(df.dtypes)["n"], dict(df.dtypes)["na"]) == (
        "decimal(38,18)",
        "array<decimal(38,18)>",
    )
    got = {r["id"]: (r["n"], r["na"]) for r in df.collect()}
    expected = {i: Decimal(v) for i, v in FITTING.items()}
    expected[1] = Decimal("3.0")  # updated to n * 2
    for id_, value in expected.items():
        assert got[id_][0] == value, id_
    assert got[3][1] == [Decimal(FITTING[3]), None]
    # Documented: NaN is null (precise mode); values beyond decimal(38,18) are null in the
    # table and their records are in the dead-letter table, naming the columns.
    assert got[8] == (None, None)
    for id_ in NOT_FITTING:
        assert got[id_] == (None, [None, None])


def test_spark_hostile_only_documented_records_are_set_aside(
    applied: tuple[str, ApplyConfig], spark: Any
) -> None:
    _, config = applied
    dead = spark.read.format("delta").load(config.dead_letter_location).collect()
    reasons = Counter((r["topic"].rsplit(".", 1)[-1], r["reason"]) for r in dead)
    unfit = "value does not fit decimal(38,18); applied as null in column(s) "
    assert reasons == Counter(
        {
            ("nums", unfit + "n, na"): len(NOT_FITTING),
            # extremes: -1e-100 and 1e100 in the unconstrained column n.
            ("extremes", unfit + "n"): 2,
        }
    ), reasons
