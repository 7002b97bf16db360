"""The apply job's wiring: Kafka source -> foreachBatch(decode, MERGE per table) -> Delta.

Locally: ``pgbridge apply`` calls :func:`run_apply`. On a cluster (the driver needs pgbridge's
Python dependencies, confluent-kafka for the registry client; executors run no Python)::

    zip -r pgbridge.zip bridge
    spark-submit \\
      --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0,\\
    org.apache.spark:spark-avro_2.13:4.0.0,io.delta:delta-spark_2.13:4.0.0 \\
      --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension \\
      --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog \\
      --py-files pgbridge.zip bridge/spark/job.py \\
      --topic-prefix pg --bootstrap-servers broker:9092 --registry-url http://registry:8081 \\
      --delta-base s3a://lake/cdc --checkpoint s3a://lake/_chk/apply \\
      --dead-letter s3a://lake/_dead/apply

(the ``--packages`` value is :func:`bridge.spark.packages.packages_option`).

Each micro-batch is applied by :class:`BatchApplier`: frame, decode per (topic, schema id),
then per table one idempotent MERGE (keyed tables: :mod:`bridge.spark.merge`; tables without
key columns, as multisets: :mod:`bridge.spark.multiset`), and the dead letters in one
idempotent append. A table's MERGE is its only commit of the batch: the positions it reached
(fences, :mod:`bridge.spark.fences`) travel in that commit's ``userMetadata``. Bad records
are counted (log, Prometheus counter, :class:`ApplyStats`), never dropped silently.

Where a batch's time goes, and why it is shaped so (the phases are logged per batch and
exported as ``pgbridge_apply_batch_phase_seconds{phase}``, with commit-to-visible freshness as
``pgbridge_apply_freshness_seconds`` and ``pgbridge_apply_commit_to_visible_seconds``):

- **read**: Spark's Kafka source, framing, and one job grouping the batch by (topic, schema
  id). The batch is coalesced to one partition per core first: it arrives in one partition per
  Kafka topic-partition, and every frame derived from it would otherwise carry all of them,
  multiplying every later job's tasks by the number of topics.
- **summary**: one job over every table of the batch (counts, last truncate, unchanged TOAST,
  identity, commit times), which also fills each table's cached changes; not one job per
  table.
- **merge**: one Delta MERGE per table that changed, ``parallel_tables`` at a time through one
  session (each thread with its own SQL conf, for Delta's idempotent ``txnAppId`` /
  ``txnVersion``). This is the cost that still grows with the number of tables: a Delta commit
  is per table, and MERGE is Delta's only atomic upsert-and-delete. Deletion vectors (on by
  default) make a MERGE touching few rows of a file mark them instead of rewriting the file.
  A table the batch created is empty, so its first load is an append instead (what the MERGE
  would leave: last change per key, deletes dropped), with no join against the target.
- **dead_letters**: one aggregation over a single frame per (topic, schema id) carrying every
  reason; rows are written only when there are any (usually there are none).

For hundreds of busy tables or seconds of freshness there is the changelog mode
(``--mode changelog``, :mod:`bridge.spark.changelog`): merge-on-read, as Hudi's merge-on-read
tables and Iceberg's equality deletes do, and as Databricks' ``APPLY CHANGES`` hides behind a
view. Each micro-batch is one append to one changelog table (one commit for all tables),
current state is served by views that fold the changelog onto the tables, and this module's
:class:`BatchApplier` compacts the changelog into the tables behind, in batches as large as
what accumulated. It trades reader cost for writer cost.

What a reader may see between batches (keyed tables): each key in a state it had in the
source, never older than before. Besides the per-row ``(commit_lsn, seq)`` guard, the records of
a resend and the changes a truncate erased are dropped before the MERGE by the table's fences
(:mod:`bridge.spark.fences`: per Kafka partition the highest position delivered, and the last
truncate), which each MERGE commits in its own ``userMetadata``; a new job reads them back from
the Delta log, a running one keeps them in memory.

One odd table never halts the job: when a table's batch cannot be applied (a schema Delta
refuses, columns differing only in case, an incompatible type change, …) it is tried once more
(a transient storage error passes), then its records of the batch go to the dead-letter table
with the error as the reason, and the other tables go on. Only a registry that cannot answer
fails the batch (it is retried from the checkpoint, nothing is set aside).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from bridge.errors import PgBridgeError
from bridge.retry import RetryPolicy
from bridge.spark import transforms as tf
from bridge.spark.config import ApplyConfig
from bridge.spark.decode import SchemaCache, TableBatch, decode_batch
from bridge.spark.errors import ApplyError, RegistryUnavailableError, TableApplyError
from bridge.spark.fences import Fences, read_fences
from bridge.spark.history import HISTORY_FIELDS, IS_CURRENT, history_versions, merge_history
from bridge.spark.merge import (
    MergePlan,
    append_first_load,
    ensure_table,
    merge_changes,
    table_key_columns,
)
from bridge.spark.multiset import MultisetBatch, Position, apply_multiset, read_positions
from bridge.spark.resources import default_batch_records, jvm_failure
from bridge.spark.restarts import run_with_restarts

__all__ = [
    "ApplyStats",
    "BatchApplier",
    "add_apply_arguments",
    "config_from_args",
    "main",
    "run_apply",
    "start_apply",
]

logger = logging.getLogger(__name__)

CHANGES_APPLIED = Counter(
    "pgbridge_apply_changes", "Change records applied to Delta (before per-key folding)", ["table"]
)
DEAD_LETTERS = Counter("pgbridge_apply_dead_letters", "Records written to the dead-letter table")
TABLE_LAG = Gauge(
    "pgbridge_apply_table_lag_seconds",
    "Per table: seconds from the PostgreSQL commit of the newest change its last MERGE applied "
    "until that MERGE was done",
    ["table"],
)
TOPIC_LAG_RECORDS = Gauge(
    "pgbridge_apply_topic_lag_records",
    "Per topic: Kafka records not yet read by the apply query (latest offsets minus the last "
    "batch's end offsets, summed over its partitions)",
    ["topic"],
)
TABLE_FAILURES = Counter(
    "pgbridge_apply_table_failures", "Table batches dead-lettered because they failed", ["table"]
)
_SECONDS_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
BATCH_PHASE_SECONDS = Histogram(
    "pgbridge_apply_batch_phase_seconds",
    "Wall time of each phase of an apply micro-batch (read: Kafka fetch, framing and grouping; "
    "summary: one job over every table; merge: all tables' MERGEs; dead_letters)",
    ["phase"],
    buckets=_SECONDS_BUCKETS,
)
FRESHNESS = Gauge(
    "pgbridge_apply_freshness_seconds",
    "Seconds from the PostgreSQL commit of the newest change of the last batch until that "
    "batch's Delta commits were done (commit-to-visible)",
)
COMMIT_TO_VISIBLE = Histogram(
    "pgbridge_apply_commit_to_visible_seconds",
    "Per batch: seconds from the PostgreSQL commit of its oldest change until the batch's Delta "
    "commits were done (the worst commit-to-visible delay of the batch)",
    buckets=_SECONDS_BUCKETS,
)

#: Failpoint for crash tests: seconds to pause after each table's MERGE, so a test can kill the
#: process between the Delta commit and the checkpoint. Unset outside tests.
PAUSE_AFTER_MERGE_ENV = "PGBRIDGE_APPLY_PAUSE_AFTER_MERGE"


def job_conf(cores: int) -> dict[str, str]:
    """Session settings the job wants beside those of ``build_spark_session``, for a session
    with ``cores`` task slots.

    Delta rebuilds a table's snapshot state (its log) in ``snapshotPartitions`` tasks before
    each MERGE: Delta's 50 cost ~3 s per MERGE on 2 cores for a table of a few files (measured:
    a 20-row MERGE 5.3 s with 50, 2.4 s with one partition per core). The state is one row per
    file, so one partition per core serves even large tables.

    Shuffles (last change per key, MERGE's join, summaries) likewise get one partition per
    core, not Spark's 200: on 2 cores a stage of 200 tasks is 200 task launches for a handful
    of rows each (adaptive execution coalesces them only after the map side has run).
    """
    partitions = str(max(1, cores))
    return {
        "spark.databricks.delta.snapshotPartitions": partitions,
        "spark.sql.shuffle.partitions": partitions,
    }


@dataclass(slots=True)
class ApplyStats:
    """Running totals of one job (driver side)."""

    batches: int = 0
    changes: int = 0
    dead_letters: int = 0
    per_table: dict[str, int] = field(default_factory=dict)
    failed_tables: dict[str, str] = field(default_factory=dict)  # topic -> last error


class BatchApplier:
    """The ``foreachBatch`` function. Calling it twice with the same batch id applies once."""

    def __init__(self, config: ApplyConfig, schemas: SchemaCache | None = None) -> None:
        self.config = config
        self.schemas = schemas or SchemaCache.for_url(
            config.registry_url, dict(config.registry_options)
        )
        self.stats = ApplyStats()
        self._lock = threading.Lock()
        self._local = threading.local()
        self._pool: ThreadPoolExecutor | None = None
        # Tables this job created or evolved, with their columns: a batch whose columns are
        # all known skips the existence and schema checks (Delta log reads on the driver).
        # Only this job writes these tables' schemas, so the cache cannot go stale.
        self._known: dict[str, frozenset[tuple[str, str]]] = {}
        self._paths: dict[str, str] = {}  # topic -> its table's path (once known)
        # Tables' fences (bridge.spark.fences; a keyless table's position is its partition 0
        # fence) as of their last commit by this job.
        self._fences: dict[str, Fences] = {}
        # Keyless tables' positions as jobs before kept them, in a table of their own (read
        # once, only for a table whose log holds no position yet; see bridge.spark.multiset).
        self._legacy_positions: dict[str, Position] | None = None

    def _session(self, spark: Any) -> Any:
        """This thread's own session (same SparkContext and cache, own SQL conf).

        Delta's idempotent-DML settings are session conf: tables merged concurrently must not
        see each other's, so each worker thread merges through a session of its own.
        """
        session = getattr(self._local, "session", None)
        if session is None:
            session = spark.newSession()
            for key, value in job_conf(spark.sparkContext.defaultParallelism).items():
                session.conf.set(key, value)
            self._local.session = session
        return session

    def _ensure(
        self,
        spark: Any,
        path: str,
        table: TableBatch,
        keys: Sequence[str],
        metadata: Sequence[T.StructField] | None = None,
    ) -> None:
        """Create or evolve the table unless this job already saw it with these columns."""
        # Names and types: a changed type must reach ensure_table (to widen the column).
        columns = frozenset((f.name.lower(), f.dataType.simpleString()) for f in table.columns)
        drop = self.config.dropped_columns == "drop"
        with self._lock:
            known = self._known.get(path)
        if known is not None and (columns == known if drop else columns <= known):
            return
        extra = {"metadata": metadata} if metadata is not None else {}
        ensure_table(
            spark,
            path,
            table.columns,
            keys,
            table.topic,
            properties=self._properties(),
            renames=table.renames,
            drop_absent=drop,
            **extra,
        )
        with self._lock:
            self._known[path] = columns if drop else (known or frozenset()) | columns

    def _fences_of(self, spark: Any, path: str) -> Fences:
        """The table's fences: as this job left them, else from its Delta log (at start)."""
        with self._lock:
            known = self._fences.get(path)
        if known is None:
            known = read_fences(spark, path)
            with self._lock:
                self._fences[path] = known
        return known

    def _properties(self) -> dict[str, str]:
        """Delta properties of the tables the job creates."""
        if self.config.deletion_vectors:
            return {"delta.enableDeletionVectors": "true"}
        return {}

    def _apply_tables(
        self, spark: Any, tables: Sequence[TableBatch], batch_id: int, batch: _BatchState
    ) -> None:
        if self.config.parallel_tables == 1 or len(tables) <= 1:
            for table in tables:
                self._apply_or_set_aside(self._session(spark), table, batch_id, batch)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                self.config.parallel_tables, thread_name_prefix="pgbridge-apply"
            )
        pool = self._pool
        futures = [
            pool.submit(
                lambda t: self._apply_or_set_aside(self._session(spark), t, batch_id, batch), table
            )
            for table in tables
        ]
        # Wait for all before raising: a MERGE still running must not outlive the batch.
        errors = [f.exception() for f in futures]
        for error in errors:
            if error is not None:
                raise error

    def _apply_or_set_aside(
        self, spark: Any, table: TableBatch, batch_id: int, batch: _BatchState
    ) -> None:
        """Apply one table; if it fails twice, dead-letter its records instead of the batch."""
        error: Exception | None = None
        for attempt in (1, 2):
            try:
                self._apply_table(spark, table, batch_id, batch)
                return
            except RegistryUnavailableError:
                raise  # transient and batch-wide: retried from the checkpoint
            except Exception as exc:  # one odd table must not halt the others
                error = exc
                with self._lock:
                    self._known.pop(self._paths.get(table.topic, ""), None)
                    self._fences.pop(self._paths.get(table.topic, ""), None)
                if isinstance(exc, TableApplyError):
                    break  # a definite problem of the table's data: no use retrying
                logger.warning("batch %d: %s failed (attempt %d): %s", batch_id, table.name,
                               attempt, exc)  # fmt: skip
        assert error is not None
        reason = f"table not applied: {type(error).__name__}: {_first_line(error)}"
        logger.error("batch %d: %s: %s; its records go to the dead-letter table", batch_id,
                     table.name, reason)  # fmt: skip
        with self._lock:
            batch.dead_letters.append(tf.dead_letters(table.raw, reason, batch_id))
            self.stats.failed_tables[table.topic] = reason
        TABLE_FAILURES.labels(table.topic).inc()

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        phases = _PhaseTimer()
        spark = batch.sparkSession
        # One partition per core: a batch of many topics arrives in one Kafka partition per
        # topic-partition, and every group's and table's frame would otherwise carry all of
        # them (mostly empty), multiplying the tasks of each job by the number of topics.
        # Cached by decode_batch only when the batch has several (topic, schema id) groups.
        framed = tf.frame(batch).coalesce(max(1, spark.sparkContext.defaultParallelism))
        decoded = None
        tables: list[TableBatch] = []
        try:
            with phases.phase("read"):
                decoded = decode_batch(framed, self.config, self.schemas, batch_id)
            # Each table's changes are read by its summary and by its MERGE.
            tables = [replace(t, changes=t.changes.persist()) for t in decoded.tables]
            state = _BatchState()
            with phases.phase("summary"):
                state.summaries = self._summaries(tables, batch_id)
            # Per-table MERGEs are mostly driver-side latency (log replay, planning, commit):
            # running them side by side keeps the cores busy.
            with phases.phase("merge"):
                self._apply_tables(spark, tables, batch_id, state)
            with phases.phase("dead_letters"):
                self._write_dead_letters(
                    spark, [*decoded.dead_letters, *state.dead_letters], batch_id
                )
            self.stats.batches += 1
            self._report(batch_id, phases, state, len(tables))
        finally:
            for table in tables:
                table.changes.unpersist()
            for cached in decoded.cached if decoded else []:
                cached.unpersist()
            framed.unpersist()

    def _applied_position(self, spark: Any, path: str, fences: Fences) -> Position | None:
        """A keyless table's applied position: its partition 0 fence (all its records are in
        partition 0), else where a job before this one kept it (``_pgbridge_positions``)."""
        if 0 in fences.partitions:
            return fences.partitions[0]
        with self._lock:
            legacy = self._legacy_positions
        if legacy is None:
            legacy = read_positions(spark, self.config.positions_path)
            with self._lock:
                self._legacy_positions = legacy
        return legacy.get(path)

    def _report(self, batch_id: int, phases: _PhaseTimer, state: _BatchState, tables: int) -> None:
        """The batch's log line and metrics: phases, and commit-to-visible freshness."""
        visible_ms = time.time() * 1000
        for name, seconds in phases.seconds.items():
            BATCH_PHASE_SECONDS.labels(name).observe(seconds)
        freshness = ""
        if state.commit_ms:
            oldest, newest = min(state.commit_ms), max(state.commit_ms)
            newest_s = max(0.0, (visible_ms - newest) / 1000)
            oldest_s = max(0.0, (visible_ms - oldest) / 1000)
            FRESHNESS.set(newest_s)
            COMMIT_TO_VISIBLE.observe(oldest_s)
            freshness = (
                f"; commit to visible {newest_s:.1f} s (newest) .. {oldest_s:.1f} s (oldest)"
            )
        logger.info(
            "batch %d: %d changes in %d tables, %.1f s (%s)%s",
            batch_id,
            sum(state.counts.values()),
            tables,
            phases.total,
            ", ".join(f"{name} {seconds:.1f}" for name, seconds in phases.seconds.items()),
            freshness,
        )

    def _summaries(self, tables: Sequence[TableBatch], batch_id: int) -> dict[str, Any]:
        """Every table's summary (counts, truncate, identity) in one Spark job, not one each.

        If that job fails (one table's values fail at run time, say), each table computes its
        own summary in its apply, so the failure stays with that table.
        """
        if len(tables) <= 1:
            return {}
        narrow = [_summary_input(t.changes).withColumn(_TABLE_INDEX, F.lit(i))
                  for i, t in enumerate(tables)]  # fmt: skip
        union = narrow[0]
        for other in narrow[1:]:
            union = union.union(other)
        try:
            rows = union.groupBy(_TABLE_INDEX, _PARTITION).agg(*_summary_aggregates()).collect()
        except Exception as exc:  # per-table summaries will locate it
            logger.warning(
                "batch %d: the summary of all tables failed (%s); summarising table by table",
                batch_id,
                _first_line(exc),
            )
            return {}
        per_table: dict[int, list[Any]] = {}
        for row in rows:
            per_table.setdefault(int(row[_TABLE_INDEX]), []).append(row)
        return {tables[i].topic: _combined(parts) for i, parts in per_table.items()}

    def _apply_table(
        self, spark: Any, table: TableBatch, batch_id: int, batch: _BatchState | None = None
    ) -> None:
        batch = batch if batch is not None else _BatchState()
        started = time.monotonic()
        changes = table.changes
        merge_seconds = 0.0
        summary = batch.summaries.get(table.topic)
        if summary is None:
            parts = _summary_input(changes).groupBy(_PARTITION).agg(*_summary_aggregates())
            summary = _combined(parts.collect())
        count = int(summary["n"]) if summary else 0
        if summary is None or count == 0:
            return
        identity = (summary["schema"], summary["table"])
        if identity != (summary["schema_max"], summary["table_max"]) or None in identity:
            raise TableApplyError(
                table.topic,
                f"records of several tables in one topic: {identity} .. "
                f"{(summary['schema_max'], summary['table_max'])}",
            )
        schema, name = str(identity[0]), str(identity[1])
        path = self.config.table_path(schema, name)
        with self._lock:
            self._paths[table.topic] = path
        label = f"{schema}.{name}"
        changes = changes.drop(tf.SOURCE_SCHEMA, tf.SOURCE_TABLE)
        truncate = summary["trunc"]
        truncate_at = (int(truncate[0]), int(truncate[1])) if truncate else None
        exists = path in self._known or _is_delta_table(spark, path)
        keys = table.key_columns
        if not keys and exists and int(summary["rows"]) == 0:
            keys = table_key_columns(spark, path)  # only truncates: the table's own key
        if not exists and int(summary["rows"]) == 0:
            logger.info("%s: truncate of a table never applied; nothing to do", label)
            return
        merge_started = time.monotonic()
        if not exists:  # created by this batch: no commit holds fences (no history to read)
            with self._lock:
                self._fences.setdefault(path, Fences())
        if not keys:
            self._ensure(spark, path, table, ())
            fences = self._fences_of(spark, path)
            last = summary["last"]
            glance = MultisetBatch(
                (int(last[0]), int(last[1])) if last is not None else None,
                truncate_at,
                inserts_only=int(summary["removals"]) == 0,
            )
            # The position travels with the rows, in the commit's userMetadata (multiset.py).
            after = fences.advanced(
                {0: glance.last} if glance.last is not None else {}, truncate_at
            )
            written = apply_multiset(
                spark,
                path,
                changes,
                table.columns,
                self._applied_position(spark, path, fences),
                glance,
                self.config.txn_app_id,
                batch_id,
                empty=not exists,
                commit_metadata=after.to_metadata(),
            )
            if written:
                with self._lock:
                    self._fences[path] = after
            if self.config.history:
                logger.info("%s: no history for a table without key columns", label)
        else:
            changes = changes.drop(tf.COUNT_DELTA) if tf.COUNT_DELTA in changes.columns else changes
            self._ensure(spark, path, table, keys)
            # Resends and changes a truncate already erased never reach the MERGE (fences).
            fences = self._fences_of(spark, path)
            if tf.PARTITION not in changes.columns:  # a batch of truncates only (row images)
                changes = changes.withColumn(tf.PARTITION, F.lit(None).cast("int"))
            changes = fences.filter(changes).drop(tf.PARTITION, tf.OFFSET)
            if truncate_at is not None:
                changes = tf.drop_before(changes, *truncate_at)
            fold = bool(summary["toast"])
            latest = tf.last_change_per_key(changes, keys, fold_unchanged=fold)
            plan = MergePlan(
                key_columns=tuple(keys),
                value_columns=tuple(table.columns.fieldNames()),
                truncate_at=truncate_at,
                fold_unchanged=fold,
            )
            after = fences.advanced(summary["partitions"], truncate_at, summary["offsets"])
            # A table created by this batch is empty: its first load is an append.
            write = merge_changes if exists else append_first_load
            write(
                spark, path, latest, plan, self.config.txn_app_id, batch_id,
                commit_metadata=after.to_metadata(),
            )  # fmt: skip
            with self._lock:
                self._fences[path] = after
        merge_seconds = time.monotonic() - merge_started
        if os.environ.get(PAUSE_AFTER_MERGE_ENV):
            time.sleep(float(os.environ[PAUSE_AFTER_MERGE_ENV]))
        if self.config.history and keys:
            self._apply_history(spark, table, schema, name, changes, keys, truncate,
                                bool(summary["toast"]), batch_id)  # fmt: skip
        with self._lock:
            self.stats.changes += count
            self.stats.per_table[label] = self.stats.per_table.get(label, 0) + count
            batch.counts[table.topic] = count
            batch.commit_ms.extend(
                int(summary[k]) for k in ("oldest_ms", "newest_ms") if summary[k] is not None
            )
        CHANGES_APPLIED.labels(label).inc(count)
        if summary["newest_ms"] is not None:
            TABLE_LAG.labels(label).set(max(0.0, time.time() - int(summary["newest_ms"]) / 1000))
        logger.info(
            "batch %d: %s: %d changes%s in %.1f s (MERGE %.1f s)",
            batch_id,
            label,
            count,
            f", truncate at {truncate_at}" if truncate_at else "",
            time.monotonic() - started,
            merge_seconds,
        )

    def _apply_history(
        self,
        spark: Any,
        table: TableBatch,
        schema: str,
        name: str,
        changes: DataFrame,
        keys: Sequence[str],
        truncate: Any,
        fold: bool,
        batch_id: int,
    ) -> None:
        from delta.tables import DeltaTable

        path = self.config.history_path(schema, name)
        self._ensure(spark, path, table, keys, HISTORY_FIELDS)
        current = None
        if fold:
            current = DeltaTable.forPath(spark, path).toDF().where(F.col(IS_CURRENT))
        merge_history(
            spark,
            path,
            history_versions(changes, keys, current),
            keys,
            table.columns.fieldNames(),
            (int(truncate[0]), int(truncate[1]), truncate[2]) if truncate else None,
            self.config.txn_app_id,
            batch_id,
        )

    def _write_dead_letters(self, spark: Any, frames: list[DataFrame], batch_id: int) -> None:
        """Append the batch's dead letters, idempotently; usually there are none.

        One aggregation over all frames says whether there are any (and why); only then are
        the rows read again and written. No cache: a batch without dead letters costs one job.
        """
        if not frames:
            return
        rows = frames[0]
        for other in frames[1:]:
            rows = rows.union(other)  # every frame has DEAD_LETTER_SCHEMA's columns, in order
        reasons = {r["reason"]: int(r["count"]) for r in rows.groupBy("reason").count().collect()}
        count = sum(reasons.values())
        if count == 0:
            return
        # Idempotent append: a replayed batch does not write its dead letters twice.
        (
            rows.write.format("delta")
            .mode("append")
            .option("txnAppId", self.config.txn_app_id)
            .option("txnVersion", str(batch_id))
            .save(self.config.dead_letter_location)
        )
        self.stats.dead_letters += count
        DEAD_LETTERS.inc(count)
        logger.warning(
            "batch %d: %d records dead-lettered to %s: %s",
            batch_id,
            count,
            self.config.dead_letter_location,
            reasons,
        )


