"""A large table's MERGE in the driver with deletion vectors: the changed rows are marked
deleted where they are, and their new versions appended, in one Delta commit.

Why: delta-rs writes no deletion vectors, so its MERGE rewrites every file holding a changed
row, which for a table of gigabytes and updates spread over it is the whole table each batch;
such tables took Spark's MERGE, about a second per table and batch on 2 cores whatever the
batch holds (a dozen Spark jobs), and on a database of many large busy tables that second per
table was the batch. Delta's protocol lets a writer mark rows of a file deleted with a
deletion vector instead (Spark's own MERGE does so on these tables), and that needs no
engine: read the key and position columns of the files whose statistics can hold a key of the
batch, find the rows the batch replaces, write their positions as deletion vectors and the
batch's rows as one new file, and commit. The columns read from a file are kept for the next
batches within a budget (bridge.spark.file_columns): files never change once written.

The result is :func:`bridge.spark.merge.merge_changes`'s, clause for clause: keys matched as
equal (a NULL key value declines the batch: SQL's NULL-safe match is not Arrow's join), a
matched row deleted or replaced only by a newer change (``commit_lsn``, ``seq``; a
floating-point key is refused, as SQL's equality of NaN and -0.0 is not Arrow's), a delete
inserting nothing, an insert-only plan inserting only the keys it does not find. A key that
several live rows hold (which a keyed table never has) ends as one row, not several. A batch
with a truncate or unchanged TOAST is declined (:class:`BatchDeclined`: Spark applies that
batch, the next ones come here again). The commit carries what Spark's would: the fences as
``userMetadata`` and the job's transaction, checked before writing.

Where (:func:`dv_merge_refusal`): a local table with deletion vectors enabled, no change data
feed, not append-only, that bridge.spark.driver_commit commits to (unpartitioned, no
constraint, generated or identity column, no table feature beyond
:data:`HONOURED_WRITER_FEATURES`). The commit is that module's: one file by its version
number, whatever the length of the log (bridge.spark.logged_table).
Anything else is :class:`DriverWriteRefused` before a byte is written, and Spark's MERGE
applies the table. Files written before a failed commit are left for VACUUM, as Spark leaves
them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from bridge.spark import transforms as tf
from bridge.spark.deletion_vectors import deleted_rows, write_deletion_vectors
from bridge.spark.delta_log import LogFiles
from bridge.spark.driver_commit import (
    HONOURED_WRITER_FEATURES,
    commit,
    own_commit_refusal,
    physical_names,
    removed,
    stats_kind,
    write_rows,
)
from bridge.spark.driver_table import DriverWriteRefused, pa_schema
from bridge.spark.file_columns import file_columns
from bridge.spark.logged_table import LoggedTable
from bridge.spark.merge import MergePlan

__all__ = [
    "DV_WRITER",
    "HONOURED_WRITER_FEATURES",
    "BatchDeclined",
    "DvMergeResult",
    "dv_merge",
    "dv_merge_refusal",
]

#: The writer's name in the job's log lines and metrics ("merge by deletion-vectors").
DV_WRITER = "deletion-vectors"

_FILE = "__pgbridge_file"
_ROW = "__pgbridge_row"
_SOURCE = "__pgbridge_source"


class BatchDeclined(DriverWriteRefused):
    """This batch (a truncate, unchanged TOAST, a NULL key) is not for the deletion-vector
    MERGE; the table's next batches are. Nothing was written."""


@dataclass(frozen=True)
class DvMergeResult:
    """What one MERGE did: rows marked deleted, rows written, files read for keys."""

    deleted: int
    written: int
    files_read: int
    files_in_table: int


def dv_merge_refusal(table: LoggedTable) -> str | None:
    """Why ``table`` (a local path) cannot take :func:`dv_merge`, or None (judged once per
    description of the table)."""
    return table.described("dv merge refusal", _refusal)  # type: ignore[no-any-return]


