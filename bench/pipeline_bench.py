"""Benchmark: `pgbridge run` end to end, against a raw receive of the same changes.

    .venv/bin/python bench/pipeline_bench.py [--rows 1000000] [--rate 5000] [--big-rows 5000000]
        [--repeat 1] [--skip throughput|latency|memory] [--set KEY=VALUE (repeatable)]
        [--delivery at-least-once,exactly-once]

On the local stack (real PostgreSQL 18, Kafka, Apicurio; started if needed), in one run:

1. **throughput**: ``--rows`` inserts into a 6-column table (int, text, numeric, timestamptz,
   bool, jsonb), then into a wide table of the type zoo's common types (interval, numeric
   without typmod, int[] and text[], inet, uuid, jsonb, date, time, timestamp, timestamptz,
   bytea; ``--tables six,wide``), in 1,000-row transactions, written *before* anything reads
   them. Per table, two slots
   created at the same position then receive exactly the same changes:
   - **raw**: ``pg_recvlogical`` (C) streams them over a replication connection to /dev/null:
     the rate at which the server decodes and sends them, the ceiling for any client;
   - **pgbridge**: the whole pipeline (decode, events, Avro, registry, Kafka with acks=all)
     until Kafka acknowledged the last change, once per delivery guarantee of ``--delivery``
     (by default both: at-least-once, and exactly once through Kafka transactions, each on a
     slot of its own), with the ratio of the two.
   Printed: changes/s of each and the ratio pgbridge / raw; also the CPU time each used per
   change (pg_recvlogical's, and pgbridge's pipeline thread and whole process), which unlike
   the rates hardly depends on what else the machine is running: on a loaded machine the
   pipeline thread gets only part of a core, and 1 / (its CPU per change) is the rate it would
   reach on a free one. ``--repeat N`` runs N rounds of both (one slot pair each, created
   before the load) alternately and adds the median ratio: on a shared machine one round's
   ratio can be off by half.
2. **latency**: per delivery guarantee, a writer commits 100-row transactions at ``--rate``
   changes/s for ``--seconds`` while the bridge runs; commit-to-Kafka-acknowledgement latency
   per transaction (p50, p99, max). Commit times come from the server's Commit messages; both
   clocks are this machine's.
3. **memory**: one transaction of ``--big-rows`` rows through ``pgbridge run`` as a separate
   process; its peak RSS (VmHWM), against the same process idle.

Numbers are measured, never asserted; the README quotes them with this command.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.cleanup import TOPIC_PREFIXES, delete_topics, drop_database, topic_prefix
from bridge.config import load_config
from bridge.devstack.stack import LocalStack, StackInfo
from bridge.pgoutput.lsn import Lsn
from bridge.runner import build_pipeline

PG_RECVLOGICAL = [
    Path("/usr/lib/postgresql") / v / "bin/pg_recvlogical" for v in ("18", "17", "16", "15")
]

SETUP = """
CREATE TABLE bench (
    id bigint PRIMARY KEY,
    name text NOT NULL,
    amount numeric(12, 2),
    created timestamptz NOT NULL,
    active bool NOT NULL,
    doc jsonb
);
CREATE PUBLICATION bench_pub FOR TABLE bench;
"""

INSERT = """
INSERT INTO bench
SELECT g, 'customer ' || g, (g %% 100000) / 100.0, now() - g * interval '1 second', g %% 3 = 0,
       jsonb_build_object('sku', 'SKU-' || (g %% 5000), 'qty', g %% 7, 'note', md5(g::text))
