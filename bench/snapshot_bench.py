"""Benchmark: the initial snapshot (``snapshot.mode = initial_only``) against a raw binary COPY.

    .venv/bin/python bench/snapshot_bench.py [--rows 1000000] [--threads 1,2,4]
        [--chunk 100000] [--wide] [--set KEY=VALUE (repeatable)]
        [--delivery at-least-once,exactly-once]
        [--incremental [--rate 2000] [--incremental-chunk 1024]]

On the local stack (real PostgreSQL, Kafka, Apicurio; started if needed), in one run:

- a table of ``--rows`` rows in the 6-column shape of ``bench/pipeline_bench.py`` (bigint key,
  text, numeric, timestamptz, bool, jsonb), with ``--wide`` one more text column of ~4 kB of
  random hex per row (TOASTed out of line);
- **raw**: ``COPY (SELECT …) TO STDOUT (FORMAT binary)`` of the whole table read by psycopg and
  thrown away: the rate at which the server produces the rows, the ceiling for any client;
- **pgbridge**: the snapshot with 1, 2, 4 (``--threads``) workers, until Kafka acknowledged
  every row (acks=all), in this process; with ``--delivery`` listing both, each worker count
  runs at-least-once and exactly once (each chunk in a Kafka transaction of its own,
  ``exactly.once.support = required``), each beside a raw COPY of its own, and their ratio.

With ``--incremental``, then: an incremental snapshot of the same table (signal
``execute-snapshot`` while ``pgbridge run`` streams, in this process) against the initial
snapshot's rate with one worker, and the streaming commit-to-acknowledgement latency (p50, p99)
of a concurrent ``--rate`` changes/s workload on another table, first without the incremental
snapshot, then while it runs.

Printed for each: rows/s, MB/s (COPY bytes), the ratio to raw, this process's CPU time per row
(user + system, all threads: librdkafka's included) beside each rate, so that a slow machine is
told apart from slow code, the whole machine's busy CPU per row and cores busy (PostgreSQL,
Kafka and the registry run on the same host: when the cores are all busy, no client can go
faster), the CPU per row of each of those processes and of pgbridge's threads
(bench/host_cpu.py), and the process's peak RSS. Each snapshot follows a raw COPY of its own
and is compared with it (the server's speed drifts by 10-20% between minutes on a shared
host); the median ratio per worker count closes the run. Numbers are measured, never asserted.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.cleanup import TOPIC_PREFIXES, delete_topics, drop_database, topic_prefix
from bench.host_cpu import CpuSampler, per_row
from bridge.config import load_config
from bridge.devstack.stack import LocalStack, StackInfo
from bridge.runner import run

SETUP = """
CREATE TABLE bench (
    id bigint PRIMARY KEY,
    name text NOT NULL,
    amount numeric(12, 2),
    created timestamptz NOT NULL,
    active bool NOT NULL,
    doc jsonb
);
"""

INSERT = """
INSERT INTO bench
SELECT g, 'customer ' || g, (g %% 100000) / 100.0, now() - g * interval '1 second', g %% 3 = 0,
       jsonb_build_object('sku', 'SKU-' || (g %% 5000), 'qty', g %% 7, 'note', md5(g::text))
