"""A Spark driver's cold start, with and without the dev stack's class archive, side by side.

Each round starts a fresh driver (``local[2]``, the job's session settings) that creates a
Delta table and MERGEs into it twice, once with ``PGBRIDGE_SPARK_CLASS_ARCHIVE`` and once
without, alternating; it prints the wall time to the second MERGE and the driver JVM's CPU
seconds of each, and the ratio. Needs the stack's environment (``pgbridge dev up``, then
``source .stack/stack.env``)::

    .venv/bin/python bench/spark_start_bench.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ARCHIVE_ENV = "PGBRIDGE_SPARK_CLASS_ARCHIVE"


def _child() -> None:
    started = time.monotonic()
    from delta.tables import DeltaTable

    from bridge.spark.session import build_spark_session

    spark = build_spark_session("spark-start-bench", master="local[2]")
    table = tempfile.mkdtemp(prefix="spark-start-bench-")
    spark.range(10).selectExpr("id", "cast(id AS string) v").write.format("delta").save(table)
    for low, high in ((5, 15), (0, 3)):
        changes = spark.range(low, high).selectExpr("id", "'x' v")
        DeltaTable.forPath(spark, table).alias("t").merge(
            changes.alias("s"), "t.id = s.id"
        ).whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
    wall = time.monotonic() - started
    with open(f"/proc/{spark.sparkContext._gateway.proc.pid}/stat") as stat:
        fields = stat.read()
    utime, stime = fields.rsplit(")", 1)[1].split()[11:13]
    cpu = (int(utime) + int(stime)) / os.sysconf("SC_CLK_TCK")
    print(json.dumps({"wall": wall, "cpu": cpu}))


def _run(with_archive: bool) -> dict[str, float]:
    env = dict(os.environ)
    if not with_archive:
        env.pop(ARCHIVE_ENV, None)
    done = subprocess.run(
        [sys.executable, __file__, "--child"], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child()
        return
    archive = os.environ.get(ARCHIVE_ENV)
    if not archive or not os.path.isfile(archive):
        sys.exit(f"{ARCHIVE_ENV} names no archive: run `pgbridge dev up` and source its stack.env")
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for round_ in range(args.rounds):
        for with_archive in (False, True):
            run = _run(with_archive)
            runs[with_archive].append(run)
            label = "with the archive" if with_archive else "without        "
            print(f"round {round_}: {label}  {run['wall']:5.1f} s wall  {run['cpu']:5.1f} CPU-s")
    for what in ("wall", "cpu"):
        without = statistics.median(r[what] for r in runs[False])
        with_ = statistics.median(r[what] for r in runs[True])
        unit = "s" if what == "wall" else "CPU-s"
        print(
            f"median {what}: {without:.1f} {unit} without, {with_:.1f} {unit} with the archive"
            f" ({with_ / without:.2f}x)"
        )


if __name__ == "__main__":
    main()
