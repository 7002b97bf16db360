"""Pure DataFrame transforms of the apply job: DataFrame in, DataFrame out, no I/O.

The stages, in the order the job applies them to one micro-batch:

1. :func:`frame` reads the Confluent framing (magic byte 0, 4-byte big-endian schema id) of key
   and value, and says why a value is not framed.
2. :func:`decode_envelopes` decodes one (topic, schema id) group with its writer schema.
3. :func:`envelope_to_changes` flattens Debezium envelopes into change rows: the row's columns
   (from ``after``, or ``before`` for a delete) under their PostgreSQL names and converted for
   Delta (:mod:`bridge.spark.columns`), plus the ``_pgbridge_*`` metadata columns. For tables
   without key columns, :func:`envelope_to_images` gives row images with a count delta instead
   (applied as a multiset by :mod:`bridge.spark.multiset`).
4. :func:`conform` brings the groups of one table to one shape (the newest schema's columns).
5. :func:`drop_before` drops changes a truncate in the same batch supersedes.
6. :func:`last_change_per_key` keeps the last change per key, folding unchanged-TOAST columns.

Dead letters leave stages 1 and 2 through :func:`dead_letters` in one fixed shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.avro.functions import from_avro

from bridge.spark.columns import RowShape

__all__ = [
    "COMMIT_LSN",
    "COMMIT_TS",
    "COUNT_DELTA",
    "DEAD_LETTER_SCHEMA",
    "OP",
    "PERSISTED_META",
    "SEQ",
    "SOURCE_SCHEMA",
    "SOURCE_TABLE",
    "UNCHANGED",
    "UNCHANGED_TOAST_FIELD",
    "conform",
    "dead_letters",
    "decode_envelopes",
    "drop_before",
    "envelope_to_changes",
    "envelope_to_images",
    "frame",
    "last_change_per_key",
    "newer",
]

# Metadata columns of a change row. The first three are also stored in every Delta row: they
# record which change wrote it, so a replayed or resent change can be recognised as old.
COMMIT_LSN = "_pgbridge_commit_lsn"
SEQ = "_pgbridge_seq"
COMMIT_TS = "_pgbridge_commit_ts"
OP = "_pgbridge_op"
UNCHANGED = "_pgbridge_unchanged"
PERSISTED_META = (COMMIT_LSN, SEQ, COMMIT_TS)
# The source block's schema and table: the table's identity (the topic name cannot be split).
SOURCE_SCHEMA = "_pgbridge_source_schema"
SOURCE_TABLE = "_pgbridge_source_table"
#: Row images only: +1 (the image gained a copy), -1 (lost one), 0 (a truncate).
COUNT_DELTA = "_pgbridge_count_delta"
#: The Kafka partition a change came from (keyed tables; see bridge.spark.fences). Not persisted.
PARTITION = "_pgbridge_partition"
#: Its Kafka offset (keyed tables: the compaction mark of bridge.spark.changelog). Not persisted.
OFFSET = "_pgbridge_offset"

#: The envelope field listing the columns whose value is an unchanged TOAST datum (absent in
#: envelopes that predate it; then nothing is unchanged).
UNCHANGED_TOAST_FIELD = "unchanged_toast_columns"

# Columns of the framed batch.
KEY_SCHEMA_ID = "_key_schema_id"
VALUE_SCHEMA_ID = "_value_schema_id"
FRAMING_ERROR = "_framing_error"
ENVELOPE = "_envelope"
UNDECODABLE = "_undecodable"
KAFKA_META = ("topic", "partition", "offset", "timestamp", "key", "value")

#: The dead-letter table's shape.
DEAD_LETTER_SCHEMA = T.StructType(
    [
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("offset", T.LongType()),
        T.StructField("kafka_timestamp", T.TimestampType()),
        T.StructField("key", T.BinaryType()),
        T.StructField("value", T.BinaryType()),
        T.StructField("schema_id", T.LongType()),
        T.StructField("reason", T.StringType()),
        T.StructField("batch_id", T.LongType()),
    ]
)

APPLY_OPS = ("c", "r", "u", "d", "t")


def _schema_id(col: str) -> Column:
    """Bytes 1..4 of a Confluent-framed payload as a big-endian unsigned int; null if unframed."""
    framed = (F.length(col) >= 5) & (F.substring(col, 1, 1) == F.lit(b"\x00"))
    return F.when(framed, F.conv(F.hex(F.substring(col, 2, 4)), 16, 10).cast("long"))


def frame(raw: DataFrame) -> DataFrame:
    """Kafka rows -> the same rows with the key's and value's schema ids and a framing error.

    ``_framing_error`` is null for a framed value and for a tombstone (null value), which is
    not an error: Debezium sends one after each delete, for log compaction.
    """
    value = F.col("value")
    error = (
        F.when(value.isNull(), F.lit(None).cast("string"))
        .when(F.length(value) < 5, F.lit("value shorter than the 5-byte Confluent header"))
        .when(
            F.substring(value, 1, 1) != F.lit(b"\x00"),
            F.concat(
                F.lit("magic byte is 0x"),
                F.lower(F.hex(F.substring(value, 1, 1))),
                F.lit(", not 0"),
            ),
        )
    )
    return raw.select(
        *KAFKA_META,
        _schema_id("key").alias(KEY_SCHEMA_ID),
        _schema_id("value").alias(VALUE_SCHEMA_ID),
        error.alias(FRAMING_ERROR),
    )


def decode_envelopes(framed: DataFrame, topic: str, schema_id: int, schema_json: str) -> DataFrame:
    """The rows of one (topic, value schema id) group, decoded with that writer schema.

    PERMISSIVE mode turns an undecodable payload into an all-null ``_envelope`` instead of
    failing the whole batch; ``_undecodable`` flags it (``op``, a required field, is null) for
    :func:`dead_letters`.
    """
    payload = F.expr("substring(value, 6, length(value) - 5)")
    decoded = framed.where(
        (F.col("topic") == topic)
        & (F.col(VALUE_SCHEMA_ID) == schema_id)
        & F.col(FRAMING_ERROR).isNull()
        & F.col("value").isNotNull()
    ).select(
        *KAFKA_META,
        F.col(VALUE_SCHEMA_ID),
        from_avro(payload, schema_json, {"mode": "PERMISSIVE"}).alias(ENVELOPE),
    )
    envelope: Any = decoded.schema[ENVELOPE].dataType
    broken = F.col(ENVELOPE).isNull()
    if isinstance(envelope, T.StructType) and "op" in envelope.fieldNames():
        broken = broken | F.col(f"{ENVELOPE}.op").isNull()
    return decoded.withColumn(UNDECODABLE, broken)


def dead_letters(rows: DataFrame, reason: Column | str, batch_id: int) -> DataFrame:
    """Rows that cannot be applied, in :data:`DEAD_LETTER_SCHEMA`'s shape."""
    schema_id = F.col(VALUE_SCHEMA_ID) if VALUE_SCHEMA_ID in rows.columns else F.lit(None)
    return rows.select(
        F.col("topic").cast("string"),
        F.col("partition").cast("int"),
        F.col("offset").cast("long"),
        F.col("timestamp").cast("timestamp").alias("kafka_timestamp"),
        F.col("key").cast("binary"),
        F.col("value").cast("binary"),
        schema_id.cast("long").alias("schema_id"),
        (F.lit(reason) if isinstance(reason, str) else reason).cast("string").alias("reason"),
        F.lit(batch_id).cast("long").alias("batch_id"),
    )


