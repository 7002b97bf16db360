"""MERGE of one table's micro-batch into its Delta table, idempotently.

Exactly once rests on two independent guards:

* Delta's idempotent DML: the MERGE runs with ``spark.databricks.delta.write.txnAppId`` /
  ``txnVersion`` set to (the job's app id, the micro-batch id). Delta records the pair in the
  table's log in the same commit, and skips a later write whose version is not above the
  recorded one. A micro-batch replayed after a crash between the Delta commit and the
  checkpoint is therefore a no-op, per table, even if only some of its tables were committed.
  Everything a batch does to a table is that one MERGE (truncate included), so one
  (app id, batch id) pair covers it.
* Every row stores the (commit_lsn, seq) of the change that wrote it, and a change applies only
  when it is newer. This also makes resends by an at-least-once producer harmless.

Schema changes (new columns, widened types) and table creation are separate commits made
*before* the MERGE, outside the idempotency window (they would otherwise consume the batch's
txnVersion); all are idempotent by themselves.

A column whose type changed in PostgreSQL (``ALTER COLUMN … TYPE``) is handled by what Delta can
do in place (:func:`type_change`): a type the Delta column already holds exactly (a narrowing,
``bigint`` -> ``int``) changes nothing; a widening Delta supports (``int`` -> ``bigint``,
``float`` -> ``double``, a larger decimal, integers to a wide enough decimal or to double,
``date`` -> ``timestamp_ntz``) is applied with Delta's type widening (table feature
``typeWidening``, readers need Delta 3.2+); anything else (``int`` -> ``text``, say) is a
:class:`TableApplyError` naming the column and both types, so the table's records go to the
dead-letter table rather than being cast wrongly.

Columns carry PostgreSQL's own names (``Id Part``, ``naïve``, ``日本``): tables are created with
Delta column mapping (``delta.columnMapping.mode=name``), which allows any character, and a table
created before without it is switched to it when a column needs it. Delta compares column names
case-insensitively, so two columns whose names differ only in case (legal in PostgreSQL) are a
:class:`TableApplyError` (the job dead-letters the batch's records of that table).

Keys are matched NULL-safe (``<=>``): with ``message.key.columns`` a key column may hold NULL.
Tables without key columns are applied as multisets by :mod:`bridge.spark.multiset`.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from bridge.spark import transforms as tf
from bridge.spark.columns import missing_literal
from bridge.spark.errors import TableApplyError

__all__ = [
    "COMPACT_AT_FILES",
    "COMPACT_FILE_BYTES",
    "KEY_COLUMNS_PROPERTY",
    "META_FIELDS",
    "TOPIC_PROPERTY",
    "MergePlan",
    "append_new_keys",
    "check_names",
    "clear_uncommitted_log",
    "compact",
    "ensure_table",
    "idempotent_append",
    "idempotent_writes",
    "merge_changes",
    "new_key_rows",
    "small_tables_rewrite",
    "type_change",
]

logger = logging.getLogger(__name__)

#: Table property holding the key (replica identity) columns, comma-separated: a batch with only
#: a truncate has no keyed record to learn them from.
KEY_COLUMNS_PROPERTY = "pgbridge.keyColumns"
COLUMN_MAPPING_PROPERTY = "delta.columnMapping.mode"
TOPIC_PROPERTY = "pgbridge.topic"
#: Columns added with a default whose older rows still wait for the value (base64 of a JSON
#: object: name -> the reader schema of bridge.spark.columns.missing_literal). Set before the
#: columns are added, removed after the backfill: a crash in between redoes the backfill.
PENDING_BACKFILL_PROPERTY = "pgbridge.pendingBackfill"

_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
_MERGE_DELETION_VECTORS = "spark.databricks.delta.merge.deletionVectors.persistent"

#: Below this table size a MERGE rewrites the files it touches instead of writing deletion
#: vectors. A deletion vector spares rewriting a large file, but costs eight more Spark jobs
#: per MERGE (~1.5 s of driver time on 2 cores), which a small file's rewrite does not.
#: Measured (one-row MERGE, warm session, 2 cores): a table of a few kB 3.0 s rewriting vs
#: 3.6 s with deletion vectors; one 37 MB file 3.2 vs 3.6 s; one 148 MB file 5.1 vs 3.1 s.
DELETION_VECTORS_MIN_TABLE_BYTES = 32 * 1024 * 1024

#: pgbridge's columns beside the source's in every keyed and keyless table: each row's position.
META_FIELDS = (
    T.StructField(tf.COMMIT_LSN, T.LongType()),
    T.StructField(tf.SEQ, T.LongType()),
    T.StructField(tf.COMMIT_TS, T.TimestampType()),
)


#: Live files at which the job compacts a table it writes. A busy table gains a file or more
#: per commit (one a second with the default trigger), and readers open every one. Spark's
#: writes are compacted by Delta's auto compaction (the job switches it on, bridge.spark.
#: applier.job_conf) at its default of 50 files; delta-rs's by :func:`compact` at the same
#: count (delta-rs's own OPTIMIZE refuses tables with column mapping, which the job's have).
COMPACT_AT_FILES = 50

#: Files below this size are the small ones compaction merges and counts (Delta's auto
#: compaction's own bound): OPTIMIZE's default (1 GiB) would rewrite every file of a large
#: table each time, where the point is the batches' small files.
COMPACT_FILE_BYTES = 64 * 1024 * 1024
_OPTIMIZE_MIN_FILE_SIZE = "spark.databricks.delta.optimize.minFileSize"


@dataclass(frozen=True, slots=True)
class MergePlan:
    """What one MERGE does. ``truncate_at``: the batch's last truncate position, if any;
    ``inserts_only``: every change is an insert (op ``c``) or a snapshot read no row of the
    table is older than (bridge.spark.fences, the floor), so no row can need an update or a
    delete (a key an insert finds is a resend of it, or of an older change a later one already
    overwrote; a key a read finds holds that read or something newer)."""

    key_columns: tuple[str, ...]
    value_columns: tuple[str, ...]
    truncate_at: tuple[int, int] | None = None
    fold_unchanged: bool = False
    inserts_only: bool = False


def compact(spark: Any, path: str, commit_metadata: str | None = None) -> None:
    """Bin-pack the table's small files (Delta's OPTIMIZE of the files under
    :data:`COMPACT_FILE_BYTES`, and of those deletion vectors mark mostly deleted): a commit
    that changes no data, which readers and Delta streams skip. ``commit_metadata`` becomes
    its ``userMetadata``, so the newest commit still carries the table's fences."""
    from delta.tables import DeltaTable

    if commit_metadata is not None:
        spark.conf.set(_USER_METADATA, commit_metadata)
    spark.conf.set(_OPTIMIZE_MIN_FILE_SIZE, str(COMPACT_FILE_BYTES))
    try:
        DeltaTable.forPath(spark, path).optimize().executeCompaction()
    finally:
        spark.conf.unset(_USER_METADATA)
        spark.conf.unset(_OPTIMIZE_MIN_FILE_SIZE)


