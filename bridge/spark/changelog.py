"""Merge-on-read apply (``--mode changelog``): one changelog commit per micro-batch, current
state read through views, compaction into the per-table Delta tables behind.

Why. A Delta commit is per table and MERGE is Delta's only atomic upsert-and-delete, so the
MERGE mode (:mod:`bridge.spark.job`) pays a MERGE of 1 to 3 s per changed table and micro-batch:
freshness and throughput fall with the number of busy tables. This mode splits the two jobs a
CDC apply does, as Hudi's merge-on-read tables (log files beside base files, merged by the
reader, compaction behind) and Databricks' ``APPLY CHANGES`` (a changelog behind a view) do:

* **Ingest** (:class:`ChangelogWriter`, the Kafka query's ``foreachBatch``): the batch's Kafka
  records as they are (topic, partition, offset, timestamp, key, value) appended to one Delta
  table, ``<delta_base>/_pgbridge_changelog``, in **one** idempotent commit (``txnAppId`` /
  ``txnVersion`` = the batch id) whatever the number of tables. Nothing is decoded here; the
  cost is Kafka's fetch and a Parquet write.
* **Current state** (:func:`current_state`): a table's Delta table (the base) as of its last
  compaction, with the changelog records it does not cover yet decoded and folded on top by
  the same rules as the MERGE (last change per key by ``(commit_lsn, seq)``, the table's fences
  against resends and overtaken truncates, unchanged TOAST kept from the base). What the base
  covers is exact: each compaction commit records per Kafka partition the highest offset it
  covered (:class:`bridge.spark.fences.Fences`), so the view never applies a record twice nor
  misses one, and it reads the base at one version.
* **Compaction** (:func:`start_compactor`): a second streaming query in the same session reads
  the changelog (Delta's streaming source) and applies it with the MERGE mode's
  :class:`~bridge.spark.applier.BatchApplier`, unchanged: its batches are as large as what
  accumulated since the last one, so each table's MERGE cost is paid once per
  ``compaction_interval``, not per micro-batch. Records it has applied are then deleted from
  the changelog, one compaction round late (a view being read meanwhile still finds them).

What a reader sees: through :func:`current_state`, each key of a keyed table in a state it had
in the source, never older than an earlier read, as fresh as the last ingest commit; in the
base tables, the same as of the last compaction. Tables without key columns (multisets) and the
SCD2 history are applied by compaction only: their view is their base table.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from prometheus_client import Gauge, Histogram
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from bridge.spark import transforms as tf
from bridge.spark.applier import BatchApplier
from bridge.spark.columns import missing_literal
from bridge.spark.config import ApplyConfig, delta_table
from bridge.spark.decode import SchemaCache, TableBatch, decode_batch
from bridge.spark.errors import ApplyError
from bridge.spark.fences import Fences, read_fences
from bridge.spark.merge import before, table_key_columns
from bridge.spark.query import kafka_source, start_query
from bridge.spark.session import task_slots
from bridge.spark.set_aside import held_topics

__all__ = [
    "INGEST_BATCH",
    "ChangelogWriter",
    "Compactor",
    "changelog_path",
    "current_state",
    "start_compactor",
    "start_ingest",
]

logger = logging.getLogger(__name__)

#: Column of the changelog: the ingest micro-batch that wrote the record.
INGEST_BATCH = "_pgbridge_ingest_batch"
#: The Spark scheduler pool of the ingest query's jobs (fair against the compactor's).
INGEST_POOL = "pgbridge-ingest"

_SECONDS_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
INGEST_SECONDS = Histogram(
    "pgbridge_apply_ingest_seconds",
    "Wall time of one ingest micro-batch of the changelog mode (Kafka fetch + one Delta append)",
    buckets=_SECONDS_BUCKETS,
)
INGEST_FRESHNESS = Gauge(
    "pgbridge_apply_changelog_freshness_seconds",
    "Changelog mode: seconds from the Kafka timestamp of the newest record of the last ingest "
    "batch until its changelog commit (visible through the current-state views)",
)
INGESTED_BATCH = Gauge(
    "pgbridge_apply_changelog_ingested_batch",
    "Changelog mode: the newest ingest batch committed to the changelog",
)
COMPACTED_BATCH = Gauge(
    "pgbridge_apply_changelog_compacted_batch",
    "Changelog mode: the newest ingest batch compacted into the tables (the difference to "
    "pgbridge_apply_changelog_ingested_batch is how far compaction is behind)",
)


def changelog_path(config: ApplyConfig) -> str:
    return f"{config.delta_base.rstrip('/')}/_pgbridge_changelog"


def _ingest_app_id(config: ApplyConfig) -> str:
    return f"{config.txn_app_id}-ingest"


def compaction_config(config: ApplyConfig) -> ApplyConfig:
    """The compactor's configuration: its own checkpoint (and so its own ``txnAppId``). Its
    batches are the changelog table's rows, not Kafka offset ranges: nothing reads Kafka."""
    return replace(
        config,
        checkpoint_location=f"{config.checkpoint_location.rstrip('/')}/compact",
        query_name=f"{config.query_name}-compact",
        lane_reads_kafka=False,
    )