def envelope_fields(decoded: DataFrame) -> T.StructType:
    """The row's columns (the ``after``/``before`` record) of a decoded group."""
    envelope: Any = decoded.schema[ENVELOPE].dataType
    for name in ("after", "before"):
        if name in envelope.fieldNames():
            field_type = envelope[name].dataType
            if isinstance(field_type, T.StructType):
                return field_type
    return T.StructType([])


def quote(name: str) -> str:
    """``name`` as a backquoted Spark SQL identifier (any characters)."""
    return "`" + name.replace("`", "``") + "`"


def _shape(decoded: DataFrame, shape: RowShape | None) -> RowShape:
    return shape if shape is not None else RowShape.plain(envelope_fields(decoded))


def has_pgbridge_positions(source_type: T.DataType) -> bool:
    """The envelope's ``source`` carries pgbridge's own position (``commit_lsn``, ``seq``),
    not one derived from Debezium's LSNs (a topic taken over)."""
    return isinstance(source_type, T.StructType) and {"commit_lsn", "seq"} <= set(
        source_type.fieldNames()
    )


def position(source_type: T.DataType) -> tuple[Column, Column]:
    """(commit_lsn, seq) of a change: pgbridge's source fields; for records Debezium wrote
    (a topic pgbridge took over, docs/debezium-migration.md), Debezium's own order:
    ``source.sequence`` [last commit's LSN, the change's LSN], else the change's LSN. Such a
    record sorts after every change of the transactions before its own and before
    pgbridge's records of its own transaction."""
    source = F.col(ENVELOPE)["source"]
    names = source_type.fieldNames() if isinstance(source_type, T.StructType) else []
    if has_pgbridge_positions(source_type):
        return source["commit_lsn"].cast("long"), source["seq"].cast("long")
    lsn = source["lsn"].cast("long")
    last_commit = (
        F.get_json_object(source["sequence"], "$[0]").try_cast("long")
        if "sequence" in names
        else F.lit(None).cast("long")
    )
    return F.coalesce(last_commit, lsn), lsn