@contextmanager
def idempotent_writes(
    spark: Any, app_id: str, version: int, commit_metadata: str | None = None
) -> Iterator[None]:
    """Delta DML inside is skipped if (app_id, version) was already committed to its table;
    ``commit_metadata`` becomes the commit's ``userMetadata`` (see bridge.spark.fences)."""
    spark.conf.set(_TXN_APP_ID, app_id)
    spark.conf.set(_TXN_VERSION, str(version))
    if commit_metadata is not None:
        spark.conf.set(_USER_METADATA, commit_metadata)
    try:
        yield
    finally:
        # Unset even on failure: left set, it would make the next unrelated write a no-op.
        spark.conf.unset(_TXN_APP_ID)
        spark.conf.unset(_TXN_VERSION)
        spark.conf.unset(_USER_METADATA)


@contextmanager
def small_tables_rewrite(spark: Any, path: str) -> Iterator[None]:
    """A MERGE inside rewrites the touched files of a table smaller than
    ``DELETION_VECTORS_MIN_TABLE_BYTES`` instead of writing deletion vectors (tables with
    deletion vectors on keep them for larger sizes).

    The size is the table's latest snapshot, whose state the MERGE computes anyway (Delta
    caches it on the snapshot), so asking costs no extra Spark job. The setting is per
    session, and each applying thread has its own.
    """
    small = _latest_snapshot(spark, path).sizeInBytes() < DELETION_VECTORS_MIN_TABLE_BYTES
    spark.conf.set(_MERGE_DELETION_VECTORS, "false" if small else "true")
    try:
        yield
    finally:
        spark.conf.unset(_MERGE_DELETION_VECTORS)


