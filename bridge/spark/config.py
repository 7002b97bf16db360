"""Configuration of the apply job (change topics -> Delta Lake): a validated frozen dataclass.

Where tables land: ``<delta_base>/<schema>/<table>`` with each name made a safe, unambiguous
path segment by :func:`path_segment` (percent-encoding of every character outside
``[A-Za-z0-9_.-]``, and of a leading ``_`` or ``.``), so any PostgreSQL identifier (spaces, dots,
slashes, quotes, unicode) has a directory of its own that no other name maps to, and none
collides with the job's own ``_history`` and ``_pgbridge_positions`` tables beside them.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from bridge.errors import ConfigError
from bridge.routing import DEFAULT_KEY_FIELD
from bridge.schema import table_topic
from bridge.spark.file_columns import DEFAULT_CACHE_MB

__all__ = ["ApplyConfig", "delta_table", "path_segment"]

# Kafka topic names: ASCII letters, digits, '.', '_' and '-'.
_TOPIC_CHARS = re.compile(r"^[A-Za-z0-9._-]+$")
# A Spark trigger interval such as "10 seconds", "500 milliseconds", "1 minute".
# A table topic: <prefix>.<schema>.<table>, where schema and table may hold dots themselves;
# the other topics under the prefix (messages, transaction, dead_letter) have one segment.
_TABLE_TOPIC_TAIL = r"\..+\..+"
# Characters kept as they are in a Delta path segment (the rest is percent-encoded).
_PATH_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
#: How batches reach Delta: a MERGE per table and batch (bridge.spark.job), or one changelog
#: commit per batch with views and compaction behind (bridge.spark.changelog).
APPLY_MODES = ("merge", "changelog")
#: Precision and scale of the Delta decimal an unconstrained numeric becomes.
DEFAULT_VARIABLE_DECIMAL = (38, 18)
#: Units of the intervals the job takes (Spark's trigger intervals), in seconds.
_UNIT_SECONDS = {
    **dict.fromkeys(("ms", "millisecond", "milliseconds"), 0.001),
    **dict.fromkeys(("s", "sec", "second", "seconds"), 1.0),
    **dict.fromkeys(("min", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hour", "hours"), 3600.0),
}
_INTERVAL = re.compile(r"^(\d+(?:\.\d+)?)\s*(" + "|".join(_UNIT_SECONDS) + r")$")


def interval_seconds(text: str) -> float:
    """An interval as the job's settings take it (``"5 minutes"``, ``"500 ms"``), in seconds."""
    match = _INTERVAL.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not an interval")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def path_segment(name: str) -> str:
    """``name`` as one path segment: unambiguous (``%`` is encoded too) and never hidden.

    Readable for ordinary names (``public``, ``order_items`` stay as they are); ``Weird Schema``
    becomes ``Weird%20Schema``, ``naïve`` ``na%C3%AFve``. A leading ``_`` or ``.`` is encoded,
    because Spark and Hadoop treat such files as hidden and the job keeps its own tables under
    ``_``-names beside the source tables.
    """
    out = []
    for i, char in enumerate(name):
        if char in _PATH_SAFE and not (i == 0 and char in "_."):
            out.append(char)
        else:
            out.extend(f"%{b:02X}" for b in char.encode("utf-8"))
    return "".join(out)


