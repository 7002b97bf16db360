"""``pgbridge apply`` stopped by SIGTERM or SIGINT between two micro-batches (pure: fake
queries, no Spark; the real job's stop is tests/integration/test_apply_soak.py's)."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from bridge.spark.graceful_stop import BatchAbandoned, GracefulStop, interrupted


@pytest.fixture(autouse=True)
def _py4j_filters_removed() -> Iterator[None]:
    """A requested stop filters py4j's log for the rest of the process (one stop a job): not
    past each test here."""
    yield
    py4j = logging.getLogger("py4j.clientserver")
    for each in list(py4j.filters):
        py4j.removeFilter(each)


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


def test_the_stopped_flag_is_up_before_the_query_is_stopped() -> None:
    """The batch function, which the query's stop waits for, must see the flag meanwhile."""
    stop = GracefulStop(grace_s=0.1)

    class Waiting(Query):
        def stop(self) -> None:
            self.flag_at_stop = stop.stopped.is_set()
            super().stop()

    query = Waiting(batch_s=60)
    stop.watch(query)
    assert not stop.stopped.is_set()
    stop.request("SIGTERM received")
    assert query.stopped.wait(5)
    assert query.flag_at_stop and stop.stopped.is_set()


def test_a_batch_left_at_a_stop_reads_to_spark_as_its_job_group_cancelled() -> None:
    """Spark ends a query stopped mid-batch as stopped, not failed, only if the batch's error
    is a SparkException saying the query's job group (its run id) was cancelled."""
    left = BatchAbandoned("public.t9", "6f1c0a52-run-id")
    text = str(left)
    assert "org.apache.spark.SparkException" in text and "cancelled" in text
    assert "6f1c0a52-run-id" in text and "public.t9" in text
    assert interrupted(left)
    assert not interrupted(RuntimeError("the batch function failed"))


def test_settle_waits_for_the_stops_own_call_to_return() -> None:
    """The job stops its session after settle(): a stop call still under way would fail."""

    class SlowToStop(Query):
        def stop(self) -> None:
            time.sleep(0.3)  # the query's stop waits for its batch function
            super().stop()

    query = SlowToStop(batch_s=60)
    stop = GracefulStop(grace_s=0.05)
    stop.watch(query)
    stop.settle()  # no stop requested: returns at once
    stop.request("SIGTERM received")
    stop.settle()
    assert query.stopped.is_set()


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


def test_what_counts_as_work_a_stop_interrupted() -> None:
    cancelled = RuntimeError("An error occurred while calling o3930.collectToPython.\n"
                             ": java.lang.InterruptedException")  # fmt: skip
    assert interrupted(cancelled)
    try:
        try:
            raise RuntimeError("[SPARK_JOB_CANCELLED] Job 63 cancelled Query pgbridge-apply")
        except RuntimeError as exc:
            raise ValueError("the MERGE of public.items failed") from exc
    except ValueError as wrapped:
        assert interrupted(wrapped)
    assert not interrupted(RuntimeError("DELTA_SCHEMA_CHANGED: cannot write"))


def test_py4j_report_of_an_interrupted_batch_is_dropped_once_stopping() -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    py4j = logging.getLogger("py4j.clientserver")
    keep = Keep()
    py4j.addHandler(keep)
    try:

        def report(error: BaseException) -> None:
            try:
                raise error
            except BaseException:
                py4j.exception("There was an exception while executing the Python Proxy")

        report(RuntimeError(": java.lang.InterruptedException"))  # no stop yet: kept
        stop = GracefulStop()
        stop.request("SIGTERM received")
        report(RuntimeError(": java.lang.InterruptedException"))  # the stop's: dropped
        report(RuntimeError("NameError: name 'x' is not defined"))  # anything else: kept
    finally:
        py4j.removeHandler(keep)
    assert [str(r.exc_info[1]) for r in records if r.exc_info] == [
        ": java.lang.InterruptedException",
        "NameError: name 'x' is not defined",
    ]
