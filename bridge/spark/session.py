"""Building a SparkSession with the Kafka source, spark-avro and Delta Lake configured."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from bridge.spark.packages import packages_option


def build_spark_session(
    app_name: str = "pgbridge-apply",
    jars: Sequence[str] | None = None,
    master: str | None = None,
    conf: dict[str, str] | None = None,
) -> Any:
    """A session with Delta's SQL extension and catalog.

    ``jars``: local jar files fetched ahead (the dev stack's ``spark_jars``, or
    ``PGBRIDGE_SPARK_JARS``); without them Spark resolves :data:`PACKAGES` itself, which is what
    a cluster does with ``spark-submit --packages``.
    """
    from pyspark.sql import SparkSession

    jar_list = list(jars or [j for j in os.environ.get("PGBRIDGE_SPARK_JARS", "").split(",") if j])
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    settings = {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        # Generated classes per plan shape: the apply job's batches reuse ~200 of them, Spark
        # keeps 100, so every batch compiled them again (measured on bench/spark_apply_bench.py
        # --changes 20000 --tables 4: 1,039 classes compiled, 16 s of Janino, then 127 and
        # 2 s with 1,000; the apply 20% faster).
        "spark.sql.codegen.cache.maxEntries": "1000",
        # PySpark 4 wraps every Column function to send the Python call site to the JVM (for
        # error contexts): five more py4j round trips and a failed IPython import per call.
        # The job builds its plans through thousands of such calls per batch (measured, 40
        # one-row tables: 79,765 round trips and 17.9 s to decode a batch, 22,985 and 4.7 s
        # without). Its errors name the table and record themselves (bridge.spark.errors).
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # Spark's Kafka source keeps one consumer per topic-partition between micro-batches, at
        # most 64 per executor by default: with more topic-partitions (a database of hundreds
        # of tables) they are evicted and connected anew every batch (measured, a streaming
        # read of 200 one-partition topics at 1,000 records/s: 700-800 ms per batch with 64,
        # 270-350 ms with 1,024). Idle ones still close after spark.kafka.consumer.cache.timeout.
        "spark.kafka.consumer.cache.capacity": "1024",
        # Progress bars are for a person at a terminal; in a log they are noise (stderr).
        "spark.ui.showConsoleProgress": "true" if _is_terminal(sys.stderr) else "false",
    }
    if not os.environ.get("PYSPARK_PYTHON") and "spark.pyspark.python" not in (conf or {}):
        # Python tasks (bridge.spark.task_lane) run this interpreter, which has pgbridge and
        # its C decoder, not whatever ``python3`` is on the path (PySpark's default); on a
        # cluster whose machines have it elsewhere, PYSPARK_PYTHON says where.
        os.environ["PYSPARK_PYTHON"] = sys.executable
    if jar_list:
        settings["spark.jars"] = ",".join(jar_list)
    else:
        settings["spark.jars.packages"] = packages_option()
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    _quiet_benign_errors(session)
    return session


#: Loggers whose ERROR lines report nothing wrong. Delta 4.0's Parquet reader logs "Failed to
#: translate filter EqualTo(__delta_internal_is_row_deleted,0)" at every read of a file with
#: a deletion vector (the filter is applied after the read instead), which a large table's
#: MERGE leaves (bridge.spark.driver_dv_merge): an ERROR per read in the job's log otherwise.
_BENIGN_ERROR_LOGGERS = ("org.apache.spark.sql.delta.DeltaParquetFileFormat",)


def _quiet_benign_errors(session: Any) -> None:
    try:
        jvm = session.sparkContext._jvm
        level = jvm.org.apache.logging.log4j.Level.FATAL
        for name in _BENIGN_ERROR_LOGGERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)
    except Exception:  # another logging backend: the lines stay, nothing else changes
        return


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced or closed
        return False


def task_slots(spark: Any) -> int:
    """The task slots of ``spark``'s cluster (local mode: its threads), at least one: the job
    sizes its shuffles and coalesces its frames to this, not to Spark's 200 or one per Kafka
    partition."""
    return max(1, int(spark.sparkContext.defaultParallelism))


def activate_in_thread(session: Any) -> None:
    """Make ``session`` the active one of the calling thread's JVM peer, unless it has one.

    Delta runs some of a table's state reconstruction through ``SparkSession.getActiveSession``
    (a JVM thread's own, with no fallback to the default session): reading the checkpoint of a
    version without a checksum file (``.crc``; the driver's commits write none) fails with
    ``DELTA_SPARK_SESSION_NOT_SET`` in a thread that has none, which is what the JVM peer of a
    Python worker thread is (PySpark pins each Python thread to a JVM thread of its own).
    """
    jvm_session = session._jvm.org.apache.spark.sql.SparkSession
    if jvm_session.getActiveSession().isEmpty():
        jvm_session.setActiveSession(session._jsparkSession)