def ingest_checkpoint(config: ApplyConfig) -> str:
    return f"{config.checkpoint_location.rstrip('/')}/ingest"


class ChangelogWriter:
    """``foreachBatch`` of the ingest query: one idempotent changelog append per batch."""

    def __init__(self, config: ApplyConfig) -> None:
        self.config = config
        self.path = changelog_path(config)
        #: Per batch: (records, oldest and newest Kafka timestamp in s, when committed).
        self.last: tuple[int, float, float, float] | None = None
        self.batches_written = 0

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        spark = batch.sparkSession
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", INGEST_POOL)
        rows = batch.select(*tf.KAFKA_META, F.lit(batch_id).cast("long").alias(INGEST_BATCH))
        # One file per core, not one per Kafka partition (a batch of 200 topics would
        # otherwise write 200 small files).
        rows = rows.coalesce(task_slots(spark)).persist()
        try:
            span = rows.agg(F.count(F.lit(1)), F.min("timestamp"), F.max("timestamp")).first()
            count = int(span[0]) if span else 0
            if count:
                # The batch id as txnVersion: a batch replayed after a crash between this
                # commit and the checkpoint is skipped by Delta, not written twice.
                (
                    rows.write.format("delta")
                    .mode("append")
                    .option("txnAppId", _ingest_app_id(self.config))
                    .option("txnVersion", str(batch_id))
                    .save(self.path)
                )
        finally:
            rows.unpersist()
        seconds = time.monotonic() - started
        INGEST_SECONDS.observe(seconds)
        INGESTED_BATCH.set(batch_id)
        self.batches_written += 1
        if not count:
            return
        visible = time.time()
        assert span is not None
        oldest, newest = span[1].timestamp(), span[2].timestamp()
        self.last = (count, oldest, newest, visible)
        INGEST_FRESHNESS.set(max(0.0, visible - newest))
        logger.info(
            "ingest batch %d: %d records in %.1f s; Kafka timestamp to visible %.1f s (newest) "
            ".. %.1f s (oldest)",
            batch_id,
            count,
            seconds,
            max(0.0, visible - newest),
            max(0.0, visible - oldest),
        )


