"""The errors of the Kafka side of the bridge, and the codes no wait can fix."""

from __future__ import annotations

from confluent_kafka import KafkaError, Message

from bridge.errors import PgBridgeError

__all__ = [
    "PERMANENT_TOPIC_CODES",
    "PROTOCOL_MISMATCH",
    "DeliveryError",
    "PublisherError",
    "TopicCreationError",
    "proven_delivery",
]


class PublisherError(PgBridgeError):
    """Base of the errors raised by the Kafka side of the bridge."""


class DeliveryError(PublisherError):
    """A record could not be delivered to Kafka; the bridge must stop.

    ``topic`` and ``partition`` say where it was going (``partition`` is ``None`` when the
    record was refused before a partition was chosen, e.g. too large for the producer),
    ``code`` is the Kafka error's name (``MSG_SIZE_TOO_LARGE``, ``_MSG_TIMED_OUT``, …) and
    ``reason`` its text. ``retriable`` and ``fatal`` are librdkafka's classification;
    a fatal error means the producer itself is unusable.
    """

    def __init__(
        self,
        topic: str,
        partition: int | None,
        code: str,
        reason: str,
        *,
        retriable: bool = False,
        fatal: bool = False,
    ) -> None:
        where = f"{topic} [partition {partition}]" if partition is not None else topic
        super().__init__(f"delivery to {where} failed: {code}: {reason}")
        self.topic = topic
        self.partition = partition
        self.code = code
        self.reason = reason
        self.retriable = retriable
        self.fatal = fatal

    @classmethod
    def from_kafka(cls, topic: str, partition: int | None, error: KafkaError) -> DeliveryError:
        return cls(
            topic,
            partition,
            error.name(),
            error.str(),
            retriable=error.retriable(),
            fatal=error.fatal(),
        )


class TopicCreationError(PublisherError):
    """A missing topic could not be created (or its existence could not be checked)."""

    def __init__(self, topic: str, code: str, reason: str) -> None:
        super().__init__(f"creating topic {topic} failed: {code}: {reason}")
        self.topic = topic
        self.code = code
        self.reason = reason


#: Topic errors that waiting cannot fix (bridge.restarts keeps the list for deliveries too).
PERMANENT_TOPIC_CODES = frozenset(
    {
        "TOPIC_AUTHORIZATION_FAILED",
        "CLUSTER_AUTHORIZATION_FAILED",
        "SASL_AUTHENTICATION_FAILED",
        "_AUTHENTICATION",
        "_SSL",
        "POLICY_VIOLATION",
        "INVALID_CONFIG",
        "INVALID_REPLICATION_FACTOR",
        "INVALID_PARTITIONS",
        "INVALID_TOPIC_EXCEPTION",
        "UNSUPPORTED_VERSION",
        "_INVALID_ARG",
        "SECURITY_PROTOCOL_MISMATCH",  # bridge's own code: see protocol_mismatch()
    }
)
PROTOCOL_MISMATCH = "SECURITY_PROTOCOL_MISMATCH"


#: A success report without an offset. With acks=all every record the broker wrote comes back
#: with its offset; librdkafka also reports records "delivered" that a later request's success
#: only implied (an idempotent producer's implicit acknowledgement). That inference is wrong
#: where the broker held no sequence state of the producer for the partition (its first write
#: there: a new topic, a new producer after a restart, a new leader): the request after a
#: failed one is accepted at any sequence and the failed one's records were never written
#: (seen in the fault cycle: a new topic's first record missing, the second at offset 0;
#: confluent-kafka-go#921). Treated as a retriable failure: the pipeline streams again from the
#: slot's confirmed position, so the worst case is a resend, never a loss.
UNPROVEN_DELIVERY = KafkaError(
    KafkaError._FAIL,
    "reported delivered without an offset (librdkafka's implicit acknowledgement after a "
    "failed request): not proven written",
    retriable=True,
)


def proven_delivery(err: KafkaError | None, msg: Message) -> KafkaError | None:
    """A delivery report's error, or :data:`UNPROVEN_DELIVERY` for a success that carries no
    offset (a record the broker may never have written)."""
    if err is not None:
        return err
    offset = msg.offset()
    return UNPROVEN_DELIVERY if offset is None or offset < 0 else None
