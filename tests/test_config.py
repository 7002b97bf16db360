"""Configuration loading: precedence, validation naming keys, suggestions, secrets."""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from bridge.config import (
    KEYS,
    BridgeConfig,
    Secret,
    TableFilter,
    env_name,
    load_config,
)
from bridge.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "pgbridge.example.toml"

REQUIRED = {
    "topic.prefix": "shop",
    "database.dbname": "shop",
    "kafka.bootstrap.servers": "k:9092",
    "schema.registry.url": "http://r:8081",
}


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pgbridge.toml"
    path.write_text(text)
    return path


def _load(
    overrides: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    path: Path | None = None,
) -> BridgeConfig:
    return load_config(path, env or {}, {**REQUIRED, **(overrides or {})})


def _error(**kwargs: object) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        _load(**kwargs)  # type: ignore[arg-type]
    return raised.value


# -- sources and precedence -----------------------------------------------------------------------


def test_load_config_defaults_when_only_required_keys_given() -> None:
    config = _load()
    assert config.topic_prefix == "shop"
    assert config.replication.slot_name == "pgbridge"
    assert config.replication.publication_autocreate_mode == "all_tables"
    assert config.events.tombstones_on_delete is True
    assert config.events.truncate_events is True
    assert config.events.provide_transaction_metadata is False
    assert config.events.messages_topic == "shop.messages"
    assert config.kafka.compression_type == "lz4"
    assert config.topic_creation.topic_config() == {"cleanup.policy": "delete"}
    assert config.registry.compatibility_level == "BACKWARD"
    assert config.logging.format == "text"


def test_load_config_precedence_file_then_env_then_flags(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        """
        "topic.prefix" = "from_file"
        "slot.name" = "file_slot"
        "kafka.linger.ms" = 7
        "database.dbname" = "db"
        "kafka.bootstrap.servers" = "k:9092"
        "schema.registry.url" = "http://r"
        """,
    )
    env = {"PGBRIDGE_SLOT_NAME": "env_slot", "PGBRIDGE_TOPIC_PREFIX": "from_env"}
    config = load_config(path, env, {"topic.prefix": "from_flag"})
    assert config.topic_prefix == "from_flag"  # file < env < flag
    assert config.replication.slot_name == "env_slot"  # file < env
    assert config.kafka.linger_ms == 7  # file only
    origins = {s.key: s.origin for s in config.settings}
    assert origins["topic.prefix"] == "flag"
    assert origins["slot.name"] == "env PGBRIDGE_SLOT_NAME"
    assert origins["kafka.linger.ms"] == f"file {path}"
    assert origins["log.level"] == "default"


def test_load_config_nested_and_dotted_toml_are_the_same(tmp_path: Path) -> None:
    nested = _file(
        tmp_path,
        """
        [database]
        hostname = "db.internal"
        port = 6543
        [topic.creation.default]
        partitions = 6
        "cleanup.policy" = "compact"
        """,
    )
    config = load_config(nested, {}, REQUIRED)
    assert (config.database.hostname, config.database.port) == ("db.internal", 6543)
    assert config.topic_creation.partitions == 6
    assert config.topic_creation.cleanup_policy == "compact"


def test_load_config_key_given_twice_in_one_file_is_an_error(tmp_path: Path) -> None:
    path = _file(tmp_path, '"database.hostname" = "a"\n[database]\nhostname = "b"\n')
    with pytest.raises(ConfigError) as raised:
        load_config(path, {}, REQUIRED)
    assert raised.value.key == "database.hostname"


def test_load_config_parses_env_strings_into_types() -> None:
    env = {
        "PGBRIDGE_TOMBSTONES_ON_DELETE": "false",
        "PGBRIDGE_DATABASE_PORT": "5433",
        "PGBRIDGE_TABLE_INCLUDE_LIST": "public\\.orders, inventory\\..*",
        "PGBRIDGE_DECIMAL_HANDLING_MODE": "STRING",
        "PGBRIDGE_LOG_LEVEL": "debug",
    }
    config = _load(env=env)
    assert config.events.tombstones_on_delete is False
    assert config.database.port == 5433
    assert config.filters.table_include == ("public\\.orders", "inventory\\..*")
    assert config.events.decimal_handling_mode == "string"
    assert config.logging.level == "DEBUG"


