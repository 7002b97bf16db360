"""Exactly once into Kafka: whole source transactions, and the position they reach, in one Kafka
transaction (``exactly.once.support = required``).

The producer has a ``transactional.id`` per slot (``pgbridge-<slot.name>``): starting it
(``init_transactions``) fences any older producer of that id, whose next send or commit fails
(:class:`ProducerFencedError`), and aborts what it left open. A Kafka transaction is always
open while streaming; after a source transaction's Commit, once ``commit.interval.ms`` has
passed (or when the stream is idle), the publisher's records are flushed, an offsets record
(key: the slot's name; value: ``{"slot", "lsn", "lsn_int"}``, the end LSN of the last source
transaction in it) joins them in the offsets topic, and the Kafka transaction commits. Only
then may the slot be confirmed that far (:meth:`ExactlyOnce.acknowledgeable`): a crash before
the commit aborts the records (a read_committed consumer never sees them) and the slot sends
them again; a crash after it, before the slot heard of it, is covered by the start position
(:func:`committed_position`), from which PostgreSQL skips what Kafka already holds.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from bridge.errors import PgBridgeError
from bridge.pgoutput.lsn import Lsn
from bridge.sink.topic_reader import TopicReadError, read_topic

logger = logging.getLogger(__name__)

__all__ = [
    "FENCED_CODES",
    "ExactlyOnce",
    "KafkaTransactionError",
    "ProducerFencedError",
    "call_transactional",
    "committed_position",
    "committed_value",
    "ensure_offsets_topic",
    "offsets_record",
]


#: Kafka's answers to a producer whose transactional.id a newer producer took.
FENCED_CODES = frozenset({"_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"})


class KafkaTransactionError(PgBridgeError):
    """A Kafka transaction could not be committed: its records are aborted (never visible to a
    read_committed consumer) and the slot was not confirmed past them, so the restart sends
    them again. ``kafka_code``: Kafka's error name, when Kafka answered with one."""

    def __init__(self, message: str, kafka_code: str | None = None) -> None:
        super().__init__(message)
        self.kafka_code = kafka_code


class ProducerFencedError(KafkaTransactionError):
    """A newer producer with this transactional.id started: another pgbridge instance runs on
    this slot. This one stops without publishing anything more."""


def offsets_record(slot: str, end_lsn: Lsn) -> tuple[bytes, bytes]:
    """The offsets topic's record of ``slot`` at ``end_lsn``."""
    value = {"slot": slot, "lsn": str(end_lsn), "lsn_int": int(end_lsn)}
    return slot.encode(), json.dumps(value, separators=(",", ":")).encode()


def committed_value(client: dict[str, str], topic: str, key: bytes) -> bytes | None:
    """The last value of ``key`` committed in the offsets topic (``None``: none, or no topic),
    read read_committed to its end. ``client``: ``bootstrap.servers`` and the security
    settings."""
    settings = dict(client)
    bootstrap = settings.pop("bootstrap.servers")
    settings["isolation.level"] = "read_committed"
    found: bytes | None = None
    try:
        for message in read_topic(bootstrap, topic, settings, timeout=30.0):
            value = message.value()
            if message.key() == key and value:
                found = value
    except TopicReadError as exc:
        if exc.reason == "no such topic":
            return None
        raise KafkaTransactionError(f"reading offsets topic {topic}: {exc.reason}") from None
    return found


def committed_position(client: dict[str, str], topic: str, slot: str) -> Lsn | None:
    """The end LSN of the last Kafka transaction committed for ``slot`` (``None``: none), read
    read_committed from the offsets topic to its end (a missing topic: none). ``client``:
    ``bootstrap.servers`` and the security settings."""
    value = committed_value(client, topic, slot.encode())
    return None if value is None else Lsn(int(json.loads(value)["lsn_int"]))


