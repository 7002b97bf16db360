"""The apply job's batches through the task lane (bridge.spark.task_lane), end to end on a real
local Spark, with its threshold lowered so that small crafted batches take it: the same
scenarios as tests/spark/test_apply_batches.py (resends, a snapshot longer than a batch), a
first load folding updates and deletes, what the lane hands to Spark's path, and a failure
after its commit. A module of its own, so that pytest-xdist runs it beside test_apply_batches
(one module per worker)."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.spark.driver_dv_merge import DV_WRITER
from tests.spark.batches import (
    KEYED,
    OPT_INT,
    OPT_STR,
    PREFIX,
    Batches,
    _ids,
    appended_by,
    col,
    no_unnamed_lane_files,
)
from tests.spark.envelopes import TableVersion
from tests.spark.test_apply_batches import (
    inserts_only_scenario,
    snapshot_longer_than_a_batch_scenario,
)

pytestmark = pytest.mark.integration

TASKS = pytest.mark.parametrize("batches", ["tasks"], indirect=True)


@TASKS
def test_inserts_only_through_the_lane_append_without_duplicating_resends(
    batches: Batches, spark: Any
) -> None:
    inserts_only_scenario(batches)


@TASKS
def test_a_snapshot_longer_than_a_batch_through_the_lane(batches: Batches, spark: Any) -> None:
    snapshot_longer_than_a_batch_scenario(batches)


# The default writer loads a new table through Spark's path, as "spark" does: two writers.
@pytest.mark.parametrize("batches", ["spark", "tasks"], indirect=True)
def test_a_first_load_folds_updates_and_deletes_into_the_rows_it_appends(
    batches: Batches, spark: Any
) -> None:
    """A table's first batch holds inserts, updates and deletes of the same keys, across two
    Kafka partitions, one record delivered twice: the new table holds each key's last row and
    none of the deleted keys (the task lane folds them in its tasks, Spark with a window)."""
    batches.add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"})
    batches.add(KEYED, "c", (10, 1), after={"id": 2, "v": "b"}, partition=1)
    batches.add(KEYED, "u", (11, 0), before={"id": 1, "v": "a"}, after={"id": 1, "v": "a2"})
    batches.add(KEYED, "c", (11, 1), after={"id": 3, "v": "c"})
    batches.add(KEYED, "d", (12, 0), before={"id": 2, "v": "b"}, partition=1)
    batches.add(KEYED, "c", (12, 1), after={"id": 4, "v": "d"}, partition=1)
    batches.add(KEYED, "c", (12, 1), after={"id": 4, "v": "d"}, partition=1)  # twice
    batches.add(KEYED, "d", (13, 0), before={"id": 3, "v": "c"})
    batches.add(KEYED, "c", (14, 0), after={"id": 3, "v": "c2"})  # the key comes back
    appended_by(batches.apply(0), batches)
    assert _ids(batches) == {1: "a2", 3: "c2", 4: "d"}
    # The fences of the first load hold: a resend of an applied insert is not applied again.
    batches.add(KEYED, "c", (10, 1), after={"id": 2, "v": "b"}, partition=1)  # resent
    batches.add(KEYED, "c", (15, 0), after={"id": 5, "v": "e"})
    batches.apply(1)
    assert _ids(batches) == {1: "a2", 3: "c2", 4: "d", 5: "e"}


@pytest.mark.parametrize("batches", ["tasks"], indirect=True)
def test_the_lane_hands_a_new_schema_version_and_an_update_to_spark(
    batches: Batches, spark: Any
) -> None:
    """A topic the lane took last batch goes through the lane's one read of the next batch;
    when that batch brings a new schema version (a column added), or an update of a row the
    table holds, the lane's files are removed and Spark's path applies the batch, as it would
    have: the column is added, old rows keep null in it, the update lands once."""
    batches.add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"})
    batches.add(KEYED, "c", (10, 1), after={"id": 2, "v": "b"})
    appended_by(batches.apply(0), batches)
    columns = [col("id", "int"), col("v", OPT_STR), col("w", OPT_INT)]
    wider = TableVersion(PREFIX, "public", "keyed", columns, key=["id"])
    batches.add(wider, "c", (11, 0), after={"id": 3, "v": "c", "w": 7})
    applier = batches.apply(1)
    assert applier.stats.last_write["public.keyed"][1] != "tasks"
    rows = {r["id"]: (r["v"], r["w"]) for r in batches.rows("public", "keyed")}
    assert rows == {1: ("a", None), 2: ("b", None), 3: ("c", 7)}
    batches.add(wider, "u", (12, 0), before={"id": 1, "v": "a", "w": None},
                after={"id": 1, "v": "a2", "w": 1})  # fmt: skip
    batches.apply(2)
    rows = {r["id"]: (r["v"], r["w"]) for r in batches.rows("public", "keyed")}
    assert rows == {1: ("a2", 1), 2: ("b", None), 3: ("c", 7)}
    no_unnamed_lane_files(batches)


@pytest.mark.parametrize("batches", ["tasks+driver"], indirect=True)
def test_updates_and_deletes_of_held_rows_are_folded_by_the_tasks_and_merged_by_the_driver(
    batches: Batches, spark: Any
) -> None:
    """A table the lane loaded gets updates, deletes, a key deleted and inserted again, over
    two Kafka partitions: the tasks fold them and the driver MERGEs them (deletion vectors), with
    Spark's MERGE's result. A resent older update then does not regress a row; snapshot
    reads of held rows (no update or delete among them: the tasks' file) are MERGEd too."""
    batches.add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"})
    batches.add(KEYED, "c", (10, 1), after={"id": 2, "v": "b"}, partition=1)
    batches.add(KEYED, "c", (10, 2), after={"id": 3, "v": "c"})
    appended_by(batches.apply(0), batches)
    batches.add(KEYED, "u", (11, 0), before={"id": 1, "v": "a"}, after={"id": 1, "v": "a2"})
    batches.add(KEYED, "d", (11, 1), before={"id": 2, "v": "b"}, partition=1)
    batches.add(KEYED, "c", (11, 2), after={"id": 4, "v": "d"}, partition=1)
    batches.add(KEYED, "u", (12, 0), before={"id": 1, "v": "a2"}, after={"id": 1, "v": "a3"})
    batches.add(KEYED, "c", (12, 1), after={"id": 2, "v": "b2"}, partition=1)  # back again
    applier = batches.apply(1)
    assert applier.stats.last_write["public.keyed"] == ("merge", f"tasks+{DV_WRITER}")
    assert _ids(batches) == {1: "a3", 2: "b2", 3: "c", 4: "d"}
    # At-least-once: the first update again, at a later offset, after the newer one.
    batches.add(KEYED, "u", (11, 0), before={"id": 1, "v": "a"}, after={"id": 1, "v": "a2"})
    batches.add(KEYED, "d", (13, 0), before={"id": 3, "v": "c"})
    batches.apply(2)
    assert _ids(batches) == {1: "a3", 2: "b2", 4: "d"}
    # An incremental snapshot's chunk re-reads held rows: reads only, not new keys.
    batches.add(KEYED, "r", (14, 0), after={"id": 1, "v": "a3"})
    batches.add(KEYED, "r", (14, 1), after={"id": 4, "v": "d"}, partition=1)
    assert batches.apply(3).stats.last_write["public.keyed"] == ("merge", f"tasks+{DV_WRITER}")
    assert sorted(r["id"] for r in batches.rows("public", "keyed")) == [1, 2, 4]
    assert _ids(batches) == {1: "a3", 2: "b2", 4: "d"}
    no_unnamed_lane_files(batches)


@pytest.mark.parametrize("batches", ["tasks+driver"], indirect=True)
def test_the_lanes_merge_takes_a_table_as_large_as_its_batch_allows(
    batches: Batches, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a table without deletion vectors delta-rs rewrites what its MERGE touches, so the
    lane hands it a table up to a bound that grows with the batch (lane_merge_max_bytes),
    past the driver lane's fixed one; a table above the bound is MERGEd by Spark. Here the
    fixed bound is one byte and a record of the batch allows 1 MiB, then nothing."""
    import dataclasses

    from bridge.spark import driver_merge, lane_driver

    batches.config = dataclasses.replace(batches.config, deletion_vectors=False)
    monkeypatch.setattr(driver_merge, "DELETION_VECTORS_MIN_TABLE_BYTES", 1)
    monkeypatch.setattr(lane_driver, "DELETION_VECTORS_MIN_TABLE_BYTES", 1)
    monkeypatch.setattr(lane_driver, "LANE_MERGE_BYTES_PER_RECORD", 1 << 20)
    batches.add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"})
    batches.add(KEYED, "c", (10, 1), after={"id": 2, "v": "b"}, partition=1)
    appended_by(batches.apply(0), batches)
    batches.add(KEYED, "u", (11, 0), before={"id": 1, "v": "a"}, after={"id": 1, "v": "a2"})
    assert batches.apply(1).stats.last_write["public.keyed"] == ("merge", "tasks+driver")
    monkeypatch.setattr(lane_driver, "LANE_MERGE_BYTES_PER_RECORD", 0)
    batches.add(KEYED, "d", (12, 0), before={"id": 2, "v": "b"}, partition=1)
    assert batches.apply(2).stats.last_write["public.keyed"] == ("merge", "spark")
    assert _ids(batches) == {1: "a2"}
    no_unnamed_lane_files(batches)


@pytest.mark.parametrize("batches", ["tasks+driver"], indirect=True)
def test_the_lanes_merge_marks_a_held_tables_changed_rows_with_deletion_vectors(
    batches: Batches, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table with deletion vectors (the default) that holds rows takes the lane's folded
    updates and deletes as deletion vectors and one new file (bridge.spark.driver_dv_merge),
    batch after batch; resends change nothing."""
    for key in range(1, 5):
        batches.add(KEYED, "c", (10, key), after={"id": key, "v": "a"}, partition=key % 2)
    appended_by(batches.apply(0), batches)
    # Each key in its partition, as the producer keys them (the lane refuses a key in two).
    batches.add(KEYED, "u", (11, 0), before={"id": 1, "v": "a"}, after={"id": 1, "v": "b"},
                partition=1)  # fmt: skip
    batches.add(KEYED, "d", (11, 1), before={"id": 2, "v": "a"})
    batches.add(KEYED, "u", (10, 3), after={"id": 3, "v": "stale"}, partition=1)  # a resend
    assert batches.apply(1).stats.last_write["public.keyed"] == ("merge", f"tasks+{DV_WRITER}")
    batches.add(KEYED, "u", (12, 0), before={"id": 1, "v": "b"}, after={"id": 1, "v": "c"},
                partition=1)  # fmt: skip
    batches.add(KEYED, "c", (12, 1), after={"id": 2, "v": "again"})
    assert batches.apply(2).stats.last_write["public.keyed"] == ("merge", f"tasks+{DV_WRITER}")
    assert _ids(batches) == {1: "c", 2: "again", 3: "a", 4: "a"}
    no_unnamed_lane_files(batches)


@pytest.mark.parametrize("batches", ["tasks"], indirect=True)
def test_a_lane_failing_after_its_commit_leaves_one_copy_of_each_row(
    batches: Batches, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lane's job fails in a way nobody foresaw after one table's commit (here: right after
    run_lane returns): Spark's path applies the batch, reads the table's fences from its log,
    finds the batch applied, and writes nothing twice; the lane stays off for the job."""
    from bridge.spark import lane_driver

    batches.add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"})
    appended_by(batches.apply(0), batches)
    real = lane_driver.run_lane_first

    def committed_then_failed(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        raise RuntimeError("an unforeseen failure after the commit")

    monkeypatch.setattr(lane_driver, "run_lane_first", committed_then_failed)
    batches.add(KEYED, "c", (11, 0), after={"id": 2, "v": "b"})
    batches.add(KEYED, "c", (11, 1), after={"id": 3, "v": "c"})
    applier = batches.apply(1)
    assert sorted(r["id"] for r in batches.rows("public", "keyed")) == [1, 2, 3]
    assert applier.stats.last_write["public.keyed"][0] == "replay"
    batches.add(KEYED, "c", (12, 0), after={"id": 4, "v": "d"})
    assert batches.apply(2).stats.last_write["public.keyed"][1] != "tasks"  # the lane is off
    assert sorted(r["id"] for r in batches.rows("public", "keyed")) == [1, 2, 3, 4]
