"""The settings, as frozen dataclasses: what the rest of pgbridge reads.

A field that is a configuration key says so (:func:`key_field`): its default is the key's, from
the key table (:mod:`bridge.config.keys`), and :meth:`bridge.config.sections.Values.fill`
sets it from the key's value. See :mod:`bridge.config` for how settings are merged and named."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bridge.column_controls import ColumnControls, ColumnRule
from bridge.config.basics import Secret, reveal
from bridge.config.keys import KEY_SPECS
from bridge.retry import RetryPolicy
from bridge.routing import TopicRouter


def key_field(name: str) -> Any:
    """A field holding configuration key ``name``, whose default is the key's (the key table
    holds defaults as their parsers produce them)."""
    return field(default=KEY_SPECS[name].default, metadata={"key": name})


def derived_field(name: str, default: object) -> Any:
    """A field holding configuration key ``name`` as its builder (bridge.config.sections)
    derives it, from other keys or checked there (required fields spell the same metadata
    with ``field()``, which type checkers understand as having no default)."""
    return field(default=default, metadata={"key": name, "derived": True})


@dataclass(frozen=True, slots=True)
class DatabaseConfig:
    """Where the source database is; either ``dsn`` or the parts (parts override the DSN's).

    Unset parts fall back to libpq's own defaults (``PGHOST``, the local socket, port 5432, …).
    """

    hostname: str | None = key_field("database.hostname")
    port: int | None = key_field("database.port")
    user: str | None = key_field("database.user")
    password: Secret | None = key_field("database.password")
    dbname: str | None = key_field("database.dbname")
    dsn: Secret | None = key_field("database.dsn")
    sslmode: str | None = key_field("database.sslmode")
    #: CA bundle that verifies the server (verify-ca/-full)
    sslrootcert: Path | None = key_field("database.sslrootcert")
    #: Client certificate (certificate authentication)
    sslcert: Path | None = key_field("database.sslcert")
    sslkey: Path | None = key_field("database.sslkey")
    sslpassword: Secret | None = key_field("database.sslpassword")  # of an encrypted sslkey

    def conninfo(self) -> str:
        """A libpq connection string for psycopg. It contains the password: never log it."""
        from psycopg.conninfo import make_conninfo

        parts: dict[str, Any] = {
            "host": self.hostname,
            "port": self.port,
            "user": self.user,
            "password": self.password.reveal() if self.password else None,
            "dbname": self.dbname,
            "sslmode": self.sslmode,
            "sslrootcert": str(self.sslrootcert) if self.sslrootcert else None,
            "sslcert": str(self.sslcert) if self.sslcert else None,
            "sslkey": str(self.sslkey) if self.sslkey else None,
            "sslpassword": self.sslpassword.reveal() if self.sslpassword else None,
        }
        return make_conninfo(
            self.dsn.reveal() if self.dsn else "",
            **{k: v for k, v in parts.items() if v is not None},
        )


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """The replication slot and publication, and how the stream is consumed."""

    slot_name: str = key_field("slot.name")
    slot_failover: bool = key_field("slot.failover")  # PostgreSQL 17+ failover slot
    publication_name: str = key_field("publication.name")
    publication_autocreate_mode: str = key_field("publication.autocreate.mode")
    #: How often a filtered publication is reconciled and new tables looked for while running.
    publication_refresh_interval_ms: int = key_field("publication.refresh.interval.ms")
    plugin_name: str = key_field("plugin.name")
    pgoutput_binary: bool = key_field("pgoutput.binary")
    status_update_interval_ms: int = key_field("status.update.interval.ms")
    heartbeat_interval_ms: int = key_field("heartbeat.interval.ms")  # 0: no heartbeat
    heartbeat_action_query: str | None = key_field("heartbeat.action.query")
    spill_threshold_bytes: int = key_field("streaming.spill.threshold.bytes")
    spill_dir: Path | None = key_field("streaming.spill.dir")
    #: Taking over a Debezium connector's slot: where its offsets are (bridge.source.takeover).
    debezium_offsets_topic: str | None = key_field("debezium.offsets.topic")
    debezium_offsets_file: Path | None = key_field("debezium.offsets.file")
    debezium_connector_name: str | None = key_field("debezium.connector.name")


@dataclass(frozen=True, slots=True)
class TableFilter:
    """Debezium's include/exclude lists: regular expressions that must match the whole name.

    Table patterns match ``schema.table``, schema patterns match ``schema``. An include list
    and the matching exclude list are mutually exclusive, as in Debezium.
    """

    table_include: tuple[str, ...] = key_field("table.include.list")
    table_exclude: tuple[str, ...] = key_field("table.exclude.list")
    schema_include: tuple[str, ...] = key_field("schema.include.list")
    schema_exclude: tuple[str, ...] = key_field("schema.exclude.list")
    #: Never captured, whatever the lists say: the signal table (bridge.signals).
    never: tuple[str, ...] = ()

    def includes(self, schema: str, table: str) -> bool:
        """Whether changes of ``schema.table`` are captured."""
        qualified = f"{schema}.{table}"
        if qualified in self.never:
            return False
        if self.schema_include and not _any_match(self.schema_include, schema):
            return False
        if self.schema_exclude and _any_match(self.schema_exclude, schema):
            return False
        if self.table_include and not _any_match(self.table_include, qualified):
            return False
        return not (self.table_exclude and _any_match(self.table_exclude, qualified))


def _any_match(patterns: Iterable[str], name: str) -> bool:
    return any(re.fullmatch(p, name) for p in patterns)


@dataclass(frozen=True, slots=True)
class EventsConfig:
    """What the change events contain and which extra records are emitted."""

    messages_topic: str = field(metadata={"key": "messages.topic", "derived": True})
    tombstones_on_delete: bool = key_field("tombstones.on.delete")
    decimal_handling_mode: str = key_field("decimal.handling.mode")
    # How PostgreSQL types are represented (bridge.types.TypeOptions; docs/types.md).
    unconstrained_numeric_handling_mode: str = key_field("unconstrained.numeric.handling.mode")
    money_fraction_digits: int = key_field("money.fraction.digits")
    interval_handling_mode: str = key_field("interval.handling.mode")
    time_precision_mode: str = key_field("time.precision.mode")
    timestamptz_handling_mode: str = key_field("timestamptz.handling.mode")
    schema_logical_types: str = key_field("schema.logical.types")
    binary_handling_mode: str = key_field("binary.handling.mode")
    hstore_handling_mode: str = key_field("hstore.handling.mode")
    provide_transaction_metadata: bool = key_field("provide.transaction.metadata")
    truncate_events: bool = key_field("truncate.events")
    #: (regex of schema.table, key columns), first match wins (``message.key.columns``).
    message_key_columns: tuple[tuple[str, tuple[str, ...]], ...] = key_field("message.key.columns")
    failure_handling_mode: str = key_field("event.processing.failure.handling.mode")
    dead_letter_topic: str = derived_field("errors.deadletterqueue.topic.name", "")
    # Debezium's column controls (bridge.column_controls): the lists, and the patterned keys
    # (column.mask.with.<N>.chars, column.mask.hash.*, column.truncate.to.<N>.chars).
    column_include: tuple[str, ...] = key_field("column.include.list")
    column_exclude: tuple[str, ...] = key_field("column.exclude.list")
    column_rules: tuple[ColumnRule, ...] = ()
    # Debezium's ByLogicalTableRouter (bridge.routing): tables sharing a topic.
    topic_regex: str | None = key_field("topic.regex")
    topic_replacement: str | None = key_field("topic.replacement")
    key_enforce_uniqueness: bool = key_field("key.enforce.uniqueness")
    key_field_name: str = key_field("key.field.name")
    key_field_regex: str | None = key_field("key.field.regex")
    key_field_replacement: str | None = key_field("key.field.replacement")

    def column_controls(self) -> ColumnControls:
        return ColumnControls(self.column_include, self.column_exclude, self.column_rules)

    def router(self) -> TopicRouter | None:
        """The topic router, when ``topic.regex`` is set (bridge.routing)."""
        if self.topic_regex is None:
            return None
        return TopicRouter(
            self.topic_regex,
            self.topic_replacement or "",
            self.key_enforce_uniqueness,
            self.key_field_name,
            self.key_field_regex,
            self.key_field_replacement,
        )

    def key_columns(self, schema: str, table: str) -> tuple[str, ...] | None:
        """The configured message key columns of ``schema.table``, if any."""
        qualified = f"{schema}.{table}"
        for pattern, columns in self.message_key_columns:
            if re.fullmatch(pattern, qualified):
                return columns
        return None


@dataclass(frozen=True, slots=True)
class KafkaConfig:
    """The producer. ``acks=all`` and idempotence are fixed by the delivery contract.

    ``max_queue_size``/``max_queue_size_in_bytes`` bound the records handed to the producer and
    not yet acknowledged (librdkafka's local queue); when full, publishing waits for deliveries,
    which is the bridge's back-pressure toward PostgreSQL.
    """

    @property
    def exactly_once(self) -> bool:
        return self.exactly_once_support == "required"

    bootstrap_servers: str = field(metadata={"key": "kafka.bootstrap.servers", "derived": True})
    compression_type: str = key_field("kafka.compression.type")
    linger_ms: int = key_field("kafka.linger.ms")
    batch_size: int = key_field("kafka.batch.size")
    delivery_timeout_ms: int = key_field("kafka.delivery.timeout.ms")
    max_queue_size: int = key_field("max.queue.size")
    max_queue_size_in_bytes: int = key_field("max.queue.size.in.bytes")
    client_id: str = key_field("kafka.client.id")
    #: Exactly-once delivery (bridge.sink.transactions): "required" or "disabled"; the
    #: default "requested" is resolved to one of them at start (bridge.sink.delivery_mode).
    exactly_once_support: str = key_field("exactly.once.support")
    offsets_topic: str = derived_field("exactly.once.offsets.topic", "")
    transactional_id: str = derived_field("exactly.once.transactional.id", "")
    commit_interval_ms: int = key_field("exactly.once.commit.interval.ms")
    producer_overrides: tuple[tuple[str, str | Secret], ...] = ()
    #: TLS and SASL (bridge.config.kafka_security), shared by the producer and admin client.
    security: tuple[tuple[str, str | Secret], ...] = ()


@dataclass(frozen=True, slots=True)
class TopicCreationConfig:
    """How missing topics are created. ``-1`` partitions/replication: the broker's defaults."""

    enable: bool = key_field("topic.creation.enable")
    partitions: int = key_field("topic.creation.default.partitions")
    replication_factor: int = key_field("topic.creation.default.replication.factor")
    cleanup_policy: str = key_field("topic.creation.default.cleanup.policy")
    extra: tuple[tuple[str, str], ...] = ()

    def topic_config(self) -> dict[str, str]:
        """The topic-level configs to create topics with."""
        return {"cleanup.policy": self.cleanup_policy, **dict(self.extra)}


@dataclass(frozen=True, slots=True)
class RegistryConfig:
    """The Confluent-compatible schema registry."""

    url: str = field(metadata={"key": "schema.registry.url", "derived": True})
    basic_auth_user_info: Secret | None = key_field("schema.registry.basic.auth.user.info")
    #: None: leave the registry's setting alone
    compatibility_level: str | None = key_field("schema.compatibility.level")
    incompatible_change_handling: str = key_field("schema.incompatible.change.handling.mode")
    #: HTTPS: CA certificates that verify the registry
    ssl_ca_location: Path | None = key_field("schema.registry.ssl.ca.location")
    #: Mutual TLS: client certificate and key
    ssl_certificate_location: Path | None = key_field("schema.registry.ssl.certificate.location")
    ssl_key_location: Path | None = key_field("schema.registry.ssl.key.location")
    #: Bearer-token settings (bridge.config.registry_auth), SchemaRegistryClient's names.
    bearer_auth: tuple[tuple[str, str | Secret], ...] = ()

    def client_config(self) -> dict[str, str]:
        """Configuration for ``confluent_kafka.schema_registry.SchemaRegistryClient``."""
        conf = {"url": self.url}
        if self.basic_auth_user_info is not None:
            conf["basic.auth.user.info"] = self.basic_auth_user_info.reveal()
        conf.update({name: reveal(value) for name, value in self.bearer_auth})
        for key, path in (
            ("ssl.ca.location", self.ssl_ca_location),
            ("ssl.certificate.location", self.ssl_certificate_location),
            ("ssl.key.location", self.ssl_key_location),
        ):
            if path is not None:
                conf[key] = str(path)
        return conf


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """The Prometheus endpoint; ``port`` 0 disables it."""

    port: int = key_field("metrics.port")
    host: str = key_field("metrics.host")  # loopback unless exposing it is asked for (metrics.host)


@dataclass(frozen=True, slots=True)
class LoggingConfig:
    format: str = key_field("log.format")
    level: str = key_field("log.level")


@dataclass(frozen=True, slots=True)
class Setting:
    """One effective setting and its origin (``default``, ``file …``, ``env NAME``, ``flag``)."""

    key: str
    value: object
    origin: str


#: Where pgbridge keeps its state files unless ``state.dir`` says otherwise.
DEFAULT_STATE_DIR: Final = Path("~/.local/state/pgbridge")


@dataclass(frozen=True, slots=True)
class SnapshotConfig:
    """The initial snapshot (bridge.snapshot): when, which tables, how parallel, where its
    progress is kept."""

    mode: str = key_field("snapshot.mode")
    include_collection_list: tuple[str, ...] = key_field("snapshot.include.collection.list")
    #: (schema.table, SELECT statement): the rows of that table to copy (Debezium's
    #: snapshot.select.statement.overrides), see bridge.snapshot.plan.select_statement.
    select_overrides: tuple[tuple[str, str], ...] = derived_field(
        "snapshot.select.statement.overrides", ()
    )
    max_threads: int = key_field("snapshot.max.threads")
    chunk_size: int = key_field("snapshot.chunk.size")
    progress_interval_ms: int = key_field("snapshot.progress.interval.ms")
    state_file: Path | None = key_field("snapshot.state.file")
    state_dir: Path = derived_field("state.dir", DEFAULT_STATE_DIR)
    #: Tables published while running: "parallel" snapshots each incrementally, "off" not.
    new_tables: str = key_field("snapshot.new.tables")
    #: Tables whose rows DDL rewrote without sending them: "incremental" snapshots each
    #: again (bridge.events.EventBuilder.on_rewrite), "off" only logs what to do.
    rewritten_tables: str = key_field("snapshot.rewritten.tables")
    #: Partitions attached or detached while running: "incremental" copies an attached one's
    #: rows into the table's topic and deletes a detached one's (bridge.source.table_watch).
    partition_changes: str = key_field("snapshot.partition.changes")


@dataclass(frozen=True, slots=True)
class SignalConfig:
    """Signals (bridge.signals) and the incremental snapshots they start
    (bridge.snapshot.incremental). Without a signal table they travel as signed logical
    messages (bridge.signal_messages), on PostgreSQL 14+."""

    data_collection: str | None = key_field("signal.data.collection")  # schema.table
    enabled_channels: tuple[str, ...] = key_field("signal.enabled.channels")  # source, kafka
    kafka_topic: str = derived_field("signal.kafka.topic", "")
    table_autocreate: bool = key_field("signal.table.autocreate")
    incremental_chunk_size: int = key_field("incremental.snapshot.chunk.size")


@dataclass(frozen=True, slots=True)
class BridgeConfig:
    """The whole, validated configuration of one ``pgbridge run``."""

    topic_prefix: str = field(metadata={"key": "topic.prefix", "derived": True})
    database: DatabaseConfig
    replication: ReplicationConfig
    filters: TableFilter
    events: EventsConfig
    kafka: KafkaConfig
    topic_creation: TopicCreationConfig
    registry: RegistryConfig
    metrics: MetricsConfig
    logging: LoggingConfig
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    snapshot: SnapshotConfig = field(default_factory=SnapshotConfig)
    signal: SignalConfig = field(default_factory=SignalConfig)
    settings: tuple[Setting, ...] = field(default=(), repr=False, compare=False)

    def describe(self) -> str:
        """The effective configuration, one ``key = value  # origin`` per line, secrets masked."""
        width = max((len(s.key) for s in self.settings), default=0)
        return "\n".join(
            f"{s.key.ljust(width)} = {_show(s.value)}  # {s.origin}" for s in self.settings
        )


def _show(value: object) -> str:
    if value is None:
        return "(not set)"
    if isinstance(value, Secret):
        return "***"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) or "(empty)"
    return str(value)
