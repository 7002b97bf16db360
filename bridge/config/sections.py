"""Parsed key values -> the settings dataclasses, one section at a time, with the checks that
span keys (``heartbeat.interval.ms`` must be set for ``heartbeat.action.query``, …).

:func:`bridge.config.loader._build` parses every key of :data:`bridge.config.keys.KEYS` into a
:class:`Values` and calls these builders; each raises :class:`~bridge.errors.ConfigError`
naming the key that is wrong.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from bridge.column_controls import ColumnRule
from bridge.config.basics import _SLOT_NAME, _T, _TOPIC_NAME, PRODUCER_PREFIX, Secret, env_name
from bridge.config.kafka_security import librdkafka_properties
from bridge.config.registry_auth import registry_bearer_properties
from bridge.config.settings import (
    DEFAULT_STATE_DIR,
    DatabaseConfig,
    EventsConfig,
    KafkaConfig,
    LoggingConfig,
    MetricsConfig,
    RegistryConfig,
    ReplicationConfig,
    SignalConfig,
    SnapshotConfig,
    TableFilter,
    TopicCreationConfig,
)
from bridge.errors import ConfigError
from bridge.retry import RetryPolicy

Producer = list[tuple[str, str | Secret]]


class Values:
    """Every key's parsed value (or its default); the parsers in the key table already checked
    each one alone (type, choices, range), the builders check what spans keys."""

    def __init__(self, values: dict[str, object]) -> None:
        self.raw = values

    def __getitem__(self, key: str) -> object:
        return self.raw[key]

    def fill(self, settings: type[_T], **given: Any) -> _T:
        """``settings`` (a dataclass of bridge.config.settings) with each field that holds a
        key (settings.key_field) set from that key's value, unless ``given``."""
        values = {}
        for f in fields(settings):  # type: ignore[arg-type]
            if "key" not in f.metadata or f.name in given:
                continue
            # A derived field's builder computes it; forgetting one would hide the key.
            assert not f.metadata.get("derived"), f"{settings.__name__}.{f.name} not given"
            values[f.name] = self.raw[f.metadata["key"]]
        return settings(**values, **given)

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
    config = v.fill(DatabaseConfig)
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
    if v["debezium.offsets.topic"] and v["debezium.offsets.file"]:
        raise ConfigError("debezium.offsets.file", "cannot be combined with debezium.offsets.topic")
    if v["heartbeat.action.query"] and v["heartbeat.interval.ms"] == 0:
        raise ConfigError("heartbeat.interval.ms", "must be set for heartbeat.action.query")
    return v.fill(ReplicationConfig)


def signal(v: Values, prefix: str) -> SignalConfig:
    for channel in v.typed("signal.enabled.channels", tuple) or ():
        if channel not in ("source", "kafka"):
            raise ConfigError("signal.enabled.channels", f"unknown channel {channel!r}")
    return v.fill(
        SignalConfig,
        data_collection=signal_table(v["signal.data.collection"]),
        kafka_topic=str(v["signal.kafka.topic"] or f"{prefix}-signal"),
    )


def filters(v: Values, signals: SignalConfig) -> TableFilter:
    for include, exclude in (
        ("table.include.list", "table.exclude.list"),
        ("schema.include.list", "schema.exclude.list"),
    ):
        if v[include] and v[exclude]:
            raise ConfigError(exclude, f"cannot be combined with {include}")
    signal_table = signals.data_collection
    return v.fill(TableFilter, never=(signal_table,) if signal_table else ())


def events(
    v: Values, messages_topic: str, dead_letter_topic: str, column_rules: tuple[ColumnRule, ...]
) -> EventsConfig:
    if v["column.include.list"] and v["column.exclude.list"]:
        raise ConfigError("column.exclude.list", "cannot be combined with column.include.list")
    if (v["topic.regex"] is None) != (v["topic.replacement"] is None):
        raise ConfigError("topic.replacement", "topic.regex and topic.replacement go together")
    config = v.fill(
        EventsConfig,
        messages_topic=messages_topic,
        dead_letter_topic=dead_letter_topic,
        column_rules=column_rules,
    )
    config.router()  # the regexes and replacements checked at load
    return config


def kafka(v: Values, producer: Producer) -> KafkaConfig:
    offsets_topic = str(v["exactly.once.offsets.topic"] or f"{v['topic.prefix']}-offsets")
    check_topic_name("exactly.once.offsets.topic", offsets_topic)
    if any(name == "transactional.id" for name, _ in producer):
        raise ConfigError(
            "kafka.producer.transactional.id", "set exactly.once.transactional.id instead"
        )
    return v.fill(
        KafkaConfig,
        offsets_topic=offsets_topic,
        transactional_id=str(v["exactly.once.transactional.id"] or f"pgbridge-{v['slot.name']}"),
        bootstrap_servers=v.required("kafka.bootstrap.servers"),
        producer_overrides=tuple(producer),
        security=kafka_security(v.raw, producer),
    )


def topic_creation(v: Values, extra: list[tuple[str, str]]) -> TopicCreationConfig:
    return v.fill(TopicCreationConfig, extra=tuple(extra))


def registry(v: Values) -> RegistryConfig:
    return v.fill(
        RegistryConfig,
        url=v.required("schema.registry.url"),
        bearer_auth=registry_bearer_properties(v.raw),
    )


def retry(v: Values) -> RetryPolicy:
    retry_max = v["errors.max.retries"]
    assert isinstance(retry_max, int)
    if retry_max < -1:
        raise ConfigError("errors.max.retries", f"must be -1 (no limit) or at least 0: {retry_max}")
    initial_ms = v.typed("errors.retry.delay.initial.ms", int)
    max_ms = v.typed("errors.retry.delay.max.ms", int)
    assert initial_ms is not None and max_ms is not None
    if initial_ms > max_ms:
        raise ConfigError(
            "errors.retry.delay.initial.ms", "must not exceed errors.retry.delay.max.ms"
        )
    return RetryPolicy(retry_max, initial_ms, max_ms)


def metrics(v: Values) -> MetricsConfig:
    return v.fill(MetricsConfig)


def logging_config(v: Values) -> LoggingConfig:
    return v.fill(LoggingConfig)


def snapshot(
    v: Values, select_overrides: tuple[tuple[str, str], ...], signals: SignalConfig
) -> SnapshotConfig:
    config = v.fill(
        SnapshotConfig,
        select_overrides=select_overrides,
        state_dir=v.typed("state.dir", Path) or DEFAULT_STATE_DIR,
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
