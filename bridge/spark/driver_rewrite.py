"""A small keyed table's MERGE computed in the driver with Arrow and committed as one rewrite
of the table.

Why: delta-rs's MERGE costs about 20 ms per table and batch whatever the batch holds
(DataFusion plans and runs the statement; measured in docs/measurements.md), and over 200
changed tables that was most of a batch. A table this small is one file or a few, which the
MERGE rewrites anyway when it updates or deletes a row; reading the table (delta-rs's scan,
which applies column mapping and deletion vectors), applying the batch's last change per key
with Arrow compute, and overwriting the table in one commit gives the same rows for a third
to a half of the cost. A batch that only inserts new keys is appended, not rewritten.

The result is :func:`bridge.spark.merge.merge_changes`'s, clause for clause: keys matched
NULL-safely (a NULL key value is left to the MERGE, which matches it), a matched row is
updated or deleted only by a newer change (``commit_lsn``, ``seq``), unchanged TOAST keeps the
target's value (NULL in an inserted row), a delete inserts nothing, a truncate deletes the
unmatched rows older than it, and an insert-only plan inserts what it does not find.

Where it does not apply (:func:`rewrite_fits`): a table above :data:`REWRITE_MAX_BYTES`, a
partitioned one, or one with a change data feed (an overwrite would record every row as
changed). Anything Arrow cannot do here raises (a NULL or floating-point key value among
them: SQL's equality is not Arrow's hash), and the caller MERGEs instead.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bridge.spark import transforms as tf
from bridge.spark.driver_table import as_type, conformed_to
from bridge.spark.merge import MergePlan

__all__ = [
    "REWRITE_MAX_BYTES",
    "Rewrite",
    "listed",
    "read_rows",
    "remember_appended",
    "remember_rows",
    "rewrite_fits",
    "rewritten",
    "table_identity",
]

#: The largest table (its live files' bytes) the driver rewrites whole. Measured against
#: delta-rs's MERGE of 17 changes into one file, the table read each time (docs/measurements.md):
#: 0.08 MB 18 vs 28 ms, 0.69 MB 54 vs 72 ms, 3.16 MB 135 vs 102 ms; even at about 1.5 MB.
REWRITE_MAX_BYTES = 1024 * 1024

#: The rows this process wrote last to small tables, kept (least recently used first out) up
#: to this many bytes of Arrow memory: the next batch of a table nobody else wrote since
#: starts from them instead of reading the table again (a third of a rewrite's cost).
HELD_ROWS_BYTES = 128 * 1024 * 1024

_TARGET_ROW = "_pgbridge_target_row"
_SOURCE_ROW = "_pgbridge_source_row"


@dataclass(frozen=True)
class Rewrite:
    """What the batch does to the table: ``rows`` is the whole table afterwards, or None when
    no row it holds changes (then ``inserted`` is appended, possibly nothing, to ``held``)."""

    rows: Any | None  # pyarrow.Table in the table's schema
    inserted: Any  # pyarrow.Table in the table's schema
    held: Any  # the table's rows before

    def after(self) -> Any:
        """The table's rows once the batch is committed."""
        import pyarrow as pa

        if self.rows is not None:
            return self.rows
        return pa.concat_tables([self.held, self.inserted]).combine_chunks()


class _HeldRows:
    """Each small table's rows as this process last committed them, by the table's version:
    at the same version of the same table (its Delta id) the log says the same, so they are
    the table's rows; any other commit (Spark's, another writer's) moves the version on."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._rows: OrderedDict[tuple[str, str], tuple[int, Any]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, table: Any, schema: Any) -> Any | None:
        key = table_identity(table)
        with self._lock:
            held = self._rows.get(key)
            if held is None or held[0] != table.version() or held[1].schema != schema:
                return None
            self._rows.move_to_end(key)
            return held[1]

    def at(self, table: Any, version: int) -> Any | None:
        """The rows held for ``table`` at ``version``, if those are the ones held."""
        with self._lock:
            held = self._rows.get(table_identity(table))
            return held[1] if held is not None and held[0] == version else None

    def put(self, table: Any, version: int, rows: Any) -> None:
        key = table_identity(table)
        with self._lock:
            self._drop(key)
            if rows.nbytes > self.budget:
                return
            self._rows[key] = (version, rows)
            self._bytes += rows.nbytes
            while self._bytes > self.budget:
                self._drop(next(iter(self._rows)))

    def _drop(self, key: tuple[str, str]) -> None:
        held = self._rows.pop(key, None)
        if held is not None:
            self._bytes -= held[1].nbytes


_held_rows = _HeldRows(HELD_ROWS_BYTES)


def table_identity(table: Any) -> tuple[str, str]:
    """The table's path and Delta id: a table dropped and created again at the same path is
    another table, whose versions count again from 0."""
    return (table.table_uri, str(table.metadata().id))


def remember_rows(table: Any, version: int, rows: Any) -> None:
    """``rows`` are the table's at ``version``, which this process just committed."""
    _held_rows.put(table, version, rows)