def _latest_snapshot(spark: Any, path: str) -> Any:
    """The Delta table's latest loaded snapshot (a JVM object), as Delta caches it: reading its
    size or metadata starts no Spark job."""
    log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    return log.unsafeVolatileSnapshot()


def clear_uncommitted_log(spark: Any, path: str) -> None:
    """Remove a ``_delta_log`` that holds no commit yet, before creating the table there.

    A job killed while creating a table can leave ``_delta_log/`` (with Delta's staged-commit
    folder) but no commit; Delta then refuses ``createIfNotExists`` at that location for good
    (DELTA_TABLE_NOT_FOUND), so the restarted job would fail at every batch. Without a commit
    there is no table, so nothing is lost by removing it. Through Hadoop's file system, so any
    storage Spark writes to works alike.
    """
    jvm = spark.sparkContext._jvm
    log = jvm.org.apache.hadoop.fs.Path(path.rstrip("/") + "/_delta_log")
    fs = log.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(log):
        return
    commits = [
        status.getPath().getName()
        for status in fs.listStatus(log)
        if status.isFile() and status.getPath().getName()[:1].isdigit()
    ]
    if not commits:
        logger.warning("%s: removing a _delta_log without commits (a creation interrupted)", path)
        fs.delete(log, True)


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def table_key_columns(spark: Any, path: str) -> tuple[str, ...]:
    """The key columns recorded in an existing table's properties (empty if none)."""
    from delta.tables import DeltaTable

    detail = DeltaTable.forPath(spark, path).detail().select("properties").first()
    value = (detail["properties"] or {}).get(KEY_COLUMNS_PROPERTY, "") if detail else ""
    return tuple(c for c in str(value).split(",") if c)


# Characters Delta refuses in column names unless column mapping is on.
_NEEDS_MAPPING = frozenset(" ,;{}()\n\t=")


def check_names(topic: str, columns: T.StructType) -> None:
    """Refuse source columns Delta or pgbridge cannot hold (TableApplyError)."""
    clash = [f.name for f in columns.fields if f.name.startswith("_pgbridge_")]
    if clash:
        raise TableApplyError(
            topic, f"source columns {clash} clash with pgbridge's metadata columns"
        )
    seen: dict[str, str] = {}
    for f in columns.fields:
        other = seen.setdefault(f.name.lower(), f.name)
        if other != f.name:
            raise TableApplyError(
                topic,
                f"columns {other!r} and {f.name!r} differ only in case, and Delta column names "
                "are case-insensitive",
            )


def is_delta_table(spark: Any, path: str) -> bool:
    """Whether a Delta table is at ``path``."""
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, path))


