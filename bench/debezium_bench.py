"""Benchmark: Debezium's PostgreSQL connector against ``pgbridge run`` on the same server and the
same changes, with ``pg_recvlogical`` as the common baseline.

    .venv/bin/python bench/debezium_bench.py [--rows 1000000] [--repeat 1] [--rate 5000]
        [--seconds 20] [--skip throughput|latency]

On the local stack (real PostgreSQL, Kafka, Apicurio; started if needed) plus a Kafka Connect
worker (``ConnectStandalone`` of the stack's Kafka version, heap 1 GB) with Debezium's
PostgreSQL connector 3.3 from Maven Central, Avro through the stack's registry with Apicurio's
converter in Confluent framing (as ``tests/integration/test_connect_interop.py``):

1. **throughput**: ``--rows`` inserts into the 6-column table of ``bench/pipeline_bench.py``
   in 1,000-row transactions, written before anything reads them; per round three slots
   created at the same position receive exactly the same changes, one after the other:
   ``pg_recvlogical`` to /dev/null (the ceiling), ``pgbridge run`` until Kafka acknowledged the
   last change, Debezium (``snapshot.mode = no_data`` on its pre-made slot) until the last
   change is in its topic. Printed: changes/s, the ratio to the raw receive and pgbridge's
   ratio to Debezium, CPU per change (pg_recvlogical; pgbridge's process; the Connect worker's
   JVM), so a slow host is told apart from slow code.
2. **latency**: a writer commits 100-row transactions at ``--rate`` changes/s for
   ``--seconds``, once with pgbridge streaming, once with Debezium; for each record, its Kafka
   timestamp (the producer's clock at send) minus its transaction's commit time (this machine's
   clock, taken when the commit returned): p50 and p99, measured the same way for both.
3. **memory**: the peak RSS (VmHWM) of the Connect worker and of this process (which ran
   pgbridge's pipelines).

Numbers are measured, never asserted; the README quotes them with this command.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psycopg
from confluent_kafka import Consumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.pipeline_bench import (
    INSERT,
    SETUP,
    _vm_hwm,
    bridge_until,
    create_slot,
    end_marker,
    load,
    raw_receive,
    settings,
)
from bridge.config import load_config
from bridge.devstack.connect import POSTGRES_SOURCE_CONNECTOR, ConnectWorker, apicurio_converter
from bridge.devstack.stack import LocalStack, StackInfo
from bridge.runner import build_pipeline


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))] if ordered else float("nan")


def jvm_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def topic_records(bootstrap: str, topic: str) -> int:
    """Records in ``topic`` (every partition's high watermark), 0 while it does not exist."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-count"})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return 0
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in metadata.partitions
        )
    finally:
        consumer.close()


def debezium_config(stack: StackInfo, dsn: str, prefix: str, slot: str) -> dict[str, str]:
    dbname = str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])
    return {
        "connector.class": POSTGRES_SOURCE_CONNECTOR,
        "tasks.max": "1",
        "plugin.name": "pgoutput",
        "database.hostname": stack.postgres_host,
        "database.port": str(stack.postgres_port),
        "database.user": "postgres",
        "database.password": stack.postgres_password or "unused-trust-auth",
        "database.dbname": dbname,
        "topic.prefix": prefix,
        "slot.name": slot,
        "publication.name": "bench_pub",
        "publication.autocreate.mode": "disabled",
        "table.include.list": "public.bench",
        "snapshot.mode": "no_data",
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": "1",
        **apicurio_converter(stack.registry_url, "key.converter", register=True),
        **apicurio_converter(stack.registry_url, "value.converter", register=True),
    }


