"""Held tables' set-aside records applied again, in order: when the job starts, and every
``held_retry_interval`` while it runs.

A held table (:mod:`bridge.spark.set_aside`) has every record since its failed batch in the
dead-letter table, and no later change applied. At each start, before its query runs (and at a
batch's start when the interval has passed), the job applies those records again through the
same applier as its batches, in the order of the batches that set them aside and in batches no
larger than its own (``max_offsets_per_trigger``), then deletes them from the dead-letter
table: a table whose failure has passed (a storage outage, a fixed job, a schema it could not
take until a change of settings) catches up and is released. One that fails again stays held,
its records where they were, and the job goes on; the next try tries again.

Crash-safe by the table's fences: a chunk applied but not yet deleted (a crash between the two)
is recognised as applied when it is replayed again (its offsets are covered) and only deleted.
Its writes carry a ``txnAppId`` of their own per table (never the query's, whose batch ids they
would collide with).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql import functions as F

from bridge.spark.applier import BatchApplier
from bridge.spark.config import ApplyConfig
from bridge.spark.decode import SchemaCache
from bridge.spark.errors import first_line
from bridge.spark.graceful_stop import interrupted
from bridge.spark.resources import is_resource_failure
from bridge.spark.set_aside import held_batches, held_topics, is_set_aside

__all__ = ["replay_chunks", "replay_set_aside"]

logger = logging.getLogger(__name__)

#: Records per replayed batch when the job's batches are unbounded (a given config without
#: ``max_offsets_per_trigger``; ``pgbridge apply`` always sizes one).
DEFAULT_REPLAY_RECORDS = 200_000


def replay_set_aside(
    spark: Any, config: ApplyConfig, schemas: SchemaCache | None = None
) -> dict[str, int]:
    """Apply every held table's set-aside records again; the tables still held (topic -> the
    batch that first set it aside). No Spark job without a dead-letter table."""
    held = held_topics(spark, config.dead_letter_location)
    still: dict[str, int] = {}
    for topic, since in sorted(held.items()):
        try:
            records = _replay_table(spark, config, schemas, topic)
        except Exception as exc:  # the registry down too: held until the next try
            if is_resource_failure(exc) or interrupted(exc):
                raise  # the job's own failure (bridge.spark.resources) or its stop
            logger.error(
                "%s stays held: applying its set-aside records (since batch %d) failed again: "
                "%s: %s; they stay in %s and are tried again later",
                topic, since, type(exc).__name__, first_line(exc), config.dead_letter_location,
            )  # fmt: skip
            still[topic] = since
            continue
        logger.info(
            "%s released: its %d set-aside records (since batch %d) applied in order",
            topic, records, since,
        )  # fmt: skip
    return still


def replay_chunks(counts: Sequence[tuple[int, int]], bound: int) -> list[tuple[int, int]]:
    """``(batch id, records)`` in batch order -> ranges of consecutive batch ids holding at most
    ``bound`` records each (a batch above it alone: it was one batch when it was set aside)."""
    chunks: list[tuple[int, int]] = []
    first = last = None
    size = 0
    for batch_id, records in counts:
        if first is not None and size + records > bound:
            assert last is not None
            chunks.append((first, last))
            first = None
        if first is None:
            first, size = batch_id, 0
        last, size = batch_id, size + records
    if first is not None:
        assert last is not None
        chunks.append((first, last))
    return chunks


def _replay_table(spark: Any, config: ApplyConfig, schemas: SchemaCache | None, topic: str) -> int:
    """Apply ``topic``'s set-aside records in order, deleting each chunk once applied; the
    number of records."""
    from delta.tables import DeltaTable

    location = config.dead_letter_location
    held = (F.col("topic") == topic) & is_set_aside(F.col("reason"))
    counts = held_batches(spark, location, topic)
    if not counts:
        return 0
    rows = spark.read.format("delta").load(location).where(held)
    applier = BatchApplier(
        replace(
            config,
            app_id=_replay_app_id(config, topic),
            # The task lane's tasks take these records from the frame: reading Kafka, they
            # would read the ranges the query's checkpoint gives this batch id, not these.
            lane_reads_kafka=False,
        ),
        schemas,
        holds=False,
    )
    bound = config.max_offsets_per_trigger or DEFAULT_REPLAY_RECORDS
    for first, last in replay_chunks(counts, bound):
        chunk = F.col("batch_id").between(first, last)
        kafka_rows = (
            rows.where(chunk)
            .select(
                "topic",
                "partition",
                "offset",
                F.col("kafka_timestamp").alias("timestamp"),
                "key",
                "value",
            )
            # As Spark's Kafka source gives a batch: each Kafka partition in one Spark
            # partition, in offset order (the task lane refuses a partition split over tasks).
            .repartition("partition")
            .sortWithinPartitions("partition", "offset")
        )
        applier(kafka_rows, last)
        DeltaTable.forPath(spark, location).delete(held & chunk)
    return sum(records for _, records in counts)


def _replay_app_id(config: ApplyConfig, topic: str) -> str:
    """Delta's ``txnAppId`` of a table's replays: the query's batch ids are not theirs."""
    digest = hashlib.sha256(topic.encode()).hexdigest()[:12]
    return f"{config.txn_app_id}-replay-{digest}"