def _meta(decoded: DataFrame, op: Column | None = None) -> list[Column]:
    envelope: Column = F.col(ENVELOPE)
    envelope_type: Any = decoded.schema[ENVELOPE].dataType
    commit_lsn, seq = position(envelope_type["source"].dataType)
    return [
        (op if op is not None else envelope["op"]).alias(OP),
        commit_lsn.alias(COMMIT_LSN),
        seq.alias(SEQ),
        F.timestamp_millis(envelope["source"]["ts_ms"]).alias(COMMIT_TS),
        envelope["source"]["schema"].cast("string").alias(SOURCE_SCHEMA),
        envelope["source"]["table"].cast("string").alias(SOURCE_TABLE),
    ]


def _unchanged(decoded: DataFrame, shape: RowShape) -> Column:
    """The envelope's unchanged-TOAST list, with the columns' PostgreSQL names."""
    envelope: Any = decoded.schema[ENVELOPE].dataType
    if UNCHANGED_TOAST_FIELD not in envelope.fieldNames():
        return F.array().cast("array<string>")
    listed = F.coalesce(F.col(ENVELOPE)[UNCHANGED_TOAST_FIELD], F.array().cast("array<string>"))
    renamed = [c for c in shape.columns if c.field != c.name]
    if not renamed:
        return listed

    def rename(field: Column) -> Column:
        out = F.when(field == renamed[0].field, F.lit(renamed[0].name))
        for c in renamed[1:]:
            out = out.when(field == c.field, F.lit(c.name))
        return out.otherwise(field)

    return F.transform(listed, rename)


def envelope_to_changes(decoded: DataFrame, shape: RowShape | None = None) -> DataFrame:
    """Decoded envelopes -> change rows: the row's columns and the ``_pgbridge_*`` metadata.

    A column's value comes from ``after``, or from ``before`` for a delete (which carries the
    key, or the whole old row under REPLICA IDENTITY FULL), named and converted by ``shape``
    (default: the Avro field names, unconverted). Messages (op ``m``) and rows with an
    undecodable envelope are left out; :func:`dead_letters` covers the latter.
    """
    shape = _shape(decoded, shape)
    after, before = F.col(ENVELOPE)["after"], F.col(ENVELOPE)["before"]
    is_delete = F.col(ENVELOPE)["op"] == "d"
    values = [
        F.when(is_delete, shape.value(before, c)).otherwise(shape.value(after, c)).alias(c.name)
        for c in shape.columns
    ]
    return decoded.where(~F.col(UNDECODABLE) & F.col(ENVELOPE)["op"].isin(*APPLY_OPS)).select(
        *values,
        *_meta(decoded),
        _unchanged(decoded, shape).alias(UNCHANGED),
        F.col("partition").cast("int").alias(PARTITION),
        F.col("offset").cast("long").alias(OFFSET),
    )


