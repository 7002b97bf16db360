"""Streaming restarts after transient Kafka faults (pure: fake attempts, no sleeping)."""

from __future__ import annotations

import errno
import threading

import pytest

from bridge.restarts import stream_with_restarts, transient_fault, transient_kafka_fault
from bridge.retry import WAITING_FOR, RetryPolicy
from bridge.sink.kafka_errors import DeliveryError, TopicCreationError
from bridge.snapshot.errors import SnapshotPermissionError, SnapshotTableChangedError
from bridge.source.errors import SpillError

TIMED_OUT = DeliveryError("shop.public.orders", 0, "_MSG_TIMED_OUT", "Message timed out")
TOO_LARGE = DeliveryError("shop.public.blobs", None, "MSG_SIZE_TOO_LARGE", "too large")


class Attempt:
    """Fails with ``error`` (after confirming something if ``progress``), or runs to a stop."""

    def __init__(self, error: Exception | None, progress: bool = False) -> None:
        self.error, self.progress = error, progress
        self.abandoned = False

    def run(self, stop: threading.Event) -> None:
        if self.error is not None:
            raise self.error
        stop.set()

    def made_progress(self) -> bool:
        return self.progress

    def abandon(self) -> None:
        self.abandoned = True


def run(attempts: list[Attempt], policy: RetryPolicy | None = None) -> list[float]:
    """Feed the attempts in order; the waits between them."""
    queue, waits = list(attempts), []

    def start() -> Attempt:
        return queue.pop(0)

    stream_with_restarts(start, threading.Event(), policy or RetryPolicy(), sleep=waits.append)
    return waits


def test_restarts_a_timed_out_delivery_streams_again_until_a_clean_stop() -> None:
    attempts = [Attempt(TIMED_OUT), Attempt(TIMED_OUT), Attempt(None)]
    waits = run(attempts, RetryPolicy(initial_delay_ms=100, max_delay_ms=1000))
    assert len(waits) == 2 and all(0.1 <= w <= 1.0 for w in waits)
    assert [a.abandoned for a in attempts] == [True, True, False]
    assert "kafka" not in WAITING_FOR


def test_restarts_permanent_kafka_errors_and_other_errors_stop_at_once() -> None:
    with pytest.raises(DeliveryError) as caught:
        run([Attempt(TOO_LARGE)])
    assert caught.value is TOO_LARGE
    with pytest.raises(ValueError):
        run([Attempt(ValueError("a bug"))])


def test_restarts_bounded_by_errors_max_retries() -> None:
    policy = RetryPolicy(max_retries=2, initial_delay_ms=1, max_delay_ms=1)
    with pytest.raises(DeliveryError):
        run([Attempt(TIMED_OUT) for _ in range(3)], policy)


def test_restarts_an_attempt_that_made_progress_counts_from_one_again() -> None:
    policy = RetryPolicy(max_retries=1, initial_delay_ms=1, max_delay_ms=1)
    # Each failure follows delivered work: never more than one consecutive restart.
    attempts = [Attempt(TIMED_OUT, progress=True) for _ in range(4)] + [Attempt(None)]
    assert len(run(attempts, policy)) == 4


def test_restarts_what_counts_as_transient() -> None:
    assert transient_kafka_fault(TIMED_OUT)
    assert transient_kafka_fault(DeliveryError("t", 0, "NOT_ENOUGH_REPLICAS", "x"))
    assert transient_kafka_fault(TopicCreationError("t", "_TIMED_OUT", "no answer"))
    assert not transient_kafka_fault(TOO_LARGE)
    assert not transient_kafka_fault(TopicCreationError("t", "TOPIC_AUTHORIZATION_FAILED", "no"))
    assert not transient_kafka_fault(RuntimeError("x"))


def test_restarts_a_spill_directory_fault_streams_again_and_says_so() -> None:
    """Disk full (or the directory gone) under a streamed transaction: waited out like a
    broker outage, visible as the dependency it waits for."""
    full = SpillError("/var/spool/pgbridge", 812, OSError(errno.ENOSPC, "No space left"))
    assert transient_fault(full) == "spill directory"
    assert transient_fault(TIMED_OUT) == "kafka"
    assert transient_fault(TOO_LARGE) is None and transient_fault(ValueError()) is None
    # DDL between the initial snapshot's start and its lock on a table: resumed, not fatal.
    renamed = SnapshotTableChangedError("public.t", "dropped, renamed or altered during it")
    assert transient_fault(renamed) == "snapshot"
    assert transient_fault(SnapshotPermissionError("public.t", "permission denied")) is None
    seen: list[dict[str, str]] = []

    def start() -> Attempt:
        seen.append(dict(WAITING_FOR))
        return attempts.pop(0)

    attempts = [Attempt(full), Attempt(full), Attempt(None)]
    waits: list[float] = []
    stream_with_restarts(start, threading.Event(), RetryPolicy(), sleep=waits.append)
    assert len(waits) == 2
    # (WAITING_FOR is the process's: other dependencies may have entries of their own.)
    assert "spill directory" not in seen[0]
    assert seen[1].get("spill directory") == "spilling a transaction"
    assert "spill directory" not in WAITING_FOR


def test_restarts_a_restart_whose_own_start_fails_transiently_is_retried() -> None:
    """A restart's start meets the fault it restarts after (Kafka still moving); the first
    start of the process fails fast instead (a setting may be wrong)."""
    attempts: list[Attempt | Exception] = [Attempt(TIMED_OUT), TIMED_OUT, Attempt(None)]

    def start() -> Attempt:
        item = attempts.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    waits: list[float] = []
    stream_with_restarts(start, threading.Event(), RetryPolicy(), sleep=waits.append)
    assert len(waits) == 2 and not attempts

    def fails_at_once() -> Attempt:
        raise TIMED_OUT

    with pytest.raises(DeliveryError):
        stream_with_restarts(fails_at_once, threading.Event(), RetryPolicy())
