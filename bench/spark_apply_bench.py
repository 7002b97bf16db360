"""Benchmark: the apply job's throughput and freshness against Spark's raw Kafka read rate.

    .venv/bin/python bench/spark_apply_bench.py [--changes 1000000] [--tables 4] [--partitions 2]
        [--max-offsets-per-trigger 250000] [--fresh-seconds 30] [--fresh-rate 2000]
        [--large-share 0.5] [--existing-tables]

Uses the real local stack (``pgbridge dev up``; started if needed) and a local[2] Spark. In one run:

1. **produce**: N changes across the tables (70 % inserts, 25 % updates of earlier keys, 5 %
   deletes + tombstones, in 100-change transactions) as Confluent-framed Avro envelopes whose
   schemas are registered in the real registry.
2. **raw read** (baseline): a Structured Streaming query reading the same topics with the same
   ``maxOffsetsPerTrigger`` into Spark's ``noop`` sink: what Spark's Kafka source costs alone.
3. **apply**: the real job (decode by schema id, last change per key, idempotent MERGE per
   table) over the same records, from an empty checkpoint; changes applied per second, and the
   ratio to the raw read. The resulting tables are checked against the expected live rows.
4. **freshness**: a fresh prefix, the job running with its default trigger (1 s) while a
   producer writes ``--fresh-rate`` changes/s for ``--fresh-seconds``; for every micro-batch,
   the time from a change's commit (its Kafka CreateTime, which equals ``source.ts_ms`` here)
   until the batch's Delta commits are done, for the oldest and newest change of the batch.
   Percentiles over batches, plus the time from the last produced change until it is visible.

With ``--mode changelog`` (merge-on-read, :mod:`bridge.spark.changelog`), step 3 is split in
two, timed apart: **ingest** (Kafka -> one changelog commit per batch; the changes are visible
through the current-state views from then on, which are checked against the expected rows)
and **compaction** (the changelog -> the tables; the tables are checked). Freshness is then
from a change's commit to its ingest commit, with compaction running every
``--compaction-interval`` in the same session.

The session is ``pgbridge apply``'s defaults but for ``local[2]`` and two shuffle partitions:
Spark's 1 GiB driver heap, from which the job sizes its batches (``--spark-conf`` sets more).

``--existing-tables`` first creates every table by one insert each, applied untimed by the same
job, so the timed runs measure a job over tables that exist (a table's first batch, which
creates it, takes Spark's path and is paid once per table, not per batch).

Numbers are printed, never asserted; the ratio apply / raw read is what carries over between
machines.
"""

from __future__ import annotations

import argparse
import bisect
import io
import json
import logging
import os
import random
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.cleanup import TOPIC_PREFIXES, delete_topics, topic_prefix
from bridge.devstack.stack import LocalStack
from bridge.snapshot.plan import position as snapshot_position
from bridge.spark import changelog
from bridge.spark.applier import BatchApplier
from bridge.spark.config import ApplyConfig
from bridge.spark.job import start_apply, with_batch_bound
from bridge.spark.session import build_spark_session
from tests.spark.envelopes import TableVersion, create_topics

COLUMNS: list[dict[str, Any]] = [
    {"name": "id", "type": "long"},
    {"name": "name", "type": ["null", "string"], "default": None},
    {
        "name": "amount",
        "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}],
        "default": None,
    },
    {
        "name": "updated_at",
        "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}],
        "default": None,
    },
    {"name": "note", "type": ["null", "string"], "default": None},
]


