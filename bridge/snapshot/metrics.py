"""Prometheus figures of the snapshot under way, read from its progress on each scrape.

Exposed (with the bridge's ``pgbridge_`` namespace)::

    pgbridge_snapshot_running                   1 while a snapshot is copying
    pgbridge_snapshot_rows{table}               rows handed to Kafka (done chunks acknowledged)
    pgbridge_snapshot_rows_estimated{table}     pg_class.reltuples when planned
    pgbridge_snapshot_bytes{table}              COPY bytes read
    pgbridge_snapshot_chunks{table}             chunks of the plan
    pgbridge_snapshot_chunks_done{table}        chunks recorded as done (acknowledged)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bridge.snapshot import progress
from bridge.snapshot.progress import TableFigures

__all__ = ["SnapshotCollector"]


class SnapshotCollector(Collector):
    """Reads :data:`bridge.snapshot.progress.CURRENT` (the copier sets it) on each scrape."""

    def __init__(self, namespace: str = "pgbridge") -> None:
        self.prefix = f"{namespace}_snapshot"

    def collect(self) -> Iterator[Metric]:
        current = progress.CURRENT
        running = GaugeMetricFamily(f"{self.prefix}_running", "1 while a snapshot is copying")
        running.add_metric([], 1.0 if current is not None and current.running else 0.0)
        yield running
        families: dict[str, tuple[str, Callable[[TableFigures], int]]] = {
            "rows": ("Snapshot rows handed to Kafka", lambda f: f.rows),
            "rows_estimated": ("Rows estimated (pg_class.reltuples)", lambda f: f.estimated_rows),
            "bytes": ("Snapshot COPY bytes read", lambda f: f.nbytes),
            "chunks": ("Chunks of the table's plan", lambda f: f.chunks),
            "chunks_done": ("Chunks recorded as done", lambda f: f.chunks_done),
        }
        tables = list(current.tables.values()) if current is not None else []
        for name, (doc, value) in families.items():
            family = GaugeMetricFamily(f"{self.prefix}_{name}", doc, labels=["table"])
            for figures in tables:
                family.add_metric([figures.table], float(value(figures)))
            yield family