def _refusal(table: LoggedTable) -> str | None:
    protocol, metadata = table.protocol(), table.metadata()
    features = set(protocol.writer_features or ())
    config = {k: str(v).lower() for k, v in metadata.configuration.items()}
    if "deletionVectors" not in features or config.get("delta.enableDeletionVectors") != "true":
        return "the table has no deletion vectors (created with --no-deletion-vectors)"
    if config.get("delta.enableChangeDataFeed") == "true":
        return "a table with a change data feed"
    return own_commit_refusal(table, overwrite=True)  # (a MERGE deletes: not append-only)


def _candidates(
    log: LogFiles, source_keys: Mapping[str, Any], physical: Mapping[str, tuple[str, int | None]]
) -> list[dict[str, Any]]:
    """The live files whose statistics allow a key of the batch (integer and text key
    columns; a file without statistics for them, or other key types, is read)."""
    import numpy as np

    bounds = {}
    for name, values in source_keys.items():
        kind = stats_kind(values.type)
        if kind is not None:
            sorted_values = np.sort(values.to_numpy(zero_copy_only=False))
            bounds[physical[name][0]] = (kind, sorted_values)
    files = []
    for add in log.adds.values():
        stats = json.loads(add["stats"]) if add.get("stats") and bounds else None
        if stats is not None and _outside(stats, bounds):
            continue
        files.append(add)
    return files


def _outside(stats: Mapping[str, Any], bounds: Mapping[str, tuple[type, Any]]) -> bool:
    """No key value of the batch lies within the file's min..max of some key column; a
    column with one bound only (the other absent, or null) excludes by that one.

    Text bounds: code point order, which is UTF-8 byte order, Delta's. A minimum is a lower
    bound however a writer truncated it (a prefix sorts first). A maximum is an upper bound
    whatever its length, from every writer of these tables: Delta-Spark 4 truncates one to a
    prefix and a tie-breaker (U+007F or U+10FFFF) that keeps it one in UTF-8 order, or leaves
    it out; delta-rs 1.6 and this module write it whole. Delta-Spark's own data skipping
    reads the files by the same bounds, so a query by key and this MERGE see the same files."""
    import numpy as np

    low, high = stats.get("minValues") or {}, stats.get("maxValues") or {}
    for physical, (kind, values) in bounds.items():
        least: Any = low.get(physical)
        most: Any = high.get(physical)
        has_least, has_most = type(least) is kind, type(most) is kind  # (bool is no integer)
        if not (has_least or has_most):
            continue
        first = np.searchsorted(values, least, side="left") if has_least else 0
        last = np.searchsorted(values, most, side="right") if has_most else len(values)
        if first >= last:
            return True
    return False


def _matched_rows(
    log: LogFiles,
    files: Sequence[dict[str, Any]],
    columns: Sequence[tuple[str, str]],
    numbered: Any,
    keys: Sequence[str],
    batch_id: int,
) -> tuple[Any, list[Any]]:
    """The live rows of ``files`` whose keys are the batch's (``numbered``: its keys and each
    change's index, ``_SOURCE``): ``columns`` ((name, physical name)), their file's index in
    ``files`` and their position in it (``_FILE``, ``_ROW``); and each file's rows deleted
    already. One file at a time, its columns read once and kept for the next batches within
    the cache's budget (bridge.spark.file_columns), not the table's whole key column."""
    import numpy as np
    import pyarrow as pa

    pieces, already = [], []
    for index, add in enumerate(files):
        path = log.root / unquote(add["path"])
        data = file_columns.read(path, [p for _, p in columns], batch_id)
        deleted = deleted_rows(add.get("deletionVector"), log.root)
        already.append(deleted)
        piece = pa.table(
            {
                **{name: data.column(p) for name, p in columns},
                _FILE: pa.array(np.full(data.num_rows, index, dtype=np.int32)),
                _ROW: pa.array(np.arange(data.num_rows, dtype=np.int64)),
            }
        )
        for k in keys:  # the file's key types as the table's (a string read as a view)
            wanted = numbered.schema.field(k).type
            if piece.schema.field(k).type != wanted:
                at = piece.schema.get_field_index(k)
                piece = piece.set_column(at, k, piece.column(k).cast(wanted))
        if len(deleted):
            keep = np.ones(data.num_rows, dtype=bool)
            keep[np.fromiter(deleted, dtype=np.int64, count=len(deleted))] = False
            piece = piece.filter(pa.array(keep))
        if piece.num_rows:
            pieces.append(piece.join(numbered, keys=list(keys), join_type="inner"))
    return (pa.concat_tables(pieces).combine_chunks() if pieces else None), already


