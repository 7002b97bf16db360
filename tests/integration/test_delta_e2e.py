"""The whole product on the real stack: a PostgreSQL workload -> `pgbridge run` -> Kafka ->
the Spark apply job -> Delta tables that equal the source tables, row by row and type by type,
including a schema change mid-stream and a Spark job killed mid-batch and restarted."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import functions as F

from bridge.devstack.stack import StackInfo
from bridge.ops.status import collect
from bridge.spark import changelog
from bridge.spark.config import ApplyConfig
from bridge.spark.job import run_apply
from tests.integration.bridge_harness import (
    RunningBridge,
    bridge_config,
    bridge_settings,
    mark,
    run_until_exit,
    scratch_database,
)
from tests.integration.test_pipeline_e2e import KEYS, prepare_database, workload

pytestmark = pytest.mark.integration

META = ("_pgbridge_commit_lsn", "_pgbridge_seq", "_pgbridge_commit_ts")


def schema_change_workload(dsn: str, settle: Callable[[], None] = lambda: None) -> None:
    """Columns added mid-stream, then used: the Delta table must evolve and keep old rows, which
    hold what PostgreSQL shows for them: null, or the value of ``ADD COLUMN ... DEFAULT``
    (``attmissingval``: a constant, and ``now()`` computed at the ALTER); then (after
    ``settle``: the bridge has decoded the first change) a column renamed, to a name Avro
    refuses, and used: Delta renames it, values kept. (A rename in a burst of DDL, which the
    bridge decodes after the catalog moved on, is tests/integration/test_ddl_torture.py's.)"""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "ALTER TABLE customers ADD COLUMN tier text DEFAULT 'basic', "
            "ADD COLUMN score numeric(5,1), ADD COLUMN since timestamptz DEFAULT now()"
        )
        conn.execute("UPDATE customers SET tier = 'gold', score = 9.5 WHERE id % 10 = 1")
        conn.execute(
            "INSERT INTO customers (id, name, tier) VALUES (500, 'new after alter', 'bronze')"
        )
    settle()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute('ALTER TABLE customers RENAME COLUMN name TO "full name"')
        conn.execute("UPDATE customers SET \"full name\" = 'renamed ' || id WHERE id % 7 = 0")
        conn.execute("INSERT INTO customers (id, \"full name\") VALUES (501, 'after rename')")


def capture_workload(stack: StackInfo, dsn: str, prefix: str, big_rows: int = 5_000) -> None:
    """The workload and a schema change, captured by ``pgbridge run`` into Kafka."""
    prepare_database(dsn)
    bridge = RunningBridge(bridge_config(stack, dsn, prefix))
    try:
        workload(dsn, big_rows=big_rows)
        schema_change_workload(dsn, settle=lambda: bridge.wait_confirmed(mark(dsn)))
        bridge.wait_confirmed(mark(dsn))
    finally:
        bridge.stop()


def apply_config(stack: StackInfo, prefix: str, work: Path, **extra: Any) -> ApplyConfig:
    return ApplyConfig(
        topic_prefix=prefix,
        bootstrap_servers=stack.bootstrap_servers,
        registry_url=stack.registry_url,
        delta_base=str(work / "delta"),
        checkpoint_location=str(work / "checkpoint"),
        dead_letter_location=str(work / "dead-letter"),
        available_now=True,
        **extra,
    )


def run_configuration_file(stack: StackInfo, prefix: str, path: Path) -> Path:
    """The part of a ``pgbridge run`` configuration file ``pgbridge apply -c`` reads."""
    path.write_text(
        f'"database.dbname" = "unused"\n"topic.prefix" = "{prefix}"\n'
        f'"kafka.bootstrap.servers" = "{stack.bootstrap_servers}"\n'
        f'"schema.registry.url" = "{stack.registry_url}"\n'
    )
    return path


def comparable(value: Any) -> Any:
    """PostgreSQL's and Spark's Python values in one form, keeping the type visible."""
    if isinstance(value, dt.datetime):
        # timestamptz: psycopg gives aware datetimes, Spark naive UTC (the session is UTC).
        return ("ts", value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value)
    if isinstance(value, Decimal):
        return ("dec", value)
    if isinstance(value, dict | list):  # jsonb from psycopg
        return ("json", json.dumps(value, sort_keys=True))
    if isinstance(value, str) and value[:1] in "{[":  # jsonb as Delta holds it: a string
        try:
            return ("json", json.dumps(json.loads(value), sort_keys=True))
        except ValueError:
            return value
    return value


