"""The driver's MERGE with deletion vectors (bridge.spark.driver_dv_merge) on delta-rs tables:
the rows it leaves, read back through delta-rs's own scan (which applies the vectors), the
bytes of the vectors (Delta-Spark's own, read), the log it replays, and what it refuses or
declines without writing. Spark reading its commits is tested in test_apply_batches."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from bridge.spark import driver_commit, driver_dv_merge
from bridge.spark import transforms as tf
from bridge.spark.deletion_vectors import (
    DeletionVectorError,
    deleted_rows,
    write_deletion_vectors,
    z85_decode,
    z85_encode,
)
from bridge.spark.delta_log import CommitConflict, LogFiles, read_log_files, write_commit
from bridge.spark.driver_dv_merge import BatchDeclined, dv_merge, dv_merge_refusal
from bridge.spark.driver_table import DriverWriteRefused
from bridge.spark.file_columns import file_columns
from bridge.spark.logged_table import LoggedTable
from bridge.spark.merge import MergePlan

PLAN = MergePlan(key_columns=("id",), value_columns=("id", "v"))
_SOURCE = pa.schema(
    [
        ("id", pa.int64()),
        ("v", pa.string()),
        (tf.COMMIT_LSN, pa.int64()),
        (tf.SEQ, pa.int64()),
        (tf.COMMIT_TS, pa.timestamp("us", tz="UTC")),
        (tf.OP, pa.string()),
    ]
)

#: A deletion vector Delta-Spark 4.0 wrote (DELETE of rows 1, 7 and 70000 of one file), the
#: whole DV file, and the descriptor its log gave it.
SPARK_DV_FILE = bytes.fromhex(
    "010000002ed1d339640100000000000000000000003a300000020000000000010001000000180000001c"
    "00000001000700701103a7fc3c"
)
SPARK_DV = {"storageType": "u", "pathOrInlineDv": "N1P&iL-!HWMS)mldHxQK", "offset": 1,
            "sizeInBytes": 46, "cardinality": 3}  # fmt: skip
SPARK_DV_NAME = "deletion_vector_98847c23-9492-4677-975b-4f7d2a096397.bin"


def test_z85_is_zeromqs() -> None:
    assert z85_encode(bytes.fromhex("864FD26FB559F75B")) == "HelloWorld"  # the spec's vector
    assert z85_decode("HelloWorld") == bytes.fromhex("864FD26FB559F75B")


def test_a_vector_delta_spark_wrote_is_read_and_one_written_here_is_byte_for_byte_sparks(
    tmp_path: Path,
) -> None:
    from pyroaring import BitMap

    (tmp_path / SPARK_DV_NAME).write_bytes(SPARK_DV_FILE)
    assert list(deleted_rows(SPARK_DV, tmp_path)) == [1, 7, 70000]
    written = write_deletion_vectors(tmp_path, [BitMap([1, 7, 70000]), BitMap([3])])
    assert written.path.read_bytes()[: len(SPARK_DV_FILE)] == SPARK_DV_FILE
    first, second = written.descriptors
    assert {k: first[k] for k in ("offset", "sizeInBytes", "cardinality")} == {
        "offset": 1, "sizeInBytes": 46, "cardinality": 3}  # fmt: skip
    assert list(deleted_rows(first, tmp_path)) == [1, 7, 70000]
    assert list(deleted_rows(second, tmp_path)) == [3]
    assert deleted_rows(None, tmp_path) == BitMap()


def test_a_damaged_vector_is_an_error_not_a_misread(tmp_path: Path) -> None:
    damaged = bytearray(SPARK_DV_FILE)
    damaged[30] ^= 0xFF
    (tmp_path / SPARK_DV_NAME).write_bytes(bytes(damaged))
    with pytest.raises(DeletionVectorError, match="checksum"):
        deleted_rows(SPARK_DV, tmp_path)
    (tmp_path / SPARK_DV_NAME).write_bytes(SPARK_DV_FILE)
    with pytest.raises(DeletionVectorError, match="the log says 4"):
        deleted_rows({**SPARK_DV, "cardinality": 4}, tmp_path)
    inline = z85_encode(struct.pack("<Iqi", 1681511377, 2, 1))
    with pytest.raises(DeletionVectorError, match="past 2"):
        deleted_rows({"storageType": "i", "pathOrInlineDv": inline, "sizeInBytes": 16,
                      "cardinality": 0}, tmp_path)  # fmt: skip


def test_the_log_is_reconciled_by_path_and_vector_as_delta_spark_writes_it(
    tmp_path: Path,
) -> None:
    """Delta-Spark's DELETE adds the file with its new vector, then removes the old entry of
    the same path: the new one is what stays."""
    log = LogFiles(tmp_path, 0)
    old = {"path": "a.parquet", "size": 1}
    log.apply([{"add": old}])
    new = {**old, "deletionVector": SPARK_DV}
    log.apply([{"add": new}, {"remove": {"path": "a.parquet", "size": 1}}])
    assert list(log.adds.values()) == [new]
    log.apply([{"remove": {"path": "a.parquet", "deletionVector": SPARK_DV}}])
    assert log.adds == {}


def test_a_version_another_writer_took_is_a_conflict_and_nothing_is_left(tmp_path: Path) -> None:
    (tmp_path / "_delta_log").mkdir()
    write_commit(tmp_path, 0, [{"commitInfo": {"who": "first"}}])
    with pytest.raises(CommitConflict):
        write_commit(tmp_path, 0, [{"commitInfo": {"who": "second"}}])
    assert [p.name for p in (tmp_path / "_delta_log").iterdir()] == [f"{0:020d}.json"]
    assert "first" in (tmp_path / "_delta_log" / f"{0:020d}.json").read_text()


def _table(
    path: Path, ids: range, files: int = 1, configuration: dict[str, str] | None = None
) -> Any:
    from deltalake import write_deltalake

    config = {"delta.enableDeletionVectors": "true", **(configuration or {})}
    step = max(1, len(ids) // files)
    for start in range(ids.start, ids.stop, step):
        chunk = range(start, min(start + step, ids.stop))
        rows = {"id": list(chunk), "v": [f"old-{i}" for i in chunk],
                tf.COMMIT_LSN: [10] * len(chunk), tf.SEQ: [0] * len(chunk),
                tf.COMMIT_TS: [None] * len(chunk)}  # fmt: skip
        data = pa.table(rows).cast(_SOURCE.remove(_SOURCE.get_field_index(tf.OP)))
        write_deltalake(str(path), data, mode="append", configuration=config)
    return LoggedTable.open(str(path))


def _batch(*changes: tuple[int, str, int, str]) -> pa.Table:
    """Changes as (id, op, commit_lsn, v): each key's last change, as the driver hands them."""
    return pa.table(
        {
            "id": [c[0] for c in changes],
            "v": [c[3] for c in changes],
            tf.COMMIT_LSN: [c[2] for c in changes],
            tf.SEQ: [0] * len(changes),
            tf.COMMIT_TS: [None] * len(changes),
            tf.OP: [c[1] for c in changes],
        }
    ).cast(_SOURCE)


