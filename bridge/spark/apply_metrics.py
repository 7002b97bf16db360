"""The apply job's Prometheus metrics (served by ``pgbridge apply --metrics-port``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "BATCH_PHASE_SECONDS",
    "CHANGES_APPLIED",
    "COMMIT_TO_VISIBLE",
    "DEAD_LETTERS",
    "FRESHNESS",
    "KEY_CACHE_BYTES",
    "KEY_CACHE_READS",
    "TABLES_HELD",
    "TABLE_FAILURES",
    "TABLE_LAG",
]

CHANGES_APPLIED = Counter(
    "pgbridge_apply_changes", "Change records applied to Delta (before per-key folding)", ["table"]
)
DEAD_LETTERS = Counter("pgbridge_apply_dead_letters", "Records written to the dead-letter table")
TABLE_LAG = Gauge(
    "pgbridge_apply_table_lag_seconds",
    "Per table: seconds from the PostgreSQL commit of the newest change its last MERGE applied "
    "until that MERGE was done",
    ["table"],
)
TABLE_FAILURES = Counter(
    "pgbridge_apply_table_failures", "Table batches dead-lettered because they failed", ["table"]
)
TABLES_HELD = Gauge(
    "pgbridge_apply_tables_held",
    "Tables held back since a batch of theirs failed: their records wait in the dead-letter "
    "table, in order, for the job to apply them again (bridge.spark.set_aside)",
)
_SECONDS_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
BATCH_PHASE_SECONDS = Histogram(
    "pgbridge_apply_batch_phase_seconds",
    "Wall time of each phase of an apply micro-batch (read: Kafka fetch, framing and grouping; "
    "summary: one job over every table; merge: all tables' MERGEs; dead_letters)",
    ["phase"],
    buckets=_SECONDS_BUCKETS,
)
FRESHNESS = Gauge(
    "pgbridge_apply_freshness_seconds",
    "Seconds from the PostgreSQL commit of the newest change of the last batch until that "
    "batch's Delta commits were done (commit-to-visible)",
)
COMMIT_TO_VISIBLE = Histogram(
    "pgbridge_apply_commit_to_visible_seconds",
    "Per batch: seconds from the PostgreSQL commit of its oldest change until the batch's Delta "
    "commits were done (the worst commit-to-visible delay of the batch)",
    buckets=_SECONDS_BUCKETS,
)
KEY_CACHE_READS = Counter(
    "pgbridge_apply_key_cache_reads",
    "Data files whose key columns the driver's deletion-vector MERGE needed, by where they came "
    "from: hit (kept from an earlier batch) or miss (read from the file); many misses batch "
    "after batch on the same tables: --driver-key-cache-mb is too small for them",
    ["result"],
)
KEY_CACHE_BYTES = Gauge(
    "pgbridge_apply_key_cache_bytes",
    "Bytes of data files' key columns the driver keeps between batches (at most "
    "--driver-key-cache-mb)",
)
