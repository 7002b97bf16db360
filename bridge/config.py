"""pgbridge's configuration: a TOML file, ``PGBRIDGE_*`` environment variables and CLI flags.

Sources are merged per key, later wins: built-in default < file < environment < flags. The
result is a tree of frozen, validated dataclasses (:class:`BridgeConfig`); nothing downstream
sees a dict of dotted strings.

Key names follow Debezium's PostgreSQL connector wherever the concept is the same
(``database.hostname``, ``topic.prefix``, ``slot.name``, ``table.include.list``, …) so a
Debezium configuration carries over with few edits. ``pgbridge.example.toml`` at the
repository root documents every key and its default; :data:`KEYS` is the same list in code.

- **File**: TOML, either nested (``[database]`` / ``hostname = "db"``) or with quoted dotted
  keys (``"topic.prefix" = "shop"``); both spellings flatten to the same dotted key.
- **Environment**: ``PGBRIDGE_`` + the key upper-cased with dots as underscores
  (``topic.prefix`` -> ``PGBRIDGE_TOPIC_PREFIX``). The variables the local development stack
  exports for other tools (:data:`RESERVED_ENV`) are not configuration and are ignored.
- **Flags**: ``key=value`` pairs by dotted key (the CLI's ``--set``).

Unknown keys are an error in every source, with a "did you mean" suggestion: a typo that is
silently ignored in a CDC bridge shows up weeks later as a missing table. Every error is a
:class:`~bridge.errors.ConfigError` whose ``key`` names the offending setting.

Two prefixes pass through to the systems that understand them, like Kafka Connect's
``producer.override.*`` and Debezium's ``topic.creation.default.*``: ``kafka.producer.<librdkafka
property>`` (security settings, timeouts, …; librdkafka rejects unknown names when the producer
is created) and ``topic.creation.default.<topic config>`` (``retention.ms``, …; the broker
validates them). Producer settings that would break the delivery contract (``acks``,
``enable.idempotence``, ``partitioner``) cannot be overridden.

Secrets (``database.password``, ``database.dsn``, ``schema.registry.basic.auth.user.info`` and
any pass-through key naming a password, secret, token or SASL setting) are held in
:class:`Secret`, whose ``repr`` and ``str`` are ``***``, so they never reach a log line, a
traceback's locals dump or :meth:`BridgeConfig.describe`. Each may also be read from a file:
``<key>.file`` (e.g. ``database.password.file``, for Kubernetes/Docker secrets).
"""

from __future__ import annotations

import difflib
import hmac
import logging
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

from bridge.errors import ConfigError

logger = logging.getLogger(__name__)

__all__ = [
    "KEYS",
    "RESERVED_ENV",
    "BridgeConfig",
    "DatabaseConfig",
    "EventsConfig",
    "KafkaConfig",
    "KeySpec",
    "LoggingConfig",
    "MetricsConfig",
    "RegistryConfig",
    "ReplicationConfig",
    "Secret",
    "Setting",
    "TableFilter",
    "TopicCreationConfig",
    "env_name",
    "load_config",
]

_T = TypeVar("_T")

ENV_PREFIX: Final = "PGBRIDGE_"
PRODUCER_PREFIX: Final = "kafka.producer."
TOPIC_CONFIG_PREFIX: Final = "topic.creation.default."
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
    }
)

# Kafka topic names: legal characters and maximum length, as the broker enforces them.
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
# Replication slot names, as PostgreSQL requires.
_SLOT_NAME = re.compile(r"^[a-z0-9_]{1,63}$")
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


def is_secret_key(key: str) -> bool:
    """Whether a setting holds a credential (masked everywhere, may come from a ``.file``)."""
    lowered = key.lower()
    return key in _SECRET_KEYS or any(word in lowered for word in _SECRET_WORDS)