def remember_appended(table: Any, version: int, appended: Any) -> None:
    """``appended`` were committed as ``version`` on top of ``version - 1`` alone: with the
    rows held at ``version - 1`` (if any), they are the table's rows at ``version``. A batch
    of new keys is appended, not rewritten; without this the table's next rewrite read the
    whole table again (18% of the rewrites in the 200-table freshness bench)."""
    import pyarrow as pa

    held = _held_rows.at(table, version - 1)
    if held is not None and held.schema == appended.schema:
        _held_rows.put(table, version, pa.concat_tables([held, appended]))


def rewrite_fits(table: Any, table_bytes: int) -> bool:
    """The table is small, unpartitioned and without a change data feed."""
    if table_bytes > REWRITE_MAX_BYTES:
        return False
    metadata = table.metadata()
    if metadata.partition_columns:
        return False
    feed = str(metadata.configuration.get("delta.enableChangeDataFeed", "false"))
    return feed.lower() != "true"


def read_rows(table: Any, schema: Any) -> Any:
    """Every live row of ``table`` (delta-rs's scan: column mapping and deletion vectors
    resolved), in ``schema`` (the table's, with plain strings and binaries where DataFusion
    gives views); the rows this process committed last when the table has not moved since."""
    import pyarrow as pa

    held = _held_rows.get(table, schema)
    if held is not None:
        return held
    rows = pa.table(table.scan())  # arro3 -> pyarrow through the C stream interface
    return rows.select(schema.names).cast(schema)


