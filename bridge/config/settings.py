"""The configuration's constants, the :class:`Secret` wrapper and the frozen dataclasses.

See :mod:`bridge.config` for how settings are merged and named."""

from __future__ import annotations

import hmac
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

from bridge.native.switches import SWITCHES
from bridge.retry import RetryPolicy

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

ENV_PREFIX: Final = "PGBRIDGE_"
PRODUCER_PREFIX: Final = "kafka.producer."
TOPIC_CONFIG_PREFIX: Final = "topic.creation.default."
#: ``snapshot.select.statement.overrides.<schema>.<table>``: that table's snapshot query.
SELECT_OVERRIDE_PREFIX: Final = "snapshot.select.statement.overrides."
SECRET_FILE_SUFFIX: Final = ".file"

# Variables the devstack and test tooling export; not configuration keys (see bridge.devstack).
RESERVED_ENV: Final = frozenset(
    {
        "PGBRIDGE_PG_DSN",
        "PGBRIDGE_BOOTSTRAP_SERVERS",
        "PGBRIDGE_REGISTRY_URL",
        "PGBRIDGE_SPARK_JARS",
        "PGBRIDGE_STACK_DIR",
        "PGBRIDGE_KEEP_STACK",
        "PGBRIDGE_CACHE",
        "PGBRIDGE_JAVA_HOME",
        "PGBRIDGE_PG_VERSIONS",
        "PGBRIDGE_CONFIG",
        *SWITCHES,  # implementation switches (bridge.native.switches)
        "PGBRIDGE_STACK",  # the test fixtures' stack kind
        "PGBRIDGE_SPARK_MASTER",
        "PGBRIDGE_APPLY_PAUSE_AFTER_MERGE",  # a crash tests' failpoint
        "PGBRIDGE_DB_PASSWORD",  # docker-compose.yml's variable
    }
)

# Kafka topic names: legal characters and maximum length, as the broker enforces them.
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
# Replication slot names, as PostgreSQL requires.
_SLOT_NAME = re.compile(r"^[a-z0-9_]{1,63}$")
#: Schema registry compatibility levels (Confluent's names; Apicurio's ccompat API accepts them).
COMPATIBILITY_LEVELS: Final = (
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
    "NONE",
)
_SECRET_WORDS = ("password", "secret", "sasl", "token", "user.info", "credentials")


class Secret:
    """A string that must not be shown: ``repr``/``str`` give ``***``; :meth:`reveal` the value.

    Equality compares in constant time so a config comparison does not leak length/prefixes.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret itself: pass it to the client that needs it, never to a logger."""
        return self._value

    def __repr__(self) -> str:
        return "***"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash(self._value)


def env_name(key: str) -> str:
    """The environment variable for a dotted key: ``topic.prefix`` -> ``PGBRIDGE_TOPIC_PREFIX``."""
    return ENV_PREFIX + key.upper().replace(".", "_").replace("-", "_")


# -- the settings, as frozen dataclasses ----------------------------------------------------------


def reveal(value: object) -> str:
    """A setting's text for a client that needs it: a :class:`Secret` revealed, else as is."""
    return value.reveal() if isinstance(value, Secret) else str(value)


@dataclass(frozen=True, slots=True)
class DatabaseConfig:
    """Where the source database is; either ``dsn`` or the parts (parts override the DSN's).

    Unset parts fall back to libpq's own defaults (``PGHOST``, the local socket, port 5432, …).
    """

    hostname: str | None = None
    port: int | None = None
    user: str | None = None
    password: Secret | None = None
    dbname: str | None = None
    dsn: Secret | None = None
    sslmode: str | None = None
    sslrootcert: Path | None = None  # CA bundle that verifies the server (verify-ca/-full)
    sslcert: Path | None = None  # client certificate (certificate authentication)
    sslkey: Path | None = None
    sslpassword: Secret | None = None  # of an encrypted sslkey

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

    slot_name: str = "pgbridge"
    slot_failover: bool = False  # PostgreSQL 17+ failover slot
    publication_name: str = "pgbridge_publication"
    publication_autocreate_mode: str = "all_tables"  # all_tables | filtered | disabled
    #: How often a filtered publication is reconciled and new tables looked for while running.
    publication_refresh_interval_ms: int = 10_000
    plugin_name: str = "pgoutput"
    pgoutput_binary: bool = False
    status_update_interval_ms: int = 10_000
    heartbeat_interval_ms: int = 0  # 0: no heartbeat
    heartbeat_action_query: str | None = None
    spill_threshold_bytes: int = 64 * 1024 * 1024
    spill_dir: Path | None = None