@dataclass(slots=True)
class _BatchState:
    """What the tables of one batch share: summaries, counts, failed tables' rows."""

    dead_letters: list[DataFrame] = field(default_factory=list)
    summaries: dict[str, Any] = field(default_factory=dict)  # topic -> its summary row
    counts: dict[str, int] = field(default_factory=dict)  # topic -> changes applied
    commit_ms: list[int] = field(default_factory=list)  # oldest and newest commit per table


class _PhaseTimer:
    """Wall time per phase of a batch, in the order the phases ran."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - started

    @property
    def total(self) -> float:
        return time.monotonic() - self.started


_TABLE_INDEX = "_pgbridge_table_index"
_PARTITION = "_pgbridge_summary_partition"
_TOAST = "_pgbridge_has_unchanged"
_OFFSET = "_pgbridge_summary_offset"


def _summary_input(changes: DataFrame) -> DataFrame:
    """The columns a table's summary reads, the same for every table (so they can be unioned)."""
    partition = F.col(tf.PARTITION) if tf.PARTITION in changes.columns else F.lit(-1)
    offset = F.col(tf.OFFSET) if tf.OFFSET in changes.columns else F.lit(None)
    return changes.select(
        tf.OP,
        tf.COMMIT_LSN,
        tf.SEQ,
        tf.COMMIT_TS,
        (F.size(tf.UNCHANGED) > 0).alias(_TOAST),
        tf.SOURCE_SCHEMA,
        tf.SOURCE_TABLE,
        partition.cast("int").alias(_PARTITION),
        offset.cast("long").alias(_OFFSET),
    )


