"""The apply job's wiring: Kafka source -> foreachBatch(decode, MERGE per table) -> Delta.

Locally: ``pgbridge apply`` calls :func:`run_apply`. On a cluster (the driver needs pgbridge's
Python dependencies, confluent-kafka for the registry client; executors run no Python)::

    zip -r pgbridge.zip bridge
    spark-submit \\
      --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0,\\
    org.apache.spark:spark-avro_2.13:4.0.0,io.delta:delta-spark_2.13:4.0.0 \\
      --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension \\
      --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog \\
      --py-files pgbridge.zip bridge/spark/job.py \\
      --topic-prefix pg --bootstrap-servers broker:9092 --registry-url http://registry:8081 \\
      --delta-base s3a://lake/cdc --checkpoint s3a://lake/_chk/apply \\
      --dead-letter s3a://lake/_dead/apply

(the ``--packages`` value is :func:`bridge.spark.packages.packages_option`).

The micro-batches are applied by :class:`bridge.spark.applier.BatchApplier`; this module
wires the query around it (Kafka source, batch bound, topic lag, restarts) and is the entry
point of ``spark-submit``; its options are :mod:`bridge.spark.arguments`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from bridge.errors import ConfigError, PgBridgeError
from bridge.retry import RetryPolicy
from bridge.spark import changelog
from bridge.spark.applier import BatchApplier, first_line, job_conf
from bridge.spark.arguments import add_apply_arguments, config_from_args
from bridge.spark.config import ApplyConfig
from bridge.spark.errors import ApplyError
from bridge.spark.graceful_stop import GracefulStop
from bridge.spark.query import checkpoint_conf, kafka_source, start_query
from bridge.spark.replay import replay_set_aside
from bridge.spark.resources import default_batch_records, jvm_failure
from bridge.spark.restarts import run_with_restarts
from bridge.spark.session import task_slots
from bridge.spark.topic_lag import unwatch_topic_lag, watch_topic_lag

__all__ = [
    "ChangelogQueries",
    "main",
    "run_apply",
    "start_apply",
]

logger = logging.getLogger(__name__)


def start_apply(
    spark: Any,
    config: ApplyConfig,
    applier: BatchApplier | None = None,
    stopped: threading.Event | None = None,
) -> Any:
    """Start the streaming query (returns the ``StreamingQuery``; the caller awaits or stops it).

    In the changelog mode, the ingest and compaction queries (:mod:`bridge.spark.changelog`),
    awaited and stopped together; ``applier`` is then the compactor. ``stopped``: set as the
    job's stop stops the query (:class:`GracefulStop`), the applier's batch then leaves what
    it has not begun.
    """
    settings = {**job_conf(task_slots(spark)), **checkpoint_conf(config.checkpoint_location)}
    for key, value in settings.items():
        spark.conf.set(key, value)
    config = with_batch_bound(spark, config)
    watch_topic_lag(spark)
    changelog_mode = config.mode == "changelog"
    if applier is None:
        applier = changelog.Compactor(config) if changelog_mode else BatchApplier(config)
    if stopped is not None:
        applier.stopped = stopped
    # Tables held since a batch of theirs failed catch up first, then every
    # --held-retry-interval while the job runs (bridge.spark.replay).
    replay = partial(
        replay_set_aside,
        config=changelog.compaction_config(config) if changelog_mode else config,
        schemas=applier.schemas,
    )
    applier.held_tables.assume(replay(spark))
    applier.held_tables.replay = replay
    if changelog_mode:
        return ChangelogQueries(spark, config, applier)
    return start_query(
        kafka_source(spark, config),
        applier,
        config.checkpoint_location,
        config.query_name,
        config,
        config.trigger_interval,
    )


def with_batch_bound(spark: Any, config: ApplyConfig) -> ApplyConfig:
    """``config`` with ``max_offsets_per_trigger`` sized from Spark's memory unless given."""
    if config.max_offsets_per_trigger is not None:
        return config
    records, why = default_batch_records(spark)
    logger.info("micro-batches of %s (--max-offsets-per-trigger to change)", why)
    return replace(config, max_offsets_per_trigger=records)