def test_load_config_ignores_devstack_and_foreign_environment() -> None:
    env = {
        "PGBRIDGE_PG_DSN": "host=x",
        "PGBRIDGE_STACK_DIR": "/tmp",
        "PATH": "/usr/bin",
        "KAFKA_HEAP_OPTS": "-Xmx1g",
    }
    assert _load(env=env).database.dsn is None


def test_load_config_pass_through_producer_and_topic_settings(tmp_path: Path) -> None:
    env = {
        "PGBRIDGE_KAFKA_PRODUCER_SECURITY_PROTOCOL": "SASL_SSL",
        "PGBRIDGE_TOPIC_CREATION_DEFAULT_RETENTION_MS": "86400000",
    }
    config = _load(
        {"kafka.producer.sasl.password": "pw", "kafka.producer.socket.timeout.ms": "5"}, env
    )
    overrides = dict(config.kafka.producer_overrides)
    assert overrides["security.protocol"] == "SASL_SSL"
    assert overrides["socket.timeout.ms"] == "5"
    assert overrides["sasl.password"] == Secret("pw")
    assert config.topic_creation.topic_config() == {
        "cleanup.policy": "delete",
        "retention.ms": "86400000",
    }


# -- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("database.port", "abc", "expected an integer"),
        ("database.port", "70000", "not a TCP port"),
        ("slot.name", "Bad-Slot", "lower-case"),
        ("slot.failover", "sometimes", "true or false"),
        ("publication.autocreate.mode", "some", "all_tables, filtered, disabled"),
        ("decimal.handling.mode", "float", "precise, string, double"),
        ("plugin.name", "wal2json", "pgoutput"),
        ("tombstones.on.delete", "maybe", "true or false"),
        ("topic.prefix", "shop/eu", "not a valid Kafka topic name"),
        ("topic.creation.default.partitions", "0", "-1 (broker default) or at least 1"),
        ("topic.creation.default.cleanup.policy", "forever", "delete, compact"),
        ("kafka.compression.type", "brotli", "lz4"),
        ("max.queue.size", "0", "at least 1"),
        ("table.include.list", "public.(orders", "not a regular expression"),
        ("schema.compatibility.level", "SOMETIMES", "BACKWARD"),
        ("log.format", "xml", "text, json"),
        ("kafka.producer.acks", "1", "acks=all is required"),
        ("kafka.producer.enable.idempotence", "false", "always on"),
        ("kafka.producer.linger.ms", "5", "use kafka.linger.ms"),
        ("snapshot.rewritten.tables", "always", "off, incremental"),
    ],
)
def test_load_config_invalid_value_names_the_key(key: str, value: str, message: str) -> None:
    error = _error(overrides={key: value})
    assert error.key == key
    assert message in str(error)
    assert str(error).startswith(f"{key}: ")


def test_load_config_rewritten_tables_default_incremental_without_a_signal_table() -> None:
    """Rewritten tables are copied again by default: on PostgreSQL 14+ the snapshot's signals
    travel as logical messages, so no signal table is needed (bridge.signal_messages)."""
    assert _load().snapshot.rewritten_tables == "incremental"
    assert _load().signal.data_collection is None
    assert _load(overrides={"snapshot.rewritten.tables": "off"}).snapshot.rewritten_tables == "off"
    assert _load(overrides={"snapshot.new.tables": "parallel"}).snapshot.new_tables == "parallel"


def test_load_config_slot_failover_defaults_off_and_reaches_the_source() -> None:
    from bridge.runner import source_config

    assert _load().replication.slot_failover is False
    assert source_config(_load()).failover is False
    config = _load({"slot.failover": "true"})
    assert config.replication.slot_failover is True
    assert source_config(config).failover is True
    assert _load(env={"PGBRIDGE_SLOT_FAILOVER": "true"}).replication.slot_failover is True


@pytest.mark.parametrize("key", ["topic.prefix", "kafka.bootstrap.servers", "schema.registry.url"])
def test_load_config_missing_required_key_names_it(key: str) -> None:
    given = {k: v for k, v in REQUIRED.items() if k != key}
    with pytest.raises(ConfigError) as raised:
        load_config(None, {}, given)
    assert raised.value.key == key
    assert env_name(key) in str(raised.value)


def test_load_config_needs_dbname_or_dsn() -> None:
    given = {k: v for k, v in REQUIRED.items() if k != "database.dbname"}
    with pytest.raises(ConfigError) as raised:
        load_config(None, {}, given)
    assert raised.value.key == "database.dbname"
    assert load_config(None, {}, {**given, "database.dsn": "dbname=x"}).database.dbname is None


