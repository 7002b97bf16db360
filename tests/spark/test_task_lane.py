"""The task lane's work per Spark task (bridge.spark.task_lane.task_rows), on real payloads:
the rows an append writes (fences applied, each key's last change once) and the summary Spark's
path would compute, or a refusal for anything but new keys."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bridge.native.switches import NATIVE, enabled
from bridge.spark import transforms as tf
from bridge.spark.executor_files import FileLayout
from bridge.spark.fences import Fences
from bridge.spark.task_lane import (
    LaneSpec,
    NotAnAppend,
    combine_task_parts,
    file_rows,
    lane_plan,
    read_folded,
    task_result,
    task_rows,
)
from tests.spark.envelopes import TableVersion, frame_avro

# Off on purpose only under PGBRIDGE_NATIVE=0; a build that lacks the C decoder fails here.
pytestmark = pytest.mark.skipif(
    not enabled(NATIVE), reason="PGBRIDGE_NATIVE=0: the C part is off on purpose"
)

COLUMNS: list[dict[str, Any]] = [
    {"name": "id", "type": "long"},
    {"name": "name", "type": ["null", "string"], "default": None},
]
VERSION = TableVersion("lane", "public", "t", COLUMNS, ["id"])


def _spec(fences: Fences) -> LaneSpec:
    plan = lane_plan(json.dumps(VERSION.value_schema()), [("id", "id"), ("name", "name")])
    assert plan is not None
    return LaneSpec(plan, (("id", "id"), ("name", "name")), ("id",), FileLayout("/x", ()), fences)


def _records(changes: list[tuple[str, int, int, int, int, int]]) -> pa.Table:
    """(op, key, lsn, seq, partition, offset) -> Kafka records of framed envelopes."""
    values, partitions, offsets = [], [], []
    for op, key, lsn, seq, partition, offset in changes:
        row = {"id": key, "name": f"{op}{key}@{lsn}.{seq}"}
        before = row if op in ("u", "d") else None
        after = None if op == "d" else row
        envelope = VERSION.envelope(op, lsn, seq, before=before, after=after)
        values.append(frame_avro(VERSION.value_schema(), envelope, 1))
        partitions.append(partition)
        offsets.append(offset)
    return pa.table({"value": pa.array(values, pa.binary()), "partition": partitions,
                     "offset": offsets})  # fmt: skip


def test_inserts_are_kept_once_each_and_summarised_per_partition() -> None:
    records = _records(
        [
            ("c", 1, 100, 0, 0, 10),
            ("c", 2, 100, 1, 1, 20),
            ("c", 1, 100, 0, 0, 11),  # delivered twice in one batch
            ("c", 3, 200, 0, 0, 12),
        ]
    )
    rows, parts = task_rows(records, _spec(Fences(floor=50)))
    assert sorted(rows.column("id").to_pylist()) == [1, 2, 3]
    assert rows.column_names == ["id", "name", tf.COMMIT_LSN, tf.SEQ, tf.COMMIT_TS]
    assert rows.column(tf.COMMIT_TS).type == pa.timestamp("us", tz="UTC")
    by_partition = {p["_pgbridge_summary_partition"]: p for p in parts}
    assert by_partition[0]["n"] == 3 and by_partition[0]["creates"] == 3
    assert by_partition[0]["last"] == [200, 0] and by_partition[0]["max_offset"] == 12
    assert by_partition[1]["lowest_lsn"] == 100 and by_partition[1]["max_offset"] == 20
    assert by_partition[0]["schema"] == "public" and by_partition[0]["table"] == "t"


def test_fences_drop_covered_records_and_resent_inserts_but_not_snapshot_reads() -> None:
    records = _records(
        [
            ("c", 1, 100, 0, 0, 5),  # offset covered by the table's commits
            ("c", 2, 100, 1, 0, 7),  # at or below the partition's fence: a resend
            ("r", 3, 100, 2, 0, 8),  # a snapshot read: exempt from the partition fence
            ("c", 4, 300, 0, 0, 9),  # new
        ]
    )
    fences = Fences(partitions={0: (150, 0)}, offsets={0: 6}, floor=50)
    rows, parts = task_rows(records, _spec(fences))
    assert sorted(rows.column("id").to_pylist()) == [3, 4]
    assert parts[0]["n"] == 4  # the summary is of the batch, as Spark's path summarises it


@pytest.mark.parametrize("op", ["u", "d"])
def test_an_update_or_delete_is_not_an_append(op: str) -> None:
    records = _records([("c", 1, 100, 0, 0, 1), (op, 1, 101, 0, 0, 2)])
    with pytest.raises(NotAnAppend):
        task_rows(records, _spec(Fences(floor=50)))


TOPIC = "lane.public.t"


def _merge_spec(fences: Fences, root: str = "/x") -> LaneSpec:
    names = (("id", "id"), ("name", "name"))
    plan = lane_plan(json.dumps(VERSION.value_schema()), names, ("id",))
    assert plan is not None
    utc = pa.timestamp("us", tz="UTC")
    layout = FileLayout(
        root,
        (
            ("id", "col-1", 1, pa.int64()),
            ("name", "col-2", 2, pa.string()),
            (tf.COMMIT_LSN, tf.COMMIT_LSN, None, pa.int64()),
            (tf.SEQ, tf.SEQ, None, pa.int64()),
            (tf.COMMIT_TS, tf.COMMIT_TS, None, utc),
        ),
    )
    return LaneSpec(plan, names, ("id",), layout, fences, merge=True)


def _task_output(records: pa.Table, spec: LaneSpec) -> dict[str, Any]:
    """The ``lane`` row one task yields for the records (all of topic :data:`TOPIC`)."""
    batch = records.append_column("topic", pa.array([TOPIC] * records.num_rows))
    rows = [r for out in task_result(iter(batch.to_batches()), {TOPIC: spec})
            for r in out.to_pylist()]  # fmt: skip
    assert len(rows) == 1 and rows[0]["kind"] == "lane", rows
    return rows[0]  # type: ignore[no-any-return]


def test_a_held_tables_updates_and_deletes_are_folded_for_the_drivers_merge(
    tmp_path: Any,
) -> None:
    """With ``merge``, a task folds updates and deletes to each key's last change, a delete
    keyed by its old row, and leaves the rows for the driver (not a file of the table); the
    fences still drop a resend."""
    records = _records(
        [
            ("u", 1, 100, 0, 0, 10),
            ("d", 2, 100, 1, 0, 11),
            ("c", 3, 101, 0, 0, 12),
            ("u", 1, 102, 0, 0, 13),
            ("d", 3, 103, 0, 0, 14),
            ("c", 2, 104, 0, 0, 15),  # the deleted key comes back
            ("d", 4, 105, 0, 0, 16),
            ("u", 5, 90, 0, 0, 17),  # a resend below the partition's fence
        ]
    )
    spec = _merge_spec(Fences(partitions={0: (95, 0)}, floor=50), str(tmp_path))
    out = _task_output(records, spec)
    assert out["path"] is None and out["refused"] is None
    assert out["folded"].startswith("_pgbridge_folded/")  # Delta's readers skip "_" folders
    folded = read_folded(str(tmp_path), out["folded"])
    assert not list((tmp_path / "_pgbridge_folded").iterdir())  # read once, then removed
    got = {r["id"]: (r[tf.OP], r["name"], r[tf.COMMIT_LSN]) for r in folded.to_pylist()}
    assert got == {
        1: ("u", "u1@102.0", 102),
        2: ("c", "c2@104.0", 104),
        3: ("d", None, 103),
        4: ("d", None, 105),
    }
    # The summary is of the batch, the resend included (as Spark's path summarises it).
    assert out["records"] == 4 and json.loads(out["parts"])[0]["removals"] == 6


def test_a_held_tables_inserts_are_still_written_as_a_file_the_driver_can_read_back(
    tmp_path: Any,
) -> None:
    """Inserts only: the task writes its file as for any append (the driver commits it when
    the keys are new, else reads it back for the MERGE with the kind ``c``)."""
    from bridge.spark.executor_files import WrittenFile

    records = _records([("c", 7, 100, 0, 0, 1), ("r", 8, 100, 1, 0, 2)])
    spec = _merge_spec(Fences(floor=50), str(tmp_path))
    out = _task_output(records, spec)
    assert out["folded"] is None and out["path"]
    back = file_rows(spec.layout, [WrittenFile(out["path"], out["size"], out["records"])])
    rows = sorted(back[0].select(["id", "name", tf.OP]).to_pylist(), key=lambda r: r["id"])
    assert rows == [{"id": 7, "name": "c7@100.0", tf.OP: "c"},
                    {"id": 8, "name": "r8@100.1", tf.OP: "c"}]  # fmt: skip


def test_folded_rows_of_two_tasks_holding_one_key_are_not_merged() -> None:
    """A key in two Kafka partitions (partitions added to the topic): neither task knows its
    last change, so the driver refuses the batch (Spark's path orders all of it)."""
    from pyspark.sql import types as T

    from bridge.spark.driver_changes import folded_arrow_rows

    columns = T.StructType([T.StructField("id", T.LongType()), T.StructField("v", T.StringType())])

    def piece(key: int) -> pa.Table:
        return pa.table({"id": [key], "v": ["x"], tf.COMMIT_LSN: [1], tf.SEQ: [0],
                         tf.COMMIT_TS: pa.array([0], pa.timestamp("us", tz="UTC")),
                         tf.OP: ["u"]})  # fmt: skip

    rows = folded_arrow_rows([piece(1), piece(2)], columns, ("id",))
    assert rows.table.num_rows == 2 and rows.schema.fieldNames()[:2] == ["id", "v"]
    assert rows.table.schema.field("id").type == pa.int64()
    with pytest.raises(ValueError, match="1 keys in two Kafka partitions"):
        folded_arrow_rows([piece(1), piece(1)], columns, ("id",))


def test_a_partition_read_by_two_tasks_is_refused() -> None:
    part = json.dumps([{"_pgbridge_summary_partition": 0, "last": [1, 0]}])
    rows = [{"parts": part, "refused": None}, {"parts": part, "refused": None}]
    assert combine_task_parts(rows)[1] == "Kafka partition 0 read by two tasks"
    refused = [{"parts": None, "refused": "NotAnAppend: x"}]
    assert combine_task_parts(refused)[1] == "NotAnAppend: x"


def _summary_by_filtering(decoded: pa.Table) -> list[dict[str, Any]]:
    """The summary per Kafka partition the plain way (one filter per partition): the oracle
    of the grouped one the lane computes."""
    import pyarrow.compute as pc

    parts = []
    for number in sorted(set(decoded.column(tf.PARTITION).to_pylist())):
        rows = [r for r in decoded.to_pylist() if r[tf.PARTITION] == number]
        top = max(r[tf.COMMIT_LSN] for r in rows)
        reads = [r[tf.COMMIT_LSN] for r in rows if r["op"] == "r"]
        parts.append(
            {
                "_pgbridge_summary_partition": number,
                "n": len(rows),
                "rows": len(rows),
                "removals": sum(r["op"] in ("u", "d") for r in rows),
                "creates": sum(r["op"] == "c" for r in rows),
                "reads": len(reads),
                "reads_lsn": max(reads) if reads else None,
                "lowest_lsn": min(r[tf.COMMIT_LSN] for r in rows),
                "trunc": None,
                "toast": False,
                "schema": min(r["schema"] for r in rows),
                "schema_max": max(r["schema"] for r in rows),
                "table": min(r["table"] for r in rows),
                "table_max": max(r["table"] for r in rows),
                "oldest_ms": min(r["ts_ms"] for r in rows),
                "newest_ms": max(r["ts_ms"] for r in rows),
                "last": [top, max(r[tf.SEQ] for r in rows if r[tf.COMMIT_LSN] == top)],
                "max_offset": pc.max(pa.array([r[tf.OFFSET] for r in rows])).as_py(),
            }
        )
    return parts


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from("crud"),
            st.integers(0, 3),  # Kafka partition
            st.integers(1, 6),  # commit LSN
            st.integers(0, 4),  # sequence in the transaction
            st.sampled_from(["a", "b"]),  # schema (a renamed table keeps one topic)
            st.integers(0, 10**13),  # ts_ms
        ),
        min_size=1,
        max_size=40,
    )
)
def test_summary_per_partition_equals_filtering_each_partition(changes: list[Any]) -> None:
    from bridge.spark.task_lane import _summary_parts

    decoded = pa.table(
        {
            "op": [c[0] for c in changes],
            tf.PARTITION: pa.array([c[1] for c in changes], pa.int32()),
            tf.COMMIT_LSN: pa.array([c[2] for c in changes], pa.int64()),
            tf.SEQ: pa.array([c[3] for c in changes], pa.int64()),
            "schema": [c[4] for c in changes],
            "table": ["t" + c[4] for c in changes],
            "ts_ms": pa.array([c[5] for c in changes], pa.int64()),
            tf.OFFSET: pa.array(range(len(changes)), pa.int64()),
        }
    )
    grouped = sorted(_summary_parts(decoded), key=lambda p: p["_pgbridge_summary_partition"])
    assert grouped == _summary_by_filtering(decoded)


