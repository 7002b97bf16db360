"""Parsed key values -> the settings dataclasses, one section at a time, with the checks that
span keys (``heartbeat.interval.ms`` must be set for ``heartbeat.action.query``, …).

:func:`bridge.config.loader._build` parses every key of :data:`bridge.config.keys.KEYS` into a
:class:`Values` and calls these builders; each raises :class:`~bridge.errors.ConfigError`
naming the key that is wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bridge.config.kafka_security import librdkafka_properties
from bridge.config.registry_auth import registry_bearer_properties
from bridge.config.settings import (
    _SLOT_NAME,
    _T,
    _TOPIC_NAME,
    DEFAULT_STATE_DIR,
    PRODUCER_PREFIX,
    DatabaseConfig,
    EventsConfig,
    KafkaConfig,
    LoggingConfig,
    MetricsConfig,
    RegistryConfig,
    ReplicationConfig,
    Secret,
    SignalConfig,
    SnapshotConfig,
    TableFilter,
    TopicCreationConfig,
    env_name,
)
from bridge.errors import ConfigError
from bridge.retry import RetryPolicy

Producer = list[tuple[str, str | Secret]]


class Values:
    """Every key's parsed value (or its default), with the range checks the builders share."""

    def __init__(self, values: dict[str, object]) -> None:
        self.raw = values

    def __getitem__(self, key: str) -> object:
        return self.raw[key]

    def typed(self, key: str, kind: type[_T]) -> _T | None:
        value = self.raw[key]
        # The parsers in KEYS produce these types; a mismatch is a bug in the table.
        assert value is None or isinstance(value, kind), (key, value)
        return value

    def required(self, key: str) -> Any:
        value = self.raw[key]
        if value is None or value == "":
            raise ConfigError(key, f"is required (set it in the file or {env_name(key)})")
        return value

    def at_least(self, key: str, minimum: int) -> int:
        value = self.raw[key]
        assert isinstance(value, int)
        if value < minimum:
            raise ConfigError(key, f"must be at least {minimum}, got {value}")
        return value

    def between(self, key: str, minimum: int, maximum: int) -> int:
        value = self.at_least(key, minimum)
        if value > maximum:
            raise ConfigError(key, f"must be at most {maximum}, got {value}")
        return value

    def partitions_like(self, key: str) -> int:
        value = self.raw[key]
        assert isinstance(value, int)
        if value == 0 or value < -1:
            raise ConfigError(key, f"must be -1 (broker default) or at least 1, got {value}")
        return value


def topic_names(v: Values) -> tuple[str, str, str]:
    """``topic.prefix``, and the messages and dead-letter topics (defaults derived from it)."""
    prefix = v.required("topic.prefix")
    check_topic_name("topic.prefix", prefix)
    messages_topic = str(v["messages.topic"] or f"{prefix}.messages")
    check_topic_name("messages.topic", messages_topic)
    dead_letter_topic = str(v["errors.deadletterqueue.topic.name"] or f"{prefix}.dead_letter")
    check_topic_name("errors.deadletterqueue.topic.name", dead_letter_topic)
    return prefix, messages_topic, dead_letter_topic


def database(v: Values) -> DatabaseConfig:
    config = DatabaseConfig(
        hostname=v.typed("database.hostname", str),
        port=v.typed("database.port", int),
        user=v.typed("database.user", str),
        password=v.typed("database.password", Secret),
        dbname=v.typed("database.dbname", str),
        dsn=v.typed("database.dsn", Secret),
        sslmode=v.typed("database.sslmode", str),
        sslrootcert=v.typed("database.sslrootcert", Path),
        sslcert=v.typed("database.sslcert", Path),
        sslkey=v.typed("database.sslkey", Path),
        sslpassword=v.typed("database.sslpassword", Secret),
    )
    if config.dsn is None and config.dbname is None:
        raise ConfigError("database.dbname", "is required unless database.dsn is given")
    if config.port is not None and not 1 <= config.port <= 65535:
        raise ConfigError("database.port", f"{config.port} is not a TCP port")
    return config


