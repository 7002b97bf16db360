"""Acknowledgement of snapshot records in bulk, by epochs over a ring of producers.

The snapshot publishes millions of records and only needs to know, per chunk, that all of its
records were acknowledged (to record the chunk as done). A delivery callback per record cost
about a third of the coordinator thread; instead the snapshot's producers report failures
only (:class:`~bridge.sink.publisher.KafkaPublisher` with ``report_successes=False``) and
success is read from a producer's queue running empty.

A producer that is always fed never runs empty, so records go to one producer of a ring at a
time, in numbered *epochs*: records published during epoch ``e`` go to producer
``e % len(ring)``. When the current epoch is old or large enough and the next producer of
the ring is empty, the next epoch starts on it, and the previous producer drains while the
next one is fed. A producer found empty after a poll that raised nothing has delivered every
epoch it was given; :attr:`AckEpochs.acknowledged_below` is the first epoch not known
delivered, and a chunk whose last record went out in an earlier epoch is acknowledged.

Records of different epochs may reach a partition out of order (two producers). Snapshot
records are one per source row, with distinct keys, and consumers order them by
``(commit_lsn, seq)``; the one record whose place matters, the snapshot's ``last``, is
published only after every producer drained (:meth:`AckEpochs.drain`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

__all__ = ["EPOCH_RECORDS", "EPOCH_SECONDS", "AckEpochs"]

#: An epoch ends after this many records or this long (whichever first), once the next
#: producer is empty: it bounds how long a finished chunk waits to be recorded.
EPOCH_RECORDS = 50_000
EPOCH_SECONDS = 0.25


class DrainablePublisher(Protocol):
    """What the epochs need from a publisher (:class:`~bridge.sink.publisher.KafkaPublisher`)."""

    @property
    def outstanding(self) -> int: ...

    def publish(
        self, topic: str, key: bytes | None, value: bytes | None, on_delivered: Callable[[], None]
    ) -> None: ...

    def publish_records(
        self,
        topic: str,
        records: Sequence[tuple[bytes | None, bytes | None]],
        on_delivered: Callable[[], None],
    ) -> None: ...

    def publish_packed(
        self, topic: str, pack: bytearray, count: int, on_delivered: Callable[[], None]
    ) -> None: ...

    def poll(self, timeout: float = 0.0) -> int: ...

    def flush(self, timeout: float) -> int: ...


class AckEpochs:
    """The ring, the current epoch and what is known acknowledged (one thread)."""

    def __init__(self, publishers: Sequence[DrainablePublisher]) -> None:
        if not publishers:
            raise ValueError("at least one publisher")
        self.publishers = list(publishers)
        self.current = 0
        self._records = 0  # published in the current epoch
        self._started = time.monotonic()
        # Per producer: the first epoch given to it since it was last seen empty (None: empty).
        self._oldest: list[int | None] = [None] * len(self.publishers)

    @property
    def publisher(self) -> DrainablePublisher:
        """The producer of the current epoch; call :meth:`sent` for what is published on it."""
        return self.publishers[self.current % len(self.publishers)]

    def sent(self, records: int) -> int:
        """Count ``records`` published on :attr:`publisher`; returns the current epoch."""
        index = self.current % len(self.publishers)
        if self._oldest[index] is None:
            self._oldest[index] = self.current
        self._records += records
        return self.current

    @property
    def acknowledged_below(self) -> int:
        """Every record published in an epoch below this one was acknowledged."""
        pending = [e for e in self._oldest if e is not None]
        return min(pending) if pending else self.current + 1

    def service(self, now: float) -> None:
        """Poll every producer (raises a failed delivery), note the empty ones, and start the
        next epoch when the current one is due and the next producer is empty."""
        for index, publisher in enumerate(self.publishers):
            publisher.poll(0)
            if self._oldest[index] is not None and publisher.outstanding == 0:
                self._oldest[index] = None
        if self._records and (
            self._records >= EPOCH_RECORDS or now - self._started >= EPOCH_SECONDS
        ):
            following = (self.current + 1) % len(self.publishers)
            if self._oldest[following] is None:
                self.current += 1
                self._records = 0
                self._started = now

    def drain(self, timeout: float = 1.0) -> None:
        """Wait until every producer delivered all it was given (raises a failed delivery)."""
        for index, publisher in enumerate(self.publishers):
            while publisher.flush(timeout):
                pass
            if publisher.outstanding == 0:
                self._oldest[index] = None