def test_load_config_include_and_exclude_lists_are_exclusive() -> None:
    error = _error(overrides={"table.include.list": "a\\.b", "table.exclude.list": "a\\.c"})
    assert error.key == "table.exclude.list"


def test_load_config_heartbeat_query_needs_an_interval() -> None:
    error = _error(overrides={"heartbeat.action.query": "SELECT 1"})
    assert error.key == "heartbeat.interval.ms"


# -- unknown keys ---------------------------------------------------------------------------------


def test_load_config_unknown_flag_suggests_the_closest_key() -> None:
    error = _error(overrides={"topic.prefx": "x"})
    assert error.key == "topic.prefx"
    assert "did you mean 'topic.prefix'?" in str(error)


def test_load_config_unknown_file_key_suggests_the_closest_key(tmp_path: Path) -> None:
    path = _file(tmp_path, '[database]\nhostnme = "db"\n')
    with pytest.raises(ConfigError) as raised:
        load_config(path, {}, REQUIRED)
    assert raised.value.key == "database.hostnme"
    assert "did you mean 'database.hostname'?" in str(raised.value)
    assert str(path) in str(raised.value)


def test_load_config_unknown_env_var_suggests_the_closest_name() -> None:
    error = _error(env={"PGBRIDGE_TOMBSTONES_ON_DELET": "false"})
    assert error.key == "PGBRIDGE_TOMBSTONES_ON_DELET"
    assert "did you mean 'PGBRIDGE_TOMBSTONES_ON_DELETE'?" in str(error)


def test_load_config_unknown_key_without_close_match_has_no_suggestion() -> None:
    error = _error(overrides={"completely.different": "x"})
    assert "unknown setting" in str(error) and "did you mean" not in str(error)


def test_load_config_bad_toml_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(_file(tmp_path, "topic.prefix = "), {}, {})
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml", {}, {})


# -- secrets --------------------------------------------------------------------------------------


def test_secret_repr_and_str_are_masked() -> None:
    secret = Secret("hunter2")
    assert repr(secret) == str(secret) == "***"
    assert f"{secret}" == "***" and "hunter2" not in repr([secret])
    assert secret.reveal() == "hunter2"
    assert secret == Secret("hunter2") and secret != Secret("other")


def test_load_config_secrets_never_in_repr_describe_or_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = _load(
        {
            "database.password": "pg-pass-123",
            "schema.registry.basic.auth.user.info": "u:reg-pass-456",
            "kafka.producer.sasl.password": "kafka-pass-789",
        },
        env={"PGBRIDGE_DATABASE_HOSTNAME": "db"},
    )
    described = config.describe()
    with caplog.at_level(logging.INFO):
        logging.getLogger("bridge.test").info("config %s / %r", config, config)
    for text in (repr(config), str(config), described, caplog.text):
        for secret in ("pg-pass-123", "reg-pass-456", "kafka-pass-789"):
            assert secret not in text
    assert "database.password" in described and "***" in described
    assert "database.hostname" in described and "db" in described
    # The clients still get the real values.
    assert "pg-pass-123" in config.database.conninfo()
    assert config.registry.client_config()["basic.auth.user.info"] == "u:reg-pass-456"


def test_load_config_password_from_file(tmp_path: Path) -> None:
    secret_file = tmp_path / "pw"
    secret_file.write_text("s3cr3t\n")
    config = _load(env={"PGBRIDGE_DATABASE_PASSWORD_FILE": str(secret_file)})
    assert config.database.password == Secret("s3cr3t")
    origins = {s.key: s.origin for s in config.settings}
    assert "database.password.file" in origins["database.password"]
    # A flag's password beats the environment's file; both in one source is an error.
    flagged = _load(
        {"database.password": "flag"}, env={"PGBRIDGE_DATABASE_PASSWORD_FILE": str(secret_file)}
    )
    assert flagged.database.password == Secret("flag")
    error = _error(overrides={"database.password": "a", "database.password.file": str(secret_file)})
    assert error.key == "database.password.file"
    missing = _error(overrides={"database.password.file": str(tmp_path / "nope")})
    assert missing.key == "database.password.file" and "cannot read" in str(missing)


