"""Configuration of the apply job (change topics -> Delta Lake): a validated frozen dataclass."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from bridge.errors import ConfigError

__all__ = ["ApplyConfig"]

# Kafka topic names: ASCII letters, digits, '.', '_' and '-'.
_TOPIC_CHARS = re.compile(r"^[A-Za-z0-9._-]+$")
# A Spark trigger interval such as "10 seconds", "500 milliseconds", "1 minute".
_INTERVAL = re.compile(
    r"^\d+(\.\d+)?\s*(ms|millisecond|milliseconds|s|sec|second|seconds|min|minute|minutes|h|hour|hours)$"
)


@dataclass(frozen=True, slots=True)
class ApplyConfig:
    """What the apply job reads, where it writes, and how often.

    ``tables`` selects ``schema.table`` names explicitly (topics ``<prefix>.<schema>.<table>``);
    empty means every change topic under the prefix (``subscribePattern``), which also picks up
    tables created later. ``delta_base``, ``checkpoint_location`` and ``dead_letter_location``
    are Hadoop paths or URIs (``/data/delta``, ``s3a://bucket/delta``). Each source table lands
    at ``<delta_base>/<schema>/<table>``.

    ``trigger_interval`` is the micro-batch period; ``available_now`` processes what is in the
    topics and stops (for catch-up runs and tests). ``starting_offsets`` only matters for the
    first run of a checkpoint: afterwards the checkpoint decides.

    ``app_id`` names the job in Delta's idempotent-write bookkeeping (``txnAppId``); by default
    it is derived from the checkpoint location, because batch ids restart with a new checkpoint
    and must not be compared with those of an old one. ``parallel_tables`` tables of a batch are
    merged at the same time. ``history`` also keeps an SCD type 2 table per source table under
    ``history_base`` (default ``<delta_base>/_history``), see :mod:`bridge.spark.history`.
    ``deletion_vectors`` creates tables with Delta deletion vectors, so a MERGE that updates a
    few rows of a file marks them instead of rewriting the file (readers need Delta reader
    version 3; turn it off for older readers).
    """

    topic_prefix: str
    bootstrap_servers: str
    registry_url: str
    delta_base: str
    checkpoint_location: str
    dead_letter_location: str
    tables: tuple[str, ...] = ()
    trigger_interval: str = "10 seconds"
    available_now: bool = False
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    app_id: str = ""
    kafka_options: tuple[tuple[str, str], ...] = ()
    registry_options: tuple[tuple[str, str], ...] = ()
    query_name: str = "pgbridge-apply"
    parallel_tables: int = 2
    history: bool = False
    deletion_vectors: bool = True
    history_base: str = ""

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
        if len({self.delta_base.rstrip("/"), self.dead_letter_location.rstrip("/")}) == 1:
            raise ConfigError("dead_letter_location", "must differ from delta_base")
        for table in self.tables:
            parts = table.split(".")
            if len(parts) != 2 or "" in parts or not _TOPIC_CHARS.match(table):
                raise ConfigError("tables", f"{table!r} is not schema.table")
        if not self.available_now and not _INTERVAL.match(self.trigger_interval.strip()):
            raise ConfigError("trigger_interval", f"{self.trigger_interval!r} is not an interval")
        offsets = self.starting_offsets.strip()
        if offsets not in ("earliest", "latest") and not offsets.startswith("{"):
            raise ConfigError(
                "starting_offsets", "must be 'earliest', 'latest' or Spark's per-partition JSON"
            )
        if self.parallel_tables < 1:
            raise ConfigError("parallel_tables", "must be at least 1")
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger <= 0:
            raise ConfigError("max_offsets_per_trigger", "must be positive")
        for key, value in self.kafka_options:
            if not key or key.startswith("kafka.") or not value:
                raise ConfigError(
                    "kafka_options", f"{key!r}: give consumer properties without 'kafka.'"
                )

    @property
    def txn_app_id(self) -> str:
        """The ``txnAppId`` for Delta's idempotent writes (see the class docs)."""
        if self.app_id:
            return self.app_id
        digest = hashlib.sha256(self.checkpoint_location.rstrip("/").encode()).hexdigest()
        return f"pgbridge-apply-{digest[:16]}"

    def table_path(self, schema: str, table: str) -> str:
        """Where the Delta table of ``schema.table`` lives."""
        return f"{self.delta_base.rstrip('/')}/{schema}/{table}"

    def history_path(self, schema: str, table: str) -> str:
        """Where the SCD type 2 history table of ``schema.table`` lives."""
        base = self.history_base or f"{self.delta_base.rstrip('/')}/_history"
        return f"{base.rstrip('/')}/{schema}/{table}"

    def kafka_source_options(self) -> dict[str, str]:
        """The options of ``spark.readStream.format("kafka")`` for this configuration."""
        options = {
            "kafka.bootstrap.servers": self.bootstrap_servers,
            "startingOffsets": self.starting_offsets,
            # A topic deleted or compacted away under the job is lost data: fail loudly.
            "failOnDataLoss": "true",
            # Bytes, not strings: the Confluent framing is binary.
            "includeHeaders": "false",
        }
        if self.tables:
            options["subscribe"] = ",".join(f"{self.topic_prefix}.{t}" for t in self.tables)
        else:
            # <prefix>.<schema>.<table> only: not <prefix>.transaction or heartbeat topics.
            options["subscribePattern"] = re.escape(self.topic_prefix) + r"\.[^.]+\.[^.]+"
        if self.max_offsets_per_trigger is not None:
            options["maxOffsetsPerTrigger"] = str(self.max_offsets_per_trigger)
        options.update({f"kafka.{k}": v for k, v in self.kafka_options})
        return options

    def split_topic(self, topic: str) -> tuple[str, str] | None:
        """``(schema, table)`` of a change topic under the prefix, else ``None``."""
        head = self.topic_prefix + "."
        if not topic.startswith(head):
            return None
        parts = topic[len(head) :].split(".")
        if len(parts) != 2 or "" in parts:
            return None
        return parts[0], parts[1]
