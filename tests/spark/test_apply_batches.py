"""The apply job's batches end to end on a real local Spark: Kafka-shaped rows holding crafted
Confluent-framed envelopes -> BatchApplier -> Delta tables.

Covers tables without key columns (multisets: duplicates, NULLs, resends, replays, truncates,
zero columns), NULL-safe keys, original column names, hostile schema and table names, a table
that fails without halting the others, which writer takes a batch (append, the driver, deletion
vectors, Spark). Schema changes: test_apply_schema_changes.py; the harness: batches.py. Schemas
come from a fixed id -> schema map (the registry path is covered in tests/integration).
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from bridge.spark import transforms as tf
from bridge.spark.applier import BatchApplier
from bridge.spark.driver_dv_merge import DV_WRITER
from bridge.spark.fences import read_fences
from bridge.spark.set_aside import SET_ASIDE
from tests.spark.batches import (
    BOTH_WRITERS,
    FULL_DUPS,
    KEYED,
    OPT_INT,
    OPT_STR,
    PREFIX,
    SPARK_WRITER_IN_LONG,
    Batches,
    _ids,
    _last_write,
    _merges,
    appended_by,
    col,
    no_unnamed_lane_files,
)
from tests.spark.envelopes import TableVersion, frame_avro

pytestmark = pytest.mark.integration


# Spark's multiset MERGE in make test: test_multiset_resent_and_replayed_records_apply_once.
@SPARK_WRITER_IN_LONG
def test_multiset_keeps_duplicates_across_batches(batches: Batches) -> None:
    t = FULL_DUPS
    for i, row in enumerate([(1, "x"), (1, "x"), (2, None), (2, None), (3, "gone")]):
        batches.add(t, "c", (10, i), after={"a": row[0], "b": row[1]})
    batches.apply(0)
    assert batches.multiset("public", "full_dups") == Counter(
        {(1, "x"): 2, (2, None): 2, (3, "gone"): 1}
    )
    # One of two identical rows holding a NULL is updated; one of two others is deleted.
    batches.add(t, "u", (20, 0), before={"a": 2, "b": None}, after={"a": 2, "b": "set"})
    batches.add(t, "d", (21, 0), before={"a": 1, "b": "x"})
    batches.add(t, "d", (22, 0), before={"a": 3, "b": "gone"})
    assert batches.apply(1).stats.last_write["public.full_dups"] == ("multiset", batches.writer)
    assert batches.multiset("public", "full_dups") == Counter(
        {(1, "x"): 1, (2, None): 1, (2, "set"): 1}
    )


def test_multiset_batch_of_inserts_is_appended_and_counts_resends_once(
    batches: Batches, spark: Any
) -> None:
    """An append-only keyless table (a log, a snapshot) is appended to, batch after batch, not
    merged; resends are still counted once, and a later delete still removes one copy."""
    from delta.tables import DeltaTable

    t = FULL_DUPS
    batches.add(t, "c", (10, 0), after={"a": 1, "b": "x"})
    batches.apply(0)
    batches.add(t, "c", (10, 0), after={"a": 1, "b": "x"})  # resent after a producer crash
    batches.add(t, "c", (11, 0), after={"a": 1, "b": "x"})
    batches.add(t, "c", (11, 0), after={"a": 1, "b": "x"})  # one record twice in a batch
    batches.add(t, "r", (12, 0), after={"a": None, "b": None})
    second = batches.frame().localCheckpoint()
    batches.apply(1, second)
    expected = Counter({(1, "x"): 2, (None, None): 1})
    assert batches.multiset("public", "full_dups") == expected
    path = batches.config.table_path("public", "full_dups")
    history = DeltaTable.forPath(spark, path).history().orderBy("version").collect()
    assert [r["operation"] for r in history] == ["CREATE TABLE", "WRITE", "WRITE"]
    batches.apply(1, second, restarted=True)  # replayed by a restarted driver: appends nothing
    assert batches.multiset("public", "full_dups") == expected
    batches.add(t, "d", (13, 0), before={"a": 1, "b": "x"})
    batches.apply(2)
    assert batches.multiset("public", "full_dups") == Counter({(1, "x"): 1, (None, None): 1})


def test_multiset_folds_changes_of_one_batch(batches: Batches) -> None:
    t = FULL_DUPS
    batches.add(t, "c", (10, 0), after={"a": 1, "b": None})
    batches.add(t, "c", (10, 1), after={"a": 1, "b": None})
    batches.add(t, "c", (10, 2), after={"a": 1, "b": None})
    batches.add(t, "u", (11, 0), before={"a": 1, "b": None}, after={"a": 1, "b": None})
    batches.add(t, "d", (12, 0), before={"a": 1, "b": None})
    batches.add(t, "u", (13, 0), before={"a": 1, "b": None}, after={"a": None, "b": "n"})
    batches.add(t, "c", (14, 0), after={"a": 9, "b": "gone"})
    batches.add(t, "d", (15, 0), before={"a": 9, "b": "gone"})
    batches.apply(0)
    assert batches.multiset("public", "full_dups") == Counter({(1, None): 1, (None, "n"): 1})


@BOTH_WRITERS
def test_multiset_resent_and_replayed_records_apply_once(batches: Batches, spark: Any) -> None:
    t = FULL_DUPS
    batches.add(t, "c", (10, 0), after={"a": 1, "b": "x"})
    batches.add(t, "c", (11, 0), after={"a": 1, "b": "x"})
    batches.apply(0)
    # The producer crashed and resends from (10, 0): the resends must not count again, also
    # not when the same record comes twice within one batch.
    batches.add(t, "c", (10, 0), after={"a": 1, "b": "x"})
    batches.add(t, "c", (11, 0), after={"a": 1, "b": "x"})
    batches.add(t, "c", (12, 0), after={"a": 2, "b": "y"})
    batches.add(t, "c", (12, 0), after={"a": 2, "b": "y"})
    batches.add(t, "d", (13, 0), before={"a": 1, "b": "x"})
    second = batches.frame().localCheckpoint()
    batches.apply(1, second)
    expected = Counter({(1, "x"): 1, (2, "y"): 1})
    assert batches.multiset("public", "full_dups") == expected
    path = batches.config.table_path("public", "full_dups")
    assert _merges(spark, path) == 2
    # A micro-batch replayed by a restarted driver (same batch id) changes nothing.
    batches.apply(1, second, restarted=True)
    assert batches.multiset("public", "full_dups") == expected
    assert _merges(spark, path) == 2
    # A batch of nothing but resends is no MERGE at all.
    batches.add(t, "d", (13, 0), before={"a": 1, "b": "x"})
    batches.apply(2)
    assert batches.multiset("public", "full_dups") == expected
    assert _merges(spark, path) == 2


def test_multiset_position_kept_by_an_older_job_is_read_once_and_moves_into_the_log(
    batches: Batches, spark: Any
) -> None:
    """Jobs before positions moved into each table's commits kept them in
    ``_pgbridge_positions``: a job taking over such a table must not count resends again."""
    t = FULL_DUPS
    batches.add(t, "c", (10, 0), after={"a": 1, "b": "x"})
    batches.apply(0)
    path = batches.config.table_path("public", "full_dups")
    # The table as an older job left it: rows, no position in its log; the position beside it.
    rows = spark.read.format("delta").load(path).localCheckpoint()
    shutil.rmtree(path)
    rows.write.format("delta").save(path)
    spark.createDataFrame(
        [(path, 10, 0, 0)], "table_path string, commit_lsn long, seq long, batch_id long"
    ).write.format("delta").save(batches.config.positions_path)
    assert read_fences(spark, path).partitions == {}
    batches.add(t, "c", (10, 0), after={"a": 1, "b": "x"})  # resent
    batches.add(t, "c", (11, 0), after={"a": 2, "b": "y"})
    batches.apply(1, restarted=True)
    assert batches.multiset("public", "full_dups") == Counter({(1, "x"): 1, (2, "y"): 1})
    assert read_fences(spark, path).partitions == {0: (11, 0)}


@BOTH_WRITERS
def test_multiset_truncate_removes_older_rows(batches: Batches) -> None:
    t = FULL_DUPS
    batches.add(t, "c", (10, 0), after={"a": 1, "b": "x"})
    batches.apply(0)
    batches.add(t, "c", (11, 0), after={"a": 1, "b": "x"})
    batches.add(t, "t", (12, 0))
    batches.add(t, "c", (13, 0), after={"a": 1, "b": "x"})
    batches.add(t, "c", (13, 1), after={"a": 2, "b": None})
    assert batches.apply(1).stats.last_write["public.full_dups"] == ("multiset", batches.writer)
    assert batches.multiset("public", "full_dups") == Counter({(1, "x"): 1, (2, None): 1})


def test_zero_column_table_counts_rows(batches: Batches, spark: Any) -> None:
    empty = TableVersion(PREFIX, "public", "empty_t", [], key=[])
    path = batches.config.table_path("public", "empty_t")
    batches.add(empty, "c", (10, 0), after={})
    batches.add(empty, "c", (10, 1), after={})
    batches.apply(0)
    batches.add(empty, "c", (11, 0), after={})
    batches.apply(1)
    df = spark.read.format("delta").load(path)
    assert df.count() == 3
    assert all(c.startswith("_pgbridge_") for c in df.columns)
    batches.add(empty, "d", (12, 0), before={})  # one of three identical (empty) rows
    batches.apply(2)
    assert spark.read.format("delta").load(path).count() == 2


def test_keyless_small_batches_are_applied_by_delta_rs_and_spark_takes_what_it_cannot(
    batches: Batches,
) -> None:
    """A keyless table's small batch is applied in the driver by delta-rs, as a keyed table's
    is (milliseconds, not a dozen Spark jobs); either writer continues from the position the
    other committed; an image with a NaN (which Spark's ``<=>`` matches) is left to Spark."""
    import dataclasses

    t, label = FULL_DUPS, "public.full_dups"
    batches.add(t, "c", (10, 0), after={"a": 1, "b": "x"})
    batches.add(t, "c", (10, 1), after={"a": 1, "b": "x"})
    assert batches.apply(0).stats.last_write[label] == ("multiset", "driver")
    # Over the row bound: Spark's MERGE; then delta-rs again, from the position Spark committed.
    batches.config = dataclasses.replace(batches.config, driver_write_rows=1)
    update = {"before": {"a": 1, "b": "x"}, "after": {"a": 1, "b": "y"}}
    batches.add(t, "u", (11, 0), **update)
    batches.add(t, "c", (11, 1), after={"a": 3, "b": None})
    assert batches.apply(1, restarted=True).stats.last_write[label] == ("multiset", "spark")
    batches.config = dataclasses.replace(batches.config, driver_write_rows=1000)
    batches.add(t, "u", (11, 0), **update)  # resent: Spark applied it
    batches.add(t, "d", (12, 0), before={"a": 1, "b": "x"})
    batches.add(t, "d", (12, 1), before={"a": 3, "b": None})
    batches.add(t, "c", (12, 2), after={"a": None, "b": None})
    assert batches.apply(2, restarted=True).stats.last_write[label] == ("multiset", "driver")
    assert batches.multiset("public", "full_dups") == Counter({(1, "y"): 1, (None, None): 1})

    floats = TableVersion(PREFIX, "public", "floats", [col("f", ["null", "double"])], key=[])
    batches.add(floats, "c", (20, 0), after={"f": 1.5})
    batches.add(floats, "c", (20, 1), after={"f": float("nan")})
    batches.add(floats, "c", (20, 2), after={"f": float("nan")})
    batches.apply(3)  # inserts only: appended, nothing compared
    batches.add(floats, "d", (21, 0), before={"f": float("nan")})
    assert batches.apply(4).stats.last_write["public.floats"] == ("multiset", "spark")
    left = [r["f"] for r in batches.rows("public", "floats")]
    assert sorted(left, key=str) == [1.5, pytest.approx(float("nan"), nan_ok=True)]


@BOTH_WRITERS
def test_keyed_table_matches_null_key_columns_null_safe(batches: Batches) -> None:
    # message.key.columns may name nullable columns: (k1, k2) with k2 NULL is still one row.
    t = TableVersion(
        PREFIX,
        "public",
        "full_keyed",
        [col("k1", OPT_INT), col("k2", OPT_STR), col("v", OPT_STR)],
        key=["k1", "k2"],
    )
    t_key = t.key_schema()
    t_key["fields"] = [col("k1", OPT_INT), col("k2", OPT_STR)]
    t.key_schema = lambda: t_key  # type: ignore[method-assign]
    batches.add(t, "c", (10, 0), after={"k1": 1, "k2": None, "v": "a"})
    batches.add(t, "c", (10, 1), after={"k1": 2, "k2": "b", "v": "a"})
    batches.apply(0)
    batches.add(t, "u", (11, 0), after={"k1": 1, "k2": None, "v": "b"})
    batches.add(t, "d", (12, 0), before={"k1": 2, "k2": "b", "v": None})
    assert batches.apply(1).stats.last_write["public.full_keyed"] == ("merge", batches.writer)
    assert batches.rows("public", "full_keyed") == [{"k1": 1, "k2": None, "v": "b"}]


class HostileVersion(TableVersion):
    """``"Weird Schema"."Mixed.Case-Table"`` as the producer writes it: the topic keeps the
    dot and the dash, the Avro namespace is made of valid names, and the source block names
    the table as PostgreSQL does."""

    @property
    def topic(self) -> str:
        return f"{PREFIX}.Weird_Schema.Mixed.Case-Table"

    def envelope(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        record = super().envelope(*args, **kwargs)
        record["source"]["schema"] = "Weird Schema"
        record["source"]["table"] = "Mixed.Case-Table"
        return record


HOSTILE_COLUMNS = [
    col("Id_Part", "int", "Id Part"),
    col("Id_Part_3b5c1e", OPT_INT, "Id_Part"),
    col("na_ve", OPT_STR, "naïve"),
    col("__", OPT_STR, "日本"),
    col("select", OPT_STR),
]


# The [driver] run writes through Spark as well: delta-rs cannot open the escaped path
# ("Weird%20Schema", docs/known-limits.md), so the driver hands the table to Spark, whose
# statements the [spark] run repeats (kept for `make test-long`).
@SPARK_WRITER_IN_LONG
def test_hostile_names_keep_original_columns_and_get_their_own_path(
    batches: Batches, spark: Any
) -> None:
    v1 = HostileVersion(PREFIX, "Weird_Schema", "Mixed.Case_Table", HOSTILE_COLUMNS, ["Id_Part"])
    row = {"Id_Part": 1, "Id_Part_3b5c1e": 10, "na_ve": "café", "__": "東京", "select": "from"}
    batches.add(v1, "c", (10, 0), after=row)
    batches.add(v1, "c", (10, 1), after={**row, "Id_Part": 2, "na_ve": None})
    batches.apply(0)
    path = batches.config.table_path("Weird Schema", "Mixed.Case-Table")
    assert path.endswith("/delta/Weird%20Schema/Mixed.Case-Table")
    assert Path(path, "_delta_log").is_dir()
    df = spark.read.format("delta").load(path)
    assert df.columns[:5] == ["Id Part", "Id_Part", "naïve", "日本", "select"]
    # A new column with a name Avro cannot hold, in a later schema version.
    v2 = HostileVersion(
        PREFIX,
        "Weird_Schema",
        "Mixed.Case_Table",
        [*HOSTILE_COLUMNS, col("new_col", OPT_STR, "new col")],
        ["Id_Part"],
    )
    batches.add(v2, "u", (11, 0), after={**row, "na_ve": "changed", "new_col": "n"})
    kind, writer = batches.apply(1).stats.last_write["Weird Schema.Mixed.Case-Table"]
    assert (kind, writer) == ("merge", "spark")  # what makes the [spark] run a repeat
    # A path with an escape ("Weird%20Schema"): Spark's to read (delta-rs cannot open it).
    got = sorted(
        batches.rows("Weird Schema", "Mixed.Case-Table", spark_read=True),
        key=lambda r: r["Id Part"],
    )
    assert got == [
        {"Id Part": 1, "Id_Part": 10, "naïve": "changed", "日本": "東京", "select": "from",
         "new col": "n"},
        {"Id Part": 2, "Id_Part": 10, "naïve": None, "日本": "東京", "select": "from",
         "new col": None},
    ]  # fmt: skip


def test_hostile_names_and_a_kept_column_through_the_deletion_vector_merge(
    batches: Batches, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large table (every table, here) with column mapping: the driver's deletion-vector
    MERGE writes its file with the physical names and field ids, and a column the batch does
    not set (dropped in the source, kept in Delta) keeps its value in an updated row."""
    from bridge.spark import driver_merge

    monkeypatch.setattr(driver_merge, "DELETION_VECTORS_MIN_TABLE_BYTES", 0)
    # Hostile column names (a table path with an escape, "Weird%20Schema", delta-rs cannot
    # open: such tables are Spark's, docs/known-limits.md).
    v1 = TableVersion(PREFIX, "public", "hostile", HOSTILE_COLUMNS, ["Id_Part"])
    columns = [*HOSTILE_COLUMNS, col("new_col", OPT_STR, "new col")]
    v2 = TableVersion(PREFIX, "public", "hostile", columns, ["Id_Part"])
    row = {"Id_Part": 1, "Id_Part_3b5c1e": 10, "na_ve": "café", "__": "東京", "select": "from"}
    batches.add(v2, "c", (10, 0), after={**row, "new_col": "kept"})
    batches.add(v2, "c", (10, 1), after={**row, "Id_Part": 2, "new_col": "also"})
    batches.apply(0)
    batches.add(v2, "u", (11, 0), after={**row, "na_ve": "v2", "new_col": "kept2"})
    assert list(batches.apply(1).stats.last_write.values()) == [("merge", DV_WRITER)]
    batches.add(v1, "u", (12, 0), after={**row, "na_ve": "v1, column dropped"})
    batches.add(v1, "d", (12, 1), before={**row, "Id_Part": 2})
    batches.add(v1, "c", (12, 2), after={**row, "Id_Part": 3})
    assert list(batches.apply(2).stats.last_write.values()) == [("merge", DV_WRITER)]
    # Read by Spark: its reader of the driver's deletion vectors under column mapping.
    got = sorted(batches.rows("public", "hostile", spark_read=True), key=lambda r: r["Id Part"])
    assert [(r["Id Part"], r["naïve"], r["new col"], r["日本"]) for r in got] == [
        (1, "v1, column dropped", "kept2", "東京"),
        (3, "café", None, "東京"),
    ]


def test_table_failing_to_merge_is_dead_lettered_and_others_apply(
    batches: Batches, spark: Any
) -> None:
    from pyspark.sql import types as T

    # A Delta table someone else created with a type the changes cannot be written into.
    odd = TableVersion(PREFIX, "public", "odd", [col("id", "int"), col("v", OPT_INT)], ["id"])
    schema = T.StructType(
        [
            T.StructField("id", T.IntegerType()),
            T.StructField("v", T.MapType(T.StringType(), T.StringType())),
        ]
    )
    spark.createDataFrame([], schema).write.format("delta").save(
        batches.config.table_path("public", "odd")
    )
    batches.add(odd, "c", (10, 0), after={"id": 1, "v": 5})
    batches.add(FULL_DUPS, "c", (10, 1), after={"a": 1, "b": "ok"})
    applier = batches.apply(0)
    assert batches.multiset("public", "full_dups") == Counter({(1, "ok"): 1})
    dead = batches.dead()
    assert len(dead) == 1 and dead[0][0] == odd.topic
    assert dead[0][1].startswith(f"{SET_ASIDE}: ")
    assert odd.topic in applier.stats.failed_tables
    assert applier.held_tables.current(spark).keys() == {odd.topic}  # test_set_aside.py


def test_non_table_topics_are_dead_lettered(batches: Batches) -> None:
    batches.add(FULL_DUPS, "c", (10, 0), after={"a": 1, "b": "x"}, topic=f"{PREFIX}.dead_letter")
    batches.apply(0)
    assert batches.dead() == [(f"{PREFIX}.dead_letter", f"topic is not {PREFIX}.<schema>.<table>")]
    assert tf.COMMIT_LSN  # the metadata names stay importable for readers of the tables


def _keyed(name: str) -> TableVersion:
    return TableVersion(PREFIX, "public", name, [col("id", "int"), col("v", OPT_STR)], ["id"])


def _jobs_of(spark: Any, group: str, run: Any) -> int:
    """Spark jobs that ``run()`` started from this thread."""
    sc = spark.sparkContext
    sc.setJobGroup(group, group)
    try:
        run()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return len(sc.statusTracker().getJobIdsForGroup(group))


def test_summary_jobs_do_not_grow_with_the_number_of_tables(batches: Batches, spark: Any) -> None:
    from dataclasses import replace

    from bridge.spark.decode import decode_batch

    def summary_jobs(tables: int, group: str) -> int:
        for t in range(tables):
            batches.add(_keyed(f"many_{t}"), "c", (10, t), after={"id": t, "v": "x"})
        framed = tf.frame(batches.frame())
        applier = BatchApplier(batches.config, batches.schemas)
        decoded = decode_batch(framed, batches.config, batches.schemas, 0)
        assert len(decoded.tables) == tables
        cached = [replace(t, changes=t.changes.persist()) for t in decoded.tables]
        found: dict[str, Any] = {}
        # The first call also fills the tables' caches (Spark's adaptive execution builds each
        # cache in a job of its own, concurrently); the second shows the summary query itself.
        applier._summaries(cached, 0)
        jobs = _jobs_of(spark, group, lambda: found.update(applier._summaries(cached, 0)))
        assert {topic: int(row["n"]) for topic, row in found.items()} == {
            t.topic: 1 for t in decoded.tables
        }
        return jobs

    assert summary_jobs(8, "summary-8") == summary_jobs(2, "summary-2")


def test_a_merging_thread_reads_a_checkpointed_table_without_checksums(
    batches: Batches, spark: Any, tmp_path: Path
) -> None:
    """A table whose latest version has no checksum file (the driver's commits write none) and
    whose log has a checkpoint: Delta reads the checkpoint through the calling thread's active
    session, which a merging thread's JVM peer lacked (found by the apply job's soak: the
    table's records were dead-lettered, DELTA_SPARK_SESSION_NOT_SET)."""
    import threading

    from bridge.spark.merge import small_tables_rewrite

    path = str(tmp_path / "checkpointed")
    spark.sql(f"CREATE TABLE delta.`{path}` (id long) USING delta "
              "TBLPROPERTIES ('delta.checkpointInterval' = '2')")  # fmt: skip
    for i in range(2):
        spark.sql(f"INSERT INTO delta.`{path}` VALUES ({i})")
    log = tmp_path / "checkpointed" / "_delta_log"
    assert list(log.glob("*.checkpoint.parquet"))
    for checksum in set(log.glob("*.crc")) | set(log.glob(".*.crc")):
        checksum.unlink()
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    applier = BatchApplier(batches.config, batches.schemas)
    failures: list[BaseException] = []

    def merging_thread() -> None:
        try:
            with small_tables_rewrite(applier.session(spark), path):
                pass
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=merging_thread)
    thread.start()
    thread.join(120)
    assert not failures, failures


def test_batch_without_dead_letters_writes_no_dead_letter_table(
    batches: Batches, spark: Any
) -> None:
    from delta.tables import DeltaTable

    for t in range(3):
        batches.add(_keyed(f"clean_{t}"), "c", (10, t), after={"id": t, "v": "x"})
    applier = batches.apply(0)
    assert applier.stats.dead_letters == 0
    assert not DeltaTable.isDeltaTable(spark, batches.config.dead_letter_location)
    assert [batches.rows("public", f"clean_{t}") for t in range(3)] == [
        [{"id": t, "v": "x"}] for t in range(3)
    ]


def test_batch_reports_phases_and_commit_to_visible_freshness(batches: Batches) -> None:
    import time

    from prometheus_client import REGISTRY

    def sample(name: str, labels: dict[str, str] | None = None) -> float:
        return REGISTRY.get_sample_value(name, labels or {}) or 0.0

    merges_before = sample("pgbridge_apply_batch_phase_seconds_count", {"phase": "merge"})
    observed_before = sample("pgbridge_apply_commit_to_visible_seconds_count")
    committed_ms = int(time.time() * 1000) - 60_000  # committed a minute ago
    table = _keyed("fresh")
    envelope = table.envelope("c", 10, 0, after={"id": 1, "v": "x"}, ts_ms=committed_ms)
    batches.records.append(
        (
            frame_avro(table.key_schema(), {"id": 1}, batches.schemas.id_of(table.key_schema())),
            frame_avro(table.value_schema(), envelope, batches.schemas.id_of(table.value_schema())),
            table.topic,
            0,
        )
    )
    batches.apply(0)
    assert sample("pgbridge_apply_batch_phase_seconds_count", {"phase": "merge"}) == (
        merges_before + 1
    )
    assert sample("pgbridge_apply_commit_to_visible_seconds_count") == observed_before + 1
    freshness = sample("pgbridge_apply_freshness_seconds")
    assert 60 <= freshness < 60 + 120  # the minute since the commit, plus the batch itself


def test_resent_insert_after_its_delete_never_resurrects_the_row(batches: Batches) -> None:
    """A producer resend split across micro-batches: the resent insert comes in one batch and
    the resent delete in the next. No state in between shows the deleted row (each batch runs
    in a new job, so the fences come back from the Delta log)."""
    batches.add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"})
    batches.add(KEYED, "c", (10, 1), after={"id": 2, "v": "b"})
    batches.add(KEYED, "d", (11, 0), before={"id": 1})
    batches.apply(0)
    assert _ids(batches) == {2: "b"}
    batches.add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"})  # resent, batch ends here
    batches.apply(1, restarted=True)
    assert _ids(batches) == {2: "b"}
    batches.add(KEYED, "c", (10, 1), after={"id": 2, "v": "b"})
    batches.add(KEYED, "d", (11, 0), before={"id": 1})
    batches.add(KEYED, "u", (12, 0), after={"id": 2, "v": "b2"})  # new again
    batches.apply(2, restarted=True)
    assert _ids(batches) == {2: "b2"}


# Spark's append in make test: test_a_batch_of_inserts_only_is_appended_without_duplicating_…
@SPARK_WRITER_IN_LONG
def test_first_load_of_a_new_table_is_an_append_equal_to_a_merge(
    batches: Batches, spark: Any
) -> None:
    """A table created by the batch is empty: its rows are appended (no join with the target),
    with what a MERGE would leave (last change per key, deletes dropped, unchanged TOAST
    null); a replay after a restart appends nothing twice; the next batch MERGEs."""
    from delta.tables import DeltaTable

    toasted = TableVersion(
        PREFIX, "public", "toasted", [col("id", "int"), col("v", OPT_STR), col("w", OPT_STR)],
        key=["id"],
    )  # fmt: skip
    batches.add(toasted, "c", (10, 0), after={"id": 1, "v": "a", "w": "x"})
    batches.add(toasted, "u", (10, 1), after={"id": 1, "v": "a2", "w": "x"})
    batches.add(toasted, "c", (10, 2), after={"id": 2, "v": "b", "w": "y"})
    batches.add(toasted, "d", (10, 3), before={"id": 2})
    batches.add(toasted, "d", (10, 4), before={"id": 3})  # a row the table never had
    batches.add(
        toasted, "u", (10, 5), after={"id": 4, "v": "d", "w": "__debezium_unavailable_value"},
        unchanged=["w"],
    )  # fmt: skip
    first = batches.frame().localCheckpoint()
    batches.apply(0, first)
    batches.apply(0, first, restarted=True)  # replayed: Delta skips the append
    path = batches.config.table_path("public", "toasted")
    rows = {r["id"]: (r["v"], r["w"]) for r in batches.rows("public", "toasted")}
    assert rows == {1: ("a2", "x"), 4: ("d", None)}
    batches.add(toasted, "u", (11, 0), after={"id": 1, "v": "a3", "w": "x"})
    batches.apply(1)
    rows = {r["id"]: (r["v"], r["w"]) for r in batches.rows("public", "toasted")}
    assert rows == {1: ("a3", "x"), 4: ("d", None)}
    operations = [
        r["operation"]
        for r in DeltaTable.forPath(spark, path).history().orderBy("version").collect()
    ]
    # delta-rs rewrites a table this small with the MERGE's result (bridge.spark.driver_rewrite)
    merged = "MERGE" if batches.writer == "spark" else "WRITE"
    assert operations == ["CREATE TABLE", "WRITE", merged]


def _last_merge_metrics(spark: Any, path: str) -> dict[str, str]:
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, path).history().where("operation = 'MERGE'")
    return dict(history.orderBy("version", ascending=False).first()["operationMetrics"])


@pytest.mark.parametrize("batches", ["spark"], indirect=True)
@pytest.mark.parametrize("large", [False, True], ids=["small table", "large table"])
def test_small_tables_rewrite_files_and_large_ones_write_deletion_vectors(
    batches: Batches, spark: Any, monkeypatch: pytest.MonkeyPatch, large: bool
) -> None:
    """A MERGE into a small table rewrites the file it touches (a deletion vector costs more
    Spark jobs than rewriting a few kB); a large table's MERGE marks the changed rows with a
    deletion vector instead of rewriting its files. The rows are the same either way."""
    from bridge.spark import merge

    if large:  # every table counts as large
        monkeypatch.setattr(merge, "DELETION_VECTORS_MIN_TABLE_BYTES", 0)
    for key in range(1, 4):
        batches.add(KEYED, "c", (10, key), after={"id": key, "v": "a"})
    batches.apply(0)  # the first load: an append
    batches.add(KEYED, "u", (11, 0), after={"id": 2, "v": "b"})
    batches.add(KEYED, "d", (11, 1), before={"id": 3})
    batches.apply(1)
    assert _ids(batches) == {1: "a", 2: "b"}
    metrics = _last_merge_metrics(spark, batches.config.table_path("public", "keyed"))
    assert metrics["numTargetRowsUpdated"] == "1" and metrics["numTargetRowsDeleted"] == "1"
    if large:
        assert int(metrics["numTargetDeletionVectorsAdded"]) >= 1
    else:
        assert metrics["numTargetDeletionVectorsAdded"] == "0"
        assert int(metrics["numTargetFilesRemoved"]) >= 1


def test_small_batches_of_small_tables_are_written_by_delta_rs_in_the_driver(
    batches: Batches, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default a small table's batch is written by delta-rs in the driver (milliseconds,
    not Spark jobs); a batch over ``driver_write_rows`` and a table large enough for deletion
    vectors are Spark's. Delta's log holds what Spark's writes would: the batch's fences and
    transaction, so a restarted job recognises what was applied, whichever writer wrote it."""
    import dataclasses

    from deltalake import DeltaTable

    from bridge.spark import driver_merge

    path = batches.config.table_path("public", "keyed")
    for key in range(1, 4):
        batches.add(KEYED, "c", (10, key), after={"id": key, "v": "a"})
    assert batches.apply(0).stats.last_write["public.keyed"] == ("append", "driver")
    batches.add(KEYED, "u", (11, 0), after={"id": 2, "v": "b"})
    batches.add(KEYED, "d", (11, 1), before={"id": 3})
    assert batches.apply(1).stats.last_write["public.keyed"] == ("merge", "driver")
    assert _ids(batches) == {1: "a", 2: "b"}
    assert read_fences(spark, path).partitions == {0: (11, 1)}
    # Past the row bound: Spark.
    batches.config = dataclasses.replace(batches.config, driver_write_rows=1)
    batches.add(KEYED, "u", (12, 0), after={"id": 1, "v": "c"})
    batches.add(KEYED, "u", (12, 1), after={"id": 2, "v": "c"})
    assert batches.apply(2, restarted=True).stats.last_write["public.keyed"] == ("merge", "spark")
    # A large table: its changed rows are marked deleted with deletion vectors, still in the
    # driver (bridge.spark.driver_dv_merge), not rewritten.
    batches.config = dataclasses.replace(batches.config, driver_write_rows=1000)
    monkeypatch.setattr(driver_merge, "DELETION_VECTORS_MIN_TABLE_BYTES", 0)
    batches.add(KEYED, "u", (13, 0), after={"id": 1, "v": "d"})
    third = batches.frame().localCheckpoint()
    applier = batches.apply(3, third, restarted=True)
    assert applier.stats.last_write["public.keyed"] == ("merge", DV_WRITER)
    assert _deletion_vectors(path) == 1
    monkeypatch.undo()
    # A replay of batch 3 after a restart writes nothing, with delta-rs back in charge.
    applier = batches.apply(3, third, restarted=True)
    assert applier.stats.last_write["public.keyed"] == ("replay", "")
    batches.add(KEYED, "u", (14, 0), after={"id": 2, "v": "e"})
    assert batches.apply(4).stats.last_write["public.keyed"] == ("merge", "driver")
    assert _ids(batches) == {1: "d", 2: "e"}
    # Someone deletes a row with Delta's DELETE, which leaves a deletion vector. The running
    # job's kept table reads that commit (by its version number: bridge.spark.logged_table)
    # before it writes, and so does a restarted job's; the rewrite reads the table through
    # the vector. Either way the deleted row stays deleted.
    batches.add(KEYED, "c", (15, 0), after={"id": 3, "v": "f"})
    batches.add(KEYED, "c", (15, 1), after={"id": 4, "v": "g"})
    batches.apply(5)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 1")
    assert _deletion_vectors(path) > 0
    batches.add(KEYED, "u", (16, 0), after={"id": 2, "v": "h"})
    assert batches.apply(6).stats.last_write["public.keyed"] == ("merge", "driver")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 3")
    assert _deletion_vectors(path) > 0
    batches.add(KEYED, "u", (17, 0), after={"id": 4, "v": "i"})
    assert batches.apply(7, restarted=True).stats.last_write["public.keyed"] == (
        "merge",
        "driver",
    )
    assert sorted((r["id"], r["v"]) for r in batches.rows("public", "keyed")) == [
        (2, "h"),
        (4, "i"),
    ]
    assert _deletion_vectors(path) == 0  # rewritten: one file again
    assert DeltaTable(path).history(1)[0]["operation"] == "WRITE"  # bridge.spark.driver_rewrite


def test_a_restarted_job_takes_its_tables_over_from_their_logs_without_spark(
    batches: Batches, spark: Any
) -> None:
    """A job restarted over tables an earlier run wrote knows them from their Delta logs
    (bridge.spark.adoption): its first batch decodes them in the driver and writes them by
    delta-rs, as the running job did, with the fences Spark reads from the same log, so a
    replay of the batch after another restart writes nothing and resends stay fenced. A table
    with a change left half done (a pending backfill) is not taken over: Spark's path
    finishes it (test_backfill_interrupted_after_the_column_was_added_is_finished_at_the_restart
    checks that it does)."""
    from deltalake import DeltaTable

    from bridge.spark.adoption import adopt_table
    from bridge.spark.fences import logged_fences
    from bridge.spark.merge import _set_pending_backfill

    path = batches.config.table_path("public", "keyed")
    for key in range(1, 4):
        batches.add(KEYED, "c", (10, key), after={"id": key, "v": "a"})
    batches.add(FULL_DUPS, "c", (10, 5), after={"a": 1, "b": "x"})
    batches.apply(0)
    assert logged_fences(DeltaTable(path)) == read_fences(spark, path)
    batches.add(KEYED, "u", (11, 0), after={"id": 2, "v": "b"})
    batches.add(KEYED, "d", (11, 1), before={"id": 3})
    batches.add(KEYED, "c", (10, 1), after={"id": 1, "v": "resent"})  # at or below the fence
    batches.add(FULL_DUPS, "c", (11, 2), after={"a": 1, "b": "x"})
    second = batches.frame().localCheckpoint()
    applier = batches.apply(1, second, restarted=True)
    assert applier.stats.driver_decoded == 2  # both tables, in the batch after the start
    assert applier.stats.last_write["public.keyed"] == ("merge", "driver")
    assert applier.stats.last_write["public.full_dups"] == ("multiset", "driver")
    assert _ids(batches) == {1: "a", 2: "b"}
    assert batches.multiset("public", "full_dups") == Counter({(1, "x"): 2})
    assert logged_fences(DeltaTable(path)) == read_fences(spark, path)
    applier = batches.apply(1, second, restarted=True)  # the same batch again, after a crash
    assert applier.stats.last_write["public.keyed"] == ("replay", "")
    assert _ids(batches) == {1: "a", 2: "b"}
    assert batches.multiset("public", "full_dups") == Counter({(1, "x"): 2})
    assert adopt_table(path) is not None
    _set_pending_backfill(spark, path, {"n": "x"})
    assert adopt_table(path) is None
    assert adopt_table(str(Path(path).parent / "absent")) is None


def test_a_new_table_is_created_by_its_first_commit_as_spark_creates_one(
    batches: Batches, spark: Any
) -> None:
    """A new table whose first batch the driver writes is created by the job's own first
    commit (bridge.spark.table_creation: milliseconds, where Spark's CREATE took 0.2-0.4 s):
    the protocol, properties and column mapping Spark's CREATE gives the same columns, and
    Spark then reads, MERGEs and evolves it as one of its own."""
    import dataclasses

    from pyspark.sql import types as T

    from bridge.spark.merge import ensure_table

    batches.add(KEYED, "c", (10, 1), after={"id": 1, "v": "a"})
    batches.add(KEYED, "c", (10, 2), after={"id": 2, "v": "b"})
    applier = batches.apply(0)
    assert applier.stats.driver_decoded == 1
    assert applier.stats.last_write["public.keyed"] == ("append", "driver")
    path = batches.config.table_path("public", "keyed")
    ours = {k: v for a in _log_actions(path)[:3] for k, v in a.items()}
    assert ours["commitInfo"]["operation"] == "CREATE TABLE"
    assert ours["commitInfo"]["engineInfo"] == "pgbridge"
    beside = str(Path(path).parent / "by_spark")
    columns = T.StructType(
        [T.StructField("id", T.IntegerType()), T.StructField("v", T.StringType())]
    )
    ensure_table(spark, beside, columns, ["id"], KEYED.topic,
                 properties={"delta.enableDeletionVectors": "true"})  # fmt: skip
    spark_made = {k: v for a in _log_actions(beside) for k, v in a.items()}
    assert ours["protocol"] == spark_made["protocol"]
    assert ours["metaData"]["configuration"] == spark_made["metaData"]["configuration"]

    def logical(metadata: dict[str, Any]) -> list[tuple[Any, ...]]:
        fields = json.loads(metadata["schemaString"])["fields"]
        return [(f["name"], f["type"], f["nullable"], f["metadata"]["delta.columnMapping.id"])
                for f in fields]  # fmt: skip

    assert logical(ours["metaData"]) == logical(spark_made["metaData"])
    # Spark's own MERGE (a batch over the driver's bound), then a column added by Spark.
    batches.config = dataclasses.replace(batches.config, driver_write_rows=1)
    batches.add(KEYED, "u", (11, 0), after={"id": 1, "v": "c"})
    batches.add(KEYED, "d", (11, 1), before={"id": 2})
    assert batches.apply(1, restarted=True).stats.last_write["public.keyed"] == ("merge", "spark")
    added = [col("id", "int"), col("v", OPT_STR), col("w", OPT_INT)]
    wider = TableVersion(PREFIX, "public", "keyed", added, key=["id"])
    batches.add(wider, "c", (12, 0), after={"id": 3, "v": "d", "w": 7})
    batches.apply(2)
    assert sorted(batches.rows("public", "keyed"), key=lambda r: r["id"]) == [
        {"id": 1, "v": "c", "w": None},
        {"id": 3, "v": "d", "w": 7},
    ]


def test_a_large_tables_batches_are_merged_with_deletion_vectors_in_the_driver(
    batches: Batches, spark: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A table too large to rewrite what a MERGE touches takes its batches' changes as
    deletion vectors and one new file per batch, written by the driver: Spark reads the rows
    merge_changes gives (updates, deletes, resends, a key deleted then inserted again), past
    a checkpoint and the job's compaction (Spark's OPTIMIZE between two such commits); a
    batch with a truncate is Spark's and the next batch comes back; a replay after a restart
    writes nothing; a table without deletion vectors is Spark's."""
    import dataclasses

    from bridge.spark import driver_merge, merge

    monkeypatch.setattr(driver_merge, "DELETION_VECTORS_MIN_TABLE_BYTES", 0)
    monkeypatch.setattr(merge, "COMPACT_AT_FILES", 6)
    path = batches.config.table_path("public", "keyed")
    expected: dict[int, Any] = {}
    for key in range(1, 21):
        batches.add(KEYED, "c", (10, key), after={"id": key, "v": "a"})
        expected[key] = "a"
    batches.apply(0)
    writers = []
    for batch in range(1, 14):
        lsn = 100 + batch
        batches.add(KEYED, "u", (lsn, 0), after={"id": batch, "v": f"u{batch}"})
        batches.add(KEYED, "d", (lsn, 1), before={"id": 21 - batch})
        batches.add(KEYED, "c", (lsn, 2), after={"id": 100 + batch, "v": f"c{batch}"})
        batches.add(KEYED, "u", (10, 9), after={"id": 20, "v": "stale"})  # older than id 20's
        expected.update({batch: f"u{batch}", 100 + batch: f"c{batch}"})
        expected.pop(21 - batch, None)
        if batch == 12:  # deleted two batches ago (id 21 - 10 = 11): inserted again
            batches.add(KEYED, "c", (lsn, 3), after={"id": 11, "v": "again"})
            expected[11] = "again"
        writers.append(batches.apply(batch).stats.last_write["public.keyed"])
    assert set(writers) == {("merge", DV_WRITER)}, writers
    assert _ids(batches) == expected
    assert (Path(path) / "_delta_log" / "_last_checkpoint").exists()
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("operation").collect()
    assert "OPTIMIZE" in [r["operation"] for r in history]
    # A truncate: Spark's MERGE (it deletes every older row); the next batch is the driver's.
    batches.add(KEYED, "t", (200, 0))
    batches.add(KEYED, "c", (200, 1), after={"id": 1, "v": "after truncate"})
    assert batches.apply(14).stats.last_write["public.keyed"] == ("merge", "spark")
    batches.add(KEYED, "u", (201, 0), after={"id": 1, "v": "one"})
    last = batches.frame().localCheckpoint()
    assert batches.apply(15, last).stats.last_write["public.keyed"] == ("merge", DV_WRITER)
    assert _ids(batches) == {1: "one"}
    assert read_fences(spark, path).partitions == {0: (201, 0)}
    assert batches.apply(15, last, restarted=True).stats.last_write["public.keyed"] == (
        "replay",
        "",
    )
    # Tables created without deletion vectors keep Spark's MERGE.
    plain = Batches(spark, tmp_path / "plain")
    plain.config = dataclasses.replace(plain.config, deletion_vectors=False)
    plain.add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"})
    plain.apply(0)
    plain.add(KEYED, "u", (11, 0), after={"id": 1, "v": "b"})
    assert plain.apply(1).stats.last_write["public.keyed"] == ("merge", "spark")
    assert _ids(plain) == {1: "b"}


def test_a_text_keyed_tables_files_carry_key_statistics_spark_skips_by_and_reads_right(
    batches: Batches, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Text keys through the driver's deletion-vector MERGE: the files it writes carry the
    key's minimum (a 32-character prefix) and its maximum (whole); Spark's reads, filtered by
    key (which skip files by those statistics) and whole, give the merged rows. A file
    Delta-Spark writes (its maximum of a long key truncated, with a tie-breaker) is read by
    the next MERGE of a key it holds."""
    from bridge.spark import driver_merge

    monkeypatch.setattr(driver_merge, "DELETION_VECTORS_MIN_TABLE_BYTES", 0)
    text_keyed = TableVersion(PREFIX, "public", "coded", [col("code", "string"),
                              col("v", OPT_STR)], ["code"])  # fmt: skip
    long = "x" * 40
    codes = ["a-001", "b-002", "é-003", f"{long}-004", "z-005"]
    for n, code in enumerate(codes):
        batches.add(text_keyed, "c", (10, n), after={"code": code, "v": "first"})
    batches.apply(0)
    expected = dict.fromkeys(codes, "first")
    changes = [("b-002", "u"), (f"{long}-004", "u"), ("a-001", "d"), ("é-003", "u"),
               (f"{long}-004", "d")]  # fmt: skip
    for batch, (code, op) in enumerate(changes, start=1):
        if op == "u":
            batches.add(text_keyed, "u", (100 + batch, 0), after={"code": code, "v": f"v{batch}"})
            expected[code] = f"v{batch}"
        else:
            batches.add(text_keyed, "d", (100 + batch, 0), before={"code": code})
            del expected[code]
        assert batches.apply(batch).stats.last_write["public.coded"] == ("merge", DV_WRITER)
    path = batches.config.table_path("public", "coded")
    frame = spark.read.format("delta").load(path)
    assert {r["code"]: r["v"] for r in frame.collect()} == expected
    for code in codes:
        got = [r["v"] for r in frame.where(frame["code"] == code).collect()]
        assert got == ([expected[code]] if code in expected else []), code
    actions = _log_actions(path)
    schema = json.loads([a for a in actions if "metaData" in a][-1]["metaData"]["schemaString"])
    field = next(f for f in schema["fields"] if f["name"] == "code")
    code = field["metadata"].get("delta.columnMapping.physicalName", "code")
    stats = [json.loads(a["add"]["stats"]) for a in actions if "add" in a]
    # Each batch's one new row, as first added (a vector added later re-adds the file).
    written = [s for s in stats if s["numRecords"] == 1 and s["tightBounds"]]
    assert sorted(s["minValues"][code] for s in written) == ["b-002", "x" * 32, "é-003"]
    assert sorted(s["maxValues"][code] for s in written) == ["b-002", f"{long}-004", "é-003"]

    # Delta-Spark appends a long key (as another writer of the table would); the driver's
    # next MERGE of that key reads Spark's file by its truncated maximum and replaces the row.
    frame = spark.read.format("delta").load(path)
    spark_row = {**frame.where(frame["code"] == "b-002").first().asDict(), "code": f"{long}-006"}
    spark.createDataFrame([spark_row], frame.schema).write.format("delta").mode("append").save(path)
    truncated = json.loads([a for a in _log_actions(path) if "add" in a][-1]["add"]["stats"])
    assert truncated["maxValues"][code] != f"{long}-006"  # Delta-Spark's own truncated form
    batches.add(text_keyed, "u", (200, 0), after={"code": f"{long}-006", "v": "by the driver"})
    assert batches.apply(10).stats.last_write["public.coded"] == ("merge", DV_WRITER)
    expected[f"{long}-006"] = "by the driver"
    frame = spark.read.format("delta").load(path)
    assert {r["code"]: r["v"] for r in frame.collect()} == expected
    assert frame.count() == len(expected)


def _log_actions(path: str) -> list[dict[str, Any]]:
    """Every action of the table's JSON commits, oldest first."""
    log = Path(path) / "_delta_log"
    return [json.loads(line) for commit in sorted(log.glob("*.json"))
            for line in commit.read_text().splitlines() if line]  # fmt: skip


def _deletion_vectors(path: str) -> int:
    """Live files of the Delta table at ``path`` that carry a deletion vector."""
    from deltalake import DeltaTable

    return int(pa.table(DeltaTable(path).deletion_vectors()).num_rows)


def test_a_merge_changing_no_row_still_commits_the_batch_position(
    batches: Batches, spark: Any
) -> None:
    """A batch whose changes are all older than the rows (resent above the fences after a
    restart lost them, say) changes no row: delta-rs makes no commit for that, Spark does; the
    driver writer commits the batch's fences and transaction all the same, so the log's
    position is where the job is."""
    path = batches.config.table_path("public", "keyed")
    batches.add(KEYED, "c", (20, 0), after={"id": 1, "v": "new"})
    batches.apply(0)
    batches.add(KEYED, "u", (10, 0), after={"id": 1, "v": "old"}, partition=1)
    assert batches.apply(1).stats.last_write["public.keyed"] == ("merge", "driver")
    assert _ids(batches) == {1: "new"}
    assert read_fences(spark, path).offsets == {0: 0, 1: 0}


@BOTH_WRITERS
def test_truncate_is_not_overtaken_by_a_late_change_from_another_partition(
    batches: Batches,
) -> None:
    """The truncate (partition 0) is applied first; a change committed before it arrives later
    from partition 1. It must not bring a row back; changes after the truncate apply."""
    batches.add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"}, partition=1)
    batches.apply(0)
    batches.add(KEYED, "t", (20, 0), partition=0)
    batches.apply(1)
    assert _ids(batches) == {}
    batches.add(KEYED, "c", (15, 0), after={"id": 3, "v": "late"}, partition=1)
    batches.add(KEYED, "u", (15, 1), after={"id": 1, "v": "late"}, partition=1)
    batches.add(KEYED, "c", (21, 0), after={"id": 4, "v": "new"}, partition=1)
    batches.apply(2)
    assert _ids(batches) == {4: "new"}


def test_changes_of_a_partition_behind_another_still_apply(batches: Batches) -> None:
    """Fences are per partition: a partition that lags (lower positions than another's) is not
    taken for resends, and snapshot rows copied again after a resume still apply."""
    batches.add(KEYED, "r", (5, 1), after={"id": 10, "v": "copied"}, partition=0)
    batches.add(KEYED, "c", (30, 0), after={"id": 1, "v": "a"}, partition=0)
    batches.apply(0)
    batches.add(KEYED, "c", (20, 0), after={"id": 2, "v": "b"}, partition=1)
    batches.add(KEYED, "r", (5, 0), after={"id": 11, "v": "copied again"}, partition=0)
    batches.apply(1)
    assert _ids(batches) == {10: "copied", 1: "a", 2: "b", 11: "copied again"}


def test_table_creation_killed_half_way_is_created_at_the_restart(batches: Batches) -> None:
    """A job killed while creating a table leaves ``_delta_log`` without a commit (seen when
    the Delta e2e kill landed there); Delta then refuses to create a table at that location, so
    the restarted job failed at every batch. It must create the tables and go on."""
    for path in (
        batches.config.table_path("public", "keyed"),
        batches.config.table_path("public", "full_dups"),
        batches.config.positions_path,
    ):
        (Path(path) / "_delta_log" / "_staged_commits").mkdir(parents=True)
    batches.add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"})
    batches.add(FULL_DUPS, "c", (10, 1), after={"a": 1, "b": "x"})
    applier = batches.apply(0)
    assert applier.stats.dead_letters == 0
    assert _ids(batches) == {1: "a"}
    assert batches.multiset("public", "full_dups") == Counter({(1, "x"): 1})


def test_snapshot_reads_at_the_floor_are_an_insert_only_merge(batches: Batches, spark: Any) -> None:
    """A snapshot topic longer than a batch: its first batch is the table's first load (an
    append), which sets the floor to the snapshot's LSN; the later batches' reads at that LSN,
    a resend among them, can only add rows: the insert-only MERGE. A read above the floor (a
    later snapshot) may be newer than a row: the full MERGE, and it wins over an older row."""
    batches.add(KEYED, "r", (5, 0), after={"id": 1, "v": "a"})
    batches.add(KEYED, "r", (5, 1), after={"id": 2, "v": "b"})
    batches.apply(0)  # the first load: an append
    batches.add(KEYED, "r", (5, 1), after={"id": 2, "v": "b"})  # resent
    batches.add(KEYED, "r", (5, 2), after={"id": 3, "v": "c"})
    batches.add(KEYED, "c", (6, 0), after={"id": 4, "v": "d"})
    assert _last_write(batches.apply(1)) == "insert-only merge"
    assert _ids(batches) == {1: "a", 2: "b", 3: "c", 4: "d"}
    batches.add(KEYED, "u", (7, 0), after={"id": 1, "v": "a7"})
    batches.apply(2)
    batches.add(KEYED, "r", (9, 0), after={"id": 2, "v": "b9"})  # a later snapshot's read
    batches.add(KEYED, "r", (5, 0), after={"id": 1, "v": "a"})  # older than id 1's row
    assert _last_write(batches.apply(3)) == "merge"
    assert _ids(batches) == {1: "a7", 2: "b9", 3: "c", 4: "d"}


@BOTH_WRITERS
def test_a_batch_of_inserts_only_is_appended_without_duplicating_resends(
    batches: Batches, spark: Any
) -> None:
    inserts_only_scenario(batches)


def inserts_only_scenario(batches: Batches) -> None:
    """Inserts above the fences cannot find their key in the table: the batch is appended (no
    join with the table). A resend of an applied insert (at or below its partition's fence) and
    a record delivered twice in one batch are each applied once; a batch with an update takes
    the MERGE again."""
    batches.add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"})
    batches.apply(0)  # the first load: an append
    batches.add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"})  # resent
    batches.add(KEYED, "c", (11, 0), after={"id": 2, "v": "b"})
    batches.add(KEYED, "c", (11, 0), after={"id": 2, "v": "b"})  # delivered twice
    batches.add(KEYED, "c", (11, 1), after={"id": 3, "v": "c"}, partition=1)
    appended_by(batches.apply(1), batches)
    assert sorted(r["id"] for r in batches.rows("public", "keyed")) == [1, 2, 3]
    batches.add(KEYED, "u", (12, 0), after={"id": 2, "v": "b2"})
    batches.add(KEYED, "c", (12, 1), after={"id": 4, "v": "d"})
    assert _last_write(batches.apply(2)) == "merge"
    # A restarted job reads the fences back from the log: the resend is still recognised.
    batches.add(KEYED, "c", (11, 1), after={"id": 3, "v": "c"}, partition=1)  # resent
    batches.add(KEYED, "c", (13, 0), after={"id": 5, "v": "e"})
    assert _last_write(batches.apply(3, restarted=True)) == "append"
    assert sorted(r["id"] for r in batches.rows("public", "keyed")) == [1, 2, 3, 4, 5]
    assert _ids(batches) == {1: "a", 2: "b2", 3: "c", 4: "d", 5: "e"}


# Spark's append in make test: test_a_batch_of_inserts_only_is_appended_without_duplicating_…
@SPARK_WRITER_IN_LONG
def test_a_snapshot_longer_than_a_batch_is_appended_until_a_resumed_attempt(
    batches: Batches, spark: Any
) -> None:
    snapshot_longer_than_a_batch_scenario(batches)


def snapshot_longer_than_a_batch_scenario(batches: Batches) -> None:
    """The rows of a snapshot's first attempt are copied once each: batch after batch they are
    appended. A resumed attempt may repeat rows an interrupted chunk delivered: the
    insert-only MERGE keeps one of each. Once a streamed change is applied, reads take the
    MERGE too."""
    from bridge.snapshot.plan import position

    def read(run: int, chunk: int, row: int, key: int) -> None:
        batches.add(KEYED, "r", (5, position(run, chunk, row)), after={"id": key, "v": "s"})

    read(0, 0, 0, 1)
    read(0, 0, 1, 2)
    batches.apply(0)  # the first load
    read(0, 1, 0, 3)  # chunk 1 interrupted after its first row
    read(0, 2, 0, 4)
    appended_by(batches.apply(1), batches)
    read(1, 1, 0, 3)  # the resumed attempt copies chunk 1 again
    read(1, 1, 1, 5)
    assert _last_write(batches.apply(2)) == "insert-only merge"
    no_unnamed_lane_files(batches)  # the lane wrote this batch's rows, then refused it
    assert sorted(r["id"] for r in batches.rows("public", "keyed")) == [1, 2, 3, 4, 5]
    # A new job (fences from the log) after a streamed insert: reads are not appended.
    batches.add(KEYED, "c", (6, 0), after={"id": 6, "v": "c"})
    batches.apply(3)
    read(0, 3, 0, 2)  # not a realistic first attempt any more: it must not duplicate id 2
    assert _last_write(batches.apply(4, restarted=True)) != "append"
    assert sorted(r["id"] for r in batches.rows("public", "keyed")) == [1, 2, 3, 4, 5, 6]


def test_inserts_into_a_table_without_a_floor_are_an_insert_only_merge(
    batches: Batches, spark: Any
) -> None:
    """A table whose fences do not go back to its first load (written by a job before floors):
    an insert may meet a resend the fences cannot recognise, so inserts take Delta's
    insert-only MERGE (an anti join), and a resend stays one row."""
    from bridge.spark.fences import Fences

    batches.add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"})
    batches.apply(0)
    path = batches.config.table_path("public", "keyed")
    older = Fences({5: (1, 0)}).to_metadata()  # fences without a floor
    spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", older)
    try:
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('written.by' = 'an older job')")
    finally:
        spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")
    batches.add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"})  # resent
    batches.add(KEYED, "c", (11, 0), after={"id": 2, "v": "b"})
    assert _last_write(batches.apply(1, restarted=True)) == "insert-only merge"
    assert sorted(r["id"] for r in batches.rows("public", "keyed")) == [1, 2]
