"""Benchmark: the driver's MERGE of a small table's batch (bridge.spark.driver_rewrite), alone.

What a database of many small tables asks of the apply job at every batch (the freshness run
over 200 tables: most of the driver's time went there), without Spark or Kafka: ``--tables``
delta-rs tables of ``--rows`` rows and seven columns, then ``--batches`` batches of
``--changes`` changes per table (each key's last change: 70% new keys, 25% updates, 5%
deletes), applied as the job applies a small table's batch (``merge_in_driver``: the table's
rows computed with Arrow and written as one file), two tables at a time. The baseline beside
it is delta-rs's own MERGE of the same batches into copies of the same tables (what the job
did before it computed small tables' rows itself). Per run: milliseconds per table and batch,
CPU per change (this process: the rows, the Parquet file, the commit), and the ratio.

    .venv/bin/python bench/small_table_merge_bench.py
    .venv/bin/python bench/small_table_merge_bench.py --tables 40 --rows 2000 --changes 100
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import write_deltalake
from pyspark.sql import types as T

from bridge.spark import driver_rewrite
from bridge.spark import transforms as tf
from bridge.spark.driver_changes import ArrowRows
from bridge.spark.driver_merge import merge_in_driver, open_table
from bridge.spark.merge import MergePlan

VALUES = ("id", "name", "qty", "price", "note", "flag", "seen")
PLAN = MergePlan(key_columns=("id",), value_columns=VALUES, fold_unchanged=True)
_TS = pa.timestamp("us", tz="UTC")
_ARROW = {"id": pa.int64(), "name": pa.string(), "qty": pa.int32(), "price": pa.float64(),
          "note": pa.string(), "flag": pa.bool_(), "seen": _TS,
          tf.COMMIT_LSN: pa.int64(), tf.SEQ: pa.int64(), tf.COMMIT_TS: _TS, tf.OP: pa.string(),
          tf.UNCHANGED: pa.list_(pa.string())}  # fmt: skip
_SPARK = {"id": T.LongType(), "name": T.StringType(), "qty": T.IntegerType(),
          "price": T.DoubleType(), "note": T.StringType(), "flag": T.BooleanType(),
          "seen": T.TimestampType(), tf.COMMIT_LSN: T.LongType(), tf.SEQ: T.LongType(),
          tf.COMMIT_TS: T.TimestampType(), tf.OP: T.StringType(),
          tf.UNCHANGED: T.ArrayType(T.StringType())}  # fmt: skip


def _row(key: int, lsn: int, seq: int) -> dict[str, Any]:
    return {"id": key, "name": f"name {key}", "qty": key % 1000, "price": key * 0.25,
            "note": None if key % 3 else f"note {lsn}", "flag": key % 2 == 0,
            "seen": 1_700_000_000_000_000 + key, tf.COMMIT_LSN: lsn, tf.SEQ: seq,
            tf.COMMIT_TS: 1_700_000_000_000_000}  # fmt: skip


def _tables(base: Path, tables: int, rows: int) -> list[str]:
    columns = [*VALUES, *tf.PERSISTED_META]
    schema = pa.schema([pa.field(c, _ARROW[c]) for c in columns])
    paths = []
    for t in range(tables):
        path = str(base / f"t{t}")
        held = [_row(k, 1, 0) for k in range(rows)]
        write_deltalake(path, pa.Table.from_pylist(held, schema=schema))
        paths.append(path)
    return paths


def _batches(tables: int, rows: int, changes: int, batches: int) -> list[list[ArrowRows]]:
    """Per batch, per table: each key's last change (new keys above the table's, updates and
    deletes of keys it holds)."""
    columns = [*VALUES, *tf.PERSISTED_META, tf.OP, tf.UNCHANGED]
    schema = pa.schema([pa.field(c, _ARROW[c]) for c in columns])
    spark_schema = T.StructType([T.StructField(c, _SPARK[c]) for c in columns])
    draw = random.Random(7)
    out = []
    for b in range(batches):
        lsn = 10 + b
        per_table = []
        for _ in range(tables):
            keys: dict[int, str] = {}
            for i in range(changes):
                kind = draw.random()
                if kind < 0.70:
                    keys[rows + b * changes + i] = "c"
                else:
                    keys[draw.randrange(rows)] = "u" if kind < 0.95 else "d"
            rows_of = [{**_row(k, lsn, s), tf.OP: op, tf.UNCHANGED: []}
                       for s, (k, op) in enumerate(keys.items())]  # fmt: skip
            per_table.append(ArrowRows(pa.Table.from_pylist(rows_of, schema=schema), spark_schema))
        out.append(per_table)
    return out


def _run(paths: list[str], batches: list[list[ArrowRows]]) -> tuple[float, float]:
    """Wall and CPU seconds of applying every batch, two tables at a time."""
    tables = [open_table(p) for p in paths]

    def one(args: tuple[Any, ArrowRows, int]) -> None:
        table, rows, batch_id = args
        merge_in_driver(table, rows, PLAN, "bench", batch_id)

    wall, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(2) as pool:
        for batch_id, per_table in enumerate(batches):
            list(pool.map(one, [(t, r, batch_id) for t, r in zip(tables, per_table, strict=True)]))
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=20)
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--changes", type=int, default=25, help="changes per table and batch")
    parser.add_argument("--batches", type=int, default=10)
    args = parser.parse_args()
    batches = _batches(args.tables, args.rows, args.changes, args.batches)
    changes = sum(r.table.num_rows for per_table in batches for r in per_table)
    table_batches = args.tables * args.batches
    with tempfile.TemporaryDirectory(prefix="pgbridge-small-merge-") as tmp:
        results = {}
        for name, max_bytes in (("rewrite", driver_rewrite.REWRITE_MAX_BYTES), ("merge", -1)):
            driver_rewrite.REWRITE_MAX_BYTES = max_bytes  # -1: every table MERGEd by delta-rs
            paths = _tables(Path(tmp) / name, args.tables, args.rows)
            results[name] = _run(paths, batches)
    print(
        f"{args.tables} tables of {args.rows} rows, {args.batches} batches of "
        f"{args.changes} changes per table ({changes} changes), two tables at a time:"
    )
    for name, label in (("rewrite", "the job (Arrow rewrite)"), ("merge", "delta-rs MERGE")):
        wall, cpu = results[name]
        print(f"  {label:24} {wall / table_batches * 1000:6.1f} ms per table and batch, "
              f"{cpu / changes * 1e6:6.1f} us CPU per change")  # fmt: skip
    print(f"  the job / delta-rs MERGE: {results['rewrite'][0] / results['merge'][0]:.2f}x wall, "
          f"{results['rewrite'][1] / results['merge'][1]:.2f}x CPU")  # fmt: skip


if __name__ == "__main__":
    main()
