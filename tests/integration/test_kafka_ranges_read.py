"""The apply job's task lane reading Kafka offset ranges itself (bridge.spark.kafka_ranges)
on the real broker: the C reader (bridge/native/_kafkaread.c) and confluent-kafka's Consumer
hand over the same records, stop at the range's end, and step over transaction markers and
aborted records."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from bridge.devstack.stack import StackInfo
from bridge.native.kafka_reader import range_reader
from bridge.spark import kafka_ranges
from bridge.spark import transforms as tf
from bridge.spark.kafka_ranges import KafkaRange, KafkaReadError, client_config
from tests.spark.envelopes import create_topics

pytestmark = pytest.mark.integration


def _config(stack: StackInfo, **options: str) -> dict[str, Any]:
    config = client_config({"kafka.bootstrap.servers": stack.bootstrap_servers, **options})
    assert config is not None
    return config


def _both_reads(
    ranges: list[KafkaRange], config: dict[str, Any], per_batch: int
) -> tuple[pa.Table, pa.Table]:
    module = range_reader()
    assert module is not None, "the C reader is built and bound in make test"
    in_c = kafka_ranges._read_in_c(module, ranges, config, per_batch)
    with_consumer = kafka_ranges._read_with_consumer(ranges, config, per_batch)
    return _table(in_c), _table(with_consumer)


def _table(batches: Iterator[Any]) -> pa.Table:
    return pa.Table.from_batches(list(batches), schema=kafka_ranges.framed_batch("t", 0, []).schema)


def test_both_readers_hand_over_each_ranges_records_and_stop_at_its_end(
    local_stack: StackInfo,
) -> None:
    topic = f"ranges-{uuid.uuid4().hex[:8]}"
    create_topics(local_stack.bootstrap_servers, [topic], partitions=2)
    producer = Producer({"bootstrap.servers": local_stack.bootstrap_servers})
    sent: dict[int, list[tuple[bytes | None, bytes | None]]] = {0: [], 1: []}
    for i in range(500):
        key = None if i % 11 == 0 else f"k{i}".encode()
        if key is not None and i % 3 == 0:
            key = b"\x00\x00\x00\x00\x09" + key  # framed: the key's schema id is 9
        value = None if i % 7 == 0 else b"\x00\x00\x00\x00\x05" + f"v{i}".encode() * (i % 5)
        if i % 13 == 0:
            value = b"\x01not-framed"  # not Confluent-framed: a framing error the lane dead-letters
        producer.produce(topic, key=key, value=value, partition=i % 2)
        sent[i % 2].append((key, value))
    assert producer.flush(10) == 0
    # Partition 0: a range inside it (records after its end exist); partition 1: to its end.
    ranges = [KafkaRange(topic, 0, 10, 200), KafkaRange(topic, 1, 3, 250)]
    in_c, with_consumer = _both_reads(ranges, _config(local_stack), per_batch=64)
    assert in_c.equals(with_consumer)
    expected = sent[0][10:200] + sent[1][3:250]
    assert in_c.column("value").to_pylist() == [value for _, value in expected]
    framed_keys = [k is not None and len(k) >= 5 and k[0] == 0 for k, _ in expected]
    key_ids = [9 if framed else None for framed in framed_keys]
    assert in_c.column(tf.KEY_SCHEMA_ID).to_pylist() == key_ids
    assert in_c.column("offset").to_pylist() == list(range(10, 200)) + list(range(3, 250))
    assert in_c.column("partition").to_pylist() == [0] * 190 + [1] * 247
    assert in_c.column("value").null_count > 0
    assert in_c.column(tf.FRAMING_ERROR).drop_null().to_pylist()[0] == "magic byte is 0x01, not 0"


def test_transaction_markers_and_aborted_records_are_stepped_over(
    local_stack: StackInfo,
) -> None:
    topic = f"ranges-tx-{uuid.uuid4().hex[:8]}"
    create_topics(local_stack.bootstrap_servers, [topic], partitions=1)
    producer = Producer(
        {
            "bootstrap.servers": local_stack.bootstrap_servers,
            "transactional.id": f"ranges-test-{uuid.uuid4().hex[:8]}",
        }
    )
    producer.init_transactions(30)
    committed = []
    for batch in range(6):
        producer.begin_transaction()
        for i in range(10):
            value = b"\x00\x00\x00\x00\x07" + f"{batch}-{i}".encode()
            producer.produce(topic, key=f"{batch}-{i}".encode(), value=value, partition=0)
            if batch != 2:
                committed.append(value)
        if batch == 2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    # 60 records and 6 markers: offsets 0..65; the range ends at the last marker's offset + 1.
    ranges = [KafkaRange(topic, 0, 0, 66)]
    config = _config(local_stack, **{"kafka.isolation.level": "read_committed"})
    in_c, with_consumer = _both_reads(ranges, config, per_batch=7)
    assert in_c.equals(with_consumer)
    assert in_c.column("value").to_pylist() == committed


def test_a_range_past_what_the_partition_holds_is_a_typed_error_naming_it(
    local_stack: StackInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = f"ranges-short-{uuid.uuid4().hex[:8]}"
    create_topics(local_stack.bootstrap_servers, [topic], partitions=1)
    producer = Producer({"bootstrap.servers": local_stack.bootstrap_servers})
    for _ in range(5):
        producer.produce(topic, value=b"\x00\x00\x00\x00\x01x", partition=0)
    assert producer.flush(10) == 0
    monkeypatch.setattr(kafka_ranges, "_TIMEOUT", 2.0)
    module = range_reader()
    assert module is not None
    # The partition ends at offset 5: records 5..9 never come (the end-of-partition event
    # ends the range at what is visible, so the read of 5..9 itself waits for nothing).
    read = kafka_ranges._read_in_c(module, [KafkaRange(topic, 0, 5, 10)], _config(local_stack), 100)
    assert _table(read).num_rows == 0
    missing = f"ranges-missing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(KafkaReadError, match=missing):
        list(
            kafka_ranges._read_in_c(
                module, [KafkaRange(missing, 0, 0, 10)], _config(local_stack), 100
            )
        )


def test_a_range_whose_records_are_gone_is_an_error_not_a_jump_to_the_end(
    local_stack: StackInfo,
) -> None:
    """Records deleted under the range (retention, DeleteRecords) fail the read in both
    readers, as failOnDataLoss fails Spark's Kafka source: skipping them loses changes."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = f"ranges-gone-{uuid.uuid4().hex[:8]}"
    create_topics(local_stack.bootstrap_servers, [topic], partitions=1)
    producer = Producer({"bootstrap.servers": local_stack.bootstrap_servers})
    for _ in range(20):
        producer.produce(topic, value=b"\x00\x00\x00\x00\x01x", partition=0)
    assert producer.flush(10) == 0
    admin = AdminClient({"bootstrap.servers": local_stack.bootstrap_servers})
    for future in admin.delete_records([TopicPartition(topic, 0, 10)]).values():
        future.result(30)
    module = range_reader()
    assert module is not None
    ranges = [KafkaRange(topic, 0, 0, 20)]
    config = _config(local_stack)
    with pytest.raises(KafkaReadError, match=f"{topic} \\[0\\]"):
        list(kafka_ranges._read_in_c(module, ranges, config, 100))
    with pytest.raises(KafkaReadError, match=f"{topic} \\[0\\]"):
        list(kafka_ranges._read_with_consumer(ranges, config, 100))


