"""The driver's own checkpoints and log cleanup (bridge.spark.delta_checkpoint): what a reader
of the table (delta-rs, and this process's own log state) finds from them is what the log
said, and the cleanup removes only what Delta's does."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from bridge.spark import transforms as tf
from bridge.spark.delta_checkpoint import remove_expired, retention_seconds, write_checkpoint
from bridge.spark.delta_log import read_log_files
from bridge.spark.driver_dv_merge import dv_merge
from bridge.spark.driver_merge import open_table, write_append, write_overwrite
from bridge.spark.merge import MergePlan

PLAN = MergePlan(key_columns=("id",), value_columns=("id", "v"))
_ROWS = pa.schema(
    [("id", pa.int64()), ("v", pa.string()), (tf.COMMIT_LSN, pa.int64()), (tf.SEQ, pa.int64()),
     (tf.COMMIT_TS, pa.timestamp("us", tz="UTC"))]
)  # fmt: skip


def _rows(ids: list[int], value: str, lsn: int = 10) -> pa.Table:
    n = len(ids)
    return pa.table(
        {"id": ids, "v": [f"{value}-{i}" for i in ids], tf.COMMIT_LSN: [lsn] * n,
         tf.SEQ: [0] * n, tf.COMMIT_TS: [None] * n}
    ).cast(_ROWS)  # fmt: skip


def _scanned(path: Path) -> dict[int, str]:
    from deltalake import DeltaTable

    rows = pa.table(DeltaTable(str(path)).scan())
    return dict(zip(rows.column("id").to_pylist(), rows.column("v").to_pylist(), strict=True))


def _mapped_table(path: Path) -> Any:
    """A table the job creates (column mapping, deletion vectors: bridge.spark.table_creation),
    and commits of every kind the driver makes: appends, a rewrite, a deletion-vector MERGE."""
    from pyspark.sql import types as T

    from bridge.spark.merge import META_FIELDS
    from bridge.spark.table_creation import create_in_log

    columns = T.StructType([T.StructField("id", T.LongType()), T.StructField("v", T.StringType()),
                            *META_FIELDS])  # fmt: skip
    assert create_in_log(str(path), columns, {"delta.enableDeletionVectors": "true",
                                              "pgbridge.topic": "t"})  # fmt: skip
    table = open_table(str(path))
    write_append(table, _rows([0, 1, 2], "first"), "job", 1, None)
    write_append(table, _rows([3, 4], "appended"), "job", 2, '{"fences": 1}')
    write_overwrite(table, _rows([0, 1, 2, 3, 4, 5], "rewritten"), "job", 3, None)
    write_append(table, _rows([6], "appended"), "other-job", 7, None)
    changed = _rows([1, 6], "merged", lsn=20).append_column(tf.OP, pa.array(["u", "d"]))
    dv_merge(table, changed, PLAN, "job", 4, None)
    return table


def test_a_checkpoint_written_here_is_read_back_as_the_log_said(tmp_path: Path) -> None:
    table = _mapped_table(tmp_path)
    before = read_log_files(tmp_path)
    expected = _scanned(tmp_path)
    assert expected == {0: "rewritten-0", 1: "merged-1", 2: "rewritten-2", 3: "rewritten-3",
                        4: "rewritten-4", 5: "rewritten-5"}  # fmt: skip
    assert write_checkpoint(table.log) == 2 + 2 + len(before.adds)  # protocol, metadata, txns
    pointer = json.loads((tmp_path / "_delta_log" / "_last_checkpoint").read_text())
    assert pointer["version"] == table.version() == before.version
    # Readers start from the checkpoint: the commits before it are gone.
    for version in range(table.version()):
        (tmp_path / "_delta_log" / f"{version:020d}.json").unlink()
    after = read_log_files(tmp_path)
    assert after.adds == before.adds
    assert after.txns == {"job": 4, "other-job": 7}
    assert after.metadata == before.metadata and after.protocol == before.protocol
    assert _scanned(tmp_path) == expected  # delta-rs: column mapping, deletion vectors
    reopened = open_table(str(tmp_path))
    assert reopened.transaction_version("job") == 4
    assert reopened.metadata().configuration["pgbridge.topic"] == "t"
    write_append(reopened, _rows([9], "after"), "job", 5, None)  # and the table goes on
    assert _scanned(tmp_path) == {**expected, 9: "after-9"}


def test_a_log_with_actions_the_state_does_not_keep_is_not_checkpointed_here(
    tmp_path: Path,
) -> None:
    table = _mapped_table(tmp_path)
    table.log.apply([{"domainMetadata": {"domain": "d", "configuration": "{}", "removed": False}}])
    with pytest.raises(ValueError, match="would not carry"):
        write_checkpoint(table.log)


def _aged(directory: Path, version: int, seconds_ago: float) -> None:
    for entry in directory.glob(f"{version:020d}.*"):
        stamp = time.time() - seconds_ago
        os.utime(entry, (stamp, stamp))


def test_expired_entries_before_the_newest_expired_checkpoint_are_removed(
    tmp_path: Path,
) -> None:
    log = tmp_path / "_delta_log"
    log.mkdir()
    for version in range(30):
        (log / f"{version:020d}.json").write_text("{}\n")
        if version % 2:  # Spark's commits through Hadoop's file system: a checksum beside
            (log / f".{version:020d}.json.crc").write_bytes(b"crc")
    for version in (10, 20):
        (log / f"{version:020d}.checkpoint.parquet").write_bytes(b"")
    (log / "_last_checkpoint").write_text("{}")
    for version in range(25):  # 0..24 expired (older than a day), 25..29 not
        _aged(log, version, 2 * 86400)
    assert remove_expired(tmp_path, 86400) == 20 + 1  # 0..19, and checkpoint 10
    checksums = sorted(p.name for p in log.glob(".*.crc"))
    assert checksums == [f".{v:020d}.json.crc" for v in range(21, 30, 2)]  # theirs went too
    for checksum in checksums:
        (log / checksum).unlink()
    left = sorted(p.name for p in log.iterdir())
    assert left[0] == f"{20:020d}.checkpoint.parquet" and f"{20:020d}.json" in left
    assert "_last_checkpoint" in left and len(left) == 10 + 1 + 1
    # Nothing expired before a checkpoint that is itself within the retention: nothing goes.
    for version in range(20, 30):
        _aged(log, version, 0)
    assert remove_expired(tmp_path, 86400) == 0


@pytest.mark.parametrize(
    ("configured", "seconds"),
    [(None, 30 * 86400), ("interval 0 seconds", 0), ("interval 1 hour", 3600),
     ("INTERVAL 7 DAYS", 7 * 86400), ("interval 2 weeks", 14 * 86400), ("7 days", None)],
)  # fmt: skip
def test_log_retention_is_read_as_delta_writes_it(configured: str | None, seconds: int) -> None:
    configuration = {} if configured is None else {"delta.logRetentionDuration": configured}
    assert retention_seconds(configuration) == seconds


@pytest.mark.integration
def test_spark_reads_the_table_from_a_checkpoint_written_here(spark: Any, tmp_path: Path) -> None:
    """Delta-Spark, the job's other writer and its users' reader, starts from the checkpoint
    (the commits before it removed) and finds the same rows, deletion vectors applied, and
    writes on from it."""
    table = _mapped_table(tmp_path)
    expected = _scanned(tmp_path)
    write_checkpoint(table.log)
    for version in range(table.version()):
        (tmp_path / "_delta_log" / f"{version:020d}.json").unlink()
    read = spark.read.format("delta").load(str(tmp_path))
    assert {r["id"]: r["v"] for r in read.collect()} == expected
    spark.createDataFrame([(7, "spark-7", 30, 0, None)], read.schema).write.format("delta").mode(
        "append"
    ).save(str(tmp_path))
    assert _scanned(tmp_path) == {**expected, 7: "spark-7"}


@pytest.mark.integration
def test_a_checkpoint_written_here_after_sparks_leaves_no_stale_hadoop_checksum(
    spark: Any, tmp_path: Path
) -> None:
    """Spark writes ``_last_checkpoint`` through Hadoop's local file system, which keeps a
    checksum beside it (``._last_checkpoint.crc``) and checks every read against it. A table
    both write (Spark's path for a large batch, the driver's for small ones) gets its pointer
    replaced here: a checksum left stale made every Spark reader of the table retry for 3 s
    and log "is corrupted" (the apply soak's Spark reads showed it)."""
    table = _mapped_table(tmp_path)
    log = tmp_path / "_delta_log"
    spark.sql(
        f"ALTER TABLE delta.`{tmp_path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '1')"
    )
    read = spark.read.format("delta").load(str(tmp_path))
    spark.createDataFrame([(8, "spark-8", 30, 0, None)], read.schema).write.format("delta").mode(
        "append"
    ).save(str(tmp_path))
    assert (log / "._last_checkpoint.crc").exists()  # Spark's checkpoint, with its checksum
    table = open_table(str(tmp_path))
    write_append(table, _rows([9], "driver"), "job", 5, None)
    write_checkpoint(table.log)
    # What every Spark reader does first: read the pointer through Hadoop, checksum checked.
    assert json.loads(_read_through_hadoop(spark, log / "_last_checkpoint"))["version"] == (
        table.version()
    )
    assert _scanned(tmp_path) == {r["id"]: r["v"] for r in read.collect()}


def _read_through_hadoop(spark: Any, path: Path) -> str:
    """The file as Delta-Spark reads it: through Hadoop's file system (a ChecksumException if
    a ``.crc`` beside it does not match)."""
    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path.as_uri())
    fs = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    stream = fs.open(hadoop_path)
    try:
        data = jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
    finally:
        stream.close()
    return bytes(data).decode()