def test_load_config_secret_file_for_producer_sasl_password(tmp_path: Path) -> None:
    secret_file = tmp_path / "kafka"
    secret_file.write_text("kpw")
    config = _load({"kafka.producer.sasl.password.file": str(secret_file)})
    assert dict(config.kafka.producer_overrides)["sasl.password"] == Secret("kpw")


def test_database_conninfo_from_parts_and_dsn() -> None:
    parts = _load({"database.hostname": "db", "database.port": "5433", "database.user": "rep"})
    assert conninfo_to_dict(parts.database.conninfo()) == {
        "host": "db",
        "port": "5433",
        "user": "rep",
        "dbname": "shop",
    }
    # Parts given explicitly override the DSN's (the required dbname here).
    dsn = _load({"database.dsn": "host=a dbname=x", "database.password": "p w"})
    assert conninfo_to_dict(dsn.database.conninfo()) == {
        "host": "a",
        "dbname": "shop",
        "password": "p w",
    }


# -- filters --------------------------------------------------------------------------------------


def test_table_filter_matches_whole_names_like_debezium() -> None:
    only = TableFilter(table_include=(r"public\.orders", r"inventory\..*"))
    assert only.includes("public", "orders")
    assert not only.includes("public", "orders_archive")  # full match, not prefix
    assert only.includes("inventory", "items")
    assert not only.includes("public", "users")
    without = TableFilter(schema_exclude=("audit",), table_exclude=(r".*\.tmp_.*",))
    assert without.includes("public", "users")
    assert not without.includes("audit", "log")
    assert not without.includes("public", "tmp_x")
    assert TableFilter().includes("any", "table")


# -- the example file -----------------------------------------------------------------------------


def test_example_toml_loads_and_documents_every_key() -> None:
    config = load_config(EXAMPLE, {}, {})
    assert config.topic_prefix == "shop"
    text = EXAMPLE.read_text()
    missing = [spec.key for spec in KEYS if f'"{spec.key}"' not in text]
    assert missing == []


def test_example_toml_values_are_the_defaults() -> None:
    document = tomllib.loads(EXAMPLE.read_text())
    required = {"topic.prefix", "database.dbname", "kafka.bootstrap.servers", "schema.registry.url"}
    by_key = {spec.key: spec for spec in KEYS}
    for key, value in document.items():
        if key in required:
            continue
        spec = by_key[key]
        parsed = spec.parse(key, value)
        assert parsed == spec.default, key


# -- keys and failures ----------------------------------------------------------------------------


def test_load_config_message_key_columns_debezium_syntax_first_match_wins() -> None:
    config = _load({"message.key.columns": "public.events:id; audit\\..*:event_id, at ;.*:k"})
    events = config.events
    assert events.key_columns("public", "events") == ("id",)
    assert events.key_columns("audit", "log") == ("event_id", "at")
    assert events.key_columns("other", "t") == ("k",)
    assert _load().events.key_columns("public", "events") is None


@pytest.mark.parametrize("bad", ["public.events", "public.events:", ":id", "(:id"])
def test_load_config_message_key_columns_malformed_is_a_config_error(bad: str) -> None:
    assert _error(overrides={"message.key.columns": bad}).key == "message.key.columns"


def test_load_config_failure_policy_defaults_to_warn_with_a_dead_letter_topic() -> None:
    events = _load().events
    assert (events.failure_handling_mode, events.dead_letter_topic) == ("warn", "shop.dead_letter")
    events = _load({"event.processing.failure.handling.mode": "FAIL"}).events
    assert events.failure_handling_mode == "fail"
    error = _error(overrides={"errors.deadletterqueue.topic.name": "bad topic"})
    assert error.key == "errors.deadletterqueue.topic.name"


# -- type handling modes --------------------------------------------------------------------------