def ensure_table(
    spark: Any,
    path: str,
    columns: T.StructType,
    key_columns: Sequence[str],
    topic: str,
    metadata: Sequence[T.StructField] = META_FIELDS,
    properties: Mapping[str, str] | None = None,
    renames: Mapping[str, str] | None = None,
    drop_absent: bool = False,
    missing: Mapping[str, str] | None = None,
    decimal: tuple[int, int] = (38, 18),
) -> list[str]:
    """Create the Delta table at ``path``, or add the columns it lacks; returns the added names.

    Columns are nullable whatever the source says: a column added later is null in old rows, and
    a delete's row image may carry only the key. ``renames`` (old name -> name now, from
    ``RENAME COLUMN`` in the source) rename the table's columns first, values kept;
    ``drop_absent`` drops the table's columns that ``columns`` lacks (dropped in the source),
    but never ``metadata``. A column of ``missing`` (added in the source with a default: name
    -> bridge.spark.columns.missing_literal's reader schema) that is added here is set, in the
    rows the table holds, to the value PostgreSQL shows for them (crash-safe: see
    :data:`PENDING_BACKFILL_PROPERTY`).
    """
    from delta.tables import DeltaTable

    check_names(topic, columns)
    wanted = T.StructType([T.StructField(f.name, f.dataType, True) for f in columns.fields])
    if not DeltaTable.isDeltaTable(spark, path):
        clear_uncommitted_log(spark, path)
        builder = (
            DeltaTable.createIfNotExists(spark)
            .location(path)
            .addColumns(T.StructType([*wanted.fields, *metadata]))
            .property(KEY_COLUMNS_PROPERTY, ",".join(key_columns))
            .property(TOPIC_PROPERTY, topic)
            .property(COLUMN_MAPPING_PROPERTY, "name")
        )
        for key, value in (properties or {}).items():
            builder = builder.property(key, value)
        builder.execute()
        logger.info("created Delta table %s for %s (key %s)", path, topic, list(key_columns))
        return []
    table = DeltaTable.forPath(spark, path)
    current = {f.name.lower(): f for f in table.toDF().schema.fields}
    current = _finish_retypes(spark, path, current, wanted)
    if renames:
        current = _rename_columns(spark, path, table, current, renames, wanted)
    if drop_absent:
        keep = {f.name.lower() for f in (*wanted.fields, *metadata)}
        current = _drop_columns(spark, path, table, current, keep)
    existing = set(current)
    added = [f for f in wanted.fields if f.name.lower() not in existing]
    pending = _pending_backfill(spark, path)
    backfill = {f.name: missing[f.name] for f in added if missing and f.name in missing}
    if backfill:
        pending = {**pending, **backfill}
        _set_pending_backfill(spark, path, pending)
    _widen_columns(spark, path, table, current, wanted)
    needs_mapping = any(_NEEDS_MAPPING & set(f.name) for f in added)
    if needs_mapping and _with_column_mapping(spark, path, table):
        logger.info("%s: enabled column mapping for columns %s", path, [f.name for f in added])
    if added:
        # An empty append with mergeSchema: Delta's schema evolution with the exact Spark types
        # (no DDL strings to render for nested or decimal types).
        spark.createDataFrame([], T.StructType(added)).write.format("delta").mode("append").option(
            "mergeSchema", "true"
        ).save(path)
        logger.info("%s: added columns %s", path, [f.name for f in added])
    if pending:
        _backfill(spark, path, pending, decimal)
    return [f.name for f in added]


def _pending_backfill(spark: Any, path: str) -> dict[str, str]:
    """The table's pending backfill (:data:`PENDING_BACKFILL_PROPERTY`), from the snapshot's
    metadata the caller already loaded (no Spark job)."""
    value = _latest_snapshot(spark, path).metadata().configuration().get(PENDING_BACKFILL_PROPERTY)
    if not value.isDefined():
        return {}
    return dict(json.loads(base64.b64decode(str(value.get())).decode()))


def _set_pending_backfill(spark: Any, path: str, pending: Mapping[str, str]) -> None:
    encoded = base64.b64encode(json.dumps(dict(pending)).encode()).decode()
    spark.sql(
        f"ALTER TABLE delta.{_quote(path)} SET TBLPROPERTIES "
        f"('{PENDING_BACKFILL_PROPERTY}' = '{encoded}')"
    )


def _backfill(spark: Any, path: str, pending: Mapping[str, str], decimal: tuple[int, int]) -> None:
    """Set the columns of ``pending`` to their missing value in every row, then clear it. Runs
    before any MERGE writes the columns: every row the table holds was written before them."""
    from delta.tables import DeltaTable

    DeltaTable.forPath(spark, path).update(
        set={_quote(name): missing_literal(reader, decimal) for name, reader in pending.items()}
    )
    spark.sql(
        f"ALTER TABLE delta.{_quote(path)} UNSET TBLPROPERTIES ('{PENDING_BACKFILL_PROPERTY}')"
    )
    logger.info(
        "%s: set columns %s in the rows written before they were added to the value "
        "PostgreSQL shows for them (ADD COLUMN ... DEFAULT)",
        path,
        sorted(pending),
    )