class FastProducer:
    """Registers each table's schemas once, then frames fastavro output by hand (no per-record
    registry context), so producing is not what the benchmark measures."""

    def __init__(self, bootstrap: str, registry_url: str) -> None:
        from confluent_kafka import Producer
        from confluent_kafka.schema_registry import Schema

        from bridge.sink.registry import registry_client

        self._schema_cls = Schema
        self.registry = registry_client(registry_url)
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 50,
                "batch.num.messages": 10000,
                "queue.buffering.max.messages": 2_000_000,
                "compression.type": "lz4",
            }
        )
        self._writers: dict[str, tuple[bytes, Any, bytes, Any]] = {}
        self.records = 0  # Kafka records sent, tombstones included
        self.changes = 0  # change envelopes sent (records but tombstones)

    def register(self, version: TableVersion) -> None:
        key_id = self.registry.register_schema(
            f"{version.topic}-key", self._schema_cls(json.dumps(version.key_schema()), "AVRO")
        )
        value_id = self.registry.register_schema(
            f"{version.topic}-value", self._schema_cls(json.dumps(version.value_schema()), "AVRO")
        )
        self._writers[version.topic] = (
            b"\x00" + struct.pack(">I", key_id),
            fastavro.parse_schema(version.key_schema()),
            b"\x00" + struct.pack(">I", value_id),
            fastavro.parse_schema(version.value_schema()),
        )

    def send(self, topic: str, key: dict[str, Any], envelope: dict[str, Any] | None) -> None:
        key_head, key_schema, value_head, value_schema = self._writers[topic]
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, key_schema, key)
        key_bytes = key_head + buffer.getvalue()
        value_bytes = None
        if envelope is not None:
            buffer = io.BytesIO()
            fastavro.schemaless_writer(buffer, value_schema, envelope)
            value_bytes = value_head + buffer.getvalue()
        while True:
            try:
                self.producer.produce(topic, key=key_bytes, value=value_bytes)
                self.records += 1
                self.changes += value_bytes is not None
                return
            except BufferError:
                self.producer.poll(0.05)

    def flush(self) -> None:
        if self.producer.flush(300) != 0:
            raise RuntimeError("the producer could not deliver everything in 300 s")


class Workload:
    """Deterministic changes: inserts, updates of earlier keys, deletes; tracks the live rows."""

    def __init__(
        self,
        prefix: str,
        tables: int,
        seed: int = 7,
        large_share: float = 0.0,
        snapshot: bool = False,
    ) -> None:
        self.large_share = large_share  # of the changes going to table t0, the rest spread
        self.snapshot = snapshot  # every change an initial snapshot's read (op r) of a new key
        self.versions = [
            TableVersion(prefix, "public", f"t{i}", COLUMNS, ["id"]) for i in range(tables)
        ]
        self.live: list[dict[int, str]] = [{} for _ in range(tables)]
        self.next_id = [0] * tables
        self.random = random.Random(seed)
        self.lsn = 1_000_000
        self.seq = 0

    def one(self, producer: FastProducer, now_ms: int) -> None:
        if self.large_share and self.random.random() < self.large_share:
            t = 0
        else:
            t = self.random.randrange(len(self.versions))
        version, live = self.versions[t], self.live[t]
        if self.seq == 100 and not self.snapshot:  # 100 changes per transaction
            self.lsn += 1000
            self.seq = 0
        roll = self.random.random()
        if self.snapshot:
            op, key = "r", self.next_id[t]
            self.next_id[t] += 1
        elif roll < 0.70 or len(live) < 10:
            op, key = "c", self.next_id[t]
            self.next_id[t] += 1
        else:
            op = "u" if roll < 0.95 else "d"
            key = self.random.randrange(self.next_id[t])
            if key not in live:
                op = "c"
        if op == "d":
            envelope = version.envelope(
                "d", self.lsn, self.seq, before={**_row(key, ""), "name": None}, ts_ms=now_ms
            )
            del live[key]
            producer.send(version.topic, {"id": key}, envelope)
            producer.send(version.topic, {"id": key}, None)  # tombstone
        else:
            name = f"name-{key}-{self.lsn}-{self.seq}"
            # A snapshot's rows share its LSN and are numbered as pgbridge's first attempt
            # numbers them (chunks of 100,000 rows).
            seq = snapshot_position(0, *divmod(self.seq, 100_000)) if self.snapshot else self.seq
            envelope = version.envelope(op, self.lsn, seq, after=_row(key, name), ts_ms=now_ms)
            live[key] = name
            producer.send(version.topic, {"id": key}, envelope)
        self.seq += 1

    def seed(self, producer: FastProducer, now_ms: int) -> None:
        """One insert into every table (``--existing-tables``: the tables then exist)."""
        self.lsn += 1000
        for t, version in enumerate(self.versions):
            key = self.next_id[t]
            self.next_id[t] += 1
            name = f"seed-{key}"
            envelope = version.envelope("c", self.lsn, t, after=_row(key, name), ts_ms=now_ms)
            self.live[t][key] = name
            producer.send(version.topic, {"id": key}, envelope)
        self.lsn += 1000


def _row(key: int, name: str) -> dict[str, Any]:
    return {
        "id": key,
        "name": name,
        "amount": Decimal(key % 100000) / 100,
        "updated_at": 1_700_000_000_000_000 + key,
        "note": "n" * 40,
    }