class ExactlyOnce:
    """The Kafka transactions of one streaming run, around the publisher's producer."""

    def __init__(
        self,
        producer: Any,
        publish_offsets: Any,
        flush: Any,
        slot: str,
        commit_interval_s: float,
        timeout_s: float = 60.0,
        fatal_error: Any = None,
    ) -> None:
        """``producer``: confluent-kafka's (transactional) Producer; ``publish_offsets(key,
        value)`` queues the offsets record on it; ``flush(timeout)`` hands the publisher's
        pending records over and waits for their deliveries (serving their callbacks)."""
        self._producer = producer
        self._fatal_error = fatal_error  # () -> the producer's fatal error code, or None
        self._publish_offsets = publish_offsets
        self._flush = flush
        self._slot = slot
        self._interval = commit_interval_s
        self._timeout = timeout_s
        self._began = 0.0
        self._last_end: Lsn | None = None  # of the last source transaction in the open one
        self._dirty = False  # records (or transactions) since the last commit
        self.committed: Lsn | None = None
        self.commits = 0
        #: Records committed with the slot's, given the end LSN the transaction reaches (the
        #: incremental snapshot's progress: bridge.snapshot.incremental_state).
        self.also_commit: Callable[[Lsn], Sequence[tuple[bytes, bytes]]] | None = None

    def start(self) -> None:
        """Fence older producers of this transactional.id and open the first transaction."""
        self._call(self._producer.init_transactions, self._timeout)
        self._begin()

    def transaction_done(self, end_lsn: Lsn | None) -> None:
        """A source transaction (or a message outside one) is complete; commit if it is time."""
        self._dirty = True
        if end_lsn is not None:
            self._last_end = end_lsn
        if time.monotonic() - self._began >= self._interval:
            self.commit()

    def idle(self) -> None:
        """The stream is idle: what waits goes out now, not at the next change."""
        if self._dirty:
            self.commit()

    def commit(self) -> None:
        if not self._dirty:
            return
        if self._last_end is not None:
            # Typed errors: a producer whose transaction failed (a record timed out, say)
            # refuses new records with a bare _STATE error.
            if self.also_commit is not None:
                for key, value in self.also_commit(self._last_end):
                    self._call(self._publish_offsets, key, value)
            self._call(self._publish_offsets, *offsets_record(self._slot, self._last_end))
        self._flush(self._timeout)
        self._call(self._producer.commit_transaction, self._timeout)
        self.commits += 1
        self.committed = self._last_end if self._last_end is not None else self.committed
        self._dirty = False
        self._begin()

    def acknowledgeable(self, flush_lsn: Lsn) -> Lsn:
        """How far the slot may be confirmed: no further than the last commit while records
        wait in the open Kafka transaction."""
        if not self._dirty:
            return flush_lsn
        committed = self.committed if self.committed is not None else Lsn(0)
        return min(flush_lsn, committed)

    def abort(self) -> None:
        """At a stop without a commit: the open transaction's records are dropped."""
        try:
            self._producer.abort_transaction(self._timeout)
        except KafkaException as exc:
            logger.debug("aborting the open Kafka transaction: %s", exc)

    def _begin(self) -> None:
        self._call(self._producer.begin_transaction)
        self._began = time.monotonic()

    def _call(self, method: Any, *args: Any) -> None:
        call_transactional(
            method,
            *args,
            slot=self._slot,
            abort=self.abort,
            resent_from=f"LSN {self.committed or 'the slot'}",
            fatal_error=self._fatal_error,
        )


def call_transactional(
    method: Any,
    *args: Any,
    slot: str,
    abort: Any,
    resent_from: str,
    fatal_error: Any = None,
) -> None:
    """A transactional call of a producer of ``slot``, retried while Kafka says it may be;
    typed errors otherwise (``abort()`` first when Kafka requires it; ``resent_from``: where
    the restart sends the aborted records again from). ``fatal_error()``: the code of the
    producer's fatal error, once it had one: a call refused with librdkafka's bare ``_FATAL``
    (a record produced after a newer producer fenced this one in the background) says why."""
    for attempt in range(5):
        try:
            method(*args)
            return
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if error is None:
                raise KafkaTransactionError(f"Kafka transaction: {exc}") from None
            fatal = fatal_error() if fatal_error is not None and error.name() == "_FATAL" else None
            if error.name() in FENCED_CODES or fatal in FENCED_CODES:
                raise ProducerFencedError(
                    f"another pgbridge instance took over slot {slot} (its producer "
                    f"has this transactional.id): {error.str()}"
                ) from None
            if error.retriable() and attempt < 4:
                time.sleep(0.5 * (attempt + 1))
                continue
            if error.txn_requires_abort():
                abort()
            raise KafkaTransactionError(
                f"Kafka transaction ({getattr(method, '__name__', method)}): {error.str()}; "
                f"its records are aborted and will be sent again from {resent_from}"
            ) from None


def ensure_offsets_topic(admin_conf: dict[str, Any], topic: str, replication_factor: int) -> None:
    """Create the compacted offsets topic when it is missing (one partition: one key per
    slot, read whole at every start). A refused login, certificate or ``security.protocol``
    ends the wait at once as a :class:`~bridge.sink.kafka_errors.TopicCreationError` (as the
    publisher's topic creation does), not after the request's timeout."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    from bridge.sink.kafka_client import BrokerRefusals
    from bridge.sink.topic_admin import admin_result

    refusals = BrokerRefusals(admin_conf, logger)
    conf: dict[str, Any] = {
        **admin_conf,
        "error_cb": refusals.on_error,
        "logger": refusals.client_log,
    }
    admin = AdminClient(conf)
    future = admin.create_topics(
        [
            NewTopic(
                topic,
                num_partitions=1,
                replication_factor=replication_factor,
                config={"cleanup.policy": "compact"},
            )
        ],
        operation_timeout=30,
        request_timeout=30,
    )[topic]
    try:
        admin_result(admin, future, topic, lambda: refusals.refused, 60)
        logger.info("created offsets topic %s (compacted)", topic)
    except KafkaException as exc:
        error = exc.args[0]
        if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        code = error.name() if isinstance(error, KafkaError) else None
        raise KafkaTransactionError(f"creating offsets topic {topic}: {exc}", code) from None
