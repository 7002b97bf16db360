"""Loading: merge file, environment and flags per key, then validate into dataclasses."""

from __future__ import annotations

import difflib
import logging
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bridge.config.kafka_security import (
    KAFKA_SECURITY_KEYS,
    java_properties,
    librdkafka_properties,
)
from bridge.config.keys import (
    _ENV_TO_KEY,
    _PRODUCER_FORBIDDEN,
    _SECRET_KEYS,
    _SPECS,
    KEYS,
    _passthrough_value,
    _text,
    is_secret_key,
)
from bridge.config.registry_auth import REGISTRY_BEARER_KEYS, registry_bearer_properties
from bridge.config.settings import (
    _SLOT_NAME,
    _T,
    _TOPIC_NAME,
    DEFAULT_STATE_DIR,
    ENV_PREFIX,
    PRODUCER_PREFIX,
    RESERVED_ENV,
    SECRET_FILE_SUFFIX,
    SELECT_OVERRIDE_PREFIX,
    TOPIC_CONFIG_PREFIX,
    BridgeConfig,
    DatabaseConfig,
    EventsConfig,
    KafkaConfig,
    LoggingConfig,
    MetricsConfig,
    RegistryConfig,
    ReplicationConfig,
    Secret,
    Setting,
    SignalConfig,
    SnapshotConfig,
    TableFilter,
    TopicCreationConfig,
    env_name,
)
from bridge.errors import ConfigError
from bridge.retry import RetryPolicy

logger = logging.getLogger(__name__)

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
    for prefix in (PRODUCER_PREFIX, TOPIC_CONFIG_PREFIX, SELECT_OVERRIDE_PREFIX):
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
        _warn_if_readable_by_others(file_key, path)
        raw[key] = (secret, f"{origin} ({file_key})")


