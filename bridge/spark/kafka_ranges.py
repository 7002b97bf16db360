"""A micro-batch's Kafka offset ranges, and reading them in a Spark task without Spark's Kafka
source.

Why: the task lane (:mod:`bridge.spark.task_lane`) got its records from Spark's Kafka source as
rows turned into Arrow, about two raw reads of work on top of the read itself; reading the
topic-partitions with confluent-kafka in the Python tasks costs what Spark's raw read costs,
decoding included (bench/kafka_read_probe.py, docs/measurements.md).

The ranges are Spark's own: the streaming engine writes a batch's end offsets to the
checkpoint's offset log (``offsets/<batch id>``) before it runs the batch, and a restarted
batch reruns those offsets; the batch starts where the one before ended, or, for the query's
first batch, at the offsets the Kafka source logged when it started (``sources/0/0``). Where
they cannot be told here (a checkpoint outside the local file system, a topic-partition the
batch starts from the earliest offset, Kafka options librdkafka is not given here), nothing
is read this way: the caller keeps Spark's Kafka source.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from bridge.spark import transforms as tf

__all__ = [
    "KafkaRange",
    "batch_ranges",
    "c_reader",
    "client_config",
    "edge_records",
    "framed_batch",
    "read_ranges",
    "schema_ids",
    "task_shares",
    "value_framing",
]


@dataclass(frozen=True, slots=True)
class KafkaRange:
    """Offsets ``start`` (included) to ``end`` (excluded) of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def records(self) -> int:
        """At most this many records (compaction and transaction markers leave gaps)."""
        return self.end - self.start


def _local_dir(location: str) -> Path | None:
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return Path(parsed.path if parsed.scheme else location)
    return None


