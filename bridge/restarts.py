"""Restart streaming in-process when Kafka (or the spill directory) fails transiently,
instead of exiting.

A record that librdkafka could not deliver within ``kafka.delivery.timeout.ms`` (a broker down
longer than that, a partition without a leader, a cluster that stopped answering) used to stop
``pgbridge run`` with exit code 2; under systemd or Kubernetes that is a crash loop while the
fault usually clears by itself. Now the bridge does in-process what a restart would do, and
only that: the failed pipeline has already confirmed to PostgreSQL exactly the transactions
Kafka acknowledged (:meth:`bridge.pipeline.Pipeline._shutdown`), so streaming again from the
slot resends everything after them, in commit order, and nothing is lost (duplicates of the
resent tail are the documented at-least-once case).

Order is kept across the restart: the abandoned producer's unsent records are purged and those
already on the wire are waited for (each ends delivered or failed within the delivery timeout)
before the next producer sends anything, so no record of the old producer can land after a
resend of a later one. Waits between attempts follow the one retry policy
(:class:`bridge.retry.RetryPolicy`: ``errors.max.retries``, ``errors.retry.delay.*``) and are
visible as ``pgbridge_waiting_for_dependency{dependency="kafka"}``; a pipeline that delivered
something before failing again starts counting attempts from one.

Permanent Kafka errors (authorization, a record larger than the broker accepts, an invalid
record) still stop the bridge at once with the typed error: waiting would not change them.
The same holds for a spill directory that fails a streamed transaction (disk full, directory
gone, read-only): :class:`~bridge.source.errors.SpillError`, waited for as
``dependency="spill directory"``. PostgreSQL connection faults are handled inside the
replication source (it reconnects from the flush position with its own backoff); the
registry's inside the registrar. A table dropped, renamed or rewritten by DDL in the moment
between the initial snapshot's start and its lock on the table is the third case waited out:
the snapshot resumes in a new transaction, as after a restart, instead of stopping the bridge.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from bridge.retry import WAITED_SECONDS, WAITING_FOR, RetryPolicy
from bridge.sink.kafka_errors import PERMANENT_TOPIC_CODES, DeliveryError, TopicCreationError
from bridge.sink.transactions import KafkaTransactionError, ProducerFencedError
from bridge.snapshot.errors import SnapshotTableChangedError
from bridge.source.errors import SpillError

logger = logging.getLogger(__name__)

#: Kafka errors that another attempt cannot fix: the bridge stops with them.
PERMANENT_KAFKA_CODES = PERMANENT_TOPIC_CODES | {
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    "MSG_SIZE_TOO_LARGE",
    "_MSG_SIZE_TOO_LARGE",
    "RECORD_LIST_TOO_LARGE",
    "INVALID_RECORD",
    "CORRUPT_MESSAGE",
    "INVALID_REQUIRED_ACKS",
    "UNSUPPORTED_COMPRESSION_TYPE",
}


def transient_kafka_fault(exc: BaseException) -> bool:
    """Whether streaming again later can get past ``exc``, a Kafka fault."""
    if isinstance(exc, (DeliveryError, TopicCreationError)):
        return exc.code not in PERMANENT_KAFKA_CODES
    return False


def transient_fault(exc: BaseException) -> str | None:
    """The dependency whose transient fault ``exc`` is (``kafka``, ``spill directory``), or
    ``None`` when streaming again would not get past it.

    A spill directory that is full, gone or not writable is an operator's to fix, like a
    broker that is down: the transaction that needed it was not published, nothing after the
    last delivered transaction is confirmed, so the bridge waits and streams it again rather
    than exit into a crash loop."""
    if transient_kafka_fault(exc):
        return "kafka"
    if isinstance(exc, KafkaTransactionError) and not isinstance(exc, ProducerFencedError):
        # An aborted Kafka transaction: the slot was confirmed only as far as the last commit,
        # so streaming again from there sends its records once more (bridge.sink.transactions).
        return "kafka"
    if isinstance(exc, SpillError):
        return "spill directory"
    if isinstance(exc, SnapshotTableChangedError):
        # A table dropped, renamed or rewritten between the initial snapshot's start and its
        # lock on it: the snapshot resumes from its state file in a new transaction, as a
        # restart of the process would (bridge.snapshot.run), and reads the table as it is.
        return "snapshot"
    return None


class Streaming(Protocol):
    """One streaming attempt: runs until ``stop`` is set (returns) or fails (raises)."""

    def run(self, stop: threading.Event) -> None: ...

    def made_progress(self) -> bool:
        """Whether the attempt confirmed anything to PostgreSQL before it ended."""
        ...

    def abandon(self) -> None:
        """Release the attempt's producer after a failure (see the module docstring)."""
        ...


def stream_with_restarts(
    start: Callable[[], Streaming],
    stop: threading.Event,
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], object] | None = None,
) -> None:
    """Run attempts from ``start()`` until ``stop``; start again after a transient Kafka fault.

    ``sleep`` defaults to waiting on ``stop``, so a SIGTERM during a wait ends it at once."""
    wait = sleep or stop.wait
    attempt = 0
    waiting: str | None = None  # the dependency waited for, until an attempt starts
    restarting = False
    while not stop.is_set():
        streaming: Streaming | None = None
        try:
            streaming = start()
            if waiting is not None:
                WAITING_FOR.pop(waiting, None)
            streaming.run(stop)
            return
        except Exception as exc:
            waiting = transient_fault(exc)
            # The first start fails fast (a setting may be wrong); a restart's own start
            # meets the fault it restarts after (a Kafka transaction coordinator still
            # moving, say) and waits it out the same way.
            if waiting is None or stop.is_set() or (streaming is None and not restarting):
                raise
            failure: Exception = exc
        restarting = True
        if streaming is not None:
            streaming.abandon()
        progressed = streaming is not None and streaming.made_progress()
        attempt = 1 if progressed else attempt + 1
        if policy.max_retries != -1 and attempt > policy.max_retries:
            logger.error("%s: %s; gave up after %d restarts", waiting, failure, attempt - 1)
            raise failure
        delay = policy.delay(attempt)
        WAITING_FOR[waiting] = _WAITING_FOR_WHAT[waiting]
        logger.warning(
            "%s: %s (transient); streaming again from the slot's confirmed position "
            "(restart %d%s) in %.1f s",
            waiting,
            failure,
            attempt,
            "" if policy.max_retries == -1 else f" of {policy.max_retries}",
            delay,
        )
        waited = time.monotonic()
        wait(delay)
        WAITED_SECONDS[waiting] = WAITED_SECONDS.get(waiting, 0.0) + time.monotonic() - waited
    if waiting is not None:
        WAITING_FOR.pop(waiting, None)


#: What ``pgbridge status`` says the bridge waits for, per dependency.
_WAITING_FOR_WHAT = {
    "kafka": "delivering records",
    "spill directory": "spilling a transaction",
    "snapshot": "a table changed under the initial snapshot",
}