def _rows(table: Any) -> dict[int, str]:
    table.update_incremental()
    scanned = pa.table(table.scan())
    return dict(zip(scanned.column("id").to_pylist(), scanned.column("v").to_pylist(), strict=True))


def test_updates_deletes_inserts_and_resends_are_applied_as_merge_changes_applies_them(
    tmp_path: Path,
) -> None:
    table = _table(tmp_path, range(100), files=4)
    assert dv_merge_refusal(table) is None
    expected = {i: f"old-{i}" for i in range(100)}
    result = dv_merge(
        table,
        _batch(
            (5, "u", 20, "new-5"),  # newer: replaces the row
            (6, "d", 20, ""),  # newer delete: the row goes, nothing is inserted
            (7, "u", 5, "stale-7"),  # older than the row (a resend): nothing changes
            (8, "d", 5, ""),  # an older delete: the row stays
            (200, "c", 20, "new-200"),  # a new key
            (201, "d", 20, ""),  # a delete of a key the table lacks: nothing
            (202, "r", 5, "read-202"),  # a snapshot read of a new key, however old
        ),
        PLAN, "the-job", 1, '{"fences": 1}',
    )  # fmt: skip
    expected.update({5: "new-5", 200: "new-200", 202: "read-202"})
    del expected[6]
    assert _rows(table) == expected
    assert (result.deleted, result.written) == (2, 3)
    assert table.transaction_version("the-job") == 1
    commit = json.loads(table.history(1)[0]["userMetadata"])
    assert commit == {"fences": 1}
    # The same rows again, as a later batch: the changed row is found in the new file, its
    # vector on the old one is kept and grown.
    dv_merge(table, _batch((5, "u", 30, "newer-5"), (9, "u", 30, "new-9")),
             PLAN, "the-job", 2, None)  # fmt: skip
    expected.update({5: "newer-5", 9: "new-9"})
    assert _rows(table) == expected
    live = read_log_files(tmp_path)
    assert sum(a.get("deletionVector", {}).get("cardinality", 0) for a in live.adds.values()) == 4


