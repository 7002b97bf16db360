"""bridge.spark.driver_rewrite: a small table's MERGE computed with Arrow leaves the rows
delta-rs's MERGE of the same statement leaves (which the integration tests hold equal to
Spark's), for any batch: updates and deletes newer and older than the held rows, resends,
unchanged TOAST, truncates, insert-only plans, composite keys, a column the batch lacks."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T

from bridge.spark import driver_rewrite
from bridge.spark import transforms as tf
from bridge.spark.driver_changes import ArrowRows
from bridge.spark.driver_merge import merge_in_driver, open_table
from bridge.spark.merge import MergePlan

_TS = pa.timestamp("us", tz="UTC")
_names = itertools.count()


@dataclasses.dataclass
class Case:
    keys: tuple[str, ...]
    held: list[dict[str, Any]]
    changes: list[dict[str, Any]]
    fold: bool
    inserts_only: bool
    truncate_at: tuple[int, int] | None
    extra_column: bool


@st.composite
def cases(draw: Any) -> Case:
    keys = ("id", "k2") if draw(st.booleans()) else ("id",)

    def key(i: int) -> dict[str, Any]:
        return {"id": i // 2, "k2": "ab"[i % 2]} if len(keys) == 2 else {"id": i}

    def position() -> dict[str, Any]:
        return {tf.COMMIT_LSN: draw(st.integers(1, 5)), tf.SEQ: draw(st.integers(0, 2))}

    values = st.one_of(st.none(), st.integers(-3, 3))
    texts = st.one_of(st.none(), st.sampled_from(["", "x", "y"]))
    held_keys = draw(st.lists(st.integers(0, 9), unique=True, max_size=7))
    held = [{**key(i), "v": draw(values), "s": draw(texts), "extra": draw(values), **position()}
            for i in held_keys]  # fmt: skip
    inserts_only = draw(st.booleans())
    ops = st.sampled_from(["c", "r"] if inserts_only else ["c", "r", "u", "d"])
    fold = draw(st.booleans())
    changes = []
    for i in draw(st.lists(st.integers(0, 9), unique=True, max_size=7)):
        unchanged = draw(st.lists(st.sampled_from(["v", "s"]), unique=True)) if fold else []
        changes.append({**key(i), "v": draw(values), "s": draw(texts), **position(),
                        tf.OP: draw(ops), tf.UNCHANGED: unchanged})  # fmt: skip
    truncate = draw(st.one_of(st.none(), st.tuples(st.integers(1, 6), st.integers(0, 2))))
    return Case(keys, held, changes, fold, inserts_only, truncate, draw(st.booleans()))


def _table(path: Path, case: Case) -> Any:
    from deltalake import write_deltalake

    columns = ["id", *(["k2"] if "k2" in case.keys else []), "v", "s"]
    columns += ["extra"] * case.extra_column
    fields = [_FIELDS[c] for c in columns] + [_FIELDS[m] for m in tf.PERSISTED_META]
    schema = pa.schema(fields)
    rows = [{**r, tf.COMMIT_TS: 0} for r in case.held]
    write_deltalake(str(path), pa.Table.from_pylist(rows, schema=schema))
    return open_table(str(path))


_FIELDS = {
    "id": pa.field("id", pa.int64()),
    "k2": pa.field("k2", pa.string()),
    "v": pa.field("v", pa.int64()),
    "s": pa.field("s", pa.string()),
    "extra": pa.field("extra", pa.int64()),
    tf.COMMIT_LSN: pa.field(tf.COMMIT_LSN, pa.int64()),
    tf.SEQ: pa.field(tf.SEQ, pa.int64()),
    tf.COMMIT_TS: pa.field(tf.COMMIT_TS, _TS),
}
_SPARK = {
    "id": T.LongType(),
    "k2": T.StringType(),
    "v": T.LongType(),
    "s": T.StringType(),
    tf.COMMIT_LSN: T.LongType(),
    tf.SEQ: T.LongType(),
    tf.COMMIT_TS: T.TimestampType(),
    tf.OP: T.StringType(),
    tf.UNCHANGED: T.ArrayType(T.StringType()),
}


def _batch(case: Case) -> tuple[ArrowRows, MergePlan]:
    values = ["id", *(["k2"] if "k2" in case.keys else []), "v", "s"]
    columns = [*values, *tf.PERSISTED_META, tf.OP, *([tf.UNCHANGED] * case.fold)]
    arrow_types = {**{n: f.type for n, f in _FIELDS.items()}, tf.OP: pa.string(),
                   tf.UNCHANGED: pa.list_(pa.string())}  # fmt: skip
    rows = [{**c, tf.COMMIT_TS: 0} for c in case.changes]
    table = pa.Table.from_pylist(
        rows, schema=pa.schema([pa.field(c, arrow_types[c]) for c in columns])
    )
    schema = T.StructType([T.StructField(c, _SPARK[c]) for c in columns])
    plan = MergePlan(
        key_columns=case.keys,
        value_columns=tuple(values),
        truncate_at=case.truncate_at,
        fold_unchanged=case.fold,
        inserts_only=case.inserts_only,
    )
    return ArrowRows(table, schema), plan


def _apply(path: Path, case: Case) -> tuple[list[dict[str, Any]], str]:
    """The table's rows after the batch, and the operation its last commit recorded."""
    table = _table(path, case)
    rows, plan = _batch(case)
    merge_in_driver(table, rows, plan, "the-job", 7, commit_metadata="fences")
    after = open_table(str(path))
    held = driver_rewrite.read_rows(after, pa.schema(after.schema().to_arrow()))
    ordered = sorted(held.to_pylist(), key=lambda r: (r["id"], r.get("k2")))
    assert after.transaction_version("the-job") == 7
    return ordered, after.history(1)[0]["operation"]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=cases())
