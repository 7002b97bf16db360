"""A driver-decoded table's batch (bridge.spark.driver_decode), in Python: its summary, its
fences, the last change per key, and the Arrow rows delta-rs writes.

Each function is the Python twin of the Spark expression it names, so a table's batch ends the
same whichever path decoded it: :func:`summarize` of ``summary_aggregates`` + ``combine_parts``
(bridge.spark.summary), :func:`admitted` of ``Fences.not_covered``, ``Fences.filter`` and
``transforms.drop_before``, :func:`last_change_per_key` of ``transforms.last_change_per_key``,
:func:`row_images` of ``transforms.envelope_to_images``. ``tests/spark/test_driver_decode.py``
applies the same batches both ways and compares the tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import types as T

from bridge.spark import transforms as tf
from bridge.spark.arrow_frame import frame_of
from bridge.spark.driver_decode import RawChange
from bridge.spark.driver_rewrite import listed
from bridge.spark.driver_table import conformed_to
from bridge.spark.fences import Fences, Position

__all__ = [
    "ArrowRows",
    "admitted",
    "arrow_rows",
    "folded_arrow_rows",
    "last_change_per_key",
    "row_images",
    "summarize",
]


def summarize(changes: Sequence[RawChange]) -> dict[str, Any] | None:
    """bridge.spark.summary's summary of a table's batch (the same keys and values)."""
    if not changes:
        return None
    truncates = [c for c in changes if c.op == "t"]
    reads = [c for c in changes if c.op == "r"]
    partitions: dict[int, Position] = {}
    offsets: dict[int, int] = {}
    for c in changes:
        position = (c.commit_lsn, c.seq)
        if c.partition >= 0:
            partitions[c.partition] = max(partitions.get(c.partition, position), position)
            offsets[c.partition] = max(offsets.get(c.partition, c.offset), c.offset)
    schemas = [c.schema for c in changes if c.schema is not None]
    tables = [c.table for c in changes if c.table is not None]
    return {
        "n": len(changes),
        "rows": len(changes) - len(truncates),
        "removals": sum(1 for c in changes if c.op in ("u", "d")),
        "creates": sum(1 for c in changes if c.op == "c"),
        "reads": len(reads),
        "reads_lsn": max((c.commit_lsn for c in reads), default=None),
        "lowest_lsn": min(c.commit_lsn for c in changes),
        "trunc": max(((c.commit_lsn, c.seq, c.ts_ms) for c in truncates), default=None),
        "toast": any(c.unchanged for c in changes),
        "schema": min(schemas, default=None),
        "schema_max": max(schemas, default=None),
        "table": min(tables, default=None),
        "table_max": max(tables, default=None),
        "oldest_ms": min(c.ts_ms for c in changes),
        "newest_ms": max(c.ts_ms for c in changes),
        "last": max((c.commit_lsn, c.seq) for c in changes),
        "partitions": partitions,
        "offsets": offsets,
    }


def admitted(
    changes: Sequence[RawChange], fences: Fences, truncate_at: Position | None
) -> list[RawChange]:
    """The changes a keyed table's MERGE sees: those its fences admit
    (:meth:`~bridge.spark.fences.Fences.admits_change`), after the batch's own last truncate
    (bridge.spark.applier, ``_merge_keyed``)."""
    return [
        c
        for c in changes
        if fences.admits_change(c.partition, c.offset, c.op, (c.commit_lsn, c.seq))
        and (truncate_at is None or (c.commit_lsn, c.seq) > truncate_at)
    ]


def last_change_per_key(
    changes: Sequence[RawChange],
    key_indexes: Sequence[int],
    fold_unchanged: bool,
    names: Sequence[str],
) -> list[RawChange]:
    """The last change per key in (commit_lsn, seq) order, truncates left out; with
    ``fold_unchanged``, a column the last change marks unchanged takes the value of the latest
    earlier change that carried it and stays marked only if none did. Keys compare NULL-safe
    (None is one key value, as in Spark's window)."""
    per_key: dict[tuple[Any, ...], list[RawChange]] = {}
    for c in changes:
        if c.op != "t":
            per_key.setdefault(tuple(c.values[i] for i in key_indexes), []).append(c)
    keys = set(key_indexes)
    out: list[RawChange] = []
    for group in per_key.values():
        group.sort(key=lambda c: (c.commit_lsn, c.seq))
        last = group[-1]
        if not fold_unchanged:
            out.append(last)
            continue
        values = list(last.values)
        still: list[str] = []
        for i, name in enumerate(names):
            if i in keys:
                continue
            carrier = next((c for c in reversed(group) if name not in c.unchanged), None)
            if carrier is None:
                values[i] = None
                still.append(name)
            else:
                values[i] = carrier.values[i]
        out.append(
            RawChange(
                values,
                last.op,
                last.commit_lsn,
                last.seq,
                last.ts_ms,
                last.schema,
                last.table,
                tuple(still),
                last.partition,
                last.offset,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class ArrowRows:
    """A table's last changes as Arrow, with the Spark schema Spark's path would have given
    them (for the target check of bridge.spark.driver_merge, and a DataFrame if Spark must
    write them after all)."""

    table: Any  # pyarrow.Table
    schema: T.StructType

    def to_frame(self, spark: Any) -> Any:
        return frame_of(spark, self.table, self.schema)

    def new_key_rows(self, value_columns: Sequence[str], key_columns: Sequence[str],
                     fold_unchanged: bool) -> Any:  # fmt: skip
        """bridge.spark.merge.new_key_rows: each key's last change unless a delete, unchanged
        TOAST as null, with its position (Arrow)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        rows = self.table.filter(pc.not_equal(self.table.column(tf.OP), "d"))
        columns: list[Any] = []
        for name in value_columns:
            column = rows.column(name)
            if fold_unchanged and name not in key_columns and rows.num_rows:
                unchanged = listed(rows.column(tf.UNCHANGED), name)
                column = pc.if_else(unchanged, pa.nulls(rows.num_rows, column.type), column)
            columns.append(column)
        names = [*value_columns, *tf.PERSISTED_META]
        columns.extend(rows.column(m) for m in tf.PERSISTED_META)
        return pa.Table.from_arrays(columns, names=names)


_META_TYPES: tuple[tuple[str, T.DataType], ...] = (
    (tf.OP, T.StringType()),
    (tf.COMMIT_LSN, T.LongType()),
    (tf.SEQ, T.LongType()),
    (tf.COMMIT_TS, T.TimestampType()),
    (tf.UNCHANGED, T.ArrayType(T.StringType(), True)),
)


def _arrow_type(spark_type: T.DataType) -> Any:
    import pyarrow as pa

    simple: dict[type, Any] = {
        T.BooleanType: pa.bool_(),
        T.IntegerType: pa.int32(),
        T.LongType: pa.int64(),
        T.FloatType: pa.float32(),
        T.DoubleType: pa.float64(),
        T.StringType: pa.string(),
        T.BinaryType: pa.binary(),
        T.DateType: pa.date32(),
        T.TimestampType: pa.timestamp("us", tz="UTC"),
        T.TimestampNTZType: pa.timestamp("us"),
    }
    if isinstance(spark_type, T.DecimalType):
        return pa.decimal128(spark_type.precision, spark_type.scale)
    if isinstance(spark_type, T.ArrayType):
        return pa.list_(_arrow_type(spark_type.elementType))
    return simple[type(spark_type)]


def arrow_rows(changes: Sequence[RawChange], columns: T.StructType) -> ArrowRows:
    """The changes as Arrow: the row's ``columns``, then op, position, commit time, unchanged."""
    import pyarrow as pa

    arrays = [
        pa.array([c.values[i] for c in changes], type=_arrow_type(f.dataType))
        for i, f in enumerate(columns.fields)
    ]
    meta = (
        [c.op for c in changes],
        [c.commit_lsn for c in changes],
        [c.seq for c in changes],
        [c.ts_ms * 1000 for c in changes],
        [list(c.unchanged) for c in changes],
    )
    arrays.extend(
        pa.array(values, type=_arrow_type(spark_type))
        for values, (_, spark_type) in zip(meta, _META_TYPES, strict=True)
    )
    schema = T.StructType(
        [*(T.StructField(f.name, f.dataType, True) for f in columns.fields),
         *(T.StructField(name, spark_type, True) for name, spark_type in _META_TYPES)]
    )  # fmt: skip
    return ArrowRows(pa.Table.from_arrays(arrays, names=schema.fieldNames()), schema)


def folded_arrow_rows(
    pieces: Sequence[Any], columns: T.StructType, key_columns: Sequence[str]
) -> ArrowRows:
    """The task lane's folded rows (bridge.spark.task_lane.folded_rows: one piece per task)
    as :func:`arrow_rows` gives a table's last changes: the row's ``columns`` in their Spark
    types, then op, position and commit time. ``ValueError`` where a key comes in two pieces
    (two Kafka partitions held it: its last change is not known here)."""
    import pyarrow as pa

    meta = [(name, spark_type) for name, spark_type in _META_TYPES if name != tf.UNCHANGED]
    schema = T.StructType(
        [*(T.StructField(f.name, f.dataType, True) for f in columns.fields),
         *(T.StructField(name, spark_type, True) for name, spark_type in meta)]
    )  # fmt: skip
    target = pa.schema([pa.field(f.name, _arrow_type(f.dataType)) for f in schema.fields])
    conformed = [conformed_to(target, piece) for piece in pieces]
    table = pa.concat_tables(conformed) if conformed else target.empty_table()
    if len(conformed) > 1:
        distinct = table.select(list(key_columns)).group_by(list(key_columns)).aggregate([])
        if distinct.num_rows != table.num_rows:
            raise ValueError(f"{table.num_rows - distinct.num_rows} keys in two Kafka partitions")
    return ArrowRows(table, schema)


def row_images(changes: Sequence[RawChange], columns: T.StructType) -> ArrowRows:
    """``transforms.envelope_to_images`` of a keyless table's changes (decoded ``with_before``):
    an insert, read or update adds a copy of its new row (+1; a column it marks unchanged TOAST
    taken from its old row), an update or delete removes one of its old row (-1), a truncate
    is a row of nulls (0). The changes' columns then ``COUNT_DELTA``, as Spark's images."""
    import pyarrow as pa

    names = columns.fieldNames()
    images: list[RawChange] = []
    deltas: list[int] = []

    def add(values: list[Any], change: RawChange, delta: int) -> None:
        images.append(
            RawChange(values, change.op, change.commit_lsn, change.seq, change.ts_ms,
                      change.schema, change.table, (), change.partition, change.offset)
        )  # fmt: skip
        deltas.append(delta)

    for c in changes:
        if c.op == "t":
            add([None] * len(names), c, 0)
            continue
        if c.op in ("c", "r", "u"):
            values = list(c.values)
            if c.unchanged and c.before is not None:
                for i, name in enumerate(names):
                    if name in c.unchanged:
                        values[i] = c.before[i]
            add(values, c, 1)
        if c.op in ("u", "d"):
            if c.before is None:
                raise ValueError(f"a {c.op!r} change at {(c.commit_lsn, c.seq)} without old row")
            add(list(c.before), c, -1)
    rows = arrow_rows(images, columns)
    count = T.StructField(tf.COUNT_DELTA, T.IntegerType(), True)
    return ArrowRows(
        rows.table.append_column(tf.COUNT_DELTA, pa.array(deltas, pa.int32())),
        T.StructType([*rows.schema.fields, count]),
    )