def _summary_aggregates() -> list[Any]:
    """A table's batch at a glance: counts, the last truncate, TOAST, identity, commit times."""
    return [
        F.count(F.lit(1)).alias("n"),
        F.count(F.when(F.col(tf.OP) != "t", F.lit(1))).alias("rows"),
        F.count(F.when(F.col(tf.OP).isin("u", "d"), F.lit(1))).alias("removals"),
        F.max(F.when(F.col(tf.OP) == "t", F.struct(tf.COMMIT_LSN, tf.SEQ, tf.COMMIT_TS))).alias(
            "trunc"
        ),
        F.max(_TOAST).alias("toast"),
        F.min(tf.SOURCE_SCHEMA).alias("schema"),
        F.max(tf.SOURCE_SCHEMA).alias("schema_max"),
        F.min(tf.SOURCE_TABLE).alias("table"),
        F.max(tf.SOURCE_TABLE).alias("table_max"),
        F.min(F.unix_millis(tf.COMMIT_TS)).alias("oldest_ms"),
        F.max(F.unix_millis(tf.COMMIT_TS)).alias("newest_ms"),
        F.max(F.struct(tf.COMMIT_LSN, tf.SEQ)).alias("last"),
        F.max(_OFFSET).alias("max_offset"),
    ]


def _combined(parts: Sequence[Any]) -> dict[str, Any] | None:
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

    return {
        "n": sum(int(p["n"]) for p in parts),
        "rows": sum(int(p["rows"]) for p in parts),
        "removals": sum(int(p["removals"]) for p in parts),
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
            int(p[_PARTITION]): (int(p["last"][0]), int(p["last"][1]))
            for p in parts
            if p[_PARTITION] is not None and p[_PARTITION] >= 0 and p["last"] is not None
        },
        "offsets": {
            int(p[_PARTITION]): int(p["max_offset"])
            for p in parts
            if p[_PARTITION] is not None and p[_PARTITION] >= 0 and p["max_offset"] is not None
        },
    }


