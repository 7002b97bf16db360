"""Probe: what reading a topic costs Spark's Kafka source, and what it costs Python tasks
reading the topic-partitions themselves as the apply job's task lane does, before any apply
work.

    .venv/bin/python bench/kafka_read_probe.py [--changes 2000000] [--partitions 2]

Built as the measurement before the lane read Kafka itself (docs/measurements.md, "Reading
Kafka in the tasks"); it now runs the lane's own read functions
(bridge.spark.kafka_ranges), with each of its two readers. It measures:

1. **Spark raw read**: the bench's baseline (Spark's Kafka source into the ``noop`` sink,
   local[2]); wall time and the JVM's CPU.
2. **Python read**: one process per Kafka partition (as a task per topic-partition does),
   each reading its partition to its end offset as the lane's tasks do
   (bridge.spark.kafka_ranges: the Arrow batches the lane takes), once with confluent-kafka's
   ``Consumer`` and once with the C reader (bridge/native/_kafkaread.c); wall time and the
   processes' CPU.
3. **Python read + decode**: the same, each batch also decoded by the lane's C decoder
   (bridge.spark.avro_columns), the lane's plan for the table.

Prints records/s and CPU µs per record beside each; the ratios are what carries over.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.cleanup import TOPIC_PREFIXES, delete_topics, topic_prefix
from bench.spark_apply_bench import _config, cpu_seconds, jvm_pid, produce, raw_read
from bridge.devstack.stack import LocalStack
from bridge.spark.session import build_spark_session


def _read_partition(
    bootstrap: str,
    topic: str,
    partition: int,
    end: int,
    reader: str,
    plan_args: tuple[str, Any] | None,
) -> tuple[int, float]:
    """Read one partition to ``end`` as the lane's tasks do (bridge.spark.kafka_ranges), with
    ``reader`` "c" (bridge/native/_kafkaread.c) or "consumer" (confluent-kafka's Consumer);
    (records, CPU seconds of this process)."""
    import warnings

    warnings.filterwarnings("ignore")  # authlib's deprecation notice, at import

    from bridge.native.kafka_reader import range_reader
    from bridge.spark import kafka_ranges
    from bridge.spark.avro_columns import decode

    plan = None
    if plan_args is not None:
        from bridge.spark.task_lane import lane_plan

        plan = lane_plan(*plan_args)
    config = kafka_ranges.client_config({"kafka.bootstrap.servers": bootstrap})
    assert config is not None
    ranges = [kafka_ranges.KafkaRange(topic, partition, 0, end)]
    started = time.process_time()
    if reader == "c":
        module = range_reader()
        assert module is not None, "bridge.native._kafkaread is not built or not bound"
        batches = kafka_ranges._read_in_c(module, ranges, config, 10_000)
    else:
        batches = kafka_ranges._read_with_consumer(ranges, config, 10_000)
    records = 0
    for batch in batches:
        if plan is not None:
            values = batch.column(1)
            decode(plan, values.filter(values.is_valid()))
        records += batch.num_rows
    return records, time.process_time() - started


def python_read(
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    reader: str,
    plan_args: tuple[str, Any] | None,
) -> tuple[float, float, int]:
    """One process per partition: (wall seconds, CPU seconds, records)."""
    context = multiprocessing.get_context("spawn")
    start = time.perf_counter()
    with context.Pool(len(ends)) as pool:
        results = pool.starmap(
            _read_partition,
            [(bootstrap, topic, p, end, reader, plan_args) for p, end in ends.items()],
        )
    wall = time.perf_counter() - start
    return wall, sum(cpu for _, cpu in results), sum(n for n, _ in results)


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "pgbridge-probe"})
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
        for p in range(partitions)
    }
    consumer.close()
    return ends


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--changes", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args()
    info = LocalStack().up()
    prefix = topic_prefix("probe")
    work = Path(tempfile.mkdtemp(prefix="pgbridge-probe-"))
    try:
        workload, _ = produce(info, prefix, 1, args.partitions, args.changes, snapshot=True)
        topic = workload.versions[0].topic
        records = args.changes
        print(f"{records:,} snapshot records in {topic} ({args.partitions} partitions)")
        spark = build_spark_session(
            "pgbridge-probe",
            jars=info.spark_jars,
            master="local[2]",
            conf={"spark.driver.memory": "3g", "spark.ui.showConsoleProgress": "false"},
        )
        spark.sparkContext.setLogLevel("ERROR")
        pid = jvm_pid(spark)
        raw_read(spark, _config(info, prefix, work / "warm"), records)  # JIT, the Kafka client
        cpu = cpu_seconds(pid)
        seconds = raw_read(spark, _config(info, prefix, work / "raw"), records)
        raw_cpu = cpu_seconds(pid) - cpu
        spark.stop()
        show("Spark raw read", records, seconds, raw_cpu, seconds)
        ends = end_offsets(info.bootstrap_servers, topic, args.partitions)
        version = workload.versions[0]
        schema_json = json.dumps(version.value_schema())
        columns = [(c["name"], c["name"]) for c in version.columns]
        plan = (schema_json, columns)
        for reader, name in (("consumer", "confluent-kafka's Consumer"), ("c", "the C reader")):
            wall, cpu, read = python_read(info.bootstrap_servers, topic, ends, reader, None)
            show(f"Python read, {name} -> the lane's Arrow batches", read, wall, cpu, seconds)
            wall, cpu, read = python_read(info.bootstrap_servers, topic, ends, reader, plan)
            show(f"Python read, {name}, + C decode", read, wall, cpu, seconds)
    finally:
        delete_topics(info, TOPIC_PREFIXES)


def show(name: str, records: int, seconds: float, cpu: float, raw_seconds: float) -> None:
    print(
        f"  {name}: {seconds:.1f} s, {records / seconds:,.0f} records/s, "
        f"{cpu / records * 1e6:.2f} µs CPU/record, {raw_seconds / seconds:.2f}x the raw read's rate"
    )


if __name__ == "__main__":
    main()
