"""A small table's batch written by the driver with delta-rs, not by Spark jobs.

Why: Delta's MERGE through Spark costs about a second per table on 2 cores whatever the batch
holds (the snapshot state of the table's new version, source materialisation, the scan for
touched files, the rewrite and the commit: a dozen Spark jobs; Delta's own floor, measured in
docs/measurements.md), and an append about half that. A table that changed by a few rows paid
it every batch, so a batch over 200 busy tables took minutes. delta-rs (the ``deltalake``
package: Delta's protocol in Rust) merges the same rows into the same table in milliseconds,
in the driver's process. Spark still does everything before: framing, decoding, fences and the
last change per key; only the final rows (bounded: at most ``ApplyConfig.driver_merge_rows``)
are collected as Arrow.

The statement is :func:`bridge.spark.merge.merge_changes`'s, clause for clause (NULL-safe key
match, the ``(commit_lsn, seq)`` guard, unchanged TOAST kept from the target, a truncate's
delete of older rows), and the commit carries what Spark's would: the fences as
``userMetadata`` and Delta's transaction (``txnAppId`` = the job, version = the batch), checked
before writing as Spark's idempotent DML checks it. So one table log serves both writers, any
Delta reader, and a restart, whichever wrote the last commit.

When (:func:`driver_write_fits`): at most ``driver_merge_rows`` changes, on a local path
(object stores would need delta-rs's own credentials). Anything that fails before the commit
(a type or table feature delta-rs does not write, a column named in another case, an error
nobody foresaw while the rows are collected) raises :class:`DriverWriteRefused`, and the
caller applies the table with Spark instead: nothing was written. A failure after the commit
(its checkpoint) is harmless the same way: Spark's MERGE of the same batch finds the
transaction recorded and skips.

A table under :data:`bridge.spark.driver_rewrite.REWRITE_MAX_BYTES` is not MERGEd: the
statement's result is computed with Arrow and the table rewritten in one commit (half the
cost; bridge.spark.driver_rewrite), or the new rows appended when no held row changes. A
table of :data:`bridge.spark.merge.DELETION_VECTORS_MIN_TABLE_BYTES` or more (or the bound
the caller gives) is not MERGEd by delta-rs either, which rewrites every file holding a
changed row: its changed rows are marked deleted with deletion vectors and the batch's rows
appended, in one commit (bridge.spark.driver_dv_merge); a table that writer cannot keep the
rules of is Spark's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal
from urllib.parse import urlparse

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from bridge.spark import transforms as tf
from bridge.spark.driver_changes import ArrowRows
from bridge.spark.driver_commit import append_rows, overwrite_rows, own_commit_refusal
from bridge.spark.driver_dv_merge import DV_WRITER, dv_merge, dv_merge_refusal
from bridge.spark.driver_rewrite import (
    Rewrite,
    read_rows,
    remember_appended,
    remember_rows,
    rewrite_fits,
    rewritten,
)
from bridge.spark.driver_table import (
    DriverWriteRefused,
    checkpoint_if_due,
    conformed,
    no_post_commit_hooks,
    pa_schema,
)
from bridge.spark.logged_table import LoggedTable
from bridge.spark.merge import (
    COMPACT_FILE_BYTES,
    DELETION_VECTORS_MIN_TABLE_BYTES,
    MergePlan,
    new_key_rows,
    type_change,
)

__all__ = [
    "DRIVER_WRITER",
    "DriverWriteRefused",
    "append_in_driver",
    "before_condition",
    "check_target",
    "commit_properties",
    "conformed",
    "done_before",
    "driver_write_fits",
    "execute_merge",
    "merge_in_driver",
    "refused_on_failure",
    "small_files",
    "write_append",
]

logger = logging.getLogger(__name__)

#: The writer's name in the job's log lines and metrics ("merge by driver"): the driver wrote
#: the batch and committed it itself (or through delta-rs where its own commit refuses a table).
DRIVER_WRITER = "driver"


@contextmanager
def refused_on_failure() -> Iterator[None]:
    """Any failure inside is :class:`DriverWriteRefused`: for the steps before a write's
    commit, where nothing is written yet, so that an error nobody foresaw (a value Arrow will
    not cast, a Spark job collecting the rows) hands the batch to Spark's path, the reference,
    instead of failing the table."""
    try:
        yield
    except DriverWriteRefused:
        raise
    except Exception as exc:
        raise DriverWriteRefused(f"preparing the write: {type(exc).__name__}: {exc}") from exc


def is_local_path(path: str) -> bool:
    """A path delta-rs reaches without credentials of its own: plain or ``file:``."""
    return urlparse(path).scheme in ("", "file")


def open_table(path: str) -> LoggedTable:
    """The Delta table at ``path`` (delta-rs and its log: milliseconds)."""
    return LoggedTable.open(path)


def table_bytes(table: LoggedTable) -> int:
    """The size of the table's live files, from its log."""
    return sum(table.file_sizes())


