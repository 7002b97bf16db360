"""Benchmark: pgoutput decoding speed against the rate a real server streams the same changes.

    .venv/bin/python bench/decode_bench.py [--rows 200000] [--binary] [--major 18]

Starts a throwaway PostgreSQL cluster, writes a realistic change stream (a 6-column table of int,
text, numeric, timestamptz, bool and jsonb: inserts in 1,000-row transactions, then updates and
deletes) and reads it back three ways, all in this one run:

1. **server**: ``pg_recvlogical`` (C, from the PostgreSQL install) receives the changes over a
   real replication connection into /dev/null. That is the rate at which the walsender decodes
   WAL and streams pgoutput: the baseline a client has to keep up with.
2. **SQL peek**: ``pg_logical_slot_peek_binary_changes`` through psycopg, which also gives this
   script the raw payloads.
3. **decoder**: ``bridge.pgoutput.Decoder`` on those payloads, in this process, on one core; also
   with the COPY BOTH framing parsed first, and with every column value sliced out.

It prints row messages/s and MB/s for each, and the ratios decoder / server. Numbers are rates,
never asserted: the machine decides them, the ratio is what carries over.
"""

from __future__ import annotations

import argparse
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bridge.devstack.postgres import PostgresCluster, ensure_postgres_binaries
from bridge.pgoutput import Decoder, Delete, Insert, Update, parse_copy_data

DEBIAN_15 = Path("/usr/lib/postgresql/15/bin")
PROTO = {13: 1, 14: 2, 15: 3}

SETUP = """
CREATE TABLE bench (
    id int PRIMARY KEY,
    name text NOT NULL,
    amount numeric(12, 2),
    created timestamptz NOT NULL,
    active bool NOT NULL,
    doc jsonb
);
CREATE PUBLICATION pb FOR TABLE bench;
"""

# Values shaped like an orders table: short names, money amounts, a small JSON document.
INSERT = """
INSERT INTO bench
SELECT g, 'customer ' || g, (g %% 100000) / 100.0, now() - g * interval '1 second', g %% 3 = 0,
       jsonb_build_object('sku', 'SKU-' || (g %% 5000), 'qty', g %% 7, 'tags',
                          jsonb_build_array('a', 'b'), 'note', md5(g::text))
FROM generate_series(%s::int, %s::int) g
"""


def find_binaries(major: str | None) -> tuple[Path, Path]:
    """The server's bin directory and a pg_recvlogical to go with it."""
    if major is None and (DEBIAN_15 / "pg_recvlogical").exists():
        return DEBIAN_15, DEBIAN_15 / "pg_recvlogical"  # server and client from one package
    bindir = ensure_postgres_binaries(major or "18")
    recv = bindir / "pg_recvlogical"
    if not recv.exists():
        found = shutil.which("pg_recvlogical") or str(DEBIAN_15 / "pg_recvlogical")
        recv = Path(found)
    return bindir, recv