def env_name(key: str) -> str:
    """The environment variable for a dotted key: ``topic.prefix`` -> ``PGBRIDGE_TOPIC_PREFIX``."""
    return ENV_PREFIX + key.upper().replace(".", "_").replace("-", "_")


# -- the settings, as frozen dataclasses ----------------------------------------------------------


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
        }
        return make_conninfo(
            self.dsn.reveal() if self.dsn else "",
            **{k: v for k, v in parts.items() if v is not None},
        )


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """The replication slot and publication, and how the stream is consumed."""

    slot_name: str = "pgbridge"
    publication_name: str = "pgbridge_publication"
    publication_autocreate_mode: str = "all_tables"  # all_tables | filtered | disabled
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

    def includes(self, schema: str, table: str) -> bool:
        """Whether changes of ``schema.table`` are captured."""
        qualified = f"{schema}.{table}"
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
    provide_transaction_metadata: bool = False
    truncate_events: bool = True


@dataclass(frozen=True, slots=True)
class KafkaConfig:
    """The producer. ``acks=all`` and idempotence are fixed by the delivery contract.

    ``max_queue_size``/``max_queue_size_in_bytes`` bound the records handed to the producer and
    not yet acknowledged (librdkafka's local queue); when full, publishing waits for deliveries,
    which is the bridge's back-pressure toward PostgreSQL.
    """

    bootstrap_servers: str
    compression_type: str = "lz4"
    linger_ms: int = 20
    batch_size: int = 1_000_000
    delivery_timeout_ms: int = 300_000
    max_queue_size: int = 100_000
    max_queue_size_in_bytes: int = 256 * 1024 * 1024
    client_id: str = "pgbridge"
    producer_overrides: tuple[tuple[str, str | Secret], ...] = ()


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

    def client_config(self) -> dict[str, str]:
        """Configuration for ``confluent_kafka.schema_registry.SchemaRegistryClient``."""
        conf = {"url": self.url}
        if self.basic_auth_user_info is not None:
            conf["basic.auth.user.info"] = self.basic_auth_user_info.reveal()
        return conf


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """The Prometheus endpoint; ``port`` 0 disables it."""

    port: int = 0
    host: str = "0.0.0.0"  # scraped from other hosts and containers


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


# -- the key table --------------------------------------------------------------------------------

Parser = Callable[[str, object], object]


@dataclass(frozen=True, slots=True)
class KeySpec:
    """One known key: its parser, its default and a one-line description."""

    key: str
    parse: Parser
    default: object
    doc: str


def _text(key: str, raw: object) -> str:
    if isinstance(raw, str):
        return raw
    raise ConfigError(key, f"expected a string, got {type(raw).__name__} {raw!r}")


def _optional_text(key: str, raw: object) -> str | None:
    text = _text(key, raw)
    return text or None


def _integer(key: str, raw: object) -> int:
    if isinstance(raw, bool):  # bool is an int subclass; `true` is not a number of bytes
        raise ConfigError(key, f"expected an integer, got {raw!r}")
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str):
        try:
            return int(raw.strip().replace("_", ""))
        except ValueError:
            pass
    raise ConfigError(key, f"expected an integer, got {raw!r}")