def debezium_until(
    stack: StackInfo, worker: ConnectWorker, dsn: str, slot: str, rows: int
) -> tuple[float, float]:
    """(seconds from the task running until ``rows`` records are in the topic, CPU seconds
    of the worker's JVM meanwhile)."""
    prefix = f"dbzbench{uuid.uuid4().hex[:6]}"
    name = f"bench-{prefix}"
    pid = worker.pid
    assert pid is not None
    worker.put_connector(name, debezium_config(stack, dsn, prefix, slot))
    topic = f"{prefix}.public.bench"
    try:
        # The clock starts once the task runs, as pgbridge's starts once its source is open.
        worker.wait_running(name)
        cpu0, started = jvm_cpu(pid), time.perf_counter()
        while topic_records(stack.bootstrap_servers, topic) < rows:
            worker.raise_if_failed(name)
            if time.perf_counter() - started > 3600:
                raise SystemExit("Debezium did not deliver every change within an hour")
            time.sleep(0.2)
        return time.perf_counter() - started, jvm_cpu(pid) - cpu0
    finally:
        worker.delete_connector(name)


def throughput(stack: StackInfo, worker: ConnectWorker, dsn: str, rows: int, repeat: int) -> None:
    for i in range(repeat):
        for kind in ("raw", "bridge", "dbz"):
            create_slot(dsn, f"bench_{kind}_{i}")
    t = time.perf_counter()
    load(dsn, 1, rows, insert=INSERT)
    endpos = end_marker(dsn)
    print(f"loaded {rows:,} rows in {time.perf_counter() - t:.1f} s; end at {endpos}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE bench")
        conn.execute("CHECKPOINT")
    us = 1e6 / rows
    ratios: list[tuple[float, float, float]] = []
    for i in range(repeat):
        raw_s, raw_cpu = raw_receive(dsn, f"bench_raw_{i}", endpos)
        bridge_s, _, _, bridge_cpu = bridge_until(stack, dsn, f"bench_bridge_{i}", endpos)
        dbz_s, dbz_cpu = debezium_until(stack, worker, dsn, f"bench_dbz_{i}", rows)
        raw_rate, bridge_rate, dbz_rate = rows / raw_s, rows / bridge_s, rows / dbz_s
        ratios.append((bridge_rate / raw_rate, dbz_rate / raw_rate, bridge_rate / dbz_rate))
        print(
            f"round {i + 1}: raw receive {raw_rate:10,.0f} changes/s (CPU {raw_cpu * us:5.1f} "
            f"us/change) | pgbridge {bridge_rate:10,.0f}/s = {ratios[-1][0]:.2f}x raw (CPU "
            f"{bridge_cpu * us:5.1f} us/change) | Debezium {dbz_rate:10,.0f}/s = "
            f"{ratios[-1][1]:.2f}x raw (CPU {dbz_cpu * us:5.1f} us/change, JVM) | "
            f"pgbridge / Debezium {ratios[-1][2]:.2f}x"
        )
    if repeat > 1:
        print(
            "median over rounds: pgbridge "
            f"{statistics.median(r[0] for r in ratios):.2f}x raw, Debezium "
            f"{statistics.median(r[1] for r in ratios):.2f}x raw, pgbridge / Debezium "
            f"{statistics.median(r[2] for r in ratios):.2f}x"
        )


def _key_id(key: bytes) -> int:
    """The bigint id of a Confluent-framed Avro key record ``{id: long}``: zigzag varint."""
    value = shift = 0
    for byte in key[5:]:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    return (value >> 1) ^ -(value & 1)


def write_at_rate(dsn: str, first: int, rate: int, seconds: float) -> dict[int, float]:
    """100-row transactions at ``rate`` changes/s; the commit time of each row id."""
    per_tx = 100
    committed: dict[int, float] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        deadline = time.monotonic() + seconds
        next_at = time.monotonic()
        while time.monotonic() < deadline:
            conn.execute(INSERT, (first, first + per_tx - 1))
            now = time.time()
            for i in range(first, first + per_tx):
                committed[i] = now
            first += per_tx
            next_at += per_tx / rate
            time.sleep(max(0.0, next_at - time.monotonic()))
    return committed


