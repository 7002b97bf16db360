"""Topic administration for the publisher: create a missing change topic with pgbridge's
settings, and learn partition counts for the native batches (:mod:`bridge.sink.native_batches`).

Existence is checked with DescribeTopics, which unlike a metadata request from the producer
never triggers the broker's auto-creation (with the broker's defaults instead of ours). An
existing topic is used as it is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bridge.config import TopicCreationConfig
from bridge.retry import RetryPolicy
from bridge.sink.kafka_errors import PERMANENT_TOPIC_CODES, TopicCreationError

__all__ = ["TopicAdmin", "admin_result"]

logger = logging.getLogger(__name__)

_ADMIN_TIMEOUT_S = 30.0


def _transient_topic_error(exc: Exception) -> bool:
    return isinstance(exc, TopicCreationError) and exc.code not in PERMANENT_TOPIC_CODES


def admin_result(
    admin: AdminClient,
    future: Any,
    topic: str,
    refused: Callable[[], tuple[str, str] | None],
    timeout_s: float,
) -> Any:
    """``future.result()``, serving the admin client's error callbacks meanwhile: a refused
    login or certificate (``refused()``) ends the wait at once, as a permanent
    TopicCreationError, instead of a timeout that would be retried."""
    deadline = time.monotonic() + timeout_s
    while not future.done():
        admin.poll(0.1)
        refusal = refused()
        if refusal is not None:
            raise TopicCreationError(topic, *refusal)
        if time.monotonic() > deadline:
            raise FutureTimeoutError()
    return future.result(timeout=0)


class TopicAdmin:
    """Ensures topics exist, once per topic, through one admin client made on first use.

    ``make_client`` builds that client (the publisher's settings, error callback and log);
    ``refused`` says the last refusal any of the publisher's clients heard from the brokers (a
    failed login, an untrusted certificate), which ends a wait at once instead of a timeout;
    ``learn_partitions``: keep the partition count of each topic (the native batches need it).
    """

    def __init__(
        self,
        topics: TopicCreationConfig,
        make_client: Callable[[], AdminClient],
        refused: Callable[[], tuple[str, str] | None],
        *,
        learn_partitions: bool,
    ) -> None:
        self._topics = topics
        self._make_client = make_client
        self._refused = refused
        self._learn = learn_partitions
        self._admin: AdminClient | None = None
        self._known: set[str] = set()
        #: Partition counts learnt when a topic was described or created.
        self.partition_counts: dict[str, int] = {}

    def ensure_topic(
        self, topic: str, retry: RetryPolicy, on_wait: Callable[[], None] | None
    ) -> None:
        """Create ``topic`` if it does not exist, waiting under ``retry`` for brokers that do
        not answer yet (``on_wait`` runs between attempts)."""
        if topic in self._known:
            return
        if not self._topics.enable:
            # Not ours to create: the broker says if it is missing (and without a description
            # the partition count is unknown: these records go by produce_batch).
            self._known.add(topic)
            return
        admin = self._client()

        def ensure() -> None:
            partitions = self._topic_partitions(admin, topic)
            if partitions is None:
                self._create_topic(admin, topic)
                if self._learn:
                    self._learn_partitions(admin, topic)
            elif self._learn:
                self.partition_counts[topic] = partitions

        # A broker that is down, or just started and without a controller yet, answers in a
        # while: wait under the one retry policy (bridge.retry) rather than exit.
        retry.run(
            "kafka", f"creating topic {topic}", ensure, _transient_topic_error, on_wait=on_wait
        )
        self._known.add(topic)

    def _client(self) -> AdminClient:
        if self._admin is None:
            self._admin = self._make_client()
        return self._admin

    def _result(self, admin: AdminClient, future: Any, topic: str) -> Any:
        return admin_result(admin, future, topic, self._refused, _ADMIN_TIMEOUT_S * 2)

    def _learn_partitions(self, admin: AdminClient, topic: str) -> None:
        """The partition count for the native batches, from a description; none on any
        failure (that topic's records then go by produce_batch)."""
        try:
            partitions = self._topic_partitions(admin, topic, warn=False)
        except TopicCreationError as exc:
            logger.info("topic %s: records go by produce_batch (%s)", topic, exc)
            return
        if partitions is not None:
            self.partition_counts[topic] = partitions

    def _topic_partitions(self, admin: AdminClient, topic: str, *, warn: bool = True) -> int | None:
        """The topic's partition count, or None if it does not exist."""
        future = admin.describe_topics(TopicCollection([topic]), request_timeout=_ADMIN_TIMEOUT_S)[
            topic
        ]
        try:
            description = self._result(admin, future, topic)
        except FutureTimeoutError:
            raise TopicCreationError(topic, "_TIMED_OUT", "no answer from the brokers") from None
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                return None
            raise TopicCreationError(topic, error.name(), error.str()) from None
        wanted = self._topics.partitions
        if warn and wanted != -1 and len(description.partitions) != wanted:
            # Not changed: repartitioning moves keys, which only an operator may decide.
            logger.warning(
                "topic %s exists with %d partitions, not the configured %d; using it as it is",
                topic,
                len(description.partitions),
                wanted,
            )
        return len(description.partitions)

    def _create_topic(self, admin: AdminClient, topic: str) -> None:
        settings = self._topics
        new_topic = NewTopic(
            topic,
            num_partitions=settings.partitions,
            replication_factor=settings.replication_factor,
            config=settings.topic_config(),
        )
        future = admin.create_topics(
            [new_topic], operation_timeout=_ADMIN_TIMEOUT_S, request_timeout=_ADMIN_TIMEOUT_S
        )[topic]
        try:
            self._result(admin, future, topic)
        except FutureTimeoutError:
            raise TopicCreationError(topic, "_TIMED_OUT", "no answer from the brokers") from None
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:  # another bridge was quicker
                return
            raise TopicCreationError(topic, error.name(), error.str()) from None
        logger.info(
            "created topic %s (partitions %s, replication factor %s, %s)",
            topic,
            settings.partitions,
            settings.replication_factor,
            settings.topic_config(),
        )