@dataclass(frozen=True, slots=True)
class TableFilter:
    """Debezium's include/exclude lists: regular expressions that must match the whole name.

    Table patterns match ``schema.table``, schema patterns match ``schema``. An include list
    and the matching exclude list are mutually exclusive, as in Debezium.
    """

    table_include: tuple[str, ...] = ()
    table_exclude: tuple[str, ...] = ()
    schema_include: tuple[str, ...] = ()
    schema_exclude: tuple[str, ...] = ()
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

    messages_topic: str
    tombstones_on_delete: bool = True
    decimal_handling_mode: str = "precise"  # precise | string | double
    # How PostgreSQL types are represented (bridge.types.TypeOptions; docs/types.md).
    unconstrained_numeric_handling_mode: str = "variable_scale"  # variable_scale|string|double
    money_fraction_digits: int = 2
    interval_handling_mode: str = "numeric"  # numeric | string
    time_precision_mode: str = "adaptive_time_microseconds"  # ... | connect
    timestamptz_handling_mode: str = "instant"  # instant | string
    schema_logical_types: str = "avro"  # avro | connect
    binary_handling_mode: str = "bytes"  # bytes | base64 | base64-url-safe | hex
    hstore_handling_mode: str = "map"  # map | json
    provide_transaction_metadata: bool = False
    truncate_events: bool = True
    #: (regex of schema.table, key columns), first match wins (``message.key.columns``).
    message_key_columns: tuple[tuple[str, tuple[str, ...]], ...] = ()
    failure_handling_mode: str = "warn"  # fail | warn | skip
    dead_letter_topic: str = ""

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

    bootstrap_servers: str
    compression_type: str = "lz4"
    linger_ms: int = 5
    batch_size: int = 1_000_000
    delivery_timeout_ms: int = 300_000
    max_queue_size: int = 100_000
    max_queue_size_in_bytes: int = 64 * 1024 * 1024
    client_id: str = "pgbridge"
    producer_overrides: tuple[tuple[str, str | Secret], ...] = ()
    #: TLS and SASL (bridge.config.kafka_security), shared by the producer and admin client.
    security: tuple[tuple[str, str | Secret], ...] = ()


@dataclass(frozen=True, slots=True)
class TopicCreationConfig:
    """How missing topics are created. ``-1`` partitions/replication: the broker's defaults."""

    enable: bool = True
    partitions: int = -1
    replication_factor: int = -1
    cleanup_policy: str = "delete"  # delete | compact | compact,delete
    extra: tuple[tuple[str, str], ...] = ()

    def topic_config(self) -> dict[str, str]:
        """The topic-level configs to create topics with."""
        return {"cleanup.policy": self.cleanup_policy, **dict(self.extra)}


@dataclass(frozen=True, slots=True)
class RegistryConfig:
    """The Confluent-compatible schema registry."""

    url: str
    basic_auth_user_info: Secret | None = None
    compatibility_level: str | None = "BACKWARD"  # None: leave the registry's setting alone
    incompatible_change_handling: str = "evolve"  # evolve | fail (bridge.sink.registry)
    ssl_ca_location: Path | None = None  # HTTPS: CA certificates that verify the registry
    ssl_certificate_location: Path | None = None  # mutual TLS: client certificate and key
    ssl_key_location: Path | None = None
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

    port: int = 0
    host: str = "127.0.0.1"  # loopback unless exposing it is asked for (metrics.host)


@dataclass(frozen=True, slots=True)
class LoggingConfig:
    format: str = "text"  # text | json
    level: str = "INFO"


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

    mode: str = "initial"  # initial | initial_only | no_data | when_needed | always
    include_collection_list: tuple[str, ...] = ()
    #: (schema.table, SELECT statement): the rows of that table to copy (Debezium's
    #: snapshot.select.statement.overrides), see bridge.snapshot.plan.select_statement.
    select_overrides: tuple[tuple[str, str], ...] = ()
    max_threads: int = 2
    chunk_size: int = 100_000
    progress_interval_ms: int = 5_000
    state_file: Path | None = None
    state_dir: Path = DEFAULT_STATE_DIR
    #: Tables published while running: "parallel" snapshots each incrementally, "off" not.
    new_tables: str = "off"
    #: Tables whose rows DDL rewrote without sending them: "incremental" snapshots each
    #: again (bridge.events.EventBuilder.on_rewrite), "off" only logs what to do.
    rewritten_tables: str = "incremental"


@dataclass(frozen=True, slots=True)
class SignalConfig:
    """Signals (bridge.signals) and the incremental snapshots they start
    (bridge.snapshot.incremental). Without a signal table, neither."""

    data_collection: str | None = None  # schema.table
    enabled_channels: tuple[str, ...] = ("source",)  # source, kafka
    kafka_topic: str = ""
    table_autocreate: bool = True
    incremental_chunk_size: int = 1024

    @property
    def enabled(self) -> bool:
        return self.data_collection is not None


@dataclass(frozen=True, slots=True)
class BridgeConfig:
    """The whole, validated configuration of one ``pgbridge run``."""

    topic_prefix: str
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
