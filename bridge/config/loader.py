"""Loading: merge file, environment and flags per key, then validate into dataclasses."""

from __future__ import annotations

import difflib
import logging
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bridge.column_controls import ColumnRule, is_control_key, parse_rule, shown_key
from bridge.config import sections
from bridge.config.basics import (
    ENV_PREFIX,
    PRODUCER_PREFIX,
    RESERVED_ENV,
    SECRET_FILE_SUFFIX,
    SELECT_OVERRIDE_PREFIX,
    TOPIC_CONFIG_PREFIX,
    Secret,
    env_name,
)
from bridge.config.kafka_security import (
    KAFKA_SECURITY_KEYS,
    java_properties,
)
from bridge.config.keys import (
    _ENV_TO_KEY,
    _PRODUCER_FORBIDDEN,
    _SECRET_KEYS,
    KEY_SPECS,
    KEYS,
    _passthrough_value,
    _text,
    is_secret_key,
)
from bridge.config.registry_auth import REGISTRY_BEARER_KEYS, registry_bearer_properties
from bridge.config.settings import BridgeConfig, Setting
from bridge.errors import ConfigError
from bridge.routing import DEFAULT_KEY_FIELD

logger = logging.getLogger(__name__)

#: The column controls an environment variable can set (bridge.column_controls).
_ENV_CONTROL: Final = re.compile(r"column\.(?:mask\.with|truncate\.to)\.\d+\.chars")

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
    if not key.endswith(SECRET_FILE_SUFFIX) or key in KEY_SPECS:
        return False
    base = key.removesuffix(SECRET_FILE_SUFFIX)
    return base in _SECRET_KEYS or (base.startswith(PRODUCER_PREFIX) and is_secret_key(base))


def _known(key: str) -> bool:
    if key in KEY_SPECS or _is_secret_file_key(key) or is_control_key(key):
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
        raise ConfigError(key, f"unknown setting {where}{_suggest(key, KEY_SPECS)}")
    return key


def _env_key(name: str) -> str:
    if name in _ENV_TO_KEY:
        return _ENV_TO_KEY[name]
    # PGBRIDGE_COLUMN_MASK_WITH_<N>_CHARS, PGBRIDGE_COLUMN_TRUNCATE_TO_<N>_CHARS (a hash key's
    # algorithm and salt are spelled in the file or as a flag: an environment name cannot).
    control = name.removeprefix(ENV_PREFIX).lower().replace("_", ".")
    if _ENV_CONTROL.fullmatch(control):
        return control
    # Pass-through properties are dotted lower-case names (librdkafka's and Kafka's own).
    for prefix in (PRODUCER_PREFIX, TOPIC_CONFIG_PREFIX):
        env_prefix = env_name(prefix)
        if name.startswith(env_prefix) and len(name) > len(env_prefix):
            key = prefix + name[len(env_prefix) :].lower().replace("_", ".")
            if key not in KEY_SPECS:
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
    producer, topic_extra, statements, column_rules = _passthrough(raw, settings)

    v = sections.Values(values)
    prefix, messages_topic, dead_letter_topic = sections.topic_names(v)
    # The derived defaults of messages.topic and the dead-letter topic: show the values used.
    derived = {
        "messages.topic": messages_topic,
        "errors.deadletterqueue.topic.name": dead_letter_topic,
    }
    settings = [
        Setting(s.key, derived[s.key], s.origin) if s.key in derived else s for s in settings
    ]
    signal = sections.signal(v, prefix)
    overrides = _select_overrides(
        v.typed("snapshot.select.statement.overrides", tuple) or (), statements
    )
    return BridgeConfig(
        topic_prefix=prefix,
        database=sections.database(v),
        replication=sections.replication(v),
        filters=sections.filters(v, signal),
        events=sections.events(v, messages_topic, dead_letter_topic, column_rules),
        kafka=sections.kafka(v, producer),
        topic_creation=sections.topic_creation(v, topic_extra),
        registry=sections.registry(v),
        metrics=sections.metrics(v),
        logging=sections.logging_config(v),
        retry=sections.retry(v),
        snapshot=sections.snapshot(v, overrides, signal),
        signal=signal,
        settings=tuple(sorted(settings, key=lambda s: s.key)),
    )


def _passthrough(
    raw: Mapping[str, tuple[object, str]], settings: list[Setting]
) -> tuple[sections.Producer, list[tuple[str, str]], dict[str, str], tuple[ColumnRule, ...]]:
    """The keys not in KEYS: ``kafka.producer.*`` (librdkafka properties), topic configs,
    ``snapshot.select.statement.overrides.<table>`` statements and the patterned column
    controls (a hash key's salt hidden where settings are shown); each is added to
    ``settings``."""
    producer: sections.Producer = []
    topic_extra: list[tuple[str, str]] = []
    statements: dict[str, str] = {}
    rules: list[ColumnRule] = []
    for key in sorted(k for k in raw if k not in KEY_SPECS):
        value, origin = raw[key]
        if is_control_key(key):
            rules.append(parse_rule(key, value))
            settings.append(Setting(shown_key(key), value, origin))
            continue
        if key.startswith(SELECT_OVERRIDE_PREFIX):
            statement = _text(key, value).strip()
            statements[key.removeprefix(SELECT_OVERRIDE_PREFIX)] = statement
            settings.append(Setting(key, statement, origin))
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
    return producer, topic_extra, statements, tuple(rules)


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
#: How a routed topic's key names each row's table (bridge.routing): the apply job adds it.
_CLIENT_ROUTING_KEYS = ("key.field.name", "key.field.regex", "key.field.replacement")


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """What the apply job takes from a pgbridge configuration: the topics' prefix, how to reach
    Kafka (Java client form, for Spark's Kafka source) and the registry. ``None``: not set."""

    topic_prefix: str | None
    bootstrap_servers: str | None
    registry_url: str | None
    kafka: tuple[tuple[str, str | Secret], ...]
    registry: tuple[tuple[str, str | Secret], ...]
    #: key.field.name, key.field.regex, key.field.replacement (bridge.routing)
    routed_key: tuple[str, str | None, str | None] = (DEFAULT_KEY_FIELD, None, None)


def load_client_settings(path: Path | None, env: Mapping[str, str]) -> ClientSettings:
    """The client settings of a pgbridge configuration file and ``PGBRIDGE_*`` variables
    (variables win over the file, as for ``pgbridge run``), checked as ``pgbridge run`` checks
    them; every other key is ignored (it configures the bridge)."""
    wanted = _CLIENT_SECURITY_KEYS | _CLIENT_LOCATION_KEYS | set(_CLIENT_ROUTING_KEYS)
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
        key: KEY_SPECS[key].parse(key, raw[key][0]) if key in raw else KEY_SPECS[key].default
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
        routed_key=(
            str(values["key.field.name"]),
            text("key.field.regex"),
            text("key.field.replacement"),
        ),
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
