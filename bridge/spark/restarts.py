"""Restart the apply query after a transient failure instead of ending ``pgbridge apply``.

A continuously running apply job (not ``--available-now``) fails its streaming query when Kafka
stops answering for longer than Spark's Kafka source retries (offset fetches, consumer polls)
or when the registry refuses a lookup for good. Starting the query again from its checkpoint
is always safe: a micro-batch that was not committed to the checkpoint is replayed, and the
Delta writes it already made are skipped by their transaction ids (``txnAppId``/``txnVersion``)
and the per-row ``(commit_lsn, seq)`` guard. So the job waits and restarts, under the same
policy as ``pgbridge run`` (:class:`bridge.retry.RetryPolicy`), while the failure looks
transient; anything else (a bug, a refused schema, a corrupt checkpoint) ends the job with the
error, as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from bridge.retry import WAITED_SECONDS, WAITING_FOR, RetryPolicy

logger = logging.getLogger(__name__)

#: Texts of the JVM exceptions (as the query's error message carries them) that a while of
#: waiting may clear: the broker unreachable, a partition without a leader, the registry down.
TRANSIENT_MARKERS = (
    "org.apache.kafka.common.errors.TimeoutException",
    "org.apache.kafka.common.errors.DisconnectException",
    "org.apache.kafka.common.errors.NotLeaderOrFollowerException",
    "org.apache.kafka.common.errors.LeaderNotAvailableException",
    "org.apache.kafka.common.errors.NetworkException",
    "Timed out waiting for a node assignment",
    "RegistryUnavailableError",
)


def transient_query_failure(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(marker in text for marker in TRANSIENT_MARKERS)


def run_with_restarts(
    start: Callable[[], Any],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], None] = time.sleep,
    stopping: threading.Event | None = None,
) -> None:
    """``start()`` a query and await it; after a transient failure start it again (from its
    checkpoint) after the policy's backoff. Returns when a query ends normally, or once
    ``stopping`` is set (a stop requested while the query failed or waits to start again)."""
    attempt = 0
    while True:
        query = start()
        for name in _DEPENDENCIES:
            WAITING_FOR.pop(name, None)
        try:
            query.awaitTermination()
            return
        except Exception as exc:
            if stopping is not None and stopping.is_set():
                return  # stopped on request: whatever the query's stop raised ends nothing
            if not transient_query_failure(exc):
                raise
            failure = exc
        # A query that ran batches before failing starts the count again.
        attempt = 1 if getattr(query, "recentProgress", None) else attempt + 1
        if policy.max_retries != -1 and attempt > policy.max_retries:
            raise failure
        delay = policy.delay(attempt)
        dependency = _dependency(failure)
        WAITING_FOR[dependency] = "the apply query"
        logger.warning(
            "the apply query failed transiently (%s); starting it again from its checkpoint "
            "(restart %d) in %.1f s",
            str(failure).splitlines()[0][:300],
            attempt,
            delay,
        )
        if stopping is None:
            sleep(delay)
        elif stopping.wait(delay):
            return  # stopped while waiting to start the query again
        WAITED_SECONDS[dependency] = WAITED_SECONDS.get(dependency, 0.0) + delay


_DEPENDENCIES = ("kafka", "schema registry")


def _dependency(exc: BaseException) -> str:
    return "schema registry" if "RegistryUnavailableError" in str(exc) else "kafka"