FROM generate_series(%s::bigint, %s::bigint) g
"""

#: The wide table: the type zoo's common types, many outside the C accelerator's (interval,
#: numeric without typmod, arrays, inet), so it measures the path such tables take.
WIDE_SETUP = """
CREATE TABLE bench_wide (
    id bigint PRIMARY KEY,
    iv interval,
    num numeric,
    ints int[],
    tags text[],
    ip inet,
    u uuid,
    doc jsonb,
    d date,
    tm time,
    ts timestamp,
    tz timestamptz,
    raw bytea
);
CREATE PUBLICATION bench_wide_pub FOR TABLE bench_wide;
"""

WIDE_INSERT = """
INSERT INTO bench_wide
SELECT g, make_interval(days => (g %% 400)::int, secs => g %% 86400), g * 1.000001 / 7,
       ARRAY[g %% 10, g %% 100, g %% 1000]::int[], ARRAY['a' || g %% 7, 'b' || g %% 11],
       ('10.' || g %% 256 || '.' || (g / 256) %% 256 || '.1')::inet, md5(g::text)::uuid,
       jsonb_build_object('k', g %% 5000), DATE '2024-01-01' + (g %% 3650)::int,
       TIME '00:00' + g %% 86400 * interval '1 second',
       TIMESTAMP '2024-01-01' + g * interval '1 ms', now() - g * interval '1 second',
       decode(md5(g::text), 'hex')
FROM generate_series(%s::bigint, %s::bigint) g
"""

#: Throughput tables: --tables six,wide (insert statement, publication).
TABLES = {"six": (INSERT, "bench_pub"), "wide": (WIDE_INSERT, "bench_wide_pub")}


#: Extra ``key=value`` settings for every pgbridge run (``--set``), e.g. kafka.linger.ms=5.
OVERRIDES: dict[str, str] = {}
#: The delivery guarantees a run compares (``--delivery``): their ``exactly.once.support``.
DELIVERY = {"at-least-once": "disabled", "exactly-once": "required"}


def settings(
    stack: StackInfo,
    dsn: str,
    slot: str,
    publication: str = "bench_pub",
    delivery: str = "at-least-once",
) -> dict[str, str]:
    return {
        "exactly.once.support": DELIVERY[delivery],
        "database.dsn": dsn,
        "topic.prefix": topic_prefix("bench"),
        "slot.name": slot,
        "publication.name": publication,
        "publication.autocreate.mode": "disabled",
        "kafka.bootstrap.servers": stack.bootstrap_servers,
        "schema.registry.url": stack.registry_url,
        "status.update.interval.ms": "1000",
    } | OVERRIDES


def create_slot(dsn: str, slot: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))


def load(dsn: str, first: int, rows: int, per_tx: int = 1000, insert: str = INSERT) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for start in range(first, first + rows, per_tx):
            conn.execute(insert, (start, min(start + per_tx, first + rows) - 1))


def settle(dsn: str) -> None:
    """Do now what the server would otherwise do during the first measurement: autovacuum's
    pass over the freshly loaded tables and the checkpoint the load asks for."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE bench")
        conn.execute("VACUUM ANALYZE bench_wide")
        conn.execute("CHECKPOINT")