FROM generate_series(%s::bigint, %s::bigint) g
"""

WIDE = (
    "ALTER TABLE bench ADD COLUMN body text; "
    "UPDATE bench SET body = (SELECT string_agg(md5(id::text || j), '') "
    "FROM generate_series(1, 128) j)"
)

STREAM_SETUP = "CREATE TABLE bench_stream (id bigint PRIMARY KEY, v text NOT NULL)"
STREAM_INSERT = (
    "INSERT INTO bench_stream SELECT g, 'v' || g FROM generate_series(%s::bigint, %s::bigint) g"
)

OVERRIDES: dict[str, str] = {}


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def machine(sampler: CpuSampler, seconds: float, rows: int) -> str:
    busy_s = sum(sampler.by_role().values())
    return f"machine {busy_s / rows * 1e6:5.2f} us/row ({busy_s / seconds:3.1f} cores busy)"


def raw_copy(dsn: str) -> tuple[float, float, int, int]:
    """(seconds, CPU seconds, rows, bytes) of a raw binary COPY of the table."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        columns = [
            r[0]
            for r in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = 'bench'::regclass "
                "AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
            ).fetchall()
        ]
        select = f"SELECT {', '.join(columns)} FROM bench"
        rows = nbytes = 0
        cpu0, t0 = cpu(), time.perf_counter()
        with conn.cursor() as cur, cur.copy(f"COPY ({select}) TO STDOUT (FORMAT binary)") as copy:
            for data in copy:
                nbytes += len(data)
                rows += 1  # one CopyData message per row
        return time.perf_counter() - t0, cpu() - cpu0, rows, nbytes


#: The delivery guarantees a run compares (``--delivery``): their ``exactly.once.support``.
DELIVERY = {"at-least-once": "disabled", "exactly-once": "required"}


def snapshot(
    stack: StackInfo, dsn: str, threads: int, chunk: int, delivery: str = "at-least-once"
) -> tuple[float, float, CpuSampler]:
    """(seconds, CPU seconds, the host's CPU by role and thread) of one initial_only snapshot
    with ``threads`` workers."""
    slot = f"snapbench_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as state_dir:
        config = load_config(
            None,
            {},
            {
                "database.dsn": dsn,
                "topic.prefix": topic_prefix("snapbench"),
                "slot.name": slot,
                "publication.name": "snapbench_pub",
                "publication.autocreate.mode": "disabled",
                "kafka.bootstrap.servers": stack.bootstrap_servers,
                "schema.registry.url": stack.registry_url,
                "snapshot.mode": "initial_only",
                "snapshot.max.threads": str(threads),
                "snapshot.chunk.size": str(chunk),
                "snapshot.progress.interval.ms": "60000",
                "state.dir": state_dir,
                "exactly.once.support": DELIVERY[delivery],
            }
            | OVERRIDES,
        )
        cpu0, t0 = cpu(), time.perf_counter()
        with CpuSampler() as sampler:
            run(config, threading.Event())
        seconds, cpu_s = time.perf_counter() - t0, cpu() - cpu0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    return seconds, cpu_s, sampler


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))] if ordered else float("nan")


