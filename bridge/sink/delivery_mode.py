"""Which delivery a run gets: ``exactly.once.support`` = ``requested`` (the default),
``required`` or ``disabled``.

``requested`` is exactly once wherever the Kafka cluster offers this bridge transactions, and
at-least-once, with a warning and ``pgbridge_exactly_once 0``, where it definitely refuses
them: the principal lacks the ``TransactionalId`` (or offsets topic) ACL, the brokers are too
old or cap transactions below the bridge's timeout, or no transaction coordinator answers (a
transaction state log the cluster cannot replicate). Measured, exactly once costs nothing in
throughput (``bench/pipeline_bench.py``), so a cluster that allows it gets it; one that
does not keeps running as before, instead of a bridge that stops at start after an upgrade
(``required`` stops there, with the refusal as a typed error).

The decision is taken once per process start, by the probe below, before any record is
sent: a run never changes delivery midway. Switching is safe either way: an at-least-once
run after exactly-once ones leaves the offsets topic behind the slot (the start position is
the later of the two), and an exactly-once run after at-least-once ones starts from the
slot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from bridge.config import BridgeConfig
from bridge.sink.transactions import KafkaTransactionError, ensure_offsets_topic

__all__ = ["PROBE_TIMEOUT_S", "REFUSALS", "probe_transactions", "resolve_delivery"]

logger = logging.getLogger(__name__)

#: How long the probe waits for a transaction coordinator (the cluster answered its admin
#: request already: silence this long is a coordinator that cannot start).
PROBE_TIMEOUT_S = 30.0

#: Kafka's answers that say this cluster will not give this bridge transactions (the reason
#: shown for each). Anything else (a broker unreachable, a timeout of the admin request) is
#: not an answer: it is raised, and the start is retried as any start is.
REFUSALS: dict[str, str] = {
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": "the principal may not use its transactional.id "
    "(an ACL on TransactionalId is missing)",
    "CLUSTER_AUTHORIZATION_FAILED": "the principal may not use idempotent or transactional "
    "producers (a cluster ACL is missing)",
    "TOPIC_AUTHORIZATION_FAILED": "the principal may not create or write the offsets topic",
    "INVALID_REPLICATION_FACTOR": "the offsets topic cannot have the replication factor asked",
    "POLICY_VIOLATION": "the cluster's topic policy refuses the offsets topic",
    "INVALID_TRANSACTION_TIMEOUT": "the brokers' transaction.max.timeout.ms is below the "
    "bridge's transaction timeout",
    "UNSUPPORTED_VERSION": "the brokers do not support transactions",
    "_UNSUPPORTED_FEATURE": "the brokers do not support transactions",
    "_TIMED_OUT": "no transaction coordinator answered (can the brokers replicate their "
    "transaction state log: transaction.state.log.replication.factor?)",
}


class _ProbeLog:
    """The probe producer's librdkafka log, at DEBUG."""

    def log(self, level: int, msg: str, *args: Any) -> None:
        logger.debug("transactions probe: " + msg, *args)


def _refusal(code: str | None, detail: str) -> str | None:
    reason = REFUSALS.get(code or "")
    return None if reason is None else f"{reason}: {detail}"


def probe_transactions(
    config: BridgeConfig,
    client: dict[str, str],
    transaction_timeout_ms: int,
    make_producer: Callable[[dict[str, Any]], Any] | None = None,
) -> str | None:
    """Why this cluster refuses the bridge exactly once (``None``: it does not): the offsets
    topic created (or there), and a producer with the slot's transactional.id started. The
    start fences an older producer of that id, as an exactly-once start does anyway."""
    kafka = config.kafka
    replication = config.topic_creation.replication_factor
    try:
        ensure_offsets_topic(client, kafka.offsets_topic, replication if replication > 0 else -1)
    except KafkaTransactionError as exc:
        refused = _refusal(exc.kafka_code, str(exc))
        if refused is None:
            raise
        return refused
    if make_producer is None:
        from confluent_kafka import Producer

        make_producer = Producer
    producer = make_producer(
        {
            **client,
            "transactional.id": kafka.transactional_id,
            "transaction.timeout.ms": transaction_timeout_ms,
            # A refusal makes the producer's error fatal: librdkafka's lines about it would
            # read as the bridge failing, where the warning below says what happens.
            "logger": _ProbeLog(),
            "error_cb": lambda err: logger.debug("transactions probe: %s", err),
        }
    )
    try:
        producer.init_transactions(PROBE_TIMEOUT_S)
    except KafkaException as exc:
        error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        name = error.name() if error is not None else None
        refused = _refusal(name, error.str() if error is not None else str(exc))
        if refused is None:
            raise KafkaTransactionError(f"starting a transactional producer: {exc}") from None
        return refused
    # Nothing was produced: the producer is dropped (a flush of a producer the refusal made
    # fatal would raise that error again, instead of the refusal's answer).
    return None


def resolve_delivery(
    config: BridgeConfig, probe: Callable[[BridgeConfig], str | None]
) -> BridgeConfig:
    """``config`` with ``exactly.once.support`` resolved to ``required`` or ``disabled`` (a
    ``requested`` one by ``probe``, which returns why the cluster refuses, or ``None``)."""
    if config.kafka.exactly_once_support != "requested":
        return config
    refused = probe(config)
    if refused is None:
        logger.info(
            "exactly once: the Kafka cluster offers transactions (exactly.once.support = "
            "requested); read_committed consumers see each change once"
        )
        resolved = "required"
    else:
        logger.warning(
            "exactly once requested, but %s; this run delivers at least once (consumers "
            "dedupe by (commit_lsn, seq)). Grant it, or set exactly.once.support = disabled "
            "to skip this check, or required to stop instead",
            refused,
        )
        resolved = "disabled"
    return replace(config, kafka=replace(config.kafka, exactly_once_support=resolved))
