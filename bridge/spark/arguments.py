"""The apply job's options (``pgbridge apply`` and ``spark-submit … job.py``) and the
:class:`~bridge.spark.config.ApplyConfig` they make, from the flags over pgbridge run's
configuration file and ``PGBRIDGE_*`` variables."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from bridge.spark.config import ApplyConfig
from bridge.spark.file_columns import DEFAULT_CACHE_MB

__all__ = ["add_apply_arguments", "config_from_args"]


def add_apply_arguments(parser: argparse.ArgumentParser) -> None:
    """The job's options, for ``spark-submit job.py`` and for ``pgbridge apply``."""
    parser.add_argument(
        "-c",
        "--config",
        "--security-config",
        dest="config",
        metavar="FILE",
        help="the pgbridge configuration file pgbridge run reads: topic.prefix, "
        "kafka.bootstrap.servers, schema.registry.url and the Kafka and registry security keys "
        "(kafka.security.protocol, kafka.sasl.*, kafka.ssl.*, schema.registry.*; *.file "
        "secrets) apply here too, as do their PGBRIDGE_* variables; flags win over both",
    )
    parser.add_argument(
        "--topic-prefix", help="topics are <prefix>.<schema>.<table> (default: topic.prefix)"
    )
    parser.add_argument(
        "--bootstrap-servers",
        help="Kafka brokers (default: kafka.bootstrap.servers, else PGBRIDGE_BOOTSTRAP_SERVERS)",
    )
    parser.add_argument(
        "--registry-url",
        help="the registry (default: schema.registry.url, else PGBRIDGE_REGISTRY_URL)",
    )
    _where_arguments(parser)
    _batch_arguments(parser)
    _table_arguments(parser)


