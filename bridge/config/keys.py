"""The key table: every setting's dotted name, parser, default and help text."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bridge.config.basics import (
    _SECRET_WORDS,
    COMPATIBILITY_LEVELS,
    SECRET_FILE_SUFFIX,
    Secret,
    env_name,
)
from bridge.errors import ConfigError

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


def _at_least(minimum: int, maximum: int | None = None) -> Parser:
    """An integer in a range, the range part of the key's declaration."""

    def parse(key: str, raw: object) -> int:
        value = _integer(key, raw)
        if value < minimum:
            raise ConfigError(key, f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise ConfigError(key, f"must be at most {maximum}, got {value}")
        return value

    return parse


def _partitions_like(key: str, raw: object) -> int:
    value = _integer(key, raw)
    if value == 0 or value < -1:
        raise ConfigError(key, f"must be -1 (broker default) or at least 1, got {value}")
    return value


def _tcp_port(key: str, raw: object) -> int:
    value = _integer(key, raw)
    if value < 0:
        raise ConfigError(key, f"must be at least 0, got {value}")
    if value > 65535:
        raise ConfigError(key, f"{value} is not a TCP port")
    return value


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


def _message_key_columns(key: str, raw: object) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``table-regex:col1,col2;table-regex:col3`` -> ((regex, columns), ...). The regex matches
    ``schema.table`` whole, as Debezium's ``message.key.columns``."""
    text = _text(key, raw).strip()
    rules: list[tuple[str, tuple[str, ...]]] = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        table, sep, columns = part.rpartition(":")
        names = tuple(c.strip() for c in columns.split(",") if c.strip())
        if not sep or not table.strip() or not names:
            raise ConfigError(key, f"{part!r} is not <schema.table>:<column>[,<column>...]")
        try:
            re.compile(table.strip())
        except re.error as exc:
            raise ConfigError(key, f"{table!r} is not a regular expression: {exc}") from None
        rules.append((table.strip(), names))
    return tuple(rules)


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
    KeySpec("database.sslrootcert", _path, None, "CA certificates that verify the server"),
    KeySpec("database.sslcert", _path, None, "client certificate (certificate authentication)"),
    KeySpec("database.sslkey", _path, None, "the client certificate's private key"),
    KeySpec("database.sslpassword", _secret, None, "password of an encrypted database.sslkey"),
    KeySpec("topic.prefix", _text, None, "topics are <prefix>.<schema>.<table> (required)"),
    KeySpec("slot.name", _text, "pgbridge", "logical replication slot"),
    KeySpec(
        "debezium.offsets.topic",
        _optional_text,
        None,
        "taking over a Debezium connector's slot: Kafka Connect's offsets topic",
    ),
    KeySpec(
        "debezium.offsets.file",
        _path,
        None,
        "taking over: a standalone Kafka Connect worker's offsets file",
    ),
    KeySpec(
        "debezium.connector.name",
        _optional_text,
        None,
        "taking over: the Debezium connector's name (default: the one with this topic.prefix)",
    ),
    KeySpec(
        "slot.failover",
        _boolean,
        False,
        "create the slot as a failover slot (PostgreSQL 17+), synchronised to standbys with "
        "sync_replication_slots = on, so streaming resumes on a promoted standby",
    ),
    KeySpec("publication.name", _text, "pgbridge_publication", "publication to stream"),
    KeySpec(
        "publication.autocreate.mode",
        _choice("all_tables", "filtered", "disabled"),
        "all_tables",
        "create the publication for all tables, for the filtered tables, or not at all",
    ),
    KeySpec(
        "publication.refresh.interval.ms",
        _at_least(100),
        10_000,
        "how often new tables are looked for (and a filtered publication reconciled) while running",
    ),
    KeySpec("plugin.name", _choice("pgoutput"), "pgoutput", "logical decoding plugin"),
    KeySpec("pgoutput.binary", _boolean, False, "ask pgoutput for binary column values"),
    KeySpec("status.update.interval.ms", _at_least(1), 10_000, "standby status update interval"),
    KeySpec("heartbeat.interval.ms", _at_least(0), 0, "heartbeat interval; 0 disables it"),
    KeySpec("heartbeat.action.query", _optional_text, None, "SQL run at every heartbeat"),
    KeySpec(
        "streaming.spill.threshold.bytes",
        _at_least(0),
        64 * 1024 * 1024,
        "memory for in-progress streamed transactions before spilling to disk",
    ),
    KeySpec("streaming.spill.dir", _path, None, "spill directory (system temp dir if unset)"),
    KeySpec(
        "snapshot.mode",
        _choice("initial", "initial_only", "no_data", "when_needed", "always"),
        "initial",
        "copy existing rows before streaming: when the slot is new (initial), then stop "
        "(initial_only), never (no_data), also when the slot was invalidated (when_needed), "
        "at every start (always)",
    ),
    KeySpec(
        "snapshot.include.collection.list",
        _patterns,
        (),
        "regexes of schema.table to snapshot (default: every captured table)",
    ),
    KeySpec(
        "snapshot.select.statement.overrides",
        _string_list,
        (),
        "schema.table names whose snapshot rows come from the SELECT statement in "
        "snapshot.select.statement.overrides.<schema.table> (Debezium's keys)",
    ),
    KeySpec("snapshot.max.threads", _at_least(1, 64), 2, "snapshot workers (connections) at most"),
    KeySpec("snapshot.chunk.size", _at_least(1), 100_000, "rows per snapshot chunk (resume unit)"),
    KeySpec(
        "snapshot.progress.interval.ms",
        _at_least(100),
        5_000,
        "snapshot progress log line interval",
    ),
    KeySpec(
        "snapshot.state.file",
        _path,
        None,
        "snapshot progress file (default <state.dir>/snapshot-<slot.name>.json)",
    ),
    KeySpec(
        "snapshot.new.tables",
        _choice("off", "parallel"),
        "off",
        "tables published while running: copy their rows by an incremental snapshot "
        "(parallel; on PostgreSQL 13 it needs signal.data.collection) or not (off)",
    ),
    KeySpec(
        "snapshot.partition.changes",
        _choice("off", "incremental"),
        "incremental",
        "partitions attached to or detached from a captured partitioned table while running "
        "(pgoutput sends none of their rows): copy an attached partition's rows into the "
        "table's topic and delete a detached one's from it by an incremental snapshot "
        "(incremental; on PostgreSQL 13 it needs signal.data.collection) or only say so (off)",
    ),
    KeySpec(
        "snapshot.rewritten.tables",
        _choice("off", "incremental"),
        "incremental",
        "tables whose rows DDL rewrote without sending them (a column's type changed, a "
        "column added with a volatile default, the table renamed): copy their rows again by "
        "an incremental snapshot (incremental; on PostgreSQL 13 it needs "
        "signal.data.collection) or only say so (off)",
    ),
    KeySpec(
        "signal.data.collection",
        _optional_text,
        None,
        "schema.table of the signal table (Debezium's columns id, type, data; it must be in "
        "the publication); unset: signals travel as signed logical messages (PostgreSQL 14+)",
    ),
    KeySpec(
        "signal.enabled.channels",
        _string_list,
        ("source",),
        "where signals are read: source (the signal table), kafka (signal.kafka.topic)",
    ),
    KeySpec(
        "signal.kafka.topic",
        _optional_text,
        None,
        "topic of Kafka signals, keyed by topic.prefix (default <topic.prefix>-signal)",
    ),
    KeySpec(
        "signal.table.autocreate", _boolean, True, "create the signal table when it is missing"
    ),
    KeySpec(
        "incremental.snapshot.chunk.size",
        _at_least(1, 1_000_000),
        1024,
        "rows per incremental snapshot chunk (read between two watermarks)",
    ),
    KeySpec("state.dir", _path, None, "pgbridge's state files (default ~/.local/state/pgbridge)"),
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
    KeySpec(
        "unconstrained.numeric.handling.mode",
        _choice("variable_scale", "string", "double"),
        "variable_scale",
        "numeric without (p,s) in precise mode: VariableScaleDecimal record, string or double",
    ),
    KeySpec(
        "money.fraction.digits", _at_least(0, 10), 2, "scale of money values (lc_monetary's digits)"
    ),
    KeySpec(
        "interval.handling.mode",
        _choice("numeric", "string"),
        "numeric",
        "interval as MicroDuration microseconds or an ISO-8601 string (exact)",
    ),
    KeySpec(
        "time.precision.mode",
        _choice("adaptive_time_microseconds", "connect"),
        "adaptive_time_microseconds",
        "date/time/timestamp as Debezium's micro types or Kafka Connect's millisecond types",
    ),
    KeySpec(
        "timestamptz.handling.mode",
        _choice("instant", "string"),
        "string",
        "timestamptz as Debezium's ZonedTimestamp string (exact) or UTC timestamp-micros",
    ),
    KeySpec(
        "schema.logical.types",
        _choice("avro", "connect"),
        "connect",
        "connect: Debezium's form, as Kafka Connect's Avro converters require; avro: "
        "Debezium's connect.name plus standard Avro logical types (plain Avro readers)",
    ),
    KeySpec(
        "binary.handling.mode",
        _choice("bytes", "base64", "base64-url-safe", "hex"),
        "bytes",
        "bytea as Avro bytes or an encoded string",
    ),
    KeySpec(
        "hstore.handling.mode",
        _choice("map", "json"),
        "json",
        "hstore as a JSON string (Debezium's default) or an Avro map",
    ),
    KeySpec("provide.transaction.metadata", _boolean, False, "BEGIN/END records and tx block"),
    KeySpec("truncate.events", _boolean, True, "emit op 't' records for TRUNCATE"),
    KeySpec("messages.topic", _optional_text, None, "logical messages topic (<prefix>.messages)"),
    KeySpec(
        "column.include.list",
        _patterns,
        (),
        "regexes of schema.table.column: the only columns in the change events' values",
    ),
    KeySpec(
        "column.exclude.list",
        _patterns,
        (),
        "regexes of schema.table.column: columns left out of the change events' values",
    ),
    KeySpec(
        "topic.regex",
        _optional_text,
        None,
        "route tables whose topic matches this regex (the whole name) to topic.replacement "
        "(Debezium's ByLogicalTableRouter)",
    ),
    KeySpec(
        "topic.replacement",
        _optional_text,
        None,
        "the topic topic.regex routes to, with Java's $1 / ${name} groups",
    ),
    KeySpec(
        "key.enforce.uniqueness",
        _boolean,
        True,
        "a routed table's key gets key.field.name, naming the table the row came from",
    ),
    KeySpec(
        "key.field.name",
        _text,
        "__dbz__physicalTableIdentifier",
        "the key field naming a routed row's table",
    ),
    KeySpec(
        "key.field.regex",
        _optional_text,
        None,
        "its value: key.field.replacement for this regex of the table's own topic (default "
        "the topic's name)",
    ),
    KeySpec(
        "key.field.replacement",
        _optional_text,
        None,
        "see key.field.regex",
    ),
    KeySpec(
        "message.key.columns",
        _message_key_columns,
        (),
        "key columns per table, Debezium's syntax: schema.table:col1,col2;regex.table:col",
    ),
    KeySpec(
        "event.processing.failure.handling.mode",
        _choice("fail", "warn", "skip"),
        "warn",
        "a change that cannot be converted: stop (fail), or dead-letter it (warn, skip)",
    ),
    KeySpec(
        "errors.max.retries",
        _integer,
        -1,
        "retries of a transient dependency fault (registry down): -1 no limit, 0 none",
    ),
    KeySpec("errors.retry.delay.initial.ms", _at_least(1), 300, "first wait before a retry"),
    KeySpec("errors.retry.delay.max.ms", _at_least(1), 10_000, "longest wait between retries"),
    KeySpec(
        "errors.deadletterqueue.topic.name",
        _optional_text,
        None,
        "dead-letter topic for unconvertible changes (<prefix>.dead_letter)",
    ),
    KeySpec("kafka.bootstrap.servers", _text, None, "Kafka brokers (required)"),
    KeySpec(
        "kafka.compression.type",
        _choice("none", "gzip", "snappy", "lz4", "zstd"),
        "lz4",
        "producer batch compression",
    ),
    KeySpec("kafka.linger.ms", _at_least(0), 5, "how long the producer waits to fill a batch"),
    KeySpec("kafka.batch.size", _at_least(1), 1_000_000, "maximum bytes per partition batch"),
    KeySpec(
        "kafka.delivery.timeout.ms",
        _at_least(1),
        300_000,
        "a record undelivered this long: streaming restarts from the slot (errors.*)",
    ),
    KeySpec("kafka.client.id", _text, "pgbridge", "client id shown in broker logs and quotas"),
    KeySpec(
        "exactly.once.support",
        _choice("disabled", "requested", "required"),
        "requested",
        "requested: exactly once where the Kafka cluster offers this bridge transactions, "
        "else at-least-once with a warning (pgbridge_exactly_once 0); required: exactly once "
        "or stop at start (each run of source transactions and the position it reaches go to "
        "Kafka in one Kafka transaction: read_committed consumers see each change once); "
        "disabled: at-least-once",
    ),
    KeySpec(
        "exactly.once.offsets.topic",
        _optional_text,
        None,
        "compacted topic of the positions committed with the records (default "
        "<topic.prefix>-offsets)",
    ),
    KeySpec(
        "exactly.once.transactional.id",
        _optional_text,
        None,
        "the producer's transactional.id, one per slot (default pgbridge-<slot.name>; the "
        "initial snapshot's producers add -snapshot-<n>): a newer instance fences an older one",
    ),
    KeySpec(
        "exactly.once.commit.interval.ms",
        _at_least(1),
        100,
        "how long a Kafka transaction collects whole source transactions before its commit",
    ),
    KeySpec(
        "kafka.security.protocol",
        _choice("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL", upper=True),
        "PLAINTEXT",
        "how the producer and admin client reach Kafka",
    ),
    KeySpec(
        "kafka.sasl.mechanism",
        _optional_choice("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", upper=True),
        None,
        "SASL mechanism (required with SASL_SSL / SASL_PLAINTEXT)",
    ),
    KeySpec("kafka.sasl.username", _optional_text, None, "SASL user (PLAIN, SCRAM)"),
    KeySpec("kafka.sasl.password", _secret, None, "SASL password (or kafka.sasl.password.file)"),
    KeySpec(
        "kafka.sasl.oauthbearer.token.endpoint.url",
        _optional_text,
        None,
        "OAUTHBEARER: the OIDC token endpoint (client credentials grant)",
    ),
    KeySpec("kafka.sasl.oauthbearer.client.id", _optional_text, None, "OAUTHBEARER client id"),
    KeySpec("kafka.sasl.oauthbearer.client.secret", _secret, None, "OAUTHBEARER client secret"),
    KeySpec("kafka.sasl.oauthbearer.scope", _optional_text, None, "OAUTHBEARER scope"),
    KeySpec(
        "kafka.ssl.ca.location",
        _optional_text,
        None,
        "CA bundle (PEM) for the brokers' certificates",
    ),
    KeySpec(
        "kafka.ssl.certificate.location",
        _optional_text,
        None,
        "client certificate (PEM), mutual TLS",
    ),
    KeySpec("kafka.ssl.key.location", _optional_text, None, "client certificate's key (PEM)"),
    KeySpec("kafka.ssl.key.password", _secret, None, "the client key's passphrase"),
    KeySpec(
        "kafka.ssl.endpoint.identification.algorithm",
        _choice("https", "none"),
        "https",
        "check the broker's host name against its certificate (none: do not)",
    ),
    KeySpec("max.queue.size", _at_least(1), 100_000, "records in flight to Kafka at most"),
    KeySpec(
        "max.queue.size.in.bytes",
        _at_least(1024),
        64 * 1024 * 1024,
        "bytes in flight to Kafka at most (part of the process's memory)",
    ),
    KeySpec("topic.creation.enable", _boolean, True, "create missing topics"),
    KeySpec("topic.creation.default.partitions", _partitions_like, -1, "-1: the broker's default"),
    KeySpec(
        "topic.creation.default.replication.factor", _partitions_like, -1, "-1: broker's default"
    ),
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
        "schema.registry.ssl.ca.location", _path, None, "CA certificates that verify the registry"
    ),
    KeySpec(
        "schema.registry.ssl.certificate.location",
        _path,
        None,
        "client certificate for the registry (mutual TLS)",
    ),
    KeySpec("schema.registry.ssl.key.location", _path, None, "its private key"),
    KeySpec(
        "schema.registry.bearer.auth.credentials.source",
        _optional_choice("OAUTHBEARER", "STATIC_TOKEN", upper=True),
        None,
        "bearer-token authentication: OAUTHBEARER (client credentials) or STATIC_TOKEN",
    ),
    KeySpec("schema.registry.bearer.auth.token", _secret, None, "STATIC_TOKEN: the token"),
    KeySpec(
        "schema.registry.bearer.auth.issuer.endpoint.url",
        _optional_text,
        None,
        "OAUTHBEARER: the OIDC token endpoint",
    ),
    KeySpec("schema.registry.bearer.auth.client.id", _optional_text, None, "OAUTHBEARER client"),
    KeySpec("schema.registry.bearer.auth.client.secret", _secret, None, "its secret"),
    KeySpec("schema.registry.bearer.auth.scope", _optional_text, None, "OAUTHBEARER scope"),
    KeySpec(
        "schema.registry.bearer.auth.logical.cluster",
        _optional_text,
        None,
        "Confluent Cloud: the registry's lsrc-… id (others ignore it)",
    ),
    KeySpec(
        "schema.registry.bearer.auth.identity.pool.id",
        _optional_text,
        None,
        "Confluent Cloud: the identity pool",
    ),
    KeySpec(
        "schema.compatibility.level",
        _optional_choice(
            *COMPATIBILITY_LEVELS,
            upper=True,
        ),
        "BACKWARD",
        "subject compatibility set on registration; empty: leave as is",
    ),
    KeySpec(
        "schema.incompatible.change.handling.mode",
        _choice("evolve", "fail"),
        "evolve",
        "a schema change the registry refuses: evolve (register it anyway, logged and "
        "counted) or fail (stop, as Debezium does)",
    ),
    KeySpec("metrics.port", _tcp_port, 0, "Prometheus endpoint port; 0 disables it"),
    KeySpec(
        "metrics.host", _text, "127.0.0.1", "address the metrics endpoint listens on (0.0.0.0: all)"
    ),
    KeySpec("log.format", _choice("text", "json"), "text", "log line format"),
    KeySpec(
        "log.level",
        _choice("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", upper=True),
        "INFO",
        "log level",
    ),
)

KEY_SPECS: Final = {spec.key: spec for spec in KEYS}
_SECRET_KEYS: Final = frozenset(
    {
        "database.password",
        "database.dsn",
        "schema.registry.basic.auth.user.info",
        "schema.registry.bearer.auth.token",
        "schema.registry.bearer.auth.client.secret",
        "kafka.sasl.password",
        "kafka.sasl.oauthbearer.client.secret",
        "kafka.ssl.key.password",
    }
)
_ENV_TO_KEY: Final = {env_name(k): k for k in KEY_SPECS} | {
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


def is_secret_key(key: str) -> bool:
    """Whether a setting holds a credential (masked everywhere, may come from a ``.file``)."""
    lowered = key.lower()
    return key in _SECRET_KEYS or any(word in lowered for word in _SECRET_WORDS)
