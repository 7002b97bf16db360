"""The task lane's driver side: which topics of a batch it takes, their tables, and what its
outcomes mean for the batches after (the tasks' side and the commits: :mod:`bridge.spark.
task_lane`).

A batch reaches the lane two ways. :meth:`TaskLane.first` runs before anything else reads
the batch, for the topics the lane committed in the batch before (or, without any, those
the first and last records of the batch's Kafka ranges show to be large tables of one
schema): one Spark job decodes and writes them and counts the batch's groups
(``task_lane.run_lane_first``), so such a topic costs one read of Kafka per batch.
:meth:`TaskLane.run` takes the batch's other topics of at
least ``lane_min_records`` records (and more than the driver writes, never both): those
whose table this job wrote before with the same columns and whose fences have a floor, and
new tables (their first load, the table created here first).

A table that holds rows and is small enough for delta-rs (``LaneSpec.merge``) may also get
updates and deletes: its tasks fold them, and the host MERGEs the folded rows
(:meth:`LaneHost.merge_lane`) before the batch's other tables are read. A topic the lane
refuses (a truncate, a replay, a partition split over tasks, …) takes Spark's path in the same
batch and from then on. An unforeseen failure (workers without
pgbridge, say) turns the lane off for the job and drops the cached fences of its tables: a
table the lane committed before the failure is then recognised as applied from its Delta log.

The applier (:class:`bridge.spark.applier.BatchApplier`) owns what this job knows of its
tables and books the commits returned here; :class:`LaneHost` is what the lane asks of it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from pyspark.sql import DataFrame

from bridge.spark import transforms as tf
from bridge.spark.adoption import sample_path
from bridge.spark.avro_columns import native_decoder
from bridge.spark.config import ApplyConfig
from bridge.spark.decode import SAMPLE, BatchGroups, SchemaCache
from bridge.spark.driver_changes import ArrowRows, folded_arrow_rows
from bridge.spark.driver_decode import DriverDecoder
from bridge.spark.driver_dv_merge import dv_merge_refusal
from bridge.spark.driver_lane import Candidate, drives, topic_candidate
from bridge.spark.driver_merge import is_local_path, open_table, table_bytes
from bridge.spark.errors import RegistryUnavailableError, first_line
from bridge.spark.fences import Fences
from bridge.spark.kafka_ranges import (
    KafkaRange,
    batch_ranges,
    client_config,
    edge_records,
    task_shares,
)
from bridge.spark.merge import DELETION_VECTORS_MIN_TABLE_BYTES, is_delta_table
from bridge.spark.resources import is_resource_failure
from bridge.spark.session import task_slots
from bridge.spark.task_lane import (
    DirectRead,
    Expected,
    LaneCommit,
    LaneMerge,
    LaneSpec,
    LaneTopic,
    Outcome,
    lane_plan,
    run_lane,
    run_lane_first,
    sweep_folded,
)

__all__ = ["LaneHost", "TaskLane"]

logger = logging.getLogger(__name__)

Columns = frozenset[tuple[str, str]]  # (lower-case name, Spark type) of a table's columns


class LaneHost(Protocol):
    """What the lane asks of the applier about the tables this job writes."""

    def session(self, spark: Any) -> Any:
        """This thread's session (its own SQL conf)."""
        ...

    def path_of(self, topic: str) -> str | None:
        """The path of ``topic``'s table, once this job applied it."""
        ...

    def adopt(self, topic: str, rows: list[Any]) -> bool:
        """Whether ``topic``'s table is known to this job, once a table an earlier run
        created is taken over from its log where it can be (``rows``: its batch groups)."""
        ...

    def columns_of(self, path: str) -> Columns | None:
        """The columns this job knows the table at ``path`` has (None: unknown)."""
        ...

    def spark_only(self, path: str) -> bool:
        """Whether delta-rs refused the table (Spark writes it)."""
        ...

    def fences_of(self, spark: Any, path: str) -> Fences:
        """The table's fences as this job left them, else from its Delta log."""
        ...

    def create_table(self, spark: Any, candidate: Candidate) -> None:
        """Create the candidate's table, as the applier creates any (now known to the job)."""
        ...

    def forget(self, paths: Iterable[str]) -> None:
        """Drop what the job keeps of these tables (fences, open delta-rs tables)."""
        ...

    def merge_lane(
        self,
        spark: Any,
        merge: LaneMerge,
        rows: ArrowRows,
        candidate: Candidate,
        batch_id: int,
        max_table_bytes: int,
    ) -> LaneCommit:
        """MERGE the lane's folded ``rows`` into the table as any table's last changes are
        written (delta-rs where the table is under ``max_table_bytes``, else Spark); the
        commit as booked."""
        ...


