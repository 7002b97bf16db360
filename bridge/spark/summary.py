"""A table's micro-batch at a glance (counts, the last truncate, unchanged TOAST, identity,
commit times, each Kafka partition's highest position): one aggregation per batch over every
table's changes, grouped by table and Kafka partition, then combined per table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from bridge.spark import transforms as tf

__all__ = [
    "SUMMARY_PARTITION",
    "TABLE_INDEX",
    "combine_parts",
    "summary_aggregates",
    "summary_input",
]

TABLE_INDEX = "_pgbridge_table_index"
SUMMARY_PARTITION = "_pgbridge_summary_partition"
_HAS_UNCHANGED = "_pgbridge_has_unchanged"
_SUMMARY_OFFSET = "_pgbridge_summary_offset"


def summary_input(changes: DataFrame) -> DataFrame:
    """The columns a table's summary reads, the same for every table (so they can be unioned)."""
    partition = F.col(tf.PARTITION) if tf.PARTITION in changes.columns else F.lit(-1)
    offset = F.col(tf.OFFSET) if tf.OFFSET in changes.columns else F.lit(None)
    return changes.select(
        tf.OP,
        tf.COMMIT_LSN,
        tf.SEQ,
        tf.COMMIT_TS,
        (F.size(tf.UNCHANGED) > 0).alias(_HAS_UNCHANGED),
        tf.SOURCE_SCHEMA,
        tf.SOURCE_TABLE,
        partition.cast("int").alias(SUMMARY_PARTITION),
        offset.cast("long").alias(_SUMMARY_OFFSET),
    )


def summary_aggregates() -> list[Any]:
    """A table's batch at a glance: counts, the last truncate, TOAST, identity, commit times."""
    return [
        F.count(F.lit(1)).alias("n"),
        F.count(F.when(F.col(tf.OP) != "t", F.lit(1))).alias("rows"),
        F.count(F.when(F.col(tf.OP).isin("u", "d"), F.lit(1))).alias("removals"),
        F.count(F.when(F.col(tf.OP) == "c", F.lit(1))).alias("creates"),
        F.count(F.when(F.col(tf.OP) == "r", F.lit(1))).alias("reads"),
        F.max(F.when(F.col(tf.OP) == "r", F.col(tf.COMMIT_LSN))).alias("reads_lsn"),
        F.min(tf.COMMIT_LSN).alias("lowest_lsn"),
        F.max(F.when(F.col(tf.OP) == "t", F.struct(tf.COMMIT_LSN, tf.SEQ, tf.COMMIT_TS))).alias(
            "trunc"
        ),
        F.max(_HAS_UNCHANGED).alias("toast"),
        F.min(tf.SOURCE_SCHEMA).alias("schema"),
        F.max(tf.SOURCE_SCHEMA).alias("schema_max"),
        F.min(tf.SOURCE_TABLE).alias("table"),
        F.max(tf.SOURCE_TABLE).alias("table_max"),
        F.min(F.unix_millis(tf.COMMIT_TS)).alias("oldest_ms"),
        F.max(F.unix_millis(tf.COMMIT_TS)).alias("newest_ms"),
        F.max(F.struct(tf.COMMIT_LSN, tf.SEQ)).alias("last"),
        F.max(_SUMMARY_OFFSET).alias("max_offset"),
    ]


def combine_parts(parts: Sequence[Any]) -> dict[str, Any] | None:
    """One table's summary from its per-partition rows, with ``partitions``: each partition's
    highest position (its fence after the batch)."""
    if not parts:
        return None

    def some(values: Any) -> list[Any]:
        return [v for v in values if v is not None]

    def low(name: str) -> Any:
        values = some(p[name] for p in parts)
        return min(values) if values else None

    def high(name: str) -> Any:
        values = some(p[name] for p in parts)
        return max(values) if values else None

    # Rows of a Kafka partition (a batch of row images only has none: -1 or null).
    kafka_parts = [
        p for p in parts if p[SUMMARY_PARTITION] is not None and p[SUMMARY_PARTITION] >= 0
    ]
    return {
        "n": sum(int(p["n"]) for p in parts),
        "rows": sum(int(p["rows"]) for p in parts),
        "removals": sum(int(p["removals"]) for p in parts),
        "creates": sum(int(p["creates"]) for p in parts),
        "reads": sum(int(p["reads"]) for p in parts),
        "reads_lsn": high("reads_lsn"),
        "lowest_lsn": low("lowest_lsn"),
        "trunc": high("trunc"),
        "toast": any(bool(p["toast"]) for p in parts),
        "schema": low("schema"),
        "schema_max": high("schema_max"),
        "table": low("table"),
        "table_max": high("table_max"),
        "oldest_ms": low("oldest_ms"),
        "newest_ms": high("newest_ms"),
        "last": high("last"),
        "partitions": {
            int(p[SUMMARY_PARTITION]): (int(p["last"][0]), int(p["last"][1]))
            for p in kafka_parts
            if p["last"] is not None
        },
        "offsets": {
            int(p[SUMMARY_PARTITION]): int(p["max_offset"])
            for p in kafka_parts
            if p["max_offset"] is not None
        },
    }
