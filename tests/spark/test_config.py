"""ApplyConfig validation and the Kafka options it produces (pure, nothing running)."""

from __future__ import annotations

import argparse

import pytest

from bridge.errors import ConfigError
from bridge.spark.config import ApplyConfig, interval_seconds


def _config(**overrides: object) -> ApplyConfig:
    settings: dict[str, object] = {
        "topic_prefix": "pg-1",
        "bootstrap_servers": "localhost:9092",
        "registry_url": "http://localhost:8081",
        "delta_base": "/data/delta",
        "checkpoint_location": "/data/checkpoint",
        "dead_letter_location": "/data/dead",
    }
    settings.update(overrides)
    return ApplyConfig(**settings)


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"topic_prefix": ""}, "topic_prefix"),
        ({"topic_prefix": "a b"}, "topic_prefix"),
        ({"registry_url": "localhost:8081"}, "registry_url"),
        ({"bootstrap_servers": " "}, "bootstrap_servers"),
        ({"delta_base": ""}, "delta_base"),
        ({"dead_letter_location": "/data/delta/"}, "dead_letter_location"),
        ({"tables": ("public",)}, "tables"),
        ({"tables": ("a b.c",)}, "tables"),
        ({"tables": (".a",)}, "tables"),
        ({"variable_decimal": (39, 2)}, "variable_decimal"),
        ({"variable_decimal": (10, 11)}, "variable_decimal"),
        ({"trigger_interval": "soon"}, "trigger_interval"),
        ({"starting_offsets": "beginning"}, "starting_offsets"),
        ({"max_offsets_per_trigger": 0}, "max_offsets_per_trigger"),
        ({"parallel_tables": 0}, "parallel_tables"),
        ({"lane_min_records": 0}, "lane_min_records"),
        ({"mode": "merge-on-read"}, "mode"),
        ({"compaction_interval": "often"}, "compaction_interval"),
        ({"held_retry_interval": "5 fortnights"}, "held_retry_interval"),
        ({"kafka_options": (("kafka.security.protocol", "SSL"),)}, "kafka_options"),
        ({"metrics_port": 70000}, "metrics_port"),
    ],
)
def test_apply_config_rejects_invalid_setting(overrides: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        _config(**overrides)
    assert info.value.key == key


def test_apply_config_subscribes_by_pattern_without_table_list() -> None:
    options = _config().kafka_source_options()
    assert options["subscribePattern"] == r"pg\-1\..+\..+"
    assert "subscribe" not in options
    assert options["startingOffsets"] == "earliest"
    assert options["failOnDataLoss"] == "true"


def test_apply_config_subscribes_to_explicit_tables() -> None:
    options = _config(
        tables=("public.a", "s.b"), max_offsets_per_trigger=10, kafka_options=(("x.y", "1"),)
    ).kafka_source_options()
    assert options["subscribe"] == "pg-1.public.a,pg-1.s.b"
    assert options["maxOffsetsPerTrigger"] == "10"
    assert options["kafka.x.y"] == "1"


def test_changelog_mode_queries_keep_apart_from_each_other() -> None:
    """Ingest and compaction: own checkpoints and Delta app ids, under the job's checkpoint."""
    from bridge.spark.changelog import changelog_path, compaction_config, ingest_checkpoint

    config = _config(mode="changelog", checkpoint_location="/c/apply/")
    compact = compaction_config(config)
    assert compact.checkpoint_location == "/c/apply/compact"
    assert ingest_checkpoint(config) == "/c/apply/ingest"
    assert compact.txn_app_id != config.txn_app_id
    assert changelog_path(config) == config.delta_base.rstrip("/") + "/_pgbridge_changelog"


def test_apply_config_txn_app_id_follows_checkpoint() -> None:
    assert _config().txn_app_id == _config(checkpoint_location="/data/checkpoint/").txn_app_id
    assert _config().txn_app_id != _config(checkpoint_location="/other").txn_app_id
    assert _config(app_id="mine").txn_app_id == "mine"


def test_apply_config_table_topics_have_two_or_more_segments_after_prefix() -> None:
    import re

    config = _config()
    pattern = config.kafka_source_options()["subscribePattern"]
    for topic, is_table in [
        ("pg-1.public.t", True),
        ("pg-1.Weird_Schema.Mixed.Case-Table", True),  # a dot in the table name
        ("pg-1.transaction", False),
        ("pg-1.messages", False),
        ("pg-1.dead_letter", False),
        ("other.public.t", False),
        ("pg-10.public.t", False),
    ]:
        assert config.is_table_topic(topic) is is_table, topic
        # Kafka matches the whole topic name against the pattern (Java's matches()).
        assert (re.fullmatch(pattern, topic) is not None) is is_table, topic


def test_apply_config_table_paths_are_safe_and_unambiguous() -> None:
    config = _config(delta_base="s3a://b/delta/")
    assert config.table_path("public", "t") == "s3a://b/delta/public/t"
    assert config.table_path("public", "order_items") == "s3a://b/delta/public/order_items"
    assert (
        config.table_path("Weird Schema", "Mixed.Case-Table")
        == "s3a://b/delta/Weird%20Schema/Mixed.Case-Table"
    )
    assert config.table_path("a/b", "..") == "s3a://b/delta/a%2Fb/%2E."
    assert config.table_path("naïve", "日本") == "s3a://b/delta/na%C3%AFve/%E6%97%A5%E6%9C%AC"
    # '%' itself is encoded, so no two names share a path; a leading '_' never collides with
    # the job's own _history and _pgbridge_positions tables.
    assert config.table_path("a%20b", "t") != config.table_path("a b", "t")
    assert config.table_path("_history", "t") == "s3a://b/delta/%5Fhistory/t"
    assert config.history_path("s", "q'\"t") == "s3a://b/delta/_history/s/q%27%22t"
    assert config.positions_path == "s3a://b/delta/_pgbridge_positions"


def test_config_from_args_reads_options_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from bridge.spark.arguments import add_apply_arguments, config_from_args

    monkeypatch.setenv("PGBRIDGE_BOOTSTRAP_SERVERS", "k:9092")
    monkeypatch.setenv("PGBRIDGE_REGISTRY_URL", "http://r:8081")
    parser = argparse.ArgumentParser()
    add_apply_arguments(parser)
    args = parser.parse_args(
        [
            "--topic-prefix",
            "pg",
            "--delta-base",
            "/d",
            "--checkpoint",
            "/c",
            "--dead-letter",
            "/x",
            "--table",
            "public.a",
            "--table",
            "s.b",
            "--available-now",
            "--kafka-option",
            "security.protocol=SSL",
            "--variable-decimal",
            "30,6",
            "--mode",
            "changelog",
            "--compaction-interval",
            "2 minutes",
            "--lane-min-records",
            "2000",
            "--held-retry-interval",
            "90 s",
        ]
    )
    config = config_from_args(args)
    assert config.held_retry_seconds == 90
    assert (config.mode, config.compaction_interval) == ("changelog", "2 minutes")
    assert config.lane_min_records == 2000
    assert config.variable_decimal == (30, 6)
    assert (config.bootstrap_servers, config.registry_url) == ("k:9092", "http://r:8081")
    assert config.tables == ("public.a", "s.b") and config.available_now
    assert config.kafka_options == (("security.protocol", "SSL"),)
    # Freshness by default: a one-second trigger, from the command line as from the API.
    api_default = ApplyConfig("pg", "k:9092", "http://r:8081", "/d", "/c", "/x").trigger_interval
    assert config.trigger_interval == api_default == "1 second"


def test_config_from_args_rejects_option_without_value() -> None:
    import argparse

    from bridge.spark.arguments import add_apply_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_apply_arguments(parser)
    args = parser.parse_args(
        [
            "--topic-prefix",
            "pg",
            "--delta-base",
            "/d",
            "--checkpoint",
            "/c",
            "--dead-letter",
            "/x",
            "--bootstrap-servers",
            "k:1",
            "--registry-url",
            "http://r",
            "--registry-option",
            "oops",
        ]
    )
    with pytest.raises(ConfigError) as info:
        config_from_args(args)
    assert info.value.key == "registry_options"


def _apply_args(*argv: str) -> argparse.Namespace:

    from bridge.spark.arguments import add_apply_arguments

    parser = argparse.ArgumentParser()
    add_apply_arguments(parser)
    return parser.parse_args(["--delta-base", "/d", "--checkpoint", "/c", "--dead-letter", "/x",
                              *argv])  # fmt: skip


def _clear_pgbridge_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in [n for n in os.environ if n.startswith("PGBRIDGE_")]:
        monkeypatch.delenv(name)


def test_apply_reads_the_configuration_file_pgbridge_run_reads(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pathlib import Path

    from bridge.config import load_config
    from bridge.spark.arguments import config_from_args

    _clear_pgbridge_environment(monkeypatch)
    toml = Path(str(tmp_path)) / "pgbridge.toml"
    toml.write_text(
        '"database.dbname" = "shop"\n'
        '"topic.prefix" = "shop"\n'
        '"kafka.bootstrap.servers" = "b1:9092,b2:9092"\n'
        '"schema.registry.url" = "http://registry:8081"\n'
        '"kafka.security.protocol" = "SSL"\n'
        '"snapshot.mode" = "no_data"\n'  # a bridge-only key: ignored by apply
    )
    run = load_config(toml, {}, {})
    config = config_from_args(_apply_args("--config", str(toml)))
    assert (
        (config.topic_prefix, config.bootstrap_servers, config.registry_url)
        == (
            run.topic_prefix,
            run.kafka.bootstrap_servers,
            run.registry.url,
        )
        == ("shop", "b1:9092,b2:9092", "http://registry:8081")
    )
    assert dict(config.kafka_options)["security.protocol"] == "SSL"

    # PGBRIDGE_* variables win over the file, as for pgbridge run; flags win over both.
    monkeypatch.setenv("PGBRIDGE_TOPIC_PREFIX", "env-shop")
    monkeypatch.setenv("PGBRIDGE_KAFKA_BOOTSTRAP_SERVERS", "env:9092")
    monkeypatch.setenv("PGBRIDGE_SCHEMA_REGISTRY_URL", "http://env-registry")
    monkeypatch.setenv("PGBRIDGE_BOOTSTRAP_SERVERS", "stack:1")  # the local stack's: last
    config = config_from_args(_apply_args("-c", str(toml)))
    assert (config.topic_prefix, config.bootstrap_servers, config.registry_url) == (
        "env-shop", "env:9092", "http://env-registry")  # fmt: skip
    config = config_from_args(
        _apply_args(
            "-c",
            str(toml),
            "--topic-prefix",
            "flag",
            "--bootstrap-servers",
            "f:1",
            "--registry-url",
            "http://flag",
        )
    )
    assert (config.topic_prefix, config.bootstrap_servers, config.registry_url) == (
        "flag", "f:1", "http://flag")  # fmt: skip


def test_apply_without_a_topic_prefix_names_the_ways_to_give_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bridge.spark.arguments import config_from_args

    _clear_pgbridge_environment(monkeypatch)
    args = _apply_args("--bootstrap-servers", "k:1", "--registry-url", "http://r")
    with pytest.raises(ConfigError) as info:
        config_from_args(args)
    assert info.value.key == "topic.prefix" and "--topic-prefix" in str(info.value)
    monkeypatch.setenv("PGBRIDGE_TOPIC_PREFIX", "shop")
    with pytest.raises(ConfigError) as info:
        config_from_args(_apply_args("--registry-url", "http://r"))
    assert info.value.key == "kafka.bootstrap.servers"
    assert "PGBRIDGE_KAFKA_BOOTSTRAP_SERVERS" in str(info.value)


def test_apply_master_option_names_the_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--master spark://…`` is the session's master; without it the environment's or
    spark-submit's (None here)."""
    from bridge.spark.arguments import config_from_args

    _clear_pgbridge_environment(monkeypatch)
    flags = ("--topic-prefix", "pg", "--bootstrap-servers", "b:9092", "--registry-url", "http://r")
    config = config_from_args(_apply_args(*flags, "--master", "spark://10.0.0.5:7077"))
    assert config.spark_master == "spark://10.0.0.5:7077"
    assert config_from_args(_apply_args(*flags)).spark_master is None


def test_metrics_endpoint_serves_the_apply_metrics_until_stopped() -> None:
    """``pgbridge apply --metrics-port``: the job's metrics over HTTP while it runs; a port in
    use is a ConfigError naming it."""
    import socket
    import urllib.request

    from bridge.spark.job import serve_metrics

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    stop = serve_metrics(_config(metrics_port=port))
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            assert "# TYPE pgbridge_apply_freshness_seconds gauge" in reply.read().decode()
        with pytest.raises(ConfigError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            serve_metrics(_config(metrics_port=port))
    finally:
        stop()
    serve_metrics(_config(metrics_port=port))()  # released: a next run can listen there
    assert serve_metrics(_config())() is None  # port 0: no endpoint


def test_kafka_source_answers_fetches_at_once_unless_the_user_says() -> None:
    """Spark's reader waits out the broker's fetch.max.wait.ms once per topic-partition and
    batch (see kafka_source_options); the job's default is no wait, a user's setting wins."""
    assert _config().kafka_source_options()["kafka.fetch.max.wait.ms"] == "0"
    options = _config(kafka_options=(("fetch.max.wait.ms", "100"),)).kafka_source_options()
    assert options["kafka.fetch.max.wait.ms"] == "100"


def test_kafka_source_reads_committed_records_only() -> None:
    """Records of an open or aborted Kafka transaction (exactly.once.support) are not read."""
    assert _config().kafka_source_options()["kafka.isolation.level"] == "read_committed"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5 minutes", 300), ("500 ms", 0.5), ("1 second", 1), ("1.5 min", 90), ("2 hours", 7200),
     ("10s", 10), (" 30 sec ", 30)],
)  # fmt: skip
def test_intervals_in_seconds(text: str, seconds: float) -> None:
    assert interval_seconds(text) == seconds


def test_a_held_table_is_tried_again_every_five_minutes_by_default() -> None:
    assert _config().held_retry_seconds == 300
    with pytest.raises(ValueError, match="'soon' is not an interval"):
        interval_seconds("soon")
