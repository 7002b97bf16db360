"""The pipeline's metrics hooks, batched onto :class:`~bridge.ops.metrics.BridgeMetrics`.

The pipeline calls these hooks per event on its hot path; Prometheus client calls take a lock
each, so counts are kept in a plain dict and pushed at most every ``interval`` seconds.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from collections.abc import Callable

from bridge.ops.metrics import BridgeMetrics
from bridge.pgoutput.lsn import Lsn


class MetricsObserver:
    def __init__(
        self,
        metrics: BridgeMetrics,
        received: Callable[[], tuple[int, int | None]],
        in_flight_records: Callable[[], int],
        interval: float = 0.5,
    ) -> None:
        """``received`` returns (newest received LSN, server WAL end or None);
        ``in_flight_records`` the publisher's count of records awaiting acknowledgement."""
        self.metrics = metrics
        self._received = received
        self._in_flight_records = in_flight_records
        self._interval = interval
        self._next = 0.0
        self._events: Counter[tuple[str, str]] = Counter()
        self._transactions = 0
        self._last_commit_us: int | None = None

    def on_events(self, table: str, op: str, count: int) -> None:
        self._events[(table, op)] += count

    def on_transaction(self, commit_ts_unix_us: int, end_lsn: Lsn) -> None:
        self._transactions += 1
        self._last_commit_us = commit_ts_unix_us

    def on_acknowledged(self, flush_lsn: Lsn, in_flight: int) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self._interval
        self.push(flush_lsn)

    def push(self, flush_lsn: Lsn) -> None:
        """Hand the buffered counts and the current positions to the metrics."""
        m = self.metrics
        for (table, op), count in self._events.items():
            m.event(table, op, count)
        self._events.clear()
        for _ in range(self._transactions - 1):
            m.transaction()
        if self._transactions:
            commit = (
                dt.datetime.fromtimestamp(self._last_commit_us / 1e6, dt.UTC)
                if self._last_commit_us
                else None
            )
            m.transaction(commit)
        self._transactions = 0
        lsn, wal_end = self._received()
        m.received(lsn, wal_end)
        m.acknowledged(int(flush_lsn))
        m.in_flight(self._in_flight_records())