def small_files(table: LoggedTable) -> int:
    """The table's live files under :data:`bridge.spark.merge.COMPACT_FILE_BYTES`."""
    return sum(1 for size in table.file_sizes() if size < COMPACT_FILE_BYTES)


def driver_write_fits(
    path: str,
    changes: int,
    max_rows: int,
    opened: LoggedTable | None = None,
    max_table_bytes: int | None = None,
) -> LoggedTable | None:
    """The delta-rs table to write ``changes`` rows to at ``path``, or None when Spark should
    (too many rows; a table large enough for deletion vectors, ``max_table_bytes``, by default
    :data:`DELETION_VECTORS_MIN_TABLE_BYTES`, that bridge.spark.driver_dv_merge cannot write
    them to; a remote path, a table delta-rs cannot open).
    ``opened``: the table as an earlier call returned it and this job's writes since left it,
    used as it is.

    Brought up to date by the commits after its version, read by number
    (bridge.spark.logged_table: no listing of the log directory, which grows by a commit per
    batch). The caller drops it after a write of its own through Spark (bridge.spark.applier).
    A commit by anyone else between this and the write is met by the commit's own check: the
    version is taken, nothing is written (DriverWriteRefused), and Spark writes the batch.
    """
    if max_rows <= 0 or changes > max_rows or not is_local_path(path):
        return None
    try:
        table = opened if opened is not None else open_table(path)
        if opened is not None:
            table.update_incremental()
        if table_bytes(table) >= (max_table_bytes or DELETION_VECTORS_MIN_TABLE_BYTES):
            # Too large to rewrite what a MERGE touches: written with deletion vectors
            # (bridge.spark.driver_dv_merge) where the table allows it, else by Spark.
            refusal = dv_merge_refusal(table)
            if refusal is not None:
                logger.info("%s: %s; Spark MERGEs it", path, refusal)
                return None
    except Exception as exc:  # a log delta-rs cannot read: Spark can
        logger.info("%s: delta-rs cannot open the table (%s); Spark writes it", path, exc)
        return None
    return table


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _newer(left: str, right: str) -> str:
    """``left``'s (commit_lsn, seq) is after ``right``'s (tf.newer)."""
    lsn, seq = tf.COMMIT_LSN, tf.SEQ
    return (
        f"({left}.{lsn} > {right}.{lsn} OR "
        f"({left}.{lsn} = {right}.{lsn} AND {left}.{seq} > {right}.{seq}))"
    )


def before_condition(alias: str, position: tuple[int, int]) -> str:
    """``alias``'s (commit_lsn, seq) is before ``position`` (merge.before)."""
    lsn, seq = position
    return (
        f"({alias}.{tf.COMMIT_LSN} < {lsn} OR "
        f"({alias}.{tf.COMMIT_LSN} = {lsn} AND {alias}.{tf.SEQ} < {seq}))"
    )


def _unchanged(name: str) -> str:
    return f"array_has(s.{tf.UNCHANGED}, {_literal(name)})"


