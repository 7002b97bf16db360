"""Stop ``pgbridge apply`` on SIGTERM or SIGINT the way service managers expect: between two
micro-batches, then exit 0.

systemd, Kubernetes and ``docker stop`` send SIGTERM and wait (30 s by default in Kubernetes)
before SIGKILL. Python's default for SIGTERM ends the process at once, mid-batch, with exit
status -15. Nothing is lost that way (a batch the checkpoint did not commit is applied again at
the next start, its Delta commits skipped by their positions), but the batch's work is done
twice and the stop looks like a crash. So the job waits for the running batch to end (its
progress report), at most ``STOP_GRACE_S`` (under Kubernetes' default grace period), then stops
its streaming query; the query's wait returns, the session stops, and the job exits 0. A job
behind its trigger may have started the next batch meanwhile: that one is interrupted at its
start and applied at the next start. A second signal stops the query at once.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType
from typing import Any

from bridge.spark.errors import first_line

logger = logging.getLogger(__name__)

#: How long a stop waits for the running micro-batch to end before interrupting it.
STOP_GRACE_S = 20.0
#: What the JVM says of work a query's stop interrupted (the batch's Spark jobs cancelled, its
#: thread interrupted in a wait or in I/O).
_INTERRUPTION_MARKERS = (
    "java.lang.InterruptedException",
    "java.io.InterruptedIOException",
    "java.nio.channels.ClosedByInterruptException",
    "SPARK_JOB_CANCELLED",
)


class BatchAbandoned(RuntimeError):
    """The batch function leaves its batch: the job's stop stopped the query before ``what``.

    Nothing of the batch is lost: its checkpoint commit is not written, and the next start
    applies it again, the tables already committed skipped by their positions. Spark tells a
    stop's interruption from a failure by the error's text (``StreamExecution``'s
    ``isInterruptedByStop``: a SparkException saying the query's job group was cancelled), so
    the message says so in those words; the query then ends as stopped, not failed.
    """

    def __init__(self, what: str, job_group: str | None) -> None:
        self.what = f"before {what}"
        super().__init__(
            f"org.apache.spark.SparkException: the job's stop cancelled job group {job_group} "
            f"before {what}; the next start applies the batch again"
        )


def interrupted(error: BaseException) -> bool:
    """Whether ``error`` (or one it came from) is work interrupted by a query's stop: nothing
    about the data, so a table's records must not be set aside for it."""
    seen: BaseException | None = error
    for _ in range(10):  # the chain of causes, bounded
        if seen is None:
            return False
        if isinstance(seen, BatchAbandoned) or any(
            marker in f"{type(seen).__name__}: {seen}" for marker in _INTERRUPTION_MARKERS
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class _InterruptedBatchFilter(logging.Filter):
    """Once a stop is underway, drops py4j's report (with a traceback) of the batch callback
    the stop interrupted: a job behind its trigger may have started a batch, which the stop
    cancels at its start and the next start applies. Any other record passes."""

    def __init__(self, stopping: threading.Event) -> None:
        super().__init__()
        self.stopping = stopping

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (self.stopping.is_set() and error is not None and interrupted(error))


class GracefulStop:
    """Stops the query it watches once asked: by a signal (``install``) or by ``request``."""

    def __init__(self, grace_s: float = STOP_GRACE_S) -> None:
        self.grace_s = grace_s
        self.requested = threading.Event()
        # Set as the watched query is stopped: its running batch leaves what it has not begun.
        self.stopped = threading.Event()
        self._query: Any = None
        self._lock = threading.Lock()
        self._stopper: threading.Thread | None = None

    def install(self) -> None:
        """Handle SIGTERM and SIGINT (only the main thread may: elsewhere, nothing changes)."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)

    def watch(self, query: Any) -> None:
        """The query now running (a restart replaces it); stopped at once if a stop is due."""
        with self._lock:
            self._query = query
        if self.requested.is_set():
            self._stop(query)

    def request(self, reason: str) -> None:
        """Stop the watched query once its running batch ends; again: at once."""
        if self.requested.is_set():
            logger.info("%s again: stopping the query now", reason)
            self._stop(self._query)
            return
        logger.info(
            "%s: stopping once the running batch is committed (at most %.0f s; the checkpoint "
            "keeps the position)",
            reason,
            self.grace_s,
        )
        # py4j logs the failure of a Python callback (the batch function) with its traceback.
        logging.getLogger("py4j.clientserver").addFilter(_InterruptedBatchFilter(self.requested))
        self.requested.set()
        self._stopper = threading.Thread(
            target=self._stop_after_batch, name="graceful-stop", daemon=True
        )
        self._stopper.start()

    def settle(self, timeout_s: float = 10.0) -> None:
        """Wait for the stop's own call to stop the query to return (before the session is
        stopped: a call still under way would fail on a stopped SparkContext)."""
        stopper = self._stopper
        if stopper is not None and stopper is not threading.current_thread():
            stopper.join(timeout_s)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.request(f"{signal.Signals(signum).name} received")

    def _stop_after_batch(self) -> None:
        with self._lock:
            query = self._query
        if query is None:
            return  # not started yet: watch() stops it
        # A job behind its trigger starts the next batch as soon as one ends, so "no trigger
        # active" may never be seen: the end of the running batch is its progress report.
        running = _last_batch(query)
        deadline = time.monotonic() + self.grace_s
        while _trigger_active(query) and _last_batch(query) == running:
            if time.monotonic() > deadline:
                logger.warning(
                    "the running batch did not end within %.0f s; stopping it (the next start "
                    "applies it again, once)",
                    self.grace_s,
                )
                break
            time.sleep(0.02)
        self._stop(query)

    def _stop(self, query: Any) -> None:
        if query is None:
            return
        self.stopped.set()  # before the query's stop, which waits for the batch function
        try:
            query.stop()
        except Exception as exc:  # the query ended meanwhile: nothing left to stop
            logger.info("stopping the query: %s", first_line(exc))


def _trigger_active(query: Any) -> bool:
    """Whether the query is inside a trigger (Spark's ``isTriggerActive``)."""
    try:
        return bool(query.isActive and query.status["isTriggerActive"])
    except Exception:  # the query or its session is gone
        return False


def _last_batch(query: Any) -> int | None:
    """The id of the query's last completed batch (its last progress report)."""
    try:
        progress = query.lastProgress
    except Exception:  # the query or its session is gone
        return None
    return None if not progress else int(progress["batchId"])
