"""Starting one streaming query of the apply job: Spark's Kafka source over the change topics,
and a ``foreachBatch`` writer with the job's checkpoint and trigger. Used by the MERGE mode
(:mod:`bridge.spark.job`) and by the changelog mode's ingest and compaction
(:mod:`bridge.spark.changelog`), so neither imports the other for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame

from bridge.spark.config import ApplyConfig
from bridge.spark.driver_merge import is_local_path

__all__ = ["checkpoint_conf", "kafka_source", "start_query"]

#: Spark's checkpoint file manager that writes through Hadoop's ``FileSystem`` API.
FILE_SYSTEM_CHECKPOINTS = (
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager"
)


def checkpoint_conf(checkpoint_location: str) -> dict[str, str]:
    """Session settings for a query checkpointing at ``checkpoint_location``.

    On the local file system, Spark's default checkpoint manager goes through Hadoop's
    ``FileContext``, whose renames ask for each file's link status, and without Hadoop's
    native library (PySpark's distribution has none) Hadoop forks ``readlink`` for each:
    about 70 processes a micro-batch from the driver's JVM, half the 0.1 s between two
    batches (docs/measurements.md). The ``FileSystem`` manager writes a temporary file and
    renames it too, refusing an existing file (only two jobs on one checkpoint, a
    misconfiguration, could race past that check; Delta's commits and the tables' fences keep
    the tables right even then). Elsewhere (HDFS, object stores) Spark's choice is kept."""
    if not is_local_path(checkpoint_location):
        return {}
    return {"spark.sql.streaming.checkpointFileManagerClass": FILE_SYSTEM_CHECKPOINTS}


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
