"""Benchmark: the driver's writes to a table against the length of the table's Delta log.

The apply job commits once per changed table and batch: with the one-second trigger a busy
table's log gains tens of thousands of commit files a day, and Delta keeps them for
``delta.logRetentionDuration`` (30 days by default; checkpoints do not remove them). On a
local path, delta-rs lists the whole ``_delta_log`` directory whenever it brings a table up
to date or commits (object_store's local listing has no start offset). The driver's writes
(bridge.spark.driver_merge: a small table's append and rewrite; bridge.spark.driver_dv_merge:
a large table's deletion-vector MERGE) commit themselves (bridge.spark.driver_commit) and
read the log by version number (bridge.spark.logged_table), so they should cost the same at
any length; delta-rs's own append of the same rows is measured beside them, the reference.

For each log length: a keyed table of ``--rows`` rows (deletion vectors on) whose log is
padded to that many commits (commits of a commit-info only, as a MERGE that changed nothing
leaves; then a checkpoint, as the job writes one every 10 versions), then ``--rounds`` of
each write of ``--changes`` rows, as the job makes them. Per write: the median and mean wall time,
CPU per change, and the ratio to the same write at the shortest log (the baseline beside it).
Each length's rounds number their batches from a round number, so every tenth commits a
checkpoint, as the job's do.

    .venv/bin/python bench/log_length_bench.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from bridge.spark import transforms as tf
from bridge.spark.driver_dv_merge import dv_merge
from bridge.spark.driver_merge import commit_properties, open_table, write_append, write_overwrite
from bridge.spark.driver_table import checkpoint_if_due, no_post_commit_hooks
from bridge.spark.merge import MergePlan

PLAN = MergePlan(key_columns=("id",), value_columns=("id", "v"))
ROWS = pa.schema(
    [("id", pa.int64()), ("v", pa.string()), (tf.COMMIT_LSN, pa.int64()), (tf.SEQ, pa.int64()),
     (tf.COMMIT_TS, pa.timestamp("us", tz="UTC"))]
)  # fmt: skip


def _rows(keys: range, lsn: int) -> Any:
    n = len(keys)
    return pa.table(
        {"id": list(keys), "v": [f"v{lsn}-{k}" for k in keys], tf.COMMIT_LSN: [lsn] * n,
         tf.SEQ: list(range(n)), tf.COMMIT_TS: [None] * n}
    ).cast(ROWS)  # fmt: skip


def _table(path: Path, rows: int, commits: int) -> Any:
    """A table of ``rows`` rows whose log holds ``commits`` commits and a checkpoint at its end."""
    write_deltalake(str(path), _rows(range(rows), 1),
                    configuration={"delta.enableDeletionVectors": "true"})  # fmt: skip
    log = path / "_delta_log"
    info = json.dumps({"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "WRITE",
                                      "operationParameters": {}}})  # fmt: skip
    for version in range(1, commits):
        (log / f"{version:020d}.json").write_text(info + "\n")
    DeltaTable(str(path)).create_checkpoint()
    return open_table(str(path))


def _timed(
    write: Callable[[int], object], rounds: int, first_batch: int
) -> tuple[float, float, float]:
    """The median and mean wall seconds of ``rounds`` writes (the mean carries the checkpoint
    every tenth commit makes), and their mean CPU seconds."""
    walls, cpus = [], []
    for batch in range(first_batch, first_batch + rounds):
        cpu, wall = time.process_time(), time.perf_counter()
        write(batch)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.mean(walls), statistics.mean(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="100,1000,10000,30000",
                        help="log lengths (commits) to measure at, comma-separated")  # fmt: skip
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--changes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]
    print(f"a table of {args.rows} rows; writes of {args.changes} changes; median of "
          f"{args.rounds} rounds; the log padded to each length, then checkpointed")  # fmt: skip
    baseline: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="pgbridge-log-bench-") as workdir:
        for length in lengths:
            table = _table(Path(workdir) / f"t{length}", args.rows, length)
            held = [args.rows]  # the table's keys: 0 .. held[0] - 1

            def append(batch: int, table: Any = table, held: list[int] = held) -> None:
                new = range(held[0], held[0] + args.changes)
                write_append(table, _rows(new, batch), "bench", batch, None)
                held[0] += args.changes

            def rewrite(batch: int, table: Any = table, held: list[int] = held) -> None:
                write_overwrite(table, _rows(range(held[0]), batch), "bench", batch, None)

            def merge(batch: int, table: Any = table) -> None:
                changed = _rows(range(args.changes), batch)
                changed = changed.append_column(tf.OP, pa.array(["u"] * args.changes))
                dv_merge(table, changed, PLAN, "bench", batch, None)

            def delta_rs_append(batch: int, table: Any = table, held: list[int] = held) -> None:
                # The reference beside it: the same append by delta-rs's writer, as the
                # driver made it before 2026-12-03 (post-commit hooks off, its checkpoint).
                new = range(held[0], held[0] + args.changes)
                delta = table.synced()
                write_deltalake(delta, _rows(new, batch), mode="append",
                                commit_properties=commit_properties("bench", batch, None),
                                post_commithook_properties=no_post_commit_hooks())  # fmt: skip
                table.update_incremental()
                checkpoint_if_due(table, table.version())
                held[0] += args.changes

            writes = {"append (driver)": append, "rewrite (driver)": rewrite,
                      "deletion-vector MERGE": merge,
                      "append (delta-rs writer)": delta_rs_append}  # fmt: skip
            for number, (name, write) in enumerate(writes.items()):
                median, mean, cpu = _timed(write, args.rounds, 1000 * (number + 1))
                baseline.setdefault(name, mean)
                print(
                    f"log of {length:>6,} commits: {name:<22} median {median * 1000:6.1f} ms, "
                    f"mean {mean * 1000:6.1f} ms, {cpu / args.changes * 1e6:6.0f} us CPU per "
                    f"change; mean {mean / baseline[name]:5.1f}x the shortest log's"
                )


if __name__ == "__main__":
    main()