def test_the_c_reader_stops_fetching_a_partition_once_its_range_is_read(
    local_stack: StackInfo,
) -> None:
    """At a partition's end, librdkafka with the job's fetch.wait.max.ms=0 fetches again and
    again while the task works on the records: the broker spent about a core on it (the
    4-table mix: 1.3-2.2 µs of broker CPU per change, 0.2-0.3 once stopped). The reader stops
    the partition in the read that reaches the range's end."""
    module = range_reader()
    assert module is not None, "the C reader is built and bound in make test"
    topic = f"ranges-{uuid.uuid4().hex[:8]}"
    create_topics(local_stack.bootstrap_servers, [topic])
    producer = Producer({"bootstrap.servers": local_stack.bootstrap_servers})
    for i in range(10):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    producer.flush()
    reader = kafka_ranges.c_reader(module, _config(local_stack))  # as the lane's tasks make it
    try:
        reader.start(topic, 0, 4)
        count, done, *_ = reader.read(8, 100, 10_000)
        assert (count, done) == (4, True)
        with pytest.raises(RuntimeError, match="start"):  # nothing is being fetched any more
            reader.read(10, 100, 1_000)
        reader.start(topic, 0, 8)  # and a next range starts as before
        count, done, *_ = reader.read(10, 100, 10_000)
        assert (count, done) == (2, True)
    finally:
        reader.close()


