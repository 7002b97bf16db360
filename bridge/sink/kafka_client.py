"""librdkafka clients' settings, and their log: lines to Python logging, and the connection
failures that say ``security.protocol`` does not match the broker's listener."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError

from bridge.config import KafkaConfig
from bridge.config.basics import reveal
from bridge.sink.kafka_errors import PROTOCOL_MISMATCH

__all__ = [
    "EXPECTED_WARNINGS",
    "MISMATCH_REPEATS",
    "BrokerRefusals",
    "ClientLog",
    "admin_config",
    "is_refusal",
    "producer_config",
    "protocol_mismatch",
]

_librdkafka_logger = logging.getLogger("bridge.sink.librdkafka")


def is_refusal(err: KafkaError) -> bool:
    """A broker's answer that no wait changes: authentication failed, or the TLS handshake
    failed on the certificate (librdkafka retries these forever by itself)."""
    if err.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
        return True
    return err.code() == KafkaError._SSL and "certificate verify failed" in err.str()


#: How many times in a row a broker must close the connection the same way before the
#: client's security.protocol is taken to be the cause (once can be a broker stopping).
MISMATCH_REPEATS = 3


def protocol_mismatch(protocol: str, line: str) -> str | None:
    """What one of librdkafka's connection-failure lines says about ``security.protocol``
    not matching the broker's listener, or ``None``.

    librdkafka only names the case of TLS spoken to a plaintext listener; the other two are
    recognised by where the broker hung up: a plaintext client's first request (ApiVersion)
    answered by a close is a TLS listener's reaction to bytes that are not a TLS handshake,
    and a TLS connection closed right after the handshake, before any answer, is a SASL
    listener's to a client that never starts the SASL exchange.
    """
    tls = protocol.upper() in ("SSL", "SASL_SSL")
    if tls and "connecting to a PLAINTEXT broker listener" in line:
        return (
            f"kafka.security.protocol is {protocol} but the broker's listener is not TLS "
            "(PLAINTEXT or SASL_PLAINTEXT?)"
        )
    if not tls and "closed by peer" in line and "in state APIVERSION_QUERY" in line:
        return (
            f"kafka.security.protocol is {protocol} but the broker closes the connection at the "
            "first request, as a TLS listener does (SSL or SASL_SSL?)"
        )
    if protocol.upper() == "SSL" and "SSL connection closed by peer" in line and "state UP" in line:
        return (
            "kafka.security.protocol is SSL but the broker closes the connection after the TLS "
            "handshake, as a SASL listener does (SASL_SSL, with kafka.sasl.mechanism?)"
        )
    return None


#: librdkafka's warnings about settings pgbridge makes on purpose (bridge.sink.native_batches
#: explains why the gapless guarantee is on): logged at DEBUG, not on every start.
EXPECTED_WARNINGS: tuple[str, ...] = (
    "Configuration property enable.gapless.guarantee is experimental",
)


_SUPPRESSED = re.compile(r"(\d+) identical error\(s\) suppressed")


class ClientLog:
    """The ``logger`` of a librdkafka client: its lines go to Python logging, and connection
    failures that say ``security.protocol`` does not match the broker are reported (after
    :data:`MISMATCH_REPEATS` in a row) to ``on_mismatch``, since librdkafka itself retries them
    forever and tells its error callback no more than "all brokers are down"."""

    def __init__(self, protocol: str, on_mismatch: Callable[[str], None]) -> None:
        self._protocol = protocol
        self._on_mismatch = on_mismatch
        self._repeats = 0

    def log(self, level: int, msg: str, *args: Any) -> None:
        line = msg % args if args else msg
        if any(expected in line for expected in EXPECTED_WARNINGS):
            level = min(level, logging.DEBUG)
        _librdkafka_logger.log(level, "%s", line)
        if " FAIL " not in f" {line} " and not line.startswith("FAIL"):
            return
        hint = protocol_mismatch(self._protocol, line)
        suppressed = _SUPPRESSED.search(line)  # librdkafka's count of the repeats it held back
        self._repeats = (
            self._repeats + 1 + (int(suppressed.group(1)) if suppressed else 0)
            if hint is not None
            else 0
        )
        if hint is not None and self._repeats >= MISMATCH_REPEATS:
            self._on_mismatch(hint)


class BrokerRefusals:
    """What the brokers refused the clients of one publisher (a failed login, an untrusted
    certificate, a ``security.protocol`` the listener does not speak), as (code, reason): the
    answer to a request that would otherwise time out. Its error callback and its client log
    serve all of the publisher's clients: librdkafka reports a connection failure once per
    client and then suppresses repeats for 30 s, so only together do they show a mismatch
    promptly. Messages go to ``log`` (the publisher's logger)."""

    def __init__(self, conf: Mapping[str, Any], log: logging.Logger) -> None:
        self.refused: tuple[str, str] | None = None
        #: The producer's fatal error (code name), once it had one: it sends nothing more.
        self.fatal: str | None = None
        self._log = log
        self._servers = conf["bootstrap.servers"]
        self.client_log = ClientLog(str(conf.get("security.protocol", "PLAINTEXT")), self._mismatch)

    def on_error(self, err: KafkaError) -> None:
        """librdkafka's ``error_cb``. Client-level errors (all brokers down, authentication)
        are retried by librdkafka; the records they affect fail through their own delivery
        reports when they time out."""
        if is_refusal(err):
            self.refused = (err.name(), err.str())
        if err.fatal():
            self.fatal = self.fatal or err.name()
            self._log.error("Kafka producer fatal error: %s: %s", err.name(), err.str())
        else:
            self._log.warning("Kafka client error: %s: %s", err.name(), err.str())

    def _mismatch(self, hint: str) -> None:
        if self.refused is None:
            self._log.error("Kafka at %s: %s", self._servers, hint)
        self.refused = (PROTOCOL_MISMATCH, hint)


def admin_config(kafka: KafkaConfig) -> dict[str, Any]:
    """librdkafka settings shared by every client: brokers, identity, security overrides."""
    conf: dict[str, Any] = {
        "bootstrap.servers": kafka.bootstrap_servers,
        "client.id": kafka.client_id,
        # librdkafka's own log lines go through Python logging (served by poll()), so they
        # take the bridge's format (JSON lines included) instead of raw lines on stderr.
        "logger": _librdkafka_logger,
    }
    # TLS/SASL, then the overrides (often security settings too): the admin client needs them.
    conf.update({name: reveal(value) for name, value in kafka.security})
    conf.update({name: reveal(value) for name, value in kafka.producer_overrides})
    return conf


def producer_config(kafka: KafkaConfig) -> dict[str, Any]:
    """The producer's librdkafka configuration (contains secrets: never log it)."""
    conf = admin_config(kafka)
    conf.update(
        {
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": "murmur2_random",
            "compression.type": kafka.compression_type,
            "linger.ms": kafka.linger_ms,
            "batch.size": kafka.batch_size,
            "delivery.timeout.ms": kafka.delivery_timeout_ms,
            "queue.buffering.max.messages": kafka.max_queue_size,
            "queue.buffering.max.kbytes": max(1, kafka.max_queue_size_in_bytes // 1024),
        }
    )
    return conf