def _inserted(plan: MergePlan) -> dict[str, str]:
    """merge._inserted: a new row's values (null for unchanged TOAST) and its position."""
    values: dict[str, str] = {}
    for name in plan.value_columns:
        source = f"s.{tf.quote(name)}"
        if plan.fold_unchanged and name not in plan.key_columns:
            source = f"CASE WHEN {_unchanged(name)} THEN NULL ELSE {source} END"
        values[tf.quote(name)] = source
    values.update({m: f"s.{m}" for m in tf.PERSISTED_META})
    return values


def _updated(plan: MergePlan) -> dict[str, str]:
    """merge_changes's ``set``: the change's values, the target's for unchanged TOAST."""
    values: dict[str, str] = {}
    for name in plan.value_columns:
        if name in plan.key_columns:
            continue
        source = f"s.{tf.quote(name)}"
        if plan.fold_unchanged:
            source = f"CASE WHEN {_unchanged(name)} THEN t.{tf.quote(name)} ELSE {source} END"
        values[tf.quote(name)] = source
    values.update({m: f"s.{m}" for m in tf.PERSISTED_META})
    return values


def _source_columns(plan: MergePlan) -> list[str]:
    meta = [*tf.PERSISTED_META, tf.OP]
    return [*plan.value_columns, *meta, *([tf.UNCHANGED] if plan.fold_unchanged else [])]


def _collect(table: Any, latest: DataFrame | ArrowRows, plan: MergePlan) -> Any:
    """The rows to write, as Arrow, once the table is known to take them as Spark would."""
    columns = _source_columns(plan)
    check_target(table, latest.schema, [*plan.value_columns, *tf.PERSISTED_META])
    if isinstance(latest, ArrowRows):  # decoded in the driver (bridge.spark.driver_lane)
        return latest.table.select(columns)
    return latest.select(*[tf.quote(c) for c in columns]).toArrow()


def check_target(table: Any, source: T.StructType, assigned: Sequence[str]) -> None:
    """Every column the statement sets exists in the table, of a type that holds the source's
    values exactly (:func:`bridge.spark.merge.type_change`); else delta-rs must not write.

    Spark's MERGE fails on a column the table lacks, where delta-rs would drop the value
    silently; and a cast Spark would refuse must not be made by delta-rs instead.
    """
    try:
        fields = table.schema_fields()
        target = {f["name"]: T._parse_datatype_json_value(f["type"]) for f in fields}
    except Exception as exc:  # a type Spark's parser does not know
        raise DriverWriteRefused(f"the table's schema: {exc}") from exc
    for name in assigned:
        if name not in target:
            raise DriverWriteRefused(f"the table has no column {name!r}")
        verdict = type_change(target[name], source[name].dataType)
        if verdict != "none":
            raise DriverWriteRefused(
                f"column {name!r} is {target[name].simpleString()} in the table and "
                f"{source[name].dataType.simpleString()} in the batch"
            )


def commit_properties(app_id: str, batch_id: int, commit_metadata: str | None) -> Any:
    from deltalake import CommitProperties, Transaction

    return CommitProperties(
        custom_metadata={"userMetadata": commit_metadata} if commit_metadata else None,
        app_transactions=[Transaction(app_id, batch_id)],
    )


def done_before(table: LoggedTable, app_id: str, batch_id: int) -> bool:
    """Delta's idempotent-DML check: this job's batch ``batch_id`` already committed here."""
    done = table.transaction_version(app_id)
    return done is not None and int(done) >= batch_id


