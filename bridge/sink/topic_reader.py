"""Reading a topic as it is now: every record up to each partition's end, partition by
partition, in offset order. For bounded reads (Kafka Connect's offsets topic at a takeover, the
tests' checks of what a topic holds), not for following a topic."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from bridge.errors import PgBridgeError

__all__ = ["TopicReadError", "read_topic"]


class TopicReadError(PgBridgeError):
    """The topic could not be read to its end: it does not exist, a record is an error, or
    the broker stopped answering before the end."""

    def __init__(self, topic: str, reason: str) -> None:
        super().__init__(f"topic {topic}: {reason}")
        self.topic = topic
        self.reason = reason


def read_topic(
    bootstrap_servers: str,
    topic: str,
    client: Mapping[str, str] | None = None,
    *,
    timeout: float = 10.0,
) -> Iterator[Any]:
    """Every record of ``topic`` (confluent_kafka ``Message``s) up to the partitions' ends as
    they were when each partition's read began. ``client``: extra librdkafka settings (TLS,
    SASL). :class:`TopicReadError` when the topic is missing or a partition cannot be read to
    its end within ``timeout`` seconds of silence."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"pgbridge-read-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            # The broker answers a connection's requests in order: a fetch parked at the end
            # of one partition (fetch.wait.max.ms, 500 ms) held up the next partition's offset
            # query for that long (measured: Connect's 25-partition offsets topic ~12 s, a
            # 4-partition topic 3.3 s -> 0.09 s). The reads are bounded by known offsets, and
            # a partition read to its end is unassigned at once: an immediate answer at the
            # end of a partition (fetched again and again) is never waited on for long.
            "fetch.wait.max.ms": 0,
            **(client or {}),
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if metadata is None or metadata.error is not None:
            raise TopicReadError(topic, "no such topic")
        for partition in sorted(metadata.partitions):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout
            )
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, partition, low)])
            # Offsets, not a count: a transactional topic's commit markers and aborted records
            # take offsets a (read_committed) reader is never given.
            position = low
            silent_since = time.monotonic()
            while position < high:
                # Short waits: the markers ending a transactional topic are never returned, so
                # the end shows in the consumer's position, not as a record.
                batch = consumer.consume(min(10_000, high - position), 0.1)
                if not batch:
                    at = consumer.position([TopicPartition(topic, partition)])[0].offset
                    if at >= high:
                        break  # only markers or aborted records were left
                    if time.monotonic() - silent_since > timeout:
                        raise TopicReadError(
                            topic, f"partition {partition}: read to offset {position} of {high}"
                        )
                    continue
                silent_since = time.monotonic()
                taken: list[Any] = []
                failed: Any = None
                for message in batch:
                    if message.error() is not None:
                        failed = message
                        break
                    position = max(position, (message.offset() or 0) + 1)
                    taken.append(message)
                if failed is None and position >= high:
                    # Stop fetching before the caller works on the last records: at the
                    # partition's end the consumer would fetch again and again meanwhile.
                    consumer.unassign()
                yield from taken
                if failed is not None:
                    raise TopicReadError(topic, str(failed.error()))
    except KafkaException as exc:
        raise TopicReadError(topic, str(exc)) from None
    finally:
        consumer.close()
