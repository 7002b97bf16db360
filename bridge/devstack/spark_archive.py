"""A class-data-sharing archive of the classes a Spark driver loads, for the JVMs the tests start.

A Spark driver loads and verifies some 20,000 classes from ~250 jars, most of them at its start
and its first queries; a JVM started with ``-XX:SharedArchiveFile`` maps them from an archive
instead. Measured on 2026-12-03's host: the Spark session and Delta commands of 14 tests of
test_apply_batches.py, 94 -> 81 CPU-seconds; a session's start 7 -> 4 s. The tests are
CPU-bound on 2 cores, and they start a Spark JVM per worker and per ``pgbridge apply`` they run.

The archive is dumped once per machine (``-XX:ArchiveClassesAtExit``) by a short Spark job of
the kinds of work the apply job does (Arrow frames, Delta writes, MERGE, reads, a shuffle), run
by this module as a child process while ``pgbridge dev up`` starts the stack. It names its Java,
PySpark and jars in its file name: another JDK, venv or jar set dumps its own. A JVM given an
archive that does not fit its classpath runs without it (the JVM checks); with the options of
:func:`archive_options` it says nothing of that.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bridge.devstack.paths import cache_dir

logger = logging.getLogger(__name__)

#: The dump's time bound: a Spark start and a few queries, then the archive's write at exit.
DUMP_TIMEOUT_SECONDS = 600
#: Archives kept in the cache: one per clone's venv in use (CI's fresh clone, a developer's).
KEPT_ARCHIVES = 3


def archive_options(archive: str | Path) -> str:
    """The java options that make a JVM map its classes from ``archive``, silently."""
    return f"-XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"


def _java_identity() -> str:
    """The Java a Spark launcher runs (``$JAVA_HOME/bin/java``, else the one on the path)."""
    home = os.environ.get("JAVA_HOME")
    java = Path(home) / "bin" / "java" if home else Path(shutil.which("java") or "java")
    try:
        resolved = java.resolve(strict=True)
    except OSError:
        return str(java)
    return f"{resolved}:{resolved.stat().st_mtime_ns}"


def _modified(path: str | Path) -> int:
    try:
        return Path(path).stat().st_mtime_ns
    except OSError:
        return 0


def archive_path(jars: list[str]) -> Path:
    """Where the archive of this Java, this PySpark and these jars is kept. Their modification
    times are part of its name: the JVM refuses an archive whose jars changed since its dump
    (a venv installed again), so such a change dumps a new one."""
    import pyspark

    pyspark_jars = Path(pyspark.__file__).parent / "jars"
    identity = json.dumps(
        [
            _java_identity(),
            pyspark.__version__,
            [str(pyspark_jars), _modified(pyspark_jars)],
            [[jar, _modified(jar)] for jar in jars],
        ]
    )
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return cache_dir() / "spark-class-archives" / f"spark-{pyspark.__version__}-{digest}.jsa"


def ensure_spark_class_archive(jars: list[str]) -> Path | None:
    """The archive of these jars' driver, dumped first if this machine has none; None (logged)
    if the dump fails: the JVMs then load their classes as usual."""
    target = archive_path(jars)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", __name__, str(partial), *jars],
            capture_output=True,
            text=True,
            timeout=DUMP_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        logger.warning("the Spark class archive's dump took over %d s", DUMP_TIMEOUT_SECONDS)
        partial.unlink(missing_ok=True)
        return None
    if done.returncode != 0 or not partial.exists():
        logger.warning(
            "the Spark class archive was not dumped (exit %d): %s",
            done.returncode,
            done.stderr.strip()[-2000:],
        )
        partial.unlink(missing_ok=True)
        return None
    os.replace(partial, target)
    logger.info("Spark class archive %s dumped in %.1f s", target, time.monotonic() - started)
    _keep_newest(target.parent, KEPT_ARCHIVES)
    return target


def _keep_newest(directory: Path, count: int) -> None:
    """Archives of older venvs and jars (about 180 MB each) go; a running JVM keeps its map."""
    archives = sorted(directory.glob("*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in archives[count:]:
        stale.unlink(missing_ok=True)


def _dump(target: str, jars: list[str]) -> None:
    """Run the kinds of work the apply job does, then exit the JVM: it writes the archive."""
    import pyarrow as pa
    from delta.tables import DeltaTable
    from pyspark import SparkContext

    from bridge.spark.session import build_spark_session

    spark = build_spark_session(
        "pgbridge-class-archive",
        jars=jars,
        master="local[2]",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={target}",
        },
    )
    with tempfile.TemporaryDirectory() as work:
        path = f"{work}/table"
        rows = pa.table({"id": list(range(100)), "v": [str(i) for i in range(100)]})
        spark.createDataFrame(rows).write.format("delta").save(path)
        changes = spark.createDataFrame(
            pa.table({"id": [1, 2, 200], "v": ["a", None, "c"], "op": ["u", "d", "c"]})
        )
        (
            DeltaTable.forPath(spark, path)
            .alias("t")
            .merge(changes.alias("s"), "t.id = s.id")
            .whenMatchedDelete("s.op = 'd'")
            .whenMatchedUpdate(set={"v": "s.v"})
            .whenNotMatchedInsert(values={"id": "s.id", "v": "s.v"})
            .execute()
        )
        table = spark.read.format("delta").load(path)
        table.groupBy((table["id"] % 7).alias("k")).count().collect()
        table.localCheckpoint().count()
        DeltaTable.forPath(spark, path).history().collect()
    gateway = SparkContext._gateway
    spark.stop()
    # The JVM exits when its standard input closes, and writes the archive as it exits.
    if gateway is not None and getattr(gateway, "proc", None) is not None:
        gateway.proc.stdin.close()
        gateway.proc.wait(timeout=DUMP_TIMEOUT_SECONDS)


if __name__ == "__main__":
    _dump(sys.argv[1], sys.argv[2:])