def incremental(
    stack: StackInfo, dsn: str, rows: int, rate: int, chunk: int, baseline_s: float
) -> None:
    """The incremental snapshot of ``bench`` under a ``rate`` changes/s stream on another
    table; prints its rate, CPU per row and the stream's latency without and with it."""
    from bench.pipeline_bench import LatencyProbe
    from bridge.runner import build_pipeline
    from bridge.signals import send_signal
    from bridge.snapshot.incremental_state import load_incremental

    slot = f"incrbench_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as state_dir:
        config = load_config(
            None,
            {},
            {
                "database.dsn": dsn,
                "topic.prefix": topic_prefix("incrbench"),
                "slot.name": slot,
                "publication.name": "snapbench_pub",
                "publication.autocreate.mode": "disabled",
                "kafka.bootstrap.servers": stack.bootstrap_servers,
                "schema.registry.url": stack.registry_url,
                "snapshot.mode": "no_data",
                "signal.data.collection": "public.bench_signal",
                "incremental.snapshot.chunk.size": str(chunk),
                "state.dir": state_dir,
            }
            | OVERRIDES,
        )
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        pipeline = build_pipeline(config)
        probe = LatencyProbe()
        pipeline.observer = probe
        stop = threading.Event()
        thread = threading.Thread(target=pipeline.run, args=(stop,), daemon=True)
        thread.start()
        state_path = Path(state_dir) / f"incremental-{slot}.json"

        def done() -> bool:
            state = load_incremental(state_path)
            return bool(state and state.tables and state.tables[0].status == "done")

        try:
            per_tx = 20
            with psycopg.connect(dsn, autocommit=True) as conn:
                first = 1
                conn.execute(STREAM_INSERT, (first, first + per_tx - 1))  # warm-up
                first += per_tx
                warm_until = time.monotonic() + 60
                while not probe.latencies and time.monotonic() < warm_until:
                    time.sleep(0.05)

                def stream(until: Callable[[], bool]) -> list[float]:
                    nonlocal first
                    probe.latencies.clear()
                    next_at = time.monotonic()
                    while not until():
                        conn.execute(STREAM_INSERT, (first, first + per_tx - 1))
                        first += per_tx
                        next_at += per_tx / rate
                        time.sleep(max(0.0, next_at - time.monotonic()))
                    time.sleep(1)
                    return list(probe.latencies)

                quiet_until = time.monotonic() + baseline_s
                without = stream(lambda: time.monotonic() > quiet_until)
                with CpuSampler() as sampler:
                    cpu0, t0 = cpu(), time.perf_counter()
                    send_signal(
                        conn,
                        "public.bench_signal",
                        "execute-snapshot",
                        {"data-collections": ["public.bench"], "type": "incremental"},
                    )
                    limit = time.monotonic() + 3600
                    during = stream(lambda: done() or time.monotonic() > limit)
                    seconds = time.perf_counter() - t0 - 1  # stream() waits 1 s at the end
                    cpu_s = cpu() - cpu0
        finally:
            stop.set()
            thread.join(120)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    rate_rows = rows / seconds
    stream_rows = len(during) * per_tx
    print(
        f"incremental snapshot, chunks of {chunk}: {seconds:7.2f} s {rate_rows:12,.0f} rows/s "
        f"{rate_rows / (rows / baseline_snapshot_s[0]):5.2f}x the initial snapshot (1 worker)   "
        f"CPU {cpu_s / (rows + stream_rows) * 1e6:6.2f} us/change (rows + streamed)   "
        f"{machine(sampler, seconds, rows + stream_rows)}"
    )
    print(
        f"stream at {rate:,} changes/s, commit-to-acknowledgement: without the incremental "
        f"snapshot p50 {percentile(without, 0.5) * 1000:6.1f} ms p99 "
        f"{percentile(without, 0.99) * 1000:6.1f} ms ({len(without)} tx); during it p50 "
        f"{percentile(during, 0.5) * 1000:6.1f} ms p99 {percentile(during, 0.99) * 1000:6.1f} ms "
        f"({len(during)} tx, watermark transactions included)"
    )


