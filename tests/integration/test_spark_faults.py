"""The Spark apply job through a Kafka outage: a continuously running ``pgbridge apply`` (not
``--available-now``) whose broker is SIGKILLed and started again does not end; its query is
restarted from the checkpoint (bridge.spark.restarts) and Delta ends equal to the source.

The broker is a throwaway one of the test's own (the stack's serves the other tests); short
Kafka client timeouts make Spark's Kafka source give up within seconds rather than minutes.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bridge.devstack.kafka import SHORT_LIVED_JVM_OPTIONS, KafkaBroker
from bridge.devstack.stack import StackInfo
from bridge.spark.config import ApplyConfig
from bridge.spark.job import run_apply
from tests.dashboard import exported_families, of_apply, queried_families
from tests.integration.bridge_harness import (
    RunningBridge,
    bridge_config,
    free_port,
    mark,
    scratch_database,
)
from tests.integration.faults import broker_outage

pytestmark = pytest.mark.integration

OUTAGE_S = 15  # long past the short Kafka client timeouts set below (3-4 s)


def _delta_rows(spark: Any, config: ApplyConfig) -> dict[int, str]:
    path = f"{config.delta_base}/public/items"
    try:
        rows = spark.read.format("delta").load(path).select("id", "v").collect()
    except Exception:  # not created yet
        return {}
    return {r["id"]: r["v"] for r in rows}


def _source_rows(dsn: str) -> dict[int, str]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("SELECT id, v FROM items").fetchall())


def _wait_equal(spark: Any, config: ApplyConfig, dsn: str, apply: threading.Thread) -> None:
    deadline = time.monotonic() + 180
    while _delta_rows(spark, config) != _source_rows(dsn):
        assert apply.is_alive(), "the apply job ended"
        assert time.monotonic() < deadline, "Delta never caught up with the source"
        time.sleep(2)


def _assert_dashboard_metrics(port: int) -> None:
    """The running job's endpoint (``--metrics-port``) exports every apply metric the Grafana
    dashboard reads, with this run's figures."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        scrape = reply.read().decode()
    missing = of_apply(queried_families()) - exported_families(scrape)
    assert not missing, f"the dashboard reads metrics the apply job does not export: {missing}"
    assert 'pgbridge_apply_changes_total{table="public.items"}' in scrape


def test_spark_apply_rides_through_a_kafka_outage(
    local_stack: StackInfo, spark: Any, tmp_path: Path
) -> None:
    broker = KafkaBroker(
        Path(tempfile.mkdtemp(prefix="pgbridge-spark-kafka-")),
        heap="384m",
        jvm_options=SHORT_LIVED_JVM_OPTIONS,
    )
    broker.start()  # errors, never skips, if it cannot start
    prefix = f"sfault{uuid.uuid4().hex[:8]}"
    errors: list[BaseException] = []
    metrics_port = free_port()
    try:
        with scratch_database(local_stack) as dsn:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("CREATE TABLE items (id int PRIMARY KEY, v text)")
            bridge = RunningBridge(
                bridge_config(
                    local_stack,
                    dsn,
                    prefix,
                    **{"kafka.bootstrap.servers": broker.bootstrap_servers},
                )
            )
            config = ApplyConfig(
                topic_prefix=prefix,
                bootstrap_servers=broker.bootstrap_servers,
                registry_url=local_stack.registry_url,
                delta_base=str(tmp_path / "delta"),
                checkpoint_location=str(tmp_path / "checkpoint"),
                dead_letter_location=str(tmp_path / "dead-letter"),
                trigger_interval="1 second",
                metrics_port=metrics_port,
                kafka_options=(
                    ("default.api.timeout.ms", "4000"),
                    ("request.timeout.ms", "3000"),
                ),
            )

            def apply() -> None:
                try:
                    run_apply(config, spark=spark)
                except BaseException as exc:
                    errors.append(exc)

            job = threading.Thread(target=apply, daemon=True)
            try:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute(
                        "INSERT INTO items SELECT i, 'before' FROM generate_series(1, 50) i"
                    )
                bridge.wait_confirmed(mark(dsn))
                job.start()
                _wait_equal(spark, config, dsn, job)
                _assert_dashboard_metrics(metrics_port)

                def running() -> None:
                    assert job.is_alive(), f"the apply job ended: {errors!r}"

                broker_outage(broker, OUTAGE_S, running)
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("UPDATE items SET v = 'after' WHERE id <= 25")
                    conn.execute("DELETE FROM items WHERE id > 45")
                    conn.execute("INSERT INTO items VALUES (100, 'new')")
                bridge.wait_confirmed(mark(dsn), timeout=180)
                _wait_equal(spark, config, dsn, job)
            finally:
                bridge.stop()
                for query in spark.streams.active:
                    query.stop()
                job.join(60)
            assert not errors, errors
    finally:
        broker.stop()
        shutil.rmtree(broker.base_dir, ignore_errors=True)