def _warn_if_readable_by_others(file_key: str, path: Path) -> None:
    """Like ssh and libpq: a secret other accounts may read is worth a warning (not an error:
    Kubernetes mounts secrets 0644 unless told otherwise, inside a container of one user)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if mode & 0o077:
        logger.warning(
            "%s: %s is readable by other accounts (mode %o); chmod 600 it",
            file_key,
            path,
            mode & 0o777,
        )


def _select_overrides(
    tables: tuple[str, ...], statements: Mapping[str, str]
) -> tuple[tuple[str, str], ...]:
    """Debezium's pair of keys: the list names the tables, one key per table holds its query;
    each without the other is a mistake worth stopping for (rows silently copied whole, or a
    statement silently ignored)."""
    for table in tables:
        if not statements.get(table):
            raise ConfigError(
                f"{SELECT_OVERRIDE_PREFIX}{table}",
                "missing: snapshot.select.statement.overrides names this table, give its "
                "SELECT statement",
            )
    for table in statements:
        if table not in tables:
            raise ConfigError(
                f"{SELECT_OVERRIDE_PREFIX}{table}",
                "not used: add the table to snapshot.select.statement.overrides",
            )
    for table, statement in statements.items():
        if not statement.lower().startswith(("select", "with", "table", "values", "(")):
            raise ConfigError(
                f"{SELECT_OVERRIDE_PREFIX}{table}", "expected a SELECT statement (a query)"
            )
    return tuple((t, statements[t].rstrip(";").strip()) for t in tables)


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
    statements: dict[str, str] = {}
    for key in sorted(k for k in raw if k not in _SPECS):
        value, origin = raw[key]
        if key.startswith(SELECT_OVERRIDE_PREFIX):
            statements[key.removeprefix(SELECT_OVERRIDE_PREFIX)] = _text(key, value).strip()
            settings.append(
                Setting(key, statements[key.removeprefix(SELECT_OVERRIDE_PREFIX)], origin)
            )
            continue
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

    def between(key: str, minimum: int, maximum: int) -> int:
        value = at_least(key, minimum)
        if value > maximum:
            raise ConfigError(key, f"must be at most {maximum}, got {value}")
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
    dead_letter_topic = values["errors.deadletterqueue.topic.name"] or f"{prefix}.dead_letter"
    _check_topic_name("errors.deadletterqueue.topic.name", str(dead_letter_topic))

    database = DatabaseConfig(
        hostname=typed("database.hostname", str),
        port=typed("database.port", int),
        user=typed("database.user", str),
        password=typed("database.password", Secret),
        dbname=typed("database.dbname", str),
        dsn=typed("database.dsn", Secret),
        sslmode=typed("database.sslmode", str),
        sslrootcert=typed("database.sslrootcert", Path),
        sslcert=typed("database.sslcert", Path),
        sslkey=typed("database.sslkey", Path),
        sslpassword=typed("database.sslpassword", Secret),
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
        slot_failover=bool(values["slot.failover"]),
        publication_name=str(values["publication.name"]),
        publication_autocreate_mode=str(values["publication.autocreate.mode"]),
        publication_refresh_interval_ms=at_least("publication.refresh.interval.ms", 100),
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
    signal_table = _signal_table(values["signal.data.collection"])
    channels = typed("signal.enabled.channels", tuple) or ()
    for channel in channels:
        if channel not in ("source", "kafka"):
            raise ConfigError("signal.enabled.channels", f"unknown channel {channel!r}")
    signal = SignalConfig(
        data_collection=signal_table,
        enabled_channels=channels,
        kafka_topic=str(values["signal.kafka.topic"] or f"{prefix}-signal"),
        table_autocreate=bool(values["signal.table.autocreate"]),
        incremental_chunk_size=between("incremental.snapshot.chunk.size", 1, 1_000_000),
    )
    filters = TableFilter(
        table_include=typed("table.include.list", tuple) or (),
        table_exclude=typed("table.exclude.list", tuple) or (),
        schema_include=typed("schema.include.list", tuple) or (),
        schema_exclude=typed("schema.exclude.list", tuple) or (),
        never=(signal_table,) if signal_table else (),
    )

    events = EventsConfig(
        messages_topic=str(messages_topic),
        tombstones_on_delete=bool(values["tombstones.on.delete"]),
        decimal_handling_mode=str(values["decimal.handling.mode"]),
        unconstrained_numeric_handling_mode=str(values["unconstrained.numeric.handling.mode"]),
        money_fraction_digits=between("money.fraction.digits", 0, 10),
        interval_handling_mode=str(values["interval.handling.mode"]),
        time_precision_mode=str(values["time.precision.mode"]),
        timestamptz_handling_mode=str(values["timestamptz.handling.mode"]),
        schema_logical_types=str(values["schema.logical.types"]),
        binary_handling_mode=str(values["binary.handling.mode"]),
        hstore_handling_mode=str(values["hstore.handling.mode"]),
        provide_transaction_metadata=bool(values["provide.transaction.metadata"]),
        truncate_events=bool(values["truncate.events"]),
        message_key_columns=typed("message.key.columns", tuple) or (),
        failure_handling_mode=str(values["event.processing.failure.handling.mode"]),
        dead_letter_topic=str(dead_letter_topic),
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
        security=_kafka_security(values, producer),
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
        ssl_ca_location=typed("schema.registry.ssl.ca.location", Path),
        ssl_certificate_location=typed("schema.registry.ssl.certificate.location", Path),
        ssl_key_location=typed("schema.registry.ssl.key.location", Path),
        compatibility_level=typed("schema.compatibility.level", str),
        incompatible_change_handling=str(values["schema.incompatible.change.handling.mode"]),
        bearer_auth=registry_bearer_properties(values),
    )

    retry_max = values["errors.max.retries"]
    assert isinstance(retry_max, int)
    if retry_max < -1:
        raise ConfigError("errors.max.retries", f"must be -1 (no limit) or at least 0: {retry_max}")
    initial_ms = at_least("errors.retry.delay.initial.ms", 1)
    max_ms = at_least("errors.retry.delay.max.ms", 1)
    if initial_ms > max_ms:
        raise ConfigError(
            "errors.retry.delay.initial.ms", "must not exceed errors.retry.delay.max.ms"
        )
    retry = RetryPolicy(retry_max, initial_ms, max_ms)

    metrics_port = at_least("metrics.port", 0)
    if metrics_port > 65535:
        raise ConfigError("metrics.port", f"{metrics_port} is not a TCP port")
    metrics = MetricsConfig(port=metrics_port, host=str(values["metrics.host"]))
    logging_config = LoggingConfig(format=str(values["log.format"]), level=str(values["log.level"]))

    # messages.topic's default is derived; show the value actually used.
    settings = [
        Setting(s.key, messages_topic, s.origin)
        if s.key == "messages.topic"
        else Setting(s.key, dead_letter_topic, s.origin)
        if s.key == "errors.deadletterqueue.topic.name"
        else s
        for s in settings
    ]
    snapshot = SnapshotConfig(
        mode=str(values["snapshot.mode"]),
        include_collection_list=typed("snapshot.include.collection.list", tuple) or (),
        select_overrides=_select_overrides(
            typed("snapshot.select.statement.overrides", tuple) or (), statements
        ),
        max_threads=between("snapshot.max.threads", 1, 64),
        chunk_size=at_least("snapshot.chunk.size", 1),
        progress_interval_ms=at_least("snapshot.progress.interval.ms", 100),
        state_file=typed("snapshot.state.file", Path),
        state_dir=typed("state.dir", Path) or DEFAULT_STATE_DIR,
        new_tables=str(values["snapshot.new.tables"]),
        rewritten_tables=str(values["snapshot.rewritten.tables"]),
    )
    if snapshot.new_tables == "parallel" and signal_table is None:
        raise ConfigError(
            "snapshot.new.tables",
            "parallel copies new tables by incremental snapshots: set signal.data.collection",
        )
    if snapshot.rewritten_tables == "incremental" and signal_table is None:
        raise ConfigError(
            "snapshot.rewritten.tables",
            "incremental copies rewritten tables by incremental snapshots: set "
            "signal.data.collection",
        )

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
        retry=retry,
        snapshot=snapshot,
        signal=signal,
        settings=tuple(sorted(settings, key=lambda s: s.key)),
    )


def _signal_table(raw: object) -> str | None:
    """``signal.data.collection`` as ``schema.table`` (``public`` when no schema is given)."""
    if raw is None:
        return None
    text = str(raw)
    if text.count(".") > 1 or text.startswith(".") or text.endswith("."):
        raise ConfigError("signal.data.collection", f"expected schema.table, got {text!r}")
    return text if "." in text else f"public.{text}"


def _check_topic_name(key: str, name: str) -> None:
    if not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise ConfigError(
            key, f"{name!r} is not a valid Kafka topic name (letters, digits, '.', '_', '-')"
        )


def _kafka_security(
    values: dict[str, object], producer: list[tuple[str, str | Secret]]
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


#: What the apply job takes from a pgbridge configuration: how to reach Kafka and the registry.
_REGISTRY_TLS_KEYS = (
    "schema.registry.ssl.ca.location",
    "schema.registry.ssl.certificate.location",
    "schema.registry.ssl.key.location",
)
_CLIENT_SECURITY_KEYS = (
    frozenset(KAFKA_SECURITY_KEYS)
    | {"schema.registry.basic.auth.user.info"}
    | frozenset(_REGISTRY_TLS_KEYS)
    | frozenset(REGISTRY_BEARER_KEYS)
)


#: The keys ``pgbridge apply`` shares with ``pgbridge run`` beside the security ones: where the
#: topics are and what they are called.
_CLIENT_LOCATION_KEYS = frozenset(
    {"topic.prefix", "kafka.bootstrap.servers", "schema.registry.url"}
)


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """What the apply job takes from a pgbridge configuration: the topics' prefix, how to reach
    Kafka (Java client form, for Spark's Kafka source) and the registry. ``None``: not set."""

    topic_prefix: str | None
    bootstrap_servers: str | None
    registry_url: str | None
    kafka: tuple[tuple[str, str | Secret], ...]
    registry: tuple[tuple[str, str | Secret], ...]


def load_client_settings(path: Path | None, env: Mapping[str, str]) -> ClientSettings:
    """The client settings of a pgbridge configuration file and ``PGBRIDGE_*`` variables
    (variables win over the file, as for ``pgbridge run``), checked as ``pgbridge run`` checks
    them; every other key is ignored (it configures the bridge)."""
    wanted = _CLIENT_SECURITY_KEYS | _CLIENT_LOCATION_KEYS
    raw: dict[str, tuple[object, str]] = {}
    if path is not None:
        for key, value in _read_toml(path).items():
            if key.removesuffix(SECRET_FILE_SUFFIX) in wanted:
                raw[key] = (value, f"file {path}")
    for name, value in env.items():
        if name.startswith(ENV_PREFIX) and name not in RESERVED_ENV:
            try:
                key = _env_key(name)
            except ConfigError:
                continue  # not one of these keys: the apply job's environment has others
            if key.removesuffix(SECRET_FILE_SUFFIX) in wanted:
                raw[key] = (value, f"env {name}")
    _resolve_secret_files(raw)
    values = {
        key: _SPECS[key].parse(key, raw[key][0]) if key in raw else _SPECS[key].default
        for key in wanted
    }
    registry: list[tuple[str, str | Secret]] = []
    user_info = values["schema.registry.basic.auth.user.info"]
    if isinstance(user_info, Secret):
        registry.append(("basic.auth.user.info", user_info))
    for key in _REGISTRY_TLS_KEYS:
        if values[key] is not None:
            registry.append((key.removeprefix("schema.registry."), str(values[key])))
    registry += registry_bearer_properties(values)

    def text(key: str) -> str | None:
        value = values[key]
        return str(value) if value else None

    return ClientSettings(
        topic_prefix=text("topic.prefix"),
        bootstrap_servers=text("kafka.bootstrap.servers"),
        registry_url=text("schema.registry.url"),
        kafka=java_properties(values),
        registry=tuple(registry),
    )


def load_client_security(
    path: Path | None, env: Mapping[str, str]
) -> tuple[tuple[tuple[str, str | Secret], ...], tuple[tuple[str, str | Secret], ...]]:
    """The Kafka and registry client settings of :func:`load_client_settings`."""
    settings = load_client_settings(path, env)
    return settings.kafka, settings.registry