def _first_line(error: BaseException) -> str:
    """The gist of an error (Spark's carry a JVM stack trace after the first lines)."""
    text = str(error).strip() or repr(error)
    return text.splitlines()[0][:500]


def _is_delta_table(spark: Any, path: str) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, path))


def start_apply(spark: Any, config: ApplyConfig, applier: BatchApplier | None = None) -> Any:
    """Start the streaming query (returns the ``StreamingQuery``; the caller awaits or stops it).

    In the changelog mode, the ingest and compaction queries (:mod:`bridge.spark.changelog`),
    awaited and stopped together; ``applier`` is then the compactor.
    """
    for key, value in job_conf(spark.sparkContext.defaultParallelism).items():
        spark.conf.set(key, value)
    config = with_batch_bound(spark, config)
    watch_topic_lag(spark)
    if config.mode == "changelog":
        return ChangelogQueries(spark, config, applier)
    return start_query(
        kafka_source(spark, config),
        applier or BatchApplier(config),
        config.checkpoint_location,
        config.query_name,
        config,
        config.trigger_interval,
    )


def with_batch_bound(spark: Any, config: ApplyConfig) -> ApplyConfig:
    """``config`` with ``max_offsets_per_trigger`` sized from Spark's memory unless given."""
    if config.max_offsets_per_trigger is not None:
        return config
    records, why = default_batch_records(spark)
    logger.info("micro-batches of %s (--max-offsets-per-trigger to change)", why)
    return replace(config, max_offsets_per_trigger=records)