def assert_delta_equals_source(
    spark: Any,
    config: ApplyConfig,
    dsn: str,
    keys: dict[str, tuple[str, ...]] = KEYS,
    load: Callable[[str], Any] | None = None,
) -> None:
    """Each table's Delta table (or what ``load("schema.table")`` gives) equals the source."""
    for table, key in keys.items():
        schema, name = table.split(".")
        delta = (
            load(table)
            if load is not None
            else spark.read.format("delta").load(f"{config.delta_base}/{schema}/{name}")
        )
        with psycopg.connect(dsn) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            source = cur.execute(f"SELECT * FROM {table}").fetchall()
        columns = list(source[0].keys()) if source else []
        assert set(columns) <= set(delta.columns), (
            f"{table}: Delta lacks {set(columns) - set(delta.columns)}"
        )
        assert set(delta.columns) - set(columns) <= set(META), f"{table}: unexpected columns"
        if not key:  # no key: a multiset, identical rows are distinct copies
            assert Counter(repr([comparable(r[c]) for c in columns]) for r in source) == Counter(
                repr([comparable(r[c]) for c in columns])
                for r in (row.asDict() for row in delta.collect())
            ), f"{table}: rows differ"
            continue
        expected = {
            tuple(r[k] for k in key): {c: comparable(r[c]) for c in columns} for r in source
        }
        got = {
            tuple(r[k] for k in key): {c: comparable(r[c]) for c in columns}
            for r in (row.asDict() for row in delta.collect())
        }
        assert got.keys() == expected.keys(), f"{table}: keys differ"
        for k, row in expected.items():
            assert got[k] == row, f"{table} {k}: {got[k]} != {row}"


# make test: test_spark_cluster.py applies the same workload and schema change (and runs the job
# again from its checkpoint, changing nothing), on a standalone cluster.
@pytest.mark.long
def test_delta_tables_equal_source_after_workload_and_schema_change(
    local_stack: StackInfo, spark: Any, tmp_path: Path
) -> None:
    prefix = f"delta{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        capture_workload(local_stack, dsn, prefix)
        config = apply_config(local_stack, prefix, tmp_path)
        run_apply(config, spark=spark)
        assert_delta_equals_source(spark, config, dsn)
        # A second run from the same checkpoint finds nothing new and changes nothing.
        version = spark.sql(f"DESCRIBE HISTORY delta.`{config.delta_base}/public/orders`").first()
        run_apply(config, spark=spark)
        again = spark.sql(f"DESCRIBE HISTORY delta.`{config.delta_base}/public/orders`").first()
        assert again["version"] == version["version"]
        assert_delta_equals_source(spark, config, dsn)


# make test-long: in make test, tests/spark/test_changelog.py checks the changelog mode's
# views (current before compaction, nothing applied twice, TOAST kept) and its compaction.
@pytest.mark.long
def test_changelog_mode_views_equal_source_before_compaction_and_tables_after(
    local_stack: StackInfo, spark: Any, tmp_path: Path
) -> None:
    """Merge-on-read: the whole workload ingested into the changelog (one commit per batch);
    every keyed table's current-state view equals the source before any compaction; then the
    job's compaction brings the Delta tables (keyless ones too) to the source."""
    prefix = f"delta{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        capture_workload(local_stack, dsn, prefix)
        config = apply_config(
            local_stack, prefix, tmp_path, mode="changelog", max_offsets_per_trigger=3_000
        )
        changelog.start_ingest(spark, config).awaitTermination()
        keyed = {t: k for t, k in KEYS.items() if k}
        assert_delta_equals_source(
            spark, config, dsn, keyed, load=lambda t: changelog.current_state(spark, config, t)
        )
        assert not Path(config.delta_base, "public", "orders").exists()  # nothing compacted
        run_apply(config, spark=spark)  # nothing new to ingest: compacts everything
        assert_delta_equals_source(spark, config, dsn)
        assert_delta_equals_source(
            spark, config, dsn, keyed, load=lambda t: changelog.current_state(spark, config, t)
        )


# make test: test_spark_apply.py kills the job at an exact point (after a Delta commit, before
# the checkpoint); this one at whatever moment the second commit lands.
@pytest.mark.long
def test_delta_apply_killed_mid_batch_and_restarted_equals_source(
    local_stack: StackInfo, spark: Any, tmp_path: Path
) -> None:
    prefix = f"dkill{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        prepare_database(dsn)
        bridge = RunningBridge(bridge_config(local_stack, dsn, prefix))
        try:
            workload(dsn, big_rows=6_000)
            bridge.wait_confirmed(mark(dsn))
        finally:
            bridge.stop()
        # Small batches, so that the kill lands between a batch's Delta commit and its checkpoint
        # or in the middle of a MERGE, not after the last batch.
        config = apply_config(local_stack, prefix, tmp_path, max_offsets_per_trigger=2_000)
        args = [
            sys.executable,
            "-m",
            "bridge.cli",
            "apply",
            "--available-now",
            "--topic-prefix",
            prefix,
            "--delta-base",
            config.delta_base,
            "--checkpoint",
            config.checkpoint_location,
            "--dead-letter",
            config.dead_letter_location,
            "--max-offsets-per-trigger",
            "2000",
            "--bootstrap-servers",
            local_stack.bootstrap_servers,
            "--registry-url",
            local_stack.registry_url,
        ]
        env = {**os.environ, "PGBRIDGE_SPARK_MASTER": "local[2]"}
        log = tmp_path / "apply.log"
        with open(log, "wb") as out:
            job = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
        orders_log = Path(config.delta_base) / "public" / "orders" / "_delta_log"
        deadline = time.monotonic() + 240
        while not (orders_log.exists() and len(list(orders_log.glob("*.json"))) >= 2):
            assert job.poll() is None, (
                f"apply finished before it could be killed:\n{log.read_text()[-3000:]}"
            )
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        job.kill()  # SIGKILL mid-run: no checkpoint for the batch in progress
        job.wait(30)
        # Restart from the same checkpoint: Spark replays the killed batch with the offsets its
        # log planned, then takes the rest in one batch (small batches are only for the kill).
        run_apply(replace(config, max_offsets_per_trigger=None), spark=spark)
        assert_delta_equals_source(spark, config, dsn)