def test_later_batches_read_the_files_columns_kept_by_the_driver_with_the_same_result(
    tmp_path: Path,
) -> None:
    """Batches that change rows of files read before (a row marked deleted in a file whose
    columns are kept: its vector is read from the log at each batch), with the driver's
    cache of files' columns and without: the same rows, and the later batches' files read
    from the cache."""
    batches = [
        _batch((5, "u", 20, "b1-5"), (6, "d", 20, ""), (60, "u", 20, "b1-60")),
        _batch((5, "u", 30, "b2-5"), (6, "c", 30, "b2-6"), (60, "u", 15, "stale")),
        _batch((5, "d", 40, ""), (99, "u", 40, "b3-99"), (6, "u", 40, "b3-6")),
    ]
    expected = {i: f"old-{i}" for i in range(100)}
    expected.update({6: "b3-6", 60: "b1-60", 99: "b3-99"})
    del expected[5]
    budget = file_columns.budget_bytes
    outcome = {}
    try:
        for cached in (0, 2**20):
            file_columns.resize(cached)
            table = _table(tmp_path / str(cached), range(100), files=4)
            hits = file_columns.hits
            for number, batch in enumerate(batches, 1):
                dv_merge(table, batch, PLAN, "j", number, None)
            outcome[cached] = (_rows(table), file_columns.hits - hits)
    finally:
        file_columns.resize(budget)
    assert outcome[0] == (expected, 0)
    assert outcome[2**20][0] == expected
    assert outcome[2**20][1] >= 4  # batches 2 and 3: the table's first files, at least


def test_a_column_the_batch_does_not_set_keeps_its_value_in_a_replaced_row(
    tmp_path: Path,
) -> None:
    """A column the table has and the batch lacks (dropped in the source, kept in Delta): an
    update leaves it as it was, as Spark's MERGE's update does; a new row has it null."""
    from deltalake import write_deltalake

    held = _batch((1, "c", 10, "a"), (2, "c", 10, "b")).drop_columns([tf.OP])
    held = held.append_column("kept", pa.array(["k1", "k2"]))
    write_deltalake(str(tmp_path), held, configuration={"delta.enableDeletionVectors": "true"})
    table = LoggedTable.open(str(tmp_path))
    dv_merge(table, _batch((1, "u", 20, "a2"), (3, "c", 20, "c")), PLAN, "j", 1, None)
    table.update_incremental()
    scanned = pa.table(table.scan())
    rows = {r["id"]: (r["v"], r["kept"]) for r in scanned.to_pylist()}
    assert rows == {1: ("a2", "k1"), 2: ("b", "k2"), 3: ("c", None)}


def test_an_insert_only_plan_inserts_what_it_does_not_find_and_touches_nothing_else(
    tmp_path: Path,
) -> None:
    table = _table(tmp_path, range(10))
    plan = MergePlan(key_columns=("id",), value_columns=("id", "v"), inserts_only=True)
    dv_merge(table, _batch((3, "c", 20, "resent"), (30, "c", 20, "new")), plan, "j", 1, None)
    assert _rows(table) == {**{i: f"old-{i}" for i in range(10)}, 30: "new"}