def kafka_source(spark: Any, config: ApplyConfig) -> DataFrame:
    """Spark's Kafka source over the configured change topics."""
    source: DataFrame = (
        spark.readStream.format("kafka").options(**config.kafka_source_options()).load()
    )
    return source


def start_query(
    source: DataFrame,
    batch_function: Callable[[DataFrame, int], None],
    checkpoint: str,
    name: str,
    config: ApplyConfig,
    interval: str,
) -> Any:
    """A ``foreachBatch`` query: once over what is there (``available_now``), else every
    ``interval``."""
    writer = (
        source.writeStream.foreachBatch(batch_function)
        .option("checkpointLocation", checkpoint)
        .queryName(name)
    )
    if config.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=interval)
    return writer.start()


def topic_lag(progress_sources: Sequence[Any]) -> dict[str, int]:
    """Per topic, records behind: each Kafka source's latest offsets minus its batch's end."""
    import json

    lag: dict[str, int] = {}
    for source in progress_sources:
        try:
            latest: Any = json.loads(source.latestOffset or "null")
            end: Any = json.loads(source.endOffset or "null")
        except (TypeError, ValueError):
            continue
        if not isinstance(latest, dict) or not isinstance(end, dict):
            continue
        for topic, partitions in latest.items():  # Kafka: {topic: {partition: offset}}
            done: Any = end.get(topic)
            if not isinstance(partitions, dict) or not isinstance(done, dict):
                continue  # a Delta source's offset (the changelog's): no topics
            behind = 0
            for partition, offset in partitions.items():
                read_to: Any = done.get(partition, offset)
                behind += max(0, int(offset) - int(read_to))
            lag[topic] = behind
    return lag


