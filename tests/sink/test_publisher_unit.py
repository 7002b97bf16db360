"""Publisher behaviour that needs no broker: settings, local refusals, failures without Kafka.

"No broker" here is a closed TCP port, so librdkafka really fails to connect and times the
records out; nothing is mocked.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException

from bridge.config import KafkaConfig, Secret, TopicCreationConfig
from bridge.sink.kafka_client import MISMATCH_REPEATS, ClientLog, producer_config, protocol_mismatch
from bridge.sink.kafka_errors import DeliveryError, PublisherError
from bridge.sink.publisher import KafkaPublisher


def _closed_port() -> int:
    # Bind then close: the port was free a moment ago and nothing listens on it now.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
def no_broker() -> KafkaConfig:
    return KafkaConfig(
        bootstrap_servers=f"127.0.0.1:{_closed_port()}", linger_ms=0, delivery_timeout_ms=1000
    )


@pytest.fixture
def publisher(no_broker: KafkaConfig) -> Iterator[KafkaPublisher]:
    made = KafkaPublisher(no_broker, TopicCreationConfig(enable=False))
    yield made
    # Most tests leave a failure recorded on purpose; close() raises it again.
    with contextlib.suppress(Exception):
        made.close(0)


def test_producer_config_fixes_the_delivery_contract() -> None:
    conf = producer_config(
        KafkaConfig(
            bootstrap_servers="b:9092",
            max_queue_size_in_bytes=64 * 1024 * 1024,
            producer_overrides=(
                ("security.protocol", "SASL_SSL"),
                ("sasl.password", Secret("s3cret")),
            ),
        )
    )
    assert conf["acks"] == "all"
    assert conf["enable.idempotence"] is True
    assert conf["partitioner"] == "murmur2_random"
    assert conf["compression.type"] == "lz4"
    assert conf["linger.ms"] == 5
    assert conf["queue.buffering.max.kbytes"] == 64 * 1024
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.password"] == "s3cret"  # revealed only for librdkafka


def test_delivery_error_names_topic_partition_and_kafka_error() -> None:
    error = DeliveryError("shop.public.orders", 2, "MSG_SIZE_TOO_LARGE", "Broker: too large")
    assert str(error) == (
        "delivery to shop.public.orders [partition 2] failed: MSG_SIZE_TOO_LARGE: Broker: too large"
    )
    unplaced = DeliveryError("t", None, "_MSG_TIMED_OUT", "Local: Message timed out")
    assert str(unplaced) == "delivery to t failed: _MSG_TIMED_OUT: Local: Message timed out"


def test_publisher_raises_delivery_error_when_records_time_out(publisher: KafkaPublisher) -> None:
    delivered: list[int] = []
    failed: list[DeliveryError] = []
    publisher.publish("t1", b"k", b"v", lambda: delivered.append(1), on_failed=failed.append)
    with pytest.raises(DeliveryError) as raised:
        publisher.flush(30)
    assert raised.value.topic == "t1"
    assert raised.value.code == "_MSG_TIMED_OUT"
    assert delivered == [] and failed == [raised.value]
    with pytest.raises(DeliveryError):  # sticky: the next call raises it again
        publisher.poll()


def test_publisher_blocks_on_full_queue_instead_of_dropping(no_broker: KafkaConfig) -> None:
    one_slot = KafkaConfig(
        bootstrap_servers=no_broker.bootstrap_servers,
        linger_ms=0,
        delivery_timeout_ms=1000,
        max_queue_size=1,
    )
    publisher = KafkaPublisher(one_slot, TopicCreationConfig(enable=False))
    failed: list[DeliveryError] = []
    publisher.publish("t1", b"k", b"first", lambda: None, on_failed=failed.append)
    assert publisher.in_flight == 1
    # No room until the first record is resolved; it times out, which stops the bridge.
    with pytest.raises(DeliveryError):
        publisher.publish("t1", b"k", b"second", lambda: None)
    assert len(failed) == 1
    assert publisher.failed_count == 1
    with pytest.raises(DeliveryError):
        publisher.close(0)


def test_publisher_refuses_record_over_the_producer_size_limit(no_broker: KafkaConfig) -> None:
    publisher = KafkaPublisher(
        no_broker, TopicCreationConfig(enable=False), extra_config={"message.max.bytes": 1000}
    )
    with pytest.raises(DeliveryError) as raised:
        publisher.publish("t1", b"k", b"x" * 5000, lambda: None)
    assert (raised.value.topic, raised.value.partition) == ("t1", None)
    assert raised.value.code == "MSG_SIZE_TOO_LARGE"
    with pytest.raises(DeliveryError):  # refused for good: no later record may land
        publisher.publish("t1", b"k", b"small", lambda: None)
    publisher.abandon(0)


def test_publisher_reraises_exception_from_callback_in_poll(publisher: KafkaPublisher) -> None:
    def broken(_: DeliveryError) -> None:
        raise RuntimeError("tracker bug")

    publisher.publish("t1", b"k", b"v", lambda: None, on_failed=broken)
    with pytest.raises(RuntimeError, match="tracker bug"):
        publisher.flush(30)


def test_publisher_refuses_publish_after_close(publisher: KafkaPublisher) -> None:
    assert publisher.close(0) == 0
    with pytest.raises(PublisherError, match="after close"):
        publisher.publish("t1", b"k", b"v", lambda: None)


def _batch(n: int) -> list[dict[str, bytes | None]]:
    return [{"key": b"k%d" % i, "value": b"v%d" % i} for i in range(n)]


def test_publisher_requeues_a_batch_tail_refused_for_a_full_queue_in_order(
    publisher: KafkaPublisher,
) -> None:
    batch = _batch(5)
    for record in batch[3:]:
        record["_error"] = KafkaError(KafkaError._QUEUE_FULL)
    rest = publisher._batch_rest("t1", batch)
    assert rest == [{"key": b"k3", "value": b"v3"}, {"key": b"k4", "value": b"v4"}]


def test_publisher_stops_when_a_batch_refusal_could_reorder_records(
    publisher: KafkaPublisher,
) -> None:
    # Record 1 refused but 2 queued: resending 1 would put it behind 2, so the bridge stops
    # (and restarts from the slot) rather than reorder a key's changes.
    batch = _batch(3)
    batch[1]["_error"] = KafkaError(KafkaError._QUEUE_FULL)
    with pytest.raises(DeliveryError) as raised:
        publisher._batch_rest("t1", batch)
    assert raised.value.code == "_QUEUE_FULL"


def test_publisher_hands_batched_records_to_the_client_on_poll(
    publisher: KafkaPublisher,
) -> None:
    publisher.publish("t1", b"k", b"v", lambda: None)
    assert publisher.in_flight == 1  # batched, not yet with librdkafka, but counted
    assert len(publisher._pending) == 1
    publisher.poll(0)
    assert publisher._pending == []
    assert publisher.in_flight == 1  # now queued in librdkafka (no broker: never delivered)


# librdkafka 2.x's lines for the three security.protocol mismatches, as logged against the dev
# stack's brokers (a PLAINTEXT listener, a SASL_SSL listener).
_TLS_TO_PLAINTEXT = (
    "FAIL [rdkafka#producer-1] [thrd:ssl://127.0.0.1:52233/bootstrap]: ssl://127.0.0.1:52233/"
    "bootstrap: SSL handshake failed: Disconnected: SSL connection closed by peer: connecting to "
    "a PLAINTEXT broker listener? (after 3ms in state SSL_HANDSHAKE)"
)
_PLAINTEXT_TO_TLS = (
    "FAIL [rdkafka#producer-4] [thrd:127.0.0.1:51797/bootstrap]: 127.0.0.1:51797/bootstrap: "
    "Disconnected: connection closed by peer: receive 0 after POLLIN (after 2ms in state "
    "APIVERSION_QUERY)"
)
_SSL_TO_SASL_SSL = (
    "FAIL [rdkafka#producer-5] [thrd:ssl://127.0.0.1:51797/bootstrap]: ssl://127.0.0.1:51797/"
    "bootstrap: Disconnected: SSL connection closed by peer (after 12ms in state UP)"
)
_BROKER_DOWN = (
    "FAIL [rdkafka#producer-1] [thrd:127.0.0.1:9/bootstrap]: 127.0.0.1:9/bootstrap: Connect to "
    "ipv4#127.0.0.1:9 failed: Connection refused (after 0ms in state CONNECT)"
)


@pytest.mark.parametrize(
    ("protocol", "line", "says"),
    [
        ("SSL", _TLS_TO_PLAINTEXT, "is not TLS"),
        ("SASL_SSL", _TLS_TO_PLAINTEXT, "is not TLS"),
        ("PLAINTEXT", _PLAINTEXT_TO_TLS, "as a TLS listener does"),
        ("SASL_PLAINTEXT", _PLAINTEXT_TO_TLS, "as a TLS listener does"),
        ("SSL", _SSL_TO_SASL_SSL, "as a SASL listener does"),
    ],
)
def test_a_security_protocol_mismatch_is_recognised_with_a_hint(
    protocol: str, line: str, says: str
) -> None:
    hint = protocol_mismatch(protocol, line)
    assert hint is not None and says in hint and protocol in hint


@pytest.mark.parametrize(
    ("protocol", "line"),
    [
        ("PLAINTEXT", _BROKER_DOWN),
        ("SASL_SSL", _BROKER_DOWN),
        ("SSL", _PLAINTEXT_TO_TLS),  # a TLS client never sees a plaintext ApiVersion close
        ("PLAINTEXT", _TLS_TO_PLAINTEXT),
        ("SASL_SSL", _SSL_TO_SASL_SSL),  # a SASL client is refused by name instead
    ],
)
def test_other_connection_failures_are_not_taken_for_a_mismatch(protocol: str, line: str) -> None:
    assert protocol_mismatch(protocol, line) is None


def test_a_mismatch_is_reported_only_when_the_broker_repeats_it() -> None:
    """Once can be a broker going down; MISMATCH_REPEATS times in a row is the protocol. Any
    other failure in between starts the count again."""
    hints: list[str] = []
    log = ClientLog("PLAINTEXT", hints.append)
    for _ in range(MISMATCH_REPEATS - 1):
        log.log(20, "%s [%s] %s", *_PLAINTEXT_TO_TLS.split(" ", 2))
    log.log(20, "%s [%s] %s", *_BROKER_DOWN.split(" ", 2))
    for _ in range(MISMATCH_REPEATS - 1):
        log.log(20, "%s [%s] %s", *_PLAINTEXT_TO_TLS.split(" ", 2))
    assert hints == []
    log.log(20, "%s [%s] %s", *_PLAINTEXT_TO_TLS.split(" ", 2))
    assert len(hints) == 1 and "TLS listener" in hints[0]


def test_repeats_librdkafka_suppressed_count_toward_a_mismatch() -> None:
    """librdkafka logs a client's connection failure once, then holds identical ones back for
    30 s and says how many it held: those count, so a mismatch is not reported 30 s late."""
    hints: list[str] = []
    log = ClientLog("PLAINTEXT", hints.append)
    log.log(20, "%s [%s] %s", *_PLAINTEXT_TO_TLS.split(" ", 2))
    assert hints == []
    suppressed = _PLAINTEXT_TO_TLS.replace(
        "APIVERSION_QUERY)", f"APIVERSION_QUERY, {MISMATCH_REPEATS} identical error(s) suppressed)"
    )
    assert suppressed != _PLAINTEXT_TO_TLS
    log.log(20, "%s [%s] %s", *suppressed.split(" ", 2))
    assert len(hints) == 1


def test_expected_librdkafka_warnings_are_debug_lines(caplog: pytest.LogCaptureFixture) -> None:
    """The gapless guarantee pgbridge sets on purpose is not a warning on every start; other
    configuration warnings still are."""
    log = ClientLog("PLAINTEXT", lambda hint: None)
    with caplog.at_level(logging.DEBUG, logger="bridge.sink.librdkafka"):
        log.log(
            logging.WARNING,
            "%s [%s] %s",
            "CONFWARN",
            "pgbridge#producer-1",
            "[thrd:app]: Configuration property enable.gapless.guarantee is experimental: ...",
        )
        log.log(logging.WARNING, "%s", "CONFWARN [thrd:app]: Configuration property x is odd")
    levels = [(r.levelno, r.getMessage()[:40]) for r in caplog.records]
    assert levels == [
        (logging.DEBUG, "CONFWARN [pgbridge#producer-1] [thrd:app"),
        (logging.WARNING, "CONFWARN [thrd:app]: Configuration prope"),
    ]


class _Report:
    """A delivery report's message as librdkafka hands it over: where it went and its offset
    (-1001, RD_KAFKA_OFFSET_INVALID, where the broker never said)."""

    def __init__(self, offset: int) -> None:
        self._offset = offset

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset


def test_a_success_reported_without_an_offset_is_a_retriable_failure(
    publisher: KafkaPublisher,
) -> None:
    """librdkafka's implicit acknowledgement (a later request's success standing for an
    earlier failed one) reports records the broker may never have written: without an offset
    they are not proven delivered, and the pipeline streams them again."""
    delivered: list[None] = []
    failed: list[DeliveryError] = []
    callback = publisher._delivery_callback("t", lambda: delivered.append(None), failed.append)
    callback(None, _Report(41))  # type: ignore[arg-type]
    assert len(delivered) == 1 and failed == []
    callback(None, _Report(-1001))  # type: ignore[arg-type]
    assert len(delivered) == 1
    assert [(f.topic, f.partition, f.code, f.retriable) for f in failed] == [
        ("t", 0, "_FAIL", True)
    ]
    assert "implicit acknowledgement" in str(failed[0])


class _MessageDuringFatalError:
    """A delivery report's message while a fatal error's KafkaException is pending in the same
    poll (the race a fresh-clone CI run met: an idempotent producer's gap-less guarantee
    refusing after a record too large): confluent-kafka's accessors then fail with a
    SystemError chained to the pending exception. Such a race cannot be produced on demand."""

    def partition(self) -> int:
        try:
            raise KafkaException(KafkaError(KafkaError._FATAL, "gap-less guarantee", fatal=True))
        except KafkaException as pending:
            raise SystemError(
                "<method 'partition'> returned a result with an exception set"
            ) from pending

    def topic(self) -> str:
        raise AssertionError("not reached")


def test_a_failure_reported_while_a_fatal_error_is_pending_is_still_the_delivery_error(
    publisher: KafkaPublisher,
) -> None:
    failed: list[DeliveryError] = []
    delivered = publisher._delivery_callback("orders", lambda: None, failed.append)
    delivered(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), _MessageDuringFatalError())  # type: ignore[arg-type]
    assert [f.code for f in failed] == [KafkaError(KafkaError.MSG_SIZE_TOO_LARGE).name()]
    assert failed[0].partition is None
    # The flush that served the report returns NULL with nothing set (the callback took the
    # pending exception out): what it raises is the delivery's failure, not a SystemError.
    raised = publisher._fatal(SystemError("flush returned NULL without setting an exception"))
    assert raised is failed[0]