def _boolean(key: str, raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        lowered = raw.strip().lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
    raise ConfigError(key, f"expected true or false, got {raw!r}")


def _string_list(key: str, raw: object) -> tuple[str, ...]:
    if isinstance(raw, str):
        items = raw.split(",")
    elif isinstance(raw, list) and all(isinstance(i, str) for i in raw):
        items = raw
    else:
        raise ConfigError(key, f"expected a list of strings or a comma-separated string: {raw!r}")
    return tuple(i.strip() for i in items if i.strip())


def _patterns(key: str, raw: object) -> tuple[str, ...]:
    patterns = _string_list(key, raw)
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(key, f"{pattern!r} is not a regular expression: {exc}") from None
    return patterns


def _secret(key: str, raw: object) -> Secret | None:
    text = _text(key, raw)
    return Secret(text) if text else None


def _choice(*choices: str, upper: bool = False) -> Parser:
    def parse(key: str, raw: object) -> str:
        text = _text(key, raw).strip()
        text = text.upper() if upper else text.lower()
        if text not in choices:
            raise ConfigError(key, f"{raw!r} is not one of {', '.join(choices)}")
        return text

    return parse


def _optional_choice(*choices: str, upper: bool = False) -> Parser:
    inner = _choice(*choices, upper=upper)

    def parse(key: str, raw: object) -> str | None:
        return None if raw in ("", None) else str(inner(key, raw))

    return parse


def _path(key: str, raw: object) -> Path | None:
    text = _text(key, raw)
    return Path(text).expanduser() if text else None


def _passthrough_value(key: str, raw: object) -> str:
    # librdkafka and the broker take every value as a string; TOML's native types are a
    # convenience, rendered the way those systems spell them.
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, (int, float, str)):
        return str(raw)
    raise ConfigError(key, f"expected a string, number or boolean, got {raw!r}")


