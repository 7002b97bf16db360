"""bridge.spark.driver_merge without Spark: what delta-rs is handed, and what it refuses."""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from bridge.spark import driver_table
from bridge.spark import transforms as tf
from bridge.spark.driver_changes import ArrowRows
from bridge.spark.driver_merge import (
    DriverWriteRefused,
    append_in_driver,
    merge_in_driver,
    open_table,
    table_bytes,
    write_append,
)
from bridge.spark.driver_table import checkpoint_due
from bridge.spark.merge import MergePlan

#: A table's changes as the driver decodes them (bridge.spark.driver_changes.ArrowRows).
_CHANGES = T.StructType(
    [
        T.StructField("id", T.LongType()),
        T.StructField("v", T.StringType()),
        T.StructField(tf.COMMIT_LSN, T.LongType()),
        T.StructField(tf.SEQ, T.LongType()),
        T.StructField(tf.COMMIT_TS, T.TimestampType()),
        T.StructField(tf.OP, T.StringType()),
    ]
)
_META = {
    tf.COMMIT_LSN: pa.array([10], pa.int64()),
    tf.SEQ: pa.array([0], pa.int64()),
    tf.COMMIT_TS: pa.array([0], pa.timestamp("us", tz="UTC")),
}


def test_an_unforeseen_failure_before_the_commit_hands_the_batch_to_spark(
    tmp_path: Path,
) -> None:
    """Rows the driver cannot prepare (here a column its Arrow lacks; in the field, a value
    Arrow will not cast or a Spark job that fails collecting them) are DriverWriteRefused,
    which the applier answers by writing the batch with Spark, and nothing is committed."""
    from deltalake import write_deltalake

    write_deltalake(str(tmp_path), pa.table({"id": pa.array([1], pa.int64()), "v": ["a"], **_META}))
    without_v = pa.table(
        {"id": pa.array([2], pa.int64()), **_META, tf.OP: pa.array(["c"], pa.string())}
    )
    rows = ArrowRows(without_v, _CHANGES)
    plan = MergePlan(key_columns=("id",), value_columns=("id", "v"))
    table = open_table(str(tmp_path))
    for write in (merge_in_driver, append_in_driver):
        with pytest.raises(DriverWriteRefused, match="preparing the write: KeyError"):
            write(table, rows, plan, "the-job", 1)
    assert open_table(str(tmp_path)).version() == 0


