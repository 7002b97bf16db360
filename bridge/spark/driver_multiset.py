"""A keyless table's small batch applied by the driver with delta-rs, not by Spark jobs.

Why: :func:`bridge.spark.multiset.apply_multiset` through Spark costs seconds per table and
batch whatever the batch holds (measured on the multiset tests of
``tests/spark/test_apply_batches.py``: 2.4 s per batch, 5.1 s for a batch that updates or
deletes: the net per image, the semi-join counting the table's copies, the materialised source
and Delta's MERGE, a dozen Spark jobs). A keyed table's small batch has been written by
delta-rs in milliseconds since :mod:`bridge.spark.driver_merge`; a table without a key paid
Spark's price every batch.

What: the same five steps as :mod:`bridge.spark.multiset`, on the batch's row images collected
as Arrow (at most ``driver_write_rows`` of them): records at or before the applied position and
copies of one record dropped, the changes after the batch's last truncate folded into a net
count per image, the table's current copies of those images counted (delta-rs reads the table:
a larger one than :data:`bridge.spark.merge.DELETION_VECTORS_MIN_TABLE_BYTES` declines all but
a batch of inserts, which Spark applies), and one MERGE whose
source holds a "delete all copies" row where an image's count shrinks and as many "insert"
rows as copies must be added; a batch of inserts only is appended. The commit carries the
applied position and Delta's transaction as Spark's would (:mod:`bridge.spark.driver_merge`),
so either writer may write the next batch.

What it refuses (:class:`DriverWriteRefused`, nothing written, Spark applies the table): a
column Spark compares by a normalised form (maps, arrays, structs: ``multiset.comparable``),
and a float NaN or -0.0 in an image (Spark's ``<=>`` matches NaN with NaN and -0.0 with 0.0;
Python's and DataFusion's equality may not).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from bridge.spark import transforms as tf
from bridge.spark.driver_changes import ArrowRows
from bridge.spark.driver_dv_merge import BatchDeclined
from bridge.spark.driver_merge import (
    DriverWriteRefused,
    before_condition,
    check_target,
    commit_properties,
    conformed,
    done_before,
    execute_merge,
    refused_on_failure,
    table_bytes,
    write_append,
)
from bridge.spark.driver_table import no_post_commit_hooks
from bridge.spark.merge import DELETION_VECTORS_MIN_TABLE_BYTES
from bridge.spark.multiset import MultisetBatch, Position

__all__ = ["COMPARED_NORMALISED", "multiset_in_driver"]

_KIND = "_pgbridge_kind"

#: Column types Spark's multiset matches in a normalised form (``multiset.comparable``): such a
#: table is Spark's, here and in the driver lane (bridge.spark.driver_lane).
COMPARED_NORMALISED = (T.MapType, T.ArrayType, T.StructType)


def multiset_in_driver(
    table: Any,
    images: DataFrame | ArrowRows,
    columns: T.StructType,
    applied: Position | None,
    batch: MultisetBatch,
    app_id: str,
    batch_id: int,
    *,
    commit_metadata: str | None = None,
) -> bool:
    """:func:`bridge.spark.multiset.apply_multiset` of ``images`` (``envelope_to_images``,
    conformed to ``columns``, or ``driver_changes.row_images`` of changes the driver decoded)
    into the delta-rs ``table``; False if every record was applied before (nothing written).

    Anything that fails before the commit is :class:`DriverWriteRefused`: nothing is written,
    and Spark's path, the reference, applies the batch (or dead-letters what it cannot)."""
    if batch.last is None or (applied is not None and batch.last <= applied):
        return False
    if done_before(table, app_id, batch_id):
        return True
    import pyarrow as pa

    with refused_on_failure():  # steps 2 to 5 up to the commit: nothing is written yet
        uncomparable = [f.name for f in columns.fields
                        if isinstance(f.dataType, COMPARED_NORMALISED)]  # fmt: skip
        if uncomparable:
            raise DriverWriteRefused(f"columns {uncomparable} are compared in a normalised form")
        names = columns.fieldNames()
        persisted = [*names, *tf.PERSISTED_META]
        check_target(table, images.schema, persisted)
        wanted = [*persisted, tf.OP, tf.COUNT_DELTA]
        if isinstance(images, ArrowRows):  # decoded in the driver (bridge.spark.driver_lane)
            arrow = images.table.select(wanted)
        else:
            arrow = images.select(*[tf.quote(c) for c in wanted]).toArrow()
        truncate = batch.truncate
        if truncate is not None and applied is not None and truncate <= applied:
            truncate = None  # applied before: the table holds its effect already
        fresh = _fresh_rows(arrow, applied, truncate)
        if batch.inserts_only and truncate is None:
            appended = conformed(table, arrow.take(pa.array(fresh, pa.int64())).select(persisted))
        elif table_bytes(table) >= DELETION_VECTORS_MIN_TABLE_BYTES:
            # Counting the table's copies reads it whole, and delta-rs's MERGE rewrites what it
            # touches: a large table's batch is Spark's (its MERGE writes deletion vectors).
            raise BatchDeclined("a large table without key columns: Spark's multiset MERGE")
        else:
            appended = None
            builder = _merge(table, arrow, names, persisted, fresh, truncate,
                             commit_properties(app_id, batch_id, commit_metadata))  # fmt: skip
    if appended is not None:
        write_append(table, appended, app_id, batch_id, commit_metadata)
    else:
        execute_merge(builder, table, app_id, batch_id, commit_metadata)
    return True


