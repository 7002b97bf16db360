"""Optional SCD type 2 history: every version of every row, valid from/to commit timestamps.

Beside the current-state table, a history table (``<history base>/<schema>/<table>``) keeps one
row per version: the row's columns, ``_pgbridge_valid_from`` (the commit time of the change
that made the version), ``_pgbridge_valid_to`` (the commit time of the next change of the key,
null while current), ``_pgbridge_is_current``, and the version's (commit_lsn, seq) and op. A
delete ends the key's current version and starts none; a truncate ends every version current
before it.

Each micro-batch is one MERGE per history table, idempotent the same way as the current-state
MERGE (txnAppId / txnVersion = the batch id): it closes the key's current version, when the
batch's first change of the key is newer than it, and inserts the batch's versions.
Unchanged-TOAST columns take the previous version's value (from the batch, else the table).

Tables without key columns have no history table: without an identity there is no "next
version of this row" (their current state is a multiset, see :mod:`bridge.spark.multiset`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from bridge.spark import transforms as tf
from bridge.spark.merge import before, idempotent_writes, small_tables_rewrite

__all__ = [
    "HISTORY_FIELDS",
    "IS_CURRENT",
    "VALID_FROM",
    "VALID_TO",
    "history_versions",
    "merge_history",
]

VALID_FROM = "_pgbridge_valid_from"
VALID_TO = "_pgbridge_valid_to"
IS_CURRENT = "_pgbridge_is_current"
_KIND = "_pgbridge_kind"
_FIRST = "_pgbridge_first"

#: The history table's metadata columns (after the row's columns).
HISTORY_FIELDS = (
    T.StructField(VALID_FROM, T.TimestampType()),
    T.StructField(VALID_TO, T.TimestampType()),
    T.StructField(IS_CURRENT, T.BooleanType()),
    T.StructField(tf.COMMIT_LSN, T.LongType()),
    T.StructField(tf.SEQ, T.LongType()),
    T.StructField(tf.OP, T.StringType()),
)


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def history_versions(
    changes: DataFrame, key_columns: Sequence[str], current: DataFrame | None = None
) -> DataFrame:
    """A batch's changes (truncates left out) -> one row per change with its validity end.

    ``_pgbridge_valid_to`` is the commit time of the key's next change in the batch (null for
    the last); ``_pgbridge_first`` marks the key's first change in the batch. With ``current``
    (the history table's current versions), a column marked unchanged TOAST takes the value of
    the latest earlier change of the batch that carried it, else the current version's.
    """
    rows = changes.where(F.col(tf.OP) != "t")
    keys = [F.col(_q(k)) for k in key_columns]
    order = Window.partitionBy(*keys).orderBy(F.col(tf.COMMIT_LSN), F.col(tf.SEQ))
    upto = order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    meta = {c for c in rows.columns if c.startswith("_pgbridge_")}
    foldable = [c for c in rows.columns if c not in meta and c not in set(key_columns)]
    if current is not None:
        previous = current.select(
            *[F.col(_q(k)).alias(f"_pgbridge_key_{i}") for i, k in enumerate(key_columns)],
            *[F.col(_q(c)).alias(f"_pgbridge_prev_{i}") for i, c in enumerate(foldable)],
        )
        on = [
            F.col(_q(k)).eqNullSafe(F.col(f"_pgbridge_key_{i}")) for i, k in enumerate(key_columns)
        ]
        condition: Column = on[0]
        for more in on[1:]:
            condition = condition & more
        rows = rows.join(previous, condition, "left")
    values: list[Column] = []
    for i, name in enumerate(foldable):
        carried = F.last(
            F.when(
                ~F.array_contains(F.col(tf.UNCHANGED), name), F.struct(F.col(_q(name)).alias("v"))
            ),
            ignorenulls=True,
        ).over(upto)
        fallback = F.col(f"_pgbridge_prev_{i}") if current is not None else F.lit(None)
        values.append(F.when(carried.isNotNull(), carried["v"]).otherwise(fallback).alias(name))
    return rows.select(
        *[F.col(_q(k)) for k in key_columns],
        *values,
        F.col(tf.OP),
        F.col(tf.COMMIT_LSN),
        F.col(tf.SEQ),
        F.col(tf.COMMIT_TS),
        F.lead(tf.COMMIT_TS).over(order).alias(VALID_TO),
        (F.row_number().over(order) == 1).alias(_FIRST),
    )


def merge_history(
    spark: Any,
    path: str,
    versions: DataFrame,
    key_columns: Sequence[str],
    value_columns: Sequence[str],
    truncate: tuple[int, int, Any] | None,
    app_id: str,
    batch_id: int,
) -> None:
    """Close the current versions the batch supersedes and insert the batch's versions.

    ``truncate`` is (commit_lsn, seq, commit time) of the batch's last truncate, if any.
    """
    from delta.tables import DeltaTable

    opened = versions.where(F.col(tf.OP) != "d").withColumn(_KIND, F.lit("open"))
    closing = versions.where(F.col(_FIRST)).withColumn(_KIND, F.lit("close"))
    staged = opened.unionByName(closing)
    on = (F.col(f"s.{_KIND}") == "close") & F.col(f"t.{IS_CURRENT}")
    for key in key_columns:
        on = on & F.col(f"t.{_q(key)}").eqNullSafe(F.col(f"s.{_q(key)}"))
    inserts: dict[str, str | Column] = {_q(c): F.col(f"s.{_q(c)}") for c in value_columns}
    inserts.update(
        {
            VALID_FROM: F.col(f"s.{tf.COMMIT_TS}"),
            VALID_TO: F.col(f"s.{VALID_TO}"),
            IS_CURRENT: F.col(f"s.{VALID_TO}").isNull(),
            tf.COMMIT_LSN: F.col(f"s.{tf.COMMIT_LSN}"),
            tf.SEQ: F.col(f"s.{tf.SEQ}"),
            tf.OP: F.col(f"s.{tf.OP}"),
        }
    )
    closed_at = F.col(f"s.{tf.COMMIT_TS}")
    if truncate is not None:
        # A version current before the truncate ended with it, not with the key's next insert.
        closed_at = F.when(
            before("t", truncate[:2]), F.lit(truncate[2]).cast("timestamp")
        ).otherwise(closed_at)
    builder = (
        DeltaTable.forPath(spark, path)
        .alias("t")
        .merge(staged.alias("s"), on)
        .whenMatchedUpdate(
            condition=tf.newer("s", "t"), set={VALID_TO: closed_at, IS_CURRENT: F.lit(False)}
        )
        .whenNotMatchedInsert(condition=F.col(f"s.{_KIND}") == "open", values=inserts)
    )
    if truncate is not None:
        lsn, seq, at = truncate
        builder = builder.whenNotMatchedBySourceUpdate(
            condition=F.col(f"t.{IS_CURRENT}") & before("t", (lsn, seq)),
            set={VALID_TO: F.lit(at).cast("timestamp"), IS_CURRENT: F.lit(False)},
        )
    with (
        idempotent_writes(spark, app_id, batch_id),
        small_tables_rewrite(spark, path),
    ):
        builder.execute()