def listed(lists: Any, name: str) -> Any:
    """Per row, whether the list column ``lists`` holds ``name`` (false for a null list)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lists = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    rows = len(lists)
    if rows == 0:
        return pa.array([], pa.bool_())
    hits = pc.list_parent_indices(lists).filter(pc.equal(pc.list_flatten(lists), name))
    return pc.is_in(_positions(rows), value_set=hits.cast(pa.int64()))


def rewritten(target: Any, source: Any, plan: MergePlan, schema: Any) -> Rewrite:
    """merge_changes's MERGE of ``source`` (the batch's last change per key: value columns,
    position, op and, with ``plan.fold_unchanged``, the unchanged-TOAST lists) into ``target``
    (the table's rows, in ``schema``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = list(plan.key_columns)
    for key in keys:
        if target.column(key).null_count or source.column(key).null_count:
            raise ValueError(f"key column {key!r} holds a NULL: the MERGE matches it")
        if pa.types.is_floating(target.column(key).type):
            # Arrow's hashes tell -0.0 from 0.0, which SQL's equality does not.
            raise ValueError(f"key column {key!r} is floating point: the MERGE matches it")
    matched_t, matched_s = _matched(target, source, keys)
    is_delete = pc.equal(source.column(tf.OP), "d").fill_null(False)
    if plan.inserts_only and plan.truncate_at is None:
        changed = pa.array([], pa.int64())
        deleted = pa.array([], pa.int64())
        changed_by = pa.array([], pa.int64())
        insert = _not_in(source.num_rows, matched_s)
    else:
        newer = _newer(source, matched_s, target, matched_t)
        deletes = pc.and_(newer, is_delete.take(matched_s))
        updates = pc.and_(newer, pc.invert(is_delete.take(matched_s)))
        changed, changed_by = matched_t.filter(updates), matched_s.filter(updates)
        deleted = matched_t.filter(deletes)
        insert = pc.and_(_not_in(source.num_rows, matched_s), pc.invert(is_delete))
    truncated = pa.array([], pa.int64())
    if plan.truncate_at is not None:
        unmatched = _not_in(target.num_rows, matched_t)
        older = _before(target, plan.truncate_at)
        truncated = _indices(pc.and_(unmatched, older))
    inserted = _inserted(source, _indices(insert), plan, schema)
    if len(changed) == 0 and len(deleted) == 0 and len(truncated) == 0:
        return Rewrite(None, inserted, target)
    gone = pa.chunked_array([changed, deleted, truncated], pa.int64())
    kept = target.filter(_not_in(target.num_rows, gone))
    updated = _updated(target, changed, source, changed_by, plan, schema)
    # One chunk: the rows are held for the next batch (_HeldRows), whose Arrow calls would
    # otherwise pay per chunk of every batch before.
    rows = pa.concat_tables([kept, updated, inserted]).combine_chunks()
    return Rewrite(rows, inserted, target)


def _matched(target: Any, source: Any, keys: Sequence[str]) -> tuple[Any, Any]:
    """The (target row, source row) pairs whose keys are equal (no key is NULL here): a hash
    lookup for one key column, a hash join for several (Acero's start costs about 1 ms)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(keys) == 1:
        key = keys[0]
        values = source.column(key).cast(target.column(key).type)
        found = pc.index_in(target.column(key), value_set=values)
        found = found.combine_chunks() if isinstance(found, pa.ChunkedArray) else found
        hit = pc.is_valid(found)
        return pc.indices_nonzero(hit).cast(pa.int64()), found.filter(hit).cast(pa.int64())
    left = pa.table(
        [*(target.column(k) for k in keys), _positions(target.num_rows)],
        names=[*keys, _TARGET_ROW],
    )
    right = pa.table(
        [
            *(source.column(k).cast(target.column(k).type) for k in keys),
            _positions(source.num_rows),
        ],
        names=[*keys, _SOURCE_ROW],
    )
    pairs = left.join(right, keys=list(keys), join_type="inner")
    return (
        pairs.column(_TARGET_ROW).combine_chunks(),
        pairs.column(_SOURCE_ROW).combine_chunks(),
    )


def _positions(rows: int) -> Any:
    """0, 1, ..., rows - 1 (Int64), built by Arrow: a Python range costs 75 ns a row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    every = pc.fill_null(pa.nulls(rows, pa.bool_()), True)
    return pc.indices_nonzero(every).cast(pa.int64())


def _newer(source: Any, source_rows: Any, target: Any, target_rows: Any) -> Any:
    """tf.newer("s", "t") for each pair, SQL's three-valued logic, unknown as false."""
    import pyarrow.compute as pc

    s_lsn = source.column(tf.COMMIT_LSN).take(source_rows)
    t_lsn = target.column(tf.COMMIT_LSN).take(target_rows)
    s_seq = source.column(tf.SEQ).take(source_rows)
    t_seq = target.column(tf.SEQ).take(target_rows)
    later = pc.and_kleene(pc.equal(s_lsn, t_lsn), pc.greater(s_seq, t_seq))
    return pc.or_kleene(pc.greater(s_lsn, t_lsn), later).fill_null(False)


def _before(target: Any, position: tuple[int, int]) -> Any:
    """merge.before("t", position) per target row, unknown as false."""
    import pyarrow.compute as pc

    lsn, seq = position
    t_lsn, t_seq = target.column(tf.COMMIT_LSN), target.column(tf.SEQ)
    same = pc.and_kleene(pc.equal(t_lsn, lsn), pc.less(t_seq, seq))
    return pc.or_kleene(pc.less(t_lsn, lsn), same).fill_null(False)


def _not_in(rows: int, indices: Any) -> Any:
    """Per row of ``rows``, whether its index is not among ``indices``."""
    import pyarrow.compute as pc

    return pc.invert(pc.is_in(_positions(rows), value_set=indices))


def _indices(mask: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.indices_nonzero(mask).cast(pa.int64()) if len(mask) else pa.array([], pa.int64())


def _updated(target: Any, rows: Any, source: Any, by: Any, plan: MergePlan, schema: Any) -> Any:
    """merge_changes's ``set``: the source's values and position, the target's keys, the
    target's value where the change marks a column unchanged TOAST, and the target's value
    of a column the batch does not have."""
    import pyarrow as pa
    import pyarrow.compute as pc

    unchanged = source.column(tf.UNCHANGED).take(by) if plan.fold_unchanged else None
    marked = _marked(unchanged, plan)
    in_source = set(source.column_names)  # (a property building a new list at each use)
    from_source = [f.name for f in schema if f.name not in plan.key_columns and f.name in in_source]
    # Whole tables taken in one call each: a call per column costs more than the rows do in
    # a small table's batch (a rewrite of 300 rows by 20 changes: most of its time was
    # pyarrow.compute's per-call overhead).
    held_rows = target.select(schema.names).take(rows)
    changed_rows = source.select(from_source).take(by)
    columns = []
    for field in schema:
        held = held_rows.column(field.name)
        if field.name not in from_source:
            columns.append(held)
            continue
        value = as_type(changed_rows.column(field.name), field.type)
        if field.name in marked:
            value = pc.if_else(listed(unchanged, field.name), held, value)
        columns.append(value)
    return pa.Table.from_arrays(columns, schema=schema)


def _folded(plan: MergePlan) -> set[str]:
    """The columns an unchanged-TOAST mark applies to: values, not keys."""
    return set(plan.value_columns) - set(plan.key_columns)


def _marked(unchanged: Any, plan: MergePlan) -> set[str]:
    """The value columns some row of ``unchanged`` (the rows' unchanged-TOAST lists, or None)
    marks: only those need a per-row choice (most batches mark none)."""
    import pyarrow.compute as pc

    if unchanged is None:
        return set()
    names = pc.list_flatten(unchanged)
    if len(names) == 0:
        return set()
    return {n for n in pc.unique(names).to_pylist() if n is not None} & _folded(plan)


def _inserted(source: Any, rows: Any, plan: MergePlan, schema: Any) -> Any:
    """merge._inserted: a new row's values (NULL for unchanged TOAST, and for a column the
    batch does not have) and its position."""
    import pyarrow as pa
    import pyarrow.compute as pc

    unchanged = source.column(tf.UNCHANGED).take(rows) if plan.fold_unchanged else None
    in_source = set(source.column_names)  # (a property building a new list at each use)
    new_rows = conformed_to(
        schema, source.select([f.name for f in schema if f.name in in_source]).take(rows)
    )
    for name in _marked(unchanged, plan):
        index = schema.get_field_index(name)
        field = schema.field(index)
        blanked = pc.if_else(
            listed(unchanged, name), pa.nulls(len(rows), field.type), new_rows.column(index)
        )
        new_rows = new_rows.set_column(index, field, blanked)
    return new_rows