def replication(v: Values) -> ReplicationConfig:
    slot = str(v["slot.name"])
    if not _SLOT_NAME.match(slot):
        raise ConfigError("slot.name", f"{slot!r}: use 1-63 lower-case letters, digits, _")
    if not v["publication.name"]:
        raise ConfigError("publication.name", "must not be empty")
    heartbeat_ms = v.at_least("heartbeat.interval.ms", 0)
    if v["heartbeat.action.query"] and heartbeat_ms == 0:
        raise ConfigError("heartbeat.interval.ms", "must be set for heartbeat.action.query")
    return ReplicationConfig(
        slot_name=slot,
        slot_failover=bool(v["slot.failover"]),
        publication_name=str(v["publication.name"]),
        publication_autocreate_mode=str(v["publication.autocreate.mode"]),
        publication_refresh_interval_ms=v.at_least("publication.refresh.interval.ms", 100),
        plugin_name=str(v["plugin.name"]),
        pgoutput_binary=bool(v["pgoutput.binary"]),
        status_update_interval_ms=v.at_least("status.update.interval.ms", 1),
        heartbeat_interval_ms=heartbeat_ms,
        heartbeat_action_query=v.typed("heartbeat.action.query", str),
        spill_threshold_bytes=v.at_least("streaming.spill.threshold.bytes", 0),
        spill_dir=v.typed("streaming.spill.dir", Path),
    )


def signal(v: Values, prefix: str) -> SignalConfig:
    channels = v.typed("signal.enabled.channels", tuple) or ()
    for channel in channels:
        if channel not in ("source", "kafka"):
            raise ConfigError("signal.enabled.channels", f"unknown channel {channel!r}")
    return SignalConfig(
        data_collection=signal_table(v["signal.data.collection"]),
        enabled_channels=channels,
        kafka_topic=str(v["signal.kafka.topic"] or f"{prefix}-signal"),
        table_autocreate=bool(v["signal.table.autocreate"]),
        incremental_chunk_size=v.between("incremental.snapshot.chunk.size", 1, 1_000_000),
    )


def filters(v: Values, signals: SignalConfig) -> TableFilter:
    for include, exclude in (
        ("table.include.list", "table.exclude.list"),
        ("schema.include.list", "schema.exclude.list"),
    ):
        if v[include] and v[exclude]:
            raise ConfigError(exclude, f"cannot be combined with {include}")
    signal_table = signals.data_collection
    return TableFilter(
        table_include=v.typed("table.include.list", tuple) or (),
        table_exclude=v.typed("table.exclude.list", tuple) or (),
        schema_include=v.typed("schema.include.list", tuple) or (),
        schema_exclude=v.typed("schema.exclude.list", tuple) or (),
        never=(signal_table,) if signal_table else (),
    )


def events(v: Values, messages_topic: str, dead_letter_topic: str) -> EventsConfig:
    return EventsConfig(
        messages_topic=messages_topic,
        tombstones_on_delete=bool(v["tombstones.on.delete"]),
        decimal_handling_mode=str(v["decimal.handling.mode"]),
        unconstrained_numeric_handling_mode=str(v["unconstrained.numeric.handling.mode"]),
        money_fraction_digits=v.between("money.fraction.digits", 0, 10),
        interval_handling_mode=str(v["interval.handling.mode"]),
        time_precision_mode=str(v["time.precision.mode"]),
        timestamptz_handling_mode=str(v["timestamptz.handling.mode"]),
        schema_logical_types=str(v["schema.logical.types"]),
        binary_handling_mode=str(v["binary.handling.mode"]),
        hstore_handling_mode=str(v["hstore.handling.mode"]),
        provide_transaction_metadata=bool(v["provide.transaction.metadata"]),
        truncate_events=bool(v["truncate.events"]),
        message_key_columns=v.typed("message.key.columns", tuple) or (),
        failure_handling_mode=str(v["event.processing.failure.handling.mode"]),
        dead_letter_topic=dead_letter_topic,
    )


def kafka(v: Values, producer: Producer) -> KafkaConfig:
    return KafkaConfig(
        bootstrap_servers=v.required("kafka.bootstrap.servers"),
        compression_type=str(v["kafka.compression.type"]),
        linger_ms=v.at_least("kafka.linger.ms", 0),
        batch_size=v.at_least("kafka.batch.size", 1),
        delivery_timeout_ms=v.at_least("kafka.delivery.timeout.ms", 1),
        max_queue_size=v.at_least("max.queue.size", 1),
        max_queue_size_in_bytes=v.at_least("max.queue.size.in.bytes", 1024),
        client_id=str(v["kafka.client.id"]),
        producer_overrides=tuple(producer),
        security=kafka_security(v.raw, producer),
    )