def end_marker(dsn: str) -> Lsn:
    """A committed marker after the load; its LSN is where a reader has seen everything."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        row = conn.execute("SELECT pg_logical_emit_message(true, 'bench', 'end')::text").fetchone()
    assert row is not None
    return Lsn.parse(row[0])


def raw_receive(
    dsn: str, slot: str, endpos: Lsn, publication: str = "bench_pub"
) -> tuple[float, float]:
    """(seconds, CPU seconds of pg_recvlogical)."""
    recv = next((p for p in PG_RECVLOGICAL if p.exists()), None) or shutil.which("pg_recvlogical")
    if recv is None:
        raise SystemExit("pg_recvlogical not found (Debian: apt-get install postgresql-client)")
    cmd = [str(recv), "-d", dsn, "--slot", slot, "--start", "--no-loop", "--endpos", str(endpos)]
    cmd += [
        "-F",
        "0",
        "-f",
        "/dev/null",
        "-o",
        "proto_version=4",
        "-o",
        f"publication_names={publication}",
    ]
    cpu_before = _children_cpu()
    started = time.perf_counter()
    subprocess.run(cmd, check=True, timeout=3600)
    return time.perf_counter() - started, _children_cpu() - cpu_before


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _reader_cpu() -> float:
    """CPU seconds of the WAL reader thread (bridge.source.frame_reader), 0 when none runs."""
    for running in threading.enumerate():
        if running.name == "pgbridge-wal-reader" and running.ident is not None:
            return time.clock_gettime(time.pthread_getcpuclockid(running.ident))
    return 0.0


def bridge_until(
    stack: StackInfo,
    dsn: str,
    slot: str,
    endpos: Lsn,
    publication: str = "bench_pub",
    delivery: str = "at-least-once",
) -> tuple[float, float, float, float]:
    """(seconds until Kafka acknowledged everything, CPU seconds of the pipeline thread, of
    the WAL reader thread and of this whole process (those two, librdkafka's threads, this
    waiting loop) meanwhile)."""
    config = load_config(None, {}, settings(stack, dsn, slot, publication, delivery))
    pipeline = build_pipeline(config)
    stop = threading.Event()
    thread = threading.Thread(target=pipeline.run, args=(stop,), daemon=True)
    process_cpu = time.process_time()
    started = time.perf_counter()
    thread.start()
    assert thread.ident is not None
    thread_clock = time.pthread_getcpuclockid(thread.ident)
    while pipeline.tracker.flush_lsn < endpos:
        if not thread.is_alive():
            raise SystemExit("the pipeline stopped early")
        time.sleep(0.01)
    elapsed = time.perf_counter() - started
    thread_cpu = time.clock_gettime(thread_clock)
    reader_cpu = _reader_cpu()
    process_cpu = time.process_time() - process_cpu
    stop.set()
    thread.join(120)
    return elapsed, thread_cpu, reader_cpu, process_cpu


def throughput(
    stack: StackInfo,
    dsn: str,
    rows: int,
    repeat: int,
    table: str = "six",
    deliveries: tuple[str, ...] = ("at-least-once",),
) -> None:
    """Raw receive and pgbridge in each of ``deliveries``, alternately, ``repeat`` times over
    the same changes (one slot each per round, all created before the load) of ``table`` (see
    TABLES); with several rounds, the median ratio; with two deliveries, their ratio."""
    insert, publication = TABLES[table]
    for i in range(repeat):
        create_slot(dsn, f"bench_raw_{table}_{i}")
        for delivery in deliveries:
            create_slot(dsn, _bridge_slot(table, delivery, i))
    t = time.perf_counter()
    load(dsn, 1, rows, insert=insert)
    endpos = end_marker(dsn)
    print(f"table {table}: loaded {rows} rows in {time.perf_counter() - t:.1f} s; end at {endpos}")
    settle(dsn)
    ratios: dict[str, list[float]] = {d: [] for d in deliveries}
    cpus: dict[str, list[float]] = {d: [] for d in deliveries}
    us = 1e6 / rows
    for i in range(repeat):
        raw_s, raw_cpu = raw_receive(dsn, f"bench_raw_{table}_{i}", endpos, publication)
        raw_rate = rows / raw_s
        print(
            f"[{table}] raw receive (pg_recvlogical): {raw_s:7.2f} s  {raw_rate:10,.0f} "
            f"changes/s   CPU {raw_cpu * us:.1f} us/change"
        )
        for delivery in deliveries:
            bridge_s, thread_cpu, reader_cpu, process_cpu = bridge_until(
                stack, dsn, _bridge_slot(table, delivery, i), endpos, publication, delivery
            )
            bridge_rate = rows / bridge_s
            ratios[delivery].append(bridge_rate / raw_rate)
            cpus[delivery].append(process_cpu * us)
            label = f"[{table}, {delivery}]"
            print(
                f"{label} pgbridge run (to Kafka acks): {bridge_s:7.2f} s  {bridge_rate:10,.0f} "
                f"changes/s   CPU {thread_cpu * us:.1f} us/change pipeline thread, "
                f"{process_cpu * us:.1f} process"
            )
            rest = process_cpu - thread_cpu - reader_cpu
            print(
                f"{label} CPU per change by thread: pipeline {thread_cpu * us:.2f} us, WAL "
                f"reader {reader_cpu * us:.2f} us, librdkafka's threads and the rest "
                f"{rest * us:.2f} us"
            )
            busiest = max(thread_cpu, reader_cpu)
            print(
                f"{label} busiest thread "
                f"({'pipeline' if busiest == thread_cpu else 'WAL reader'}) busy "
                f"{busiest / bridge_s:.0%} of the run; on a free core about "
                f"{rows / busiest:,.0f} changes/s"
            )
            print(f"{label} ratio pgbridge / raw: {ratios[delivery][-1]:.2f}  (target 0.8)")
    for delivery in deliveries:
        if repeat > 1:
            found = ratios[delivery]
            print(
                f"[{table}, {delivery}] median ratio over {repeat} rounds: "
                f"{statistics.median(found):.2f} (min {min(found):.2f}, max {max(found):.2f})"
            )
    if len(deliveries) == 2:
        first, second = deliveries
        rate = statistics.median(ratios[second]) / statistics.median(ratios[first])
        cpu = statistics.median(cpus[second]) / statistics.median(cpus[first])
        print(
            f"[{table}] {second} / {first}: throughput {rate:.2f}x, CPU per change {cpu:.2f}x "
            f"(the issue's bar for the default: a cost of at most 10%, 0.90x)"
        )


def _bridge_slot(table: str, delivery: str, round_: int) -> str:
    return f"bench_bridge_{table}_{delivery.replace('-', '_')}_{round_}"


class LatencyProbe:
    """Commit-to-acknowledgement latency per transaction, from the pipeline's observer hooks."""

    def __init__(self) -> None:
        self.pending: list[tuple[Lsn, float]] = []  # (end LSN, commit time, unix seconds)
        self.latencies: list[float] = []

    def on_events(self, table: str, op: str, count: int) -> None:
        pass

    def on_transaction(self, commit_ts_unix_us: int, end_lsn: Lsn) -> None:
        self.pending.append((end_lsn, commit_ts_unix_us / 1e6))

    def on_acknowledged(self, flush_lsn: Lsn, in_flight: int) -> None:
        if self.pending and self.pending[0][0] <= flush_lsn:
            now = time.time()
            while self.pending and self.pending[0][0] <= flush_lsn:
                self.latencies.append(now - self.pending.pop(0)[1])


