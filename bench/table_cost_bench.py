"""Benchmark: the apply job's fixed cost per changed table and batch, without Kafka.

#32 asks for at most 0.3 s per table that changed in a batch. This measures it where nothing
else interferes: a warm ``local[2]`` session with the job's settings, ``--tables`` keyed tables
of 100 rows (``--table-rows`` to grow them: large tables take deletion vectors; ``--keyless``:
without key columns), then ``--rounds`` batches that update one row
in every table (``--op c``: insert one; Kafka-shaped rows of Confluent-framed envelopes, as
``tests/spark/test_apply_batches.py`` builds them, fed to the job's own ``BatchApplier``). Per
batch it prints the phases the job logs, seconds and Spark jobs per table, and the CPU of the
Spark JVM per table; beside each batch, the baseline: the same change applied to every table by
Delta alone (a bare ``DeltaTable.merge`` of one row, or an append with ``--op c``, as many
tables at a time as the job), which is the floor any design that commits each table by a Delta
MERGE pays, and the ratio of the two. Needs the Spark jars of the dev stack's cache (``pgbridge
dev up`` fetches them), not the stack itself.

    .venv/bin/python bench/table_cost_bench.py --tables 40 --rounds 2
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.spark_apply_bench import cpu_seconds, jvm_pid, spark_jobs
from bridge.devstack.spark import ensure_spark_jars
from bridge.spark.applier import job_conf
from bridge.spark.session import build_spark_session, task_slots
from tests.spark.envelopes import TableVersion
from tests.spark.test_apply_batches import OPT_INT, OPT_STR, PREFIX, Batches, col


def _batch_phases_only(record: logging.LogRecord) -> bool:
    """The applier's per-batch line, without its commit-to-visible (the envelopes' commit
    times are made up here)."""
    message = record.getMessage()
    record.msg, record.args = message.split("; commit to visible")[0], ()
    return " changes in " in message and " tables, " in message


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--op",
        choices=("u", "c"),
        default="u",
        help="each batch's change per table: u updates a row (a MERGE), c inserts a new one",
    )
    parser.add_argument("--parallel-tables", type=int, default=2, help="the job's default: 2")
    parser.add_argument(
        "--driver-write-rows",
        type=int,
        default=None,
        help="the job's --driver-write-rows (default: the job's; 0: every table by Spark)",
    )
    parser.add_argument(
        "--table-rows",
        type=int,
        default=100,
        help="rows per table before the timed batches (past about 350,000 a table is larger "
        "than 32 MiB: a large table, which a MERGE marks with deletion vectors)",
    )
    parser.add_argument(
        "--keyless",
        action="store_true",
        help="tables without key columns (multisets: bridge.spark.multiset), whole-row images",
    )
    parser.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="a session setting"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="  %(message)s")
    logging.getLogger("bridge.spark.applier").setLevel(logging.INFO)
    logging.getLogger("bridge.spark.applier").addFilter(_batch_phases_only)
    spark = build_spark_session(
        "pgbridge-table-cost-bench",
        jars=[str(p) for p in ensure_spark_jars()],
        master="local[2]",
        conf={
            "spark.ui.showConsoleProgress": "false",
            **dict(item.split("=", 1) for item in args.spark_conf),
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    for setting, value in job_conf(task_slots(spark)).items():
        spark.conf.set(setting, value)
    work = Path(tempfile.mkdtemp(prefix="pgbridge-table-cost-"))
    batches = Batches(spark, work)
    batches.config = replace(batches.config, parallel_tables=args.parallel_tables)
    if args.driver_write_rows is not None:
        batches.config = replace(batches.config, driver_write_rows=args.driver_write_rows)
    tables = [
        TableVersion(
            PREFIX,
            "public",
            f"t{i}",
            [col("id", OPT_INT), col("v", OPT_STR)],
            [] if args.keyless else ["id"],
        )
        for i in range(args.tables)
    ]
    pid = jvm_pid(spark)
    for table in tables:
        for key in range(100):
            batches.add(table, "c", (10, key), after={"id": key, "v": "x"})
    print(f"first load of {args.tables} tables (creates them; not timed as a batch)")
    batches.apply(0)
    paths = [batches.config.table_path("public", t.table) for t in tables]
    if args.table_rows > 100:
        _grow(spark, paths, args.table_rows)
        assert batches.applier is not None
        for path in paths:
            batches.applier._forget_driver_table(path)  # grown by another writer
    for round_ in range(1, args.rounds + 1):
        for table in tables:
            if args.op == "c":
                batches.add(table, "c", (10 + round_, 0), after={"id": 100 + round_, "v": "r"})
            else:
                before = {"id": round_, "v": "x"}
                batches.add(table, "u", (10 + round_, 0), before=before, after={**before, "v": "r"})
        frame = batches.frame()
        cpu, jobs, started = cpu_seconds(pid), spark_jobs(spark), time.perf_counter()
        driver_cpu = time.process_time()
        batches.apply(round_, frame)
        seconds = time.perf_counter() - started
        per = args.tables
        print(
            f"batch {round_}: {seconds:.1f} s = {seconds / per:.2f} s per changed table "
            f"(target 0.3), {(spark_jobs(spark) - jobs) / per:.1f} Spark jobs, "
            f"{(cpu_seconds(pid) - cpu) / per:.2f} JVM CPU-s and "
            f"{(time.process_time() - driver_cpu) / per:.2f} driver (Python) CPU-s per table"
        )
        cpu, jobs, started = cpu_seconds(pid), spark_jobs(spark), time.perf_counter()
        _bare_delta_batch(spark, paths, round_, args.op, args.parallel_tables)
        bare = time.perf_counter() - started
        # The baseline's commits are another writer's, which the job never meets (it is its
        # tables' only writer): the delta-rs tables it keeps open are re-read, not left to fail
        # their next commit's conflict check and hand the table to Spark.
        assert batches.applier is not None
        for path in paths:
            batches.applier._forget_driver_table(path)
        print(
            f"  baseline, Delta alone ({'append' if args.op == 'c' else 'MERGE'} of one row, "
            f"{args.parallel_tables} tables at a time): {bare / per:.2f} s per table, "
            f"{(spark_jobs(spark) - jobs) / per:.1f} Spark jobs and "
            f"{(cpu_seconds(pid) - cpu) / per:.2f} JVM CPU-s per table; "
            f"the job {seconds / bare:.2f}x the baseline"
        )
    changed = 100 + args.rounds if args.op == "c" else args.rounds
    values = [r["v"] for r in batches.rows("public", "t0") if r["id"] == changed]
    assert values == ["r"], f"t0's row {changed} holds {values}, not the change"
    spark.stop()


def _grow(spark: Any, paths: list[str], rows: int) -> None:
    """Each table appended up to ``rows`` rows (keys from 1,000,000 up, which no batch
    touches, values of 32 hex digits), by Spark, older than every change of the batches."""
    from deltalake import DeltaTable

    from bridge.spark import transforms as tf

    for path in paths:
        spark.range(1_000_000, 1_000_000 + rows - 100, numPartitions=4).selectExpr(
            "CAST(id AS INT) AS id",
            "md5(CAST(id AS STRING)) AS v",
            f"1L AS {tf.COMMIT_LSN}",
            f"0L AS {tf.SEQ}",
            f"CAST(NULL AS TIMESTAMP) AS {tf.COMMIT_TS}",
        ).write.format("delta").mode("append").save(path)
    sizes = DeltaTable(paths[0]).get_add_actions(flatten=True).column("size_bytes").to_pylist()
    print(f"tables grown to {rows:,} rows: {sum(sizes) / 2**20:.0f} MiB each in {len(sizes)} files")


def _bare_delta_batch(spark: Any, paths: list[str], round_: int, op: str, parallel: int) -> None:
    """One row per table written by Delta's own API, with none of the job's work around it."""
    from delta.tables import DeltaTable

    key = 1_000 + round_ if op == "c" else 50 + round_  # a new key, or one no batch touched

    def write(path: str) -> None:
        target = DeltaTable.forPath(spark, path)
        values = {"id": str(key), "v": "'bare'"}  # the other columns: NULL
        row = spark.range(1).selectExpr(
            *(
                f"CAST({values.get(name, 'NULL')} AS {kind}) AS `{name}`"
                for name, kind in target.toDF().dtypes
            )
        )
        if op == "c":
            row.write.format("delta").mode("append").save(path)
        else:
            target.alias("t").merge(row.alias("s"), "t.id = s.id").whenMatchedUpdate(
                set={"v": "s.v"}
            ).execute()

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        list(pool.map(write, paths))


if __name__ == "__main__":
    main()