class Compactor(BatchApplier):
    """``foreachBatch`` of the compaction query: the MERGE mode's applier over changelog
    records, then the changelog's applied records removed (one round late)."""

    def __init__(self, config: ApplyConfig, schemas: SchemaCache | None = None) -> None:
        super().__init__(compaction_config(config), schemas)
        self.changelog = changelog_path(config)
        self._removable: int | None = None  # ingest batches below this are applied

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        newest = batch.agg(F.max(INGEST_BATCH)).first()
        super().__call__(batch, batch_id)
        if newest is None or newest[0] is None:
            return
        # The newest ingest batch may continue in the next compaction batch; those before it
        # are complete. Removed a round later, so a view reading the base as it was before
        # this compaction still finds them.
        removable, self._removable = self._removable, int(newest[0])
        COMPACTED_BATCH.set(int(newest[0]))
        if removable is not None:
            self._remove_applied(batch.sparkSession, removable)

    def _remove_applied(self, spark: Any, below: int) -> None:
        from delta.tables import DeltaTable

        try:
            DeltaTable.forPath(spark, self.changelog).delete(F.col(INGEST_BATCH) < below)
        except Exception as exc:  # retried at the next round; the changelog only grows a bit
            logger.warning("changelog: removing applied records failed (%s)", exc)


def ensure_changelog(spark: Any, config: ApplyConfig) -> None:
    """Create the (empty) changelog table unless it exists: the compactor's streaming source
    needs it before the first ingest commit."""
    from delta.tables import DeltaTable
    from pyspark.sql import types as T

    (
        DeltaTable.createIfNotExists(spark)
        .location(changelog_path(config))
        .addColumns(
            T.StructType(
                [
                    T.StructField("topic", T.StringType()),
                    T.StructField("partition", T.IntegerType()),
                    T.StructField("offset", T.LongType()),
                    T.StructField("timestamp", T.TimestampType()),
                    T.StructField("key", T.BinaryType()),
                    T.StructField("value", T.BinaryType()),
                    T.StructField(INGEST_BATCH, T.LongType()),
                ]
            )
        )
        # File statistics only where they are used (the compactor's deletes skip files by
        # ingest batch; readers filter by topic): none for the payload columns (10% of ingest).
        .property(
            "delta.dataSkippingStatsColumns",
            f"topic,partition,offset,timestamp,{INGEST_BATCH}",
        )
        .execute()
    )


def start_ingest(spark: Any, config: ApplyConfig, writer: ChangelogWriter | None = None) -> Any:
    """Start the ingest query: Kafka -> the changelog."""
    ensure_changelog(spark, config)
    return start_query(
        kafka_source(spark, config),
        writer or ChangelogWriter(config),
        ingest_checkpoint(config),
        f"{config.query_name}-ingest",
        config,
        config.trigger_interval,
    )


def start_compactor(spark: Any, config: ApplyConfig, compactor: Compactor | None = None) -> Any:
    """Start the compaction query: the changelog -> the base tables, every
    ``compaction_interval`` (or once, with ``available_now``)."""
    compact = compaction_config(config)
    ensure_changelog(spark, config)
    source = (
        spark.readStream.format("delta")
        # The compactor's own deletes of applied records are not new data.
        .option("skipChangeCommits", "true")
        .load(changelog_path(config))
    )
    return start_query(
        source,
        compactor or Compactor(config),
        compact.checkpoint_location,
        compact.query_name,
        config,
        config.compaction_interval,
    )


def current_state(
    spark: Any, config: ApplyConfig, table: str, schemas: SchemaCache | None = None
) -> DataFrame:
    """The current state of one table: its base folded with the changelog it does not cover.

    ``table`` is the topic's ``<schema>.<table>`` after the prefix, as ``--table`` takes it.
    Columns as in the base table (the row's columns and ``_pgbridge_commit_lsn``, ``_seq``,
    ``_commit_ts``).
    """
    topic = f"{config.topic_prefix}.{table}"
    if topic in held_topics(spark, config.dead_letter_location):
        return _held_base(spark, config, topic)
    schemas = schemas or SchemaCache.for_url(config.registry_url, dict(config.registry_options))
    framed = tf.frame(_changelog_records(spark, config, topic))
    decoded = decode_batch(framed, config, schemas, -1)
    try:
        tables = [t for t in decoded.tables if t.topic == topic]
        identity = (
            tables[0].changes.select(tf.SOURCE_SCHEMA, tf.SOURCE_TABLE).first() if tables else None
        )
        if identity is None:  # nothing pending: the base is current
            base = _base_of_topic(spark, config, topic)
            if base is None:
                raise ApplyError(f"no table and no changes for topic {topic!r} yet")
            current: DataFrame = spark.read.format("delta").load(base)
            return current
        path = config.table_path(
            *delta_table(config.topic_prefix, topic, str(identity[0]), str(identity[1]))
        )
        # Computed now, as of this moment (a read, not a live query); the decoded changelog's
        # cached frames are released right after.
        return _fold(spark, path, tables[0], config.variable_decimal).localCheckpoint(eager=True)
    finally:
        for cached in decoded.cached:
            cached.unpersist()