def produce(
    stack: Any,
    prefix: str,
    tables: int,
    partitions: int,
    changes: int,
    large_share: float = 0.0,
    snapshot: bool = False,
    before: Any = None,
) -> tuple[Workload, float]:
    """Produce ``changes``; ``before(workload, producer)`` runs first, untimed (once the
    topics and schemas exist)."""
    workload = Workload(prefix, tables, large_share=large_share, snapshot=snapshot)
    create_topics(stack.bootstrap_servers, [v.topic for v in workload.versions], partitions)
    producer = FastProducer(stack.bootstrap_servers, stack.registry_url)
    for version in workload.versions:
        producer.register(version)
    if before is not None:
        before(workload, producer)
    start = time.perf_counter()
    now_ms = int(time.time() * 1000)
    for i in range(changes):
        if i % 10000 == 0:
            now_ms = int(time.time() * 1000)
            producer.producer.poll(0)
        workload.one(producer, now_ms)
    producer.flush()
    return workload, time.perf_counter() - start


def broker_cpu_seconds(stack: Any) -> float:
    """CPU time of the stack's Kafka brokers: reading Kafka costs the broker too (a reader
    that fetches again and again at a partition's end costs it most), and that is on the same
    cores here."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for state in Path(stack.stack_dir, "kafka").rglob("kafka.json"):  # each broker's
        try:
            pid = json.loads(state.read_text())["pid"]
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, ValueError, KeyError):  # not running
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def bench_session(name: str, stack: Any, conf: dict[str, str] | None = None) -> Any:
    """The benches' local Spark session on 2 cores, with the stack's jars."""
    spark = build_spark_session(
        name,
        jars=stack.spark_jars,
        master="local[2]",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            # No spark.driver.memory: Spark's 1 GiB, as `pgbridge apply` has by default (its
            # batches are sized from it: 444,825 records; this bench ran on 3 GiB, 1,703,116
            # records per batch, until 2026-11-30). --spark-conf spark.driver.memory=3g for more.
            "spark.ui.showConsoleProgress": "false",
            **(conf or {}),
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def jvm_pid(spark: Any) -> int:
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of the Spark JVM (``pid``), its Python workers (the task lane's
    decoding and writing run there) and this Python process: all the work of a local[N] job,
    so a slow host is told apart from slow code."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    used: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))  # ppid (field 4)
        used[int(entry)] = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    total, pending = 0.0, [pid]
    while pending:
        process = pending.pop()
        total += used.get(process, 0.0)
        pending.extend(children.get(process, []))
    return total + time.process_time()


def _heap_pools(spark: Any) -> list[Any]:
    factory = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    heap = factory.getMemoryPoolMXBeans()
    return [pool for pool in heap if str(pool.getType().toString()) == "Heap memory"]


def reset_heap_peaks(spark: Any) -> None:
    """Start the JVM heap's peak from now (the apply's, not the warm-up's or the raw read's)."""
    for pool in _heap_pools(spark):
        pool.resetPeakUsage()


def heap_peak_mib(spark: Any) -> float:
    """The JVM heap's peak use since :func:`reset_heap_peaks` (sum of its pools' peaks: an
    upper bound, the pools peak at different times), MiB."""
    return sum(int(pool.getPeakUsage().getUsed()) for pool in _heap_pools(spark)) / 2**20


def worker_peak_mib(pid: int) -> float:
    """The highest peak resident size (VmHWM) of the JVM's Python workers (the task lane's
    decoding and writing), MiB; 0 when none ran."""
    peak = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
            command = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if b"pyspark.daemon" not in command:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]))
    return peak / 1024


def jit_seconds(spark: Any) -> float:
    """Time the Spark JVM spent compiling bytecode (HotSpot's C1/C2 threads, beside the work):
    on a JVM only minutes old it is a large share of small batches' CPU."""
    bean = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getCompilationMXBean()
    return float(bean.getTotalCompilationTime()) / 1000


def codegen_compilations(spark: Any) -> tuple[int, float]:
    """Spark's generated classes compiled so far (Janino), and their compile seconds: a plan
    whose code differs from every earlier one (a new literal) is compiled, not reused."""
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics
    timer = metrics.METRIC_COMPILATION_TIME()
    count = int(timer.getCount())
    return count, count * float(timer.getSnapshot().getMean()) / 1000


def spark_jobs(spark: Any) -> int:
    """Spark jobs submitted so far (the scheduler's next job id), whatever their job group (a
    streaming query's jobs have one)."""
    return int(spark.sparkContext._jsc.sc().dagScheduler().nextJobId())


def raw_read(spark: Any, config: ApplyConfig, records: int) -> float:
    """Seconds for Spark's Kafka source alone to read the topics (noop sink), same batching."""
    source = spark.readStream.format("kafka").options(**config.kafka_source_options()).load()
    start = time.perf_counter()
    query = (
        source.writeStream.format("noop")
        .option("checkpointLocation", config.checkpoint_location + "-raw")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - start
    read = sum(p["numInputRows"] for p in query.recentProgress)
    if read != records:
        print(f"  (raw read saw {read} records, expected {records})")
    return elapsed


class TimedApplier(BatchApplier):
    """Records, per micro-batch: changes, oldest/newest commit time, and when it finished, as
    the job itself reports them (no Spark job of the bench's own beside the job's)."""

    def __init__(self, config: ApplyConfig) -> None:
        super().__init__(config)
        self.batches: list[tuple[int, float, float, float]] = []

    def __call__(self, batch: Any, batch_id: int) -> None:
        super().__call__(batch, batch_id)
        report = self.stats.last_batch
        if report is None:
            return
        changes, oldest_ms, newest_ms, done = report
        if changes and oldest_ms is not None and newest_ms is not None:
            self.batches.append((changes, oldest_ms / 1000, newest_ms / 1000, done))


class TimedWriter(changelog.ChangelogWriter):
    """The changelog mode's ingest, recording what TimedApplier records."""

    def __init__(self, config: ApplyConfig) -> None:
        super().__init__(config)
        self.batches: list[tuple[int, float, float, float]] = []

    def __call__(self, batch: Any, batch_id: int) -> None:
        self.last = None
        super().__call__(batch, batch_id)
        if self.last is not None:
            self.batches.append(self.last)


def check_views(
    spark: Any, config: ApplyConfig, workload: Workload, when: str = "", sample: int = 6
) -> None:
    """The current-state views (changelog mode) equal the expected rows: every table up to
    ``sample`` tables, else the first ``sample``."""
    checked = 0
    for version, live in list(zip(workload.versions, workload.live, strict=True))[:sample]:
        df = changelog.current_state(spark, config, f"{version.schema}.{version.table}")
        got = dict((r["id"], r["name"]) for r in df.select("id", "name").collect())
        if got != live:
            raise SystemExit(f"{version.topic}: the current-state view differs from the source")
        checked += len(live)
    print(f"  views checked{when}: {checked} live rows equal the expected ones")


#: Keys read at a time by :func:`check_tables`: the rows of a 10,000,000-row table collected
#: at once do not fit the driver's default 1 GiB heap beside the job's.
CHECK_KEYS = 1_000_000


def check_tables(spark: Any, config: ApplyConfig, workload: Workload) -> None:
    """Each table equals the expected rows (read by ranges of :data:`CHECK_KEYS` keys)."""
    from pyspark.sql import functions as F

    for version, live in zip(workload.versions, workload.live, strict=True):
        df = spark.read.format("delta").load(config.table_path(version.schema, version.table))
        bounds = df.select(F.min("id"), F.max("id")).first()
        got: dict[int, Any] = {}
        if bounds is not None and bounds[0] is not None:
            for low in range(bounds[0], bounds[1] + 1, CHECK_KEYS):
                part = df.where(F.col("id").between(low, low + CHECK_KEYS - 1))
                got.update((r["id"], r["name"]) for r in part.select("id", "name").collect())
        rows = df.count()
        if rows != len(got):
            raise SystemExit(f"{version.topic}: {rows} rows for {len(got)} keys (duplicates)")
        if got != live:
            missing = len(set(live) - set(got))
            extra = len(set(got) - set(live))
            wrong = sum(1 for k in set(live) & set(got) if live[k] != got[k])
            raise SystemExit(
                f"{version.topic}: table differs (missing {missing}, extra {extra}, wrong {wrong})"
            )
    print(
        f"  tables checked: {sum(len(x) for x in workload.live)} live rows equal the expected ones"
    )


def freshness(spark: Any, stack: Any, work: Path, args: argparse.Namespace) -> None:
    prefix = topic_prefix("fresh")
    workload = Workload(prefix, args.tables)
    create_topics(stack.bootstrap_servers, [v.topic for v in workload.versions], args.partitions)
    producer = FastProducer(stack.bootstrap_servers, stack.registry_url)
    for version in workload.versions:
        producer.register(version)
    config = _config(
        stack,
        prefix,
        work / "fresh",
        available_now=False,  # the default trigger
        mode=args.mode,
        kafka_options=kafka_options(args),
        compaction_interval=args.compaction_interval,
        lane_reads_kafka=args.lane_reads_kafka,
    )
    if args.mode == "changelog":
        applier: Any = TimedWriter(config)
        queries = [
            changelog.start_ingest(spark, config, applier),
            changelog.start_compactor(spark, config),
        ]
    else:
        applier = TimedApplier(config)
        queries = [start_apply(spark, config, applier)]

    def expected() -> int:
        """What the job reports applied once it has everything: the changelog mode counts
        Kafka records, the MERGE mode changes (tombstones are no changes)."""
        return producer.records if args.mode == "changelog" else producer.changes

    if args.existing_tables:
        # One insert per table, applied before the timed run: a job over tables that exist.
        start = time.perf_counter()
        workload.seed(producer, int(time.time() * 1000))
        producer.flush()
        deadline = time.time() + 600
        while time.time() < deadline and sum(b[0] for b in applier.batches) < expected():
            time.sleep(0.2)
        print(f"  {args.tables} tables created by one insert each, untimed: "
              f"{time.perf_counter() - start:.1f} s")  # fmt: skip
        applier.batches.clear()
        producer.records = producer.changes = 0
        if args.restarted:  # a new job over the tables: it knows none of them yet
            for query in queries:
                query.stop()
            applier = TimedApplier(config)
            queries = [start_apply(spark, config, applier)]
    stop = threading.Event()
    commit_times: list[float] = []
    producer_cpu: list[float] = []  # the producer thread's own CPU time

    def run_producer() -> None:
        thread_cpu0 = time.thread_time()
        interval = 1.0 / args.fresh_rate
        start = time.time()
        sent = 0
        while not stop.is_set() and time.time() - start < args.fresh_seconds:
            target = int((time.time() - start) / interval)
            while sent < target:
                now_ms = int(time.time() * 1000)
                workload.one(producer, now_ms)
                commit_times.append(now_ms / 1000)
                sent += 1
            producer.producer.poll(0)
            time.sleep(0.01)
        producer.flush()
        producer_cpu.append(time.thread_time() - thread_cpu0)

    pid = jvm_pid(spark)
    cpu0, broker0, process0 = cpu_seconds(pid), broker_cpu_seconds(stack), time.process_time()
    thread = threading.Thread(target=run_producer)
    thread.start()
    thread.join()
    last_sent = time.time()
    # Wait until the job has applied every record produced.
    deadline = time.time() + 300
    while time.time() < deadline and sum(b[0] for b in applier.batches) < expected():
        time.sleep(0.2)
    visible = time.time()
    run_cpu, broker_cpu = cpu_seconds(pid) - cpu0, broker_cpu_seconds(stack) - broker0
    process_cpu = time.process_time() - process0
    for query in queries:
        query.stop()
    applied = sum(b[0] for b in applier.batches)
    oldest = sorted(b[3] - b[1] for b in applier.batches)
    newest = sorted(b[3] - b[2] for b in applier.batches)
    visible_where = "ingest commit (view)" if args.mode == "changelog" else "Delta commits"
    print(f"freshness to the {visible_where} ", end="")
    print(f"({args.fresh_rate}/s for {args.fresh_seconds} s, ", end="")
    what = "records" if args.mode == "changelog" else "changes"
    print(f"{len(applier.batches)} batches, {applied} of {expected()} {what}):")
    print(
        f"  commit -> visible, oldest change of a batch: p50 {_pct(oldest, 50):.2f} s  "
        f"p95 {_pct(oldest, 95):.2f} s  max {oldest[-1]:.2f} s"
    )
    print(
        f"  commit -> visible, newest change of a batch: p50 {_pct(newest, 50):.2f} s  "
        f"p95 {_pct(newest, 95):.2f} s"
    )
    every = change_latencies(commit_times, applier.batches)
    if every and args.mode != "changelog":  # the changelog mode's batches count records
        print(
            f"  commit -> visible, every change ({len(every)}): p50 {_pct(every, 50):.2f} s  "
            f"p95 {_pct(every, 95):.2f} s  (target p50 < 5 s, p95 < 15 s)"
        )
    print(f"  last change produced -> job caught up: {visible - last_sent:.2f} s")
    print(
        f"  CPU {run_cpu / max(applied, 1) * 1e6:.1f} us/{what[:-1]} (JVM + this process, whose "
        f"producer thread encodes the changes; {os.cpu_count()} cores, local[2]) + the "
        f"broker's {broker_cpu / max(applied, 1) * 1e6:.1f} (taking and serving them)"
    )
    per_change = 1e6 / max(applied, 1)
    producing = sum(producer_cpu)
    print(
        f"    of it: the job's driver {(process_cpu - producing) * per_change:.1f}, the JVM and "
        f"its Python workers {(run_cpu - process_cpu) * per_change:.1f}, the bench's producer "
        f"thread {producing * per_change:.1f}"
    )
    if args.mode == "changelog":
        check_views(spark, config, workload, " (compaction running beside)")
    else:
        check_tables(spark, config, workload)


def change_latencies(
    commit_times: list[float], batches: list[tuple[int, float, float, float]]
) -> list[float]:
    """Each change's commit -> visible. A change is applied by the first batch (in the order
    the job applied them) whose newest change is not older than it: the producer's commit
    times only grow, and a batch reads every topic to the offsets it found at its start."""
    newest: list[float] = []
    for _, _, batch_newest, _ in batches:
        newest.append(max(batch_newest, newest[-1]) if newest else batch_newest)
    latencies = []
    for commit in commit_times:
        i = bisect.bisect_left(newest, commit)
        if i < len(batches):
            latencies.append(batches[i][3] - commit)
    return sorted(latencies)


def _pct(values: list[float], pct: int) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]


def kafka_options(args: argparse.Namespace) -> tuple[tuple[str, str], ...]:
    """``--kafka-option`` pairs: consumer properties of the job's (and the raw read's) source."""
    return tuple((k, v) for k, v in (item.split("=", 1) for item in args.kafka_option))


def _config(stack: Any, prefix: str, where: Path, **overrides: Any) -> ApplyConfig:
    settings: dict[str, Any] = {
        "topic_prefix": prefix,
        "bootstrap_servers": stack.bootstrap_servers,
        "registry_url": stack.registry_url,
        "delta_base": str(where / "delta"),
        "checkpoint_location": str(where / "checkpoint"),
        "dead_letter_location": str(where / "dead"),
        "available_now": True,
    }
    settings.update(overrides)
    return ApplyConfig(**settings)


def bulk(spark: Any, stack: Any, work: Path, args: argparse.Namespace) -> None:
    """Steps 1-3: produce, the raw read, and the job over the same records (timed, checked)."""
    prefix = topic_prefix("bench")
    config = _config(
        stack,
        prefix,
        work / "bulk",
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        parallel_tables=args.parallel_tables,
        deletion_vectors=args.deletion_vectors,
        mode=args.mode,
        kafka_options=kafka_options(args),
        lane_reads_kafka=args.lane_reads_kafka,
    )
    seeded = 0
    # One applier for both runs, as one running job: it knows the tables it created.
    applier = TimedApplier(config)

    def create_tables(workload: Workload, producer: FastProducer) -> None:
        """--existing-tables: one insert per table, applied untimed, so the timed run applies
        to tables that exist (their creation is once per table, not per batch)."""
        nonlocal seeded
        workload.seed(producer, int(time.time() * 1000))
        producer.flush()
        seeded = producer.records
        start = time.perf_counter()
        query = start_apply(spark, config, applier)
        query.awaitTermination()
        applier.batches.clear()
        if query.exception() is not None:
            raise SystemExit(f"creating the tables failed: {query.exception()}")
        print(f"  {args.tables} tables created by one insert each, untimed: "
              f"{time.perf_counter() - start:.1f} s")  # fmt: skip

    print(f"producing {args.changes} changes: {args.tables} tables x {args.partitions} partitions")
    workload, produce_s = produce(
        stack, prefix, args.tables, args.partitions, args.changes, args.large_share,
        args.snapshot, create_tables if args.existing_tables else None,
    )  # fmt: skip
    print(f"  produced in {produce_s:.1f} s ({args.changes / produce_s:,.0f} changes/s)")
    if args.restarted:  # the timed run is a new job: it knows none of the tables yet
        applier = TimedApplier(config)
    if args.warmup:
        warm_up(spark, stack, work, args)
    config = with_batch_bound(spark, config)  # the job's default batches, for both runs
    print(f"  micro-batches of at most {config.max_offsets_per_trigger:,} records")
    records = _records(spark, config) - seeded  # the seeds were applied before, untimed
    pid = jvm_pid(spark)
    cpu0, broker0 = cpu_seconds(pid), broker_cpu_seconds(stack)
    raw_s = raw_read(spark, config, records)
    raw_cpu, raw_broker = cpu_seconds(pid) - cpu0, broker_cpu_seconds(stack) - broker0
    print(f"raw Kafka read (noop sink): {records} records in {raw_s:.1f} s", end="")
    print(f" = {records / raw_s:,.0f} records/s, CPU {raw_cpu / records * 1e6:.1f} us/record"
          f" (+ the broker's {raw_broker / records * 1e6:.1f})")  # fmt: skip
    broker0 = broker_cpu_seconds(stack)
    if args.mode == "changelog":
        apply_s, apply_cpu, batches = ingest_then_compact(spark, config, workload, pid, args)
    else:
        cpu0, jit0, jobs0 = cpu_seconds(pid), jit_seconds(spark), spark_jobs(spark)
        compiled0 = codegen_compilations(spark)
        reset_heap_peaks(spark)
        start = time.perf_counter()
        query = start_apply(spark, config, applier)
        query.awaitTermination()
        apply_s = time.perf_counter() - start
        apply_cpu = cpu_seconds(pid) - cpu0
        if query.exception() is not None:
            raise SystemExit(f"apply failed: {query.exception()}")
        batches = applier.batches
        compiled = codegen_compilations(spark)
        print(
            f"  apply: {spark_jobs(spark) - jobs0} Spark jobs for {len(batches)} batches; "
            f"{compiled[0] - compiled0[0]} generated classes compiled "
            f"({compiled[1] - compiled0[1]:.1f} s); JVM JIT compilation "
            f"{jit_seconds(spark) - jit0:.1f} s of the {apply_cpu:.1f} CPU s"
        )
    what = "ingest (visible in the views)" if args.mode == "changelog" else "apply"
    print(
        f"{what}: {args.changes} changes ({records} records, {len(batches)} batches) in "
        f"{apply_s:.1f} s = {args.changes / apply_s:,.0f} changes/s, "
        f"CPU {apply_cpu / args.changes * 1e6:.1f} us/change "
        f"(JVM, its Python workers, driver; {os.cpu_count()} cores, local[2]) "
        f"+ the broker's {(broker_cpu_seconds(stack) - broker0) / args.changes * 1e6:.1f}"
    )
    print(
        f"ratio {what} / raw read: {(records / apply_s) / (records / raw_s):.3f} "
        f"(raw read is {apply_s / raw_s:.1f}x faster; #32's target: >= 0.5)"
    )
    if args.mode != "changelog":
        heap, workers = heap_peak_mib(spark), worker_peak_mib(pid)
        print(
            f"  peak memory of the apply: JVM heap {heap:,.0f} MiB (of "
            f"{spark.conf.get('spark.driver.memory', '1g')}); Python workers {workers:,.0f} MiB "
            "resident at most each"
        )
    first_commit = min(b[1] for b in batches)
    print(
        f"bulk freshness: first commit -> all {args.changes} visible: "
        f"{max(b[3] for b in batches) - first_commit:.1f} s "
        f"(includes the {produce_s:.1f} s of producing and the raw-read run)"
    )
    check_tables(spark, config, workload)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument(
        "--large-share",
        type=float,
        default=0.0,
        help="share of the changes that go to one large table (the rest spread evenly), e.g. "
        "0.5 with --tables 60 for a database of one busy table and many small ones",
    )
    parser.add_argument(
        "--snapshot",
        action="store_true",
        help="every change an initial snapshot's read (op r) of a new key: a snapshot-sized topic",
    )
    parser.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        default=None,
        help="records per micro-batch (default: the job's own, sized from Spark's memory)",
    )
    parser.add_argument("--fresh-seconds", type=int, default=30)
    parser.add_argument("--fresh-rate", type=int, default=2000)
    parser.add_argument("--skip-freshness", action="store_true")
    parser.add_argument(
        "--existing-tables",
        action="store_true",
        help="apply to tables that exist (one insert each, applied untimed first): the "
        "steady state, not the batch that creates every table",
    )
    parser.add_argument(
        "--restarted",
        action="store_true",
        help="with --existing-tables: the timed run is a new job (a restart) over the tables "
        "an earlier one created, so each table's first batch after a start is in it",
    )
    parser.add_argument("--skip-bulk", action="store_true", help="only the freshness run")
    parser.add_argument("--parallel-tables", type=int, default=2)
    parser.add_argument("--mode", choices=("merge", "changelog"), default="merge")
    parser.add_argument("--compaction-interval", default="30 seconds")
    parser.add_argument(
        "--no-warmup",
        dest="warmup",
        action="store_false",
        help="time the first runs of a fresh JVM (no untimed run before)",
    )
    parser.add_argument("--no-deletion-vectors", dest="deletion_vectors", action="store_false")
    parser.add_argument(
        "--no-lane-kafka-reads",
        dest="lane_reads_kafka",
        action="store_false",
        help="the task lane's tasks, and the driver for a small batch, take their records "
        "from Spark's Kafka source (the job's --no-lane-kafka-reads), to compare with their "
        "own reads of Kafka (the bulk and freshness runs both)",
    )
    parser.add_argument("--verbose", action="store_true", help="the job's per-batch log")
    parser.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="a session setting"
    )
    parser.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Kafka consumer property of the job and the raw read (e.g. fetch.max.wait.ms=500, "
        "Kafka's default, to compare with the job's 0)",
    )
    parser.add_argument("--workdir", help="default: a temporary directory, removed afterwards")
    args = parser.parse_args()
    if args.restarted and not args.existing_tables:
        parser.error("--restarted restarts the job over the tables --existing-tables creates")
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
        logging.getLogger("py4j").setLevel(logging.WARNING)

    stack = LocalStack().up()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="pgbridge-apply-bench-"))
    spark = bench_session(
        "pgbridge-apply-bench",
        stack,
        {
            # As pgbridge apply sets it in the changelog mode: ingest beside compaction.
            **({"spark.scheduler.mode": "FAIR"} if args.mode == "changelog" else {}),
            **dict(item.split("=", 1) for item in args.spark_conf),
        },
    )
    try:
        if not args.skip_bulk:
            bulk(spark, stack, work, args)
        if not args.skip_freshness:
            if args.warmup and args.skip_bulk:
                warm_up(spark, stack, work, args)
            freshness(spark, stack, work, args)
    finally:
        spark.stop()
        # Hundreds of topics per run left behind kept the broker busy (a stack with ~5,000
        # partitions idled at 40% of a core) and slowed every run after.
        delete_topics(stack, TOPIC_PREFIXES)
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