_WATCHED: dict[int, Any] = {}  # id(session) -> its lag listener


def watch_topic_lag(spark: Any) -> None:
    """Keep ``pgbridge_apply_topic_lag_records`` from every query's progress (once per
    session)."""
    from pyspark.sql.streaming.listener import StreamingQueryListener

    if id(spark) in _WATCHED:
        return

    class _LagListener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            for topic, behind in topic_lag(event.progress.sources).items():
                TOPIC_LAG_RECORDS.labels(topic).set(behind)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    listener = _LagListener()
    spark.streams.addListener(listener)
    _WATCHED[id(spark)] = listener


def unwatch_topic_lag(spark: Any) -> None:
    """Remove the session's lag listener: Spark posts a query's last progress event
    asynchronously, and one that reaches a Python process on its way out prints a py4j
    traceback at every clean shutdown."""
    listener = _WATCHED.pop(id(spark), None)
    if listener is not None:
        spark.streams.removeListener(listener)


class ChangelogQueries:
    """The changelog mode's two queries as one: ingest (Kafka -> changelog) and compaction.

    With ``available_now`` they run one after the other (everything ingested, then compacted,
    so a catch-up run leaves the base tables complete); otherwise side by side, and the first
    to fail stops the other and raises its error.
    """

    def __init__(self, spark: Any, config: ApplyConfig, compactor: Any = None) -> None:
        from bridge.spark import changelog

        self._changelog = changelog
        self._spark, self._config, self._compactor = spark, config, compactor
        self.queries = [changelog.start_ingest(spark, config)]
        if not config.available_now:
            self.queries.append(self._start_compactor())

    def _start_compactor(self) -> Any:
        return self._changelog.start_compactor(self._spark, self._config, self._compactor)

    @property
    def recentProgress(self) -> list[Any]:
        return [p for q in self.queries for p in q.recentProgress]

    def awaitTermination(self) -> None:
        try:
            if self._config.available_now:
                self.queries[0].awaitTermination()
                self.queries.append(self._start_compactor())
                self.queries[1].awaitTermination()
                return
            while any(q.isActive for q in self.queries):
                for query in self.queries:
                    if not query.isActive:
                        query.awaitTermination()  # raises the error of a failed query
                time.sleep(0.5)
        except BaseException:
            self.stop()  # one failed (or the wait was interrupted): both go
            raise

    def stop(self) -> None:
        for query in self.queries:
            if query.isActive:
                query.stop()


