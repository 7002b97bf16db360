"""Prometheus metrics of one bridge, behind a small class the pipeline calls.

Every metric lives in a :class:`~prometheus_client.CollectorRegistry` owned by the
:class:`BridgeMetrics` instance, not in prometheus_client's global registry, so tests (and a
process running several bridges) can create as many as they like without "Duplicated
timeseries" errors. :meth:`BridgeMetrics.serve` exposes them over HTTP.

Exposed (names carry the ``pgbridge_`` namespace)::

    pgbridge_events_total{table, op}        change events published (op: c u d r t m, and
                                            dead_letter for changes set aside)
    pgbridge_transactions_total             source transactions processed
    pgbridge_errors_total{kind}             errors by kind (delivery, decode, schema, source, …)
    pgbridge_in_flight_records              records handed to Kafka and not yet acknowledged
    pgbridge_last_received_lsn              WAL position of the newest message received
    pgbridge_last_acknowledged_lsn          flush position confirmed to PostgreSQL
    pgbridge_server_wal_end_lsn             the server's WAL end as it last reported it
    pgbridge_lag_bytes                      server WAL end - last acknowledged LSN
    pgbridge_lag_milliseconds               now - commit time of the newest processed change
    pgbridge_waiting_for_dependency{dependency}  1 while a transient fault of that dependency
                                            (schema registry, kafka, postgres) is waited out
    pgbridge_retry_wait_seconds_total{dependency}  seconds spent waiting for it since start
    pgbridge_build_info{version}            constant 1
    pgbridge_lossy_values_total{type, reason}  values delivered in a lossy form (clamped,
                                            NaN as null, array reshaped; docs/types.md)
    pgbridge_schema_changes_forced_total{subject}  schema changes the registry refused and
                                            pgbridge registered anyway (evolve)

``lag_bytes`` is what the slot retains on the server (and what a restart would replay);
``lag_milliseconds`` is Debezium's ``MilliSecondsBehindSource``. LSNs are exported as floats,
exact up to 2**53 bytes of WAL (8 PiB), far beyond any real server's lifetime.

The pipeline calls these methods from its own thread; prometheus_client's metric objects are
thread-safe, so the HTTP thread can read them at any time.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable, Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Info, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bridge import __version__
from bridge.retry import WAITED_SECONDS, WAITING_FOR
from bridge.sink.registry import FORCED_SCHEMA_CHANGES
from bridge.snapshot.metrics import IncrementalCollector, SnapshotCollector
from bridge.types.lossy import LOSSY_VALUES

logger = logging.getLogger(__name__)

__all__ = ["BridgeMetrics"]


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class BridgeMetrics:
    """The bridge's metrics; ``clock`` (UTC now) is injectable for tests of the lag."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        namespace: str = "pgbridge",
        clock: Callable[[], dt.datetime] = _utc_now,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self._clock = clock
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._wal_end: int | None = None
        self._acknowledged: int | None = None
        reg, ns = self.registry, namespace
        self._events = Counter(
            "events", "Change events published", ["table", "op"], namespace=ns, registry=reg
        )
        self._transactions = Counter(
            "transactions", "Source transactions processed", namespace=ns, registry=reg
        )
        self._errors = Counter("errors", "Errors by kind", ["kind"], namespace=ns, registry=reg)
        self._in_flight = Gauge(
            "in_flight_records",
            "Records handed to Kafka and not yet acknowledged",
            namespace=ns,
            registry=reg,
        )
        self._received = Gauge(
            "last_received_lsn",
            "WAL position of the newest message received",
            namespace=ns,
            registry=reg,
        )
        self._acked = Gauge(
            "last_acknowledged_lsn",
            "Flush position confirmed to PostgreSQL",
            namespace=ns,
            registry=reg,
        )
        self._server_end = Gauge(
            "server_wal_end_lsn",
            "The server's WAL end as it last reported it",
            namespace=ns,
            registry=reg,
        )
        self._lag_bytes = Gauge(
            "lag_bytes",
            "Server WAL end minus the last acknowledged LSN",
            namespace=ns,
            registry=reg,
        )
        self._exactly_once = Gauge(
            "exactly_once",
            "1: this run delivers exactly once (Kafka transactions); 0: at least once",
            namespace=ns,
            registry=reg,
        )
        self._lag_ms = Gauge(
            "lag_milliseconds",
            "Now minus the commit time of the newest processed change",
            namespace=ns,
            registry=reg,
        )
        # Read from bridge.retry on each scrape: what the bridge is waiting for, and how long
        # it waited in all (a dependency outage shows here, not as an exit).
        reg.register(_Waiting(ns))
        Info("build", "pgbridge version", namespace=ns, registry=reg).info({"version": __version__})
        reg.register(_LossyValues(f"{ns}_lossy_values"))
        reg.register(_ForcedSchemaChanges(f"{ns}_schema_changes_forced"))
        reg.register(SnapshotCollector(ns))  # pgbridge_snapshot_*: see bridge.snapshot.metrics
        reg.register(IncrementalCollector(ns))  # pgbridge_incremental_snapshot_*: the same

    # -- what the pipeline reports ------------------------------------------------------------

    def event(self, table: str, op: str, count: int = 1) -> None:
        """``count`` change events of ``table`` (``schema.table``) with op code ``op``."""
        self._events.labels(table=table, op=op).inc(count)

    def transaction(self, commit_time: dt.datetime | None = None) -> None:
        """A source transaction was processed; ``commit_time`` (aware) updates the time lag."""
        self._transactions.inc()
        if commit_time is not None:
            lag = (self._clock() - commit_time).total_seconds() * 1000
            # A commit "in the future" is clock skew between the hosts, not negative lag.
            self._lag_ms.set(max(0.0, lag))

    def error(self, kind: str) -> None:
        """An error of ``kind`` (``delivery``, ``decode``, ``schema``, ``source``, …)."""
        self._errors.labels(kind=kind).inc()

    def delivery(self, *, exactly_once: bool) -> None:
        """The delivery this run resolved (exactly.once.support, bridge.sink.delivery_mode)."""
        self._exactly_once.set(1 if exactly_once else 0)

    def in_flight(self, records: int) -> None:
        """Records currently awaiting Kafka's acknowledgement (``publisher.in_flight``)."""
        self._in_flight.set(records)

    def received(self, lsn: int, server_wal_end: int | None = None) -> None:
        """The newest message's LSN and, when known, the server's WAL end (from XLogData or a
        keepalive)."""
        self._received.set(lsn)
        if server_wal_end is not None:
            self._wal_end = server_wal_end
            self._server_end.set(server_wal_end)
            self._update_lag_bytes()

    def acknowledged(self, lsn: int) -> None:
        """The flush position confirmed to PostgreSQL."""
        self._acknowledged = lsn
        self._acked.set(lsn)
        self._update_lag_bytes()

    def _update_lag_bytes(self) -> None:
        if self._wal_end is not None and self._acknowledged is not None:
            self._lag_bytes.set(max(0, self._wal_end - self._acknowledged))

    # -- exposition ---------------------------------------------------------------------------

    def serve(self, port: int, host: str = "0.0.0.0") -> int:  # scraped from other hosts
        """Expose ``/metrics`` on ``host:port`` from a daemon thread; returns the bound port
        (useful with ``port=0``, which picks a free one)."""
        if self._server is not None:
            raise RuntimeError("metrics endpoint already running")
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        bound = int(self._server.server_port)
        logger.info("metrics on http://%s:%d/metrics", host, bound)
        return bound

    def close(self) -> None:
        """Stop the HTTP endpoint, if running."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._server = self._thread = None


#: The dependencies the bridge waits for (bridge.retry, bridge.restarts, the source).
DEPENDENCIES = ("schema registry", "kafka", "postgres")


class _Waiting(Collector):
    """Exports :data:`bridge.retry.WAITING_FOR` and :data:`~bridge.retry.WAITED_SECONDS` per
    dependency, read on each scrape: an outage shows here, not as an exit."""

    def __init__(self, namespace: str) -> None:
        self._ns = namespace

    def collect(self) -> Iterator[Metric]:
        waiting = GaugeMetricFamily(
            f"{self._ns}_waiting_for_dependency",
            "1 while a transient fault of this dependency is being waited out",
            labels=["dependency"],
        )
        waited = CounterMetricFamily(
            f"{self._ns}_retry_wait_seconds",
            "Seconds spent waiting for this dependency to recover since start",
            labels=["dependency"],
        )
        now_waiting, totals = WAITING_FOR.copy(), WAITED_SECONDS.copy()  # copies: atomic
        for dependency in sorted({*DEPENDENCIES, *now_waiting, *totals}):
            waiting.add_metric([dependency], float(dependency in now_waiting))
            waited.add_metric([dependency], totals.get(dependency, 0.0))
        yield waiting
        yield waited


class _ForcedSchemaChanges(Collector):
    """Exports :data:`bridge.sink.registry.FORCED_SCHEMA_CHANGES`: schema versions registered
    past a refusal of the subject's compatibility level (``evolve``)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            self._name,
            "Schema changes the registry refused and pgbridge registered anyway, by subject",
            labels=["subject"],
        )
        for subject, count in FORCED_SCHEMA_CHANGES.copy().items():
            family.add_metric([subject], count)
        yield family


class _LossyValues(Collector):
    """Exports :data:`bridge.types.lossy.LOSSY_VALUES`, which the converters count into
    directly (a plain Counter: cheap on the hot path, read only when scraped)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            self._name,
            "Values delivered in a lossy form, by PostgreSQL type and reason",
            labels=["type", "reason"],
        )
        for (type_name, reason), count in LOSSY_VALUES.copy().items():  # copy: atomic
            family.add_metric([type_name, reason], count)
        yield family
