"""Debezium's Kafka signal channel: records of ``signal.kafka.topic`` whose key is the topic
prefix and whose value is ``{"type": …, "data": {…}}``, read between messages by the pipeline's
thread (``signal.enabled.channels`` includes ``kafka``).

A record is written into the signal table (:meth:`IncrementalSnapshotter.forward`, id
``kafka-<partition>-<offset>``) before its offset is committed, and acted on when the stream
brings that row back: its effect is as durable as a signal-table signal's, and a record read
again after a crash finds its row there and is not inserted twice. The consumer group is
``pgbridge-signals-<slot>``; a new group starts at the topic's beginning (a signal sent before
the first start is not lost).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import psycopg
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bridge.config import BridgeConfig
from bridge.signals import Signal, SignalError, parse_signal
from bridge.sink.kafka_client import admin_config

logger = logging.getLogger(__name__)

__all__ = ["KafkaSignals", "signal_from_record"]

#: How often the topic is polled (the pipeline's tick is every few milliseconds).
_POLL_INTERVAL_S = 0.5


def signal_from_record(prefix: str, message: Message) -> Signal | None:
    """The signal a record carries; ``None`` (logged) for another connector's or a bad one."""
    key = message.key()
    if key is None or key.decode(errors="replace") != prefix:
        return None  # Debezium's rule: signals for another connector share the topic
    signal_id = f"kafka-{message.partition()}-{message.offset()}"
    try:
        value = json.loads(message.value() or b"")
        if not isinstance(value, dict) or not isinstance(value.get("type"), str):
            raise SignalError(signal_id, 'expected {"type": …, "data": {…}}')
        data = value.get("data")
        return parse_signal(signal_id, value["type"], None if data is None else json.dumps(data))
    except (ValueError, SignalError) as exc:
        logger.warning("Kafka signal %s ignored: %s", signal_id, exc)
        return None


def _ensure_topic(conf: dict[str, Any], topic: str) -> None:
    """Create the signal topic when missing: one partition (signals keep their order), the
    broker's default replication."""
    admin = AdminClient(conf)
    future = admin.create_topics([NewTopic(topic, num_partitions=1)], request_timeout=30)[topic]
    try:
        future.result(timeout=60)
        logger.info("created Kafka signal topic %s", topic)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


class KafkaSignals:
    def __init__(self, config: BridgeConfig, on_signal: Callable[[Signal], None]) -> None:
        conf: dict[str, Any] = admin_config(config.kafka)
        conf.update(
            {
                "group.id": f"pgbridge-signals-{config.replication.slot_name}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        self.topic = config.signal.kafka_topic
        self.prefix = config.topic_prefix
        self._on_signal = on_signal
        if config.topic_creation.enable:
            _ensure_topic(admin_config(config.kafka), self.topic)
        self._consumer = Consumer(conf)
        self._consumer.subscribe([self.topic])
        self._next_poll = 0.0
        self._reported: set[int] = set()  # error codes already logged (a missing topic, say)

    def poll(self) -> None:
        now = time.monotonic()
        if now < self._next_poll:
            return
        self._next_poll = now + _POLL_INTERVAL_S
        for message in self._consumer.consume(num_messages=100, timeout=0):
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF and error.code() not in self._reported:
                    self._reported.add(error.code())
                    logger.warning("Kafka signal topic %s: %s", self.topic, error)
                continue
            signal = signal_from_record(self.prefix, message)
            if signal is not None:
                try:
                    self._on_signal(signal)
                except psycopg.Error as exc:
                    # Read again at the next poll, not lost: its offset is not committed.
                    self._consumer.seek(
                        TopicPartition(self.topic, message.partition() or 0, message.offset() or 0)
                    )
                    logger.warning(
                        "Kafka signal %s: could not write it to the signal table (%s); "
                        "trying again",
                        signal.id,
                        str(exc).strip(),
                    )
                    return
            self._consumer.commit(message=message, asynchronous=False)

    def close(self) -> None:
        self._consumer.close()