def test_files_whose_key_range_excludes_the_batch_are_not_read(tmp_path: Path) -> None:
    table = _table(tmp_path, range(1000), files=10)
    result = dv_merge(table, _batch((150, "u", 20, "x"), (155, "d", 20, "")), PLAN, "j", 1, None)
    assert (result.files_read, result.files_in_table, result.deleted) == (1, 10 + 1, 2)  # + new


def _text_keyed(path: Path, keys: list[list[str]]) -> Any:
    """A table keyed by text, one delta-rs file per list of ``keys``."""
    from deltalake import write_deltalake

    for chunk in keys:
        rows = {"id": chunk, "v": [f"old-{k}" for k in chunk], tf.COMMIT_LSN: [10] * len(chunk),
                tf.SEQ: [0] * len(chunk), tf.COMMIT_TS: [None] * len(chunk)}  # fmt: skip
        schema = _TEXT_SOURCE.remove(_TEXT_SOURCE.get_field_index(tf.OP))
        write_deltalake(str(path), pa.table(rows).cast(schema), mode="append",
                        configuration={"delta.enableDeletionVectors": "true"})  # fmt: skip
    return LoggedTable.open(str(path))


_TEXT_SOURCE = _SOURCE.set(0, pa.field("id", pa.string()))


def _text_batch(*changes: tuple[str, str, str], lsn: int = 20) -> pa.Table:
    """Changes as (id, op, v) at commit LSN ``lsn``."""
    return pa.table(
        {"id": [c[0] for c in changes], "v": [c[2] for c in changes],
         tf.COMMIT_LSN: [lsn] * len(changes), tf.SEQ: [0] * len(changes),
         tf.COMMIT_TS: [None] * len(changes), tf.OP: [c[1] for c in changes]}
    ).cast(_TEXT_SOURCE)  # fmt: skip


def test_files_whose_text_key_range_excludes_the_batch_are_not_read(tmp_path: Path) -> None:
    """Text keys prune files as integer keys do, the files this writer adds included, long
    keys too (delta-rs writes a maximum whole)."""
    table = _text_keyed(tmp_path, [[f"k{i:04d}" for i in range(s, s + 100)] for s in (0, 100, 200)])
    result = dv_merge(table, _text_batch(("k0150", "u", "x"), ("k0155", "d", ""), ("n1", "c", "n")),
                      PLAN, "j", 1, None)  # fmt: skip
    assert (result.files_read, result.deleted, result.written) == (1, 2, 2)
    # The file that batch added holds k0150 and n1: a batch of k0150 reads it and the second
    # file; a batch of a key no file's range holds reads none.
    result = dv_merge(table, _text_batch(("k0150", "u", "y"), lsn=30), PLAN, "j", 2, None)
    assert result.files_read == 2
    assert dv_merge(table, _text_batch(("a", "c", "new")), PLAN, "j", 3, None).files_read == 0
    rows = {r["id"]: r["v"] for r in pa.table(_scanned(table)).to_pylist()}
    assert (rows["k0150"], rows["n1"], rows["a"], len(rows)) == ("y", "n", "new", 301)
    assert "k0155" not in rows
    long_keys = _text_keyed(tmp_path / "long", [["x" * 40 + "a"], ["x" * 40 + "z"]])
    result = dv_merge(long_keys, _text_batch(("x" * 40 + "a", "u", "l")), PLAN, "j", 1, None)
    assert (result.files_read, result.deleted) == (1, 1)


def _uuid7(n: int) -> str:
    """A time-ordered UUID's text (version 7: the time first), the n-th of a sequence."""
    return f"0192{n:08x}-7000-8000-{n:012x}"