def load(conn: psycopg.Connection[tuple[object, ...]], rows: int) -> None:
    step = 1000
    for first in range(1, rows + 1, step):
        with conn.transaction():
            conn.execute(INSERT, (first, min(first + step - 1, rows)))
    # Updates and deletes in the same 1,000-row transactions.
    for first in range(1, rows // 4 + 1, step):
        with conn.transaction():
            conn.execute(
                "UPDATE bench SET amount = amount + 1, active = NOT active"
                " WHERE id BETWEEN %s::int AND %s::int",
                (first, first + step - 1),
            )
    for first in range(1, rows // 10 + 1, step):
        with conn.transaction():
            conn.execute(
                "DELETE FROM bench WHERE id BETWEEN %s::int AND %s::int",
                (first * 7, first * 7 + step - 1),
            )


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows inserted")
    parser.add_argument("--binary", action="store_true", help="pgoutput binary mode")
    parser.add_argument("--major", help="PostgreSQL major (default: Debian's 15 if installed)")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each measurement")
    args = parser.parse_args(argv)

    bindir, recv = find_binaries(args.major)
    with tempfile.TemporaryDirectory(prefix="pgbridge-bench-", dir="/tmp") as tmp:
        Path(tmp).chmod(0o755)  # the server runs as a non-root user
        with (
            PostgresCluster(bindir, base_dir=Path(tmp) / "pg") as pg,
            psycopg.connect(pg.dsn("postgres"), autocommit=True) as conn,
        ):
            major = pg.major_version
            proto = PROTO.get(major, 4)
            conn.execute(SETUP)
            slots = [f"recv{i}" for i in range(args.repeat)] + ["peek"]
            for slot in slots:
                conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
            print(
                f"PostgreSQL {major} ({bindir}), protocol {proto},"
                f" {'binary' if args.binary else 'text'} mode; loading {args.rows} rows ..."
            )
            load(conn, args.rows)
            row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
            assert row is not None
            endpos = str(row[0])
            # A record past endpos, so that pg_recvlogical sees it reached the end and exits.
            # Transactional, so that its commit flushes the WAL at once: the walsender only sends
            # flushed WAL, and waiting for the WAL writer would count idle time as streaming.
            conn.execute("SELECT pg_logical_emit_message(true, 'bench', 'end')")

            options = {"proto_version": str(proto), "publication_names": "pb"}
            if args.binary:
                options["binary"] = "true"

            # The changes through the SQL interface, which also hands us the payloads.
            peek_sql = (
                "SELECT data FROM pg_logical_slot_peek_binary_changes('peek', %s, NULL"
                + ", %s" * (2 * len(options))
                + ")"
            )
            params: list[str] = [endpos]
            for k, v in options.items():
                params += [k, v]
            payloads: list[bytes] = []

            def peek() -> None:
                payloads[:] = [bytes(r[0]) for r in conn.execute(peek_sql, params).fetchall()]

            peek_s = best_of(args.repeat, peek)

            rows_msgs = 0
            probe = Decoder(proto)
            for p in payloads:
                if isinstance(probe.decode(p), Insert | Update | Delete):
                    rows_msgs += 1
            total_bytes = sum(len(p) for p in payloads)
            frames = [b"w" + struct.pack("!QQq", 0, 0, 0) + p for p in payloads]

            def server(slot: str) -> Callable[[], object]:
                cmd = [str(recv), "-d", pg.dsn("postgres"), "--slot", slot, "--start"]
                cmd += ["--no-loop", "--endpos", endpos, "-F", "0", "-f", "/dev/null"]
                for k, v in options.items():
                    cmd += ["-o", f"{k}={v}"]
                return lambda: subprocess.run(cmd, check=True, timeout=600)

            def decode_only() -> None:
                decode = Decoder(proto).decode
                for p in payloads:
                    decode(p)

            def frame_and_decode() -> None:
                decode = Decoder(proto).decode
                for f in frames:
                    decode(parse_copy_data(f).payload)  # type: ignore[union-attr]

            def decode_and_values() -> None:
                decode = Decoder(proto).decode
                for p in payloads:
                    m = decode(p)
                    if isinstance(m, Insert | Update):
                        m.new_tuple.values()

            # Server and decoder runs alternate, and the best of each counts, so that load from
            # other processes on the machine hits both sides of the ratio alike.
            server_times: list[float] = []
            timings: dict[str, list[float]] = {}
            for slot in slots[:-1]:
                server_times.append(best_of(1, server(slot)))
                for name, fn in (
                    ("decode", decode_only),
                    ("COPY framing + decode", frame_and_decode),
                    ("decode + all values", decode_and_values),
                ):
                    timings.setdefault(name, []).append(best_of(1, fn))
            server_s = min(server_times)

    results = [
        ("server (pg_recvlogical)", server_s),
        ("SQL peek via psycopg", peek_s),
        *((name, min(times)) for name, times in timings.items()),
    ]
    mb = total_bytes / 1e6
    print(f"{len(payloads)} messages, {rows_msgs} row messages, {mb:.1f} MB of pgoutput\n")
    print(f"{'':26} {'seconds':>8} {'rows/s':>12} {'MB/s':>8} {'x server':>9}")
    for name, seconds in results:
        print(
            f"{name:26} {seconds:8.3f} {rows_msgs / seconds:12,.0f} {mb / seconds:8.1f}"
            f" {server_s / seconds:9.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