def latency(
    stack: StackInfo,
    dsn: str,
    rate: int,
    seconds: float,
    delivery: str = "at-least-once",
    first: int = 50_000_000,
) -> list[float]:
    """Commit-to-acknowledgement latencies of ``rate`` changes/s for ``seconds``, inserting
    keys from ``first`` up (each run its own range)."""
    slot = f"bench_latency_{delivery.replace('-', '_')}"
    create_slot(dsn, slot)
    config = load_config(None, {}, settings(stack, dsn, slot, delivery=delivery))
    pipeline = build_pipeline(config)
    probe = LatencyProbe()
    pipeline.observer = probe
    stop = threading.Event()
    thread = threading.Thread(target=pipeline.run, args=(stop,), daemon=True)
    thread.start()
    per_tx = 100
    interval = per_tx / rate
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Warm up first: on a broker that has just started, the producer's first records wait
        # seconds for its idempotence id ("Coordinator load in progress"); that is start-up,
        # not the steady-state latency measured here.
        conn.execute(INSERT, (first - per_tx, first - 1))
        warm_until = time.monotonic() + 60
        while not probe.latencies and time.monotonic() < warm_until:
            time.sleep(0.05)
        probe.latencies.clear()
        deadline = time.monotonic() + seconds
        next_at = time.monotonic()
        while time.monotonic() < deadline:
            conn.execute(INSERT, (first, first + per_tx - 1))
            first += per_tx
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
    time.sleep(2)
    stop.set()
    thread.join(120)
    return probe.latencies


