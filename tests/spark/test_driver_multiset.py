"""The driver's multiset fold (bridge.spark.driver_multiset) without Spark or Delta: the MERGE
source it builds from a batch's row images, applied to the copies a table holds, leaves
``max(0, held + net)`` copies of every image, each record counted once. The same batches run
end to end, by delta-rs and by Spark, in test_apply_batches.py."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge.spark import driver_multiset as dm
from bridge.spark import transforms as tf
from bridge.spark.driver_merge import DriverWriteRefused, open_table

Image = tuple[Any, ...]
Record = tuple[int, int, str, int, Image]  # commit_lsn, seq, op, count delta, image


def images_table(records: list[Record]) -> Any:
    return pa.table(
        {
            "a": pa.array([r[4][0] for r in records], pa.int64()),
            "b": pa.array([r[4][1] for r in records], pa.string()),
            tf.COMMIT_LSN: pa.array([r[0] for r in records], pa.int64()),
            tf.SEQ: pa.array([r[1] for r in records], pa.int64()),
            tf.COMMIT_TS: pa.array([None] * len(records), pa.timestamp("us", "UTC")),
            tf.OP: pa.array([r[2] for r in records], pa.string()),
            tf.COUNT_DELTA: pa.array([r[3] for r in records], pa.int32()),
        }
    )


def apply_actions(held: Counter[Image], source: Any) -> Counter[Image]:
    """What the MERGE does with the source: a "delete" removes every copy of its image (it
    matches all of them), an "insert" adds one."""
    after = Counter(held)
    for row in source.to_pylist():
        image = (row["a"], row["b"])
        if row["_pgbridge_kind"] == "delete":
            after.pop(image, None)
        else:
            after[image] += 1
    return +after


def fold(records: list[Record], held: Counter[Image], applied: tuple[int, int] | None) -> Any:
    arrow = images_table(records)
    fresh = dm._fresh_rows(arrow, applied, None)
    net = dm._net_per_image(arrow, dm._images_of(arrow, ["a", "b"]), fresh)
    current = {image: held[image] for image in net if held[image]}
    return dm._actions(arrow, ["a", "b", *tf.PERSISTED_META], net, current)


def test_an_update_of_one_of_two_identical_rows_and_a_resend_counted_once() -> None:
    held = Counter({(1, "x"): 2, (2, None): 1})
    records: list[Record] = [
        (5, 0, "c", 1, (1, "x")),  # applied before: at the position
        (6, 0, "u", -1, (1, "x")),
        (6, 0, "u", 1, (1, "y")),
        (6, 0, "u", 1, (1, "y")),  # the same record delivered twice
        (7, 0, "d", -1, (2, None)),
        (7, 1, "d", -1, (9, "never held")),  # removes nothing
    ]
    source = fold(records, held, applied=(5, 0))
    assert apply_actions(held, source) == Counter({(1, "x"): 1, (1, "y"): 1})
    # The rows it inserts carry the position of their image's last change.
    inserted = [r for r in source.to_pylist() if r["_pgbridge_kind"] == "insert"]
    assert {(r["a"], r["b"], r[tf.COMMIT_LSN], r[tf.SEQ]) for r in inserted} == {
        (1, "x", 6, 0),
        (1, "y", 6, 0),
    }


def test_instants_beyond_pythons_datetime_are_counted_by_their_integers() -> None:
    arrow = pa.table({"ts": pa.array([2**63 - 1, -(2**63), 2**63 - 1], pa.timestamp("us", "UTC")),
                      "day": pa.array([2932896, -719162, 2932896], pa.date32())})  # fmt: skip
    images = dm._images_of(arrow, ["ts", "day"])
    assert images[0] == images[2] != images[1]


def test_a_nan_or_negative_zero_in_an_image_is_left_to_spark() -> None:
    for value in (float("nan"), -0.0):
        arrow = pa.table({"f": [value], tf.COMMIT_LSN: [1], tf.SEQ: [0], tf.COUNT_DELTA: [-1]})
        with pytest.raises(DriverWriteRefused, match=r"NaN or -0\.0"):
            dm._images_of(arrow, ["f"])


_images = st.tuples(st.sampled_from([1, 2, None]), st.sampled_from(["x", None]))


@given(
    held=st.dictionaries(_images, st.integers(1, 3), max_size=4),
    changes=st.lists(st.tuples(st.sampled_from([1, -1]), _images), max_size=12),
    resent=st.integers(0, 3),
)
def test_the_fold_leaves_held_plus_net_copies_and_never_fewer_than_none(
    held: dict[Image, int], changes: list[tuple[int, Image]], resent: int
) -> None:
    records: list[Record] = [
        (10 + i, 0, "c" if delta > 0 else "d", delta, image)
        for i, (delta, image) in enumerate(changes)
    ]
    net: Counter[Image] = Counter()
    for _, _, _, delta, image in records:
        net[image] += delta
    model = +Counter({i: max(0, held.get(i, 0) + net[i]) for i in {*held, *net}})
    got = apply_actions(Counter(held), fold(records + records[:resent], Counter(held), None))
    assert got == model


def test_the_tables_rows_are_narrowed_to_those_that_can_equal_an_image_nulls_included() -> None:
    held = pa.table(
        {
            "a": pa.array([1, 1, 2, None, 3], pa.int64()),
            "b": pa.array(["x", None, "x", None, "y"], pa.string()),
            "ts": pa.array([0, 0, 0, 0, 5], pa.timestamp("us", "UTC")),
        }
    )
    images = pa.table(
        {
            "a": pa.array([1, None], pa.int32()),  # another integer type: cast to the table's
            "b": pa.array(["x", None], pa.string()),
            "ts": pa.array([0, 0], pa.timestamp("us")),
        }
    )
    kept = dm._candidates(held, ["a", "b", "ts"], images)
    # Every row that equals an image is kept ((1, x), (None, None)); (1, None) matches each
    # column's values without being an image: counted out later, by the exact comparison.
    assert kept.to_pylist() == [held.to_pylist()[i] for i in (0, 1, 3)]


def test_datafusions_view_types_are_read_as_plain_strings_and_binaries() -> None:
    held = pa.table(
        {
            "s": pa.array(["x", "y", None], pa.string_view()),
            "b": pa.array([b"\x00", b"", None], pa.binary_view()),
        }
    )
    plain = dm._without_views(held)
    assert plain.schema == pa.schema([("s", pa.string()), ("b", pa.binary())])
    images = pa.table({"s": pa.array(["y"], pa.string()), "b": pa.array([b""], pa.binary())})
    assert dm._candidates(plain, ["s", "b"], images).to_pylist() == [{"s": "y", "b": b""}]


def test_a_large_tables_changes_are_declined_and_its_inserts_appended(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counting a table's copies reads it whole and delta-rs's MERGE rewrites what it
    touches: past the size deletion vectors take over, a batch that updates or deletes is
    declined for Spark (this batch only, nothing written), and a batch of inserts is still
    appended by delta-rs."""
    from deltalake import DeltaTable, write_deltalake
    from pyspark.sql import types as T

    from bridge.spark.driver_changes import ArrowRows
    from bridge.spark.driver_dv_merge import BatchDeclined
    from bridge.spark.multiset import MultisetBatch

    held = images_table([(5, 0, "c", 1, (1, "x"))]).drop_columns([tf.OP, tf.COUNT_DELTA])
    write_deltalake(str(tmp_path), held)
    table = open_table(str(tmp_path))
    monkeypatch.setattr(dm, "DELETION_VECTORS_MIN_TABLE_BYTES", 0)
    columns = T.StructType([T.StructField("a", T.LongType()), T.StructField("b", T.StringType())])
    schema = T.StructType(
        [*columns.fields, T.StructField(tf.COMMIT_LSN, T.LongType()),
         T.StructField(tf.SEQ, T.LongType()), T.StructField(tf.COMMIT_TS, T.TimestampType()),
         T.StructField(tf.OP, T.StringType()), T.StructField(tf.COUNT_DELTA, T.IntegerType())]
    )  # fmt: skip
    delete = ArrowRows(images_table([(6, 0, "d", -1, (1, "x"))]), schema)
    with pytest.raises(BatchDeclined, match="large table"):
        dm.multiset_in_driver(table, delete, columns, (5, 0), MultisetBatch(last=(6, 0)), "j", 1)
    assert table.version() == 0
    insert = ArrowRows(images_table([(7, 0, "c", 1, (2, "y"))]), schema)
    batch = MultisetBatch(last=(7, 0), inserts_only=True)
    assert dm.multiset_in_driver(table, insert, columns, (5, 0), batch, "j", 1)
    assert sorted(pa.table(DeltaTable(str(tmp_path)).scan()).column("a").to_pylist()) == [1, 2]