def _rename_columns(
    spark: Any,
    path: str,
    table: Any,
    current: dict[str, T.StructField],
    renames: Mapping[str, str],
    wanted: T.StructType,
) -> dict[str, T.StructField]:
    """Rename the columns the source renamed (Delta column mapping: metadata only, the data
    files keep their physical names), and the key columns property with them. A column the
    table already has under its new name, or does not have under the old one, is left alone:
    so a rename applied before is not applied twice, and of a chain (a -> b -> c) the name the
    table has is the one renamed."""
    wanted_names = {f.name for f in wanted.fields}
    todo = [
        (current[old.lower()].name, new)
        for old, new in renames.items()
        if new in wanted_names and new.lower() not in current and old.lower() in current
    ]
    if not todo:
        return current
    target = f"delta.{_quote(path)}"
    properties_now = _properties(table)
    _with_column_mapping(spark, path, table, properties_now)
    keys = [k for k in str(properties_now.get(KEY_COLUMNS_PROPERTY, "")).split(",") if k]
    renamed = dict(current)
    for old, new in todo:
        spark.sql(f"ALTER TABLE {target} RENAME COLUMN {_quote(old)} TO {_quote(new)}")
        logger.info("%s: renamed column %s to %s (renamed in the source)", path, old, new)
        renamed[new.lower()] = T.StructField(new, renamed.pop(old.lower()).dataType, True)
        keys = [new if k == old else k for k in keys]
    if keys != [k for k in str(properties_now.get(KEY_COLUMNS_PROPERTY, "")).split(",") if k]:
        spark.sql(
            f"ALTER TABLE {target} SET TBLPROPERTIES "
            f"('{KEY_COLUMNS_PROPERTY}' = '{','.join(keys)}')"
        )
    return renamed


def _drop_columns(
    spark: Any, path: str, table: Any, current: dict[str, T.StructField], keep: set[str]
) -> dict[str, T.StructField]:
    """Drop the table's columns not in ``keep`` (lower-case names), pgbridge's own excepted
    (column mapping: a metadata-only commit; the data files keep the values until rewritten)."""
    absent = [
        f.name for key, f in current.items() if key not in keep and not key.startswith("_pgbridge_")
    ]
    if not absent:
        return current
    target = f"delta.{_quote(path)}"
    _with_column_mapping(spark, path, table)
    spark.sql(f"ALTER TABLE {target} DROP COLUMNS ({', '.join(_quote(n) for n in absent)})")
    logger.info("%s: dropped columns %s (dropped in the source)", path, absent)
    return {key: f for key, f in current.items() if f.name not in absent}


def _properties(table: Any) -> dict[str, str]:
    detail = table.detail().select("properties").first()
    return dict(detail["properties"] or {}) if detail else {}


def _with_column_mapping(
    spark: Any, path: str, table: Any, properties: Mapping[str, str] | None = None
) -> bool:
    """Switch column mapping on for a table created before pgbridge used it (a metadata-only
    commit; readers need Delta reader version 2): renames, drops and names Parquet cannot hold
    need it. True if it was off."""
    properties = _properties(table) if properties is None else properties
    if properties.get(COLUMN_MAPPING_PROPERTY, "none") != "none":
        return False
    spark.sql(
        f"ALTER TABLE delta.{_quote(path)} SET TBLPROPERTIES ('{COLUMN_MAPPING_PROPERTY}' = 'name')"
    )
    return True


#: Delta's type widening (4.0): the integral types in order of width, and decimal digits
#: needed left of the point to hold each exactly.
_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_INTEGRAL_DIGITS: dict[type[T.DataType], int] = {
    T.ByteType: 3,
    T.ShortType: 5,
    T.IntegerType: 10,
    T.LongType: 20,
}