def merge_in_driver(
    table: Any,
    latest: DataFrame | ArrowRows,
    plan: MergePlan,
    app_id: str,
    batch_id: int,
    *,
    commit_metadata: str | None = None,
    max_table_bytes: int | None = None,
) -> str | None:
    """:func:`bridge.spark.merge.merge_changes` of ``latest`` into ``table`` (delta-rs; a
    table of ``max_table_bytes`` or more, by default driver_write_fits's bound, with deletion
    vectors: bridge.spark.driver_dv_merge, and then :data:`DV_WRITER` is returned)."""
    if done_before(table, app_id, batch_id):
        return None
    with refused_on_failure():  # collecting the rows
        source = _collect(table, latest, plan)
    if table_bytes(table) >= (max_table_bytes or DELETION_VECTORS_MIN_TABLE_BYTES):
        # Whatever fails is refused: before the commit nothing is in the table; after it
        # (bringing delta-rs up to date), Spark's MERGE of the batch finds its transaction.
        with refused_on_failure():
            dv_merge(table, source, plan, app_id, batch_id, commit_metadata)
        return DV_WRITER
    rewrite = _rewrite(table, source, plan)
    if rewrite is not None:
        version = table.version()
        if rewrite.rows is None:  # no row the table holds changes: append the new ones
            write_append(table, rewrite.inserted, app_id, batch_id, commit_metadata)
        else:
            write_overwrite(table, rewrite.rows, app_id, batch_id, commit_metadata)
        if table.version() == version + 1:  # this commit alone since the rows were read
            remember_rows(table, version + 1, rewrite.after())
        return None
    with refused_on_failure():  # building the statement
        builder = _merge_statement(table, source, plan, app_id, batch_id, commit_metadata)
    execute_merge(builder, table, app_id, batch_id, commit_metadata)
    return None


def _rewrite(table: Any, source: Any, plan: MergePlan) -> Rewrite | None:
    """The MERGE's result computed with Arrow (bridge.spark.driver_rewrite) for a small table,
    else None: the MERGE writes it (so it does where Arrow cannot compute it)."""
    if not rewrite_fits(table, table_bytes(table)):
        return None
    try:
        schema = pa_schema(table)
        return rewritten(read_rows(table, schema), source, plan, schema)
    except Exception as exc:
        logger.info("%s: the MERGE writes this batch (%s: %s)", table.table_uri,
                    type(exc).__name__, exc)  # fmt: skip
        return None


def _merge_statement(
    table: Any, source: Any, plan: MergePlan, app_id: str, batch_id: int,
    commit_metadata: str | None,
) -> Any:  # fmt: skip
    """merge_changes's clauses as a delta-rs MERGE of ``source`` (Arrow) into ``table``."""
    on = " AND ".join(
        f"(t.{tf.quote(k)} IS NOT DISTINCT FROM s.{tf.quote(k)})" for k in plan.key_columns
    )
    is_delete = f"s.{tf.OP} = 'd'"
    builder = table.merge(
        source,
        predicate=on,
        source_alias="s",
        target_alias="t",
        commit_properties=commit_properties(app_id, batch_id, commit_metadata),
        post_commithook_properties=no_post_commit_hooks(),
    )
    if plan.inserts_only and plan.truncate_at is None:
        builder = builder.when_not_matched_insert(updates=_inserted(plan))
    else:
        newer = _newer("s", "t")
        builder = (
            builder.when_matched_delete(predicate=f"{is_delete} AND {newer}")
            .when_matched_update(updates=_updated(plan), predicate=f"NOT ({is_delete}) AND {newer}")
            .when_not_matched_insert(updates=_inserted(plan), predicate=f"NOT ({is_delete})")
        )
    if plan.truncate_at is not None:
        builder = builder.when_not_matched_by_source_delete(
            predicate=before_condition("t", plan.truncate_at)
        )
    return builder


def execute_merge(
    builder: Any, table: LoggedTable, app_id: str, batch_id: int, commit_metadata: str | None
) -> None:
    """Run a delta-rs MERGE built with :func:`commit_properties`; a batch's commit is made
    even when it changes no row."""
    version = table.version()
    _execute(builder.execute, table, app_id, batch_id)
    if table.version() == version:
        # delta-rs makes no commit for a MERGE that changes no row; Spark's commits one all
        # the same, which is where the batch's fences and transaction are kept.
        write_append(table, _empty(table), app_id, batch_id, commit_metadata)