def _merge(
    table: Any,
    arrow: Any,
    names: Sequence[str],
    persisted: Sequence[str],
    fresh: Sequence[int],
    truncate: Position | None,
    properties: Any,
) -> Any:
    """Steps 3 to 5: the delta-rs MERGE that brings the table to the batch's counts."""
    net = _net_per_image(arrow, _images_of(arrow, names), fresh)
    current = _current_copies(table, names, net, arrow) if truncate is None else {}
    source = _actions(arrow, persisted, net, current)
    on = " AND ".join(
        [f"s.{_KIND} = 'delete'"]
        + [f"(t.{tf.quote(n)} IS NOT DISTINCT FROM s.{tf.quote(n)})" for n in names]
    )
    inserted = {tf.quote(c): f"s.{tf.quote(c)}" for c in persisted}
    builder = (
        table.merge(
            source,
            predicate=on,
            source_alias="s",
            target_alias="t",
            commit_properties=properties,
            post_commithook_properties=no_post_commit_hooks(),  # execute_merge checkpoints
        )
        .when_matched_delete()
        .when_not_matched_insert(updates=inserted, predicate=f"s.{_KIND} = 'insert'")
    )
    if truncate is not None:
        builder = builder.when_not_matched_by_source_delete(
            predicate=before_condition("t", truncate)
        )
    return builder


def _fresh_rows(arrow: Any, applied: Position | None, truncate: Position | None) -> list[int]:
    """Indices of the images to apply (multiset.py's step 2): after the applied position, one
    copy per record (``commit_lsn, seq, count delta``), no truncate marker, after the batch's
    last truncate."""
    lsns = arrow.column(tf.COMMIT_LSN).to_pylist()
    seqs = arrow.column(tf.SEQ).to_pylist()
    ops = arrow.column(tf.OP).to_pylist()
    deltas = arrow.column(tf.COUNT_DELTA).to_pylist()
    seen: set[tuple[int, int, int]] = set()
    fresh = []
    for i, (lsn, seq, op, delta) in enumerate(zip(lsns, seqs, ops, deltas, strict=True)):
        position = (lsn, seq)
        if applied is not None and position <= applied:
            continue
        if (lsn, seq, delta) in seen:
            continue
        seen.add((lsn, seq, delta))
        if op == "t" or (truncate is not None and position <= truncate):
            continue
        fresh.append(i)
    return fresh


class _Net:
    """An image's net count over the batch, its last change, and a row holding its values."""

    __slots__ = ("count", "last", "row")

    def __init__(self, count: int, last: tuple[int, int, int], row: int) -> None:
        self.count, self.last, self.row = count, last, row


def _negative_zero(value: float) -> bool:
    return value == 0.0 and math.copysign(1.0, value) < 0


def _images_of(arrow: Any, names: Sequence[str]) -> list[tuple[Hashable, ...]]:
    """Each row's image as a tuple to count by: instants and dates as their integers (Python's
    datetime holds none of PostgreSQL's extremes, such as infinity as int64's)."""
    import pyarrow as pa

    if not names:  # a table of zero columns: one image, the empty row
        return [()] * arrow.num_rows
    columns = []
    for name in names:
        column = arrow.column(name)
        if pa.types.is_timestamp(column.type) or pa.types.is_date64(column.type):
            column = column.cast(pa.int64())
        elif pa.types.is_date32(column.type):
            column = column.cast(pa.int32())
        columns.append(column.to_pylist())
    images = list(zip(*columns, strict=True))
    for image in images:
        if any(isinstance(v, float) and (math.isnan(v) or _negative_zero(v)) for v in image):
            raise DriverWriteRefused("a NaN or -0.0 in a row image")
    return images


