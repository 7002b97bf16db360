"""Starting one streaming query of the apply job: Spark's Kafka source over the change topics,
and a ``foreachBatch`` writer with the job's checkpoint and trigger. Used by the MERGE mode
(:mod:`bridge.spark.job`) and by the changelog mode's ingest and compaction
(:mod:`bridge.spark.changelog`), so neither imports the other for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame

from bridge.spark.config import ApplyConfig

__all__ = ["kafka_source", "start_query"]


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
