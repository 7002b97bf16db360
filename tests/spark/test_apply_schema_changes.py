"""Schema changes reaching Delta through the apply job's batches, on a real local Spark:
variable-scale decimals, columns differing in case, column mapping switched on for a new name,
types widened or changed, renamed, dropped and added-with-default columns, and a backfill
interrupted by a restart. The harness: tests/spark/batches.py."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from decimal import Decimal
from typing import Any

import pytest

from tests.spark.batches import (
    FULL_DUPS,
    OPT_INT,
    OPT_STR,
    PREFIX,
    VSD,
    Batches,
    _vsd,
    col,
)
from tests.spark.envelopes import TableVersion

pytestmark = pytest.mark.integration


def test_variable_scale_decimal_becomes_delta_decimal(batches: Batches, spark: Any) -> None:
    t = TableVersion(
        PREFIX,
        "public",
        "amounts",
        [
            col("id", "int"),
            col("n", ["null", VSD]),
            col(
                "na",
                [
                    "null",
                    {"type": "array", "items": ["null", "io.debezium.data.VariableScaleDecimal"]},
                ],
            ),
        ],
        key=["id"],
    )
    fits = [
        "1.5",
        "-2.25",
        "0",
        "-128",
        "-256",
        "255",
        "12345678901234567890.123456789012345678",  # 20 + 18 digits: the most decimal(38,18) holds
        "-0.000000000000000001",
        "1.50000000000000000000000",  # trailing zeros beyond the scale are not digits lost
    ]
    unfit = ["1e100", "0.1234567890123456789", "123456789012345678901"]
    for i, value in enumerate([*fits, *unfit]):
        batches.add(t, "c", (10, i), after={"id": i, "n": _vsd(value), "na": [_vsd(value), None]})
    batches.add(t, "c", (11, 0), after={"id": 100, "n": None, "na": None})  # NaN arrives as null
    batches.apply(0)
    df = spark.read.format("delta").load(batches.config.table_path("public", "amounts"))
    types = dict(df.dtypes)
    assert (types["n"], types["na"]) == ("decimal(38,18)", "array<decimal(38,18)>")
    got = {r["id"]: (r["n"], r["na"]) for r in df.collect()}
    for i, value in enumerate(fits):
        assert got[i] == (Decimal(value), [Decimal(value), None]), value
    for i in range(len(fits), len(fits) + len(unfit)):
        assert got[i] == (None, [None, None])
    assert got[100] == (None, None)
    # Values that do not fit are never rounded: null in the table, and the record (holding the
    # exact value) in the dead-letter table with the columns named.
    assert batches.dead() == [
        (t.topic, "value does not fit decimal(38,18); applied as null in column(s) n, na")
    ] * len(unfit)


def test_table_with_columns_differing_in_case_is_dead_lettered(batches: Batches) -> None:
    # Legal in PostgreSQL, refused by Spark and Delta (case-insensitive names).
    cased = TableVersion(
        PREFIX, "public", "cased", [col("id", "int"), col("A", OPT_INT), col("a", OPT_INT)],
        key=["id"],
    )  # fmt: skip
    batches.add(cased, "c", (10, 0), after={"id": 1, "A": 1, "a": 2})
    batches.add(FULL_DUPS, "c", (10, 1), after={"a": 1, "b": "ok"})
    batches.apply(0)
    assert batches.multiset("public", "full_dups") == Counter({(1, "ok"): 1})
    dead = batches.dead()
    assert len(dead) == 1 and dead[0][0] == cased.topic
    assert "'A' and 'a' differ only in case" in dead[0][1]


def test_table_created_without_column_mapping_is_switched_on_for_a_new_name(
    batches: Batches, spark: Any
) -> None:
    from pyspark.sql import types as T

    # A table an earlier pgbridge created (no column mapping), then a column named "a b".
    path = batches.config.table_path("public", "legacy")
    schema = T.StructType(
        [
            T.StructField("id", T.IntegerType()),
            T.StructField("_pgbridge_commit_lsn", T.LongType()),
            T.StructField("_pgbridge_seq", T.LongType()),
            T.StructField("_pgbridge_commit_ts", T.TimestampType()),
        ]
    )
    spark.createDataFrame([], schema).write.format("delta").save(path)
    legacy = TableVersion(
        PREFIX, "public", "legacy", [col("id", "int"), col("a_b", OPT_STR, "a b")], ["id"]
    )
    batches.add(legacy, "c", (10, 0), after={"id": 1, "a_b": "x"})
    batches.apply(0)
    assert batches.rows("public", "legacy") == [{"id": 1, "a b": "x"}]


def test_column_type_widened_in_postgres_is_widened_in_delta(batches: Batches, spark: Any) -> None:
    narrow = TableVersion(PREFIX, "public", "grows", [col("id", "int"), col("v", OPT_INT)], ["id"])
    wide = TableVersion(PREFIX, "public", "grows", [col("id", "int"), col("v", ["null", "long"])],
                        ["id"])  # fmt: skip
    batches.add(narrow, "c", (10, 0), after={"id": 1, "v": 7})
    batches.apply(0)
    # ALTER TABLE grows ALTER COLUMN v TYPE bigint; then a value only bigint holds.
    batches.add(narrow, "u", (11, 0), after={"id": 1, "v": 8})
    batches.add(wide, "c", (12, 0), after={"id": 2, "v": 2**40})
    applier = batches.apply(1)
    assert applier.stats.dead_letters == 0
    df = spark.read.format("delta").load(batches.config.table_path("public", "grows"))
    assert df.schema["v"].dataType.simpleString() == "bigint"
    assert sorted(batches.rows("public", "grows"), key=lambda r: r["id"]) == [
        {"id": 1, "v": 8},
        {"id": 2, "v": 2**40},
    ]


def test_column_type_delta_cannot_widen_takes_the_new_type_with_the_values_cast(
    batches: Batches, spark: Any
) -> None:
    """ALTER COLUMN v TYPE text, w TYPE int (USING w::int): Delta cannot change these in place,
    so the column takes the new type through column mapping, older rows' values cast (null
    where PostgreSQL's cast would have failed too: w = 'x'), an older version's record in the
    same batch cast alike. A job killed half-way through (the old column moved aside) finishes
    at its restart."""
    from bridge.spark.merge import RETYPED_PREFIX

    def version(table: str, v: Any, w: Any) -> TableVersion:
        return TableVersion(PREFIX, "public", table, [col("id", "int"), col("v", v),
                            col("w", w)], ["id"])  # fmt: skip

    for table in ("retyped", "retyped_crash"):
        old = version(table, OPT_INT, OPT_STR)
        batches.add(old, "c", (10, 0), after={"id": 1, "v": 7, "w": "12"})
        batches.add(old, "c", (10, 1), after={"id": 2, "v": 8, "w": "x"})
    batches.apply(0)
    # The crash: the column moved aside, the job gone before the new column took its name.
    crashed = batches.config.table_path("public", "retyped_crash")
    spark.sql(f"ALTER TABLE delta.`{crashed}` RENAME COLUMN v TO `{RETYPED_PREFIX}v`")
    for table in ("retyped", "retyped_crash"):
        batches.add(version(table, OPT_INT, OPT_STR), "u", (11, 0),
                    after={"id": 2, "v": 9, "w": "x"})  # fmt: skip
        batches.add(version(table, OPT_STR, OPT_INT), "c", (12, 0),
                    after={"id": 3, "v": "seven", "w": 3})  # fmt: skip
    applier = batches.apply(1, restarted=True)
    assert applier.stats.dead_letters == 0
    for table in ("retyped", "retyped_crash"):
        df = spark.read.format("delta").load(batches.config.table_path("public", table))
        assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields][:3] == [
            ("id", "int"),
            ("v", "string"),
            ("w", "int"),
        ], table
        assert sorted(batches.rows("public", table), key=lambda r: r["id"]) == [
            {"id": 1, "v": "7", "w": 12},
            {"id": 2, "v": "9", "w": None},
            {"id": 3, "v": "seven", "w": 3},
        ], table


def _renamed(name: str, type_: Any, *old: str) -> dict[str, Any]:
    """A field as the producer writes a renamed column (bridge.schema_versions.carry_renames)."""
    return {**col(name, type_), "aliases": list(old), "pgbridge.renamed_from": list(old)}


def test_renamed_column_is_renamed_in_delta_with_its_values(batches: Batches, spark: Any) -> None:
    v1 = TableVersion(PREFIX, "public", "ren", [col("id", "int"), col("vc", OPT_STR)], ["id"])
    v2 = TableVersion(
        PREFIX, "public", "ren", [col("id", "int"), _renamed("vc_renamed", OPT_STR, "vc")], ["id"]
    )
    batches.add(v1, "c", (10, 0), after={"id": 1, "vc": "a"})
    batches.add(v1, "c", (10, 1), after={"id": 2, "vc": "b"})
    batches.apply(0)
    # ALTER TABLE ren RENAME COLUMN vc TO vc_renamed, with changes of both versions in one
    # batch: an old version's update (and its unchanged TOAST mark) lands in the new column.
    batches.add(v1, "u", (11, 0), after={"id": 1, "vc": "a2"})
    batches.add(v1, "u", (11, 1), after={"id": 2, "vc": "__debezium_unavailable_value"},
                unchanged=["vc"])  # fmt: skip
    batches.add(v2, "c", (12, 0), after={"id": 3, "vc_renamed": "c"})
    applier = batches.apply(1)
    assert applier.stats.dead_letters == 0
    path = batches.config.table_path("public", "ren")
    columns = [c for c in spark.read.format("delta").load(path).columns if "pgbridge" not in c]
    assert columns == ["id", "vc_renamed"]
    assert sorted(batches.rows("public", "ren"), key=lambda r: r["id"]) == [
        {"id": 1, "vc_renamed": "a2"},
        {"id": 2, "vc_renamed": "b"},
        {"id": 3, "vc_renamed": "c"},
    ]
    from delta.tables import DeltaTable

    operations = [r["operation"] for r in DeltaTable.forPath(spark, path).history().collect()]
    assert "RENAME COLUMN" in operations


def test_renames_made_while_the_job_was_down_and_a_renamed_key_column(
    batches: Batches, spark: Any
) -> None:
    v1 = TableVersion(PREFIX, "public", "keyren", [col("id", "int"), col("a", OPT_STR)], ["id"])
    batches.add(v1, "c", (10, 0), after={"id": 1, "a": "x"})
    batches.apply(0)
    # Two renames of `a` (a -> b -> c) and the key's rename, all while the job was down: the
    # restarted job sees only the newest version.
    v3 = TableVersion(
        PREFIX,
        "public",
        "keyren",
        [_renamed("item_id", "int", "id"), _renamed("c", OPT_STR, "a", "b")],
        ["item_id"],
    )
    batches.add(v3, "u", (20, 0), after={"item_id": 1, "c": "y"})
    batches.add(v3, "c", (20, 1), after={"item_id": 2, "c": "z"})
    applier = batches.apply(1, restarted=True)
    assert applier.stats.dead_letters == 0
    assert sorted(batches.rows("public", "keyren"), key=lambda r: r["item_id"]) == [
        {"item_id": 1, "c": "y"},
        {"item_id": 2, "c": "z"},
    ]
    from bridge.spark.merge import table_key_columns

    assert table_key_columns(spark, batches.config.table_path("public", "keyren")) == ("item_id",)
    # A truncate uses the table's (renamed) key columns.
    batches.add(v3, "t", (30, 0))
    batches.apply(2)
    assert batches.rows("public", "keyren") == []


def test_renamed_column_of_a_keyless_table_keeps_its_values(batches: Batches) -> None:
    v1 = TableVersion(PREFIX, "public", "logren", [col("a", OPT_INT), col("b", OPT_STR)], key=[])
    v2 = TableVersion(
        PREFIX, "public", "logren", [col("a", OPT_INT), _renamed("bb", OPT_STR, "b")], key=[]
    )
    batches.add(v1, "c", (10, 0), after={"a": 1, "b": "x"})
    batches.apply(0)
    batches.add(v1, "c", (11, 0), after={"a": 2, "b": "y"})
    batches.add(v2, "c", (12, 0), after={"a": 3, "bb": "z"})
    batches.add(v2, "d", (13, 0), before={"a": 1, "bb": "x"})
    batches.apply(1)
    assert batches.multiset("public", "logren") == Counter({(2, "y"): 1, (3, "z"): 1})


def test_dropped_column_is_kept_by_default_and_dropped_on_request(
    batches: Batches, spark: Any
) -> None:
    from dataclasses import replace

    def columns(table: str) -> list[str]:
        df = spark.read.format("delta").load(batches.config.table_path("public", table))
        return [c for c in df.columns if not c.startswith("_pgbridge_")]

    for table, setting in (("kept", "keep"), ("dropped", "drop")):
        batches.config = replace(batches.config, dropped_columns=setting)
        batches.applier = None
        v1 = TableVersion(
            PREFIX, "public", table, [col("id", "int"), col("a", OPT_STR), col("b", OPT_STR)],
            ["id"],
        )  # fmt: skip
        v2 = TableVersion(PREFIX, "public", table, [col("id", "int"), col("a", OPT_STR)], ["id"])
        batches.add(v1, "c", (10, 0), after={"id": 1, "a": "x", "b": "old"})
        batches.apply(0)
        # ALTER TABLE ... DROP COLUMN b, with a record of each version in one batch.
        batches.add(v1, "c", (11, 0), after={"id": 2, "a": "y", "b": "gone"})
        batches.add(v2, "u", (12, 0), after={"id": 1, "a": "x2"})
        batches.apply(1)
        rows = sorted(batches.rows("public", table), key=lambda r: r["id"])
        if setting == "keep":
            assert columns(table) == ["id", "a", "b"]
            assert rows == [{"id": 1, "a": "x2", "b": "old"}, {"id": 2, "a": "y", "b": "gone"}]
        else:
            assert columns(table) == ["id", "a"]
            assert rows == [{"id": 1, "a": "x2"}, {"id": 2, "a": "y"}]


def _added_with_default(name: str, type_: Any, default: Any, text: str) -> dict[str, Any]:
    """A field as the producer writes a column added by ADD COLUMN ... DEFAULT (bridge.schema:
    the union [T, "null"] with the value older rows hold as its default)."""
    return {"name": name, "type": [type_, "null"], "default": default, "pgbridge.missing": text}


DATE: Any = {"type": "int", "logicalType": "date"}


def _with_defaults(table: str, key: list[str]) -> tuple[TableVersion, TableVersion]:
    v1 = TableVersion(PREFIX, "public", table, [col("id", "int"), col("a", OPT_STR)], key)
    v2 = TableVersion(
        PREFIX,
        "public",
        table,
        [
            col("id", "int"),
            col("a", OPT_STR),
            _added_with_default("n", "int", 5, "5"),
            _added_with_default("d", DATE, 19000, "2022-01-08"),
        ],
        key,
    )
    return v1, v2


def test_column_added_with_a_default_holds_it_in_older_rows(batches: Batches, spark: Any) -> None:
    """ALTER TABLE ... ADD COLUMN n int DEFAULT 5, d date DEFAULT '2022-01-08': rows the table
    held before, and older records in the same batch, read 5 and 2022-01-08 (as PostgreSQL
    shows them); rows written after hold their own values, an explicit NULL included."""
    v1, v2 = _with_defaults("dflt", ["id"])
    batches.add(v1, "c", (10, 0), after={"id": 1, "a": "x"})
    batches.add(v1, "c", (10, 1), after={"id": 2, "a": "y"})
    batches.apply(0)
    batches.add(v1, "u", (11, 0), after={"id": 2, "a": "y2"})
    batches.add(v1, "c", (11, 1), after={"id": 3, "a": "z"})
    batches.add(v2, "c", (12, 0), after={"id": 4, "a": "w", "n": 9, "d": 1})
    batches.add(v2, "c", (12, 1), after={"id": 5, "a": "v", "n": None, "d": None})
    assert batches.apply(1).stats.dead_letters == 0
    day = dt.date(2022, 1, 8)
    assert sorted(batches.rows("public", "dflt"), key=lambda r: r["id"]) == [
        {"id": 1, "a": "x", "n": 5, "d": day},
        {"id": 2, "a": "y2", "n": 5, "d": day},
        {"id": 3, "a": "z", "n": 5, "d": day},
        {"id": 4, "a": "w", "n": 9, "d": dt.date(1970, 1, 2)},
        {"id": 5, "a": "v", "n": None, "d": None},
    ]
    # Keyless tables too (their rows are appended images).
    k1, k2 = _with_defaults("dflt_log", [])
    batches.add(k1, "c", (10, 0), after={"id": 1, "a": "x"})
    batches.apply(2)
    batches.add(k2, "c", (12, 0), after={"id": 2, "a": "y", "n": None, "d": None})
    batches.apply(3)
    assert batches.multiset("public", "dflt_log") == Counter(
        {(1, "x", 5, day): 1, (2, "y", None, None): 1}
    )


def test_backfill_interrupted_after_the_column_was_added_is_finished_at_the_restart(
    batches: Batches, spark: Any
) -> None:
    """A job killed between adding the column and setting older rows to the missing value: the
    restarted job finishes it before applying anything else."""
    from pyspark.sql import types as T

    from bridge.spark.columns import RowShape
    from bridge.spark.merge import PENDING_BACKFILL_PROPERTY, _set_pending_backfill

    v1, v2 = _with_defaults("dflt_crash", ["id"])
    batches.add(v1, "c", (10, 0), after={"id": 1, "a": "x"})
    batches.apply(0)
    path = batches.config.table_path("public", "dflt_crash")
    missing = RowShape.from_schema(json.dumps(v2.value_schema()), (38, 18)).missing_values()
    _set_pending_backfill(spark, path, missing)
    added = T.StructType([T.StructField("n", T.IntegerType()), T.StructField("d", T.DateType())])
    spark.createDataFrame([], added).write.format("delta").mode("append").option(
        "mergeSchema", "true"
    ).save(path)
    batches.add(v2, "c", (12, 0), after={"id": 2, "a": "y", "n": 1, "d": 0})
    batches.apply(1, restarted=True)
    assert sorted(batches.rows("public", "dflt_crash"), key=lambda r: r["id"]) == [
        {"id": 1, "a": "x", "n": 5, "d": dt.date(2022, 1, 8)},
        {"id": 2, "a": "y", "n": 1, "d": dt.date(1970, 1, 1)},
    ]
    from delta.tables import DeltaTable

    detail = DeltaTable.forPath(spark, path).detail().first()
    assert detail is not None and PENDING_BACKFILL_PROPERTY not in detail["properties"]
