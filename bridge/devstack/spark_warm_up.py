"""The driver run whose loaded classes become the Spark class archive (:mod:`.spark_classes`).

``python -m bridge.devstack.spark_warm_up [--probe] <java option> <jar>...``: a driver started
with ``<java option>`` that goes through what the apply job's driver loads (the Kafka source,
Avro, a streaming ``foreachBatch`` query, Delta's create, MERGE, append and history), then
ends its JVM and waits for it, so that the archive is complete when this process exits.
``--probe`` only starts a session and runs one query: the proof an archive is usable.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from bridge.spark.session import build_spark_session


def main(argv: list[str]) -> int:
    probe = argv[:1] == ["--probe"]
    java_option, *jars = argv[1:] if probe else argv
    spark = build_spark_session(
        "pgbridge-class-archive",
        jars=jars,
        master="local[2]",
        conf={"spark.driver.extraJavaOptions": java_option, "spark.sql.shuffle.partitions": "2"},
    )
    gateway_process = spark.sparkContext._gateway.proc
    if probe:
        assert spark.range(3).count() == 3
    else:
        with tempfile.TemporaryDirectory() as scratch:
            _warm_up(spark, Path(scratch))
    spark.stop()
    gateway_process.stdin.close()  # the JVM ends when its stdin does, dumping the archive
    return 0 if gateway_process.wait(timeout=240) == 0 else 1


def _warm_up(spark: Any, scratch: Path) -> None:
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro, to_avro

    table = str(scratch / "table")
    rows = spark.range(20).select(F.col("id"), F.col("id").cast("string").alias("v"))
    rows.write.format("delta").save(table)
    changes = spark.range(10, 30).select(
        F.col("id"), F.lit("x").alias("v"), (F.col("id") % 3 == 0).alias("gone")
    )
    DeltaTable.forPath(spark, table).alias("t").merge(
        changes.alias("s"), "t.id = s.id"
    ).whenMatchedDelete("s.gone").whenMatchedUpdate(set={"v": "s.v"}).whenNotMatchedInsert(
        values={"id": "s.id", "v": "s.v"}
    ).execute()
    rows.write.format("delta").mode("append").save(table)
    DeltaTable.forPath(spark, table).history().collect()

    schema = '{"type":"record","name":"r","fields":[{"name":"id","type":"long"}]}'
    encoded = spark.range(5).select(to_avro(F.struct("id")).alias("value"))
    encoded.select(from_avro("value", schema).alias("row")).collect()
    kafka = spark.readStream.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9")
    kafka.option("subscribePattern", "pgbridge-class-archive").load().schema  # noqa: B018

    def apply(batch: Any, batch_id: int) -> None:
        batch.groupBy("v").count().collect()

    query = (
        spark.readStream.format("delta")
        .load(table)
        .writeStream.foreachBatch(apply)
        .option("checkpointLocation", str(scratch / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    query.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