def type_change(old: T.DataType, new: T.DataType) -> str:
    """What a Delta column of type ``old`` needs to take values of type ``new``.

    ``"none"``: it holds them exactly already; ``"widen"``: Delta can widen it to ``new`` in
    place; ``"refuse"``: neither (the values would be cast wrongly or fail).
    """
    if old == new:
        return "none"
    if type(old) in _INTEGRAL and type(new) in _INTEGRAL:
        rank = _INTEGRAL.index
        return "widen" if rank(type(new)) > rank(type(old)) else "none"
    if isinstance(old, T.FloatType) and isinstance(new, T.DoubleType):
        return "widen"
    if isinstance(old, T.DoubleType) and (
        isinstance(new, T.FloatType) or type(new) in _INTEGRAL[:3]
    ):
        return "none"
    if type(old) in _INTEGRAL[:3] and isinstance(new, T.DoubleType):
        return "widen"
    if isinstance(old, T.DecimalType) and isinstance(new, T.DecimalType):
        if _decimal_holds(old, new):
            return "none"
        return "widen" if _decimal_holds(new, old) else "refuse"
    if type(old) in _INTEGRAL and isinstance(new, T.DecimalType):
        return "widen" if new.precision - new.scale >= _INTEGRAL_DIGITS[type(old)] else "refuse"
    if isinstance(old, T.DecimalType) and type(new) in _INTEGRAL:
        return "none" if old.precision - old.scale >= _INTEGRAL_DIGITS[type(new)] else "refuse"
    if isinstance(old, T.DateType) and isinstance(new, T.TimestampNTZType):
        return "widen"
    return "refuse"


def _decimal_holds(wide: T.DecimalType, narrow: T.DecimalType) -> bool:
    return wide.scale >= narrow.scale and (
        wide.precision - wide.scale >= narrow.precision - narrow.scale
    )


