"""``pgbridge apply`` stopped by SIGTERM or SIGINT between two micro-batches (pure: fake
queries, no Spark; the real job's stop is tests/integration/test_apply_soak.py's)."""

from __future__ import annotations

import os
import signal
import threading
import time

from bridge.spark.graceful_stop import GracefulStop


class Query:
    """A query whose running batch ends ``batch_s`` after its creation; ``behind``: a query
    behind its trigger, which starts the next batch at once (its trigger is never idle)."""

    def __init__(self, batch_s: float, behind: bool = False) -> None:
        self.batch_ends = time.monotonic() + batch_s
        self.behind = behind
        self.stopped_at: float | None = None
        self.stopped = threading.Event()
        self.isActive = True

    @property
    def status(self) -> dict[str, object]:
        return {"isTriggerActive": self.behind or time.monotonic() < self.batch_ends}

    @property
    def lastProgress(self) -> dict[str, object]:
        return {"batchId": 7 if time.monotonic() >= self.batch_ends else 6}

    def stop(self) -> None:
        self.stopped_at = time.monotonic()
        self.isActive = False
        self.stopped.set()


def test_a_stop_waits_for_the_running_batch_to_end() -> None:
    query = Query(batch_s=0.5)
    stop = GracefulStop()
    stop.watch(query)
    stop.request("SIGTERM received")
    assert stop.requested.is_set()
    assert query.stopped.wait(5)
    assert query.stopped_at is not None and query.stopped_at >= query.batch_ends


def test_a_query_behind_its_trigger_stops_when_the_running_batch_reports() -> None:
    query = Query(batch_s=0.5, behind=True)
    stop = GracefulStop()
    stop.watch(query)
    stop.request("SIGTERM received")
    assert query.stopped.wait(5)
    assert query.stopped_at is not None and 0 <= query.stopped_at - query.batch_ends < 1


def test_a_batch_longer_than_the_grace_period_is_stopped_after_it() -> None:
    query = Query(batch_s=60)
    stop = GracefulStop(grace_s=0.3)
    stop.watch(query)
    started = time.monotonic()
    stop.request("SIGTERM received")
    assert query.stopped.wait(5)
    assert query.stopped_at is not None and 0.3 <= query.stopped_at - started < 5


def test_a_second_request_stops_at_once() -> None:
    query = Query(batch_s=60)
    stop = GracefulStop()
    stop.watch(query)
    stop.request("SIGTERM received")
    stop.request("SIGINT received")
    assert query.stopped.wait(1)


def test_a_query_started_after_the_request_is_stopped_when_watched() -> None:
    stop = GracefulStop()
    stop.request("SIGTERM received")  # between two restarts: no query yet
    query = Query(batch_s=0)
    stop.watch(query)
    assert query.stopped.is_set()


def test_sigterm_requests_the_stop_in_the_main_thread() -> None:
    query = Query(batch_s=0)
    stop = GracefulStop()
    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        stop.install()
        stop.watch(query)
        os.kill(os.getpid(), signal.SIGTERM)
        assert query.stopped.wait(5)
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
