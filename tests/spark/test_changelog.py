"""The changelog mode (bridge.spark.changelog) on a real local Spark: one changelog commit per
ingest batch whatever the number of tables, current-state views that equal what the MERGE
mode would show at every step (resends, truncates across partitions, snapshot rows, unchanged
TOAST), compaction into the base tables, and applied records removed from the changelog."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from bridge.spark.changelog import (
    INGEST_BATCH,
    ChangelogWriter,
    Compactor,
    changelog_path,
    current_state,
)
from bridge.spark.replay import replay_set_aside
from tests.spark.batches import KEYED, OPT_STR, PREFIX, Batches, col
from tests.spark.envelopes import TableVersion

pytestmark = pytest.mark.integration

WIDE = TableVersion(
    PREFIX,
    "public",
    "wide",
    [col("id", "int"), col("small", OPT_STR), col("big", OPT_STR)],
    key=["id"],
)


class Changelog:
    """Ingest batches into the changelog, read views, and compact (as the two queries do)."""

    def __init__(self, batches: Batches) -> None:
        self.batches = batches
        self.spark = batches.spark
        self.config = batches.config
        self.writer = ChangelogWriter(self.config)
        self.compactor = Compactor(self.config, batches.schemas)
        self.compacted = -1  # ingest batches up to here were compacted
        self.compactions = 0

    def ingest(self, batch_id: int) -> None:
        self.writer(self.batches.frame(), batch_id)

    def compact(self) -> None:
        """Compact every ingest batch not compacted yet (one compaction batch)."""
        rows = self.spark.read.format("delta").load(changelog_path(self.config))
        newest = rows.agg(F.max(INGEST_BATCH)).first()[0]
        pending = rows.where(F.col(INGEST_BATCH) > self.compacted)
        self.compactor(pending, self.compactions)
        self.compactions += 1
        self.compacted = int(newest)

    def view(self, table: str = "public.keyed") -> dict[int, Any]:
        df = current_state(self.spark, self.config, table, self.batches.schemas)
        assert [c for c in df.columns if c.startswith("_pgbridge_")] == [
            "_pgbridge_commit_lsn",
            "_pgbridge_seq",
            "_pgbridge_commit_ts",
        ]
        data = [c for c in df.columns if not c.startswith("_pgbridge_") and c != "id"]
        return {
            r["id"]: (r[data[0]] if len(data) == 1 else tuple(r[c] for c in data))
            for r in df.collect()
        }

    def base(self, table: str = "keyed") -> dict[int, Any]:
        return {r["id"]: r["v"] for r in self.batches.rows("public", table)}

    def changelog_rows(self) -> int:
        return int(self.spark.read.format("delta").load(changelog_path(self.config)).count())


@pytest.fixture
def changelog(spark: Any, tmp_path: Path) -> Changelog:
    return Changelog(Batches(spark, tmp_path))


def test_view_is_current_before_compaction_and_the_base_catches_up(changelog: Changelog) -> None:
    add = changelog.batches.add
    add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"})
    add(KEYED, "c", (10, 1), after={"id": 2, "v": "b"})
    add(KEYED, "u", (11, 0), after={"id": 1, "v": "a2"})
    changelog.ingest(0)
    assert changelog.view() == {1: "a2", 2: "b"}  # no base table yet
    changelog.compact()
    assert changelog.base() == {1: "a2", 2: "b"}
    add(KEYED, "d", (12, 0), before={"id": 1})
    add(KEYED, "c", (12, 1), after={"id": 3, "v": "c"})
    add(KEYED, "u", (12, 2), after={"id": 2, "v": "b2"})
    changelog.ingest(1)
    assert changelog.base() == {1: "a2", 2: "b"}  # not compacted yet
    assert changelog.view() == {2: "b2", 3: "c"}
    changelog.compact()
    assert changelog.base() == {2: "b2", 3: "c"}
    assert changelog.view() == {2: "b2", 3: "c"}


def test_view_does_not_apply_compacted_snapshot_rows_again(changelog: Changelog) -> None:
    """A snapshot row and its key's later delete, both compacted, still in the changelog: the
    view must not apply the snapshot row again on top of the base (snapshot rows are exempt
    from position fences, so only the offsets the base covers can tell)."""
    add = changelog.batches.add
    add(KEYED, "r", (5, 0), after={"id": 7, "v": "copied"})
    add(KEYED, "r", (5, 1), after={"id": 8, "v": "kept"})
    add(KEYED, "d", (11, 0), before={"id": 7})
    changelog.ingest(0)
    changelog.compact()
    assert changelog.base() == {8: "kept"}
    assert changelog.changelog_rows() == 3
    assert changelog.view() == {8: "kept"}
    add(KEYED, "u", (12, 0), after={"id": 8, "v": "changed"})
    changelog.ingest(1)
    assert changelog.view() == {8: "changed"}


def test_view_applies_nothing_twice_and_resurrects_nothing(changelog: Changelog) -> None:
    """A resent insert whose delete is not resent yet stays out; a change overtaken by a
    truncate from another partition stays out."""
    add = changelog.batches.add
    add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"})
    add(KEYED, "d", (11, 1), before={"id": 1})
    add(KEYED, "c", (11, 2), after={"id": 2, "v": "b"}, partition=1)
    changelog.ingest(0)
    changelog.compact()
    assert changelog.base() == {2: "b"}
    add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"})  # resent; its delete comes later
    add(KEYED, "t", (20, 0))  # partition 0
    changelog.ingest(1)
    assert changelog.view() == {}
    add(KEYED, "u", (15, 0), after={"id": 2, "v": "late"}, partition=1)  # before the truncate
    add(KEYED, "c", (21, 0), after={"id": 4, "v": "new"}, partition=1)
    changelog.ingest(2)
    assert changelog.view() == {4: "new"}
    changelog.compact()
    assert changelog.base() == {4: "new"}
    assert changelog.view() == {4: "new"}


def test_view_keeps_unchanged_toast_values_from_the_base(changelog: Changelog) -> None:
    add = changelog.batches.add
    add(WIDE, "c", (10, 0), after={"id": 1, "small": "s", "big": "long value"})
    changelog.ingest(0)
    changelog.compact()
    add(WIDE, "u", (11, 0), after={"id": 1, "small": "s2", "big": None}, unchanged=["big"])
    changelog.ingest(1)
    assert changelog.view("public.wide") == {1: ("s2", "long value")}


def test_one_changelog_commit_per_ingest_batch_whatever_the_tables(
    changelog: Changelog, spark: Any
) -> None:
    """30 tables in one batch: one Delta commit; the batch replayed (a crash before the
    checkpoint): skipped, nothing twice."""
    from delta.tables import DeltaTable

    for i in range(30):
        version = TableVersion(PREFIX, "public", f"t{i}", [col("id", "int")], key=["id"])
        changelog.batches.add(version, "c", (10, i), after={"id": i})
    frame = changelog.batches.frame()
    changelog.writer(frame, 0)
    changelog.writer(frame, 0)
    history = DeltaTable.forPath(spark, changelog_path(changelog.config)).history()
    assert history.where("operation = 'WRITE'").count() == 1
    assert changelog.changelog_rows() == 30
    assert changelog.view("public.t29") == {29: ()}


def test_compaction_removes_applied_records_one_round_late(changelog: Changelog) -> None:
    add = changelog.batches.add
    add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"})
    add(WIDE, "c", (10, 1), after={"id": 9, "small": "s", "big": "b"})
    changelog.ingest(0)
    add(KEYED, "c", (11, 0), after={"id": 2, "v": "b"})
    changelog.ingest(1)
    changelog.compact()  # covers ingest batches 0 and 1; nothing removed yet
    assert changelog.changelog_rows() == 3
    add(KEYED, "c", (12, 0), after={"id": 3, "v": "c"})
    changelog.ingest(2)
    changelog.compact()  # removes what the previous round applied (ingest batches < 1)
    assert changelog.changelog_rows() == 2
    assert changelog.view() == {1: "a", 2: "b", 3: "c"}
    assert changelog.base() == {1: "a", 2: "b", 3: "c"}
    # Nothing of the table left in the changelog: its view is its table (found by topic).
    assert changelog.view("public.wide") == {9: ("s", "b")}


def test_a_held_tables_view_is_its_base_until_its_set_aside_records_are_applied(
    changelog: Changelog, failing: set[str], spark: Any
) -> None:
    """While a table is held (bridge.spark.set_aside), its changes since the batch that failed
    wait in the dead-letter table: folding only the changelog's later ones onto the base would
    show rows the source never had. Its view is its base until the compactor applies them."""
    schemas = changelog.batches.schemas
    # The job's compactor, trying held tables at every batch (start_apply gives it the replay).
    compactor = Compactor(replace(changelog.config, held_retry_interval="0 s"), schemas)
    compactor.held_tables.replay = partial(
        replay_set_aside, config=compactor.config, schemas=schemas
    )
    changelog.compactor = compactor
    add = changelog.batches.add
    add(KEYED, "c", (10, 0), after={"id": 1, "v": "a"})
    changelog.ingest(0)
    changelog.compact()
    failing.add(KEYED.topic)
    add(KEYED, "c", (11, 0), after={"id": 2, "v": "b"})
    changelog.ingest(1)
    changelog.compact()  # set aside: held
    add(KEYED, "d", (12, 0), before={"id": 1})
    add(KEYED, "u", (12, 1), before={"id": 2, "v": "b"}, after={"id": 2, "v": "b2"})
    changelog.ingest(2)
    assert changelog.view() == {1: "a"}  # not {2: "b2"}: an update of a row it never showed
    failing.clear()
    changelog.compact()  # applies the held table's records first, then ingest batch 2
    assert changelog.base() == {2: "b2"}
    assert changelog.view() == {2: "b2"}
