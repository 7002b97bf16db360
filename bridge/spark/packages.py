"""The Maven packages the Spark job needs beside PySpark, matched exactly to the pinned versions.

One list serves three uses: the local stack fetches these jars ahead of time (so a Spark start
never waits on resolution), the job passes them as ``spark.jars``, and the README's
``spark-submit --packages`` line for clusters is :func:`packages_option`.

Spark 4.0.0 rather than 4.0.1: the registry mirror reachable here has no
``spark-token-provider-kafka-0-10_2.13:4.0.1``, and Spark's Kafka source needs it.
"""

from __future__ import annotations

from typing import Final

SPARK_VERSION: Final = "4.0.0"  # equals the pyspark pin in pyproject.toml
DELTA_VERSION: Final = "4.0.0"  # equals the delta-spark pin; Delta 4.0.x is built for Spark 4.0

#: The direct packages, as a user would pass them to ``--packages``.
PACKAGES: Final = (
    f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_VERSION}",
    f"org.apache.spark:spark-avro_2.13:{SPARK_VERSION}",
    f"io.delta:delta-spark_2.13:{DELTA_VERSION}",
)

#: Their runtime closure less what the pyspark wheel already ships (Spark itself, Avro, antlr4,
#: compression codecs). Copied one by one: resolving Spark's POMs transitively makes Maven visit
#: a repository declared in Spark's parent POM, which is not reachable everywhere.
JARS: Final = (
    *PACKAGES,
    f"org.apache.spark:spark-token-provider-kafka-0-10_2.13:{SPARK_VERSION}",
    "org.apache.kafka:kafka-clients:3.9.0",
    "org.apache.commons:commons-pool2:2.12.0",
    f"io.delta:delta-storage:{DELTA_VERSION}",
)


def packages_option() -> str:
    """The value for ``spark-submit --packages`` on a cluster."""
    return ",".join(PACKAGES)
