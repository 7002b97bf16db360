"""The Kafka publisher against the real local broker (auto.create.topics.enable=false)."""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from functools import partial

import pytest
from confluent_kafka import Consumer, KafkaError, TopicCollection
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.admin._resource import ResourceType

from bridge.config import KafkaConfig, TopicCreationConfig
from bridge.devstack.stack import StackInfo
from bridge.sink.kafka_errors import DeliveryError
from bridge.sink.publisher import KafkaPublisher
from tests.rows import pack_records

pytestmark = pytest.mark.integration


def java_murmur2(data: bytes) -> int:
    """``org.apache.kafka.common.utils.Utils.murmur2`` as a signed 32-bit int, transcribed."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(length // 4):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r  # Java's >>> on an int: the value is kept unsigned here
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail, rest = length & ~3, length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def java_partition(key: bytes, partitions: int) -> int:
    """The Java client's default partitioner for a keyed record (``Utils.toPositive``)."""
    return (java_murmur2(key) & 0x7FFFFFFF) % partitions


def test_java_murmur2_matches_kafka_utils_test_vectors() -> None:
    # Vectors from Kafka's UtilsTest.testMurmur2, so the reference itself is checked.
    assert java_murmur2(b"21") == -973932308
    assert java_murmur2(b"foobar") == -790332482
    assert java_murmur2(b"a-little-bit-long-string") == -985981536
    assert java_murmur2(b"a-little-bit-longer-string") == -1486304829
    assert java_murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert java_murmur2(b"abc") == 479470107


def _topic(name: str) -> str:
    return f"test-publisher-{name}-{uuid.uuid4().hex[:8]}"