def test_load_config_type_handling_modes_reach_type_options() -> None:
    from bridge.runner import type_options
    from bridge.types import TypeOptions

    # The mapper's own defaults are pgbridge's avro form; the configuration's, Debezium's.
    assert type_options(_load()) == TypeOptions(
        timestamptz_handling="string", logical_types="connect", hstore_handling="json"
    )
    config = _load(
        {
            "decimal.handling.mode": "string",
            "unconstrained.numeric.handling.mode": "double",
            "money.fraction.digits": "4",
            "interval.handling.mode": "string",
            "time.precision.mode": "connect",
            "timestamptz.handling.mode": "string",
            "schema.logical.types": "connect",
            "binary.handling.mode": "base64-url-safe",
            "hstore.handling.mode": "map",
        }
    )
    assert type_options(config) == TypeOptions(
        decimal_handling="string",
        unconstrained_numeric="double",
        money_fraction_digits=4,
        interval_handling="string",
        time_precision="connect",
        timestamptz_handling="string",
        logical_types="connect",
        binary_handling="base64-url-safe",
        hstore_handling="map",
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("interval.handling.mode", "iso"),
        ("time.precision.mode", "adaptive"),  # Debezium's millisecond-adaptive mode: not offered
        ("binary.handling.mode", "base32"),
        ("hstore.handling.mode", "text"),
        ("schema.logical.types", "debezium"),
        ("money.fraction.digits", "11"),
        ("money.fraction.digits", "-1"),
    ],
)
def test_load_config_refuses_unknown_type_handling_modes(key: str, value: str) -> None:
    assert _error(overrides={key: value}).key == key


def test_load_config_secret_file_readable_by_others_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret_file = tmp_path / "pw"
    secret_file.write_text("s3cr3t\n")
    secret_file.chmod(0o600)
    with caplog.at_level(logging.WARNING, logger="bridge.config.loader"):
        _load(env={"PGBRIDGE_DATABASE_PASSWORD_FILE": str(secret_file)})
    assert "readable by other accounts" not in caplog.text
    secret_file.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="bridge.config.loader"):
        _load(env={"PGBRIDGE_DATABASE_PASSWORD_FILE": str(secret_file)})
    assert "database.password.file" in caplog.text and "mode 644" in caplog.text
    assert "s3cr3t" not in caplog.text


def test_load_config_defaults_are_debeziums_wire_form_and_accept_pgbridges() -> None:
    """The default never breaks a Kafka Connect consumer (docs/debezium-consumers.md)."""
    events = _load().events
    assert (events.schema_logical_types, events.timestamptz_handling_mode) == ("connect", "string")
    assert _load({"schema.logical.types": "AVRO"}).events.schema_logical_types == "avro"
    assert _load({"timestamptz.handling.mode": "instant"}).events.timestamptz_handling_mode == (
        "instant"
    )


# -- snapshot.select.statement.overrides (Debezium's pair of keys) --------------------------------


def test_select_overrides_pair_the_list_with_each_tables_statement(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        '"snapshot.select.statement.overrides" = ["public.orders", "Sales.Big Table"]\n'
        '"snapshot.select.statement.overrides.public.orders" = '
        '"SELECT * FROM public.orders WHERE id > 10;"\n'
        '"snapshot.select.statement.overrides.Sales.Big Table" = '
        '"WITH x AS (SELECT * FROM \\"Sales\\".\\"Big Table\\") SELECT * FROM x"\n',
    )
    config = _load(path=path)
    assert config.snapshot.select_overrides == (
        ("public.orders", "SELECT * FROM public.orders WHERE id > 10"),
        ("Sales.Big Table", 'WITH x AS (SELECT * FROM "Sales"."Big Table") SELECT * FROM x'),
    )
    shown = {s.key for s in config.settings}
    assert "snapshot.select.statement.overrides.public.orders" in shown


def test_select_overrides_a_listed_table_without_statement_is_an_error() -> None:
    error = _error(overrides={"snapshot.select.statement.overrides": "public.orders"})
    assert error.key == "snapshot.select.statement.overrides.public.orders"
    assert "give its SELECT statement" in str(error)


def test_select_overrides_a_statement_for_an_unlisted_table_is_an_error() -> None:
    error = _error(
        overrides={"snapshot.select.statement.overrides.public.orders": "SELECT * FROM orders"}
    )
    assert error.key == "snapshot.select.statement.overrides.public.orders"
    assert "add the table to snapshot.select.statement.overrides" in str(error)


def test_select_overrides_refuses_what_is_not_a_query() -> None:
    error = _error(
        overrides={
            "snapshot.select.statement.overrides": "public.orders",
            "snapshot.select.statement.overrides.public.orders": "DELETE FROM orders",
        }
    )
    assert "expected a SELECT statement" in str(error)


def test_load_config_ignores_the_tools_own_environment_variables() -> None:
    # PGBRIDGE_NATIVE=0 (the pure-Python path) and the stack's variables are not settings.
    env = {"PGBRIDGE_NATIVE": "0", "PGBRIDGE_STACK": "containers", "PGBRIDGE_SPARK_MASTER": "x"}
    config = _load(env=env)
    assert config.topic_prefix == "shop"