def _net_per_image(
    arrow: Any, images: Sequence[tuple[Hashable, ...]], fresh: Sequence[int]
) -> dict[tuple[Hashable, ...], _Net]:
    """multiset.py's step 3: the fresh images folded into a net count per image (non-zero
    only), with the position of the image's last change (``(commit_lsn, seq)`` and index)."""
    lsns = arrow.column(tf.COMMIT_LSN).to_pylist()
    seqs = arrow.column(tf.SEQ).to_pylist()
    deltas = arrow.column(tf.COUNT_DELTA).to_pylist()
    net: dict[tuple[Hashable, ...], _Net] = {}
    for i in fresh:
        image = images[i]
        last = (lsns[i], seqs[i], i)
        entry = net.get(image)
        if entry is None:
            net[image] = _Net(deltas[i], last, i)
        else:
            entry.count += deltas[i]
            entry.last = max(entry.last, last)
    return {image: entry for image, entry in net.items() if entry.count != 0}


def _current_copies(
    table: Any, names: Sequence[str], net: dict[tuple[Hashable, ...], _Net], arrow: Any
) -> dict[tuple[Hashable, ...], int]:
    """multiset.py's step 4: how many copies of each image of ``net`` the table holds (the
    images' rows are in ``arrow``)."""
    import pyarrow as pa
    from deltalake import QueryBuilder

    if not net:
        return {}
    selected = ", ".join(tf.quote(n) for n in names) if names else "1 AS _pgbridge_one"
    try:  # delta-rs's own reader (DataFusion), which resolves column mapping's physical names
        query = QueryBuilder().register("t", table.synced()).execute(f"SELECT {selected} FROM t")
        held = _without_views(pa.table(query.read_all()))  # arro3 -> pyarrow (C interface)
    except Exception as exc:  # nothing written yet
        raise DriverWriteRefused(f"reading the table: {exc}") from exc
    held = _candidates(held, names, arrow.take(pa.array([e.row for e in net.values()])))
    counts: dict[tuple[Hashable, ...], int] = {}
    for image in _images_of(held, names):
        if image in net:
            counts[image] = counts.get(image, 0) + 1
    return counts


def _without_views(held: Any) -> Any:
    """DataFusion's string and binary views as plain strings and binaries (pyarrow filters
    and takes few kernels of the view types)."""
    import pyarrow as pa

    plain = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}
    schema = pa.schema([f.with_type(plain.get(f.type, f.type)) for f in held.schema])
    return held if schema == held.schema else held.cast(schema)


def _candidates(held: Any, names: Sequence[str], images: Any) -> Any:
    """The table's rows whose every value is one that column takes in some image: all rows
    that can equal an image, and few others, before they become Python values (a table of up
    to 32 MiB, a few images). Unfiltered where Arrow cannot compare a column's two types."""
    import pyarrow.compute as pc

    keep = None
    for name in names:
        try:
            values = images.column(name).cast(held.column(name).type)
            match = pc.is_in(held.column(name), value_set=values, skip_nulls=False)
        except Exception:  # a type Arrow's is_in does not take: that column does not filter
            continue
        keep = match if keep is None else pc.and_(keep, match)
    if keep is None:
        return held
    try:
        return held.filter(keep)
    except Exception:  # a column type Arrow cannot take rows of (a view type): unfiltered
        return held


def _actions(
    arrow: Any,
    persisted: Sequence[str],
    net: dict[tuple[Hashable, ...], _Net],
    current: dict[tuple[Hashable, ...], int],
) -> Any:
    """multiset.py's step 5: the MERGE's source, one row per action: where an image's count
    shrinks, a "delete" (all its copies), then one "insert" per copy to add (all the final
    copies after a delete); values from one of the image's rows, position from its last."""
    import pyarrow as pa

    value_rows: list[int] = []
    meta_rows: list[int] = []
    kinds: list[str] = []
    for image, entry in net.items():
        held = current.get(image, 0)
        final = max(0, held + entry.count)
        shrinks = final < held
        copies = final if shrinks else final - held
        actions = (["delete"] if shrinks else []) + ["insert"] * copies
        value_rows.extend([entry.row] * len(actions))
        meta_rows.extend([entry.last[2]] * len(actions))
        kinds.extend(actions)
    meta = set(tf.PERSISTED_META)
    rows = {
        True: pa.array(meta_rows, pa.int64()),
        False: pa.array(value_rows, pa.int64()),
    }
    data = {c: arrow.column(c).take(rows[c in meta]) for c in persisted}
    data[_KIND] = pa.array(kinds, pa.string())
    return pa.table(data)
