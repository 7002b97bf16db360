"""A small micro-batch read from Kafka by the driver itself, without a Spark job.

Why: a batch of a thousand changes over 200 tables was collected through Spark's Kafka source
(:func:`bridge.spark.driver_lane.collect_small_batch`): a Spark job whose tasks seek and fetch
each of the 200 topic-partitions in the JVM, then turn the rows into Arrow, most of the JVM's
core in a steady stream of small batches. The batch's offset ranges are in the query's offset
log (:func:`bridge.spark.kafka_ranges.batch_ranges`) before the batch runs, so the driver knows
its size first and reads a small one with one consumer, every topic-partition at once, into the
same Arrow table the collection gave. Where the ranges cannot be told here, the batch is
larger than :data:`~bridge.spark.driver_lane.COLLECTED_RECORDS` or :data:`MAX_BYTES`, or the
read fails, Spark's Kafka source reads the batch as before (and judges a loss of records by
its own ``failOnDataLoss``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from bridge.spark import transforms as tf
from bridge.spark.config import ApplyConfig
from bridge.spark.driver_lane import _HAS_VALUE, _OVERSIZE, COLLECTED_RECORDS
from bridge.spark.kafka_ranges import (
    KafkaRange,
    KafkaReadError,
    batch_ranges,
    client_config,
    schema_ids,
    value_framing,
)

__all__ = ["MAX_BYTES", "BatchTooLarge", "SmallBatchReader"]

logger = logging.getLogger(__name__)

#: Bytes of keys and values a batch read by the driver holds at most; a larger one is Spark's.
MAX_BYTES = 64 * 1024 * 1024

#: Seconds the read waits for the next record of ranges known to hold some.
_TIMEOUT = 30.0


class SmallBatchReader:
    """Reads a batch of at most :data:`COLLECTED_RECORDS` records with one consumer kept
    between batches (a consumer's start, its connection and metadata, costs more than a small
    batch's read)."""

    def __init__(self, config: ApplyConfig, timeout: float = _TIMEOUT) -> None:
        self._config = config
        self._client = client_config(config.kafka_source_options()) if (
            config.lane_reads_kafka) else None  # fmt: skip
        self._timeout = timeout
        self._consumer: Any = None
        self._told_failure = False
        # Bytes per record of the last batch read (or of the part read of one too large): a
        # batch of wide rows estimated past MAX_BYTES is not read only to be thrown away.
        self._record_bytes = 0.0

    def read(self, batch_id: int, limit: int = COLLECTED_RECORDS) -> Any | None:
        """Batch ``batch_id`` as :func:`~bridge.spark.driver_lane.collect_small_batch`'s Arrow
        table, or None where Spark's Kafka source is to read it."""
        if self._client is None:
            return None
        ranges = batch_ranges(self._config.checkpoint_location, batch_id)
        records = sum(r.records for r in ranges or ())
        if not ranges or records > limit or records * self._record_bytes > MAX_BYTES:
            return None
        from confluent_kafka import KafkaException

        try:
            return self.collect(ranges)
        except (KafkaReadError, BatchTooLarge, KafkaException) as exc:
            if not self._told_failure:
                logger.info("batch %d: read through Spark's Kafka source (%s)", batch_id, exc)
                self._told_failure = True
            return None

    def collect(self, ranges: Sequence[KafkaRange]) -> Any:
        """The records of ``ranges`` as one Arrow table. Raises :class:`KafkaReadError` where
        a range cannot be read to its end, :class:`BatchTooLarge` past :data:`MAX_BYTES`."""
        from confluent_kafka import Consumer, TopicPartition

        if self._client is None:
            raise KafkaReadError("the Kafka source's options have no librdkafka equivalent")
        if self._consumer is None:
            self._consumer = Consumer({**self._client, "enable.partition.eof": True})
        consumer = self._consumer
        consumer.assign([TopicPartition(r.topic, r.partition, r.start) for r in ranges])
        try:
            messages, size = _take(consumer, ranges, self._timeout)
            self._record_bytes = size / max(1, len(messages))
            return _framed_records(messages)
        except BatchTooLarge as exc:
            self._record_bytes = exc.record_bytes
            self.close()
            raise
        except BaseException:
            self.close()  # a consumer in an unknown state: the next read starts a new one
            raise
        finally:
            if self._consumer is not None:
                consumer.unassign()  # no fetching between batches

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()


class BatchTooLarge(Exception):
    """The batch holds more than :data:`MAX_BYTES`."""

    def __init__(self, record_bytes: float) -> None:
        super().__init__(f"more than {MAX_BYTES >> 20} MiB of records")
        self.record_bytes = record_bytes  # bytes per record of those read


def _take(consumer: Any, ranges: Sequence[KafkaRange], timeout: float) -> tuple[list[Any], int]:
    """The messages of each range and their keys' and values' bytes, read with ``consumer``
    assigned to their starts. A range is done at a record at or past its end, or at its
    partition's end (transaction markers and aborted records take offsets no record is read
    at)."""
    from confluent_kafka import KafkaError

    # (topic, partition) -> [the next offset taken, the end]: an offset below the next is
    # never taken twice, whatever librdkafka's queue still held.
    pending = {(r.topic, r.partition): [r.start, r.end] for r in ranges}
    taken: list[Any] = []
    size = 0
    while pending:
        messages = consumer.consume(1, timeout=timeout)  # the wait is for the next record
        if not messages:
            waiting = ", ".join(f"{t} [{p}]" for t, p in sorted(pending)[:5])
            raise KafkaReadError(f"nothing read within {timeout:.0f} s from {waiting}")
        messages += consumer.consume(COLLECTED_RECORDS, timeout=0)
        for message in messages:
            where = (message.topic(), message.partition())
            bounds = pending.get(where)
            if bounds is None:
                continue  # a range done, fetched past its end
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                del pending[where]
                continue
            if error is not None:
                raise KafkaReadError(f"{where[0]} [{where[1]}]: {error}")
            offset = message.offset()
            if offset < bounds[0]:
                continue
            if offset >= bounds[1]:
                del pending[where]
                continue
            taken.append(message)
            bounds[0] = offset + 1
            size += len(message.value() or b"") + len(message.key() or b"")
            if size > MAX_BYTES:
                raise BatchTooLarge(size / len(taken))
            if bounds[0] == bounds[1]:
                del pending[where]
    return taken, size


def _framed_records(messages: Sequence[Any]) -> Any:
    """Messages -> the Arrow table ``collect_small_batch`` collects (Kafka's columns, the
    schema ids, the framing error, whether a value is held; nothing oversize)."""
    import pyarrow as pa

    count = len(messages)
    values = pa.array([m.value() for m in messages], pa.binary())
    keys = pa.array([m.key() for m in messages], pa.binary())
    value_ids, errors = value_framing(values)
    return pa.table(
        {
            "topic": pa.array([m.topic() for m in messages], pa.string()),
            "partition": pa.array([m.partition() for m in messages], pa.int32()),
            "offset": pa.array([m.offset() for m in messages], pa.int64()),
            "timestamp": pa.array(
                [_micros(m.timestamp()) for m in messages], pa.timestamp("us", tz="UTC")
            ),
            "key": keys,
            "value": values,
            _HAS_VALUE: values.is_valid(),
            _OVERSIZE: pa.array([False] * count, pa.bool_()),
            tf.KEY_SCHEMA_ID: schema_ids(keys)[0],
            tf.VALUE_SCHEMA_ID: value_ids,
            tf.FRAMING_ERROR: errors,
        }
    )


def _micros(timestamp: tuple[int, int]) -> int | None:
    """A message's ``(type, milliseconds)`` timestamp in microseconds (None: not available)."""
    kind, millis = timestamp
    return None if kind == 0 else millis * 1000