@pytest.mark.parametrize(
    "switch", ["PGBRIDGE_READER_THREAD", "PGBRIDGE_NATIVE_BATCHES", "PGBRIDGE_NATIVE_READS"]
)
def test_the_accelerator_switches_the_readme_documents_are_accepted(
    switch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The README's switches must not make pgbridge refuse to start ("unknown environment
    # variable"), and must do what it says.
    assert _load(env={switch: "0"}).topic_prefix == "shop"
    monkeypatch.setenv(switch, "0")
    if switch == "PGBRIDGE_READER_THREAD":
        from bridge.source.frame_reader import frame_reading

        assert frame_reading() is None  # the pipeline's thread reads
    elif switch == "PGBRIDGE_NATIVE_READS":
        from bridge.native.kafka_reader import range_reader

        range_reader.cache_clear()
        try:
            assert range_reader() is None  # confluent-kafka's Consumer reads
        finally:
            range_reader.cache_clear()
    else:
        from bridge.sink.native_batches import native_batches

        native_batches.cache_clear()
        try:
            assert native_batches() is None  # produce_batch instead
        finally:
            native_batches.cache_clear()


def _documented_variables() -> set[str]:
    """Every ``PGBRIDGE_*`` name the docs, the example configuration, docker-compose.yml or the
    package's own code mention (prefix forms such as ``PGBRIDGE_KAFKA_PRODUCER_`` excepted)."""
    import re

    texts = [
        REPO / "README.md",
        REPO / "CONTRIBUTING.md",
        EXAMPLE,
        REPO / "docker-compose.yml",
        *(REPO / "docs").glob("*.md"),
        *(REPO / "bridge").rglob("*.py"),
    ]
    names: set[str] = set()
    for path in texts:
        names.update(re.findall(r"\bPGBRIDGE_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    return names


def test_every_environment_variable_the_docs_or_code_name_is_accepted() -> None:
    # pgbridge run refuses unknown PGBRIDGE_* variables (a typo must not pass silently), so a
    # name the docs or the code use and the loader does not know would stop it at start.
    names = _documented_variables()
    assert {"PGBRIDGE_TOPIC_PREFIX", "PGBRIDGE_NATIVE", "PGBRIDGE_PG_DSN"} <= names
    refused = []
    for name in sorted(names):
        try:
            _load(env={name: "1"})
        except ConfigError as exc:
            if "unknown environment variable" in str(exc):
                refused.append(name)
    assert refused == []


def test_each_key_is_declared_once_and_read_into_one_settings_field() -> None:
    """One declaration per key (#34): the key table holds its name, parser (type, choices,
    range), default and help; a settings field names the key it holds (key_field, or
    derived_field where a builder computes it) and takes its default from the table. A key
    added to the table and to no field, or held by two, fails here. The security and retry
    keys are translated as groups (client properties, RetryPolicy)."""
    import dataclasses

    from bridge.config import settings as model
    from bridge.config.keys import KEY_SPECS

    holders: dict[str, list[str]] = {}
    for name in dir(model):
        cls = getattr(model, name)
        if (
            isinstance(cls, type)
            and dataclasses.is_dataclass(cls)
            and cls.__module__ == model.__name__
        ):
            for f in dataclasses.fields(cls):
                if "key" in f.metadata:
                    holders.setdefault(f.metadata["key"], []).append(f"{name}.{f.name}")
                    if not f.metadata.get("derived"):
                        assert f.default == KEY_SPECS[f.metadata["key"]].default, f.name
    groups = ("kafka.security.", "kafka.sasl.", "kafka.ssl.", "schema.registry.bearer.", "errors.")
    assert set(holders) <= set(KEY_SPECS)
    for key in KEY_SPECS:
        if key.startswith(groups) and key != "errors.deadletterqueue.topic.name":
            assert key not in holders, key
        else:
            assert len(holders.get(key, [])) == 1, (key, holders.get(key))


def test_a_section_with_every_key_unset_equals_its_dataclass_defaults() -> None:
    from bridge.config import ReplicationConfig, SnapshotConfig, TopicCreationConfig

    config = _load()
    assert config.replication == ReplicationConfig()
    assert config.topic_creation == TopicCreationConfig()
    assert config.snapshot == SnapshotConfig()