#: The initial snapshot's time with one worker in this run (the incremental's reference).
baseline_snapshot_s: list[float] = []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--threads", default="1,2,4", help="worker counts, comma-separated")
    parser.add_argument("--chunk", type=int, default=100_000, help="snapshot.chunk.size")
    parser.add_argument("--wide", action="store_true", help="add a ~4 kB TOASTed text column")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--incremental", action="store_true", help="also the incremental one")
    parser.add_argument("--rate", type=int, default=2000, help="stream changes/s (incremental)")
    parser.add_argument("--incremental-chunk", type=int, default=1024)
    parser.add_argument("--baseline-seconds", type=float, default=20.0)
    parser.add_argument(
        "--delivery",
        # Both: the product's default is exactly once where the cluster allows it.
        default="at-least-once,exactly-once",
        help="the guarantees measured side by side (comma-separated: at-least-once, exactly-once)",
    )
    args = parser.parse_args()
    deliveries = args.delivery.split(",")
    if not deliveries or any(d not in DELIVERY for d in deliveries):
        parser.error(f"--delivery: a comma-separated list of {', '.join(DELIVERY)}")
    if args.incremental and "1" not in args.threads.split(","):
        parser.error("--incremental compares with the 1-worker snapshot: keep 1 in --threads")
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set {item!r}: expected KEY=VALUE")
        OVERRIDES[key] = value

    stack = LocalStack().up()
    dbname = f"snapbench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(stack.postgres_dsn(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    dsn = stack.postgres_dsn(dbname)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SETUP)
            for start in range(1, args.rows + 1, 100_000):
                conn.execute(INSERT, (start, min(start + 100_000, args.rows + 1) - 1))
            if args.wide:
                conn.execute(WIDE)
            conn.execute(STREAM_SETUP)
            conn.execute(
                "CREATE TABLE bench_signal (id varchar(64) PRIMARY KEY, type varchar(32) "
                "NOT NULL, data varchar(8192))"
            )
            conn.execute(
                "CREATE PUBLICATION snapbench_pub FOR TABLE bench, bench_stream, bench_signal"
            )
            conn.execute("VACUUM ANALYZE bench")
            conn.execute("CHECKPOINT")
        print(
            f"PostgreSQL {stack.postgres_major}, {args.rows:,} rows"
            f"{' (wide)' if args.wide else ''}, {os.cpu_count()} cores"
        )
        ratios: dict[tuple[int, str], list[float]] = {}
        rates: dict[tuple[int, str], float] = {}
        cpus: dict[tuple[int, str], float] = {}
        for threads in (int(t) for t in args.threads.split(",")):
            for delivery in deliveries:
                # Each snapshot right after a raw COPY of its own: the ratio to the one beside it.
                with CpuSampler() as raw_sampler:
                    raw_s, raw_cpu, rows, nbytes = raw_copy(dsn)
                raw_rate = rows / raw_s
                print(
                    f"raw COPY binary:          {raw_s:7.2f} s {raw_rate:12,.0f} rows/s "
                    f"{nbytes / 1e6 / raw_s:8.1f} MB/s   client CPU {raw_cpu / rows * 1e6:6.2f} "
                    f"us/row   {machine(raw_sampler, raw_s, rows)}"
                )
                print(f"    CPU by process: {per_row(raw_sampler.by_role(), rows)}")
                seconds, cpu_s, sampler = snapshot(stack, dsn, threads, args.chunk, delivery)
                rate = rows / seconds
                if threads == 1 and delivery == deliveries[0]:
                    baseline_snapshot_s.append(seconds)
                ratios.setdefault((threads, delivery), []).append(rate / raw_rate)
                rates[(threads, delivery)], cpus[(threads, delivery)] = rate, cpu_s / rows
                print(
                    f"pgbridge snapshot, {threads} worker(s), {delivery}: {seconds:7.2f} s "
                    f"{rate:12,.0f} rows/s {nbytes / 1e6 / seconds:8.1f} MB/s   "
                    f"{rate / raw_rate:5.2f}x raw   CPU {cpu_s / rows * 1e6:6.2f} us/row   "
                    f"{machine(sampler, seconds, rows)}"
                )
                print(f"    CPU by process: {per_row(sampler.by_role(), rows)}")
                print(f"    pgbridge by thread: {per_row(sampler.by_thread(), rows)}")
            if len(deliveries) == 2:
                first, second = ((threads, d) for d in deliveries)
                print(
                    f"{threads} worker(s): {deliveries[1]} / {deliveries[0]}: rows/s "
                    f"{rates[second] / rates[first]:.2f}x, CPU per row "
                    f"{cpus[second] / cpus[first]:.2f}x"
                )
        for (threads, delivery), values in ratios.items():
            print(
                f"median ratio, {threads} worker(s), {delivery}: "
                f"{statistics.median(values):.2f}x raw over {len(values)} round(s)"
            )
        if args.incremental:
            incremental(stack, dsn, rows, args.rate, args.incremental_chunk, args.baseline_seconds)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak RSS of this process: {peak:.0f} MB")
    finally:
        drop_database(stack, dbname)
        delete_topics(stack, TOPIC_PREFIXES)


if __name__ == "__main__":
    main()
