"""Benchmark: a held table's catch-up (bridge.spark.replay) against the job's own batch of the
same records.

A table whose batch failed twice is held: its records wait in the dead-letter table, in order,
until a replay applies them (at the job's next start, and every --held-retry-interval). The
baseline beside it is the job applying the same records as a batch of its stream, with its
default settings (the task lane takes batches of more than 50,000 records). Both apply
``--keys`` inserts of a keyed table, then ``--updates`` updates of each key, into a new table;
the two tables must end equal.

    .venv/bin/python bench/replay_bench.py --keys 50000 --updates 3
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.spark_apply_bench import bench_session, cpu_seconds, jvm_pid
from bridge.devstack.stack import LocalStack
from bridge.spark.applier import BatchApplier
from bridge.spark.job import with_batch_bound
from bridge.spark.replay import replay_set_aside
from tests.spark.batches import KEYED, Batches

OUTAGE = "the bench's storage outage"


def _records(batches: Batches, keys: int, updates: int) -> int:
    for key in range(keys):
        batches.add(KEYED, "c", (10, key), after={"id": key, "v": "v0"})
    for round_ in range(1, updates + 1):
        for key in range(keys):
            before, after = {"id": key, "v": f"v{round_ - 1}"}, {"id": key, "v": f"v{round_}"}
            batches.add(KEYED, "u", (10 + round_, key), before=before, after=after)
    return keys * (updates + 1)


def _as_kafka_gives_it(frame: Any) -> Any:
    """Each Kafka partition in one Spark partition, in offset order, as Spark's Kafka source
    gives a batch (the task lane refuses a partition split over tasks)."""
    return frame.repartition("partition").sortWithinPartitions("partition", "offset")


def _held(batches: Batches) -> None:
    """Batch 0 applied while the table's writes fail twice: the table is held, its records in
    the dead-letter table."""
    apply_table = BatchApplier._apply_table

    def failing(self: BatchApplier, spark: Any, table: Any, *args: Any) -> None:
        raise RuntimeError(OUTAGE)

    config = batches.config
    batches.config = replace(config, task_lane=False)  # (the lane would write it)
    BatchApplier._apply_table = failing  # type: ignore[method-assign]
    try:
        applier = batches.apply(0)
    finally:
        BatchApplier._apply_table = apply_table  # type: ignore[method-assign]
        batches.config = config
    held = applier.held_tables.current(batches.spark)
    if set(held) != {KEYED.topic}:
        raise SystemExit(f"the table is not held: {held}")


def _timed(spark: Any, work: Any) -> tuple[float, float]:
    pid = jvm_pid(spark)
    cpu, wall = cpu_seconds(pid), time.perf_counter()
    work()
    return time.perf_counter() - wall, cpu_seconds(pid) - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--verbose", action="store_true", help="the job's per-batch log")
    args = parser.parse_args()
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
        logging.getLogger("py4j").setLevel(logging.WARNING)
    stack = LocalStack().up()
    work = Path(tempfile.mkdtemp(prefix="pgbridge-replay-bench-"))
    spark = bench_session("pgbridge-replay-bench", stack)
    try:
        baseline, replayed = Batches(spark, work / "batch"), Batches(spark, work / "replay")
        for batches in (baseline, replayed):
            batches.config = replace(with_batch_bound(spark, batches.config), parallel_tables=2)
        records = _records(baseline, args.keys, args.updates)
        _records(replayed, args.keys, args.updates)
        print(
            f"{records:,} records of one keyed table ({args.keys:,} inserts, then "
            f"{args.updates} updates of each key); batches of at most "
            f"{baseline.config.max_offsets_per_trigger:,} records; 2 cores, local[2]"
        )
        frame = _as_kafka_gives_it(baseline.frame())
        batch_s, batch_cpu = _timed(spark, lambda: baseline.apply(0, frame))
        _held(replayed)
        still: dict[str, int] = {}

        def replay() -> None:
            still.update(replay_set_aside(spark, replayed.config, replayed.schemas))

        replay_s, replay_cpu = _timed(spark, replay)
        if still or replayed.dead():
            raise SystemExit(f"the replay left the table held: {still}")
        if replayed.multiset("public", "keyed") != baseline.multiset("public", "keyed"):
            raise SystemExit("the replayed table differs from the one the batch wrote")
        for what, seconds, cpu in (("the job's batch", batch_s, batch_cpu),
                                   ("the held table's replay", replay_s, replay_cpu)):  # fmt: skip
            print(
                f"{what:<24} {seconds:6.1f} s = {records / seconds:9,.0f} records/s, "
                f"CPU {cpu / records * 1e6:6.1f} us/record (JVM, its Python workers, driver)"
            )
        print(f"ratio replay / batch: {batch_s / replay_s:.2f} (the tables are equal)")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