def dv_merge(
    table: Any,
    source: Any,
    plan: MergePlan,
    app_id: str,
    batch_id: int,
    commit_metadata: str | None,
) -> DvMergeResult:
    """:func:`bridge.spark.merge.merge_changes` of ``source`` (Arrow: each key's last change,
    the columns of bridge.spark.driver_merge._source_columns) into ``table`` (delta-rs, a
    local path :func:`dv_merge_refusal` accepts), committed as one version."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if plan.truncate_at is not None or plan.fold_unchanged:
        raise BatchDeclined("a truncate or unchanged TOAST: Spark's MERGE applies this batch")
    keys = list(plan.key_columns)
    target_schema = pa_schema(table)
    try:
        source_keys = {k: source.column(k).cast(target_schema.field(k).type) for k in keys}
    except Exception as exc:
        raise DriverWriteRefused(f"the batch's keys: {exc}") from exc
    if any(pa.types.is_floating(column.type) for column in source_keys.values()):
        # Spark's equality matches NaN with NaN and -0.0 with 0.0; Arrow's join need not.
        raise DriverWriteRefused("a floating-point key column: Spark's MERGE matches it")
    if any(column.null_count for column in source_keys.values()):
        raise BatchDeclined("a NULL key value: Spark's MERGE matches it")
    table.update_incremental()  # (commits by number: a writer besides this job, if any)
    log = table.log
    physical = physical_names(table)
    files = _candidates(log, source_keys, physical)
    meta = [tf.COMMIT_LSN, tf.SEQ]
    numbered = pa.table({**source_keys, _SOURCE: pa.array(range(source.num_rows), pa.int64())})
    columns = [(c, physical[c][0]) for c in [*keys, *meta]]
    matched, already = _matched_rows(log, files, columns, numbered, keys, batch_id)
    # Per change of the batch: a row of the table holds its key (found), and that row is
    # replaced by it (newer). Numpy masks, not Python sets: the threads that MERGE tables side
    # by side would otherwise take turns at the interpreter for each change.
    found = np.zeros(source.num_rows, dtype=bool)
    newer_found = np.zeros(source.num_rows, dtype=bool)
    replaced = None
    deletions: dict[int, Any] = {}
    if matched is not None and matched.num_rows:
        found[matched.column(_SOURCE).to_numpy()] = True
        if not plan.inserts_only:
            matched_sources = matched.column(_SOURCE)
            s_lsn = pc.take(source.column(tf.COMMIT_LSN), matched_sources)
            s_seq = pc.take(source.column(tf.SEQ), matched_sources)
            t_lsn, t_seq = matched.column(tf.COMMIT_LSN), matched.column(tf.SEQ)
            newer = pc.or_(
                pc.greater(s_lsn, t_lsn),
                pc.and_(pc.equal(s_lsn, t_lsn), pc.greater(s_seq, t_seq)),
            )
            newer = pc.fill_null(newer, False)
            replaced = matched.filter(newer)
            deletions = _rows_by_file(replaced)
            newer_found[replaced.column(_SOURCE).to_numpy()] = True
    # What is written: the unmatched changes that are not deletes, and the matched ones that
    # replace an older row and are not deletes.
    not_delete = pc.fill_null(pc.not_equal(source.column(tf.OP), "d"), True).to_numpy(
        zero_copy_only=False
    )
    chosen = np.flatnonzero(not_delete & (~found | newer_found))
    rows = source.take(pa.array(chosen, pa.int64()))
    # Columns of the table the batch does not set (a column dropped in the source and kept
    # here): a replaced row keeps its values, as Spark's MERGE's update leaves them; a new
    # row has them null, as its insert does.
    assigned = {*plan.value_columns, *tf.PERSISTED_META}
    kept = [f.name for f in target_schema if f.name not in assigned]
    if kept and replaced is not None and replaced.num_rows:
        carried = _carried(log, files, replaced, [(c, physical[c][0]) for c in kept])
        at = np.full(source.num_rows, -1, dtype=np.int64)
        at[carried.column(_SOURCE).to_numpy()] = np.arange(carried.num_rows)
        where = at[chosen]
        positions = pa.array(where, pa.int64(), mask=where < 0)
        for name in kept:
            rows = rows.append_column(name, carried.column(name).take(positions))
    return _commit(
        table, log, files, already, deletions, rows, keys, app_id, batch_id, commit_metadata,
        physical,
    )  # fmt: skip


def _rows_by_file(replaced: Any) -> dict[int, Any]:
    """The replaced rows' positions (``_ROW``, a numpy array) per file index (``_FILE``)."""
    import numpy as np

    files = replaced.column(_FILE).to_numpy()
    rows = replaced.column(_ROW).to_numpy()
    order = np.argsort(files, kind="stable")
    files, rows = files[order], rows[order]
    starts = np.flatnonzero(np.r_[True, files[1:] != files[:-1]])
    return {
        int(files[at]): rows[at:stop]
        for at, stop in zip(starts, [*starts[1:], len(files)], strict=True)
    }


