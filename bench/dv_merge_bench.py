"""Benchmark: the driver's deletion-vector MERGE (bridge.spark.driver_dv_merge) alone.

What the task lane's batches of the 4-table mix ask of it, without Spark or Kafka: ``--tables``
delta-rs tables of ``--rows`` rows (deletion vectors on), then ``--batches`` batches of
``--changes`` changes per table (each key's last change, as the lane folds them: 70% new keys,
25% updates and 5% deletes of keys spread over the table), MERGEd as the job does, two tables
at a time. Per batch: wall seconds, CPU seconds of this process, busy cores, CPU per change.
The baseline beside it is the floor of any MERGE that writes the batch's rows: writing them as
one Parquet file per table (pyarrow, snappy), the same threads.

``--keys uuid7``: the tables are keyed by time-ordered UUIDs (their 36-character text, as
PostgreSQL's ``uuid`` arrives), loaded as ``--files`` files, and the updates and deletes go to
the newest tenth of the keys (a time-ordered table's hot rows): what the MERGE gains from the
files' key statistics, which pass over the files no key of the batch can be in; ``--keys
uuid4``, random UUIDs, the same changes: every file's key range spans them all, and what the
MERGE gains from the columns of files it read in earlier batches (bridge.spark.file_columns;
``--key-cache-mb 0`` reads them again each batch, as before).

    .venv/bin/python bench/dv_merge_bench.py
    .venv/bin/python bench/dv_merge_bench.py --keys uuid7 --rows 1000000 --files 20 --changes 20000
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import write_deltalake

from bridge.spark import transforms as tf
from bridge.spark.driver_dv_merge import dv_merge
from bridge.spark.file_columns import DEFAULT_CACHE_MB, file_columns
from bridge.spark.logged_table import LoggedTable
from bridge.spark.merge import MergePlan

PLAN = MergePlan(key_columns=("id",), value_columns=("id", "a", "b", "c"))


def _schema(keys: str) -> Any:
    key_type = pa.int64() if keys == "int" else pa.string()
    return pa.schema(
        [("id", key_type), ("a", pa.string()), ("b", pa.int64()), ("c", pa.float64()),
         (tf.COMMIT_LSN, pa.int64()), (tf.SEQ, pa.int64()),
         (tf.COMMIT_TS, pa.timestamp("us", tz="UTC")), (tf.OP, pa.string())]
    )  # fmt: skip


def _key_values(keys: str, numbers: Any) -> list[Any]:
    """Key number n as the table holds it: n, the n-th of a run of time-ordered UUIDs, or a
    random UUID drawn from n."""
    if keys == "uuid7":
        return [f"0192{n:08x}-7{n % 4096:03x}-8000-{n * 7919 % 2**48:012x}" for n in numbers]
    if keys == "uuid4":
        return [str(uuid.UUID(int=random.Random(n).getrandbits(128), version=4)) for n in numbers]
    return list(numbers)


def _table(path: Path, rows: int, keys: str, files: int) -> Any:
    schema = _schema(keys)
    per_file = -(-rows // files)
    for start in range(0, rows, per_file):
        numbers = range(start, min(rows, start + per_file))
        data = pa.table(
            {"id": _key_values(keys, numbers), "a": [f"name-{k}" for k in numbers],
             "b": numbers, "c": [k * 0.5 for k in numbers], tf.COMMIT_LSN: [1] * len(numbers),
             tf.SEQ: numbers, tf.COMMIT_TS: [None] * len(numbers)}
        ).cast(schema.remove(schema.get_field_index(tf.OP)))  # fmt: skip
        write_deltalake(str(path), data, mode="append",
                        configuration={"delta.enableDeletionVectors": "true"})  # fmt: skip
    return LoggedTable.open(str(path))  # what the job's driver hands dv_merge


def _batch(
    rng: random.Random, held: int, changes: int, lsn: int, keys: str
) -> tuple[Any, int]:
    """``changes`` of each key's last change; the table's key count after them."""
    ops: dict[int, str] = {}
    for _ in range(changes):
        draw = rng.random()
        if draw < 0.7:
            ops[held] = "c"
            held += 1
        else:
            # Time-ordered keys: the newest tenth is what changes; else any key.
            oldest = held - held // 10 if keys != "int" else 0
            ops[rng.randrange(oldest, held)] = "u" if draw < 0.95 else "d"
    numbers = list(ops)
    batch = pa.table(
        {"id": _key_values(keys, numbers), "a": [f"v{lsn}-{k}" for k in numbers],
         "b": numbers, "c": [0.25] * len(numbers), tf.COMMIT_LSN: [lsn] * len(numbers),
         tf.SEQ: range(len(numbers)), tf.COMMIT_TS: [None] * len(numbers),
         tf.OP: list(ops.values())}
    ).cast(_schema(keys))  # fmt: skip
    return batch, held


def _timed(work: Callable[[int], object], tables: int) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(2) as pool:  # the job's parallel_tables default
        list(pool.map(work, range(tables)))
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--rows", type=int, default=250_000)
    parser.add_argument("--changes", type=int, default=110_000)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--keys", choices=("int", "uuid7", "uuid4"), default="int")
    parser.add_argument("--files", type=int, default=1, help="files each table is loaded as")
    parser.add_argument(
        "--key-cache-mb", type=int, default=DEFAULT_CACHE_MB,
        help="the job's --driver-key-cache-mb (0: every batch reads its files again)",
    )  # fmt: skip
    args = parser.parse_args()
    file_columns.resize(args.key_cache_mb * 2**20)
    rng = random.Random(1)
    with tempfile.TemporaryDirectory(prefix="pgbridge-dv-bench-") as workdir:
        root = Path(workdir)
        tables = [
            _table(root / f"t{i}", args.rows, args.keys, args.files) for i in range(args.tables)
        ]
        held = [args.rows] * args.tables
        print(
            f"{args.tables} tables of {args.rows:,} rows ({args.keys} keys, {args.files} "
            f"files); batches of {args.changes:,} changes per table (70% new keys, 25% updates, "
            "5% deletes), two tables at a time"
        )
        for number in range(1, args.batches + 1):
            batches = []
            for i in range(args.tables):
                batch, held[i] = _batch(rng, held[i], args.changes, 100 + number, args.keys)
                batches.append(batch)
            changes = sum(b.num_rows for b in batches)

            def floor(i: int, batches: list[Any] = batches, number: int = number) -> None:
                rows = batches[i].filter(pc.not_equal(batches[i].column(tf.OP), "d"))
                pq.write_table(rows, root / f"floor-{number}-{i}.parquet", compression="snappy")

            floor_wall, floor_cpu = _timed(floor, args.tables)
            results: list[Any] = [None] * args.tables

            def merge(
                i: int, batches: list[Any] = batches, number: int = number,
                results: list[Any] = results,
            ) -> None:
                results[i] = dv_merge(tables[i], batches[i], PLAN, "bench", number, None)

            hits = file_columns.hits
            wall, cpu = _timed(merge, args.tables)
            read = sum(r.files_read for r in results)
            cached = file_columns.hits - hits
            held_files = sum(r.files_in_table for r in results)
            print(
                f"batch {number}: {changes:,} changes MERGEd in {wall:.3f} s, {cpu:.3f} CPU-s "
                f"({cpu / wall:.2f} cores), {cpu / changes * 1e6:.2f} us CPU per change; "
                f"writing their rows alone: {floor_wall:.3f} s, "
                f"{floor_cpu / changes * 1e6:.2f} us CPU per change "
                f"(ratio {wall / floor_wall:.1f}); files read {read} of {held_files}, "
                f"{cached} of them from the driver's cache "
                f"({file_columns.held_bytes / 2**20:.0f} MiB held)"
            )


if __name__ == "__main__":
    main()