def _widen_columns(
    spark: Any,
    path: str,
    table: Any,
    current: Mapping[str, T.StructField],
    wanted: T.StructType,
) -> None:
    """Widen the existing columns whose source type grew (see :func:`type_change`), and give
    the others whose type changed their new type (:func:`_retype_column`)."""
    changes = []
    for f in wanted.fields:
        existing = current.get(f.name.lower())
        if existing is None:
            continue
        verdict = type_change(existing.dataType, f.dataType)
        if verdict == "refuse":
            _retype_column(spark, path, table, existing, f.dataType)
        if verdict == "widen":
            changes.append((existing.name, f.dataType))
    if not changes:
        return
    target = f"delta.{_quote(path)}"
    spark.sql(f"ALTER TABLE {target} SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    for name, data_type in changes:
        spark.sql(
            f"ALTER TABLE {target} ALTER COLUMN {_quote(name)} TYPE {data_type.simpleString()}"
        )
        logger.info("%s: widened column %s to %s", path, name, data_type.simpleString())


#: The name a column whose type changes in a way Delta cannot widen has while its values move
#: to the new type (:func:`_retype_column`); one left behind by a crash is finished at the
#: next start (:func:`_finish_retypes`).
RETYPED_PREFIX = "_pgbridge_retyped_"


def _retype_column(
    spark: Any, path: str, table: Any, existing: T.StructField, new_type: T.DataType
) -> None:
    """``ALTER COLUMN ... TYPE`` that Delta cannot apply in place (``int`` to ``text``, a
    narrower decimal, ``text`` to ``int``): through column mapping, the column moves aside,
    a column of the new type takes its name, its values are the old ones cast (null where the
    cast fails: PostgreSQL's ``USING`` may have computed them otherwise, and a change of the
    row, or an incremental snapshot of the table, brings the exact value), then the old
    column is dropped. Each step is its own commit; a crash between them is finished at the
    next start."""
    _with_column_mapping(spark, path, table)
    aside = RETYPED_PREFIX + existing.name
    spark.sql(
        f"ALTER TABLE delta.{_quote(path)} RENAME COLUMN {_quote(existing.name)} TO {_quote(aside)}"
    )
    logger.warning(
        "%s: column %s changed type from %s to %s, which Delta cannot change in place: its "
        "values are cast to the new type (null where they do not cast; an incremental snapshot "
        "of the table brings the values PostgreSQL computed)",
        path,
        existing.name,
        existing.dataType.simpleString(),
        new_type.simpleString(),
    )
    _finish_retype(spark, path, existing.name, new_type, added=False)


def _finish_retype(spark: Any, path: str, name: str, new_type: T.DataType, *, added: bool) -> None:
    """Steps two to four of :func:`_retype_column`; ``added``: the column of the new type
    exists already (a crash came after step two)."""
    from delta.tables import DeltaTable
    from pyspark.errors import AnalysisException

    aside = RETYPED_PREFIX + name
    if not added:  # in the old column's place: right after it, which then goes
        spark.sql(
            f"ALTER TABLE delta.{_quote(path)} ADD COLUMNS "
            f"({_quote(name)} {new_type.simpleString()} AFTER {_quote(aside)})"
        )
    table = DeltaTable.forPath(spark, path)
    try:
        table.update(set={_quote(name): F.col(_quote(aside)).try_cast(new_type)})
    except AnalysisException:  # no cast between the two types at all (a struct to a string…)
        logger.warning("%s: %s's values cannot be cast to %s: null until changed", path, name,
                       new_type.simpleString())  # fmt: skip
    spark.sql(f"ALTER TABLE delta.{_quote(path)} DROP COLUMNS ({_quote(aside)})")


def _finish_retypes(
    spark: Any, path: str, current: dict[str, T.StructField], wanted: T.StructType
) -> dict[str, T.StructField]:
    """Finish the type changes a crash interrupted (a column still named ``RETYPED_PREFIX``…)."""
    types = {f.name: f.dataType for f in wanted.fields}
    left = [f.name[len(RETYPED_PREFIX) :] for f in current.values()
            if f.name.startswith(RETYPED_PREFIX)]  # fmt: skip
    for name in left:
        if name in types:
            _finish_retype(spark, path, name, types[name], added=name.lower() in current)
        else:  # renamed or dropped since: keep the values under the name the column had
            spark.sql(
                f"ALTER TABLE delta.{_quote(path)} RENAME COLUMN "
                f"{_quote(RETYPED_PREFIX + name)} TO {_quote(name)}"
            )
    if not left:
        return current
    from delta.tables import DeltaTable

    schema = DeltaTable.forPath(spark, path).toDF().schema
    return {f.name.lower(): f for f in schema.fields}


def before(alias: str, position: tuple[int, int]) -> Column:
    """``alias``'s (commit_lsn, seq) is before ``position``."""
    lsn, seq = position
    return (F.col(f"{alias}.{tf.COMMIT_LSN}") < lsn) | (
        (F.col(f"{alias}.{tf.COMMIT_LSN}") == lsn) & (F.col(f"{alias}.{tf.SEQ}") < seq)
    )


def _inserted(plan: MergePlan) -> dict[str, Column]:
    """The columns of a row inserted from change ``s``: its values and its position."""
    inserts: dict[str, Column] = {}
    for name in plan.value_columns:
        source = F.col(f"s.{_quote(name)}")
        if plan.fold_unchanged and name not in plan.key_columns:
            # No row to keep a value from (the job started after the row's insert): null, not
            # the placeholder Debezium puts in string columns.
            source = F.when(
                F.array_contains(F.col(f"s.{tf.UNCHANGED}"), name), F.lit(None)
            ).otherwise(source)
        inserts[name] = source
    inserts.update({m: F.col(f"s.{m}") for m in tf.PERSISTED_META})
    return inserts


def append_new_keys(
    spark: Any,
    path: str,
    latest: DataFrame,
    plan: MergePlan,
    app_id: str | None,
    batch_id: int,
    *,
    commit_metadata: str | None = None,
) -> None:
    """Apply a batch none of whose keys the table holds (a table this batch created, or
    inserts the table's fences prove new, see ``bridge.spark.applier``): what
    :func:`merge_changes` would do (the last change per key inserted, deletes dropped), as an
    append: no join with the target, one write. Idempotent as the MERGE is (same transaction
    id and version), or, with ``app_id`` None, by the caller having removed every record a
    commit of the table covered (the offsets of its fences)."""
    idempotent_append(new_key_rows(latest, plan), path, app_id, batch_id, commit_metadata)


def new_key_rows(latest: DataFrame, plan: MergePlan) -> DataFrame:
    """The rows :func:`append_new_keys` appends: each key's last change unless a delete, with
    unchanged TOAST as null, and its position."""
    return (
        latest.alias("s")
        .where(F.col(f"s.{tf.OP}") != "d")
        .select(*[column.alias(name) for name, column in _inserted(plan).items()])
    )


def idempotent_append(
    rows: DataFrame,
    path: str,
    app_id: str | None,
    batch_id: int,
    commit_metadata: str | None = None,
) -> None:
    """Append ``rows`` to the Delta table at ``path`` unless (app_id, batch_id) was committed
    to it already; with ``app_id`` None, unconditionally (the caller fenced replays itself).
    Writer options, not session conf: a DataFrame writes through its own session, not the
    applying thread's (see :func:`idempotent_writes`)."""
    writer = rows.write.format("delta").mode("append")
    if app_id is not None:
        writer = writer.option("txnAppId", app_id).option("txnVersion", str(batch_id))
    if commit_metadata is not None:
        writer = writer.option("userMetadata", commit_metadata)
    writer.save(path)


def merge_changes(
    spark: Any,
    path: str,
    latest: DataFrame,
    plan: MergePlan,
    app_id: str,
    batch_id: int,
    *,
    commit_metadata: str | None = None,
) -> None:
    """MERGE the last change per key (see ``last_change_per_key``) into the table at ``path``.

    c/r/u upsert, d deletes, a truncate deletes the rows written before it, and a column the
    change marks as unchanged TOAST keeps the target's value.
    """
    from delta.tables import DeltaTable

    if not plan.key_columns:
        raise TableApplyError(path, "no key columns: cannot match changes to rows")
    target = DeltaTable.forPath(spark, path)
    on = F.lit(True)
    for key in plan.key_columns:
        on = on & F.col(f"t.{_quote(key)}").eqNullSafe(F.col(f"s.{_quote(key)}"))
    is_delete = F.col(f"s.{tf.OP}") == "d"
    newer = tf.newer("s", "t")
    updates: dict[str, str | Column] = {}
    for name in plan.value_columns:
        if name in plan.key_columns:
            continue
        source = F.col(f"s.{_quote(name)}")
        if plan.fold_unchanged:
            source = F.when(
                F.array_contains(F.col(f"s.{tf.UNCHANGED}"), name), F.col(f"t.{_quote(name)}")
            ).otherwise(source)
        updates[_quote(name)] = source
    for meta in tf.PERSISTED_META:
        updates[meta] = F.col(f"s.{meta}")
    inserts: dict[str, str | Column] = {_quote(n): c for n, c in _inserted(plan).items()}
    if plan.inserts_only and plan.truncate_at is None:
        # Delta's insert-only MERGE: an anti join, no touched files to find or rewrite.
        builder = (
            target.alias("t").merge(latest.alias("s"), on).whenNotMatchedInsert(values=inserts)
        )
    else:
        builder = (
            target.alias("t")
            .merge(latest.alias("s"), on)
            .whenMatchedDelete(condition=is_delete & newer)
            .whenMatchedUpdate(condition=~is_delete & newer, set=updates)
            .whenNotMatchedInsert(condition=~is_delete, values=inserts)
        )
    if plan.truncate_at is not None:
        builder = builder.whenNotMatchedBySourceDelete(condition=before("t", plan.truncate_at))
    with (
        idempotent_writes(spark, app_id, batch_id, commit_metadata),
        small_tables_rewrite(spark, path),
    ):
        builder.execute()
