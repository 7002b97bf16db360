"""The Kafka publisher: hands encoded records to librdkafka and reports their fate.

Delivery contract
    The producer runs with ``acks=all`` and ``enable.idempotence=true``: a record counts as
    delivered only when every in-sync replica has it, and librdkafka's retries can neither
    duplicate nor reorder records of a partition. A record that still fails after the client's
    own retries (bounded by ``delivery.timeout.ms``) is *not* skipped: the failure is recorded
    and raised as :class:`DeliveryError` from the next :meth:`KafkaPublisher.publish`,
    :meth:`~KafkaPublisher.poll` or :meth:`~KafkaPublisher.flush`, so the bridge stops with the
    replication slot still before the failed transaction, and a restart sends it again.

Placement
    ``partitioner=murmur2_random`` is librdkafka's implementation of the Java client's default
    partitioner: ``(murmur2(key) & 0x7fffffff) % partitions`` for keyed records. Null-key
    records (tables without a key) all go to partition 0 rather than to random partitions: a
    null key carries no order of its own, and one partition keeps such a table's records in
    commit order, which a consumer applying them as a multiset needs. Kafka Streams, Kafka
    Connect and the JVM consumers of the same topics agree on where a key lives, which matters
    for co-partitioned joins and for anyone who re-keys or mirrors these topics. (librdkafka's
    own default, ``consistent_random``, uses CRC32 and would place keys differently.)

Threads
    librdkafka's background threads never run Python code. Delivery callbacks run *inside*
    :meth:`KafkaPublisher.poll` / :meth:`~KafkaPublisher.flush` (and the polls that
    :meth:`~KafkaPublisher.publish` does while the queue is full), on the thread that called
    them: in pgbridge, the pipeline thread. So the acknowledgement tracker is only ever touched
    from one thread between two source messages; ``on_delivered`` needs no locking of its own
    and cannot interleave with the pipeline registering the next transaction. The publisher
    itself is meant for that one thread: call publish/poll/flush/close from the same thread
    (its failure record and in-flight count are not locked).

Throughput settings
    ``compression.type=lz4`` by default: Avro rows of one table repeat field layouts and
    values, lz4 compresses them well at the lowest CPU cost of the codecs (the bridge's Python
    side is the bottleneck on small machines, not the network), and every Kafka client and
    Spark decompress it natively. ``linger.ms=5`` and ``batch.size`` of 1 MB let batches
    fill under load; measured here, 5 ms halves the commit-to-acknowledgement latency of 20 ms
    at the same throughput (``bench/pipeline_bench.py``). The local queue is bounded
    (``max.queue.size``, ``max.queue.size.in.bytes``); when it is full :meth:`publish` polls
    until deliveries make room, which is the back-pressure that slows reading from PostgreSQL.

Batching
    Consecutive records for one topic and delivery target are collected (up to 256) and
    handed to librdkafka with one ``produce_batch`` call, at the latest by the next
    :meth:`~KafkaPublisher.poll`, :meth:`~KafkaPublisher.flush`, :meth:`~KafkaPublisher.close`
    or :meth:`~KafkaPublisher.send_pending` (the pipeline calls it at each transaction's
    end). Order is kept: a batch waits for room for all of it, a record that takes the
    single path (headers, size near ``message.max.bytes``) first sends what is batched, and a
    batch refused in a way that could reorder records stops the bridge.

Native batches
    Where the C module is built (:mod:`bridge.sink.native_batches`), a batch goes to
    librdkafka in one call without a Python object per record, and only the first and the
    last record of each partition of the batch carry a delivery report: with
    ``enable.idempotence`` and ``enable.gapless.guarantee`` their success proves the whole
    batch delivered (the argument is in ``bridge/native/_kafka.c``), and the route's
    ``on_delivered`` then runs once per record of it. Partitions are chosen by the same
    murmur2 as above, from the partition count :meth:`~KafkaPublisher.ensure_topic` saw;
    topics it did not describe (``topic.creation.enable=false``) take ``produce_batch``.
    Under the gapless guarantee a record the broker refuses for good is a fatal producer
    error: it is raised as the :class:`DeliveryError` of the refused record when its report
    came, else of the fatal error itself.

Acknowledgement by drain
    With ``report_successes=False`` no success calls back: on the ``produce_batch`` path the
    producer runs with ``delivery.report.only.error`` (confluent-kafka then skips the Python
    callback of every delivered record), and only failures call back. What was delivered is
    then known in bulk: once :attr:`KafkaPublisher.outstanding` is 0 after a
    :meth:`~KafkaPublisher.poll` that raised nothing, every record published so far was
    acknowledged. The snapshot acknowledges its chunks this way
    (:mod:`bridge.snapshot.epochs`); streaming confirms per transaction while publishing on.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from bridge import native as accelerator
from bridge.config import KafkaConfig, TopicCreationConfig
from bridge.retry import RetryPolicy
from bridge.sink.kafka_client import BrokerRefusals, admin_config, producer_config
from bridge.sink.kafka_errors import DeliveryError, PublisherError, proven_delivery
from bridge.sink.native_batches import PRODUCER_SETTINGS, BatchReport, native_batches
from bridge.sink.topic_admin import TopicAdmin
from bridge.sink.transactions import FENCED_CODES, ProducerFencedError

logger = logging.getLogger(__name__)

__all__ = ["KafkaPublisher"]

# How long a single poll waits while the local queue is full: short enough to react to a
# failure promptly, long enough not to spin.
_FULL_QUEUE_POLL_S = 0.1
# Consecutive records for one topic are handed to librdkafka in batches of up to this many
# (produce_batch: about 40% less CPU per record than produce()), at the latest at the next
# poll(), flush() or send_pending(). Larger values take the single-record path.
_BATCH_RECORDS = 256
_BATCH_MAX_BYTES = 64 * 1024


@dataclass(slots=True)
class _Failures:
    first: DeliveryError | None = None
    count: int = 0
    callback_error: Exception | None = None


class KafkaPublisher:
    """Publishes ``(topic, key, value)`` records and reports each delivery to its caller.

    Usage by the pipeline::

        publisher = KafkaPublisher(config.kafka, config.topic_creation)
        tracker.record_sent(tok)  # before publish: the count is never behind a callback
        publisher.publish(topic, key, value, functools.partial(tracker.record_delivered, tok))
        ...
        publisher.poll()          # after each source message / when idle: runs the callbacks
        metrics.in_flight(publisher.in_flight)
        publisher.close()         # at shutdown: flushes, returns what was left undelivered

    Every method may raise :class:`DeliveryError` for a record published earlier; after that
    the publisher refuses new records (the pipeline must stop and restart from the slot).
    """

    def __init__(
        self,
        kafka: KafkaConfig,
        topics: TopicCreationConfig,
        *,
        extra_config: Mapping[str, Any] | None = None,
        retry: RetryPolicy | None = None,
        report_successes: bool = True,
    ) -> None:
        conf = producer_config(kafka)
        self._refusals = BrokerRefusals(conf, logger)
        conf["error_cb"] = self._refusals.on_error
        conf["logger"] = self._refusals.client_log
        # Batches with two delivery reports per partition (bridge.sink.native_batches) where
        # this process can; else produce_batch with a report per record, or none but the
        # failures' when the caller acknowledges by drain (report_successes=False).
        self._native = native_batches()
        if self._native is not None:
            conf.update(PRODUCER_SETTINGS)
        elif not report_successes:
            conf["delivery.report.only.error"] = True
        self._report_successes = report_successes
        if extra_config:
            conf.update(extra_config)
        self._kafka = kafka
        self._transactional_id = conf.get("transactional.id")
        self._ready: set[str] = set()  # topics whose metadata a transaction can rely on
        self.retry = retry or RetryPolicy()
        #: Runs between retries of a topic creation (the pipeline serves deliveries there).
        self.on_wait: Callable[[], None] | None = None
        self._producer = Producer(conf)
        # Per topic: the native topic handle and partition count, or None (produce_batch).
        self._native_topics: dict[str, tuple[object, int] | None] = {}
        # Fatal errors a batch marker took out of a poll (see _fatal()).
        self._cleared: list[BaseException] = []
        self._topic_admin = TopicAdmin(
            topics,
            self._admin_client,
            lambda: self._refusals.refused,
            learn_partitions=self._native is not None,
        )
        self._failures = _Failures()
        self._in_flight = 0
        self._closed = False
        # Consecutive records with the same (topic, on_delivered, on_failed), compared by
        # identity, form a route: one delivery callback, and batches (see publish()).
        self._route: tuple[Any, Any, Any] = (None, None, None)
        self._route_callback: Callable[[KafkaError | None, Message], None] | None = None
        # Records not yet handed to the client, all of the current route, as (key, value).
        self._pending: list[tuple[bytes | None, bytes | None]] = []
        # Whether the pending records have null keys: such a batch goes to partition 0 as a
        # whole (produce_batch ignores a per-record "partition", confluent-kafka 2.15).
        self._pending_null_keys = False
        self._batch_limit = max(1, min(_BATCH_RECORDS, kafka.max_queue_size // 4))
        # Records near the size limit take the single path, which refuses them at once.
        max_bytes = int(conf.get("message.max.bytes", 1_000_000))
        self._batch_max_bytes = min(_BATCH_MAX_BYTES, max_bytes // 2)

    # -- publishing ---------------------------------------------------------------------------

    def publish(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        on_delivered: Callable[[], None],
        *,
        on_failed: Callable[[DeliveryError], None] | None = None,
        headers: list[tuple[str, str | bytes | None]] | None = None,
    ) -> None:
        """Queue one record; ``on_delivered()`` runs once Kafka acknowledged it.

        ``value`` ``None`` is a tombstone. ``on_failed`` (optional) runs if the record fails
        for good, before the failure is raised; callbacks run inside a later :meth:`poll`,
        :meth:`flush` or :meth:`publish` on the calling thread. When the local queue is full
        this call blocks, polling, until there is room: a record is never dropped.
        """
        failures = self._failures
        if failures.first is not None or failures.callback_error is not None or self._closed:
            self._raise_if_failed()
            raise PublisherError("publish after close()")
        route = self._route
        if not (topic is route[0] and on_delivered is route[1] and on_failed is route[2]):
            self._switch_route(topic, on_delivered, on_failed)
        if (
            headers is None
            and (value is None or len(value) <= self._batch_max_bytes)
            and (key is None or len(key) <= self._batch_max_bytes)
        ):
            if (key is None) is not self._pending_null_keys:
                self.send_pending()
                self._pending_null_keys = key is None
            self._pending.append((key, value))
            self._in_flight += 1
            if len(self._pending) >= self._batch_limit:
                self.send_pending()
            return
        # Single path: in order, what is batched goes first.
        self.send_pending()
        callback = self._route_callback
        while True:
            try:
                self._producer.produce(
                    topic,
                    value=value,
                    key=key,
                    headers=headers,
                    on_delivery=callback,
                    # Null keys (tables without a key) keep their commit order in one partition.
                    partition=0 if key is None else -1,
                )
                self._in_flight += 1
                return
            except BufferError:
                # Queue full: deliveries of earlier records are what frees it.
                self._serve(_FULL_QUEUE_POLL_S)
                self._raise_if_failed()
            except KafkaException as exc:
                # Refused before it was queued (too large for message.max.bytes, topic known
                # not to exist, fatal producer state): as final as a failed delivery.
                error: KafkaError = exc.args[0]
                raise self._refusal(DeliveryError.from_kafka(topic, None, error)) from None

    def publish_records(
        self,
        topic: str,
        records: Sequence[tuple[bytes | None, bytes | None]],
        on_delivered: Callable[[], None],
    ) -> None:
        """:meth:`publish` of many ``(key, value)`` records of one topic, in order, with no
        Python call per record (for the snapshot's encoded rows). They are one table's: all
        keyed, or all keyless (``None`` keys: partition 0), as the first one is."""
        self._bulk_route(topic, on_delivered)
        if not records:
            return
        # Oversized records are refused by librdkafka itself (a DeliveryError, as the single
        # path would raise).
        batch = records if isinstance(records, list) else list(records)
        self._in_flight += len(batch)
        self._pending_null_keys = records[0][0] is None
        step = self._batch_limit
        for start in range(0, len(batch), step):
            self._pending = batch[start : start + step]
            self.send_pending()

    def _bulk_route(self, topic: str, on_delivered: Callable[[], None]) -> None:
        """Before records in bulk: refuse them after a failure or close, switch to their route
        (one callback, no failure callback) and send what was batched before (order)."""
        failures = self._failures
        if failures.first is not None or failures.callback_error is not None or self._closed:
            self._raise_if_failed()
            raise PublisherError("publish after close()")
        route = self._route
        if not (topic is route[0] and on_delivered is route[1] and route[2] is None):
            self._switch_route(topic, on_delivered, None)
        self.send_pending()

    def publish_packed(
        self, topic: str, pack: bytearray, count: int, on_delivered: Callable[[], None]
    ) -> None:
        """:meth:`publish_records` of the first ``count`` records packed in ``pack`` (by
        ``bridge.native._speedups.encode_copy_rows``): handed to librdkafka straight from the
        buffer where the native batches serve the topic, else unpacked into tuples first.
        ``pack`` is not changed by the caller while this call runs."""
        self._bulk_route(topic, on_delivered)
        if not count:
            return
        native = self._native
        target = self._native_target(topic) if native is not None else None
        if native is None or target is None:
            # Packs are made only where the C accelerator is built, which reads them back.
            assert accelerator.unpack_records is not None
            self.publish_records(topic, accelerator.unpack_records(pack, 0, count), on_delivered)
            return
        handle, partitions = target
        producer = self._producer
        self._in_flight += count
        step = self._batch_limit
        for first in range(0, count, step):
            stop = min(first + step, count)

            def produce(
                start: int, marker: Any, first: int = first, stop: int = stop
            ) -> tuple[int, int | None, int]:
                queued: tuple[int, int | None, int] = native.produce_packed(
                    producer, handle, pack, first, stop, start, partitions, 0, marker
                )
                return queued

            self._send_native_calls(topic, first, stop, produce)

    def _switch_route(
        self,
        topic: str,
        on_delivered: Callable[[], None],
        on_failed: Callable[[DeliveryError], None] | None,
    ) -> None:
        # Another topic or delivery target: what is batched goes first (order), and the
        # records of this route share one callback (not a closure per record).
        self.ensure_topic(topic)  # once per topic: a set lookup after the first
        self.send_pending()
        self._route = (topic, on_delivered, on_failed)
        self._route_callback = self._delivery_callback(topic, on_delivered, on_failed)

    def send_pending(self) -> None:
        """Hand the records batched so far to the client (their delivery can only start
        then); blocks, polling, while the client's queue has no room for them."""
        pending = self._pending
        if not pending:
            return
        topic, callback = self._route[0], self._route_callback
        self._pending = []
        if self._native is not None:
            target = self._native_target(topic)
            if target is not None:
                self._send_native(topic, pending, *target)
                return
        self._send_batch(topic, [{"key": k, "value": v} for k, v in pending], callback)

    def _send_batch(
        self,
        topic: str,
        pending: list[dict[str, bytes | int | None]],
        callback: Callable[[KafkaError | None, Message], None] | None,
    ) -> None:
        producer = self._producer
        while pending:
            # Room for the whole batch first: a batch refused half-way for a full queue could
            # be queued out of order (deliveries free room while librdkafka goes on).
            while len(producer) + len(pending) > self._kafka.max_queue_size:
                self._serve(_FULL_QUEUE_POLL_S)
                self._raise_if_failed()
            queued = producer.produce_batch(
                topic, pending, partition=0 if self._pending_null_keys else -1, on_delivery=callback
            )
            if queued == len(pending):
                return
            pending = self._batch_rest(topic, pending)

    def _send_native(
        self,
        topic: str,
        records: list[tuple[bytes | None, bytes | None]],
        handle: object,
        partitions: int,
    ) -> None:
        """Queue a batch through ``bridge.native._kafka``: its markers' reports tell the
        route's callbacks, once, whether the whole batch was delivered."""
        native, producer = self._native, self._producer
        assert native is not None
        self._send_native_calls(
            topic,
            0,
            len(records),
            lambda start, marker: native.produce(
                producer, handle, records, start, partitions, 0, marker
            ),
        )

    def _send_native_calls(
        self,
        topic: str,
        first: int,
        stop: int,
        produce: Callable[[int, Any], tuple[int, int | None, int]],
    ) -> None:
        """Records ``first`` .. ``stop - 1`` of a batch to librdkafka by ``produce(start,
        marker)`` calls of ``bridge.native._kafka`` (``(next, refusal or None, markers)``),
        again from the first refused record while the queue is full."""
        assert self._native is not None
        _, on_delivered, on_failed = self._route
        report = BatchReport(
            stop - first,
            functools.partial(self._batch_delivered, on_delivered),
            functools.partial(self._batch_failed, topic, on_failed),
        )
        marker = self._native.Marker(report, self._cleared)
        producer, limit = self._producer, self._kafka.max_queue_size
        start = first
        while True:
            # Room for the rest of the batch first (see _send_batch).
            while len(producer) + stop - start > limit:
                self._serve(_FULL_QUEUE_POLL_S)
                self._raise_if_failed()
            start, refused, report.markers = produce(start, marker)
            if refused is None:
                return
            if refused == KafkaError._QUEUE_FULL:  # the byte bound: records in order, wait
                self._serve(_FULL_QUEUE_POLL_S)
                self._raise_if_failed()
                continue
            self._in_flight -= stop - start  # never queued: no report will come
            raise self._refusal(DeliveryError.from_kafka(topic, None, KafkaError(refused)))

    def _refusal(self, failure: DeliveryError) -> DeliveryError:
        """Keep a record the client refused as the publisher's failure (it refuses every
        later record: none may land after a gap) and return it, to be raised."""
        failures = self._failures
        if failures.first is None:
            failures.first = failure
            logger.error("%s", failure)
        return failures.first

    def _batch_delivered(self, on_delivered: Callable[[], None], count: int) -> None:
        self._in_flight -= count
        if not self._report_successes:  # acknowledged by drain: successes call nothing
            return
        try:
            for _ in range(count):
                on_delivered()
        except Exception as exc:  # kept for poll() to raise, as _delivery_callback does
            if self._failures.callback_error is None:
                self._failures.callback_error = exc

    def _batch_failed(
        self,
        topic: str,
        on_failed: Callable[[DeliveryError], None] | None,
        err: KafkaError,
        msg: Message,
        count: int,
    ) -> None:
        self._in_flight -= count
        failures = self._failures
        try:
            partition = msg.partition()
            failure = DeliveryError.from_kafka(
                msg.topic() or topic,
                partition if partition is not None and partition >= 0 else None,
                err,
            )
            failures.count += count
            if failures.first is None:
                failures.first = failure
                logger.error("%s", failure)
            if on_failed is not None and count:
                on_failed(failure)
        except Exception as exc:
            if failures.callback_error is None:
                failures.callback_error = exc

    def native_partitions(self, topic: str) -> int | None:
        """The partition count the native batches use for ``topic`` (None: produce_batch)."""
        target = self._native_topics.get(topic)
        return target[1] if target is not None else None

    def _native_target(self, topic: str) -> tuple[object, int] | None:
        """The native topic handle and partition count of ``topic``, or ``None``: the batch
        goes by produce_batch where the count is not known without asking the brokers on the
        pipeline's thread (topics pgbridge does not create, ``topic.creation.enable=false``).
        The count is the one ensure_topic() saw: partitions added to a topic while pgbridge
        runs are used after its next start."""
        target = self._native_topics.get(topic)
        if target is not None or topic in self._native_topics:
            return target
        assert self._native is not None
        partitions = self._topic_admin.partition_counts.get(topic)
        if partitions is not None:
            try:
                target = (self._native.topic_handle(self._producer, topic), partitions)
            except RuntimeError as exc:  # a producer the module cannot read: never again
                logger.warning("records go by produce_batch: %s", exc)
                self._native = None
        self._native_topics[topic] = target
        return target

    def _batch_rest(
        self, topic: str, batch: list[dict[str, bytes | int | None]]
    ) -> list[dict[str, bytes | int | None]]:
        """After a partly refused batch: its refused tail if that is all the queue being full
        (queued again, in order), else the first refusal as a :class:`DeliveryError`."""
        refused = [i for i, record in enumerate(batch) if "_error" in record]
        errors = [batch[i]["_error"] for i in refused]
        first = refused[0]
        if refused == list(range(first, len(batch))) and all(
            isinstance(e, KafkaError) and e.code() == KafkaError._QUEUE_FULL for e in errors
        ):
            self._serve(_FULL_QUEUE_POLL_S)
            self._raise_if_failed()
            return [{k: v for k, v in record.items() if k != "_error"} for record in batch[first:]]
        self._in_flight -= len(refused)  # never queued: no delivery report will come
        error = errors[0]
        if isinstance(error, KafkaError):
            raise self._refusal(DeliveryError.from_kafka(topic, None, error))
        raise self._refusal(DeliveryError(topic, None, "produce_batch", str(error)))

    def _delivery_callback(
        self,
        topic: str,
        on_delivered: Callable[[], None],
        on_failed: Callable[[DeliveryError], None] | None,
    ) -> Callable[[KafkaError | None, Message], None]:
        failures = self._failures

        def delivered(err: KafkaError | None, msg: Message) -> None:
            self._in_flight -= 1
            # Exceptions must not escape into librdkafka's callback machinery, where they would
            # abort the poll half-way; keep the first and re-raise it from poll().
            try:
                err = proven_delivery(err, msg)
                if err is None:
                    on_delivered()
                    return
                try:
                    partition, failed_topic = msg.partition(), msg.topic() or topic
                except SystemError as pending:
                    # A fatal error's KafkaException is pending in this poll (an idempotent
                    # producer's gap-less guarantee refusing after this very failure): the
                    # message's accessors fail on it, and catching that took it out. Kept for
                    # the poll's caller (_fatal), as a batch marker keeps what it takes out.
                    self._cleared.append(pending.__context__ or pending)
                    partition, failed_topic = None, topic
                failure = DeliveryError.from_kafka(
                    failed_topic,
                    partition if partition is not None and partition >= 0 else None,
                    err,
                )
                failures.count += 1
                if failures.first is None:
                    failures.first = failure
                    logger.error("%s", failure)
                if on_failed is not None:
                    on_failed(failure)
            except Exception as exc:
                if failures.callback_error is None:
                    failures.callback_error = exc

        return delivered

    # -- driving the client -------------------------------------------------------------------

    def poll(self, timeout: float = 0.0) -> int:
        """Serve delivery callbacks (waiting up to ``timeout`` s); the number of events served."""
        self.send_pending()
        served = self._serve(timeout)
        self._raise_if_failed()
        return served

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` s for every queued record; returns how many are still queued."""
        self.send_pending()
        remaining = self._drain(timeout)
        self._raise_if_failed()
        return remaining

    def close(self, timeout: float = 30.0) -> int:
        """Flush what is queued and stop; returns the records still undelivered (left for the
        restart to resend, since the slot was never confirmed past them)."""
        if self._closed:
            return 0
        self.send_pending()
        self._closed = True
        self._drain(timeout)
        # Records, not flush()'s count, which includes librdkafka's own requests (an
        # idempotent producer's InitProducerId toward a broker not reached yet, say).
        remaining = self.in_flight
        self._release_native_topics()
        if remaining:
            logger.warning("closing with %d record(s) undelivered; they will be resent", remaining)
        self._raise_if_failed()
        return remaining

    def _release_native_topics(self) -> None:
        # The application's references only: queued records keep their topic alive.
        if self._native is not None:
            for target in self._native_topics.values():
                if target is not None:
                    self._native.release_topic(target[0])
        self._native_topics.clear()

    def _serve(self, timeout: float) -> int:
        """``Producer.poll()``; a fatal producer error raised as a :class:`DeliveryError`."""
        try:
            return int(self._producer.poll(timeout))
        except (KafkaException, SystemError) as exc:
            raise self._fatal(exc) from None

    def _drain(self, timeout: float) -> int:
        """``Producer.flush()``; a fatal producer error raised as a :class:`DeliveryError`."""
        try:
            return int(self._producer.flush(timeout))
        except (KafkaException, SystemError) as exc:
            raise self._fatal(exc) from None

    def _fatal(self, exc: BaseException) -> BaseException:
        """What to raise for an exception out of the producer's poll or flush: librdkafka's
        fatal errors (an idempotence violation, a gap enable.gapless.guarantee refuses) come
        as KafkaException, or as SystemError from a poll whose pending KafkaException a
        batch marker took out (bridge.native._kafka.Marker: it is in ``_cleared``). The
        failed delivery that caused it, when one was reported, names topic and partition."""
        if isinstance(exc, SystemError):
            if not self._cleared:
                return exc
            exc = self._cleared[0]
        error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if error is not None and error.name() in FENCED_CODES:
            return self._fenced(error.str())
        failures = self._failures
        if failures.first is not None:
            return failures.first
        if error is None:
            return exc
        failure = DeliveryError.from_kafka(str(self._route[0] or "(producer)"), None, error)
        failures.first = failure
        logger.error("%s", failure)
        return failure

    def fatal_error(self) -> str | None:
        """The code of the producer's fatal error, if it had one (its error callback served
        first: the call that met the bare ``_FATAL`` may come before the callback ran)."""
        try:
            self._producer.poll(0)
        except KafkaException as exc:  # the poll raises the fatal error itself
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if error is not None and error.fatal():
                self._refusals.fatal = self._refusals.fatal or error.name()
        return self._refusals.fatal

    @property
    def in_flight(self) -> int:
        """Records handed to the producer whose delivery report has not run yet.

        Counted here rather than with ``len(producer)``, which also counts librdkafka's
        internal events and requests (with ``report_successes=False``, where no report comes
        for a delivered record, it is :attr:`outstanding`).
        """
        return self._in_flight if self._report_successes else self.outstanding

    @property
    def outstanding(self) -> int:
        """Records not handed over yet plus librdkafka's queue (records not yet acknowledged
        and reports not yet served): 0 after a poll means all published was delivered."""
        return len(self._pending) + len(self._producer)

    @property
    def failed_count(self) -> int:
        """Records whose delivery failed so far."""
        return self._failures.count

    def _raise_if_failed(self) -> None:
        failures = self._failures
        if failures.callback_error is not None:
            raise failures.callback_error
        first = failures.first
        if first is not None:
            if first.code in FENCED_CODES or self._refusals.fatal in FENCED_CODES:
                # A newer producer of our transactional.id (its fatal error purged the rest).
                raise self._fenced(str(first)) from first
            refused = self._refusals.refused
            if refused is not None and first.code == "_MSG_TIMED_OUT":
                # Timed out because the brokers refuse this client: say so, as a permanent
                # error (bridge.restarts stops on it instead of restarting into it again).
                raise DeliveryError(first.topic, first.partition, *refused) from first
            raise first

    def _fenced(self, detail: str) -> ProducerFencedError:
        return ProducerFencedError(
            f"another pgbridge instance took over this slot (a newer producer has "
            f"transactional.id {self._transactional_id}): {detail}"
        )

    def abandon(self, timeout: float) -> int:
        """Give up on this producer after a failure: records not yet sent are dropped (the
        slot was never confirmed past them: the restart sends them again), records already on
        the wire are waited for up to ``timeout`` s, so that none of them can land after the
        next producer's resends; the failure itself is not raised again. Returns how many
        records were still unresolved."""
        if self._closed:
            return 0
        self._closed = True
        self._pending.clear()
        try:
            self._producer.purge(in_queue=True, in_flight=False, blocking=True)
            remaining = int(self._producer.flush(timeout))
        except (KafkaException, SystemError) as exc:  # a fatal producer: nothing more is sent
            logger.warning("abandoning the Kafka producer: %s", exc)
            return 0
        finally:
            self._release_native_topics()
        if remaining:
            logger.warning("%d record(s) still in flight on the abandoned producer", remaining)
        return remaining

    # -- exactly once (bridge.sink.transactions) -----------------------------------------------

    @property
    def producer(self) -> Producer:
        """The confluent-kafka producer (transactional when made with a transactional.id)."""
        return self._producer

    def produce_offsets(self, topic: str, key: bytes, value: bytes) -> None:
        """An offsets record, after the records queued before it; no delivery callback (the
        transaction's commit reports its fate)."""
        self.send_pending()
        if topic not in self._ready:
            self._await_metadata(topic)
            self._ready.add(topic)
        self._producer.produce(topic, key=key, value=value)

    # -- topics -------------------------------------------------------------------------------

    def ensure_topic(self, topic: str) -> None:
        """Create ``topic`` if it does not exist (once per topic per publisher; see
        :mod:`bridge.sink.topic_admin`), waiting under :attr:`retry` for brokers that do not
        answer yet."""
        self._topic_admin.ensure_topic(topic, self.retry, self.on_wait)
        if self._transactional_id is not None and topic not in self._ready:
            self._await_metadata(topic)
            self._ready.add(topic)

    def _await_metadata(self, topic: str, timeout: float = 30.0) -> None:
        """Until the brokers know ``topic``'s partitions: a transaction's first record of a
        topic created a moment ago otherwise fails the whole transaction (the coordinator
        answers UNKNOWN_TOPIC_OR_PART, which is not retried inside a transaction)."""
        deadline = time.monotonic() + timeout
        while True:
            described = self._producer.list_topics(topic, timeout=5).topics.get(topic)
            if (
                described is not None
                and described.error is None
                and described.partitions
                and all(p.leader >= 0 for p in described.partitions.values())
            ):
                return
            if time.monotonic() > deadline:
                return  # the transaction says what is wrong, if anything still is
            time.sleep(0.05)

    def _admin_client(self) -> AdminClient:
        conf = admin_config(self._kafka)
        conf["error_cb"] = self._refusals.on_error
        conf["logger"] = self._refusals.client_log
        return AdminClient(conf)