def latencies(bootstrap: str, topic: str, committed: dict[int, float]) -> list[float]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    out: list[float] = []
    deadline = time.monotonic() + 120
    try:
        while len(out) < len(committed) and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=1):
                key = message.key()
                if message.error() is not None or key is None or message.value() is None:
                    continue
                commit = committed.get(_key_id(key))
                if commit is not None:
                    out.append(message.timestamp()[1] / 1000 - commit)
    finally:
        consumer.close()
    return out


def latency(stack: StackInfo, worker: ConnectWorker, dsn: str, rate: int, seconds: float) -> None:
    first = 100_000_000
    # pgbridge
    create_slot(dsn, "bench_lat_bridge")
    config = load_config(None, {}, settings(stack, dsn, "bench_lat_bridge"))
    pipeline = build_pipeline(config)
    stop = threading.Event()
    thread = threading.Thread(target=pipeline.run, args=(stop,), daemon=True)
    thread.start()
    try:
        write_at_rate(dsn, first, 1000, 3)  # warm-up: the producer's first records wait for
        time.sleep(3)  # its idempotence id on a fresh broker
        first += 10_000
        committed = write_at_rate(dsn, first, rate, seconds)
        first += rate * int(seconds + 1) + 1000
        time.sleep(2)
    finally:
        stop.set()
        thread.join(120)
    ours = latencies(stack.bootstrap_servers, f"{config.topic_prefix}.public.bench", committed)
    # Debezium
    create_slot(dsn, "bench_lat_dbz")
    prefix = f"dbzlat{uuid.uuid4().hex[:6]}"
    name = f"bench-{prefix}"
    worker.put_connector(name, debezium_config(stack, dsn, prefix, "bench_lat_dbz"))
    try:
        worker.wait_running(name)
        write_at_rate(dsn, first, 1000, 3)
        first += 10_000
        time.sleep(5)
        committed_dbz = write_at_rate(dsn, first, rate, seconds)
        time.sleep(5)
    finally:
        worker.delete_connector(name)
    theirs = latencies(stack.bootstrap_servers, f"{prefix}.public.bench", committed_dbz)
    for label, values, expected in (
        ("pgbridge", ours, committed),
        ("Debezium", theirs, committed_dbz),
    ):
        print(
            f"latency at {rate:,} changes/s, commit to Kafka record timestamp, {label}: p50 "
            f"{percentile(values, 0.5) * 1000:7.1f} ms  p99 {percentile(values, 0.99) * 1000:7.1f} "
            f"ms  ({len(values):,} of {len(expected):,} changes)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--skip", action="append", default=[], choices=["throughput", "latency"])
    args = parser.parse_args()
    stack = LocalStack().up()
    dbname = f"dbzbench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(stack.postgres_dsn(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    dsn = stack.postgres_dsn(dbname)
    worker = ConnectWorker(
        Path(tempfile.mkdtemp(prefix="dbzbench-")), stack.bootstrap_servers, "1g"
    )
    worker.start()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SETUP)
        print(f"PostgreSQL {stack.postgres_major}, {os.cpu_count()} cores; Debezium connector "
              f"in Kafka Connect (heap 1 GB), pgbridge in this process")  # fmt: skip
        if "throughput" not in args.skip:
            throughput(stack, worker, dsn, args.rows, args.repeat)
        if "latency" not in args.skip:
            latency(stack, worker, dsn, args.rate, args.seconds)
        pid = worker.pid
        assert pid is not None
        print(
            f"peak RSS: Connect worker with Debezium {_vm_hwm(pid) / 2**20:,.0f} MB; this "
            f"process (pgbridge's pipelines) {_vm_hwm(os.getpid()) / 2**20:,.0f} MB"
        )
    finally:
        worker.stop()
        with psycopg.connect(stack.postgres_dsn(), autocommit=True) as admin:
            for (slot,) in admin.execute(
                "SELECT slot_name FROM pg_replication_slots WHERE database = %s", (dbname,)
            ).fetchall():
                admin.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


if __name__ == "__main__":
    main()
