"""The apply query restarted after transient failures (pure: fake queries, no Spark)."""

from __future__ import annotations

import threading
import time

import pytest

from bridge.retry import WAITING_FOR, RetryPolicy
from bridge.spark.restarts import run_with_restarts, transient_query_failure

KAFKA_DOWN = RuntimeError(
    "[STREAM_FAILED] Query [id = 1] terminated with exception: "
    "org.apache.kafka.common.errors.TimeoutException: Timed out waiting for a node assignment."
)
BUG = RuntimeError("AnalysisException: cannot resolve column")


class Query:
    def __init__(self, error: Exception | None, progressed: bool = False) -> None:
        self.error = error
        self.recentProgress = [{"batchId": 0}] if progressed else []

    def awaitTermination(self) -> None:
        if self.error is not None:
            raise self.error


def run(queries: list[Query], policy: RetryPolicy | None = None) -> list[float]:
    pending, waits = list(queries), []
    run_with_restarts(
        lambda: pending.pop(0),
        policy or RetryPolicy(initial_delay_ms=1, max_delay_ms=1),
        sleep=waits.append,
    )
    return waits


def test_apply_query_restarts_after_kafka_timeouts_until_it_ends() -> None:
    assert len(run([Query(KAFKA_DOWN), Query(KAFKA_DOWN), Query(None)])) == 2
    assert "kafka" not in WAITING_FOR


def test_apply_query_other_failures_end_the_job_at_once() -> None:
    with pytest.raises(RuntimeError, match="cannot resolve"):
        run([Query(BUG)])


def test_apply_query_restarts_bounded_unless_the_query_made_progress() -> None:
    bounded = RetryPolicy(max_retries=1, initial_delay_ms=1, max_delay_ms=1)
    with pytest.raises(RuntimeError, match="TimeoutException"):
        run([Query(KAFKA_DOWN), Query(KAFKA_DOWN)], bounded)
    progressed = [Query(KAFKA_DOWN, progressed=True) for _ in range(3)] + [Query(None)]
    assert len(run(progressed, bounded)) == 3


def test_apply_query_what_counts_as_transient() -> None:
    assert transient_query_failure(KAFKA_DOWN)
    assert transient_query_failure(RuntimeError("RegistryUnavailableError: schema id 7: 503"))
    assert not transient_query_failure(BUG)


def test_apply_query_not_restarted_once_a_stop_is_requested() -> None:
    stopping = threading.Event()
    stopping.set()
    pending = [Query(KAFKA_DOWN), Query(None)]
    # A failure after the stop was asked for (the query's stop may raise) ends the run quietly,
    # and a bug too: the job was stopping anyway.
    run_with_restarts(lambda: pending.pop(0), RetryPolicy(), stopping=stopping)
    assert len(pending) == 1
    run_with_restarts(lambda: Query(BUG), RetryPolicy(), stopping=stopping)


def test_apply_query_stop_requested_during_the_backoff_ends_the_wait() -> None:
    stopping = threading.Event()
    threading.Timer(0.2, stopping.set).start()
    started = time.monotonic()
    pending = [Query(KAFKA_DOWN), Query(None)]
    run_with_restarts(
        lambda: pending.pop(0),
        RetryPolicy(initial_delay_ms=60_000, max_delay_ms=60_000),
        stopping=stopping,
    )
    assert time.monotonic() - started < 10
    assert len(pending) == 1  # not started again