def _offsets_of_log(text: str) -> dict[str, dict[str, int]] | None:
    """The Kafka source's offsets in an offset log file (``v1``, the batch's metadata, one
    line per source); None unless the query has exactly one source (pgbridge's has one)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) != 3 or lines[0] != "v1":
        return None
    return _partition_offsets(lines[2])


def _partition_offsets(text: str) -> dict[str, dict[str, int]] | None:
    """A Kafka source's offsets (``{topic: {partition: offset}}``); None for another
    source's (a Delta source's version, say)."""
    offsets = json.loads(text)
    if not isinstance(offsets, dict) or not all(isinstance(p, dict) for p in offsets.values()):
        return None
    try:
        return {
            str(topic): {str(p): int(o) for p, o in parts.items()}
            for topic, parts in offsets.items()
        }
    except (TypeError, ValueError):
        return None


def _initial_offsets(checkpoint: Path) -> dict[str, dict[str, int]] | None:
    """The offsets the Kafka source started from (``sources/0/0``: a zero byte, ``v1``, the
    offsets' JSON)."""
    path = checkpoint / "sources" / "0" / "0"
    if not path.is_file():
        return None
    lines = path.read_bytes().lstrip(b"\x00").decode().splitlines()
    if len(lines) != 2 or lines[0] != "v1":
        return None
    return _partition_offsets(lines[1])


def batch_ranges(checkpoint_location: str, batch_id: int) -> list[KafkaRange] | None:
    """The Kafka offset ranges of micro-batch ``batch_id`` of the query checkpointed at
    ``checkpoint_location``, empty ones left out; None where they cannot be told here."""
    checkpoint = _local_dir(checkpoint_location)
    if checkpoint is None:
        return None
    try:
        end_file = checkpoint / "offsets" / str(batch_id)
        ends = _offsets_of_log(end_file.read_text())
        if batch_id == 0:
            starts = _initial_offsets(checkpoint)
        else:
            starts = _offsets_of_log((checkpoint / "offsets" / str(batch_id - 1)).read_text())
    except (OSError, ValueError):
        return None
    if ends is None or starts is None:
        return None
    ranges = []
    for topic, partitions in sorted(ends.items()):
        for partition, end in sorted(partitions.items(), key=lambda item: int(item[0])):
            start = starts.get(topic, {}).get(partition)
            if start is None or start < 0 or end < start:
                # A new topic-partition (Spark starts it from its earliest offset, which is
                # not logged) or a special offset: Spark's Kafka source reads this batch.
                return None
            if end > start:
                ranges.append(KafkaRange(topic, int(partition), start, end))
    return ranges


#: Spark Kafka source options (without ``kafka.``) that mean the same to librdkafka, and the
#: values taken as they are. Anything else (SASL, TLS stores, OAuth) keeps Spark's source.
_SAME_MEANING = {"security.protocol": {"PLAINTEXT", "plaintext"}}


def client_config(source_options: Mapping[str, str]) -> dict[str, Any] | None:
    """librdkafka's consumer configuration equivalent to the Kafka source options
    (:meth:`bridge.spark.config.ApplyConfig.kafka_source_options`); None where one of them
    has no equivalent given here."""
    config: dict[str, Any] = {
        "group.id": "pgbridge-apply-lane",  # never joins the group: assign() and no commits
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # Large fetches: a task reads its partitions to known ends, one after another; the
        # prefetch queue bounded to 64 MiB (librdkafka's 64 MiB default is per partition).
        "fetch.max.bytes": 32 * 1024 * 1024,
        "max.partition.fetch.bytes": 16 * 1024 * 1024,
        "queued.max.messages.kbytes": 65536,
        # librdkafka postpones a partition's next fetch by this much (1 s by default) whenever
        # its fetch queue is at a threshold, and a queue as good as empty counts at times (an
        # op of the fetch's start: measured, one edge read in 16 waited 1.0 s with
        # queued.min.messages=1, a quarter of the 4-table mix's first batches). A reader
        # drains its queue at once: a short backoff costs nothing.
        "fetch.queue.backoff.ms": 10,
        # A range whose records are gone (retention, a recreated topic) is an error, as
        # failOnDataLoss makes it for Spark's source, never a silent jump to the newest offset.
        "auto.offset.reset": "error",
    }
    for name, value in source_options.items():
        if not name.startswith("kafka."):
            continue  # the source's own options (subscribePattern, startingOffsets, ...)
        key = name.removeprefix("kafka.")
        committed = ("read_committed", "read_uncommitted")
        if key == "bootstrap.servers" or (key == "isolation.level" and value in committed):
            config[key] = value
        elif key == "fetch.max.wait.ms":
            config["fetch.wait.max.ms"] = int(value)
        elif value not in _SAME_MEANING.get(key, ()):
            return None
    return config if "bootstrap.servers" in config else None


def task_shares(ranges: Sequence[KafkaRange], tasks: int) -> list[list[KafkaRange]]:
    """``ranges`` dealt to at most ``tasks`` tasks, the largest first to the least loaded;
    each topic-partition in one task (the lane summarises a partition in one task)."""
    shares: list[list[KafkaRange]] = [[] for _ in range(max(1, min(tasks, len(ranges))))]
    loads = [0] * len(shares)
    for kafka_range in sorted(ranges, key=lambda r: -r.records):
        least = loads.index(min(loads))
        shares[least].append(kafka_range)
        loads[least] += kafka_range.records
    return [share for share in shares if share]


def framed_batch(topic: str, partition: int, messages: Sequence[Any]) -> Any:
    """Kafka messages -> an Arrow batch of the lane's columns (topic, value, partition,
    offset, the key's and value's schema ids, the framing error), framed as
    :func:`bridge.spark.transforms.frame` frames Spark's rows."""
    import pyarrow as pa

    return _lane_batch(
        topic,
        partition,
        pa.array([m.value() for m in messages], pa.binary()),
        pa.array([m.key() for m in messages], pa.binary()),
        pa.array([m.offset() for m in messages], pa.int64()),
    )


def _lane_batch(topic: str, partition: int, values: Any, keys: Any, offsets: Any) -> Any:
    """The lane's Arrow batch of one partition's records (Arrow arrays of their values, keys
    and offsets)."""
    import numpy as np
    import pyarrow as pa

    count = len(values)
    value_ids, errors = value_framing(values)
    return pa.record_batch(
        {
            "topic": pa.array([topic] * count, pa.string()),
            "value": values,
            "partition": pa.array(np.full(count, partition, np.int32)),
            "offset": offsets,
            tf.VALUE_SCHEMA_ID: value_ids,
            tf.KEY_SCHEMA_ID: schema_ids(keys)[0],
            tf.FRAMING_ERROR: errors,
        }
    )


def value_framing(values: Any) -> tuple[Any, Any]:
    """Per value (an Arrow binary array), its schema id and its framing error
    (:func:`framing_error`; null for a framed value or a tombstone)."""
    import pyarrow as pa

    value_ids, framed = schema_ids(values)
    if framed.all():
        return value_ids, pa.nulls(len(values), pa.string())
    texts: list[str | None] = [None] * len(values)
    for index in (~framed).nonzero()[0]:  # rare: only these values are looked at one by one
        texts[index] = framing_error(values[int(index)].as_py())
    return value_ids, pa.array(texts, pa.string())


def schema_ids(payloads: Any) -> tuple[Any, Any]:
    """Bytes 1..4 of each Confluent-framed payload as a big-endian unsigned int, null where a
    payload is null or not framed; and which payloads are framed (or null). Read in place:
    the payloads' bytes are not copied (they are most of a batch's memory)."""
    import numpy as np
    import pyarrow as pa

    count = len(payloads)
    offsets = np.frombuffer(payloads.buffers()[1], np.int32)[payloads.offset :][: count + 1]
    present = np.asarray(payloads.is_valid(), bool)
    data_buffer = payloads.buffers()[2]
    size = 0 if data_buffer is None else data_buffer.size
    if size < 5:  # no payload holds a magic byte and a schema id
        return pa.nulls(count, pa.int64()), ~present
    data = np.frombuffer(data_buffer, np.uint8)
    whole = offsets[1:] - offsets[:-1] >= 5
    starts = np.where(whole, offsets[:-1], 0)  # a shorter payload reads the first 5 bytes
    framed = present & whole & (data[starts] == 0)
    # Each byte's big-endian 4-byte word from the next byte on: bytes 1..4 of the payload
    # starting at it (a view, unaligned).
    words = np.ndarray(shape=(size - 4,), dtype=">u4", buffer=data_buffer, offset=1, strides=(1,))
    ids = words[starts].astype(np.int64)
    return pa.array(ids, pa.int64(), mask=~framed), framed | ~present


def framing_error(value: bytes | None) -> str | None:
    """:func:`bridge.spark.transforms.frame`'s ``_framing_error`` of one value."""
    if value is None:
        return None
    if len(value) < 5:
        return "value shorter than the 5-byte Confluent header"
    if value[0] != 0:
        return f"magic byte is 0x{value[0]:02x}, not 0"
    return None


class KafkaReadError(RuntimeError):
    """A topic-partition's range could not be read to its end."""


#: Records per Arrow batch a lane task reads: each batch pays the task's fixed work once
#: (framing, counting, the C decode's call, the summary's group-bys). 10,000 cost a 4-table
#: mix's 444,825-record batch 0.37 s of decoding per task; 65,536 about half (a few MB of
#: payloads held at a time).
READ_BATCH_RECORDS = 65_536


def read_ranges(
    ranges: Sequence[KafkaRange], config: Mapping[str, Any], per_batch: int = READ_BATCH_RECORDS
) -> Iterator[Any]:
    """The records of ``ranges``, one range after another, as Arrow batches of
    :func:`framed_batch`. A range ends at its end offset, or where the partition's visible
    records end before it (transaction markers and aborted records take offsets no record
    is read at). Raises :class:`KafkaReadError` naming the topic-partition where no record
    comes within ``timeout`` seconds.

    Read in C into Arrow buffers where ``bridge.native._kafkaread`` is bound (no Python
    object per record), else with confluent-kafka's ``Consumer``."""
    from bridge.native.kafka_reader import range_reader

    module = range_reader()
    if module is not None:
        return _read_in_c(module, ranges, config, per_batch)
    return _read_with_consumer(ranges, config, per_batch)


#: The consumer settings of a consumer group: the C reader reads without a group.
_GROUP_SETTINGS = ("group.id", "enable.auto.commit", "enable.auto.offset.store")


def _setting_text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def c_reader(module: Any, config: Mapping[str, Any]) -> Any:
    """A ``bridge.native._kafkaread.Reader`` with the consumer ``config`` (without a group's
    settings: it reads without one), told of each partition's end."""
    settings = {k: _setting_text(v) for k, v in config.items() if k not in _GROUP_SETTINGS}
    return module.Reader({**settings, "enable.partition.eof": "true"})


def _read_in_c(
    module: Any, ranges: Sequence[KafkaRange], config: Mapping[str, Any], per_batch: int
) -> Iterator[Any]:
    import pyarrow as pa

    reader = c_reader(module, config)
    try:
        for kafka_range in ranges:
            topic, partition = kafka_range.topic, kafka_range.partition
            try:
                reader.start(topic, partition, kafka_range.start)
            except RuntimeError as exc:
                raise KafkaReadError(str(exc)) from exc
            position, done = kafka_range.start, False
            while not done and position < kafka_range.end:
                # Waits for the first record only, then takes what is fetched already.
                wanted = min(per_batch, kafka_range.end - position)
                try:
                    count, done, offsets, values, keys = reader.read(
                        kafka_range.end, wanted, int(_TIMEOUT * 1000)
                    )
                except RuntimeError as exc:
                    raise KafkaReadError(f"{topic} {exc}") from exc
                if count == 0 and not done:
                    raise _nothing_read(kafka_range, position)
                if count:
                    offset_array = pa.Array.from_buffers(
                        pa.int64(), count, [None, pa.py_buffer(offsets)]
                    )
                    position = offset_array[count - 1].as_py() + 1
                    yield _lane_batch(
                        topic,
                        partition,
                        _binary_array(count, values),
                        _binary_array(count, keys),
                        offset_array,
                    )
    finally:
        reader.close()


def _binary_array(count: int, buffers: tuple[bytes | None, bytes, bytes]) -> Any:
    import pyarrow as pa

    validity, offsets, data = buffers
    return pa.Array.from_buffers(
        pa.binary(),
        count,
        [
            pa.py_buffer(validity) if validity is not None else None,
            pa.py_buffer(offsets),
            pa.py_buffer(data),
        ],
    )


def _nothing_read(kafka_range: KafkaRange, position: int) -> KafkaReadError:
    return KafkaReadError(
        f"{kafka_range.topic} [{kafka_range.partition}]: nothing read at offset {position} "
        f"(the batch ends at {kafka_range.end}) within {_TIMEOUT:.0f} s"
    )


def _read_with_consumer(
    ranges: Sequence[KafkaRange], config: Mapping[str, Any], per_batch: int
) -> Iterator[Any]:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({**config, "enable.partition.eof": True})
    try:
        for kafka_range in ranges:
            topic, partition = kafka_range.topic, kafka_range.partition
            consumer.assign([TopicPartition(topic, partition, kafka_range.start)])
            position, done = kafka_range.start, False
            while not done and position < kafka_range.end:
                # consume(n, timeout) waits until it has n messages: it waits for the first
                # only, then takes what is fetched already (transaction markers, aborted and
                # deleted records leave a range short of its offset count, and that wait ran
                # to the timeout at the end of every such range).
                messages = consumer.consume(1, timeout=_TIMEOUT)
                if not messages:
                    raise _nothing_read(kafka_range, position)
                wanted = min(per_batch, kafka_range.end - position)
                if wanted > 1:
                    messages += consumer.consume(wanted - 1, timeout=0)
                taken = []
                for message in messages:
                    if message.topic() != topic or message.partition() != partition:
                        continue  # (an event of the range before)
                    error = message.error()
                    if error is not None and error.code() == KafkaError._PARTITION_EOF:
                        done = True  # no visible record left below the end offset
                        break
                    if error is not None:
                        raise KafkaReadError(f"{topic} [{partition}] at offset {position}: {error}")
                    if (message.offset() or 0) >= kafka_range.end:
                        done = True
                        break
                    taken.append(message)
                if taken:
                    position = (taken[-1].offset() or position) + 1
                if done or position >= kafka_range.end:
                    # Stop fetching before the caller works on the records: at the
                    # partition's end the consumer would fetch again and again meanwhile.
                    consumer.unassign()
                if taken:
                    yield framed_batch(topic, partition, taken)
    finally:
        consumer.close()


#: librdkafka settings of a read of one record.
_ONE_RECORD_FETCHES = {
    "fetch.max.bytes": 1024 * 1024,  # at least message.max.bytes (librdkafka checks)
    "max.partition.fetch.bytes": 64 * 1024,
    "queued.min.messages": 1,
    "queued.max.messages.kbytes": 1024,
}


def edge_records(kafka_range: KafkaRange, config: Mapping[str, Any]) -> list[Any]:
    """The first and the last visible record of ``kafka_range`` (one-row batches of
    :func:`framed_batch`; the last is left out where the range ends in a transaction marker,
    and the two are one where the range holds one record)."""
    edges = []
    starts = [kafka_range.start]
    if kafka_range.records > 1:
        starts.append(kafka_range.end - 1)
    # One record wanted: no 16 MiB fetches and 64 MiB of prefetch (0.9 s for a topic's four
    # edges; a fetch returns a record larger than these bounds all the same).
    small = {**config, **_ONE_RECORD_FETCHES}
    for start in starts:
        reads = read_ranges([KafkaRange(kafka_range.topic, kafka_range.partition, start,
                                        kafka_range.end)], small, per_batch=1)  # fmt: skip
        try:
            batch = next(iter(reads), None)
        finally:
            close = getattr(reads, "close", None)
            if close is not None:
                close()  # the generator's reader, now
        if batch is not None and batch.num_rows:
            edges.append(batch.slice(0, 1))
    return edges


#: Seconds a read waits for the next records of a range known to exist.
_TIMEOUT = 30.0