@pytest.mark.parametrize("retention", [None, "interval 0 seconds"])
def test_the_drivers_commits_checkpoint_every_tenth_version_and_remove_expired_log_entries(
    tmp_path: Path, retention: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """delta-rs's post-commit hooks are off (on a local path they list the whole log at every
    commit, a log that holds every commit of the retention period); the driver's writes
    checkpoint every ``delta.checkpointInterval`` versions instead, as Spark does, and then
    remove the log entries older than ``delta.logRetentionDuration`` (30 days by default;
    here also none; at most hourly, here at every checkpoint). Tables take their turns at
    versions offset by their paths (the job's tables advance together). A reader (a new
    delta-rs table) sees every batch's rows and its transaction."""
    from deltalake import write_deltalake

    monkeypatch.setattr(driver_table, "CLEANUP_EVERY_SECONDS", 0.0)

    write_deltalake(
        str(tmp_path),
        pa.table({"id": pa.array([0], pa.int64()), "v": ["a"], **_META}),
        configuration={"delta.logRetentionDuration": retention} if retention else None,
    )
    table = open_table(str(tmp_path))
    for batch in range(1, 25):
        rows = pa.table({"id": pa.array([batch], pa.int64()), "v": [f"v{batch}"], **_META})
        write_append(table, rows, "the-job", batch, None)
    log = tmp_path / "_delta_log"
    due: list[int] = []
    for version in range(1, 25):
        if checkpoint_due(table.table_uri, version, 10, due[-1] if due else None):
            due.append(version)
    assert len(due) >= 2 and all(b - a == 10 for a, b in itertools.pairwise(due))
    written = sorted(int(p.name.split(".")[0]) for p in log.glob("*.checkpoint.parquet"))
    assert written == (due if retention is None else due[-1:])
    commits = sorted(int(p.name.split(".")[0]) for p in log.glob("*.json"))
    assert commits == list(range(0 if retention is None else due[-1], 25))
    reader = open_table(str(tmp_path))
    assert reader.version() == 24
    assert reader.transaction_version("the-job") == 24
    assert sorted(
        pa.table(reader.synced().to_pyarrow_dataset().to_table())["id"].to_pylist()
    ) == list(range(25))


def test_a_tables_size_is_its_current_versions_through_its_writes_and_anothers(
    tmp_path: Path,
) -> None:
    """The size the driver decides by (rewrite, deletion vectors or Spark) is the table's at
    its current version: after the driver's own write, and after another writer's."""
    from deltalake import write_deltalake

    def rows(keys: range) -> pa.Table:
        n = len(keys)
        stamps = pa.array([0] * n, pa.timestamp("us", tz="UTC"))
        columns = {"id": pa.array(keys, pa.int64()), "v": ["x" * 100] * n}
        return pa.table({**columns, tf.COMMIT_LSN: [10] * n, tf.SEQ: [0] * n, tf.COMMIT_TS: stamps})

    write_deltalake(str(tmp_path), rows(range(10)))
    table = open_table(str(tmp_path))
    first = table_bytes(table)
    write_append(table, rows(range(10, 1000)), "the-job", 1, None)
    second = table_bytes(table)
    assert second > first
    assert table_bytes(open_table(str(tmp_path))) == second
    write_deltalake(str(tmp_path), rows(range(5)), mode="overwrite")
    assert table_bytes(open_table(str(tmp_path))) < second


def test_a_checkpoint_is_due_once_the_interval_passed_whoever_made_the_versions_between() -> None:
    """Versions another writer made (Spark's compactions) do not make the driver skip a
    checkpoint: it counts from the table's last one, not at exact multiples."""
    assert not checkpoint_due("/t", 13, 10, last=4)
    assert checkpoint_due("/t", 15, 10, last=4)  # 14, the tenth after 4, was Spark's
    first = next(v for v in range(1, 11) if checkpoint_due("/t", v, 10, last=None))
    assert 1 <= first <= 10


def test_rows_appended_to_a_held_table_are_held_too_and_its_next_rewrite_reads_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of new keys is appended (append_in_driver), not rewritten: the rows held for
    the table's last rewrite plus the appended ones are its rows at the new version, so the
    next rewrite takes them from memory, equal to what a scan of the table gives."""
    from deltalake import write_deltalake

    from bridge.spark import driver_rewrite

    def changes(ids: list[int], value: str, op: str, lsn: int) -> ArrowRows:
        n = len(ids)
        meta = {
            tf.COMMIT_LSN: pa.array([lsn] * n, pa.int64()),
            tf.SEQ: pa.array(range(n), pa.int64()),
            tf.COMMIT_TS: pa.array([0] * n, pa.timestamp("us", tz="UTC")),
        }
        columns = {"id": pa.array(ids, pa.int64()), "v": [f"{value}-{i}" for i in ids]}
        return ArrowRows(pa.table({**columns, **meta, tf.OP: [op] * n}), _CHANGES)

    write_deltalake(str(tmp_path), pa.table({"id": pa.array([1], pa.int64()), "v": ["a"], **_META}))
    table = open_table(str(tmp_path))
    plan = MergePlan(key_columns=("id",), value_columns=("id", "v"))
    merge_in_driver(table, changes([1], "updated", "u", 20), plan, "the-job", 1)  # a rewrite: held
    append_in_driver(table, changes([2, 3], "new", "c", 30), plan, "the-job", 2)
    held = driver_rewrite.read_rows(table, driver_table.pa_schema(table))
    scanned = pa.table(table.synced().scan())
    assert sorted(held.column("v").to_pylist()) == sorted(scanned.column("v").to_pylist()) == [
        "new-2", "new-3", "updated-1"]  # fmt: skip

    scans: list[object] = []
    scan = type(table).scan

    def counted_scan(self: object) -> object:
        scans.append(self)
        return scan(self)

    monkeypatch.setattr(type(table), "scan", counted_scan)
    merge_in_driver(table, changes([2], "updated", "u", 40), plan, "the-job", 3)
    assert scans == []  # the rewrite read the held rows
    values = pa.table(open_table(str(tmp_path)).synced().scan()).column("v").to_pylist()
    assert sorted(values) == ["new-3", "updated-1", "updated-2"]
