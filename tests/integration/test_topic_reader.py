"""Reading a topic to its end (bridge.sink.topic_reader) on the real broker: what the Debezium
takeover reads Kafka Connect's offsets with, and the tests check topics with."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from bridge.devstack.stack import StackInfo
from bridge.sink.topic_reader import TopicReadError, read_topic
from tests.spark.envelopes import create_topics

pytestmark = pytest.mark.integration


def test_every_record_of_every_partition_in_offset_order_tombstones_included(
    local_stack: StackInfo,
) -> None:
    topic = f"reader-{uuid.uuid4().hex[:8]}"
    create_topics(local_stack.bootstrap_servers, [topic], partitions=3)
    producer = Producer({"bootstrap.servers": local_stack.bootstrap_servers})
    sent: dict[int, list[tuple[bytes, bytes | None]]] = {0: [], 1: [], 2: []}
    for i in range(30):
        partition, value = i % 3, None if i % 7 == 0 else f"v{i}".encode()
        producer.produce(topic, key=f"k{i}".encode(), value=value, partition=partition)
        sent[partition].append((f"k{i}".encode(), value))
    producer.produce(topic, key=b"only-in-0", value=b"x", partition=0)
    sent[0].append((b"only-in-0", b"x"))
    assert producer.flush(10) == 0
    records = read_topic(local_stack.bootstrap_servers, topic)
    got = [(m.partition(), m.key(), m.value()) for m in records]
    assert got == [(p, k, v) for p in (0, 1, 2) for k, v in sent[p]]


def test_a_missing_topic_is_a_typed_error_naming_it(local_stack: StackInfo) -> None:
    topic = f"reader-missing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(TopicReadError, match=f"topic {topic}: no such topic"):
        list(read_topic(local_stack.bootstrap_servers, topic))