def _consume(
    bootstrap: str, topic: str, count: int
) -> list[tuple[int, bytes | None, bytes | None]]:
    """``count`` records of ``topic`` as (partition, key, value), in each partition's order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[tuple[int, bytes | None, bytes | None]] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            partition = msg.partition()
            assert partition is not None
            got.append((partition, msg.key(), msg.value()))
            if len(got) >= count:
                break
    finally:
        consumer.close()
    assert len(got) == count, f"consumed {len(got)} of {count} records from {topic}"
    return got


@pytest.fixture
def admin(local_stack: StackInfo) -> AdminClient:
    return AdminClient({"bootstrap.servers": local_stack.bootstrap_servers})


@pytest.fixture
def kafka(local_stack: StackInfo) -> KafkaConfig:
    # linger 5 ms: these tests are about correctness, not batching.
    return KafkaConfig(bootstrap_servers=local_stack.bootstrap_servers, linger_ms=5)


@pytest.fixture
def opened() -> Iterator[list[KafkaPublisher]]:
    """Publishers a test appends here are closed after it."""
    made: list[KafkaPublisher] = []
    yield made
    for publisher in made:
        # The failure tests leave a recorded failure behind on purpose.
        with contextlib.suppress(DeliveryError):
            publisher.close(5)


def test_publisher_creates_missing_topic_with_partitions_and_cleanup_policy(
    kafka: KafkaConfig, admin: AdminClient, opened: list[KafkaPublisher]
) -> None:
    topic = _topic("create")
    creation = TopicCreationConfig(partitions=3, replication_factor=1, cleanup_policy="compact")
    publisher = KafkaPublisher(kafka, creation)
    opened.append(publisher)
    delivered: list[int] = []
    publisher.publish(topic, b"k", b"v", lambda: delivered.append(1))
    assert publisher.flush(30) == 0
    assert delivered == [1]

    description = admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=30)
    assert len(description.partitions) == 3
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    assert configs["cleanup.policy"].value == "compact"


def test_publisher_delivers_every_record_in_order_per_key_with_callbacks(
    local_stack: StackInfo, kafka: KafkaConfig, opened: list[KafkaPublisher]
) -> None:
    topic = _topic("order")
    publisher = KafkaPublisher(kafka, TopicCreationConfig(partitions=4, replication_factor=1))
    opened.append(publisher)
    keys = [f"key-{i}".encode() for i in range(12)]
    delivered: list[tuple[bytes, int]] = []
    total = 600
    for seq in range(total):
        key = keys[seq % len(keys)]
        publisher.publish(topic, key, str(seq).encode(), partial(delivered.append, (key, seq)))
        if seq % 100 == 0:
            publisher.poll()
    assert publisher.flush(30) == 0
    assert publisher.in_flight == 0
    assert sorted(s for _, s in delivered) == list(range(total))  # each callback exactly once

    records = _consume(local_stack.bootstrap_servers, topic, total)
    per_key: dict[bytes, list[int]] = defaultdict(list)
    for _, record_key, value in records:
        assert record_key is not None and value is not None
        per_key[record_key].append(int(value))
    assert set(per_key) == set(keys)
    for key, seqs in per_key.items():
        assert seqs == sorted(seqs), f"records of {key!r} arrived out of order"
        assert len(seqs) == total // len(keys)


def test_publisher_places_keys_like_the_java_default_partitioner(
    local_stack: StackInfo, kafka: KafkaConfig, opened: list[KafkaPublisher]
) -> None:
    topic = _topic("murmur2")
    partitions = 5
    publisher = KafkaPublisher(
        kafka, TopicCreationConfig(partitions=partitions, replication_factor=1)
    )
    opened.append(publisher)
    keys = [
        b"21",
        b"foobar",
        b"abc",
        b"\x00\x00\x00\x2a",
        "é-ü".encode(),
        *(f"customer-{i}".encode() for i in range(40)),
    ]
    for key in keys:
        publisher.publish(topic, key, b"x", lambda: None)
    assert publisher.flush(30) == 0

    placed = {
        key: partition
        for partition, key, _ in _consume(local_stack.bootstrap_servers, topic, len(keys))
    }
    expected = {key: java_partition(key, partitions) for key in keys}
    assert placed == expected
    assert len(set(expected.values())) > 1  # the keys really spread over partitions


def test_publisher_waits_for_room_when_the_queue_is_full(
    local_stack: StackInfo, opened: list[KafkaPublisher]
) -> None:
    topic = _topic("backpressure")
    tiny = KafkaConfig(
        bootstrap_servers=local_stack.bootstrap_servers, linger_ms=0, max_queue_size=2
    )
    publisher = KafkaPublisher(tiny, TopicCreationConfig(partitions=1, replication_factor=1))
    opened.append(publisher)
    delivered: list[int] = []
    for seq in range(50):  # far more than the queue holds: publish() must wait, not drop
        publisher.publish(topic, b"k", str(seq).encode(), partial(delivered.append, seq))
        assert publisher.in_flight <= 2
    assert publisher.flush(30) == 0
    assert delivered == list(range(50))
    values = [v for _, _, v in _consume(local_stack.bootstrap_servers, topic, 50)]
    assert values == [str(seq).encode() for seq in range(50)]


def test_publisher_publishes_tombstones_as_null_values(
    local_stack: StackInfo, kafka: KafkaConfig, opened: list[KafkaPublisher]
) -> None:
    topic = _topic("tombstone")
    publisher = KafkaPublisher(kafka, TopicCreationConfig(partitions=1, replication_factor=1))
    opened.append(publisher)
    publisher.publish(topic, b"k", b"row", lambda: None)
    publisher.publish(topic, b"k", None, lambda: None)
    assert publisher.flush(30) == 0
    assert [v for _, _, v in _consume(local_stack.bootstrap_servers, topic, 2)] == [b"row", None]


def test_publisher_raises_delivery_error_when_broker_rejects_record(
    kafka: KafkaConfig, opened: list[KafkaPublisher]
) -> None:
    topic = _topic("too-large")
    # The topic accepts batches of at most 1 KiB; an incompressible 8 KiB record cannot fit.
    creation = TopicCreationConfig(
        partitions=1, replication_factor=1, extra=(("max.message.bytes", "1024"),)
    )
    publisher = KafkaPublisher(kafka, creation)
    opened.append(publisher)
    delivered: list[int] = []
    failed: list[DeliveryError] = []
    publisher.publish(
        topic, b"k", os.urandom(8192), lambda: delivered.append(1), on_failed=failed.append
    )
    with pytest.raises(DeliveryError) as raised:
        publisher.flush(30)
    error = raised.value
    assert (error.topic, error.partition) == (topic, 0)
    assert error.code == KafkaError(KafkaError.MSG_SIZE_TOO_LARGE).name()
    assert topic in str(error) and "MSG_SIZE_TOO_LARGE" in str(error)
    assert delivered == []
    assert failed == [error]
    assert publisher.failed_count == 1
    # Not swallowed: the bridge cannot carry on past it.
    with pytest.raises(DeliveryError):
        publisher.publish(topic, b"k", b"small", lambda: delivered.append(2))
    with pytest.raises(DeliveryError):
        publisher.poll()


def test_publisher_raises_delivery_error_for_missing_topic_without_creation(
    local_stack: StackInfo, admin: AdminClient, opened: list[KafkaPublisher]
) -> None:
    topic = _topic("missing")
    kafka = KafkaConfig(
        bootstrap_servers=local_stack.bootstrap_servers, linger_ms=5, delivery_timeout_ms=3000
    )
    publisher = KafkaPublisher(kafka, TopicCreationConfig(enable=False))
    opened.append(publisher)
    delivered: list[int] = []
    publisher.publish(topic, b"k", b"v", lambda: delivered.append(1))
    with pytest.raises(DeliveryError) as raised:
        publisher.flush(30)
    assert raised.value.topic == topic
    assert raised.value.code in ("_MSG_TIMED_OUT", "_UNKNOWN_TOPIC", "UNKNOWN_TOPIC_OR_PART")
    assert delivered == []
    # The broker did not create it behind our back (auto.create.topics.enable=false).
    metadata = admin.list_topics(timeout=10)
    assert topic not in metadata.topics or metadata.topics[topic].error is not None


def test_publisher_ensure_topic_keeps_an_existing_topic_as_it_is(
    kafka: KafkaConfig,
    admin: AdminClient,
    opened: list[KafkaPublisher],
    caplog: pytest.LogCaptureFixture,
) -> None:
    from confluent_kafka.cimpl import NewTopic

    topic = _topic("existing")
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=30)
    publisher = KafkaPublisher(kafka, TopicCreationConfig(partitions=6, replication_factor=1))
    opened.append(publisher)
    publisher.ensure_topic(topic)
    publisher.ensure_topic(topic)  # cached: no second round trip, no second warning
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and topic in r.message]
    assert len(warnings) == 1 and "2 partitions, not the configured 6" in warnings[0].message
    description = admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=30)
    assert len(description.partitions) == 2


def test_publisher_without_success_reports_delivers_records_in_bulk_and_still_raises_failures(
    local_stack: StackInfo, kafka: KafkaConfig, opened: list[KafkaPublisher]
) -> None:
    # The snapshot's producers: no callback per delivered record, delivery known from the
    # queue running empty; a broker refusal is still a DeliveryError.
    topic = _topic("bulk")
    publisher = KafkaPublisher(
        kafka, TopicCreationConfig(partitions=3, replication_factor=1), report_successes=False
    )
    opened.append(publisher)
    called: list[int] = []
    total = 2000  # several produce_batch calls
    records = [(f"k{i}".encode(), str(i).encode()) for i in range(total)]
    publisher.publish_records(topic, records, lambda: called.append(1))
    keyless: list[tuple[bytes | None, bytes | None]] = [(None, b"-1"), (None, b"-2")]
    publisher.publish_records(topic, keyless, lambda: called.append(1))  # partition 0
    deadline = time.monotonic() + 30
    while publisher.outstanding and time.monotonic() < deadline:
        publisher.poll(0.1)
    assert publisher.outstanding == 0
    assert called == []  # successes call nothing
    got = _consume(local_stack.bootstrap_servers, topic, total + 2)
    assert sorted(int(v) for _, _, v in got if v is not None) == [-2, -1, *range(total)]
    assert [(p, v) for p, k, v in got if k is None] == [(0, b"-1"), (0, b"-2")]
    assert len({p for p, k, _ in got if k is not None}) == 3  # keyed: spread by key

    # A topic that accepts batches of at most 1 KiB: an incompressible 8 KiB record fails.
    small = _topic("bulk-small")
    limited = KafkaPublisher(
        kafka,
        TopicCreationConfig(
            partitions=1, replication_factor=1, extra=(("max.message.bytes", "1024"),)
        ),
        report_successes=False,
    )
    opened.append(limited)
    limited.publish_records(small + "-1k", [(b"k", os.urandom(8192))], lambda: called.append(2))
    with pytest.raises(DeliveryError) as raised:
        limited.flush(30)
    assert raised.value.code == KafkaError(KafkaError.MSG_SIZE_TOO_LARGE).name()
    assert called == []


def test_publisher_batches_null_key_records_into_partition_zero_in_order(
    local_stack: StackInfo, kafka: KafkaConfig, opened: list[KafkaPublisher]
) -> None:
    # A keyless table's records keep their commit order in partition 0 of a multi-partition
    # topic, batched or not, also when keyed records are interleaved (confluent-kafka's
    # produce_batch ignores a per-record partition: the batch must carry it).
    topic = _topic("null-keys")
    publisher = KafkaPublisher(kafka, TopicCreationConfig(partitions=3, replication_factor=1))
    opened.append(publisher)
    delivered: list[int] = []
    total = 900
    for seq in range(total):
        key = None if seq % 3 else f"k{seq}".encode()
        publisher.publish(topic, key, str(seq).encode(), lambda: delivered.append(1))
    assert publisher.flush(30) == 0
    assert len(delivered) == total
    got = _consume(local_stack.bootstrap_servers, topic, total)
    null_keyed = [(p, int(v)) for p, k, v in got if k is None and v is not None]
    assert {p for p, _ in null_keyed} == {0}
    assert [v for _, v in null_keyed] == [s for s in range(total) if s % 3]


def _native_expected() -> bool:
    return os.environ.get("PGBRIDGE_NATIVE", "1") != "0"


def test_publisher_native_batches_deliver_every_record_in_order_with_bulk_reports(
    local_stack: StackInfo, kafka: KafkaConfig, opened: list[KafkaPublisher]
) -> None:
    # One route (one callback) for thousands of records over 4 partitions, with tombstones
    # and null keys among them: the batches go through bridge.native._kafka, with a report of
    # the first and last record per partition only; every record is still reported delivered
    # once, lands where the Java partitioner puts it, and in its partition's order.
    topic = _topic("native")
    publisher = KafkaPublisher(kafka, TopicCreationConfig(partitions=4, replication_factor=1))
    opened.append(publisher)
    delivered: list[int] = []
    on_delivered = partial(delivered.append, 1)
    total = 3000
    sent: list[tuple[bytes | None, bytes | None]] = []
    for seq in range(total):
        key = None if seq % 500 == 7 else f"k{seq % 97}".encode()
        value = None if seq % 300 == 11 else str(seq).encode()
        sent.append((key, value))
        publisher.publish(topic, key, value, on_delivered)
    assert publisher.flush(30) == 0
    assert publisher.native_partitions(topic) == (4 if _native_expected() else None)
    assert len(delivered) == total and publisher.in_flight == 0

    got = _consume(local_stack.bootstrap_servers, topic, total)
    per_partition: dict[int, list[tuple[bytes | None, bytes | None]]] = defaultdict(list)
    for partition, key, value in got:
        per_partition[partition].append((key, value))
    expected: dict[int, list[tuple[bytes | None, bytes | None]]] = defaultdict(list)
    for key, value in sent:
        expected[0 if key is None else java_partition(key, 4)].append((key, value))
    assert per_partition == expected


def test_publisher_native_batch_with_a_refused_record_in_the_middle_fails_the_batch(
    kafka: KafkaConfig, opened: list[KafkaPublisher]
) -> None:
    # A record the broker refuses between two it accepts: the batch's first and last records
    # may be delivered, yet the batch is not (enable.gapless.guarantee makes the gap fatal):
    # nothing reported delivered, a DeliveryError, and the publisher refuses to go on.
    topic = _topic("native-gap")
    creation = TopicCreationConfig(
        partitions=1, replication_factor=1, extra=(("max.message.bytes", "1024"),)
    )
    publisher = KafkaPublisher(kafka, creation)
    opened.append(publisher)
    delivered: list[int] = []
    on_delivered = partial(delivered.append, 1)
    publisher.publish(topic, b"a", b"small", on_delivered)
    publisher.publish(topic, b"b", os.urandom(8192), on_delivered)
    publisher.publish(topic, b"c", b"small", on_delivered)
    with pytest.raises(DeliveryError) as raised:
        publisher.flush(30)
    assert raised.value.topic == topic
    if _native_expected():  # one report for the batch: never "delivered"
        assert delivered == []
    else:  # a report per record: the small ones may have been delivered, never the large one
        assert len(delivered) <= 2
    with pytest.raises(DeliveryError):
        publisher.publish(topic, b"d", b"small", on_delivered)


def test_publisher_raises_a_record_librdkafka_refuses_and_sends_nothing_after_it(
    local_stack: StackInfo, kafka: KafkaConfig, opened: list[KafkaPublisher]
) -> None:
    # publish_records (the snapshot's path) hands a record over message.max.bytes to the
    # client, which refuses it at once: a DeliveryError naming the topic and reason, and the
    # publisher refuses every later record; the records before it land, none after it.
    topic = _topic("refused")
    publisher = KafkaPublisher(
        kafka,
        TopicCreationConfig(partitions=1, replication_factor=1),
        extra_config={"message.max.bytes": 4096},
    )
    opened.append(publisher)
    delivered: list[int] = []
    on_delivered = partial(delivered.append, 1)
    with pytest.raises(DeliveryError) as raised:  # at once on the produce_batch path
        publisher.publish_records(topic, [(b"a", b"first"), (b"b", b"x" * 8192)], on_delivered)
        publisher.publish_records(topic, [(b"c", b"after")], on_delivered)
        publisher.flush(30)
    assert raised.value.topic == topic and raised.value.code == "MSG_SIZE_TOO_LARGE"
    with pytest.raises(DeliveryError):
        publisher.publish(topic, b"d", b"later", on_delivered)
    probe = KafkaPublisher(kafka, TopicCreationConfig(partitions=1, replication_factor=1))
    opened.append(probe)
    probe.publish(topic, b"z", b"probe", lambda: None)
    assert probe.flush(30) == 0
    got = _consume(local_stack.bootstrap_servers, topic, 2)
    assert [v for _, _, v in got] == [b"first", b"probe"]


@pytest.mark.skipif(not _native_expected(), reason="PGBRIDGE_NATIVE=0 turns the C module off")
def test_publisher_packed_records_land_where_and_as_their_tuples_would(
    local_stack: StackInfo, kafka: KafkaConfig, opened: list[KafkaPublisher]
) -> None:
    # The snapshot's packed batches (one buffer, no object per record) over 3 partitions in
    # several produce calls: every record once, where the Java partitioner puts it, in its
    # partition's order; on a keyless topic all in partition 0, in order.
    publisher = KafkaPublisher(kafka, TopicCreationConfig(partitions=3, replication_factor=1))
    opened.append(publisher)
    for keyed in (True, False):
        topic = _topic("packed" if keyed else "packed-keyless")
        records = [(f"k{i}".encode() if keyed else None, f"v{i}".encode()) for i in range(700)]
        # 650 of the 700: the rest is not published
        publisher.publish_packed(topic, pack_records(records), 650, lambda: None)
        assert publisher.native_partitions(topic) == 3
        assert publisher.flush(30) == 0
        got = _consume(local_stack.bootstrap_servers, topic, 650)
        per_partition: dict[int, list[tuple[bytes | None, bytes | None]]] = defaultdict(list)
        for partition, got_key, got_value in got:
            per_partition[partition].append((got_key, got_value))
        expected: dict[int, list[tuple[bytes | None, bytes | None]]] = defaultdict(list)
        for key, value in records[:650]:
            expected[0 if key is None else java_partition(key, 3)].append((key, value))
        assert per_partition == expected