def ingest_then_compact(
    spark: Any, config: ApplyConfig, workload: Workload, pid: int, args: argparse.Namespace
) -> tuple[float, float, list[tuple[int, float, float, float]]]:
    """Changelog mode: ingest everything (timed, views checked), then compact (timed apart)."""
    writer = TimedWriter(config)
    cpu0 = cpu_seconds(pid)
    start = time.perf_counter()
    query = changelog.start_ingest(spark, config, writer)
    query.awaitTermination()
    ingest_s = time.perf_counter() - start
    ingest_cpu = cpu_seconds(pid) - cpu0
    check_views(spark, config, workload, " before any compaction")
    cpu0 = cpu_seconds(pid)
    start = time.perf_counter()
    compaction = changelog.start_compactor(spark, config)
    compaction.awaitTermination()
    compact_s = time.perf_counter() - start
    compact_cpu = cpu_seconds(pid) - cpu0
    print(
        f"  then compaction into the tables: {args.changes} changes in {compact_s:.1f} s = "
        f"{args.changes / compact_s:,.0f} changes/s, CPU {compact_cpu / args.changes * 1e6:.1f} "
        "us/change"
    )
    return ingest_s, ingest_cpu, writer.batches


def warm_up(spark: Any, stack: Any, work: Path, args: argparse.Namespace) -> None:
    """Run the job once, untimed, over 120,000 changes of another prefix (two tables of 60,000:
    more than the task lane's 50,000, so its path runs too): the timed runs then meet a JVM
    whose Kafka, Avro, Arrow and Delta paths are compiled, as a running job's are (the first
    batches in a fresh JVM take 2x as long; half a first lane batch's CPU was the JIT's)."""
    prefix = topic_prefix("warm")
    produce(stack, prefix, 2, args.partitions, 120_000)
    config = _config(
        stack, prefix, work / "warm", mode=args.mode, kafka_options=kafka_options(args)
    )
    raw_read(spark, config, _records(spark, config))
    start = time.perf_counter()
    query = start_apply(spark, config)
    query.awaitTermination()
    print(f"  warm-up run (untimed): {time.perf_counter() - start:.1f} s")


def _records(spark: Any, config: ApplyConfig) -> int:
    options = {
        k: v for k, v in config.kafka_source_options().items() if k != "maxOffsetsPerTrigger"
    }
    return int(spark.read.format("kafka").options(**options).load().count())


if __name__ == "__main__":
    main()