@settings(max_examples=80, deadline=None)
@example([(1, 1, 0), (1, 1, 0)], False, True)  # one record twice, next to itself
@example([(1, 1, 0), (2, 1, 1), (1, 2, 0)], False, True)  # keys that grow, then one comes again
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),  # key
            st.integers(1, 4),  # commit LSN
            st.integers(0, 3),  # sequence in the transaction
        ),
        min_size=1,
        max_size=30,
    ),
    st.booleans(),
    st.booleans(),
)
def test_last_change_per_key_equals_the_latest_position_of_each_key(
    changes: list[tuple[int, int, int]], keys_in_order: bool, positions_in_order: bool
) -> None:
    """Each key's change at the highest (LSN, sequence, offset), whether the keys come in
    increasing order (a snapshot's: taken as they are) or not, and whether the positions come
    in order (one Kafka partition's: not sorted) or not (several, or a resend: sorted)."""
    from bridge.spark.task_lane import _last_per_key

    if keys_in_order:  # distinct and increasing, as a snapshot's chunk delivers them
        changes = [(i * 3 - 5, lsn, seq) for i, (_, lsn, seq) in enumerate(changes)]
    if positions_in_order:
        changes.sort(key=lambda change: change[1:])
    rows = pa.table(
        {
            "id": pa.array([c[0] for c in changes], pa.int64()),
            tf.COMMIT_LSN: pa.array([c[1] for c in changes], pa.int64()),
            tf.SEQ: pa.array([c[2] for c in changes], pa.int64()),
            tf.OFFSET: pa.array(range(len(changes)), pa.int64()),
        }
    )
    latest: dict[int, tuple[int, int, int]] = {}
    for offset, (key, lsn, seq) in enumerate(changes):
        latest[key] = max(latest.get(key, (lsn, seq, offset)), (lsn, seq, offset))
    kept = _last_per_key(rows, ["id"]).to_pylist()
    assert sorted((r["id"], r[tf.COMMIT_LSN], r[tf.SEQ], r[tf.OFFSET]) for r in kept) == sorted(
        (key, *position) for key, position in latest.items()
    )
