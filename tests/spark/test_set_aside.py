"""A table whose batch fails is held, in order, and applied again at the next start or by the
running job, on a real local Spark (bridge.spark.set_aside, bridge.spark.replay).

The failure is the engine's, not the data's (a storage outage while the table's batch is
written: the ``failing`` fixture of tests/spark/conftest.py), so the same records apply once
it has passed, as they would after a real outage (the apply soak fills a real disk).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from functools import partial
from typing import Any

import pytest

from bridge.ops.apply_status import HeldTable, read_held_tables
from bridge.spark.replay import replay_set_aside
from bridge.spark.set_aside import SET_ASIDE, held_reason
from tests.spark.batches import (
    FULL_DUPS,
    KEYED,
    SPARK_WRITER_IN_LONG,
    Batches,
    _ids,
    no_unnamed_lane_files,
)
from tests.spark.conftest import OUTAGE

pytestmark = pytest.mark.integration


def _replay(batches: Batches, spark: Any) -> dict[str, int]:
    """The job's next start, as ``start_apply`` runs it before its query."""
    return replay_set_aside(spark, batches.config, batches.schemas)


def test_a_failed_table_is_held_in_order_and_applied_at_the_next_start(
    batches: Batches, failing: set[str], spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Replayed in batches of at most 3 records: the two set-aside batches one after the other.
    batches.config = replace(batches.config, max_offsets_per_trigger=3)
    failing.add(KEYED.topic)
    batches.add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"})
    batches.add(KEYED, "c", (10, 1), after={"id": 2, "v": "b"})
    batches.add(KEYED, "c", (10, 2), after={"id": 4, "v": "never touched again"})
    batches.add(FULL_DUPS, "c", (10, 3), after={"a": 1, "b": "x"})
    applier = batches.apply(0)
    assert applier.held_tables.current(spark).keys() == {KEYED.topic}

    # The outage is over, but the table is held: applying these now would delete key 2 before
    # its insert is applied, and move the fences past the set-aside records for good.
    failing.clear()
    batches.add(KEYED, "d", (20, 0), before={"id": 2, "v": "b"})
    batches.add(KEYED, "u", (20, 1), before={"id": 1, "v": "a"}, after={"id": 1, "v": "a2"})
    batches.add(KEYED, "c", (20, 2), after={"id": 3, "v": "c"})
    batches.add(FULL_DUPS, "c", (20, 3), after={"a": 2, "b": "y"})
    batches.apply(1)
    # The other tables go on.
    assert batches.multiset("public", "full_dups") == Counter({(1, "x"): 1, (2, "y"): 1})
    failed = f"{SET_ASIDE}: RuntimeError: {OUTAGE}"
    assert batches.dead() == sorted(
        [(KEYED.topic, failed)] * 3 + [(KEYED.topic, held_reason(0))] * 3
    )
    # What `pgbridge status --apply-dead-letter` reads (delta-rs, not Spark).
    held = {KEYED.topic: HeldTable(since_batch=0, records=6)}
    assert read_held_tables(batches.config.dead_letter_location) == held
    # What the job reads at each start and retry (delta-rs), as Spark reads it.
    _held_as_spark_reads_it(batches, spark, monkeypatch, {KEYED.topic: 0}, [(0, 3), (1, 3)])

    assert _replay(batches, spark) == {}
    assert _ids(batches) == {1: "a2", 3: "c", 4: "never touched again"}
    assert batches.dead() == []  # released: nothing left to apply
    assert read_held_tables(batches.config.dead_letter_location) == {}

    # The next start applies the table's batches again.
    batches.add(KEYED, "u", (30, 0), before={"id": 3, "v": "c"}, after={"id": 3, "v": "c2"})
    restarted = batches.apply(2, restarted=True)
    assert restarted.held_tables.current(spark) == {}
    assert _ids(batches) == {1: "a2", 3: "c2", 4: "never touched again"}
    assert batches.dead() == []


def _held_as_spark_reads_it(
    batches: Batches,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    topics: dict[str, int],
    keyed_batches: list[tuple[int, int]],
) -> None:
    """The held tables and the keyed table's set-aside batches, read by delta-rs (the job's
    way where it can) and by Spark (where delta-rs cannot read the table) alike."""
    from bridge.spark import set_aside

    location = batches.config.dead_letter_location
    for delta_rs_reads in (True, False):
        with monkeypatch.context() as patched:
            if not delta_rs_reads:
                patched.setattr(set_aside, "set_aside_rows", lambda location: None)
            assert set_aside.held_topics(spark, location) == topics
            assert set_aside.held_batches(spark, location, KEYED.topic) == keyed_batches


def test_a_replay_that_fails_keeps_the_table_held_and_one_half_done_applies_once(
    batches: Batches, failing: set[str], spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A table without key columns: a record applied twice would be a duplicate row.
    failing.add(FULL_DUPS.topic)
    batches.add(FULL_DUPS, "c", (10, 0), after={"a": 1, "b": "x"})
    batches.add(FULL_DUPS, "c", (10, 1), after={"a": 1, "b": "x"})
    batches.apply(0)
    set_aside = batches.dead()
    assert [topic for topic, _ in set_aside] == [FULL_DUPS.topic] * 2

    # Still failing at the next start: held, its records where they were (not twice).
    assert _replay(batches, spark) == {FULL_DUPS.topic: 0}
    assert batches.dead() == set_aside

    # Applied, then the job dies before the records leave the dead-letter table.
    from delta.tables import DeltaTable

    failing.clear()
    delete = DeltaTable.delete

    def dies(self: Any, condition: Any = None) -> None:
        raise RuntimeError("killed before the delete")

    monkeypatch.setattr(DeltaTable, "delete", dies)
    assert _replay(batches, spark) == {FULL_DUPS.topic: 0}
    assert batches.multiset("public", "full_dups") == Counter({(1, "x"): 2})
    monkeypatch.setattr(DeltaTable, "delete", delete)
    # The start after: the table's fences know the records applied; they are only deleted.
    assert _replay(batches, spark) == {}
    assert batches.multiset("public", "full_dups") == Counter({(1, "x"): 2})
    assert batches.dead() == []


@SPARK_WRITER_IN_LONG
def test_the_running_job_applies_a_held_table_again_once_the_failure_has_passed(
    batches: Batches, failing: set[str], spark: Any
) -> None:
    """The job tries its held tables again at a batch's start (every ``held_retry_interval``;
    here at once): the table catches up in that batch, without a restart, and its batch's own
    records follow. The job wrote the table before it failed, so what it knew of it (fences,
    its delta-rs table, its columns) is stale after the replay's commits: it is read again."""
    batches.config = replace(batches.config, held_retry_interval="0 s")
    batches.add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"})
    batches.add(KEYED, "c", (10, 1), after={"id": 2, "v": "b"})
    applier = batches.apply(0)
    applier.held_tables.replay = partial(
        replay_set_aside, config=batches.config, schemas=batches.schemas
    )
    failing.add(KEYED.topic)
    batches.add(KEYED, "d", (20, 0), before={"id": 1, "v": "a"})
    batches.add(KEYED, "c", (20, 1), after={"id": 3, "v": "c"})
    batches.apply(1)
    assert _ids(batches) == {1: "a", 2: "b"}  # held: neither change, not one without the other
    failing.add(FULL_DUPS.topic)  # and a table held in the same batch as the replay...
    batches.add(KEYED, "u", (30, 0), before={"id": 3, "v": "c"}, after={"id": 3, "v": "c2"})
    batches.add(FULL_DUPS, "c", (30, 1), after={"a": 1, "b": "x"})
    failing.discard(KEYED.topic)
    batches.apply(2)
    assert _ids(batches) == {2: "b", 3: "c2"}
    # ...is held until the next try, which releases it too.
    failing.clear()
    batches.add(KEYED, "c", (40, 0), after={"id": 4, "v": "d"})
    batches.add(KEYED, "c", (10, 1), after={"id": 2, "v": "b"})  # a resend: the fences hold
    batches.apply(3)
    assert _ids(batches) == {2: "b", 3: "c2", 4: "d"}
    assert batches.multiset("public", "full_dups") == Counter({(1, "x"): 1})
    assert applier.held_tables.current(spark) == {}
    assert batches.dead() == []


@pytest.mark.parametrize("batches", ["tasks"], indirect=True)
def test_a_held_tables_records_are_applied_again_by_the_task_lane_in_order(
    batches: Batches, failing: set[str], spark: Any
) -> None:
    """A held table catches up at the job's own speed: its set-aside records go through the
    task lane as a batch of the stream does (its tasks take them from the dead-letter rows,
    not from Kafka), chunk after chunk in order: the first load appended, then the updates
    and deletes merged. (Through Spark's MERGE, 200,000 records took 6.6-7.7 s of a replay,
    2.5-2.6 s through the lane: bench/replay_bench.py.)"""
    lane = batches.config
    batches.config = replace(lane, task_lane=False)  # the failing writes are Spark's path's
    failing.add(KEYED.topic)
    for key in range(4):
        batches.add(KEYED, "c", (10, key), after={"id": key, "v": "a"})
    batches.apply(0)
    failing.clear()
    batches.add(KEYED, "u", (20, 0), before={"id": 1, "v": "a"}, after={"id": 1, "v": "b"})
    batches.add(KEYED, "d", (20, 1), before={"id": 2, "v": "a"})
    batches.add(KEYED, "c", (20, 2), after={"id": 5, "v": "b"})
    batches.apply(1)  # held back behind batch 0
    assert len(batches.dead()) == 7
    # Replayed in chunks of at most 4 records: batch 0's, then batch 1's.
    batches.config = replace(lane, max_offsets_per_trigger=4)
    assert _replay(batches, spark) == {}
    assert _ids(batches) == {0: "a", 1: "b", 3: "a", 5: "b"}
    assert batches.dead() == []
    no_unnamed_lane_files(batches)  # the lane wrote them, and left nothing behind