@dataclass(frozen=True, slots=True)
class ApplyConfig:
    """What the apply job reads, where it writes, and how often.

    ``tables`` selects tables explicitly by their topic name after the prefix (``public.orders``,
    ``Weird_Schema.Mixed.Case-Table``: topics are ``<prefix>.<schema>.<table>`` with characters
    Kafka refuses replaced by ``_``); empty means every change topic under the prefix
    (``subscribePattern``: at least two segments after the prefix), which also picks up tables
    created later. ``delta_base``, ``checkpoint_location`` and ``dead_letter_location`` are
    Hadoop paths or URIs (``/data/delta``, ``s3a://bucket/delta``). Each source table lands at
    ``<delta_base>/<schema>/<table>`` (:meth:`table_path`), named from the records' source block
    (the topic name cannot be split back into schema and table).

    ``variable_decimal`` is the (precision, scale) of the Delta decimal an unconstrained
    ``numeric`` column (Debezium's ``VariableScaleDecimal``) becomes; a value that does not fit
    it exactly is stored as null and its record is also written to the dead-letter table with
    the column named in the reason, so the exact value is kept (in the raw record).

    ``trigger_interval`` is the micro-batch period: a second by default, so a change is in
    Delta seconds after its commit (a batch starts only when there is something to read; a busy
    table commits at most once per period, and the job compacts a table past
    :data:`bridge.spark.merge.COMPACT_AT_FILES` files). ``available_now`` processes what
    is in the topics and stops (for catch-up runs and tests). ``starting_offsets`` only matters
    for the first run of a checkpoint: afterwards the checkpoint decides.
    ``max_offsets_per_trigger`` bounds a micro-batch's Kafka records; None sizes it from
    Spark's memory when the query starts (:mod:`bridge.spark.resources`), so no batch holds
    more than the heap can.
    ``spark_conf`` is applied to the session :func:`bridge.spark.job.run_apply` builds itself.

    ``app_id`` names the job in Delta's idempotent-write bookkeeping (``txnAppId``); by default
    it is derived from the checkpoint location, because batch ids restart with a new checkpoint
    and must not be compared with those of an old one. ``parallel_tables`` tables of a batch are
    merged at the same time. A table's batch of at most ``driver_write_rows`` changes, into a
    table under 32 MiB on a local path, is written by the driver with delta-rs instead of Spark
    jobs (:mod:`bridge.spark.driver_merge`, :mod:`bridge.spark.driver_rewrite` for keyed
    tables under 1 MiB, and :mod:`bridge.spark.driver_multiset` for tables without key
    columns: milliseconds instead of seconds per table); 0 writes every table
    with Spark. With ``driver_decode`` (the default) such a table's records
    are also decoded in the driver, with no Spark plan per table, when the job wrote the table
    before with the same columns (:mod:`bridge.spark.driver_lane`). With ``task_lane`` (the
    default) a keyed topic's batch of at least ``lane_min_records`` records (and more than
    ``driver_write_rows``) of new keys into such a table is decoded and written as Parquet
    files by Spark's Python tasks, committed by the driver (:mod:`bridge.spark.task_lane`);
    with ``lane_reads_kafka`` (the default) those tasks read the batch's records from Kafka
    themselves where they can (:mod:`bridge.spark.kafka_ranges`), and so does the driver for
    a small batch (:mod:`bridge.spark.driver_read`).
    ``history`` also keeps an SCD type 2 table per source table under ``history_base``
    (default ``<delta_base>/_history``), see :mod:`bridge.spark.history`.
    ``deletion_vectors`` creates tables with Delta deletion vectors, so a MERGE that updates a
    few rows of a file marks them instead of rewriting the file (readers need Delta reader
    version 3; turn it off for older readers). Tables under 32 MiB rewrite the files a MERGE
    touches all the same, which costs less there (``merge.DELETION_VECTORS_MIN_TABLE_BYTES``).

    ``dropped_columns``: what a column dropped in the source (absent from a table's newest
    schema version, not renamed) does to its Delta column: ``keep`` (the default: the column
    stays, with the values rows had, as a record of what was) or ``drop`` (the Delta column is
    dropped too; older versions' records in the same batch lose it as well).

    ``routed_key``: key.field.name, key.field.regex, key.field.replacement of a ``pgbridge
    run`` that routes tables into shared topics (:mod:`bridge.routing`): a routed topic lands
    in one Delta table named by the topic (:meth:`delta_table`), with that key field as a
    column computed from each record's source table as the bridge computes it.

    ``held_retry_interval``: how often a running job applies the records of tables held since
    a batch of theirs failed again (bridge.spark.set_aside); every start does too.

    ``mode``: ``merge`` (the default) MERGEs each table's changes at every micro-batch;
    ``changelog`` appends each micro-batch to one changelog table, serves current state through
    :func:`bridge.spark.changelog.current_state`, and compacts into the tables every
    ``compaction_interval`` (see :mod:`bridge.spark.changelog`).
    """

    topic_prefix: str
    bootstrap_servers: str
    registry_url: str
    delta_base: str
    checkpoint_location: str
    dead_letter_location: str
    tables: tuple[str, ...] = ()
    trigger_interval: str = "1 second"
    available_now: bool = False
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    app_id: str = ""
    # Often credentials (sasl.jaas.config, basic.auth.user.info): never in repr or logs.
    kafka_options: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    registry_options: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    query_name: str = "pgbridge-apply"
    parallel_tables: int = 2
    driver_write_rows: int = 50_000
    # MiB of the driver's memory for data files' key columns, kept between batches by its
    # deletion-vector MERGE (bridge.spark.file_columns); 0: read again each batch.
    driver_key_cache_mb: int = DEFAULT_CACHE_MB
    driver_decode: bool = True
    task_lane: bool = True
    lane_min_records: int = 50_000
    lane_reads_kafka: bool = True
    history: bool = False
    deletion_vectors: bool = True
    dropped_columns: str = "keep"
    history_base: str = ""
    variable_decimal: tuple[int, int] = DEFAULT_VARIABLE_DECIMAL
    mode: str = "merge"
    compaction_interval: str = "60 seconds"
    held_retry_interval: str = "5 minutes"
    # Settings of the session pgbridge apply builds itself (not of one it is given).
    spark_conf: tuple[tuple[str, str], ...] = ()
    # The master of the session pgbridge apply builds; None: PGBRIDGE_SPARK_MASTER, else Spark's.
    spark_master: str | None = None
    # Prometheus /metrics of the job (its pgbridge_apply_* metrics); 0: no endpoint.
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    routed_key: tuple[str, str | None, str | None] = (DEFAULT_KEY_FIELD, None, None)

    def __post_init__(self) -> None:
        if not self.topic_prefix or not _TOPIC_CHARS.match(self.topic_prefix):
            raise ConfigError("topic_prefix", f"{self.topic_prefix!r} is not a valid topic prefix")
        if not self.bootstrap_servers.strip():
            raise ConfigError("bootstrap_servers", "must not be empty")
        if not re.match(r"^https?://[^/\s]+", self.registry_url):
            raise ConfigError("registry_url", f"{self.registry_url!r} is not an http(s) URL")
        for key in ("delta_base", "checkpoint_location", "dead_letter_location"):
            if not str(getattr(self, key)).strip():
                raise ConfigError(key, "must not be empty")
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigError("metrics_port", f"{self.metrics_port} is not a TCP port (0: off)")
        if self.dropped_columns not in ("keep", "drop"):
            raise ConfigError("dropped_columns", f"{self.dropped_columns!r} is not keep or drop")
        if len({self.delta_base.rstrip("/"), self.dead_letter_location.rstrip("/")}) == 1:
            raise ConfigError("dead_letter_location", "must differ from delta_base")
        for table in self.tables:
            if not _TOPIC_CHARS.match(table) or not re.fullmatch(r".+\..+", table):
                raise ConfigError("tables", f"{table!r} is not a topic's <schema>.<table>")
        precision, scale = self.variable_decimal
        if not (1 <= precision <= 38 and 0 <= scale <= precision):
            raise ConfigError(
                "variable_decimal", f"({precision}, {scale}) is not a Spark decimal(p, s)"
            )
        if not self.available_now and not _INTERVAL.match(self.trigger_interval.strip()):
            raise ConfigError("trigger_interval", f"{self.trigger_interval!r} is not an interval")
        offsets = self.starting_offsets.strip()
        if offsets not in ("earliest", "latest") and not offsets.startswith("{"):
            raise ConfigError(
                "starting_offsets", "must be 'earliest', 'latest' or Spark's per-partition JSON"
            )
        if self.mode not in APPLY_MODES:
            raise ConfigError("mode", f"{self.mode!r} is not one of {', '.join(APPLY_MODES)}")
        if not _INTERVAL.match(self.held_retry_interval.strip()):
            raise ConfigError(
                "held_retry_interval", f"{self.held_retry_interval!r} is not an interval"
            )
        if not _INTERVAL.match(self.compaction_interval.strip()):
            raise ConfigError(
                "compaction_interval", f"{self.compaction_interval!r} is not an interval"
            )
        if self.parallel_tables < 1:
            raise ConfigError("parallel_tables", "must be at least 1")
        if self.driver_write_rows < 0:
            raise ConfigError("driver_write_rows", "must be 0 (off) or more")
        if self.driver_key_cache_mb < 0:
            raise ConfigError("driver_key_cache_mb", "must be 0 (off) or more")
        if self.lane_min_records < 1:
            raise ConfigError("lane_min_records", "must be at least 1")
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger <= 0:
            raise ConfigError("max_offsets_per_trigger", "must be positive")
        for key, value in self.kafka_options:
            # An empty ssl.endpoint.identification.algorithm is how Java turns the check off.
            empty = not value and key != "ssl.endpoint.identification.algorithm"
            if not key or key.startswith("kafka.") or empty:
                raise ConfigError(
                    "kafka_options", f"{key!r}: give consumer properties without 'kafka.'"
                )

    @property
    def held_retry_seconds(self) -> float:
        return interval_seconds(self.held_retry_interval)

    @property
    def txn_app_id(self) -> str:
        """The ``txnAppId`` for Delta's idempotent writes (see the class docs)."""
        if self.app_id:
            return self.app_id
        digest = hashlib.sha256(self.checkpoint_location.rstrip("/").encode()).hexdigest()
        return f"pgbridge-apply-{digest[:16]}"

    def table_path(self, schema: str, table: str) -> str:
        """Where the Delta table of ``schema.table`` (PostgreSQL's names, as they are) lives."""
        return f"{self.delta_base.rstrip('/')}/{path_segment(schema)}/{path_segment(table)}"

    def history_path(self, schema: str, table: str) -> str:
        """Where the SCD type 2 history table of ``schema.table`` lives."""
        base = self.history_base or f"{self.delta_base.rstrip('/')}/_history"
        return f"{base.rstrip('/')}/{path_segment(schema)}/{path_segment(table)}"

    @property
    def positions_path(self) -> str:
        """The Delta table of applied positions of keyless tables (see bridge.spark.multiset)."""
        return f"{self.delta_base.rstrip('/')}/_pgbridge_positions"

    def kafka_source_options(self) -> dict[str, str]:
        """The options of ``spark.readStream.format("kafka")`` for this configuration."""
        options = {
            "kafka.bootstrap.servers": self.bootstrap_servers,
            "startingOffsets": self.starting_offsets,
            # A topic deleted or compacted away under the job is lost data: fail loudly.
            "failOnDataLoss": "true",
            # Bytes, not strings: the Confluent framing is binary.
            "includeHeaders": "false",
            # Spark's Kafka reader asks for the partition's offset range (two ListOffsets
            # requests) after every poll, and the consumer has already sent its next fetch,
            # which the broker parks for fetch.max.wait.ms (500) at the end of the partition;
            # the broker answers a connection's requests in order, so each topic-partition of
            # a batch waited half a second. Measured, Spark's raw read of 20,000 records over
            # 200 topics: 54.7 s with Kafka's 500 ms, 9.1 s with 50, 3.6 s with 0. Reads are
            # bounded by offsets known to exist, so an immediate answer is never a busy wait.
            # A user's kafka.fetch.max.wait.ms still wins (set below).
            "kafka.fetch.max.wait.ms": "0",
            # Records of an open or aborted Kafka transaction (exactly.once.support) are not
            # changes yet, or never: the Java consumer's default would read them.
            "kafka.isolation.level": "read_committed",
        }
        if self.tables:
            options["subscribe"] = ",".join(f"{self.topic_prefix}.{t}" for t in self.tables)
        else:
            # <prefix>.<schema>.<table> only (schema and table may contain dots): not
            # <prefix>.transaction, <prefix>.messages or <prefix>.dead_letter.
            options["subscribePattern"] = re.escape(self.topic_prefix) + _TABLE_TOPIC_TAIL
        if self.max_offsets_per_trigger is not None:
            options["maxOffsetsPerTrigger"] = str(self.max_offsets_per_trigger)
        options.update({f"kafka.{k}": v for k, v in self.kafka_options})
        return options

    def is_table_topic(self, topic: str) -> bool:
        """Whether ``topic`` is a table's change topic under the prefix (as subscribed)."""
        return is_table_topic(self.topic_prefix, topic)


def delta_table(topic_prefix: str, topic: str, schema: str, table: str) -> tuple[str, str]:
    """The (schema, table) of the Delta table a topic's records from source ``schema.table``
    land in: the source table's own, unless the topic is not that table's own topic (tables
    routed into a shared topic, bridge.routing), then the topic's ``<schema>.<table>`` after
    the prefix (split at its first dot)."""
    if topic == table_topic(topic_prefix, schema, table):
        return schema, table
    routed_schema, _, routed_table = topic[len(topic_prefix) + 1 :].partition(".")
    return routed_schema, routed_table


def is_table_topic(topic_prefix: str, topic: str) -> bool:
    """Whether ``topic`` is a table's change topic under ``topic_prefix``, as the apply job
    subscribes (``<prefix>.<schema>.<table>``, not the prefix's other topics)."""
    return re.fullmatch(re.escape(topic_prefix) + _TABLE_TOPIC_TAIL, topic) is not None