def peak_rss(stack: StackInfo, dsn: str, big_rows: int, log: Path) -> tuple[int, int]:
    """(idle peak RSS, peak RSS over one ``big_rows``-row transaction) of ``pgbridge run``."""
    create_slot(dsn, "bench_memory")
    args = [sys.executable, "-m", "bridge.cli", "run"]
    for key, value in settings(stack, dsn, "bench_memory").items():
        args += ["--set", f"{key}={value}"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        time.sleep(5)  # connected and idle
        idle = _vm_hwm(proc.pid)
        first = 100_000_000
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(INSERT, (first, first + big_rows - 1))  # one transaction
        endpos = end_marker(dsn)
        while _confirmed(dsn, "bench_memory") < endpos:
            if proc.poll() is not None:
                raise SystemExit(f"pgbridge run exited {proc.returncode}; see {log}")
            time.sleep(1)
        return idle, _vm_hwm(proc.pid)
    finally:
        proc.terminate()
        proc.wait(120)


def _vm_hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def _confirmed(dsn: str, slot: str) -> Lsn:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        ).fetchone()
    return Lsn.parse(row[0]) if row and row[0] else Lsn(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="changes for throughput")
    parser.add_argument("--rate", type=int, default=5_000, help="changes/s for latency")
    parser.add_argument("--seconds", type=float, default=20.0, help="latency run length")
    parser.add_argument("--big-rows", type=int, default=5_000_000, help="rows of the big tx")
    parser.add_argument("--skip", action="append", default=[], help="throughput|latency|memory")
    parser.add_argument(
        "--repeat", type=int, default=1, help="throughput rounds (median ratio when > 1)"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a pgbridge setting"
    )
    parser.add_argument(
        "--tables", default="six,wide", help="throughput tables: six (6 columns), wide (type zoo)"
    )
    parser.add_argument(
        "--delivery",
        default="at-least-once,exactly-once",
        help="the guarantees measured side by side (exactly.once.support disabled / required)",
    )
    args = parser.parse_args()
    deliveries = tuple(args.delivery.split(","))
    if unknown := set(deliveries) - set(DELIVERY):
        parser.error(f"--delivery: unknown {sorted(unknown)}; known: {sorted(DELIVERY)}")
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set {item!r}: expected KEY=VALUE")
        OVERRIDES[key] = value

    stack = LocalStack().up()
    dbname = f"bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(stack.postgres_dsn(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    dsn = stack.postgres_dsn(dbname)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SETUP)
        conn.execute(WIDE_SETUP)
    print(f"PostgreSQL {stack.postgres_major}, database {dbname}, {os.cpu_count()} cores")
    try:
        if "throughput" not in args.skip:
            for table in args.tables.split(","):
                throughput(stack, dsn, args.rows, args.repeat, table, deliveries)
        if "latency" not in args.skip:
            for i, delivery in enumerate(deliveries):
                first = 50_000_000 + i * 20_000_000
                lat = sorted(latency(stack, dsn, args.rate, args.seconds, delivery, first))
                if lat:
                    p50 = statistics.median(lat) * 1000
                    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
                    print(
                        f"latency, {delivery}, at {args.rate} changes/s over {len(lat)} "
                        f"transactions: p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
                        f"max {lat[-1] * 1000:.1f} ms"
                    )
        if "memory" not in args.skip:
            with tempfile.TemporaryDirectory() as tmp:
                idle, peak = peak_rss(stack, dsn, args.big_rows, Path(tmp) / "bridge.log")
            print(
                f"memory: pgbridge run idle {idle / 2**20:.0f} MB, peak over one "
                f"{args.big_rows:,}-row transaction {peak / 2**20:.0f} MB (limit 300 MB)"
            )
    finally:
        drop_database(stack, dbname)
        delete_topics(stack, TOPIC_PREFIXES)


if __name__ == "__main__":
    main()
