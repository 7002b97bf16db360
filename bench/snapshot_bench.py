"""Benchmark: the initial snapshot (``snapshot.mode = initial_only``) against a raw binary COPY.

    .venv/bin/python bench/snapshot_bench.py [--rows 1000000] [--threads 1,2,4]
        [--chunk 100000] [--wide] [--set KEY=VALUE (repeatable)]

On the local stack (real PostgreSQL, Kafka, Apicurio; started if needed), in one run:

- a table of ``--rows`` rows in the 6-column shape of ``bench/pipeline_bench.py`` (bigint key,
  text, numeric, timestamptz, bool, jsonb), with ``--wide`` one more text column of ~4 kB of
  random hex per row (TOASTed out of line);
- **raw**: ``COPY (SELECT …) TO STDOUT (FORMAT binary)`` of the whole table read by psycopg and
  thrown away: the rate at which the server produces the rows, the ceiling for any client;
- **pgbridge**: the snapshot with 1, 2, 4 (``--threads``) workers, until Kafka acknowledged
  every row (acks=all), in this process.

Printed for each: rows/s, MB/s (COPY bytes), the ratio to raw, this process's CPU time per row
(user + system, all threads: librdkafka's included) beside each rate, so that a slow machine is
told apart from slow code, the whole machine's busy CPU per row and cores busy (PostgreSQL,
Kafka and the registry run on the same host: when the cores are all busy, no client can go
faster), and the process's peak RSS. Numbers are measured, never asserted.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
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

OVERRIDES: dict[str, str] = {}


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def machine_busy() -> float:
    """Busy CPU seconds of the whole machine so far (every core, every process: /proc/stat)."""
    with open("/proc/stat") as stat:
        fields = [int(f) for f in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def machine(busy_s: float, seconds: float, rows: int) -> str:
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


def snapshot(stack: StackInfo, dsn: str, threads: int, chunk: int) -> tuple[float, float]:
    """(seconds, CPU seconds) of one initial_only snapshot with ``threads`` workers."""
    slot = f"snapbench_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as state_dir:
        config = load_config(
            None,
            {},
            {
                "database.dsn": dsn,
                "topic.prefix": f"snapbench{uuid.uuid4().hex[:6]}",
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
            }
            | OVERRIDES,
        )
        cpu0, t0 = cpu(), time.perf_counter()
        run(config, threading.Event())
        seconds, cpu_s = time.perf_counter() - t0, cpu() - cpu0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    return seconds, cpu_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--threads", default="1,2,4", help="worker counts, comma-separated")
    parser.add_argument("--chunk", type=int, default=100_000, help="snapshot.chunk.size")
    parser.add_argument("--wide", action="store_true", help="add a ~4 kB TOASTed text column")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
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
            conn.execute("CREATE PUBLICATION snapbench_pub FOR TABLE bench")
            conn.execute("VACUUM ANALYZE bench")
            conn.execute("CHECKPOINT")
        print(
            f"PostgreSQL {stack.postgres_major}, {args.rows:,} rows"
            f"{' (wide)' if args.wide else ''}, {os.cpu_count()} cores"
        )
        busy0 = machine_busy()
        raw_s, raw_cpu, rows, nbytes = raw_copy(dsn)
        raw_busy = machine_busy() - busy0
        raw_rate = rows / raw_s
        print(
            f"raw COPY binary:          {raw_s:7.2f} s {raw_rate:12,.0f} rows/s "
            f"{nbytes / 1e6 / raw_s:8.1f} MB/s   client CPU {raw_cpu / rows * 1e6:6.2f} us/row   "
            f"{machine(raw_busy, raw_s, rows)}"
        )
        for threads in (int(t) for t in args.threads.split(",")):
            busy0 = machine_busy()
            seconds, cpu_s = snapshot(stack, dsn, threads, args.chunk)
            busy = machine_busy() - busy0
            rate = rows / seconds
            print(
                f"pgbridge snapshot, {threads} worker(s): {seconds:7.2f} s {rate:12,.0f} rows/s "
                f"{nbytes / 1e6 / seconds:8.1f} MB/s   {rate / raw_rate:5.2f}x raw   "
                f"CPU {cpu_s / rows * 1e6:6.2f} us/row   {machine(busy, seconds, rows)}"
            )
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak RSS of this process: {peak:.0f} MB")
    finally:
        with psycopg.connect(stack.postgres_dsn(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


if __name__ == "__main__":
    main()