class ChangelogQueries:
    """The changelog mode's two queries as one: ingest (Kafka -> changelog) and compaction.

    With ``available_now`` they run one after the other (everything ingested, then compacted,
    so a catch-up run leaves the base tables complete); otherwise side by side, and the first
    to fail stops the other and raises its error.
    """

    def __init__(self, spark: Any, config: ApplyConfig, compactor: Any = None) -> None:
        self._spark, self._config, self._compactor = spark, config, compactor
        self.queries = [changelog.start_ingest(spark, config)]
        if not config.available_now:
            self.queries.append(self._start_compactor())

    def _start_compactor(self) -> Any:
        return changelog.start_compactor(self._spark, self._config, self._compactor)

    @property
    def recentProgress(self) -> list[Any]:
        return [p for q in self.queries for p in q.recentProgress]

    def awaitTermination(self) -> None:
        try:
            if self._config.available_now:
                self.queries[0].awaitTermination()
                self.queries.append(self._start_compactor())
                self.queries[1].awaitTermination()
                return
            while any(q.isActive for q in self.queries):
                for query in self.queries:
                    if not query.isActive:
                        query.awaitTermination()  # raises the error of a failed query
                time.sleep(0.5)
        except BaseException:
            self.stop()  # one failed (or the wait was interrupted): both go
            raise

    def stop(self) -> None:
        for query in self.queries:
            if query.isActive:
                query.stop()


def serve_metrics(config: ApplyConfig) -> Callable[[], None]:
    """Serve the job's metrics (Prometheus' default registry, where the ``pgbridge_apply_*``
    metrics live) on ``config.metrics_port`` while it runs; returns what stops the endpoint."""
    if not config.metrics_port:
        return lambda: None
    from prometheus_client import start_http_server

    try:
        server, thread = start_http_server(config.metrics_port, addr=config.metrics_host)
    except OSError as exc:
        raise ConfigError(
            "metrics_port",
            f"cannot serve metrics on {config.metrics_host}:{config.metrics_port}: {exc.strerror}",
        ) from None
    logger.info("metrics on http://%s:%d/metrics", config.metrics_host, config.metrics_port)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(5)

    return stop


def run_apply(
    config: ApplyConfig,
    spark: Any = None,
    session_factory: Callable[[], Any] | None = None,
    stop: GracefulStop | None = None,
) -> None:
    """Run the job until it stops (``available_now``), fails, or is stopped (``stop``: the
    entry points' handler of SIGTERM and SIGINT, bridge.spark.graceful_stop).

    Without ``spark``, builds a session with :func:`bridge.spark.session.build_spark_session`
    (master from ``--master``, ``PGBRIDGE_SPARK_MASTER`` or ``spark-submit``, jars from
    ``PGBRIDGE_SPARK_JARS`` or resolved from Maven).
    """
    own_session = spark is None
    if spark is None:
        if session_factory is not None:
            spark = session_factory()
        else:
            from bridge.spark.session import build_spark_session

            conf = dict(config.spark_conf)
            if config.mode == "changelog":
                # Ingest jobs share the cores fairly with a running compaction.
                conf.setdefault("spark.scheduler.mode", "FAIR")
            master = config.spark_master or os.environ.get("PGBRIDGE_SPARK_MASTER")
            spark = build_spark_session(config.query_name, master=master, conf=conf)
    config = with_batch_bound(spark, config)
    queries: list[Any] = []
    try:
        stop_metrics = serve_metrics(config)
    except ConfigError:
        if own_session:
            _stop_session(spark)
        raise

    stop = stop or GracefulStop()

    def start() -> Any:
        queries.append(start_apply(spark, config, stopped=stop.stopped))
        stop.watch(queries[-1])
        return queries[-1]

    try:
        # A transient failure (Kafka or the registry unreachable) restarts the query from its
        # checkpoint after a backoff instead of ending the job (bridge.spark.restarts).
        run_with_restarts(start, RetryPolicy(), stopping=stop.requested)
    except KeyboardInterrupt:
        logger.info("interrupted; stopping the query (the checkpoint keeps the position)")
        if queries:
            queries[-1].stop()
    except Exception as exc:  # StreamingQueryException wraps the batch's real error
        lost = jvm_failure(spark, exc, config.max_offsets_per_trigger)
        if lost is not None:
            own_session = False  # nothing left to stop
            raise lost from exc
        raise ApplyError(f"the apply query failed: {exc}") from exc
    finally:
        stop_metrics()
        stop.settle()
        if own_session:
            _stop_session(spark)


def _stop_session(spark: Any) -> None:
    """Stop a session the job built, its listener first (see :func:`unwatch_topic_lag`)."""
    try:
        unwatch_topic_lag(spark)
        spark.stop()
    except Exception as exc:  # the job's own outcome is what the caller needs
        logger.warning("stopping the Spark session failed: %s", first_line(exc))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``spark-submit bridge/spark/job.py``."""
    parser = argparse.ArgumentParser(prog="pgbridge-apply", description=__doc__.split("\n")[0])
    add_apply_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = GracefulStop()
    stop.install()
    try:
        run_apply(config_from_args(args), stop=stop)
    except PgBridgeError as exc:
        print(f"pgbridge-apply: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