def run_apply(
    config: ApplyConfig, spark: Any = None, session_factory: Callable[[], Any] | None = None
) -> None:
    """Run the job until it stops (``available_now``), fails, or is interrupted.

    Without ``spark``, builds a session with :func:`bridge.spark.session.build_spark_session`
    (master from ``spark-submit`` or ``PGBRIDGE_SPARK_MASTER``, jars from
    ``PGBRIDGE_SPARK_JARS`` or resolved from Maven).
    """
    own_session = spark is None
    if spark is None:
        if session_factory is not None:
            spark = session_factory()
        else:
            from bridge.spark.session import build_spark_session

            conf = dict(config.spark_conf)
            if config.mode == "changelog":
                # Ingest jobs share the cores fairly with a running compaction.
                conf.setdefault("spark.scheduler.mode", "FAIR")
            spark = build_spark_session(
                config.query_name, master=os.environ.get("PGBRIDGE_SPARK_MASTER"), conf=conf
            )
    config = with_batch_bound(spark, config)
    queries: list[Any] = []

    def start() -> Any:
        queries.append(start_apply(spark, config))
        return queries[-1]

    try:
        # A transient failure (Kafka or the registry unreachable) restarts the query from its
        # checkpoint after a backoff instead of ending the job (bridge.spark.restarts).
        run_with_restarts(start, RetryPolicy())
    except KeyboardInterrupt:
        logger.info("interrupted; stopping the query (the checkpoint keeps the position)")
        if queries:
            queries[-1].stop()
    except Exception as exc:  # StreamingQueryException wraps the batch's real error
        lost = jvm_failure(spark, exc, config.max_offsets_per_trigger)
        if lost is not None:
            own_session = False  # nothing left to stop
            raise lost from exc
        raise ApplyError(f"the apply query failed: {exc}") from exc
    finally:
        if own_session:
            _stop_session(spark)


def _stop_session(spark: Any) -> None:
    """Stop a session the job built, its listener first (see :func:`unwatch_topic_lag`)."""
    try:
        unwatch_topic_lag(spark)
        spark.stop()
    except Exception as exc:  # the job's own outcome is what the caller needs
        logger.warning("stopping the Spark session failed: %s", _first_line(exc))


def add_apply_arguments(parser: argparse.ArgumentParser) -> None:
    """The job's options, for ``spark-submit job.py`` and for ``pgbridge apply``."""
    parser.add_argument(
        "-c",
        "--config",
        "--security-config",
        dest="config",
        metavar="FILE",
        help="the pgbridge configuration file pgbridge run reads: topic.prefix, "
        "kafka.bootstrap.servers, schema.registry.url and the Kafka and registry security keys "
        "(kafka.security.protocol, kafka.sasl.*, kafka.ssl.*, schema.registry.*; *.file "
        "secrets) apply here too, as do their PGBRIDGE_* variables; flags win over both",
    )
    parser.add_argument(
        "--topic-prefix", help="topics are <prefix>.<schema>.<table> (default: topic.prefix)"
    )
    parser.add_argument(
        "--bootstrap-servers",
        help="Kafka brokers (default: kafka.bootstrap.servers, else PGBRIDGE_BOOTSTRAP_SERVERS)",
    )
    parser.add_argument(
        "--registry-url",
        help="the registry (default: schema.registry.url, else PGBRIDGE_REGISTRY_URL)",
    )
    parser.add_argument("--delta-base", required=True, help="tables go to <base>/<schema>/<table>")
    parser.add_argument("--checkpoint", required=True, help="the streaming checkpoint location")
    parser.add_argument("--dead-letter", required=True, help="the dead-letter Delta table's path")
    parser.add_argument(
        "--table",
        action="append",
        default=[],
        help="schema.table (repeat; default: all under the prefix)",
    )
    parser.add_argument("--trigger-interval", default="10 seconds")
    parser.add_argument(
        "--available-now", action="store_true", help="apply what is there, then stop"
    )
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        help="Kafka records per micro-batch (default: sized from Spark's memory, about 1 per "
        "2 KiB of heap, so a topic of any length is applied in bounded batches)",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of the Spark session pgbridge apply builds (repeat), e.g. "
        "spark.driver.memory=4g",
    )
    parser.add_argument("--parallel-tables", type=int, default=2, help="tables merged at once")
    parser.add_argument(
        "--mode",
        choices=("merge", "changelog"),
        default="merge",
        help="merge: a MERGE per changed table and batch; changelog: one changelog commit per "
        "batch, current state through views, compaction into the tables behind",
    )
    parser.add_argument(
        "--compaction-interval",
        default="60 seconds",
        help="changelog mode: how often the changelog is compacted into the tables",
    )
    parser.add_argument("--history", action="store_true", help="also keep SCD type 2 history")
    parser.add_argument("--history-base", default="", help="default: <delta-base>/_history")
    parser.add_argument(
        "--no-deletion-vectors",
        dest="deletion_vectors",
        action="store_false",
        help="create tables without Delta deletion vectors (for readers without them)",
    )
    parser.add_argument(
        "--dropped-columns",
        choices=("keep", "drop"),
        default="keep",
        help="a column dropped in the source: keep its Delta column and values (default) or "
        "drop it in Delta too",
    )
    parser.add_argument(
        "--variable-decimal",
        default="38,18",
        metavar="P,S",
        help="Delta decimal(P,S) for unconstrained numeric columns (values that do not fit are "
        "null and dead-lettered); default 38,18",
    )
    parser.add_argument("--app-id", default="", help="Delta txnAppId (default: from --checkpoint)")
    parser.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--registry-option", action="append", default=[], metavar="KEY=VALUE")