class TaskLane:
    """The lane's choices for one job (``foreachBatch`` calls, possibly from several threads
    for the tables' creation)."""

    def __init__(
        self, config: ApplyConfig, schemas: SchemaCache, decoder: DriverDecoder, host: LaneHost
    ) -> None:
        self.config = config
        self.schemas = schemas
        self.decoder = decoder
        self.host = host
        self._lock = threading.Lock()
        # Tables whose batch the lane found not to be an append: Spark's path from then on;
        # and whether the lane is off for this job (it failed).
        self._refused: set[str] = set()
        self._off = False
        # The topics the lane committed in the last batch: (its candidate, key schema id).
        self._guess: dict[str, tuple[Candidate, int]] = {}
        # Tables the lane created empty for a first load it then left to Spark's path: that
        # path loads them as a first load (an append), not as tables that existed.
        self._created: set[str] = set()
        self._told_spark_reads = False
        self._swept: set[str] = set()  # tables whose stale folded rows this job removed
        self._last_records: dict[str, int] = {}  # a topic's changes the lane last applied

    def _available(self) -> bool:
        if self._off or not self.config.task_lane or self.config.history:
            return False
        return native_decoder() is not None  # fastavro decodes slower than Spark's path

    def created_empty(self, path: str) -> bool:
        """Whether the lane created the table at ``path`` in this batch and left it empty."""
        with self._lock:
            return path in self._created

    def committed(self, commit: LaneCommit) -> None:
        """The applier booked ``commit``: its table is no longer empty."""
        with self._lock:
            self._created.discard(commit.path)

    def forget(self, topics: set[str], paths: list[str]) -> None:
        """What the lane knew of these tables is stale (a replay wrote them: the applier's
        ``_released``)."""
        with self._lock:
            for topic in topics:
                self._guess.pop(topic, None)
                self._last_records.pop(topic, None)
            self._created.difference_update(paths)
            self._refused.difference_update(paths)

    def end_batch(self) -> None:
        with self._lock:
            self._created.clear()

    def first(
        self, framed: DataFrame, batch_id: int, skip: set[str] | frozenset[str] = frozenset()
    ) -> tuple[dict[str, LaneCommit], BatchGroups | None]:
        """The lane's topics in the batch's first and only read (``task_lane.run_lane_first``):
        those it committed, and the batch's groups (None when the lane did not run: the batch
        is counted as any other). Its topics are those the lane committed in the batch
        before; without any (the job's first batch, say), those the edges of the batch's
        Kafka ranges show to be large enough (:meth:`_guessed_lanes`). Never those of
        ``skip`` (held tables: bridge.spark.set_aside)."""
        guess, self._guess = self._guess, {}
        if not self._available():
            return {}, None
        spark = framed.sparkSession
        try:
            lanes: dict[str, LaneTopic] = {}
            if guess:
                records = self._batch_records(batch_id)
                for topic, (candidate, _) in guess.items():
                    with self._lock:
                        if candidate.path in self._refused or topic in skip:
                            continue
                    # (Spark's source reads the batch: its records as many as the last's)
                    estimate = records.get(topic) or self._last_records.get(topic, 0)
                    lane = self._lane_table(spark, candidate, first_load=False, records=estimate)
                    if isinstance(lane, LaneTopic):
                        lanes[topic] = lane
            else:
                guess, lanes = self._guessed_lanes(spark, batch_id)
            lanes = {topic: lane for topic, lane in lanes.items() if topic not in skip}
            if not lanes:
                return {}, None
            expected = {t: (guess[t][0].schema_id, guess[t][1]) for t in lanes}
            outcomes, groups = run_lane_first(
                framed,
                lanes,
                expected,
                batch_id,
                self.config.txn_app_id,
                self.config.table_path,
                self._direct_read(spark, batch_id),
            )
        except RegistryUnavailableError:
            raise
        except Exception as exc:  # unforeseen: Spark's path, as in run
            self._failed(exc, [candidate.path for candidate, _ in guess.values()])
            return {}, None
        candidates = {topic: guess[topic][0] for topic in lanes}
        commits = self._outcomes(spark, outcomes, lanes, candidates, batch_id)
        for topic in commits:
            self._guess[topic] = guess[topic]
        return commits, groups

    def _guessed_lanes(
        self, spark: Any, batch_id: int
    ) -> tuple[dict[str, tuple[Candidate, int]], dict[str, LaneTopic]]:
        """The lane's topics of a batch no batch before told: the topics of at least the
        lane's minimum of records in the batch's Kafka ranges whose first and last records
        (of each range) are of one value schema and one key schema, read by the driver
        before the batch. The lane's job then checks every record against that guess and
        refuses a topic it does not hold for (Spark's path applies it). Without the guess,
        the batch's groups were counted through Spark's Kafka source first: a whole read of
        the batch before the lane's own (1.7M snapshot records: 2.8 s of a 5.3 s batch)."""
        if not self.config.lane_reads_kafka:
            return {}, {}
        client = client_config(self.config.kafka_source_options())
        ranges = batch_ranges(self.config.checkpoint_location, batch_id)
        if client is None or not ranges:
            return {}, {}
        minimum = self._minimum_records()
        per_topic: dict[str, list[KafkaRange]] = {}
        for kafka_range in ranges:
            per_topic.setdefault(kafka_range.topic, []).append(kafka_range)
        chosen = [
            topic
            for topic, topic_ranges in per_topic.items()
            if sum(r.records for r in topic_ranges) >= minimum and self.config.is_table_topic(topic)
        ]

        def pick(topic: str) -> tuple[int, tuple[Candidate, LaneTopic | str] | None] | None:
            row = _edge_group(topic, per_topic[topic], client)
            if row is None:
                return None
            return int(row["key_id"]), self._lane_topic(self.host.session(spark), topic, [row])

        # New tables are created here (a Spark commit each, mostly driver latency): side by
        # side, as run() creates them (measured, 4 new tables: 1.2 s one after the other).
        workers = min(len(chosen), self.config.parallel_tables)
        if workers > 1:
            with ThreadPoolExecutor(workers) as creators:
                picks = list(creators.map(pick, chosen))
        else:
            picks = [pick(topic) for topic in chosen]
        guess: dict[str, tuple[Candidate, int]] = {}
        lanes: dict[str, LaneTopic] = {}
        for topic, picked in zip(chosen, picks, strict=True):
            if picked is None or picked[1] is None:
                continue
            key_id, (candidate, lane) = picked[0], picked[1]
            if isinstance(lane, LaneTopic):
                guess[topic], lanes[topic] = (candidate, key_id), lane
            else:
                logger.info("batch %d: %s: not by the task lane (%s)", batch_id, topic, lane)
        if lanes:
            logger.info(
                "batch %d: the task lane takes %s, guessed from the first and last records "
                "of the batch's Kafka ranges",
                batch_id,
                ", ".join(sorted(lanes)),
            )
        return guess, lanes

    def _direct_lanes(
        self,
        spark: Any,
        batch_id: int,
        lanes: dict[str, LaneTopic],
        per_topic: dict[str, list[Any]],
    ) -> tuple[DirectRead, Expected] | None:
        """The lane topics' offset ranges for the tasks to read (:meth:`_direct_read`), with
        the schema ids their records have (each topic one value and one key schema: counted
        in this batch's groups)."""
        expected: dict[str, tuple[int, int]] = {}
        for topic, lane in lanes.items():
            key_ids = {int(r["key_id"]) for r in per_topic[topic]}
            key_ids |= {int(r["min_key_id"]) for r in per_topic[topic]}
            if len(key_ids) != 1:
                return None
            expected[topic] = (lane.schema_id, key_ids.pop())
        direct = self._direct_read(spark, batch_id, set(lanes))
        return None if direct is None else (direct, expected)

    def _direct_read(
        self, spark: Any, batch_id: int, topics: set[str] | None = None
    ) -> DirectRead | None:
        """The batch's offset ranges for the lane's tasks to read from Kafka themselves; None
        where Spark's Kafka source reads the batch (kafka_ranges: off, Kafka options
        librdkafka is not given here, a checkpoint outside the local file system, a new
        topic-partition)."""
        if not self.config.lane_reads_kafka:
            return None
        client = client_config(self.config.kafka_source_options())
        ranges = batch_ranges(self.config.checkpoint_location, batch_id)
        if ranges is not None and topics is not None:
            ranges = [r for r in ranges if r.topic in topics]
        if client is None or not ranges:
            if not self._told_spark_reads:
                logger.info("batch %d: the task lane reads through Spark's Kafka source", batch_id)
                self._told_spark_reads = True
            return None
        shares = task_shares(ranges, task_slots(spark))
        logger.info(
            "batch %d: the task lane's %d tasks read up to %d records of %d topic-partitions "
            "from Kafka themselves",
            batch_id,
            len(shares),
            sum(r.records for r in ranges),
            len(ranges),
        )
        return DirectRead(shares, client)

    def run(self, framed: DataFrame, groups: BatchGroups, batch_id: int) -> dict[str, LaneCommit]:
        """The topics whose batch the lane committed, all in one Spark job; the others take
        Spark's path."""
        if not self._available():
            return {}
        per_topic: dict[str, list[Any]] = {}
        for row in groups.groups:
            per_topic.setdefault(str(row["topic"]), []).append(row)
        minimum = self._minimum_records()
        chosen = [
            topic
            for topic, rows in per_topic.items()
            if sum(int(r["records"]) for r in rows) >= minimum
        ]
        if not chosen:
            return {}
        lanes: dict[str, LaneTopic] = {}
        candidates: dict[str, Candidate] = {}
        try:
            # A new table is created first (a Spark commit each, mostly driver latency): side
            # by side, as tables are merged (measured, 4 new tables: 1.4 -> 0.7 s).
            def pick(topic: str) -> tuple[Candidate, LaneTopic | str] | None:
                spark = self.host.session(framed.sparkSession)
                return self._lane_topic(spark, topic, per_topic[topic])

            if len(chosen) > 1 and self.config.parallel_tables > 1:
                with ThreadPoolExecutor(self.config.parallel_tables) as creators:
                    picks = list(creators.map(pick, chosen))
            else:
                picks = [pick(topic) for topic in chosen]
            for topic, picked in zip(chosen, picks, strict=True):
                if picked is None:
                    continue
                candidate, lane = picked
                if isinstance(lane, LaneTopic):
                    lanes[topic], candidates[topic] = lane, candidate
                else:
                    logger.info("batch %d: %s: not by the task lane (%s)", batch_id, topic, lane)
            if not lanes:
                return {}
            outcomes = run_lane(
                framed,
                lanes,
                batch_id,
                self.config.txn_app_id,
                self.config.table_path,
                self._direct_lanes(framed.sparkSession, batch_id, lanes, per_topic),
            )
        except RegistryUnavailableError:
            raise
        except Exception as exc:  # unforeseen (workers without pgbridge, say): Spark's path
            self._failed(exc, [c.path for c in candidates.values()])
            return {}
        commits = self._outcomes(framed.sparkSession, outcomes, lanes, candidates, batch_id)
        for topic in commits:
            self._guess[topic] = (candidates[topic], int(per_topic[topic][0]["key_id"]))
        return commits

    def _failed(self, exc: Exception, paths: list[str]) -> None:
        """The lane failed unforeseen: Spark's path applies every table from now on, and reads
        these tables' fences from their logs again (a table the lane committed before the
        failure is then recognised as applied: its batch is a replay there, not a second
        append)."""
        logger.warning(
            "the task lane failed (%s: %s); Spark's path applies every table from now on",
            type(exc).__name__,
            first_line(exc),
        )
        self._off = True
        self.host.forget(paths)

    def _outcomes(
        self,
        spark: Any,
        outcomes: dict[str, Outcome],
        lanes: dict[str, LaneTopic],
        candidates: dict[str, Candidate],
        batch_id: int,
    ) -> dict[str, LaneCommit]:
        """The lane's commits, its folded batches MERGEd first (side by side, as Spark's path
        writes tables: delta-rs works outside the GIL); a refused table takes Spark's path
        from then on."""
        merges = {t: o for t, o in outcomes.items() if isinstance(o, LaneMerge)}

        def merged(topic: str) -> LaneCommit | str:
            return self._merged(spark, merges[topic], lanes[topic], candidates[topic], batch_id)

        workers = min(len(merges), self.config.parallel_tables)
        if workers > 1:
            with ThreadPoolExecutor(workers) as pool:
                done = dict(zip(merges, pool.map(merged, merges), strict=True))
        else:
            done = {topic: merged(topic) for topic in merges}
        final: dict[str, LaneCommit | str] = dict(done)
        for topic, outcome in outcomes.items():
            if not isinstance(outcome, LaneMerge):
                final[topic] = outcome
        commits: dict[str, LaneCommit] = {}
        for topic, outcome in final.items():
            if isinstance(outcome, str):
                logger.info("batch %d: %s: not by the task lane (%s)", batch_id, topic, outcome)
                with self._lock:
                    self._refused.add(lanes[topic].path)
                continue
            commits[topic] = outcome
            self._last_records[topic] = int(outcome.summary["n"])
        return commits

    def _merged(
        self, spark: Any, merge: LaneMerge, lane: LaneTopic, candidate: Candidate, batch_id: int
    ) -> LaneCommit | str:
        """The host's MERGE of a batch the tasks folded, or why not (nothing was written:
        Spark's path applies the batch, and a table it cannot apply is set aside there)."""
        try:
            rows = folded_arrow_rows(merge.pieces, candidate.columns, candidate.key_columns)
            return self.host.merge_lane(spark, merge, rows, candidate, batch_id, lane.merge_bytes)
        except RegistryUnavailableError:
            raise
        except Exception as exc:
            if is_resource_failure(exc):
                raise
            return f"the MERGE of its folded rows failed: {type(exc).__name__}: {first_line(exc)}"

    def _lane_topic(
        self, spark: Any, topic: str, rows: list[Any]
    ) -> tuple[Candidate, LaneTopic | str] | None:
        """``topic``'s candidate and part of the lane (its table created if it is its first
        load) or why not; None when it is no candidate at all."""
        # A table an earlier run created is taken over from its log (bridge.spark.adoption).
        known = self.host.path_of(topic) is not None or self.host.adopt(topic, rows)

        def first_load_path(_: str, __: Columns, ___: int) -> str | None:
            return self._first_load_path(spark, topic, rows)

        where = self._lane_path if known else first_load_path
        candidate = topic_candidate(topic, rows, self.config, self.schemas, self.decoder, where)
        if candidate is None or not candidate.key_columns:
            return None
        records = sum(int(row["records"]) for row in rows)
        return candidate, self._lane_table(spark, candidate, first_load=not known, records=records)

    def _lane_path(self, topic: str, columns: Columns, _: int) -> str | None:
        """The path of ``topic``'s table if the lane may write it: known to this job with
        these columns, on a local path, not refused by the lane or delta-rs before."""
        path = self.host.path_of(topic)
        known = self.host.columns_of(path) if path is not None else None
        if path is None or known is None or self.host.spark_only(path):
            return None
        with self._lock:
            if path in self._refused or not is_local_path(path):
                return None
        drop = self.config.dropped_columns == "drop"
        return path if (columns == known if drop else columns <= known) else None

    def _first_load_path(self, spark: Any, topic: str, rows: list[Any]) -> str | None:
        """The path of a topic's table if the lane may load it first: the table of the source
        table of the topic's sample record (bridge.spark.adoption.sample_path; every other
        record is checked against it after decoding), not routed, on a local path, with no
        Delta table there yet."""
        path = sample_path(topic, rows, self.config, self.schemas, self.decoder)
        if path is None:
            return None
        with self._lock:
            if path in self._refused:
                return None
        if self.host.spark_only(path) or self.host.columns_of(path) is not None:
            return None
        if not is_local_path(path) or is_delta_table(spark, path):
            return None
        return path

    def _lane_table(
        self, spark: Any, candidate: Candidate, *, first_load: bool, records: int = 0
    ) -> LaneTopic | str:
        """The candidate's part of the lane (a first load's table created empty first), or
        why not. ``records``: the topic's records in the batch (0: unknown)."""
        from bridge.spark.executor_files import file_layout

        path = candidate.path
        schema_json = self.schemas.schema_json(candidate.schema_id)
        columns = self.decoder.columns(candidate.schema_id)
        names = [(c.field, c.name) for c in columns]
        plan = lane_plan(schema_json or "{}", names, candidate.key_columns)
        if plan is None:
            return "a column the lane does not decode"
        if first_load:
            self.host.create_table(spark, candidate)
            with self._lock:
                self._created.add(path)  # empty: Spark's path loads it first if refused
        table = open_table(path)
        if table.metadata().partition_columns:
            return "a partitioned table"
        if table.metadata().configuration.get("delta.enableChangeDataFeed") == "true":
            return "a change data feed"
        merge_bytes = 0 if first_load else self._merge_bytes(path, table, records)
        merge = merge_bytes > 0
        if merge and path not in self._swept:  # what a crashed job's tasks left, once per job
            sweep_folded(path)
            self._swept.add(path)
        fences = Fences() if first_load else self.host.fences_of(spark, path)
        if not first_load and not merge and fences.floor is None:
            return "no floor in the table's fences"
        spec = LaneSpec(plan, tuple(names), candidate.key_columns, file_layout(table), fences,
                        first_load, merge)  # fmt: skip
        return LaneTopic(candidate.schema_id, path, table, spec, merge_bytes)

    def _minimum_records(self) -> int:
        """The fewest records of a topic the lane takes: ``lane_min_records``, and more than
        the driver lane takes where it decodes (bridge.spark.driver_lane): never both."""
        if not drives(self.config):
            return self.config.lane_min_records
        return max(self.config.lane_min_records, self.config.driver_write_rows + 1)

    def _merge_bytes(self, path: str, table: Any, records: int) -> int:
        """The bound under which the driver rewrites what the lane's folded batch of
        ``records`` changes in the table at ``path`` (delta-rs), and above which it marks the
        changed rows with deletion vectors (bridge.spark.driver_dv_merge): for a table with
        them, :data:`LANE_DV_MERGE_BYTES`; without, :func:`lane_merge_max_bytes`, above which
        Spark MERGEs. 0 where the driver may not: its writes off, or the table refused."""
        if self.config.driver_write_rows <= 0 or self.host.spark_only(path):
            return 0
        try:
            if dv_merge_refusal(table) is None:
                # Marking the changed rows beats rewriting the files that hold them for the
                # lane's batches (at least lane_min_records) into any table that holds rows
                # (measured, 4 tables of 5 MiB, batches of 424,000: 1.2-1.5 s a batch against
                # 1.4-2.6 s; into tables of one row, an append beside them, where the rewrite
                # computed the whole table with Arrow: 1.6 s).
                return LANE_DV_MERGE_BYTES
            bound = lane_merge_max_bytes(records)
            return bound if table_bytes(table) < bound else 0
        except Exception:  # a log delta-rs reads but cannot size: Spark's MERGE
            return 0

    def _batch_records(self, batch_id: int) -> dict[str, int]:
        """Records per topic in the batch's Kafka ranges (empty where the offset log is not
        read: Spark's source reads the batch)."""
        if not self.config.lane_reads_kafka:
            return {}
        records: dict[str, int] = {}
        for kafka_range in batch_ranges(self.config.checkpoint_location, batch_id) or []:
            records[kafka_range.topic] = records.get(kafka_range.topic, 0) + kafka_range.records
        return records


