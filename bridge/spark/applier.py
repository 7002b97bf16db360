"""The apply job's micro-batch: :class:`BatchApplier`, the ``foreachBatch`` function.

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
- **merge**: one Delta commit per table that changed, ``parallel_tables`` at a time. A small
  table's batch (at most ``driver_write_rows`` changes, a table under 32 MiB, a local path) is
  written by the driver with delta-rs (:mod:`bridge.spark.driver_merge`): the same MERGE, in
  milliseconds, where Delta's MERGE through Spark costs about a second of fixed work per table
  on 2 cores. Larger ones are Spark's: one Delta MERGE through one session (each thread with its
  own SQL conf, for Delta's idempotent ``txnAppId`` / ``txnVersion``); deletion vectors (on by
  default) make a MERGE touching few rows of a large file mark them instead of rewriting the
  file.
  A table the batch created is empty, so its first load is an append instead (what the MERGE
  would leave: last change per key, deletes dropped), with no join against the target; so is
  a batch of inserts only, whose keys the table's fences prove new
  (:func:`bridge.spark.write_choice.new_keys_only`).
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
refuses, columns differing only in case, an incompatible type change, an engine failure, …) it
is tried once more (a transient storage error passes), then its records of the batch go to the
dead-letter table with the error as the reason, and the other tables go on. The table is then
*held* (:mod:`bridge.spark.set_aside`): its later records go there too, in order, until the
job applies them all again (:mod:`bridge.spark.replay`: at its next start, and every
``held_retry_interval`` while it runs), so the table is late but never wrong. A registry that
cannot answer, running out of memory, a lost JVM and the job's stop fail the batch instead (it
is retried from the checkpoint, nothing is set aside).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from bridge.spark import merge as merge_module
from bridge.spark import transforms as tf
from bridge.spark.adoption import AdoptedTable, adopt_table, sample_path
from bridge.spark.apply_metrics import (
    BATCH_PHASE_SECONDS,
    CHANGES_APPLIED,
    COMMIT_TO_VISIBLE,
    DEAD_LETTERS,
    FRESHNESS,
    TABLE_FAILURES,
    TABLE_LAG,
)
from bridge.spark.config import ApplyConfig, delta_table
from bridge.spark.decode import BatchGroups, SchemaCache, TableBatch, batch_groups, decode_batch
from bridge.spark.driver_changes import (
    ArrowRows,
    admitted,
    arrow_rows,
    last_change_per_key,
    row_images,
)
from bridge.spark.driver_decode import DriverDecoder
from bridge.spark.driver_dv_merge import DV_WRITER, BatchDeclined
from bridge.spark.driver_lane import (
    COLLECTED_RECORDS,
    Candidate,
    DriverTable,
    collect_small_batch,
    driver_tables,
    drives,
    groups_of,
    topic_candidate,
)
from bridge.spark.driver_merge import (
    DRIVER_WRITER,
    DriverWriteRefused,
    append_in_driver,
    driver_write_fits,
    merge_in_driver,
    small_files,
)
from bridge.spark.driver_multiset import multiset_in_driver
from bridge.spark.driver_read import SmallBatchReader
from bridge.spark.errors import RegistryUnavailableError, TableApplyError, first_line
from bridge.spark.fences import Fences, read_fences
from bridge.spark.file_columns import file_columns
from bridge.spark.graceful_stop import BatchAbandoned, interrupted
from bridge.spark.history import HISTORY_FIELDS, IS_CURRENT, history_versions, merge_history
from bridge.spark.lane_driver import TaskLane
from bridge.spark.merge import (
    KEY_COLUMNS_PROPERTY,
    META_FIELDS,
    TOPIC_PROPERTY,
    MergePlan,
    append_new_keys,
    check_names,
    compact,
    ensure_table,
    is_delta_table,
    merge_changes,
    table_key_columns,
)
from bridge.spark.multiset import MultisetBatch, Position, apply_multiset, read_positions
from bridge.spark.resources import is_resource_failure
from bridge.spark.session import activate_in_thread, task_slots
from bridge.spark.set_aside import HeldTables, held_reason, set_aside_reason
from bridge.spark.summary import (
    SUMMARY_PARTITION,
    TABLE_INDEX,
    combine_parts,
    summary_aggregates,
    summary_input,
)
from bridge.spark.table_creation import create_in_log
from bridge.spark.task_lane import LaneCommit, LaneMerge
from bridge.spark.write_choice import inserts_only, new_keys_only

__all__ = ["ApplyStats", "BatchApplier", "first_line", "job_conf"]

logger = logging.getLogger(__name__)

#: Failpoint for crash tests: seconds to pause after each table's MERGE, so a test can kill the
#: process between the Delta commit and the checkpoint. Unset outside tests.
PAUSE_AFTER_MERGE_ENV = "PGBRIDGE_APPLY_PAUSE_AFTER_MERGE"


#: Tables decoded in the driver written by delta-rs at the same time (bridge.spark.driver_lane).
DRIVER_WRITERS = 4


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
        # A table Spark writes every second (the default trigger) gains a file or more per
        # commit: Delta compacts them once there are 50 (autoCompact.minNumFiles), after the
        # commit, in a commit of its own that changes no data (the tables delta-rs writes:
        # BatchApplier._compact_if_fragmented).
        "spark.databricks.delta.autoCompact.enabled": "true",
        # The task lane's records reach Python in Arrow batches of 10,000 records
        # (maxRecordsPerBatch); under a byte limit Spark also measures the batch after every
        # row (ArrowWriter.sizeInBytes: a tenth of the lane job's JVM time in a profile). Int's
        # maximum is Spark's "no byte limit", which skips the measuring.
        "spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1),
    }


@dataclass(slots=True)
class ApplyStats:
    """Running totals of one job (driver side)."""

    batches: int = 0
    changes: int = 0
    dead_letters: int = 0
    per_table: dict[str, int] = field(default_factory=dict)
    # schema.table -> how its last batch was written: (append | insert-only merge | merge |
    # replay, delta-rs | spark)
    last_write: dict[str, tuple[str, str]] = field(default_factory=dict)
    failed_tables: dict[str, str] = field(default_factory=dict)  # topic -> last error
    # Tables' batches decoded in the driver (bridge.spark.driver_lane), not by Spark.
    driver_decoded: int = 0
    # Batches read from Kafka by the driver (bridge.spark.driver_read), not by Spark.
    driver_reads: int = 0
    # The last batch: changes applied, the oldest and newest commit time among them (epoch
    # ms, None without changes), and when its commits were all done (epoch s).
    last_batch: tuple[int, int | None, int | None, float] | None = None


class BatchApplier:
    """The ``foreachBatch`` function. Calling it twice with the same batch id applies once."""

    def __init__(
        self, config: ApplyConfig, schemas: SchemaCache | None = None, *, holds: bool = True
    ) -> None:
        """``holds``: a table whose batch fails twice is set aside and held (the job);
        without, the failure is raised as a :class:`TableApplyError` (a replay of held
        tables, bridge.spark.replay, which must not set aside what it applies)."""
        self.config = config
        self.holds = holds
        file_columns.resize(config.driver_key_cache_mb * 2**20)  # the driver's one cache
        self.schemas = schemas or SchemaCache.for_url(
            config.registry_url, dict(config.registry_options)
        )
        # Tables held since a batch of theirs failed (bridge.spark.set_aside); the job gives
        # it the replay that tries them again (bridge.spark.job.start_apply).
        self.held_tables = HeldTables(config.dead_letter_location, config.held_retry_seconds)
        self.stats = ApplyStats()
        self._lock = threading.Lock()
        self._local = threading.local()
        self._pool: ThreadPoolExecutor | None = None
        self._driver_pool: ThreadPoolExecutor | None = None
        self._delta_tables: dict[str, Any] = {}  # path -> its delta-rs table, kept open
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
        # Tables delta-rs refused to write (bridge.spark.driver_merge): Spark writes them.
        self._spark_only: set[str] = set()
        # Topics whose table could not be taken over from its log (bridge.spark.adoption):
        # Spark's path learns it (and creates it where it does not exist yet).
        self._not_adopted: set[str] = set()
        # Tables that hold no row yet (created by this job, or only created by an earlier
        # run): their next batch is their first load, an append (write_choice).
        self._first_loads: set[str] = set()
        self._decoder = DriverDecoder()
        # Whether the last batch was small enough to collect whole (collect_small_batch); a
        # batch after a start is counted by Spark first (its size is not known yet).
        self._small_batches = False
        # A batch of few records, read from Kafka by the driver (no Spark job).
        self._small_batch = SmallBatchReader(config)
        # Large batches of new keys, decoded and written by Spark's Python tasks.
        self.lane = TaskLane(config, self.schemas, self._decoder, self)
        # Set by the job's stop (bridge.spark.graceful_stop) as it stops the query: the batch
        # running then leaves what it has not begun; the job group is its query's (per batch).
        self.stopped = threading.Event()
        self._job_group: str | None = None

    def session(self, spark: Any) -> Any:
        """This thread's own session (same SparkContext and cache, own SQL conf).

        Delta's idempotent-DML settings are session conf: tables merged concurrently must not
        see each other's, so each worker thread merges through a session of its own.
        """
        session = getattr(self._local, "session", None)
        if session is None:
            session = spark.newSession()
            for key, value in job_conf(task_slots(spark)).items():
                session.conf.set(key, value)
            activate_in_thread(session)  # a worker thread's JVM peer has no active session
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
        if known is None and self._create_in_log(
            path, table.columns, keys, table.topic, metadata or META_FIELDS
        ):
            with self._lock:
                self._known[path] = columns
            return
        extra = {"metadata": metadata} if metadata is not None else {}
        self._forget_driver_table(path)
        ensure_table(
            spark,
            path,
            table.columns,
            keys,
            table.topic,
            properties=self._properties(),
            renames=table.renames,
            drop_absent=drop,
            missing=table.missing,
            decimal=self.config.variable_decimal,
            **extra,
        )
        with self._lock:
            self._known[path] = columns if drop else (known or frozenset()) | columns

    def fences_of(self, spark: Any, path: str) -> Fences:
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
        self,
        spark: Any,
        tables: Sequence[TableBatch | DriverTable],
        batch_id: int,
        batch: _BatchState,
    ) -> None:
        in_driver = [t for t in tables if isinstance(t, DriverTable)]
        with_spark: list[TableBatch | DriverTable] = [
            t for t in tables if not isinstance(t, DriverTable)
        ]
        futures = []
        # Tables decoded in the driver are written by delta-rs, which waits on files more than
        # it computes: more of them at a time than Spark MERGEs (measured, 100 one-row tables
        # per batch: 2.0 s with 2 at a time, 1.25 s with 4, 1.4 s with 8).
        if len(in_driver) > 1:
            if self._driver_pool is None:
                self._driver_pool = ThreadPoolExecutor(
                    DRIVER_WRITERS, thread_name_prefix="pgbridge-driver-write"
                )
            writers = self._driver_pool
            futures = [self._submit(writers, spark, t, batch_id, batch) for t in in_driver]
        else:
            with_spark = [*in_driver, *with_spark]
        if self.config.parallel_tables == 1 or len(with_spark) <= 1:
            for table in with_spark:
                self._apply_or_set_aside(self.session(spark), table, batch_id, batch)
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    self.config.parallel_tables, thread_name_prefix="pgbridge-apply"
                )
            futures += [self._submit(self._pool, spark, t, batch_id, batch) for t in with_spark]
        # Wait for all before raising: a MERGE still running must not outlive the batch.
        errors = [f.exception() for f in futures]
        for error in errors:
            if error is not None:
                raise error

    def _submit(
        self,
        pool: ThreadPoolExecutor,
        spark: Any,
        table: TableBatch | DriverTable,
        batch_id: int,
        batch: _BatchState,
    ) -> Any:
        return pool.submit(
            lambda: self._apply_or_set_aside(self.session(spark), table, batch_id, batch)
        )

    def _apply_or_set_aside(
        self, spark: Any, table: TableBatch | DriverTable, batch_id: int, batch: _BatchState
    ) -> None:
        """Apply one table; if it fails twice, dead-letter its records instead of the batch."""
        error: Exception | None = None
        for attempt in (1, 2):
            self._leave_if_stopped(table.name)
            try:
                self._apply_table(spark, table, batch_id, batch)
                return
            except RegistryUnavailableError:
                raise  # transient and batch-wide: retried from the checkpoint
            except Exception as exc:  # one odd table must not halt the others
                if is_resource_failure(exc) or interrupted(exc):
                    # Memory or the JVM, or the query's stop, not the data: setting the records
                    # aside would lose them from Delta for good. The batch fails (the job says
                    # what to change) or ends with the query, applied again at the next start.
                    raise
                error = exc
                with self._lock:
                    self._known.pop(self._paths.get(table.topic, ""), None)
                    self._fences.pop(self._paths.get(table.topic, ""), None)
                if isinstance(exc, TableApplyError):
                    break  # a definite problem of the table's data: no use retrying
                logger.warning("batch %d: %s failed (attempt %d): %s", batch_id, table.name,
                               attempt, exc)  # fmt: skip
        assert error is not None
        reason = set_aside_reason(error)
        if not self.holds:
            raise TableApplyError(table.name, reason) from error
        logger.error("batch %d: %s: %s; its records, and its later ones until it is tried "
                     "again, go to the dead-letter table", batch_id, table.name,
                     reason)  # fmt: skip
        with self._lock:
            raw = table.raw_frame(spark) if isinstance(table, DriverTable) else table.raw
            batch.dead_letters.append(tf.dead_letters(raw, reason, batch_id))
            self.stats.failed_tables[table.topic] = reason
        self.held_tables.hold(table.topic, batch_id)
        TABLE_FAILURES.labels(table.topic).inc()

    def _leave_if_stopped(self, what: str) -> None:
        """Leave the batch (:class:`BatchAbandoned`) if the job's stop stopped its query."""
        if self.stopped.is_set():
            raise BatchAbandoned(what, self._job_group)

    def _held_now(self, spark: Any) -> dict[str, int]:
        """The tables held at this batch's start (bridge.spark.set_aside), after trying them
        again if it is time to; none in a replay (which applies what is held)."""
        if not self.holds:
            return {}
        released = self.held_tables.retry(spark)
        if released:
            self._released(released)
        return self.held_tables.current(spark)

    def _released(self, topics: set[str]) -> None:
        """Tables a replay applied beside this applier: what it knew of them is stale, so they
        are taken over from their logs again, as by a new job (bridge.spark.adoption)."""
        with self._lock:
            paths = [p for t in topics if (p := self._paths.pop(t, None)) is not None]
            self._not_adopted -= topics
            for path in paths:
                self._known.pop(path, None)
                self._fences.pop(path, None)
                self._delta_tables.pop(path, None)
                self._spark_only.discard(path)
                self._first_loads.discard(path)
        self.lane.forget(topics, paths)

    def _hold_back(
        self, framed: DataFrame, groups: BatchGroups, held: dict[str, int], batch_id: int,
        batch: _BatchState,
    ) -> set[str]:  # fmt: skip
        """Set aside the batch's records of held tables (behind what failed before, in
        order); the topics they were."""
        topics = {str(g["topic"]) for g in groups.groups} & held.keys()
        for topic in sorted(topics):
            # Unframed records are dead-lettered as such (decode_batch), not held twice.
            rows = framed.where((F.col("topic") == topic) & F.col(tf.FRAMING_ERROR).isNull())
            batch.dead_letters.append(tf.dead_letters(rows, held_reason(held[topic]), batch_id))
        if topics:
            logger.warning(
                "batch %d: held back (set aside before, applied when the table is tried "
                "again): %s", batch_id, ", ".join(sorted(topics)),
            )  # fmt: skip
        return topics

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        phases = _PhaseTimer()
        spark = batch.sparkSession
        # The query's job group (this thread's, as the query runs the function): what its
        # stop cancels, and how Spark knows an error of this batch for its stop's.
        self._job_group = spark.sparkContext.getLocalProperty("spark.jobGroup.id")
        # One partition per core: a batch of many topics arrives in one Kafka partition per
        # topic-partition, and every group's and table's frame would otherwise carry all of
        # them (mostly empty), multiplying the tasks of each job by the number of topics.
        # Cached by decode_batch only when the batch has several (topic, schema id) groups.
        framed = tf.frame(batch).coalesce(task_slots(spark))
        decoded = None
        tables: list[TableBatch] = []
        in_driver: list[DriverTable] = []
        try:
            state = _BatchState()
            laned: set[str] = set()
            collected = groups = None
            held = self._held_now(spark)
            # The topics the lane took last batch, or those it guesses from the batch's Kafka
            # ranges: the lane's job reads the batch once for them and for the batch's
            # groups (task_lane.run_lane_first).
            with phases.phase("lane"):
                started = time.monotonic()
                commits, groups = self.lane.first(framed, batch_id, skip=set(held))
                laned = self._lane_applied(commits, batch_id, state, started)
            if groups is None:
                with phases.phase("read"):
                    # A batch known small from its Kafka ranges is read by the driver (no
                    # Spark job); else one as small as the last is collected whole by Spark:
                    # either way read from Kafka once for its groups and the driver's records.
                    if drives(self.config):
                        collected = self._small_batch.read(batch_id)
                        self.stats.driver_reads += collected is not None
                        if collected is None and self._small_batches:
                            collected = collect_small_batch(framed)
                    groups = groups_of(collected) if collected is not None else batch_groups(framed)
            records = sum(int(group["records"]) for group in groups.groups)
            self._small_batches = records <= COLLECTED_RECORDS
            groups = groups.without(laned)
            groups = groups.without(self._hold_back(framed, groups, held, batch_id, state))
            if collected is None:
                # Large tables' batches of new keys, in one job (its own read of the batch:
                # caching the batch for it costs more than reading Kafka again).
                with phases.phase("lane"):
                    started = time.monotonic()
                    commits = self.lane.run(framed, groups, batch_id)
                    laned |= self._lane_applied(commits, batch_id, state, started)
                groups = groups.without(laned)
            with phases.phase("read"):
                self._adopt_topics(groups)
                if collected is None and len(groups.groups) > 1:
                    framed.persist()  # read by the driver's collection and each decode
                in_driver = driver_tables(
                    framed,
                    groups,
                    self.config,
                    self.schemas,
                    self._decoder,
                    self._driver_path,
                    collected,
                )
                decoded = decode_batch(
                    framed,
                    self.config,
                    self.schemas,
                    batch_id,
                    task_slots(spark),
                    groups.without({t.topic for t in in_driver}),
                )
            for topic in decoded.set_aside:  # its records are in decoded.dead_letters
                if not self.holds:  # a replay: those records are set aside already
                    raise TableApplyError(topic, "its records cannot be decoded as a table")
                self.held_tables.hold(topic, batch_id)
                TABLE_FAILURES.labels(topic).inc()
            # Each table's changes are read by its summary and by its MERGE, both from the
            # decoded records' cache (decode_batch): the changes are projections of them, and
            # caching them too cost more than computing them twice (measured: a 1.5M-row
            # snapshot batch 19.0 -> 15.4 s, a 4-table mix 17.3 -> 16.0 s).
            tables = list(decoded.tables)
            self._leave_if_stopped("its tables' summaries")
            with phases.phase("summary"):
                state.summaries = self._summaries(tables, batch_id)
            # Per-table MERGEs are mostly driver-side latency (log replay, planning, commit):
            # running them side by side keeps the cores busy.
            with phases.phase("merge"):
                self._apply_tables(spark, [*in_driver, *tables], batch_id, state)
            with phases.phase("dead_letters"):
                self._write_dead_letters(
                    spark, [*decoded.dead_letters, *state.dead_letters], batch_id
                )
            self.stats.batches += 1
            self.stats.driver_decoded += len(in_driver)
            self._report(batch_id, phases, state, len(tables) + len(in_driver) + len(laned))
        except BatchAbandoned as left:
            logger.info("batch %d: left at the job's stop (the next start applies it again, "
                        "its tables committed skipped): %s", batch_id, left.what)  # fmt: skip
            raise
        finally:
            for cached in decoded.cached if decoded else []:
                cached.unpersist()
            framed.unpersist()
            self.lane.end_batch()

    def _lane_applied(
        self, commits: dict[str, LaneCommit], batch_id: int, state: _BatchState, started: float
    ) -> set[str]:
        """Book the lane's commits (bridge.spark.lane_driver): fences, stats, metrics, log
        lines; the topics it applied."""
        for committed in commits.values():
            with self._lock:
                self._fences[committed.path] = committed.fences
                self.stats.last_write[committed.label] = committed.written
            self.lane.committed(committed)
            if not committed.written[1].endswith(DRIVER_WRITER):  # not through the kept table
                self._forget_driver_table(committed.path)
            summary = committed.summary
            self._record(committed.topic, committed.label, summary, int(summary["n"]), None,
                         batch_id, state, started, time.monotonic() - started)  # fmt: skip
        return set(commits)

    # What the task lane asks of the tables this job writes (lane_driver.LaneHost).

    def path_of(self, topic: str) -> str | None:
        with self._lock:
            return self._paths.get(topic)

    def adopt(self, topic: str, rows: list[Any]) -> bool:
        """Whether ``topic``'s table is known to this job: applied by it, or created by an
        earlier run and taken over now from its Delta log (bridge.spark.adoption: its columns,
        fences and delta-rs table, without Spark). ``rows``: the topic's batch groups."""
        with self._lock:
            if topic in self._paths:
                return True
            if topic in self._not_adopted:
                return False
        path = sample_path(topic, rows, self.config, self.schemas, self._decoder)
        adopted = None
        if path is not None and not self.spark_only(path):
            adopted = adopt_table(path) or self._created_for_driver(topic, rows, path)
        with self._lock:
            if path is None or adopted is None:
                self._not_adopted.add(topic)
                return False
            self._paths[topic] = path
            self._known.setdefault(path, adopted.columns)
            self._fences.setdefault(path, adopted.fences)
            self._delta_tables.setdefault(path, adopted.table)
            if adopted.table.version() == 0:  # only its creation: it holds no row yet
                self._first_loads.add(path)
        logger.info("%s: taken over from its Delta log at version %d", path,
                    adopted.table.version())  # fmt: skip
        return True

    def _created_for_driver(self, topic: str, rows: list[Any], path: str) -> AdoptedTable | None:
        """A new table for a topic whose batch the driver decodes (bridge.spark.driver_lane),
        created by its first commit (bridge.spark.table_creation), so that its first load is
        written as any small batch is, not by Spark's path; None otherwise (larger batches
        are the task lane's or Spark's, which create their tables themselves)."""
        records = sum(int(row["records"]) for row in rows)
        if not drives(self.config) or records > self.config.driver_write_rows:
            return None
        try:
            candidate = topic_candidate(topic, rows, self.config, self.schemas, self._decoder,
                                        lambda *_: path)  # fmt: skip
        except Exception as exc:  # the registry, or a schema Spark's path judges
            logger.debug("%s: created by Spark's path (%s: %s)", topic, type(exc).__name__, exc)
            return None
        if candidate is None or not self._create_in_log(
            path, candidate.columns, candidate.key_columns, topic
        ):
            return None
        return adopt_table(path)

    def _create_in_log(
        self,
        path: str,
        columns: T.StructType,
        keys: Sequence[str],
        topic: str,
        metadata: Sequence[T.StructField] = META_FIELDS,
    ) -> bool:
        """Create the table at ``path`` by its first commit (bridge.spark.table_creation) with
        what Spark's ``ensure_table`` would give it; False where Spark must create it."""
        check_names(topic, columns)
        wanted = T.StructType(
            [*(T.StructField(f.name, f.dataType, True) for f in columns.fields), *metadata]
        )
        properties = {
            KEY_COLUMNS_PROPERTY: ",".join(keys),
            TOPIC_PROPERTY: topic,
            **self._properties(),
        }
        if not create_in_log(path, wanted, properties):
            return False
        logger.info("created Delta table %s for %s (key %s)", path, topic, list(keys))
        return True

    def _adopt_topics(self, groups: BatchGroups) -> None:
        """Take over from their logs the tables of the batch's topics this job does not know
        yet (:meth:`adopt`): the first batch after a start then writes them as any other."""
        per_topic: dict[str, list[Any]] = {}
        for row in groups.groups:
            per_topic.setdefault(str(row["topic"]), []).append(row)
        for topic, rows in per_topic.items():
            if self.config.is_table_topic(topic):
                self.adopt(topic, rows)

    def columns_of(self, path: str) -> frozenset[tuple[str, str]] | None:
        with self._lock:
            return self._known.get(path)

    def spark_only(self, path: str) -> bool:
        with self._lock:
            return path in self._spark_only

    def create_table(self, spark: Any, candidate: Candidate) -> None:
        path, keys, topic = candidate.path, candidate.key_columns, candidate.topic
        if not self._create_in_log(path, candidate.columns, keys, topic):
            properties, decimal = self._properties(), self.config.variable_decimal
            ensure_table(spark, path, candidate.columns, keys, topic, properties=properties,
                         decimal=decimal)  # fmt: skip
        typed = frozenset((f.name.lower(), f.dataType.simpleString()) for f in candidate.columns)
        with self._lock:
            self._known[candidate.path] = typed
            self._paths[candidate.topic] = candidate.path

    def forget(self, paths: Iterable[str]) -> None:
        with self._lock:
            for path in paths:
                self._fences.pop(path, None)
                self._delta_tables.pop(path, None)

    def merge_lane(
        self,
        spark: Any,
        merge: LaneMerge,
        rows: ArrowRows,
        candidate: Candidate,
        batch_id: int,
        max_table_bytes: int,
    ) -> LaneCommit:
        """A batch the task lane folded to each key's last change (bridge.spark.task_lane.
        folded_rows), written as a table decoded in the driver is (:meth:`_write_keyed`):
        delta-rs where the table is under ``max_table_bytes``, whatever the number of rows
        (they are decoded and folded already: ``driver_write_rows`` bounds the driver's
        decoding), else Spark."""
        summary = merge.summary
        work = _TableWork(_LaneTable(merge.topic, candidate.columns), merge.path, merge.label,
                          None, summary, int(summary["n"]), True, batch_id)  # fmt: skip
        fences = self.fences_of(spark, merge.path)
        self._write_keyed(self.session(spark), work, candidate.key_columns, fences, rows,
                          fold=False, lane_bytes=max_table_bytes)  # fmt: skip
        with self._lock:
            after, (kind, writer) = self._fences[merge.path], self.stats.last_write[merge.label]
        # Who folded and who wrote: the tasks, then delta-rs (or Spark: a table grown large).
        written = (kind, f"tasks+{writer}" if writer else "tasks")
        return LaneCommit(merge.topic, merge.path, merge.label, summary, after, 0, written)

    def _driver_path(
        self, topic: str, columns: frozenset[tuple[str, str]], records: int
    ) -> str | None:
        """The path of ``topic``'s table when its batch of ``records`` with these (name, type)
        columns may be decoded and written in the driver: a table this job wrote before with
        these columns (nothing to create or evolve) that delta-rs writes (driver_write_fits)."""
        with self._lock:
            path = self._paths.get(topic)
            known = self._known.get(path) if path is not None else None
            if path is None or known is None or path in self._spark_only:
                return None
        drop = self.config.dropped_columns == "drop"
        if not (columns == known if drop else columns <= known):
            return None
        if self._driver_target(path, records) is None:
            return None
        return path

    def _driver_target(
        self, path: str, count: int, max_table_bytes: int | None = None
    ) -> Any | None:
        """The delta-rs table to write ``count`` changes to at ``path`` (driver_write_fits),
        kept open between batches as this job's writes leave it (opening a table's log, or
        bringing it up to date, lists the log's directory: see driver_write_fits); dropped by
        :meth:`_forget_driver_table` when this job writes the table another way."""
        with self._lock:
            opened = self._delta_tables.get(path)
        target = driver_write_fits(
            path, count, self.config.driver_write_rows, opened, max_table_bytes
        )
        with self._lock:
            if target is None:
                self._delta_tables.pop(path, None)
            else:
                self._delta_tables[path] = target
        return target

    def _forget_driver_table(self, path: str) -> None:
        """This job wrote ``path`` through Spark: its kept delta-rs table is behind the log."""
        with self._lock:
            self._delta_tables.pop(path, None)

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
        commit_ms = state.commit_ms
        self.stats.last_batch = (
            sum(state.counts.values()),
            min(commit_ms) if commit_ms else None,
            max(commit_ms) if commit_ms else None,
            visible_ms / 1000,
        )
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
        narrow = [summary_input(t.changes).withColumn(TABLE_INDEX, F.lit(i))
                  for i, t in enumerate(tables)]  # fmt: skip
        union = narrow[0]
        for other in narrow[1:]:
            union = union.union(other)
        # A union has every branch's partitions (two per table here): one task each, tens of
        # milliseconds apiece, hundreds per batch. One task per core reads them in turn
        # (measured, 100 one-row tables: 46.2 -> 27.4 s).
        union = union.coalesce(task_slots(union.sparkSession))
        try:
            rows = (
                union.groupBy(TABLE_INDEX, SUMMARY_PARTITION).agg(*summary_aggregates()).collect()
            )
        except Exception as exc:  # per-table summaries will locate it
            if interrupted(exc):
                raise  # the query's stop: nothing to locate, the batch ends
            logger.warning(
                "batch %d: the summary of all tables failed (%s); summarising table by table",
                batch_id,
                first_line(exc),
            )
            return {}
        per_table: dict[int, list[Any]] = {}
        for row in rows:
            per_table.setdefault(int(row[TABLE_INDEX]), []).append(row)
        return {tables[i].topic: combine_parts(parts) for i, parts in per_table.items()}

    def _apply_table(
        self,
        spark: Any,
        table: TableBatch | DriverTable,
        batch_id: int,
        batch: _BatchState | None = None,
    ) -> None:
        batch = batch if batch is not None else _BatchState()
        if isinstance(table, DriverTable):
            self._apply_driver_table(spark, table, batch_id, batch)
            return
        started = time.monotonic()
        changes = table.changes
        merge_seconds = 0.0
        summary = batch.summaries.get(table.topic)
        if summary is None:
            parts = summary_input(changes).groupBy(SUMMARY_PARTITION).agg(*summary_aggregates())
            summary = combine_parts(parts.collect())
        count = int(summary["n"]) if summary else 0
        if summary is None or count == 0:
            return
        identity = (summary["schema"], summary["table"])
        if None in identity:
            raise TableApplyError(table.topic, "records without a source table")
        # Several source tables share a topic only when the bridge routes them into it
        # (bridge.routing): they land in the topic's table, not each in its own.
        schema, name = delta_table(
            self.config.topic_prefix, table.topic, str(identity[0]), str(identity[1])
        )
        routed = (schema, name) != (str(identity[0]), str(identity[1]))
        if not routed and identity != (summary["schema_max"], summary["table_max"]):
            raise TableApplyError(
                table.topic,
                f"records of several tables in one topic: {identity} .. "
                f"{(summary['schema_max'], summary['table_max'])}",
            )
        path = self.config.table_path(schema, name)
        with self._lock:
            self._paths[table.topic] = path
        label = f"{schema}.{name}"
        changes = changes.drop(tf.SOURCE_SCHEMA, tf.SOURCE_TABLE)
        if routed and summary["trunc"] is not None:
            # One routed table's TRUNCATE would empty every routed table's rows here.
            logger.warning(
                "%s: a TRUNCATE of a table routed into topic %s is not applied (it would empty "
                "the rows of every table routed there); delete that table's rows by its %s",
                label,
                table.topic,
                self.config.routed_key[0],
            )
            summary = {**summary, "trunc": None}
            changes = changes.where(F.col(tf.OP) != "t")
            if int(summary["rows"]) == 0:
                return
        truncate = summary["trunc"]
        with self._lock:
            empty = path in self._first_loads or self.lane.created_empty(path)
        exists = not empty and (path in self._known or is_delta_table(spark, path))
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
        work = _TableWork(table, path, label, changes, summary, count, exists, batch_id)
        if keys:
            changes = self._merge_keyed(spark, work, keys)
        else:
            self._merge_keyless(spark, work)
        merge_seconds = time.monotonic() - merge_started
        _pause_after_merge()
        if self.config.history and keys:
            self._apply_history(spark, table, schema, name, changes, keys, truncate,
                                bool(summary["toast"]), batch_id)  # fmt: skip
        self._record_applied(work, batch, started, merge_seconds)

    def _apply_driver_table(
        self, spark: Any, table: DriverTable, batch_id: int, batch: _BatchState
    ) -> None:
        """A table decoded in the driver (bridge.spark.driver_lane): its fences, last change
        per key and rows in Python, written as :meth:`_write_keyed` writes any keyed table (a
        table without key columns: its row images, as :meth:`_write_multiset` writes any).
        Only tables this job wrote before with these columns come here."""
        started = time.monotonic()
        summary = table.summary
        label = f"{summary['schema']}.{summary['table']}"
        with self._lock:
            exists = table.path not in self._first_loads
        work = _TableWork(table, table.path, label, None, summary, int(summary["n"]), exists,
                          batch_id)  # fmt: skip
        fences = self.fences_of(spark, table.path)
        if not table.key_columns:  # a multiset: its row images, as Spark's path makes them
            self._write_multiset(spark, work, fences, row_images(table.changes, table.columns))
            merge_seconds = time.monotonic() - started
            _pause_after_merge()
            self._record_applied(work, batch, started, merge_seconds)
            return
        names = table.columns.fieldNames()
        fold = bool(summary["toast"])
        changes = admitted(table.changes, fences, work.truncate_at)
        keys = [names.index(k) for k in table.key_columns]
        latest = arrow_rows(last_change_per_key(changes, keys, fold, names), table.columns)
        self._write_keyed(spark, work, table.key_columns, fences, latest, fold)
        merge_seconds = time.monotonic() - started
        _pause_after_merge()
        self._record_applied(work, batch, started, merge_seconds)

    def _record_applied(
        self, work: _TableWork, batch: _BatchState, started: float, merge_seconds: float
    ) -> None:
        """A table's batch is in Delta: stats, metrics, its log line."""
        with self._lock:
            self._first_loads.discard(work.path)
        self._record(work.table.topic, work.label, work.summary, work.count, work.truncate_at,
                     work.batch_id, batch, started, merge_seconds)  # fmt: skip

    def _record(
        self,
        topic: str,
        label: str,
        summary: dict[str, Any],
        count: int,
        truncate_at: tuple[int, int] | None,
        batch_id: int,
        batch: _BatchState,
        started: float,
        merge_seconds: float,
    ) -> None:
        with self._lock:
            self.stats.changes += count
            self.stats.per_table[label] = self.stats.per_table.get(label, 0) + count
            batch.counts[topic] = count
            batch.commit_ms.extend(
                int(summary[k]) for k in ("oldest_ms", "newest_ms") if summary[k] is not None
            )
        CHANGES_APPLIED.labels(label).inc(count)
        if summary["newest_ms"] is not None:
            TABLE_LAG.labels(label).set(max(0.0, time.time() - int(summary["newest_ms"]) / 1000))
        kind, writer = self.stats.last_write.get(label, ("write", ""))
        logger.info(
            "batch %d: %s: %d changes%s in %.1f s (%s%s %.1f s)",
            batch_id,
            label,
            count,
            f", truncate at {truncate_at}" if truncate_at else "",
            time.monotonic() - started,
            kind,
            f" by {writer}" if writer else "",
            merge_seconds,
        )

    def _merge_keyless(self, spark: Any, work: _TableWork) -> None:
        """A table without key columns: its row images as a multiset (bridge.spark.multiset)."""
        path, table = work.path, work.table
        assert work.changes is not None and isinstance(table, TableBatch)
        self._ensure(spark, path, table, ())
        self._write_multiset(spark, work, self.fences_of(spark, path), work.changes)

    def _write_multiset(
        self, spark: Any, work: _TableWork, fences: Fences, images: DataFrame | ArrowRows
    ) -> None:
        """Write a keyless table's row images (bridge.spark.multiset): by delta-rs where it
        fits (bridge.spark.driver_multiset), else by Spark; the position goes with the rows."""
        path, summary, truncate_at = work.path, work.summary, work.truncate_at
        last = summary["last"]
        glance = MultisetBatch(
            (int(last[0]), int(last[1])) if last is not None else None,
            truncate_at,
            inserts_only=int(summary["removals"]) == 0,
        )
        # The position travels with the rows, in the commit's userMetadata (multiset.py).
        after = fences.advanced({0: glance.last} if glance.last is not None else {}, truncate_at)
        applied = self._applied_position(spark, path, fences)
        columns = work.table.columns
        metadata, app_id = after.to_metadata(), self.config.txn_app_id
        wrote: list[bool] = []

        def in_driver(target: Any) -> None:
            wrote.append(
                multiset_in_driver(
                    target, images, columns, applied, glance, app_id, work.batch_id,
                    commit_metadata=metadata,
                )
            )  # fmt: skip

        def with_spark() -> None:
            frame = images if isinstance(images, DataFrame) else images.to_frame(spark)
            wrote.append(
                apply_multiset(
                    spark, path, frame, columns, applied, glance, app_id, work.batch_id,
                    empty=not work.exists, commit_metadata=metadata,
                )
            )  # fmt: skip

        writer = self._write(path, work.count, in_driver, with_spark)
        if wrote[-1]:
            with self._lock:
                self._fences[path] = after
                self.stats.last_write[work.label] = ("multiset", writer)
        if self.config.history:
            logger.info("%s: no history for a table without key columns", work.label)

    def _merge_keyed(self, spark: Any, work: _TableWork, keys: Sequence[str]) -> DataFrame:
        """A keyed table: the last change per key, MERGEd (or appended to a table this batch
        created); the changes as the MERGE saw them (fenced), for the history table."""
        path, table, summary, truncate_at = work.path, work.table, work.summary, work.truncate_at
        changes = work.changes
        assert changes is not None and isinstance(table, TableBatch)
        changes = changes.drop(tf.COUNT_DELTA) if tf.COUNT_DELTA in changes.columns else changes
        self._ensure(spark, path, table, keys)
        # Resends and changes a truncate already erased never reach the MERGE (fences).
        fences = self.fences_of(spark, path)
        if tf.PARTITION not in changes.columns:  # a batch of truncates only (row images)
            changes = changes.withColumn(tf.PARTITION, F.lit(None).cast("int"))
        uncovered = (
            fences.not_covered(F.col(tf.PARTITION), F.col(tf.OFFSET))
            if tf.OFFSET in changes.columns
            else None
        )
        if uncovered is not None:  # records a commit of this table covered: applied already
            changes = changes.where(uncovered)
        changes = fences.filter(changes).drop(tf.PARTITION, tf.OFFSET)
        if truncate_at is not None:
            changes = tf.drop_before(changes, *truncate_at)
        fold = bool(summary["toast"])
        latest = tf.last_change_per_key(changes, keys, fold_unchanged=fold)
        self._write_keyed(spark, work, keys, fences, latest, fold)
        return changes

    def _write_keyed(
        self,
        spark: Any,
        work: _TableWork,
        keys: Sequence[str],
        fences: Fences,
        latest: DataFrame | ArrowRows,
        fold: bool,
        lane_bytes: int | None = None,
    ) -> None:
        """Write a keyed table's last changes: nothing for a replay, an append where the keys
        are new (a table this batch created, inserts the fences prove new), else a MERGE; by
        delta-rs where it fits, else by Spark. ``lane_bytes``: ``latest`` came decoded and
        folded (the task lane's), so no bound on the driver's decoding applies, and delta-rs
        writes tables up to these bytes (bridge.spark.lane_driver.lane_merge_max_bytes)."""
        path, table, summary, truncate_at = work.path, work.table, work.summary, work.truncate_at
        exists, count = work.exists, work.count
        plan = MergePlan(
            key_columns=tuple(keys),
            value_columns=tuple(table.columns.fieldNames()),
            truncate_at=truncate_at,
            fold_unchanged=fold,
            inserts_only=inserts_only(summary, count, fences),
        )
        after = fences.advanced(
            summary["partitions"],
            truncate_at,
            summary["offsets"],
            summary["lowest_lsn"],
            first_load=not exists,
        )
        metadata, app_id = after.to_metadata(), self.config.txn_app_id

        def frame() -> DataFrame:  # for Spark's write of rows decoded in the driver
            return latest if isinstance(latest, DataFrame) else latest.to_frame(spark)

        # A table created by this batch is empty: its first load is an append; so is a batch
        # of inserts the fences prove new to the table.
        if exists and fences.cover(summary["offsets"]):
            logger.info("%s: batch %d was applied before (a replay): nothing to write", work.label,
                        work.batch_id)  # fmt: skip
            written = ("replay", "")
        elif not exists or new_keys_only(summary, count, fences, table.pgbridge_positions):
            # Replays are fenced by the offsets the table's commits covered (above); Delta's
            # own check of the transaction id costs three Spark jobs per table and batch (it
            # rebuilds the snapshot's state), so it is kept only for a table whose commits
            # predate the offsets. A table this batch creates has none yet: its replay finds
            # them in the commit of its first load.
            by_offsets = not exists or bool(fences.offsets)
            written = "append", self._write(
                path,
                0 if lane_bytes else count,
                lambda target: append_in_driver(
                    target, latest, plan, app_id, work.batch_id, commit_metadata=metadata
                ),
                lambda: append_new_keys(
                    spark, path, frame(), plan, None if by_offsets else app_id, work.batch_id,
                    commit_metadata=metadata,
                ),
                lane_bytes,
            )  # fmt: skip
        else:
            kind = "insert-only merge" if plan.inserts_only and truncate_at is None else "merge"
            written = (
                kind,
                self._write(
                    path,
                    0 if lane_bytes else count,
                    lambda target: merge_in_driver(
                        target,
                        latest,
                        plan,
                        app_id,
                        work.batch_id,
                        commit_metadata=metadata,
                        max_table_bytes=lane_bytes,
                    ),
                    lambda: merge_changes(
                        spark, path, frame(), plan, app_id, work.batch_id, commit_metadata=metadata
                    ),
                    lane_bytes,
                ),
            )
        with self._lock:
            self._fences[path] = after
            self.stats.last_write[work.label] = written
        if written[1] in (DRIVER_WRITER, DV_WRITER):
            self._compact_if_fragmented(spark, path, metadata)

    def _compact_if_fragmented(self, spark: Any, path: str, metadata: str) -> None:
        """Compact a table the driver writes once it holds COMPACT_AT_FILES small files
        (Spark's writes are compacted by Delta itself: job_conf). The batch is committed
        before: a failed compaction is logged, and the next batch tries again."""
        with self._lock:
            table = self._delta_tables.get(path)
        try:
            if table is None or small_files(table) < merge_module.COMPACT_AT_FILES:
                return
            started = time.monotonic()
            self._forget_driver_table(path)
            compact(self.session(spark), path, metadata)
        except Exception as exc:
            logger.warning("%s: compaction failed (%s); the next batch tries again", path,
                           first_line(exc))  # fmt: skip
            return
        logger.info("%s: compacted in %.1f s", path, time.monotonic() - started)

    def _write(
        self,
        path: str,
        count: int,
        in_driver: Callable[[Any], str | None],
        with_spark: Callable[[], None],
        max_table_bytes: int | None = None,
    ) -> str:
        """Write a table's batch in the driver (delta-rs) where it fits (a table under
        ``max_table_bytes``, by default driver_write_fits's bound), else with Spark; returns
        which wrote it.

        A table delta-rs refused (it committed nothing) is written by Spark from then on, in
        this job: the same batch at once, the next ones without trying delta-rs again.
        """
        with self._lock:
            spark_only = path in self._spark_only
        target = None if spark_only else self._driver_target(path, count, max_table_bytes)
        if target is not None:
            try:
                return in_driver(target) or DRIVER_WRITER
            except BatchDeclined as exc:  # this batch only: the next ones come here again
                logger.info("%s: %s", path, first_line(exc))
            except DriverWriteRefused as exc:
                with self._lock:
                    self._spark_only.add(path)
                logger.warning("%s: the driver cannot write this table (%s); Spark writes it",
                               path, first_line(exc))  # fmt: skip
        self._forget_driver_table(path)
        with_spark()
        return "spark"

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
        rows = rows.coalesce(task_slots(spark))  # one task per core, not per branch (_summaries)
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


@dataclass(frozen=True, slots=True)
class _LaneTable:
    """A table whose batch the task lane folded (:meth:`BatchApplier.merge_lane`)."""

    topic: str
    columns: T.StructType
    pgbridge_positions: bool = True  # the lane's plan captures them (task_lane.lane_plan)


@dataclass(frozen=True, slots=True)
class _TableWork:
    """One table's part of a batch, as ``_apply_table`` found it (summary read, path known)."""

    table: TableBatch | DriverTable | _LaneTable
    path: str
    label: str  # schema.table
    changes: DataFrame | None  # None: decoded in the driver (bridge.spark.driver_lane)
    summary: dict[str, Any]
    count: int
    exists: bool  # the Delta table exists (else this batch creates it)
    batch_id: int

    @property
    def truncate_at(self) -> tuple[int, int] | None:
        truncate = self.summary["trunc"]
        return (int(truncate[0]), int(truncate[1])) if truncate else None


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


def _pause_after_merge() -> None:
    """The crash tests' failpoint (PAUSE_AFTER_MERGE_ENV)."""
    if os.environ.get(PAUSE_AFTER_MERGE_ENV):
        time.sleep(float(os.environ[PAUSE_AFTER_MERGE_ENV]))