def _carried(
    log: LogFiles,
    files: Sequence[dict[str, Any]],
    replaced: Any,
    columns: Sequence[tuple[str, str]],
) -> Any:
    """``columns`` ((name, physical name)) of the replaced target rows, with the index of the
    change that replaces each (``_SOURCE``)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    pieces = []
    for index in np.unique(replaced.column(_FILE).to_numpy()).tolist():
        mine = replaced.filter(pc.equal(replaced.column(_FILE), index))
        data = pq.read_table(
            log.root / unquote(files[index]["path"]), columns=[p for _, p in columns]
        )
        taken = data.take(mine.column(_ROW))
        pieces.append(
            pa.table({**{n: taken.column(p) for n, p in columns}, _SOURCE: mine.column(_SOURCE)})
        )
    return pa.concat_tables(pieces)


def _commit(
    table: LoggedTable,
    log: LogFiles,
    files: Sequence[dict[str, Any]],
    already: Sequence[Any],
    deletions: Mapping[int, list[int]],
    rows: Any,
    keys: Sequence[str],
    app_id: str,
    batch_id: int,
    commit_metadata: str | None,
    physical: Mapping[str, tuple[str, int | None]],
) -> DvMergeResult:
    from pyroaring import BitMap

    now = int(time.time() * 1000)
    actions: list[dict[str, Any]] = []
    order = sorted(deletions)
    bitmaps = [BitMap(already[i]) | BitMap(deletions[i]) for i in order]
    if bitmaps:
        vectors = write_deletion_vectors(log.root, bitmaps)
        for index, descriptor in zip(order, vectors.descriptors, strict=True):
            old = files[index]
            stats = json.loads(old["stats"]) if old.get("stats") else {}
            stats["tightBounds"] = False
            actions.append(removed(old, now))
            actions.append(
                {
                    "add": {
                        **old,
                        "dataChange": True,
                        "stats": json.dumps(stats),
                        "deletionVector": descriptor,
                    }
                }
            )
    written = 0
    if rows.num_rows:
        actions.append({"add": write_rows(table, rows, physical, now)})
        written = rows.num_rows
    deleted = sum(len(v) for v in deletions.values())
    commit(
        table,
        actions,
        operation="MERGE",
        parameters={"predicate": json.dumps(list(keys))},
        blind_append=False,
        app_id=app_id,
        batch_id=batch_id,
        commit_metadata=commit_metadata,
        metrics={
            "numTargetRowsDeleted": deleted,
            "numOutputRows": written,
            "numDeletionVectorsAdded": len(bitmaps),
        },
        engine="pgbridge deletion-vector merge",
    )
    return DvMergeResult(deleted, written, len(files), len(table.log.adds))