def envelope_to_images(decoded: DataFrame, shape: RowShape | None = None) -> DataFrame:
    """Decoded envelopes of a table without key columns -> row images with a count delta.

    An insert (or snapshot read) adds a copy of ``after`` (+1), a delete removes one of
    ``before`` (-1), an update does both, with the columns it marks as unchanged TOAST taken
    from ``before`` (the whole old row, under REPLICA IDENTITY FULL); a truncate is one row of
    nulls with delta 0. An update or delete without ``before`` cannot be matched to a row and
    is left out here (the job dead-letters it, see :func:`images_without_before`).
    """
    shape = _shape(decoded, shape)
    envelope = F.col(ENVELOPE)
    after, before, op = envelope["after"], envelope["before"], envelope["op"]
    unchanged = _unchanged(decoded, shape)
    usable = ~F.col(UNDECODABLE)
    empty = F.array().cast("array<string>").alias(UNCHANGED)
    plus_values = [
        F.when(F.array_contains(unchanged, c.name) & before.isNotNull(), shape.value(before, c))
        .otherwise(shape.value(after, c))
        .alias(c.name)
        for c in shape.columns
    ]
    plus = decoded.where(usable & op.isin("c", "r", "u") & after.isNotNull()).select(
        *plus_values, *_meta(decoded), empty, F.lit(1).alias(COUNT_DELTA)
    )
    minus = decoded.where(usable & op.isin("u", "d") & before.isNotNull()).select(
        *[shape.value(before, c).alias(c.name) for c in shape.columns],
        *_meta(decoded),
        empty,
        F.lit(-1).alias(COUNT_DELTA),
    )
    truncates = decoded.where(usable & (op == "t")).select(
        *[F.lit(None).cast(plus.schema[c.name].dataType).alias(c.name) for c in shape.columns],
        *_meta(decoded),
        empty,
        F.lit(0).alias(COUNT_DELTA),
    )
    return plus.unionByName(minus).unionByName(truncates)


def images_without_before(decoded: DataFrame) -> DataFrame:
    """Updates and deletes of a keyless table that carry no old row: nothing to match."""
    envelope = F.col(ENVELOPE)
    return decoded.where(
        ~F.col(UNDECODABLE) & envelope["op"].isin("u", "d") & envelope["before"].isNull()
    )


def conform(
    frames: Sequence[DataFrame],
    columns: T.StructType,
    missing: Mapping[str, Column] | None = None,
) -> DataFrame:
    """Change rows decoded under several schema versions -> one DataFrame of ``columns``.

    A column a version lacks is null; a column whose type changed is cast to the type in
    ``columns`` (the newest version's; null where the value does not cast). Metadata columns
    pass through. In change rows (not row images), a column the version lacks is also marked
    unchanged, as an unchanged TOAST value is: an update written before a column was added,
    or after one was dropped, leaves the table's value of it as it is. Except the columns of
    ``missing`` (added with a default): rows written before hold its value
    (:func:`bridge.spark.columns.missing_literal`), as PostgreSQL shows them.
    """
    if not frames:
        raise ValueError("conform needs at least one frame")
    missing = missing or {}
    shaped: list[DataFrame] = []
    for frame_ in frames:
        present = set(frame_.columns)
        filled = {f.name: missing[f.name] for f in columns.fields if f.name in missing}
        absent = [f.name for f in columns.fields if f.name not in present and f.name not in filled]
        meta: list[Column | str] = [c for c in frame_.columns if c.startswith("_pgbridge_")]
        if absent and UNCHANGED in present and COUNT_DELTA not in present:
            marked = F.array_union(F.col(UNCHANGED), F.array(*[F.lit(n) for n in absent]))
            meta = [marked.alias(UNCHANGED) if c == UNCHANGED else c for c in meta]
        shaped.append(
            frame_.select(
                *[
                    (F.col(quote(f.name)) if f.name in present else filled.get(f.name, F.lit(None)))
                    .try_cast(f.dataType)
                    .alias(f.name)
                    for f in columns.fields
                ],
                *meta,
            )
        )
    result = shaped[0]
    for other in shaped[1:]:
        result = result.unionByName(other)
    return result


