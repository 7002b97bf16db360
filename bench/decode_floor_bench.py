"""Benchmark: the floor under the apply job's snapshot rate, step by step, against a raw read.

#32 asks for a snapshot topic applied at 0.5x Spark's raw read of it. This measures what the
steps the job cannot skip cost on their own, on one snapshot-shaped topic (one table, every
record an initial snapshot's read, Confluent-framed envelopes registered in the real
registry, as ``bench/spark_apply_bench.py --snapshot`` produces them), each a plain batch
query over the whole topic in a warm ``local[2]`` session with the job's settings:

- **raw read**: Spark's Kafka source alone (the baseline of every ratio);
- **framing**: the job's first pass (schema ids per topic, ``bridge.spark.transforms.frame``);
- **decode**: ``from_avro`` of every payload with its writer schema (``decode_envelopes``);
- **envelope meta only**: ``from_avro`` with a reader schema of ``op`` and ``source`` only
  (Avro schema resolution skips the row images);
- **decode + cache**: the decode into Spark's columnar cache, as the job holds it for a
  batch's summary, MERGE or append, and dead letters;
- **decode -> Delta**: the decode, the row images written to a new Delta table.

Per step: seconds, CPU (Spark JVM + this process) per record, and the ratio raw read / step.
Rounds after the first are warm (the first pays the JVM's JIT).

    .venv/bin/python bench/decode_floor_bench.py [--records 1500000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cleanup import delete_topics, topic_prefix
from bench.spark_apply_bench import cpu_seconds, jvm_pid, produce
from bridge.devstack.stack import LocalStack
from bridge.spark import transforms as tf
from bridge.spark.applier import job_conf
from bridge.spark.session import build_spark_session


def _meta_reader(writer: dict[str, Any]) -> dict[str, Any]:
    """The envelope's reader schema with ``op``, ``ts_ms`` and ``source`` (positions, table)
    only."""

    def keep(record: dict[str, Any], names: set[str]) -> dict[str, Any]:
        return {**record, "fields": [f for f in record["fields"] if f["name"] in names]}

    reader = keep(writer, {"op", "ts_ms", "source"})
    source_fields = {"commit_lsn", "lsn", "seq", "ts_ms", "schema", "table"}
    reader["fields"] = [
        {**f, "type": keep(f["type"], source_fields)} if f["name"] == "source" else f
        for f in reader["fields"]
    ]
    return reader


def main() -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_500_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    stack = LocalStack().up()
    prefix = topic_prefix("decodefloor")
    work = Path(tempfile.mkdtemp(prefix="pgbridge-decode-floor-"))
    workload, seconds = produce(stack, prefix, 1, 2, args.records, snapshot=True)
    print(f"produced {args.records:,} snapshot records in {seconds:.1f} s")
    topic = workload.versions[0].topic
    url = f"{stack.registry_url}/subjects/{topic}-value/versions/latest"
    with urllib.request.urlopen(url) as answer:
        registered = json.load(answer)
    schema_id, schema_json = int(registered["id"]), str(registered["schema"])
    spark = build_spark_session(
        "pgbridge-decode-floor",
        jars=stack.spark_jars,
        master="local[2]",
        conf={**job_conf(2), "spark.driver.memory": "3g", "spark.ui.showConsoleProgress": "false"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    pid = jvm_pid(spark)
    try:
        raw = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", stack.bootstrap_servers)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .option("kafka.fetch.max.wait.ms", "0")
            .load()
        )
        framed = tf.frame(raw).coalesce(2)
        decoded = tf.decode_envelopes(framed, topic, schema_id, schema_json)
        payload = F.expr("substring(value, 6, length(value) - 5)")
        reader = json.dumps(_meta_reader(json.loads(schema_json)))
        meta = framed.select(
            from_avro(payload, schema_json, {"mode": "PERMISSIVE", "avroSchema": reader}).alias("e")
        )

        def decode_and_cache() -> None:
            cached = decoded.persist()
            cached.agg(F.count(f"{tf.ENVELOPE}.op")).collect()
            cached.unpersist()

        def decode_to_delta() -> None:
            target = work / "delta"
            shutil.rmtree(target, ignore_errors=True)
            decoded.select(f"{tf.ENVELOPE}.after.*").write.format("delta").save(str(target))

        steps: list[tuple[str, Callable[[], object]]] = [
            ("raw read", lambda: raw.agg(F.count(F.lit(1))).collect()),
            ("framing (schema ids)", lambda: framed.groupBy(tf.VALUE_SCHEMA_ID).count().collect()),
            ("decode", lambda: decoded.agg(F.count(f"{tf.ENVELOPE}.op")).collect()),
            ("envelope meta only", lambda: meta.agg(F.count("e.op")).collect()),
            ("decode + cache", decode_and_cache),
            ("decode -> Delta", decode_to_delta),
        ]
        for round_no in range(args.rounds):
            print(f"round {round_no}{' (cold JVM)' if round_no == 0 else ''}:")
            raw_seconds = 0.0
            for name, step in steps:
                cpu0, start = cpu_seconds(pid), time.perf_counter()
                step()
                elapsed, cpu = time.perf_counter() - start, cpu_seconds(pid) - cpu0
                raw_seconds = raw_seconds or elapsed
                print(
                    f"  {name:22s} {elapsed:6.2f} s  {args.records / elapsed:>10,.0f} records/s  "
                    f"{cpu / args.records * 1e6:5.2f} us CPU/record  "
                    f"raw read / step {raw_seconds / elapsed:5.2f}x"
                )
    finally:
        spark.stop()
        delete_topics(stack, [prefix])
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