def _held_base(spark: Any, config: ApplyConfig, topic: str) -> DataFrame:
    """A held table's state (bridge.spark.set_aside): its base as of before the batch that
    failed. Its changes since wait in the dead-letter table; folding only the changelog's
    later ones onto the base would show rows the source never had."""
    base = _base_of_topic(spark, config, topic)
    if base is None:
        raise ApplyError(f"{topic!r} is held since a batch of its failed, and has no table yet")
    logger.warning(
        "%s is held since a batch of its failed: its current state is its table as of before "
        "that batch, until the job applies its set-aside records (pgbridge status "
        "--apply-dead-letter)",
        topic,
    )
    held: DataFrame = spark.read.format("delta").load(base)
    return held


def _changelog_records(spark: Any, config: ApplyConfig, topic: str) -> DataFrame:
    path = changelog_path(config)
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, path):
        raise ApplyError(f"no changelog at {path}: is the apply job running with --mode changelog?")
    records: DataFrame = spark.read.format("delta").load(path).where(F.col("topic") == topic)
    return records


def _base_of_topic(spark: Any, config: ApplyConfig, topic: str) -> str | None:
    """The base table written for ``topic`` (found by its ``pgbridge.topic`` property)."""
    from delta.tables import DeltaTable

    from bridge.spark.merge import TOPIC_PROPERTY

    jvm = spark.sparkContext._jvm
    root = jvm.org.apache.hadoop.fs.Path(config.delta_base)
    fs = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(root):
        return None
    for schema_dir in fs.listStatus(root):
        name = schema_dir.getPath().getName()
        if not schema_dir.isDirectory() or name.startswith("_"):
            continue
        for table_dir in fs.listStatus(schema_dir.getPath()):
            path = table_dir.getPath().toString()
            if not fs.exists(jvm.org.apache.hadoop.fs.Path(path + "/_delta_log")):
                continue
            detail = DeltaTable.forPath(spark, path).detail().select("properties").first()
            if detail and (detail["properties"] or {}).get(TOPIC_PROPERTY) == topic:
                return str(path)
    return None