def test_time_ordered_uuid_keys_read_only_the_files_of_their_range(tmp_path: Path) -> None:
    """A table keyed by time-ordered UUIDs (36 characters), loaded in files of 100 keys: a
    batch of new keys and updates of the newest reads the newest file only, then the file
    the batch wrote (its maximum written whole) and no older one; the rows are right."""
    keys = [_uuid7(n) for n in range(500)]
    table = _text_keyed(tmp_path, [keys[s : s + 100] for s in range(0, 500, 100)])
    first = _text_batch((keys[450], "u", "a"), (keys[499], "d", ""), (_uuid7(500), "c", "new"))
    result = dv_merge(table, first, PLAN, "j", 1, None)
    assert (result.files_read, result.deleted, result.written) == (1, 2, 2)
    second = _text_batch((_uuid7(500), "u", "b"), (_uuid7(501), "c", "c"), lsn=30)
    assert dv_merge(table, second, PLAN, "j", 2, None).files_read == 1  # the first batch's
    stats = [json.loads(add["stats"]) for add in read_log_files(tmp_path).adds.values()]
    newest = max(stats, key=lambda s: s["minValues"]["id"])
    assert newest["maxValues"]["id"] == _uuid7(501)  # whole: 36 characters
    rows = {r["id"]: r["v"] for r in pa.table(_scanned(table)).to_pylist()}
    newest_rows = (rows[keys[450]], rows[_uuid7(500)], rows[_uuid7(501)])
    assert (newest_rows, len(rows)) == (("a", "b", "c"), 501)
    assert keys[499] not in rows


@pytest.mark.parametrize(
    ("low", "high", "keys", "outside"),
    [
        # Delta-Spark 4's truncated maximum of "x" * 40 + "a": 32 characters and U+007F.
        ("x" * 32, "x" * 32 + "\x7f", ["x" * 40 + "a", "x" * 50], False),
        ("x" * 32, "x" * 32 + "\x7f", ["y"], True),
        # ... of "x" * 32 + "\U0010ffff" + "b": the prefix grows past the maximal character.
        ("a", "x" * 32 + "\U0010ffff\U0010ffff", ["x" * 32 + "\U0010ffff" + "b"], False),
        ("a", "x" * 32 + "\U0010ffff\U0010ffff", ["y"], True),
        # A file without a maximum (a longer key than this writer writes whole) or without a
        # minimum excludes by the bound it has.
        ("m", None, ["a", "b"], True),
        ("m", None, ["a", "z" * 300], False),
        (None, "m", ["n", "o"], True),
        (None, "m", ["a", "o"], False),
        (None, None, ["a"], False),
    ],
)
def test_a_file_is_passed_over_only_where_its_key_bounds_exclude_every_key(
    low: str | None, high: str | None, keys: list[str], outside: bool
) -> None:
    import numpy as np

    stats = {"minValues": {"k": low} if low is not None else {},
             "maxValues": {"k": high} if high is not None else {}}  # fmt: skip
    bounds = {"k": (str, np.sort(np.array(keys, dtype=object)))}
    assert driver_dv_merge._outside(stats, bounds) is outside


def test_a_text_keys_maximum_is_written_whole_up_to_its_limit(tmp_path: Path) -> None:
    """The files this writer adds carry a text key's minimum as a 32-character prefix and its
    maximum whole, but not a maximum longer than 256 characters (left out: unknown)."""
    table = _text_keyed(tmp_path, [["seed"]])
    long = "q" * 300
    dv_merge(table, _text_batch(("k" * 40, "c", "a"), ("l" * 40, "c", "b")), PLAN, "j", 1, None)
    dv_merge(table, _text_batch(("a", "c", "x"), (long, "c", "y"), lsn=30), PLAN, "j", 2, None)
    stats = {json.loads(a["stats"])["minValues"]["id"]: json.loads(a["stats"])
             for a in read_log_files(tmp_path).adds.values()}  # fmt: skip
    assert stats["k" * 32]["maxValues"]["id"] == "l" * 40
    assert "id" not in stats["a"]["maxValues"]
    rows = {r["id"] for r in pa.table(_scanned(table)).to_pylist()}
    assert rows == {"seed", "k" * 40, "l" * 40, "a", long}
    assert dv_merge(table, _text_batch((long, "u", "z"), lsn=40), PLAN, "j", 3, None).deleted == 1