def _where_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the job writes: tables, its checkpoint, dead letters; which tables."""
    parser.add_argument("--delta-base", required=True, help="tables go to <base>/<schema>/<table>")
    parser.add_argument("--checkpoint", required=True, help="the streaming checkpoint location")
    parser.add_argument("--dead-letter", required=True, help="the dead-letter Delta table's path")
    parser.add_argument(
        "--table",
        action="append",
        default=[],
        help="schema.table (repeat; default: all under the prefix)",
    )


def _batch_arguments(parser: argparse.ArgumentParser) -> None:
    """How the job reads: trigger, offsets, batch bound, and the Spark it runs on."""
    parser.add_argument(
        "--trigger-interval",
        default="1 second",
        help='the micro-batch period (default "1 second"): longer means fewer, larger commits',
    )
    parser.add_argument(
        "--available-now", action="store_true", help="apply what is there, then stop"
    )
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        help="Kafka records per micro-batch (default: sized from Spark's memory, 1 per KiB of "
        "its unified memory, (heap - 300 MiB) x spark.memory.fraction, so a topic of any "
        "length is applied in bounded batches)",
    )
    parser.add_argument(
        "--master",
        help="the Spark master: spark://host:7077 for a standalone cluster, yarn, k8s://..., "
        "local[N] (default: PGBRIDGE_SPARK_MASTER, else spark-submit's or local[*])",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of the Spark session pgbridge apply builds (repeat), e.g. "
        "spark.driver.memory=4g",
    )


def _table_arguments(parser: argparse.ArgumentParser) -> None:
    """How the job writes each table: mode, history, Delta features, columns, clients."""
    parser.add_argument("--parallel-tables", type=int, default=2, help="tables merged at once")
    parser.add_argument(
        "--mode",
        choices=("merge", "changelog"),
        default="merge",
        help="merge: a MERGE per changed table and batch; changelog: one changelog commit per "
        "batch, current state through views, compaction into the tables behind",
    )
    parser.add_argument(
        "--held-retry-interval",
        default="5 minutes",
        help="how often the running job tries again to apply a table held since a batch of its "
        "failed (its records wait in the dead-letter table, in order); every start does too",
    )
    parser.add_argument(
        "--compaction-interval",
        default="60 seconds",
        help="changelog mode: how often the changelog is compacted into the tables",
    )
    parser.add_argument(
        "--driver-write-rows",
        type=int,
        default=50_000,
        help="a table's batch of at most this many changes (keyed or not), into a table under "
        "32 MiB on a local path, is written by the driver with delta-rs, not by Spark jobs "
        "(0: never)",
    )
    parser.add_argument(
        "--driver-key-cache-mb",
        type=int,
        default=DEFAULT_CACHE_MB,
        help="MiB of the driver's memory that keep large tables' files' key columns from one "
        "batch to the next for its deletion-vector MERGE (files never change once written; "
        "0: read them again each batch)",
    )
    parser.add_argument(
        "--no-driver-decode",
        dest="driver_decode",
        action="store_false",
        help="decode every table's records with Spark, also those the driver writes with "
        "delta-rs (by default the driver decodes them too, with no Spark plan per table)",
    )
    parser.add_argument(
        "--no-task-lane",
        dest="task_lane",
        action="store_false",
        help="apply every larger table's batch with Spark's decode and writer (by default a "
        "batch of new keys into a table the job wrote before is decoded and written as Parquet "
        "by Spark's Python tasks, and committed by the driver)",
    )
    parser.add_argument(
        "--lane-min-records",
        type=int,
        default=50_000,
        help="a keyed topic's batch of at least this many records (and more than "
        "--driver-write-rows) may take the task lane: smaller ones cost more in its Spark job "
        "than in Spark's decode",
    )
    parser.add_argument(
        "--no-lane-kafka-reads",
        dest="lane_reads_kafka",
        action="store_false",
        help="the task lane's tasks, and the driver for a small batch, get their records from "
        "Spark's Kafka source (by default they read the batch's offset ranges from Kafka "
        "themselves, where the Kafka options are plain and the checkpoint is on a local or "
        "shared file system)",
    )
    parser.add_argument("--history", action="store_true", help="also keep SCD type 2 history")
    parser.add_argument("--history-base", default="", help="default: <delta-base>/_history")
    parser.add_argument(
        "--no-deletion-vectors",
        dest="deletion_vectors",
        action="store_false",
        help="create tables without Delta deletion vectors (for readers without them)",
    )
    parser.add_argument(
        "--dropped-columns",
        choices=("keep", "drop"),
        default="keep",
        help="a column dropped in the source: keep its Delta column and values (default) or "
        "drop it in Delta too",
    )
    parser.add_argument(
        "--variable-decimal",
        default="38,18",
        metavar="P,S",
        help="Delta decimal(P,S) for unconstrained numeric columns (values that do not fit are "
        "null and dead-lettered); default 38,18",
    )
    parser.add_argument("--app-id", default="", help="Delta txnAppId (default: from --checkpoint)")
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        help="serve the job's Prometheus metrics on this port (default 0: off)",
    )
    parser.add_argument(
        "--metrics-host", default="127.0.0.1", help="the metrics endpoint's address (0.0.0.0: all)"
    )
    parser.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--registry-option", action="append", default=[], metavar="KEY=VALUE")


def _pairs(items: Sequence[str], key: str) -> tuple[tuple[str, str], ...]:
    from bridge.errors import ConfigError

    pairs = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(key, f"{item!r} is not KEY=VALUE")
        pairs.append((name, value))
    return tuple(pairs)


def config_from_args(args: argparse.Namespace) -> ApplyConfig:
    """An :class:`ApplyConfig` from :func:`add_apply_arguments`' options (validated)."""
    from pathlib import Path

    from bridge.config import load_client_settings
    from bridge.config.basics import reveal
    from bridge.errors import ConfigError

    # The configuration pgbridge run reads (file < PGBRIDGE_* variables), flags over it; the
    # local stack's PGBRIDGE_BOOTSTRAP_SERVERS / PGBRIDGE_REGISTRY_URL last. Nothing set for
    # security: plaintext, no credentials.
    path = getattr(args, "config", None)
    shared = load_client_settings(Path(path) if path else None, os.environ)
    topic_prefix = args.topic_prefix or shared.topic_prefix
    bootstrap_servers = (
        args.bootstrap_servers
        or shared.bootstrap_servers
        or os.environ.get("PGBRIDGE_BOOTSTRAP_SERVERS")
    )
    registry_url = (
        args.registry_url or shared.registry_url or os.environ.get("PGBRIDGE_REGISTRY_URL")
    )
    if not topic_prefix:
        raise ConfigError("topic.prefix", "give --topic-prefix, or topic.prefix in --config")
    if not bootstrap_servers:
        raise ConfigError(
            "kafka.bootstrap.servers",
            "give --bootstrap-servers, kafka.bootstrap.servers in --config, or "
            "PGBRIDGE_KAFKA_BOOTSTRAP_SERVERS",
        )
    if not registry_url:
        raise ConfigError(
            "schema.registry.url",
            "give --registry-url, schema.registry.url in --config, or PGBRIDGE_SCHEMA_REGISTRY_URL",
        )
    # Spark's options are strings; Spark redacts sasl.jaas.config in its logs and UI.
    kafka_security = tuple(
        (k, reveal(v)) for k, v in shared.kafka if (k, v) != ("security.protocol", "PLAINTEXT")
    )
    registry_security = tuple((k, reveal(v)) for k, v in shared.registry)
    precision, _, scale = str(args.variable_decimal).partition(",")
    if not (precision.strip().isdigit() and scale.strip().isdigit()):
        raise ConfigError("variable_decimal", f"{args.variable_decimal!r} is not P,S")
    return ApplyConfig(
        variable_decimal=(int(precision), int(scale)),
        topic_prefix=topic_prefix,
        bootstrap_servers=bootstrap_servers,
        registry_url=registry_url,
        delta_base=args.delta_base,
        checkpoint_location=args.checkpoint,
        dead_letter_location=args.dead_letter,
        tables=tuple(args.table),
        trigger_interval=args.trigger_interval,
        available_now=args.available_now,
        starting_offsets=args.starting_offsets,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        app_id=args.app_id,
        parallel_tables=args.parallel_tables,
        driver_write_rows=args.driver_write_rows,
        driver_key_cache_mb=args.driver_key_cache_mb,
        driver_decode=args.driver_decode,
        task_lane=args.task_lane,
        lane_min_records=args.lane_min_records,
        lane_reads_kafka=args.lane_reads_kafka,
        mode=getattr(args, "mode", "merge"),
        compaction_interval=getattr(args, "compaction_interval", "60 seconds"),
        held_retry_interval=args.held_retry_interval,
        history=args.history,
        history_base=args.history_base,
        deletion_vectors=args.deletion_vectors,
        dropped_columns=args.dropped_columns,
        kafka_options=(*kafka_security, *_pairs(args.kafka_option, "kafka_options")),
        registry_options=(*registry_security, *_pairs(args.registry_option, "registry_options")),
        spark_conf=_pairs(getattr(args, "spark_conf", []), "spark_conf"),
        spark_master=getattr(args, "master", None),
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        routed_key=shared.routed_key,
    )