def _transactions(
    bootstrap: str, topics: list[str], rounds: int, aborted: int
) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
    """``rounds`` transactions, each of 5 records to every partition (2) of ``topics``, round
    ``aborted`` aborted: each partition's committed (offset, value) records. A round takes 6
    offsets of a partition, its commit or abort marker the sixth."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"small-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(30)
    delivered: dict[tuple[str, int], list[tuple[int, bytes]]] = {}

    def on_delivery(error: Any, message: Any) -> None:
        assert error is None, error
        if not message.value().endswith(b"aborted"):
            where = (message.topic(), message.partition())
            delivered.setdefault(where, []).append((message.offset(), message.value()))

    for round_ in range(rounds):
        producer.begin_transaction()
        for topic in topics:
            for partition in (0, 1):
                for i in range(5):
                    tail = b"aborted" if round_ == aborted else b"%d" % i
                    value = b"\x00\x00\x00\x00\x07" + b"%s-%d-" % (topic.encode(), round_) + tail
                    if round_ == 0 and i == 4:
                        value = b"\x02not-framed"
                    key = None if i == 3 else b"\x00\x00\x00\x00\x08k%d" % i
                    producer.produce(topic, key=key, value=value, partition=partition,
                                     on_delivery=on_delivery)  # fmt: skip
        assert producer.flush(30) == 0  # written, so the aborted records take their offsets
        if round_ == aborted:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    return delivered


def test_the_driver_reads_a_small_batch_of_many_partitions_with_one_consumer(
    local_stack: StackInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small batch over many topic-partitions is read by the driver in one pass of one
    consumer kept between batches (bridge.spark.driver_read): each range's committed records
    once, transaction markers and an aborted transaction stepped over, the next batch from
    where the last ended; a batch it cannot read is left to Spark's source (None)."""
    from bridge.spark import driver_read
    from bridge.spark.config import ApplyConfig
    from bridge.spark.driver_read import SmallBatchReader
    from tests.spark.test_kafka_ranges import _initial, _log

    topics = [f"small-{uuid.uuid4().hex[:8]}-{i}" for i in range(3)]
    create_topics(local_stack.bootstrap_servers, topics, partitions=2)
    committed = _transactions(local_stack.bootstrap_servers, topics, rounds=4, aborted=2)
    config = ApplyConfig(
        topic_prefix="small",
        bootstrap_servers=local_stack.bootstrap_servers,
        registry_url="http://unused",
        delta_base=str(tmp_path / "delta"),
        checkpoint_location=str(tmp_path / "checkpoint"),
        dead_letter_location=str(tmp_path / "dead"),
    )
    checkpoint = tmp_path / "checkpoint"
    _initial(checkpoint, {t: {"0": 0, "1": 0} for t in topics})
    _log(checkpoint, 0, {t: {"0": 12, "1": 12} for t in topics})  # rounds 0 and 1
    _log(checkpoint, 1, {t: {"0": 24, "1": 24} for t in topics})  # 2 (aborted) and 3
    reader = SmallBatchReader(config, timeout=2.0)
    try:
        for batch_id, below in ((0, 12), (1, 24)):
            table = reader.read(batch_id)
            assert table is not None, batch_id
            columns = ("topic", "partition", "offset", "value")
            got = sorted(zip(*(table.column(c).to_pylist() for c in columns), strict=True))
            expected = sorted(
                (topic, partition, offset, value)
                for (topic, partition), records in committed.items()
                for offset, value in records
                if below - 12 <= offset < below
            )
            assert got == expected
            assert table.column("timestamp").null_count == 0
            unframed = {None} if batch_id == 0 else set()  # round 0's not-framed values
            assert set(table.column(tf.VALUE_SCHEMA_ID).to_pylist()) == {7} | unframed
            assert set(table.column(tf.KEY_SCHEMA_ID).to_pylist()) == {8, None}
        errors = table.column(tf.FRAMING_ERROR).drop_null().to_pylist()
        assert errors == [], "round 3 holds framed values only"
        assert reader.read(0, limit=50) is None  # 60 records: Spark collects or counts them
        monkeypatch.setattr(driver_read, "MAX_BYTES", 100)
        assert reader.read(0) is None  # too many bytes for the driver: Spark's source
        monkeypatch.setattr(driver_read, "MAX_BYTES", 64 << 20)
        # Offsets past the partition's end: its end-of-partition ends the range, as in the
        # lane's readers.
        _log(checkpoint, 2, {t: {"0": 30 if t == topics[0] else 24, "1": 24} for t in topics})
        past_the_end = reader.read(2)
        assert past_the_end is not None and past_the_end.num_rows == 0
        missing = f"small-missing-{uuid.uuid4().hex[:8]}"
        _log(checkpoint, 3, {missing: {"0": 0}})
        _log(checkpoint, 4, {missing: {"0": 10}})
        assert reader.read(4) is None  # records that cannot be read: Spark's source judges
        framing = reader.read(0)  # and the next read starts afresh
        assert framing is not None and framing.num_rows == 60
        assert "magic byte is 0x02, not 0" in framing.column(tf.FRAMING_ERROR).to_pylist()
    finally:
        reader.close()
