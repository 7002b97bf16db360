"""Spark's Kafka source, spark-avro and Delta jars, fetched ahead into the cache.

The job then starts with ``spark.jars`` pointing at these files, so a Spark start never waits
on (or fails in) dependency resolution.
"""

from __future__ import annotations

from pathlib import Path

from bridge.devstack import maven
from bridge.devstack.paths import cache_dir
from bridge.spark.packages import DELTA_VERSION, JARS, SPARK_VERSION


def ensure_spark_jars() -> list[Path]:
    target = cache_dir() / "spark-jars" / f"spark-{SPARK_VERSION}-delta-{DELTA_VERSION}"
    paths = [target / maven.artifact_file_name(c) for c in JARS]
    for coordinate, path in zip(JARS, paths, strict=True):
        if not path.exists():
            maven.copy_artifact("spark-jars", coordinate, target)
    return paths