def _fold(
    spark: Any, path: str, table: TableBatch, decimal: tuple[int, int] = (38, 18)
) -> DataFrame:
    """``table``'s changes not covered by the base at ``path``, folded onto it."""
    from delta.tables import DeltaTable

    changes = table.changes
    base: DataFrame | None = None
    fences = Fences()
    if DeltaTable.isDeltaTable(spark, path):
        # One version of the base: its rows and the fences of the same commit.
        newest = DeltaTable.forPath(spark, path).history(1).select("version").first()
        version = int(newest[0]) if newest is not None else 0
        base = spark.read.format("delta").option("versionAsOf", version).load(path)
        fences = read_fences(spark, path, version)
    keys = tuple(table.key_columns)
    if not keys and base is not None:
        keys = table_key_columns(spark, path)
    if table.keyless or not keys:
        if base is None:
            raise ApplyError(
                f"{table.topic}: a table without key columns is visible once compacted"
            )
        return base  # multisets: applied by compaction only
    not_covered = fences.not_covered(F.col(tf.PARTITION), F.col(tf.OFFSET))
    if not_covered is not None:
        changes = changes.where(not_covered)
    changes = fences.filter(changes).drop(tf.PARTITION, tf.OFFSET)
    summary = changes.agg(
        F.max(F.when(F.col(tf.OP) == "t", F.struct(tf.COMMIT_LSN, tf.SEQ))).alias("trunc"),
        F.max(F.size(tf.UNCHANGED) > 0).alias("toast"),
    ).first()
    truncate = summary["trunc"] if summary else None
    truncate_at = (int(truncate[0]), int(truncate[1])) if truncate else None
    if truncate_at is not None:
        changes = tf.drop_before(changes, *truncate_at)
    fold = bool(summary and summary["toast"])
    latest = tf.last_change_per_key(changes, keys, fold_unchanged=fold)
    # A base not compacted since a column was added with a default: its rows hold the value.
    missing = {name: missing_literal(reader, decimal) for name, reader in table.missing.items()}
    return _overlay(base, latest, keys, list(table.columns.fieldNames()), truncate_at, missing)


def _overlay(
    base: DataFrame | None,
    latest: DataFrame,
    keys: tuple[str, ...],
    columns: list[str],
    truncate_at: tuple[int, int] | None,
    missing: Mapping[str, Column] | None = None,
) -> DataFrame:
    """The MERGE of :func:`bridge.spark.merge.merge_changes`, as a query: the base's rows
    (those a truncate left) with each key's latest change applied when it is newer. A column
    the base lacks is null in its rows, or the value of ``missing`` (added with a default)."""
    missing = missing or {}
    meta = list(tf.PERSISTED_META)
    if base is None:
        rows = latest.where(F.col(tf.OP) != "d")
        values = [
            F.when(F.array_contains(F.col(tf.UNCHANGED), c), F.lit(None))
            .otherwise(F.col(tf.quote(c)))
            .alias(c)
            if tf.UNCHANGED in latest.columns
            else F.col(tf.quote(c))
            for c in columns
        ]
        return rows.select(*values, *meta)
    if truncate_at is not None:
        base = base.alias("t").where(~before("t", truncate_at))
    base_columns = [c for c in base.columns if c not in meta]
    out_columns = columns + [c for c in base_columns if c not in set(columns)]
    s, t = latest.alias("s"), base.alias("t")
    on: Any = F.lit(True)
    for key in keys:
        on = on & F.col(f"t.{tf.quote(key)}").eqNullSafe(F.col(f"s.{tf.quote(key)}"))
    joined = t.join(s, on, "full_outer")
    has_s = F.col(f"s.{tf.OP}").isNotNull()
    has_t = F.col(f"t.{tf.COMMIT_LSN}").isNotNull()
    take_s = has_s & (~has_t | tf.newer("s", "t"))
    keep = (take_s & (F.col(f"s.{tf.OP}") != "d")) | (~take_s & has_t)
    selected = []
    for name in out_columns:
        in_s, in_t = name in columns, name in base_columns
        from_t = F.col(f"t.{tf.quote(name)}") if in_t else missing.get(name, F.lit(None))
        if in_s:
            from_s: Any = F.col(f"s.{tf.quote(name)}")
            if name not in keys and tf.UNCHANGED in latest.columns:
                from_s = F.when(
                    F.array_contains(F.col(f"s.{tf.UNCHANGED}"), name), from_t
                ).otherwise(from_s)
        else:
            from_s = from_t  # a column the source dropped: kept, as the MERGE keeps it
        selected.append(F.when(take_s, from_s).otherwise(from_t).alias(name))
    for name in meta:
        selected.append(
            F.when(take_s, F.col(f"s.{name}")).otherwise(F.col(f"t.{name}")).alias(name)
        )
    return joined.where(keep).select(*selected)
