"""Prometheus figures of the snapshot under way, read from its progress on each scrape.

Exposed (with the bridge's ``pgbridge_`` namespace)::

    pgbridge_snapshot_running                   1 while a snapshot is copying
    pgbridge_snapshot_rows{table}               rows handed to Kafka (done chunks acknowledged)
    pgbridge_snapshot_rows_estimated{table}     pg_class.reltuples when planned
    pgbridge_snapshot_bytes{table}              COPY bytes read
    pgbridge_snapshot_chunks{table}             chunks of the plan
    pgbridge_snapshot_chunks_done{table}        chunks recorded as done (acknowledged)

and of incremental snapshots (bridge.snapshot.incremental), as the running bridge knows them::

    pgbridge_incremental_snapshot_running       1 while a table is being copied (not paused)
    pgbridge_incremental_snapshot_paused        1 while paused
    pgbridge_incremental_snapshot_rows{table}   rows published
    pgbridge_incremental_snapshot_chunks{table} chunks published
    pgbridge_incremental_snapshot_done{table}   1 once the table is copied
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bridge.snapshot import incremental, progress
from bridge.snapshot.progress import TableFigures

__all__ = ["IncrementalCollector", "SnapshotCollector"]


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


class IncrementalCollector(Collector):
    """Reads :data:`bridge.snapshot.incremental.CURRENT` (the running snapshotter's state)."""

    def __init__(self, namespace: str = "pgbridge") -> None:
        self.prefix = f"{namespace}_incremental_snapshot"

    def collect(self) -> Iterator[Metric]:
        current = incremental.CURRENT
        state = current.state if current is not None else None
        running = GaugeMetricFamily(f"{self.prefix}_running", "1 while a table is copied")
        copying = state is not None and state.running and not state.paused
        running.add_metric([], 1.0 if copying else 0.0)
        yield running
        paused = GaugeMetricFamily(f"{self.prefix}_paused", "1 while paused")
        paused.add_metric([], 1.0 if state is not None and state.paused else 0.0)
        yield paused
        tasks = state.tables if state is not None else []
        for name, doc in (
            ("rows", "Incremental snapshot rows published"),
            ("chunks", "Incremental snapshot chunks published"),
            ("done", "1 once the table is copied"),
        ):
            family = GaugeMetricFamily(f"{self.prefix}_{name}", doc, labels=["table"])
            for task in tasks:
                value = {"rows": task.rows, "chunks": task.chunks}.get(
                    name, 1 if task.status == "done" else 0
                )
                family.add_metric([task.table], float(value))
            yield family
