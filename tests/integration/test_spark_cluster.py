"""``pgbridge apply --master spark://…`` on a Spark standalone cluster (#32): one master and two
workers from the PySpark distribution on loopback, the job's jars shipped by ``spark.jars``, its
executors on both workers; Delta equals the source on every table of the workload (keyed,
keyless, TOAST, a column added then renamed mid-stream)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.devstack.spark_cluster import SparkMaster, SparkWorker
from bridge.devstack.stack import StackInfo
from bridge.spark.job import run_apply
from tests.integration.bridge_harness import scratch_database
from tests.integration.test_delta_e2e import (
    apply_config,
    assert_delta_equals_source,
    capture_workload,
    run_configuration_file,
)

# make test-long only (a master, two workers and their executors: 60 CPU-s of make test's
# ~1,700): make test runs the same workload and schema change through the job on a local
# session (test_delta_e2e.py) and the task lane's Python tasks in Spark's own Python workers
# (tests/spark/test_lane_batches.py, test_task_lane.py).
pytestmark = [pytest.mark.integration, pytest.mark.long]

WORKERS = 2


@pytest.fixture
def spark_cluster(tmp_path: Path) -> Iterator[tuple[SparkMaster, list[SparkWorker]]]:
    base = tmp_path / "spark-cluster"
    master = SparkMaster(base / "master")
    workers = [
        SparkWorker(base / f"worker{i}", master, cores=1, memory="1g") for i in range(WORKERS)
    ]
    try:
        master.start()
        for worker in workers:
            worker.launch()
        deadline = time.monotonic() + 120
        while master.alive_workers() < WORKERS:
            assert time.monotonic() < deadline, f"{WORKERS} workers not registered: see {base}"
            time.sleep(0.5)
        yield master, workers
    finally:
        for worker in workers:
            worker.stop()
        master.stop()


def test_apply_on_a_standalone_cluster_with_two_workers_equals_the_source(
    local_stack: StackInfo,
    spark: Any,
    spark_cluster: tuple[SparkMaster, list[SparkWorker]],
    tmp_path: Path,
) -> None:
    master, workers = spark_cluster
    prefix = f"cluster{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        capture_workload(local_stack, dsn, prefix)
        config = apply_config(local_stack, prefix, tmp_path / "apply")
        shared = run_configuration_file(local_stack, prefix, tmp_path / "pgbridge.toml")
        args = [
            sys.executable, "-m", "bridge.cli", "apply", "--available-now", "-c", str(shared),
            "--master", master.url,
            "--delta-base", config.delta_base, "--checkpoint", config.checkpoint_location,
            "--dead-letter", config.dead_letter_location,
            "--spark-conf", "spark.executor.memory=512m",
            # The workload's 5,000-row table through the task lane, so the executors decode and
            # write it (bridge.spark.task_lane; by default from 50,000 records); tables of at
            # most 1,000 changes by the driver, those between by Spark's MERGE.
            "--lane-min-records", "2000", "--driver-write-rows", "1000",
            # Short-lived executors: the JIT options the tests give drivers (tests/conftest.py).
            "--spark-conf",
            f"spark.executor.extraJavaOptions={os.environ.get('SPARK_SUBMIT_OPTS', '')}",
            "--spark-conf", "spark.driver.host=127.0.0.1",
        ]  # fmt: skip
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
        env.pop("PGBRIDGE_SPARK_MASTER", None)  # --master alone says where it runs
        done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
        log = done.stdout + done.stderr
        assert done.returncode == 0, log[-3000:]
        assert "spark.executor.memory=512m" in log, log[-3000:]  # batches sized for a cluster
        assert "append by tasks" in log, log[-3000:]  # the lane ran on the executors
        assert "from Kafka themselves" in log, log[-3000:]  # its tasks read Kafka there

        # The cluster ran it: an executor of the application on each worker.
        for worker in workers:
            executors = list((worker.base_dir / "work").glob("app-*/*/stderr"))
            assert executors, f"no executor ran on {worker.base_dir}"
        apps = master.status().get("completedapps", [])
        assert isinstance(apps, list) and any(
            app.get("name") == "pgbridge-apply" for app in apps
        ), apps

        assert_delta_equals_source(spark, config, dsn)
        # The job again from the same checkpoint (here in the tests' session): nothing new,
        # nothing written.
        history = f"DESCRIBE HISTORY delta.`{config.delta_base}/public/orders`"
        version = spark.sql(history).first()["version"]
        run_apply(config, spark=spark)
        assert spark.sql(history).first()["version"] == version