def _scanned(table: Any) -> Any:
    table.update_incremental()
    return table.scan()


def test_batches_past_a_checkpoint_and_a_new_job_read_the_same_table(tmp_path: Path) -> None:
    table = _table(tmp_path, range(50))
    expected = {i: f"old-{i}" for i in range(50)}
    for batch in range(1, 13):  # past version 10: a checkpoint is written
        dv_merge(table, _batch((batch, "u", 100 + batch, f"b{batch}")), PLAN, "j", batch, None)
        expected[batch] = f"b{batch}"
    assert (tmp_path / "_delta_log" / "_last_checkpoint").exists()
    again = LoggedTable.open(str(tmp_path))  # a new job: the log replayed from the checkpoint
    dv_merge(again, _batch((40, "d", 500, "")), PLAN, "j", 13, None)
    del expected[40]
    assert _rows(again) == expected


@pytest.mark.parametrize(
    ("plan", "batch", "reason"),
    [
        (MergePlan(("id",), ("id", "v"), truncate_at=(5, 0)), _batch((1, "u", 9, "x")), "truncate"),
        (MergePlan(("id",), ("id", "v"), fold_unchanged=True), _batch((1, "u", 9, "x")), "TOAST"),
        (PLAN, _batch((1, "u", 9, "x")).set_column(0, "id", pa.array([None], pa.int64())),
         "NULL key"),
    ],
    ids=["truncate", "unchanged TOAST", "NULL key"],
)  # fmt: skip
def test_a_batch_it_does_not_take_is_declined_before_anything_is_written(
    tmp_path: Path, plan: MergePlan, batch: pa.Table, reason: str
) -> None:
    table = _table(tmp_path, range(3))
    with pytest.raises(BatchDeclined, match=reason):
        dv_merge(table, batch, plan, "j", 1, None)
    assert table.version() == 0 and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in tmp_path.iterdir() if not p.name.startswith("deletion_vector")
    )


def test_a_floating_point_key_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    rows = _batch((1, "c", 10, "a")).drop_columns([tf.OP])
    rows = rows.set_column(0, "id", pa.array([1.5]))
    write_deltalake(str(tmp_path), rows, configuration={"delta.enableDeletionVectors": "true"})
    table = LoggedTable.open(str(tmp_path))
    batch = _batch((1, "u", 20, "b")).set_column(0, "id", pa.array([float("nan")]))
    with pytest.raises(DriverWriteRefused, match="floating-point"):
        dv_merge(table, batch, PLAN, "j", 1, None)
    assert table.version() == 0


def test_tables_whose_rules_it_cannot_keep_are_refused(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    plain = tmp_path / "plain"
    write_deltalake(str(plain), pa.table({"id": [1]}))
    assert "no deletion vectors" in (dv_merge_refusal(LoggedTable.open(str(plain))) or "")
    feed = _table(tmp_path / "feed", range(1), configuration={"delta.enableChangeDataFeed": "true"})
    assert "change data feed" in (dv_merge_refusal(feed) or "")


def test_a_version_taken_meanwhile_is_refused_and_the_table_keeps_the_other_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _table(tmp_path, range(3))
    dv_merge(table, _batch((1, "u", 20, "mine")), PLAN, "j", 1, None)

    def another_writer_first(root: Path, version: int, actions: Any) -> None:
        write_commit(root, version, [{"commitInfo": {"operation": "someone else"}}])
        write_commit(root, version, actions)

    monkeypatch.setattr(driver_commit, "write_commit", another_writer_first)
    with pytest.raises(DriverWriteRefused, match="another writer"):
        dv_merge(table, _batch((2, "u", 20, "lost")), PLAN, "j", 2, None)
    monkeypatch.undo()
    assert _rows(table) == {0: "old-0", 1: "mine", 2: "old-2"}
    assert table.history(1)[0]["operation"] == "someone else"
    dv_merge(table, _batch((2, "u", 20, "again")), PLAN, "j", 2, None)  # the log is re-read
    assert _rows(table) == {0: "old-0", 1: "mine", 2: "again"}