KEYS: Final[tuple[KeySpec, ...]] = (
    KeySpec("database.hostname", _optional_text, None, "PostgreSQL host (libpq default if unset)"),
    KeySpec("database.port", _integer, None, "PostgreSQL port (libpq default 5432 if unset)"),
    KeySpec("database.user", _optional_text, None, "user with the REPLICATION attribute"),
    KeySpec("database.password", _secret, None, "password (or database.password.file)"),
    KeySpec("database.dbname", _optional_text, None, "database to stream"),
    KeySpec("database.dsn", _secret, None, "libpq DSN instead of the parts above"),
    KeySpec(
        "database.sslmode",
        _optional_choice("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
        None,
        "libpq sslmode",
    ),
    KeySpec("topic.prefix", _text, None, "topics are <prefix>.<schema>.<table> (required)"),
    KeySpec("slot.name", _text, "pgbridge", "logical replication slot"),
    KeySpec("publication.name", _text, "pgbridge_publication", "publication to stream"),
    KeySpec(
        "publication.autocreate.mode",
        _choice("all_tables", "filtered", "disabled"),
        "all_tables",
        "create the publication for all tables, for the filtered tables, or not at all",
    ),
    KeySpec("plugin.name", _choice("pgoutput"), "pgoutput", "logical decoding plugin"),
    KeySpec("pgoutput.binary", _boolean, False, "ask pgoutput for binary column values"),
    KeySpec("status.update.interval.ms", _integer, 10_000, "standby status update interval"),
    KeySpec("heartbeat.interval.ms", _integer, 0, "heartbeat interval; 0 disables it"),
    KeySpec("heartbeat.action.query", _optional_text, None, "SQL run at every heartbeat"),
    KeySpec(
        "streaming.spill.threshold.bytes",
        _integer,
        64 * 1024 * 1024,
        "memory for in-progress streamed transactions before spilling to disk",
    ),
    KeySpec("streaming.spill.dir", _path, None, "spill directory (system temp dir if unset)"),
    KeySpec("table.include.list", _patterns, (), "regexes of schema.table to capture"),
    KeySpec("table.exclude.list", _patterns, (), "regexes of schema.table to skip"),
    KeySpec("schema.include.list", _patterns, (), "regexes of schemas to capture"),
    KeySpec("schema.exclude.list", _patterns, (), "regexes of schemas to skip"),
    KeySpec("tombstones.on.delete", _boolean, True, "emit a tombstone after each delete"),
    KeySpec(
        "decimal.handling.mode",
        _choice("precise", "string", "double"),
        "precise",
        "numeric as Avro decimal, string or double",
    ),
    KeySpec("provide.transaction.metadata", _boolean, False, "BEGIN/END records and tx block"),
    KeySpec("truncate.events", _boolean, True, "emit op 't' records for TRUNCATE"),
    KeySpec("messages.topic", _optional_text, None, "logical messages topic (<prefix>.messages)"),
    KeySpec("kafka.bootstrap.servers", _text, None, "Kafka brokers (required)"),
    KeySpec(
        "kafka.compression.type",
        _choice("none", "gzip", "snappy", "lz4", "zstd"),
        "lz4",
        "producer batch compression",
    ),
    KeySpec("kafka.linger.ms", _integer, 20, "how long the producer waits to fill a batch"),
    KeySpec("kafka.batch.size", _integer, 1_000_000, "maximum bytes per partition batch"),
    KeySpec(
        "kafka.delivery.timeout.ms", _integer, 300_000, "give up on a record after this (stops)"
    ),
    KeySpec("kafka.client.id", _text, "pgbridge", "client id shown in broker logs and quotas"),
    KeySpec("max.queue.size", _integer, 100_000, "records in flight to Kafka at most"),
    KeySpec(
        "max.queue.size.in.bytes", _integer, 256 * 1024 * 1024, "bytes in flight to Kafka at most"
    ),
    KeySpec("topic.creation.enable", _boolean, True, "create missing topics"),
    KeySpec("topic.creation.default.partitions", _integer, -1, "-1: the broker's default"),
    KeySpec("topic.creation.default.replication.factor", _integer, -1, "-1: broker's default"),
    KeySpec(
        "topic.creation.default.cleanup.policy",
        _choice("delete", "compact", "compact,delete"),
        "delete",
        "cleanup.policy of created topics",
    ),
    KeySpec("schema.registry.url", _text, None, "Confluent-compatible registry URL (required)"),
    KeySpec(
        "schema.registry.basic.auth.user.info", _secret, None, "user:password for the registry"
    ),
    KeySpec(
        "schema.compatibility.level",
        _optional_choice(
            "NONE",
            "BACKWARD",
            "BACKWARD_TRANSITIVE",
            "FORWARD",
            "FORWARD_TRANSITIVE",
            "FULL",
            "FULL_TRANSITIVE",
            upper=True,
        ),
        "BACKWARD",
        "subject compatibility set on registration; empty: leave as is",
    ),
    KeySpec("metrics.port", _integer, 0, "Prometheus endpoint port; 0 disables it"),
    KeySpec("metrics.host", _text, "0.0.0.0", "address the metrics endpoint listens on"),
    KeySpec("log.format", _choice("text", "json"), "text", "log line format"),
    KeySpec(
        "log.level",
        _choice("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", upper=True),
        "INFO",
        "log level",
    ),
)

_SPECS: Final = {spec.key: spec for spec in KEYS}
_SECRET_KEYS: Final = frozenset(
    {"database.password", "database.dsn", "schema.registry.basic.auth.user.info"}
)
_ENV_TO_KEY: Final = {env_name(k): k for k in _SPECS} | {
    env_name(k + SECRET_FILE_SUFFIX): k + SECRET_FILE_SUFFIX for k in _SECRET_KEYS
}

# Producer properties fixed by the delivery contract, or spelt with a first-class key.
_PRODUCER_FORBIDDEN: Final = {
    "acks": "acks=all is required by the at-least-once contract",
    "request.required.acks": "acks=all is required by the at-least-once contract",
    "enable.idempotence": "idempotence keeps per-key order across retries; it is always on",
    "partitioner": "murmur2_random places keys like the Java clients; consumers rely on it",
    "max.in.flight.requests.per.connection": "idempotence needs it at librdkafka's default",
    "max.in.flight": "idempotence needs it at librdkafka's default",
    "bootstrap.servers": "use kafka.bootstrap.servers",
    "compression.type": "use kafka.compression.type",
    "compression.codec": "use kafka.compression.type",
    "linger.ms": "use kafka.linger.ms",
    "queue.buffering.max.ms": "use kafka.linger.ms",
    "batch.size": "use kafka.batch.size",
    "message.timeout.ms": "use kafka.delivery.timeout.ms",
    "delivery.timeout.ms": "use kafka.delivery.timeout.ms",
    "client.id": "use kafka.client.id",
    "queue.buffering.max.messages": "use max.queue.size",
    "queue.buffering.max.kbytes": "use max.queue.size.in.bytes",
}


# -- loading --------------------------------------------------------------------------------------


def load_config(
    path: Path | None,
    env: Mapping[str, str],
    overrides: Mapping[str, str],
) -> BridgeConfig:
    """Merge defaults < ``path`` (TOML) < ``env`` (``PGBRIDGE_*``) < ``overrides`` and validate.

    Raises :class:`~bridge.errors.ConfigError` naming the first bad key.
    """
    raw: dict[str, tuple[object, str]] = {}
    if path is not None:
        for key, value in _read_toml(path).items():
            raw[_check_key(key, "in " + str(path))] = (value, f"file {path}")
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or name in RESERVED_ENV:
            continue
        raw[_env_key(name)] = (value, f"env {name}")
    for key, value in overrides.items():
        raw[_check_key(key, "in flags")] = (value, "flag")
    _resolve_secret_files(raw)
    return _build(raw)


def _read_toml(path: Path) -> dict[str, object]:
    try:
        with path.open("rb") as fh:
            document = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError("config file", f"cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("config file", f"{path} is not valid TOML: {exc}") from None
    flat: dict[str, object] = {}

    def walk(prefix: str, table: Mapping[str, object]) -> None:
        for name, value in table.items():
            key = f"{prefix}.{name}" if prefix else name
            if isinstance(value, dict):
                walk(key, value)
                continue
            if key in flat:  # e.g. [database] hostname and "database.hostname" both given
                raise ConfigError(key, f"given twice in {path}")
            flat[key] = value

    walk("", document)
    return flat


def _is_secret_file_key(key: str) -> bool:
    """``<secret>.file``: the secret is read from that file."""
    if not key.endswith(SECRET_FILE_SUFFIX) or key in _SPECS:
        return False
    base = key.removesuffix(SECRET_FILE_SUFFIX)
    return base in _SECRET_KEYS or (base.startswith(PRODUCER_PREFIX) and is_secret_key(base))


def _known(key: str) -> bool:
    if key in _SPECS or _is_secret_file_key(key):
        return True
    for prefix in (PRODUCER_PREFIX, TOPIC_CONFIG_PREFIX):
        if key.startswith(prefix) and len(key) > len(prefix):
            return True
    return False


def _suggest(word: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


def _check_key(key: str, where: str) -> str:
    if not _known(key):
        raise ConfigError(key, f"unknown setting {where}{_suggest(key, _SPECS)}")
    return key


def _env_key(name: str) -> str:
    if name in _ENV_TO_KEY:
        return _ENV_TO_KEY[name]
    # Pass-through properties are dotted lower-case names (librdkafka's and Kafka's own).
    for prefix in (PRODUCER_PREFIX, TOPIC_CONFIG_PREFIX):
        env_prefix = env_name(prefix)
        if name.startswith(env_prefix) and len(name) > len(env_prefix):
            key = prefix + name[len(env_prefix) :].lower().replace("_", ".")
            if key not in _SPECS:
                return key
    raise ConfigError(name, f"unknown environment variable{_suggest(name, _ENV_TO_KEY)}")


def _resolve_secret_files(raw: dict[str, tuple[object, str]]) -> None:
    """Replace ``<secret>.file`` entries by the file's content under ``<secret>``.

    Precedence holds across the pair (a flag's ``database.password`` beats the environment's
    ``database.password.file``); giving both in the same source is an error.
    """
    for file_key in [k for k in raw if _is_secret_file_key(k)]:
        path_value, origin = raw.pop(file_key)
        key = file_key.removesuffix(SECRET_FILE_SUFFIX)
        if key in raw:
            other = _rank(raw[key][1])
            if other == _rank(origin):
                raise ConfigError(file_key, f"give {key} or {file_key}, not both")
            if other > _rank(origin):  # e.g. a flag's password beats the environment's file
                continue
        path = Path(_text(file_key, path_value)).expanduser()
        try:
            # A trailing newline is how editors and `echo` write files, never part of a password.
            secret = path.read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            raise ConfigError(file_key, f"cannot read {path}: {exc.strerror}") from None
        raw[key] = (secret, f"{origin} ({file_key})")


def _rank(origin: str) -> int:
    return 3 if origin.startswith("flag") else 2 if origin.startswith("env") else 1


def _build(raw: Mapping[str, tuple[object, str]]) -> BridgeConfig:
    values: dict[str, object] = {}
    settings: list[Setting] = []
    for spec in KEYS:
        if spec.key in raw:
            value, origin = raw[spec.key]
            parsed = spec.parse(spec.key, value)
        else:
            parsed, origin = spec.default, "default"
        values[spec.key] = parsed
        settings.append(Setting(spec.key, parsed, origin))

    producer: list[tuple[str, str | Secret]] = []
    topic_extra: list[tuple[str, str]] = []
    for key in sorted(k for k in raw if k not in _SPECS):
        value, origin = raw[key]
        text = _passthrough_value(key, value)
        if key.startswith(PRODUCER_PREFIX):
            prop = key.removeprefix(PRODUCER_PREFIX)
            if prop in _PRODUCER_FORBIDDEN:
                raise ConfigError(key, f"cannot be set: {_PRODUCER_FORBIDDEN[prop]}")
            stored: str | Secret = Secret(text) if is_secret_key(key) else text
            producer.append((prop, stored))
            settings.append(Setting(key, stored, origin))
        else:
            topic_extra.append((key.removeprefix(TOPIC_CONFIG_PREFIX), text))
            settings.append(Setting(key, text, origin))

    def typed(key: str, kind: type[_T]) -> _T | None:
        value = values[key]
        # The parsers in KEYS produce these types; a mismatch is a bug in the table.
        assert value is None or isinstance(value, kind), (key, value)
        return value

    def required(key: str) -> Any:
        value = values[key]
        if value is None or value == "":
            raise ConfigError(key, f"is required (set it in the file or {env_name(key)})")
        return value

    def at_least(key: str, minimum: int) -> int:
        value = values[key]
        assert isinstance(value, int)
        if value < minimum:
            raise ConfigError(key, f"must be at least {minimum}, got {value}")
        return value

    def partitions_like(key: str) -> int:
        value = values[key]
        assert isinstance(value, int)
        if value == 0 or value < -1:
            raise ConfigError(key, f"must be -1 (broker default) or at least 1, got {value}")
        return value

    prefix = required("topic.prefix")
    _check_topic_name("topic.prefix", prefix)
    messages_topic = values["messages.topic"] or f"{prefix}.messages"
    _check_topic_name("messages.topic", str(messages_topic))

    database = DatabaseConfig(
        hostname=typed("database.hostname", str),
        port=typed("database.port", int),
        user=typed("database.user", str),
        password=typed("database.password", Secret),
        dbname=typed("database.dbname", str),
        dsn=typed("database.dsn", Secret),
        sslmode=typed("database.sslmode", str),
    )
    if database.dsn is None and database.dbname is None:
        raise ConfigError("database.dbname", "is required unless database.dsn is given")
    if database.port is not None and not 1 <= database.port <= 65535:
        raise ConfigError("database.port", f"{database.port} is not a TCP port")

    slot = str(values["slot.name"])
    if not _SLOT_NAME.match(slot):
        raise ConfigError("slot.name", f"{slot!r}: use 1-63 lower-case letters, digits, _")
    if not values["publication.name"]:
        raise ConfigError("publication.name", "must not be empty")
    heartbeat_ms = at_least("heartbeat.interval.ms", 0)
    if values["heartbeat.action.query"] and heartbeat_ms == 0:
        raise ConfigError("heartbeat.interval.ms", "must be set for heartbeat.action.query")
    replication = ReplicationConfig(
        slot_name=slot,
        publication_name=str(values["publication.name"]),
        publication_autocreate_mode=str(values["publication.autocreate.mode"]),
        plugin_name=str(values["plugin.name"]),
        pgoutput_binary=bool(values["pgoutput.binary"]),
        status_update_interval_ms=at_least("status.update.interval.ms", 1),
        heartbeat_interval_ms=heartbeat_ms,
        heartbeat_action_query=typed("heartbeat.action.query", str),
        spill_threshold_bytes=at_least("streaming.spill.threshold.bytes", 0),
        spill_dir=typed("streaming.spill.dir", Path),
    )

    for include, exclude in (
        ("table.include.list", "table.exclude.list"),
        ("schema.include.list", "schema.exclude.list"),
    ):
        if values[include] and values[exclude]:
            raise ConfigError(exclude, f"cannot be combined with {include}")
    filters = TableFilter(
        table_include=typed("table.include.list", tuple) or (),
        table_exclude=typed("table.exclude.list", tuple) or (),
        schema_include=typed("schema.include.list", tuple) or (),
        schema_exclude=typed("schema.exclude.list", tuple) or (),
    )

    events = EventsConfig(
        messages_topic=str(messages_topic),
        tombstones_on_delete=bool(values["tombstones.on.delete"]),
        decimal_handling_mode=str(values["decimal.handling.mode"]),
        provide_transaction_metadata=bool(values["provide.transaction.metadata"]),
        truncate_events=bool(values["truncate.events"]),
    )

    kafka = KafkaConfig(
        bootstrap_servers=required("kafka.bootstrap.servers"),
        compression_type=str(values["kafka.compression.type"]),
        linger_ms=at_least("kafka.linger.ms", 0),
        batch_size=at_least("kafka.batch.size", 1),
        delivery_timeout_ms=at_least("kafka.delivery.timeout.ms", 1),
        max_queue_size=at_least("max.queue.size", 1),
        max_queue_size_in_bytes=at_least("max.queue.size.in.bytes", 1024),
        client_id=str(values["kafka.client.id"]),
        producer_overrides=tuple(producer),
    )

    topic_creation = TopicCreationConfig(
        enable=bool(values["topic.creation.enable"]),
        partitions=partitions_like("topic.creation.default.partitions"),
        replication_factor=partitions_like("topic.creation.default.replication.factor"),
        cleanup_policy=str(values["topic.creation.default.cleanup.policy"]),
        extra=tuple(topic_extra),
    )

    registry = RegistryConfig(
        url=required("schema.registry.url"),
        basic_auth_user_info=typed("schema.registry.basic.auth.user.info", Secret),
        compatibility_level=typed("schema.compatibility.level", str),
    )

    metrics_port = at_least("metrics.port", 0)
    if metrics_port > 65535:
        raise ConfigError("metrics.port", f"{metrics_port} is not a TCP port")
    metrics = MetricsConfig(port=metrics_port, host=str(values["metrics.host"]))
    logging_config = LoggingConfig(format=str(values["log.format"]), level=str(values["log.level"]))

    # messages.topic's default is derived; show the value actually used.
    settings = [
        Setting(s.key, messages_topic, s.origin) if s.key == "messages.topic" else s
        for s in settings
    ]
    return BridgeConfig(
        topic_prefix=prefix,
        database=database,
        replication=replication,
        filters=filters,
        events=events,
        kafka=kafka,
        topic_creation=topic_creation,
        registry=registry,
        metrics=metrics,
        logging=logging_config,
        settings=tuple(sorted(settings, key=lambda s: s.key)),
    )


def _check_topic_name(key: str, name: str) -> None:
    if not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise ConfigError(
            key, f"{name!r} is not a valid Kafka topic name (letters, digits, '.', '_', '-')"
        )