def newer(left: str, right: str) -> Column:
    """``left``'s (commit_lsn, seq) is after ``right``'s; both are table aliases (``s``, ``t``).

    Used as the MERGE guard, so a change never overwrites what a later change wrote.
    """
    return (F.col(f"{left}.{COMMIT_LSN}") > F.col(f"{right}.{COMMIT_LSN}")) | (
        (F.col(f"{left}.{COMMIT_LSN}") == F.col(f"{right}.{COMMIT_LSN}"))
        & (F.col(f"{left}.{SEQ}") > F.col(f"{right}.{SEQ}"))
    )


def drop_before(changes: DataFrame, commit_lsn: int, seq: int) -> DataFrame:
    """Changes strictly after position (commit_lsn, seq): what survives a truncate there."""
    return changes.where(
        (F.col(COMMIT_LSN) > commit_lsn) | ((F.col(COMMIT_LSN) == commit_lsn) & (F.col(SEQ) > seq))
    )


def last_change_per_key(
    changes: DataFrame, key_columns: Sequence[str], fold_unchanged: bool = False
) -> DataFrame:
    """The last change per key in (commit_lsn, seq) order; truncates are left out.

    With ``fold_unchanged``, a column the last change marks as unchanged TOAST takes its value
    from the latest earlier change of the batch that carried it, and stays marked only when no
    change of the batch carried it (then the MERGE keeps the target's value).
    """
    rows = changes.where(F.col(OP) != "t")
    keys = [F.col(quote(k)) for k in key_columns]
    ascending = Window.partitionBy(*keys).orderBy(F.col(COMMIT_LSN), F.col(SEQ))
    whole = ascending.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    meta = {c for c in rows.columns if c.startswith("_pgbridge_")}
    if not fold_unchanged:
        latest = Window.partitionBy(*keys).orderBy(F.col(COMMIT_LSN).desc(), F.col(SEQ).desc())
        return (
            rows.withColumn("_pgbridge_rank", F.row_number().over(latest))
            .where(F.col("_pgbridge_rank") == 1)
            .drop("_pgbridge_rank")
        )
    foldable = [c for c in rows.columns if c not in meta and c not in set(key_columns)]
    carried: dict[str, Column] = {}
    for name in foldable:
        # struct(...) tells "carried a null" (a struct holding null) from "not carried" (null).
        carried[name] = F.last(
            F.when(
                ~F.array_contains(F.col(UNCHANGED), name), F.struct(F.col(quote(name)).alias("v"))
            ),
            ignorenulls=True,
        ).over(whole)
    folded: Any = rows.select(
        *[F.col(quote(c)) for c in rows.columns if c not in foldable and c != UNCHANGED],
        *[carried[c].alias(f"_pgbridge_carried_{i}") for i, c in enumerate(foldable)],
        F.row_number().over(ascending).alias("_pgbridge_rank"),
        F.count(F.lit(1)).over(whole).alias("_pgbridge_count"),
    ).where(F.col("_pgbridge_rank") == F.col("_pgbridge_count"))
    # Marked only when no change of the batch carried the column.
    still_unchanged = (
        F.array_compact(
            F.array(
                *[
                    F.when(F.col(f"_pgbridge_carried_{i}").isNull(), F.lit(c))
                    for i, c in enumerate(foldable)
                ]
            )
        )
        if foldable
        else F.array().cast("array<string>")
    )
    result: DataFrame = folded.select(
        *[
            F.col(f"_pgbridge_carried_{foldable.index(c)}.v").alias(c)
            if c in foldable
            else F.col(quote(c))
            for c in rows.columns
            if c != UNCHANGED
        ],
        still_unchanged.alias(UNCHANGED),
    ).select(*[F.col(quote(c)) for c in rows.columns])
    return result