def write_append(
    table: LoggedTable, data: Any, app_id: str, batch_id: int, commit_metadata: str | None
) -> None:
    """Append ``data`` (in the table's schema: :func:`conformed`) in one commit carrying the
    batch's transaction and ``commit_metadata``: the driver's own commit
    (bridge.spark.driver_commit), delta-rs's where that refuses the table."""
    if own_commit_refusal(table) is None:
        append_rows(table, data, app_id, batch_id, commit_metadata)
    else:
        _write_by_delta_rs(table, data, "append", app_id, batch_id, commit_metadata)


def write_overwrite(
    table: LoggedTable, rows: Any, app_id: str, batch_id: int, commit_metadata: str | None
) -> None:
    """Replace every row of the table by ``rows`` (in its schema) in one commit carrying the
    batch's transaction and ``commit_metadata`` (the driver's own, as :func:`write_append`)."""
    if own_commit_refusal(table, overwrite=True) is None:
        overwrite_rows(table, rows, app_id, batch_id, commit_metadata)
    else:
        _write_by_delta_rs(table, rows, "overwrite", app_id, batch_id, commit_metadata)


def _write_by_delta_rs(
    table: LoggedTable, rows: Any, mode: Literal["append", "overwrite"], app_id: str,
    batch_id: int,
    commit_metadata: str | None,
) -> None:  # fmt: skip
    """delta-rs's append or overwrite, for a table the driver's own commit refuses."""
    from deltalake import write_deltalake

    properties = commit_properties(app_id, batch_id, commit_metadata)
    _execute(
        lambda: write_deltalake(table.synced(), rows, mode=mode, commit_properties=properties,
                                post_commithook_properties=no_post_commit_hooks()),
        table,
        app_id,
        batch_id,
    )  # fmt: skip


def append_in_driver(
    table: Any,
    latest: DataFrame | ArrowRows,
    plan: MergePlan,
    app_id: str,
    batch_id: int,
    *,
    commit_metadata: str | None = None,
) -> None:
    """:func:`bridge.spark.merge.append_new_keys` into ``table`` with delta-rs: the same rows
    (:func:`bridge.spark.merge.new_key_rows`), appended in one commit, no scan of the target.
    A column of the table the rows lack (dropped in the source, kept here) is null in them, as
    in Spark's append."""
    if done_before(table, app_id, batch_id):
        return
    with refused_on_failure():  # collecting the rows: nothing written yet
        if isinstance(latest, ArrowRows):  # decoded in the driver (bridge.spark.driver_lane)
            check_target(table, latest.schema, [*plan.value_columns, *tf.PERSISTED_META])
            arrow = latest.new_key_rows(plan.value_columns, plan.key_columns, plan.fold_unchanged)
        else:
            rows = new_key_rows(latest, plan)
            check_target(table, rows.schema, rows.columns)
            arrow = rows.toArrow()
        appended = conformed(table, arrow)
    version = table.version()
    write_append(table, appended, app_id, batch_id, commit_metadata)
    if table.version() == version + 1:  # this commit alone: the rows the next rewrite reads
        remember_appended(table, version + 1, appended)


def _empty(table: Any) -> Any:
    """No rows, in the table's schema: an append of it commits only its commit info."""
    return pa_schema(table).empty_table()


def _execute(execute: Any, table: LoggedTable, app_id: str, batch_id: int) -> None:
    """Run a delta-rs write of ``table.synced()`` and read its commit back into ``table``; an
    error that left nothing committed is :class:`DriverWriteRefused`.

    delta-rs commits last, then checkpoints: an error after the commit (the checkpoint's) is
    told by the batch's transaction in the table's log, and the write stands.
    """
    version = table.version()
    try:
        execute()
        table.update_incremental()
        if table.version() != version:  # delta-rs makes no commit for a MERGE that changes nothing
            checkpoint_if_due(table, table.version())  # the hooks' work, every tenth commit
    except Exception as exc:
        try:
            table.update_incremental()
            committed = done_before(table, app_id, batch_id)
        except Exception:
            committed = False
        if committed:
            logger.warning("delta-rs committed batch %d to %s but then failed: %s", batch_id,
                           table.table_uri, exc)  # fmt: skip
            return
        raise DriverWriteRefused(str(exc)) from exc