def test_apply_with_defaults_bounds_batches_by_memory_and_equals_source(
    local_stack: StackInfo, spark: Any, tmp_path: Path
) -> None:
    """`pgbridge apply` as a user runs it, with pgbridge run's configuration file and no batch
    setting, on a topic longer than one batch of its heap: it applies it in bounded batches
    (not one batch that dies of OutOfMemoryError), quietly, and Delta equals the source."""
    from bridge.spark.resources import batch_records_for, parse_memory

    heap = "512m"  # the heap's batch (~130,000 records) is shorter than the topic
    rows = batch_records_for(parse_memory(heap)) + 20_000
    prefix = f"dbound{uuid.uuid4().hex[:8]}"
    with scratch_database(local_stack) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE wide_load (id bigint PRIMARY KEY, name text, n numeric(12,2))"
            )
            conn.execute(
                "INSERT INTO wide_load SELECT g, 'row ' || g, g / 100.0 "
                "FROM generate_series(1, %s) g",
                (rows,),
            )
        settings = bridge_settings(local_stack, dsn, prefix, **{
            "snapshot.mode": "initial_only", "state.dir": str(tmp_path / "state")})  # fmt: skip
        code, output, _ = run_until_exit(settings, timeout=300)  # the initial snapshot
        assert code == 0, output[-3000:]
        bridge = RunningBridge(bridge_config(local_stack, dsn, prefix))
        try:  # then changes to snapshotted rows, streamed from the snapshot's slot
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("UPDATE wide_load SET name = 'updated' WHERE id % 1000 = 7")
                conn.execute("DELETE FROM wide_load WHERE id % 1000 = 9")
            bridge.wait_confirmed(mark(dsn))
        finally:
            bridge.stop()
        config = apply_config(local_stack, prefix, tmp_path)
        # The topics, Kafka and the registry from the configuration file pgbridge run reads.
        shared = run_configuration_file(local_stack, prefix, tmp_path / "pgbridge.toml")
        args = [
            sys.executable, "-m", "bridge.cli", "apply", "--available-now", "-c", str(shared),
            "--delta-base", config.delta_base, "--checkpoint", config.checkpoint_location,
            "--dead-letter", config.dead_letter_location,
            "--spark-conf", f"spark.driver.memory={heap}",
        ]  # fmt: skip
        env = {**os.environ, "PGBRIDGE_SPARK_MASTER": "local[2]"}
        done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
        log = done.stdout + done.stderr
        assert done.returncode == 0, log[-3000:]
        assert "sized from the driver's heap" in log, log[-3000:]
        batches = [line for line in log.splitlines() if "changes in 1 tables" in line]
        assert len(batches) >= 2, log[-3000:]  # more than one batch: the bound held
        # The snapshot's first batch (its table's first load) went through the task lane:
        # decoded and written by Spark's Python tasks (bridge.spark.task_lane).
        assert "append by tasks" in log, log[-3000:]
        # ... whose tasks read the batch's offset ranges from Kafka themselves
        # (bridge.spark.kafka_ranges), in the first batch and in those after it.
        direct = [line for line in log.splitlines() if "from Kafka themselves" in line]
        assert len(direct) >= 2, log[-3000:]
        assert "[Stage" not in log  # no progress bars in a log
        assert "Traceback" not in log and "Py4JException" not in log  # a clean shutdown
        # pgbridge status --apply-checkpoint: the job's last batch is committed, nothing behind.
        status = collect(
            bridge_config(local_stack, dsn, prefix), apply_checkpoint=config.checkpoint_location
        )
        assert status.apply is not None, status.problems
        assert status.apply["batch"] is not None and status.apply["batch"] >= len(batches) - 1
        assert status.apply["tables"] == {f"{prefix}.public.wide_load": 0}
        # Row by row, as a sum of per-row digests each side (comparing 150,000 rows in Python
        # or through one sorted string takes longer than the apply).
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT count(*), sum(('x' || left(md5(concat_ws(':', id, name, n)), 8))::bit(32)"
                "::bigint & 4294967295) FROM wide_load"
            ).fetchone()
        assert row is not None
        source_count, source_digest = row
        delta = spark.read.format("delta").load(config.table_path("public", "wide_load"))
        line = F.md5(F.concat_ws(":", "id", "name", "n"))
        got = delta.agg(
            F.count("*"), F.sum(F.conv(F.substring(line, 1, 8), 16, 10).cast("bigint"))
        ).first()
        assert (got[0], got[1]) == (source_count, source_digest)
        assert source_count == rows - len(range(9, rows + 1, 1000))  # the deletes are applied