def topic_creation(v: Values, extra: list[tuple[str, str]]) -> TopicCreationConfig:
    return TopicCreationConfig(
        enable=bool(v["topic.creation.enable"]),
        partitions=v.partitions_like("topic.creation.default.partitions"),
        replication_factor=v.partitions_like("topic.creation.default.replication.factor"),
        cleanup_policy=str(v["topic.creation.default.cleanup.policy"]),
        extra=tuple(extra),
    )


def registry(v: Values) -> RegistryConfig:
    return RegistryConfig(
        url=v.required("schema.registry.url"),
        basic_auth_user_info=v.typed("schema.registry.basic.auth.user.info", Secret),
        ssl_ca_location=v.typed("schema.registry.ssl.ca.location", Path),
        ssl_certificate_location=v.typed("schema.registry.ssl.certificate.location", Path),
        ssl_key_location=v.typed("schema.registry.ssl.key.location", Path),
        compatibility_level=v.typed("schema.compatibility.level", str),
        incompatible_change_handling=str(v["schema.incompatible.change.handling.mode"]),
        bearer_auth=registry_bearer_properties(v.raw),
    )


def retry(v: Values) -> RetryPolicy:
    retry_max = v["errors.max.retries"]
    assert isinstance(retry_max, int)
    if retry_max < -1:
        raise ConfigError("errors.max.retries", f"must be -1 (no limit) or at least 0: {retry_max}")
    initial_ms = v.at_least("errors.retry.delay.initial.ms", 1)
    max_ms = v.at_least("errors.retry.delay.max.ms", 1)
    if initial_ms > max_ms:
        raise ConfigError(
            "errors.retry.delay.initial.ms", "must not exceed errors.retry.delay.max.ms"
        )
    return RetryPolicy(retry_max, initial_ms, max_ms)


def metrics(v: Values) -> MetricsConfig:
    port = v.at_least("metrics.port", 0)
    if port > 65535:
        raise ConfigError("metrics.port", f"{port} is not a TCP port")
    return MetricsConfig(port=port, host=str(v["metrics.host"]))


def logging_config(v: Values) -> LoggingConfig:
    return LoggingConfig(format=str(v["log.format"]), level=str(v["log.level"]))


def snapshot(
    v: Values, select_overrides: tuple[tuple[str, str], ...], signals: SignalConfig
) -> SnapshotConfig:
    config = SnapshotConfig(
        mode=str(v["snapshot.mode"]),
        include_collection_list=v.typed("snapshot.include.collection.list", tuple) or (),
        select_overrides=select_overrides,
        max_threads=v.between("snapshot.max.threads", 1, 64),
        chunk_size=v.at_least("snapshot.chunk.size", 1),
        progress_interval_ms=v.at_least("snapshot.progress.interval.ms", 100),
        state_file=v.typed("snapshot.state.file", Path),
        state_dir=v.typed("state.dir", Path) or DEFAULT_STATE_DIR,
        new_tables=str(v["snapshot.new.tables"]),
        rewritten_tables=str(v["snapshot.rewritten.tables"]),
    )
    return config


def signal_table(raw: object) -> str | None:
    """``signal.data.collection`` as ``schema.table`` (``public`` when no schema is given)."""
    if raw is None:
        return None
    text = str(raw)
    if text.count(".") > 1 or text.startswith(".") or text.endswith("."):
        raise ConfigError("signal.data.collection", f"expected schema.table, got {text!r}")
    return text if "." in text else f"public.{text}"


def check_topic_name(key: str, name: str) -> None:
    if not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise ConfigError(
            key, f"{name!r} is not a valid Kafka topic name (letters, digits, '.', '_', '-')"
        )


def kafka_security(
    values: dict[str, object], producer: Producer
) -> tuple[tuple[str, str | Secret], ...]:
    """The first-class TLS/SASL keys as client properties. A property set two ways (a
    first-class key and ``kafka.producer.<property>``) is refused rather than guessed; a
    protocol given only the older way (``kafka.producer.security.protocol``) stands."""
    security = librdkafka_properties(values)
    overridden = {prop for prop, _ in producer}
    explicit_protocol = values.get("kafka.security.protocol") != "PLAINTEXT"
    for prop, _ in security:
        if prop in overridden and (prop != "security.protocol" or explicit_protocol):
            raise ConfigError(
                f"{PRODUCER_PREFIX}{prop}", "is also set by a kafka.* key: keep one of the two"
            )
    return tuple((p, v) for p, v in security if p not in overridden)
