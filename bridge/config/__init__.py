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

from bridge.config.basics import ENV_PREFIX, RESERVED_ENV, Secret, env_name
from bridge.config.keys import KEYS, KeySpec, is_secret_key
from bridge.config.loader import (
    ClientSettings,
    load_client_security,
    load_client_settings,
    load_config,
)
from bridge.config.settings import (
    BridgeConfig,
    DatabaseConfig,
    EventsConfig,
    KafkaConfig,
    LoggingConfig,
    MetricsConfig,
    RegistryConfig,
    ReplicationConfig,
    Setting,
    SignalConfig,
    SnapshotConfig,
    TableFilter,
    TopicCreationConfig,
)

__all__ = [
    "ENV_PREFIX",
    "KEYS",
    "RESERVED_ENV",
    "BridgeConfig",
    "ClientSettings",
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
    "SignalConfig",
    "SnapshotConfig",
    "TableFilter",
    "TopicCreationConfig",
    "env_name",
    "is_secret_key",
    "load_client_security",
    "load_client_settings",
    "load_config",
]