def _pairs(items: Sequence[str], key: str) -> tuple[tuple[str, str], ...]:
    from bridge.errors import ConfigError

    pairs = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(key, f"{item!r} is not KEY=VALUE")
        pairs.append((name, value))
    return tuple(pairs)


def config_from_args(args: argparse.Namespace) -> ApplyConfig:
    """An :class:`ApplyConfig` from :func:`add_apply_arguments`' options (validated)."""
    from pathlib import Path

    from bridge.config import load_client_settings
    from bridge.config.settings import reveal
    from bridge.errors import ConfigError

    # The configuration pgbridge run reads (file < PGBRIDGE_* variables), flags over it; the
    # local stack's PGBRIDGE_BOOTSTRAP_SERVERS / PGBRIDGE_REGISTRY_URL last. Nothing set for
    # security: plaintext, no credentials.
    path = getattr(args, "config", None)
    shared = load_client_settings(Path(path) if path else None, os.environ)
    topic_prefix = args.topic_prefix or shared.topic_prefix
    bootstrap_servers = (
        args.bootstrap_servers
        or shared.bootstrap_servers
        or os.environ.get("PGBRIDGE_BOOTSTRAP_SERVERS")
    )
    registry_url = (
        args.registry_url or shared.registry_url or os.environ.get("PGBRIDGE_REGISTRY_URL")
    )
    if not topic_prefix:
        raise ConfigError("topic.prefix", "give --topic-prefix, or topic.prefix in --config")
    if not bootstrap_servers:
        raise ConfigError(
            "kafka.bootstrap.servers",
            "give --bootstrap-servers, kafka.bootstrap.servers in --config, or "
            "PGBRIDGE_KAFKA_BOOTSTRAP_SERVERS",
        )
    if not registry_url:
        raise ConfigError(
            "schema.registry.url",
            "give --registry-url, schema.registry.url in --config, or PGBRIDGE_SCHEMA_REGISTRY_URL",
        )
    kafka, registry = shared.kafka, shared.registry
    # Spark's options are strings; Spark redacts sasl.jaas.config in its logs and UI.
    kafka_security = tuple(
        (k, reveal(v)) for k, v in kafka if (k, v) != ("security.protocol", "PLAINTEXT")
    )
    registry_security = tuple((k, reveal(v)) for k, v in registry)
    precision, _, scale = str(args.variable_decimal).partition(",")
    if not (precision.strip().isdigit() and scale.strip().isdigit()):
        raise ConfigError("variable_decimal", f"{args.variable_decimal!r} is not P,S")
    return ApplyConfig(
        variable_decimal=(int(precision), int(scale)),
        topic_prefix=topic_prefix,
        bootstrap_servers=bootstrap_servers,
        registry_url=registry_url,
        delta_base=args.delta_base,
        checkpoint_location=args.checkpoint,
        dead_letter_location=args.dead_letter,
        tables=tuple(args.table),
        trigger_interval=args.trigger_interval,
        available_now=args.available_now,
        starting_offsets=args.starting_offsets,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        app_id=args.app_id,
        parallel_tables=args.parallel_tables,
        mode=getattr(args, "mode", "merge"),
        compaction_interval=getattr(args, "compaction_interval", "60 seconds"),
        history=args.history,
        history_base=args.history_base,
        deletion_vectors=args.deletion_vectors,
        dropped_columns=args.dropped_columns,
        kafka_options=(*kafka_security, *_pairs(args.kafka_option, "kafka_options")),
        registry_options=(*registry_security, *_pairs(args.registry_option, "registry_options")),
        spark_conf=_pairs(getattr(args, "spark_conf", []), "spark_conf"),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``spark-submit bridge/spark/job.py``."""
    parser = argparse.ArgumentParser(prog="pgbridge-apply", description=__doc__.split("\n")[0])
    add_apply_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        run_apply(config_from_args(args))
    except PgBridgeError as exc:
        print(f"pgbridge-apply: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