def test_the_rewrite_leaves_the_rows_delta_rs_merge_leaves(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = str(next(_names))
    rewritten, operation = _apply(tmp_path / f"rewrite-{name}", case)
    with monkeypatch.context() as patched:
        patched.setattr(driver_rewrite, "REWRITE_MAX_BYTES", -1)  # every table MERGEd
        merged, merge_operation = _apply(tmp_path / f"merge-{name}", case)
    assert rewritten == merged
    assert operation in ("WRITE", "CREATE OR REPLACE TABLE")  # not a silent MERGE
    assert merge_operation == "MERGE" or merge_operation == operation == "WRITE"


def test_a_batch_that_changes_no_held_row_is_appended() -> None:
    plan = MergePlan(key_columns=("id",), value_columns=("id", "v"))
    schema = pa.schema([_FIELDS["id"], _FIELDS["v"], *(_FIELDS[m] for m in tf.PERSISTED_META)])
    held = pa.Table.from_pylist(
        [{"id": 1, "v": 1, tf.COMMIT_LSN: 5, tf.SEQ: 0, tf.COMMIT_TS: 0}], schema=schema
    )
    source = pa.Table.from_pylist(
        [
            {"id": 1, "v": 9, tf.COMMIT_LSN: 4, tf.SEQ: 0, tf.COMMIT_TS: 0, tf.OP: "u"},  # older
            {"id": 2, "v": 2, tf.COMMIT_LSN: 6, tf.SEQ: 0, tf.COMMIT_TS: 0, tf.OP: "c"},
            {"id": 3, "v": 3, tf.COMMIT_LSN: 6, tf.SEQ: 1, tf.COMMIT_TS: 0, tf.OP: "d"},
        ]
    )
    result = driver_rewrite.rewritten(held, source, plan, schema)
    assert result.rows is None
    assert result.inserted.column("id").to_pylist() == [2]


def test_a_null_key_is_left_to_the_merge() -> None:
    plan = MergePlan(key_columns=("id",), value_columns=("id",))
    schema = pa.schema([_FIELDS["id"], *(_FIELDS[m] for m in tf.PERSISTED_META)])
    held = pa.Table.from_pylist([{"id": None, tf.COMMIT_LSN: 1, tf.SEQ: 0}], schema=schema)
    source = pa.Table.from_pylist([{"id": 1, tf.COMMIT_LSN: 2, tf.SEQ: 0, tf.OP: "c"}])
    with pytest.raises(ValueError, match="NULL"):
        driver_rewrite.rewritten(held, source, plan, schema)


def test_a_floating_point_key_is_left_to_the_merge() -> None:
    """SQL's equality holds -0.0 = 0.0; Arrow's hash lookup does not."""
    plan = MergePlan(key_columns=("f",), value_columns=("f",))
    schema = pa.schema([pa.field("f", pa.float64()), *(_FIELDS[m] for m in tf.PERSISTED_META)])
    held = pa.Table.from_pylist([{"f": 0.0, tf.COMMIT_LSN: 1, tf.SEQ: 0}], schema=schema)
    source = pa.Table.from_pylist([{"f": -0.0, tf.COMMIT_LSN: 2, tf.SEQ: 0, tf.OP: "d"}])
    with pytest.raises(ValueError, match="floating point"):
        driver_rewrite.rewritten(held, source, plan, schema)


def test_listed_finds_a_name_in_each_rows_list() -> None:
    lists = pa.chunked_array([[["a", "b"], None], [[], ["b"], ["ab"]]], pa.list_(pa.string()))
    assert driver_rewrite.listed(lists, "b").to_pylist() == [True, False, False, True, False]
    assert driver_rewrite.listed(pa.array([], pa.list_(pa.string())), "b").to_pylist() == []


def test_the_next_batch_starts_from_the_rows_committed_unless_the_table_moved_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows a rewrite committed serve the table's next batch (no read of the table); a
    commit by anyone else moves the table's version, and the table is read again."""
    from deltalake import DeltaTable, write_deltalake

    scans: list[str] = []
    scan = DeltaTable.scan

    def counted(table: Any, *args: Any, **kwargs: Any) -> Any:
        scans.append("scan")
        return scan(table, *args, **kwargs)

    monkeypatch.setattr(DeltaTable, "scan", counted)
    held = [{"id": 1, "v": 1, "s": "a", "extra": None, tf.COMMIT_LSN: 1, tf.SEQ: 0}]
    update = {"id": 1, "v": 2, "s": "b", tf.COMMIT_LSN: 2, tf.SEQ: 0, tf.OP: "u", tf.UNCHANGED: []}
    case = Case(("id",), held, [update], False, False, None, False)
    path = tmp_path / "table"
    table = _table(path, case)
    rows, plan = _batch(case)
    merge_in_driver(table, rows, plan, "the-job", 1)
    assert len(scans) == 1
    insert = {**update, "id": 2, tf.OP: "c", tf.COMMIT_LSN: 3}
    rows, plan = _batch(dataclasses.replace(case, changes=[insert, {**update, "v": 3, tf.SEQ: 1}]))
    merge_in_driver(table, rows, plan, "the-job", 2)
    assert len(scans) == 1  # the rows the first batch committed
    after = open_table(str(path))
    foreign = pa.schema(after.schema().to_arrow())
    write_deltalake(str(path), pa.Table.from_pylist(
        [{"id": 9, "v": 9, "s": "z", tf.COMMIT_LSN: 9, tf.SEQ: 0, tf.COMMIT_TS: 0}],
        schema=foreign,
    ), mode="append")  # another writer  # fmt: skip
    table.update_incremental()
    delete = {**update, tf.OP: "d", tf.COMMIT_LSN: 10}
    rows, plan = _batch(dataclasses.replace(case, changes=[delete]))
    merge_in_driver(table, rows, plan, "the-job", 3)
    assert len(scans) == 2  # the table moved: read again
    final = open_table(str(path))
    kept = driver_rewrite.read_rows(final, pa.schema(final.schema().to_arrow()))
    assert sorted((r["id"], r["v"]) for r in kept.to_pylist()) == [(2, 2), (9, 9)]
