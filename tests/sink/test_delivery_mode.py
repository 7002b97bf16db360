"""exactly.once.support = requested (the default): exactly once where the cluster offers Kafka
transactions, at-least-once with a warning where it definitely refuses them, and an error
(retried at start) where it does not answer. The real refusal, by a broker, is in
tests/integration/test_exactly_once.py."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from bridge.config import BridgeConfig, load_config
from bridge.sink import delivery_mode
from bridge.sink.delivery_mode import probe_transactions, resolve_delivery
from bridge.sink.transactions import KafkaTransactionError

REQUIRED = {
    "database.hostname": "db",
    "database.user": "u",
    "database.dbname": "d",
    "topic.prefix": "shop",
    "kafka.bootstrap.servers": "k:9092",
    "schema.registry.url": "http://r",
}


def _config(**keys: str) -> BridgeConfig:
    return load_config(None, {}, {**REQUIRED, **keys})


class Producer:
    """confluent-kafka's Producer as far as the probe uses it; ``error``: init_transactions'."""

    def __init__(self, error: KafkaError | None = None) -> None:
        self.error = error
        self.conf: dict[str, Any] = {}
        self.started = False

    def __call__(self, conf: dict[str, Any]) -> Producer:
        self.conf = conf
        return self

    def init_transactions(self, timeout: float) -> None:
        if self.error is not None:
            raise KafkaException(self.error)
        self.started = True

    def flush(self, timeout: float) -> int:
        if self.error is not None:  # as a producer the refusal made fatal: raises it again
            raise KafkaException(self.error)
        return 0


@pytest.fixture
def topics(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The offsets topics the probe ensured (Kafka's admin call, recorded)."""
    ensured: list[str] = []
    monkeypatch.setattr(
        delivery_mode, "ensure_offsets_topic", lambda client, topic, rf: ensured.append(topic)
    )
    return ensured


def test_the_default_is_requested_and_resolves_to_exactly_once_where_the_cluster_allows(
    topics: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    config = _config()
    assert config.kafka.exactly_once_support == "requested"
    producer = Producer()

    def probe(c: BridgeConfig) -> str | None:
        return probe_transactions(c, {"bootstrap.servers": "k:9092"}, 600_000, producer)

    with caplog.at_level(logging.INFO):
        resolved = resolve_delivery(config, probe)
    assert resolved.kafka.exactly_once and resolved.kafka.exactly_once_support == "required"
    assert topics == ["shop-offsets"] and producer.started
    # The slot's own transactional.id, with the longest timeout the bridge asks for.
    assert producer.conf["transactional.id"] == "pgbridge-pgbridge"
    assert producer.conf["transaction.timeout.ms"] == 600_000
    assert "the Kafka cluster offers transactions" in caplog.text


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "an ACL on TransactionalId"),
        (KafkaError.INVALID_TRANSACTION_TIMEOUT, "transaction.max.timeout.ms"),
        (KafkaError._TIMED_OUT, "transaction.state.log.replication.factor"),
    ],
)
def test_a_cluster_refusing_transactions_gets_at_least_once_with_a_warning_saying_why(
    topics: list[str], caplog: pytest.LogCaptureFixture, code: int, reason: str
) -> None:
    producer = Producer(KafkaError(code, "refused"))

    def probe(c: BridgeConfig) -> str | None:
        return probe_transactions(c, {"bootstrap.servers": "k:9092"}, 600_000, producer)

    resolved = resolve_delivery(_config(), probe)
    assert not resolved.kafka.exactly_once and resolved.kafka.exactly_once_support == "disabled"
    assert reason in caplog.text and "this run delivers at least once" in caplog.text
    assert "exactly.once.support = disabled" in caplog.text  # how to silence it


def test_an_offsets_topic_the_principal_may_not_create_is_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(client: Any, topic: str, rf: int) -> None:
        raise KafkaTransactionError(
            f"creating offsets topic {topic}: …", "TOPIC_AUTHORIZATION_FAILED"
        )

    monkeypatch.setattr(delivery_mode, "ensure_offsets_topic", refuse)
    producer = Producer()
    refused = probe_transactions(_config(), {}, 600_000, producer)
    assert refused is not None and "may not create or write the offsets topic" in refused
    assert not producer.started  # no producer for a cluster that already said no


def test_a_cluster_that_does_not_answer_is_an_error_not_a_refusal(
    topics: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker down at start must not turn exactly once off for the whole run: the error
    goes to the start's retries (bridge.runner._probe_transactions)."""
    producer = Producer(KafkaError(KafkaError._TRANSPORT, "connection refused"))
    with pytest.raises(KafkaTransactionError, match="connection refused"):
        probe_transactions(_config(), {}, 600_000, producer)

    def unreachable(client: Any, topic: str, rf: int) -> None:
        raise KafkaTransactionError("creating offsets topic shop-offsets: timed out", None)

    monkeypatch.setattr(delivery_mode, "ensure_offsets_topic", unreachable)
    with pytest.raises(KafkaTransactionError, match="timed out"):
        probe_transactions(_config(), {}, 600_000, Producer())


@pytest.mark.parametrize("mode", ["required", "disabled"])
def test_an_explicit_choice_is_kept_without_asking_the_cluster(mode: str) -> None:
    def probe(c: BridgeConfig) -> str | None:
        raise AssertionError("not asked")

    config = _config(**{"exactly.once.support": mode})
    assert resolve_delivery(config, probe) is config