#: The bound handed to the driver for a table with deletion vectors: every table that holds
#: rows takes the lane's folded batch as deletion vectors and one new file.
LANE_DV_MERGE_BYTES = 1

#: Bytes of table delta-rs may rewrite per record of a batch the lane folded, in a table
#: without deletion vectors (with them the driver marks the changed rows instead: bridge.
#: spark.driver_dv_merge). delta-rs's MERGE rewrites every file it touches, which for updates spread
#: over the keys is the whole table. Measured (docs/measurements.md): 250,000 changes into
#: 5,000,000 rows in 0.88 s, where Spark's MERGE took 9-18 s a batch of 424,000 into a
#: table of 32-60 MiB; a batch of N records may rewrite a table of N KiB (444,825 records:
#: 434 MiB), and never less than the driver lane's 32 MiB.
LANE_MERGE_BYTES_PER_RECORD = 1024


def lane_merge_max_bytes(records: int) -> int:
    """The largest table without deletion vectors (its live files' bytes) the driver MERGEs
    a lane batch of ``records`` into with delta-rs; Spark's MERGE beyond."""
    return max(DELETION_VECTORS_MIN_TABLE_BYTES, records * LANE_MERGE_BYTES_PER_RECORD)


def _edge_group(
    topic: str, ranges: list[KafkaRange], client: dict[str, Any]
) -> dict[str, Any] | None:
    """A group row (:func:`bridge.spark.decode.batch_groups`'s) for ``topic`` from the edges
    of its ranges, or None where they are not all of one value and one key schema."""
    edges = [
        edge
        for kafka_range in ranges
        for edge in edge_records(kafka_range, client)
        if edge.column("value")[0].is_valid  # a tombstone counts in no group
    ]
    ids = {
        (edge.column(tf.VALUE_SCHEMA_ID)[0].as_py(), edge.column(tf.KEY_SCHEMA_ID)[0].as_py())
        for edge in edges
    }
    if len(ids) != 1:
        return None
    value_id, key_id = ids.pop()
    if value_id is None or key_id is None:
        return None  # an unframed record, a table without key columns
    return {
        "topic": topic,
        tf.VALUE_SCHEMA_ID: value_id,
        "unframed": False,
        "key_id": key_id,
        "min_key_id": key_id,
        "records": sum(r.records for r in ranges),
        SAMPLE: edges[0].column("value")[0].as_py(),
    }
